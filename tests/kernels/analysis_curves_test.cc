// AnalyzeEncoding's properties 4-6 (kernels/analysis/decay.cc, extrapolation.cc, similarity.cc)
// against closed forms: RoPE's q.k of all-ones q/k and the RoFormer bound, the decay of the
// bound, ALiBi's -slope * r, T5's buckets, the Toeplitz similarity of sinusoidal tables and its
// cell averages, add vs concat for orthogonal embeddings, the wavelengths of linear and llama3
// scalings; and the bins, and every bad input.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/analysis/analysis.h"
#include "kernels/analysis/curve.h"
#include "kernels/analysis/decay.h"
#include "kernels/analysis/extrapolation.h"
#include "kernels/analysis/similarity.h"
#include "kernels/backend.h"
#include "kernels/bias/alibi.h"
#include "kernels/bias/relative.h"
#include "tests/kernels/analysis_util.h"

namespace posenc::kernels {
namespace {

using ::posenc::kernels::analysis_testing::Alibi;
using ::posenc::kernels::analysis_testing::Cpu;
using ::posenc::kernels::analysis_testing::Plan;
using ::posenc::kernels::analysis_testing::Rope;
using ::posenc::kernels::analysis_testing::TryPlan;
using ::testing::HasSubstr;

// ---- bins ---------------------------------------------------------------------------------------

void ExpectContiguous(const Bins& bins, int64_t start, int64_t count) {
  ASSERT_GT(bins.size(), 0);
  EXPECT_EQ(bins.first.front(), start);
  EXPECT_EQ(bins.last.back(), start + count - 1);
  for (int64_t b = 0; b < bins.size(); ++b) {
    EXPECT_LE(bins.first[b], bins.last[b]);
    if (b > 0) {
      EXPECT_EQ(bins.first[b], bins.last[b - 1] + 1);
    }
  }
}

TEST(AnalysisBinsTest, LogAndLinearBinsCoverTheRange) {
  for (int64_t count : {1, 7, 512, 513, 1000, 1 << 20, (1 << 24) + 3}) {
    for (int64_t points : {1, 2, 3, 64, 512}) {
      for (BinSpacing spacing : {BinSpacing::kLog, BinSpacing::kLinear}) {
        absl::StatusOr<Bins> bins = MakeBins(5, count, points, spacing, "points");
        ASSERT_TRUE(bins.ok()) << bins.status();
        EXPECT_LE(bins->size(), points) << count << " " << points;
        ExpectContiguous(*bins, 5, count);
      }
    }
  }
  // Log bins keep the short distances one by one.
  const Bins log = *MakeBins(0, 1 << 20, 512, BinSpacing::kLog, "points");
  EXPECT_GT(log.size(), 400);
  for (int64_t b = 0; b < 20; ++b) EXPECT_EQ(log.first[b], log.last[b]);
  EXPECT_EQ(MakeBins(0, 10, 0, BinSpacing::kLog, "count").status().message(),
            "count: expected 1 .. 65536 points, got 0");
  EXPECT_FALSE(MakeBins(0, 0, 4, BinSpacing::kLog, "count").ok());
}

TEST(AnalysisBinsTest, GaussianSamplesAreSeededAndStandard) {
  const std::vector<double> a = GaussianSamples(7, 100001);
  EXPECT_EQ(a, GaussianSamples(7, 100001));
  EXPECT_NE(a, GaussianSamples(8, 100001));
  double mean = 0, var = 0;
  for (double v : a) mean += v / a.size();
  for (double v : a) var += (v - mean) * (v - mean) / a.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
}

// ---- 4 DECAY: RoPE ------------------------------------------------------------------------------

// q = k = all ones: h_j = 2 for every slot, q.k(r) = 2 m^2 sum_j cos(r theta_j).
TEST(AnalysisDecayTest, AllOnesQkIsTheClosedFormAndWithinTheRoFormerBound) {
  for (bool yarn : {false, true}) {
    AnalysisArgs a = Rope(64, 10000, 0, 400);  // 400 <= kCurvePoints: one distance per point
    if (yarn) {
      a.encoding.rope.scaling.type = RopeScalingType::kYarn;
      a.encoding.rope.scaling.factor = 4.0;
      a.encoding.rope.scaling.original_max_position_embeddings = 256;
    }
    std::vector<float> ones(64, 1.0f);
    a.embeddings = {DType::kFloat32, {1, 64}, ones.data()};
    const AnalysisPlan plan = Plan(a, {AnalysisProperty::kDecay});
    absl::StatusOr<RopeDecay> d = ComputeRopeDecay(Cpu(), plan);
    ASSERT_TRUE(d.ok()) << d.status();
    const RopeFrequencies f = *ComputeRopeFrequencies(a.encoding.rope, 399);
    const double m = f.CosSinScale();
    EXPECT_EQ(d->attention_factor, m);
    EXPECT_EQ(yarn, m > 1.0);
    EXPECT_DOUBLE_EQ(d->bound_scale, 2 * m * m);  // the last step, h_{d/2-1} - h_{d/2} = 2
    ASSERT_EQ(d->mean_abs_dot.y.size(), 400u);
    for (int r = 0; r < 400; ++r) {
      long double sum = 0;
      for (long double theta : f.inv_freq) sum += std::cos(r * theta);
      const double exact = std::fabs(2.0 * m * m * static_cast<double>(sum));
      EXPECT_EQ(d->mean_abs_dot.x[r], r);
      EXPECT_NEAR(d->mean_abs_dot.y[r], exact, 1e-12 * 64 * m * m) << r;
      EXPECT_LE(d->mean_abs_dot.y[r], d->bound_scale * 32 * d->bound.y[r] * (1 + 1e-12)) << r;
    }
    EXPECT_NEAR(d->bound.y[0], (32 + 1) / 2.0, 1e-12);  // B(0) = (d/2 + 1)/2
  }
}

TEST(AnalysisDecayTest, RoFormerBoundHoldsForRandomPairsAtEveryDistance) {
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
    AnalysisArgs a = Rope(128, 10000, 0, 500);
    a.encoding.rope.style = style;
    a.samples = 1;  // the mean of one pair is its |q.k|
    for (uint64_t seed : {1u, 2u, 3u}) {
      a.seed = seed;
      absl::StatusOr<RopeDecay> d = ComputeRopeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
      ASSERT_TRUE(d.ok()) << d.status();
      for (size_t r = 0; r < d->bound.y.size(); ++r) {
        EXPECT_LE(d->mean_abs_dot.y[r], d->bound_scale * 64 * d->bound.y[r]) << r;
      }
    }
  }
}

// The mean of the bound over octaves [2^k, 2^(k+1)) decreases strictly up to where it stops
// decaying (within 5 % of the random-phase level), which comes before the wavelength limit.
TEST(AnalysisDecayTest, BoundDecaysOverOctavesUntilItStopsBeforeTheWavelengthLimit) {
  AnalysisArgs a = Rope(128, 10000, 0, 1 << 16);
  a.samples = 1;
  absl::StatusOr<RopeDecay> whole = ComputeRopeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_NEAR(whole->wavelength_limit, 2 * std::numbers::pi * std::pow(10000.0, 126.0 / 128), 1e-6);
  EXPECT_GT(whole->decay_stops_at, 1024);
  EXPECT_LT(whole->decay_stops_at, whole->wavelength_limit);
  double previous = 1e300;
  for (int64_t start = 1; start <= whole->decay_stops_at; start *= 2) {
    AnalysisArgs octave = Rope(128, 10000, start, start);
    octave.samples = 1;
    absl::StatusOr<RopeDecay> d = ComputeRopeDecay(Cpu(), Plan(octave, {AnalysisProperty::kDecay}));
    ASSERT_TRUE(d.ok()) << d.status();
    // Bins of one octave: x is each bin's centre, so the width of bin b is 2 (x[b] - first).
    double sum = 0;
    int64_t first = start;
    for (size_t b = 0; b < d->bound.x.size(); ++b) {
      const int64_t last = static_cast<int64_t>(2 * d->bound.x[b]) - first;
      sum += d->bound.y[b] * static_cast<double>(last - first + 1);
      first = last + 1;
    }
    ASSERT_EQ(first, 2 * start);
    const double mean = sum / static_cast<double>(start);
    EXPECT_LT(mean, previous) << "octave from " << start;
    previous = mean;
  }
}

// Given q and k rows are paired row by row: the random draws of a seed given as rows give the
// same curves; without the keys (q = k) they differ.
TEST(AnalysisDecayTest, GivenKeysPairWithTheQueryRows) {
  AnalysisArgs a = Rope(64, 10000, 0, 300);
  a.samples = 3;
  a.seed = 5;
  absl::StatusOr<RopeDecay> random = ComputeRopeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(random.ok()) << random.status();
  const std::vector<double> g = GaussianSamples(5, 2 * 3 * 64);  // q rows, then k rows
  a.embeddings = {DType::kFloat64, {3, 64}, g.data()};
  a.keys = {DType::kFloat64, {3, 64}, g.data() + 3 * 64};
  absl::StatusOr<DecayResult> given = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(given.ok()) << given.status();
  ASSERT_EQ(given->curves.size(), 2u);
  EXPECT_EQ(given->curves[0].y, random->mean_abs_dot.y);
  EXPECT_EQ(given->curves[1].y, random->bound.y);
  EXPECT_THAT(given->method, HasSubstr("3 given q/k row pairs"));
  a.keys = {};
  absl::StatusOr<DecayResult> self = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_NE(self->curves[0].y, random->mean_abs_dot.y);
  EXPECT_THAT(self->method, HasSubstr("q = k"));
  // Bad keys are named, expected vs received.
  a.keys = {DType::kFloat64, {2, 64}, g.data()};
  EXPECT_THAT(TryPlan(a, {AnalysisProperty::kDecay}).status().message(),
              HasSubstr("keys: expected a float tensor of the shape of embeddings [3, 64], got "));
  const std::vector<int32_t> ints(3 * 64, 1);
  a.keys = {DType::kInt32, {3, 64}, ints.data()};
  EXPECT_THAT(TryPlan(a, {AnalysisProperty::kDecay}).status().message(), HasSubstr("keys:"));
  a.keys = {DType::kFloat64, {3, 64}, g.data()};
  a.embeddings = {};
  EXPECT_THAT(TryPlan(a, {AnalysisProperty::kDecay}).status().message(),
              HasSubstr("keys: given without embeddings"));
}

TEST(AnalysisDecayTest, DecayResultCarriesTheCurvesAndTheNote) {
  AnalysisArgs a = Rope(64, 500000, 0, 100000);
  a.samples = 8;
  absl::StatusOr<DecayResult> r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->curves.size(), 2u);
  EXPECT_EQ(r->curves[0].label, "mean |q.k|");
  EXPECT_EQ(r->curves[1].label, "RoFormer bound");
  EXPECT_LE(r->curves[0].x.size(), static_cast<size_t>(kCurvePoints));
  EXPECT_EQ(r->curves[0].x.size(), r->curves[1].y.size());
  EXPECT_EQ(r->samples, 8);
  EXPECT_THAT(r->note, HasSubstr("wavelength limit"));
  EXPECT_THAT(r->method, HasSubstr("8 random"));
}

