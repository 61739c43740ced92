"""Wire conversion (pure): the client's value types <-> posenc.v1 messages.

The dataclasses of posenc/_types.py that mirror a message field for field (RopeConfig,
RopeScaling, SinusoidalParams, RopeDerived, RopeLayerGroup, ...) are converted by their field
names through the message descriptors (to_message, from_message): a field of the mirror that the
message lacks fails here, and tests/python/test_client.py checks that every mirror has exactly
its message's fields. Positions, tables and ServerInfo, which differ in shape from their
messages, are converted by hand below.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
import typing
from typing import Any, Dict, Mapping, Optional, Type, TypeVar

import numpy as np

from . import _enums
from ._errors import local_error
from ._protos import is_repeated as _repeated
from ._protos import posenc_pb2 as pb
from ._tensor import set_float_tensor, set_int_tensor
from ._types import (BackendInfo, DeviceInfo, Positions, ServerInfo, TableInfo, VisionSpan,
                     enum_or_int, parse_enum)

__all__ = ["to_message", "from_message", "set_enum", "set_positions", "set_sequences",
           "set_table", "server_info", "uses_shared_memory"]

T = TypeVar("T")


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    """The resolved field types of a dataclass (kept: resolving reads the module's names)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _dataclass_in(hint: Any) -> Optional[type]:
    """The dataclass a field's type names (RopeScaling in Union[None, RopeScaling, Mapping])."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint
    for arg in typing.get_args(hint):
        found = _dataclass_in(arg)
        if found is not None:
            return found
    return None


def _scalar(fd: Any, value: Any, path: str) -> Any:
    """A Python value as the wire type of the (non-message) field ``fd``."""
    cpp = fd.cpp_type
    if fd.enum_type is not None:
        return parse_enum(getattr(_enums, fd.enum_type.name), value, path)
    if cpp == fd.CPPTYPE_BOOL:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise local_error(path, f"expected true or false, got {value!r}")
    if cpp in (fd.CPPTYPE_INT32, fd.CPPTYPE_INT64, fd.CPPTYPE_UINT32, fd.CPPTYPE_UINT64):
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        raise local_error(path, f"expected an integer, got {value!r}")
    if cpp in (fd.CPPTYPE_DOUBLE, fd.CPPTYPE_FLOAT):
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            return float(value)
        raise local_error(path, f"expected a number, got {value!r}")
    if isinstance(value, str):
        return value
    raise local_error(path, f"expected a string, got {value!r}")


class _Field(typing.NamedTuple):
    """How to_message writes and from_message reads one field of a dataclass (worked out once
    per class and message type)."""
    name: str
    fd: Any  # the field's descriptor
    nested: Optional[type]  # the dataclass of a message field
    enum_cls: Any  # the enum of an enum field
    repeated: bool
    array: bool  # np.ndarray of float64
    as_list: bool  # List (else a tuple)
    message: bool
    has_presence: bool  # a message or oneof member: unset reads as None (or the default)
    optional: bool


_PLANS: Dict[Any, Any] = {}


def _plan(cls: type, descriptor: Any) -> Any:
    key = (cls, descriptor)
    if key not in _PLANS:
        hints = _hints(cls)
        fields = []
        for f in dataclasses.fields(cls):
            fd = descriptor.fields_by_name[f.name]
            hint = hints[f.name]
            fields.append(_Field(
                f.name, fd, _dataclass_in(hint) if fd.message_type is not None else None,
                getattr(_enums, fd.enum_type.name) if fd.enum_type is not None else None,
                _repeated(fd), hint is np.ndarray, typing.get_origin(hint) is list,
                fd.message_type is not None,
                fd.message_type is not None or fd.containing_oneof is not None, _optional(hint)))
        _PLANS[key] = tuple(fields)
    return _PLANS[key]


def to_message(value: Any, msg: Any, path: str) -> None:
    """Writes the dataclass ``value`` into ``msg`` field by field: None leaves a field unset
    (a proto3 ``optional`` field's default), enum fields take members, names or numbers, a
    nested mirror may be given as a dict (its class's ``from_dict``). ``path`` names the message
    in errors ("config": "config.scaling.factor: expected a number, got 'x'")."""
    for field in _plan(type(value), msg.DESCRIPTOR):
        name, fd, cls = field.name, field.fd, field.nested
        item = getattr(value, name)
        if item is None:
            continue
        where = f"{path}.{name}" if path else name
        if field.repeated:
            if isinstance(item, (str, bytes)):
                raise local_error(where, f"expected a sequence, got {item!r}")
            getattr(msg, name).extend(_scalar(fd, v, where) for v in item)
        elif field.message:
            if isinstance(item, Mapping) and cls is not None and hasattr(cls, "from_dict"):
                item = cls.from_dict(item)
            if not dataclasses.is_dataclass(item):
                raise local_error(where, f"expected a {fd.message_type.name}, got {item!r}")
            nested = getattr(msg, name)
            to_message(item, nested, where)
            nested.SetInParent()
        else:
            setattr(msg, name, _scalar(fd, item, where))


def from_message(msg: Any, cls: Type[T]) -> T:
    """The dataclass ``cls`` of a message with the same field names: unset optional fields and
    absent messages become None, enums their members (a number this build does not know stays
    an int), repeated fields tuples (lists where the dataclass says List, float64 arrays where
    it says np.ndarray)."""
    values: Dict[str, Any] = {}
    for f in _plan(cls, msg.DESCRIPTOR):
        raw = getattr(msg, f.name)

        def one(v: Any, f: _Field = f) -> Any:
            if f.nested is not None:
                return from_message(v, f.nested)
            if f.enum_cls is not None:
                return enum_or_int(f.enum_cls, v)
            return v

        if f.repeated:
            # Plain numbers (inv_freq: one per frequency) go over in one step, not one by one.
            plain = f.nested is None and f.enum_cls is None
            if f.array:
                values[f.name] = (np.fromiter(raw, dtype=np.float64, count=len(raw)) if plain
                                  else np.array([one(v) for v in raw], dtype=np.float64))
                continue
            items = list(raw) if plain else [one(v) for v in raw]
            values[f.name] = items if f.as_list else tuple(items)
        elif f.has_presence and not msg.HasField(f.name):
            values[f.name] = None if f.message or f.optional else one(raw)
        else:
            values[f.name] = one(raw)
    return cls(**values)


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


# ---------------------------------------------------------------------------------------------
# The messages that differ from their Python values.
# ---------------------------------------------------------------------------------------------
def set_enum(msg: Any, field: str, cls: Type[enum.IntEnum], value: Any) -> None:
    """``msg.<field>`` = the wire number of an enum argument (parse_enum), the field named in
    errors."""
    setattr(msg, field, parse_enum(cls, value, field))


def set_positions(request: Any, value: Any) -> None:
    """``request.positions`` from a positions argument (see Positions.coerce); the default
    leaves the field absent (the op's default)."""
    p = Positions.coerce(value)
    if p.kind == "default":
        return
    msg = request.positions
    if p.kind == "range":
        msg.range.start = p.start
        msg.range.count = p.count
    elif p.kind == "offsets":
        msg.offsets.offsets.extend(p.seq_offsets)
        msg.offsets.SetInParent()
    elif p.kind == "ids":
        set_int_tensor(msg.ids, p.array, "positions.ids")
    elif p.kind == "cu_seqlens":
        msg.cu_seqlens.cu_seqlens.extend(p.seq_bounds)
        msg.cu_seqlens.offsets.extend(p.seq_offsets)
        msg.cu_seqlens.SetInParent()
    elif p.kind == "attention_mask":
        set_int_tensor(msg.attention_mask, p.array, "positions.attention_mask")
    else:
        raise local_error("positions", f"unknown kind {p.kind!r}")
    request.positions.SetInParent()


def set_sequences(request: Any, sequences: Any) -> None:
    """``request.sequences`` from spans, one list per sequence: ``("text", n)``,
    ``("image", t, h, w)``, ``("video", t, h, w[, second_per_grid])`` or the same as dicts
    (``{"text": n}``, ``{"image": VisionSpan | (t, h, w) | dict}``, ``{"video": ...}``)."""
    for b, spans in enumerate(sequences):
        seq = request.sequences.add()
        for i, span in enumerate(spans):
            where = f"sequences[{b}].spans[{i}]"
            if isinstance(span, Mapping):
                if len(span) != 1:
                    raise local_error(where, f"expected one of text, image, video, got {span!r}")
                kind, value = next(iter(span.items()))
                value = value if isinstance(value, (Mapping, VisionSpan)) else (
                    value if kind == "text" else tuple(value))
            elif isinstance(span, (tuple, list)) and span:
                kind, value = span[0], (span[1] if span[0] == "text" else tuple(span[1:]))
            else:
                raise local_error(where, f"expected a (kind, ...) tuple or a dict, got {span!r}")
            _set_span(seq.spans.add(), kind, value, where)


def _set_span(msg: Any, kind: Any, value: Any, where: str) -> None:
    if kind == "text":
        msg.text_tokens = _scalar(msg.DESCRIPTOR.fields_by_name["text_tokens"], value,
                                  f"{where}.text_tokens")
        return
    if kind not in ("image", "video"):
        raise local_error(where, f"expected kind text, image or video, got {kind!r}")
    if isinstance(value, Mapping):
        value = VisionSpan(**value)
    elif not isinstance(value, VisionSpan):
        if len(value) not in (3, 4):
            raise local_error(f"{where}.{kind}",
                              f"expected (t, h, w[, second_per_grid]), got {value!r}")
        value = VisionSpan(*value)
    to_message(value, getattr(msg, kind), f"{where}.{kind}")
    getattr(msg, kind).SetInParent()


def set_table(msg: Any, table: Any, path: str = "") -> None:
    """A ``table`` oneof (table_inline / table_name): a name (str) or a float array."""
    if table is None:
        return
    if isinstance(table, str):
        msg.table_name = table
    else:
        set_float_tensor(msg.table_inline, table, f"{path}table_inline")


def server_info(r: pb.GetServerInfoResponse) -> ServerInfo:
    """GetServerInfo's response, its limits flattened as in the C++ client's ServerInfo."""
    return ServerInfo(
        version=r.version, build=r.build,
        backends=[from_message(b, BackendInfo) for b in r.backends],
        max_message_bytes=r.limits.max_message_bytes,
        max_output_elements=r.limits.max_output_elements,
        tables=[from_message(t, TableInfo) for t in r.tables],
        max_inflight_bytes=r.limits.max_inflight_bytes,
        max_heavy_calls=r.limits.max_heavy_calls,
        shared_memory_allowed=r.limits.shared_memory_allowed,
        max_shared_memory_regions=r.limits.max_shared_memory_regions,
        max_shared_memory_bytes=r.limits.max_shared_memory_bytes, cuda_built_in=r.cuda_built_in,
        devices=[from_message(d, DeviceInfo) for d in r.devices])


def uses_shared_memory(msg: Any) -> bool:
    """Whether a request places an output in shared memory or refers to shared memory for any
    tensor (positions and tables included): such a request is sent whole (never split, never
    fetched in a compact form)."""
    fields = msg.DESCRIPTOR.fields_by_name
    if "output_shared_memory" in fields and len(msg.output_shared_memory):
        return True
    for fd, value in msg.ListFields():
        if fd.message_type is None or _repeated(fd):
            continue
        if fd.message_type.full_name == "posenc.v1.Tensor":
            if value.HasField("shared_memory"):
                return True
        elif uses_shared_memory(value):
            return True
    return False
