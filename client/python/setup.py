"""Builds the posenc Python client (`pip wheel` / `pip install client/python` from a checkout).

The wire code (posenc/v1, posenc/_vendored), posenc/_enums.pyi and posenc/service_config.json are
generated at build time by generate.py beside this file, as the CMake build does: `protoc
--python_out --pyi_out` and `--grpc_python_out` through `grpc_python_plugin` (Debian:
protobuf-compiler, protobuf-compiler-grpc) and the protobuf module; nothing generated is
committed. Environment overrides: PROTOC, GRPC_PYTHON_PLUGIN (the programs), POSENC_SOURCE_ROOT
(the checkout holding proto/ and client/service_config.json, default ../.. beside this file).

posenc._wirecall, the native transport of the calls carrying tensors (native/wirecall.cc), is
built where Python's headers (Debian: python3-dev) and gRPC++'s (libgrpc++-dev, found through
pkg-config) are installed; where they are not, or it does not compile, the package is installed
without it and the client uses gRPC Python alone (posenc.NATIVE_TRANSPORT says which).

There is deliberately no pyproject.toml: with setuptools and wheel installed (Debian 12's
python3-setuptools, python3-wheel) pip then builds in place without fetching build
dependencies; `--no-build-isolation` does the same on newer pips. CI builds the wheel with
`python3 -m pip wheel --no-deps --no-build-isolation client/python -w DIR`.
"""

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate  # noqa: E402  (beside this file)


class BuildPyWithProto(build_py):
    """build_py, then the generated wire code into the build folder."""

    def run(self):
        super().run()
        if not self.dry_run:
            root = os.environ.get("POSENC_SOURCE_ROOT") or os.path.join(HERE, "..", "..")
            generate.generate(self.build_lib, os.path.abspath(root))


def native_extensions():
    """posenc._wirecall, where pkg-config knows gRPC++ (else none)."""
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++"], check=True,
                               capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        print("posenc: pkg-config finds no grpc++: building without posenc._wirecall")
        return []
    root = os.environ.get("POSENC_SOURCE_ROOT") or os.path.join(HERE, "..", "..")
    args = shlex.split(flags)
    return [Extension(
        "posenc._wirecall", sources=[os.path.join("native", "wirecall.cc")],
        include_dirs=[os.path.abspath(root)] + [a[2:] for a in args if a.startswith("-I")],
        library_dirs=[a[2:] for a in args if a.startswith("-L")],
        libraries=[a[2:] for a in args if a.startswith("-l")],
        extra_compile_args=["-std=c++17"] + [a for a in args if a.startswith("-D")],
        language="c++", optional=True)]


with open(os.path.join(HERE, "README.md"), encoding="utf-8") as readme:
    long_description = readme.read()

setup(
    name="posenc",
    version="0.1.0",
    description="Python client of the posenc position-encoding gRPC service",
    long_description=long_description,
    long_description_content_type="text/markdown",
    packages=["posenc"],
    package_data={"posenc": ["py.typed"]},
    python_requires=">=3.9",
    install_requires=["grpcio>=1.44", "protobuf>=3.20", "numpy>=1.21"],
    extras_require={"bf16": ["ml_dtypes"]},
    ext_modules=native_extensions(),
    cmdclass={"build_py": BuildPyWithProto},
    zip_safe=False,
)
