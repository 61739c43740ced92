"""Generates the posenc package's wire code from proto/ (CMake and setup.py both run this).

    python3 client/python/generate.py --out DIR [--source-root ROOT] [--protoc P] [--grpc-plugin G]

writes, under DIR/posenc (nothing of it is committed):
  v1/posenc_pb2.py, .pyi, v1/posenc_pb2_grpc.py   posenc.proto (messages, stub)
  _vendored/status_pb2.py, error_details_pb2.py   proto/google/rpc (structured errors)
  _vendored/health_pb2.py, health_pb2_grpc.py     proto/grpc/health/v1 (the health stub)
  _enums.pyi                                      the wire's enums, for type checkers
  service_config.json                             client/service_config.json (the retry policy)

The vendored protos keep their upstream file names ("google/rpc/status.proto"), so that the same
descriptors registered by googleapis-common-protos or grpcio-health-checking are the same files;
posenc/_protos.py prefers those packages when they are installed. protoc's gRPC plugin imports a
service's messages by their proto path (`from grpc.health.v1 import health_pb2`), which is not
where the vendored module lives: that one import is rewritten to a relative one.

_enums.pyi lists each enum's members as posenc/_enums.py builds them at import time (names from
posenc/_naming.py, the one rule, loaded here by path), so that type checkers see the classes.
ROOT (default: the checkout holding this file) holds proto/ and client/service_config.json;
PROTOC and GRPC_PYTHON_PLUGIN name the programs when --protoc / --grpc-plugin are not given.
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

# (proto under proto/, folder under posenc/, with a gRPC stub)
PROTOS = (
    ("posenc/v1/posenc.proto", "v1", True),
    ("google/rpc/status.proto", "_vendored", False),
    ("google/rpc/error_details.proto", "_vendored", False),
    ("grpc/health/v1/health.proto", "_vendored", True),
)
PACKAGE_DOCS = {
    "v1": "posenc.v1 wire code, generated from proto/posenc/v1/posenc.proto (protoc).",
    "_vendored": "google.rpc and grpc.health.v1 wire code generated from proto/ (see "
                 "posenc/_protos.py for when it is used).",
}


def find_program(explicit: Optional[str], env: str, name: str, package: str) -> str:
    path = explicit or os.environ.get(env) or shutil.which(name)
    if not path:
        raise SystemExit(f"generate.py: {name} not found (Debian: apt-get install {package}); "
                         f"or set {env}")
    return path


def load(path: str, name: str) -> ModuleType:
    """The module in the file `path` (not added to sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_protoc(protoc: str, plugin: str, proto_root: str, out: str) -> None:
    for with_grpc in (True, False):
        protos = [os.path.join(proto_root, p) for p, _, grpc in PROTOS if grpc == with_grpc]
        command = [protoc, f"--proto_path={proto_root}", f"--python_out={out}",
                   f"--pyi_out={out}"]
        if with_grpc:
            command += [f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={plugin}"]
        subprocess.check_call(command + protos)


def place(staging: str, package: str) -> List[str]:
    """Moves the generated files into the package; returns the modules written."""
    written = []
    for proto, folder, with_grpc in PROTOS:
        stem = proto[:-len(".proto")]
        suffixes = ["_pb2.py", "_pb2.pyi"] + (["_pb2_grpc.py"] if with_grpc else [])
        target = os.path.join(package, folder)
        os.makedirs(target, exist_ok=True)
        for suffix in suffixes:
            src = os.path.join(staging, stem + suffix)
            dst = os.path.join(target, os.path.basename(stem) + suffix)
            with open(src, encoding="utf-8") as f:
                text = f.read()
            if folder == "_vendored" and suffix == "_pb2_grpc.py":
                module = stem.replace("/", ".")  # grpc.health.v1.health
                importer = f"from {module.rsplit('.', 1)[0]} import "
                if importer not in text:
                    raise SystemExit(f"generate.py: {src} does not import {importer!r}")
                text = text.replace(importer, "from . import ")
            with open(dst, "w", encoding="utf-8") as f:
                f.write(text)
            written.append(dst)
    for folder, doc in PACKAGE_DOCS.items():
        with open(os.path.join(package, folder, "__init__.py"), "w", encoding="utf-8") as f:
            f.write(f'"""{doc}"""\n')
    return written


def enums_stub(package: str) -> str:
    """The text of _enums.pyi: every enum posenc/_enums.py builds, with its members."""
    naming = load(os.path.join(HERE, "posenc", "_naming.py"), "_posenc_naming")
    posenc_pb2 = load(os.path.join(package, "v1", "posenc_pb2.py"), "_posenc_gen_pb2")
    health_pb2 = load(os.path.join(package, "_vendored", "health_pb2.py"), "_posenc_gen_health")
    enums = naming.wire_enums(posenc_pb2, health_pb2)
    lines = ["# Generated by client/python/generate.py from the wire's descriptors; do not edit.",
             "import enum", "", f"__all__ = {sorted(enums)!r}", ""]
    for name, descriptor in enums.items():
        lines.append(f"class {name}(enum.IntEnum):")
        lines += [f"    {member} = {number}"
                  for member, number in naming.enum_members(descriptor)]
        lines.append("")
    return "\n".join(lines)


def generate(out: str, source_root: str = os.path.join(HERE, "..", ".."),
             protoc: Optional[str] = None, plugin: Optional[str] = None) -> None:
    proto_root = os.path.join(source_root, "proto")
    service_config = os.path.join(source_root, "client", "service_config.json")
    for path in [os.path.join(proto_root, p) for p, _, _ in PROTOS] + [service_config]:
        if not os.path.isfile(path):
            raise SystemExit(f"generate.py: {path} not found; run from a checkout of posenc or "
                             "give --source-root (POSENC_SOURCE_ROOT for setup.py)")
    protoc = find_program(protoc, "PROTOC", "protoc", "protobuf-compiler")
    plugin = find_program(plugin, "GRPC_PYTHON_PLUGIN", "grpc_python_plugin",
                          "protobuf-compiler-grpc")
    package = os.path.join(out, "posenc")
    with tempfile.TemporaryDirectory() as staging:
        run_protoc(protoc, plugin, proto_root, staging)
        place(staging, package)
    with open(os.path.join(package, "_enums.pyi"), "w", encoding="utf-8") as f:
        f.write(enums_stub(package))
    shutil.copyfile(service_config, os.path.join(package, "service_config.json"))


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, help="folder that gets posenc/...")
    parser.add_argument("--source-root", default=os.path.join(HERE, "..", ".."))
    parser.add_argument("--protoc")
    parser.add_argument("--grpc-plugin")
    args = parser.parse_args(argv)
    generate(args.out, args.source_root, args.protoc, args.grpc_plugin)


if __name__ == "__main__":
    main(sys.argv[1:])
