// Edge cases of every formula of the reference backend, the dtype conversions and position
// resolution (the golden cases are in golden_test.cc).
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"
#include "tests/common/position_specs.h"
#include "tests/common/rope_configs.h"

namespace posenc::kernels {
namespace {

using ::testing::HasSubstr;

const Backend& Ref() {
  static const auto* backend = MakeReferenceBackend().release();
  return *backend;
}

using ::posenc::testing::Buffer;
using ::posenc::testing::IdsSpec;
using ::posenc::testing::RangeSpec;

Buffer Random(DType dtype, Shape shape, uint32_t seed) {
  return ::posenc::testing::RandomBuffer(dtype, std::move(shape), seed, -2.0, 2.0);
}

// {0, step, 2 * step, ...}: n values, e.g. a relative-position table with distinct rows.
template <typename T>
std::vector<T> Ramp(size_t n, double step) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(step * static_cast<double>(i));
  return out;
}

// ---- dtype conversions ------------------------------------------------------------------------

TEST(DTypeTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(DoubleToHalf(1.0), 0x3c00);
  EXPECT_EQ(DoubleToHalf(-2.0), 0xc000);
  EXPECT_EQ(DoubleToHalf(65504.0), 0x7bff);
  EXPECT_EQ(DoubleToHalf(65519.99), 0x7bff);
  EXPECT_EQ(DoubleToHalf(65520.0), 0x7c00);  // halfway to 2^16 rounds to even: inf
  EXPECT_EQ(DoubleToHalf(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(DoubleToHalf(std::ldexp(1.0, -25)), 0x0000);            // tie to even (zero)
  EXPECT_EQ(DoubleToHalf(1.0 + std::ldexp(1.0, -11)), 0x3c00);      // tie, even stays
  EXPECT_EQ(DoubleToHalf(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(DoubleToHalf(std::ldexp(1.0, -14) * (1 - std::ldexp(1.0, -12))), 0x0400);
  EXPECT_EQ(DoubleToHalf(std::numeric_limits<double>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(DoubleToHalf(std::nan("")))));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite half round-trips
    ASSERT_EQ(DoubleToHalf(HalfToFloat(static_cast<uint16_t>(h))), h);
  }
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(DoubleToBFloat16(1.0), 0x3f80);
  EXPECT_EQ(DoubleToBFloat16(1.0 + std::ldexp(1.0, -8)), 0x3f80);          // tie to even
  EXPECT_EQ(DoubleToBFloat16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3f82);      // tie to even, up
  EXPECT_EQ(DoubleToBFloat16(1.0 + std::ldexp(1.0, -8) + 1e-12), 0x3f81);  // no double rounding
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(DoubleToBFloat16(-0.0), 0x8000);
  EXPECT_EQ(DoubleToBFloat16(1e39), 0x7f80);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(DoubleToBFloat16(std::nan("")))));
  for (uint32_t b = 0; b < 0x7f80; b += 7) {
    ASSERT_EQ(DoubleToBFloat16(BFloat16ToFloat(static_cast<uint16_t>(b))), b);
  }
}

TEST(DTypeTest, NumElementsChecksOverflow) {
  EXPECT_EQ(*NumElements({2, 3, 4}, "x"), 24);
  EXPECT_EQ(*NumElements({}, "x"), 1);
  EXPECT_FALSE(NumElements({1 << 30, 1 << 30, 1 << 30}, "x").ok());
  EXPECT_THAT(NumElements({2, -1}, "q").status().message(), HasSubstr("q"));
}

// ---- positions ----------------------------------------------------------------------------------

// Plans `spec` against `grid` and resolves it: the plan's error, else the resolution's.
absl::StatusOr<ResolvedPositions> Resolve(const PositionSpec& spec, const TokenGrid& grid) {
  POSENC_ASSIGN_OR_RETURN(const PositionPlan plan, PlanPositions(spec, grid));
  return ResolvePositions(plan);
}

TEST(IndexRunsTest, ConsecutiveIndicesBecomeRuns) {
  EXPECT_EQ(IndexRuns({}), "");
  EXPECT_EQ(IndexRuns({7}), "7");
  EXPECT_EQ(IndexRuns({0, 1, 2, 4, 6, 7}), "0-2, 4, 6-7");
  EXPECT_EQ(IndexRuns({3, 7, 11, 15}, ","), "3,7,11,15");
}

TEST(PositionsTest, EveryKindResolves) {
  TokenGrid bs{TokenGrid::Kind::kBatchSeq, 2, 3};
  auto r = Resolve(RangeSpec(5, 0), bs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pos, (std::vector<int64_t>{5, 6, 7, 5, 6, 7}));
  EXPECT_EQ(r->consecutive_run, 3);  // counting up within each sequence

  PositionSpec off;
  off.kind = PositionSpec::Kind::kOffsets;
  off.offsets = {0, 10};
  r = Resolve(off, bs);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pos, (std::vector<int64_t>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(r->max_position, 12);
  EXPECT_EQ(r->consecutive_run, 3);

  std::vector<int64_t> ids = {4, 4, 9};
  r = Resolve(IdsSpec(ids, {3}), bs);  // broadcast over the batch
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pos, (std::vector<int64_t>{4, 4, 9, 4, 4, 9}));
  EXPECT_EQ(r->consecutive_run, 0);  // not counting up: none

  std::vector<int32_t> mask = {0, 1, 1, 1, 1, 0};
  PositionSpec m;
  m.kind = PositionSpec::Kind::kAttentionMask;
  m.mask = {DType::kInt32, {2, 3}, mask.data()};
  r = Resolve(m, bs);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pos, (std::vector<int64_t>{0, 0, 1, 0, 1, 0}));
  EXPECT_FALSE(r->IsValid(0));
  EXPECT_TRUE(r->IsValid(1));
  EXPECT_FALSE(r->IsValid(5));
  EXPECT_EQ(r->consecutive_run, 0);

  PositionSpec cu;
  cu.kind = PositionSpec::Kind::kCuSeqlens;
  cu.cu_seqlens = {0, 2, 2, 5};
  cu.offsets = {7, 0, 100};
  r = Resolve(cu, TokenGrid{TokenGrid::Kind::kPacked, 1, 1, 5});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pos, (std::vector<int64_t>{7, 8, 100, 101, 102}));
  EXPECT_EQ(r->consecutive_run, 0);
}

