// The CUDA kernels' arithmetic, verified on the CPU in every build (with or without nvcc): the
// host-device functions the .cu kernels use (kernels/common/half_codec.h, rope/rope_math.h,
// bias/bias_math.h) run through tests/common/cuda_math_backend.h against the reference backend
// on the whole parity suite (parity_suite.inc), on random phases up to 2^31-1 for every scaling
// type and dtype, and (golden_test.cc) on the golden cases; the fp16/bf16 codec is checked equal
// to kernels/common/types.h's, bit for bit. Also: what the CUDA entry points of backend.h say in
// this build.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/half_codec.h"
#include "kernels/rope/rope_math.h"
#include "tests/common/cuda_math_backend.h"

#define POSENC_PARITY_SUITE CudaMathParityTest
#include "tests/kernels/parity_suite.inc"

namespace posenc::kernels {
namespace {

INSTANTIATE_TEST_SUITE_P(CudaMathOnHost, CudaMathParityTest,
                         ::testing::Values(ParityBackend{
                             "host",
                             []() -> absl::StatusOr<std::unique_ptr<Backend>> {
                               return ::posenc::testing::MakeCudaMathHostBackend();
                             }}),
                         ParityName);

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(CudaMathCodecTest, HalfAndBFloat16ToFloatMatchTypesOnEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float want = HalfToFloat(b), got = hd::HalfBitsToFloat(b);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(Bits(want), Bits(got)) << "half " << h;
    }
    EXPECT_EQ(Bits(BFloat16ToFloat(b)), Bits(hd::BFloat16BitsToFloat(b))) << "bf16 " << h;
  }
}

void ExpectSameRounding(double v) {
  ASSERT_EQ(DoubleToHalf(v), hd::DoubleToHalfBits(v)) << "half of " << v;
  ASSERT_EQ(DoubleToBFloat16(v), hd::DoubleToBFloat16Bits(v)) << "bf16 of " << v;
}

TEST(CudaMathCodecTest, RoundingFromDoubleMatchesTypesAtEveryTieAndAtRandom) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double v : {0.0,
                   -0.0,
                   inf,
                   -inf,
                   std::nan(""),
                   65504.0,
                   65519.999,
                   65520.0,
                   1e-300,
                   -1e-300,
                   5.960464477539063e-08,
                   2.9802322387695312e-08,
                   0x1p-25,
                   3e38,
                   3.4e38,
                   3.3961775292304e38,
                   0x1p-133,
                   0x1p-134,
                   0x1.8p-134,
                   1e-45}) {
    ExpectSameRounding(v);
  }
  // Every tie between neighbouring fp16 / bf16 values, and its neighbours.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = HalfToFloat(static_cast<uint16_t>(h));
    const double hi = HalfToFloat(static_cast<uint16_t>(h + 1));
    const double mid = (lo + hi) / 2;
    for (double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, inf)}) {
      ExpectSameRounding(v);
      ExpectSameRounding(-v);
    }
  }
  for (uint32_t b = 0; b < 0x7f80; b += 7) {
    const double lo = BFloat16ToFloat(static_cast<uint16_t>(b));
    const double hi = BFloat16ToFloat(static_cast<uint16_t>(b + 1));
    const double mid = (lo + hi) / 2;
    for (double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, inf)}) {
      ExpectSameRounding(v);
    }
  }
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> mant(0.5, 1.0);
  std::uniform_int_distribution<int> exp(-150, 130);
  for (int i = 0; i < 200000; ++i) {
    const double v = std::ldexp(mant(rng), exp(rng)) * (i % 2 ? -1 : 1);
    ExpectSameRounding(v);
  }
}

