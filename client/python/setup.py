"""Installs the posenc Python client (`pip install client/python` from a checkout).

The wire code (posenc/v1/posenc_pb2.py, posenc_pb2_grpc.py) is generated at build time from
proto/posenc/v1/posenc.proto with `protoc --python_out` and `--grpc_python_out` through
`grpc_python_plugin` (Debian: protobuf-compiler, protobuf-compiler-grpc); it is never committed.
Environment overrides: PROTOC, GRPC_PYTHON_PLUGIN (the programs), POSENC_PROTO_ROOT (the folder
holding posenc/v1/posenc.proto, default ../../proto beside this file).

There is deliberately no pyproject.toml: with setuptools and wheel installed (Debian 12's
python3-setuptools, python3-wheel) pip then builds in place without fetching build
dependencies; `--no-build-isolation` does the same on newer pips.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join("posenc", "v1", "posenc.proto")


def proto_root():
    """The folder holding posenc/v1/posenc.proto."""
    candidates = [os.environ.get("POSENC_PROTO_ROOT"), os.path.join(HERE, "..", "..", "proto")]
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, PROTO)):
            return os.path.abspath(root)
    raise RuntimeError(
        "posenc: proto/posenc/v1/posenc.proto not found; build from a checkout of the "
        "repository or set POSENC_PROTO_ROOT")


def find_program(env, name, package):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise RuntimeError(f"posenc: {name} not found (Debian: apt-get install {package}); "
                           f"or set {env}")
    return path


def generate(out_dir):
    """Writes posenc/v1/{__init__,posenc_pb2,posenc_pb2_grpc}.py under out_dir."""
    root = proto_root()
    protoc = find_program("PROTOC", "protoc", "protobuf-compiler")
    plugin = find_program("GRPC_PYTHON_PLUGIN", "grpc_python_plugin", "protobuf-compiler-grpc")
    os.makedirs(os.path.join(out_dir, "posenc", "v1"), exist_ok=True)
    subprocess.check_call([
        protoc, f"--proto_path={root}", f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}", f"--plugin=protoc-gen-grpc_python={plugin}",
        os.path.join(root, PROTO)
    ])
    with open(os.path.join(out_dir, "posenc", "v1", "__init__.py"), "w", encoding="utf-8") as f:
        f.write('"""Generated from proto/posenc/v1/posenc.proto (protoc, grpc_python_plugin)."""\n')


class BuildPyWithProto(build_py):
    """build_py, then the generated wire code into the build folder."""

    def run(self):
        super().run()
        if not self.dry_run:
            generate(self.build_lib)


setup(
    name="posenc",
    version="0.1.0",
    description="Python client of the posenc position-encoding gRPC service",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=["posenc"],
    python_requires=">=3.9",
    install_requires=["grpcio>=1.44", "protobuf>=3.20", "numpy>=1.21"],
    extras_require={"bf16": ["ml_dtypes"]},
    cmdclass={"build_py": BuildPyWithProto},
    zip_safe=False,
)