TEST(PositionsTest, MropeRepeatsOrReadsThreeComponents) {
  TokenGrid g{TokenGrid::Kind::kTable};
  g.components = 3;
  auto r = Resolve(RangeSpec(3, 2), g);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pos, (std::vector<int64_t>{3, 4, 3, 4, 3, 4}));
  std::vector<int64_t> ids = {0, 1, 5, 6, 7, 8};
  r = Resolve(IdsSpec(ids, {3, 2}), g);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->At(1, 2), 8);
  EXPECT_EQ(r->grid, (Shape{2}));
  EXPECT_THAT(Resolve(IdsSpec(ids, {2, 3}), g).status().message(), HasSubstr("[3, ...]"));
}

// The default, ranges and offsets count up within each sequence, so that a device backend can
// form every position from each sequence's first (pos[t - t % run] + t % run); the other kinds
// do not (EveryKindResolves).
TEST(PositionsTest, AffineKindsCountUpWithinEachSequence) {
  TokenGrid bs{TokenGrid::Kind::kBatchSeq, 2, 3};
  auto r = Resolve(PositionSpec{}, bs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consecutive_run, 3);
  EXPECT_TRUE(r->ConsecutiveIn(3));
  EXPECT_FALSE(r->ConsecutiveIn(6));
  PositionSpec off;
  off.kind = PositionSpec::Kind::kOffsets;
  off.offsets = {0, kMaxPosition - 2};
  r = Resolve(off, bs);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t run = r->consecutive_run;
  ASSERT_EQ(run, 3);
  EXPECT_EQ(r->At(3), kMaxPosition - 2);
  for (int64_t t = 0; t < r->num_tokens; ++t) {
    EXPECT_EQ(r->At(t), r->At(t - t % run) + t % run) << t;
  }
  r = Resolve(RangeSpec(9, 0), TokenGrid{TokenGrid::Kind::kPacked, 1, 1, 4});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consecutive_run, 4);
  EXPECT_EQ(r->At(0), 9);
}

TEST(PositionsTest, RejectsBadPositions) {
  TokenGrid bs{TokenGrid::Kind::kBatchSeq, 2, 3};
  std::vector<int64_t> neg = {0, -1, 2};
  auto s = Resolve(IdsSpec(neg, {3}), bs).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("positions.ids"));
  EXPECT_THAT(s.message(), HasSubstr("-1"));
  std::vector<int64_t> big = {0, int64_t{1} << 31, 2};
  EXPECT_FALSE(Resolve(IdsSpec(big, {3}), bs).ok());
  EXPECT_THAT(PlanPositions(RangeSpec(0, 4), bs).status().message(),
              HasSubstr("positions.range.count"));
  EXPECT_THAT(PlanPositions(RangeSpec(kMaxPosition, 3), bs).status().message(), HasSubstr("2^31"));
  PositionSpec off;
  off.kind = PositionSpec::Kind::kOffsets;
  off.offsets = {1};
  EXPECT_THAT(PlanPositions(off, bs).status().message(), HasSubstr("expected 2 offsets"));
  PositionSpec cu;
  cu.kind = PositionSpec::Kind::kCuSeqlens;
  cu.cu_seqlens = {0, 3, 2};
  EXPECT_THAT(PlanPositions(cu, TokenGrid{TokenGrid::Kind::kPacked, 1, 1, 2}).status().message(),
              HasSubstr("non-decreasing"));
  cu.cu_seqlens = {0, 3};
  EXPECT_THAT(PlanPositions(cu, TokenGrid{TokenGrid::Kind::kPacked, 1, 1, 2}).status().message(),
              HasSubstr("token count 2"));
  std::vector<int64_t> mask = {1, 2, 1};
  PositionSpec m;
  m.kind = PositionSpec::Kind::kAttentionMask;
  m.mask = {DType::kInt64, {1, 3}, mask.data()};
  EXPECT_THAT(Resolve(m, TokenGrid{TokenGrid::Kind::kBatchSeq, 1, 3}).status().message(),
              HasSubstr("expected 0 or 1"));
  EXPECT_FALSE(PlanPositions(PositionSpec{}, TokenGrid{}).ok());  // a table needs positions
}

// ---- sinusoidal and absolute encodings ---------------------------------------------------------

TEST(SinusoidalTest, PaddingRowsAreZeroAndLayoutsAgree) {
  SinusoidalParams inter{8, 10000.0, SinusoidalLayout::kInterleaved, FreqScheme::kVaswani};
  SinusoidalParams concat{8, 10000.0, SinusoidalLayout::kConcat, FreqScheme::kVaswani};
  std::vector<int64_t> mask = {0, 1, 1};
  PositionSpec m;
  m.kind = PositionSpec::Kind::kAttentionMask;
  m.mask = {DType::kInt64, {1, 3}, mask.data()};
  auto pa = PlanSinusoidal({.params = inter, .positions = m, .output_dtype = DType::kFloat64});
  auto pb = PlanSinusoidal({.params = concat, .positions = m, .output_dtype = DType::kFloat64});
  ASSERT_TRUE(pa.ok() && pb.ok()) << pa.status() << pb.status();
  EXPECT_EQ(pa->table.shape, (Shape{1, 3, 8}));
  Buffer a(pa->table), b(pb->table);
  ASSERT_TRUE(RunSinusoidal(Ref(), *pa, a.view).ok());
  ASSERT_TRUE(RunSinusoidal(Ref(), *pb, b.view).ok());
  for (int c = 0; c < 8; ++c) EXPECT_EQ(a.at(c), 0.0);  // the padding row
  // Token 2 has position 1; interleaved (sin, cos) pairs are concat's halves.
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(a.at(16 + 2 * k), b.at(16 + k));
    EXPECT_EQ(a.at(16 + 2 * k + 1), b.at(16 + 4 + k));
    EXPECT_NEAR(a.at(16 + 2 * k), std::sin(std::pow(10000.0, -2.0 * k / 8)), 1e-15);
  }
}

