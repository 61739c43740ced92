// Sinusoidal absolute encoding (Vaswani et al.; tensor2tensor's CONCAT variant).
//
//   VASWANI: omega_k = b^(-2k/D)
//   T2T:     omega_k = b^(-k / max(floor(D/2)-1, 1)),  k < floor(D/2)
//   INTERLEAVED: PE[p,2k] = sin(p*omega_k), PE[p,2k+1] = cos(p*omega_k)
//   CONCAT:      PE[p,:] = [sin(p*omega_0) .. sin(p*omega_{h-1}) | cos(p*omega_0) .. ],
//   h=floor(D/2) Odd D: INTERLEAVED+VASWANI ends with sin(p*omega_{floor(D/2)}); otherwise the last
//   column is zero. Padding tokens (attention_mask 0) get a zero row.
//
// Use: PlanSinusoidal (all validation, once) -> allocate plan.table -> RunSinusoidal.
// Implementations: absolute/reference.cc, absolute/cpu.cc. Tests: tests/kernels (golden, unit,
// parity).
#ifndef POSENC_KERNELS_ABSOLUTE_SINUSOIDAL_H_
#define POSENC_KERNELS_ABSOLUTE_SINUSOIDAL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

class Backend;

// The largest encoding width: d_model of released models is at most a few times 10^4; the cap
// bounds the frequencies (D/2 of them) one request can make the server compute.
inline constexpr int64_t kMaxSinusoidalDim = int64_t{1} << 20;

enum class SinusoidalLayout { kInterleaved, kConcat };
enum class FreqScheme { kVaswani, kT2t };

struct SinusoidalParams {
  int64_t dim = 0;
  double base = 10000.0;
  SinusoidalLayout layout = SinusoidalLayout::kInterleaved;
  std::optional<FreqScheme> scheme;  // nullopt: VASWANI for INTERLEAVED, T2T for CONCAT
};

// `field` is the wire prefix of the params ("params", "sinusoidal").
absl::Status ValidateSinusoidal(const SinusoidalParams& params, absl::string_view field);
// The resolved scheme.
FreqScheme EffectiveFreqScheme(const SinusoidalParams& params);
// omega_k in extended precision, k = 0 .. number of frequencies - 1 (ceil(D/2) for
// INTERLEAVED+VASWANI, floor(D/2) otherwise).
std::vector<long double> SinusoidalFrequencies(const SinusoidalParams& params);

struct SinusoidalArgs {
  SinusoidalParams params;
  PositionSpec positions;  // a table: range, ids, cu_seqlens or attention_mask
  DType output_dtype = DType::kFloat32;
};

struct SinusoidalPlan {
  SinusoidalParams params;
  PositionPlan positions;
  OutputSpec table;  // [grid..., D]
  // SinusoidalFrequencies(params), computed once by PlanSinusoidal for every backend.
  std::vector<long double> frequencies;
};

absl::StatusOr<SinusoidalPlan> PlanSinusoidal(SinusoidalArgs args);
// table: plan.table's dtype and shape.
absl::Status RunSinusoidal(const Backend& backend, const SinusoidalPlan& plan,
                           const TensorView& table);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ABSOLUTE_SINUSOIDAL_H_
