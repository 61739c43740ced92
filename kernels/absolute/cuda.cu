// The CUDA kernels of Sinusoidal and AddPositionEncoding (launch functions in
// kernels/cuda/launch.h; the per-element math, shared with the CPU tests, in rope/rope_math.h).
// One thread per output element: its column's frequency and sin/cos (hd::SinusoidValue), the
// exact-phase sin/cos, one rounding; AddPositionEncoding adds x * scale in the compute type
// (float for FLOAT32, double otherwise, as the CPU backend).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_elements.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels::cuda {
namespace {

template <typename S>
__global__ void SinusoidalKernel(SinusoidalLaunch a) {
  S* out = static_cast<S*>(a.out);
  const int64_t n = a.tokens * a.dim;
  POSENC_GRID_STRIDE(i, n) {
    const int64_t t = i / a.dim, col = i % a.dim;
    const int32_t p = a.positions[t];
    double v = 0;
    if (p >= 0) {
      // FLOAT32 tables round the short polynomial to float; the others keep the full double.
      v = hd::SinusoidValue<ComputeType<S>>(a.layout, a.dim, a.nfreq, col, p, a.w_hi, a.w_lo);
    }
    out[i] = FromDouble<S>(v);
  }
}

__device__ __forceinline__ double LoadAny(const void* base, int dtype, int64_t i) {
  switch (dtype) {
    case 0: return static_cast<const float*>(base)[i];
    case 1: return ToDouble(static_cast<const Half*>(base)[i]);
    case 2: return ToDouble(static_cast<const BHalf*>(base)[i]);
    default: return static_cast<const double*>(base)[i];
  }
}

template <typename S, typename T>
__global__ void AddPositionEncodingKernel(AddPositionEncodingLaunch a) {
  const S* x = static_cast<const S*>(a.x);
  S* y = static_cast<S*>(a.y);
  const T scale = static_cast<T>(a.scale);
  const int64_t n = a.tokens * a.out_dim;
  POSENC_GRID_STRIDE(i, n) {
    const int64_t t = i / a.out_dim, col = i % a.out_dim;
    const int32_t p = a.positions[t];
    const bool x_col = col < a.dim;
    const int64_t pe_col = a.concat ? col - a.dim : col;
    T pe = 0;
    if (p >= 0 && (!a.concat || !x_col)) {
      if (a.w_hi != nullptr) {
        pe = hd::SinusoidValue<T>(a.layout, a.pe_dim, a.nfreq, pe_col,
                                  static_cast<double>(p + a.shift), a.w_hi, a.w_lo);
      } else {
        pe = static_cast<T>(
            LoadAny(a.table, a.table_dtype, (p + a.table_offset) * a.pe_dim + pe_col));
      }
    }
    T v;
    if (x_col) {
      const T xs = Load<S, T>(x[t * a.dim + col]) * scale;
      v = a.concat ? xs : xs + pe;
    } else {
      v = pe;
    }
    y[i] = Store<S, T>(v);
  }
}

}  // namespace

int LaunchSinusoidal(const SinusoidalLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = a.tokens * a.dim;
  if (n == 0) return cudaSuccess;
  return DispatchFloat(a.dtype, [&](auto tag) {
    SinusoidalKernel<decltype(tag)><<<Blocks(n, 256), 256, 0, st>>>(a);
    return cudaGetLastError();
  });
}

int LaunchAddPositionEncoding(const AddPositionEncodingLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = a.tokens * a.out_dim;
  if (n == 0) return cudaSuccess;
  return DispatchFloat(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    AddPositionEncodingKernel<S, ComputeType<S>><<<Blocks(n, 256), 256, 0, st>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace posenc::kernels::cuda
