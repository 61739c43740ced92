// Exact-phase sin/cos of p*omega for the CPU backend (see simd_kernels.h), shared by Sinusoidal,
// AddPositionEncoding, RopeCache and ApplyRope. Built once per ISA level (POSENC_SIMD_NS).
#include <cstdint>

#include "kernels/cpu/simd_kernels.h"
#include "kernels/rope/rope_math.h"

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {

// rope_math.h's RopeCosSin (exact phase, fdlibm polynomials), the same function the CUDA kernels
// run, in loops that the compiler vectorizes for the ISA level. FLOAT32 takes the short polynomial
// (truncation error below 2e-9, invisible in a float); double the whole one (FLOAT64, and
// FLOAT16/BFLOAT16 math).
void SinCosF32(const double* __restrict p, int64_t p_stride, const double* __restrict w_hi,
               const double* __restrict w_lo, int64_t n, double scale, double sign,
               float* __restrict c, float* __restrict s) {
  for (int64_t j = 0; j < n; ++j) {
    hd::RopeCosSin<float>(p[j * p_stride], w_hi[j], w_lo[j], scale, sign, &c[j], &s[j]);
  }
}

void SinCosF64(const double* __restrict p, int64_t p_stride, const double* __restrict w_hi,
               const double* __restrict w_lo, int64_t n, double scale, double sign,
               double* __restrict c, double* __restrict s) {
  for (int64_t j = 0; j < n; ++j) {
    hd::RopeCosSin<double>(p[j * p_stride], w_hi[j], w_lo[j], scale, sign, &c[j], &s[j]);
  }
}

void AngleStep(double* __restrict c, double* __restrict s, const double* __restrict cw,
               const double* __restrict sw, int64_t n, double c_scale, double s_scale,
               float* __restrict cf, float* __restrict sf) {
  for (int64_t j = 0; j < n; ++j) {
    const double cj = c[j], sj = s[j];
    const double cn = cj * cw[j] - sj * sw[j];
    const double sn = sj * cw[j] + cj * sw[j];
    c[j] = cn;
    s[j] = sn;
    cf[j] = static_cast<float>(cn * c_scale);
    sf[j] = static_cast<float>(sn * s_scale);
  }
}

void CosSinToFloat(const double* __restrict c, const double* __restrict s, int64_t n,
                   double c_scale, double s_scale, float* __restrict cf, float* __restrict sf) {
  for (int64_t j = 0; j < n; ++j) {
    cf[j] = static_cast<float>(c[j] * c_scale);
    sf[j] = static_cast<float>(s[j] * s_scale);
  }
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
