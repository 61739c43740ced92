#include "server/hf_config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

struct TypeInfo {
  absl::string_view name;
  RopeScalingType type;
  std::vector<absl::string_view> keys;  // valid keys beyond the common ones
};

// Hugging Face's rope_config_validation lists (plus static NTK, which is posenc's own).
const std::vector<TypeInfo>& Types() {
  static const auto* types = new std::vector<TypeInfo>{
      {"default", RopeScalingType::kDefault, {}},
      {"linear", RopeScalingType::kLinear, {"factor"}},
      {"ntk", RopeScalingType::kNtk, {"factor"}},
      // Hugging Face accepts original_max_position_embeddings for dynamic but computes with
      // max_position_embeddings; so does posenc.
      {"dynamic", RopeScalingType::kDynamic, {"factor", "original_max_position_embeddings"}},
      {"yarn",
       RopeScalingType::kYarn,
       {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
        "mscale", "mscale_all_dim", "truncate"}},
      {"llama3",
       RopeScalingType::kLlama3,
       {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}},
      {"longrope",
       RopeScalingType::kLongrope,
       {"factor", "original_max_position_embeddings", "attention_factor", "long_factor",
        "short_factor"}},
  };
  return *types;
}

// Keys valid inside rope_scaling for every type.
constexpr absl::string_view kCommonKeys[] = {"rope_type",     "type",
                                             "rope_theta",    "partial_rotary_factor",
                                             "mrope_section", "mrope_interleaved"};

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

// Picks the scaling dict: rope_parameters (newer transformers) before rope_scaling; resolves a
// dict keyed by layer type. Sets *path to the key's name as shown in messages.
absl::StatusOr<const Json*> FindScaling(const Json& root, absl::string_view layer_type,
                                        std::string* path) {
  const Json* scaling = nullptr;
  for (absl::string_view key : {"rope_parameters", "rope_scaling"}) {
    scaling = Find(root, key);
    if (scaling != nullptr) {
      *path = std::string(key);
      break;
    }
  }
  if (scaling == nullptr) {
    if (!layer_type.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.layer_type: \"", kernels::Abbreviate(layer_type),
                       "\" given, but hf_config_json has no rope_parameters keyed by layer type"));
    }
    return nullptr;
  }
  if (!scaling->is_object()) {
    return Invalid(absl::StrCat(*path, " must be an object, got ", TypeName(*scaling)));
  }
  // Keyed by layer type: no type key of its own and every value an object.
  bool keyed = !scaling->empty() && !scaling->contains("rope_type") && !scaling->contains("type");
  std::vector<std::string> layer_types;
  for (auto it = scaling->begin(); keyed && it != scaling->end(); ++it) {
    keyed = it.value().is_object();
    layer_types.push_back(it.key());
  }
  if (!keyed) {
    if (!layer_type.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.layer_type: \"", kernels::Abbreviate(layer_type),
                       "\" given, but hf_config_json's ", *path, " is not keyed by layer type"));
    }
    return scaling;
  }
  const std::string loaded = kernels::Abbreviate(absl::StrJoin(layer_types, ", "), 256);
  if (layer_type.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config.layer_type: required: hf_config_json's ",
                                                   *path, " is keyed by layer type (", loaded,
                                                   ")"));
  }
  const Json* entry = Find(*scaling, layer_type);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.layer_type: \"", kernels::Abbreviate(layer_type),
                     "\" is not a key of hf_config_json's ", *path, " (", loaded, ")"));
  }
  absl::StrAppend(path, ".", layer_type);
  return entry;
}

