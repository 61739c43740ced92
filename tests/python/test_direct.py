"""Direct tensors (posenc._direct, the client's default): requests serialized with the arrays'
bytes joined in, responses read as views of the received bytes. Checked against protobuf's own
serialization and parse for every message with Tensor fields (no server), against the plain
protobuf path (``Client(direct_tensors=False)``) for every op and dtype (a real server), and for
malformed responses (a gRPC server that answers any bytes)."""

import concurrent.futures
import dataclasses
import os
import unittest
import warnings

import grpc
import numpy as np
from google.protobuf.message import DecodeError

import posenc
from posenc import _direct, _transport
from posenc._enums import DType
from posenc._protos import is_repeated
from posenc._protos import posenc_pb2 as pb
from posenc._tensor import WIRE_NUMPY, describe_tensor, fill_tensor, to_numpy
from server import rng, serve_module
from test_tensors import DLPackOnly

try:
    import torch
except ImportError:  # pragma: no cover - deploy/install-deps.sh installs python3-torch
    torch = None

SERVER = CLIENT = None  # set by setUpModule
setUpModule, tearDownModule = serve_module(__name__, "--backend=cpu", "--threads=2")

SERVICE = pb.DESCRIPTOR.services_by_name["PositionEncoding"]


def message_types(side):
    """Every request (side "input_type") or response ("output_type") type with Tensor fields."""
    types = {getattr(m, side) for m in SERVICE.methods}
    return [getattr(pb, t.name) for t in sorted(types, key=lambda t: t.name)
            if _direct.tensor_fields(t)]


def random_tensor(seed, dtype=None):
    """A random wire dtype and a C-contiguous little-endian array of it (0 to 3 axes)."""
    r = rng(seed)
    dtype = dtype or DType(int(r.choice([int(d) for d in WIRE_NUMPY])))
    shape = tuple(int(n) for n in r.integers(0, 5, size=int(r.integers(0, 4))))
    raw = r.integers(0, 256, size=int(np.prod(shape)) * WIRE_NUMPY[dtype].itemsize,
                     dtype=np.uint8)
    return dtype, raw.view(WIRE_NUMPY[dtype]).reshape(shape)


def with_other_fields(message):
    """Sets a few of the message's non-tensor fields (scalars, nested messages) to non-defaults."""
    for fd in message.DESCRIPTOR.fields:
        if fd.message_type is None and not is_repeated(fd) and (
                fd.containing_oneof is None):
            if fd.enum_type is not None:
                setattr(message, fd.name, fd.enum_type.values[-1].number)
            elif fd.cpp_type == fd.CPPTYPE_STRING:
                setattr(message, fd.name, "x" if fd.type == fd.TYPE_STRING else b"x")
            elif fd.cpp_type == fd.CPPTYPE_BOOL:
                setattr(message, fd.name, True)
            else:
                setattr(message, fd.name, 3)
    fields = message.DESCRIPTOR.fields_by_name
    if "config" in fields:
        message.config.head_dim = 64
        message.config.mrope_section.extend([8, 12, 12])
    if "positions" in fields:
        message.positions.range.start = 7
    if "derived" in fields:
        message.derived.attention_factor = 1.5
    return message


def plain_and_wire(cls, seed):
    """The same message twice: every Tensor field's bytes in the message (plain), and held as
    arrays (a WireMessage); one tensor in shared memory instead, where there are several."""
    plain, wire = with_other_fields(cls()), _direct.WireMessage(with_other_fields(cls()))
    names = sorted(_direct.tensor_fields(cls.DESCRIPTOR))
    for i, name in enumerate(names):
        dtype, a = random_tensor(seed + i)
        if i == 1:  # a reference, not bytes
            for m in (plain, wire.message):
                describe_tensor(getattr(m, name), dtype, a)
                getattr(m, name).shared_memory.region = "r"
                getattr(m, name).shared_memory.byte_size = a.nbytes
            continue
        fill_tensor(getattr(plain, name), dtype, a)
        wire.put(name, describe_tensor(getattr(wire.message, name), dtype, a))
    return plain, wire


def for_every_message(test, side, example, check):
    """check(cls, plain, wire) for every message type of ``side`` (``example`` among them) at a
    few seeds (plain_and_wire), each in a subTest."""
    types = message_types(side)
    test.assertIn(example, types)
    for cls in types:
        for seed in range(0, 40, 10):
            with test.subTest(cls=cls.__name__, seed=seed):
                check(cls, *plain_and_wire(cls, seed))


