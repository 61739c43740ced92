// The architectures the config.json normalizer knows (kernels/hf; internal to it): one row per
// transformers configuration class, with the defaults transformers uses when a file leaves a key
// out, and how the architecture pairs channels and names its layers.
//
// Thread-safety: the table is immutable.
#ifndef POSENC_KERNELS_HF_ARCHITECTURES_H_
#define POSENC_KERNELS_HF_ARCHITECTURES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/rope/config.h"

namespace posenc::hf {

// How an architecture pairs the rotary channels.
enum class Pairing {
  kNeox,
  kGptj,
  // `rope_interleave` (default per family): true -> DEEPSEEK (de-interleave, then rotate_half).
  kInterleaveFlag,
  // DEEPSEEK always: the class removes `rope_interleave` (DeepSeek-V3.2) or the attention
  // hard-codes the interleaved rotation (GLM-5); a file's `rope_interleave: false` is a warning.
  kDeepseek,
};

// Which layers differ, and how the architecture names them when the file has no layer_types.
enum class LayerRule {
  kNone,
  kAlternating,     // Gemma 2: layer i sliding_attention iff (i+1) % 2 != 0
  kSlidingPattern,  // Gemma 3, Cohere 2: full_attention iff (i+1) % sliding_window_pattern == 0
  kGlobalEveryN,    // ModernBERT: full_attention iff i % global_attn_every_n_layers == 0
  kNoRopeLayers,    // Llama 4, SmolLM 3: no_rope_layers[i] == 0 (or every Nth) has no RoPE
};

// Where the architecture multiplies q by a per-position scale besides the rotation (reported as
// TemperatureTuning, applied by nobody in posenc).
enum class QScale {
  kNone,
  // Llama 4: attn_temperature_tuning (default true), floor_scale (8192), attn_scale (0.1) scale
  // q on the layers without RoPE, at p + 1.
  kLlama4NoPE,
  // Ministral 3 / Mistral 4: rope_parameters.llama_4_scaling_beta with the dict's
  // original_max_position_embeddings scale q after the rotation on every layer, at p.
  kLlama4ScalingBeta,
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
  QScale q_scale = QScale::kNone;
  // Whether the attention class multiplies its softmax scale by YaRN's mscale(s, mscale_all_dim)^2
  // (DeepseekV3Attention and the files posenc has no row for); false where the class keeps
  // head_dim^-0.5 although its YaRN dict has mscale_all_dim (Ministral 3, Mistral 4).
  bool softmax_mscale = true;
  // The M-RoPE layout the modeling code applies to mrope_section when the file has no
  // mrope_interleaved (Qwen3-VL: interleaved; ERNIE-4.5-VL: alternating).
  std::optional<kernels::MropeLayout> mrope_layout;
};

// The row whose model_types include `model_type`, or null.
const Family* FindFamily(absl::string_view model_type);

// The generic row: an absent or unknown model_type.
const Family& GenericFamily();

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_ARCHITECTURES_H_
