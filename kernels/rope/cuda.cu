// The CUDA kernels of ApplyRope and RopeCache (launch functions in kernels/cuda/launch.h; the
// per-element math, shared with the CPU tests, in rope/rope_math.h).
//
// ApplyRope: one block per group of tokens (grid-stride over groups): the block computes the
// group's cos/sin once into shared memory (kRopeChunk angles at a time) and then rotates every
// head of q and k of those tokens in place from it. A group is several FLOAT16/BFLOAT16 tokens
// where a token's rotary part is small (GroupTokens), so that a block has more than one token's
// few KiB to move between two barriers. NEOX/GPT-J rows move in 16-byte vectors where the
// strides allow (the host picks `vector`); DEEPSEEK stages each head's rotary channels in shared
// memory, since its output order differs from its input order. FLOAT16/BFLOAT16 pairs rotate in
// float with rope_math.h's RotateHalfPair (the CPU's AVX2/AVX-512 arithmetic, bit for bit): a third
// of the double rotation's work and no double arithmetic per element, where GPUs have far fewer
// double units than float ones.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_elements.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// The position of token t for frequency j (M-RoPE picks the component; positions formed from
// starts are the same on every component), as a double; p0 is its component 0.
__device__ __forceinline__ double AnglePosition(const RopeAngles& a, int64_t t, int64_t j,
                                                int32_t p0) {
  if (a.component == nullptr || a.positions == nullptr) return static_cast<double>(p0);
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
  // The angles from entry `offset` on (the next token of a group).
  __device__ ChunkAngles At(int offset) const {
    return {c + offset, s + offset, cf + offset, t_hi + offset, t_lo + offset};
  }
};

// At most this many tokens per block (their offsets sit in shared memory).
constexpr int kMaxGroup = 32;

// The element offsets of a group's tokens in q and in k, -1 in q for a padding token (it passes
// through), and their positions (component 0).
struct GroupRows {
  int64_t q[kMaxGroup];
  int64_t k[kMaxGroup];
  int32_t pos[kMaxGroup];
};

