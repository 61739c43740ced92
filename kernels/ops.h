// The operations of posenc: parameters, formulas, layouts, validation and output shapes.
//
// Each op is defined once here. A Plan* function validates parameters and input shapes and
// returns the output shape(s) without allocating anything proportional to the output, so a
// caller can check its limits before it allocates. The compute entry points live on Backend
// (backend.h); the scalar math shared by every backend (ALiBi slopes, T5 buckets, RoPE
// frequencies) lives here as plain functions.
//
// Errors are absl::Status: INVALID_ARGUMENT names the request field (as on the wire, e.g.
// "config.rotary_dim"), the expected and the received value; OUT_OF_RANGE for a position past a
// learned table. Nothing here throws.
#ifndef POSENC_KERNELS_OPS_H_
#define POSENC_KERNELS_OPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

// ============================================================================================
// Sinusoidal absolute encoding.
//
//   VASWANI: omega_k = b^(-2k/D)
//   T2T:     omega_k = b^(-k / max(floor(D/2)-1, 1)),  k < floor(D/2)
//   INTERLEAVED: PE[p,2k] = sin(p*omega_k), PE[p,2k+1] = cos(p*omega_k)
//   CONCAT:      PE[p,:] = [sin(p*omega_0) .. sin(p*omega_{h-1}) | cos(p*omega_0) .. ], h=floor(D/2)
//   Odd D: INTERLEAVED+VASWANI ends with sin(p*omega_{floor(D/2)}); otherwise the last column
//   is zero.
// ============================================================================================
enum class SinusoidalLayout { kInterleaved, kConcat };
enum class FreqScheme { kDefault, kVaswani, kT2t };  // kDefault: VASWANI/INTERLEAVED, T2T/CONCAT

struct SinusoidalParams {
  int64_t dim = 0;
  double base = 10000.0;
  SinusoidalLayout layout = SinusoidalLayout::kInterleaved;
  FreqScheme scheme = FreqScheme::kDefault;
};

// `field` is the wire prefix of the params ("params", "sinusoidal").
absl::Status ValidateSinusoidal(const SinusoidalParams& params, absl::string_view field);
// The resolved scheme (never kDefault).
FreqScheme EffectiveFreqScheme(const SinusoidalParams& params);
// omega_k in extended precision, k = 0 .. number of frequencies - 1 (ceil(D/2) for
// INTERLEAVED+VASWANI, floor(D/2) otherwise).
std::vector<long double> SinusoidalFrequencies(const SinusoidalParams& params);

// Output [grid..., D].
absl::StatusOr<Shape> PlanSinusoidal(const SinusoidalParams& params, const PositionSpec& positions,
                                     GridRequest* grid);

// ============================================================================================
// AddPositionEncoding: y = x*scale + PE (ADD) or [x*scale ; PE] (CONCAT), x [B,T,D] or [T,D].
// PE is sinusoidal (optionally fairseq-shifted by padding_idx+1) or rows of a learned table
// E[max_pos, D_pe] (position p reads row p + table_offset; past the end: OUT_OF_RANGE).
// Padding tokens (attention_mask 0) get a zero PE row.
// ============================================================================================
enum class Combine { kAdd, kConcat };

struct AddPositionEncodingParams {
  Combine combine = Combine::kAdd;
  double scale = 1.0;
  std::optional<SinusoidalParams> sinusoidal;  // set: sinusoidal source; else `learned`.
  ConstTensorView learned;                     // [max_pos, D_pe], float dtype
  int64_t table_offset = 0;
  std::optional<int64_t> padding_idx;          // sinusoidal only
};

// Validates and fills `grid`; returns y's shape. `x_shape` is [B,T,D] or [T,D]. A sinusoidal
// dim of 0 means D.
absl::StatusOr<Shape> PlanAddPositionEncoding(AddPositionEncodingParams& params,
                                              const Shape& x_shape, const PositionSpec& positions,
                                              GridRequest* grid);

// For backends, before writing anything (y may alias x): INTERNAL when the views do not match
// the plan; OUT_OF_RANGE naming the token, its position and the table length when a position
// reads past a learned table.
absl::Status CheckAddPositionEncodingViews(const AddPositionEncodingParams& params,
                                           const ConstTensorView& x,
                                           const ResolvedPositions& positions,
                                           const TensorView& y);

// ============================================================================================
// Rotary position embedding.
//
//   omega_j = b^(-2j/d) (then scaled), theta = p * omega_j, j = 0 .. d/2-1, d = rotary_dim.
//   NEOX pairs (x_j, x_{j+d/2}):  [x0 .. x(d/2-1) | x(d/2) .. x(d-1) | pass-through]
//   GPTJ pairs (x_{2j}, x_{2j+1}): [x0 x1 | x2 x3 | ... | pass-through]
//   x'_a = m*(x_a cos - x_b sin),  x'_b = m*(x_b cos + x_a sin)   (m: attention factor)
//   inverse: rotate by -theta and divide by m.
// ============================================================================================
enum class RopeStyle { kNeox, kGptj };
enum class RopeScalingType { kDefault, kLinear, kNtk, kDynamic, kYarn, kLlama3, kLongrope };
enum class MropeLayout { kContiguous, kInterleaved };

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
};