class EncodeTest(unittest.TestCase):
    def test_every_request_parses_as_its_plain_serialization(self):
        def check(cls, plain, wire):
            encoded = _direct.encode(wire)
            self.assertEqual(cls.FromString(encoded), plain)
            self.assertEqual(len(encoded), plain.ByteSize())
            self.assertEqual(wire.ByteSize(), plain.ByteSize())

        for_every_message(self, "input_type", pb.ApplyRopeRequest, check)

    def test_a_message_without_arrays_is_its_serialization(self):
        plain, _ = plain_and_wire(pb.ApplyRopeRequest, 1)
        self.assertEqual(_direct.encode(_direct.WireMessage(plain)), plain.SerializeToString())
        self.assertEqual(_direct.encode(plain), plain.SerializeToString())

    def test_put_checks_the_field_and_the_byte_order(self):
        wire = _direct.WireMessage(pb.ApplyRopeRequest())
        with self.assertRaises(KeyError):
            wire.put("config", np.zeros(2, np.float32))
        with self.assertRaises(ValueError):
            wire.put("q", np.zeros((4, 4), ">f4"))

    def test_strided_views_are_sent_in_c_order(self):
        """A split piece's heads (blocks of >= 4 KiB joined one by one), small blocks and
        reversed axes (copied first): the bytes of the C-order array."""
        base = rng(3).standard_normal((2, 40, 8, 256)).astype(np.float32)
        for view in (base[:, :, 2:6, :], base[:, 3:30], base[..., ::2], base[:, ::-1],
                     base.transpose(0, 2, 1, 3), base[:, :0]):
            request = pb.ApplyRopeRequest()
            wire = _direct.WireMessage(pb.ApplyRopeRequest())
            fill_tensor(request.q, DType.FLOAT32, view)
            wire.put("q", describe_tensor(wire.message.q, DType.FLOAT32, view, contiguous=False))
            encoded = _direct.encode(wire)
            self.assertEqual(pb.ApplyRopeRequest.FromString(encoded), request)
            self.assertEqual((len(encoded), wire.ByteSize()), (request.ByteSize(),) * 2)
            self.assertEqual(bytes(wire.q.data), request.q.data)

    def test_big_sizes_are_framed_right(self):
        """Lengths of several varint bytes (1, 2, 3, 4 bytes) around their boundaries."""
        for n in (0, 1, 127, 128, 16383, 16384, (1 << 21) - 1, 1 << 21):
            request = pb.ApplyRopeRequest()
            wire = _direct.WireMessage(pb.ApplyRopeRequest())
            a = np.arange(n - n % 2, dtype=np.uint8).view("<u2")
            fill_tensor(request.q, DType.BFLOAT16, a)
            wire.put("q", describe_tensor(wire.message.q, DType.BFLOAT16, a))
            self.assertEqual(pb.ApplyRopeRequest.FromString(_direct.encode(wire)), request)


