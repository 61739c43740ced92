"""Splitting (pure): a request over the message limit cut into pieces that each fit, and the
pieces' responses joined into the one response a single call would give, byte for byte.

docs/splitting.md is the algorithm (the C++ client, client/split.cc, implements the same one;
tests/data/split_cases.json holds the cases both clients' tests run). In short:

- the budget of a piece's tensors is ``limit - 64 KiB - (the request's bytes besides the
  tensors being cut)``; a request whose cut tensors (request or response side, the larger) fit
  it goes as one call;
- ApplyRope: along heads (q's and k's head ranges paired, GQA), then, when one head of q and of
  k do not fit, along tokens within each head range, then, when one token of a head range
  across the batch does not fit, along batch rows one token at a time; positions rebased,
  ``config.seq_len`` pinned to the whole request's, attention masks sent as ids with padding
  copied through;
- AddPositionEncoding: along batch rows, then tokens within one row;
- AlibiBias, RelativeBias, RelativeEmbedding: along query rows (``q_len``, ``query_offset``).

A request whose tensors or positions are malformed is not cut (``None``: the client sends it
whole and the server names what is wrong); one that cannot be cut small enough raises
RESOURCE_EXHAUSTED (reason LIMIT_EXCEEDED) before anything is sent.

Nothing here talks to a server: plans take request messages and a function giving the limits
(asked only when a request is large enough for them to matter), and return the pieces' request
messages with a join for their responses.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import grpc
import numpy as np

from ._direct import copied, like, message_of, put_tensor, runs
from ._enums import BiasForm, Combine, DType, MropeLayout, TensorLayout
from ._errors import InternalError, local_error
from ._protos import posenc_pb2 as pb
from ._tensor import FLOAT_DTYPES, WIRE_NUMPY, fill_tensor, itemsize, wire_array

__all__ = ["Limits", "Plan", "OVERHEAD_BYTES", "even_ranges", "plan_apply_rope",
           "plan_add_position_encoding", "plan_alibi_bias", "plan_relative_bias",
           "plan_relative_embedding"]

#: Bytes of every message kept for its other fields and framing (a response's derived values).
OVERHEAD_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a plan must respect: the message limit (the smaller of the client's
    max_message_bytes and the server's) and the shapes of the server's named tables."""

    message_bytes: int
    tables: Mapping[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)


LimitsFn = Callable[[], Limits]


@dataclasses.dataclass
class Plan:
    """The pieces' requests (in order), the join of their responses (in the same order), and
    the most bytes of cut tensors a piece carries (each side). ``sinks``, when set, gives piece
    i's places in the result (Transport.call_all: its answers are then (response, fields
    written) pairs)."""

    pieces: List[Any]
    join: Callable[[Sequence[Any]], Any]
    piece_bytes: int
    sinks: Optional[Callable[[int], Optional[Dict[int, List[Any]]]]] = None


