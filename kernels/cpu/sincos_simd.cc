// Exact-phase sin/cos of p*omega for the CPU backend (see simd_kernels.h), shared by Sinusoidal,
// AddPositionEncoding, RopeCache and ApplyRope. Built once per ISA level (POSENC_SIMD_NS).
#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd_kernels.h"

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {
namespace {

// pi/2 split in three parts of 20, 20 and 53 bits: k * kPio2A and k * kPio2B are exact for
// k < 2^33, so theta - k*A - k*B loses nothing.
constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kPio2A = 1.5707950592041016;       // 0x1.921fap+0: top 20 bits of pi/2
constexpr double kPio2B = 1.2675900507019833e-06;   // 0x1.54442p-20: the next 20 bits
constexpr double kPio2C = 7.443547480486623e-13;    // pi/2 - A - B, rounded
constexpr double kRoundMagic = 6755399441055744.0;  // 1.5 * 2^52

// fdlibm __kernel_sin / __kernel_cos minimax coefficients on [-pi/4, pi/4].
constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                 kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                 kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                 kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                 kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;

// kFull: the whole fdlibm polynomial (double accuracy, for FLOAT64 and FLOAT16/BFLOAT16 math);
// otherwise terms through r^9 / r^10, whose truncation error (below 2e-9) vanishes in a float.
template <typename T, bool kFull>
inline void SinCosImpl(const double* __restrict p, int64_t p_stride, const double* __restrict w_hi,
                       const double* __restrict w_lo, int64_t n, double scale, double sign,
                       T* __restrict c, T* __restrict s) {
  for (int64_t j = 0; j < n; ++j) {
    const double pj = p[j * p_stride];
    const double hi = pj * w_hi[j];
    const double lo = std::fma(pj, w_hi[j], -hi) + pj * w_lo[j];
    const double k = (hi * kTwoOverPi + kRoundMagic) - kRoundMagic;
    const double r = (((hi - k * kPio2A) - k * kPio2B) - k * kPio2C) + lo;
    // k mod 4 (k is an integer-valued double; floor(k/4) by rounding k/4 - 0.375).
    const double q = k - 4.0 * ((k * 0.25 - 0.375 + kRoundMagic) - kRoundMagic);
    const double z = r * r;
    double sin_r, cos_r;
    if constexpr (kFull) {
      sin_r = r + r * z * (kS1 + z * (kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)))));
      cos_r =
          1.0 - 0.5 * z + z * z * (kC1 + z * (kC2 + z * (kC3 + z * (kC4 + z * (kC5 + z * kC6)))));
    } else {
      sin_r = r + r * z * (kS1 + z * (kS2 + z * (kS3 + z * kS4)));
      cos_r = 1.0 - 0.5 * z + z * z * (kC1 + z * (kC2 + z * (kC3 + z * kC4)));
    }
    const bool odd = q == 1.0 || q == 3.0;
    double sv = odd ? cos_r : sin_r;
    double cv = odd ? sin_r : cos_r;
    sv = q >= 2.0 ? -sv : sv;
    cv = (q == 1.0 || q == 2.0) ? -cv : cv;
    c[j] = static_cast<T>(cv * scale);
    s[j] = static_cast<T>(sv * (sign * scale));
  }
}

}  // namespace

void SinCosF32(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo, int64_t n,
               double scale, double sign, float* c, float* s) {
  SinCosImpl<float, false>(p, p_stride, w_hi, w_lo, n, scale, sign, c, s);
}

void SinCosF64(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo, int64_t n,
               double scale, double sign, double* c, double* s) {
  SinCosImpl<double, true>(p, p_stride, w_hi, w_lo, n, scale, sign, c, s);
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
