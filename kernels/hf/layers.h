// The layers of a config.json's text model (kernels/hf; internal to it): each layer's type and
// whether it has RoPE, and the RoPE config of one layer type.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_HF_LAYERS_H_
#define POSENC_KERNELS_HF_LAYERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/hf/config.h"
#include "kernels/hf/json.h"
#include "kernels/hf/text_model.h"
#include "kernels/rope/config.h"

namespace posenc::hf {

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

// The config of one layer type; `sources` gets where each of its values came from, `tuning`
// the per-position q scale where it applies (Llama 4's attention temperature tuning on NoPE
// layers, Ministral 3 / Mistral 4's llama_4_scaling_beta on rotary ones).
absl::StatusOr<kernels::RopeConfig> BuildConfig(const TextModel& m, const LayerSpec& spec,
                                                std::vector<std::string>* warnings,
                                                std::vector<ValueSource>* sources,
                                                std::optional<TemperatureTuning>* tuning);

// The M-RoPE layout that decides a layer's mrope_section: the file's mrope_interleaved, else the
// architecture's (nullopt: neither says).
absl::StatusOr<std::optional<kernels::MropeLayout>> MropeLayoutOf(const TextModel& m,
                                                                  const LayerSpec& spec);

// The model's layer types, one per layer (empty when neither the file nor the architecture
// names them), and which layers have no RoPE; `sources` gets the keys (or rules) that said so.
absl::Status LayerTypes(const TextModel& m, std::vector<std::string>* types,
                        std::vector<bool>* nope, std::vector<ValueSource>* sources);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_LAYERS_H_
