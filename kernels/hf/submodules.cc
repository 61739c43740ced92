// The sub-modules with a RoPE of their own (submodules.h): the DSA lightning indexer.
#include "kernels/hf/submodules.h"

#include <algorithm>
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
#include "kernels/hf/sources.h"

namespace posenc::hf {
namespace {

// How the indexer pairs its rotary channels.
enum class IndexerPairing {
  kNeox,      // transformers' apply_rotary_pos_emb (half-split)
  kDeepseek,  // transformers' apply_rotary_pos_emb_interleave (output de-interleaved)
  kFromKey,   // vLLM: indexer_rope_interleave (absent: NEOX since vllm-project/vllm#34353)
};

// Which layers run the indexer.
enum class IndexerLayers {
  kAll,
  kIndexerTypes,  // GLM-5: the "full" entries of indexer_types (or index_topk_pattern, its rule)
};

// One architecture's indexer. Both transformers and vLLM share the layer's rotary table (cos and
// sin, or cos_sin_cache) between the attention and the indexer: same frequencies, same attention
// factor; the indexer rotates the first qk_rope_head_dim of its index_head_dim channels.
struct IndexerRow {
  absl::string_view model_type;  // "": any other text config with index_topk (vLLM's is_v32)
  absl::string_view source;      // the code its pairing and layers come from
  IndexerPairing pairing;
  IndexerLayers layers;
};

const std::vector<IndexerRow>& IndexerRows() {
  static const auto* rows = new std::vector<IndexerRow>{
      {"deepseek_v32",
       "models/deepseek_v32/modular_deepseek_v32.py: DeepseekV32Indexer, apply_rotary_pos_emb "
       "(half-split) on the first qk_rope_head_dim channels",
       IndexerPairing::kNeox, IndexerLayers::kAll},
      {"glm_moe_dsa",
       "models/glm_moe_dsa/modular_glm_moe_dsa.py: GlmMoeDsaIndexer, "
       "apply_rotary_pos_emb_interleave on the first qk_rope_head_dim channels",
       IndexerPairing::kDeepseek, IndexerLayers::kIndexerTypes},
      {"",
       "vLLM model_executor/models/deepseek_v2.py: Indexer with indexer_rope_emb, for a text "
       "config with index_topk",
       IndexerPairing::kFromKey, IndexerLayers::kAll},
  };
  return *rows;
}

// The row of `m`'s architecture, the vLLM rule where another text config has index_topk, or null.
const IndexerRow* FindIndexerRow(const TextModel& m) {
  const std::vector<absl::string_view>& names = m.family->model_types;
  for (const IndexerRow& row : IndexerRows()) {
    if (!row.model_type.empty() && !names.empty() && row.model_type == names.front()) return &row;
  }
  if (Find(*m.text, "index_topk") != nullptr) return &IndexerRows().back();
  return nullptr;
}

// index_head_dim (class default 128) and the rotary part qk_rope_head_dim (default 64).
absl::Status IndexerDims(const TextModel& m, SubmoduleRope* out) {
  const Family& f = *m.family;
  int64_t dims[2] = {128, 64};
  const absl::string_view keys[2] = {"index_head_dim", "qk_rope_head_dim"};
  for (int i = 0; i < 2; ++i) {
    POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> given, GetText<int64_t>(m, keys[i]));
    if (given) {
      dims[i] = *given;
      ReadFrom(&out->sources, f, i == 0 ? "head_dim" : "rotary_dim", KeyPath(m, keys[i]),
               absl::StrCat(*given));
    } else {
      Defaulted(&out->sources, f, i == 0 ? "head_dim" : "rotary_dim", keys[i],
                absl::StrCat(dims[i]));
    }
  }
  const auto [head, rotary] = dims;
  if (rotary <= 0 || rotary % 2 != 0) {
    return Invalid(absl::StrCat(KeyPath(m, "qk_rope_head_dim"),
                                ": expected an even number > 0, got ", rotary));
  }
  if (head < rotary || head % 2 != 0) {
    return Invalid(absl::StrCat(KeyPath(m, "index_head_dim"),
                                ": expected an even number >= qk_rope_head_dim (", rotary,
                                "), got ", head));
  }
  out->config.head_dim = head;
  out->config.rotary_dim = rotary == head ? std::nullopt : std::optional<int64_t>(rotary);
  return absl::OkStatus();
}

// The indexer's pairing (its source recorded), and a warning where the file's
// indexer_rope_interleave and transformers disagree.
absl::StatusOr<kernels::RopeStyle> IndexerStyle(const TextModel& m, const IndexerRow& row,
                                                SubmoduleRope* out) {
  const std::string key = KeyPath(m, "indexer_rope_interleave");
  POSENC_ASSIGN_OR_RETURN(std::optional<bool> interleave,
                          GetText<bool>(m, "indexer_rope_interleave"));
  kernels::RopeStyle style = kernels::RopeStyle::kNeox;
  switch (row.pairing) {
    case IndexerPairing::kNeox:
      if (interleave == true) {
        out->warnings.push_back(
            absl::StrCat(key, ": true is not read by transformers (", row.source,
                         "); vLLM reads it and would rotate the indexer's adjacent pairs (GPT-J)"));
      }
      break;
    case IndexerPairing::kDeepseek:
      style = kernels::RopeStyle::kDeepseek;
      if (interleave != true) {
        out->warnings.push_back(absl::StrCat(
            key, interleave ? ": false" : " absent",
            ": transformers rotates the indexer interleaved regardless (", row.source,
            "); vLLM reads the key (absent: NEOX) and would rotate it half-split (NEOX)"));
      }
      break;
    case IndexerPairing::kFromKey:
      style = interleave.value_or(false) ? kernels::RopeStyle::kGptj : kernels::RopeStyle::kNeox;
      out->warnings.push_back(
          absl::StrCat("the indexer's pairing follows vLLM (", row.source, "): ", key,
                       " (absent: NEOX); posenc has no transformers row for this model_type"));
      break;
  }
  const std::string name(kernels::RopeStyleName(style));
  if (row.pairing == IndexerPairing::kFromKey && interleave) {
    ReadFrom(&out->sources, *m.family, "pairing", key, name);
  } else {
    Defaulted(&out->sources, *m.family, "pairing", row.source, name);
  }
  return style;
}

// A per-layer list of two words (indexer_types: "full" / "shared"; index_topk_pattern: "F" /
// "S", also as one string): true where the layer runs the indexer; nullopt when absent.
absl::StatusOr<std::optional<std::vector<bool>>> ReadModes(const TextModel& m,
                                                           absl::string_view key,
                                                           absl::string_view full_word,
                                                           absl::string_view shared_word) {
  const Json* v = Find(*m.text, key);
  if (v == nullptr) return std::nullopt;
  const std::string path = KeyPath(m, key);
  const bool chars = full_word.size() == 1;
  std::vector<std::string> words;
  if (v->is_string() && chars) {
    for (char c : v->get<std::string>()) words.emplace_back(1, c);
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return Invalid(absl::StrCat(path, "[", i, "] must be a string, got ", TypeName((*v)[i])));
      }
      words.push_back((*v)[i].get<std::string>());
    }
  } else {
    return Invalid(absl::StrCat(path, " must be an array of strings", chars ? " or a string" : "",
                                ", got ", TypeName(*v)));
  }
  std::vector<bool> full;
  full.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] != full_word && words[i] != shared_word) {
      return Invalid(absl::StrCat(path, "[", i, "]: expected \"", full_word, "\" or \"",
                                  shared_word, "\", got \"", kernels::Abbreviate(words[i]), "\""));
    }
    full.push_back(words[i] == full_word);
  }
  return full;
}

