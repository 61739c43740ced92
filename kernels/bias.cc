// ALiBi slopes, T5 buckets, and the planning of the bias and relative-embedding ops.
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ops.h"

namespace posenc::kernels {
namespace {

// Offsets and lengths stay within +-2^53 so differences are exact in int64 and in double.
constexpr int64_t kMaxExtent = int64_t{1} << 53;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckLength(absl::string_view field, int64_t v) {
  if (v <= 0 || v > kMaxExtent) {
    return Invalid(field, absl::StrCat("expected 1 .. 2^53, got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckOffset(absl::string_view field, int64_t v) {
  if (v < -kMaxExtent || v > kMaxExtent) {
    return Invalid(field, absl::StrCat("expected |offset| <= 2^53, got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckTable(absl::string_view field, const ConstTensorView& t, int64_t rows,
                        absl::string_view rows_name) {
  if (t.data == nullptr) return Invalid(field, "required: an inline table or a table name");
  if (!IsFloatDType(t.dtype)) {
    return Invalid(field, absl::StrCat("expected a float dtype, got ", DTypeName(t.dtype)));
  }
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] <= 0) {
    return Invalid(field, absl::StrCat("expected shape [", rows_name, " = ", rows,
                                       ", N >= 1], got ", ShapeString(t.shape)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> AlibiSlopes(int64_t n, double max_bias) {
  if (n <= 0 || n > (int64_t{1} << 24)) {
    return Invalid("num_heads", absl::StrCat("expected 1 .. 2^24, got ", n));
  }
  if (!std::isfinite(max_bias) || !(max_bias > 0)) {
    return Invalid("max_bias", absl::StrCat("expected a finite number > 0, got ", max_bias));
  }
  int64_t c = 1;
  while (c * 2 <= n) c *= 2;
  std::vector<double> slopes;
  slopes.reserve(static_cast<size_t>(n));
  const double cd = static_cast<double>(c);
  for (int64_t h = 1; h <= c; ++h) {
    slopes.push_back(std::exp2(-max_bias * static_cast<double>(h) / cd));
  }
  for (int64_t k = 1; k <= n - c; ++k) {
    slopes.push_back(std::exp2(-(max_bias / 2) * static_cast<double>(2 * k - 1) / cd));
  }
  return slopes;
}

absl::StatusOr<Shape> PlanAlibiBias(const AlibiBiasParams& p) {
  if (p.num_heads <= 0 || p.num_heads > (int64_t{1} << 24)) {
    return Invalid("num_heads", absl::StrCat("expected 1 .. 2^24, got ", p.num_heads));
  }
  if (auto s = CheckLength("q_len", p.q_len); !s.ok()) return s;
  if (auto s = CheckLength("k_len", p.k_len); !s.ok()) return s;
  if (p.query_offset) {
    if (auto s = CheckOffset("query_offset", *p.query_offset); !s.ok()) return s;
  }
  if (!std::isfinite(p.max_bias) || !(p.max_bias > 0)) {
    return Invalid("max_bias", absl::StrCat("expected a finite number > 0, got ", p.max_bias));
  }
  if (p.form == BiasForm::kBuckets) {
    return Invalid("form", "BIAS_FORM_BUCKETS is for RelativeBias; AlibiBias takes FULL or COMPACT");
  }
  const bool masked = p.attention_mask.data != nullptr;
  if (masked) {
    if (p.mode != AlibiMode::kBloom) {
      return Invalid("attention_mask", "applies to mode ALIBI_MODE_BLOOM only");
    }
    if (!IsIntDType(p.attention_mask.dtype)) {
      return Invalid("attention_mask", absl::StrCat("expected dtype INT32 or INT64, got ",
                                                    DTypeName(p.attention_mask.dtype)));
    }
    if (p.attention_mask.shape.size() != 2 || p.attention_mask.shape[1] != p.k_len ||
        p.attention_mask.shape[0] <= 0) {
      return Invalid("attention_mask", absl::StrCat("expected shape [batch, k_len = ", p.k_len,
                                                    "], got ",
                                                    ShapeString(p.attention_mask.shape)));
    }
  }
  Shape shape;
  if (masked) shape.push_back(p.attention_mask.shape[0]);
  shape.push_back(p.num_heads);
  if (p.form == BiasForm::kCompact) {
    if (p.mode == AlibiMode::kBloom) {
      shape.push_back(p.k_len);
    } else {
      shape.push_back(p.q_len + p.k_len - 1);
    }
  } else {
    shape.push_back(p.q_len);
    shape.push_back(p.k_len);
  }
  return shape;
}

int64_t T5Bucket(int64_t rp, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0;
  int64_t nb = num_buckets;
  if (bidirectional) {
    nb /= 2;
    if (rp > 0) bucket += nb;
    rp = rp < 0 ? -rp : rp;
  } else {
    rp = rp < 0 ? -rp : 0;
  }
  const int64_t exact = nb / 2;
  if (rp < exact) return bucket + rp;
  const double large = static_cast<double>(exact) +
                       std::log(static_cast<double>(rp) / static_cast<double>(exact)) /
                           std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
                           static_cast<double>(nb - exact);
  // floor, then clamp (a double beyond int64 range only happens above nb anyway)
  const double clamped = std::min(std::floor(large), static_cast<double>(nb - 1));
  return bucket + static_cast<int64_t>(clamped);
}

absl::StatusOr<Shape> PlanRelativeBias(const RelativeBiasParams& p) {
  if (auto s = CheckLength("q_len", p.q_len); !s.ok()) return s;
  if (auto s = CheckLength("k_len", p.k_len); !s.ok()) return s;
  if (p.query_offset) {
    if (auto s = CheckOffset("query_offset", *p.query_offset); !s.ok()) return s;
  }
  if (auto s = CheckOffset("key_offset", p.key_offset); !s.ok()) return s;
  const int64_t min_buckets = p.bidirectional ? 4 : 2;
  if (p.num_buckets < min_buckets || p.num_buckets > (int64_t{1} << 24)) {
    return Invalid("num_buckets", absl::StrCat("expected ", min_buckets, " .. 2^24 (",
                                               p.bidirectional ? "bidirectional" : "unidirectional",
                                               "), got ", p.num_buckets));
  }
  const int64_t exact = (p.bidirectional ? p.num_buckets / 2 : p.num_buckets) / 2;
  if (p.max_distance <= exact) {
    return Invalid("max_distance",
                   absl::StrCat("expected > the exact range ", exact, " (num_buckets ",
                                p.num_buckets, ", ",
                                p.bidirectional ? "bidirectional" : "unidirectional", "), got ",
                                p.max_distance));
  }
  if (p.form == BiasForm::kBuckets) return Shape{p.q_len, p.k_len};
  if (auto s = CheckTable("table", p.table, p.num_buckets, "num_buckets"); !s.ok()) return s;
  const int64_t heads = p.table.shape[1];
  if (p.form == BiasForm::kCompact) return Shape{heads, p.q_len + p.k_len - 1};
  return Shape{heads, p.q_len, p.k_len};
}

absl::StatusOr<Shape> PlanRelativeEmbedding(const RelativeEmbeddingParams& p) {
  if (auto s = CheckLength("q_len", p.q_len); !s.ok()) return s;
  if (auto s = CheckLength("k_len", p.k_len); !s.ok()) return s;
  if (p.query_offset) {
    if (auto s = CheckOffset("query_offset", *p.query_offset); !s.ok()) return s;
  }
  if (auto s = CheckOffset("key_offset", p.key_offset); !s.ok()) return s;
  if (p.max_relative < 0 || p.max_relative > (int64_t{1} << 30)) {
    return Invalid("max_relative", absl::StrCat("expected 0 .. 2^30, got ", p.max_relative));
  }
  if (auto s = CheckTable("table", p.table, 2 * p.max_relative + 1, "2*max_relative+1"); !s.ok()) {
    return s;
  }
  return Shape{p.q_len, p.k_len, p.table.shape[1]};
}

}  // namespace posenc::kernels
