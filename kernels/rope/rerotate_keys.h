// RerotateKeys: moves keys already rotated at positions p to positions p + delta, in place
// (context shift, StreamingLLM-style eviction, SnapKV): for every frequency slot j,
//
//   k' = R(delta[axis_j] * omega_j) k        (R the slot's rotation; no attention factor m: the
//                                              key carries its m from the first rotation)
//
// one rotation by the exact phase of delta * omega_j (double-double omega_j, Cody-Waite
// reduction, as every RoPE table; |delta| < 2^31), never a chain of shifts. Equal, up to the
// rounding of the one rotation, to rotating the unrotated key at p + delta directly. Pairing as
// ApplyRope (NEOX, GPTJ; DEEPSEEK keys are stored NEOX-ordered after their rotation and move as
// NEOX), partial rotary (channels past rotary_dim untouched), M-RoPE and 2-D layouts with a delta
// per axis. Frequencies: the config's at the largest target position (dynamic NTK and LongRoPE
// read seq_len = config.seq_len, else that + 1): the keys must have been rotated with those
// frequencies (README, "KV re-rotation"). Padding tokens (attention_mask 0) pass through.
//
//   delta: INT32/INT64, one per call [], per sequence [B] (BSHD/BHSD; THD with cu_seqlens:
//   [sequences]) or per token [B, S] / [T]; with A > 1 position axes a leading [A] (a delta per
//   axis). Every target p + delta must lie in [0, 2^31).
//
// Use: PlanRerotateKeys -> put k where the result goes -> RunRerotateKeys. It runs on every
// backend through Backend::ApplyRope: the positive deltas as a rotation, the negative ones as
// the inverse rotation by |delta| (a slot whose axis does not move rotates by exactly 0).
#ifndef POSENC_KERNELS_ROPE_REROTATE_KEYS_H_
#define POSENC_KERNELS_ROPE_REROTATE_KEYS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/rope/apply_rope.h"
#include "kernels/rope/config.h"
#include "kernels/rope/rope_cache.h"

namespace posenc::kernels {

struct RerotateKeysArgs {
  RopeConfig config;  // head_dim 0: k's last dimension; inverse must be false
  TensorLayout layout = TensorLayout::kBSHD;
  ConstTensorView k;
  PositionSpec positions;  // where the keys are now (ApplyRope's kinds)
  ConstTensorView delta;
};

struct RerotateKeysPlan {
  ApplyRopePlan rope;  // k as the rotated tensor; no attention factor, DEEPSEEK as NEOX
  enum class Per { kCall, kSequence, kToken };
  Per per = Per::kCall;
  int64_t axes = 1;
  ConstTensorView delta;
  std::vector<int64_t> cu_seqlens;  // THD per sequence
  OutputSpec k;                     // k's dtype and shape
};

absl::StatusOr<RerotateKeysPlan> PlanRerotateKeys(RerotateKeysArgs args);

// Rotates k (plan.k's dtype and shape) in place; frequencies from `cache` (null: computed).
absl::StatusOr<RopeRunInfo> RunRerotateKeys(const Backend& backend, const RerotateKeysPlan& plan,
                                            RopeFrequencyCache* cache, const TensorView& k);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ROPE_REROTATE_KEYS_H_
