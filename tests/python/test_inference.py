"""The Open Inference Protocol (KServe v2) front end of posenc-server, driven as a Triton client
drives it: through stubs generated from the vendored upstream proto/inference/grpc_service.proto
(inference_stubs.py), never posenc's own. Every model's ModelInfer is compared byte for byte with
its posenc.v1 RPC; the system shared-memory flow registers a POSIX shared-memory object with
SystemSharedMemoryRegister, runs ModelInfer with inputs and outputs in it, lists and unregisters
it; malformed calls come back with their code, message and structured details."""

import unittest
from multiprocessing import shared_memory

import grpc
import numpy as np

import inference_stubs
import posenc
from posenc.v1 import posenc_pb2

pb, pb_grpc = inference_stubs.generate("grpc_service")

DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16",
             np.dtype(np.float64): "FP64", np.dtype(np.int32): "INT32",
             np.dtype(np.int64): "INT64"}
WIRE_DTYPES = {"FP32": posenc_pb2.DTYPE_FLOAT32, "FP16": posenc_pb2.DTYPE_FLOAT16,
               "BF16": posenc_pb2.DTYPE_BFLOAT16, "FP64": posenc_pb2.DTYPE_FLOAT64,
               "INT32": posenc_pb2.DTYPE_INT32, "INT64": posenc_pb2.DTYPE_INT64}
LLAMA3 = ('{"model_type": "llama", "rope_theta": 500000.0, "hidden_size": 256, '
          '"num_attention_heads": 4, "max_position_embeddings": 131072, "rope_scaling": '
          '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,'
          ' "original_max_position_embeddings": 8192}}')


def set_parameter(parameter, value):
    """As tritonclient does: bool, int, float and str by their Python type."""
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = value


