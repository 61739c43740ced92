"""NumPy arrays <-> posenc.v1.Tensor, bfloat16 helpers and the local expansion of compact biases.

The wire carries tensors as raw little-endian, row-major bytes with a dtype and a shape. Float
tensors map to numpy float16 / float32 / float64; BFLOAT16 maps to ``ml_dtypes.bfloat16`` when
that package can be imported, else to ``uint16`` arrays holding the bfloat16 bit patterns (the
upper half of a binary32): :func:`bf16_to_float32` and :func:`float32_to_bf16` convert them.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Optional, Tuple, Union

import grpc
import numpy as np

from ._errors import InternalError, local_error

try:  # optional: a real bfloat16 numpy dtype
    import ml_dtypes as _ml_dtypes  # type: ignore

    BFLOAT16_DTYPE: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the machine
    _ml_dtypes = None
    BFLOAT16_DTYPE = None

__all__ = [
    "DType",
    "HAVE_ML_DTYPES",
    "BFLOAT16_DTYPE",
    "bf16_to_float32",
    "float32_to_bf16",
    "expand_toeplitz",
    "expand_bloom_rows",
]

#: True when ``ml_dtypes`` is importable and BFLOAT16 results are ``ml_dtypes.bfloat16`` arrays.
HAVE_ML_DTYPES = BFLOAT16_DTYPE is not None


class DType(enum.IntEnum):
    """Element type of a tensor on the wire (``posenc.v1.DType``)."""

    UNSPECIFIED = 0
    FLOAT32 = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    FLOAT64 = 4
    INT32 = 5
    INT64 = 6


# Little-endian numpy codes of the wire dtypes (BFLOAT16: its bit patterns).
_WIRE_NUMPY = {
    DType.FLOAT32: np.dtype("<f4"),
    DType.FLOAT16: np.dtype("<f2"),
    DType.BFLOAT16: np.dtype("<u2"),
    DType.FLOAT64: np.dtype("<f8"),
    DType.INT32: np.dtype("<i4"),
    DType.INT64: np.dtype("<i8"),
}

# Names accepted for dtype arguments (case-insensitive), as the C++ client's ParseDType.
_DTYPE_NAMES = {
    "float32": DType.FLOAT32, "f32": DType.FLOAT32, "fp32": DType.FLOAT32,
    "float": DType.FLOAT32, "float16": DType.FLOAT16, "f16": DType.FLOAT16,
    "fp16": DType.FLOAT16, "half": DType.FLOAT16, "bfloat16": DType.BFLOAT16,
    "bf16": DType.BFLOAT16, "float64": DType.FLOAT64, "f64": DType.FLOAT64,
    "fp64": DType.FLOAT64, "double": DType.FLOAT64, "int32": DType.INT32, "i32": DType.INT32,
    "int64": DType.INT64, "i64": DType.INT64,
}

_FLOAT_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64)

DTypeLike = Union[None, str, DType, np.dtype, type]


def parse_dtype(value: DTypeLike, field: str = "dtype") -> Optional[DType]:
    """The wire dtype of a dtype argument; None for None (the server's default, FLOAT32).

    Accepts a :class:`DType`, a name (``"float32"``, ``"fp16"``, ``"bf16"``, ``"bfloat16"``,
    ``"float64"``, ...), or anything ``numpy.dtype()`` takes (``np.float16``, ``"f4"``,
    ``ml_dtypes.bfloat16``).
    """
    if value is None:
        return None
    if isinstance(value, DType):
        return None if value == DType.UNSPECIFIED else value
    if isinstance(value, str):
        key = value.strip().lower()
        if key.startswith("dtype_"):
            key = key[6:]
        if key in _DTYPE_NAMES:
            return _DTYPE_NAMES[key]
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is not None:
        if BFLOAT16_DTYPE is not None and dt == BFLOAT16_DTYPE:
            return DType.BFLOAT16
        for wire, code in _WIRE_NUMPY.items():
            if wire != DType.BFLOAT16 and dt == code.newbyteorder("="):
                return wire
    raise local_error(f"{field}: unknown dtype {value!r} (float32, float16, bfloat16, float64)")


def _float_output_dtype(value: DTypeLike, field: str = "dtype") -> Optional[DType]:
    dtype = parse_dtype(value, field)
    if dtype is not None and dtype not in _FLOAT_DTYPES:
        raise local_error(f"{field}: must be a float dtype, got {dtype.name}")
    return dtype


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
# Encoding (numpy -> wire) and decoding (wire -> numpy).
# ---------------------------------------------------------------------------------------------
def _to_le_bytes(a: np.ndarray) -> bytes:
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes(order="C")


def float_array(value: Any, field: str) -> Tuple[DType, np.ndarray]:
    """The wire dtype and array of a float input (q, k, x, tables).

    numpy float16/float32/float64 and ``ml_dtypes.bfloat16`` arrays keep their dtype; a
    ``uint16`` array is taken as bfloat16 bit patterns. Lists and other sequences go through
    ``numpy.asarray`` (integers become float64). Other array dtypes are INVALID_ARGUMENT."""
    if isinstance(value, np.ndarray):
        a = value
    else:
        try:
            a = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise local_error(f"{field}: not an array: {e}") from None
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
    raise local_error(f"{field}: dtype {a.dtype} is not a tensor float type (float16, float32, "
                      "float64, ml_dtypes.bfloat16, or uint16 bfloat16 bit patterns)")


def int_array(value: Any, field: str) -> Tuple[DType, np.ndarray]:
    """The wire dtype and array of an integer input (ids, masks): int32 stays INT32, any other
    integer or bool array becomes INT64."""
    a = value if isinstance(value, np.ndarray) else np.asarray(value)
    if a.dtype == np.int32:
        return DType.INT32, a
    if a.dtype.kind in "bi":
        return DType.INT64, a.astype(np.int64, copy=False)
    if a.dtype.kind == "u":
        if a.size and int(a.max()) > np.iinfo(np.int64).max:
            raise local_error(f"{field}: value {int(a.max())} does not fit INT64")
        return DType.INT64, a.astype(np.int64)
    if a.size == 0:  # e.g. [] (numpy makes it float64)
        return DType.INT64, a.astype(np.int64)
    raise local_error(f"{field}: dtype {a.dtype} is not an integer type")


def fill_tensor(msg: Any, dtype: DType, a: np.ndarray) -> None:
    """Writes ``a`` (already in ``dtype``'s numpy type) into a posenc.v1.Tensor message."""
    msg.dtype = int(dtype)
    del msg.shape[:]
    msg.shape.extend(int(d) for d in a.shape)
    msg.data = _to_le_bytes(a)


def set_float_tensor(msg: Any, value: Any, field: str) -> DType:
    dtype, a = float_array(value, field)
    fill_tensor(msg, dtype, a)
    return dtype


def set_int_tensor(msg: Any, value: Any, field: str) -> DType:
    dtype, a = int_array(value, field)
    fill_tensor(msg, dtype, a)
    return dtype


def to_numpy(msg: Any, field: str) -> np.ndarray:
    """A posenc.v1.Tensor as a (writable, native-order) numpy array.

    BFLOAT16 gives an ``ml_dtypes.bfloat16`` array when ml_dtypes is importable, else the bit
    patterns as ``uint16``. INTERNAL for a tensor whose bytes do not match its dtype and shape."""
    try:
        dtype = DType(msg.dtype)
        code = _WIRE_NUMPY[dtype]
    except (ValueError, KeyError):
        raise InternalError(grpc.StatusCode.INTERNAL, f"server sent {field} with unknown dtype "
                            f"{msg.dtype}") from None
    shape = tuple(int(d) for d in msg.shape)
    if any(d < 0 for d in shape):
        raise InternalError(grpc.StatusCode.INTERNAL, f"server sent an inconsistent {field}: "
                            f"negative dimension in {list(shape)}")
    n = math.prod(shape)
    data = msg.data
    if len(data) != n * code.itemsize:
        raise InternalError(grpc.StatusCode.INTERNAL, f"server sent an inconsistent {field}: "
                            f"{dtype.name} {list(shape)} must hold {n} * {code.itemsize} bytes, "
                            f"got {len(data)}")
    a = np.frombuffer(data, dtype=code, count=n).astype(code.newbyteorder("="), copy=True)
    a = a.reshape(shape)
    if dtype == DType.BFLOAT16 and BFLOAT16_DTYPE is not None:
        a = a.view(BFLOAT16_DTYPE)
    return a


# ---------------------------------------------------------------------------------------------
# Compact bias forms (SPEC §2.3), expanded locally.
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
        raise local_error(f"q_len and k_len must be positive, got {q_len} and {k_len}")
    if c.ndim < 1 or c.shape[-1] != q_len + k_len - 1:
        raise local_error(f"compact bias must be [..., H, q_len + k_len - 1] = "
                          f"[..., {q_len + k_len - 1}], got {list(c.shape)}")
    windows = np.lib.stride_tricks.sliding_window_view(c, k_len, axis=-1)  # [..., q, k]
    return np.ascontiguousarray(windows[..., ::-1, :])


def _future_fill(dtype: np.dtype, value: float) -> Any:
    if dtype == np.uint16:  # bfloat16 bit patterns
        return np.uint16(0xFF80) if value < 0 else np.uint16(0)
    return value


def expand_bloom_rows(rows: Any, q_len: int, query_offset: Optional[int] = None,
                      future: Any = None) -> np.ndarray:
    """The full BLOOM ALiBi bias ``[..., H, q_len, k_len]`` of its compact rows.

    ``rows`` is ``[..., H, k_len]`` (the row ``m_h * kpos``, ``[B, H, k_len]`` with an attention
    mask); ``full[..., h, i, j] = rows[..., h, j]`` where ``j <= query_offset + i`` and -inf / 0 /
    the row value (future MASK / ZERO / LINEAR, default MASK) after it. ``query_offset``
    defaults to ``k_len - q_len``, as on the wire."""
    from ._types import FutureMode, parse_enum  # local: _types imports this module

    r = np.asarray(rows)
    if r.ndim < 1 or r.shape[-1] <= 0 or q_len <= 0:
        raise local_error(f"BLOOM rows must be [..., H, k_len] with k_len > 0 and q_len > 0, "
                          f"got {list(r.shape)} and q_len {q_len}")
    mode = FutureMode(parse_enum(FutureMode, future, "future"))
    k_len = r.shape[-1]
    offset = k_len - q_len if query_offset is None else int(query_offset)
    full = np.repeat(r[..., None, :], q_len, axis=-2)
    if mode != FutureMode.LINEAR:
        visible = np.clip(offset + np.arange(q_len) + 1, 0, k_len)  # keys at or before query i
        hidden = np.arange(k_len)[None, :] >= visible[:, None]  # [q, k]
        fill = _future_fill(r.dtype, 0.0 if mode == FutureMode.ZERO else -math.inf)
        full[..., hidden] = fill
    return full
