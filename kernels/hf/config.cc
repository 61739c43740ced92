// The config.json normalizer's entry point (config.h): the text model and its architecture, the
// RoPE dict and one spec per layer type, the layers grouped by RoPE, one group selected.
#include "kernels/hf/config.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "kernels/hf/architectures.h"
#include "kernels/hf/json.h"
#include "kernels/hf/layers.h"
#include "kernels/hf/submodules.h"
#include "kernels/hf/text_model.h"
#include "kernels/hf/vision.h"
#include "kernels/rope/frequency_cache.h"

namespace posenc::hf {
namespace {

// The text config (text_config when the file has one, else the root) and its architecture: the
// text model's model_type, else the top level's. `out` gets the model type, and a warning when
// posenc has no defaults for it.
absl::StatusOr<TextModel> FindTextModel(const Json& root, ModelRope* out) {
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
  std::string first_model_type;
  for (const Json* object : {m.text, &root}) {
    const Json* mt = Find(*object, "model_type");
    if (mt == nullptr || !mt->is_string()) continue;
    const std::string name = mt->get<std::string>();
    if (first_model_type.empty()) first_model_type = name;
    if (m.family == nullptr) {
      m.family = FindFamily(name);
      if (m.family != nullptr) out->model_type = name;
    }
  }
  if (m.family == nullptr) {
    m.family = &GenericFamily();
    out->model_type = first_model_type;
    if (!first_model_type.empty()) {
      out->warnings.push_back(absl::StrCat(
          "model_type '", kernels::Abbreviate(first_model_type),
          "' has no architecture defaults in posenc: rope_theta 10000, NEOX pairs and the keys "
          "as given"));
    }
  }
  POSENC_RETURN_IF_ERROR(ReadTextModel(&m));
  out->warnings.insert(out->warnings.end(), m.warnings.begin(), m.warnings.end());
  return m;
}

// The model's RoPE dict: v5 rope_parameters before v4 rope_scaling, else the architecture's class
// default (parsed into `class_default`, which must outlive it); `dict` is null without one.
struct RopeDict {
  const Json* dict = nullptr;
  std::string path;    // its name in messages
  bool keyed = false;  // keyed by layer type: no type key of its own and every value an object
};

absl::Status FindRopeDict(const TextModel& m, const std::string& model_type, Json* class_default,
                          RopeDict* rope) {
  for (absl::string_view key : {"rope_parameters", "rope_scaling"}) {
    rope->dict = Find(*m.text, key);
    if (rope->dict != nullptr) {
      rope->path = KeyPath(m, key);
      break;
    }
  }
  if (rope->dict == nullptr && !m.family->default_rope.empty()) {
    *class_default = Json::parse(m.family->default_rope);
    rope->dict = class_default;
    rope->path = absl::StrCat("rope_scaling (", model_type, " class default)");
  }
  const Json* dict = rope->dict;
  if (dict != nullptr && !dict->is_object()) {
    return Invalid(absl::StrCat(rope->path, " must be an object, got ", TypeName(*dict)));
  }
  rope->keyed =
      dict != nullptr && !dict->empty() && !dict->contains("rope_type") && !dict->contains("type");
  for (auto it = rope->keyed ? dict->begin() : Json::const_iterator();
       rope->keyed && it != dict->end(); ++it) {
    rope->keyed = it.value().is_object();
  }
  return absl::OkStatus();
}

// One spec per layer type name ("": every layer).
absl::StatusOr<std::vector<LayerSpec>> LayerSpecs(const TextModel& m, const RopeDict& rope) {
  std::vector<LayerSpec> specs;
  if (rope.keyed) {
    for (auto it = rope.dict->begin(); it != rope.dict->end(); ++it) {
      specs.push_back({.layer_type = it.key(),
                       .dict = &it.value(),
                       .path = absl::StrCat(rope.path, ".", it.key()),
                       .keyed = true});
    }
  } else if (!m.family->local_theta_key.empty()) {
    // Gemma 3 / ModernBERT before v5: the scaling and the global base on full-attention layers,
    // plain RoPE with the local base on sliding ones (transformers' conversion to v5).
    POSENC_ASSIGN_OR_RETURN(std::optional<double> local,
                            GetText<double>(m, m.family->local_theta_key));
    specs.push_back({.layer_type = "full_attention", .dict = rope.dict, .path = rope.path});
    specs.push_back({.layer_type = "sliding_attention",
                     .path = KeyPath(m, m.family->local_theta_key),
                     .theta = local ? local : m.family->local_theta});
  } else {
    specs.push_back({.dict = rope.dict, .path = rope.path.empty() ? "rope_scaling" : rope.path});
  }
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> global_head_dim,
                          GetText<int64_t>(m, "global_head_dim"));
  for (LayerSpec& spec : specs) {
    if (spec.layer_type == "full_attention" && global_head_dim && *global_head_dim > 0) {
      spec.head_dim = global_head_dim;  // Gemma 4
    }
  }
  return specs;
}

// The layers of one (layer type, NoPE) pair and their config, built once.
struct Group {
  LayerRope rope;
  bool nope = false;
  std::vector<std::string> warnings;
  std::string key;  // RopeFrequencyCache::Key of the config: equal keys, equal RoPE
  const LayerSpec* spec = nullptr;
};

// Groups layers by (type, NoPE), building each group's config once.
class Grouping {
 public:
  Grouping(const TextModel& m, const std::vector<LayerSpec>& specs, const std::string& rope_path)
      : m_(m), specs_(specs), rope_path_(rope_path) {}

