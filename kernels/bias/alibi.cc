// ALiBi: slopes, and the plans and runs of AlibiSlopes and AlibiBias.
#include "kernels/bias/alibi.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/bias/extents.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

absl::Status CheckHeads(int64_t n) {
  if (n <= 0 || n > (int64_t{1} << 24)) {
    return Invalid("num_heads", absl::StrCat("expected 1 .. 2^24, got ", n));
  }
  return absl::OkStatus();
}

absl::Status CheckMaxBias(double max_bias) {
  if (!std::isfinite(max_bias) || !(max_bias > 0)) {
    return Invalid("max_bias", absl::StrCat("expected a finite number > 0, got ", max_bias));
  }
  return absl::OkStatus();
}

void StoreSlopes(const std::vector<double>& values, const TensorView& slopes) {
  for (size_t h = 0; h < values.size(); ++h) {
    StoreFromDouble(slopes.data, slopes.dtype, static_cast<int64_t>(h), values[h]);
  }
}

}  // namespace

absl::StatusOr<std::vector<double>> AlibiSlopes(int64_t n, double max_bias) {
  POSENC_RETURN_IF_ERROR(CheckHeads(n));
  POSENC_RETURN_IF_ERROR(CheckMaxBias(max_bias));
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

absl::StatusOr<AlibiSlopesPlan> PlanAlibiSlopes(const AlibiSlopesArgs& args) {
  // Only the lower bound of num_heads here: past the output limits a head count is reported as
  // such (RESOURCE_EXHAUSTED) by the caller's limit check; AlibiSlopes checks 2^24 when it runs.
  if (args.num_heads < 1) {
    return Invalid("num_heads", absl::StrCat("expected 1 .. 2^24, got ", args.num_heads));
  }
  POSENC_RETURN_IF_ERROR(CheckMaxBias(args.max_bias));
  POSENC_RETURN_IF_ERROR(CheckFloatOutputDType(args.output_dtype));
  return AlibiSlopesPlan{
      args.num_heads, args.max_bias, {"slopes", args.output_dtype, {args.num_heads}}};
}

absl::Status RunAlibiSlopes(const AlibiSlopesPlan& plan, const TensorView& slopes) {
  POSENC_ASSIGN_OR_RETURN(std::vector<double> values, AlibiSlopes(plan.num_heads, plan.max_bias));
  StoreSlopes(values, slopes);
  return absl::OkStatus();
}

void AlibiBiasPlan::KeyPositions(int64_t b, double* out) const {
  const ConstTensorView& mask = params.attention_mask;
  int64_t real = 0;
  for (int64_t j = 0; j < params.k_len; ++j) {
    if (!masked()) {
      out[j] = static_cast<double>(j);
      continue;
    }
    const int64_t m = LoadAsInt64(mask.data, mask.dtype, b * params.k_len + j);
    out[j] = static_cast<double>(m ? real : 0);
    real += m;
  }
}

absl::StatusOr<AlibiBiasPlan> PlanAlibiBias(AlibiBiasArgs args) {
  const AlibiBiasParams& p = args.params;
  POSENC_RETURN_IF_ERROR(CheckHeads(p.num_heads));
  POSENC_RETURN_IF_ERROR(CheckWindow(p.q_len, p.k_len, p.query_offset));
  POSENC_RETURN_IF_ERROR(CheckMaxBias(p.max_bias));
  if (p.form == BiasForm::kBuckets) {
    return Invalid("form",
                   "BIAS_FORM_BUCKETS is for RelativeBias; AlibiBias takes FULL or COMPACT");
  }
  POSENC_RETURN_IF_ERROR(CheckFloatOutputDType(args.output_dtype));
  AlibiBiasPlan plan;
  const ConstTensorView& mask = p.attention_mask;
  if (mask.data != nullptr) {
    if (p.mode != AlibiMode::kBloom) {
      return Invalid("attention_mask", "applies to mode ALIBI_MODE_BLOOM only");
    }
    if (!IsIntDType(mask.dtype)) {
      return Invalid("attention_mask",
                     absl::StrCat("expected dtype INT32 or INT64, got ", DTypeName(mask.dtype)));
    }
    if (mask.shape.size() != 2 || mask.shape[1] != p.k_len || mask.shape[0] <= 0) {
      return Invalid("attention_mask", absl::StrCat("expected shape [batch, k_len = ", p.k_len,
                                                    "], got ", ShapeString(mask.shape)));
    }
    plan.batch = mask.shape[0];
    for (int64_t i = 0; i < plan.batch * p.k_len; ++i) {
      const int64_t m = LoadAsInt64(mask.data, mask.dtype, i);
      if (m != 0 && m != 1) {
        return Invalid("attention_mask", absl::StrCat("expected 0 or 1, got ", m, " at [",
                                                      i / p.k_len, ", ", i % p.k_len, "]"));
      }
    }
  }
  plan.query_offset = p.query_offset.value_or(p.k_len - p.q_len);
  Shape shape;
  if (mask.data != nullptr) shape.push_back(plan.batch);
  shape.push_back(p.num_heads);
  if (p.form == BiasForm::kCompact) {
    shape.push_back(p.mode == AlibiMode::kBloom ? p.k_len : p.q_len + p.k_len - 1);
  } else {
    shape.push_back(p.q_len);
    shape.push_back(p.k_len);
  }
  plan.bias = {"bias", args.output_dtype, std::move(shape)};
  plan.slopes = {"slopes", DType::kFloat64, {p.num_heads}};
  plan.params = std::move(args.params);
  return plan;
}

absl::Status RunAlibiBias(const Backend& backend, const AlibiBiasPlan& plan, const TensorView& bias,
                          const TensorView& slopes) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"bias", bias}}));
  POSENC_RETURN_IF_ERROR(CheckOnHost("slopes", slopes));
  POSENC_ASSIGN_OR_RETURN(std::vector<double> values,
                          AlibiSlopes(plan.params.num_heads, plan.params.max_bias));
  StoreSlopes(values, slopes);
  return backend.AlibiBias(plan, values, bias);
}

}  // namespace posenc::kernels