// ---- 4 DECAY: biases ----------------------------------------------------------------------------

TEST(AnalysisDecayTest, AlibiBiasPerDistanceIsMinusSlopeTimesDistance) {
  const AnalysisArgs a = Alibi(12, 1000, 300);
  absl::StatusOr<DecayResult> r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> slopes = *AlibiSlopes(12);
  ASSERT_EQ(r->curves.size(), 12u);
  for (int h = 0; h < 12; ++h) {
    EXPECT_EQ(r->curves[h].label, absl::StrCat("head ", h));
    for (int i = 0; i < 300; ++i) {
      EXPECT_EQ(r->curves[h].x[i], 1000 + i);
      EXPECT_EQ(r->curves[h].y[i], -slopes[h] * (1000 + i)) << h << " " << i;
    }
  }
}

TEST(AnalysisDecayTest, T5BiasPerDistanceIsTheTableAtTheBucket) {
  std::vector<double> table(32 * 3);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.25 * static_cast<double>(i);
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kT5;
  a.encoding.t5.table = {DType::kFloat64, {32, 3}, table.data()};
  a.count = 200;
  absl::StatusOr<DecayResult> r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->curves.size(), 6u);  // bidirectional: then the keys after the query
  for (int h = 0; h < 3; ++h) {
    for (int d = 0; d < 200; ++d) {
      EXPECT_EQ(r->curves[h].y[d], table[T5Bucket(-d, true, 32, 128) * 3 + h]) << h << " " << d;
    }
  }
}