  // Every layer i of `types` (empty: unnamed) and `nope`; without layers, one group per spec.
  absl::StatusOr<std::vector<Group>> Run(const std::vector<std::string>& types,
                                         const std::vector<bool>& nope) && {
    const bool one_spec = specs_.size() == 1 && specs_[0].layer_type.empty();
    for (size_t i = 0; i < nope.size(); ++i) {
      if (one_spec && types.empty() && !nope[i] && !groups_.empty()) {
        groups_.front().rope.layers.push_back(static_cast<int64_t>(i));
        continue;
      }
      POSENC_ASSIGN_OR_RETURN(Group * g, GroupFor(types.empty() ? "" : types[i], nope[i]));
      g->rope.layers.push_back(static_cast<int64_t>(i));
    }
    if (groups_.empty()) {  // the file does not say how many layers
      for (const LayerSpec& spec : specs_) {
        POSENC_RETURN_IF_ERROR(GroupFor(spec.layer_type, false).status());
      }
    }
    return std::move(groups_);
  }

 private:
  const LayerSpec* SpecFor(const std::string& type) const {
    if (specs_.size() == 1 && specs_[0].layer_type.empty()) return &specs_[0];
    for (const LayerSpec& spec : specs_) {
      if (spec.layer_type == type) return &spec;
    }
    return nullptr;
  }

  absl::StatusOr<Group*> GroupFor(const std::string& type, bool is_nope) {
    for (Group& g : groups_) {
      if (g.rope.layer_type == type && g.nope == is_nope) return &g;
    }
    const LayerSpec* spec = SpecFor(type);
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const LayerSpec& s : specs_) names.push_back(s.layer_type);
      return Invalid(absl::StrCat("layer type '", kernels::Abbreviate(type), "' has no entry in ",
                                  rope_path_, " (",
                                  kernels::Abbreviate(absl::StrJoin(names, ", "), 256), ")"));
    }
    LayerSpec with_nope = *spec;
    with_nope.nope = is_nope;
    Group g;
    g.rope.layer_type = type;
    g.nope = is_nope;
    g.spec = spec;
    g.rope.sources = m_.sources;
    g.rope.softmax_mscale = m_.family->softmax_mscale;
    POSENC_ASSIGN_OR_RETURN(g.rope.config, BuildConfig(m_, with_nope, &g.warnings, &g.rope.sources,
                                                       &g.rope.temperature_tuning));
    g.key = kernels::RopeFrequencyCache::Key(g.rope.config, 0);
    groups_.push_back(std::move(g));
    return &groups_.back();
  }

  const TextModel& m_;
  const std::vector<LayerSpec>& specs_;
  const std::string& rope_path_;
  std::vector<Group> groups_;
};

// "sliding_attention: layers 0-4, 6-10; full_attention: layers 5, 11", bounded.
std::string DescribeGroups(const std::vector<Group>& groups) {
  std::vector<std::string> parts;
  parts.reserve(groups.size());
  for (const Group& g : groups) {
    parts.push_back(absl::StrCat(
        g.rope.layer_type.empty() ? "(unnamed)" : g.rope.layer_type, g.nope ? " NoPE" : "", ": ",
        g.rope.layers.empty() ? std::string("layers not listed")
                              : absl::StrCat("layers ", kernels::IndexRuns(g.rope.layers))));
  }
  return kernels::Abbreviate(absl::StrJoin(parts, "; "), 400);
}

// The group of layer `index` (a layer_type of decimal digits).
absl::StatusOr<const Group*> SelectByIndex(const std::vector<Group>& groups, int64_t index,
                                           int64_t num_layers) {
  const Group* selected = nullptr;
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
  return selected;
}