struct RopeConfig {
  int64_t head_dim = 0;
  std::optional<int64_t> rotary_dim;  // default head_dim
  double base = 10000.0;
  RopeStyle style = RopeStyle::kNeox;
  RopeScaling scaling;
  std::optional<int64_t> max_position_embeddings;
  std::vector<int64_t> mrope_section;  // empty: no M-RoPE
  MropeLayout mrope_layout = MropeLayout::kContiguous;
  bool inverse = false;
  bool apply_attention_factor = true;
  std::optional<int64_t> seq_len;
};

absl::string_view RopeScalingTypeName(RopeScalingType type);  // "default", "linear", ...

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
  double effective_base = 0.0;        // b' (ntk, dynamic) or b
  double factor = 1.0;                // s after defaults
  int64_t seq_len = 0;                // used by dynamic/longrope, else 0
  double yarn_low = 0.0, yarn_high = 0.0;
  bool longrope_long_factors = false;

  // The multiplier of cos and sin: m when applied, else 1.
  double CosSinScale() const { return attention_factor_applied ? attention_factor : 1.0; }
};

// `max_position` is the largest position of the request (-1 if none); seq_len defaults to
// max_position + 1. Validates the config first.
absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeConfig& config,
                                                       int64_t max_position);

// M-RoPE: which position component (0=t, 1=h, 2=w) frequency j uses; 0 without M-RoPE.
int MropeComponent(const RopeConfig& config, int64_t j);

enum class RopeCacheLayout { kCompact, kNeox, kGptj };

// Output shape of cos and of sin: [grid..., d/2] or [grid..., d]. Fills `grid` (components = 3
// with M-RoPE). config.head_dim must be set.
absl::StatusOr<Shape> PlanRopeCache(const RopeConfig& config, RopeCacheLayout layout,
                                    const PositionSpec& positions, GridRequest* grid);

enum class TensorLayout { kBSHD, kBHSD, kTHD };

struct ApplyRopeDims {
  int64_t batch = 1, seq = 1, tokens = 1;  // tokens = batch*seq (or T for THD)
  int64_t q_heads = 0, k_heads = 0;        // k_heads 0 without k
  int64_t head_dim = 0;
};

// Validates q/k shapes and dtypes against the layout, fills config->head_dim when 0, and fills
// `grid`. `k_shape` null when there is no k.
absl::StatusOr<ApplyRopeDims> PlanApplyRope(RopeConfig& config, TensorLayout layout,
                                            DType q_dtype, const Shape& q_shape,
                                            const DType* k_dtype, const Shape* k_shape,
                                            const PositionSpec& positions, GridRequest* grid);

// ============================================================================================
// ALiBi.
//   slopes, n heads, c = 2^floor(log2 n), B = max_bias:
//     2^(-B*h/c) for h = 1..c, then 2^(-(B/2)*(2k-1)/c) for k = 1..n-c
//   bias[h,i,j], qpos = query_offset + i, kpos = j:
//     CAUSAL -m_h*(qpos-kpos); SYMMETRIC -m_h*|qpos-kpos|; BLOOM +m_h*kpos
//     kpos > qpos (CAUSAL, BLOOM): MASK -inf, ZERO 0, LINEAR the formula.
// ============================================================================================
absl::StatusOr<std::vector<double>> AlibiSlopes(int64_t num_heads, double max_bias = 8.0);

enum class AlibiMode { kCausal, kSymmetric, kBloom };
enum class FutureMode { kMask, kZero, kLinear };
enum class BiasForm { kFull, kCompact, kBuckets };

struct AlibiBiasParams {
  int64_t num_heads = 0, q_len = 0, k_len = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  AlibiMode mode = AlibiMode::kCausal;
  FutureMode future = FutureMode::kMask;
  double max_bias = 8.0;
  BiasForm form = BiasForm::kFull;
  // BLOOM only: INT32/INT64 [B, k_len]; key positions count real tokens (padding 0).
  ConstTensorView attention_mask;
};

// FULL: [H,q,k] ([B,H,q,k] with a mask); COMPACT: [H, q+k-1] (BLOOM: [H,k] / [B,H,k]).
absl::StatusOr<Shape> PlanAlibiBias(const AlibiBiasParams& params);

// ============================================================================================
// T5 relative bias. rp = key_pos - query_pos.
//   bidirectional: nb = num_buckets/2, bucket += nb if rp > 0, rp = |rp|;
//   unidirectional: nb = num_buckets, rp = max(-rp, 0).
//   e = nb/2; bucket += rp if rp < e else min(e + floor(ln(rp/e)/ln(max_distance/e)*(nb-e)), nb-1)
// ============================================================================================
int64_t T5Bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                 int64_t max_distance);

struct RelativeBiasParams {
  int64_t q_len = 0, k_len = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  int64_t key_offset = 0;
  bool bidirectional = true;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  BiasForm form = BiasForm::kFull;
  ConstTensorView table;  // [num_buckets, H]; unused for kBuckets
};

// FULL [H,q,k]; COMPACT [H, q+k-1]; BUCKETS [q,k] (INT32).
absl::StatusOr<Shape> PlanRelativeBias(const RelativeBiasParams& params);

// ============================================================================================
// Shaw relative embeddings: out[i,j,:] = table[clip(kpos - qpos, -K, K) + K, :].
// ============================================================================================
struct RelativeEmbeddingParams {
  int64_t q_len = 0, k_len = 0, max_relative = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  int64_t key_offset = 0;
  ConstTensorView table;  // [2K+1, D]
};

absl::StatusOr<Shape> PlanRelativeEmbedding(const RelativeEmbeddingParams& params);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_OPS_H_