// Random positions in [0, 2^31) for every scaling type and dtype: RopeCache through the
// kernels' math against the reference (FLOAT32 within 1e-6 * max(1, m), FLOAT16/BFLOAT16 one
// output ulp, FLOAT64 the parity tolerance).
TEST(CudaMathPhaseTest, RandomPositionsUpTo2To31EveryScalingAndDtype) {
  std::mt19937_64 rng(31);
  std::uniform_int_distribution<int64_t> pos(0, kMaxPosition);
  std::vector<int64_t> ids(512);
  for (auto& p : ids) p = pos(rng);
  ids[0] = kMaxPosition;
  ids[1] = 0;
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = {DType::kInt64, {static_cast<int64_t>(ids.size())}, ids.data()};
  const auto host = ::posenc::testing::MakeCudaMathHostBackend();
  for (DType dtype : kFloatTypes) {
    for (auto& [sname, config] : RopeConfigs(128, 128)) {
      auto plan = PlanRopeCache({.config = config,
                                 .layout = RopeCacheLayout::kCompact,
                                 .positions = spec,
                                 .output_dtype = dtype});
      ASSERT_TRUE(plan.ok()) << plan.status();
      Buffer wc(plan->cos, kFill), ws(plan->sin, kFill), gc(plan->cos, kFill), gs(plan->sin, kFill);
      auto want = RunRopeCache(Ref(), *plan, nullptr, wc.view, ws.view);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(RunRopeCache(*host, *plan, nullptr, gc.view, gs.view).ok());
      const RopeFrequencies* f = want->frequencies.get();
      const double m =
          std::max(1.0, config.inverse ? 1 / f->attention_factor : f->attention_factor);
      ExpectParity(wc, gc, Kind::kTable, m, "random cos " + Name(dtype) + " " + sname);
      ExpectParity(ws, gs, Kind::kTable, m, "random sin " + Name(dtype) + " " + sname);
    }
  }
}

// The reduction against long double for phases near its exact limit (omega up to 4).
TEST(CudaMathPhaseTest, ExactPhaseSinCosWithinTwoUlp) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pos(0, kMaxPosition);
  std::uniform_real_distribution<double> omega(0.0, 3.9);
  double worst = 0;
  for (int i = 0; i < 100000; ++i) {
    const auto p = static_cast<double>(pos(rng));
    const long double w = omega(rng);
    const double hi = static_cast<double>(w);
    const double lo = static_cast<double>(w - hi);
    double c, s;
    hd::SinCosExactPhase<true>(p, hi, lo, &c, &s);
    // long double's own phase carries a rounding of up to 2^-64 * phase (2^-31 here)...
    const long double phase = static_cast<long double>(p) * w;
    const double tol = 0x1p-51 + 0x1p-63 * static_cast<double>(phase);
    const double ec = std::fabs(c - static_cast<double>(std::cos(phase)));
    const double es = std::fabs(s - static_cast<double>(std::sin(phase)));
    worst = std::max({worst, ec / tol, es / tol});
    ASSERT_LE(ec, tol) << "p " << p << " w " << static_cast<double>(w);
    ASSERT_LE(es, tol) << "p " << p << " w " << static_cast<double>(w);
  }
  EXPECT_LE(worst, 1.0);
}

// SinusoidSlotColumns is SinusoidSource's inverse: over the slots of a row every column appears
// exactly once, as the sin (0) or cos (1) of the slot's frequency, or as the zero column (-1) of
// a dead slot.
TEST(CudaMathSinusoidTest, SlotColumnsCoverEveryColumnOnceAsSinusoidSourceSays) {
  for (int64_t dim = 1; dim <= 130; ++dim) {
    const int64_t half = dim / 2;
    for (int layout : {0, 1}) {
      for (int64_t nfreq : {half, half + 1}) {
        if (nfreq == half + 1 && dim % 2 == 0) continue;  // only odd VASWANI has ceil(D/2)
        std::vector<int> seen(static_cast<size_t>(dim), 0);
        for (int64_t j = 0; j < (dim + 1) / 2; ++j) {
          int64_t sc = -2, cc = -2;
          const bool live = hd::SinusoidSlotColumns(layout, dim, nfreq, j, &sc, &cc);
          ASSERT_TRUE(sc >= 0 && sc < dim) << dim << " " << layout << " " << j;
          ASSERT_TRUE(cc == -1 || (cc >= 0 && cc < dim)) << dim << " " << layout << " " << j;
          int64_t k;
          const int which = hd::SinusoidSource(layout, dim, nfreq, sc, &k);
          EXPECT_EQ(which, live ? 0 : -1) << dim << " " << layout << " " << j;
          if (live) {
            EXPECT_EQ(k, j);
          }
          ++seen[sc];
          if (cc >= 0) {
            EXPECT_TRUE(live);
            EXPECT_EQ(hd::SinusoidSource(layout, dim, nfreq, cc, &k), 1);
            EXPECT_EQ(k, j);
            ++seen[cc];
          }
        }
        for (int64_t c = 0; c < dim; ++c) {
          EXPECT_EQ(seen[c], 1) << "column " << c << " D=" << dim << " layout " << layout;
        }
      }
    }
  }
}