TEST(SinusoidalTest, T2tLastFrequencyIsOneOverBase) {
  SinusoidalParams p{10, 500.0, SinusoidalLayout::kConcat, std::nullopt};
  auto omega = SinusoidalFrequencies(p);
  ASSERT_EQ(omega.size(), 5u);
  EXPECT_NEAR(static_cast<double>(omega.back()), 1.0 / 500.0, 1e-18);
  EXPECT_EQ(EffectiveFreqScheme(p), FreqScheme::kT2t);
  EXPECT_THAT(ValidateSinusoidal({4, 1.0}, "params").message(), HasSubstr("params.base"));
  EXPECT_THAT(ValidateSinusoidal({0, 2.0}, "params").message(), HasSubstr("params.dim"));
}

TEST(AddPositionEncodingTest, FairseqPaddingIdxShiftsAndZeroesPadding) {
  AddPositionEncodingParams p;
  p.sinusoidal = SinusoidalParams{0, 10000.0, SinusoidalLayout::kConcat, FreqScheme::kT2t};
  p.padding_idx = 1;
  p.scale = 2.0;
  std::vector<int64_t> mask = {0, 1, 1, 1};
  PositionSpec m;
  m.kind = PositionSpec::Kind::kAttentionMask;
  m.mask = {DType::kInt64, {1, 4}, mask.data()};
  Buffer x = Random(DType::kFloat64, {1, 4, 6}, 1);
  auto plan = PlanAddPositionEncoding({.params = p, .x = x.view, .positions = m});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->params.sinusoidal->dim, 6);  // 0 takes x's width
  Buffer y(plan->y);
  ASSERT_TRUE(RunAddPositionEncoding(Ref(), *plan, y.view).ok());
  // Padding token: only x*scale. Token 1 (real position 0) reads sinusoid position 0+1+1 = 2.
  for (int c = 0; c < 6; ++c) EXPECT_DOUBLE_EQ(y.at(c), 2 * x.at(c));
  std::vector<int64_t> two = {2};
  auto ts = PlanSinusoidal({.params = *plan->params.sinusoidal,
                            .positions = IdsSpec(two, {1}),
                            .output_dtype = DType::kFloat64});
  ASSERT_TRUE(ts.ok()) << ts.status();
  Buffer pe(ts->table);
  ASSERT_TRUE(RunSinusoidal(Ref(), *ts, pe.view).ok());
  for (int c = 0; c < 6; ++c) EXPECT_NEAR(y.at(6 + c), 2 * x.at(6 + c) + pe.at(c), 1e-15);
}

TEST(AddPositionEncodingTest, LearnedTableConcatAndOutOfRange) {
  std::vector<double> table(5 * 3);
  std::iota(table.begin(), table.end(), 0.0);
  AddPositionEncodingParams p;
  p.combine = Combine::kConcat;
  p.learned = {DType::kFloat64, {5, 3}, table.data()};
  p.table_offset = 2;
  Buffer x(DType::kFloat32, {2, 2});
  x.set(0, 7);
  auto plan = PlanAddPositionEncoding({.params = p, .x = x.view, .positions = RangeSpec(1, 0)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->y.shape, (Shape{2, 5}));
  EXPECT_EQ(plan->y.dtype, DType::kFloat32);
  Buffer y(plan->y);
  ASSERT_TRUE(RunAddPositionEncoding(Ref(), *plan, y.view).ok());
  EXPECT_EQ(y.at(0), 7);
  EXPECT_EQ(y.at(2), 9);   // row 1 + 2 = 3 -> 9, 10, 11
  EXPECT_EQ(y.at(9), 14);  // token 1 reads row 4
  // Positions 2, 3 read rows 4, 5: the run (not the plan) finds row 5 past the table.
  auto past = PlanAddPositionEncoding({.params = p, .x = x.view, .positions = RangeSpec(2, 0)});
  ASSERT_TRUE(past.ok()) << past.status();
  absl::Status s = RunAddPositionEncoding(Ref(), *past, y.view);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("5 rows"));
  p.combine = Combine::kAdd;
  EXPECT_THAT(PlanAddPositionEncoding({.params = p, .x = x.view, .positions = RangeSpec(1, 0)})
                  .status()
                  .message(),
              HasSubstr("x's last dimension 2"));
}

// ---- RoPE ---------------------------------------------------------------------------------------

struct RopeRun {
  RopeConfig config;
  TensorLayout layout = TensorLayout::kBSHD;
  PositionSpec positions;
};

// Plans and applies on the reference backend (rotating q and k in place); returns the status.
absl::Status Apply(const RopeRun& run, Buffer& q, Buffer* k) {
  const TensorView k_view = k ? k->view : TensorView{};
  POSENC_ASSIGN_OR_RETURN(const ApplyRopePlan plan, PlanApplyRope({.config = run.config,
                                                                   .layout = run.layout,
                                                                   .q = q.view,
                                                                   .k = k_view,
                                                                   .positions = run.positions}));
  return RunApplyRope(Ref(), plan, /*cache=*/nullptr, q.view, k_view).status();
}

