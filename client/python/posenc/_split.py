"""Transparent splitting of requests whose messages would exceed the message limit.

The limit is the smaller of the client's ``max_message_bytes`` and the server's (asked once
with GetServerInfo, only when a request is large enough to matter); each part must also stay
within the server's ``max_output_elements``.

- ApplyRope: q (and k) are split along the token axis (S of BSHD/BHSD, T of THD) and the
  positions sliced to match; ``config.seq_len`` is pinned to the whole request's largest
  position + 1 so that dynamic NTK and LongRoPE choose the same frequencies in every part as in
  one call. With an attention mask the split is along the batch instead (a token's position
  depends on the mask before it in its row).
- RelativeBias FULL with an inline table: split along the heads (columns of the table).
- AlibiBias FULL, and RelativeBias FULL with a named table (their heads cannot be selected on
  the wire): one COMPACT call, expanded locally (the same values as the FULL form).

A request that cannot be split that way (e.g. one token alone over the limit, malformed
shapes) is sent whole and the server's error comes back unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _tensor
from ._errors import PosencError
from ._tensor import DType
from ._types import (AlibiBiasResult, AlibiMode, ApplyRopeResult, BiasForm, FutureMode,
                     Positions, RopeConfig, TensorLayout)
from .v1 import posenc_pb2 as pb

# Requests and responses below this many bytes are never checked against the server's limit.
SMALL_BYTES = 64 << 10
# Bytes kept free in every part for the message's other fields and framing.
OVERHEAD_BYTES = 16 << 10


@dataclasses.dataclass
class Limits:
    max_message_bytes: int
    max_output_elements: Optional[int]
    tables: dict  # name -> shape


def limits(client: Any, timeout: Optional[float]) -> Limits:
    """The limits a part must respect (GetServerInfo once per client; the client's own limit
    alone when the server cannot say)."""
    cached = client._split_limits
    if cached is None:
        try:
            info = client.server_info(timeout=timeout)
        except PosencError:
            return Limits(client._max_message_bytes, None, {})
        cached = Limits(min(client._max_message_bytes, info.max_message_bytes or 2**31 - 1),
                        info.max_output_elements or None,
                        {t.name: tuple(t.shape) for t in info.tables})
        client._split_limits = cached
    return cached


def _fits(nbytes: float, elements: List[float], lim: Limits, extra: int = 0) -> bool:
    if nbytes + extra + OVERHEAD_BYTES > lim.max_message_bytes:
        return False
    return lim.max_output_elements is None or all(e <= lim.max_output_elements for e in elements)


# ---------------------------------------------------------------------------------------------
# ApplyRope.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class RopePlan:
    q: np.ndarray
    k: Optional[np.ndarray]
    axis: int  # the axis of q/k that is split
    bounds: List[Tuple[int, int]]
    parts_positions: List[Optional[Positions]]
    config: RopeConfig
    layout: int


def _token_axis(layout: int, ndim: int) -> Optional[int]:
    if layout == TensorLayout.THD:
        return 0 if ndim == 3 else None
    if ndim != 4:
        return None
    return 2 if layout == TensorLayout.BHSD else 1


def _cu_ids(p: Positions, tokens: int) -> Optional[np.ndarray]:
    """Explicit ids [T] of cu_seqlens positions (None when malformed: the server reports)."""
    cu = list(p.seq_bounds)
    offsets = list(p.seq_offsets) or [0] * max(len(cu) - 1, 0)
    if len(cu) < 2 or cu[0] != 0 or cu[-1] != tokens or len(offsets) != len(cu) - 1:
        return None
    ids = np.empty(tokens, dtype=np.int64)
    for i in range(len(cu) - 1):
        if cu[i + 1] < cu[i]:
            return None
        ids[cu[i]:cu[i + 1]] = offsets[i] + np.arange(cu[i + 1] - cu[i])
    return ids


def plan_apply_rope(client: Any, q: np.ndarray, k: Optional[np.ndarray], positions: Any,
                    config: RopeConfig, layout: int, timeout: Optional[float] = None
                    ) -> Optional[RopePlan]:
    """A split of an ApplyRope request over the limits, or None to send it whole."""
    total = q.nbytes + (k.nbytes if k is not None else 0)
    if total <= SMALL_BYTES:
        return None
    axis = _token_axis(layout, q.ndim)
    if axis is None or (k is not None and (k.ndim != q.ndim or k.shape[axis] != q.shape[axis])):
        return None
    p = Positions.coerce(positions)
    if p.kind == "attention_mask":
        if layout == TensorLayout.THD or p.array is None or p.array.ndim != 2:
            return None
        axis = 0
    tokens = q.shape[axis]
    if tokens < 2:
        return None
    from .client import _set_rope_config  # pylint: disable=import-outside-toplevel

    config_msg = pb.RopeConfig()
    _set_rope_config(config_msg, config)
    extra = config_msg.ByteSize() + 64  # + a pinned seq_len, positions framing
    ids_full: Optional[np.ndarray] = None
    if p.kind == "ids":
        ids_full = np.asarray(p.array)
        extra += 2 * ids_full.nbytes
        if ids_full.ndim == 0 or ids_full.shape[-1] != tokens:
            return None
    elif p.kind == "cu_seqlens":
        ids_full = _cu_ids(p, tokens)
        if ids_full is None:
            return None
        extra += 2 * ids_full.nbytes
    elif p.kind == "attention_mask":
        extra += 8 * p.array.size
    lim = limits(client, timeout)
    elements = [float(q.size)] + ([float(k.size)] if k is not None else [])
    if _fits(total, elements, lim, extra):
        return None

    # Tokens per part: within the bytes budget and the element limit.
    budget = lim.max_message_bytes - OVERHEAD_BYTES - extra
    per_token_bytes = total / tokens
    per_token_elements = max(e / tokens for e in elements)
    per_part = math.floor(budget / per_token_bytes) if budget > 0 else 0
    if lim.max_output_elements is not None:
        per_part = min(per_part, math.floor(lim.max_output_elements / per_token_elements))
    if per_part < 1:
        return None
    bounds = [(s, min(s + per_part, tokens)) for s in range(0, tokens, per_part)]

    # The whole request's largest position + 1, pinned in every part.
    if config.seq_len is None:
        max_position = _max_position(p, q, axis, tokens, ids_full)
        if max_position is None:
            return None
        config = dataclasses.replace(config, seq_len=max(max_position + 1, 1))

    parts: List[Optional[Positions]] = []
    for s0, s1 in bounds:
        n = s1 - s0
        if p.kind == "default":
            if layout == TensorLayout.THD:
                return None
            parts.append(Positions.range(s0, n))
        elif p.kind == "range":
            parts.append(Positions.range(p.start + s0, n))
        elif p.kind == "offsets":
            parts.append(Positions.offsets([o + s0 for o in p.seq_offsets]))
        elif p.kind in ("ids", "cu_seqlens"):
            parts.append(Positions.ids(ids_full[..., s0:s1]))
        else:  # attention_mask: rows s0 .. s1
            parts.append(Positions.attention_mask(p.array[s0:s1]))
    return RopePlan(q, k, axis, bounds, parts, config, layout)


def _max_position(p: Positions, q: np.ndarray, axis: int, tokens: int,
                  ids_full: Optional[np.ndarray]) -> Optional[int]:
    if p.kind == "default":
        return tokens - 1
    if p.kind == "range":
        return p.start + tokens - 1
    if p.kind == "offsets":
        return max(p.seq_offsets) + tokens - 1 if p.seq_offsets else None
    if p.kind in ("ids", "cu_seqlens"):
        return int(ids_full.max()) if ids_full.size else None
    if p.kind == "attention_mask":
        real = (np.asarray(p.array) != 0).sum(axis=1)
        return int(real.max()) - 1 if real.size else None
    return None


def run_apply_rope(client: Any, plan: RopePlan, q_dtype: DType, k_dtype: DType,
                   timeout: Optional[float]) -> ApplyRopeResult:
    """Sends the parts of ``plan`` one after the other and joins their results."""
    from .client import _set_positions_field, _set_rope_config, _derived  # pylint: disable=import-outside-toplevel

    q_parts, k_parts, derived = [], [], None
    index: List[Any] = [slice(None)] * plan.q.ndim
    for (s0, s1), positions in zip(plan.bounds, plan.parts_positions):
        index[plan.axis] = slice(s0, s1)
        request = pb.ApplyRopeRequest()
        _tensor.fill_tensor(request.q, q_dtype, plan.q[tuple(index)])
        if plan.k is not None:
            _tensor.fill_tensor(request.k, k_dtype, plan.k[tuple(index)])
        _set_positions_field(request, positions)
        _set_rope_config(request.config, plan.config)
        request.layout = plan.layout
        response = client._call("ApplyRope", request, timeout)
        q_parts.append(_tensor.to_numpy(response.q, "q"))
        if response.HasField("k"):
            k_parts.append(_tensor.to_numpy(response.k, "k"))
        if derived is None:
            derived = _derived(response.derived)
    q_out = np.concatenate(q_parts, axis=plan.axis)
    k_out = np.concatenate(k_parts, axis=plan.axis) if k_parts else None
    return ApplyRopeResult(q_out, k_out, derived)


# ---------------------------------------------------------------------------------------------
# Biases.
# ---------------------------------------------------------------------------------------------
def _output_size(dtype: int) -> int:
    return {0: 4, 1: 4, 2: 2, 3: 2, 4: 8}.get(dtype, 4)


def maybe_split_alibi(client: Any, request: pb.AlibiBiasRequest,
                      timeout: Optional[float]) -> Optional[AlibiBiasResult]:
    """A FULL AlibiBias over the limits as one COMPACT call expanded locally, or None."""
    batch = request.attention_mask.shape[0] if (
        request.HasField("attention_mask") and len(request.attention_mask.shape) == 2) else 1
    elements = float(batch) * request.num_heads * request.q_len * request.k_len
    nbytes = elements * _output_size(request.output_dtype) + 8 * request.num_heads
    if nbytes <= SMALL_BYTES or min(request.num_heads, request.q_len, request.k_len) <= 0:
        return None
    if _fits(nbytes, [elements], limits(client, timeout)):
        return None
    compact = pb.AlibiBiasRequest()
    compact.CopyFrom(request)
    compact.form = BiasForm.COMPACT
    response = client._call("AlibiBias", compact, timeout)
    bias = _tensor.to_numpy(response.bias, "bias")
    if request.mode == AlibiMode.BLOOM:
        offset = request.query_offset if request.HasField("query_offset") else None
        bias = _tensor.expand_bloom_rows(bias, request.q_len, offset, FutureMode(request.future))
    else:
        bias = _tensor.expand_toeplitz(bias, request.q_len, request.k_len)
    return AlibiBiasResult(bias, _tensor.to_numpy(response.slopes, "slopes"))


def maybe_split_relative(client: Any, request: pb.RelativeBiasRequest,
                         timeout: Optional[float]) -> Optional[np.ndarray]:
    """A FULL RelativeBias over the limits split along the heads (inline table) or as one
    COMPACT call expanded locally (named table); None to send it whole."""
    q_len, k_len = request.q_len, request.k_len
    if q_len <= 0 or k_len <= 0:
        return None
    table: Optional[np.ndarray] = None
    if request.HasField("table_inline"):
        try:
            table = _tensor.to_numpy(request.table_inline, "table_inline")
        except PosencError:
            return None
        if table.ndim != 2:
            return None
        heads = table.shape[1]
    elif request.table_name:
        heads = None
    else:
        return None
    size = _output_size(request.output_dtype)
    if heads is not None and float(heads) * q_len * k_len * size <= SMALL_BYTES:
        return None
    lim = limits(client, timeout)
    if heads is None:
        shape = lim.tables.get(request.table_name)
        if shape is None or len(shape) != 2:
            return None
        heads = shape[1]
    elements = float(heads) * q_len * k_len
    if heads <= 0 or _fits(elements * size, [elements], lim):
        return None

    if table is None:  # a named table: one COMPACT call
        compact = pb.RelativeBiasRequest()
        compact.CopyFrom(request)
        compact.form = BiasForm.COMPACT
        bias = _tensor.to_numpy(client._call("RelativeBias", compact, timeout).bias, "bias")
        return _tensor.expand_toeplitz(bias, q_len, k_len)

    per_head = float(q_len) * k_len
    budget = lim.max_message_bytes - OVERHEAD_BYTES  # the response holds the bias alone
    per_part = math.floor(budget / (per_head * size)) if budget > 0 else 0
    if lim.max_output_elements is not None:
        per_part = min(per_part, math.floor(lim.max_output_elements / per_head))
    if per_part < 1:
        return None
    parts = []
    for h0 in range(0, heads, per_part):
        part = pb.RelativeBiasRequest()
        part.CopyFrom(request)
        _tensor.set_float_tensor(part.table_inline, np.ascontiguousarray(
            table[:, h0:h0 + per_part]), "table_inline")
        parts.append(_tensor.to_numpy(client._call("RelativeBias", part, timeout).bias, "bias"))
    return np.concatenate(parts, axis=0)
