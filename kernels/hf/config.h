// posenc_hf: reads the rotary configuration out of a Hugging Face config.json the way
// transformers does (README "Hugging Face config.json"; posenc.proto, RopeConfig.hf_config_json).
// A library of its own (target posenc_hf: posenc_kernels and nlohmann-json, no gRPC, protobuf or
// spdlog), linked by the server and the hf_config_fuzz target. Its files, by job: json.h (typed
// JSON reads and their errors), architectures.h (one row per configuration class),
// scaling.h (the rope types and the keys each reads), text_model.h (what every layer shares),
// layers.h (layer types, NoPE, one layer type's config), submodules.h (the DSA indexer),
// sources.h (where each value came from) and config.cc (the layers grouped by RoPE, one selected).
//
// 1. The text model: `text_config` when the file has one (Gemma 3/4, Llama 4, Qwen-VL), else the
//    top level; its `model_type` (or the top level's) picks the architecture's defaults: the
//    configuration class's rope_theta, head_dim, max_position_embeddings, partial rotary,
//    pairing and layer pattern (the table in architectures.cc names the transformers file of each).
// 2. The RoPE parameters: v5 `rope_parameters` or v4 `rope_scaling`, either flat or keyed by
//    layer type; legacy per-layer keys (Gemma 3's rope_local_base_freq, ModernBERT's
//    global_rope_theta / local_rope_theta) become per-layer entries as transformers' conversion
//    does. Standardized as transformers: `type` -> `rope_type`, "su" -> longrope, "mrope" ->
//    default, a top-level original_max_position_embeddings overrides a nested one, YaRN's
//    `truncate`, llama3 with high_freq_factor <= low_freq_factor (a step), absent keys from the
//    class defaults.
// 3. Per layer: the model's layer types (`layer_types`, or the architecture's pattern) and NoPE
//    layers (Llama 4, Cohere 2, SmolLM 3); the request's layer_type picks one by name or index.
//    Llama 4's NoPE layers carry its attention temperature tuning, Ministral 3 / Mistral 4's
//    layers their llama_4_scaling_beta (both reported, not applied), and
//    every layer the sources of its values (the key read, and file / text_config / class default).
// 4. Pairing: NEOX unless the architecture pairs otherwise (GPT-J, Cohere, Llama 4, DeepSeek V2,
//    GLM/ChatGLM: GPTJ; DeepSeek V3 / Kimi K2 `rope_interleave`, default true: DEEPSEEK;
//    DeepSeek-V3.2 / GLM-5 always DEEPSEEK).
// 5. Sub-modules (submodules.h): a part of a layer with a RoPE of its own, the DSA indexer of
//    DeepSeek-V3.2 (NEOX) and GLM-5 (interleaved, its "full" layers), on the layer's frequencies.
//
// Keys inside the RoPE dict that transformers does not read for the rope type are warnings, not
// errors (transformers only logs them). Unknown rope types, values of the wrong JSON type and
// malformed JSON are INVALID_ARGUMENT, prefixed "config.hf_config_json: " and naming the key.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_HF_CONFIG_H_
#define POSENC_KERNELS_HF_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/ops.h"

