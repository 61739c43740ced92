// RoPE configuration: validation and the frequencies of every scaling type (config.h).
#include "kernels/rope/config.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

absl::Status CheckFinite(absl::string_view field, double v) {
  if (!std::isfinite(v)) return Invalid(field, absl::StrCat("expected a finite number, got ", v));
  return absl::OkStatus();
}

absl::Status CheckPositive(absl::string_view field, double v) {
  POSENC_RETURN_IF_ERROR(CheckFinite(field, v));
  if (!(v > 0)) return Invalid(field, absl::StrCat("expected > 0, got ", v));
  return absl::OkStatus();
}

// Which optional scaling fields each type reads.
struct Allowed {
  bool factor = false, original = false, yarn = false, attention_factor = false, llama3 = false,
       longrope = false, proportional = false, alpha = false;
};

Allowed AllowedFields(RopeScalingType type) {
  Allowed a;
  switch (type) {
    case RopeScalingType::kDefault: break;
    case RopeScalingType::kLinear:
    case RopeScalingType::kNtk: a.factor = true; break;
    case RopeScalingType::kDynamic: a.factor = a.alpha = true; break;
    case RopeScalingType::kYarn: a.factor = a.original = a.yarn = a.attention_factor = true; break;
    case RopeScalingType::kLlama3: a.factor = a.original = a.llama3 = true; break;
    case RopeScalingType::kLongrope:
      a.factor = a.original = a.attention_factor = a.longrope = true;
      break;
    case RopeScalingType::kProportional: a.factor = a.proportional = true; break;
  }
  return a;
}

// b^(-2j/d) as exp(-(2j/d) ln b) in extended precision: nine times faster than powl, and its
// relative error (below 1e-18) stays far under double's rounding.
long double DefaultOmega(long double log_base, int64_t j, int64_t d) {
  return std::exp(-2.0L * static_cast<long double>(j) / static_cast<long double>(d) * log_base);
}

// YaRN's and LongRoPE's original context l0 (scaling.original_max_position_embeddings, else
// max_position_embeddings) and extension factor s (scaling.factor, else max_position_embeddings /
// l0, else 1).
std::pair<int64_t, double> OriginalContextAndFactor(const RopeConfig& c) {
  const RopeScaling& sc = c.scaling;
  const int64_t l0 =
      sc.original_max_position_embeddings.value_or(c.max_position_embeddings.value_or(0));
  if (sc.factor) return {l0, *sc.factor};
  if (!c.max_position_embeddings) return {l0, 1.0};
  return {l0, static_cast<double>(*c.max_position_embeddings) / static_cast<double>(l0)};
}

double YarnMscale(double s, double k) { return s <= 1 ? 1.0 : 0.1 * k * std::log(s) + 1.0; }

}  // namespace

absl::string_view RopeStyleName(RopeStyle style) {
  switch (style) {
    case RopeStyle::kNeox: return "neox";
    case RopeStyle::kGptj: return "gptj";
    case RopeStyle::kDeepseek: return "deepseek";
  }
  return "unknown";
}

absl::string_view RopeScalingTypeName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kDefault: return "default";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kNtk: return "ntk";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kYarn: return "yarn";
    case RopeScalingType::kLlama3: return "llama3";
    case RopeScalingType::kLongrope: return "longrope";
    case RopeScalingType::kProportional: return "proportional";
  }
  return "unknown";
}

