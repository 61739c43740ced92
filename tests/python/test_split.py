"""Splitting requests over the message limit (posenc/_split.py, docs/splitting.md).

SplitCasesTest runs every case of tests/data/split_cases.json (the cases the C++ client's test
runs too) through the client against a server started with the case's --max_message_bytes and
against one without a limit, compares every output byte for byte, and counts the pieces with the
limited server's posenc_requests_total. The other tests cover what the shared cases do not:
refusals, errors of pieces, compact biases, named tables, and the pure planner without a server.
"""

import json
import os
import tempfile
import unittest
import zlib

import numpy as np

import posenc
from posenc import _split
from posenc.v1 import posenc_pb2 as pb
from server import ROOT, ServerProcess

CASES_PATH = (os.environ.get("POSENC_SPLIT_CASES")
              or os.path.join(ROOT, "tests", "data", "split_cases.json"))
T5_TABLE = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)

TMP = None
BIG = None  # default limits
LIMITED = {}  # max_message_bytes -> (server, client)
big = None


def load_cases():
    with open(CASES_PATH, encoding="utf-8") as f:
        return json.load(f)["cases"]


def setUpModule():
    global BIG, big
    BIG = ServerProcess("--threads=1")
    big = posenc.Client(BIG.address, timeout=120)
    for limit in sorted({case["max_message_bytes"] for case in load_cases()} | {256 << 10}):
        server = ServerProcess(f"--max_message_bytes={limit}", "--threads=1", metrics=True)
        LIMITED[limit] = (server, posenc.Client(server.address, timeout=120))


def tearDownModule():
    for server, client in LIMITED.values():
        client.close()
        server.stop()
    if big is not None:
        big.close()
    if BIG is not None:
        BIG.stop()


# ---------------------------------------------------------------------------------------------
# A case's arguments (the proto's JSON names) as the client's.
# ---------------------------------------------------------------------------------------------
def is_tensor(value):
    return isinstance(value, dict) and "dtype" in value and "shape" in value


def tensor(spec, seed):
    """The case's tensor: ids and masks from `values`, `iota` or `left_padding`, floats from a
    generator seeded by the case and field (bfloat16 as its bit patterns)."""
    shape = tuple(spec["shape"])
    dtype = spec["dtype"].upper().replace("DTYPE_", "")
    if dtype in ("INT32", "INT64"):
        if "values" in spec:
            values = np.array(spec["values"]).reshape(shape)
        elif "iota" in spec:
            values = spec["iota"] + np.arange(int(np.prod(shape))).reshape(shape)
        else:  # an attention mask with left padding
            values = (np.arange(shape[1])[None, :] >= np.array(spec["left_padding"])[:, None])
        return values.astype(np.int32 if dtype == "INT32" else np.int64)
    values = np.random.default_rng(zlib.crc32(seed.encode())).standard_normal(shape)
    if dtype == "BFLOAT16":
        return posenc.float32_to_bf16(values.astype(np.float32))
    return values.astype({"FLOAT32": np.float32, "FLOAT16": np.float16,
                          "FLOAT64": np.float64}[dtype])


def positions(spec, seed):
    (kind, value), = spec.items()
    if kind == "range":
        return posenc.Positions.range(value.get("start", 0), value.get("count", 0))
    if kind == "offsets":
        return posenc.Positions.offsets(value.get("offsets", []))
    if kind == "cu_seqlens":
        return posenc.Positions.cu_seqlens(value["cu_seqlens"], value.get("offsets", ()))
    if kind == "ids":
        return posenc.Positions.ids(tensor(value, seed))
    return posenc.Positions.attention_mask(tensor(value, seed))


def client_arguments(case):
    """The keyword arguments of the client method of `case["op"]`."""
    name, out = case["name"], {}
    for key, value in case["args"].items():
        seed = f"{name}/{key}"
        if key == "positions":
            out[key] = positions(value, seed)
        elif key == "config":
            out[key] = posenc.RopeConfig(**value)
        elif key == "sinusoidal":
            out[key] = posenc.SinusoidalParams(**value)
        elif key == "learned":
            table = value.get("table_name") or tensor(value["table_inline"], seed)
            out[key] = posenc.LearnedTable(table, value.get("table_offset", 0))
        elif key in ("table_inline", "table_name"):
            out["table"] = tensor(value, seed) if key == "table_inline" else value
        elif key == "output_dtype":
            out["dtype"] = value
        else:
            out[key] = tensor(value, seed) if is_tensor(value) else value
    return out


def method_of(op):
    return "".join(word.capitalize() for word in op.split("_"))


