// The CUDA kernels of ApplyRope and RopeCache (launch functions in kernels/cuda/launch.h; the
// per-element math, shared with the CPU tests, in rope/rope_math.h).
//
// ApplyRope: one block per token (grid-stride over tokens): the block computes the token's cos/sin
// once into shared memory (kRopeChunk frequencies at a time) and then rotates every head of q
// and k in place from it. NEOX/GPT-J rows move in 16-byte vectors where the strides allow (the
// host picks `vector`); DEEPSEEK stages each head's rotary channels in shared memory, since its
// output order differs from its input order.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_elements.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// The position of token t for frequency j (M-RoPE picks the component), as a double.
__device__ __forceinline__ double AnglePosition(const RopeAngles& a, int64_t t, int64_t j,
                                                int32_t p0) {
  if (a.component == nullptr) return static_cast<double>(p0);
  return static_cast<double>(a.positions[static_cast<int64_t>(a.component[j]) * a.tokens + t]);
}

// Rotates pairs [first, first + n) of the chunk in every head of one token; heads of q come
// first, then those of k. V storage elements per access.
template <typename S, typename T, int V>
__device__ void RotateChunk(const ApplyRopeLaunch& a, int64_t t, int64_t j0, int64_t n, const T* c,
                            const T* s) {
  const int64_t half = a.angles.half;
  // 32-bit item arithmetic (the host guarantees heads * kRopeChunk * 2 < 2^31): 64-bit integer
  // division is slow on the GPU.
  const int heads = static_cast<int>(a.q_heads + a.k_heads);
  const int q_heads = static_cast<int>(a.q_heads);
  const int64_t b = t / a.seq, sq = t % a.seq;
  S* qbase = static_cast<S*>(a.q) + b * a.q_batch + sq * a.q_seq;
  S* kbase = a.k ? static_cast<S*>(a.k) + b * a.k_batch + sq * a.k_seq : nullptr;
  if (a.style == 0) {  // NEOX: V consecutive pairs, halves at j and j + half
    const int per_head = static_cast<int>(n / V);
    for (int item = threadIdx.x; item < heads * per_head; item += blockDim.x) {
      const int h = item / per_head, jj = (item % per_head) * V;
      S* row = h < q_heads ? qbase + h * a.q_head : kbase + (h - q_heads) * a.k_head;
      S* pa = row + j0 + jj;
      S* pb = pa + half;
      if constexpr (V == 1) {  // scalar accesses (a Pack is 16-byte aligned: not for these)
        T xa = Load<S, T>(*pa), xb = Load<S, T>(*pb);
        hd::RotatePair<T>(&xa, &xb, c[jj], s[jj]);
        *pa = Store<S, T>(xa);
        *pb = Store<S, T>(xb);
      } else {
        Pack<S, V> va = *reinterpret_cast<Pack<S, V>*>(pa);
        Pack<S, V> vb = *reinterpret_cast<Pack<S, V>*>(pb);
#pragma unroll
        for (int u = 0; u < V; ++u) {
          T xa = Load<S, T>(va.v[u]), xb = Load<S, T>(vb.v[u]);
          hd::RotatePair<T>(&xa, &xb, c[jj + u], s[jj + u]);
          va.v[u] = Store<S, T>(xa);
          vb.v[u] = Store<S, T>(xb);
        }
        *reinterpret_cast<Pack<S, V>*>(pa) = va;
        *reinterpret_cast<Pack<S, V>*>(pb) = vb;
      }
    }
    return;
  }
  // GPT-J: V storage elements are V/2 interleaved pairs (V == 1: one pair per item).
  constexpr int kPairs = V >= 2 ? V / 2 : 1;
  constexpr int kElems = 2 * kPairs;
  const int per_head = static_cast<int>(n / kPairs);
  for (int item = threadIdx.x; item < heads * per_head; item += blockDim.x) {
    const int h = item / per_head, jj = (item % per_head) * kPairs;
    S* row = h < q_heads ? qbase + h * a.q_head : kbase + (h - q_heads) * a.k_head;
    S* at = row + 2 * (j0 + jj);
    S v[kElems];
    if constexpr (V >= 2) {
      Pack<S, V> p = *reinterpret_cast<Pack<S, V>*>(at);
#pragma unroll
      for (int u = 0; u < kElems; ++u) v[u] = p.v[u];
    } else {
      v[0] = at[0];
      v[1] = at[1];
    }
#pragma unroll
    for (int u = 0; u < kPairs; ++u) {
      T xa = Load<S, T>(v[2 * u]), xb = Load<S, T>(v[2 * u + 1]);
      hd::RotatePair<T>(&xa, &xb, c[jj + u], s[jj + u]);
      v[2 * u] = Store<S, T>(xa);
      v[2 * u + 1] = Store<S, T>(xb);
    }
    if constexpr (V >= 2) {
      Pack<S, V> p;
#pragma unroll
      for (int u = 0; u < kElems; ++u) p.v[u] = v[u];
      *reinterpret_cast<Pack<S, V>*>(at) = p;
    } else {
      at[0] = v[0];
      at[1] = v[1];
    }
  }
}

