// RopeCache: the cos/sin tables of RoPE, cos = m*cos(p*omega_j), sin = m*sin(p*omega_j)
// (inverse: 1/m and -sin), in one of these column layouts:
//   COMPACT [grid..., d/2]; NEOX [grid..., d] = cat(f, f); GPTJ [grid..., d], each f twice;
//   one table of both (the engines' caches):
//   FUSED_COS_SIN [grid..., d] = cat(cos, sin) (vLLM / FlashInfer / SGLang's cos_sin_cache);
//   COMPLEX [grid..., d/2, 2] = (cos, sin) pairs (Meta's and Pixtral's freqs_cis as real view).
// Padding tokens (attention_mask 0) get cos = m, sin = 0 (position 0).
//
// Use: PlanRopeCache -> allocate plan.cos, plan.sin -> RunRopeCache.
// Implementations: rope/reference.cc, rope/cpu.cc.
#ifndef POSENC_KERNELS_ROPE_ROPE_CACHE_H_
#define POSENC_KERNELS_ROPE_ROPE_CACHE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/rope/config.h"

namespace posenc::kernels {

class Backend;
class RopeFrequencyCache;

enum class RopeCacheLayout { kCompact, kNeox, kGptj, kFusedCosSin, kComplex };

struct RopeCacheArgs {
  RopeConfig config;  // head_dim required
  RopeCacheLayout layout = RopeCacheLayout::kCompact;
  PositionSpec positions;  // a table: range, ids (M-RoPE: [3, ...]), cu_seqlens, attention_mask
  DType output_dtype = DType::kFloat32;
};

struct RopeCachePlan {
  RopeConfig config;  // validated
  RopeCacheLayout layout = RopeCacheLayout::kCompact;
  PositionPlan positions;
  int64_t width = 0;  // columns: d/2 (COMPACT, FUSED_COS_SIN, COMPLEX: of each half) or d
  // cos and sin; FUSED_COS_SIN and COMPLEX: cos is the one table ("cos_sin" or "freqs_cis"),
  // sin is unused.
  OutputSpec cos, sin;
  OutputSpec inv_freq;  // the derived frequencies a response reports: FLOAT64 [d/2]

  // One table of cos and sin (FUSED_COS_SIN, COMPLEX).
  bool fused() const {
    return layout == RopeCacheLayout::kFusedCosSin || layout == RopeCacheLayout::kComplex;
  }
  // Host bytes the run holds beside the outputs: a one-table layout's COMPACT cos and sin of
  // one chunk of tokens (at most 512 KiB each, whatever the table's size); 0 otherwise.
  int64_t ScratchBytes() const;
};

absl::StatusOr<RopeCachePlan> PlanRopeCache(RopeCacheArgs args);

// What a RoPE run used: the frequencies (for the response's derived values) and whether they
// came from the cache.
struct RopeRunInfo {
  std::shared_ptr<const RopeFrequencies> frequencies;
  bool cache_hit = false;
};

// What a RoPE op's run needs before it calls the backend: the resolved positions and the
// frequencies of the plan's (validated) config for them, from `cache` when given (else
// computed; the calling thread's cancellation is checked first). RunRopeCache and RunApplyRope
// start with it (so does a benchmark that times the backend alone) and end with
// FinishRopeRun, which stores newly computed frequencies only once the call succeeded.
struct RopeRunInputs {
  ResolvedPositions positions;
  RopeRunInfo info;
  std::string cache_key;  // empty without a cache
};
absl::StatusOr<RopeRunInputs> PrepareRopeRun(const PositionPlan& positions,
                                             const RopeConfig& config, RopeFrequencyCache* cache);
// The same for positions resolved by the caller; the frequencies are those of a call whose
// largest position is `max_position` (RerotateKeys: the largest target position).
absl::StatusOr<RopeRunInputs> PrepareRopeRun(ResolvedPositions positions, int64_t max_position,
                                             const RopeConfig& config, RopeFrequencyCache* cache);
RopeRunInfo FinishRopeRun(RopeRunInputs in, RopeFrequencyCache* cache);

// PrepareRopeRun, then `call(frequencies, positions)` (the backend), then FinishRopeRun.
template <typename Call>
absl::StatusOr<RopeRunInfo> RunWithFrequencies(const PositionPlan& positions,
                                               const RopeConfig& config, RopeFrequencyCache* cache,
                                               Call call) {
  absl::StatusOr<RopeRunInputs> in = PrepareRopeRun(positions, config, cache);
  if (!in.ok()) return in.status();
  if (absl::Status s = call(*in->info.frequencies, in->positions); !s.ok()) return s;
  return FinishRopeRun(*std::move(in), cache);
}

// Resolves the positions, takes the frequencies from `cache` (null: computes them) and fills
// cos and sin (plan.cos / plan.sin's dtype and shape; a fused plan: cos only, sin empty). The
// backends compute COMPACT tables; the fused layouts are put together from them here, chunk by
// chunk of tokens (plan.ScratchBytes() of scratch).
absl::StatusOr<RopeRunInfo> RunRopeCache(const Backend& backend, const RopeCachePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& cos,
                                         const TensorView& sin);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ROPE_ROPE_CACHE_H_