def outputs(result):
    """(name, array) of every output of a result, and its other fields."""
    if isinstance(result, np.ndarray):
        return [("out", result)], {}
    arrays = [(k, v) for k, v in result._asdict().items() if isinstance(v, np.ndarray)]
    others = {k: v for k, v in result._asdict().items() if not isinstance(v, np.ndarray)}
    if "derived" in others:
        derived = others.pop("derived")
        arrays.append(("derived.inv_freq", derived.inv_freq))
        others["derived"] = {k: v for k, v in vars(derived).items() if k != "inv_freq"}
    return arrays, others


class SplitCasesTest(unittest.TestCase):
    def test_every_case_is_byte_identical_to_one_call(self):
        cases = load_cases()
        self.assertGreaterEqual(len(cases), 20)
        for case in cases:
            with self.subTest(case["name"]):
                server, client = LIMITED[case["max_message_bytes"]]
                method = method_of(case["op"])
                kwargs = client_arguments(case)
                before = server.requests_total(method)
                got = getattr(client, case["op"])(**kwargs)
                pieces = server.requests_total(method) - before
                want = getattr(big, case["op"])(**kwargs)
                got_arrays, got_others = outputs(got)
                want_arrays, want_others = outputs(want)
                self.assertEqual(got_others, want_others)
                for (name, a), (_, b) in zip(got_arrays, want_arrays):
                    self.assertEqual((a.dtype, a.shape), (b.dtype, b.shape), name)
                    self.assertTrue(a.tobytes() == b.tobytes(), f"{name} differs")
                self.assertEqual(pieces, case["pieces"])

    def test_cases_use_the_names_of_the_proto(self):
        requests = {"apply_rope": pb.ApplyRopeRequest,
                    "add_position_encoding": pb.AddPositionEncodingRequest,
                    "alibi_bias": pb.AlibiBiasRequest, "relative_bias": pb.RelativeBiasRequest,
                    "relative_embedding": pb.RelativeEmbeddingRequest}

        def check(descriptor, args, where):
            for key, value in args.items():
                field = descriptor.fields_by_name.get(key)
                self.assertIsNotNone(field, f"{where}.{key}")
                if field.message_type is not None and isinstance(value, dict) and not (
                        is_tensor(value)):
                    check(field.message_type, value, f"{where}.{key}")
                elif field.enum_type is not None:
                    self.assertIn(value, field.enum_type.values_by_name, f"{where}.{key}")

        for case in load_cases():
            check(requests[case["op"]].DESCRIPTOR, case["args"], case["name"])


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