// Bidirectional buckets: keys before the query use buckets 0 .. 15, keys after it 16 .. 31 (the
// same edges, float64 closed form: exact below 8, then 8 + floor(ln(d/8) / ln(16) * 8) up to
// 15); unidirectional buckets have no after side (all bucket 0 there).
TEST(AnalysisDecayTest, T5BidirectionalBucketsHaveBothSides) {
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kT5;
  a.count = 500;  // <= kCurvePoints: one point per distance
  absl::StatusOr<DecayResult> r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->curves.size(), 2u);
  EXPECT_EQ(r->curves[0].label, "bucket");
  EXPECT_EQ(r->curves[1].label, "bucket, after");
  EXPECT_THAT(r->method, HasSubstr("after the query"));
  for (int64_t d = 0; d < 500; ++d) {
    const int64_t back =
        d < 8 ? d
              : std::min<int64_t>(8 + static_cast<int64_t>(std::log(d / 8.0) / std::log(16.0) * 8),
                                  15);
    ASSERT_EQ(r->curves[0].x[d], d);
    EXPECT_EQ(r->curves[0].y[d], back) << d;
    EXPECT_EQ(r->curves[1].y[d], d == 0 ? 0 : 16 + back) << d;
  }
  // With a table: the table's row at each side's bucket.
  std::vector<double> table(32 * 2);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.5 * static_cast<double>(i) - 7;
  a.encoding.t5.table = {DType::kFloat64, {32, 2}, table.data()};
  r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->curves.size(), 4u);
  EXPECT_EQ(r->curves[3].label, "head 1, after");
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 500; ++d) {
      EXPECT_EQ(r->curves[2 + h].y[d], table[T5Bucket(d, true, 32, 128) * 2 + h]) << h << " " << d;
    }
  }
  a.encoding.t5.table = {};
  a.encoding.t5.bidirectional = false;
  r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->curves.size(), 1u);
}