class DecodeTest(unittest.TestCase):
    def test_every_response_parses_as_protobuf_does(self):
        def check(cls, plain, _):
            got = _direct.decode(plain.SerializeToString(), cls)
            self.assertIsInstance(got, _direct.WireMessage)
            self.assert_decoded(got, plain)

        for_every_message(self, "output_type", pb.RopeCacheResponse, check)

    def assert_decoded(self, got, plain):
        stripped = type(plain)()
        stripped.CopyFrom(plain)
        for name in _direct.tensor_fields(plain.DESCRIPTOR):
            self.assertEqual(got.HasField(name), plain.HasField(name), name)
            self.assertEqual(bytes(getattr(got, name).data), getattr(plain, name).data, name)
            if name in got.arrays:
                getattr(stripped, name).ClearField("data")
                self.assertFalse(got.arrays[name].flags.writeable)
                if getattr(plain, name).data:
                    a, b = to_numpy(getattr(got, name), name), to_numpy(getattr(plain, name), name)
                    self.assertEqual(a.tobytes(), b.tobytes())
                    self.assertTrue(a.flags.writeable)
        self.assertEqual(got.message, stripped)

    def test_views_share_the_received_bytes(self):
        plain, _ = plain_and_wire(pb.ApplyRopeResponse, 3)
        fill_tensor(plain.q, DType.FLOAT32, np.arange(1000, dtype=np.float32))
        buf = plain.SerializeToString()
        got = _direct.decode(buf, pb.ApplyRopeResponse)
        self.assertIs(got.arrays["q"].base, buf)

    def test_fields_protobuf_merges_fall_back_to_its_parse(self):
        first = pb.ApplyRopeResponse()
        fill_tensor(first.q, DType.FLOAT32, np.ones((2, 3), np.float32))
        second = pb.ApplyRopeResponse()
        second.q.shape.append(4)
        second.q.data = b"\x01\x02\x03\x04"
        tensor = pb.Tensor(data=b"abcd")
        twice_data = b"\x0a" + bytes([2 * tensor.ByteSize()]) + 2 * tensor.SerializeToString()
        for buf in (first.SerializeToString() + second.SerializeToString(), twice_data):
            expected = pb.ApplyRopeResponse.FromString(buf)
            got = _direct.decode(buf, pb.ApplyRopeResponse)
            self.assertEqual(got.arrays, {})
            self.assertEqual(got.message, expected)

    def test_malformed_bytes_give_malformed_never_an_exception(self):
        plain, _ = plain_and_wire(pb.ApplyRopeResponse, 5)
        fill_tensor(plain.k, DType.FLOAT64, rng(9).standard_normal((3, 5)))
        buf = plain.SerializeToString()
        r = rng(11)
        cases = [buf[:n] for n in range(len(buf))] + [
            r.integers(0, 256, size=int(r.integers(1, 64)), dtype=np.uint8).tobytes()
            for _ in range(300)] + [b"\xff" * 11, b"\x0b", b"\x0a\x05\x1a\x10ab", b"\x00\x01"]
        for case in cases:
            with warnings.catch_warnings():  # protobuf warns of a stray end-group tag
                warnings.simplefilter("ignore", RuntimeWarning)
                got = _direct.decode(case, pb.ApplyRopeResponse)
                try:
                    expected = pb.ApplyRopeResponse.FromString(case)
                except DecodeError:
                    expected = None
            if expected is None:
                self.assertIsInstance(got, _direct.Malformed, case)
                self.assertIn("posenc.v1.ApplyRopeResponse", got.reason)
            else:
                self.assertIsInstance(got, _direct.WireMessage, case)
                self.assert_decoded(got, expected)

    def test_a_truncated_tensor_names_what_is_missing(self):
        response = pb.ApplyRopeResponse()
        fill_tensor(response.q, DType.FLOAT32, np.ones(64, np.float32))
        got = _direct.decode(response.SerializeToString()[:-10], pb.ApplyRopeResponse)
        self.assertIsInstance(got, _direct.Malformed)
        self.assertRegex(got.reason, r"field 1 needs \d+ bytes at byte \d+, \d+ are left")


