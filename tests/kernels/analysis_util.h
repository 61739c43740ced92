// What the encoding-analysis tests (analysis_test.cc, analysis_curves_test.cc) share: the cpu
// backend, the arguments of each family and plans of some properties.
#ifndef POSENC_TESTS_KERNELS_ANALYSIS_UTIL_H_
#define POSENC_TESTS_KERNELS_ANALYSIS_UTIL_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/analysis/analysis.h"
#include "kernels/backend.h"

namespace posenc::kernels::analysis_testing {

// The cpu backend with 2 threads (one for the whole test binary).
inline const Backend& Cpu() {
  static const auto* backend = MakeCpuBackend({2, ""})->release();
  return *backend;
}

// The positions (biases: distances) start .. start+count-1 of an encoding of `family`.
inline AnalysisArgs Range(AnalysisFamily family, int64_t start, int64_t count) {
  AnalysisArgs a;
  a.encoding.family = family;
  a.start = start;
  a.count = count;
  return a;
}

inline AnalysisArgs Sinusoidal(int64_t dim, SinusoidalLayout layout, int64_t start, int64_t count) {
  AnalysisArgs a = Range(AnalysisFamily::kSinusoidal, start, count);
  a.encoding.sinusoidal.dim = dim;
  a.encoding.sinusoidal.layout = layout;
  return a;
}

inline AnalysisArgs Rope(int64_t head_dim, double base, int64_t start, int64_t count) {
  AnalysisArgs a = Range(AnalysisFamily::kRope, start, count);
  a.encoding.rope.head_dim = head_dim;
  a.encoding.rope.base = base;
  return a;
}

inline AnalysisArgs Alibi(int64_t heads, int64_t start, int64_t count,
                          AlibiMode mode = AlibiMode::kCausal) {
  AnalysisArgs a = Range(AnalysisFamily::kAlibi, start, count);
  a.encoding.alibi.num_heads = heads;
  a.encoding.alibi.mode = mode;
  return a;
}

// The plan of `properties` (empty: all six), or its error.
inline absl::StatusOr<AnalysisPlan> TryPlan(AnalysisArgs a,
                                            std::vector<AnalysisProperty> properties) {
  a.properties = std::move(properties);
  return PlanAnalysis(std::move(a));
}

// The plan, a test failure when there is none.
inline AnalysisPlan Plan(AnalysisArgs a, std::vector<AnalysisProperty> properties) {
  absl::StatusOr<AnalysisPlan> plan = TryPlan(std::move(a), std::move(properties));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : AnalysisPlan{};
}

}  // namespace posenc::kernels::analysis_testing

#endif  // POSENC_TESTS_KERNELS_ANALYSIS_UTIL_H_