TEST(AnalysisDecayTest, AbsoluteEncodingsHaveNoDecayOfTheirOwn) {
  AnalysisArgs a;
  a.encoding.sinusoidal.dim = 16;
  a.count = 10;
  absl::StatusOr<DecayResult> r = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method, "not applicable");
  EXPECT_TRUE(r->curves.empty());
}

TEST(AnalysisDecayTest, BadInputsAreNamed) {
  AnalysisArgs a = Rope(64, 10000, 0, 100);
  a.samples = kMaxAnalysisSamples + 1;
  EXPECT_THAT(AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay})).status().message(),
              HasSubstr("samples: DECAY draws 1 .. 4096 q/k pairs, got 4097"));
  a.samples = 4;
  std::vector<float> rows(2 * 32, 1.0f);
  a.embeddings = {DType::kFloat32, {2, 32}, rows.data()};
  EXPECT_EQ(AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay})).status().message(),
            "embeddings: DECAY takes q/k rows [1 .. 4096, head_dim = 64], got [2, 32]");
}

// ---- 5 EXTRAPOLATION ----------------------------------------------------------------------------

const AnalysisCurve& Curve(const ExtrapolationSeries& s, const std::string& label) {
  for (const AnalysisCurve& c : s.curves) {
    if (c.label == label) return c;
  }
  ADD_FAILURE() << "no curve " << label << " in " << s.scaling;
  return s.curves.front();
}

