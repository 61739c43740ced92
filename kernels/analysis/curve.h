// What the curves of the encoding analysis share (decay.cc, extrapolation.cc, similarity.cc): a
// long axis (distances, positions) grouped into a bounded number of bins, each value of a curve
// the mean over its bin; seeded Gaussian samples.
//
// Thread-safety: plain values and pure functions; thread-safe.
#ifndef POSENC_KERNELS_ANALYSIS_CURVE_H_
#define POSENC_KERNELS_ANALYSIS_CURVE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/analysis/analysis.h"

namespace posenc::kernels {

// The most bins (points of a curve, cells of a matrix axis) MakeBins makes.
inline constexpr int64_t kMaxAnalysisPoints = 65536;
// The points of the DECAY and EXTRAPOLATION curves: log-spaced bins over the range.
inline constexpr int64_t kCurvePoints = 512;
// The most random samples (q/k pairs, token embeddings) DECAY and SIMILARITY draw or take
// (`samples` or embeddings rows beyond it: INVALID_ARGUMENT).
inline constexpr int64_t kMaxAnalysisSamples = 4096;

// Consecutive integers start .. start+count-1 grouped into at most `points` bins, each a run of
// consecutive values: bin b holds first[b] .. last[b]. LINEAR: equal widths (the last may be
// shorter). LOG: the first value alone, then widths growing geometrically (bins of one value
// while a geometric step is < 1, so short ranges keep every value).
enum class BinSpacing { kLinear, kLog };

struct Bins {
  std::vector<int64_t> first, last;

  int64_t size() const { return static_cast<int64_t>(first.size()); }
  // The centre of bin b, (first + last) / 2.
  double Centre(int64_t b) const { return 0.5 * static_cast<double>(first[b] + last[b]); }
};

// count >= 1, points in 1 .. kMaxAnalysisPoints (`field` names it in the error).
absl::StatusOr<Bins> MakeBins(int64_t start, int64_t count, int64_t points, BinSpacing spacing,
                              absl::string_view field);

// Sums per bin of values that arrive in increasing order of the binned integer (one Add per
// value, any number of series), divided by the bin's count at the end.
class BinnedMeans {
 public:
  BinnedMeans(const Bins& bins, int series);
  // Adds `values[s]` of every series s at integer `at` (never smaller than the last one added).
  void Add(int64_t at, const double* values);
  // The mean of series s in each bin (NaN for a bin nothing was added to).
  std::vector<double> Means(int series) const;

 private:
  const Bins& bins_;
  int series_;
  int64_t bin_ = 0;
  std::vector<double> sums_;
  std::vector<int64_t> counts_;
};

// A source of rows with AnalysisRows's signature (AnalysisRows, T5RowsAfter).
using AnalysisRowsFn = absl::Status (*)(const Backend&, const AnalysisPlan&, int64_t, int64_t,
                                        std::vector<double>*, DType);

// What ForEachRowChunk computes for each chunk.
struct RowChunkOptions {
  int64_t halo = 0;                     // rows of the positions after the chunk too (< end)
  DType dtype = DType::kFloat64;        // the precision the op computes the rows in
  AnalysisRowsFn rows = &AnalysisRows;  // where the rows come from
};

// Calls fn(c, n, rows) for the chunks [c, c+n) of [first, end) (plan.chunk_rows each), rows the
// encodings `options.rows` gives for c .. min(c + n + halo, end) - 1 ([m, plan.width] float64);
// checks the calling thread's cancellation before each chunk. Stops at the first error of the
// rows or fn.
absl::Status ForEachRowChunk(
    const Backend& backend, const AnalysisPlan& plan, int64_t first, int64_t end,
    const std::function<absl::Status(int64_t, int64_t, const std::vector<double>&)>& fn,
    const RowChunkOptions& options = {});

// n standard normal samples from `seed` (Box-Muller over a 64-bit Mersenne Twister): the same on
// every platform and standard library.
std::vector<double> GaussianSamples(uint64_t seed, int64_t n);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ANALYSIS_CURVE_H_
