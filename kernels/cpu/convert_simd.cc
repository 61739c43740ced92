// fp16/bf16 <-> fp32 conversions of the CPU backend (round to nearest even; NaN stays NaN), F16C
// where the ISA level has it. Built once per ISA level (POSENC_SIMD_NS).
#include <bit>
#include <cstdint>

#include "kernels/common/types.h"
#include "kernels/cpu/simd_kernels.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {

void Bf16ToF32(const uint16_t* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
  }
}

void F32ToBf16(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(in[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

void F16ToF32(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void F32ToF16(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