TEST(AnalysisExtrapolationTest, LinearAndLlama3WavelengthsAgainstTheUnscaledConfig) {
  AnalysisArgs a = Rope(64, 500000, 0, 32768);
  a.samples = 4;
  a.encoding.rope.scaling.type = RopeScalingType::kLlama3;
  a.encoding.rope.scaling.factor = 8;
  a.encoding.rope.scaling.low_freq_factor = 1;
  a.encoding.rope.scaling.high_freq_factor = 4;
  a.encoding.rope.scaling.original_max_position_embeddings = 8192;
  RopeScaling linear;
  linear.type = RopeScalingType::kLinear;
  linear.factor = 4;
  // The config's own scaling and the unscaled one.
  absl::StatusOr<ExtrapolationResult> own =
      AnalyzeExtrapolation(Cpu(), Plan(a, {AnalysisProperty::kExtrapolation}));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->original_context, 8192);
  ASSERT_EQ(own->series.size(), 2u);
  EXPECT_EQ(own->series[0].scaling, "llama3");
  EXPECT_EQ(own->series[1].scaling, "default");
  const std::vector<double>& l3 = Curve(own->series[0], "wavelength").y;
  const std::vector<double>& plain = Curve(own->series[1], "wavelength").y;
  ASSERT_EQ(l3.size(), 32u);
  EXPECT_NEAR(l3[0] / plain[0], 1.0, 1e-12);    // high frequencies kept
  EXPECT_NEAR(l3[31] / plain[31], 8.0, 1e-12);  // low frequencies divided by the factor
  EXPECT_THAT(own->note, HasSubstr("trained length 8192"));
  EXPECT_THAT(own->note, HasSubstr("default: "));
  EXPECT_EQ(Curve(own->series[0], "mean |q.k|").x.size(),
            Curve(own->series[1], "RoFormer bound").x.size());
  // Explicit scalings replace the config's.
  a.scalings = {linear, RopeScaling()};
  absl::StatusOr<ExtrapolationResult> lin =
      AnalyzeExtrapolation(Cpu(), Plan(a, {AnalysisProperty::kExtrapolation}));
  ASSERT_TRUE(lin.ok()) << lin.status();
  ASSERT_EQ(lin->series.size(), 2u);
  EXPECT_EQ(lin->series[0].scaling, "linear");
  const std::vector<double>& scaled = Curve(lin->series[0], "wavelength").y;
  const std::vector<double>& unscaled = Curve(lin->series[1], "wavelength").y;
  for (size_t j = 0; j < scaled.size(); ++j) EXPECT_NEAR(scaled[j] / unscaled[j], 4.0, 1e-12);
}

TEST(AnalysisExtrapolationTest, UnscaledConfigAndBadInputs) {
  RopeConfig c;
  c.head_dim = 64;
  c.scaling.type = RopeScalingType::kYarn;
  c.scaling.factor = 4;
  c.freq_factors.assign(32, 2.0);
  c.seq_len = 100;
  const RopeConfig plain = UnscaledRopeConfig(c);
  EXPECT_EQ(plain.scaling.type, RopeScalingType::kDefault);
  EXPECT_FALSE(plain.scaling.factor.has_value());
  EXPECT_TRUE(plain.freq_factors.empty());
  EXPECT_FALSE(plain.seq_len.has_value());

  AnalysisArgs a = Rope(64, 10000, 0, 100);
  EXPECT_THAT(
      AnalyzeExtrapolation(Cpu(), Plan(a, {AnalysisProperty::kExtrapolation})).status().message(),
      HasSubstr("encoding.rope.scaling.original_max_position_embeddings"));
  a.encoding.rope.max_position_embeddings = 64;
  RopeScaling bad;
  bad.type = RopeScalingType::kLinear;  // no factor
  a.scalings = {RopeScaling(), bad};
  EXPECT_THAT(
      AnalyzeExtrapolation(Cpu(), Plan(a, {AnalysisProperty::kExtrapolation})).status().message(),
      HasSubstr("scalings[1]: "));
  const AnalysisArgs alibi = Alibi(4, 0, 10);
  absl::StatusOr<ExtrapolationResult> na =
      AnalyzeExtrapolation(Cpu(), Plan(alibi, {AnalysisProperty::kExtrapolation}));
  ASSERT_TRUE(na.ok());
  EXPECT_THAT(na->note, HasSubstr("not applicable"));
}

// ---- 6 SIMILARITY -------------------------------------------------------------------------------

AnalysisArgs SinusoidalWindow(int64_t dim, int64_t start, int64_t window, int64_t cells) {
  AnalysisArgs a;
  a.encoding.sinusoidal.dim = dim;
  a.start = start;
  a.count = window;
  a.window = window;
  a.max_cells = cells;
  a.samples = 16;
  return a;
}