TEST(RopeTest, InverseUndoesForwardWithAttentionFactor) {
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj, RopeStyle::kDeepseek}) {
    RopeRun run;
    run.config.style = style;
    run.config.rotary_dim = 24;
    run.config.scaling.type = RopeScalingType::kYarn;
    run.config.scaling.factor = 8;
    run.config.scaling.original_max_position_embeddings = 4096;
    run.positions = RangeSpec(1000000, 0);
    Buffer x = Random(DType::kFloat64, {2, 3, 4, 32}, 7);
    Buffer q = x;
    Buffer k = Random(DType::kFloat64, {2, 3, 2, 32}, 8);  // GQA: 2 key heads
    Buffer k0 = k;
    ASSERT_TRUE(Apply(run, q, &k).ok());
    EXPECT_NE(q.at(0), x.at(0));
    EXPECT_EQ(q.at(31), x.at(31));  // past rotary_dim: pass-through
    run.config.inverse = true;
    ASSERT_TRUE(Apply(run, q, &k).ok());
    for (int64_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q.at(i), x.at(i), 1e-12);
    for (int64_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k.at(i), k0.at(i), 1e-12);
  }
}

TEST(RopeTest, RotationPreservesPairNormTimesFactor) {
  RopeRun run;
  run.config.scaling.type = RopeScalingType::kLongrope;
  run.config.scaling.original_max_position_embeddings = 4096;
  run.config.max_position_embeddings = 131072;
  run.config.scaling.long_factor.assign(4, 2.0);
  run.config.scaling.short_factor.assign(4, 1.0);
  run.positions = RangeSpec(5000, 0);  // seq_len 5001 > L0: long factors
  Buffer x = Random(DType::kFloat64, {1, 1, 1, 8}, 3);
  Buffer q = x;
  ASSERT_TRUE(Apply(run, q, nullptr).ok());
  const double m = std::sqrt(1 + std::log(32.0) / std::log(4096.0));
  for (int j = 0; j < 4; ++j) {
    const double before = std::hypot(x.at(j), x.at(j + 4));
    EXPECT_NEAR(std::hypot(q.at(j), q.at(j + 4)), m * before, 1e-12);
  }
}

TEST(RopeTest, LayoutsAndPackedSequencesAgree) {
  // BSHD with per-sequence offsets == BHSD transposed == THD with cu_seqlens and offsets.
  const int64_t B = 2, S = 3, H = 2, D = 8;
  Buffer bshd = Random(DType::kFloat32, {B, S, H, D}, 11);
  Buffer bhsd(DType::kFloat32, {B, H, S, D});
  Buffer thd(DType::kFloat32, {B * S, H, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const double v = bshd.at(((b * S + s) * H + h) * D + d);
          bhsd.set(((b * H + h) * S + s) * D + d, v);
          thd.set(((b * S + s) * H + h) * D + d, v);
        }
  RopeRun run;
  run.positions.kind = PositionSpec::Kind::kOffsets;
  run.positions.offsets = {4, 90};
  ASSERT_TRUE(Apply(run, bshd, nullptr).ok());
  run.layout = TensorLayout::kBHSD;
  ASSERT_TRUE(Apply(run, bhsd, nullptr).ok());
  run.layout = TensorLayout::kTHD;
  run.positions = PositionSpec{};
  run.positions.kind = PositionSpec::Kind::kCuSeqlens;
  run.positions.cu_seqlens = {0, 3, 6};
  run.positions.offsets = {4, 90};
  ASSERT_TRUE(Apply(run, thd, nullptr).ok());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const double v = bshd.at(((b * S + s) * H + h) * D + d);
          ASSERT_EQ(v, bhsd.at(((b * H + h) * S + s) * D + d));
          ASSERT_EQ(v, thd.at(((b * S + s) * H + h) * D + d));
        }
}

