"""The wire's enums as ``enum.IntEnum``s, built at import time from the generated descriptors.

Every top-level enum of posenc.proto is a class of the same name whose members are the wire's
values less the enum's prefix, with the wire's numbers (``RopeStyle.GPTJ == 2`` ==
``posenc_pb2.ROPE_STYLE_GPTJ``; UNSPECIFIED = 0 selects the documented default); HealthStatus is
grpc.health.v1's ServingStatus. The names come from posenc/_naming.py; nothing here spells a
value, so a value added to the .proto is a member here after the next build. Type checkers read
the generated _enums.pyi (client/python/generate.py) instead of this file.
"""

import enum
from typing import Any, Dict, Type

from ._naming import enum_members, wire_enums
from ._protos import health_pb2, posenc_pb2


def _build(name: str, descriptor: Any) -> Type[enum.IntEnum]:
    members = enum_members(descriptor)
    cls = enum.IntEnum(name, members, module=__name__, qualname=name)  # type: ignore[misc]
    cls.__doc__ = (f"``{descriptor.full_name}``: {', '.join(m for m, _ in members)} "
                   "(proto/posenc/v1/posenc.proto documents each value).")
    return cls


_ENUMS: Dict[str, Type[enum.IntEnum]] = {
    name: _build(name, descriptor)
    for name, descriptor in wire_enums(posenc_pb2, health_pb2).items()
}
globals().update(_ENUMS)
__all__ = sorted(_ENUMS)
