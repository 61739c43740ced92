// Reads the rotary configuration out of a Hugging Face config.json (SPEC §2.2).
//
// Keys read (all others are ignored):
//   rope_theta | rotary_emb_base                      -> base (default 10000)
//   rope_parameters | rope_scaling                    -> scaling ("type" is an alias of
//       "rope_type"; may also hold rope_theta, partial_rotary_factor, mrope_section,
//       mrope_interleaved; a dict keyed by layer type, e.g. {"full_attention": {...}}, needs
//       the request's layer_type)
//   partial_rotary_factor | rotary_pct | rotary_dim   -> rotary_dim (the first two as
//       int(head_dim * fraction), as Hugging Face computes it; rotary_dim is absolute)
//   qk_rope_head_dim | head_dim | hidden_size / num_attention_heads -> head_dim
//   max_position_embeddings                           -> max_position_embeddings
//   original_max_position_embeddings (top level)      -> overrides the nested one
//   rope_interleave: true                             -> GPTJ style
//
// Rope types: default, linear, ntk, dynamic, yarn, llama3, longrope; "mrope" (Qwen2-VL's
// legacy name) means default and "su" (early Phi-3) means longrope. Keys inside rope_scaling
// must be valid for the type (Hugging Face's lists); unknown types, invalid keys, wrong value
// types and malformed JSON are INVALID_ARGUMENT, prefixed "config.hf_config_json: " and naming
// the key.
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_HF_CONFIG_H_
#define POSENC_SERVER_HF_CONFIG_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/ops.h"

namespace posenc::server {

struct HfRopeConfig {
  // head_dim (0 when the file gives no way to derive it), rotary_dim, base, scaling,
  // max_position_embeddings and mrope_section; the other members keep their defaults.
  kernels::RopeConfig config;
  // Set when the file decides them (rope_interleave: true; mrope_interleaved present).
  std::optional<kernels::RopeStyle> style;
  std::optional<kernels::MropeLayout> mrope_layout;
};

// The largest config.json text accepted (published ones are under 100 KB) and the deepest
// nesting (they nest 3 levels): both checked before parsing, so one request's JSON tree stays
// within a few tens of MiB and a bounded stack.
inline constexpr size_t kMaxHfConfigBytes = size_t{1} << 20;
inline constexpr int kMaxHfConfigDepth = 64;

// `layer_type` selects an entry of a rope_parameters dict keyed by layer type; it must be
// empty otherwise.
absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json_text,
                                               absl::string_view layer_type);

}  // namespace posenc::server

#endif  // POSENC_SERVER_HF_CONFIG_H_
