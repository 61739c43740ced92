// Sinusoidal: validation, frequencies, the plan and the run.
#include "kernels/absolute/sinusoidal.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"

namespace posenc::kernels {

absl::Status ValidateSinusoidal(const SinusoidalParams& p, absl::string_view field) {
  if (p.dim <= 0 || p.dim > kMaxSinusoidalDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dim: expected 1 .. ", kMaxSinusoidalDim, ", got ", p.dim));
  }
  if (!std::isfinite(p.base) || !(p.base > 0) || p.base == 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".base: expected a finite number > 0 and != 1, got ", p.base));
  }
  return absl::OkStatus();
}

FreqScheme EffectiveFreqScheme(const SinusoidalParams& p) {
  return p.scheme.value_or(p.layout == SinusoidalLayout::kConcat ? FreqScheme::kT2t
                                                                 : FreqScheme::kVaswani);
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

absl::StatusOr<SinusoidalPlan> PlanSinusoidal(SinusoidalArgs args) {
  POSENC_RETURN_IF_ERROR(ValidateSinusoidal(args.params, "params"));
  POSENC_RETURN_IF_ERROR(CheckFloatOutputDType(args.output_dtype));
  SinusoidalPlan plan;
  POSENC_ASSIGN_OR_RETURN(plan.positions, PlanPositions(std::move(args.positions), TokenGrid{}));
  plan.params = args.params;
  plan.frequencies = SinusoidalFrequencies(plan.params);
  plan.table = {"table", args.output_dtype, plan.positions.shape};
  plan.table.shape.push_back(plan.params.dim);
  return plan;
}

absl::Status RunSinusoidal(const Backend& backend, const SinusoidalPlan& plan,
                           const TensorView& table) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"table", table}}));
  POSENC_ASSIGN_OR_RETURN(ResolvedPositions positions, ResolvePositions(plan.positions));
  return backend.Sinusoidal(plan, positions, table);
}

}  // namespace posenc::kernels
