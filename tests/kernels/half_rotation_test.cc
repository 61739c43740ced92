// The FLOAT16/BFLOAT16 rotation of the CPU's vector levels (rope/apply_rope_simd.cc) against the
// per-pair function it vectorizes (rope/rope_math.h's RotateHalfPair, which the CUDA kernel runs):
// the same bits for every lane, tail, style order, special value and subnormal result, on each
// level this processor has, with and without AVX512_BF16's conversion.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/half_codec.h"
#include "kernels/common/types.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels::cpu {
namespace {

using RotateFn = void (*)(const RopeRows&, const HalfRopeFactors&);

struct Level {
  std::string name;
  RotateFn f16, bf16;
  bool available;
};

std::vector<Level> VectorLevels() {
  const bool avx512 = SelectKernels("avx512") != nullptr, avx2 = SelectKernels("avx2") != nullptr;
  std::vector<Level> out;
#if defined(__x86_64__)
  out.push_back({"avx512", avx512::ApplyRopeRotateF16, avx512::ApplyRopeRotateBf16, avx512});
  out.push_back({"avx512 without AVX512_BF16", avx512::ApplyRopeRotateF16,
                 avx512::ApplyRopeRotateBf16Portable, avx512});
  out.push_back({"avx2", avx2::ApplyRopeRotateF16, avx2::ApplyRopeRotateBf16, avx2});
#endif
  return out;
}

// The cos/sin (times m and the sign) of `n` table entries and their float factors.
struct Angles {
  std::vector<double> c, s;
  std::vector<float> cf, t_hi, t_lo;
  Angles(int64_t n, std::mt19937& gen) : c(n), s(n), cf(n), t_hi(n), t_lo(n) {
    std::uniform_real_distribution<double> angle(-8, 8);
    const double m = 1.2;
    for (int64_t i = 0; i < n; ++i) {
      // Entry 3 sits next to a cos zero (|t| > 2^20: the double path); entry 0 is position 0.
      const double a = i == 0 ? 0.0 : i == 3 ? M_PI / 2 + 1e-7 : angle(gen);
      c[i] = std::cos(a) * m;
      s[i] = std::sin(a) * m;
      hd::FloatRotationFactors(c[i], s[i], &cf[i], &t_hi[i], &t_lo[i]);
    }
  }
  HalfRopeFactors Factors() const {
    return {c.data(), s.data(), cf.data(), t_hi.data(), t_lo.data()};
  }
};

// Values of every kind: random, cancelling-prone equal pairs, inf, NaN, the largest finite, tiny
// (subnormal results in float), zeros. `finite`: no inf or NaN, so that whole passes of vectors
// take the vector loops' arithmetic rather than the scalar path an inf or NaN sends them to.
uint16_t RandomBits(bool bf16, std::mt19937& gen, bool finite) {
  std::uniform_int_distribution<int> kind(finite ? 2 : 0, 15);
  std::uniform_real_distribution<double> unit(-2, 2);
  const double big = bf16 ? 3.38e38 : 65504.0, tiny = bf16 ? 3e-39 : 6e-8;
  double v;
  switch (kind(gen)) {
    case 0: v = std::numeric_limits<double>::infinity(); break;
    case 1: v = std::nan(""); break;
    case 2: v = big * (unit(gen) < 0 ? -1 : 1); break;
    case 3: v = tiny * unit(gen); break;
    case 4: v = 0; break;
    default: v = unit(gen); break;
  }
  return bf16 ? DoubleToBFloat16(v) : DoubleToHalf(v);
}

// RotateHalfPair over the rows of `a` (x: `x`), row r with the angles of entry r*table_stride on.
template <bool kBf16>
void Expected(std::vector<uint16_t>* x, const RopeRows& a, const Angles& g) {
  for (int64_t r = 0; r < a.rows; ++r) {
    uint16_t* row = x->data() + r * a.row_stride;
    const std::vector<uint16_t> in(row, row + 2 * a.half);
    for (int64_t j = 0; j < a.half; ++j) {
      const int64_t i = r * a.table_stride + j;
      uint16_t xa = in[a.gptj_in ? 2 * j : j], xb = in[a.gptj_in ? 2 * j + 1 : j + a.half];
      hd::RotateHalfPair<kBf16>(&xa, &xb, g.cf[i], g.t_hi[i], g.t_lo[i], g.c[i], g.s[i]);
      row[a.gptj_out ? 2 * j : j] = xa;
      row[a.gptj_out ? 2 * j + 1 : j + a.half] = xb;
    }
  }
}

// A NaN's sign and payload are not part of the result (the same expression gives 0x7e00 or 0xfe00
// by compiler and optimization level: the ASan build's scalar function gives the negative one).
bool BothNan(bool bf16, uint16_t a, uint16_t b) {
  const uint16_t exponent = bf16 ? 0x7f80 : 0x7c00;
  const auto is_nan = [&](uint16_t v) {
    return (v & exponent) == exponent && (v & ~exponent & 0x7fff) != 0;
  };
  return is_nan(a) && is_nan(b);
}

TEST(HalfRotationTest, EveryVectorLevelGivesRotateHalfPairsBits) {
  std::mt19937 gen(5);
  int checked = 0;
  for (const Level& level : VectorLevels()) {
    if (!level.available) continue;
    for (bool bf16 : {false, true}) {
      for (int64_t half : {1, 5, 8, 15, 16, 17, 31, 32, 33, 40, 47, 64, 100}) {
        // x2: rows of only rotary channels (gap 0: AVX2 BFLOAT16 NEOX's split loop) and rows
        // with channels that pass through (partial rotary); x2: finite values only.
        for (int order = 0; order < 32; ++order) {  // NEOX, GPT-J, DEEPSEEK, its inverse
          RopeRows a;                               // x4: each row with angles of its own
          const int64_t gap = (order & 8) != 0 ? 0 : 3;
          const bool finite = (order & 16) != 0;
          a.gptj_in = order % 4 == 1 || order % 4 == 2;
          a.gptj_out = order % 4 == 1 || order % 4 == 3;
          a.rows = 7;
          a.row_stride = 2 * half + gap;
          a.half = half;
          a.table_stride = order % 8 >= 4 ? half : 0;
          a.prefetch = half % 2 == 0;  // the rows' prefetches reach past the end of x
          const Angles g(a.rows * half, gen);
          std::vector<uint16_t> x(a.rows * a.row_stride);
          for (uint16_t& v : x) v = RandomBits(bf16, gen, finite);
          std::vector<uint16_t> want = x, got = x, scratch(a.rows * 2 * half);
          a.x = got.data();
          a.scratch = scratch.data();
          if (bf16) {
            Expected<true>(&want, a, g);
            level.bf16(a, g.Factors());
          } else {
            Expected<false>(&want, a, g);
            level.f16(a, g.Factors());
          }
          int bad = 0;
          for (size_t i = 0; i < x.size(); ++i) {
            if (want[i] != got[i] && !BothNan(bf16, want[i], got[i]) && ++bad <= 3) {
              ADD_FAILURE() << level.name << (bf16 ? " bf16" : " f16") << " half " << half
                            << " order " << order << " [" << i << "]: got 0x" << std::hex << got[i]
                            << ", want 0x" << want[i] << std::dec;
            }
          }
          ++checked;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no vector level on this processor";
}

}  // namespace
}  // namespace posenc::kernels::cpu