// Fills `scaling` from the rope_scaling dict `dict` (named `path` in messages).
absl::Status ParseScaling(const Json& dict, const std::string& path,
                          kernels::RopeScaling* scaling) {
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

  for (auto it = dict.begin(); it != dict.end(); ++it) {
    const std::string& key = it.key();
    if (IsCommonKey(key)) continue;
    bool valid = false;
    for (absl::string_view k : info->keys) valid = valid || k == key;
    if (!valid) {
      return Invalid(absl::StrCat(path, ".", key, " is not valid for rope_type '", type_name, "'",
                                  info->keys.empty() ? "" : " (valid: ",
                                  absl::StrJoin(info->keys, ", "), info->keys.empty() ? "" : ")"));
    }
  }
  auto key_path = [&path](absl::string_view key) { return absl::StrCat(path, ".", key); };
  POSENC_ASSIGN_OR_RETURN(scaling->factor, Get<double>(dict, "factor", key_path("factor")));
  if (info->type != RopeScalingType::kDynamic) {
    POSENC_ASSIGN_OR_RETURN(scaling->original_max_position_embeddings,
                            Get<int64_t>(dict, "original_max_position_embeddings",
                                         key_path("original_max_position_embeddings")));
  }
  POSENC_ASSIGN_OR_RETURN(scaling->beta_fast,
                          Get<double>(dict, "beta_fast", key_path("beta_fast")));
  POSENC_ASSIGN_OR_RETURN(scaling->beta_slow,
                          Get<double>(dict, "beta_slow", key_path("beta_slow")));
  POSENC_ASSIGN_OR_RETURN(scaling->truncate, Get<bool>(dict, "truncate", key_path("truncate")));
  POSENC_ASSIGN_OR_RETURN(scaling->mscale, Get<double>(dict, "mscale", key_path("mscale")));
  POSENC_ASSIGN_OR_RETURN(scaling->mscale_all_dim,
                          Get<double>(dict, "mscale_all_dim", key_path("mscale_all_dim")));
  POSENC_ASSIGN_OR_RETURN(scaling->attention_factor,
                          Get<double>(dict, "attention_factor", key_path("attention_factor")));
  POSENC_ASSIGN_OR_RETURN(scaling->low_freq_factor,
                          Get<double>(dict, "low_freq_factor", key_path("low_freq_factor")));
  POSENC_ASSIGN_OR_RETURN(scaling->high_freq_factor,
                          Get<double>(dict, "high_freq_factor", key_path("high_freq_factor")));
  POSENC_ASSIGN_OR_RETURN(scaling->long_factor,
                          GetDoubleArray(dict, "long_factor", key_path("long_factor")));
  POSENC_ASSIGN_OR_RETURN(scaling->short_factor,
                          GetDoubleArray(dict, "short_factor", key_path("short_factor")));
  return absl::OkStatus();
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

}  // namespace

absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json_text,
                                               absl::string_view layer_type) {
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
  kernels::RopeConfig& config = out.config;

  std::string scaling_path;
  POSENC_ASSIGN_OR_RETURN(const Json* scaling, FindScaling(root, layer_type, &scaling_path));
  if (scaling != nullptr) {
    POSENC_RETURN_IF_ERROR(ParseScaling(*scaling, scaling_path, &config.scaling));
  }
  // An empty object stands in for "no scaling dict" below.
  static const Json* const kEmpty = new Json(Json::object());
  const Json& nested = scaling != nullptr ? *scaling : *kEmpty;

  // base: the scaling dict's rope_theta (newer transformers keep it there), else the top level.
  std::optional<double> base;
  POSENC_ASSIGN_OR_RETURN(base, Get<double>(nested, "rope_theta", scaling_path + ".rope_theta"));
  for (absl::string_view key : {"rope_theta", "rotary_emb_base"}) {
    if (base.has_value()) break;
    POSENC_ASSIGN_OR_RETURN(base, Get<double>(root, key, key));
  }
  if (base.has_value()) config.base = *base;

  // head dim.
  std::optional<int64_t> head_dim;
  for (absl::string_view key : {"qk_rope_head_dim", "head_dim"}) {
    if (head_dim.has_value()) break;
    POSENC_ASSIGN_OR_RETURN(head_dim, Get<int64_t>(root, key, key));
  }
  if (!head_dim.has_value()) {
    POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> hidden,
                            Get<int64_t>(root, "hidden_size", "hidden_size"));
    POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> heads,
                            Get<int64_t>(root, "num_attention_heads", "num_attention_heads"));
    if (hidden.has_value() && heads.has_value()) {
      if (*heads <= 0 || *hidden <= 0) {
        return Invalid(
            absl::StrCat("hidden_size / num_attention_heads: expected positive "
                         "values, got ",
                         *hidden, " / ", *heads));
      }
      head_dim = *hidden / *heads;  // floor division, as Hugging Face
    }
  }
  if (head_dim.has_value()) {
    if (*head_dim <= 0) return Invalid(absl::StrCat("head dim must be > 0, got ", *head_dim));
    config.head_dim = *head_dim;
  }

  // rotary dim: a fraction of the head (nested first), or absolute.
  std::optional<double> fraction;
  std::string fraction_key;
  POSENC_ASSIGN_OR_RETURN(fraction, Get<double>(nested, "partial_rotary_factor",
                                                scaling_path + ".partial_rotary_factor"));
  if (fraction.has_value()) fraction_key = scaling_path + ".partial_rotary_factor";
  for (absl::string_view key : {"partial_rotary_factor", "rotary_pct"}) {
    if (fraction.has_value()) break;
    POSENC_ASSIGN_OR_RETURN(fraction, Get<double>(root, key, key));
    if (fraction.has_value()) fraction_key = std::string(key);
  }
  if (fraction.has_value()) {
    if (!(*fraction > 0.0 && *fraction <= 1.0)) {
      return Invalid(absl::StrCat(fraction_key, " must be in (0, 1], got ", *fraction));
    }
    if (config.head_dim == 0) {
      return Invalid(absl::StrCat(fraction_key,
                                  " needs a head dim (qk_rope_head_dim, head_dim or "
                                  "hidden_size / num_attention_heads), none given"));
    }
    // int(head_dim * fraction), as Hugging Face.
    config.rotary_dim = static_cast<int64_t>(static_cast<double>(config.head_dim) * *fraction);
  } else {
    POSENC_ASSIGN_OR_RETURN(config.rotary_dim, Get<int64_t>(root, "rotary_dim", "rotary_dim"));
  }

  POSENC_ASSIGN_OR_RETURN(config.max_position_embeddings,
                          Get<int64_t>(root, "max_position_embeddings", "max_position_embeddings"));

  // A top-level original_max_position_embeddings overrides the nested one (as Hugging Face),
  // for the types that read it.
  const RopeScalingType type = config.scaling.type;
  if (type == RopeScalingType::kYarn || type == RopeScalingType::kLlama3 ||
      type == RopeScalingType::kLongrope) {
    POSENC_ASSIGN_OR_RETURN(
        std::optional<int64_t> top,
        Get<int64_t>(root, "original_max_position_embeddings", "original_max_position_embeddings"));
    if (top.has_value()) config.scaling.original_max_position_embeddings = top;
  }

  POSENC_ASSIGN_OR_RETURN(std::optional<bool> interleave,
                          Get<bool>(root, "rope_interleave", "rope_interleave"));
  if (interleave.value_or(false)) out.style = kernels::RopeStyle::kGptj;

  POSENC_ASSIGN_OR_RETURN(config.mrope_section,
                          GetIntArray(nested, "mrope_section", scaling_path + ".mrope_section"));
  POSENC_ASSIGN_OR_RETURN(
      std::optional<bool> mrope_interleaved,
      Get<bool>(nested, "mrope_interleaved", scaling_path + ".mrope_interleaved"));
  if (mrope_interleaved.has_value()) {
    out.mrope_layout =
        *mrope_interleaved ? kernels::MropeLayout::kInterleaved : kernels::MropeLayout::kContiguous;
  }
  return out;
}

}  // namespace posenc::server