// The table walk (AngleWalk): exact values (bit for bit) at the first position and after a jump,
// the previous value again for a repeat, angle addition for +1 steps (from full-polynomial anchors)
// within 1e-14 of the exact cos/sin also far from zero (2^31 - 100), and the exact value
// everywhere without kWalk.
TEST(CudaMathWalkTest, AnglesWalkFromExactAnchorsAndRepeat) {
  const std::vector<double> omega = {1.0, 0.5, 1e-4, 2.5e-9, 3.1};
  std::vector<double> pos;
  for (double p0 : {0.0, 17.0, 2147483647.0 - 100}) {
    for (int i = 0; i < 40; ++i) pos.push_back(p0 + i);
    pos.push_back(pos.back());  // repeat
    pos.push_back(pos.back() + 1);
    pos.push_back(pos.back() - 3);  // step back: an anchor
    pos.push_back(pos.back() + 1);
  }
  for (double om : omega) {
    const long double wl = om;
    const double hi = static_cast<double>(wl), lo = static_cast<double>(wl - hi);
    hd::AngleWalk<double> w = hd::StartAngleWalk<true, double>(hi, lo);
    hd::AngleWalk<double> wf = hd::StartAngleWalk<true, double>(hi, lo);  // full anchors
    hd::AngleWalk<double> e = hd::StartAngleWalk<false, double>(hi, lo);
    hd::AngleWalk<int64_t> wi = hd::StartAngleWalk<true, int64_t>(hi, lo);  // integer positions
    double prev = -1, prev_c = 0, prev_s = 0;
    for (size_t i = 0; i < pos.size(); ++i) {
      const double p = pos[i];
      hd::AngleWalkTo<false, true>(&w, p);
      hd::AngleWalkTo<true, true>(&wf, p);
      hd::AngleWalkTo<true, false>(&e, p);
      hd::AngleWalkTo<false, true>(&wi, static_cast<int64_t>(p));
      EXPECT_EQ(wi.c, w.c);  // the same walk
      EXPECT_EQ(wi.s, w.s);
      double c, s, cs, ss;
      hd::SinCosExactPhase<true>(p, hi, lo, &c, &s);
      hd::SinCosExactPhase<false>(p, hi, lo, &cs, &ss);
      EXPECT_EQ(e.c, c);  // no walk: exact everywhere
      EXPECT_EQ(e.s, s);
      if (i == 0 || (p != prev + 1 && p != prev)) {
        EXPECT_EQ(w.c, cs) << "anchor at " << p;
        EXPECT_EQ(w.s, ss) << "anchor at " << p;
      } else if (p == prev) {
        EXPECT_EQ(w.c, prev_c);
        EXPECT_EQ(w.s, prev_s);
      }
      // The short polynomial's anchors are off by < 2e-9; the steps add ~1e-16 each.
      EXPECT_NEAR(w.c, c, 2e-9) << om << " at " << p;
      EXPECT_NEAR(w.s, s, 2e-9) << om << " at " << p;
      EXPECT_NEAR(wf.c, c, 1e-14) << om << " at " << p;
      EXPECT_NEAR(wf.s, s, 1e-14) << om << " at " << p;
      prev = p;
      prev_c = w.c;
      prev_s = w.s;
    }
  }
}

TEST(CudaEntryPointsTest, AgreeWithTheBuild) {
#if defined(POSENC_HAVE_CUDA)
  EXPECT_TRUE(CudaBuiltIn());
  auto b = MakeCudaBackend({}, *MakeCpuBackend(CpuBackendOptions{1, ""}));
  if (ListCudaDevices().empty()) {
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_NE(b.status().message().find("cuda"), std::string::npos) << b.status();
  } else {
    EXPECT_TRUE(b.ok()) << b.status();
  }
#else
  EXPECT_FALSE(CudaBuiltIn());
  EXPECT_TRUE(ListCudaDevices().empty());
  EXPECT_EQ(MakeCudaBackend({}, *MakeCpuBackend(CpuBackendOptions{1, ""})).status().code(),
            absl::StatusCode::kUnimplemented);
#endif
}

}  // namespace
}  // namespace posenc::kernels
