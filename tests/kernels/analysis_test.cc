// AnalyzeEncoding's properties 1-3 against closed forms (sinusoidal's exact rotation and norms,
// ALiBi's linearity and its bf16 collision, T5's bucket edges) and against float64 brute force.
#include "kernels/analysis/analysis.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/bias/relative.h"
#include "tests/kernels/analysis_util.h"

namespace posenc::kernels {
namespace {

using ::posenc::kernels::analysis_testing::Alibi;
using ::posenc::kernels::analysis_testing::Cpu;
using ::posenc::kernels::analysis_testing::Plan;
using ::posenc::kernels::analysis_testing::Sinusoidal;
using ::testing::HasSubstr;

TEST(AnalysisTest, SinusoidalNormsAreSqrtHalfDim) {
  for (SinusoidalLayout layout : {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcat}) {
    AnalysisPlan plan = Plan(Sinusoidal(64, layout, 3, 20000), {AnalysisProperty::kBounds});
    absl::StatusOr<BoundsResult> r = AnalyzeBounds(Cpu(), plan);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->norms.min, std::sqrt(32.0), 1e-12);
    EXPECT_NEAR(r->norms.max, std::sqrt(32.0), 1e-12);
    EXPECT_NEAR(r->norms.mean, std::sqrt(32.0), 1e-12);
    EXPECT_GE(r->values.min, -1.0);
    EXPECT_LE(r->values.max, 1.0);
    EXPECT_LT(r->values.min, -0.999);
  }
}

TEST(AnalysisTest, SinusoidalIsAnExactRotation) {
  for (SinusoidalLayout layout : {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcat}) {
    AnalysisArgs a = Sinusoidal(33, layout, 0, 3000);
    a.distances = {1, 7, 1000, 2999};
    absl::StatusOr<RelativeResult> r =
        AnalyzeRelative(Cpu(), Plan(a, {AnalysisProperty::kRelative}));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->pairs, 16);
    ASSERT_EQ(r->rotations.size(), 4u);
    for (const RotationFit& f : r->rotations) {
      EXPECT_LT(f.residual, 1e-13) << f.distance;
      EXPECT_LT(f.worst_pair_residual, 1e-12) << f.distance;
      EXPECT_LT(f.max_angle_error, 1e-9) << f.distance;
    }
  }
}

TEST(AnalysisTest, RopeIsAnExactRotationWithItsAttentionFactor) {
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kRope;
  a.encoding.rope.head_dim = 64;
  a.encoding.rope.base = 500000;
  a.encoding.rope.scaling.type = RopeScalingType::kYarn;
  a.encoding.rope.scaling.factor = 4.0;
  a.encoding.rope.scaling.original_max_position_embeddings = 4096;
  a.start = 100;
  a.count = 5000;
  a.distances = {1, 4096};
  AnalysisPlan plan = Plan(a, {AnalysisProperty::kRelative, AnalysisProperty::kBounds});
  EXPECT_EQ(plan.width, 64);
  absl::StatusOr<AnalysisResult> r = RunAnalysis(Cpu(), plan);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const RotationFit& f : r->relative->rotations) EXPECT_LT(f.residual, 1e-13);
  const double m = 0.1 * std::log(4.0) + 1.0;  // YaRN's attention factor
  EXPECT_NEAR(r->bounds->norms.max, m * std::sqrt(32.0), 1e-9);
  EXPECT_NEAR(r->bounds->norms.min, m * std::sqrt(32.0), 1e-9);
}

TEST(AnalysisTest, AlibiIsLinearInTheDistance) {
  AnalysisPlan plan = Plan(Alibi(8, 0, 300, AlibiMode::kCausal), {});
  std::vector<double> rows;
  ASSERT_TRUE(AnalysisRows(Cpu(), plan, 10, 5, &rows).ok());
  absl::StatusOr<std::vector<double>> slopes = AlibiSlopes(8);
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(rows[i * 8 + h], -(*slopes)[h] * (10 + i));
  }
  absl::StatusOr<UniquenessResult> u = AnalyzeUniqueness(Cpu(), plan);
  ASSERT_TRUE(u.ok()) << u.status();
  double norm = 0;
  for (double s : *slopes) norm += s * s;
  EXPECT_TRUE(u->exact);
  EXPECT_NEAR(u->min_distance, std::sqrt(norm), 1e-12);  // any two consecutive distances
  absl::StatusOr<RelativeResult> rel = AnalyzeRelative(Cpu(), plan);
  ASSERT_TRUE(rel.ok()) << rel.status();
  ASSERT_TRUE(rel->bias.has_value());
  EXPECT_TRUE(rel->bias->depends_on_distance_only);
  EXPECT_EQ(rel->bias->max_shift_deviation, 0.0);
}

