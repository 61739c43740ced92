#include "kernels/common/positions.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

using Kind = PositionSpec::Kind;
using GridKind = TokenGrid::Kind;

absl::string_view KindField(Kind kind) {
  switch (kind) {
    case Kind::kDefault: return "positions";
    case Kind::kRange: return "positions.range";
    case Kind::kOffsets: return "positions.offsets";
    case Kind::kIds: return "positions.ids";
    case Kind::kCuSeqlens: return "positions.cu_seqlens";
    case Kind::kAttentionMask: return "positions.attention_mask";
  }
  return "positions";
}

std::string GridName(const TokenGrid& r) {
  switch (r.kind) {
    case GridKind::kTable: return "a table";
    case GridKind::kBatchSeq: return absl::StrCat("[batch, seq] = [", r.batch, ", ", r.seq, "]");
    case GridKind::kPacked: return absl::StrCat("packed [tokens] = [", r.tokens, "]");
  }
  return "";
}

absl::Status CheckIntTensor(const ConstTensorView& t, absl::string_view field) {
  if (!IsIntDType(t.dtype)) {
    return Invalid(field, absl::StrCat("expected dtype INT32 or INT64, got ", DTypeName(t.dtype)));
  }
  if (t.data == nullptr && t.NumElements() > 0) return Invalid(field, "missing data");
  return absl::OkStatus();
}

// Splits ids' shape into the token grid (dropping the leading axis of the position axes).
absl::StatusOr<Shape> IdsGrid(const ConstTensorView& ids, int64_t components) {
  Shape grid = ids.shape;
  if (components > 1) {
    if (grid.empty() || grid[0] != components) {
      return Invalid(
          "positions.ids",
          absl::StrCat(components == 3 ? "M-RoPE expects ids of shape [3, ...] (t, h, w)"
                                       : absl::StrCat("the config reads ", components,
                                                      " position axes: expected ids of shape [",
                                                      components, ", ...]"),
                       ", got ", ShapeString(ids.shape)));
    }
    grid.erase(grid.begin());
  }
  if (grid.empty()) {
    return Invalid("positions.ids", absl::StrCat("expected at least one token axis, got shape ",
                                                 ShapeString(ids.shape)));
  }
  return grid;
}

// The grid of a request that is not a table: [batch, seq] or [tokens].
Shape DefaultShape(const TokenGrid& r) {
  if (r.kind == GridKind::kBatchSeq) return Shape{r.batch, r.seq};
  return Shape{r.tokens};
}

// Each kind of positions on the grid `r`: the grid shape, or why it does not fit.
absl::StatusOr<Shape> PlanRange(const PositionSpec& spec, const TokenGrid& r) {
  if (spec.start < 0 || spec.start > kMaxPosition) {
    return Invalid("positions.range.start",
                   absl::StrCat("expected 0 <= start < 2^31, got ", spec.start));
  }
  if (spec.count < 0) {
    return Invalid("positions.range.count", absl::StrCat("expected >= 0, got ", spec.count));
  }
  int64_t want = r.kind == GridKind::kBatchSeq ? r.seq
                 : r.kind == GridKind::kPacked ? r.tokens
                                               : -1;
  int64_t count = spec.count;
  if (r.kind == GridKind::kTable) {
    if (count == 0) {
      return Invalid("positions.range.count", "expected >= 1 for a table, got 0");
    }
  } else {
    if (count != 0 && count != want) {
      return Invalid("positions.range.count",
                     absl::StrCat("expected ", want, " (the sequence length) or 0, got ", count));
    }
    count = want;
  }
  if (spec.start + (count - 1) > kMaxPosition) {
    return Invalid("positions.range",
                   absl::StrCat("last position ", spec.start + count - 1,
                                " is not below 2^31 (start ", spec.start, ", count ", count, ")"));
  }
  if (r.kind == GridKind::kTable) return Shape{count};
  return DefaultShape(r);
}

absl::StatusOr<Shape> PlanOffsets(const PositionSpec& spec, const TokenGrid& r) {
  const absl::string_view field = KindField(spec.kind);
  if (r.kind != GridKind::kBatchSeq) {
    return Invalid(field, absl::StrCat("per-sequence offsets need a [batch, seq] input; this "
                                       "request has ",
                                       GridName(r)));
  }
  if (static_cast<int64_t>(spec.offsets.size()) != r.batch) {
    return Invalid(field, absl::StrCat("expected ", r.batch, " offsets (one per sequence), got ",
                                       spec.offsets.size()));
  }
  return DefaultShape(r);
}

