"""The Python names of the wire's enums, from the generated descriptors: the one rule.

posenc/_enums.py builds its IntEnums with it at import time; client/python/generate.py loads this
file by path (hence no imports of the package here) to write the matching _enums.pyi.

    RopeStyle: ROPE_STYLE_UNSPECIFIED, ROPE_STYLE_NEOX, ...   ->   UNSPECIFIED, NEOX, ...

The prefix of an enum is the name of its value 0 less "UNSPECIFIED" (posenc.proto's convention,
as proto/posenc/v1/vocabulary.h reads it in C++); an enum without one keeps its value names.
"""

from typing import Any, Dict, List, Tuple

_UNSPECIFIED = "UNSPECIFIED"


def enum_prefix(descriptor: Any) -> str:
    """"ROPE_STYLE_" for posenc.v1.RopeStyle; "" when value 0 is not *_UNSPECIFIED."""
    zero = descriptor.values_by_number.get(0)
    if zero is None or not zero.name.endswith(_UNSPECIFIED):
        return ""
    return str(zero.name[:-len(_UNSPECIFIED)])


def enum_members(descriptor: Any) -> List[Tuple[str, int]]:
    """(name less the prefix, number) of every value, in declaration order."""
    prefix = enum_prefix(descriptor)
    return [(v.name[len(prefix):] if v.name.startswith(prefix) else v.name, v.number)
            for v in descriptor.values]


def wire_enums(posenc_pb2: Any, health_pb2: Any) -> Dict[str, Any]:
    """The enums the package exposes, by Python name: every top-level enum of posenc.proto under
    its own name, and grpc.health.v1's ServingStatus as HealthStatus (the C++ client's name)."""
    enums = dict(posenc_pb2.DESCRIPTOR.enum_types_by_name)
    enums["HealthStatus"] = (
        health_pb2.HealthCheckResponse.DESCRIPTOR.enum_types_by_name["ServingStatus"])
    return enums
