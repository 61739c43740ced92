// Rotary position embedding: the configuration shared by RopeCache and ApplyRope, every scaling
// type's frequencies, and their derived values.
//
//   omega_j = b^(-2j/d) (then scaled), theta = p * omega_j, j = 0 .. d/2-1, d = rotary_dim.
//   freq_factors f (optional, GGUF's rope_freqs): omega_j / f_j, applied after the scaling
//     type's own frequencies (the division in extended precision, like every omega_j).
//   NEOX pairs (x_j, x_{j+d/2}):  [x0 .. x(d/2-1) | x(d/2) .. x(d-1) | pass-through]
//   GPTJ pairs (x_{2j}, x_{2j+1}): [x0 x1 | x2 x3 | ... | pass-through]
//   DEEPSEEK: GPTJ pairs in, NEOX order out (DeepSeek V3's rope_interleave: the rotary channels
//     are de-interleaved, y = [x0 x2 x4 .. | x1 x3 x5 ..], then rotated as NEOX; the same dot
//     products as GPTJ, the output a fixed permutation of it). Inverse: rotate, re-interleave.
//   x'_a = m*(x_a cos - x_b sin),  x'_b = m*(x_b cos + x_a sin)   (m: attention factor)
//   inverse: rotate by -theta and divide by m.
//
// Scaling types (Hugging Face's rope_type): linear, ntk, dynamic, yarn, llama3, longrope,
// proportional; dynamic with alpha (Hunyuan's DynamicNTKAlpha): b' = b * alpha^(d/(d-2)), fixed
// (no seq_len-dependent growth; factor, if given, is not read).
//
// Position axes (M-RoPE, 2-D RoPE): rotary frequency slot j (pair j) rotates by
//   theta_j = p[axis_j] * omega[source_j]
// where p is the token's position on each of A axes (positions as ids [A, ...]) and omega the
// config's frequencies (after scaling and freq_factors). The map (axis_j, source_j) comes from
// mrope_layout (presets below, over mrope_section) or an explicit frequency_axes (source_j = j):
//   CONTIGUOUS   (Qwen2/2.5-VL, GLM-4V, 2..4 axes): slot j reads the axis whose section holds j.
//   INTERLEAVED  (Qwen3-VL, [s_t, s_h, s_w]): h if j%3 == 1 and j < 3*s_h, w if j%3 == 2 and
//                j < 3*s_w, else t.
//   ALTERNATING  (ERNIE-4.5-VL, [s_h, s_w, s_t], s_h == s_w): slot 2i: h at frequency i, slot
//                2i+1: w at frequency s_h + i (i < s_h), slots >= 2*s_h: t at their own frequency.
//   VISION_2D    (Qwen2/2.5/3-VL and GLM-4V vision towers, Llama 4 vision; 2 axes): slot j < d/4:
//                axis 0 at frequency 2j; slot j >= d/4: axis 1 at frequency 2(j - d/4) (each axis
//                the frequencies b^(-2i/(d/2)) of a half-width head).
//   VISION_2D_EVEN_ODD (Pixtral; 2 axes): slot j < d/4: axis 0 at frequency 2j; slot j >= d/4:
//                axis 1 at frequency 2(j - d/4) + 1. A NoPE config (a layer without rotary
//                embedding, Llama 4's every
// fourth) has zero frequencies: RopeCache gives cos 1, sin 0 and ApplyRope passes q/k through
// untouched.
#ifndef POSENC_KERNELS_ROPE_CONFIG_H_
#define POSENC_KERNELS_ROPE_CONFIG_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace posenc::kernels {

// The largest head_dim (and so rotary_dim) a RoPE config may have. Released models use 64 .. 256;
// the cap bounds what one request can make the server compute and cache (d/2 frequencies).
inline constexpr int64_t kMaxRopeHeadDim = int64_t{1} << 16;

enum class RopeStyle { kNeox, kGptj, kDeepseek };
enum class RopeScalingType {
  kDefault,
  kLinear,
  kNtk,
  kDynamic,
  kYarn,
  kLlama3,
  kLongrope,
  kProportional,
};
enum class MropeLayout {
  kContiguous,
  kInterleaved,
  kAlternating,
  kVision2d,
  kVision2dEvenOdd,
};

