// The CUDA kernel of Sinusoidal (launch function in kernels/cuda/launch.h; the per-element math,
// shared with the CPU tests, in rope/rope_math.h). One thread per output element: its column's
// frequency and sin/cos (hd::SinusoidSource), the exact-phase sin/cos, one rounding.
// AddPositionEncoding runs on the CPU backend inside the cuda backend (kernels/cuda/backend.cc).
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
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / a.dim, col = i % a.dim;
    const int32_t p = a.positions[t];
    int64_t k;
    const int which = hd::SinusoidSource(a.layout, a.dim, a.nfreq, col, &k);
    double v = 0;
    if (p >= 0 && which >= 0) {
      double c, s;
      if constexpr (sizeof(S) == 4) {
        hd::SinCosExactPhase<false>(static_cast<double>(p), a.w_hi[k], a.w_lo[k], &c, &s);
        v = static_cast<float>(which == 0 ? s : c);  // FLOAT32 math rounds to float
      } else {
        hd::SinCosExactPhase<true>(static_cast<double>(p), a.w_hi[k], a.w_lo[k], &c, &s);
        v = which == 0 ? s : c;
      }
    }
    out[i] = FromDouble<S>(v);
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

}  // namespace posenc::kernels::cuda
