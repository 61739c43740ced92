// The rope types of transformers and the keys each reads (scaling.h).
#include "kernels/hf/scaling.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "kernels/hf/sources.h"

namespace posenc::hf {
namespace {

using kernels::RopeScalingType;

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

// Whether `info`'s type reads `key` (beyond the common keys).
bool Reads(const TypeInfo& info, absl::string_view key) {
  return std::find(info.keys.begin(), info.keys.end(), key) != info.keys.end();
}

// Whether the type reads original_max_position_embeddings.
bool ReadsOriginalMax(RopeScalingType type) {
  return type == RopeScalingType::kYarn || type == RopeScalingType::kLlama3 ||
         type == RopeScalingType::kLongrope;
}

// The rope type of `dict` (rope_type, or the legacy `type`; "default" when neither); `sources`
// gets where it came from. `type_name` gets the name as given.
absl::StatusOr<const TypeInfo*> ReadType(const Json& dict, const std::string& path,
                                         const Family& family, std::string* type_name,
                                         std::vector<ValueSource>* sources) {
  const Json* type_value = Find(dict, "rope_type");
  std::string type_key = "rope_type";
  if (type_value == nullptr) {
    type_value = Find(dict, "type");
    type_key = "type";
  }
  *type_name = "default";
  if (type_value != nullptr) {
    if (!type_value->is_string()) {
      return Invalid(
          absl::StrCat(path, ".", type_key, " must be a string, got ", TypeName(*type_value)));
    }
    *type_name = type_value->get<std::string>();
  }
  POSENC_ASSIGN_OR_RETURN(const TypeInfo* info,
                          LookUpType(*type_name, absl::StrCat(path, ".", type_key)));
  if (type_value != nullptr) {
    ReadFrom(sources, family, "rope_type", absl::StrCat(path, ".", type_key), *type_name);
  } else {
    Defaulted(sources, family, "rope_type",
              dict.empty() ? "no rope_scaling / rope_parameters" : absl::StrCat(path, " (no type)"),
              "default");
  }
  return info;
}

// `sources` gets every key the type reads that `dict` gives; `warnings` every key it does not.
void NoteKeys(const Json& dict, const std::string& path, const Family& family, const TypeInfo& info,
              const std::string& type_name, std::vector<std::string>* warnings,
              std::vector<ValueSource>* sources) {
  for (absl::string_view key : info.keys) {
    if (const Json* v = Find(dict, key); v != nullptr) {
      ReadFrom(sources, family, absl::StrCat("scaling.", key), absl::StrCat(path, ".", key),
               JsonText(*v));
    }
  }
  if (ReadsOriginalMax(info.type)) {
    if (const Json* v = Find(dict, "original_max_position_embeddings"); v != nullptr) {
      ReadFrom(sources, family, "scaling.original_max_position_embeddings",
               absl::StrCat(path, ".original_max_position_embeddings"), JsonText(*v));
    }
  }
  const bool beta_family = family.q_scale == QScale::kLlama4ScalingBeta;
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    const std::string& key = it.key();
    if (IsCommonKey(key) || Reads(info, key)) continue;
    // Ministral 3 / Mistral 4 keep both out of validation (ignore_keys_at_rope_validation); the
    // model reads llama_4_scaling_beta (layers.cc), max_position_embeddings is a copy.
    if (beta_family && (key == "llama_4_scaling_beta" || key == "max_position_embeddings")) {
      continue;
    }
    if (key == "llama_4_scaling_beta") {
      warnings->push_back(absl::StrCat(path,
                                       ".llama_4_scaling_beta: read by ministral3 / "
                                       "mistral4 only; transformers ignores it here"));
      continue;
    }
    warnings->push_back(absl::StrCat(path, ".", kernels::Abbreviate(key),
                                     ": not read for rope_type '", type_name,
                                     "' (ignored, as transformers does)"));
  }
}

// The values of the keys the type reads into `scaling`.
absl::Status ReadValues(const Json& dict, const std::string& path, const TypeInfo& info,
                        kernels::RopeScaling* scaling) {
  auto key_path = [&path](absl::string_view key) { return absl::StrCat(path, ".", key); };
  auto get_double = [&](absl::string_view key, std::optional<double>* out) -> absl::Status {
    if (!Reads(info, key)) return absl::OkStatus();
    POSENC_ASSIGN_OR_RETURN(*out, Get<double>(dict, key, key_path(key)));
    return absl::OkStatus();
  };
  POSENC_RETURN_IF_ERROR(get_double("factor", &scaling->factor));
  if (ReadsOriginalMax(info.type)) {
    POSENC_ASSIGN_OR_RETURN(scaling->original_max_position_embeddings,
                            Get<int64_t>(dict, "original_max_position_embeddings",
                                         key_path("original_max_position_embeddings")));
  }
  POSENC_RETURN_IF_ERROR(get_double("beta_fast", &scaling->beta_fast));
  POSENC_RETURN_IF_ERROR(get_double("beta_slow", &scaling->beta_slow));
  if (Reads(info, "truncate")) {
    POSENC_ASSIGN_OR_RETURN(scaling->truncate, Get<bool>(dict, "truncate", key_path("truncate")));
  }
  POSENC_RETURN_IF_ERROR(get_double("mscale", &scaling->mscale));
  POSENC_RETURN_IF_ERROR(get_double("mscale_all_dim", &scaling->mscale_all_dim));
  POSENC_RETURN_IF_ERROR(get_double("attention_factor", &scaling->attention_factor));
  POSENC_RETURN_IF_ERROR(get_double("low_freq_factor", &scaling->low_freq_factor));
  POSENC_RETURN_IF_ERROR(get_double("high_freq_factor", &scaling->high_freq_factor));
  POSENC_RETURN_IF_ERROR(get_double("alpha", &scaling->alpha));
  if (Reads(info, "long_factor")) {
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

}  // namespace

absl::Status ParseScaling(const Json& dict, const std::string& path, const Family& family,
                          kernels::RopeScaling* scaling, std::vector<std::string>* warnings,
                          std::vector<ValueSource>* sources) {
  std::string type_name;
  POSENC_ASSIGN_OR_RETURN(const TypeInfo* info, ReadType(dict, path, family, &type_name, sources));
  scaling->type = info->type;
  NoteKeys(dict, path, family, *info, type_name, warnings, sources);
  return ReadValues(dict, path, *info, scaling);
}

}  // namespace posenc::hf
