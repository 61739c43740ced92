"""Arrays <-> posenc.v1.Tensor, bfloat16 helpers and the local expansion of compact biases.

The wire carries tensors as raw little-endian, row-major bytes with a dtype and a shape. Float
tensors map to numpy float16 / float32 / float64; BFLOAT16 maps to ``ml_dtypes.bfloat16`` when
that package can be imported, else to ``uint16`` arrays holding the bfloat16 bit patterns (the
upper half of a binary32): :func:`bf16_to_float32` and :func:`float32_to_bf16` convert them.

Inputs may also be torch tensors (bfloat16 included; seen through ``Tensor.numpy()`` without a
copy on the CPU) or any object with ``__dlpack__`` (``numpy.from_dlpack``), or
:class:`posenc.SharedMemoryRef` (the tensor's bytes in shared memory). Every conversion takes
whole buffers (``tobytes``, ``numpy.frombuffer``, views): no loop ever runs over elements.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, Optional, Tuple, Union

import grpc
import numpy as np

from ._enums import AlibiMode, DType, FutureMode
from ._errors import InternalError, local_error
from ._types import SharedMemoryRef, enum_or_int, parse_enum

try:  # optional: a real bfloat16 numpy dtype
    import ml_dtypes as _ml_dtypes

    BFLOAT16_DTYPE: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the machine
    BFLOAT16_DTYPE = None

__all__ = [
    "HAVE_ML_DTYPES",
    "BFLOAT16_DTYPE",
    "bf16_to_float32",
    "float32_to_bf16",
    "expand_toeplitz",
    "expand_bloom_rows",
    "expand_compact_alibi",
    "is_torch",
    "host_array",
    "to_torch",
]

#: True when ``ml_dtypes`` is importable and BFLOAT16 results are ``ml_dtypes.bfloat16`` arrays.
HAVE_ML_DTYPES = BFLOAT16_DTYPE is not None

# Little-endian numpy codes of the wire dtypes (BFLOAT16: its bit patterns). Every specified
# DType has one (tests/python/test_client.py checks it).
WIRE_NUMPY: Dict[DType, np.dtype] = {
    DType.FLOAT32: np.dtype("<f4"),
    DType.FLOAT16: np.dtype("<f2"),
    DType.BFLOAT16: np.dtype("<u2"),
    DType.FLOAT64: np.dtype("<f8"),
    DType.INT32: np.dtype("<i4"),
    DType.INT64: np.dtype("<i8"),
}
FLOAT_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64)

# Short spellings of dtype arguments besides the wire's names (as the C++ client's ParseDType).
_SHORT_NAMES = {
    "f32": DType.FLOAT32, "fp32": DType.FLOAT32, "float": DType.FLOAT32,
    "f16": DType.FLOAT16, "fp16": DType.FLOAT16, "half": DType.FLOAT16,
    "bf16": DType.BFLOAT16, "f64": DType.FLOAT64, "fp64": DType.FLOAT64,
    "double": DType.FLOAT64, "i32": DType.INT32, "i64": DType.INT64,
}

DTypeLike = Union[None, str, DType, np.dtype, type]


def parse_dtype(value: DTypeLike, field: str = "dtype") -> Optional[DType]:
    """The wire dtype of a dtype argument; None for None (the server's default, FLOAT32).

    Accepts a :class:`DType`, a name (``"float32"``, ``"DTYPE_FLOAT16"``, ``"fp16"``,
    ``"bf16"``, ...), or anything ``numpy.dtype()`` takes (``np.float16``, ``"f4"``,
    ``ml_dtypes.bfloat16``).
    """
    if value is None:
        return None
    if isinstance(value, DType):
        return None if value == DType.UNSPECIFIED else value
    if isinstance(value, str):
        short = _SHORT_NAMES.get(value.strip().lower())
        if short is not None:
            return short
        try:
            number = parse_enum(DType, value, field)
        except ValueError:
            number = 0
        if number:
            return DType(number)
    try:
        dt: Optional[np.dtype] = np.dtype(value)
    except TypeError:
        dt = None
    if dt is not None:
        if BFLOAT16_DTYPE is not None and dt == BFLOAT16_DTYPE:
            return DType.BFLOAT16
        for wire, code in WIRE_NUMPY.items():
            if wire != DType.BFLOAT16 and dt == code.newbyteorder("="):
                return wire
    raise local_error(field, f"unknown dtype {value!r} (float32, float16, bfloat16, float64)")


def float_output_dtype(value: DTypeLike, field: str = "output_dtype") -> Optional[DType]:
    """parse_dtype for an output dtype: a float dtype or None."""
    dtype = parse_dtype(value, field)
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise local_error(field, f"must be a float dtype, got {dtype.name}")
    return dtype


def itemsize(dtype: int) -> int:
    """Bytes of one element of a wire dtype number (UNSPECIFIED: FLOAT32's, the default of
    every output dtype); 0 for a number the wire does not define."""
    if dtype == DType.UNSPECIFIED:
        dtype = DType.FLOAT32
    code = WIRE_NUMPY.get(dtype)  # type: ignore[call-overload]  # an int finds its member
    return code.itemsize if code is not None else 0


# ---------------------------------------------------------------------------------------------
# bfloat16 helpers.
# ---------------------------------------------------------------------------------------------
def bf16_to_float32(bits: Any) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (a ``uint16`` array), exactly.

    Also takes an ``ml_dtypes.bfloat16`` array (its bits are read)."""
    a = np.asarray(bits)
    if BFLOAT16_DTYPE is not None and a.dtype == BFLOAT16_DTYPE:
        a = a.view(np.uint16)
    if a.dtype != np.uint16:
        raise TypeError(f"bf16_to_float32: expected uint16 bit patterns, got {a.dtype}")
    return (a.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: Any) -> np.ndarray:
    """bfloat16 bit patterns (``uint16``) of float values, rounded to nearest even.

    float64 input is rounded correctly from double (not through float32); NaN stays NaN
    (quiet), infinities and signed zeros are kept, values past the bfloat16 range give inf."""
    a = np.asarray(values)
    if a.dtype.kind in "biu":
        a = a.astype(np.float64)
    if a.dtype == np.float64:
        # Round-to-odd to float32 (then round-to-nearest-even to bfloat16 is correct rounding
        # from double): an inexact float32 with an even last bit moves one ulp towards a.
        with np.errstate(invalid="ignore", over="ignore"):
            f = a.astype(np.float32)
            inexact = (f.astype(np.float64) != a) & ~np.isnan(a)
        u = f.view(np.uint32).copy()
        fix = inexact & ((u & 1) == 0)
        away = np.abs(f.astype(np.float64)) > np.abs(a)  # rounded up in magnitude: step back
        u = np.where(fix & away, u - 1, np.where(fix, u + 1, u)).astype(np.uint32)
    else:
        u = a.astype(np.float32).view(np.uint32)
    u64 = u.astype(np.uint64)
    rounded = ((u64 + 0x7FFF + ((u64 >> 16) & 1)) >> 16).astype(np.uint16)
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(is_nan, ((u >> 16) | 0x0040).astype(np.uint16), rounded).astype(np.uint16)


# ---------------------------------------------------------------------------------------------
# torch tensors and DLPack arrays.
# ---------------------------------------------------------------------------------------------
def is_torch(value: Any) -> bool:
    """Whether ``value`` is a torch tensor (torch is never imported here: only when the caller
    has imported it can a value be one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def host_array(value: Any) -> Optional[np.ndarray]:
    """A numpy array of a torch tensor (on the CPU: the same memory; bfloat16 as its ``uint16``
    bit patterns) or of any other ``__dlpack__`` array (``numpy.from_dlpack``); None for
    anything else (numpy arrays included)."""
    if is_torch(value):
        torch = sys.modules["torch"]
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_conj():
            t = t.resolve_conj()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        return np.from_dlpack(value)
    return None


def to_torch(a: np.ndarray, dtype: int) -> Any:
    """A numpy result as a torch tensor sharing its memory: bfloat16 (``ml_dtypes.bfloat16`` or
    the ``uint16`` bit patterns of a BFLOAT16 result) becomes ``torch.bfloat16``."""
    import torch  # the caller passed torch tensors: it is imported already

    if dtype == DType.BFLOAT16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


# ---------------------------------------------------------------------------------------------
# Encoding (arrays -> wire) and decoding (wire -> numpy): whole buffers, never element by element.
# ---------------------------------------------------------------------------------------------
def float_array(value: Any, field: str) -> Tuple[DType, np.ndarray]:
    """The wire dtype and array of a float input (q, k, x, tables).

    numpy float16/float32/float64 and ``ml_dtypes.bfloat16`` arrays keep their dtype; a
    ``uint16`` array is taken as bfloat16 bit patterns. torch tensors and ``__dlpack__`` arrays
    are seen as numpy arrays (host_array; torch.bfloat16 is BFLOAT16). Lists and other
    sequences go through ``numpy.asarray`` (integers become float64). Other array dtypes are
    INVALID_ARGUMENT."""
    host = host_array(value)
    if host is not None:
        a = host
    elif isinstance(value, np.ndarray):
        a = value
    else:
        try:
            a = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise local_error(field, f"not an array: {e}") from None
        if a.dtype.kind in "biu":
            a = a.astype(np.float64)
    if BFLOAT16_DTYPE is not None and a.dtype == BFLOAT16_DTYPE:
        return DType.BFLOAT16, a.view(np.uint16)
    if a.dtype == np.uint16:
        return DType.BFLOAT16, a
    if a.dtype.kind == "f":
        sizes = {2: DType.FLOAT16, 4: DType.FLOAT32, 8: DType.FLOAT64}
        if a.dtype.itemsize in sizes:
            return sizes[a.dtype.itemsize], a
    raise local_error(field, f"dtype {a.dtype} is not a tensor float type (float16, float32, "
                      "float64, ml_dtypes.bfloat16, or uint16 bfloat16 bit patterns)")


def int_array(value: Any, field: str) -> Tuple[DType, np.ndarray]:
    """The wire dtype and array of an integer input (ids, masks): int32 stays INT32, any other
    integer or bool array becomes INT64 (torch and ``__dlpack__`` arrays as in float_array)."""
    host = host_array(value)
    a = host if host is not None else value if isinstance(value, np.ndarray) else np.asarray(value)
    if a.dtype == np.int32:
        return DType.INT32, a
    if a.dtype.kind in "bi":
        return DType.INT64, a.astype(np.int64, copy=False)
    if a.dtype.kind == "u":
        if a.size and int(a.max()) > np.iinfo(np.int64).max:
            raise local_error(field, f"value {int(a.max())} does not fit INT64")
        return DType.INT64, a.astype(np.int64)
    if a.size == 0:  # e.g. [] (numpy makes it float64)
        return DType.INT64, a.astype(np.int64)
    raise local_error(field, f"dtype {a.dtype} is not an integer type")


def describe_tensor(msg: Any, dtype: DType, a: np.ndarray, contiguous: bool = True
                    ) -> np.ndarray:
    """Sets the dtype and shape of a posenc.v1.Tensor message for ``a`` (already in ``dtype``'s
    numpy type, any byte order and strides) and returns ``a`` in the wire's byte order
    (little-endian), C-contiguous unless ``contiguous`` is False (``a`` itself when it is so
    already)."""
    msg.dtype = int(dtype)
    del msg.shape[:]
    msg.shape.extend(int(d) for d in a.shape)
    wire = a.dtype.newbyteorder("<")
    if not contiguous:
        return a.astype(wire, copy=False)
    return np.ascontiguousarray(a, dtype=wire)


def fill_tensor(msg: Any, dtype: DType, a: np.ndarray) -> None:
    """Writes ``a`` (already in ``dtype``'s numpy type, any byte order and strides) into a
    posenc.v1.Tensor message: one conversion to contiguous little-endian bytes."""
    msg.data = describe_tensor(msg, dtype, a).tobytes()


def fill_reference(msg: Any, ref: SharedMemoryRef, field: str) -> DType:
    """A posenc.v1.Tensor whose bytes are in shared memory: dtype, shape and the reference (the
    server checks byte_size against them and the range against its region)."""
    if ref.dtype is None or ref.shape is None:
        raise local_error(field, "a SharedMemoryRef input needs its dtype and shape "
                          "(SharedMemory.ref(view) sets them)")
    msg.dtype = int(ref.dtype)
    del msg.shape[:]
    msg.shape.extend(int(d) for d in ref.shape)
    msg.shared_memory.region = ref.region
    msg.shared_memory.offset = int(ref.offset)
    msg.shared_memory.byte_size = int(ref.byte_size)
    return DType(ref.dtype)


def set_float_tensor(msg: Any, value: Any, field: str) -> DType:
    if isinstance(value, SharedMemoryRef):
        return fill_reference(msg, value, field)
    dtype, a = float_array(value, field)
    fill_tensor(msg, dtype, a)
    return dtype


def set_int_tensor(msg: Any, value: Any, field: str) -> DType:
    if isinstance(value, SharedMemoryRef):
        return fill_reference(msg, value, field)
    dtype, a = int_array(value, field)
    fill_tensor(msg, dtype, a)
    return dtype


def wire_array(msg: Any) -> Optional[np.ndarray]:
    """A posenc.v1.Tensor's bytes seen as a read-only array of its wire dtype (little-endian;
    BFLOAT16 as ``<u2`` bit patterns) and shape, without a copy of the bytes; None when its
    dtype is unknown or its bytes do not match dtype and shape."""
    code = WIRE_NUMPY.get(msg.dtype)  # an int finds its member
    shape = tuple(int(d) for d in msg.shape)
    if code is None or any(d < 0 for d in shape):
        return None
    data = msg.data
    n = math.prod(shape)
    if len(data) != n * code.itemsize:
        return None
    return np.frombuffer(data, dtype=code, count=n).reshape(shape)


def to_numpy(msg: Any, field: str) -> np.ndarray:
    """A posenc.v1.Tensor of a response as a (writable, native-order) numpy array.

    BFLOAT16 gives an ``ml_dtypes.bfloat16`` array when ml_dtypes is importable, else the bit
    patterns as ``uint16``. INTERNAL for a tensor whose bytes do not match its dtype and shape."""
    wire = wire_array(msg)
    if wire is None:
        dtype = getattr(enum_or_int(DType, msg.dtype), "name", msg.dtype)
        raise InternalError(grpc.StatusCode.INTERNAL, f"server sent an inconsistent {field}: "
                            f"{dtype} {list(msg.shape)} with {len(msg.data)} bytes")
    if getattr(msg, "owned", False) and wire.dtype.isnative:
        # a joined result the client made, or a view of the native transport's buffer: no copy
        a = msg.array.reshape(-1).view(wire.dtype).reshape(wire.shape)
    else:
        a = wire.astype(wire.dtype.newbyteorder("="), copy=True)
    if msg.dtype == DType.BFLOAT16 and BFLOAT16_DTYPE is not None:
        a = a.view(BFLOAT16_DTYPE)
    return a


# ---------------------------------------------------------------------------------------------
# Compact bias forms (posenc.proto BiasForm), expanded locally.
# ---------------------------------------------------------------------------------------------
def expand_toeplitz(compact: Any, q_len: int, k_len: int) -> np.ndarray:
    """The full bias ``[..., H, q_len, k_len]`` of a compact (Toeplitz) generator.

    ``compact`` is ``[..., H, q_len + k_len - 1]`` (the compact form of CAUSAL/SYMMETRIC ALiBi
    and of T5 relative bias) and ``full[..., h, i, j] = compact[..., h, j - i + q_len - 1]``, in
    the same dtype (row i of a head is the slice starting at ``q_len - 1 - i``: one copy per
    row). INVALID_ARGUMENT when the last axis is not ``q_len + k_len - 1`` or a length is not
    positive."""
    c = np.asarray(compact)
    if q_len <= 0 or k_len <= 0:
        raise local_error("q_len", f"q_len and k_len must be positive, got {q_len} and {k_len}")
    if c.ndim < 1 or c.shape[-1] != q_len + k_len - 1:
        raise local_error("compact", f"must be [..., H, q_len + k_len - 1] = "
                          f"[..., {q_len + k_len - 1}], got {list(c.shape)}")
    windows = np.lib.stride_tricks.sliding_window_view(c, k_len, axis=-1)  # [..., q, k]
    return np.ascontiguousarray(windows[..., ::-1, :])


# What CAUSAL and BLOOM ALiBi put after the query, per FutureMode (None: the row continued);
# every specified FutureMode has an entry (tests/python/test_client.py checks it).
FUTURE_FILL: Dict[FutureMode, Optional[float]] = {
    FutureMode.MASK: -math.inf,
    FutureMode.ZERO: 0.0,
    FutureMode.LINEAR: None,
}


def expand_bloom_rows(rows: Any, q_len: int, query_offset: Optional[int] = None,
                      future: Any = None) -> np.ndarray:
    """The full BLOOM ALiBi bias ``[..., H, q_len, k_len]`` of its compact rows.

    ``rows`` is ``[..., H, k_len]`` (the row ``m_h * kpos``, ``[B, H, k_len]`` with an attention
    mask); ``full[..., h, i, j] = rows[..., h, j]`` where ``j <= query_offset + i`` and -inf / 0 /
    the row value (future MASK / ZERO / LINEAR, default MASK) after it. ``query_offset``
    defaults to ``k_len - q_len``, as on the wire."""
    r = np.asarray(rows)
    if r.ndim < 1 or r.shape[-1] <= 0 or q_len <= 0:
        raise local_error("rows", f"BLOOM rows must be [..., H, k_len] with k_len > 0 and "
                          f"q_len > 0, got {list(r.shape)} and q_len {q_len}")
    fill = FUTURE_FILL[FutureMode(parse_enum(FutureMode, future, "future") or FutureMode.MASK)]
    k_len = r.shape[-1]
    offset = k_len - q_len if query_offset is None else int(query_offset)
    full = np.repeat(r[..., None, :], q_len, axis=-2)
    if fill is not None:
        visible = np.clip(offset + np.arange(q_len) + 1, 0, k_len)  # keys at or before query i
        hidden = np.arange(k_len)[None, :] >= visible[:, None]  # [q, k]
        if r.dtype == np.uint16:  # bfloat16 bit patterns: -inf or +0
            full[..., hidden] = np.uint16(0xFF80) if fill < 0 else np.uint16(0)
        else:
            full[..., hidden] = fill
    return full


# How each ALiBi mode's COMPACT form expands: the Toeplitz generator, or BLOOM's key rows.
ALIBI_COMPACT: Dict[AlibiMode, str] = {
    AlibiMode.CAUSAL: "toeplitz",
    AlibiMode.SYMMETRIC: "toeplitz",
    AlibiMode.BLOOM: "bloom rows",
}


def expand_compact_alibi(compact: Any, mode: Any, q_len: int, k_len: int,
                         query_offset: Optional[int] = None, future: Any = None) -> np.ndarray:
    """The FULL ALiBi bias of its COMPACT form for ``mode`` (default CAUSAL):
    :func:`expand_toeplitz` or :func:`expand_bloom_rows`."""
    kind = ALIBI_COMPACT[AlibiMode(parse_enum(AlibiMode, mode, "mode") or AlibiMode.CAUSAL)]
    if kind == "bloom rows":
        return expand_bloom_rows(compact, q_len, query_offset, future)
    return expand_toeplitz(compact, q_len, k_len)