def even_ranges(n: int, pieces: int) -> List[range]:
    """``n`` items in ``pieces`` consecutive ranges ``[n*i/p, n*(i+1)/p)``, empty ones left
    out: ranges differ by at most one item."""
    return [r for r in (range(n * i // pieces, n * (i + 1) // pieces) for i in range(pieces))
            if len(r)]


def fewest_pieces(n: int, item_bytes: int, budget: int) -> Optional[int]:
    """The fewest p for which even_ranges(n, p) keeps every range within ``budget`` bytes at
    ``item_bytes`` an item; None when one item alone is over it."""
    per_piece = budget // item_bytes if item_bytes > 0 else n
    if per_piece < 1:
        return None
    return max(1, -(-n // per_piece))


def _budget(tensor_bytes: int, extra: int, limits: LimitsFn) -> Optional[int]:
    """The bytes of cut tensors a piece may carry, or None when the whole request fits (the
    server's limit is asked only past 64 KiB of tensors and other fields together)."""
    if tensor_bytes + extra <= OVERHEAD_BYTES:
        return None
    budget = limits().message_bytes - OVERHEAD_BYTES - extra
    return None if tensor_bytes <= budget else budget


def _too_large(method: str, what: str, nbytes: int, budget: int, limits: LimitsFn
               ) -> Exception:
    return local_error(
        "", f"{method}: cannot be split to fit one message: {what} alone takes {nbytes} bytes, "
        f"over the {max(budget, 0)} bytes a piece may carry (the message limit of "
        f"{limits().message_bytes} bytes, the smaller of the client's max_message_bytes and the "
        "server's --max_message_bytes, less 64 KiB and the request's other fields); raise both",
        code=grpc.StatusCode.RESOURCE_EXHAUSTED, reason="LIMIT_EXCEEDED",
        limit="max_message_bytes")


def _placed(out: np.ndarray, index: Tuple[Any, ...], tensor: Any, field: str, piece: int,
            written: bool = False) -> None:
    """Writes a piece's output tensor into its place in ``out``, or (``written``: the transport
    wrote its data there, the tensor holds none) checks that it was that place's; INTERNAL when
    its shape or dtype is not what the piece asked for."""
    want = out[index]
    shape: Any
    if written:
        code = WIRE_NUMPY.get(tensor.dtype)
        shape = [int(d) for d in tensor.shape]
        fits = code == want.dtype and tuple(shape) == want.shape and len(tensor.data) == 0
    else:
        got = wire_array(tensor)
        fits = got is not None and got.shape == want.shape and got.dtype == want.dtype
        shape = list(got.shape) if got is not None else "unreadable"
    if not fits:
        raise InternalError(grpc.StatusCode.INTERNAL, f"split: the server answered piece {piece} "
                            f"with {field} {shape}, expected {list(want.shape)}")
    if not written:
        out[index] = got


# ---------------------------------------------------------------------------------------------
# Positions of a piece (docs/splitting.md's table).
# ---------------------------------------------------------------------------------------------


def _position_axes(config: Any) -> int:
    """The number of position axes the config reads (ids ``[A, ...]`` when A > 1; 1: none), as
    the C++ client's PositionAxes (client/split.cc, docs/splitting.md): frequency_axes (the
    largest + 1), a VISION layout or layer_type "vision" of a config.json (2), mrope_section
    (its length), a config.json's first mrope_section (its length: HunYuan's 4, Qwen's 3)."""
    if len(config.frequency_axes) > 0:
        return min(max(max(config.frequency_axes) + 1, 1), 4)
    if config.mrope_layout in (MropeLayout.VISION_2D, MropeLayout.VISION_2D_EVEN_ODD) or (
            config.hf_config_json and config.layer_type == "vision"):
        return 2
    if len(config.mrope_section) > 0:
        return len(config.mrope_section)
    sections = _sections_in_json(config.hf_config_json)
    return min(sections, 4) if sections > 1 else 1


def _sections_in_json(text: str) -> int:
    """The length of the first ``"mrope_section": [...]`` list of numbers in a config.json's
    text (the key the server's normalizer reads), 0 without one (as SectionsInJson in
    client/split.cc)."""
    match = re.search(r'"mrope_section"\s*:\s*\[([-+0-9.,\s]*)\]', text)
    if match is None:
        return 0
    return len([part for part in match.group(1).split(",") if part.strip()])


class _Positions:
    """A request's positions on its token grid (``rows`` x ``tokens``; packed THD: one row),
    cut to a piece. ``valid`` is False for positions the server would refuse (they are not
    cut: the whole request goes and the server names the field)."""

    def __init__(self, request: Any, rows: int, tokens: int, packed: bool, axes: int):
        self.kind = request.positions.WhichOneof("kind") if request.HasField(
            "positions") else None
        self.msg = request.positions
        self.rows, self.tokens, self.packed = rows, tokens, packed
        self.ids: Optional[np.ndarray] = None
        self.row_axis: Optional[int] = None  # the ids' batch axis, if any
        self.mask_positions: Optional[np.ndarray] = None  # [B, S] positions of a mask
        self.padding: Optional[np.ndarray] = None  # [B, S] True at padding tokens
        self.axes = axes  # > 1: a mask's positions go as ids [axes, B, S], one per axis
        self.valid = self._check(axes)

    def _check(self, axes: int) -> bool:
        kind, msg = self.kind, self.msg
        if kind is None:
            return True
        if kind == "range":
            return msg.range.count in (0, self.tokens)
        if kind == "offsets":
            return not self.packed and len(msg.offsets.offsets) == self.rows
        if kind == "cu_seqlens":
            cu = list(msg.cu_seqlens.cu_seqlens)
            offsets = list(msg.cu_seqlens.offsets)
            return (self.packed and len(cu) >= 2 and cu[0] == 0 and cu[-1] == self.tokens
                    and all(a <= b for a, b in zip(cu, cu[1:]))
                    and len(offsets) in (0, len(cu) - 1))
        tensor = msg.ids if kind == "ids" else msg.attention_mask
        a = wire_array(tensor)
        if a is None or tensor.dtype not in (DType.INT32, DType.INT64) or a.size == 0 or (
                a.shape[-1] != self.tokens):
            return False
        if kind == "attention_mask":
            if self.packed or a.shape != (self.rows, self.tokens) or not np.isin(a, (0, 1)).all():
                return False
            real = a != 0
            self.padding = ~real
            self.mask_positions = np.where(real, np.cumsum(real, axis=1) - 1, 0)
            return True
        self.ids = a
        if a.ndim == 1:
            return axes == 1
        if a.ndim == 2 and not self.packed and a.shape[0] == self.rows and axes == 1:  # [B, S]
            self.row_axis = 0
            return True
        if a.ndim == 2 and axes > 1 and a.shape[0] == axes:  # [A, S] / [A, T], every row's
            return True
        if a.ndim == 3 and not self.packed and axes > 1 and a.shape[:2] == (axes, self.rows):
            self.row_axis = 1
            return True
        return False

    def max_position(self) -> int:
        """The whole request's largest position over its real tokens (-1: none)."""
        kind, msg, last = self.kind, self.msg, self.tokens - 1
        if kind is None:
            return last
        if kind == "range":
            return int(msg.range.start) + last
        if kind == "offsets":
            return max(msg.offsets.offsets) + last
        if kind == "cu_seqlens":
            cu, offsets = list(msg.cu_seqlens.cu_seqlens), list(msg.cu_seqlens.offsets)
            return max((offsets[i] if offsets else 0) + cu[i + 1] - cu[i] - 1
                       for i in range(len(cu) - 1) if cu[i + 1] > cu[i])
        if kind == "attention_mask":
            assert self.mask_positions is not None and self.padding is not None
            return int(np.where(self.padding, -1, self.mask_positions).max())
        assert self.ids is not None
        return int(self.ids.max())

    def rows_only(self, rows: range, out: Any) -> None:
        """``out`` (a request) gets the positions of batch rows ``rows``, every token: the same
        kind, per-row data sliced."""
        if self.kind is None:
            return
        out.positions.CopyFrom(self.msg)
        if self.kind == "offsets":
            del out.positions.offsets.offsets[:]
            out.positions.offsets.offsets.extend(self.msg.offsets.offsets[rows.start:rows.stop])
        elif self.kind == "attention_mask":
            mask = wire_array(self.msg.attention_mask)
            assert mask is not None
            fill_tensor(out.positions.attention_mask, DType(self.msg.attention_mask.dtype),
                        mask[rows.start:rows.stop])
        elif self.kind == "ids" and self.row_axis is not None:
            assert self.ids is not None
            index = (slice(None),) * self.row_axis + (slice(rows.start, rows.stop),)
            fill_tensor(out.positions.ids, DType(self.msg.ids.dtype), self.ids[index])

    def rebased(self, rows: range, tokens: range, out: Any) -> None:
        """``out`` gets the positions of tokens ``tokens`` of batch rows ``rows``, rebased
        (an attention mask becomes INT64 ids; cu_seqlens are clamped to the piece)."""
        t0, n = tokens.start, len(tokens)
        p = out.positions
        if self.kind is None:
            p.range.start, p.range.count = t0, n
        elif self.kind == "range":
            p.range.start, p.range.count = self.msg.range.start + t0, n
        elif self.kind == "offsets":
            p.offsets.offsets.extend(o + t0 for o in self.msg.offsets.offsets[rows.start:rows.stop])
        elif self.kind == "cu_seqlens":
            cu = list(self.msg.cu_seqlens.cu_seqlens)
            offsets = list(self.msg.cu_seqlens.offsets) or [0] * (len(cu) - 1)
            p.cu_seqlens.cu_seqlens.extend(min(max(c - t0, 0), n) for c in cu)
            p.cu_seqlens.offsets.extend(o + max(0, t0 - c) for o, c in zip(offsets, cu))
        elif self.kind == "attention_mask":
            assert self.mask_positions is not None
            ids = self.mask_positions[rows.start:rows.stop, tokens.start:tokens.stop]
            fill_tensor(p.ids, DType.INT64,
                        np.broadcast_to(ids, (self.axes,) + ids.shape) if self.axes > 1 else ids)
        else:
            assert self.ids is not None
            index: Tuple[slice, ...] = (slice(None),) * (self.ids.ndim - 1)
            if self.row_axis is not None:
                index = index[:self.row_axis] + (slice(rows.start, rows.stop),) + index[
                    self.row_axis + 1:]
            fill_tensor(p.ids, DType(self.msg.ids.dtype),
                        self.ids[index + (slice(tokens.start, tokens.stop),)])
        p.SetInParent()


# ---------------------------------------------------------------------------------------------
# ApplyRope: heads, then tokens, then batch rows.
# ---------------------------------------------------------------------------------------------
# (batch axis or None, token axis, head axis) of q and k per layout.
ROPE_AXES: Dict[TensorLayout, Tuple[Optional[int], int, int]] = {
    TensorLayout.BSHD: (0, 1, 2),
    TensorLayout.BHSD: (0, 2, 1),
    TensorLayout.THD: (None, 0, 1),
}


@dataclasses.dataclass(frozen=True)
class _Box:
    """A piece of ApplyRope: head ranges of q and k, tokens and batch rows (None: all)."""

    q_heads: range
    k_heads: range
    tokens: Optional[range] = None
    rows: Optional[range] = None


def plan_apply_rope(request: pb.ApplyRopeRequest, limits: LimitsFn) -> Optional[Plan]:
    """The pieces of an ApplyRope request over the limit, or None to send it as it is."""
    if request.ByteSize() <= OVERHEAD_BYTES:  # what _budget decides below, without the arrays
        return None
    layout = request.layout or TensorLayout.BSHD
    if layout not in ROPE_AXES:
        return None
    axes = ROPE_AXES[TensorLayout(layout)]
    batch_axis, token_axis, head_axis = axes
    has_k = request.HasField("k")
    q = wire_array(request.q)
    k = wire_array(request.k) if has_k else None
    if q is None or (has_k and k is None) or request.q.dtype not in FLOAT_DTYPES:
        return None
    if q.ndim != (3 if batch_axis is None else 4) or q.size == 0:
        return None
    if k is not None and (k.ndim != q.ndim or k.dtype != q.dtype or k.size == 0 or any(
            k.shape[a] != q.shape[a] for a in range(q.ndim) if a != head_axis)):
        return None
    tensor_bytes = q.nbytes + (k.nbytes if k is not None else 0)
    budget = _budget(tensor_bytes, request.ByteSize() - tensor_bytes, limits)
    if budget is None:
        return None
    q_heads = q.shape[head_axis]
    k_heads = k.shape[head_axis] if k is not None else 0
    q_head, k_head = q.nbytes // q_heads, (k.nbytes // k_heads if k is not None else 0)
    most = max(q_heads, k_heads)

    def pair(p: int) -> Optional[List[Tuple[range, range]]]:
        """Range i of q's heads with range i of k's; None when one would send k without q."""
        pairs = [(range(q_heads * i // p, q_heads * (i + 1) // p),
                  range(k_heads * i // p, k_heads * (i + 1) // p)) for i in range(p)]
        if any(not qh and kh for qh, kh in pairs):
            return None
        return [(qh, kh) for qh, kh in pairs if qh]

    # 1. Heads: the fewest p whose largest ranges fit.
    for p in range(2, most + 1):
        if -(-q_heads // p) * q_head + -(-k_heads // p) * k_head <= budget:
            pairs = pair(p)
            return None if pairs is None else _rope_plan(request, q, k, axes, [
                _Box(qh, kh) for qh, kh in pairs], None, budget)
    # 2. Tokens within each head range; 3. batch rows, one token at a time.
    pairs = pair(most)
    if pairs is None:
        return None
    tokens = q.shape[token_axis]
    rows = q.shape[batch_axis] if batch_axis is not None else 1
    # The position axes as the C++ client decides them (PositionAxes in client/split.cc).
    positions = _Positions(request, rows, tokens, batch_axis is None,
                           _position_axes(request.config))
    if not positions.valid:
        return None
    boxes = []
    for qh, kh in pairs:
        token_bytes = (len(qh) * q_head + len(kh) * k_head) // tokens
        t = fewest_pieces(tokens, token_bytes, budget)
        if t is not None:
            boxes += [_Box(qh, kh, r) for r in even_ranges(tokens, t)]
            continue
        b = fewest_pieces(rows, token_bytes // rows, budget) if batch_axis is not None else None
        if b is None:
            what = "one token of one head" if batch_axis is None else (
                "one token of one head of one batch row")
            raise _too_large("ApplyRope", what, token_bytes // rows, budget, limits)
        boxes += [_Box(qh, kh, range(s, s + 1), r) for s in range(tokens)
                  for r in even_ranges(rows, b)]
    return _rope_plan(request, q, k, axes, boxes, positions, budget)


def _rope_plan(request: pb.ApplyRopeRequest, q: np.ndarray, k: Optional[np.ndarray],
               axes: Tuple[Optional[int], int, int], boxes: List[_Box],
               positions: Optional[_Positions], budget: int) -> Plan:
    """The pieces of ``boxes``; ``positions`` when tokens or rows are cut (else unchanged)."""
    batch_axis, token_axis, head_axis = axes
    seq_len = None
    if positions is not None and not request.config.HasField("seq_len"):
        seq_len = max(positions.max_position() + 1, 1)

    def index(box: _Box, heads: range) -> Tuple[slice, ...]:
        out = [slice(None)] * q.ndim
        out[head_axis] = slice(heads.start, heads.stop)
        if box.tokens is not None:
            out[token_axis] = slice(box.tokens.start, box.tokens.stop)
        if box.rows is not None and batch_axis is not None:
            out[batch_axis] = slice(box.rows.start, box.rows.stop)
        return tuple(out)

    pieces = []
    for box in boxes:
        piece = like(request, pb.ApplyRopeRequest(layout=request.layout))
        piece.config.CopyFrom(request.config)
        if seq_len is not None:
            piece.config.seq_len = seq_len
        put_tensor(piece, "q", DType(request.q.dtype), q[index(box, box.q_heads)])
        if k is not None and box.k_heads:
            put_tensor(piece, "k", DType(request.k.dtype), k[index(box, box.k_heads)])
        if positions is None:
            if request.HasField("positions"):
                piece.positions.CopyFrom(request.positions)
        else:
            rows = box.rows if box.rows is not None else range(positions.rows)
            positions.rebased(rows, box.tokens or range(positions.tokens), piece)
        pieces.append(piece)

    # The results, made first: the native transport writes each piece's answer into its place
    # as it comes (sinks), gRPC Python's are pasted in the join.
    q_out = np.empty_like(q)
    k_out = np.empty_like(k) if k is not None else None

    def sinks(i: int) -> Optional[Dict[int, List[Any]]]:
        box = boxes[i]
        places = {1: runs(q_out[index(box, box.q_heads)])}
        if k_out is not None and box.k_heads:
            places[2] = runs(k_out[index(box, box.k_heads)])
        if any(p is None for p in places.values()):
            return None
        return places  # type: ignore[return-value]

    def join(answers: Sequence[Tuple[Any, FrozenSet[int]]]) -> Any:
        responses = [response for response, _ in answers]
        out = like(responses[0], pb.ApplyRopeResponse())
        out.derived.CopyFrom(responses[0].derived)
        for i, (box, (response, written)) in enumerate(zip(boxes, answers)):
            _placed(q_out, index(box, box.q_heads), response.q, "q", i, 1 in written)
            if k_out is not None and box.k_heads:
                _placed(k_out, index(box, box.k_heads), response.k, "k", i, 2 in written)
        if positions is not None and positions.padding is not None:
            # Padding passes through ApplyRope unchanged: the pieces rotated it as position 0.
            for src, dst in ((q, q_out), (k, k_out)):
                if src is not None and dst is not None:
                    grid = np.moveaxis(dst, head_axis, -2)  # [B, S, H, D] views
                    grid[positions.padding] = np.moveaxis(src, head_axis, -2)[positions.padding]
        put_tensor(out, "q", DType(request.q.dtype), q_out, owned=True)
        if k_out is not None:
            put_tensor(out, "k", DType(request.k.dtype), k_out, owned=True)
        return out

    return Plan(pieces, join, budget, sinks)


# ---------------------------------------------------------------------------------------------
# AddPositionEncoding: batch rows, then tokens of one row.
# ---------------------------------------------------------------------------------------------
# The width of AddPositionEncoding's y from x's and the encoding's, per Combine.
Y_WIDTH: Dict[Combine, Callable[[int, int], int]] = {
    Combine.ADD: lambda x, encoding: x,
    Combine.CONCAT: lambda x, encoding: x + encoding,
}


def _encoding_width(request: pb.AddPositionEncodingRequest, width: int,
                    tables: Mapping[str, Tuple[int, ...]]) -> Optional[int]:
    """The width of y; None when unknown (a request the server will refuse)."""
    combine = request.combine or Combine.ADD
    if combine not in Y_WIDTH:
        return None
    encoding = width
    source = request.WhichOneof("source")
    if source == "sinusoidal" and request.sinusoidal.dim > 0:
        encoding = request.sinusoidal.dim
    elif source == "learned":
        learned = request.learned
        shape = (tuple(learned.table_inline.shape) if learned.HasField("table_inline")
                 else tables.get(learned.table_name))
        if shape is None or len(shape) != 2:
            return None
        encoding = shape[1]
    return Y_WIDTH[Combine(combine)](width, encoding)


def plan_add_position_encoding(request: pb.AddPositionEncodingRequest, limits: LimitsFn
                               ) -> Optional[Plan]:
    """The pieces of an AddPositionEncoding request over the limit, or None."""
    x = wire_array(request.x)
    if x is None or request.x.dtype not in FLOAT_DTYPES or x.ndim not in (2, 3) or x.size == 0:
        return None
    grid = x if x.ndim == 3 else x[None]  # [B, T, D]
    rows, tokens, width = grid.shape
    extra = request.ByteSize() - x.nbytes
    # The server's tables are needed only for a CONCAT learned by name.
    y_width = _encoding_width(request, width, {} if request.learned.table_name == "" else (
        limits().tables))
    if y_width is None:
        return None
    token_bytes = max(width, y_width) * x.itemsize
    budget = _budget(rows * tokens * token_bytes, extra, limits)
    if budget is None:
        return None
    positions = _Positions(request, rows, tokens, False, 1)
    if not positions.valid:
        return None
    boxes: List[Tuple[range, Optional[range]]] = []
    b = fewest_pieces(rows, tokens * token_bytes, budget) if x.ndim == 3 else None
    if b is not None:
        boxes = [(r, None) for r in even_ranges(rows, b)]
    else:
        t = fewest_pieces(tokens, token_bytes, budget)
        if t is None:
            raise _too_large("AddPositionEncoding", "one token", token_bytes, budget, limits)
        if positions.kind == "attention_mask":
            raise _too_large("AddPositionEncoding", "one batch row (attention-mask positions "
                             "are cut along batch rows only)", tokens * token_bytes, budget,
                             limits)
        boxes = [(range(r, r + 1), s) for r in range(rows) for s in even_ranges(tokens, t)]

    def index(box: Tuple[range, Optional[range]]) -> Tuple[slice, ...]:
        r, s = box
        token_slice = slice(s.start, s.stop) if s is not None else slice(None)
        return (slice(r.start, r.stop), token_slice)

    template = pb.AddPositionEncodingRequest()
    template.CopyFrom(message_of(request))
    template.ClearField("x")
    template.ClearField("positions")
    pieces = []
    for box in boxes:
        piece = like(request, pb.AddPositionEncodingRequest())
        piece.CopyFrom(template)
        put_tensor(piece, "x", DType(request.x.dtype),
                   grid[index(box)] if x.ndim == 3 else grid[index(box)][0])
        if box[1] is None:
            positions.rows_only(box[0], piece)
        else:
            positions.rebased(box[0], box[1], piece)
        pieces.append(piece)

    y_shape, rank = (rows, tokens, y_width), x.ndim

    def join(responses: Sequence[Any]) -> Any:
        y = np.empty(y_shape, grid.dtype)
        for i, (box, response) in enumerate(zip(boxes, responses)):
            if rank == 2:  # a [T, D] piece answers [n, D']
                _placed(y[0], index(box)[1:], response.y, "y", i)
            else:
                _placed(y, index(box), response.y, "y", i)
        out = like(responses[0], pb.AddPositionEncodingResponse())
        put_tensor(out, "y", DType(request.x.dtype), y if rank == 3 else y[0], owned=True)
        return out

    return Plan(pieces, join, budget)


# ---------------------------------------------------------------------------------------------
# AlibiBias, RelativeBias, RelativeEmbedding: query rows.
# ---------------------------------------------------------------------------------------------
# Whether a bias form's output is cut along query rows (UNSPECIFIED is FULL). COMPACT is not:
# a Toeplitz generator's rows overlap, and it is a fraction of the FULL bytes.
CUT_FORMS: Dict[BiasForm, bool] = {
    BiasForm.FULL: True,
    BiasForm.COMPACT: False,
    BiasForm.BUCKETS: True,
}


def _cut_form(form: int) -> Optional[BiasForm]:
    """The form of a request when it is cut along query rows, else None."""
    resolved = form or BiasForm.FULL
    if resolved not in CUT_FORMS or not CUT_FORMS[BiasForm(resolved)]:
        return None
    return BiasForm(resolved)


def _query_rows(method: str, request: Any, row_bytes: int, field: str, axis: int,
                limits: LimitsFn) -> Optional[Plan]:
    """Pieces of query rows [b, b+n) (q_len n, query_offset the request's + b), joined along
    the output's ``axis`` (from the end); None when the whole output fits."""
    q_len = request.q_len
    budget = _budget(q_len * row_bytes, request.ByteSize(), limits)
    if budget is None:
        return None
    p = fewest_pieces(q_len, row_bytes, budget)
    if p is None:
        raise _too_large(method, "one query row", row_bytes, budget, limits)
    offset = request.query_offset if request.HasField("query_offset") else (
        request.k_len - q_len)
    pieces = []
    for r in even_ranges(q_len, p):
        piece = copied(request)
        piece.q_len = len(r)
        piece.query_offset = offset + r.start
        pieces.append(piece)

    def join(responses: Sequence[Any]) -> Any:
        parts: List[np.ndarray] = []
        for i, (response, piece) in enumerate(zip(responses, pieces)):
            part = wire_array(getattr(response, field))
            if part is None or part.ndim < -axis or part.shape[axis] != piece.q_len or (
                    parts and _without(part.shape, axis) != _without(parts[0].shape, axis)):
                shape = list(part.shape) if part is not None else "unreadable"
                raise InternalError(grpc.StatusCode.INTERNAL, f"split: the server answered "
                                    f"piece {i} with {field} {shape}")
            parts.append(part)
        out = copied(responses[0])
        put_tensor(out, field, DType(getattr(responses[0], field).dtype),
                   np.concatenate(parts, axis=axis), owned=True)
        return out

    return Plan(pieces, join, budget)


def _without(shape: Tuple[int, ...], axis: int) -> Tuple[int, ...]:
    return shape[:axis] + shape[axis + 1:] if axis != -1 else shape[:-1]


def _table_columns(request: Any, tables: LimitsFn) -> Optional[int]:
    """Columns of a RelativeBias / RelativeEmbedding table (heads, or the embedding width)."""
    if request.HasField("table_inline"):
        shape = tuple(request.table_inline.shape)
    elif request.table_name:
        shape = tuple(tables().tables.get(request.table_name, ()))
    else:
        return None
    return shape[1] if len(shape) == 2 and shape[1] > 0 else None


def plan_alibi_bias(request: pb.AlibiBiasRequest, limits: LimitsFn) -> Optional[Plan]:
    """A FULL AlibiBias over the limit cut along query rows, or None (COMPACT is not cut)."""
    heads, q_len, k_len = request.num_heads, request.q_len, request.k_len
    size = itemsize(request.output_dtype)
    if _cut_form(request.form) != BiasForm.FULL or min(heads, q_len, k_len, size) <= 0:
        return None
    mask = request.attention_mask
    batch = mask.shape[0] if request.HasField("attention_mask") and len(mask.shape) == 2 else 1
    return _query_rows("AlibiBias", request, batch * heads * k_len * size, "bias", -2, limits)


def plan_relative_bias(request: pb.RelativeBiasRequest, limits: LimitsFn) -> Optional[Plan]:
    """A FULL or BUCKETS RelativeBias over the limit cut along query rows, or None."""
    form = _cut_form(request.form)
    if form is None or request.q_len <= 0 or request.k_len <= 0:
        return None
    if form == BiasForm.BUCKETS:
        heads, size = 1, itemsize(DType.INT32)
    else:
        heads, size = _table_columns(request, limits) or 0, itemsize(request.output_dtype)
    if heads <= 0 or size <= 0:
        return None
    return _query_rows("RelativeBias", request, heads * request.k_len * size, "bias", -2, limits)


def plan_relative_embedding(request: pb.RelativeEmbeddingRequest, limits: LimitsFn
                            ) -> Optional[Plan]:
    """A RelativeEmbedding over the limit cut along query rows, or None."""
    width = _table_columns(request, limits)
    size = itemsize(request.output_dtype)
    if width is None or size <= 0 or request.q_len <= 0 or request.k_len <= 0:
        return None
    return _query_rows("RelativeEmbedding", request, request.k_len * width * size, "embeddings",
                       -3, limits)