TEST(RopeTest, PaddingPassesThroughAndRealTokensCountFromZero) {
  std::vector<int64_t> mask = {0, 0, 1, 1};
  RopeRun run;
  run.positions.kind = PositionSpec::Kind::kAttentionMask;
  run.positions.mask = {DType::kInt64, {1, 4}, mask.data()};
  Buffer x = Random(DType::kFloat64, {1, 4, 1, 4}, 5);
  Buffer q = x;
  ASSERT_TRUE(Apply(run, q, nullptr).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(q.at(i), x.at(i));  // padding + position 0 unchanged
  EXPECT_NEAR(q.at(12), x.at(12) * std::cos(1.0) - x.at(14) * std::sin(1.0), 1e-15);
}

TEST(RopeTest, MropeWithEqualComponentsIsPlainRope) {
  for (MropeLayout layout : {MropeLayout::kContiguous, MropeLayout::kInterleaved}) {
    RopeRun run;
    run.config.mrope_section = {2, 1, 1};
    run.config.mrope_layout = layout;
    std::vector<int64_t> ids = {3, 9, 3, 9, 3, 9};
    run.positions = IdsSpec(ids, {3, 2});
    Buffer x = Random(DType::kFloat64, {1, 2, 1, 8}, 9);
    Buffer a = x, b = x;
    ASSERT_TRUE(Apply(run, a, nullptr).ok());
    RopeRun plain;
    std::vector<int64_t> flat = {3, 9};
    plain.positions = IdsSpec(flat, {2});
    ASSERT_TRUE(Apply(plain, b, nullptr).ok());
    for (int64_t i = 0; i < a.size(); ++i) EXPECT_EQ(a.at(i), b.at(i));
  }
  RopeConfig c;
  c.head_dim = 16;
  c.mrope_section = {4, 2, 2};
  EXPECT_EQ(MropeComponent(c, 3), 0);
  EXPECT_EQ(MropeComponent(c, 4), 1);
  EXPECT_EQ(MropeComponent(c, 6), 2);
  c.mrope_layout = MropeLayout::kInterleaved;
  EXPECT_EQ(MropeComponent(c, 1), 1);
  EXPECT_EQ(MropeComponent(c, 2), 2);
  EXPECT_EQ(MropeComponent(c, 3), 0);
  EXPECT_EQ(MropeComponent(c, 7), 0);  // j % 3 == 1 but j >= 3 * s_h
}

TEST(RopeTest, Float32CosSinExactAtTheLargestPosition) {
  // omega_0 = 1: the truth is cos/sin(2^31 - 1) itself; fp32 phases would be off by ~64.
  RopeConfig c;
  c.head_dim = 64;
  std::vector<int64_t> ids = {kMaxPosition, kMaxPosition - 1, 1000000};
  PositionSpec spec = IdsSpec(ids, {3});
  auto plan = PlanRopeCache({.config = c,
                             .layout = RopeCacheLayout::kCompact,
                             .positions = spec,
                             .output_dtype = DType::kFloat32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer cos(plan->cos), sin(plan->sin);
  ASSERT_TRUE(RunRopeCache(Ref(), *plan, /*cache=*/nullptr, cos.view, sin.view).ok());
  for (int t = 0; t < 3; ++t) {
    const long double p = static_cast<long double>(ids[t]);
    EXPECT_NEAR(cos.at(t * 32), static_cast<double>(std::cos(p)), 1e-6);
    EXPECT_NEAR(sin.at(t * 32), static_cast<double>(std::sin(p)), 1e-6);
    // j = 16: omega = 10000^-0.5 = 0.01 exactly in reals.
    EXPECT_NEAR(cos.at(t * 32 + 16), static_cast<double>(std::cos(p / 100)), 1e-6);
  }
}

TEST(RopeTest, DeepseekStyleIsGptjPairsInNeoxOrder) {
  // transformers' DeepSeek V3 (rope_interleave): q.view(..., d/2, 2).transpose(-1, -2), then
  // rotate_half. The result is the GPT-J rotation with channel 2j moved to j and 2j+1 to j+d/2;
  // channels past rotary_dim stay where they are.
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
    RopeRun run;
    run.config.rotary_dim = 8;
    run.config.base = 500000;
    run.positions = RangeSpec(12345, 0);
    const Buffer x = Random(dtype, {1, 3, 2, 12}, 3);
    Buffer gptj = x, deepseek = x;
    run.config.style = RopeStyle::kGptj;
    ASSERT_TRUE(Apply(run, gptj, nullptr).ok());
    run.config.style = RopeStyle::kDeepseek;
    ASSERT_TRUE(Apply(run, deepseek, nullptr).ok());
    for (int64_t row = 0; row < 6; ++row) {
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_EQ(deepseek.at(row * 12 + j), gptj.at(row * 12 + 2 * j)) << row << " " << j;
        EXPECT_EQ(deepseek.at(row * 12 + 4 + j), gptj.at(row * 12 + 2 * j + 1)) << row << " " << j;
      }
      for (int64_t i = 8; i < 12; ++i) EXPECT_EQ(deepseek.at(row * 12 + i), x.at(row * 12 + i));
    }
    // The cpu backend permutes around its NEOX loop: the same values.
    auto cpu = MakeCpuBackend({});
    ASSERT_TRUE(cpu.ok());
    Buffer on_cpu = x;
    auto plan = PlanApplyRope({.config = run.config, .q = on_cpu.view, .positions = run.positions});
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(RunApplyRope(**cpu, *plan, nullptr, on_cpu.view, TensorView{}).ok());
    for (int64_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(on_cpu.at(i), deepseek.at(i), dtype == DType::kBFloat16 ? 1e-2 : 1e-6) << i;
    }
  }
}

TEST(RopeTest, NopeLayerPassesThroughAndCachesIdentity) {
  RopeRun run;
  run.config.nope = true;
  run.config.scaling.type = RopeScalingType::kLinear;
  run.config.scaling.factor = 8;
  run.positions = RangeSpec(77, 0);
  const Buffer x = Random(DType::kFloat32, {2, 3, 2, 16}, 5);
  Buffer q = x;
  Buffer k = x;
  ASSERT_TRUE(Apply(run, q, &k).ok());
  for (int64_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(q.at(i), x.at(i));
    ASSERT_EQ(k.at(i), x.at(i));
  }
  RopeConfig c = run.config;
  c.head_dim = 16;
  auto plan = PlanRopeCache({.config = c, .positions = RangeSpec(1000, 3)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer cos(plan->cos), sin(plan->sin);
  auto info = RunRopeCache(Ref(), *plan, /*cache=*/nullptr, cos.view, sin.view);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->frequencies->nope);
  for (int64_t i = 0; i < cos.size(); ++i) {
    EXPECT_EQ(cos.at(i), 1.0);
    EXPECT_EQ(sin.at(i), 0.0);
  }
}

TEST(RopeTest, ProportionalAndLlama3StepFrequencies) {
  // Gemma 4's proportional RoPE: exponents over the full width, a quarter rotating.
  RopeConfig c;
  c.head_dim = 512;
  c.base = 1e6;
  c.scaling.type = RopeScalingType::kProportional;
  c.scaling.partial_rotary_factor = 0.25;
  auto f = ComputeRopeFrequencies(c, 0);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->inv_freq.size(), 256u);
  for (int j = 0; j < 256; ++j) {
    const double want = j < 64 ? std::pow(1e6, -2.0 * j / 512) : 0.0;
    EXPECT_NEAR(static_cast<double>(f->inv_freq[j]), want, 1e-15 * want) << j;
  }
  c.scaling.factor = 4;
  f = ComputeRopeFrequencies(c, 0);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(static_cast<double>(f->inv_freq[1]), std::pow(1e6, -2.0 / 512) / 4, 1e-17);
  c.scaling.partial_rotary_factor = 1.5;
  EXPECT_FALSE(ComputeRopeFrequencies(c, 0).ok());

  // llama3 with low_freq_factor == high_freq_factor (Llama 4 Scout): wavelengths above L0/low
  // divided by the factor, the rest kept, nothing smoothed.
  const RopeConfig l = ::posenc::testing::Llama3Rope(16, 1, 1);
  f = ComputeRopeFrequencies(l, 0);
  ASSERT_TRUE(f.ok()) << f.status();
  int kept = 0, divided = 0;
  for (int j = 0; j < 64; ++j) {
    const long double w = std::pow(500000.0L, -2.0L * j / 128);
    const bool long_wave = 2 * std::numbers::pi_v<long double> / w > 8192;
    const double want = static_cast<double>(long_wave ? w / 16 : w);
    EXPECT_NEAR(static_cast<double>(f->inv_freq[j]), want, 1e-15 * want) << j;
    (long_wave ? divided : kept) += 1;
  }
  EXPECT_EQ(kept, 35);
  EXPECT_EQ(divided, 29);
}

TEST(RopeTest, FrequenciesOfEveryScalingType) {
  RopeConfig c;
  c.head_dim = 8;
  c.scaling.type = RopeScalingType::kLinear;
  c.scaling.factor = 4;
  auto f = ComputeRopeFrequencies(c, 10);
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(static_cast<double>(f->inv_freq[1]), 0.1 / 4);
  c.scaling.type = RopeScalingType::kNtk;
  f = ComputeRopeFrequencies(c, 10);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->effective_base, 10000 * std::pow(4.0, 8.0 / 6.0), 1e-6);
  c.scaling.type = RopeScalingType::kDynamic;
  c.max_position_embeddings = 100;
  f = ComputeRopeFrequencies(c, 199);  // seq_len 200: b' = b * (4*2 - 3)^(8/6)
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->effective_base, 10000 * std::pow(5.0, 8.0 / 6.0), 1e-6);
  EXPECT_EQ(f->seq_len, 200);
  c.seq_len = 50;  // below Lmax: unscaled
  f = ComputeRopeFrequencies(c, 199);
  EXPECT_NEAR(f->effective_base, 10000, 1e-9);
}

