// Sinusoidal and learned absolute encodings: validation, frequencies and shape planning.
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ops.h"

namespace posenc::kernels {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::Status ValidateSinusoidal(const SinusoidalParams& p, absl::string_view field) {
  if (p.dim <= 0) {
    return Invalid(absl::StrCat(field, ".dim"), absl::StrCat("expected > 0, got ", p.dim));
  }
  if (!std::isfinite(p.base) || !(p.base > 0) || p.base == 1.0) {
    return Invalid(absl::StrCat(field, ".base"),
                   absl::StrCat("expected a finite number > 0 and != 1, got ", p.base));
  }
  return absl::OkStatus();
}

FreqScheme EffectiveFreqScheme(const SinusoidalParams& p) {
  if (p.scheme != FreqScheme::kDefault) return p.scheme;
  return p.layout == SinusoidalLayout::kConcat ? FreqScheme::kT2t : FreqScheme::kVaswani;
}

std::vector<long double> SinusoidalFrequencies(const SinusoidalParams& p) {
  const FreqScheme scheme = EffectiveFreqScheme(p);
  const int64_t half = p.dim / 2;
  const bool odd_sin = p.layout == SinusoidalLayout::kInterleaved &&
                       scheme == FreqScheme::kVaswani && p.dim % 2 == 1;
  const int64_t n = half + (odd_sin ? 1 : 0);
  std::vector<long double> omega(static_cast<size_t>(n));
  const long double b = p.base;
  for (int64_t k = 0; k < n; ++k) {
    const long double kk = static_cast<long double>(k);
    if (scheme == FreqScheme::kVaswani) {
      omega[k] = std::pow(b, -2.0L * kk / static_cast<long double>(p.dim));
    } else {
      const long double denom = static_cast<long double>(std::max<int64_t>(half - 1, 1));
      omega[k] = std::pow(b, -kk / denom);
    }
  }
  return omega;
}

absl::StatusOr<Shape> PlanSinusoidal(const SinusoidalParams& params, const PositionSpec& positions,
                                     GridRequest* grid) {
  if (auto s = ValidateSinusoidal(params, "params"); !s.ok()) return s;
  grid->kind = GridRequest::Kind::kTable;
  grid->components = 1;
  absl::StatusOr<Shape> shape = PlanPositions(positions, *grid);
  if (!shape.ok()) return shape.status();
  shape->push_back(params.dim);
  return shape;
}

absl::StatusOr<Shape> PlanAddPositionEncoding(AddPositionEncodingParams& p, const Shape& x_shape,
                                              const PositionSpec& positions, GridRequest* grid) {
  if (x_shape.size() != 2 && x_shape.size() != 3) {
    return Invalid("x", absl::StrCat("expected shape [B, T, D] or [T, D], got ",
                                     ShapeString(x_shape)));
  }
  for (int64_t v : x_shape) {
    if (v <= 0) {
      return Invalid("x", absl::StrCat("expected every dimension > 0, got shape ",
                                       ShapeString(x_shape)));
    }
  }
  const int64_t batch = x_shape.size() == 3 ? x_shape[0] : 1;
  const int64_t seq = x_shape[x_shape.size() - 2];
  const int64_t dim = x_shape.back();
  if (!std::isfinite(p.scale)) {
    return Invalid("scale", absl::StrCat("expected a finite number, got ", p.scale));
  }
  int64_t pe_dim = 0;
  if (p.sinusoidal) {
    if (p.sinusoidal->dim == 0) p.sinusoidal->dim = dim;
    if (auto s = ValidateSinusoidal(*p.sinusoidal, "sinusoidal"); !s.ok()) return s;
    pe_dim = p.sinusoidal->dim;
    if (p.padding_idx && *p.padding_idx < 0) {
      return Invalid("padding_idx", absl::StrCat("expected >= 0, got ", *p.padding_idx));
    }
    if (p.padding_idx && *p.padding_idx > kMaxPosition) {
      return Invalid("padding_idx", absl::StrCat("expected < 2^31, got ", *p.padding_idx));
    }
  } else {
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
      return Invalid("learned.table_inline", absl::StrCat("expected shape [max_pos, D], got ",
                                                          ShapeString(p.learned.shape)));
    }
    if (p.table_offset < 0 || p.table_offset > kMaxPosition) {
      return Invalid("learned.table_offset",
                     absl::StrCat("expected 0 <= table_offset < 2^31, got ", p.table_offset));
    }
    pe_dim = p.learned.shape[1];
  }
  if (p.combine == Combine::kAdd && pe_dim != dim) {
    return Invalid(p.sinusoidal ? "sinusoidal.dim" : "learned.table_inline",
                   absl::StrCat("combine ADD needs the encoding width to equal x's last dimension ",
                                dim, ", got ", pe_dim));
  }
  grid->kind = GridRequest::Kind::kBatchSeq;
  grid->batch = batch;
  grid->seq = seq;
  grid->components = 1;
  absl::StatusOr<Shape> g = PlanPositions(positions, *grid);
  if (!g.ok()) return g.status();
  Shape out = x_shape;
  if (p.combine == Combine::kConcat) {
    int64_t w;
    if (!CheckedAdd(dim, pe_dim, &w)) return Invalid("x", "output width overflows");
    out.back() = w;
  }
  return out;
}

absl::Status CheckAddPositionEncodingViews(const AddPositionEncodingParams& params,
                                           const ConstTensorView& x,
                                           const ResolvedPositions& positions,
                                           const TensorView& y) {
  const int64_t dim = x.shape.empty() ? 0 : x.shape.back();
  const int64_t pe_dim = params.sinusoidal ? params.sinusoidal->dim
                         : params.learned.shape.size() == 2 ? params.learned.shape[1]
                                                            : -1;
  const int64_t out_dim = y.shape.empty() ? 0 : y.shape.back();
  if (positions.num_tokens * dim != x.NumElements() || y.dtype != x.dtype ||
      out_dim != (params.combine == Combine::kAdd ? dim : dim + pe_dim)) {
    return absl::InternalError("AddPositionEncoding: views do not match the plan");
  }
  if (params.sinusoidal) return absl::OkStatus();
  const int64_t rows = params.learned.shape[0];
  for (int64_t t = 0; t < positions.num_tokens; ++t) {
    if (!positions.IsValid(t)) continue;
    const int64_t row = positions.At(t) + params.table_offset;
    if (row >= rows) {
      return absl::OutOfRangeError(absl::StrCat(
          "positions: token ", t, " has position ", positions.At(t), ", which reads row ", row,
          " (table_offset ", params.table_offset, ") of a learned table with ", rows, " rows"));
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc::kernels