TEST(AnalysisSimilarityTest, SinusoidalSimilarityDependsOnlyOnTheDistance) {
  for (SinusoidalLayout layout : {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcat}) {
    AnalysisArgs a = SinusoidalWindow(64, 1000, 200, 200);
    a.encoding.sinusoidal.layout = layout;
    absl::StatusOr<SimilarityResult> r =
        AnalyzeSimilarity(Cpu(), Plan(a, {AnalysisProperty::kSimilarity}));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->rows, 200);
    ASSERT_EQ(r->cell, 1);
    const auto at = [&](int64_t p, int64_t q) { return r->matrix[p * 200 + q]; };
    for (int64_t p = 0; p < 200; ++p) {
      EXPECT_NEAR(at(p, p), 1.0, 1e-14);
      for (int64_t q = 0; q < 200; ++q) {
        EXPECT_EQ(at(p, q), at(q, p));
        if (p + 1 < 200 && q + 1 < 200) {
          EXPECT_NEAR(at(p, q), at(p + 1, q + 1), 1e-13);
        }
      }
    }
  }
}

// A cell's value is the mean of the cosine similarities of its position pairs (brute force).
TEST(AnalysisSimilarityTest, CellsAreMeansOfThePairs) {
  AnalysisArgs rope = Rope(32, 10000, 50, 300);
  rope.window = 300;
  rope.max_cells = 32;  // cell = 10
  for (const AnalysisArgs& a : {SinusoidalWindow(20, 7, 300, 32), rope}) {
    const AnalysisPlan plan = Plan(a, {AnalysisProperty::kSimilarity});
    absl::StatusOr<SimilarityResult> r = AnalyzeSimilarity(Cpu(), plan);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->cell, 10);
    ASSERT_EQ(r->rows, 30);
    std::vector<double> rows;
    ASSERT_TRUE(AnalysisRows(Cpu(), plan, a.start, 300, &rows).ok());
    const int64_t w = plan.width;
    auto cosine = [&](int64_t p, int64_t q) {
      double pq = 0, pp = 0, qq = 0;
      for (int64_t i = 0; i < w; ++i) {
        pq += rows[p * w + i] * rows[q * w + i];
        pp += rows[p * w + i] * rows[p * w + i];
        qq += rows[q * w + i] * rows[q * w + i];
      }
      return pq / std::sqrt(pp * qq);
    };
    for (int64_t ca : {0, 7, 29}) {
      for (int64_t cb : {0, 13, 29}) {
        double sum = 0;
        for (int64_t p = ca * 10; p < ca * 10 + 10; ++p) {
          for (int64_t q = cb * 10; q < cb * 10 + 10; ++q) sum += cosine(p, q);
        }
        EXPECT_NEAR(r->matrix[ca * 30 + cb], sum / 100, 1e-12) << ca << " " << cb;
      }
    }
  }
}

// Embeddings orthogonal to every encoding row: add and concat change norm and angle alike,
// |y| = sqrt(|x|^2 + |PE|^2), angle atan2(|PE|, |x|).
TEST(AnalysisSimilarityTest, AddAndConcatAgreeForOrthogonalEmbeddings) {
  const int64_t positions = 5;
  std::vector<double> table, tokens = {3, 0, 4, 0, 0.5, 0, -1, 0};  // |x| = 5 and sqrt(1.25)
  for (int64_t p = 0; p < positions; ++p) {
    table.insert(table.end(), {0, 1.0 + p, 0, 2.0 * p});
  }
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kLearned;
  a.encoding.learned = {DType::kFloat64, {positions, 4}, table.data()};
  a.count = a.window = positions;
  a.embeddings = {DType::kFloat64, {2, 4}, tokens.data()};
  absl::StatusOr<SimilarityResult> r =
      AnalyzeSimilarity(Cpu(), Plan(a, {AnalysisProperty::kSimilarity}));
  ASSERT_TRUE(r.ok()) << r.status();
  double norm = 0, angle = 0;
  for (int64_t p = 0; p < positions; ++p) {
    const double pe = std::hypot(1.0 + p, 2.0 * p);
    for (double x : {5.0, std::sqrt(1.25)}) {
      norm += (std::hypot(x, pe) - x) / x / (2 * positions);
      angle += std::atan2(pe, x) * 180 / std::numbers::pi / (2 * positions);
    }
  }
  EXPECT_FALSE(r->random_embeddings);
  EXPECT_NEAR(r->add_norm_change, norm, 1e-13);
  EXPECT_NEAR(r->concat_norm_change, norm, 1e-13);
  EXPECT_NEAR(r->add_angle_degrees, angle, 1e-11);
  EXPECT_NEAR(r->concat_angle_degrees, angle, 1e-11);
}

