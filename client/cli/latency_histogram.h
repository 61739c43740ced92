// LatencyHistogram: call latencies of `posenc bench` in fixed memory, however long it runs.
//
// A log-scale histogram: bucket b counts the latencies in [2^(b/16), 2^((b+1)/16)) nanoseconds
// (buckets 4.4 % wide, 1 ns .. 2^40 ns = 18 minutes; longer latencies land in the last bucket), so
// it holds 640 counters whatever the number of calls, and a quantile read from it is within 2.2 %
// of the exact order statistic (it returns the bucket's geometric middle, clamped to the exact
// minimum and maximum, which are kept on the side). Header-only so that the tests can use it
// without linking the CLI.
//
// Thread-safety: a plain value; callers synchronize (bench.cc records under a mutex).
#ifndef POSENC_CLIENT_CLI_LATENCY_HISTOGRAM_H_
#define POSENC_CLIENT_CLI_LATENCY_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace posenc::cli {

class LatencyHistogram {
 public:
  static constexpr int kSubBuckets = 16;  // per power of two
  static constexpr int kBuckets = 40 * kSubBuckets;

  void Record(int64_t nanos) {
    nanos = std::max<int64_t>(nanos, 1);
    ++counts_[BucketOf(nanos)];
    ++count_;
    sum_ns_ += static_cast<double>(nanos);
    min_ns_ = std::min(min_ns_, nanos);
    max_ns_ = std::max(max_ns_, nanos);
  }

  void Merge(const LatencyHistogram& other) {
    for (int b = 0; b < kBuckets; ++b) counts_[b] += other.counts_[b];
    count_ += other.count_;
    sum_ns_ += other.sum_ns_;
    min_ns_ = std::min(min_ns_, other.min_ns_);
    max_ns_ = std::max(max_ns_, other.max_ns_);
  }

  int64_t count() const { return count_; }
  int64_t max_ns() const { return count_ == 0 ? 0 : max_ns_; }
  double mean_ns() const { return count_ == 0 ? 0 : sum_ns_ / static_cast<double>(count_); }

  // The q-quantile (0 < q <= 1) in nanoseconds: the value of the ceil(q * count)-th smallest
  // latency, to within 2.2 %. 0 when empty.
  double Quantile(double q) const {
    if (count_ == 0) return 0;
    if (q >= 1) return static_cast<double>(max_ns_);
    const auto rank =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * static_cast<double>(count_))));
    int64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) {
        const double middle = std::exp2((b + 0.5) / kSubBuckets);
        return std::clamp(middle, static_cast<double>(min_ns_), static_cast<double>(max_ns_));
      }
    }
    return static_cast<double>(max_ns_);
  }

 private:
  static int BucketOf(int64_t nanos) {
    const int b = static_cast<int>(std::log2(static_cast<double>(nanos)) * kSubBuckets);
    return std::clamp(b, 0, kBuckets - 1);
  }

  std::array<int64_t, kBuckets> counts_{};
  int64_t count_ = 0;
  double sum_ns_ = 0;
  int64_t min_ns_ = std::numeric_limits<int64_t>::max();
  int64_t max_ns_ = 0;
};

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_LATENCY_HISTOGRAM_H_