// The group of layer type `layer_type`; an error where that type's layers differ.
absl::StatusOr<const Group*> SelectByType(const std::vector<Group>& groups,
                                          absl::string_view layer_type) {
  const Group* selected = nullptr;
  for (const Group& g : groups) {
    if (g.rope.layer_type != layer_type) continue;
    if (selected != nullptr && selected->key != g.key) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.layer_type: \"", kernels::Abbreviate(layer_type),
          "\" names layers whose RoPE differs (", DescribeGroups(groups), "); give a layer index"));
    }
    if (selected == nullptr) selected = &g;
  }
  if (selected != nullptr) return selected;
  std::vector<std::string> names;
  for (const Group& g : groups) {
    if (!g.rope.layer_type.empty() &&
        std::find(names.begin(), names.end(), g.rope.layer_type) == names.end()) {
      names.push_back(g.rope.layer_type);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("config.layer_type: \"", kernels::Abbreviate(layer_type),
                   "\" is not a layer type of this model (",
                   names.empty() ? std::string("its layers are all alike")
                                 : kernels::Abbreviate(absl::StrJoin(names, ", "), 256),
                   "; a layer index also works)"));
}

// The one RoPE of a model whose other layers are NoPE (Llama 4, SmolLM 3): its group, and a
// warning naming the NoPE layers; null when the RoPE layers differ or there are none.
const Group* OnlyRope(const std::vector<Group>& groups, std::vector<std::string>* warnings) {
  const Group* rope = nullptr;
  std::vector<int64_t> nope_layers;
  for (const Group& g : groups) {
    if (g.nope) {
      nope_layers.insert(nope_layers.end(), g.rope.layers.begin(), g.rope.layers.end());
      continue;
    }
    if (rope != nullptr && rope->key != g.key) return nullptr;
    if (rope == nullptr) rope = &g;
  }
  if (rope == nullptr) return nullptr;
  std::sort(nope_layers.begin(), nope_layers.end());
  warnings->push_back(
      absl::StrCat("no layer_type given: the RoPE of every rotary layer; layers ",
                   kernels::Abbreviate(kernels::IndexRuns(nope_layers), 200),
                   " have no RoPE (NoPE: q and k pass through; layer_type selects one of them)"));
  return rope;
}