namespace posenc::hf {

// A value the normalizer used and where it came from (DescribeRope's sources).
struct ValueSource {
  std::string name;    // what it decides: "head_dim", "base", "rotary_dim", "scaling.factor", ...
  std::string key;     // the key path read ("text_config.rope_theta"), or how it was derived
  std::string origin;  // "file", "nested config (text_config)" or "architecture default (...)"
  std::string value;   // the value used, as text
};

// A per-position multiplier of q besides the rotation: the caller multiplies q at absolute
// position p by
//   scale(p) = log(floor((p + position_offset) / floor_scale) + 1) * attn_scale + 1.
// Llama 4's attention temperature tuning (key "attn_temperature_tuning"; Llama4TextAttention, on
// the layers without RoPE, offset 1) or Ministral 3 / Mistral 4's "llama_4_scaling_beta" (every
// layer, q after the rotation, offset 0, floor_scale the RoPE dict's
// original_max_position_embeddings). posenc reports it; nothing applies it.
struct TemperatureTuning {
  double floor_scale = 8192;
  double attn_scale = 0.1;
  double position_offset = 1;
  std::string key = "attn_temperature_tuning";
};

// One distinct RoPE of a model: a layer type and the layers that have it.
struct LayerRope {
  std::string layer_type;       // "" when the model does not name its layer types
  std::vector<int64_t> layers;  // layer indices (empty when the file does not say)
  kernels::RopeConfig config;
  std::vector<std::string> warnings;  // the normalizer's warnings about this layer's RoPE
  std::vector<ValueSource> sources;   // every value used, in the order read
  std::optional<TemperatureTuning> temperature_tuning;  // set on the layers it applies to
  // Whether the architecture multiplies its softmax scale by YaRN's mscale^2 (false: Ministral 3,
  // Mistral 4, whose YaRN dicts have mscale_all_dim their attention never applies).
  bool softmax_mscale = true;
};

// A part of a layer with a RoPE of its own beside the attention's: the DSA lightning indexer of
// DeepSeek-V3.2 / GLM-5 (submodules.h). The same positions and frequencies as its layer's RoPE
// (a copy of that config: base, scaling, max positions, attention factor), its own head width,
// rotary width and pairing.
struct SubmoduleRope {
  std::string name;             // "indexer"
  std::vector<int64_t> layers;  // the layers that run it (empty when the file does not say)
  int64_t rotary_offset = 0;    // index of its first rotary channel in its head (0: the first)
  kernels::RopeConfig config;
  std::vector<std::string> warnings;
  std::vector<ValueSource> sources;
};

struct ModelRope {
  // The selected layer's config: head_dim (0 when the file gives no way to derive it),
  // rotary_dim, base, scaling, max_position_embeddings, mrope_section, style, nope; the other
  // members keep their defaults.
  kernels::RopeConfig config;
  // The pairing the architecture uses (request fields may override it).
  kernels::RopeStyle style = kernels::RopeStyle::kNeox;
  // Set when the file decides it (mrope_interleaved present).
  std::optional<kernels::MropeLayout> mrope_layout;
  std::string model_type;  // whose defaults applied ("" when the file has none)
  std::string layer_type;  // the selected layer type ("" when all layers are alike)
  std::vector<std::string> warnings;
  // Every distinct RoPE of the model, in order of first layer.
  std::vector<LayerRope> layer_ropes;
  // The sub-modules of the model's layers that have a RoPE of their own (DeepSeek-V3.2 / GLM-5:
  // "indexer"), built from the selected layer's RoPE (those models' layers share one).
  std::vector<SubmoduleRope> submodules;
  std::string submodule;  // the selected sub-module ("" : the attention itself)
};

// The largest config.json text accepted (published ones are under 100 KB) and the deepest
// nesting (they nest 3 levels): both checked before parsing, so one request's JSON tree stays
// within a few tens of MiB and a bounded stack.
inline constexpr size_t kMaxConfigBytes = size_t{1} << 20;
inline constexpr int kMaxConfigDepth = 64;

// `layer_type` selects a layer by type name or decimal index, or "vision" the vision tower of a
// vision-language config (vision.h); it may be empty when every layer has the same RoPE, or when
// every rotary layer has the same one and the others are NoPE (a warning names them), or with
// `all_layers` (DescribeRope: every layer's RoPE is in layer_ropes, the vision tower's last as
// layer_type "vision"; an empty layer_type then selects the first layer's instead of failing
// where layers differ).
absl::StatusOr<ModelRope> ParseModelRope(absl::string_view json_text, absl::string_view layer_type,
                                         bool all_layers = false);

// What ParseModelRope selects. `submodule` ("indexer"; "" the attention itself) selects that part
// of the layer `layer_type` chooses: config, style and warnings are then the sub-module's. Errors
// (INVALID_ARGUMENT "config.submodule: ...") where the model has no such sub-module, where the
// selected layer does not run it (GLM-5's "shared" indexer layers), or with layer_type "vision".
struct ParseOptions {
  absl::string_view layer_type;
  absl::string_view submodule;
  bool all_layers = false;
};
absl::StatusOr<ModelRope> ParseModelRope(absl::string_view json_text, const ParseOptions& options);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_CONFIG_H_
