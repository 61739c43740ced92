"""The generated wire code the client uses, imported in one place.

posenc.v1 (posenc_pb2, posenc_pb2_grpc) is generated from proto/posenc/v1/posenc.proto at build
time (client/python/generate.py). google.rpc (status_pb2, error_details_pb2: the structured
errors of the grpc-status-details-bin trailer) and grpc.health.v1 (health_pb2, health_pb2_grpc)
come from their upstream packages when those are installed (googleapis-common-protos,
grpcio-health-checking) and otherwise from the copies generated from proto/ (posenc._vendored):
protobuf's default descriptor pool refuses a second, different file defining the same message
names, so posenc never registers its copy beside an installed upstream one.
"""

import importlib
from types import ModuleType
from typing import Any, Tuple

from .v1 import posenc_pb2, posenc_pb2_grpc

__all__ = ["posenc_pb2", "posenc_pb2_grpc", "status_pb2", "error_details_pb2", "health_pb2",
           "health_pb2_grpc", "is_repeated"]


def _upstream_or_vendored(upstream: str, *modules: str) -> Tuple[ModuleType, ...]:
    """`modules` of the package `upstream` when it has them all, else of posenc._vendored."""
    try:
        return tuple(importlib.import_module(f"{upstream}.{m}") for m in modules)
    except ImportError:
        return tuple(importlib.import_module(f"{__package__}._vendored.{m}") for m in modules)


status_pb2, error_details_pb2 = _upstream_or_vendored("google.rpc", "status_pb2",
                                                      "error_details_pb2")
health_pb2, health_pb2_grpc = _upstream_or_vendored("grpc_health.v1", "health_pb2",
                                                    "health_pb2_grpc")


def is_repeated(fd: Any) -> bool:
    """Whether a field is repeated: ``is_repeated`` on protobuf 5.29 and later (a method on the
    pure-Python descriptors, a property on upb's, which have no ``label`` since 6.x), ``label`` on
    the older runtimes (Debian 12's 3.21)."""
    repeated = getattr(fd, "is_repeated", None)
    if callable(repeated):
        repeated = repeated()
    if repeated is not None:
        return bool(repeated)
    return bool(fd.label == fd.LABEL_REPEATED)