TEST(RopeTest, YarnDeepSeekMscaleAndExplicitFactor) {
  RopeConfig c;
  c.head_dim = 64;
  c.scaling.type = RopeScalingType::kYarn;
  c.scaling.factor = 40;
  c.scaling.original_max_position_embeddings = 4096;
  c.max_position_embeddings = 4096 * 10;  // an explicit factor is never overridden
  c.scaling.mscale = 1.0;
  c.scaling.mscale_all_dim = 0.707;
  auto f = ComputeRopeFrequencies(c, 0);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->factor, 40);
  const double g1 = 0.1 * std::log(40.0) + 1, g2 = 0.1 * 0.707 * std::log(40.0) + 1;
  EXPECT_NEAR(f->attention_factor, g1 / g2, 1e-15);
  EXPECT_GE(f->yarn_low, 0);
  EXPECT_LE(f->yarn_high, 63);
  c.apply_attention_factor = false;
  f = ComputeRopeFrequencies(c, 0);
  EXPECT_EQ(f->CosSinScale(), 1.0);
}

TEST(RopeTest, ValidationNamesTheField) {
  auto msg = [](RopeConfig c) { return std::string(ValidateRopeConfig(c).message()); };
  RopeConfig ok;
  ok.head_dim = 64;
  EXPECT_TRUE(ValidateRopeConfig(ok).ok());
  RopeConfig c = ok;
  c.rotary_dim = 33;
  EXPECT_THAT(msg(c), HasSubstr("config.rotary_dim"));
  c = ok;
  c.rotary_dim = 66;
  EXPECT_THAT(msg(c), HasSubstr("config.rotary_dim"));
  c = ok;
  c.base = 1;
  EXPECT_THAT(msg(c), HasSubstr("config.base"));
  c.base = std::nan("");
  EXPECT_THAT(msg(c), HasSubstr("config.base"));
  c = ok;
  c.scaling.type = RopeScalingType::kLlama3;
  c.scaling.factor = 8;
  EXPECT_THAT(msg(c), HasSubstr("config.scaling.low_freq_factor"));
  c.scaling.low_freq_factor = 4;
  c.scaling.high_freq_factor = 1;
  c.scaling.original_max_position_embeddings = 8192;
  EXPECT_THAT(msg(c), HasSubstr("config.scaling.high_freq_factor: expected >= low_freq_factor"));
  c = ok;
  c.scaling.type = RopeScalingType::kYarn;
  c.scaling.factor = 4;
  c.scaling.original_max_position_embeddings = 4096;
  c.scaling.low_freq_factor = 1;
  EXPECT_THAT(msg(c),
              HasSubstr("config.scaling.low_freq_factor: is not a field of rope type 'yarn'"));
  c = ok;
  c.scaling.type = RopeScalingType::kNtk;
  c.scaling.factor = 2;
  c.rotary_dim = 2;
  EXPECT_THAT(msg(c), HasSubstr(">= 4"));
  c = ok;
  c.scaling.type = RopeScalingType::kLinear;
  c.scaling.factor = 0;
  EXPECT_THAT(msg(c), HasSubstr("config.scaling.factor: expected > 0"));
  c = ok;
  c.mrope_section = {16, 8, 7};
  EXPECT_THAT(msg(c), HasSubstr("config.mrope_section"));
  c = ok;
  c.scaling.type = RopeScalingType::kLongrope;
  c.scaling.original_max_position_embeddings = 4096;
  c.scaling.long_factor.assign(31, 1.0);
  c.scaling.short_factor.assign(32, 1.0);
  EXPECT_THAT(msg(c), HasSubstr("config.scaling.long_factor: expected rotary_dim/2 = 32"));
  c = ok;
  c.scaling.type = RopeScalingType::kDynamic;
  c.scaling.factor = 2;
  EXPECT_THAT(msg(c), HasSubstr("config.max_position_embeddings"));
}