// A layer_type of 1 to 9 decimal digits as a layer index; nullopt for a name.
std::optional<int64_t> LayerIndex(absl::string_view layer_type) {
  if (layer_type.empty() || layer_type.size() > 9 ||
      !std::all_of(layer_type.begin(), layer_type.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int64_t index = 0;
  for (char c : layer_type) index = index * 10 + (c - '0');
  return index;
}

// The group `layer_type` selects: by type name or decimal index; empty where every layer is
// alike, or every rotary layer (the others NoPE), or with `all_layers` the first.
absl::StatusOr<const Group*> SelectLayer(const std::vector<Group>& groups,
                                         absl::string_view layer_type, bool all_layers,
                                         bool all_alike, int64_t num_layers,
                                         std::vector<std::string>* warnings) {
  if (layer_type.empty()) {
    if (!all_alike && !all_layers) {
      if (const Group* rope = OnlyRope(groups, warnings); rope != nullptr) return rope;
      return absl::InvalidArgumentError(
          absl::StrCat("config.layer_type: required: the layers of this model differ (",
                       DescribeGroups(groups), "); give a layer type or a layer index"));
    }
    return &groups.front();
  }
  if (const std::optional<int64_t> index = LayerIndex(layer_type); index.has_value()) {
    return SelectByIndex(groups, *index, num_layers);
  }
  return SelectByType(groups, layer_type);
}

// `out` from groups[selected] and every group.
absl::Status Fill(const TextModel& m, std::vector<Group> groups, size_t selected_index,
                  bool all_alike, absl::string_view layer_type, ModelRope* out) {
  const Group& selected = groups[selected_index];
  out->config = selected.rope.config;
  POSENC_ASSIGN_OR_RETURN(out->mrope_layout, MropeLayoutOf(m, *selected.spec));
  out->style = out->config.style;
  // The layer type is reported only where layers differ or the caller named one.
  if (!all_alike || !layer_type.empty()) out->layer_type = selected.rope.layer_type;
  for (const std::string& w : selected.warnings) {
    if (std::find(out->warnings.begin(), out->warnings.end(), w) == out->warnings.end()) {
      out->warnings.push_back(w);
    }
  }
  for (Group& g : groups) {
    g.rope.warnings = std::move(g.warnings);
    out->layer_ropes.push_back(std::move(g.rope));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// layer_type "vision": the vision tower's RoPE.
absl::StatusOr<ModelRope> VisionModelRope(const Json& root) {
  POSENC_ASSIGN_OR_RETURN(std::optional<VisionTowerConfig> tower, VisionTowerOf(root));
  if (!tower) {
    const Json* mt = Find(root, "model_type");
    return absl::InvalidArgumentError(absl::StrCat(
        "config.layer_type: \"vision\" selects a vision tower, and model_type ",
        mt != nullptr && mt->is_string() ? absl::StrCat("'", kernels::Abbreviate(mt->dump()), "'")
                                         : std::string("(none)"),
        " has none posenc knows (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, Pixtral, Llama 4)"));
  }
  ModelRope out;
  out.config = tower->rope.config;
  out.style = out.config.style;
  out.model_type = tower->model_type;
  out.layer_type = std::string(kVisionLayerType);
  out.layer_ropes.push_back(std::move(tower->rope));
  return out;
}

// `out` with its sub-module `name` selected: its config, pairing and warnings.
absl::Status SelectSubmoduleOf(absl::string_view name, absl::string_view layer_type,
                               ModelRope* out) {
  POSENC_ASSIGN_OR_RETURN(const SubmoduleRope* s,
                          SelectSubmodule(*out, name, LayerIndex(layer_type)));
  out->config = s->config;
  out->style = s->config.style;
  out->mrope_layout.reset();
  out->submodule = s->name;
  for (const std::string& w : s->warnings) {
    if (std::find(out->warnings.begin(), out->warnings.end(), w) == out->warnings.end()) {
      out->warnings.push_back(w);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelRope> ParseModelRope(absl::string_view json_text, absl::string_view layer_type,
                                         bool all_layers) {
  return ParseModelRope(json_text,
                        ParseOptions{.layer_type = layer_type, .all_layers = all_layers});
}

absl::StatusOr<ModelRope> ParseModelRope(absl::string_view json_text, const ParseOptions& options) {
  const absl::string_view layer_type = options.layer_type;
  const bool all_layers = options.all_layers;
  POSENC_ASSIGN_OR_RETURN(const Json root, ParseObject(json_text));
  if (layer_type == kVisionLayerType) {
    if (!options.submodule.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.submodule: \"", kernels::Abbreviate(options.submodule),
          "\" is a part of a text layer; layer_type \"vision\" selects the vision tower, whose "
          "parts have no RoPE of their own (leave one of them empty)"));
    }
    return VisionModelRope(root);
  }
  ModelRope out;
  POSENC_ASSIGN_OR_RETURN(TextModel m, FindTextModel(root, &out));
  Json class_default;
  RopeDict rope;
  POSENC_RETURN_IF_ERROR(FindRopeDict(m, out.model_type, &class_default, &rope));
  POSENC_ASSIGN_OR_RETURN(const std::vector<LayerSpec> specs, LayerSpecs(m, rope));
  std::vector<std::string> types;
  std::vector<bool> nope;
  POSENC_RETURN_IF_ERROR(LayerTypes(m, &types, &nope, &m.sources));
  POSENC_ASSIGN_OR_RETURN(std::vector<Group> groups,
                          Grouping(m, specs, rope.path).Run(types, nope));
  bool all_alike = true;  // every layer has the same RoPE
  for (const Group& g : groups) all_alike = all_alike && g.key == groups.front().key;
  POSENC_ASSIGN_OR_RETURN(const Group* selected,
                          SelectLayer(groups, layer_type, all_layers, all_alike,
                                      static_cast<int64_t>(nope.size()), &out.warnings));
  const auto index = static_cast<size_t>(selected - groups.data());
  POSENC_RETURN_IF_ERROR(Fill(m, std::move(groups), index, all_alike, layer_type, &out));
  POSENC_ASSIGN_OR_RETURN(out.submodules,
                          Submodules(m, out.config, static_cast<int64_t>(nope.size())));
  if (!options.submodule.empty()) {
    POSENC_RETURN_IF_ERROR(SelectSubmoduleOf(options.submodule, layer_type, &out));
  }
  if (all_layers && Find(root, "vision_config") != nullptr) {  // DescribeRope: both towers
    POSENC_ASSIGN_OR_RETURN(std::optional<VisionTowerConfig> tower, VisionTowerOf(root));
    if (tower) out.layer_ropes.push_back(std::move(tower->rope));
  }
  return out;
}

}  // namespace posenc::hf