// DEEPSEEK (half <= kRopeChunk, one chunk): per head, the rotary channels go through shared
// memory: read all, then write the rotated values to their permuted places.
template <typename S, typename T>
__device__ void RotateDeepseek(const ApplyRopeLaunch& a, int64_t t, const T* c, const T* s,
                               T* buf) {
  const int64_t half = a.angles.half;
  const int64_t heads = a.q_heads + a.k_heads;
  const int64_t b = t / a.seq, sq = t % a.seq;
  for (int64_t h = 0; h < heads; ++h) {
    S* row = h < a.q_heads
                 ? static_cast<S*>(a.q) + b * a.q_batch + sq * a.q_seq + h * a.q_head
                 : static_cast<S*>(a.k) + b * a.k_batch + sq * a.k_seq + (h - a.q_heads) * a.k_head;
    for (int64_t e = threadIdx.x; e < 2 * half; e += blockDim.x) buf[e] = Load<S, T>(row[e]);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
      int64_t ia, ib, oa, ob;
      hd::PairChannels(2, a.inverse, half, j, &ia, &ib);
      hd::OutputChannels(2, a.inverse, half, j, &oa, &ob);
      T xa = buf[ia], xb = buf[ib];
      hd::RotatePair<T>(&xa, &xb, c[j], s[j]);
      row[oa] = Store<S, T>(xa);
      row[ob] = Store<S, T>(xb);
    }
    __syncthreads();
  }
}

template <typename S, typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyRopeKernel(ApplyRopeLaunch a) {
  extern __shared__ unsigned char smem_raw[];
  T* c = reinterpret_cast<T*>(smem_raw);
  T* s = c + kRopeChunk;
  T* buf = s + kRopeChunk;  // DEEPSEEK only: 2 * kRopeChunk
  const RopeAngles& g = a.angles;
  for (int64_t t = blockIdx.x; t < g.tokens; t += gridDim.x) {
    const int32_t p0 = g.positions[t];
    if (p0 < 0) continue;  // padding passes through (uniform over the block)
    for (int64_t j0 = 0; j0 < g.half; j0 += kRopeChunk) {
      const int64_t n = g.half - j0 < kRopeChunk ? g.half - j0 : kRopeChunk;
      for (int64_t jj = threadIdx.x; jj < n; jj += blockDim.x) {
        const int64_t j = j0 + jj;
        hd::RopeCosSin<T>(AnglePosition(g, t, j, p0), g.w_hi[j], g.w_lo[j], g.scale, g.sign, &c[jj],
                          &s[jj]);
      }
      __syncthreads();
      if (a.style == 2) {
        RotateDeepseek<S, T>(a, t, c, s, buf);
      } else {
        RotateChunk<S, T, V>(a, t, j0, n, c, s);
      }
      __syncthreads();
    }
  }
}

template <typename S, typename T>
__global__ void RopeCacheKernel(RopeCacheLaunch a) {
  const RopeAngles& g = a.angles;
  const int64_t n = g.tokens * g.half;
  S* cos_out = static_cast<S*>(a.cos);
  S* sin_out = static_cast<S*>(a.sin);
  POSENC_GRID_STRIDE(i, n) {
    const int64_t t = i / g.half, j = i % g.half;
    int32_t p0 = g.positions[t];
    double p;
    if (p0 < 0) {
      p = 0;  // padding: position 0 (cos m, sin 0)
    } else {
      p = AnglePosition(g, t, j, p0);
    }
    T cv, sv;
    hd::RopeCosSin<T>(p, g.w_hi[j], g.w_lo[j], g.scale, g.sign, &cv, &sv);
    const S cs = Store<S, T>(cv), ss = Store<S, T>(sv);
    int64_t c0, c1;
    const int cols = hd::CacheColumns(a.layout, g.half, j, &c0, &c1);
    cos_out[t * a.width + c0] = cs;
    sin_out[t * a.width + c0] = ss;
    if (cols == 2) {
      cos_out[t * a.width + c1] = cs;
      sin_out[t * a.width + c1] = ss;
    }
  }
}

template <typename S, typename T>
cudaError_t LaunchApplyRopeT(const ApplyRopeLaunch& a, cudaStream_t stream) {
  const size_t smem = (a.style == 2 ? 4 : 2) * kRopeChunk * sizeof(T);
  const unsigned blocks = Blocks(a.angles.tokens, 1, int64_t{1} << 20);
  // 16-byte accesses: 16 / sizeof(S) elements (the host has checked strides and alignment).
  constexpr int kV = 16 / sizeof(S);
  if (a.vector == kV && a.style != 2) {
    ApplyRopeKernel<S, T, kV><<<blocks, kThreads, smem, stream>>>(a);
  } else {
    ApplyRopeKernel<S, T, 1><<<blocks, kThreads, smem, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

int LaunchApplyRope(const ApplyRopeLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (a.angles.tokens == 0 || a.angles.half == 0) return cudaSuccess;
  if (a.style == 2 && a.angles.half > kRopeChunk) return cudaErrorInvalidValue;
  if ((a.q_heads + a.k_heads) * 2 * kRopeChunk >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  return DispatchFloat(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    return LaunchApplyRopeT<S, ComputeType<S>>(a, st);
  });
}

int LaunchRopeCache(const RopeCacheLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = a.angles.tokens * a.angles.half;
  if (n == 0) return cudaSuccess;
  return DispatchFloat(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    RopeCacheKernel<S, ComputeType<S>><<<Blocks(n, kThreads), kThreads, 0, st>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace posenc::kernels::cuda