TEST(RopeTest, PlanApplyRopeChecksShapes) {
  // Views of one zeroed block (the plan reads shapes and dtypes only; k.data marks k present).
  std::vector<double> data(2 * 3 * 4 * 8);
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16;
  const ConstTensorView q{f32, {2, 3, 4, 8}, data.data()};
  const ConstTensorView k_bad{f32, {2, 4, 1, 8}, data.data()};
  const ConstTensorView k_ok{f32, {2, 3, 1, 8}, data.data()};
  const ConstTensorView k_f16{f16, {2, 3, 1, 8}, data.data()};
  RopeConfig c;
  auto st = PlanApplyRope({.config = c, .layout = TensorLayout::kBSHD, .q = q, .k = k_bad});
  EXPECT_THAT(st.status().message(), HasSubstr("k: expected the batch, sequence"));
  st = PlanApplyRope({.config = c, .layout = TensorLayout::kBSHD, .q = q, .k = k_f16});
  EXPECT_THAT(st.status().message(), HasSubstr("k: expected q's dtype FLOAT32"));
  st = PlanApplyRope({.config = c, .layout = TensorLayout::kTHD, .q = q});
  EXPECT_THAT(st.status().message(), HasSubstr("expected rank 3"));
  c.head_dim = 16;
  st = PlanApplyRope({.config = c, .layout = TensorLayout::kBSHD, .q = q});
  EXPECT_THAT(st.status().message(), HasSubstr("config.head_dim: expected q's last dimension 8"));
  c.head_dim = 0;
  const ConstTensorView q_i32{DType::kInt32, q.shape, data.data()};
  st = PlanApplyRope({.config = c, .layout = TensorLayout::kBSHD, .q = q_i32});
  EXPECT_THAT(st.status().message(), HasSubstr("q: expected dtype FLOAT32"));
  st = PlanApplyRope({.config = c, .layout = TensorLayout::kBSHD, .q = q, .k = k_ok});
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->k_heads, 1);
  EXPECT_EQ(st->tokens, 6);
  EXPECT_EQ(st->config.head_dim, 8);  // filled in on the plan's copy
  EXPECT_EQ(c.head_dim, 0);           // the caller's config is left alone
}

// ---- ALiBi -----------------------------------------------------------------------------------

TEST(AlibiTest, SlopesOfNonPowerOfTwoHeads) {
  auto s = AlibiSlopes(12);
  ASSERT_TRUE(s.ok());
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ((*s)[h], std::exp2(-(h + 1.0)));
  EXPECT_DOUBLE_EQ((*s)[8], std::exp2(-0.5));
  EXPECT_DOUBLE_EQ((*s)[11], std::exp2(-3.5));
  auto t = AlibiSlopes(4, 16.0);  // max_bias 16: 2^(-16h/4)
  EXPECT_DOUBLE_EQ((*t)[0], std::exp2(-4.0));
  EXPECT_THAT(AlibiSlopes(0).status().message(), HasSubstr("num_heads"));
  EXPECT_THAT(AlibiSlopes(4, -1).status().message(), HasSubstr("max_bias"));
}

TEST(AlibiTest, CompactFormExpandsToFullAndBloomIsCausalPlusRowConstant) {
  for (AlibiMode mode : {AlibiMode::kCausal, AlibiMode::kSymmetric}) {
    for (FutureMode future : {FutureMode::kMask, FutureMode::kZero, FutureMode::kLinear}) {
      AlibiBiasParams p{.num_heads = 3,
                        .q_len = 4,
                        .k_len = 7,
                        .query_offset = 1,
                        .mode = mode,
                        .future = future};
      auto full_plan = PlanAlibiBias({.params = p, .output_dtype = DType::kFloat64});
      p.form = BiasForm::kCompact;
      auto compact_plan = PlanAlibiBias({.params = p, .output_dtype = DType::kFloat64});
      ASSERT_TRUE(full_plan.ok() && compact_plan.ok())
          << full_plan.status() << compact_plan.status();
      EXPECT_EQ(compact_plan->bias.shape, (Shape{3, 10}));
      Buffer full(full_plan->bias), compact(compact_plan->bias), slopes(full_plan->slopes);
      ASSERT_TRUE(RunAlibiBias(Ref(), *full_plan, full.view, slopes.view).ok());
      ASSERT_TRUE(RunAlibiBias(Ref(), *compact_plan, compact.view, slopes.view).ok());
      for (int h = 0; h < 3; ++h)
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 7; ++j)
            ASSERT_EQ(full.at((h * 4 + i) * 7 + j), compact.at(h * 10 + j - i + 3));
    }
  }
  AlibiBiasParams c{.num_heads = 2, .q_len = 3, .k_len = 5};
  AlibiBiasParams b = c;
  b.mode = AlibiMode::kBloom;
  auto causal_plan = PlanAlibiBias({.params = c, .output_dtype = DType::kFloat64});
  auto bloom_plan = PlanAlibiBias({.params = b, .output_dtype = DType::kFloat64});
  ASSERT_TRUE(causal_plan.ok() && bloom_plan.ok()) << causal_plan.status() << bloom_plan.status();
  Buffer causal(causal_plan->bias), bloom(bloom_plan->bias), slopes(causal_plan->slopes);
  ASSERT_TRUE(RunAlibiBias(Ref(), *causal_plan, causal.view, slopes.view).ok());
  ASSERT_TRUE(RunAlibiBias(Ref(), *bloom_plan, bloom.view, slopes.view).ok());
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 3; ++i) {
      const int64_t row = (h * 3 + i) * 5;
      const double k0 = bloom.at(row) - causal.at(row);
      for (int j = 0; j <= i + 2; ++j) {
        EXPECT_NEAR(bloom.at(row + j) - causal.at(row + j), k0, 1e-15);
      }
      for (int j = i + 3; j < 5; ++j) {
        EXPECT_EQ(bloom.at(row + j), -std::numeric_limits<double>::infinity());
      }
    }
  c.form = BiasForm::kBuckets;
  EXPECT_THAT(PlanAlibiBias({.params = c}).status().message(), HasSubstr("form"));
  c.form = BiasForm::kFull;
  std::vector<int64_t> mask = {1, 1, 1, 1, 1};
  c.attention_mask = {DType::kInt64, {1, 5}, mask.data()};
  EXPECT_THAT(PlanAlibiBias({.params = c}).status().message(), HasSubstr("attention_mask"));
  // BLOOM's mask values are checked once, by the plan: 0 or 1 only.
  std::vector<int64_t> not_binary = {1, 1, 2, 1, 1};
  b.attention_mask = {DType::kInt64, {1, 5}, not_binary.data()};
  absl::Status s = PlanAlibiBias({.params = b}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("attention_mask"));
}

