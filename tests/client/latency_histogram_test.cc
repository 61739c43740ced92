// LatencyHistogram (client/cli/latency_histogram.h), the bounded latency record of `posenc bench`:
// quantiles within its 2.2 % promise of the exact order statistics, merging, and the extremes.
#include "client/cli/latency_histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace posenc::cli {
namespace {

// The ceil(q * n)-th smallest of `sorted`.
double Exact(const std::vector<int64_t>& sorted, double q) {
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::max<size_t>(rank, 1) - 1]);
}

TEST(LatencyHistogramTest, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0);
  EXPECT_EQ(h.Quantile(0.5), 0);
  EXPECT_EQ(h.max_ns(), 0);
  EXPECT_EQ(h.mean_ns(), 0);
}

TEST(LatencyHistogramTest, QuantilesWithinTheirPromise) {
  // Log-normal latencies around 1 ms, spread over four decades.
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> latency(std::log(1e6), 1.5);
  std::vector<int64_t> values(200'000);
  LatencyHistogram h;
  double sum = 0;
  for (int64_t& v : values) {
    v = std::max<int64_t>(1, static_cast<int64_t>(latency(rng)));
    h.Record(v);
    sum += static_cast<double>(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.001, 0.1, 0.5, 0.9, 0.99, 0.999}) {
    const double exact = Exact(values, q);
    EXPECT_NEAR(h.Quantile(q), exact, 0.022 * exact) << q;
  }
  EXPECT_EQ(h.Quantile(1.0), static_cast<double>(values.back()));
  EXPECT_EQ(h.max_ns(), values.back());
  EXPECT_EQ(h.count(), static_cast<int64_t>(values.size()));
  EXPECT_NEAR(h.mean_ns(), sum / static_cast<double>(values.size()), 1e-6 * sum);
}

TEST(LatencyHistogramTest, MergeEqualsOneRecord) {
  LatencyHistogram all;
  LatencyHistogram a;
  LatencyHistogram b;
  for (int64_t v = 1; v <= 10'000; ++v) {
    all.Record(v * 997);
    (v % 3 == 0 ? a : b).Record(v * 997);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.max_ns(), all.max_ns());
  EXPECT_EQ(a.mean_ns(), all.mean_ns());
  for (double q : {0.01, 0.5, 0.99}) EXPECT_EQ(a.Quantile(q), all.Quantile(q)) << q;
}

TEST(LatencyHistogramTest, ExtremesStayInRange) {
  LatencyHistogram h;
  h.Record(0);                 // counted as 1 ns
  h.Record(int64_t{1} << 50);  // past the last bucket (2^40 ns): kept there
  EXPECT_NEAR(h.Quantile(0.5), 1.0, 0.022);
  EXPECT_EQ(h.Quantile(1.0), std::ldexp(1.0, 50));
  EXPECT_LE(h.Quantile(0.99), std::ldexp(1.0, 50));
}

}  // namespace
}  // namespace posenc::cli
