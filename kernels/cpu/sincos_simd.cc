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

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