// The most position axes a config may read (t, h, w and a fourth, as HunYuan's xdrope).
inline constexpr int kMaxPositionAxes = 4;

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kDefault;
  std::optional<double> factor;
  std::optional<int64_t> original_max_position_embeddings;
  std::optional<double> beta_fast;
  std::optional<double> beta_slow;
  std::optional<bool> truncate;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<double> attention_factor;
  std::optional<double> low_freq_factor;
  std::optional<double> high_freq_factor;
  std::vector<double> long_factor;
  std::vector<double> short_factor;
  // proportional (Gemma 4): the fraction p of the frequencies that rotate; omega_j = b^(-2j/d)
  // for j < floor(p*d/2), 0 after (those channels pass through), all divided by factor.
  std::optional<double> partial_rotary_factor;
  // dynamic with alpha (Hunyuan): b' = b * alpha^(d/(d-2)) whatever the sequence length; then
  // factor and max_position_embeddings are not read. Finite, > 0.
  std::optional<double> alpha;
};

struct RopeConfig {
  int64_t head_dim = 0;
  std::optional<int64_t> rotary_dim;  // default head_dim
  double base = 10000.0;
  RopeStyle style = RopeStyle::kNeox;
  RopeScaling scaling;
  std::optional<int64_t> max_position_embeddings;
  // Sections of the frequencies per position axis (M-RoPE): 2..4 entries summing to d/2 for
  // CONTIGUOUS, 3 for INTERLEAVED and ALTERNATING; empty or [d/4, d/4] for the VISION layouts.
  // Empty with CONTIGUOUS/INTERLEAVED/ALTERNATING and no frequency_axes: one position per token.
  std::vector<int64_t> mrope_section;
  MropeLayout mrope_layout = MropeLayout::kContiguous;
  // The position axis of every frequency slot, d/2 entries in [0, kMaxPositionAxes) (each slot
  // at its own frequency); overrides the layout; mrope_section must then be empty.
  std::vector<int64_t> frequency_axes;
  bool inverse = false;
  bool apply_attention_factor = true;
  std::optional<int64_t> seq_len;
  // Per-frequency divisors f_j (GGUF's rope_freqs), d/2 entries, finite, > 0; empty: none.
  // omega_j / f_j after the scaling type's frequencies.
  std::vector<double> freq_factors;
  // A layer without rotary embedding (NoPE): every frequency 0, ApplyRope leaves q/k as they are.
  bool nope = false;
  // Set when the config was read from a Hugging Face config.json that gives the head dim: its
  // validation errors are then reported against the JSON ("config.hf_config_json: ...").
  bool from_hf_config_json = false;
};

// Every field of a RopeConfig and its RopeScaling, in one list: `visit(name, field)` for each,
// name as on the wire ("scaling.factor"). The frequency cache's key is built from it, so a field
// missing here would be a silent wrong cache hit: tests/server/rope_config_fields_test.cc checks
// that every field of posenc.v1.RopeConfig changes the key (and reaches the client's struct).
// `Config` is RopeConfig or const RopeConfig.
template <typename Config, typename Visit>
void ForEachRopeField(Config& c, Visit&& visit) {
  visit("head_dim", c.head_dim);
  visit("rotary_dim", c.rotary_dim);
  visit("base", c.base);
  visit("style", c.style);
  visit("scaling.type", c.scaling.type);
  visit("scaling.factor", c.scaling.factor);
  visit("scaling.original_max_position_embeddings", c.scaling.original_max_position_embeddings);
  visit("scaling.beta_fast", c.scaling.beta_fast);
  visit("scaling.beta_slow", c.scaling.beta_slow);
  visit("scaling.truncate", c.scaling.truncate);
  visit("scaling.mscale", c.scaling.mscale);
  visit("scaling.mscale_all_dim", c.scaling.mscale_all_dim);
  visit("scaling.attention_factor", c.scaling.attention_factor);
  visit("scaling.low_freq_factor", c.scaling.low_freq_factor);
  visit("scaling.high_freq_factor", c.scaling.high_freq_factor);
  visit("scaling.long_factor", c.scaling.long_factor);
  visit("scaling.short_factor", c.scaling.short_factor);
  visit("scaling.partial_rotary_factor", c.scaling.partial_rotary_factor);
  visit("scaling.alpha", c.scaling.alpha);
  visit("max_position_embeddings", c.max_position_embeddings);
  visit("mrope_section", c.mrope_section);
  visit("mrope_layout", c.mrope_layout);
  visit("frequency_axes", c.frequency_axes);
  visit("inverse", c.inverse);
  visit("apply_attention_factor", c.apply_attention_factor);
  visit("seq_len", c.seq_len);
  visit("freq_factors", c.freq_factors);
  visit("nope", c.nope);
  visit("from_hf_config_json", c.from_hf_config_json);
}