TEST(AnalysisTest, BloomDependsOnTheKeyUpToARowConstant) {
  AnalysisPlan plan = Plan(Alibi(4, 0, 64, AlibiMode::kBloom), {AnalysisProperty::kRelative});
  absl::StatusOr<RelativeResult> rel = AnalyzeRelative(Cpu(), plan);
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_FALSE(rel->bias->depends_on_distance_only);
  EXPECT_NEAR(rel->bias->max_shift_deviation, (*AlibiSlopes(4))[0], 1e-15);
  EXPECT_EQ(rel->bias->max_shift_deviation_row_centered, 0.0);
  EXPECT_THAT(rel->bias->note, HasSubstr("BLOOM"));
}

// One head of slope 2^-8: the bias -p/256 needs 9 significant bits at p = 257, which bf16 (8)
// rounds to even: 257/256 -> 256/256, the bias of p = 256.
TEST(AnalysisTest, AlibiBf16CollidesAt256) {
  AnalysisArgs a = Alibi(1, 0, 1000, AlibiMode::kCausal);
  a.collision_dtype = DType::kBFloat16;
  absl::StatusOr<UniquenessResult> u =
      AnalyzeUniqueness(Cpu(), Plan(a, {AnalysisProperty::kUniqueness}));
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->collision_found);
  EXPECT_EQ(u->collision_p, 256);
  EXPECT_EQ(u->collision_q, 257);
}

// A 2-wide sinusoid (sin p, cos p) in bf16 against a float64 brute force of the rounded rows.
TEST(AnalysisTest, SinusoidalCollisionMatchesBruteForce) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const int64_t n = 3000;
    AnalysisArgs a = Sinusoidal(2, SinusoidalLayout::kInterleaved, 0, n);
    a.collision_dtype = dtype;
    absl::StatusOr<UniquenessResult> u =
        AnalyzeUniqueness(Cpu(), Plan(a, {AnalysisProperty::kUniqueness}));
    ASSERT_TRUE(u.ok()) << u.status();
    auto round = [&](double v) {
      return dtype == DType::kBFloat16 ? DoubleToBFloat16(v) : DoubleToHalf(v);
    };
    int64_t want_p = -1, want_q = -1;
    for (int64_t q = 1; q < n && want_q < 0; ++q) {
      for (int64_t p = 0; p < q; ++p) {
        if (round(std::sin(p)) == round(std::sin(q)) && round(std::cos(p)) == round(std::cos(q))) {
          want_p = p, want_q = q;
          break;
        }
      }
    }
    ASSERT_GE(want_q, 0) << "the brute force finds a collision";
    EXPECT_TRUE(u->collision_found);
    EXPECT_EQ(u->collision_p, want_p);
    EXPECT_EQ(u->collision_q, want_q);
  }
}

std::vector<double> RandomTable(int64_t rows, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> t(static_cast<size_t>(rows * d));
  for (double& v : t) v = u(rng);
  return t;
}

double BruteClosest(const std::vector<double>& t, int64_t d, int64_t first, int64_t n,
                    int64_t k_max) {
  double best = std::numeric_limits<double>::infinity();
  for (int64_t p = first; p < first + n; ++p) {
    for (int64_t q = p + 1; q < first + n && q - p <= k_max; ++q) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j)
        s += (t[p * d + j] - t[q * d + j]) * (t[p * d + j] - t[q * d + j]);
      best = std::min(best, s);
    }
  }
  return std::sqrt(best);
}

TEST(AnalysisTest, UniquenessOfALearnedTableMatchesBruteForce) {
  const std::vector<double> t = RandomTable(6000, 3, 7);
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kLearned;
  a.encoding.learned = {DType::kFloat64, {6000, 3}, t.data()};
  a.start = 5;
  a.count = 400;
  absl::StatusOr<UniquenessResult> u =
      AnalyzeUniqueness(Cpu(), Plan(a, {AnalysisProperty::kUniqueness}));
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->exact);
  EXPECT_DOUBLE_EQ(u->min_distance, BruteClosest(t, 3, 5, 400, 400));
  a.start = 0;
  a.count = 6000;  // beyond kExactUniquenessPositions: offsets 1 .. K
  a.uniqueness_offsets = 9;
  u = AnalyzeUniqueness(Cpu(), Plan(a, {AnalysisProperty::kUniqueness}));
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_FALSE(u->exact);
  EXPECT_THAT(u->method, HasSubstr("1 .. 9"));
  EXPECT_DOUBLE_EQ(u->min_distance, BruteClosest(t, 3, 0, 6000, 9));
  absl::StatusOr<RelativeResult> rel =
      AnalyzeRelative(Cpu(), Plan(a, {AnalysisProperty::kRelative}));
  ASSERT_TRUE(rel.ok());
  EXPECT_FALSE(rel->applicable);
}