absl::StatusOr<Shape> PlanIds(const PositionSpec& spec, const TokenGrid& r) {
  const absl::string_view field = KindField(spec.kind);
  if (auto s = CheckIntTensor(spec.ids, field); !s.ok()) return s;
  absl::StatusOr<Shape> grid = IdsGrid(spec.ids, r.components);
  if (!grid.ok()) return grid.status();
  if (r.kind == GridKind::kTable) return *grid;
  const std::string expected = r.kind == GridKind::kBatchSeq
                                   ? absl::StrCat("[", r.seq, "] or [", r.batch, ", ", r.seq, "]")
                                   : absl::StrCat("[", r.tokens, "]");
  bool ok = r.kind == GridKind::kBatchSeq
                ? ((grid->size() == 1 && (*grid)[0] == r.seq) ||
                   (grid->size() == 2 && (*grid)[0] == r.batch && (*grid)[1] == r.seq))
                : (grid->size() == 1 && (*grid)[0] == r.tokens);
  if (!ok) {
    return Invalid(
        field,
        absl::StrCat("expected token shape ", expected,
                     r.components > 1 ? absl::StrCat(" after the leading ", r.components) : "",
                     ", got ", ShapeString(spec.ids.shape)));
  }
  return DefaultShape(r);
}

absl::StatusOr<Shape> PlanCuSeqlens(const PositionSpec& spec, const TokenGrid& r) {
  const absl::string_view field = KindField(spec.kind);
  if (r.kind == GridKind::kBatchSeq) {
    return Invalid(field, "cu_seqlens needs the packed THD layout (layout = TENSOR_LAYOUT_THD)");
  }
  const auto& cu = spec.cu_seqlens;
  if (cu.size() < 2) {
    return Invalid(field, absl::StrCat("expected batch+1 >= 2 entries, got ", cu.size()));
  }
  if (cu[0] != 0) return Invalid(field, absl::StrCat("expected cu_seqlens[0] == 0, got ", cu[0]));
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      return Invalid(field, absl::StrCat("must be non-decreasing: cu_seqlens[", i, "] = ", cu[i],
                                         " < cu_seqlens[", i - 1, "] = ", cu[i - 1]));
    }
  }
  if (!spec.offsets.empty() && spec.offsets.size() != cu.size() - 1) {
    return Invalid("positions.cu_seqlens.offsets",
                   absl::StrCat("expected ", cu.size() - 1, " offsets (one per sequence), got ",
                                spec.offsets.size()));
  }
  if (r.kind == GridKind::kPacked && cu.back() != r.tokens) {
    return Invalid(field, absl::StrCat("last entry must equal the token count ", r.tokens, ", got ",
                                       cu.back()));
  }
  if (r.kind == GridKind::kTable) {
    if (cu.back() == 0) return Invalid(field, "expected at least one token, got 0");
    return Shape{cu.back()};
  }
  return DefaultShape(r);
}

absl::StatusOr<Shape> PlanMask(const PositionSpec& spec, const TokenGrid& r) {
  const absl::string_view field = KindField(spec.kind);
  if (auto s = CheckIntTensor(spec.mask, field); !s.ok()) return s;
  if (r.kind == GridKind::kPacked) {
    return Invalid(field, "an attention_mask needs a [batch, seq] input, not packed THD");
  }
  if (spec.mask.shape.size() != 2) {
    return Invalid(field,
                   absl::StrCat("expected shape [batch, seq], got ", ShapeString(spec.mask.shape)));
  }
  if (r.kind == GridKind::kTable) return spec.mask.shape;
  if (spec.mask.shape[0] != r.batch || spec.mask.shape[1] != r.seq) {
    return Invalid(field, absl::StrCat("expected shape [", r.batch, ", ", r.seq, "], got ",
                                       ShapeString(spec.mask.shape)));
  }
  return DefaultShape(r);
}

// The grid shape of `spec` on `r`, or why it does not fit.
absl::StatusOr<Shape> PlanGridShape(const PositionSpec& spec, const TokenGrid& r) {
  if (r.components < 1 || r.components > 4) {
    return absl::InternalError("positions: components must be 1 .. 4");
  }
  switch (spec.kind) {
    case Kind::kDefault:
      if (r.kind == GridKind::kTable) {
        return Invalid("positions", "required: a range, ids, cu_seqlens or an attention_mask");
      }
      return DefaultShape(r);
    case Kind::kRange: return PlanRange(spec, r);
    case Kind::kOffsets: return PlanOffsets(spec, r);
    case Kind::kIds: return PlanIds(spec, r);
    case Kind::kCuSeqlens: return PlanCuSeqlens(spec, r);
    case Kind::kAttentionMask: return PlanMask(spec, r);
  }
  return DefaultShape(r);
}

}  // namespace

absl::StatusOr<PositionPlan> PlanPositions(PositionSpec spec, const TokenGrid& grid) {
  // Positions are resolved on the host: ids and masks in device memory cannot be read.
  for (const auto& [field, view] : {std::pair<const char*, const ConstTensorView&>{"ids", spec.ids},
                                    {"attention_mask", spec.mask}}) {
    if (view.on_device && view.data != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("positions.", field,
                       ": expected host memory (positions are resolved on the host), got "
                       "a CUDA device range"));
    }
  }
  PositionPlan plan;
  POSENC_ASSIGN_OR_RETURN(plan.shape, PlanGridShape(spec, grid));
  POSENC_ASSIGN_OR_RETURN(plan.num_tokens, NumElements(plan.shape, "positions"));
  plan.spec = std::move(spec);
  plan.grid = grid;
  return plan;
}

