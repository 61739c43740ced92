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
#include <type_traits>

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

// fma(a, b, c) in float or double with one rounding on both sides (std::fma on the host, the FMA
// instruction on the device): double for the exact phase (rope/rope_math.h), float for the
// FLOAT16/BFLOAT16 rotations (rope_math.h's RotatePairInFloat, whose vector types bring their own
// Fma and Fnma, preferred over this template).
template <typename T>
POSENC_HOST_DEVICE T Fma(T a, T b, T c) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "Fma: float or double");
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    return __fmaf_rn(a, b, c);
  } else {
    return __fma_rn(a, b, c);
  }
#else
  if constexpr (std::is_same_v<T, float>) {
    return __builtin_fmaf(a, b, c);
  } else {
    return __builtin_fma(a, b, c);
  }
#endif
}

// c - a * b with one rounding.
template <typename T>
POSENC_HOST_DEVICE T Fnma(T a, T b, T c) {
  return Fma(-a, b, c);
}

}  // namespace posenc::kernels::hd

#endif  // POSENC_KERNELS_COMMON_HOST_DEVICE_H_
