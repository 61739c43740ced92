// Bins, binned means and seeded Gaussian samples of the encoding analysis (curve.h).
#include "kernels/analysis/curve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/cancellation.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

Bins LinearBins(int64_t start, int64_t count, int64_t points) {
  Bins bins;
  const int64_t width = (count + points - 1) / points;
  for (int64_t a = 0; a < count; a += width) {
    bins.first.push_back(start + a);
    bins.last.push_back(start + std::min(a + width, count) - 1);
  }
  return bins;
}

// Offsets 0, then edges at count^(b/(points-1)) rounded up, each at least one past the last.
Bins LogBins(int64_t start, int64_t count, int64_t points) {
  Bins bins;
  bins.first.push_back(start);
  bins.last.push_back(start);
  const double ratio = points > 1 ? std::pow(static_cast<double>(count), 1.0 / (points - 1)) : 1;
  int64_t next = 1;  // the first offset of the next bin
  for (double edge = ratio; next < count; edge *= ratio) {
    const int64_t end =
        std::clamp<int64_t>(static_cast<int64_t>(std::ceil(edge - 1e-9)), next + 1, count);
    bins.first.push_back(start + next);
    bins.last.push_back(start + end - 1);
    next = end;
  }
  return bins;
}

}  // namespace

absl::StatusOr<Bins> MakeBins(int64_t start, int64_t count, int64_t points, BinSpacing spacing,
                              absl::string_view field) {
  if (points < 1 || points > kMaxAnalysisPoints) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected 1 .. ", kMaxAnalysisPoints, " points, got ", points));
  }
  if (count < 1) return absl::InvalidArgumentError("bins: an empty range");
  if (spacing == BinSpacing::kLinear || count <= points || points < 3) {
    return LinearBins(start, count, std::min(points, count));
  }
  // Rounding up to whole values leaves more bins than asked for when the early ones hold one
  // value each: ask for fewer until they fit.
  Bins bins = LogBins(start, count, points);
  for (int64_t asked = points; bins.size() > points && asked > 2;) {
    asked = std::max<int64_t>(2, asked - (bins.size() - points));
    bins = LogBins(start, count, asked);
  }
  return bins;
}

BinnedMeans::BinnedMeans(const Bins& bins, int series)
    : bins_(bins),
      series_(series),
      sums_(static_cast<size_t>(bins.size() * series), 0.0),
      counts_(static_cast<size_t>(bins.size()), 0) {}

void BinnedMeans::Add(int64_t at, const double* values) {
  while (bin_ + 1 < bins_.size() && at > bins_.last[bin_]) ++bin_;
  double* sum = &sums_[static_cast<size_t>(bin_ * series_)];
  for (int s = 0; s < series_; ++s) sum[s] += values[s];
  ++counts_[static_cast<size_t>(bin_)];
}

std::vector<double> BinnedMeans::Means(int series) const {
  std::vector<double> out(counts_.size());
  for (size_t b = 0; b < counts_.size(); ++b) {
    out[b] = counts_[b] > 0 ? sums_[b * series_ + series] / static_cast<double>(counts_[b])
                            : std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

absl::Status ForEachRowChunk(
    const Backend& backend, const AnalysisPlan& plan, int64_t first, int64_t end,
    const std::function<absl::Status(int64_t, int64_t, const std::vector<double>&)>& fn,
    const RowChunkOptions& options) {
  std::vector<double> rows;
  for (int64_t c = first; c < end; c += plan.chunk_rows) {
    if (const Cancellation* cancel = CurrentCancellation(); cancel != nullptr) {
      POSENC_RETURN_IF_ERROR(cancel->Check());
    }
    const int64_t n = std::min(plan.chunk_rows, end - c);
    const int64_t m = std::min(n + options.halo, end - c);
    POSENC_RETURN_IF_ERROR(options.rows(backend, plan, c, m, &rows, options.dtype));
    POSENC_RETURN_IF_ERROR(fn(c, n, rows));
  }
  return absl::OkStatus();
}

std::vector<double> GaussianSamples(uint64_t seed, int64_t n) {
  std::mt19937_64 engine(seed);
  // Uniform in (0, 1] from the top 53 bits, so the logarithm is finite.
  auto uniform = [&engine] { return (static_cast<double>(engine() >> 11) + 1.0) * 0x1p-53; };
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double phi = 2.0 * std::numbers::pi * uniform();
    out[i] = r * std::cos(phi);
    if (i + 1 < n) out[i + 1] = r * std::sin(phi);
  }
  return out;
}

}  // namespace posenc::kernels