class SplitBehaviourTest(unittest.TestCase):
    """Through the 256 KiB server."""

    @classmethod
    def setUpClass(cls):
        cls.server, cls.client = LIMITED[256 << 10]

    def count(self, method, call):
        before = self.server.requests_total(method)
        result = call()
        return result, self.server.requests_total(method) - before

    def test_without_splitting_the_server_refuses(self):
        with posenc.Client(self.server.address, split_requests=False) as client:
            with self.assertRaises(posenc.ResourceExhaustedError) as cm:
                client.apply_rope(rand((1, 512, 8, 64)))
        self.assertIn("larger than max", cm.exception.message)  # gRPC's own check

    def test_small_requests_go_as_one_call_without_asking_the_server(self):
        with posenc.Client(self.server.address) as client:
            info = self.server.requests_total("GetServerInfo")
            _, calls = self.count("ApplyRope", lambda: client.apply_rope(rand((1, 16, 2, 64))))
            self.assertEqual(calls, 1)
            self.assertEqual(self.server.requests_total("GetServerInfo"), info)

    def test_a_piece_that_cannot_fit_is_refused_before_sending(self):
        calls = [
            ("ApplyRope", lambda: self.client.apply_rope(  # one token of one head: 256 KiB
                rand((1, 2, 1, 65536)), config=posenc.RopeConfig(rotary_dim=64))),
            ("ApplyRope", lambda: self.client.apply_rope(  # THD has no batch rows to cut
                rand((4, 1, 65536)), layout="thd")),
            ("AddPositionEncoding", lambda: self.client.add_position_encoding(
                rand((2, 256, 512)),
                posenc.Positions.attention_mask(np.ones((2, 256), np.int64)))),
            ("RelativeEmbedding", lambda: self.client.relative_embedding(
                4, 4096, 2, rand((5, 16)))),
        ]
        for method, call in calls:
            with self.subTest(method):
                before = self.server.requests_total(method)
                with self.assertRaises(posenc.ResourceExhaustedError) as cm:
                    call()
                self.assertEqual(self.server.requests_total(method), before)  # nothing sent
                e = cm.exception
                self.assertEqual((e.reason, e.domain, e.details), ("LIMIT_EXCEEDED", "posenc.v1",
                                                                   "client-side check"))
                self.assertEqual(e.metadata, {"limit": "max_message_bytes"})
                self.assertIn("cannot be split", e.message)
                self.assertIsNone(e.field)

    def test_a_mask_becomes_ids_of_every_axis_count(self):
        # One head of 1 MiB cut along tokens: the mask goes as ids [A, m, n], A the config's
        # position axes (2 for the vision layouts; the client once sent [3, ...] for all).
        q = rand((2, 2048, 1, 64))
        mask = np.ones((2, 2048), np.int64)
        mask[0, :300] = 0
        axes = [0] * 16 + [1 + j % 2 for j in range(16)]
        # A config.json's sections: four axes (HunYuan-style; once every such file was taken
        # as 3) and three.
        files = [posenc.RopeConfig(hf_config_json=json.dumps({
            "model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 1,
            "max_position_embeddings": 8192, "rope_theta": 10000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": sections}}))
            for sections in ([8, 8, 8, 8], [8, 12, 12])]
        for config in [posenc.RopeConfig(mrope_layout="vision_2d"),
                       posenc.RopeConfig(mrope_layout="vision_2d_even_odd"),
                       posenc.RopeConfig(mrope_section=[8, 12, 12]),
                       posenc.RopeConfig(frequency_axes=axes)] + files:
            with self.subTest(str(config.mrope_layout or config.mrope_section or "axes") +
                              config.hf_config_json):
                positions = posenc.Positions.attention_mask(mask)
                got, calls = self.count("ApplyRope", lambda: self.client.apply_rope(
                    q, positions=positions, config=config))
                self.assertGreater(calls, 1)
                want = big.apply_rope(q, positions=positions, config=config)
                self.assertEqual(got.q.tobytes(), want.q.tobytes())

    def test_the_first_failing_piece_names_the_callers_field(self):
        config = posenc.RopeConfig(scaling=posenc.RopeScaling(type="dynamic", factor=2.0))
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            self.client.apply_rope(rand((1, 2048, 1, 64)), config=config)  # 4 pieces
        self.assertEqual(cm.exception.field, "config.max_position_embeddings")
        self.assertEqual(cm.exception.method, "ApplyRope")

    def test_malformed_requests_are_not_cut(self):
        # Sent whole: gRPC refuses a message over the server's limit before the server reads it.
        q = rand((1, 1024, 4, 64))
        for kwargs in ({"k": rand((1, 1000, 4, 64))}, {"positions": np.arange(1000)},
                       {"positions": posenc.Positions.offsets([1, 2])}):
            with self.subTest(str(kwargs)[:40]):
                before = self.server.requests_total("ApplyRope")
                with self.assertRaises(posenc.ResourceExhaustedError) as cm:
                    self.client.apply_rope(q, **kwargs)
                self.assertIn("larger than max", cm.exception.message)
                self.assertEqual(self.server.requests_total("ApplyRope"), before)

    def test_compact_biases_go_as_one_call(self):
        got, calls = self.count("AlibiBias", lambda: self.client.alibi_bias(16, 256, 256))
        self.assertEqual(calls, 1)
        self.assertEqual(got.bias.tobytes(), big.alibi_bias(16, 256, 256, form="full")
                         .bias.tobytes())

    def test_a_named_t5_table_splits_with_the_servers_shape(self):
        with TableServer() as (server, client):
            before = server.requests_total("RelativeBias")
            got = client.relative_bias(128, 256, "t5", form="full")
            self.assertEqual(server.requests_total("RelativeBias") - before, 6)
            self.assertEqual(got.tobytes(), big.relative_bias(128, 256, T5_TABLE, form="full")
                             .tobytes())


class TableServer:
    """A 256 KiB server with T5_TABLE loaded as "t5", and a client of it."""

    def __enter__(self):
        self.tmp = tempfile.TemporaryDirectory()
        np.save(os.path.join(self.tmp.name, "t5.npy"), T5_TABLE)
        self.server = ServerProcess("--max_message_bytes=262144", f"--tables={self.tmp.name}",
                                    "--threads=1", metrics=True)
        self.client = posenc.Client(self.server.address, timeout=60)
        return self.server, self.client

    def __exit__(self, *exc):
        self.client.close()
        self.server.stop()
        self.tmp.cleanup()


class PlannerTest(unittest.TestCase):
    """posenc._split without a server: the pieces' requests themselves."""

    @staticmethod
    def limits(message_bytes):
        return lambda: _split.Limits(message_bytes)

    def test_even_ranges(self):
        self.assertEqual(_split.even_ranges(10, 3), [range(0, 3), range(3, 6), range(6, 10)])
        self.assertEqual(_split.even_ranges(2, 4), [range(0, 1), range(1, 2)])
        self.assertEqual(_split.fewest_pieces(32768, 512, 983040 - 20), 18)
        self.assertIsNone(_split.fewest_pieces(10, 100, 99))

    def test_the_headline_case(self):
        request = pb.ApplyRopeRequest()
        q = rand((1, 32768, 1, 128))
        request.q.dtype = posenc.DType.FLOAT32
        request.q.shape.extend(q.shape)
        request.q.data = q.tobytes()
        request.positions.range.start = 5
        plan = _split.plan_apply_rope(request, self.limits(1 << 20))
        self.assertEqual(len(plan.pieces), 18)
        starts = [p.positions.range.start for p in plan.pieces]
        self.assertEqual(starts[:3], [5, 5 + 1820, 5 + 3640])
        self.assertTrue(all(p.config.seq_len == 5 + 32768 for p in plan.pieces))
        self.assertTrue(all(p.ByteSize() <= (1 << 20) - (64 << 10) for p in plan.pieces))

    def test_cu_seqlens_are_clamped_and_offsets_moved(self):
        request = pb.ApplyRopeRequest(layout=posenc.TensorLayout.THD)
        request.q.dtype = posenc.DType.FLOAT32
        request.q.shape.extend([1000, 1, 64])
        request.q.data = bytes(1000 * 64 * 4)
        request.positions.cu_seqlens.cu_seqlens.extend([0, 300, 300, 1000])
        request.positions.cu_seqlens.offsets.extend([7, 1, 2])
        plan = _split.plan_apply_rope(request, self.limits(128 << 10))  # 64 KiB: 250 tokens
        got = [(list(p.positions.cu_seqlens.cu_seqlens), list(p.positions.cu_seqlens.offsets))
               for p in plan.pieces]
        self.assertEqual(got, [([0, 250, 250, 250], [7, 1, 2]),
                               ([0, 50, 50, 250], [257, 1, 2]),
                               ([0, 0, 0, 250], [507, 201, 202]),
                               ([0, 0, 0, 250], [757, 451, 452])])

    def test_gqa_head_ranges_travel_together(self):
        request = pb.ApplyRopeRequest()
        for tensor, heads in ((request.q, 8), (request.k, 2)):
            tensor.dtype = posenc.DType.FLOAT32
            tensor.shape.extend([1, 1024, heads, 64])
            tensor.data = bytes(1024 * heads * 64 * 4)
        plan = _split.plan_apply_rope(request, self.limits(840 << 10))  # 3 heads a piece
        shapes = [(p.q.shape[2], p.k.shape[2] if p.HasField("k") else 0) for p in plan.pieces]
        self.assertEqual(shapes, [(2, 0), (2, 1), (2, 0), (2, 1)])
        self.assertFalse(any(p.config.HasField("seq_len") for p in plan.pieces))

    def test_attention_mask_pieces_carry_ids(self):
        request = pb.ApplyRopeRequest()
        request.q.dtype = posenc.DType.FLOAT32
        request.q.shape.extend([2, 1024, 1, 64])
        request.q.data = bytes(2 * 1024 * 64 * 4)
        mask = np.ones((2, 1024), np.int64)
        mask[1, :10] = 0
        request.positions.attention_mask.dtype = posenc.DType.INT64
        request.positions.attention_mask.shape.extend(mask.shape)
        request.positions.attention_mask.data = mask.tobytes()
        plan = _split.plan_apply_rope(request, self.limits(384 << 10))
        second = plan.pieces[1].positions.ids
        ids = np.frombuffer(second.data, np.int64).reshape(tuple(second.shape))
        start = 1024 // len(plan.pieces)
        self.assertEqual(ids[0, 0], start)
        self.assertEqual(ids[1, 0], start - 10)
        self.assertTrue(all(p.config.seq_len == 1024 for p in plan.pieces))

    def test_query_rows_move_the_query_offset(self):
        request = pb.AlibiBiasRequest(num_heads=4, q_len=100, k_len=1000, query_offset=-5)
        plan = _split.plan_alibi_bias(request, self.limits(480000))  # 16000 bytes a row
        self.assertEqual([(p.q_len, p.query_offset) for p in plan.pieces],
                         [(25, -5), (25, 20), (25, 45), (25, 70)])
        unset = pb.RelativeBiasRequest(q_len=10, k_len=20000, form=posenc.BiasForm.BUCKETS)
        plan = _split.plan_relative_bias(unset, self.limits(480000))
        self.assertEqual(plan.pieces[0].query_offset, 20000 - 10)


if __name__ == "__main__":
    unittest.main()
