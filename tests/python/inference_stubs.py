"""Client stubs of the Open Inference Protocol, generated from the vendored upstream .proto files.

The facade's tests talk to posenc-server as a Triton or KServe client would: through code that
protoc and grpc_python_plugin generate here, into a temporary folder, from
proto/inference/grpc_service.proto (Triton's, what the server implements) or
proto/inference/grpc_predict_v2.proto (KServe's), never from posenc's own .proto. Each file gets
the name its upstream has ("grpc_service.proto", "grpc_predict_v2.proto"), as tritonclient and
kserve generate them. Both define the messages of package `inference`, so one process loads one
of them (a test module each). PROTOC and GRPC_PYTHON_PLUGIN name the programs (ctest sets them),
else they are looked up on PATH.

descriptor_set(name) gives a file's FileDescriptorProto without loading it into any pool, for the
wire-compatibility check of the two files. ServerTestCase starts the server the test modules
call.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc
from google.protobuf import descriptor_pb2

from posenc.v1 import posenc_pb2_grpc
from server import ServerProcess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTO_DIR = os.path.join(ROOT, "proto", "inference")


def _program(env, name):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise RuntimeError(f"{name} not found (Debian: protobuf-compiler, protobuf-compiler-grpc); "
                           f"or set {env}")
    return path


def generate(name):
    """(messages module, grpc module) generated from proto/inference/<name>.proto."""
    out = tempfile.mkdtemp(prefix="posenc_inference_stubs_")
    subprocess.check_call([
        _program("PROTOC", "protoc"), f"--proto_path={PROTO_DIR}", f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-grpc_python={_program('GRPC_PYTHON_PLUGIN', 'grpc_python_plugin')}",
        os.path.join(PROTO_DIR, f"{name}.proto")])
    sys.path.insert(0, out)
    try:
        return (importlib.import_module(f"{name}_pb2"), importlib.import_module(f"{name}_pb2_grpc"))
    finally:
        sys.path.remove(out)


def descriptor_set(name):
    """The FileDescriptorProto of proto/inference/<name>.proto (not loaded into a pool)."""
    with tempfile.TemporaryDirectory() as out:
        path = os.path.join(out, "set.pb")
        subprocess.check_call([_program("PROTOC", "protoc"), f"--proto_path={PROTO_DIR}",
                               f"--descriptor_set_out={path}",
                               os.path.join(PROTO_DIR, f"{name}.proto")])
        files = descriptor_pb2.FileDescriptorSet()
        with open(path, "rb") as f:
            files.ParseFromString(f.read())
    return files.file[0]


class ServerTestCase(unittest.TestCase):
    """A posenc-server (SERVER_ARGS) for the test class, and on one channel to it `stub`, a
    GRPCInferenceServiceStub of the module STUBS (generate()'s second), and `posenc`, posenc.v1's
    stub (the reference the facade is compared with)."""

    SERVER_ARGS = ("--threads=1",)
    STUBS = None

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(*cls.SERVER_ARGS)
        cls.channel = grpc.insecure_channel(cls.server.address)
        cls.stub = cls.STUBS.GRPCInferenceServiceStub(cls.channel)
        cls.posenc = posenc_pb2_grpc.PositionEncodingStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()
