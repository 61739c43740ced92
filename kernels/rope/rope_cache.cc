// RopeCache: the plan (every check of the op) and the run.
#include "kernels/rope/rope_cache.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/cancellation.h"
#include "kernels/common/status.h"
#include "kernels/rope/frequency_cache.h"

namespace posenc::kernels {

absl::StatusOr<RopeCachePlan> PlanRopeCache(RopeCacheArgs args) {
  POSENC_RETURN_IF_ERROR(ValidateRopeConfig(args.config));
  POSENC_RETURN_IF_ERROR(CheckFloatOutputDType(args.output_dtype));
  RopeCachePlan plan;
  TokenGrid grid;
  grid.components = RopePositionAxes(args.config);
  POSENC_ASSIGN_OR_RETURN(plan.positions, PlanPositions(std::move(args.positions), grid));
  const int64_t d = args.config.rotary_dim.value_or(args.config.head_dim);
  plan.width = args.layout == RopeCacheLayout::kCompact ? d / 2 : d;
  plan.layout = args.layout;
  NormalizePositionAxes(&args.config);
  plan.config = std::move(args.config);
  plan.cos = {"cos", args.output_dtype, plan.positions.shape};
  plan.cos.shape.push_back(plan.width);
  plan.sin = plan.cos;
  plan.sin.name = "sin";
  plan.inv_freq = {"derived.inv_freq", DType::kFloat64, {d / 2}};
  return plan;
}

absl::StatusOr<RopeRunInputs> PrepareRopeRun(const PositionPlan& positions,
                                             const RopeConfig& config, RopeFrequencyCache* cache) {
  POSENC_ASSIGN_OR_RETURN(ResolvedPositions resolved, ResolvePositions(positions));
  const int64_t max_position = resolved.max_position;
  return PrepareRopeRun(std::move(resolved), max_position, config, cache);
}

absl::StatusOr<RopeRunInputs> PrepareRopeRun(ResolvedPositions positions, int64_t max_position,
                                             const RopeConfig& config, RopeFrequencyCache* cache) {
  RopeRunInputs in;
  in.positions = std::move(positions);
  if (cache != nullptr) {
    in.cache_key = RopeFrequencyCache::Key(config, max_position);
    in.info.frequencies = cache->Find(in.cache_key);
    in.info.cache_hit = in.info.frequencies != nullptr;
  }
  if (in.info.frequencies == nullptr) {
    if (const Cancellation* cancel = CurrentCancellation(); cancel != nullptr) {
      POSENC_RETURN_IF_ERROR(cancel->Check());
    }
    in.info.frequencies =
        std::make_shared<const RopeFrequencies>(ComputeValidRopeFrequencies(config, max_position));
  }
  return in;
}

RopeRunInfo FinishRopeRun(RopeRunInputs in, RopeFrequencyCache* cache) {
  if (cache != nullptr && !in.info.cache_hit) {
    cache->Insert(std::move(in.cache_key), in.info.frequencies);
  }
  return std::move(in.info);
}

absl::StatusOr<RopeRunInfo> RunRopeCache(const Backend& backend, const RopeCachePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& cos,
                                         const TensorView& sin) {
  return RunWithFrequencies(plan.positions, plan.config, cache,
                            [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) {
                              return backend.RopeCache(plan, freqs, positions, cos, sin);
                            });
}

}  // namespace posenc::kernels
