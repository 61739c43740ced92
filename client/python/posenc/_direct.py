"""Direct tensors (pure): requests and responses whose tensors' bytes bypass protobuf's Python
messages (issue #20 item 2).

protobuf's Python API takes a ``bytes`` field only as ``bytes``: sending an array through a
message costs ``tobytes``, the assignment to ``Tensor.data`` and ``SerializeToString`` (three
copies), and reading one back ``FromString``, ``.data`` and the result's copy. Here instead:

- :class:`WireMessage` is a message (every field but the tensors' bytes, set as usual through
  the generated class) with the bytes of some of its top-level ``posenc.v1.Tensor`` fields held
  as arrays beside it. :func:`encode` writes the protobuf wire format of the whole message: the
  message without those fields by ``SerializeToString``, then each tensor field as one
  length-delimited field whose body is the tensor's small fields (``SerializeToString`` of the
  tensor without data) followed by its ``data`` field, the array's bytes taken from its buffer
  (a strided view, such as a split piece's heads, block by block). One ``bytes.join``: the
  arrays' bytes are copied once. Protobuf parsers accept fields in any
  order, so this parses to the same message as the plain serialization (tests/python/
  test_direct.py checks it for every op).
- :func:`decode` scans the top-level fields of a response: for every non-repeated
  ``posenc.v1.Tensor`` field it finds the ``data`` field inside and keeps a read-only numpy
  view of those bytes of the received buffer (no copy); everything else (the tensors' dtype,
  shape and shared-memory reference, the other fields) is parsed by the generated class from
  the remaining bytes. A field the scan does not expect (a tensor field or its data given twice,
  which protobuf merges; groups) falls back to the generated class's parse of the whole buffer;
  bytes that parse neither way give :class:`Malformed`, which the transport raises as INTERNAL
  naming the method and what is wrong.

The field numbers come from the descriptors (``Tensor.data``, the messages' Tensor fields).
A :class:`WireMessage` and a :class:`WireTensor` stand in for the message and its tensor
fields wherever the client reads them (attributes, ``HasField``, ``ByteSize``); ``.data`` is a
memoryview of the array's bytes.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple, Type, Union

import numpy as np
from google.protobuf.message import DecodeError

from ._enums import DType
from ._protos import is_repeated
from ._protos import posenc_pb2 as pb
from ._tensor import describe_tensor, fill_tensor

__all__ = ["WireMessage", "WireTensor", "Malformed", "encode", "encode_parts", "decode",
           "message_of", "like", "copied", "put_tensor", "tensor_fields", "DIRECT_MIN_BYTES"]

# Below this many bytes a tensor goes through the message and a response is parsed by protobuf
# alone: for small tensors the copies saved cost less than the scan and the join (a tiny ApplyRope
# from Python: 640 -> 430 us per call), as the C++ client references only fields from 64 KiB on.
DIRECT_MIN_BYTES = 64 << 10

_TENSOR = pb.Tensor.DESCRIPTOR
_DATA = _TENSOR.fields_by_name["data"].number
_LENGTH_DELIMITED = 2
_LITTLE = sys.byteorder == "little"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _key(number: int) -> bytes:
    return _varint(number << 3 | _LENGTH_DELIMITED)


_FIELDS: Dict[Any, Dict[str, int]] = {}


def tensor_fields(descriptor: Any) -> Dict[str, int]:
    """The non-repeated ``posenc.v1.Tensor`` fields of a message type: name -> field number."""
    found = _FIELDS.get(descriptor)
    if found is None:
        found = {fd.name: fd.number for fd in descriptor.fields
                 if fd.message_type is _TENSOR and not is_repeated(fd)}
        _FIELDS[descriptor] = found
    return found


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The bytes of an array in C order as a flat uint8 array (a view when it is C-contiguous)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def runs(array: np.ndarray) -> Optional[List[Any]]:
    """The array's own memory as parts whose concatenation is its bytes in C order, writable
    where the array is: one buffer for a C-contiguous array; for a strided view (such as a split
    piece's heads) one strided part ``(buffer, block, shape, strides)``, the runs of ``block``
    contiguous bytes at ``buffer[sum(i[a] * strides[a])]`` for every index ``i`` of ``shape`` in
    C order (posenc._wirecall takes it apart, without a Python object per run). None when a
    stride is negative or not a multiple of the item size."""
    if array.flags.c_contiguous:
        return [array.reshape(-1).view(np.uint8).data] if array.nbytes else []
    block, axes = array.itemsize, array.ndim
    while axes > 0 and (array.shape[axes - 1] == 1 or array.strides[axes - 1] == block):
        block *= array.shape[axes - 1]
        axes -= 1
    shape, strides = array.shape[:axes], array.strides[:axes]
    if any(s < 0 or s % array.itemsize for s in strides):
        return None
    if 0 in array.shape:
        return []
    # The bytes from the first run's start to the last run's end, as one flat view.
    extent = sum((n - 1) * s for n, s in zip(shape, strides)) + block
    flat = np.lib.stride_tricks.as_strided(array, shape=(extent // array.itemsize,),
                                           strides=(array.itemsize,),
                                           writeable=array.flags.writeable)
    return [(flat.view(np.uint8).data, block, tuple(shape), tuple(strides))]


def _chunks(array: np.ndarray, strided: bool) -> List[Any]:
    """Buffers whose concatenation is the array's bytes in C order: its own memory (runs; a
    strided part only when ``strided``), or a contiguous copy of it."""
    if array.flags.c_contiguous or strided:
        found = runs(array)
        if found is not None:
            return found
    return [_bytes_of(array).data]


class WireTensor:
    """A ``posenc.v1.Tensor`` field of a :class:`WireMessage`: its small fields from the message,
    ``data`` from the array (a read-only memoryview of its bytes), ``array`` the array itself."""

    __slots__ = ("message", "array", "owned")

    def __init__(self, message: Any, array: np.ndarray, owned: bool = False):
        self.message = message
        self.array = array
        self.owned = owned  # a result array the client made (to_numpy returns it uncopied)

    @property
    def data(self) -> memoryview:
        return _bytes_of(self.array).data.toreadonly()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)


class WireMessage:
    """A message with the bytes of some Tensor fields held as arrays (see the module)."""

    __slots__ = ("message", "arrays", "owned")

    def __init__(self, message: Any, arrays: Optional[Mapping[str, np.ndarray]] = None):
        self.message = message
        self.arrays: Dict[str, np.ndarray] = dict(arrays or {})
        self.owned: Set[str] = set()

    def put(self, name: str, array: np.ndarray, owned: bool = False) -> None:
        """Holds ``array`` (the wire's dtype and byte order, any strides: its bytes go in C
        order) as the bytes of tensor field ``name``, whose dtype and shape the message has
        already; ``owned``: a result the client made, which the caller may get without a
        copy."""
        if name not in tensor_fields(self.message.DESCRIPTOR):
            raise KeyError(f"{self.message.DESCRIPTOR.full_name} has no Tensor field {name!r}")
        if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and not _LITTLE):
            raise ValueError(f"{name}: the array must be little-endian, got {array.dtype}")
        getattr(self.message, name).SetInParent()
        self.arrays[name] = array
        if owned:
            self.owned.add(name)
        else:
            self.owned.discard(name)

    def __getattr__(self, name: str) -> Any:
        arrays = object.__getattribute__(self, "arrays")
        message = object.__getattribute__(self, "message")
        if name in arrays:
            owned = name in object.__getattribute__(self, "owned")
            return WireTensor(getattr(message, name), arrays[name], owned)
        return getattr(message, name)

    def HasField(self, name: str) -> bool:  # noqa: N802 - protobuf's name
        return name in self.arrays or self.message.HasField(name)

    def ByteSize(self) -> int:  # noqa: N802 - protobuf's name
        """The size of the plain serialization (and of :func:`encode`'s)."""
        size = self.message.ByteSize()
        for name, array in self.arrays.items():
            small = getattr(self.message, name).ByteSize()
            whole = small + _data_header_size(array.nbytes) + array.nbytes
            size += _varint_size(whole) + whole - _varint_size(small) - small
        return size

    def SerializeToString(self) -> bytes:  # noqa: N802 - protobuf's name
        return encode(self)

    def copy(self) -> "WireMessage":
        """A copy of the message (its arrays shared, not copied)."""
        message = type(self.message)()
        message.CopyFrom(self.message)
        copied = WireMessage(message, self.arrays)
        copied.owned = set(self.owned)
        return copied

    def __repr__(self) -> str:
        held = ", ".join(f"{n}: {a.nbytes} bytes" for n, a in self.arrays.items())
        return f"WireMessage({type(self.message).__name__}, {{{held}}})"


def message_of(value: Any) -> Any:
    """The generated message of a WireMessage (without the held bytes), or ``value`` itself."""
    return value.message if isinstance(value, WireMessage) else value


def like(model: Any, message: Any) -> Any:
    """``message`` as a WireMessage when ``model`` is one (a split's pieces and joins take the
    form of the request and responses they come from), else as it is."""
    return WireMessage(message) if isinstance(model, WireMessage) else message


def copied(value: Any) -> Any:
    """A copy of a message or WireMessage (a WireMessage's arrays are shared)."""
    if isinstance(value, WireMessage):
        return value.copy()
    out = type(value)()
    out.CopyFrom(value)
    return out


def put_tensor(target: Any, name: str, dtype: DType, array: np.ndarray,
               owned: bool = False) -> None:
    """Tensor field ``name`` of ``target`` = ``array`` (in ``dtype``'s numpy type): held by a
    WireMessage (``owned``: made by the client, see WireMessage.put), else written into the
    message's bytes (fill_tensor)."""
    if isinstance(target, WireMessage):
        target.put(name, describe_tensor(getattr(target.message, name), dtype, array,
                                         contiguous=False), owned)
    else:
        fill_tensor(getattr(target, name), dtype, array)


def _data_header_size(nbytes: int) -> int:
    return len(_key(_DATA)) + _varint_size(nbytes) if nbytes else 0


def encode(value: Any) -> bytes:
    """The protobuf wire format of a WireMessage (or of a plain message: SerializeToString)."""
    return b"".join(encode_parts(value))


def encode_parts(value: Any, strided: bool = False) -> List[Any]:
    """:func:`encode`'s bytes as buffers to be joined in order: the arrays' bytes are their own
    memory, not copied (the native transport sends them from there; with ``strided``, a strided
    array is one strided part, see :func:`runs`; else it is copied contiguous)."""
    if not isinstance(value, WireMessage):
        return [value.SerializeToString()]
    message = value.message
    if not value.arrays:
        return [message.SerializeToString()]
    rest = type(message)()
    rest.CopyFrom(message)
    numbers = tensor_fields(message.DESCRIPTOR)
    parts: List[Any] = []
    for name in value.arrays:
        rest.ClearField(name)
    parts.append(rest.SerializeToString())
    for name, array in value.arrays.items():
        tensor = getattr(message, name)
        if tensor.data:
            raise ValueError(f"{name}: the message holds bytes too")
        small = tensor.SerializeToString()
        n = array.nbytes
        header = _key(_DATA) + _varint(n) if n else b""
        parts.append(_key(numbers[name]) + _varint(len(small) + len(header) + n) + small + header)
        parts.extend(_chunks(array, strided))
    return parts


# ---------------------------------------------------------------------------------------------
# Decoding.
# ---------------------------------------------------------------------------------------------
class Malformed:
    """A response that does not parse: ``reason`` says why (the transport raises it)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Malformed({self.reason!r})"


class _ScanError(Exception):
    """The scan cannot read the bytes (truncated, a wire type it does not take)."""


class _Merged(Exception):
    """A field the scan keeps once appears twice (protobuf merges: the generated class parses)."""


def _read_varint(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _ScanError(f"a varint is cut off at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _ScanError(f"a varint at byte {pos} is longer than 10 bytes")


def _skip(buf: bytes, number: int, wire_type: int, pos: int, end: int) -> Tuple[int, int]:
    """The end of field ``number``'s value at ``pos`` and, when it is length-delimited, the
    start of its body (else -1)."""
    if wire_type == 0:
        return _read_varint(buf, pos, end)[1], -1
    sizes = {1: 8, 5: 4}
    if wire_type in sizes:
        stop, start = pos + sizes[wire_type], -1
    elif wire_type == _LENGTH_DELIMITED:
        n, start = _read_varint(buf, pos, end)
        stop = start + n
    else:
        raise _ScanError(f"field {number} has wire type {wire_type}, which posenc never sends")
    if stop > end:
        raise _ScanError(f"field {number} needs {stop - pos} bytes at byte {pos}, "
                         f"{end - pos} are left")
    return stop, start


def _fields(buf: bytes, pos: int, end: int):  # type: ignore[no-untyped-def]
    """(number, wire type, field start, value start, body start or -1, end) of each field."""
    while pos < end:
        first = pos
        key, pos = _read_varint(buf, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise _ScanError(f"field number 0 at byte {first}")
        stop, body = _skip(buf, number, wire_type, pos, end)
        yield number, wire_type, first, pos, body, stop
        pos = stop


def _split_tensor(buf: bytes, start: int, end: int) -> Tuple[bytes, int, int]:
    """A Tensor body: its bytes without the data field, and the data's start and length."""
    kept: List[bytes] = []
    data = (start, 0)
    seen = False
    for number, wire_type, first, _, body, stop in _fields(buf, start, end):
        if number == _DATA and wire_type == _LENGTH_DELIMITED:
            if seen:
                raise _Merged()
            seen, data = True, (body, stop - body)
        else:
            kept.append(buf[first:stop])
    return b"".join(kept), data[0], data[1]


def _scan(buf: bytes, cls: Type[Any]) -> WireMessage:
    numbers = {number: name for name, number in tensor_fields(cls.DESCRIPTOR).items()}
    rest: List[bytes] = []
    views: Dict[str, np.ndarray] = {}
    for number, wire_type, first, value, body, stop in _fields(buf, 0, len(buf)):
        name = numbers.get(number)
        if name is None or wire_type != _LENGTH_DELIMITED:
            rest.append(buf[first:stop])
            continue
        if name in views:
            raise _Merged()
        small, data, n = _split_tensor(buf, body, stop)
        rest.append(buf[first:value] + _varint(len(small)) + small)
        views[name] = np.frombuffer(buf, np.uint8, count=n, offset=data) if n else (
            np.frombuffer(b"", np.uint8))
    return WireMessage(cls.FromString(b"".join(rest)), views)


def decode(buf: Union[bytes, bytearray, memoryview], cls: Type[Any], scan_from: int = 0,
           owned: bool = False) -> Any:
    """A response of type ``cls`` from its wire bytes: a WireMessage whose Tensor fields' bytes
    are views of ``buf`` (see the module), or :class:`Malformed`. Responses under ``scan_from``
    bytes are parsed by protobuf alone (the client's transport: DIRECT_MIN_BYTES). ``owned``: a
    bytearray no one else holds (the native transport's), whose writable views the caller may
    get as results without a copy."""
    data = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    scan_error: Optional[Exception] = None
    if len(data) >= scan_from:
        try:
            message = _scan(data, cls)
            if owned and isinstance(data, bytearray):
                message.owned = set(message.arrays)
            return message
        except (_ScanError, DecodeError) as e:
            scan_error = e
        except _Merged:
            scan_error = _Merged()
    try:
        return WireMessage(cls.FromString(bytes(data)))
    except DecodeError as e:
        reason = str(scan_error) if isinstance(scan_error, _ScanError) else (
            str(e) or "protobuf could not parse it")
        return Malformed(f"{len(data)} bytes that are not a {cls.DESCRIPTOR.full_name}: {reason}")