// GlmMoeDsaConfig's rule without indexer_types or index_topk_pattern: layer i runs the indexer
// iff max(i - index_skip_topk_offset + 1, 0) % max(index_topk_freq, 1) == 0 (defaults 1 and 2).
absl::StatusOr<std::vector<bool>> ModesFromRule(const TextModel& m, int64_t n,
                                                std::vector<ValueSource>* sources) {
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> freq, GetText<int64_t>(m, "index_topk_freq"));
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> offset,
                          GetText<int64_t>(m, "index_skip_topk_offset"));
  const int64_t f = std::max<int64_t>(freq.value_or(1), 1);
  const int64_t o = offset.value_or(2);
  if (o < -100000 || o > 100000) {
    return Invalid(absl::StrCat(KeyPath(m, "index_skip_topk_offset"),
                                ": expected -100000 .. 100000, got ", o));
  }
  const std::string rule = absl::StrCat("full iff max(i - ", o, " + 1, 0) % ", f, " == 0");
  if (freq || offset) {
    ReadFrom(sources, *m.family, "indexer_layers",
             KeyPath(m, freq ? "index_topk_freq" : "index_skip_topk_offset"), rule);
  } else {
    Defaulted(sources, *m.family, "indexer_layers", "index_topk_freq, index_skip_topk_offset",
              rule);
  }
  std::vector<bool> full(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) full[i] = std::max<int64_t>(i - o + 1, 0) % f == 0;
  return full;
}