// ---- T5 and relative embeddings
// ------------------------------------------------------------------

TEST(T5Test, SpecCheckValues) {
  const std::pair<int64_t, int64_t> cases[] = {{-1, 1},     {-8, 8},     {-64, 14}, {-127, 15},
                                               {-5000, 15}, {0, 0},      {1, 17},   {8, 24},
                                               {127, 31},   {100000, 31}};
  for (auto [rp, bucket] : cases) EXPECT_EQ(T5Bucket(rp, true, 32, 128), bucket) << rp;
  EXPECT_EQ(T5Bucket(5, false, 32, 128), 0);  // unidirectional: the future is bucket 0
  EXPECT_EQ(T5Bucket(-5, false, 32, 128), 5);
}

TEST(T5Test, CompactBucketsAndValidation) {
  const std::vector<double> table = Ramp<double>(32 * 2, 0.5);
  RelativeBiasParams p{.q_len = 5, .k_len = 9, .query_offset = 100, .key_offset = 90};
  p.table = {DType::kFloat64, {32, 2}, table.data()};
  auto full_plan = PlanRelativeBias({.params = p, .output_dtype = DType::kFloat32});
  p.form = BiasForm::kCompact;
  auto compact_plan = PlanRelativeBias({.params = p, .output_dtype = DType::kFloat32});
  p.form = BiasForm::kBuckets;
  auto buckets_plan = PlanRelativeBias({.params = p});  // BUCKETS: INT32 by default
  ASSERT_TRUE(full_plan.ok() && compact_plan.ok() && buckets_plan.ok())
      << full_plan.status() << compact_plan.status() << buckets_plan.status();
  EXPECT_EQ(buckets_plan->bias.dtype, DType::kInt32);
  Buffer full(full_plan->bias), compact(compact_plan->bias), buckets(buckets_plan->bias);
  ASSERT_TRUE(RunRelativeBias(Ref(), *full_plan, full.view).ok());
  ASSERT_TRUE(RunRelativeBias(Ref(), *compact_plan, compact.view).ok());
  ASSERT_TRUE(RunRelativeBias(Ref(), *buckets_plan, buckets.view).ok());
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 9; ++j) {
        const double v = full.at((h * 5 + i) * 9 + j);
        ASSERT_EQ(v, compact.at(h * 13 + j - i + 4));
        const int64_t bucket = T5Bucket((90 + j) - (100 + i), true, 32, 128);
        ASSERT_EQ(buckets.at(i * 9 + j), bucket);
        ASSERT_EQ(v, table[bucket * 2 + h]);
      }
  // BUCKETS are INT32 only: the plan says so, naming the field.
  EXPECT_TRUE(PlanRelativeBias({.params = p, .output_dtype = DType::kInt32}).ok());
  absl::Status s = PlanRelativeBias({.params = p, .output_dtype = DType::kFloat32}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("output_dtype"));
  p.max_distance = 8;  // exact range 8 (bidirectional, 32 buckets)
  EXPECT_THAT(PlanRelativeBias({.params = p}).status().message(), HasSubstr("max_distance"));
  p.max_distance = 128;
  p.form = BiasForm::kFull;
  p.table.shape = {16, 4};
  EXPECT_THAT(PlanRelativeBias({.params = p}).status().message(), HasSubstr("num_buckets = 32"));
}

TEST(RelativeEmbeddingTest, ClipsDistances) {
  const std::vector<float> table = Ramp<float>(5 * 2, 1);
  RelativeEmbeddingParams p{.q_len = 2, .k_len = 6, .max_relative = 2, .query_offset = 0};
  p.table = {DType::kFloat32, {5, 2}, table.data()};
  auto plan = PlanRelativeEmbedding({.params = p, .output_dtype = DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer out(plan->embeddings);
  ASSERT_TRUE(RunRelativeEmbedding(Ref(), *plan, out.view).ok());
  // (i=1, j=0): rel -1 -> row 1; (i=0, j=5): rel 5 clipped to 2 -> row 4.
  EXPECT_EQ(out.at((1 * 6 + 0) * 2), 2);
  EXPECT_EQ(out.at((0 * 6 + 5) * 2 + 1), 9);
  p.table.shape = {4, 2};
  EXPECT_THAT(PlanRelativeEmbedding({.params = p}).status().message(),
              HasSubstr("2*max_relative+1 = 5"));
}

}  // namespace
}  // namespace posenc::kernels
