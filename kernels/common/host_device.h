// POSENC_HOST_DEVICE: marks the per-element math that the CUDA kernels (*.cu, nvcc) and the CPU
// tests of that math (tests/kernels/cuda_math_test.cc, every build) share. Under nvcc it is
// `__host__ __device__ inline`; for g++/clang it is `static inline`, so the same functions are
// compiled and tested on the host in every build, with or without the CUDA toolkit.
//
// Headers built on it (kernels/common/half_codec.h, kernels/rope/rope_math.h,
// kernels/bias/bias_math.h) must stay free of Abseil, the standard library's containers and
// anything else that does not compile for the device: plain scalars and pointers only.
#ifndef POSENC_KERNELS_COMMON_HOST_DEVICE_H_
#define POSENC_KERNELS_COMMON_HOST_DEVICE_H_

#include <cstdint>
#include <cstring>

// On the host the functions have internal linkage (static): cpu/sincos_simd.cc inlines them into
// one object per ISA level (scalar, AVX2, AVX-512), and an external inline copy compiled with
// AVX-512 could otherwise be the one the linker keeps for the scalar path too.
#if defined(__CUDACC__)
#define POSENC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define POSENC_HOST_DEVICE static inline
#endif

namespace posenc::kernels::hd {

// The bits of `v` read as a `To` of the same size (std::bit_cast, which C++17 lacks). memcpy is
// declared __host__ __device__ by the CUDA runtime; on both sides a fixed-size copy of a local
// compiles to a register move.
template <typename To, typename From>
POSENC_HOST_DEVICE To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs types of one size");
  To out;
  memcpy(&out, &v, sizeof out);
  return out;
}

// fma(a, b, c) with one rounding on both sides (std::fma on the host, the FMA instruction on the
// device).
POSENC_HOST_DEVICE double Fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return __builtin_fma(a, b, c);
#endif
}

// The same in float (FLOAT16/BFLOAT16 rotations, rope/rope_math.h's RotatePairInFloat).
POSENC_HOST_DEVICE float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// c - a * b with one rounding.
POSENC_HOST_DEVICE float Fnma(float a, float b, float c) { return Fma(-a, b, c); }

}  // namespace posenc::kernels::hd

#endif  // POSENC_KERNELS_COMMON_HOST_DEVICE_H_
