// AddPositionEncoding: the plan (every check of the op) and the run.
#include "kernels/absolute/add_position_encoding.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

// The encoding's width, after checking the source (and filling a sinusoidal dim of 0).
absl::StatusOr<int64_t> PlanSource(AddPositionEncodingParams& p, int64_t dim) {
  if (p.sinusoidal) {
    if (p.sinusoidal->dim == 0) p.sinusoidal->dim = dim;
    POSENC_RETURN_IF_ERROR(ValidateSinusoidal(*p.sinusoidal, "sinusoidal"));
    if (p.padding_idx && *p.padding_idx < 0) {
      return Invalid("padding_idx", absl::StrCat("expected >= 0, got ", *p.padding_idx));
    }
    if (p.padding_idx && *p.padding_idx > kMaxPosition) {
      return Invalid("padding_idx", absl::StrCat("expected < 2^31, got ", *p.padding_idx));
    }
    return p.sinusoidal->dim;
  }
  if (p.learned.data == nullptr) {
    return Invalid("source", "expected a sinusoidal or a learned source, got neither");
  }
  if (p.padding_idx) {
    return Invalid("padding_idx",
                   "applies to sinusoidal sources only; learned tables take table_offset");
  }
  if (!IsFloatDType(p.learned.dtype)) {
    return Invalid("learned.table_inline",
                   absl::StrCat("expected a float dtype, got ", DTypeName(p.learned.dtype)));
  }
  if (p.learned.shape.size() != 2 || p.learned.shape[0] <= 0 || p.learned.shape[1] <= 0) {
    return Invalid("learned.table_inline",
                   absl::StrCat("expected shape [max_pos, D], got ", ShapeString(p.learned.shape)));
  }
  if (p.table_offset < 0 || p.table_offset > kMaxPosition) {
    return Invalid("learned.table_offset",
                   absl::StrCat("expected 0 <= table_offset < 2^31, got ", p.table_offset));
  }
  return p.learned.shape[1];
}

}  // namespace

absl::StatusOr<AddPositionEncodingPlan> PlanAddPositionEncoding(AddPositionEncodingArgs args) {
  const Shape& x_shape = args.x.shape;
  if (!IsFloatDType(args.x.dtype)) {
    return Invalid("x", absl::StrCat("expected a float dtype, got ", DTypeName(args.x.dtype)));
  }
  if (x_shape.size() != 2 && x_shape.size() != 3) {
    return Invalid("x",
                   absl::StrCat("expected shape [B, T, D] or [T, D], got ", ShapeString(x_shape)));
  }
  for (int64_t v : x_shape) {
    if (v <= 0) {
      return Invalid(
          "x", absl::StrCat("expected every dimension > 0, got shape ", ShapeString(x_shape)));
    }
  }
  AddPositionEncodingPlan plan;
  AddPositionEncodingParams& p = args.params;
  plan.dim = x_shape.back();
  if (!std::isfinite(p.scale)) {
    return Invalid("scale", absl::StrCat("expected a finite number, got ", p.scale));
  }
  POSENC_ASSIGN_OR_RETURN(plan.pe_dim, PlanSource(p, plan.dim));
  if (p.combine == Combine::kAdd && plan.pe_dim != plan.dim) {
    return Invalid(p.sinusoidal ? "sinusoidal.dim" : "learned.table_inline",
                   absl::StrCat("combine ADD needs the encoding width to equal x's last dimension ",
                                plan.dim, ", got ", plan.pe_dim));
  }
  plan.out_dim = plan.dim;
  if (p.combine == Combine::kConcat && !CheckedAdd(plan.dim, plan.pe_dim, &plan.out_dim)) {
    return Invalid("x", "output width overflows");
  }
  TokenGrid grid;
  grid.kind = TokenGrid::Kind::kBatchSeq;
  grid.batch = x_shape.size() == 3 ? x_shape[0] : 1;
  grid.seq = x_shape[x_shape.size() - 2];
  POSENC_ASSIGN_OR_RETURN(plan.positions, PlanPositions(std::move(args.positions), grid));
  plan.shift = p.sinusoidal && p.padding_idx ? *p.padding_idx + 1 : 0;
  if (p.sinusoidal) plan.frequencies = SinusoidalFrequencies(*p.sinusoidal);
  plan.y = {"y", args.x.dtype, x_shape};
  plan.y.shape.back() = plan.out_dim;
  plan.params = std::move(p);
  plan.x = std::move(args.x);
  return plan;
}

absl::Status RunAddPositionEncoding(const Backend& backend, const AddPositionEncodingPlan& plan,
                                    const TensorView& y) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"x", plan.x}, {"y", y}}));
  if (!plan.params.sinusoidal) POSENC_RETURN_IF_ERROR(CheckOnHost("table", plan.params.learned));
  POSENC_ASSIGN_OR_RETURN(ResolvedPositions positions, ResolvePositions(plan.positions));
  // Every learned row must exist before anything is written (y may alias x).
  if (!plan.params.sinusoidal) {
    const int64_t rows = plan.params.learned.shape[0];
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      if (!positions.IsValid(t)) continue;
      const int64_t row = positions.At(t) + plan.params.table_offset;
      if (row >= rows) {
        return absl::OutOfRangeError(absl::StrCat("positions: token ", t, " has position ",
                                                  positions.At(t), ", which reads row ", row,
                                                  " (table_offset ", plan.params.table_offset,
                                                  ") of a learned table with ", rows, " rows"));
      }
    }
  }
  return backend.AddPositionEncoding(plan, positions, y);
}

}  // namespace posenc::kernels