// The layers that run the indexer.
absl::StatusOr<std::vector<int64_t>> IndexerLayerList(const TextModel& m, const IndexerRow& row,
                                                      int64_t n, SubmoduleRope* out) {
  std::vector<int64_t> layers;
  if (row.layers == IndexerLayers::kAll) {
    for (int64_t i = 0; i < n; ++i) layers.push_back(i);
    if (n > 0) Defaulted(&out->sources, *m.family, "indexer_layers", "every layer", "all");
    return layers;
  }
  std::string key = "indexer_types";
  POSENC_ASSIGN_OR_RETURN(std::optional<std::vector<bool>> full,
                          ReadModes(m, key, "full", "shared"));
  if (!full) {
    key = "index_topk_pattern";
    POSENC_ASSIGN_OR_RETURN(full, ReadModes(m, key, "F", "S"));
  }
  if (full) {
    if (n > 0 && static_cast<int64_t>(full->size()) < n) {
      return Invalid(absl::StrCat(KeyPath(m, key), ": ", full->size(), " entries for ", n,
                                  " layers (num_hidden_layers)"));
    }
    ReadFrom(&out->sources, *m.family, "indexer_layers", KeyPath(m, key),
             absl::StrCat("[", full->size(), " values]"));
  } else {
    key = "index_skip_topk_offset";
    POSENC_ASSIGN_OR_RETURN(full, ModesFromRule(m, n, &out->sources));
  }
  if (!full->empty() && !full->front()) {
    return Invalid(absl::StrCat(
        KeyPath(m, key),
        ": layer 0 must run the indexer (a shared layer reuses the top-k of the previous full "
        "layer; transformers raises at run time), got shared"));
  }
  const size_t count = n > 0 ? static_cast<size_t>(n) : full->size();
  for (size_t i = 0; i < count; ++i) {
    if ((*full)[i]) layers.push_back(static_cast<int64_t>(i));
  }
  return layers;
}

}  // namespace

absl::StatusOr<std::vector<SubmoduleRope>> Submodules(const TextModel& m,
                                                      const kernels::RopeConfig& layer,
                                                      int64_t num_layers) {
  std::vector<SubmoduleRope> out;
  const IndexerRow* row = FindIndexerRow(m);
  if (row == nullptr) return out;
  SubmoduleRope s;
  s.name = std::string(kIndexerSubmodule);
  s.config = layer;  // the layer's rotary table: base, scaling, max positions, attention factor
  s.config.mrope_section.clear();
  s.config.frequency_axes.clear();
  s.config.nope = false;
  POSENC_RETURN_IF_ERROR(IndexerDims(m, &s));
  POSENC_ASSIGN_OR_RETURN(s.config.style, IndexerStyle(m, *row, &s));
  POSENC_ASSIGN_OR_RETURN(s.layers, IndexerLayerList(m, *row, num_layers, &s));
  out.push_back(std::move(s));
  return out;
}

absl::StatusOr<const SubmoduleRope*> SelectSubmodule(const ModelRope& model, absl::string_view name,
                                                     std::optional<int64_t> layer_index) {
  const SubmoduleRope* found = nullptr;
  std::vector<std::string> names;
  for (const SubmoduleRope& s : model.submodules) {
    names.push_back(s.name);
    if (s.name == name) found = &s;
  }
  if (found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.submodule: \"", kernels::Abbreviate(name), "\" is not a sub-module of model_type '",
        kernels::Abbreviate(model.model_type), "' (",
        names.empty() ? std::string("none of its layers has a RoPE of its own")
                      : absl::StrCat("its sub-modules: ", absl::StrJoin(names, ", ")),
        ")"));
  }
  const std::vector<int64_t>& layers = found->layers;
  if (layer_index && !layers.empty() &&
      !std::binary_search(layers.begin(), layers.end(), *layer_index)) {
    const auto before = std::lower_bound(layers.begin(), layers.end(), *layer_index);
    return absl::InvalidArgumentError(absl::StrCat(
        "config.submodule: layer ", *layer_index, " does not run the ", found->name,
        before == layers.begin()
            ? std::string()
            : absl::StrCat(" (a shared layer: it reuses the top-k of layer ", *(before - 1), ")"),
        "; the layers that run it: ", kernels::Abbreviate(kernels::IndexRuns(layers), 200)));
  }
  return found;
}

}  // namespace posenc::hf
