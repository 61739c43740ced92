// The CUDA kernels of Sinusoidal and AddPositionEncoding (launch functions in
// kernels/cuda/launch.h; the per-element math, shared with the CPU tests, in rope/rope_math.h).
//
// Sinusoidal walks as RopeCache does (rope/cuda.cu's RopeCacheKernel): one frequency slot j (its
// sin and cos columns, hd::SinusoidSlotColumns) of K consecutive tokens per thread, a warp on 32
// neighbouring slots of one row; hd::AngleWalk gives the exact short-polynomial cos/sin at the
// first token and wherever a position does not follow the previous one, angle addition from one
// position to the next, the same value for a repeated one (positions compared as integers). An
// exact sin/cos per element (~30 double operations) kept the tables compute-bound at 0.09-0.19 of
// a device copy (H200). FLOAT64 tables (K = 1) take the exact full-polynomial value of every
// entry. INTERLEAVED rows with even D store each sin/cos pair as one access. FLOAT16/BFLOAT16
// tables take the short polynomial too, as RopeCache's (its truncation error, below 2e-9 and
// relative to the value where the value is small, is far inside their ulp).
//
// AddPositionEncoding: one thread per output element, its column's exact-phase sin/cos
// (hd::SinusoidValue), one rounding; it adds x * scale in the compute type (float for FLOAT32,
// double otherwise, as the CPU backend).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_elements.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One INTERLEAVED sin/cos pair as a single access.
template <typename S>
struct alignas(2 * sizeof(S)) SinCosPair {
  S sin, cos;
};

// I: the index type (32-bit where the count fits); K: tokens per thread; kPair: INTERLEAVED with
// even D and an output aligned for SinCosPair.
template <typename S, typename I, int K, bool kPair>
__global__ void __launch_bounds__(kThreads) SinusoidalKernel(SinusoidalLaunch a) {
  S* out = static_cast<S*>(a.out);
  const I slots = static_cast<I>((a.dim + 1) / 2), tokens = static_cast<I>(a.tokens);
  const I n = (tokens + K - 1) / K * slots;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I t0 = i / slots * K, j = i % slots;
    const I t1 = t0 + K < tokens ? t0 + K : tokens;
    int64_t sc, cc;
    const bool live = hd::SinusoidSlotColumns(a.layout, a.dim, a.nfreq, j, &sc, &cc);
    hd::AngleWalk<int64_t> w =
        hd::StartAngleWalk<(K > 1), int64_t>(live ? a.w_hi[j] : 0.0, live ? a.w_lo[j] : 0.0);
    for (I t = t0; t < t1; ++t) {
      const int32_t p = a.positions[t];
      double sv = 0, cv = 0;  // padding (p < 0) and a zero column
      if (live && p >= 0) {
        hd::AngleWalkTo<sizeof(S) == 8, (K > 1)>(&w, static_cast<int64_t>(p));
        sv = w.s;
        cv = w.c;
      }
      S* row = out + static_cast<int64_t>(t) * a.dim;
      if constexpr (kPair) {
        *reinterpret_cast<SinCosPair<S>*>(row + sc) = {FromDouble<S>(sv), FromDouble<S>(cv)};
      } else {
        row[sc] = FromDouble<S>(sv);
        if (cc >= 0) row[cc] = FromDouble<S>(cv);
      }
    }
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

template <typename S, typename I, bool kPair>
cudaError_t LaunchSinusoidalT(const SinusoidalLaunch& a, cudaStream_t stream) {
  constexpr int kWalk = sizeof(S) == 8 ? 1 : 16;  // tokens per thread
  const int64_t n = (a.tokens + kWalk - 1) / kWalk * ((a.dim + 1) / 2);
  SinusoidalKernel<S, I, kWalk, kPair><<<Blocks(n, kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

int LaunchSinusoidal(const SinusoidalLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (a.tokens == 0 || a.dim == 0) return cudaSuccess;
  return DispatchFloat(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const bool pair = a.layout == 0 && a.dim % 2 == 0 &&
                      reinterpret_cast<uintptr_t>(a.out) % sizeof(SinCosPair<S>) == 0;
    const int64_t slots = (a.dim + 1) / 2;
    // 32-bit indices where every index the grid-stride loop forms fits (tokens + K included).
    const bool narrow = a.tokens * slots + static_cast<int64_t>(kThreads) * 65535 + a.tokens + 64 <
                        (int64_t{1} << 31);
    if (narrow) {
      return pair ? LaunchSinusoidalT<S, int32_t, true>(a, st)
                  : LaunchSinusoidalT<S, int32_t, false>(a, st);
    }
    return pair ? LaunchSinusoidalT<S, int64_t, true>(a, st)
                : LaunchSinusoidalT<S, int64_t, false>(a, st);
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
