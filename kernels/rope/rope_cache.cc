// RopeCache: the plan (every check of the op) and the run.
#include "kernels/rope/rope_cache.h"

#include <algorithm>
#include <cstdint>
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

// The bytes of each COMPACT table a chunk of a one-table layout builds before it is rearranged
// into the output (RopeCachePlan::ScratchBytes: the two of them).
constexpr int64_t kOneTableChunkBytes = int64_t{512} << 10;

// Tokens a chunk of a one-table layout holds: at least 1, at most the plan's tokens.
int64_t OneTableChunkRows(const RopeCachePlan& plan) {
  const int64_t row = std::max<int64_t>(1, plan.width * DTypeSize(plan.cos.dtype));
  return std::clamp<int64_t>(kOneTableChunkBytes / row, 1,
                             std::max<int64_t>(1, plan.positions.num_tokens));
}

// Tokens [t0, t0 + n) of `all`, with the whole call's largest position (a backend's choices,
// e.g. CUDA's exact range, stay those of one call over every token).
ResolvedPositions SliceTokens(const ResolvedPositions& all, int64_t t0, int64_t n) {
  ResolvedPositions out;
  out.grid = {n};
  out.num_tokens = n;
  out.components = all.components;
  out.max_position = all.max_position;
  out.pos.reserve(static_cast<size_t>(n * all.components));
  for (int64_t c = 0; c < all.components; ++c) {
    const auto from = all.pos.begin() + c * all.num_tokens + t0;
    out.pos.insert(out.pos.end(), from, from + n);
  }
  if (!all.valid.empty()) out.valid.assign(all.valid.begin() + t0, all.valid.begin() + t0 + n);
  return out;
}

// `bytes` of cos `c` and sin `s` as (cos_j, sin_j) pairs of elements of T's size at `dst` (a
// fixed-size copy per element: the compiler makes it one load and one store).
template <typename T>
void InterleavePairs(const unsigned char* c, const unsigned char* s, size_t bytes,
                     unsigned char* dst) {
  for (size_t j = 0; j < bytes; j += sizeof(T)) {
    T cv, sv;
    std::memcpy(&cv, c + j, sizeof(T));
    std::memcpy(&sv, s + j, sizeof(T));
    std::memcpy(dst + 2 * j, &cv, sizeof(T));
    std::memcpy(dst + 2 * j + sizeof(T), &sv, sizeof(T));
  }
}

// `rows` COMPACT rows of cos `c` and sin `s` (`row` bytes each, elements of `esize`) into the
// one-table `layout` at `dst`: FUSED_COS_SIN [cos row | sin row], COMPLEX (cos_j, sin_j) pairs.
void Rearrange(RopeCacheLayout layout, const unsigned char* c, const unsigned char* s, int64_t rows,
               size_t row, size_t esize, unsigned char* dst) {
  const size_t bytes = static_cast<size_t>(rows) * row;
  if (layout == RopeCacheLayout::kComplex) {  // rows are contiguous: one run of pairs
    if (esize == 2) return InterleavePairs<uint16_t>(c, s, bytes, dst);
    if (esize == 4) return InterleavePairs<uint32_t>(c, s, bytes, dst);
    return InterleavePairs<uint64_t>(c, s, bytes, dst);
  }
  for (int64_t t = 0; t < rows; ++t, c += row, s += row, dst += 2 * row) {
    std::memcpy(dst, c, row);
    std::memcpy(dst + row, s, row);
  }
}

// A one-table layout from COMPACT cos and sin the backend computes chunk by chunk (bounded
// scratch, ScratchBytes(), whatever the table's size).
absl::Status RunOneTableChunks(const Backend& backend, const RopeCachePlan& plan,
                               const RopeFrequencies& freqs, const ResolvedPositions& all,
                               const TensorView& out) {
  RopeCachePlan compact = plan;
  compact.layout = RopeCacheLayout::kCompact;
  compact.cos = plan.sin;
  compact.cos.name = "cos";
  const int64_t chunk = OneTableChunkRows(plan);
  const auto esize = static_cast<size_t>(DTypeSize(out.dtype));
  const size_t row = static_cast<size_t>(plan.width) * esize;
  std::vector<unsigned char> c(static_cast<size_t>(std::min(chunk, all.num_tokens)) * row);
  std::vector<unsigned char> s(c.size());
  for (int64_t t0 = 0; t0 < all.num_tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, all.num_tokens - t0);
    const ResolvedPositions part = SliceTokens(all, t0, n);
    const TensorView cv{out.dtype, {n, plan.width}, c.data()};
    const TensorView sv{out.dtype, {n, plan.width}, s.data()};
    POSENC_RETURN_IF_ERROR(backend.RopeCache(compact, freqs, part, cv, sv));
    Rearrange(plan.layout, c.data(), s.data(), n, row, esize,
              static_cast<unsigned char*>(out.data) + static_cast<size_t>(t0) * 2 * row);
  }
  return absl::OkStatus();
}

}  // namespace

int64_t RopeCachePlan::ScratchBytes() const {
  if (!fused() || positions.num_tokens == 0) return 0;
  return 2 * OneTableChunkRows(*this) * width * DTypeSize(cos.dtype);
}

absl::StatusOr<RopeRunInfo> RunRopeCache(const Backend& backend, const RopeCachePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& cos,
                                         const TensorView& sin) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"cos", cos}, {"sin", sin}}));
  // The one-table layouts are rearranged on the host (RunOneTableChunks).
  if (plan.fused()) POSENC_RETURN_IF_ERROR(CheckOnHost("cos", cos));
  return RunWithFrequencies(plan.positions, plan.config, cache,
                            [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) {
                              if (plan.fused()) {
                                return RunOneTableChunks(backend, plan, freqs, positions, cos);
                              }
                              return backend.RopeCache(plan, freqs, positions, cos, sin);
                            });
}

}  // namespace posenc::kernels
