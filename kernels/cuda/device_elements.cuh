// Element access of the CUDA kernels (nvcc only): the storage types of the float dtypes and
// their conversions through kernels/common/half_codec.h (bit-identical to types.h's).
#ifndef POSENC_KERNELS_CUDA_DEVICE_ELEMENTS_CUH_
#define POSENC_KERNELS_CUDA_DEVICE_ELEMENTS_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/half_codec.h"

namespace posenc::kernels::cuda {

struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

__device__ __forceinline__ double ToDouble(float v) { return v; }
__device__ __forceinline__ double ToDouble(double v) { return v; }
__device__ __forceinline__ double ToDouble(Half v) { return hd::HalfBitsToFloat(v.bits); }
__device__ __forceinline__ double ToDouble(BHalf v) { return hd::BFloat16BitsToFloat(v.bits); }
__device__ __forceinline__ float ToFloat(float v) { return v; }

// Rounds once from the compute value (StoreFromDouble's conversions).
template <typename S>
__device__ __forceinline__ S FromDouble(double v);
template <>
__device__ __forceinline__ float FromDouble<float>(double v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ double FromDouble<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ Half FromDouble<Half>(double v) {
  return Half{hd::DoubleToHalfBits(v)};
}
template <>
__device__ __forceinline__ BHalf FromDouble<BHalf>(double v) {
  return BHalf{hd::DoubleToBFloat16Bits(v)};
}

// Compute-type access: FLOAT32 in float, the others in double.
template <typename S, typename T>
__device__ __forceinline__ T Load(S v) {
  return static_cast<T>(ToDouble(v));
}
template <>
__device__ __forceinline__ float Load<float, float>(float v) {
  return v;
}
template <typename S, typename T>
__device__ __forceinline__ S Store(T v) {
  return FromDouble<S>(static_cast<double>(v));
}
template <>
__device__ __forceinline__ float Store<float, float>(float v) {
  return v;
}

// The compute type of a storage type: FLOAT32 in float, the others in double (as the CPU backend).
template <typename S>
using ComputeType = std::conditional_t<sizeof(S) == 4, float, double>;

// V elements moved as one 16-byte access (V * sizeof(E) == 16 only).
template <typename E, int V>
struct alignas(16) Pack {
  static_assert(V * sizeof(E) == 16, "a Pack is one 16-byte access");
  E v[V];
};

// Grid-stride loop over i in [0, n).
#define POSENC_GRID_STRIDE(i, n)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Calls fn(S{}) with the storage type of a float dtype code (0 f32, 1 f16, 2 bf16, 3 f64).
template <typename Fn>
__host__ cudaError_t DispatchFloat(int dtype, Fn&& fn) {
  switch (dtype) {
    case 0: return fn(float{});
    case 1: return fn(Half{});
    case 2: return fn(BHalf{});
    case 3: return fn(double{});
    default: return cudaErrorInvalidValue;
  }
}

// Blocks for n items of `threads` threads, capped (grid-stride loops cover the rest).
inline unsigned Blocks(int64_t n, int threads, int64_t cap = 65535) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

}  // namespace posenc::kernels::cuda

#endif  // POSENC_KERNELS_CUDA_DEVICE_ELEMENTS_CUH_