namespace {

// An attention mask's positions: each real token counts the real tokens before it in its row.
absl::Status FillFromMask(const PositionSpec& spec, ResolvedPositions* out) {
  out->valid.assign(static_cast<size_t>(out->num_tokens), 0);
  const int64_t cols = spec.mask.shape[1];
  for (int64_t row = 0; row < spec.mask.shape[0]; ++row) {
    int64_t real = 0;
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t t = row * cols + col;
      const int64_t m = LoadAsInt64(spec.mask.data, spec.mask.dtype, t);
      if (m != 0 && m != 1) {
        return Invalid("positions.attention_mask",
                       absl::StrCat("expected 0 or 1, got ", m, " at [", row, ", ", col, "]"));
      }
      out->valid[t] = static_cast<uint8_t>(m);
      out->pos[t] = m ? real : 0;
      real += m;
    }
  }
  return absl::OkStatus();
}

// Component 0 of every token's position (every component for ids), unchecked.
absl::Status FillPositions(const PositionSpec& spec, int64_t seq, ResolvedPositions* out) {
  // Sequence by sequence (no division per token: a 64-bit one costs more than the rest of it).
  const int64_t tokens = out->num_tokens;
  if (tokens > 0 && seq <= 0) {
    return absl::InternalError(
        absl::StrCat("positions: ", tokens, " tokens in sequences of ", seq));
  }
  switch (spec.kind) {
    case Kind::kDefault:
    case Kind::kRange: {
      const int64_t start = spec.kind == Kind::kRange ? spec.start : 0;
      out->consecutive_run = seq;
      for (int64_t t0 = 0; t0 < tokens; t0 += seq) {
        const int64_t n = std::min(seq, tokens - t0);
        for (int64_t i = 0; i < n; ++i) out->pos[t0 + i] = start + i;
      }
      break;
    }
    case Kind::kOffsets:
      out->consecutive_run = seq;
      for (int64_t t0 = 0, b = 0; t0 < tokens; t0 += seq, ++b) {
        const int64_t n = std::min(seq, tokens - t0);
        for (int64_t i = 0; i < n; ++i) {
          int64_t v;
          if (!CheckedAdd(spec.offsets[b], i, &v)) v = -1;
          out->pos[t0 + i] = v;
        }
      }
      break;
    case Kind::kIds: {
      // ids [S] broadcast over the batch, or the full grid; M-RoPE ids carry a leading 3.
      const int64_t per_component = spec.ids.NumElements() / out->components;
      if (per_component <= 0) break;
      for (int64_t c = 0; c < out->components; ++c) {
        int64_t* row = out->pos.data() + c * tokens;
        for (int64_t t0 = 0; t0 < tokens; t0 += per_component) {
          const int64_t n = std::min(per_component, tokens - t0);
          for (int64_t i = 0; i < n; ++i) {
            row[t0 + i] = LoadAsInt64(spec.ids.data, spec.ids.dtype, c * per_component + i);
          }
        }
      }
      break;
    }
    case Kind::kCuSeqlens: {
      const auto& cu = spec.cu_seqlens;
      for (size_t s = 0; s + 1 < cu.size(); ++s) {
        const int64_t base = spec.offsets.empty() ? 0 : spec.offsets[s];
        for (int64_t t = cu[s]; t < cu[s + 1]; ++t) {
          int64_t v;
          if (!CheckedAdd(base, t - cu[s], &v)) v = -1;
          out->pos[t] = v;
        }
      }
      break;
    }
    case Kind::kAttentionMask: POSENC_RETURN_IF_ERROR(FillFromMask(spec, out)); break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedPositions> ResolvePositions(const PositionPlan& plan) {
  const PositionSpec& spec = plan.spec;
  const TokenGrid& r = plan.grid;
  ResolvedPositions out;
  out.grid = plan.shape;
  out.components = r.components;
  out.num_tokens = plan.num_tokens;
  out.pos.assign(static_cast<size_t>(out.num_tokens * out.components), 0);
  POSENC_RETURN_IF_ERROR(
      FillPositions(spec, r.kind == GridKind::kBatchSeq ? r.seq : out.num_tokens, &out));
  if (spec.kind != Kind::kIds) {
    for (int64_t c = 1; c < out.components; ++c) {
      std::copy_n(out.pos.begin(), out.num_tokens, out.pos.begin() + c * out.num_tokens);
    }
  }
  const absl::string_view field = KindField(spec.kind);
  for (int64_t c = 0; c < out.components; ++c) {
    const int64_t* row = out.pos.data() + c * out.num_tokens;
    for (int64_t t = 0; t < out.num_tokens; ++t) {
      const int64_t p = row[t];
      if (p < 0 || p > kMaxPosition) {
        return Invalid(field, absl::StrCat("position of token ", t,
                                           out.components > 1 ? absl::StrCat(" (component ", c, ")")
                                                              : std::string(),
                                           " is ", p, ", expected an integer in [0, 2^31)"));
      }
      if (out.IsValid(t)) out.max_position = std::max(out.max_position, p);
    }
  }
  return out;
}

}  // namespace posenc::kernels