def infer_request(model, inputs=(), parameters=None, outputs=()):
    """A ModelInferRequest: inputs as (name, numpy array) with raw contents."""
    request = pb.ModelInferRequest(model_name=model)
    for name, array in inputs:
        request.inputs.add(name=name, datatype=DATATYPES[array.dtype], shape=array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name, value in (parameters or {}).items():
        set_parameter(request.parameters[name], value)
    for name in outputs:
        request.outputs.add(name=name)
    return request


def tensor(array):
    return posenc_pb2.Tensor(dtype=WIRE_DTYPES[DATATYPES[array.dtype]], shape=array.shape,
                             data=np.ascontiguousarray(array).tobytes())


def random(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def shm_parameters(parameters, region, offset, byte_size):
    parameters["shared_memory_region"].string_param = region
    parameters["shared_memory_offset"].int64_param = offset
    parameters["shared_memory_byte_size"].int64_param = byte_size


class ServerTest(inference_stubs.ServerTestCase):
    SERVER_ARGS = ("--threads=1", "--allow_shared_memory")
    STUBS = pb_grpc


class InferenceTest(ServerTest):
    def assert_same_outputs(self, response, expected):
        """Every tensor of the posenc response `expected` is an output, byte for byte."""
        produced = [f.name for f, _ in expected.ListFields() if f.message_type is not None
                    and f.message_type.full_name == "posenc.v1.Tensor"]
        self.assertEqual([o.name for o in response.outputs], produced)
        for output, raw in zip(response.outputs, response.raw_output_contents):
            wire = getattr(expected, output.name)
            self.assertEqual(WIRE_DTYPES[output.datatype], wire.dtype, output.name)
            self.assertEqual(list(output.shape), list(wire.shape), output.name)
            self.assertEqual(raw, wire.data, output.name)

    def test_probes_and_metadata(self):
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(self.stub.ServerReady(pb.ServerReadyRequest()).ready)
        server = self.stub.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual((server.name, list(server.extensions)),
                         ("posenc", ["system_shared_memory"]))
        models = ["sinusoidal", "add_position_encoding", "rope_cache", "apply_rope", "alibi_slopes",
                  "alibi_bias", "relative_bias", "relative_embedding"]
        for model in models:
            with self.subTest(model):
                self.assertTrue(self.stub.ModelReady(pb.ModelReadyRequest(name=model)).ready)
                metadata = self.stub.ModelMetadata(pb.ModelMetadataRequest(name=model))
                self.assertEqual((metadata.name, list(metadata.versions)), (model, ["1"]))
                self.assertTrue(metadata.outputs)
                for t in list(metadata.inputs) + list(metadata.outputs):
                    self.assertIn(t.datatype, WIRE_DTYPES)
                    self.assertTrue(all(d == -1 for d in t.shape))
        rope = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="apply_rope"))
        self.assertEqual([t.name for t in rope.inputs],
                         ["q", "k", "positions.ids", "positions.attention_mask"])
        with self.assertRaises(grpc.RpcError) as caught:
            self.stub.ModelReady(pb.ModelReadyRequest(name="llama"))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
        # Triton's RPCs beyond the subset served (README): UNIMPLEMENTED.
        with self.assertRaises(grpc.RpcError) as caught:
            self.channel.unary_unary("/inference.GRPCInferenceService/ModelConfig")(b"")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def check_parity(self, request, posenc_call, posenc_request):
        response = self.stub.ModelInfer(request)
        expected = posenc_call(posenc_request)
        self.assertEqual(response.model_name, request.model_name)
        self.assert_same_outputs(response, expected)
        return response, expected

    def test_sinusoidal(self):
        self.check_parity(
            infer_request("sinusoidal", parameters={
                "positions.range.start": 3, "positions.range.count": 5, "dim": 17,
                "base": 10000.0, "layout": "concat", "freq_scheme": "vaswani",
                "output_dtype": "FP64"}),
            self.posenc.Sinusoidal,
            posenc_pb2.SinusoidalRequest(
                positions=posenc_pb2.Positions(range=posenc_pb2.PositionRange(start=3, count=5)),
                params=posenc_pb2.SinusoidalParams(
                    dim=17, base=10000.0, layout=posenc_pb2.SINUSOIDAL_LAYOUT_CONCAT,
                    freq_scheme=posenc_pb2.FREQ_SCHEME_VASWANI),
                output_dtype=posenc_pb2.DTYPE_FLOAT64))

    def test_add_position_encoding(self):
        x = random(2, 3, 8, seed=1, dtype=np.float16)
        mask = np.array([[0, 1, 1], [1, 1, 1]], dtype=np.int64)
        self.check_parity(
            infer_request("add_position_encoding", [("x", x), ("positions.attention_mask", mask)],
                          {"sinusoidal.dim": 0, "scale": 2.0, "padding_idx": 1}),
            self.posenc.AddPositionEncoding,
            posenc_pb2.AddPositionEncodingRequest(
                x=tensor(x), positions=posenc_pb2.Positions(attention_mask=tensor(mask)),
                sinusoidal=posenc_pb2.SinusoidalParams(dim=0), scale=2.0, padding_idx=1))

    def test_add_position_encoding_learned_table(self):
        x, table = random(1, 4, 8, seed=2), random(10, 8, seed=3)
        self.check_parity(
            infer_request("add_position_encoding", [("x", x), ("learned.table_inline", table)],
                          {"learned.table_offset": 2, "combine": "CONCAT"}),
            self.posenc.AddPositionEncoding,
            posenc_pb2.AddPositionEncodingRequest(
                x=tensor(x),
                learned=posenc_pb2.LearnedTable(table_inline=tensor(table), table_offset=2),
                combine=posenc_pb2.COMBINE_CONCAT))

    def test_rope_cache_from_a_config_json(self):
        ids = np.array([0, 1, 2, 8191, 8192, 100000], dtype=np.int32)
        response, expected = self.check_parity(
            infer_request("rope_cache", [("positions.ids", ids)],
                          {"hf_config_json": LLAMA3, "output_dtype": "BF16", "layout": "gptj"}),
            self.posenc.RopeCache,
            posenc_pb2.RopeCacheRequest(
                positions=posenc_pb2.Positions(ids=tensor(ids)),
                config=posenc_pb2.RopeConfig(hf_config_json=LLAMA3),
                output_dtype=posenc_pb2.DTYPE_BFLOAT16, layout=posenc_pb2.ROPE_CACHE_LAYOUT_GPTJ))
        self.assertEqual(response.outputs[0].datatype, "BF16")
        derived = response.parameters
        self.assertEqual(derived["derived.scaling_type"].string_param, "LLAMA3")
        self.assertEqual(derived["derived.effective_base"].double_param,
                         expected.derived.effective_base)
        self.assertEqual(derived["derived.model_type"].string_param, "llama")

    def test_apply_rope(self):
        q, k = random(2, 6, 4, 32, seed=4), random(2, 6, 2, 32, seed=5)
        ids = np.arange(12, dtype=np.int64).reshape(2, 6) * 1000
        parameters = {"base": 1000000.0, "rotary_dim": 16, "style": "neox",
                      "scaling.type": "yarn", "scaling.factor": 4.0,
                      "scaling.original_max_position_embeddings": 4096,
                      "max_position_embeddings": 16384}
        self.check_parity(
            infer_request("apply_rope", [("q", q), ("k", k), ("positions.ids", ids)], parameters),
            self.posenc.ApplyRope,
            posenc_pb2.ApplyRopeRequest(
                q=tensor(q), k=tensor(k), positions=posenc_pb2.Positions(ids=tensor(ids)),
                config=posenc_pb2.RopeConfig(
                    base=1000000.0, rotary_dim=16, style=posenc_pb2.ROPE_STYLE_NEOX,
                    max_position_embeddings=16384,
                    scaling=posenc_pb2.RopeScaling(type=posenc_pb2.ROPE_SCALING_YARN, factor=4.0,
                                                   original_max_position_embeddings=4096))))

    def test_apply_rope_packed_with_typed_contents(self):
        q = random(7, 2, 16, seed=6)
        request = pb.ModelInferRequest(model_name="apply_rope")
        request.inputs.add(name="q", datatype="FP32", shape=q.shape,
                           contents=pb.InferTensorContents(fp32_contents=q.ravel().tolist()))
        for name, value in {"layout": "THD", "positions.cu_seqlens.cu_seqlens": "[0, 3, 7]",
                            "positions.cu_seqlens.offsets": "5,0", "inverse": True}.items():
            set_parameter(request.parameters[name], value)
        self.check_parity(
            request, self.posenc.ApplyRope,
            posenc_pb2.ApplyRopeRequest(
                q=tensor(q), layout=posenc_pb2.TENSOR_LAYOUT_THD,
                positions=posenc_pb2.Positions(cu_seqlens=posenc_pb2.CuSeqlens(
                    cu_seqlens=[0, 3, 7], offsets=[5, 0])),
                config=posenc_pb2.RopeConfig(inverse=True)))

    def test_alibi_slopes(self):
        self.check_parity(
            infer_request("alibi_slopes", parameters={"num_heads": 12, "max_bias": 8}),
            self.posenc.AlibiSlopes, posenc_pb2.AlibiSlopesRequest(num_heads=12, max_bias=8))

    def test_alibi_bias(self):
        self.check_parity(
            infer_request("alibi_bias", parameters={
                "num_heads": 8, "q_len": 5, "k_len": 9, "mode": "symmetric", "form": "compact",
                "output_dtype": "float16"}),
            self.posenc.AlibiBias,
            posenc_pb2.AlibiBiasRequest(num_heads=8, q_len=5, k_len=9,
                                        mode=posenc_pb2.ALIBI_MODE_SYMMETRIC,
                                        form=posenc_pb2.BIAS_FORM_COMPACT,
                                        output_dtype=posenc_pb2.DTYPE_FLOAT16))

    def test_relative_bias(self):
        table = random(32, 4, seed=7)
        self.check_parity(
            infer_request("relative_bias", [("table_inline", table)],
                          {"q_len": 3, "k_len": 6, "query_offset": 10, "bidirectional": False}),
            self.posenc.RelativeBias,
            posenc_pb2.RelativeBiasRequest(q_len=3, k_len=6, query_offset=10, bidirectional=False,
                                           table_inline=tensor(table)))

    def test_relative_bias_buckets(self):
        self.check_parity(
            infer_request("relative_bias", parameters={"q_len": 4, "k_len": 4, "form": "buckets"}),
            self.posenc.RelativeBias,
            posenc_pb2.RelativeBiasRequest(q_len=4, k_len=4, form=posenc_pb2.BIAS_FORM_BUCKETS))

    def test_relative_embedding(self):
        table = random(7, 16, seed=8, dtype=np.float64)
        self.check_parity(
            infer_request("relative_embedding", [("table_inline", table)],
                          {"q_len": 4, "k_len": 5, "max_relative": 3}),
            self.posenc.RelativeEmbedding,
            posenc_pb2.RelativeEmbeddingRequest(q_len=4, k_len=5, max_relative=3,
                                                table_inline=tensor(table)))

    def test_requested_outputs_only_and_the_id_echoed(self):
        request = infer_request("rope_cache", parameters={"positions.range.count": 4,
                                                          "head_dim": 8}, outputs=["sin"])
        request.id = "call-42"
        response = self.stub.ModelInfer(request)
        self.assertEqual(([o.name for o in response.outputs], response.id), (["sin"], "call-42"))

    def test_malformed_calls_name_the_input_or_parameter(self):
        q = random(1, 4, 2, 8)
        rows = [
            (infer_request("llama"), grpc.StatusCode.NOT_FOUND, "model_name", "MODEL_NOT_FOUND"),
            (infer_request("apply_rope", [("q", q)], {"base": True}),
             grpc.StatusCode.INVALID_ARGUMENT, "base", "INVALID_FIELD"),
            (infer_request("apply_rope", [("q", q), ("v", q)]), grpc.StatusCode.INVALID_ARGUMENT,
             "inputs[1].name", "INVALID_FIELD"),
            (infer_request("apply_rope", [("q", q.astype(np.int32))]),
             grpc.StatusCode.INVALID_ARGUMENT, "q.dtype", "INVALID_FIELD"),
            (infer_request("apply_rope", [("q", q)], {"scaling.type": "turbo"}),
             grpc.StatusCode.INVALID_ARGUMENT, "scaling.type", "INVALID_FIELD"),
        ]
        for request, code, field, reason in rows:
            with self.subTest(field):
                with self.assertRaises(grpc.RpcError) as caught:
                    self.stub.ModelInfer(request)
                error = posenc.PosencError.from_rpc_error(caught.exception, "ModelInfer")
                self.assertEqual((caught.exception.code(), error.field, error.reason),
                                 (code, field, reason), error.message)


