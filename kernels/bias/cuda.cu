// The CUDA kernels of AlibiBias, RelativeBias and RelativeEmbedding (launch functions in
// kernels/cuda/launch.h; the per-element math, shared with the CPU tests, in bias/bias_math.h).
//
// Toeplitz forms (ALiBi CAUSAL/SYMMETRIC, T5): one generator row per head (q+k-1 values, the
// output dtype), then every output row is a shifted window of it: ToeplitzExpandKernel writes
// rows with 16-byte stores where the row length allows (the loads are unaligned scalar reads of
// the generator, which stays in L1/L2), so full matrices go out at store bandwidth.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/bias/bias_math.h"
#include "kernels/cuda/device_elements.cuh"
#include "kernels/cuda/launch.h"

namespace posenc::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per output row (h, i) (grid-stride over rows); V elements per thread step.
template <typename E, int V>
__global__ void ToeplitzExpandKernel(const E* __restrict__ gen, E* __restrict__ out, int64_t heads,
                                     int64_t q_len, int64_t k_len) {
  const int64_t gen_len = q_len + k_len - 1;
  for (int64_t r = blockIdx.x; r < heads * q_len; r += gridDim.x) {
    const int64_t h = r / q_len, i = r % q_len;
    const E* src = gen + hd::ToeplitzSource(q_len, gen_len, h, i, 0);
    E* dst = out + r * k_len;
    for (int64_t j = threadIdx.x * static_cast<int64_t>(V); j < k_len;
         j += static_cast<int64_t>(blockDim.x) * V) {
      if constexpr (V == 1) {
        dst[j] = src[j];
      } else {
        Pack<E, V> p;
#pragma unroll
        for (int u = 0; u < V; ++u) p.v[u] = src[j + u];
        *reinterpret_cast<Pack<E, V>*>(dst + j) = p;
      }
    }
  }
}

template <typename E>
cudaError_t ExpandT(const ToeplitzLaunch& a, cudaStream_t st) {
  constexpr int kV = 16 / sizeof(E);
  const int64_t rows = a.heads * a.q_len;
  const unsigned blocks = Blocks(rows, 1, int64_t{1} << 20);
  const bool aligned = (reinterpret_cast<uintptr_t>(a.out) % 16 == 0) && (a.k_len % kV == 0);
  if (aligned) {
    ToeplitzExpandKernel<E, kV><<<blocks, 128, 0, st>>>(
        static_cast<const E*>(a.gen), static_cast<E*>(a.out), a.heads, a.q_len, a.k_len);
  } else {
    ToeplitzExpandKernel<E, 1><<<blocks, 128, 0, st>>>(
        static_cast<const E*>(a.gen), static_cast<E*>(a.out), a.heads, a.q_len, a.k_len);
  }
  return cudaGetLastError();
}

template <typename S>
__global__ void AlibiGeneratorKernel(AlibiLaunch a) {
  const int64_t gen_len = a.q_len + a.k_len - 1;
  S* out = static_cast<S*>(a.out);
  POSENC_GRID_STRIDE(idx, a.heads * gen_len) {
    const int64_t h = idx / gen_len, t = idx % gen_len;
    out[idx] = FromDouble<S>(
        hd::AlibiToeplitzValue(a.slopes[h], a.query_offset, a.q_len, t, a.mode, a.future));
  }
}

// One block per output row (b, h, i) (grid-stride over rows; COMPACT: one row per (b, h)).
template <typename S>
__global__ void AlibiBloomKernel(AlibiLaunch a) {
  S* out = static_cast<S*>(a.out);
  const int64_t q = a.compact ? 1 : a.q_len;
  const S fill =
      FromDouble<S>(a.future == 0 ? hd::BitCast<double>(uint64_t{0xfff0000000000000ull}) : 0.0);
  for (int64_t r = blockIdx.x; r < a.batch * a.heads * q; r += gridDim.x) {
    const int64_t i = r % q, bh = r / q;
    const int64_t h = bh % a.heads, b = bh / a.heads;
    const int64_t keep = a.compact ? a.k_len : hd::BloomKeep(a.query_offset, i, a.k_len, a.future);
    const double m = a.slopes[h];
    const double* kpos = a.kpos + b * a.k_len;
    S* dst = out + r * a.k_len;
    for (int64_t j = threadIdx.x; j < a.k_len; j += blockDim.x) {
      dst[j] = j < keep ? FromDouble<S>(m * kpos[j]) : fill;
    }
  }
}

template <typename S>
__global__ void T5GeneratorKernel(T5GeneratorLaunch a) {
  S* out = static_cast<S*>(a.out);
  POSENC_GRID_STRIDE(idx, a.heads * a.gen_len) {
    const int64_t h = idx / a.gen_len, t = idx % a.gen_len;
    out[idx] = FromDouble<S>(a.table[static_cast<int64_t>(a.buckets[t]) * a.heads + h]);
  }
}

template <typename S>
__global__ void RelativeEmbeddingKernel(RelativeEmbeddingLaunch a) {
  S* out = static_cast<S*>(a.out);
  POSENC_GRID_STRIDE(idx, a.q_len * a.k_len * a.dim) {
    const int64_t c = idx % a.dim;
    const int64_t ij = idx / a.dim;
    const int64_t row = hd::RelativeEmbeddingRow(a.query_offset, a.key_offset, a.max_relative,
                                                 ij / a.k_len, ij % a.k_len);
    out[idx] = FromDouble<S>(a.table[row * a.dim + c]);
  }
}

}  // namespace

int LaunchToeplitzExpand(const ToeplitzLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (a.heads * a.q_len * a.k_len == 0) return cudaSuccess;
  switch (a.esize) {
    case 2: return ExpandT<uint16_t>(a, st);
    case 4: return ExpandT<uint32_t>(a, st);
    case 8: return ExpandT<uint64_t>(a, st);
    default: return cudaErrorInvalidValue;
  }
}

int LaunchAlibiGenerators(const AlibiLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = a.heads * (a.q_len + a.k_len - 1);
  return DispatchFloat(a.dtype, [&](auto tag) {
    AlibiGeneratorKernel<decltype(tag)><<<Blocks(n, kThreads), kThreads, 0, st>>>(a);
    return cudaGetLastError();
  });
}

int LaunchAlibiBloom(const AlibiLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t rows = a.batch * a.heads * (a.compact ? 1 : a.q_len);
  return DispatchFloat(a.dtype, [&](auto tag) {
    AlibiBloomKernel<decltype(tag)><<<Blocks(rows, 1, int64_t{1} << 20), kThreads, 0, st>>>(a);
    return cudaGetLastError();
  });
}

int LaunchT5Generators(const T5GeneratorLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = a.heads * a.gen_len;
  return DispatchFloat(a.dtype, [&](auto tag) {
    T5GeneratorKernel<decltype(tag)><<<Blocks(n, kThreads), kThreads, 0, st>>>(a);
    return cudaGetLastError();
  });
}

int LaunchRelativeEmbedding(const RelativeEmbeddingLaunch& a, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = a.q_len * a.k_len * a.dim;
  return DispatchFloat(a.dtype, [&](auto tag) {
    RelativeEmbeddingKernel<decltype(tag)><<<Blocks(n, kThreads), kThreads, 0, st>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace posenc::kernels::cuda