class RawServer:
    """A gRPC server answering every posenc method with the same bytes (None: the request's)."""

    def __init__(self, answer):
        def handler(request, context):
            return request if answer is None else answer

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                return grpc.unary_unary_rpc_method_handler(handler)

        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((Handler(),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop(0)


# A RawServer answers no health check.
NO_HEALTH = {"max_attempts": 1, "health_check": False, "load_balancing_policy": ""}


class MalformedResponseTest(unittest.TestCase):
    def test_a_response_that_does_not_parse_is_internal(self):
        response = pb.ApplyRopeResponse()
        fill_tensor(response.q, DType.FLOAT32, np.ones((1, 4, 2, 8), np.float32))
        truncated = response.SerializeToString()[:-5]
        for direct, native in ((True, True), (True, False), (False, False)):
            with RawServer(truncated) as raw, posenc.Client(
                    f"127.0.0.1:{raw.port}", direct_tensors=direct, native_transport=native,
                    **NO_HEALTH) as client:
                with self.assertRaises(posenc.InternalError) as caught:
                    client.apply_rope(np.ones((1, 4, 2, 8), np.float32))
                if direct:
                    self.assertIn("ApplyRope: the server's response does not parse",
                                  str(caught.exception))

    def test_a_tensor_inconsistent_with_its_shape_is_internal(self):
        response = pb.ApplyRopeResponse()
        fill_tensor(response.q, DType.FLOAT32, np.ones((1, 4, 2, 8), np.float32))
        response.q.shape[1] = 5
        for native in (True, False):
            with RawServer(response.SerializeToString()) as raw, posenc.Client(
                    f"127.0.0.1:{raw.port}", native_transport=native, **NO_HEALTH) as client:
                with self.assertRaisesRegex(posenc.InternalError, "inconsistent q"):
                    client.apply_rope(np.ones((1, 4, 2, 8), np.float32))


def assert_same(test, got, expected, where="result"):
    """Results equal byte for byte (arrays: dtype, shape, bytes; torch tensors likewise)."""
    if torch is not None and isinstance(expected, torch.Tensor):
        test.assertIsInstance(got, torch.Tensor, where)
        test.assertEqual(got.dtype, expected.dtype, where)
        got, expected = got.view(torch.uint8).numpy(), expected.view(torch.uint8).numpy()
    if isinstance(expected, np.ndarray):
        test.assertIsInstance(got, np.ndarray, where)
        test.assertEqual((got.dtype, got.shape), (expected.dtype, expected.shape), where)
        test.assertEqual(got.tobytes(), expected.tobytes(), where)
        test.assertTrue(got.flags.writeable, where)
    elif isinstance(expected, (tuple, list)):
        test.assertEqual(type(got), type(expected), where)
        test.assertEqual(len(got), len(expected), where)
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_same(test, a, b, f"{where}[{i}]")
    elif dataclasses.is_dataclass(expected):
        test.assertEqual(type(got), type(expected), where)
        for f in dataclasses.fields(expected):
            assert_same(test, getattr(got, f.name), getattr(expected, f.name),
                        f"{where}.{f.name}")
    else:
        test.assertEqual(got, expected, where)


class EveryOpTest(unittest.TestCase):
    """Each client method through the direct path (on the native transport where it is built,
    and on gRPC Python's) and the plain protobuf path: the same."""

    # direct_tensors=0: every tensor and response through posenc._direct, however small (the
    # default takes them from DIRECT_MIN_BYTES on; these tensors are smaller).
    @classmethod
    def setUpClass(cls):
        cls.plain = posenc.Client(SERVER.address, direct_tensors=False)
        cls.direct = posenc.Client(SERVER.address, direct_tensors=0)
        cls.grpcio = posenc.Client(SERVER.address, direct_tensors=0, native_transport=False)
        cls.small = {direct: posenc.Client(SERVER.address, direct_tensors=0 if direct else False,
                                           max_message_bytes=96 << 10)
                     for direct in (True, False)}
        cls.small_grpcio = posenc.Client(SERVER.address, direct_tensors=0,
                                         native_transport=False, max_message_bytes=96 << 10)

    @classmethod
    def tearDownClass(cls):
        for client in (cls.plain, cls.direct, cls.grpcio, cls.small_grpcio,
                       *cls.small.values()):
            client.close()

    def same(self, call, *clients):
        if clients:
            assert_same(self, call(clients[0]), call(clients[1]))
            return
        expected = call(self.plain)
        assert_same(self, call(self.direct), expected, "native transport")
        assert_same(self, call(self.grpcio), expected, "gRPC Python")

    def test_default_client_by_size(self):
        """The default client: small tensors through protobuf's messages, large ones direct
        (each call the same as the plain path's)."""
        for shape in ((1, 4, 2, 16), (1, 64, 8, 64)):  # 512 bytes; 128 KiB (>= DIRECT_MIN_BYTES)
            q = rng(21).standard_normal(shape).astype(np.float32)
            self.same(lambda c: c.apply_rope(q, q[:, :, :1]), CLIENT, self.plain)
            request = pb.ApplyRopeRequest()
            tensors = posenc.client._Tensors(request, None,
                                             CLIENT._transport.direct_min_bytes)
            tensors.float(request.q, q, "q")
            self.assertEqual(isinstance(tensors.request(), _direct.WireMessage),
                             q.nbytes >= _direct.DIRECT_MIN_BYTES, shape)

    def test_direct_tensors_is_checked(self):
        for bad in (-1, 1.5, "yes"):
            with self.assertRaises(posenc.InvalidArgumentError):
                posenc.Client(SERVER.address, direct_tensors=bad)

    def test_rope(self):
        q = rng(1).standard_normal((2, 9, 4, 32)).astype(np.float32)
        k = rng(2).standard_normal((2, 9, 2, 32)).astype(np.float32)
        config = posenc.RopeConfig(head_dim=32, base=5e5)
        for dtype in (np.float32, np.float16, np.float64, np.uint16):
            self.same(lambda c: c.apply_rope(q.astype(dtype), k.astype(dtype), None, config))
        self.same(lambda c: c.apply_rope(q, None, posenc.Positions.offsets([3, 4])))
        self.same(lambda c: c.apply_rope(q[0], k[0], posenc.Positions.cu_seqlens([0, 4, 9]),
                                         layout="thd"))
        for layout in ("compact", "neox", "fused_cos_sin", "complex"):
            self.same(lambda c: c.rope_cache(range(5, 40), config, layout=layout))
        self.same(lambda c: c.rope_cache(range(0, 16), config, dtype="bf16"))
        self.same(lambda c: c.rerotate_keys(k, 7, None, config))
        self.same(lambda c: c.rerotate_keys(k.astype(np.float16), [1, 2]))
        self.same(lambda c: c.describe_rope(config))

    def test_split_requests(self):
        q = rng(3).standard_normal((2, 64, 8, 32)).astype(np.float32)
        k = rng(4).standard_normal((2, 64, 2, 32)).astype(np.float32)
        mask = np.ones((2, 64), np.int64)
        mask[1, :5] = 0
        small = (self.small[True], self.small[False])
        self.same(lambda c: c.apply_rope(q, k), *small)
        self.same(lambda c: c.apply_rope(q, k), self.small_grpcio, self.small[False])
        self.same(lambda c: c.apply_rope(q, k, posenc.Positions.attention_mask(mask)), *small)
        assert_same(self, self.small[True].apply_rope(q, k), CLIENT.apply_rope(q, k))
        x = rng(5).standard_normal((3, 200, 64)).astype(np.float32)
        self.same(lambda c: c.add_position_encoding(x), *small)
        self.same(lambda c: c.alibi_bias(8, 64, 80, form="full"), *small)
        self.same(lambda c: c.relative_bias(64, 80, rng(6).standard_normal((32, 8)),
                                            form="full"), *small)
        self.same(lambda c: c.relative_embedding(64, 64, 4, rng(7).standard_normal((9, 32))),
                  *small)

    def test_absolute_and_biases(self):
        x = rng(8).standard_normal((2, 5, 16)).astype(np.float16)
        self.same(lambda c: c.sinusoidal(range(3, 20), 33, dtype="float64"))
        self.same(lambda c: c.sinusoidal(np.arange(12).reshape(3, 4), 16))
        self.same(lambda c: c.add_position_encoding(x))
        self.same(lambda c: c.add_position_encoding(
            x, learned=rng(9).standard_normal((9, 16)), combine="concat"))
        self.same(lambda c: c.alibi_slopes(12))
        self.same(lambda c: c.alibi_bias(4, 6, 9))
        self.same(lambda c: c.alibi_bias(4, 6, 9, mode="bloom", form="compact", expand=False))
        self.same(lambda c: c.relative_bias(5, 7, rng(10).standard_normal((32, 4))))
        self.same(lambda c: c.relative_bias(5, 7, form="buckets"))
        self.same(lambda c: c.relative_embedding(4, 6, 2, rng(11).standard_normal((5, 8))))

    def test_positions_analysis_and_server(self):
        ids = np.array([[1, 5, 7, 7, 7, 7, 9]])
        token_ids = {"image_token_id": 7, "video_token_id": 8, "vision_start_token_id": 5}
        self.same(lambda c: c.multimodal_positions(
            ids, family="qwen2_vl", token_ids=token_ids, spatial_merge_size=1,
            image_grid_thw=[[1, 2, 2]]))
        self.same(lambda c: c.multimodal_decode([[2]], 7, 3))
        self.same(lambda c: c.vision_positions([[1, 4, 4]], tower="qwen", spatial_merge_size=2))
        self.same(lambda c: c.analyze_encoding(count=64, sinusoidal=posenc.SinusoidalParams(16)))
        self.same(lambda c: c.analyze_encoding(
            count=8, sinusoidal=posenc.SinusoidalParams(16),
            embeddings=rng(12).standard_normal((8, 16))))
        self.same(lambda c: c.get_server_info())


@unittest.skipUnless(posenc.NATIVE_TRANSPORT, "posenc._wirecall not built (python3-dev)")
class NativeTransportTest(unittest.TestCase):
    """posenc._wirecall, the native transport of the calls carrying tensors: the same answers
    and errors as gRPC Python's, its own inputs checked."""

    def test_built_where_the_build_says(self):
        # The CMake build sets POSENC_EXPECT_NATIVE when it built posenc._wirecall: then a
        # failing import must not skip these tests silently.
        if os.environ.get("POSENC_EXPECT_NATIVE") == "1":
            self.assertTrue(posenc.NATIVE_TRANSPORT)
        self.assertTrue(CLIENT._transport.native)
        with posenc.Client(SERVER.address, native_transport=False) as grpcio, posenc.Client(
                SERVER.address, direct_tensors=False) as plain:
            self.assertFalse(grpcio._transport.native)
            self.assertFalse(plain._transport.native)

    def test_large_results_are_writable_arrays_of_their_own(self):
        q = rng(31).standard_normal((1, 256, 8, 64)).astype(np.float32)  # 512 KiB each
        k = q.copy()
        out = CLIENT.apply_rope(q, k)
        with posenc.Client(SERVER.address, native_transport=False) as grpcio:
            assert_same(self, out.q, grpcio.apply_rope(q, k).q)
        self.assertTrue(out.q.flags.writeable and out.k.flags.writeable)
        before = out.k.copy()
        out.q[...] = 0
        np.testing.assert_array_equal(out.k, before)
        np.testing.assert_array_equal(q, k)  # the inputs untouched

    def test_errors_are_the_same_as_grpc_pythons(self):
        q = rng(32).standard_normal((1, 64, 4, 32)).astype(np.float32)
        config = posenc.RopeConfig(head_dim=64)
        caught = []
        for native in (True, False):
            with posenc.Client(SERVER.address, native_transport=native,
                               direct_tensors=0) as client:
                with self.assertRaises(posenc.InvalidArgumentError) as cm:
                    client.apply_rope(q, None, None, config)
                caught.append(cm.exception)
        native, grpcio = caught
        self.assertEqual(native.message, grpcio.message)
        self.assertEqual((native.field, native.reason, native.domain),
                         (grpcio.field, grpcio.reason, grpcio.domain))
        self.assertEqual(native.violations, grpcio.violations)
        self.assertTrue(native.violations)
        self.assertEqual(native.method, "ApplyRope")

    def test_deadline_and_unreachable_server(self):
        q = rng(33).standard_normal((1, 4096, 32, 128)).astype(np.float32)  # 64 MiB
        with self.assertRaises(posenc.DeadlineExceededError):
            CLIENT.apply_rope(q, timeout=1e-4)
        with posenc.Client("127.0.0.1:1", timeout=5, **NO_HEALTH) as client:
            self.assertTrue(client._transport.native)
            with self.assertRaises(posenc.UnavailableError):
                client.apply_rope(q[:, :16])

    def test_calls_from_many_threads(self):
        arrays = [rng(40 + i).standard_normal((1, 128, 8, 64)).astype(np.float32)
                  for i in range(8)]
        with posenc.Client(SERVER.address, native_transport=False) as grpcio:
            expected = [grpcio.apply_rope(a, a[:, :, :2]) for a in arrays]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda a: CLIENT.apply_rope(a, a[:, :, :2]), arrays * 3))
        for i, result in enumerate(got):
            assert_same(self, result.q, expected[i % 8].q)
            assert_same(self, result.k, expected[i % 8].k)

    def test_the_channel_checks_its_inputs(self):
        wirecall = _transport.native_module()
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            posenc.Client(SERVER.address, channel_options=[("grpc.x", 1.5)])
        self.assertEqual(cm.exception.field, "channel_options")
        for options in ([("grpc.x", 1 << 40)], [(1, 1)], [("grpc.x",)], 5):
            with self.assertRaises((TypeError, ValueError), msg=repr(options)):
                wirecall.Channel(SERVER.address, options)
        with self.assertRaises(TypeError):
            wirecall.Channel(SERVER.address, [], True, "not bytes")
        channel = wirecall.Channel(SERVER.address, [])
        method = "/posenc.v1.PositionEncoding/ApplyRope"
        strided = np.zeros((64, 64), np.float32)[:, ::2]
        for parts, error in (([strided], (BufferError, TypeError, ValueError)),
                             ([1], TypeError), (5, TypeError)):
            with self.assertRaises(error, msg=repr(parts)):
                channel.unary(method, parts, 5.0)
        with self.assertRaises(ValueError):
            channel.unary(method, [], -1.0)
        channel.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            channel.unary(method, [], 5.0)

    def test_parts_of_every_kind_are_joined_in_order(self):
        """An echo server: what arrives is the parts joined, small and large, bytes,
        memoryviews and arrays (the large ones lent, not copied)."""
        wirecall = _transport.native_module()
        big = rng(34).integers(0, 256, size=300 << 10, dtype=np.uint8)
        parts = [b"head", memoryview(b"-view-"), big, bytearray(b"tail"), big[: 70 << 10],
                 np.arange(5, dtype=np.int64), b""]
        expected = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
        with RawServer(None) as raw:
            channel = wirecall.Channel(f"127.0.0.1:{raw.port}", [])
            got = channel.unary("/any/Echo", parts, 20.0)
            self.assertIsInstance(got, bytearray)
            self.assertEqual(bytes(got), expected)
            self.assertEqual(bytes(channel.unary("/any/Echo", [], 20.0)), b"")
            channel.close()

    def test_strided_parts_are_sent_in_c_order(self):
        """A split piece's heads go as one strided part (posenc._direct.runs), taken apart run
        by run: what arrives is the C-order bytes; parts whose runs leave their buffer are
        refused."""
        wirecall = _transport.native_module()
        base = rng(35).standard_normal((2, 40, 8, 256)).astype(np.float32)
        with RawServer(None) as raw:
            channel = wirecall.Channel(f"127.0.0.1:{raw.port}", [])
            for view in (base[:, :, 2:6, :], base[:, 3:30], base[1:, :, 5:], base[:, :0],
                         base[..., ::2], base.transpose(0, 2, 1, 3)):
                wire = _direct.WireMessage(pb.ApplyRopeRequest())
                wire.put("q", describe_tensor(wire.message.q, DType.FLOAT32, view,
                                              contiguous=False))
                parts = _direct.encode_parts(wire, strided=True)
                got = channel.unary("/any/Echo", parts, 20.0)
                self.assertEqual(bytes(got), _direct.encode(wire), msg=repr(view.strides))
            flat = bytearray(100)
            for part in ((flat, 10, (3,), (46,)), (flat, 10, (3,), (-1,)), (flat, 10, (0,), (1,)),
                         (flat, -1, (1,), (1,)), (flat, 10, (2,), (1 << 62,)), (flat, 10, (2,)),
                         (flat, 10, [2], [1])):
                with self.assertRaises((TypeError, ValueError), msg=repr(part[1:])):
                    channel.unary("/any/Echo", [part], 20.0)
            self.assertEqual(bytes(channel.unary("/any/Echo", [(flat, 10, (3,), (45,))], 20.0)),
                             bytes(30))
            channel.close()

    def test_sinks_take_a_tensors_data_where_it_goes(self):
        """channel.unary(..., sinks): each named tensor field's data written into its buffers
        (plain or strided), the rest of the response returned; a sink that does not fit, a
        field given twice or bytes that do not scan leave the response whole."""
        wirecall = _transport.native_module()
        q = rng(36).standard_normal((2, 300, 4, 16)).astype(np.float32)
        k = rng(37).standard_normal((2, 300, 2, 16)).astype(np.float32)
        response = pb.ApplyRopeResponse()
        fill_tensor(response.q, DType.FLOAT32, q)
        fill_tensor(response.k, DType.FLOAT32, k)
        response.derived.seq_len = 77
        answer = response.SerializeToString()
        rest = pb.ApplyRopeResponse()
        rest.CopyFrom(response)
        rest.q.ClearField("data")
        rest.k.ClearField("data")
        with RawServer(None) as raw:
            channel = wirecall.Channel(f"127.0.0.1:{raw.port}", [])
            half = q.nbytes // 2
            q_into = [bytearray(half), bytearray(q.nbytes - half)]
            k_whole = np.zeros((2, 300, 6, 16), np.float32)
            k_into = _direct.runs(k_whole[:, :, 3:5])
            self.assertIsInstance(k_into[0], tuple)  # one strided part
            got, written = channel.unary("/any/Echo", [answer], 20.0, {1: q_into, 2: k_into})
            self.assertEqual(written, (1, 2))
            self.assertEqual(pb.ApplyRopeResponse.FromString(bytes(got)), rest)
            self.assertEqual(b"".join(q_into), q.tobytes())
            np.testing.assert_array_equal(k_whole[:, :, 3:5], k)
            self.assertFalse(k_whole[:, :, :3].any() or k_whole[:, :, 5:].any())

            short = bytearray(k.nbytes - 4)
            got, written = channel.unary("/any/Echo", [answer], 20.0,
                                         {1: [bytearray(q.nbytes)], 2: [short]})
            self.assertEqual(written, (1,))
            self.assertEqual(pb.ApplyRopeResponse.FromString(bytes(got)).k.data, k.tobytes())
            self.assertFalse(any(short))
            for whole in (answer + response.q.SerializeToString()[:0] + answer[:0] + bytes(
                    pb.ApplyRopeResponse(q=pb.Tensor(dtype=1)).SerializeToString()), b"\xff",
                    answer[:-3]):
                got, written = channel.unary("/any/Echo", [whole], 20.0,
                                             {1: [bytearray(q.nbytes)]})
                self.assertEqual((bytes(got), written), (whole, ()))
            for sinks, error in (({0: []}, ValueError), ({"q": []}, ValueError),
                                 ({1: [b"read-only"]}, BufferError), ({1: 5}, TypeError),
                                 (5, TypeError)):
                with self.assertRaises(error, msg=repr(sinks)):
                    channel.unary("/any/Echo", [answer], 20.0, sinks)
            channel.close()

    def test_split_answers_are_written_where_they_go(self):
        """A split ApplyRope through the native transport: every piece's q and k written into
        the joined result by the transport (sinks), the result gRPC Python's."""
        q = rng(38).standard_normal((1, 512, 8, 64)).astype(np.float32)  # 1 MiB
        k = rng(39).standard_normal((1, 512, 2, 64)).astype(np.float32)  # GQA
        with posenc.Client(SERVER.address, max_message_bytes=1 << 20) as native, posenc.Client(
                SERVER.address, max_message_bytes=1 << 20, native_transport=False) as grpcio:
            written = []
            call_into = native._transport._native.call_into

            def recorded(*args):
                answer = call_into(*args)
                written.append(answer[1])
                return answer

            native._transport._native.call_into = recorded
            got, expected = native.apply_rope(q, k), grpcio.apply_rope(q, k)
        self.assertGreater(len(written), 1)
        self.assertEqual(set(written), {frozenset((1, 2))})
        assert_same(self, got.q, expected.q)
        assert_same(self, got.k, expected.k)

    def test_a_failing_status_carries_its_code_and_trailers(self):
        wirecall = _transport.native_module()
        channel = wirecall.Channel(SERVER.address, [])
        with self.assertRaises(wirecall.CallError) as cm:
            channel.unary("/posenc.v1.PositionEncoding/ApplyRope", [b"\xff\xff"], 20.0)
        code, details, trailers = cm.exception.args
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        self.assertTrue(details)
        self.assertIn("grpc-status-details-bin", [key for key, _ in trailers])
        error = posenc.PosencError.from_rpc_error(_transport.NativeError(code, details, trailers))
        self.assertIsInstance(error, posenc.InvalidArgumentError)
        self.assertTrue(error.reason)
        channel.close()


