// ALiBi (Press et al.): per-head slopes and the linear attention biases built from them.
//
//   slopes, n heads, c = 2^floor(log2 n), B = max_bias:
//     2^(-B*h/c) for h = 1..c, then 2^(-(B/2)*(2k-1)/c) for k = 1..n-c
//   bias[h,i,j], qpos = query_offset + i, kpos = j:
//     CAUSAL -m_h*(qpos-kpos); SYMMETRIC -m_h*|qpos-kpos|; BLOOM +m_h*kpos
//     kpos > qpos (CAUSAL, BLOOM): MASK -inf, ZERO 0, LINEAR the formula.
//   BLOOM with an attention_mask [B, k_len]: kpos counts the real keys before j (padding: 0).
//   COMPACT: CAUSAL/SYMMETRIC [H, q+k-1] Toeplitz generators (v[t] is the bias of j - i =
//   t - (q_len-1)); BLOOM [H, k] (or [B, H, k]) key rows.
//
// Use: PlanAlibiSlopes -> RunAlibiSlopes; PlanAlibiBias -> allocate plan.bias, plan.slopes ->
// RunAlibiBias. Implementations: bias/reference.cc, bias/cpu.cc.
#ifndef POSENC_KERNELS_BIAS_ALIBI_H_
#define POSENC_KERNELS_BIAS_ALIBI_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

class Backend;

// The slopes of `num_heads` heads (1 .. 2^24; max_bias finite > 0).
absl::StatusOr<std::vector<double>> AlibiSlopes(int64_t num_heads, double max_bias = 8.0);

struct AlibiSlopesArgs {
  int64_t num_heads = 0;
  double max_bias = 8.0;
  DType output_dtype = DType::kFloat32;
};

struct AlibiSlopesPlan {
  int64_t num_heads = 0;
  double max_bias = 8.0;
  OutputSpec slopes;  // [H]
};

absl::StatusOr<AlibiSlopesPlan> PlanAlibiSlopes(const AlibiSlopesArgs& args);
// Writes the slopes (plan.slopes' dtype and shape): scalar math, the same on every backend.
absl::Status RunAlibiSlopes(const AlibiSlopesPlan& plan, const TensorView& slopes);

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
  // BLOOM only: INT32/INT64 [B, k_len] of 0/1; key positions count real tokens (padding 0).
  ConstTensorView attention_mask;
};

using AlibiBiasArgs = ParamsArgs<AlibiBiasParams>;

struct AlibiBiasPlan {
  AlibiBiasParams params;
  int64_t query_offset = 0;  // resolved
  int64_t batch = 1;         // rows of the attention mask (1 without)
  OutputSpec bias;           // FULL [H,q,k] ([B,H,q,k] with a mask); COMPACT as above
  OutputSpec slopes;         // [H] FLOAT64

  bool masked() const { return params.attention_mask.data != nullptr; }
  // BLOOM's key position of key j in batch row b: j, or with a mask the count of real keys
  // before it (0 for padding).
  void KeyPositions(int64_t b, double* out) const;
};

// Checks every field and the mask's values (0/1) once.
absl::StatusOr<AlibiBiasPlan> PlanAlibiBias(AlibiBiasArgs args);
absl::Status RunAlibiBias(const Backend& backend, const AlibiBiasPlan& plan, const TensorView& bias,
                          const TensorView& slopes);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_BIAS_ALIBI_H_
