// Each RoPE scaling against the unscaled config past the trained length (extrapolation.h):
// AnalyzeExtrapolation.
#include "kernels/analysis/extrapolation.h"

#include <cmath>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/analysis/decay.h"
#include "kernels/common/status.h"

namespace posenc::kernels {

RopeConfig UnscaledRopeConfig(const RopeConfig& config) {
  RopeConfig plain = config;
  plain.scaling = RopeScaling();
  plain.freq_factors.clear();
  plain.seq_len.reset();
  return plain;
}

namespace {

// The configs compared: (name, config), the config's own first.
absl::StatusOr<std::vector<std::pair<std::string, RopeConfig>>> Variants(const AnalysisPlan& plan) {
  const RopeConfig& config = plan.args.encoding.rope;
  std::vector<std::pair<std::string, RopeConfig>> out;
  if (plan.args.scalings.empty()) {
    out.emplace_back(RopeScalingTypeName(config.scaling.type), config);
    out.emplace_back("default", UnscaledRopeConfig(config));
    return out;
  }
  for (size_t i = 0; i < plan.args.scalings.size(); ++i) {
    RopeConfig c = config;
    c.scaling = plan.args.scalings[i];
    if (absl::Status s = ValidateRopeConfig(c); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("scalings[", i, "]: ", s.message()));
    }
    out.emplace_back(RopeScalingTypeName(c.scaling.type), std::move(c));
  }
  return out;
}

// "yarn: 12 of 64 slots past the trained angles at distance 131071".
std::string UnseenLine(const std::string& name, const std::vector<double>& theta,
                       const std::vector<double>& trained_angle, int64_t last) {
  int64_t unseen = 0;
  for (size_t j = 0; j < theta.size() && j < trained_angle.size(); ++j) {
    const bool unwrapped = trained_angle[j] < 2 * std::numbers::pi;
    unseen += unwrapped && static_cast<double>(last) * theta[j] > trained_angle[j];
  }
  return absl::StrCat(name, ": ", unseen, " of ", theta.size(),
                      " slots past the angles training saw at distance ", last);
}

}  // namespace

absl::StatusOr<ExtrapolationResult> AnalyzeExtrapolation(const Backend& backend,
                                                         const AnalysisPlan& plan) {
  ExtrapolationResult r;
  if (plan.args.encoding.family != AnalysisFamily::kRope) {
    r.note = "not applicable: EXTRAPOLATION compares RoPE scalings";
    return r;
  }
  r.original_context = RopeOriginalContext(plan.args.encoding.rope);
  if (r.original_context <= 0) {
    return absl::InvalidArgumentError(
        "encoding.rope.scaling.original_max_position_embeddings: EXTRAPOLATION needs the trained "
        "length, got neither it nor encoding.rope.max_position_embeddings");
  }
  POSENC_ASSIGN_OR_RETURN(const auto variants, Variants(plan));
  AnalysisPlan unscaled = plan;
  unscaled.args.encoding.rope = UnscaledRopeConfig(plan.args.encoding.rope);
  // L0 * theta_j per slot (as the rows rotate them: the slot's frequency source).
  const RopeConfig& plain = unscaled.args.encoding.rope;
  const RopeFrequencies f = ComputeValidRopeFrequencies(plain, 0);
  std::vector<double> trained_angle;
  for (int64_t j = 0; j < f.rotary_dim / 2; ++j) {
    trained_angle.push_back(static_cast<double>(r.original_context) *
                            static_cast<double>(f.inv_freq[FrequencySource(plain, j)]));
  }
  std::vector<std::string> lines = {absl::StrCat("trained length ", r.original_context)};
  for (const auto& [name, config] : variants) {
    AnalysisPlan p = plan;
    p.args.encoding.rope = config;
    POSENC_ASSIGN_OR_RETURN(RopeDecay d, ComputeRopeDecay(backend, p));
    ExtrapolationSeries s{name, {std::move(d.mean_abs_dot), std::move(d.bound)}};
    AnalysisCurve wavelength{"wavelength", {}, {}};
    for (size_t j = 0; j < d.frequencies.size(); ++j) {
      wavelength.x.push_back(static_cast<double>(j));
      wavelength.y.push_back(2 * std::numbers::pi / d.frequencies[j]);
    }
    s.curves.push_back(std::move(wavelength));
    lines.push_back(
        UnseenLine(name, d.frequencies, trained_angle, plan.args.start + plan.args.count - 1));
    r.series.push_back(std::move(s));
  }
  r.note = absl::StrJoin(lines, "; ");
  return r;
}

}  // namespace posenc::kernels
