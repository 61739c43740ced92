// The inner loops of the optimized CPU backend, compiled once per instruction-set level.
//
// Every *_simd.cc file (cpu/sincos_simd.cc, cpu/convert_simd.cc, rope/apply_rope_simd.cc, and
// cpu/table_simd.cc, which assembles the table) is built three times with different target flags
// (baseline, AVX2+FMA+F16C, AVX-512) into namespaces posenc::kernels::cpu::{scalar,avx2,avx512};
// the CPU backend picks the best table the running processor supports (select.cc). Processors
// other than x86-64 build the portable level only. The loops are plain C++ written for GCC's
// vectorizer; only fp16 conversion uses intrinsics (F16C).
//
// Sin/cos with an exact phase: theta = p*omega is formed as a double-double
// (hi = p*omega_hi, lo = fma(p, omega_hi, -hi) + p*omega_lo), reduced modulo pi/2 by a three-part
// Cody-Waite reduction (exact for |theta| < 2^33), and evaluated by fdlibm's minimax
// polynomials in double. The result is within a few double ulps of the truth for every position
// below 2^31, whatever the output dtype.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_CPU_SIMD_KERNELS_H_
#define POSENC_KERNELS_CPU_SIMD_KERNELS_H_

#include <cstdint>

namespace posenc::kernels::cpu {

// Largest |p * omega| the vector reduction handles exactly; beyond it callers use libm.
inline constexpr double kMaxVectorPhase = 8589934592.0;  // 2^33

struct SimdKernels {
  const char* name;  // "avx512", "avx2", "scalar"

  // c[j] = cos(p[j or 0] * w[j]) * scale, s[j] = sin(...) * sign * scale for j < n, where
  // w = w_hi + w_lo (double-double). `p_stride` is 0 (one position) or 1 (M-RoPE: one per j).
  void (*sincos_f32)(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo,
                     int64_t n, double scale, double sign, float* c, float* s);
  void (*sincos_f64)(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo,
                     int64_t n, double scale, double sign, double* c, double* s);

  // ApplyRope: rotates `rows` head rows in place, row r at x + r*row_stride (elements). NEOX
  // pairs (j, j+half), GPT-J pairs (2j, 2j+1); c and s hold `half` values. Channels past 2*half
  // are untouched.
  void (*apply_rope_f32)(float* x, int64_t rows, int64_t row_stride, const float* c, const float* s,
                         int64_t half, bool gptj);
  void (*apply_rope_f64)(double* x, int64_t rows, int64_t row_stride, const double* c,
                         const double* s, int64_t half, bool gptj);
  // fp16/bf16 rows rotate in double (a rotation can cancel: x_a*c - x_b*s may be far smaller than
  // its terms, and only double keeps the result within 1 output ulp of the exact value).
  void (*apply_rope_f16)(uint16_t* x, int64_t rows, int64_t row_stride, const double* c,
                         const double* s, int64_t half, bool gptj);
  void (*apply_rope_bf16)(uint16_t* x, int64_t rows, int64_t row_stride, const double* c,
                          const double* s, int64_t half, bool gptj);

  // Conversions of n values (round to nearest even; NaN stays NaN).
  void (*f32_to_f16)(const float* in, uint16_t* out, int64_t n);
  void (*f32_to_bf16)(const float* in, uint16_t* out, int64_t n);
  void (*f16_to_f32)(const uint16_t* in, float* out, int64_t n);
  void (*bf16_to_f32)(const uint16_t* in, float* out, int64_t n);
};

namespace scalar {
#include "kernels/cpu/simd_functions.inc"
}  // namespace scalar
namespace avx2 {
#include "kernels/cpu/simd_functions.inc"
}  // namespace avx2
namespace avx512 {
#include "kernels/cpu/simd_functions.inc"
}  // namespace avx512

// The best table this processor supports, or the one named ("avx512", "avx2", "scalar"); null
// if the named level is unknown or not supported here.
const SimdKernels* SelectKernels(const char* name = nullptr);

}  // namespace posenc::kernels::cpu

#endif  // POSENC_KERNELS_CPU_SIMD_KERNELS_H_