// The float factors of P consecutive pairs from jj on (FLOAT16/BFLOAT16): 16-byte shared-memory
// loads where P allows (jj is then a multiple of P). One 4-byte load per factor and pair kept the
// shared-memory pipe, not the memory bus, the busiest unit (ncu on an H200: L1 91 %, DRAM 38 %).
template <int P>
struct RunFactors {
  float cf[P], t_hi[P], t_lo[P];
};
template <int P>
__device__ __forceinline__ void LoadFactors(const float* from, int64_t jj, float* to) {
  if constexpr (P % 4 == 0) {
#pragma unroll
    for (int u = 0; u < P; u += 4) {
      const float4 v = *reinterpret_cast<const float4*>(from + jj + u);
      to[u] = v.x;
      to[u + 1] = v.y;
      to[u + 2] = v.z;
      to[u + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int u = 0; u < P; ++u) to[u] = from[jj + u];
  }
}

// The factors of the run from jj where the dtype has them (FLOAT16, BFLOAT16).
template <typename S, typename T, int P>
__device__ __forceinline__ RunFactors<P> RunOf(const ChunkAngles<T>& g, int64_t jj) {
  RunFactors<P> f{};
  if constexpr (kSmallFloat<S>) {
    LoadFactors<P>(g.cf, jj, f.cf);
    LoadFactors<P>(g.t_hi, jj, f.t_hi);
    LoadFactors<P>(g.t_lo, jj, f.t_lo);
  }
  return f;
}

// Rotates one stored pair with pair jj + u of the chunk (f: the factors of the run from jj). The
// exact cos/sin of FLOAT16/BFLOAT16 are read only where the double path needs them.
template <typename S, typename T, int P>
__device__ __forceinline__ void RotateStored(S* a, S* b, const ChunkAngles<T>& g, int64_t jj,
                                             const RunFactors<P>& f, int u) {
  if constexpr (kSmallFloat<S>) {
    hd::RotateHalfPairWith<std::is_same_v<S, BHalf>>(&a->bits, &b->bits, f.cf[u], f.t_hi[u],
                                                     f.t_lo[u], [&](double* cd, double* sd) {
                                                       *cd = g.c[jj + u];
                                                       *sd = g.s[jj + u];
                                                     });
  } else {
    T xa = Load<S, T>(*a), xb = Load<S, T>(*b);
    hd::RotatePair<T>(&xa, &xb, g.c[jj + u], g.s[jj + u]);
    *a = Store<S, T>(xa);
    *b = Store<S, T>(xb);
  }
}

// Item `item` of a chunk walk over the group's tokens, per_head items per head (each `step` pairs
// wide), heads of q first, then those of k: its token tt, its first pair jj and the start of its
// head's row; row is null for a padding token.
template <typename S>
struct ItemRow {
  int tt, jj;
  S* row;
};
template <typename S>
__device__ __forceinline__ ItemRow<S> ItemRowOf(const ApplyRopeLaunch& a, const GroupRows& rows,
                                                int item, int per_head, int per_token, int step) {
  const int q_heads = static_cast<int>(a.q_heads);
  const int tt = item / per_token, rest = item % per_token;
  const int h = rest / per_head, jj = (rest % per_head) * step;
  if (rows.q[tt] < 0) return {tt, jj, nullptr};
  S* row = h < q_heads ? static_cast<S*>(a.q) + rows.q[tt] + h * a.q_head
                       : static_cast<S*>(a.k) + rows.k[tt] + (h - q_heads) * a.k_head;
  return {tt, jj, row};
}

// Rotates pairs [j0, j0 + n) in every head of the group's `group` tokens (their angles n apart
// in g); heads of q come first, then those of k. V storage elements per access.
template <typename S, typename T, int V>
__device__ void RotateChunk(const ApplyRopeLaunch& a, const GroupRows& rows, int group, int64_t j0,
                            int n, const ChunkAngles<T>& g) {
  const int64_t half = a.angles.half;
  // 32-bit item arithmetic (the host guarantees heads * kRopeChunk * 2 < 2^31): 64-bit integer
  // division is slow on the GPU.
  const int heads = static_cast<int>(a.q_heads + a.k_heads);
  if (a.style == 0) {  // NEOX: V consecutive pairs, halves at j and j + half
    const int per_head = n / V, per_token = heads * per_head;
    for (int item = threadIdx.x; item < group * per_token; item += blockDim.x) {
      const ItemRow<S> r = ItemRowOf<S>(a, rows, item, per_head, per_token, V);
      if (r.row == nullptr) continue;  // padding
      const int tt = r.tt, jj = r.jj;
      S* pa = r.row + j0 + jj;
      S* pb = pa + half;
      const ChunkAngles<T> gt = g.At(tt * n);
      const RunFactors<V> f = RunOf<S, T, V>(gt, jj);
      if constexpr (V == 1) {  // scalar accesses (a Pack is 16-byte aligned: not for these)
        RotateStored<S, T, 1>(pa, pb, gt, jj, f, 0);
      } else {
        Pack<S, V> va = *reinterpret_cast<Pack<S, V>*>(pa);
        Pack<S, V> vb = *reinterpret_cast<Pack<S, V>*>(pb);
#pragma unroll
        for (int u = 0; u < V; ++u) RotateStored<S, T, V>(&va.v[u], &vb.v[u], gt, jj, f, u);
        *reinterpret_cast<Pack<S, V>*>(pa) = va;
        *reinterpret_cast<Pack<S, V>*>(pb) = vb;
      }
    }
    return;
  }
  // GPT-J: V storage elements are V/2 interleaved pairs (V == 1: one pair per item).
  constexpr int kPairs = V >= 2 ? V / 2 : 1;
  constexpr int kElems = 2 * kPairs;
  const int per_head = n / kPairs, per_token = heads * per_head;
  for (int item = threadIdx.x; item < group * per_token; item += blockDim.x) {
    const ItemRow<S> r = ItemRowOf<S>(a, rows, item, per_head, per_token, kPairs);
    if (r.row == nullptr) continue;  // padding
    const int tt = r.tt, jj = r.jj;
    S* at = r.row + 2 * (j0 + jj);
    const ChunkAngles<T> gt = g.At(tt * n);
    const RunFactors<kPairs> f = RunOf<S, T, kPairs>(gt, jj);
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
      RotateStored<S, T, kPairs>(&v[2 * u], &v[2 * u + 1], gt, jj, f, u);
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

// DEEPSEEK (half <= kRopeChunk, one chunk): per head of one token (rows q_off, k_off), the
// rotary channels go through shared memory: read all, then write the rotated values to their
// permuted places.
template <typename S, typename T>
__device__ void RotateDeepseek(const ApplyRopeLaunch& a, int64_t q_off, int64_t k_off,
                               const ChunkAngles<T>& g, S* buf) {
  const int64_t half = a.angles.half;
  const int64_t heads = a.q_heads + a.k_heads;
  for (int64_t h = 0; h < heads; ++h) {
    S* row = h < a.q_heads ? static_cast<S*>(a.q) + q_off + h * a.q_head
                           : static_cast<S*>(a.k) + k_off + (h - a.q_heads) * a.k_head;
    for (int64_t e = threadIdx.x; e < 2 * half; e += blockDim.x) buf[e] = row[e];
    __syncthreads();
    for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
      int64_t ia, ib, oa, ob;
      hd::PairChannels(2, a.inverse, half, j, &ia, &ib);
      hd::OutputChannels(2, a.inverse, half, j, &oa, &ob);
      S xa = buf[ia], xb = buf[ib];
      RotateStored<S, T, 1>(&xa, &xb, g, j, RunOf<S, T, 1>(g, j), 0);
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

// Tokens per block: one where a token's rotary part fills a chunk, else as many as a chunk
// holds (at most kMaxGroup), but no fewer than about 1024 blocks in all while there are tokens
// for them.
__host__ int GroupTokens(int64_t tokens, int64_t half) {
  constexpr int64_t kTargetBlocks = 1024;
  int64_t group = half >= kRopeChunk ? 1 : kRopeChunk / half;
  group = group < kMaxGroup ? group : kMaxGroup;
  const int64_t spread = tokens / kTargetBlocks > 1 ? tokens / kTargetBlocks : 1;
  return static_cast<int>(group < spread ? group : spread);
}

// The group's tokens' row offsets and positions, then the cos/sin (and float factors) of pairs
// [j0, j0 + n) of those tokens into g, token by token n apart.
template <typename S, typename T>
__device__ void GroupAngles(const ApplyRopeLaunch& a, int64_t t0, int group, int64_t j0, int n,
                            const ChunkAngles<T>& g, GroupRows* rows) {
  const RopeAngles& r = a.angles;
  if (static_cast<int>(threadIdx.x) < group) {
    const int64_t t = t0 + threadIdx.x;
    const int64_t b = t / a.seq, sq = t % a.seq;
    const int32_t p =
        r.positions != nullptr ? r.positions[t] : r.starts[b] + static_cast<int32_t>(sq);
    rows->pos[threadIdx.x] = p;
    rows->q[threadIdx.x] = p < 0 ? -1 : b * a.q_batch + sq * a.q_seq;
    rows->k[threadIdx.x] = b * a.k_batch + sq * a.k_seq;
  }
  __syncthreads();
  for (int item = threadIdx.x; item < group * n; item += blockDim.x) {
    const int tt = item / n;
    const int64_t j = j0 + item % n;
    const int32_t p0 = rows->pos[tt];
    if (p0 < 0) continue;
    hd::RopeCosSin<T>(AnglePosition(r, t0 + tt, j, p0), r.w_hi[j], r.w_lo[j], r.scale, r.sign,
                      &g.c[item], &g.s[item]);
    if constexpr (kSmallFloat<S>) {
      hd::FloatRotationFactors(g.c[item], g.s[item], &g.cf[item], &g.t_hi[item], &g.t_lo[item]);
    }
  }
}

template <typename S, typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyRopeKernel(ApplyRopeLaunch a, int group_size) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ GroupRows rows;
  ChunkAngles<T> g;
  g.c = reinterpret_cast<T*>(smem_raw);
  g.s = g.c + kRopeChunk;
  g.cf = reinterpret_cast<float*>(g.s + kRopeChunk);
  g.t_hi = g.cf + (kSmallFloat<S> ? kRopeChunk : 0);
  g.t_lo = g.t_hi + (kSmallFloat<S> ? kRopeChunk : 0);
  S* buf = reinterpret_cast<S*>(g.t_lo + (kSmallFloat<S> ? kRopeChunk : 0));  // DEEPSEEK only
  const RopeAngles& r = a.angles;
  const int64_t step = static_cast<int64_t>(gridDim.x) * group_size;
  for (int64_t t0 = blockIdx.x * static_cast<int64_t>(group_size); t0 < r.tokens; t0 += step) {
    const int group = static_cast<int>(r.tokens - t0 < group_size ? r.tokens - t0 : group_size);
    for (int64_t j0 = 0; j0 < r.half; j0 += kRopeChunk) {
      const int n = static_cast<int>(r.half - j0 < kRopeChunk ? r.half - j0 : kRopeChunk);
      GroupAngles<S, T>(a, t0, group, j0, n, g, &rows);
      __syncthreads();
      if (a.style == 2) {
        for (int tt = 0; tt < group; ++tt) {  // rows.q is uniform over the block
          if (rows.q[tt] >= 0) RotateDeepseek<S, T>(a, rows.q[tt], rows.k[tt], g.At(tt * n), buf);
        }
      } else {
        RotateChunk<S, T, V>(a, rows, group, j0, n, g);
      }
      __syncthreads();
    }
  }
}

// RopeCache: one frequency j of K consecutive tokens per thread (a warp writes 32 neighbouring
// columns of one row at a time); I: the index type (32-bit where the count fits: 64-bit division
// is slow on the GPU). FLOAT64 tables (K = 1) take the exact cos/sin of every entry. The others
// walk (rope_math.h's AngleWalk): the exact short-polynomial cos/sin (error below 2e-9) at the
// first token and wherever a position does not follow the previous one, angle addition
// (RopeAngleStep) from one position to the next, the same value again for a repeated position — a
// sincos costs ~30 double operations, a step 4, which made the FLOAT16/BFLOAT16 tables
// compute-bound at a third of the memory speed. The CPU backend's tables walk too (their bits may
// differ from these by the walkers' rounding).
template <typename S, typename T, typename I, int K>
__global__ void RopeCacheKernel(RopeCacheLaunch a) {
  const RopeAngles& g = a.angles;
  const I half = static_cast<I>(g.half), width = static_cast<I>(a.width);
  const I tokens = static_cast<I>(g.tokens);
  const I n = (tokens + K - 1) / K * half;
  S* cos_out = static_cast<S*>(a.cos);
  S* sin_out = static_cast<S*>(a.sin);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I t0 = i / half * K, j = i % half;
    const I t1 = t0 + K < tokens ? t0 + K : tokens;
    hd::AngleWalk<double> w = hd::StartAngleWalk<(K > 1), double>(g.w_hi[j], g.w_lo[j]);
    int64_t c0, c1;
    const int cols = hd::CacheColumns(a.layout, g.half, j, &c0, &c1);
    for (I t = t0; t < t1; ++t) {
      const int32_t p0 = g.positions[t];
      const double p = p0 < 0 ? 0.0 : AnglePosition(g, t, j, p0);  // padding: position 0
      hd::AngleWalkTo<sizeof(S) == 8, (K > 1)>(&w, p);
      const S cs = Store<S, T>(static_cast<T>(w.c * g.scale));
      const S ss = Store<S, T>(static_cast<T>(w.s * (g.sign * g.scale)));
      S* crow = cos_out + static_cast<int64_t>(t) * width;
      S* srow = sin_out + static_cast<int64_t>(t) * width;
      crow[c0] = cs;
      srow[c0] = ss;
      if (cols == 2) {
        crow[c1] = cs;
        srow[c1] = ss;
      }
    }
  }
}

template <typename S, typename I>
cudaError_t LaunchRopeCacheT(const RopeCacheLaunch& a, cudaStream_t stream) {
  constexpr int kWalk = sizeof(S) == 8 ? 1 : 8;  // tokens per thread
  const int64_t n = (a.angles.tokens + kWalk - 1) / kWalk * a.angles.half;
  RopeCacheKernel<S, ComputeType<S>, I, kWalk><<<Blocks(n, kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename S, typename T>
cudaError_t LaunchApplyRopeT(const ApplyRopeLaunch& a, cudaStream_t stream) {
  const size_t smem = ApplyRopeSharedBytes<S, T>(a.style == 2);
  // Groups for FLOAT16/BFLOAT16 only: FLOAT32 moves twice the bytes per angle and ran 6 % slower
  // grouped (H200, [1,4096,32,128] and [8,2048,32,128]).
  const int group = kSmallFloat<S> ? GroupTokens(a.angles.tokens, a.angles.half) : 1;
  const unsigned blocks = Blocks(a.angles.tokens, group, int64_t{1} << 20);
  // 16-byte accesses: 16 / sizeof(S) elements (the host has checked strides and alignment).
  constexpr int kV = 16 / sizeof(S);
  if (a.vector == kV && a.style != 2) {
    ApplyRopeKernel<S, T, kV><<<blocks, kThreads, smem, stream>>>(a, group);
  } else {
    ApplyRopeKernel<S, T, 1><<<blocks, kThreads, smem, stream>>>(a, group);
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
    // 32-bit indices where every index the grid-stride loop forms fits (tokens + K included).
    if (n + static_cast<int64_t>(kThreads) * 65535 + a.angles.tokens + 8 < (int64_t{1} << 31)) {
      return LaunchRopeCacheT<S, int32_t>(a, st);
    }
    return LaunchRopeCacheT<S, int64_t>(a, st);
  });
}

}  // namespace posenc::kernels::cuda
