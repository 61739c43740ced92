// <immintrin.h> for the x86 vector levels (files built once per ISA level with __AVX2__ set),
// nothing elsewhere. GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_*
// self-initialization), so the include is wrapped to silence that one warning there.
#ifndef POSENC_KERNELS_CPU_IMMINTRIN_H_
#define POSENC_KERNELS_CPU_IMMINTRIN_H_

#if defined(__AVX2__)
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

#endif  // POSENC_KERNELS_CPU_IMMINTRIN_H_