class DTypeTest(unittest.TestCase):
    def test_every_input_kind_round_trips(self):
        q = rng(13).standard_normal((1, 7, 2, 16))
        inputs = [q.astype(t) for t in (np.float16, np.float32, np.float64, np.uint16)]
        inputs += [q.astype(">f4"), np.asfortranarray(q.astype(np.float32)),
                   DLPackOnly(q.astype(np.float32))]
        with posenc.Client(SERVER.address, direct_tensors=False) as plain, posenc.Client(
                SERVER.address, direct_tensors=0) as direct:
            for value in inputs:
                assert_same(self, direct.apply_rope(value), plain.apply_rope(value))
                assert_same(self, direct.rerotate_keys(value, 3), plain.rerotate_keys(value, 3))

    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_torch_in_and_out(self):
        with posenc.Client(SERVER.address, direct_tensors=False) as plain:
            for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
                q = torch.randn(1, 6, 2, 16).to(dtype)
                k = torch.randn(1, 6, 1, 16).to(dtype)
                got = CLIENT.apply_rope(q, k)
                self.assertEqual((type(got.q), got.q.dtype), (torch.Tensor, dtype))
                assert_same(self, got, plain.apply_rope(q, k))
                moved = CLIENT.rerotate_keys(k, 2)
                self.assertEqual((type(moved.k), moved.k.dtype), (torch.Tensor, dtype))
                assert_same(self, moved, plain.rerotate_keys(k, 2))


if __name__ == "__main__":
    unittest.main()
