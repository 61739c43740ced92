// RopeCache: the plan (every check of the op) and the run.
#include "kernels/rope/rope_cache.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

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
  plan.layout = args.layout;
  const bool full = args.layout == RopeCacheLayout::kNeox || args.layout == RopeCacheLayout::kGptj;
  plan.width = full ? d : d / 2;
  NormalizePositionAxes(&args.config);
  plan.config = std::move(args.config);
  plan.cos = {"cos", args.output_dtype, plan.positions.shape};
  plan.cos.shape.push_back(plan.width);
  plan.sin = plan.cos;
  plan.sin.name = "sin";
  if (plan.layout == RopeCacheLayout::kFusedCosSin) {
    plan.cos.name = "cos_sin";
    plan.cos.shape.back() = d;
  } else if (plan.layout == RopeCacheLayout::kComplex) {
    plan.cos.name = "freqs_cis";
    plan.cos.shape.push_back(2);
  }
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

namespace {

// A fused table from the COMPACT cos and sin the backend computed: row t of FUSED_COS_SIN is
// [cos row | sin row], of COMPLEX (cos_j, sin_j) pairs.
absl::StatusOr<RopeRunInfo> RunFused(const Backend& backend, const RopeCachePlan& plan,
                                     RopeFrequencyCache* cache, const TensorView& out) {
  RopeCachePlan compact = plan;
  compact.layout = RopeCacheLayout::kCompact;
  compact.cos = plan.sin;
  compact.cos.name = "cos";
  const int64_t rows = plan.positions.num_tokens, half = plan.width;
  const auto esize = static_cast<size_t>(DTypeSize(out.dtype));
  std::vector<unsigned char> c(static_cast<size_t>(rows * half) * esize), s(c.size());
  const TensorView cv{out.dtype, compact.cos.shape, c.data()};
  const TensorView sv{out.dtype, compact.sin.shape, s.data()};
  absl::StatusOr<RopeRunInfo> info = RunRopeCache(backend, compact, cache, cv, sv);
  if (!info.ok()) return info;
  auto* dst = static_cast<unsigned char*>(out.data);
  const size_t row = static_cast<size_t>(half) * esize;
  for (int64_t t = 0; t < rows; ++t) {
    const unsigned char* ct = c.data() + t * row;
    const unsigned char* st = s.data() + t * row;
    unsigned char* o = dst + 2 * t * row;
    if (plan.layout == RopeCacheLayout::kFusedCosSin) {
      std::memcpy(o, ct, row);
      std::memcpy(o + row, st, row);
      continue;
    }
    for (int64_t j = 0; j < half; ++j) {
      std::memcpy(o + 2 * j * esize, ct + j * esize, esize);
      std::memcpy(o + (2 * j + 1) * esize, st + j * esize, esize);
    }
  }
  return info;
}

}  // namespace

absl::StatusOr<RopeRunInfo> RunRopeCache(const Backend& backend, const RopeCachePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& cos,
                                         const TensorView& sin) {
  if (plan.fused()) return RunFused(backend, plan, cache, cos);
  return RunWithFrequencies(plan.positions, plan.config, cache,
                            [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) {
                              return backend.RopeCache(plan, freqs, positions, cos, sin);
                            });
}

}  // namespace posenc::kernels