TEST(AnalysisTest, T5BucketEdgesFollowTheFormula) {
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kT5;
  a.count = 1000;
  AnalysisPlan plan = Plan(a, {AnalysisProperty::kRelative});
  EXPECT_EQ(plan.width, 1);  // no table: the bucket id
  absl::StatusOr<RelativeResult> rel = AnalyzeRelative(Cpu(), plan);
  ASSERT_TRUE(rel.ok()) << rel.status();
  // Bidirectional, 32 buckets, max_distance 128: keys back use 16 buckets, exact below 8, then
  // 8 + floor(ln(d/8) / ln(16) * 8) up to 15 (float64 closed form).
  std::vector<int64_t> want;
  int64_t previous = -1;
  for (int64_t d = 0; d < 513; ++d) {
    const int64_t b =
        d < 8 ? d
              : std::min<int64_t>(8 + static_cast<int64_t>(std::log(d / 8.0) / std::log(16.0) * 8),
                                  15);
    if (b != previous) want.push_back(d);
    previous = b;
  }
  EXPECT_EQ(rel->bias->bucket_edges, want);
  EXPECT_EQ(rel->bias->bucket_edges.back(), 91);  // 8 * 16^(7/8) = 90.5: bucket 15
  EXPECT_TRUE(rel->bias->depends_on_distance_only);
}

// What the server admits: chunks for the rotation fits (no bias window for sinusoidal/RoPE, which
// once asked 17 GB for a d 512 table), the bias window for ALiBi.
TEST(AnalysisTest, WorkingBytesCountTheBiasWindowForBiasesOnly) {
  const AnalysisPlan table =
      Plan(Sinusoidal(512, SinusoidalLayout::kInterleaved, 0, 8192), {AnalysisProperty::kRelative});
  EXPECT_EQ(table.working_bytes, 4 * table.chunk_rows * 512 * 8);
  EXPECT_LE(table.working_bytes, 4 * kAnalysisChunkBytes);
  const AnalysisPlan alibi = Plan(Alibi(8, 0, 4096), {AnalysisProperty::kRelative});
  EXPECT_EQ(alibi.working_bytes, 4 * alibi.chunk_rows * 8 * 8 + 2 * 1024 * 1024 * 8 * 8);
}

TEST(AnalysisTest, BadInputsAreNamed) {
  auto error = [](AnalysisArgs a) { return PlanAnalysis(std::move(a)).status(); };
  AnalysisArgs ok = Sinusoidal(8, SinusoidalLayout::kInterleaved, 0, 100);
  AnalysisArgs a = ok;
  a.count = 0;
  EXPECT_THAT(error(a).message(), HasSubstr("count: expected 1 .. 16777216, got 0"));
  a.count = kMaxAnalysisPositions + 1;
  EXPECT_THAT(error(a).message(), HasSubstr("count: expected 1 .."));
  a = ok;
  a.start = kMaxPosition;
  EXPECT_THAT(error(a).message(), HasSubstr("start: expected 0 .. 2147483548"));
  a = ok;
  a.distances = {1, 100};
  EXPECT_THAT(error(a).message(), HasSubstr("distances[1]: expected 1 .. count - 1 = 99, got 100"));
  a = ok;
  a.collision_dtype = DType::kFloat32;
  EXPECT_THAT(error(a).message(), HasSubstr("collision_dtype: expected FLOAT16 or BFLOAT16"));
  a = ok;
  a.properties = {AnalysisProperty::kBounds, AnalysisProperty::kBounds};
  EXPECT_THAT(error(a).message(), HasSubstr("properties[1]"));
  a = ok;
  a.encoding.sinusoidal.dim = 0;
  EXPECT_THAT(error(a).message(), HasSubstr("sinusoidal.dim: expected 1 .."));
  a = Alibi(0, 0, 10, AlibiMode::kCausal);
  EXPECT_THAT(error(a).message(), HasSubstr("alibi.num_heads"));
  const std::vector<double> t(20, 0.0);
  a = ok;
  a.encoding.family = AnalysisFamily::kLearned;
  a.encoding.learned = {DType::kFloat64, {10, 2}, t.data()};
  a.count = 11;
  EXPECT_THAT(error(a).message(), HasSubstr("count: expected start + count <= the learned"));
  a = ok;
  a.encoding.family = AnalysisFamily::kRope;
  EXPECT_THAT(error(a).message(), HasSubstr("config.head_dim"));
}

TEST(AnalysisTest, DefaultDistancesArePowersOfTwo) {
  AnalysisPlan plan = Plan(Sinusoidal(8, SinusoidalLayout::kInterleaved, 0, 10), {});
  EXPECT_EQ(plan.distances, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_GT(plan.working_bytes, 0);
}

}  // namespace
}  // namespace posenc::kernels