class SharedMemoryTest(ServerTest):
    """Triton's system shared-memory flow, on the registry posenc.v1's RPCs share."""

    def setUp(self):
        self.shm = shared_memory.SharedMemory(create=True, size=1 << 20)
        self.addCleanup(self.shm.unlink)
        self.addCleanup(self.shm.close)
        self.stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
            name="io", key="/" + self.shm.name, offset=0, byte_size=1 << 20))

    def view(self, offset, like):
        return np.ndarray(like.shape, like.dtype, buffer=self.shm.buf, offset=offset)

    def shm_input(self, request, name, array, offset):
        self.view(offset, array)[...] = array
        tensor_in = request.inputs.add(name=name, datatype=DATATYPES[array.dtype],
                                       shape=array.shape)
        shm_parameters(tensor_in.parameters, "io", offset, array.nbytes)

    def test_register_infer_status_unregister(self):
        q, k = random(1, 16, 8, 64, seed=9), random(1, 16, 2, 64, seed=10)
        request = pb.ModelInferRequest(model_name="apply_rope")
        self.shm_input(request, "q", q, 0)
        self.shm_input(request, "k", k, 1 << 16)
        for name, offset, array in (("q", 1 << 18, q), ("k", 1 << 19, k)):
            shm_parameters(request.outputs.add(name=name).parameters, "io", offset, array.nbytes)
        set_parameter(request.parameters["base"], 500000.0)
        set_parameter(request.parameters["positions.range.start"], 4096)
        response = self.stub.ModelInfer(request)
        self.assertEqual(list(response.raw_output_contents), [b"", b""])
        self.assertEqual(response.outputs[0].parameters["shared_memory_offset"].int64_param,
                         1 << 18)

        expected = self.posenc.ApplyRope(posenc_pb2.ApplyRopeRequest(
            q=tensor(q), k=tensor(k),
            positions=posenc_pb2.Positions(range=posenc_pb2.PositionRange(start=4096)),
            config=posenc_pb2.RopeConfig(base=500000.0)))
        self.assertEqual(self.view(1 << 18, q).tobytes(), expected.q.data)
        self.assertEqual(self.view(1 << 19, k).tobytes(), expected.k.data)
        np.testing.assert_array_equal(self.view(0, q), q)  # the inputs stay as they were

        regions = self.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest()).regions
        self.assertEqual((regions["io"].key, regions["io"].byte_size),
                         ("/" + self.shm.name, 1 << 20))
        listed = self.posenc.SharedMemoryStatus(posenc_pb2.SharedMemoryStatusRequest())
        self.assertEqual([r.name for r in listed.regions], ["io"])  # the one registry
        self.stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="io"))
        with self.assertRaises(grpc.RpcError) as caught:
            self.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="io"))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_rotates_in_place_and_writes_tables_into_the_region(self):
        q = random(1, 8, 4, 32, seed=11)
        request = pb.ModelInferRequest(model_name="apply_rope")
        self.shm_input(request, "q", q, 4096)
        shm_parameters(request.outputs.add(name="q").parameters, "io", 4096, q.nbytes)
        self.stub.ModelInfer(request)
        expected = self.posenc.ApplyRope(posenc_pb2.ApplyRopeRequest(q=tensor(q)))
        self.assertEqual(self.view(4096, q).tobytes(), expected.q.data)

        request = infer_request("rope_cache", parameters={"positions.range.count": 64,
                                                          "head_dim": 128})
        for i, name in enumerate(("cos", "sin")):
            shm_parameters(request.outputs.add(name=name).parameters, "io", (i + 1) << 16,
                           64 * 64 * 4)
        self.stub.ModelInfer(request)
        cache = self.posenc.RopeCache(posenc_pb2.RopeCacheRequest(
            positions=posenc_pb2.Positions(range=posenc_pb2.PositionRange(count=64)),
            config=posenc_pb2.RopeConfig(head_dim=128)))
        self.assertEqual(bytes(self.shm.buf[1 << 16:(1 << 16) + 64 * 64 * 4]), cache.cos.data)
        self.assertEqual(bytes(self.shm.buf[2 << 16:(2 << 16) + 64 * 64 * 4]), cache.sin.data)

    def tearDown(self):
        try:
            self.stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
        except grpc.RpcError:
            pass


if __name__ == "__main__":
    unittest.main()
