// ApplyRope: rotates q (and k) in place by the RoPE of each token's position (config.h has the
// formula), NEOX or GPT-J pairs, partial rotary (channels past rotary_dim pass through), inverse,
// GQA/MQA (k may have fewer heads), layouts BSHD [B,S,H,D], BHSD [B,H,S,D] and packed THD [T,H,D].
// Padding tokens (attention_mask 0) pass through unchanged.
//
// Use: PlanApplyRope -> put q (and k) where the result goes -> RunApplyRope. The plan carries
// plain strides so that no backend switches on the layout (a CUDA launch takes them as they are).
// Implementations: rope/reference.cc, rope/cpu.cc (+ rope/apply_rope_simd.cc).
#ifndef POSENC_KERNELS_ROPE_APPLY_ROPE_H_
#define POSENC_KERNELS_ROPE_APPLY_ROPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/rope/config.h"
#include "kernels/rope/rope_cache.h"

namespace posenc::kernels {

enum class TensorLayout { kBSHD, kBHSD, kTHD };

struct ApplyRopeArgs {
  RopeConfig config;  // head_dim 0: q's last dimension
  TensorLayout layout = TensorLayout::kBSHD;
  ConstTensorView q;
  ConstTensorView k;       // k.data null: q only
  PositionSpec positions;  // BSHD/BHSD: [batch, seq] kinds; THD: packed kinds
  // The wire field q comes from, for errors and plan.q's name (RerotateKeys plans its k as q).
  absl::string_view q_field = "q";
};

// Element strides of a q or k tensor: head h of token (b, s) starts at element
// b*batch + s*seq + h*head, and its head_dim channels are contiguous.
struct HeadStrides {
  int64_t batch = 0, seq = 0, head = 0;
};

struct ApplyRopePlan {
  RopeConfig config;  // validated, head_dim filled in
  PositionPlan positions;
  DType dtype = DType::kFloat32;  // of q and k
  int64_t batch = 1, seq = 1;     // token t is (t / seq, t % seq); THD: batch 1, seq T
  int64_t tokens = 1;             // batch * seq
  int64_t head_dim = 0, rotary_dim = 0;
  int64_t q_heads = 0, k_heads = 0;  // k_heads 0 without k
  HeadStrides q_strides, k_strides;
  OutputSpec q, k;      // q's and k's dtype and shape (k only when k_heads > 0)
  OutputSpec inv_freq;  // the derived frequencies a response reports: FLOAT64 [rotary_dim/2]

  bool has_k() const { return k_heads > 0; }
  // Element offset of head 0 of token t.
  static int64_t TokenBase(const HeadStrides& strides, int64_t seq, int64_t t) {
    return (t / seq) * strides.batch + (t % seq) * strides.seq;
  }
};

absl::StatusOr<ApplyRopePlan> PlanApplyRope(ApplyRopeArgs args);

// Rotates q and k (plan.q / plan.k's dtype and shape; k.data null when the plan has no k) in
// place; frequencies from `cache` (null: computed).
absl::StatusOr<RopeRunInfo> RunApplyRope(const Backend& backend, const ApplyRopePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& q,
                                         const TensorView& k);

// A tensor's bytes in order, in any number of pieces: e.g. as they came off the wire, in the
// received message's slices.
using BytePieces = absl::Span<const absl::Span<char>>;

// RunApplyRope for q and k whose bytes are in pieces (`q`, and `k`, empty when the plan has no
// k), rotated in place there: a block of whole tokens at a time is gathered into scratch that
// stays in cache, rotated and put back (one pass over the pieces' memory, about 256 KiB of
// scratch). INVALID_ARGUMENT when the pieces do not hold exactly the planned bytes;
// FAILED_PRECONDITION on a device backend (reads_device_memory: it needs the tensors whole).
absl::StatusOr<RopeRunInfo> RunApplyRopeInPieces(const Backend& backend, const ApplyRopePlan& plan,
                                                 RopeFrequencyCache* cache, BytePieces q,
                                                 BytePieces k);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ROPE_APPLY_ROPE_H_