namespace {

absl::Status ValidateFields(const RopeConfig& c);

// The request's own freq_factors (never from a config.json: named as wire fields even then).
absl::Status ValidateFreqFactors(const RopeConfig& c) {
  const int64_t d = c.rotary_dim.value_or(c.head_dim);
  if (!c.freq_factors.empty()) {
    const size_t half = static_cast<size_t>(d / 2);
    if (c.freq_factors.size() != half) {
      return Invalid("config.freq_factors", absl::StrCat("expected rotary_dim/2 = ", half,
                                                         " entries, got ", c.freq_factors.size()));
    }
    for (size_t j = 0; j < half; ++j) {
      const double v = c.freq_factors[j];
      if (!std::isfinite(v) || !(v > 0)) {
        return Invalid(absl::StrCat("config.freq_factors[", j, "]"),
                       absl::StrCat("expected a finite number > 0, got ", v));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRopeConfig(const RopeConfig& config) {
  absl::Status status = ValidateFields(config);
  if (status.ok()) return ValidateFreqFactors(config);
  if (!config.from_hf_config_json) return status;
  return absl::Status(status.code(), absl::StrCat("config.hf_config_json: ", status.message()));
}

namespace {

std::string SectionText(const std::vector<int64_t>& section) {
  return absl::StrCat("[", absl::StrJoin(section, ", "), "]");
}

// frequency_axes: d/2 axes in [0, kMaxPositionAxes); mrope_section empty or its per-axis counts.
absl::Status ValidateFrequencyAxes(const RopeConfig& c, int64_t d) {
  const auto half = static_cast<size_t>(d / 2);
  if (c.frequency_axes.size() != half) {
    return Invalid(
        "config.frequency_axes",
        absl::StrCat("expected rotary_dim/2 = ", half, " entries, got ", c.frequency_axes.size()));
  }
  for (size_t j = 0; j < half; ++j) {
    const int64_t a = c.frequency_axes[j];
    if (a < 0 || a >= kMaxPositionAxes) {
      return Invalid(absl::StrCat("config.frequency_axes[", j, "]"),
                     absl::StrCat("expected an axis in [0, ", kMaxPositionAxes, "), got ", a));
    }
  }
  RopeConfig counted = c;
  counted.mrope_section.clear();
  NormalizePositionAxes(&counted);
  if (!c.mrope_section.empty() && c.mrope_section != counted.mrope_section) {
    return Invalid(
        "config.mrope_section",
        absl::StrCat("expected none with frequency_axes (or its per-axis counts ",
                     SectionText(counted.mrope_section), "), got ", SectionText(c.mrope_section)));
  }
  return absl::OkStatus();
}

// The position axes: mrope_section against the layout, or frequency_axes.
absl::Status ValidatePositionAxes(const RopeConfig& c, int64_t d) {
  if (!c.frequency_axes.empty()) return ValidateFrequencyAxes(c, d);
  const std::vector<int64_t>& sec = c.mrope_section;
  const std::string layout(MropeLayoutName(c.mrope_layout));
  if (c.mrope_layout == MropeLayout::kVision2d || c.mrope_layout == MropeLayout::kVision2dEvenOdd) {
    if (d % 4 != 0) {
      return Invalid("config.rotary_dim",
                     absl::StrCat("mrope_layout ", layout,
                                  " splits the frequencies in two halves: expected a multiple "
                                  "of 4, got ",
                                  d));
    }
    if (!sec.empty() && sec != std::vector<int64_t>{d / 4, d / 4}) {
      return Invalid("config.mrope_section",
                     absl::StrCat("expected none or [", d / 4, ", ", d / 4, "] for mrope_layout ",
                                  layout, ", got ", SectionText(sec)));
    }
    return absl::OkStatus();
  }
  if (sec.empty()) return absl::OkStatus();
  const bool three = c.mrope_layout != MropeLayout::kContiguous;
  if (three ? sec.size() != 3 : (sec.size() < 2 || sec.size() > kMaxPositionAxes)) {
    return Invalid(
        "config.mrope_section",
        absl::StrCat("expected ",
                     three ? "3 entries"
                           : absl::StrCat("2 .. ", kMaxPositionAxes, " entries (one per axis)"),
                     " for mrope_layout ", layout, ", got ", sec.size()));
  }
  int64_t sum = 0;
  for (int64_t s : sec) {
    if (s < 0 || s > d / 2) {
      return Invalid("config.mrope_section",
                     absl::StrCat("expected entries in [0, ", d / 2, "], got ", SectionText(sec)));
    }
    sum += s;
  }
  if (sum != d / 2) {
    return Invalid("config.mrope_section",
                   absl::StrCat("expected entries summing to rotary_dim/2 = ", d / 2, ", got ",
                                SectionText(sec), " (sum ", sum, ")"));
  }
  if (c.mrope_layout == MropeLayout::kAlternating && sec[0] != sec[1]) {
    return Invalid("config.mrope_section",
                   absl::StrCat("mrope_layout alternating pairs h and w frequencies: expected "
                                "[s_h, s_w, s_t] with s_h == s_w, got ",
                                SectionText(sec)));
  }
  return absl::OkStatus();
}

// head_dim, rotary_dim, base, max_position_embeddings and seq_len.
absl::Status CheckShape(const RopeConfig& c) {
  if (c.head_dim <= 0 || c.head_dim > kMaxRopeHeadDim) {
    return Invalid("config.head_dim",
                   absl::StrCat("expected 1 .. ", kMaxRopeHeadDim, ", got ", c.head_dim));
  }
  const int64_t d = c.rotary_dim.value_or(c.head_dim);
  if (c.rotary_dim.has_value()) {
    if (d <= 0 || d % 2 != 0 || d > c.head_dim) {
      return Invalid(
          "config.rotary_dim",
          absl::StrCat("expected an even number in [2, head_dim = ", c.head_dim, "], got ", d));
    }
  } else if (d % 2 != 0) {
    return Invalid("config.rotary_dim",
                   absl::StrCat("defaults to head_dim = ", d, ", which is odd; expected even"));
  }
  POSENC_RETURN_IF_ERROR(CheckPositive("config.base", c.base));
  if (c.base == 1.0) return Invalid("config.base", "expected a base other than 1, got 1");
  if (c.max_position_embeddings && *c.max_position_embeddings <= 0) {
    return Invalid("config.max_position_embeddings",
                   absl::StrCat("expected > 0, got ", *c.max_position_embeddings));
  }
  if (c.seq_len && (*c.seq_len <= 0 || *c.seq_len > kMaxPosition + 1)) {
    return Invalid("config.seq_len", absl::StrCat("expected 1 .. 2^31, got ", *c.seq_len));
  }
  return absl::OkStatus();
}

// No scaling field that the scaling type does not read.
absl::Status CheckFieldsOfType(const RopeScaling& sc) {
  const std::string type_name(RopeScalingTypeName(sc.type));
  const Allowed allowed = AllowedFields(sc.type);
  auto not_for_type = [&](absl::string_view key) {
    return Invalid(absl::StrCat("config.scaling.", key),
                   absl::StrCat("is not a field of rope type '", type_name, "'"));
  };
  if (sc.factor && !allowed.factor) return not_for_type("factor");
  if (sc.original_max_position_embeddings && !allowed.original) {
    return not_for_type("original_max_position_embeddings");
  }
  if (!allowed.yarn) {
    if (sc.beta_fast) return not_for_type("beta_fast");
    if (sc.beta_slow) return not_for_type("beta_slow");
    if (sc.truncate) return not_for_type("truncate");
    if (sc.mscale) return not_for_type("mscale");
    if (sc.mscale_all_dim) return not_for_type("mscale_all_dim");
  }
  if (sc.attention_factor && !allowed.attention_factor) return not_for_type("attention_factor");
  if (!allowed.llama3) {
    if (sc.low_freq_factor) return not_for_type("low_freq_factor");
    if (sc.high_freq_factor) return not_for_type("high_freq_factor");
  }
  if (!allowed.longrope) {
    if (!sc.long_factor.empty()) return not_for_type("long_factor");
    if (!sc.short_factor.empty()) return not_for_type("short_factor");
  }
  if (sc.partial_rotary_factor && !allowed.proportional) {
    return not_for_type("partial_rotary_factor");
  }
  if (sc.alpha && !allowed.alpha) return not_for_type("alpha");

  return absl::OkStatus();
}

// The scaling values given: finite, positive where they must be.
absl::Status CheckScalingValues(const RopeScaling& sc) {
  if (sc.factor) {
    POSENC_RETURN_IF_ERROR(CheckPositive("config.scaling.factor", *sc.factor));
  }
  if (sc.original_max_position_embeddings && *sc.original_max_position_embeddings <= 0) {
    return Invalid("config.scaling.original_max_position_embeddings",
                   absl::StrCat("expected > 0, got ", *sc.original_max_position_embeddings));
  }
  if (sc.beta_fast) {
    POSENC_RETURN_IF_ERROR(CheckPositive("config.scaling.beta_fast", *sc.beta_fast));
  }
  if (sc.beta_slow) {
    POSENC_RETURN_IF_ERROR(CheckPositive("config.scaling.beta_slow", *sc.beta_slow));
  }
  if (sc.mscale) {
    POSENC_RETURN_IF_ERROR(CheckFinite("config.scaling.mscale", *sc.mscale));
  }
  if (sc.mscale_all_dim) {
    POSENC_RETURN_IF_ERROR(CheckFinite("config.scaling.mscale_all_dim", *sc.mscale_all_dim));
  }
  if (sc.attention_factor) {
    POSENC_RETURN_IF_ERROR(CheckPositive("config.scaling.attention_factor", *sc.attention_factor));
  }
  if (sc.alpha) POSENC_RETURN_IF_ERROR(CheckPositive("config.scaling.alpha", *sc.alpha));

  return absl::OkStatus();
}

absl::Status CheckLlama3(const RopeScaling& sc) {
  if (!sc.factor) return Invalid("config.scaling.factor", "required for rope type 'llama3'");
  if (!sc.low_freq_factor) {
    return Invalid("config.scaling.low_freq_factor", "required for rope type 'llama3'");
  }
  if (!sc.high_freq_factor) {
    return Invalid("config.scaling.high_freq_factor", "required for rope type 'llama3'");
  }
  if (!sc.original_max_position_embeddings) {
    return Invalid("config.scaling.original_max_position_embeddings",
                   "required for rope type 'llama3'");
  }
  POSENC_RETURN_IF_ERROR(CheckPositive("config.scaling.low_freq_factor", *sc.low_freq_factor));
  POSENC_RETURN_IF_ERROR(CheckFinite("config.scaling.high_freq_factor", *sc.high_freq_factor));
  // Equal factors are Llama 4 Scout's: a step at L0/low, no smoothed band.
  if (!(*sc.high_freq_factor >= *sc.low_freq_factor)) {
    return Invalid("config.scaling.high_freq_factor",
                   absl::StrCat("expected >= low_freq_factor = ", *sc.low_freq_factor, ", got ",
                                *sc.high_freq_factor));
  }
  return absl::OkStatus();
}

absl::Status CheckLongrope(const RopeConfig& c, int64_t d) {
  const RopeScaling& sc = c.scaling;
  if (!sc.original_max_position_embeddings && !c.max_position_embeddings) {
    return Invalid("config.scaling.original_max_position_embeddings",
                   "rope type 'longrope' needs it or config.max_position_embeddings");
  }
  const size_t half = static_cast<size_t>(d / 2);
  for (auto [name, v] :
       {std::pair<absl::string_view, const std::vector<double>*>{"long_factor", &sc.long_factor},
        {"short_factor", &sc.short_factor}}) {
    if (v->size() != half) {
      return Invalid(absl::StrCat("config.scaling.", name),
                     absl::StrCat("expected rotary_dim/2 = ", half, " entries, got ", v->size()));
    }
    for (size_t j = 0; j < v->size(); ++j) {
      if (!std::isfinite((*v)[j]) || !((*v)[j] > 0)) {
        return Invalid(absl::StrCat("config.scaling.", name, "[", j, "]"),
                       absl::StrCat("expected a finite number > 0, got ", (*v)[j]));
      }
    }
  }
  return absl::OkStatus();
}

// What the scaling type requires (rotary dim d).
absl::Status CheckRequired(const RopeConfig& c, int64_t d) {
  const RopeScaling& sc = c.scaling;
  const std::string type_name(RopeScalingTypeName(sc.type));
  switch (sc.type) {
    case RopeScalingType::kDefault: break;
    case RopeScalingType::kLinear:
      if (!sc.factor) return Invalid("config.scaling.factor", "required for rope type 'linear'");
      break;
    case RopeScalingType::kNtk:
    case RopeScalingType::kDynamic:
      if (!sc.factor && !sc.alpha) {
        return Invalid("config.scaling.factor",
                       absl::StrCat("required for rope type '", type_name, "'",
                                    sc.type == RopeScalingType::kDynamic ? " (or alpha)" : ""));
      }
      if (d < 4) {
        return Invalid("config.rotary_dim",
                       absl::StrCat("rope type '", type_name,
                                    "' needs a rotary dim >= 4 (it divides by d-2), got ", d));
      }
      if (sc.type == RopeScalingType::kDynamic && !sc.alpha && !c.max_position_embeddings) {
        return Invalid("config.max_position_embeddings",
                       "required for rope type 'dynamic' (unless scaling.alpha is set)");
      }
      break;
    case RopeScalingType::kYarn:
      if (!sc.original_max_position_embeddings && !c.max_position_embeddings) {
        return Invalid("config.scaling.original_max_position_embeddings",
                       "rope type 'yarn' needs it or config.max_position_embeddings");
      }
      if (!sc.factor && !(sc.original_max_position_embeddings && c.max_position_embeddings)) {
        return Invalid("config.scaling.factor",
                       "required for rope type 'yarn' unless both max_position_embeddings and "
                       "original_max_position_embeddings are given");
      }
      break;
    case RopeScalingType::kLlama3: POSENC_RETURN_IF_ERROR(CheckLlama3(sc)); break;
    case RopeScalingType::kLongrope: POSENC_RETURN_IF_ERROR(CheckLongrope(c, d)); break;
    case RopeScalingType::kProportional:
      if (sc.partial_rotary_factor &&
          (!std::isfinite(*sc.partial_rotary_factor) || *sc.partial_rotary_factor < 0 ||
           *sc.partial_rotary_factor > 1)) {
        return Invalid(
            "config.scaling.partial_rotary_factor",
            absl::StrCat("expected a fraction in [0, 1], got ", *sc.partial_rotary_factor));
      }
      break;
  }
  return absl::OkStatus();
}

absl::Status ValidateFields(const RopeConfig& c) {
  POSENC_RETURN_IF_ERROR(CheckShape(c));
  POSENC_RETURN_IF_ERROR(CheckFieldsOfType(c.scaling));
  POSENC_RETURN_IF_ERROR(CheckScalingValues(c.scaling));
  const int64_t d = c.rotary_dim.value_or(c.head_dim);
  POSENC_RETURN_IF_ERROR(CheckRequired(c, d));
  return ValidatePositionAxes(c, d);
}

}  // namespace

absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeConfig& config,
                                                       int64_t max_position) {
  POSENC_RETURN_IF_ERROR(ValidateRopeConfig(config));
  return ComputeValidRopeFrequencies(config, max_position);
}

double AttentionTemperatureScale(double floor_scale, double attn_scale, double position_offset,
                                 int64_t position) {
  const double steps = std::floor((static_cast<double>(position) + position_offset) / floor_scale);
  return std::log(steps + 1) * attn_scale + 1;
}

int64_t RopeOriginalContext(const RopeConfig& config) {
  return OriginalContextAndFactor(config).first;
}

std::optional<double> RopeSoftmaxScaleMultiplier(const RopeConfig& config) {
  const RopeScaling& sc = config.scaling;
  if (config.nope || sc.type != RopeScalingType::kYarn || sc.mscale_all_dim.value_or(0) == 0) {
    return std::nullopt;
  }
  const double m = YarnMscale(OriginalContextAndFactor(config).second, *sc.mscale_all_dim);
  return m * m;
}

namespace {

// What every scaling type's frequencies start from (ComputeValidRopeFrequencies).
struct FrequencyInputs {
  const RopeConfig& c;
  int64_t d = 0;        // the rotary dim
  int64_t seq_len = 0;  // dynamic / longrope
  long double log_b = 0;
  std::pair<int64_t, double> extension;  // YaRN's and LongRoPE's original context and factor
};

// NTK-aware and dynamic NTK (and Hunyuan's alpha): a larger base b'.
void NtkFrequencies(const FrequencyInputs& in, RopeFrequencies* f) {
  const RopeConfig& c = in.c;
  const RopeScaling& sc = c.scaling;
  const int64_t d = in.d;
  const int64_t half = d / 2;
  const int64_t seq_len = in.seq_len;
  const long double b = c.base;
  const long double d_ld = static_cast<long double>(d);
  // Hunyuan's alpha: a fixed b' = b * alpha^(d/(d-2)); factor is not read.
  const long double s = sc.alpha ? 1.0L : *sc.factor;
  f->factor = sc.alpha ? 1.0 : *sc.factor;
  long double scale = sc.alpha ? static_cast<long double>(*sc.alpha) : s;
  if (sc.type == RopeScalingType::kDynamic && !sc.alpha) {
    const long double lmax = static_cast<long double>(*c.max_position_embeddings);
    const long double len = std::max<long double>(seq_len, lmax);
    scale = s * len / lmax - (s - 1);
    f->seq_len = seq_len;
  }
  const long double b2 = b * std::pow(scale, d_ld / (d_ld - 2));
  f->effective_base = static_cast<double>(b2);
  const long double log_b2 = std::log(b2);
  for (int64_t j = 0; j < half; ++j) f->inv_freq[j] = DefaultOmega(log_b2, j, d);
}

// YaRN: the ramp between extrapolated and interpolated frequencies, and its attention factor.
void YarnFrequencies(const FrequencyInputs& in, RopeFrequencies* f) {
  const RopeConfig& c = in.c;
  const RopeScaling& sc = c.scaling;
  const int64_t d = in.d;
  const int64_t half = d / 2;
  const std::pair<int64_t, double>& extension = in.extension;
  const int64_t l0 = extension.first;
  const double s = extension.second;
  f->factor = s;
  const double beta_fast = sc.beta_fast.value_or(32.0);
  const double beta_slow = sc.beta_slow.value_or(1.0);
  const bool truncate = sc.truncate.value_or(true);
  auto correction_dim = [&](double r) {
    return static_cast<double>(d) * std::log(static_cast<double>(l0) / (2 * std::numbers::pi * r)) /
           (2 * std::log(c.base));
  };
  double low = correction_dim(beta_fast);
  double high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  f->yarn_low = low;
  f->yarn_high = high;
  const long double hi = high == low ? high + 0.001 : high;
  for (int64_t j = 0; j < half; ++j) {
    long double ramp = (static_cast<long double>(j) - low) / (hi - low);
    ramp = std::clamp<long double>(ramp, 0, 1);
    const long double gamma = 1 - ramp;  // extrapolation weight
    const long double w = f->inv_freq[j];
    f->inv_freq[j] = w * gamma + (w / static_cast<long double>(s)) * (1 - gamma);
  }
  if (sc.attention_factor) {
    f->attention_factor = *sc.attention_factor;
  } else if (sc.mscale.value_or(0) != 0 && sc.mscale_all_dim.value_or(0) != 0) {
    f->attention_factor = YarnMscale(s, *sc.mscale) / YarnMscale(s, *sc.mscale_all_dim);
  } else {
    f->attention_factor = YarnMscale(s, 1.0);
  }
}

// Llama 3: long wavelengths divided by the factor, the band between smoothed.
void Llama3Frequencies(const FrequencyInputs& in, RopeFrequencies* f) {
  const RopeConfig& c = in.c;
  const RopeScaling& sc = c.scaling;
  const long double s = *sc.factor;
  f->factor = *sc.factor;
  const long double l0 = static_cast<long double>(*sc.original_max_position_embeddings);
  const long double low = *sc.low_freq_factor, high = *sc.high_freq_factor;
  const long double low_wavelen = l0 / low, high_wavelen = l0 / high;
  // Hugging Face's order: long wavelengths divided first, then the band between smoothed.
  // With low == high the band is the single wavelength L0/low (kept: g taken as 1).
  for (auto& w : f->inv_freq) {
    const long double wavelen = 2 * std::numbers::pi_v<long double> / w;
    if (wavelen > low_wavelen) {
      w /= s;
    } else if (wavelen >= high_wavelen && high > low) {
      const long double g = (l0 / wavelen - low) / (high - low);
      w = (1 - g) * w / s + g * w;
    }
  }
}

// LongRoPE: the long or short per-frequency factors, and its attention factor.
void LongropeFrequencies(const FrequencyInputs& in, RopeFrequencies* f) {
  const RopeConfig& c = in.c;
  const RopeScaling& sc = c.scaling;
  const int64_t d = in.d;
  const int64_t half = d / 2;
  const int64_t seq_len = in.seq_len;
  const std::pair<int64_t, double>& extension = in.extension;
  const long double log_b = in.log_b;
  const int64_t l0 = extension.first;
  f->factor = extension.second;
  f->seq_len = seq_len;
  f->longrope_long_factors = seq_len > l0;
  const std::vector<double>& ext = f->longrope_long_factors ? sc.long_factor : sc.short_factor;
  for (int64_t j = 0; j < half; ++j) {
    f->inv_freq[j] = DefaultOmega(log_b, j, d) / static_cast<long double>(ext[j]);
  }
  if (sc.attention_factor) {
    f->attention_factor = *sc.attention_factor;
  } else if (f->factor > 1) {
    f->attention_factor = std::sqrt(1 + std::log(f->factor) / std::log(static_cast<double>(l0)));
  }
}

// Proportional (Gemma 4): the first fraction of the frequencies rotate, divided by the factor.
void ProportionalFrequencies(const FrequencyInputs& in, RopeFrequencies* f) {
  const RopeConfig& c = in.c;
  const RopeScaling& sc = c.scaling;
  const int64_t d = in.d;
  const int64_t half = d / 2;
  const long double s = sc.factor.value_or(1.0);
  f->factor = sc.factor.value_or(1.0);
  // int(p * d // 2) in Hugging Face's float arithmetic.
  const double p = sc.partial_rotary_factor.value_or(1.0);
  const auto rotating =
      std::min<int64_t>(static_cast<int64_t>(std::floor(p * static_cast<double>(d) / 2)), half);
  for (int64_t j = 0; j < half; ++j) {
    f->inv_freq[j] = j < rotating ? f->inv_freq[j] / s : 0.0L;
  }
}

}  // namespace

RopeFrequencies ComputeValidRopeFrequencies(const RopeConfig& c, int64_t max_position) {
  RopeFrequencies f;
  f.head_dim = c.head_dim;
  f.rotary_dim = c.rotary_dim.value_or(c.head_dim);
  f.attention_factor_applied = c.apply_attention_factor;
  f.effective_base = c.base;
  const int64_t d = f.rotary_dim;
  const int64_t half = d / 2;
  const FrequencyInputs in{c, d, c.seq_len.value_or(std::max<int64_t>(max_position + 1, 1)),
                           std::log(static_cast<long double>(c.base)), OriginalContextAndFactor(c)};
  f.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) f.inv_freq[j] = DefaultOmega(in.log_b, j, d);

  switch (c.scaling.type) {
    case RopeScalingType::kDefault: break;
    case RopeScalingType::kLinear:
      f.factor = *c.scaling.factor;
      for (auto& w : f.inv_freq) w /= static_cast<long double>(*c.scaling.factor);
      break;
    case RopeScalingType::kNtk:
    case RopeScalingType::kDynamic: NtkFrequencies(in, &f); break;
    case RopeScalingType::kYarn: YarnFrequencies(in, &f); break;
    case RopeScalingType::kLlama3: Llama3Frequencies(in, &f); break;
    case RopeScalingType::kLongrope: LongropeFrequencies(in, &f); break;
    case RopeScalingType::kProportional: ProportionalFrequencies(in, &f); break;
  }
  // Explicit per-frequency divisors, after the scaling type's frequencies.
  for (size_t j = 0; j < c.freq_factors.size(); ++j) {
    f.inv_freq[j] /= static_cast<long double>(c.freq_factors[j]);
  }
  // The frequency each slot rotates by (ALTERNATING and VISION layouts reorder them).
  if (c.frequency_axes.empty() && (c.mrope_layout == MropeLayout::kAlternating
                                       ? c.mrope_section.size() == 3
                                       : c.mrope_layout == MropeLayout::kVision2d ||
                                             c.mrope_layout == MropeLayout::kVision2dEvenOdd)) {
    const std::vector<long double> own = f.inv_freq;
    for (int64_t j = 0; j < half; ++j) f.inv_freq[j] = own[FrequencySource(c, j)];
  }
  if (c.nope) {
    f.nope = true;
    std::fill(f.inv_freq.begin(), f.inv_freq.end(), 0.0L);
    f.attention_factor = 1.0;
  }
  return f;
}

absl::string_view MropeLayoutName(MropeLayout layout) {
  switch (layout) {
    case MropeLayout::kContiguous: return "contiguous";
    case MropeLayout::kInterleaved: return "interleaved";
    case MropeLayout::kAlternating: return "alternating";
    case MropeLayout::kVision2d: return "vision_2d";
    case MropeLayout::kVision2dEvenOdd: return "vision_2d_even_odd";
  }
  return "unknown";
}

namespace {

bool IsVisionLayout(MropeLayout layout) {
  return layout == MropeLayout::kVision2d || layout == MropeLayout::kVision2dEvenOdd;
}

int64_t RotaryHalf(const RopeConfig& c) { return c.rotary_dim.value_or(c.head_dim) / 2; }

}  // namespace

int RopePositionAxes(const RopeConfig& c) {
  if (!c.frequency_axes.empty()) {
    return static_cast<int>(*std::max_element(c.frequency_axes.begin(), c.frequency_axes.end())) +
           1;
  }
  if (IsVisionLayout(c.mrope_layout)) return 2;
  return c.mrope_section.empty() ? 1 : static_cast<int>(c.mrope_section.size());
}

int MropeComponent(const RopeConfig& c, int64_t j) {
  if (!c.frequency_axes.empty()) return static_cast<int>(c.frequency_axes[j]);
  if (IsVisionLayout(c.mrope_layout)) return j < RotaryHalf(c) / 2 ? 0 : 1;
  const std::vector<int64_t>& sec = c.mrope_section;
  if (sec.empty()) return 0;
  switch (c.mrope_layout) {
    case MropeLayout::kInterleaved:
      if (j % 3 == 1 && j < 3 * sec[1]) return 1;
      if (j % 3 == 2 && j < 3 * sec[2]) return 2;
      return 0;
    case MropeLayout::kAlternating:
      if (j >= 2 * sec[0]) return 0;
      return j % 2 == 0 ? 1 : 2;
    default: {
      int64_t end = 0;
      for (size_t a = 0; a + 1 < sec.size(); ++a) {
        end += sec[a];
        if (j < end) return static_cast<int>(a);
      }
      return static_cast<int>(sec.size()) - 1;
    }
  }
}

int64_t FrequencySource(const RopeConfig& c, int64_t j) {
  if (!c.frequency_axes.empty()) return j;
  const int64_t quarter = RotaryHalf(c) / 2;
  switch (c.mrope_layout) {
    case MropeLayout::kAlternating:
      if (c.mrope_section.size() != 3 || j >= 2 * c.mrope_section[0]) return j;
      return j % 2 == 0 ? j / 2 : c.mrope_section[0] + j / 2;
    case MropeLayout::kVision2d: return j < quarter ? 2 * j : 2 * (j - quarter);
    case MropeLayout::kVision2dEvenOdd: return j < quarter ? 2 * j : 2 * (j - quarter) + 1;
    default: return j;
  }
}

void NormalizePositionAxes(RopeConfig* c) {
  if (!c->mrope_section.empty()) return;
  const int axes = RopePositionAxes(*c);
  if (axes == 1 && c->frequency_axes.empty()) return;
  c->mrope_section.assign(static_cast<size_t>(axes), 0);
  const int64_t half = RotaryHalf(*c);
  for (int64_t j = 0; j < half; ++j) ++c->mrope_section[MropeComponent(*c, j)];
}

}  // namespace posenc::kernels
