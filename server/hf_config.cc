#include "server/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/common/types.h"
#include "kernels/rope/frequency_cache.h"
#include "nlohmann/json.hpp"
#include "server/status.h"

namespace posenc::server {
namespace {

using Json = nlohmann::json;
using kernels::RopeScalingType;

constexpr absl::string_view kPrefix = "config.hf_config_json: ";

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(kPrefix, message));
}

std::string TypeName(const Json& value) { return value.type_name(); }

// The value at `key` of `object`, or null when absent or JSON null (both mean "not given").
const Json* Find(const Json& object, absl::string_view key) {
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<double> ToDouble(const Json& value, absl::string_view path) {
  if (!value.is_number()) {
    return Invalid(absl::StrCat(path, " must be a number, got ", TypeName(value)));
  }
  const double v = value.get<double>();
  if (!std::isfinite(v)) return Invalid(absl::StrCat(path, " must be finite, got ", v));
  return v;
}

absl::StatusOr<int64_t> ToInt(const Json& value, absl::string_view path) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(absl::StrCat(path, " is too large: ", u));
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    // Some exporters write integers as 4096.0; accept integral values within range.
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
    return Invalid(absl::StrCat(path, " must be an integer, got ", d));
  }
  return Invalid(absl::StrCat(path, " must be an integer, got ", TypeName(value)));
}

absl::StatusOr<bool> ToBool(const Json& value, absl::string_view path) {
  if (!value.is_boolean()) {
    return Invalid(absl::StrCat(path, " must be true or false, got ", TypeName(value)));
  }
  return value.get<bool>();
}

// The value at `key` of `object` read by ToDouble, ToInt or ToBool, or nullopt when not given.
template <typename T>
absl::StatusOr<std::optional<T>> Get(const Json& object, absl::string_view key,
                                     absl::string_view path) {
  const Json* value = Find(object, key);
  if (value == nullptr) return std::nullopt;
  absl::StatusOr<T> v;
  if constexpr (std::is_same_v<T, double>) {
    v = ToDouble(*value, path);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    v = ToInt(*value, path);
  } else {
    static_assert(std::is_same_v<T, bool>);
    v = ToBool(*value, path);
  }
  if (!v.ok()) return v.status();
  return *v;
}

absl::StatusOr<double> ToFiniteDouble(const Json& value, absl::string_view path) {
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    return Invalid(absl::StrCat(path, " must be a finite number, got ",
                                value.is_number() ? value.dump() : TypeName(value)));
  }
  return value.get<double>();
}

