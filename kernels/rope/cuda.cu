// The CUDA kernels of ApplyRope and RopeCache (launch functions in kernels/cuda/launch.h; the
// per-element math, shared with the CPU tests, in rope/rope_math.h).
//
// ApplyRope: one block per token (grid-stride over tokens): the block computes the token's cos/sin
// once into shared memory (kRopeChunk frequencies at a time) and then rotates every head of q
// and k in place from it. NEOX/GPT-J rows move in 16-byte vectors where the strides allow (the
// host picks `vector`); DEEPSEEK stages each head's rotary channels in shared memory, since its
// output order differs from its input order. FLOAT16/BFLOAT16 pairs rotate in float with
// rope_math.h's RotateHalfPair (the CPU's AVX2/AVX-512 arithmetic, bit for bit): a third of the
// double rotation's work and no double arithmetic per element, where GPUs have far fewer double
// units than float ones.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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

template <typename S>
constexpr bool kSmallFloat = std::is_same_v<S, Half> || std::is_same_v<S, BHalf>;

// A chunk's cos/sin (compute type T) and, for FLOAT16/BFLOAT16, their float factors.
template <typename T>
struct ChunkAngles {
  T* c;
  T* s;
  float* cf;
  float* t_hi;
  float* t_lo;
};

// Rotates one stored pair with pair jj of the chunk.
template <typename S, typename T>
__device__ __forceinline__ void RotateStored(S* a, S* b, const ChunkAngles<T>& g, int64_t jj) {
  if constexpr (kSmallFloat<S>) {
    hd::RotateHalfPair<std::is_same_v<S, BHalf>>(&a->bits, &b->bits, g.cf[jj], g.t_hi[jj],
                                                 g.t_lo[jj], g.c[jj], g.s[jj]);
  } else {
    T xa = Load<S, T>(*a), xb = Load<S, T>(*b);
    hd::RotatePair<T>(&xa, &xb, g.c[jj], g.s[jj]);
    *a = Store<S, T>(xa);
    *b = Store<S, T>(xb);
  }
}

// Rotates pairs [first, first + n) of the chunk in every head of one token; heads of q come
// first, then those of k. V storage elements per access.
template <typename S, typename T, int V>
__device__ void RotateChunk(const ApplyRopeLaunch& a, int64_t t, int64_t j0, int64_t n,
                            const ChunkAngles<T>& g) {
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
        RotateStored<S, T>(pa, pb, g, jj);
      } else {
        Pack<S, V> va = *reinterpret_cast<Pack<S, V>*>(pa);
        Pack<S, V> vb = *reinterpret_cast<Pack<S, V>*>(pb);
#pragma unroll
        for (int u = 0; u < V; ++u) RotateStored<S, T>(&va.v[u], &vb.v[u], g, jj + u);
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
    for (int u = 0; u < kPairs; ++u) RotateStored<S, T>(&v[2 * u], &v[2 * u + 1], g, jj + u);
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
__device__ void RotateDeepseek(const ApplyRopeLaunch& a, int64_t t, const ChunkAngles<T>& g,
                               S* buf) {
  const int64_t half = a.angles.half;
  const int64_t heads = a.q_heads + a.k_heads;
  const int64_t b = t / a.seq, sq = t % a.seq;
  for (int64_t h = 0; h < heads; ++h) {
    S* row = h < a.q_heads
                 ? static_cast<S*>(a.q) + b * a.q_batch + sq * a.q_seq + h * a.q_head
                 : static_cast<S*>(a.k) + b * a.k_batch + sq * a.k_seq + (h - a.q_heads) * a.k_head;
    for (int64_t e = threadIdx.x; e < 2 * half; e += blockDim.x) buf[e] = row[e];
    __syncthreads();
    for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
      int64_t ia, ib, oa, ob;
      hd::PairChannels(2, a.inverse, half, j, &ia, &ib);
      hd::OutputChannels(2, a.inverse, half, j, &oa, &ob);
      S xa = buf[ia], xb = buf[ib];
      RotateStored<S, T>(&xa, &xb, g, j);
      row[oa] = xa;
      row[ob] = xb;
    }
    __syncthreads();
  }
}

// Shared memory of ApplyRopeKernel: the chunk's cos and sin (T), the float factors (FLOAT16 and
// BFLOAT16), and DEEPSEEK's staging of one head's rotary channels (S).
template <typename S, typename T>
constexpr size_t ApplyRopeSharedBytes(bool deepseek) {
  return kRopeChunk * (2 * sizeof(T) + (kSmallFloat<S> ? 3 * sizeof(float) : 0) +
                       (deepseek ? 2 * sizeof(S) : 0));
}

template <typename S, typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyRopeKernel(ApplyRopeLaunch a) {
  extern __shared__ unsigned char smem_raw[];
  ChunkAngles<T> g;
  g.c = reinterpret_cast<T*>(smem_raw);
  g.s = g.c + kRopeChunk;
  g.cf = reinterpret_cast<float*>(g.s + kRopeChunk);
  g.t_hi = g.cf + (kSmallFloat<S> ? kRopeChunk : 0);
  g.t_lo = g.t_hi + (kSmallFloat<S> ? kRopeChunk : 0);
  S* buf = reinterpret_cast<S*>(g.t_lo + (kSmallFloat<S> ? kRopeChunk : 0));  // DEEPSEEK only
  const RopeAngles& r = a.angles;
  for (int64_t t = blockIdx.x; t < r.tokens; t += gridDim.x) {
    const int32_t p0 = r.positions[t];
    if (p0 < 0) continue;  // padding passes through (uniform over the block)
    for (int64_t j0 = 0; j0 < r.half; j0 += kRopeChunk) {
      const int64_t n = r.half - j0 < kRopeChunk ? r.half - j0 : kRopeChunk;
      for (int64_t jj = threadIdx.x; jj < n; jj += blockDim.x) {
        const int64_t j = j0 + jj;
        hd::RopeCosSin<T>(AnglePosition(r, t, j, p0), r.w_hi[j], r.w_lo[j], r.scale, r.sign,
                          &g.c[jj], &g.s[jj]);
        if constexpr (kSmallFloat<S>) {
          hd::FloatRotationFactors(g.c[jj], g.s[jj], &g.cf[jj], &g.t_hi[jj], &g.t_lo[jj]);
        }
      }
      __syncthreads();
      if (a.style == 2) {
        RotateDeepseek<S, T>(a, t, g, buf);
      } else {
        RotateChunk<S, T, V>(a, t, j0, n, g);
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
  const size_t smem = ApplyRopeSharedBytes<S, T>(a.style == 2);
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
