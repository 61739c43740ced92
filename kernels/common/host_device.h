// POSENC_HOST_DEVICE: marks the per-element math that the CUDA kernels (*.cu, nvcc) and the CPU
// tests of that math (tests/kernels/cuda_math_test.cc, every build) share. Under nvcc it is
// `__host__ __device__ inline`; for g++/clang it is plain `inline`, so the same functions are
// compiled and tested on the host in every build, with or without the CUDA toolkit.
//
// Headers built on it (kernels/common/half_codec.h, kernels/rope/rope_math.h,
// kernels/bias/bias_math.h) must stay free of Abseil, the standard library's containers and
// anything else that does not compile for the device: plain scalars and pointers only.
#ifndef POSENC_KERNELS_COMMON_HOST_DEVICE_H_
#define POSENC_KERNELS_COMMON_HOST_DEVICE_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define POSENC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define POSENC_HOST_DEVICE inline
#endif

namespace posenc::kernels::hd {

POSENC_HOST_DEVICE uint64_t DoubleBits(double v) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
}

POSENC_HOST_DEVICE double DoubleFromBits(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
#endif
}

POSENC_HOST_DEVICE float FloatFromBits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

POSENC_HOST_DEVICE uint32_t FloatBits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
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

}  // namespace posenc::kernels::hd

#endif  // POSENC_KERNELS_COMMON_HOST_DEVICE_H_
