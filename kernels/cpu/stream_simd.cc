// Copies with non-temporal (streaming) stores for the CPU backend's large write-only outputs (bias
// matrices, RoPE and sinusoidal tables): the destination's lines are written without being read
// first, which a plain store must do, so a write-only output moves half the bytes. Built once per
// ISA level (POSENC_SIMD_NS); the scalar level copies with memcpy.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd_kernels.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {

void StreamCopy(void* dst, const void* src, int64_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#if defined(__AVX2__)
  // Up to the destination's next 64-byte boundary with plain stores, whole aligned lines
  // streamed, the rest plain.
  const int64_t head = std::min<int64_t>(n, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + 64 <= n; i += 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
#else
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), lo);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), hi);
#endif
  }
  std::memcpy(d + i, s + i, static_cast<size_t>(n - i));
#else
  std::memcpy(d, s, static_cast<size_t>(n));
#endif
}

void StreamFence() {
#if defined(__AVX2__)
  _mm_sfence();
#endif
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
