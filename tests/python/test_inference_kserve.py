"""A KServe client of posenc-server: stubs generated from KServe's own grpc_predict_v2.proto
(vendored in proto/inference, inference_stubs.py), whose InferParameter has no double (numbers go
as int64_param or a numeric string_param). Also checks that every message and method of KServe's
file is in the Triton file the server implements with the same field numbers and types, so any
KServe v2 client is a client of posenc."""

import unittest

import grpc
import numpy as np

import inference_stubs
from posenc.v1 import posenc_pb2

pb, pb_grpc = inference_stubs.generate("grpc_predict_v2")


def fields(message):
    return {f.name: (f.number, f.type, f.label, f.type_name) for f in message.field}


def messages(file, prefix=".inference."):
    """Every message of `file` by full name, nested ones included."""
    out = {}

    def add(message, name):
        out[name] = message
        for nested in message.nested_type:
            add(nested, f"{name}.{nested.name}")

    for message in file.message_type:
        add(message, prefix + message.name)
    return out


class WireCompatibilityTest(unittest.TestCase):
    def test_kserve_messages_and_methods_are_the_servers(self):
        kserve = inference_stubs.descriptor_set("grpc_predict_v2")
        triton = inference_stubs.descriptor_set("grpc_service")
        self.assertEqual((kserve.package, triton.package), ("inference", "inference"))
        served = messages(triton)
        for name, message in messages(kserve).items():
            with self.subTest(name):
                self.assertIn(name, served)
                theirs = fields(served[name])
                for field, spec in fields(message).items():
                    self.assertEqual(theirs.get(field), spec, f"{name}.{field}")
        methods = {m.name: (m.input_type, m.output_type) for m in triton.service[0].method}
        self.assertEqual(kserve.service[0].name, triton.service[0].name)
        for method in kserve.service[0].method:
            self.assertEqual(methods.get(method.name), (method.input_type, method.output_type))


class KServeClientTest(inference_stubs.ServerTestCase):
    STUBS = pb_grpc

    def test_probes_and_metadata(self):
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(self.stub.ServerReady(pb.ServerReadyRequest()).ready)
        metadata = self.stub.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual((metadata.name, list(metadata.extensions)), ("posenc", []))
        model = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="rope_cache"))
        self.assertEqual([t.name for t in model.outputs], ["cos", "sin", "cos_sin", "freqs_cis"])

    def test_apply_rope_with_numbers_as_strings(self):
        q = np.random.default_rng(1).standard_normal((1, 8, 4, 64)).astype(np.float32)
        request = pb.ModelInferRequest(model_name="apply_rope", id="kserve-1")
        request.inputs.add(name="q", datatype="FP32", shape=q.shape)
        request.raw_input_contents.append(q.tobytes())
        request.parameters["base"].string_param = "500000.0"
        request.parameters["scaling.type"].string_param = "linear"
        request.parameters["scaling.factor"].string_param = "2.5"
        request.parameters["positions.range.start"].int64_param = 17
        response = self.stub.ModelInfer(request)
        expected = self.posenc.ApplyRope(posenc_pb2.ApplyRopeRequest(
            q=posenc_pb2.Tensor(dtype=posenc_pb2.DTYPE_FLOAT32, shape=q.shape, data=q.tobytes()),
            positions=posenc_pb2.Positions(range=posenc_pb2.PositionRange(start=17)),
            config=posenc_pb2.RopeConfig(base=500000.0, scaling=posenc_pb2.RopeScaling(
                type=posenc_pb2.ROPE_SCALING_LINEAR, factor=2.5))))
        self.assertEqual((response.id, response.outputs[0].name), ("kserve-1", "q"))
        self.assertEqual(response.raw_output_contents[0], expected.q.data)
        # Derived numbers are double_param, a field KServe's message does not have: kept as
        # unknown fields; the integers and strings read as usual.
        self.assertEqual(response.parameters["derived.scaling_type"].string_param, "LINEAR")
        self.assertEqual(response.parameters["derived.rotary_dim"].int64_param, 64)

    def test_shared_memory_is_not_offered_without_the_flag(self):
        request = pb.ModelInferRequest(model_name="alibi_slopes")
        request.parameters["num_heads"].int64_param = 4
        output = request.outputs.add(name="slopes")
        output.parameters["shared_memory_region"].string_param = "r"
        output.parameters["shared_memory_byte_size"].int64_param = 16
        with self.assertRaises(grpc.RpcError) as caught:
            self.stub.ModelInfer(request)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("--allow_shared_memory", caught.exception.details())


if __name__ == "__main__":
    unittest.main()