// Adding x itself doubles the norm without turning it; concat turns it by 45 degrees.
TEST(AnalysisSimilarityTest, AddingAParallelEncodingOnlyScales) {
  std::vector<double> table = {1, 2, 2, 0};
  AnalysisArgs a;
  a.encoding.family = AnalysisFamily::kLearned;
  a.encoding.learned = {DType::kFloat64, {1, 4}, table.data()};
  a.count = a.window = 1;
  a.embeddings = {DType::kFloat64, {1, 4}, table.data()};
  absl::StatusOr<SimilarityResult> r =
      AnalyzeSimilarity(Cpu(), Plan(a, {AnalysisProperty::kSimilarity}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->add_norm_change, 1.0, 1e-15);
  EXPECT_NEAR(r->add_angle_degrees, 0.0, 1e-6);
  EXPECT_NEAR(r->concat_norm_change, std::sqrt(2.0) - 1, 1e-15);
  EXPECT_NEAR(r->concat_angle_degrees, 45.0, 1e-12);
  EXPECT_EQ(r->matrix, std::vector<double>{1.0});
}

TEST(AnalysisSimilarityTest, NotApplicableAndBadInputs) {
  const AnalysisArgs alibi = Alibi(4, 0, 10);
  absl::StatusOr<SimilarityResult> na =
      AnalyzeSimilarity(Cpu(), Plan(alibi, {AnalysisProperty::kSimilarity}));
  ASSERT_TRUE(na.ok());
  EXPECT_TRUE(na->matrix.empty());
  EXPECT_THAT(na->note, HasSubstr("not applicable"));

  absl::StatusOr<SimilarityResult> rope =
      AnalyzeSimilarity(Cpu(), Plan(Rope(16, 10000, 0, 8), {AnalysisProperty::kSimilarity}));
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_EQ(rope->rows, 8);
  EXPECT_THAT(rope->note, HasSubstr("add vs concat not applicable"));

  AnalysisArgs a = SinusoidalWindow(8, 0, 16, 16);
  std::vector<double> tokens(2 * 6, 1.0);
  a.embeddings = {DType::kFloat64, {2, 6}, tokens.data()};
  EXPECT_EQ(AnalyzeSimilarity(Cpu(), Plan(a, {AnalysisProperty::kSimilarity})).status().message(),
            "embeddings: SIMILARITY adds the encoding to rows [1 .. 4096, D = 8], got [2, 6]");
  std::vector<double> zero(8, 0.0);
  a.embeddings = {DType::kFloat64, {1, 8}, zero.data()};
  EXPECT_EQ(AnalyzeSimilarity(Cpu(), Plan(a, {AnalysisProperty::kSimilarity})).status().message(),
            "embeddings: row 0 has norm 0, expected > 0");
  a.embeddings = {};
  a.samples = 5000;
  EXPECT_THAT(AnalyzeSimilarity(Cpu(), Plan(a, {AnalysisProperty::kSimilarity})).status().message(),
              HasSubstr("samples: SIMILARITY draws 1 .. 4096"));
}

// A million distances through the chunked rows: bounded memory, kCurvePoints points.
TEST(AnalysisDecayTest, LongRangesStayBounded) {
  AnalysisArgs a = Rope(64, 500000, 0, 1 << 20);
  a.samples = 2;
  absl::StatusOr<DecayResult> d = AnalyzeDecay(Cpu(), Plan(a, {AnalysisProperty::kDecay}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_LE(d->curves[1].y.size(), static_cast<size_t>(kCurvePoints));
  EXPECT_GT(d->curves[1].x.back(), 900000);
}

}  // namespace
}  // namespace posenc::kernels
