// T5 buckets, the shared bias-plan checks (extents.h), and the plans and runs of RelativeBias and
// RelativeEmbedding.
#include "kernels/bias/relative.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/bias/extents.h"
#include "kernels/common/status.h"

namespace posenc::kernels {

absl::Status CheckLength(absl::string_view field, int64_t v) {
  if (v <= 0 || v > kMaxExtent) return Invalid(field, absl::StrCat("expected 1 .. 2^53, got ", v));
  return absl::OkStatus();
}

absl::Status CheckOffset(absl::string_view field, int64_t v) {
  if (v < -kMaxExtent || v > kMaxExtent) {
    return Invalid(field, absl::StrCat("expected |offset| <= 2^53, got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckWindow(int64_t q_len, int64_t k_len, std::optional<int64_t> query_offset,
                         int64_t key_offset) {
  POSENC_RETURN_IF_ERROR(CheckLength("q_len", q_len));
  POSENC_RETURN_IF_ERROR(CheckLength("k_len", k_len));
  if (query_offset) POSENC_RETURN_IF_ERROR(CheckOffset("query_offset", *query_offset));
  return CheckOffset("key_offset", key_offset);
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
  const double large =
      static_cast<double>(exact) +
      std::log(static_cast<double>(rp) / static_cast<double>(exact)) /
          std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
          static_cast<double>(nb - exact);
  // floor, then clamp (a double beyond int64 range only happens above nb anyway)
  const double clamped = std::min(std::floor(large), static_cast<double>(nb - 1));
  return bucket + static_cast<int64_t>(clamped);
}

absl::StatusOr<RelativeBiasPlan> PlanRelativeBias(RelativeBiasArgs args) {
  const RelativeBiasParams& p = args.params;
  POSENC_RETURN_IF_ERROR(CheckWindow(p.q_len, p.k_len, p.query_offset, p.key_offset));
  const int64_t min_buckets = p.bidirectional ? 4 : 2;
  const char* direction = p.bidirectional ? "bidirectional" : "unidirectional";
  if (p.num_buckets < min_buckets || p.num_buckets > (int64_t{1} << 24)) {
    return Invalid("num_buckets", absl::StrCat("expected ", min_buckets, " .. 2^24 (", direction,
                                               "), got ", p.num_buckets));
  }
  const int64_t exact = (p.bidirectional ? p.num_buckets / 2 : p.num_buckets) / 2;
  if (p.max_distance <= exact) {
    return Invalid("max_distance",
                   absl::StrCat("expected > the exact range ", exact, " (num_buckets ",
                                p.num_buckets, ", ", direction, "), got ", p.max_distance));
  }
  RelativeBiasPlan plan;
  plan.query_offset = p.query_offset.value_or(p.k_len - p.q_len);
  if (p.form == BiasForm::kBuckets) {
    // Bucket ids are INT32, whatever the table.
    if (args.output_dtype && *args.output_dtype != DType::kInt32) {
      return Invalid("output_dtype",
                     absl::StrCat("BIAS_FORM_BUCKETS returns INT32 bucket ids, got ",
                                  DTypeName(*args.output_dtype)));
    }
    plan.bias = {"bias", DType::kInt32, {p.q_len, p.k_len}};
  } else {
    const DType dtype = args.output_dtype.value_or(DType::kFloat32);
    POSENC_RETURN_IF_ERROR(CheckFloatOutputDType(dtype));
    POSENC_RETURN_IF_ERROR(CheckTable("table", p.table, p.num_buckets, "num_buckets"));
    plan.heads = p.table.shape[1];
    plan.bias = {"bias", dtype,
                 p.form == BiasForm::kCompact ? Shape{plan.heads, p.q_len + p.k_len - 1}
                                              : Shape{plan.heads, p.q_len, p.k_len}};
  }
  plan.params = std::move(args.params);
  return plan;
}

absl::Status RunRelativeBias(const Backend& backend, const RelativeBiasPlan& plan,
                             const TensorView& bias) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"bias", bias}}));
  return backend.RelativeBias(plan, bias);
}

int64_t RelativeEmbeddingPlan::Row(int64_t i, int64_t j) const {
  const int64_t kmax = params.max_relative;
  return std::clamp((params.key_offset + j) - (query_offset + i), -kmax, kmax) + kmax;
}

absl::StatusOr<RelativeEmbeddingPlan> PlanRelativeEmbedding(RelativeEmbeddingArgs args) {
  const RelativeEmbeddingParams& p = args.params;
  POSENC_RETURN_IF_ERROR(CheckWindow(p.q_len, p.k_len, p.query_offset, p.key_offset));
  if (p.max_relative < 0 || p.max_relative > (int64_t{1} << 30)) {
    return Invalid("max_relative", absl::StrCat("expected 0 .. 2^30, got ", p.max_relative));
  }
  POSENC_RETURN_IF_ERROR(CheckTable("table", p.table, 2 * p.max_relative + 1, "2*max_relative+1"));
  POSENC_RETURN_IF_ERROR(CheckFloatOutputDType(args.output_dtype));
  RelativeEmbeddingPlan plan;
  plan.query_offset = p.query_offset.value_or(p.k_len - p.q_len);
  plan.dim = p.table.shape[1];
  plan.embeddings = {"embeddings", args.output_dtype, {p.q_len, p.k_len, plan.dim}};
  plan.params = std::move(args.params);
  return plan;
}

absl::Status RunRelativeEmbedding(const Backend& backend, const RelativeEmbeddingPlan& plan,
                                  const TensorView& embeddings) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"embeddings", embeddings}}));
  return backend.RelativeEmbedding(plan, embeddings);
}

}  // namespace posenc::kernels