// The array at `key` of `object` (empty when absent), element i read by
// element(value, "PATH[i]"); `elements` names them in the error for something else than an array.
template <typename T, typename Element>
absl::StatusOr<std::vector<T>> GetArray(const Json& object, absl::string_view key,
                                        absl::string_view path, absl::string_view elements,
                                        Element element) {
  std::vector<T> out;
  const Json* value = Find(object, key);
  if (value == nullptr) return out;
  if (!value->is_array()) {
    return Invalid(
        absl::StrCat(path, " must be an array of ", elements, ", got ", TypeName(*value)));
  }
  out.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    POSENC_ASSIGN_OR_RETURN(T v, element((*value)[i], absl::StrCat(path, "[", i, "]")));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GetDoubleArray(const Json& object, absl::string_view key,
                                                   absl::string_view path) {
  return GetArray<double>(object, key, path, "numbers", ToFiniteDouble);
}

absl::StatusOr<std::vector<int64_t>> GetIntArray(const Json& object, absl::string_view key,
                                                 absl::string_view path) {
  return GetArray<int64_t>(object, key, path, "integers", ToInt);
}

// Nesting deeper than kMaxHfConfigDepth (arrays and objects, outside strings) is refused before
// the parser sees it.
absl::Status CheckNesting(absl::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxHfConfigDepth) {
        return Invalid(
            absl::StrCat("nests deeper than ", kMaxHfConfigDepth, " levels at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

// ----- architectures ----------------------------------------------------------------------------

// How an architecture pairs the rotary channels.
enum class Pairing {
  kNeox,
  kGptj,
  // `rope_interleave` (default per family): true -> DEEPSEEK (de-interleave, then rotate_half).
  kInterleaveFlag,
};

// Which layers differ, and how the architecture names them when the file has no layer_types.
enum class LayerRule {
  kNone,
  kAlternating,     // Gemma 2: layer i sliding_attention iff (i+1) % 2 != 0
  kSlidingPattern,  // Gemma 3, Cohere 2: full_attention iff (i+1) % sliding_window_pattern == 0
  kGlobalEveryN,    // ModernBERT: full_attention iff i % global_attn_every_n_layers == 0
  kNoRopeLayers,    // Llama 4, SmolLM 3: no_rope_layers[i] == 0 (or every Nth) has no RoPE
};

// The defaults of one architecture's configuration class: what transformers uses when the file
// leaves a key out. Keys every architecture reads (rope_theta, rope_scaling / rope_parameters,
// head_dim, partial_rotary_factor, ...) are read the same way for all; these are the differences.
struct Family {
  std::vector<absl::string_view> model_types;  // text model first, then composite names
  absl::string_view source;                    // transformers file the defaults come from
  double theta = 10000.0;
  std::optional<int64_t> head_dim;      // class default (else hidden_size / num_attention_heads)
  std::optional<int64_t> max_position;  // class default max_position_embeddings
  std::optional<double> partial;        // class default partial_rotary_factor (or rotary_pct)
  std::optional<int64_t> rotary_dim;    // class default absolute rotary_dim (GPT-J)
  Pairing pairing = Pairing::kNeox;
  bool interleave_default = false;  // kInterleaveFlag: rope_interleave when absent
  bool rope_head_dim = false;       // MLA: the rotary part is qk_rope_head_dim (default 64)
  LayerRule layers = LayerRule::kNone;
  int64_t layer_period = 0;            // kSlidingPattern / kGlobalEveryN / kNoRopeLayers default
  bool nope_full_attention = false;    // Cohere 2: full_attention layers have no RoPE
  std::optional<double> local_theta;   // Gemma 3 rope_local_base_freq, ModernBERT local_rope_theta
  absl::string_view global_theta_key;  // ModernBERT global_rope_theta (the full layers' base)
  absl::string_view local_theta_key;   // the sliding layers' base key
  bool chatglm = false;  // remote code: kv_channels, rotary = head/2, base 10000*rope_ratio
  // A class-default RoPE dict (gpt-oss's YaRN) used when the file has none.
  absl::string_view default_rope = "";
  // Llama 4: attn_temperature_tuning (default true), floor_scale (8192), attn_scale (0.1) scale
  // q on the layers without RoPE.
  bool temperature_tuning = false;
};

// One row per configuration class; "models/X/configuration_X.py" is the transformers file (the
// 5.x line) whose defaults the row repeats. Remote-code models (model_type not in transformers)
// name the repository's configuration file.
const std::vector<Family>& Families() {
  static const auto* families = new std::vector<Family>{
      {.model_types = {"llama"},
       .source = "models/llama/configuration_llama.py",
       .max_position = 2048},
      {.model_types = {"llama4_text", "llama4"},
       .source = "models/llama4/configuration_llama4.py",
       .theta = 500000.0,
       .head_dim = 128,
       .max_position = 4096 * 32,
       .pairing = Pairing::kGptj,
       .layers = LayerRule::kNoRopeLayers,
       .layer_period = 4,
       .temperature_tuning = true},
      {.model_types = {"mistral"},
       .source = "models/mistral/configuration_mistral.py",
       .max_position = 4096 * 32},
      {.model_types = {"mixtral"},
       .source = "models/mixtral/configuration_mixtral.py",
       .theta = 1e6,
       .max_position = 4096 * 32},
      {.model_types = {"qwen2", "qwen2_moe"},
       .source = "models/qwen2/configuration_qwen2.py",
       .max_position = 32768},
      {.model_types = {"qwen3", "qwen3_moe"},
       .source = "models/qwen3/configuration_qwen3.py",
       .head_dim = 128,
       .max_position = 32768},
      {.model_types = {"qwen3_next"},
       .source = "models/qwen3_next/configuration_qwen3_next.py",
       .head_dim = 256,
       .max_position = 32768,
       .partial = 0.25},
      {.model_types = {"qwen2_vl_text", "qwen2_vl", "qwen2_5_vl_text", "qwen2_5_vl"},
       .source = "models/qwen2_vl/configuration_qwen2_vl.py",
       .theta = 1e6,
       .max_position = 32768},
      {.model_types = {"qwen3_vl_text", "qwen3_vl", "qwen3_vl_moe_text", "qwen3_vl_moe"},
       .source = "models/qwen3_vl/configuration_qwen3_vl.py",
       .theta = 5e6,
       .head_dim = 128,
       .max_position = 128000},
      {.model_types = {"deepseek_v2"},
       .source = "models/deepseek_v2/configuration_deepseek_v2.py",
       .max_position = 2048,
       .pairing = Pairing::kGptj,
       .rope_head_dim = true},
      {.model_types = {"deepseek_v3", "kimi_k2"},
       .source = "models/deepseek_v3/configuration_deepseek_v3.py (Kimi K2: its remote "
                 "configuration_deepseek.py, the same class)",
       .max_position = 4096,
       .pairing = Pairing::kInterleaveFlag,
       .interleave_default = true,
       .rope_head_dim = true},
      {.model_types = {"gemma"},
       .source = "models/gemma/configuration_gemma.py",
       .head_dim = 256,
       .max_position = 8192},
      {.model_types = {"gemma2"},
       .source = "models/gemma2/configuration_gemma2.py",
       .head_dim = 256,
       .max_position = 8192,
       .layers = LayerRule::kAlternating},
      {.model_types = {"gemma3_text", "gemma3"},
       .source = "models/gemma3/configuration_gemma3.py",
       .theta = 1e6,
       .head_dim = 256,
       .max_position = 131072,
       .layers = LayerRule::kSlidingPattern,
       .layer_period = 6,
       .local_theta = 10000.0,
       .local_theta_key = "rope_local_base_freq"},
      {.model_types = {"gemma4_text", "gemma4"},
       .source = "models/gemma4/configuration_gemma4.py",
       .theta = 1e6,
       .head_dim = 256,
       .max_position = 131072},
      {.model_types = {"phi"},
       .source = "models/phi/configuration_phi.py",
       .max_position = 2048,
       .partial = 0.5},
      {.model_types = {"phi3"},
       .source = "models/phi3/configuration_phi3.py",
       .max_position = 4096},
      {.model_types = {"phimoe"},
       .source = "models/phimoe/configuration_phimoe.py",
       .theta = 1e6,
       .max_position = 4096 * 32},
      {.model_types = {"gptj"},
       .source = "models/gptj/configuration_gptj.py (base 10000 is "
                 "hard-coded in modeling_gptj.py)",
       .max_position = 2048,
       .rotary_dim = 64,
       .pairing = Pairing::kGptj},
      {.model_types = {"gpt_neox"},
       .source = "models/gpt_neox/configuration_gpt_neox.py",
       .max_position = 2048,
       .partial = 0.25},
      {.model_types = {"gpt_neox_japanese"},
       .source = "models/gpt_neox_japanese/configuration_gpt_neox_japanese.py",
       .max_position = 2048,
       .partial = 1.0},
      {.model_types = {"cohere"},
       .source = "models/cohere/configuration_cohere.py",
       .max_position = 8192,
       .pairing = Pairing::kGptj},
      {.model_types = {"cohere2"},
       .source = "models/cohere2/configuration_cohere2.py",
       .max_position = 8192,
       .pairing = Pairing::kGptj,
       .layers = LayerRule::kSlidingPattern,
       .layer_period = 4,
       .nope_full_attention = true},
      {.model_types = {"glm", "glm4"},
       .source = "models/glm/configuration_glm.py",
       .head_dim = 128,
       .max_position = 131072,
       .partial = 0.5,
       .pairing = Pairing::kGptj},
      {.model_types = {"glm4_moe"},
       .source = "models/glm4_moe/configuration_glm4_moe.py",
       .head_dim = 128,
       .max_position = 131072,
       .partial = 0.5},
      {.model_types = {"chatglm"},
       .source = "THUDM/chatglm3-6b configuration_chatglm.py (remote)",
       .max_position = 32768,
       .pairing = Pairing::kGptj,
       .chatglm = true},
      {.model_types = {"internlm2", "internlm", "internlm3"},
       .source = "internlm/internlm2_5-7b-chat configuration_internlm2.py (remote)",
       .max_position = 2048},
      {.model_types = {"olmo", "olmo2", "olmoe"},
       .source = "models/olmo2/configuration_olmo2.py",
       .max_position = 2048},
      {.model_types = {"smollm3"},
       .source = "models/smollm3/configuration_smollm3.py",
       .theta = 2e6,
       .max_position = 32768,
       .layers = LayerRule::kNoRopeLayers,
       .layer_period = 4},
      {.model_types = {"stablelm"},
       .source = "models/stablelm/configuration_stablelm.py",
       .max_position = 4096,
       .partial = 0.25},
      {.model_types = {"modernbert"},
       .source = "models/modernbert/configuration_modernbert.py",
       .theta = 160000.0,
       .max_position = 8192,
       .layers = LayerRule::kGlobalEveryN,
       .layer_period = 3,
       .local_theta = 10000.0,
       .global_theta_key = "global_rope_theta",
       .local_theta_key = "local_rope_theta"},
      {.model_types = {"gpt_oss"},
       .source = "models/gpt_oss/configuration_gpt_oss.py",
       .theta = 150000.0,
       .head_dim = 64,
       .max_position = 131072,
       .default_rope = R"({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                           "beta_slow": 1.0, "truncate": false,
                           "original_max_position_embeddings": 4096})"},
      {.model_types = {"minimax", "minimax_m2"},
       .source = "models/minimax/configuration_minimax.py (rotary_dim read as given)",
       .theta = 1e6,
       .max_position = 4096 * 32},
      {.model_types = {"mimo"},
       .source = "XiaomiMiMo/MiMo-7B-Base configuration_mimo.py (remote, "
                 "Qwen2's class)",
       .max_position = 32768},
      // Hunyuan: rope_scaling {"type": "dynamic", "alpha": A} is DynamicNTKAlpha (a fixed base).
      {.model_types = {"hunyuan_v1_dense", "hunyuan_v1_moe"},
       .source = "models/hunyuan_v1_dense/configuration_hunyuan_v1_dense.py",
       .max_position = 2048},
  };
  return *families;
}

// The generic row: an absent or unknown model_type.
const Family& GenericFamily() {
  static const auto* generic = new Family{.source = "transformers' PreTrainedConfig defaults"};
  return *generic;
}

const Family* FindFamily(absl::string_view model_type) {
  for (const Family& f : Families()) {
    for (absl::string_view name : f.model_types) {
      if (name == model_type) return &f;
    }
  }
  return nullptr;
}

// ----- where each value came from ----------------------------------------------------------------

std::string DefaultOrigin(const Family& f) {
  return absl::StrCat("architecture default (", f.source, ")");
}

// The origin of a value read at `key_path` (a class-default RoPE dict's path says so).
std::string OriginOf(const Family& f, absl::string_view key_path) {
  if (absl::StrContains(key_path, "class default")) return DefaultOrigin(f);
  return absl::StartsWith(key_path, "text_config.") ? "nested config (text_config)" : "file";
}

std::string ValueText(double v) { return absl::StrFormat("%.10g", v); }

void ReadFrom(std::vector<HfValueSource>* out, const Family& f, absl::string_view name,
              absl::string_view key_path, std::string value) {
  out->push_back(
      {std::string(name), std::string(key_path), OriginOf(f, key_path), std::move(value)});
}

void Defaulted(std::vector<HfValueSource>* out, const Family& f, absl::string_view name,
               absl::string_view key, std::string value) {
  out->push_back({std::string(name), std::string(key), DefaultOrigin(f), std::move(value)});
}

// A JSON value as text; arrays by their length.
std::string JsonText(const Json& v) {
  if (v.is_array()) return absl::StrCat("[", v.size(), " values]");
  if (v.is_number()) return ValueText(v.get<double>());
  return kernels::Abbreviate(v.dump(), 64);
}

// ----- rope types -------------------------------------------------------------------------------

struct TypeInfo {
  absl::string_view name;
  RopeScalingType type;
  std::vector<absl::string_view> keys;  // keys read beyond the common ones
};

// The keys transformers reads for each rope type (modeling_rope_utils.py, the _validate_*
// functions), plus static NTK, which is posenc's own.
const std::vector<TypeInfo>& Types() {
  static const auto* types = new std::vector<TypeInfo>{
      {"default", RopeScalingType::kDefault, {}},
      {"linear", RopeScalingType::kLinear, {"factor"}},
      {"ntk", RopeScalingType::kNtk, {"factor"}},
      // transformers accepts original_max_position_embeddings for dynamic but computes with
      // max_position_embeddings; so does posenc. alpha: Hunyuan's fixed NTK base (its rotary
      // embedding reads it when truthy; factor is then not read).
      {"dynamic", RopeScalingType::kDynamic, {"factor", "alpha"}},
      {"yarn",
       RopeScalingType::kYarn,
       {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
        "truncate"}},
      {"llama3", RopeScalingType::kLlama3, {"factor", "low_freq_factor", "high_freq_factor"}},
      {"longrope",
       RopeScalingType::kLongrope,
       {"factor", "attention_factor", "long_factor", "short_factor"}},
      {"proportional", RopeScalingType::kProportional, {"factor"}},
  };
  return *types;
}

// Keys valid inside the RoPE dict for every type.
constexpr absl::string_view kCommonKeys[] = {"rope_type",
                                             "type",
                                             "rope_theta",
                                             "partial_rotary_factor",
                                             "mrope_section",
                                             "mrope_interleaved",
                                             "original_max_position_embeddings"};

bool IsCommonKey(absl::string_view key) {
  for (absl::string_view k : kCommonKeys) {
    if (k == key) return true;
  }
  return false;
}

absl::StatusOr<const TypeInfo*> LookUpType(absl::string_view name, absl::string_view path) {
  absl::string_view canonical = name;
  if (name == "mrope") canonical = "default";  // Qwen2-VL's legacy name
  if (name == "su") canonical = "longrope";    // early Phi-3 configs
  std::vector<absl::string_view> known;
  for (const TypeInfo& info : Types()) {
    if (info.name == canonical) return &info;
    known.push_back(info.name);
  }
  return Invalid(absl::StrCat(path, ": unknown rope type '", name, "' (expected one of ",
                              absl::StrJoin(known, ", "), ")"));
}

// Fills `scaling` from the RoPE dict `dict` (named `path` in messages): the keys its type reads;
// keys it does not read become warnings. `sources` gets the rope type and every key read.
absl::Status ParseScaling(const Json& dict, const std::string& path, const Family& family,
                          kernels::RopeScaling* scaling, std::vector<std::string>* warnings,
                          std::vector<HfValueSource>* sources) {
  const Json* type_value = Find(dict, "rope_type");
  std::string type_key = "rope_type";
  if (type_value == nullptr) {
    type_value = Find(dict, "type");
    type_key = "type";
  }
  std::string type_name = "default";
  if (type_value != nullptr) {
    if (!type_value->is_string()) {
      return Invalid(
          absl::StrCat(path, ".", type_key, " must be a string, got ", TypeName(*type_value)));
    }
    type_name = type_value->get<std::string>();
  }
  POSENC_ASSIGN_OR_RETURN(const TypeInfo* info,
                          LookUpType(type_name, absl::StrCat(path, ".", type_key)));
  scaling->type = info->type;
  if (type_value != nullptr) {
    ReadFrom(sources, family, "rope_type", absl::StrCat(path, ".", type_key), type_name);
  } else {
    Defaulted(sources, family, "rope_type",
              dict.empty() ? "no rope_scaling / rope_parameters" : absl::StrCat(path, " (no type)"),
              "default");
  }
  for (absl::string_view key : info->keys) {
    if (const Json* v = Find(dict, key); v != nullptr) {
      ReadFrom(sources, family, absl::StrCat("scaling.", key), absl::StrCat(path, ".", key),
               JsonText(*v));
    }
  }
  if (info->type == RopeScalingType::kYarn || info->type == RopeScalingType::kLlama3 ||
      info->type == RopeScalingType::kLongrope) {
    if (const Json* v = Find(dict, "original_max_position_embeddings"); v != nullptr) {
      ReadFrom(sources, family, "scaling.original_max_position_embeddings",
               absl::StrCat(path, ".original_max_position_embeddings"), JsonText(*v));
    }
  }

  auto reads = [info](absl::string_view key) {
    for (absl::string_view k : info->keys) {
      if (k == key) return true;
    }
    return false;
  };
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    const std::string& key = it.key();
    if (IsCommonKey(key) || reads(key)) continue;
    warnings->push_back(absl::StrCat(path, ".", kernels::Abbreviate(key),
                                     ": not read for rope_type '", type_name,
                                     "' (ignored, as "
                                     "transformers does)"));
  }
  auto key_path = [&path](absl::string_view key) { return absl::StrCat(path, ".", key); };
  auto get_double = [&](absl::string_view key, std::optional<double>* out) -> absl::Status {
    if (!reads(key)) return absl::OkStatus();
    POSENC_ASSIGN_OR_RETURN(*out, Get<double>(dict, key, key_path(key)));
    return absl::OkStatus();
  };
  POSENC_RETURN_IF_ERROR(get_double("factor", &scaling->factor));
  if (info->type == RopeScalingType::kYarn || info->type == RopeScalingType::kLlama3 ||
      info->type == RopeScalingType::kLongrope) {
    POSENC_ASSIGN_OR_RETURN(scaling->original_max_position_embeddings,
                            Get<int64_t>(dict, "original_max_position_embeddings",
                                         key_path("original_max_position_embeddings")));
  }
  POSENC_RETURN_IF_ERROR(get_double("beta_fast", &scaling->beta_fast));
  POSENC_RETURN_IF_ERROR(get_double("beta_slow", &scaling->beta_slow));
  if (reads("truncate")) {
    POSENC_ASSIGN_OR_RETURN(scaling->truncate, Get<bool>(dict, "truncate", key_path("truncate")));
  }
  POSENC_RETURN_IF_ERROR(get_double("mscale", &scaling->mscale));
  POSENC_RETURN_IF_ERROR(get_double("mscale_all_dim", &scaling->mscale_all_dim));
  POSENC_RETURN_IF_ERROR(get_double("attention_factor", &scaling->attention_factor));
  POSENC_RETURN_IF_ERROR(get_double("low_freq_factor", &scaling->low_freq_factor));
  POSENC_RETURN_IF_ERROR(get_double("high_freq_factor", &scaling->high_freq_factor));
  POSENC_RETURN_IF_ERROR(get_double("alpha", &scaling->alpha));
  if (reads("long_factor")) {
    POSENC_ASSIGN_OR_RETURN(scaling->long_factor,
                            GetDoubleArray(dict, "long_factor", key_path("long_factor")));
    POSENC_ASSIGN_OR_RETURN(scaling->short_factor,
                            GetDoubleArray(dict, "short_factor", key_path("short_factor")));
  }
  // transformers' yarn/longrope/llama3 read these with Python truthiness: 0 means absent.
  if (scaling->beta_fast == 0.0) scaling->beta_fast.reset();
  if (scaling->beta_slow == 0.0) scaling->beta_slow.reset();
  if (scaling->alpha == 0.0) scaling->alpha.reset();  // Hunyuan: `if rope_scaling["alpha"]`
  return absl::OkStatus();
}

// ----- the text model ---------------------------------------------------------------------------

// What every layer shares: read once from the text config.
struct TextModel {
  const Json* text = nullptr;  // text_config, or the root
  const Json* root = nullptr;
  std::string path_prefix;  // "text_config." or ""
  const Family* family = nullptr;
  std::optional<int64_t> head_dim;
  std::optional<int64_t> max_position;
  std::optional<double> theta;  // top-level rope_theta | rotary_emb_base
  std::string theta_key;
  std::optional<double> fraction;  // top-level partial_rotary_factor | rotary_pct
  std::string fraction_key;
  bool fraction_default = false;      // fraction is the class default
  std::optional<int64_t> rotary_dim;  // top-level absolute rotary_dim
  bool rotary_dim_default = false;    // rotary_dim is the class default (GPT-J)
  std::optional<int64_t> original_max;
  kernels::RopeStyle style = kernels::RopeStyle::kNeox;
  std::vector<HfValueSource> sources;  // the values every layer shares, where they came from
};

std::string StyleText(kernels::RopeStyle style) {
  switch (style) {
    case kernels::RopeStyle::kNeox: return "neox";
    case kernels::RopeStyle::kGptj: return "gptj";
    case kernels::RopeStyle::kDeepseek: return "deepseek";
  }
  return "neox";
}

std::string KeyPath(const TextModel& m, absl::string_view key) {
  return absl::StrCat(m.path_prefix, key);
}

template <typename T>
absl::StatusOr<std::optional<T>> GetText(const TextModel& m, absl::string_view key) {
  return Get<T>(*m.text, key, KeyPath(m, key));
}

// The first of `keys` that the text config gives.
template <typename T>
absl::StatusOr<std::optional<T>> GetFirst(const TextModel& m,
                                          std::initializer_list<absl::string_view> keys,
                                          std::string* which = nullptr) {
  for (absl::string_view key : keys) {
    POSENC_ASSIGN_OR_RETURN(std::optional<T> v, GetText<T>(m, key));
    if (v.has_value()) {
      if (which != nullptr) *which = KeyPath(m, key);
      return v;
    }
  }
  return std::nullopt;
}

absl::Status ReadTextModel(TextModel* m, std::vector<std::string>* warnings) {
  const Family& f = *m->family;
  // Head dim: the rotary part of MLA heads, else head_dim (or the class default), else
  // hidden_size / num_attention_heads (GPT-J: n_embd / n_head), floor division as Python.
  std::string head_key;  // where head_dim came from ("" : the class default)
  if (f.rope_head_dim) {
    POSENC_ASSIGN_OR_RETURN(m->head_dim, GetText<int64_t>(*m, "qk_rope_head_dim"));
    if (m->head_dim) head_key = KeyPath(*m, "qk_rope_head_dim");
    if (!m->head_dim) {
      m->head_dim = 64;  // DeepseekV2Config / DeepseekV3Config default
      Defaulted(&m->sources, f, "head_dim", "qk_rope_head_dim", "64");
    }
  } else if (f.chatglm) {
    POSENC_ASSIGN_OR_RETURN(m->head_dim, GetText<int64_t>(*m, "kv_channels"));
    if (m->head_dim) head_key = KeyPath(*m, "kv_channels");
  } else {
    POSENC_ASSIGN_OR_RETURN(m->head_dim,
                            GetFirst<int64_t>(*m, {"head_dim", "qk_rope_head_dim"}, &head_key));
    if (!m->head_dim && f.head_dim) {
      m->head_dim = f.head_dim;
      Defaulted(&m->sources, f, "head_dim", "head_dim", absl::StrCat(*f.head_dim));
    }
  }
  if (!m->head_dim) {
    std::string hidden_key, heads_key;
    POSENC_ASSIGN_OR_RETURN(
        std::optional<int64_t> hidden,
        GetFirst<int64_t>(*m, {"hidden_size", "n_embd", "d_model"}, &hidden_key));
    POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> heads,
                            GetFirst<int64_t>(*m, {"num_attention_heads", "n_head"}, &heads_key));
    if (hidden.has_value() && heads.has_value()) {
      if (*heads <= 0 || *hidden <= 0) {
        return Invalid(
            absl::StrCat("hidden_size / num_attention_heads: expected positive values, "
                         "got ",
                         *hidden, " / ", *heads));
      }
      m->head_dim = *hidden / *heads;
      head_key = absl::StrCat(hidden_key, " / ", heads_key);
    }
  }
  if (!head_key.empty()) ReadFrom(&m->sources, f, "head_dim", head_key, absl::StrCat(*m->head_dim));
  if (m->head_dim && *m->head_dim <= 0) {
    return Invalid(absl::StrCat("head dim must be > 0, got ", *m->head_dim));
  }

  std::string max_key;
  POSENC_ASSIGN_OR_RETURN(
      m->max_position,
      GetFirst<int64_t>(*m, {"max_position_embeddings", "n_positions", "seq_length"}, &max_key));
  if (m->max_position) {
    ReadFrom(&m->sources, f, "max_position_embeddings", max_key, absl::StrCat(*m->max_position));
  } else if (f.max_position) {
    m->max_position = f.max_position;
    Defaulted(&m->sources, f, "max_position_embeddings", "max_position_embeddings",
              absl::StrCat(*f.max_position));
  }

  POSENC_ASSIGN_OR_RETURN(m->theta,
                          GetFirst<double>(*m, {"rope_theta", "rotary_emb_base"}, &m->theta_key));
  if (!f.global_theta_key.empty() && !m->theta) {
    POSENC_ASSIGN_OR_RETURN(m->theta, GetFirst<double>(*m, {f.global_theta_key}, &m->theta_key));
  }
  if (f.chatglm) {
    POSENC_ASSIGN_OR_RETURN(std::optional<double> ratio, GetText<double>(*m, "rope_ratio"));
    m->theta = 10000.0 * ratio.value_or(1.0);
    m->theta_key = "10000 * rope_ratio";
  }

  POSENC_ASSIGN_OR_RETURN(
      m->fraction, GetFirst<double>(*m, {"partial_rotary_factor", "rotary_pct"}, &m->fraction_key));
  POSENC_ASSIGN_OR_RETURN(m->rotary_dim, GetText<int64_t>(*m, "rotary_dim"));
  if (!m->fraction && !m->rotary_dim) {
    if (f.partial) {
      m->fraction = f.partial;
      m->fraction_key = "the class default partial_rotary_factor";
      m->fraction_default = true;
    } else if (f.rotary_dim && !Find(*m->text, "rotary_dim")) {
      m->rotary_dim = f.rotary_dim;
      m->rotary_dim_default = true;
    }
  }
  POSENC_ASSIGN_OR_RETURN(m->original_max,
                          GetText<int64_t>(*m, "original_max_position_embeddings"));

  switch (f.pairing) {
    case Pairing::kNeox: m->style = kernels::RopeStyle::kNeox; break;
    case Pairing::kGptj: m->style = kernels::RopeStyle::kGptj; break;
    case Pairing::kInterleaveFlag: break;
  }
  POSENC_ASSIGN_OR_RETURN(std::optional<bool> interleave, GetText<bool>(*m, "rope_interleave"));
  if (f.pairing == Pairing::kInterleaveFlag || interleave.has_value()) {
    const bool on = interleave.value_or(f.interleave_default);
    if (on) {
      m->style = kernels::RopeStyle::kDeepseek;
    } else if (f.pairing == Pairing::kInterleaveFlag) {
      m->style = kernels::RopeStyle::kNeox;
    }
  }
  if (interleave.has_value()) {
    ReadFrom(&m->sources, f, "pairing", KeyPath(*m, "rope_interleave"), StyleText(m->style));
  } else {
    Defaulted(&m->sources, f, "pairing",
              f.pairing == Pairing::kInterleaveFlag
                  ? absl::StrCat("rope_interleave (class default ",
                                 f.interleave_default ? "true" : "false", ")")
                  : std::string("the architecture's rotation"),
              StyleText(m->style));
  }
  (void)warnings;
  return absl::OkStatus();
}

// One layer type's RoPE source: its dict (null: none, plain RoPE) and per-type overrides.
struct LayerSpec {
  std::string layer_type;
  const Json* dict = nullptr;
  std::string path;                 // the dict's name in messages
  std::optional<double> theta;      // a legacy per-type base (Gemma 3 local, ModernBERT)
  std::optional<int64_t> head_dim;  // Gemma 4's global_head_dim on full_attention layers
  bool nope = false;
  bool keyed = false;  // the dict is an entry of a rope_parameters keyed by layer type
};

// Llama 4's attention temperature tuning of a layer without RoPE: attn_temperature_tuning
// (truthy: true or a nonzero number; default true), floor_scale, attn_scale.
absl::Status ReadTemperatureTuning(const TextModel& m, std::optional<HfTemperatureTuning>* out,
                                   std::vector<HfValueSource>* sources) {
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
  HfTemperatureTuning t;
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

// The config of one layer type; `sources` gets where each of its values came from, `tuning`
// Llama 4's attention temperature tuning where it applies.
absl::StatusOr<kernels::RopeConfig> BuildConfig(const TextModel& m, const LayerSpec& spec,
                                                std::vector<std::string>* warnings,
                                                std::vector<HfValueSource>* sources,
                                                std::optional<HfTemperatureTuning>* tuning) {
  static const Json* const kEmpty = new Json(Json::object());
  const Json& dict = spec.dict != nullptr ? *spec.dict : *kEmpty;
  const Family& f = *m.family;
  kernels::RopeConfig config;
  POSENC_RETURN_IF_ERROR(ParseScaling(dict, spec.path, f, &config.scaling, warnings, sources));
  kernels::RopeScaling& sc = config.scaling;

  // Base: the dict's rope_theta, a per-type key, the top level, the class default.
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
  config.base = theta.value_or(f.theta);

  const std::optional<int64_t> head_dim = spec.head_dim ? spec.head_dim : m.head_dim;
  config.head_dim = head_dim.value_or(0);
  if (spec.head_dim) {
    ReadFrom(sources, f, "head_dim", KeyPath(m, "global_head_dim"), absl::StrCat(*spec.head_dim));
  }

  // Rotary dim: a fraction of the head (the dict's, else the top level's or the class default),
  // int(head_dim * fraction) as Python; an absolute rotary_dim; ChatGLM's half head.
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
    if (!head_dim) {
      return Invalid(absl::StrCat(fraction_key,
                                  " needs a head dim (head_dim, qk_rope_head_dim or "
                                  "hidden_size / num_attention_heads), none given"));
    }
    const auto rotary = static_cast<int64_t>(static_cast<double>(*head_dim) * *fraction);
    if (rotary != *head_dim) config.rotary_dim = rotary;
  } else if (m.family->chatglm && head_dim) {
    config.rotary_dim = *head_dim / 2;
  } else if (m.rotary_dim) {
    config.rotary_dim = m.rotary_dim;
  }

  config.max_position_embeddings = m.max_position;

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
  if (sc.type == RopeScalingType::kLongrope && !sc.factor && config.max_position_embeddings &&
      sc.original_max_position_embeddings) {
    warnings->push_back(
        absl::StrCat(spec.path,
                     ": no factor; transformers derives it as max_position_embeddings / "
                     "original_max_position_embeddings = ",
                     static_cast<double>(*config.max_position_embeddings) /
                         static_cast<double>(*sc.original_max_position_embeddings)));
  }
  if (sc.type == RopeScalingType::kDynamic && sc.alpha && config.max_position_embeddings) {
    // modeling_hunyuan_v1_dense.py sets the alpha base at init, but its forward keeps
    // @dynamic_rope_update: past max_position_embeddings it recomputes inv_freq with the plain
    // dynamic-NTK formula from rope_theta (ROPE_INIT_FUNCTIONS["dynamic"]), alpha dropped.
    warnings->push_back(absl::StrCat(
        "dynamic NTK with alpha: posenc (as vLLM) keeps b * alpha^(d/(d-2)) at every position; "
        "transformers switches to plain dynamic NTK from rope_theta, without alpha, once a "
        "sequence grows past max_position_embeddings (",
        *config.max_position_embeddings, ")"));
  }

  POSENC_ASSIGN_OR_RETURN(config.mrope_section,
                          GetIntArray(dict, "mrope_section", spec.path + ".mrope_section"));
  if (!config.mrope_section.empty()) {
    ReadFrom(sources, f, "mrope_section", spec.path + ".mrope_section",
             absl::StrCat("[", absl::StrJoin(config.mrope_section, ", "), "]"));
  }
  config.style = m.style;
  config.nope = spec.nope;
  if (spec.nope && f.temperature_tuning) {
    POSENC_RETURN_IF_ERROR(ReadTemperatureTuning(m, tuning, sources));
  }
  return config;
}

// The model's layer types, one per layer (empty when neither the file nor the architecture
// names them), and which layers have no RoPE; `sources` gets the keys (or rules) that said so.
absl::Status LayerTypes(const TextModel& m, std::vector<std::string>* types,
                        std::vector<bool>* nope, std::vector<HfValueSource>* sources) {
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
  if (types->empty() && n > 0) {
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
            GetFirst<int64_t>(m, {"sliding_window_pattern", "_sliding_window_pattern"},
                              &period_key));
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
  }
  nope->assign(static_cast<size_t>(n), false);
  if (f.nope_full_attention) {
    for (size_t i = 0; i < types->size(); ++i) (*nope)[i] = (*types)[i] == "full_attention";
    Defaulted(sources, f, "nope", "full_attention layers have no RoPE", "full_attention");
  }
  if (f.layers == LayerRule::kNoRopeLayers && n > 0) {
    // no_rope_layers[i] is 1 where the layer HAS RoPE (transformers' naming); empty or absent:
    // every no_rope_layer_interval-th layer has none.
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
      Defaulted(sources, f, "nope", "no_rope_layer_interval",
                absl::StrCat("every ", p, "th layer"));
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
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json_text,
                                               absl::string_view layer_type, bool all_layers) {
  // Bounded before parsing: a JSON tree takes some 30 times its text in memory, and every level
  // of nesting a stack frame.
  if (json_text.size() > kMaxHfConfigBytes) {
    return Invalid(absl::StrCat("is ", json_text.size(), " bytes, over the ", kMaxHfConfigBytes,
                                " a config.json may have (published ones are under 100 KB)"));
  }
  POSENC_RETURN_IF_ERROR(CheckNesting(json_text));
  // No exceptions escape: a parse error names where it is.
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return Invalid(
        absl::StrCat("malformed JSON at byte ", e.byte, ": ", kernels::Abbreviate(e.what(), 200)));
  } catch (const Json::exception& e) {  // e.g. a number beyond double's range
    return Invalid(absl::StrCat("malformed JSON: ", kernels::Abbreviate(e.what(), 200)));
  }
  if (!root.is_object()) {
    return Invalid(absl::StrCat("expected a JSON object, got ", TypeName(root)));
  }

  HfRopeConfig out;
  TextModel m;
  m.root = &root;
  m.text = &root;
  if (const Json* tc = Find(root, "text_config"); tc != nullptr) {
    if (!tc->is_object()) {
      return Invalid(absl::StrCat("text_config must be an object, got ", TypeName(*tc)));
    }
    m.text = tc;
    m.path_prefix = "text_config.";
  }
  // The architecture: the text model's model_type, else the top level's.
  std::string first_model_type;
  for (const Json* object : {m.text, static_cast<const Json*>(&root)}) {
    const Json* mt = Find(*object, "model_type");
    if (mt == nullptr || !mt->is_string()) continue;
    const std::string name = mt->get<std::string>();
    if (first_model_type.empty()) first_model_type = name;
    if (m.family == nullptr) {
      m.family = FindFamily(name);
      if (m.family != nullptr) out.model_type = name;
    }
  }
  if (m.family == nullptr) {
    m.family = &GenericFamily();
    out.model_type = first_model_type;
    if (!first_model_type.empty()) {
      out.warnings.push_back(absl::StrCat(
          "model_type '", kernels::Abbreviate(first_model_type),
          "' has no architecture defaults in posenc: rope_theta 10000, NEOX pairs and the keys "
          "as given"));
    }
  }
  POSENC_RETURN_IF_ERROR(ReadTextModel(&m, &out.warnings));

  // The RoPE dict: v5 rope_parameters before v4 rope_scaling (or the class default).
  const Json* rope = nullptr;
  std::string rope_path;
  for (absl::string_view key : {"rope_parameters", "rope_scaling"}) {
    rope = Find(*m.text, key);
    if (rope != nullptr) {
      rope_path = KeyPath(m, key);
      break;
    }
  }
  Json class_default;
  if (rope == nullptr && !m.family->default_rope.empty()) {
    class_default = Json::parse(m.family->default_rope);
    rope = &class_default;
    rope_path = absl::StrCat("rope_scaling (", out.model_type, " class default)");
  }
  if (rope != nullptr && !rope->is_object()) {
    return Invalid(absl::StrCat(rope_path, " must be an object, got ", TypeName(*rope)));
  }
  // Keyed by layer type: no type key of its own and every value an object.
  bool keyed =
      rope != nullptr && !rope->empty() && !rope->contains("rope_type") && !rope->contains("type");
  for (auto it = keyed ? rope->begin() : Json::const_iterator(); keyed && it != rope->end(); ++it) {
    keyed = it.value().is_object();
  }

  // One spec per layer type name ("" : every layer).
  std::vector<LayerSpec> specs;
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> global_head_dim,
                          GetText<int64_t>(m, "global_head_dim"));
  if (keyed) {
    for (auto it = rope->begin(); it != rope->end(); ++it) {
      specs.push_back({.layer_type = it.key(),
                       .dict = &it.value(),
                       .path = absl::StrCat(rope_path, ".", it.key()),
                       .keyed = true});
    }
  } else if (!m.family->local_theta_key.empty()) {
    // Gemma 3 / ModernBERT before v5: the scaling and the global base on full-attention layers,
    // plain RoPE with the local base on sliding ones (transformers' conversion to v5).
    POSENC_ASSIGN_OR_RETURN(std::optional<double> local,
                            GetText<double>(m, m.family->local_theta_key));
    specs.push_back({.layer_type = "full_attention", .dict = rope, .path = rope_path});
    specs.push_back({.layer_type = "sliding_attention",
                     .path = KeyPath(m, m.family->local_theta_key),
                     .theta = local ? local : m.family->local_theta});
  } else {
    specs.push_back({.dict = rope, .path = rope_path.empty() ? "rope_scaling" : rope_path});
  }
  for (LayerSpec& spec : specs) {
    if (spec.layer_type == "full_attention" && global_head_dim && *global_head_dim > 0) {
      spec.head_dim = global_head_dim;  // Gemma 4
    }
  }

  std::vector<std::string> types;
  std::vector<bool> nope;
  POSENC_RETURN_IF_ERROR(LayerTypes(m, &types, &nope, &m.sources));

  // Group the layers by (type, NoPE) and build each group's config once.
  struct Group {
    HfLayerRope rope;
    bool nope = false;
    std::vector<std::string> warnings;
    std::string key;  // RopeFrequencyCache::Key of the config: equal keys, equal RoPE
    const LayerSpec* spec = nullptr;
  };
  std::vector<Group> groups;
  auto spec_for = [&](const std::string& type) -> const LayerSpec* {
    if (specs.size() == 1 && specs[0].layer_type.empty()) return &specs[0];
    for (const LayerSpec& spec : specs) {
      if (spec.layer_type == type) return &spec;
    }
    return nullptr;
  };
  auto group_for = [&](const std::string& type, bool is_nope) -> absl::StatusOr<Group*> {
    for (Group& g : groups) {
      if (g.rope.layer_type == type && g.nope == is_nope) return &g;
    }
    const LayerSpec* spec = spec_for(type);
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const LayerSpec& s : specs) names.push_back(s.layer_type);
      return Invalid(absl::StrCat("layer type '", kernels::Abbreviate(type), "' has no entry in ",
                                  rope_path, " (",
                                  kernels::Abbreviate(absl::StrJoin(names, ", "), 256), ")"));
    }
    LayerSpec with_nope = *spec;
    with_nope.nope = is_nope;
    Group g;
    g.rope.layer_type = type;
    g.nope = is_nope;
    g.spec = spec;
    g.rope.sources = m.sources;
    POSENC_ASSIGN_OR_RETURN(g.rope.config, BuildConfig(m, with_nope, &g.warnings, &g.rope.sources,
                                                       &g.rope.temperature_tuning));
    g.key = kernels::RopeFrequencyCache::Key(g.rope.config, 0);
    groups.push_back(std::move(g));
    return &groups.back();
  };
  const int64_t num_layers = static_cast<int64_t>(nope.size());
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string type = types.empty() ? "" : types[static_cast<size_t>(i)];
    if (specs.size() == 1 && specs[0].layer_type.empty() && types.empty() &&
        !nope[static_cast<size_t>(i)] && !groups.empty()) {
      groups.front().rope.layers.push_back(i);
      continue;
    }
    POSENC_ASSIGN_OR_RETURN(Group * g, group_for(type, nope[static_cast<size_t>(i)]));
    g->rope.layers.push_back(i);
  }
  if (groups.empty()) {  // the file does not say how many layers: one group per spec
    for (const LayerSpec& spec : specs) {
      POSENC_RETURN_IF_ERROR(group_for(spec.layer_type, false).status());
    }
  }

  // The selected layer.
  auto layers_text = [](const std::vector<int64_t>& layers) {
    return layers.empty() ? std::string("layers not listed")
                          : absl::StrCat("layers ", kernels::IndexRuns(layers));
  };
  auto describe_groups = [&]() {
    std::vector<std::string> parts;
    for (const Group& g : groups) {
      parts.push_back(absl::StrCat(g.rope.layer_type.empty() ? "(unnamed)" : g.rope.layer_type,
                                   g.nope ? " NoPE" : "", ": ", layers_text(g.rope.layers)));
    }
    return kernels::Abbreviate(absl::StrJoin(parts, "; "), 400);
  };
  bool all_alike = true;  // every layer has the same RoPE
  for (const Group& g : groups) all_alike = all_alike && g.key == groups.front().key;
  const Group* selected = nullptr;
  if (layer_type.empty()) {
    if (!all_alike && !all_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.layer_type: required: the layers of this model differ (",
                       describe_groups(), "); give a layer type or a layer index"));
    }
    selected = &groups.front();
  } else if (std::all_of(layer_type.begin(), layer_type.end(),
                         [](char c) { return c >= '0' && c <= '9'; }) &&
             layer_type.size() <= 9) {
    int64_t index = 0;
    for (char c : layer_type) index = index * 10 + (c - '0');
    for (const Group& g : groups) {
      if (std::find(g.rope.layers.begin(), g.rope.layers.end(), index) != g.rope.layers.end()) {
        selected = &g;
      }
    }
    if (selected == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.layer_type: layer index ", index, " is not a layer of this model (",
                       num_layers == 0 ? std::string("the file does not give num_hidden_layers")
                                       : absl::StrCat(num_layers, " layers"),
                       ")"));
    }
  } else {
    for (const Group& g : groups) {
      if (g.rope.layer_type != layer_type) continue;
      if (selected != nullptr && selected->key != g.key) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.layer_type: \"", kernels::Abbreviate(layer_type),
            "\" names layers whose RoPE differs (", describe_groups(), "); give a layer index"));
      }
      if (selected == nullptr) selected = &g;
    }
    if (selected == nullptr) {
      std::vector<std::string> names;
      for (const Group& g : groups) {
        if (!g.rope.layer_type.empty() &&
            std::find(names.begin(), names.end(), g.rope.layer_type) == names.end()) {
          names.push_back(g.rope.layer_type);
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat("config.layer_type: \"", kernels::Abbreviate(layer_type),
                       "\" is not a layer type of "
                       "this model (",
                       names.empty() ? std::string("its layers are all alike")
                                     : kernels::Abbreviate(absl::StrJoin(names, ", "), 256),
                       "; a layer index also works)"));
    }
  }

  out.config = selected->rope.config;
  if (const LayerSpec* spec = selected->spec; spec->dict != nullptr) {
    POSENC_ASSIGN_OR_RETURN(
        std::optional<bool> mrope_interleaved,
        Get<bool>(*spec->dict, "mrope_interleaved", spec->path + ".mrope_interleaved"));
    if (mrope_interleaved.has_value()) {
      out.mrope_layout = *mrope_interleaved ? kernels::MropeLayout::kInterleaved
                                            : kernels::MropeLayout::kContiguous;
    }
  }
  out.style = out.config.style;
  // The layer type is reported only where layers differ or the caller named one.
  if (!all_alike || !layer_type.empty()) out.layer_type = selected->rope.layer_type;
  for (const std::string& w : selected->warnings) {
    if (std::find(out.warnings.begin(), out.warnings.end(), w) == out.warnings.end()) {
      out.warnings.push_back(w);
    }
  }
  for (Group& g : groups) {
    g.rope.warnings = std::move(g.warnings);
    out.layer_ropes.push_back(std::move(g.rope));
  }

  return out;
}

}  // namespace posenc::server