// The wire's names in lowercase (posenc.proto; tests/server/vocabulary_test.cc checks them).
absl::string_view RopeScalingTypeName(RopeScalingType type);  // "default", "linear", ...
absl::string_view RopeStyleName(RopeStyle style);             // "neox", "gptj", "deepseek"

// Checks every field (head_dim > 0, even rotary_dim <= head_dim, base finite > 0 != 1, keys
// valid for the scaling type, required keys present, factor > 0, mrope sections summing to
// d/2, ...). Field names are prefixed with "config.".
absl::Status ValidateRopeConfig(const RopeConfig& config);

// The frequencies and derived values of a config.
struct RopeFrequencies {
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  std::vector<long double> inv_freq;  // omega_j, d/2 entries, extended precision
  double attention_factor = 1.0;      // m of the scaling
  bool attention_factor_applied = true;
  double effective_base = 0.0;  // b' (ntk, dynamic) or b
  double factor = 1.0;          // s after defaults
  int64_t seq_len = 0;          // used by dynamic/longrope, else 0
  double yarn_low = 0.0, yarn_high = 0.0;
  bool longrope_long_factors = false;
  bool nope = false;  // the config's nope: inv_freq all 0

  // The multiplier of cos and sin: m when applied, else 1.
  double CosSinScale() const { return attention_factor_applied ? attention_factor : 1.0; }
};

// `max_position` is the largest position of the request (-1 if none); seq_len defaults to
// max_position + 1. Validates the config first.
absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeConfig& config,
                                                       int64_t max_position);
// The same for a config that has passed ValidateRopeConfig (every plan's config has): the plans'
// runs and the frequency cache call this, so a config is validated once per call.
RopeFrequencies ComputeValidRopeFrequencies(const RopeConfig& config, int64_t max_position);

// The original context L0 of a scaling: scaling.original_max_position_embeddings, else
// max_position_embeddings, else 0. LongRoPE uses long_factor when seq_len > L0.
int64_t RopeOriginalContext(const RopeConfig& config);

// The multiplier of the attention softmax scale (1/sqrt(qk head dim)) that the model applies
// besides the rotation, where the config decides it: DeepSeek-style YaRN (mscale_all_dim set and
// != 0) multiplies it by mscale(s, mscale_all_dim)^2, mscale(s, k) = 0.1 * k * ln(s) + 1 for
// s > 1, else 1 (transformers' DeepseekV3Attention; s is the factor). Empty otherwise (no known
// multiplier).
std::optional<double> RopeSoftmaxScaleMultiplier(const RopeConfig& config);

// The per-position multiplier of q some models apply besides the rotation (posenc.proto
// AttentionTemperatureTuning: Llama 4's attn_temperature_tuning, offset 1; Ministral 3 /
// Mistral 4's llama_4_scaling_beta, offset 0), at absolute position p:
//   log(floor((p + position_offset) / floor_scale) + 1) * attn_scale + 1   (natural log).
// The floor is exact for integral p + offset and floor_scale below 2^53 (a correctly rounded
// quotient of integers floors to the integer quotient). floor_scale > 0.
double AttentionTemperatureScale(double floor_scale, double attn_scale, double position_offset,
                                 int64_t position);

// The number of position axes the config reads: 1 without M-RoPE or 2-D RoPE, else 2..4
// (positions are then ids [axes, ...]).
int RopePositionAxes(const RopeConfig& config);

// Which position axis frequency slot j reads (0 = t, 1 = h, 2 = w for M-RoPE; 0 = first, 1 =
// second coordinate for the VISION layouts); 0 with one axis.
int MropeComponent(const RopeConfig& config, int64_t j);

// Which of the config's frequencies slot j rotates by (j, except for ALTERNATING and VISION).
int64_t FrequencySource(const RopeConfig& config, int64_t j);

// The mrope_section a (validated) config's slots amount to: the given one, or the count of slots
// per axis for the VISION layouts and frequency_axes (the backends read per-axis positions
// when mrope_section is non-empty). Plans call it once.
void NormalizePositionAxes(RopeConfig* config);

absl::string_view MropeLayoutName(MropeLayout layout);  // "contiguous", "interleaved", ...

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ROPE_CONFIG_H_
