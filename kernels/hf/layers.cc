// Layer types, NoPE layers and one layer type's config (layers.h).
#include "kernels/hf/layers.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/status.h"
#include "kernels/hf/scaling.h"
#include "kernels/hf/sources.h"

namespace posenc::hf {
namespace {

using kernels::RopeScalingType;

// Llama 4's attention temperature tuning of a layer without RoPE: attn_temperature_tuning
// (truthy: true or a nonzero number; default true), floor_scale, attn_scale.
absl::Status ReadTemperatureTuning(const TextModel& m, std::optional<TemperatureTuning>* out,
                                   std::vector<ValueSource>* sources) {
  const Family& f = *m.family;
  const std::string on_key = KeyPath(m, "attn_temperature_tuning");
  bool on = true;
  if (const Json* v = Find(*m.text, "attn_temperature_tuning"); v != nullptr) {
    if (v->is_boolean()) {
      on = v->get<bool>();
    } else if (v->is_number()) {
      on = v->get<double>() != 0;
    } else {
      return Invalid(absl::StrCat(on_key, " must be a boolean or a number, got ", TypeName(*v)));
    }
    ReadFrom(sources, f, "attn_temperature_tuning", on_key, on ? "true" : "false");
  } else {
    Defaulted(sources, f, "attn_temperature_tuning", "attn_temperature_tuning", "true");
  }
  if (!on) return absl::OkStatus();
  TemperatureTuning t;
  for (auto [key, value] : {std::pair<absl::string_view, double*>{"floor_scale", &t.floor_scale},
                            {"attn_scale", &t.attn_scale}}) {
    POSENC_ASSIGN_OR_RETURN(std::optional<double> given, GetText<double>(m, key));
    if (given) {
      if (!std::isfinite(*given) || (key == "floor_scale" && !(*given > 0))) {
        return Invalid(absl::StrCat(KeyPath(m, key), ": expected a finite number",
                                    key == "floor_scale" ? " > 0" : "", ", got ", *given));
      }
      *value = *given;
      ReadFrom(sources, f, key, KeyPath(m, key), ValueText(*given));
    } else {
      Defaulted(sources, f, key, key, ValueText(*value));
    }
  }
  *out = t;
  return absl::OkStatus();
}

// What building one layer type's config reads and where it reports.
struct LayerInputs {
  const TextModel& m;
  const LayerSpec& spec;
  const Json& dict;  // the spec's RoPE dict, or an empty one
  std::vector<std::string>* warnings;
  std::vector<ValueSource>* sources;
};

// MLA (the rotary part is qk_rope_head_dim): a partial_rotary_factor is a fraction of the whole
// qk head (Mistral 4 sets qk_rope / (qk_nope + qk_rope)), not of the rotary part, so it does not
// shrink it; a warning when it disagrees with the file's qk_nope_head_dim.
absl::Status CheckMlaFraction(const LayerInputs& in, std::optional<int64_t> rope_dim,
                              double fraction, const std::string& fraction_key) {
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> nope, GetText<int64_t>(in.m, "qk_nope_head_dim"));
  if (!rope_dim || !nope) return absl::OkStatus();
  const auto rotary = static_cast<int64_t>(static_cast<double>(*nope + *rope_dim) * fraction);
  if (rotary != *rope_dim) {
    in.warnings->push_back(
        absl::StrCat(fraction_key, " (", fraction, ") of qk_nope_head_dim + qk_rope_head_dim (",
                     *nope + *rope_dim, ") is ", rotary, " channels, not qk_rope_head_dim (",
                     *rope_dim, "): posenc rotates qk_rope_head_dim"));
  }
  return absl::OkStatus();
}

// The base: the dict's rope_theta, a per-type key, the top level, the class default.
absl::StatusOr<double> ReadBase(const LayerInputs& in) {
  const TextModel& m = in.m;
  const LayerSpec& spec = in.spec;
  const Json& dict = in.dict;
  std::vector<ValueSource>* sources = in.sources;
  const Family& f = *m.family;
  POSENC_ASSIGN_OR_RETURN(std::optional<double> theta,
                          Get<double>(dict, "rope_theta", spec.path + ".rope_theta"));
  if (theta) {
    ReadFrom(sources, f, "base", spec.path + ".rope_theta", ValueText(*theta));
  } else if (spec.theta) {
    theta = spec.theta;
    if (spec.dict == nullptr && Find(*m.text, f.local_theta_key) == nullptr) {
      Defaulted(sources, f, "base", f.local_theta_key, ValueText(*theta));
    } else {
      ReadFrom(sources, f, "base", spec.path, ValueText(*theta));
    }
  } else if (m.theta) {
    theta = m.theta;
    ReadFrom(sources, f, "base", m.theta_key, ValueText(*theta));
  } else {
    Defaulted(sources, f, "base", "rope_theta", ValueText(f.theta));
  }
  return theta.value_or(f.theta);
}

// The rotary dim: a fraction of the head (the dict's, else the top level's or the class
// default), int(head_dim * fraction) as Python; an absolute rotary_dim; ChatGLM's half head.
// Proportional scaling keeps the fraction instead (a full-width table).
absl::Status ReadRotary(const LayerInputs& in, std::optional<int64_t> head_dim,
                        kernels::RopeConfig* config) {
  const TextModel& m = in.m;
  const LayerSpec& spec = in.spec;
  const Json& dict = in.dict;
  std::vector<ValueSource>* sources = in.sources;
  const Family& f = *m.family;
  kernels::RopeScaling& sc = config->scaling;
  POSENC_ASSIGN_OR_RETURN(
      std::optional<double> fraction,
      Get<double>(dict, "partial_rotary_factor", spec.path + ".partial_rotary_factor"));
  std::string fraction_key = spec.path + ".partial_rotary_factor";
  bool fraction_default = false;
  if (!fraction) {
    fraction = m.fraction;
    fraction_key = m.fraction_key;
    fraction_default = m.fraction_default;
  }
  if (fraction && fraction_default) {
    Defaulted(sources, f, "partial_rotary_factor", "partial_rotary_factor", ValueText(*fraction));
  } else if (fraction) {
    ReadFrom(sources, f, "partial_rotary_factor", fraction_key, ValueText(*fraction));
  } else if (f.chatglm) {
    Defaulted(sources, f, "rotary_dim", "head_dim / 2 (ChatGLM)", "head_dim / 2");
  } else if (m.rotary_dim && m.rotary_dim_default) {
    Defaulted(sources, f, "rotary_dim", "rotary_dim", absl::StrCat(*m.rotary_dim));
  } else if (m.rotary_dim) {
    ReadFrom(sources, f, "rotary_dim", KeyPath(m, "rotary_dim"), absl::StrCat(*m.rotary_dim));
  } else {
    Defaulted(sources, f, "rotary_dim", "no partial rotary key: the whole head", "head_dim");
  }
  if (sc.type == RopeScalingType::kProportional) {
    // Gemma 4: a full-width table whose first fraction of frequencies rotate.
    sc.partial_rotary_factor = fraction;
    if (fraction && !(*fraction >= 0.0 && *fraction <= 1.0)) {
      return Invalid(absl::StrCat(fraction_key, " must be in [0, 1], got ", *fraction));
    }
  } else if (fraction) {
    if (!(*fraction > 0.0 && *fraction <= 1.0)) {
      return Invalid(absl::StrCat(fraction_key, " must be in (0, 1], got ", *fraction));
    }
    if (f.rope_head_dim) return CheckMlaFraction(in, head_dim, *fraction, fraction_key);
    if (!head_dim) {
      return Invalid(absl::StrCat(fraction_key,
                                  " needs a head dim (head_dim, qk_rope_head_dim or "
                                  "hidden_size / num_attention_heads), none given"));
    }
    const auto rotary = static_cast<int64_t>(static_cast<double>(*head_dim) * *fraction);
    if (rotary != *head_dim) config->rotary_dim = rotary;
  } else if (m.family->chatglm && head_dim) {
    config->rotary_dim = *head_dim / 2;
  } else if (m.rotary_dim) {
    config->rotary_dim = m.rotary_dim;
  }

  return absl::OkStatus();
}

// What transformers' standardization changes (a top-level original_max_position_embeddings,
// YaRN's truncate in a keyed dict, llama3 with high <= low) and the warnings where transformers
// differs from the file or from posenc.
void Standardize(const LayerInputs& in, kernels::RopeConfig* config) {
  const TextModel& m = in.m;
  const LayerSpec& spec = in.spec;
  std::vector<std::string>* warnings = in.warnings;
  std::vector<ValueSource>* sources = in.sources;
  const Family& f = *m.family;
  kernels::RopeScaling& sc = config->scaling;
  // A top-level original_max_position_embeddings overrides the nested one (transformers'
  // standardize_rope_params), for the types that read it.
  if (m.original_max && (sc.type == RopeScalingType::kYarn || sc.type == RopeScalingType::kLlama3 ||
                         sc.type == RopeScalingType::kLongrope)) {
    sc.original_max_position_embeddings = m.original_max;
    ReadFrom(sources, f, "scaling.original_max_position_embeddings",
             KeyPath(m, "original_max_position_embeddings"), absl::StrCat(*m.original_max));
  }
  if (sc.type == RopeScalingType::kYarn && spec.keyed && sc.truncate == false) {
    // transformers reads truncate from the whole rope_parameters, not the layer's entry.
    warnings->push_back(absl::StrCat(spec.path,
                                     ".truncate: false is not read by transformers inside a "
                                     "rope_parameters keyed by layer type (truncate stays true)"));
    sc.truncate.reset();
  }
  if (sc.type == RopeScalingType::kLlama3 && sc.low_freq_factor && sc.high_freq_factor &&
      !(*sc.high_freq_factor > *sc.low_freq_factor)) {
    warnings->push_back(absl::StrCat(
        spec.path, ": high_freq_factor (", *sc.high_freq_factor, ") <= low_freq_factor (",
        *sc.low_freq_factor,
        "); transformers warns and computes a step: wavelengths above "
        "original_max_position_embeddings / low_freq_factor divided by factor, the rest kept"));
    sc.high_freq_factor = sc.low_freq_factor;  // the same step, no smoothed band
  }
  if (sc.type == RopeScalingType::kLongrope && !sc.factor && config->max_position_embeddings &&
      sc.original_max_position_embeddings) {
    warnings->push_back(
        absl::StrCat(spec.path,
                     ": no factor; transformers derives it as max_position_embeddings / "
                     "original_max_position_embeddings = ",
                     static_cast<double>(*config->max_position_embeddings) /
                         static_cast<double>(*sc.original_max_position_embeddings)));
  }
  if (sc.type == RopeScalingType::kDynamic && sc.alpha && config->max_position_embeddings) {
    // modeling_hunyuan_v1_dense.py sets the alpha base at init, but its forward keeps
    // @dynamic_rope_update: past max_position_embeddings it recomputes inv_freq with the plain
    // dynamic-NTK formula from rope_theta (ROPE_INIT_FUNCTIONS["dynamic"]), alpha dropped.
    warnings->push_back(absl::StrCat(
        "dynamic NTK with alpha: posenc (as vLLM) keeps b * alpha^(d/(d-2)) at every position; "
        "transformers switches to plain dynamic NTK from rope_theta, without alpha, once a "
        "sequence grows past max_position_embeddings (",
        *config->max_position_embeddings, ")"));
  }
}

// Ministral 3 / Mistral 4: rope_parameters.llama_4_scaling_beta scales q after the rotation by
// 1 + beta * ln(1 + floor(p / original_max_position_embeddings)) (the standardized value: a
// top-level key overrides the dict's). transformers' attention cannot run without beta; vLLM
// reads only its own llama_4_scaling and applies nothing for an HF-format file.
absl::Status ReadLlama4ScalingBeta(const LayerInputs& in, const kernels::RopeConfig& config,
                                   std::optional<TemperatureTuning>* out) {
  const Family& f = *in.m.family;
  const std::string beta_key = in.spec.path + ".llama_4_scaling_beta";
  POSENC_ASSIGN_OR_RETURN(std::optional<double> beta,
                          Get<double>(in.dict, "llama_4_scaling_beta", beta_key));
  if (!beta) {
    in.warnings->push_back(absl::StrCat(
        beta_key,
        " absent: transformers' Ministral3Attention / Mistral4Attention cannot run without it; "
        "vLLM applies no q scaling"));
    return absl::OkStatus();
  }
  if (!std::isfinite(*beta)) {
    return Invalid(absl::StrCat(beta_key, ": expected a finite number, got ", *beta));
  }
  const std::optional<int64_t> floor_scale = config.scaling.original_max_position_embeddings;
  if (!floor_scale || *floor_scale <= 0) {
    return Invalid(
        absl::StrCat(beta_key, " needs ", in.spec.path,
                     ".original_max_position_embeddings > 0 (the divisor of the position), got ",
                     floor_scale ? absl::StrCat(*floor_scale) : std::string("none")));
  }
  ReadFrom(in.sources, f, "attn_scale", beta_key, ValueText(*beta));
  ReadFrom(in.sources, f, "floor_scale",
           in.m.original_max ? KeyPath(in.m, "original_max_position_embeddings")
                             : in.spec.path + ".original_max_position_embeddings",
           absl::StrCat(*floor_scale));
  *out = TemperatureTuning{.floor_scale = static_cast<double>(*floor_scale),
                           .attn_scale = *beta,
                           .position_offset = 0,
                           .key = "llama_4_scaling_beta"};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<kernels::RopeConfig> BuildConfig(const TextModel& m, const LayerSpec& spec,
                                                std::vector<std::string>* warnings,
                                                std::vector<ValueSource>* sources,
                                                std::optional<TemperatureTuning>* tuning) {
  static const Json* const kEmpty = new Json(Json::object());
  const Json& dict = spec.dict != nullptr ? *spec.dict : *kEmpty;
  const LayerInputs in{m, spec, dict, warnings, sources};
  const Family& f = *m.family;
  kernels::RopeConfig config;
  POSENC_RETURN_IF_ERROR(ParseScaling(dict, spec.path, f, &config.scaling, warnings, sources));
  POSENC_ASSIGN_OR_RETURN(config.base, ReadBase(in));
  const std::optional<int64_t> head_dim = spec.head_dim ? spec.head_dim : m.head_dim;
  config.head_dim = head_dim.value_or(0);
  if (spec.head_dim) {
    ReadFrom(sources, f, "head_dim", KeyPath(m, "global_head_dim"), absl::StrCat(*spec.head_dim));
  }
  POSENC_RETURN_IF_ERROR(ReadRotary(in, head_dim, &config));
  config.max_position_embeddings = m.max_position;
  Standardize(in, &config);
  POSENC_ASSIGN_OR_RETURN(config.mrope_section,
                          GetIntArray(dict, "mrope_section", spec.path + ".mrope_section"));
  if (!config.mrope_section.empty()) {
    ReadFrom(sources, f, "mrope_section", spec.path + ".mrope_section",
             absl::StrCat("[", absl::StrJoin(config.mrope_section, ", "), "]"));
    POSENC_ASSIGN_OR_RETURN(std::optional<kernels::MropeLayout> layout, MropeLayoutOf(m, spec));
    if (layout) config.mrope_layout = *layout;
    const std::string name(kernels::MropeLayoutName(config.mrope_layout));
    if (spec.dict != nullptr && Find(*spec.dict, "mrope_interleaved") != nullptr) {
      ReadFrom(sources, f, "mrope_layout", spec.path + ".mrope_interleaved", name);
    } else if (f.mrope_layout) {
      Defaulted(sources, f, "mrope_layout", "the modeling code's layout", name);
    }
  }
  config.style = m.style;
  config.nope = spec.nope;
  if (spec.nope && f.q_scale == QScale::kLlama4NoPE) {
    POSENC_RETURN_IF_ERROR(ReadTemperatureTuning(m, tuning, sources));
  }
  if (!spec.nope && f.q_scale == QScale::kLlama4ScalingBeta) {
    POSENC_RETURN_IF_ERROR(ReadLlama4ScalingBeta(in, config, tuning));
  }
  if (!f.softmax_mscale && kernels::RopeSoftmaxScaleMultiplier(config).has_value()) {
    Defaulted(sources, f, "softmax_scale",
              "qk_head_dim^-0.5: the attention class does not apply YaRN's mscale_all_dim",
              "no multiplier");
  }
  return config;
}

absl::StatusOr<std::optional<kernels::MropeLayout>> MropeLayoutOf(const TextModel& m,
                                                                  const LayerSpec& spec) {
  if (spec.dict != nullptr) {
    POSENC_ASSIGN_OR_RETURN(
        std::optional<bool> interleaved,
        Get<bool>(*spec.dict, "mrope_interleaved", spec.path + ".mrope_interleaved"));
    if (interleaved) {
      return *interleaved ? kernels::MropeLayout::kInterleaved : kernels::MropeLayout::kContiguous;
    }
  }
  return m.family->mrope_layout;
}

namespace {

// The layer types of an architecture's rule (the file has no layer_types), n layers.
absl::Status TypesFromRule(const TextModel& m, int64_t n, std::vector<std::string>* types,
                           std::vector<ValueSource>* sources) {
  const Family& f = *m.family;
  switch (f.layers) {
    case LayerRule::kNone:
    case LayerRule::kNoRopeLayers: break;
    case LayerRule::kAlternating:
      for (int64_t i = 0; i < n; ++i) {
        types->push_back((i + 1) % 2 != 0 ? "sliding_attention" : "full_attention");
      }
      Defaulted(sources, f, "layer_types", "layer_types (alternating)",
                "sliding, full, sliding, ...");
      break;
    case LayerRule::kSlidingPattern: {
      std::string period_key;
      POSENC_ASSIGN_OR_RETURN(
          std::optional<int64_t> period,
          GetFirst<int64_t>(m, {"sliding_window_pattern", "_sliding_window_pattern"}, &period_key));
      const int64_t p = period.value_or(f.layer_period);
      const std::string rule = absl::StrCat("every ", p, "th layer full_attention");
      if (period) {
        ReadFrom(sources, f, "layer_types", period_key, rule);
      } else {
        Defaulted(sources, f, "layer_types", "sliding_window_pattern", rule);
      }
      for (int64_t i = 0; i < n; ++i) {
        types->push_back(p > 0 && (i + 1) % p == 0 ? "full_attention" : "sliding_attention");
      }
      break;
    }
    case LayerRule::kGlobalEveryN: {
      POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> every,
                              GetText<int64_t>(m, "global_attn_every_n_layers"));
      const int64_t p = every.value_or(f.layer_period);
      const std::string rule = absl::StrCat("layer i full_attention when i % ", p, " == 0");
      if (every) {
        ReadFrom(sources, f, "layer_types", KeyPath(m, "global_attn_every_n_layers"), rule);
      } else {
        Defaulted(sources, f, "layer_types", "global_attn_every_n_layers", rule);
      }
      for (int64_t i = 0; i < n; ++i) {
        types->push_back(p > 0 && i % p == 0 ? "full_attention" : "sliding_attention");
      }
      break;
    }
  }
  return absl::OkStatus();
}

// Llama 4 / SmolLM 3: no_rope_layers[i] is 1 where the layer HAS RoPE (transformers' naming);
// empty or absent: every no_rope_layer_interval-th layer has none.
absl::Status NoRopeLayers(const TextModel& m, int64_t n, std::vector<std::string>* types,
                          std::vector<bool>* nope, std::vector<ValueSource>* sources) {
  const Family& f = *m.family;
  POSENC_ASSIGN_OR_RETURN(std::vector<int64_t> flags,
                          GetIntArray(*m.text, "no_rope_layers", KeyPath(m, "no_rope_layers")));
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> interval,
                          GetText<int64_t>(m, "no_rope_layer_interval"));
  const int64_t p = interval.value_or(f.layer_period);
  if (!flags.empty()) {
    ReadFrom(sources, f, "nope", KeyPath(m, "no_rope_layers"),
             absl::StrCat("[", flags.size(), " values]"));
  } else if (interval) {
    ReadFrom(sources, f, "nope", KeyPath(m, "no_rope_layer_interval"),
             absl::StrCat("every ", p, "th layer"));
  } else {
    Defaulted(sources, f, "nope", "no_rope_layer_interval", absl::StrCat("every ", p, "th layer"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const bool rope = flags.empty() ? (p <= 0 || (i + 1) % p != 0)
                                    : (static_cast<size_t>(i) < flags.size() && flags[i] != 0);
    (*nope)[i] = !rope;
  }
  if (types->empty() && m.family->model_types.front() == "llama4_text") {
    // Llama4TextConfig's layer_types: chunked attention where RoPE, full where NoPE.
    for (int64_t i = 0; i < n; ++i) {
      types->push_back((*nope)[i] ? "full_attention" : "chunked_attention");
    }
    Defaulted(sources, f, "layer_types", "layer_types (from the NoPE layers)",
              "chunked_attention with RoPE, full_attention without");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LayerTypes(const TextModel& m, std::vector<std::string>* types,
                        std::vector<bool>* nope, std::vector<ValueSource>* sources) {
  const Family& f = *m.family;
  std::string layers_key;
  POSENC_ASSIGN_OR_RETURN(
      std::optional<int64_t> num_layers,
      GetFirst<int64_t>(m, {"num_hidden_layers", "n_layer", "num_layers"}, &layers_key));
  if (num_layers) ReadFrom(sources, f, "num_layers", layers_key, absl::StrCat(*num_layers));
  if (num_layers && (*num_layers < 0 || *num_layers > 100000)) {
    return Invalid(
        absl::StrCat(KeyPath(m, "num_hidden_layers"), ": expected 0 .. 100000, got ", *num_layers));
  }
  if (const Json* list = Find(*m.text, "layer_types"); list != nullptr) {
    if (!list->is_array()) {
      return Invalid(absl::StrCat(KeyPath(m, "layer_types"), " must be an array of strings, got ",
                                  TypeName(*list)));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) {
        return Invalid(absl::StrCat(KeyPath(m, "layer_types"), "[", i, "] must be a string, got ",
                                    TypeName((*list)[i])));
      }
      types->push_back((*list)[i].get<std::string>());
    }
    ReadFrom(sources, f, "layer_types", KeyPath(m, "layer_types"),
             absl::StrCat("[", list->size(), " values]"));
  }
  const int64_t n = types->empty() ? num_layers.value_or(0) : static_cast<int64_t>(types->size());
  if (types->empty() && n > 0) POSENC_RETURN_IF_ERROR(TypesFromRule(m, n, types, sources));
  nope->assign(static_cast<size_t>(n), false);
  if (f.nope_full_attention) {
    for (size_t i = 0; i < types->size(); ++i) (*nope)[i] = (*types)[i] == "full_attention";
    Defaulted(sources, f, "nope", "full_attention layers have no RoPE", "full_attention");
  }
  if (f.layers == LayerRule::kNoRopeLayers && n > 0) {
    POSENC_RETURN_IF_ERROR(NoRopeLayers(m, n, types, nope, sources));
  }
  return absl::OkStatus();
}

}  // namespace posenc::hf
