// The optimized CPU backend's shared machinery and its implementation of each op (one function
// per op, defined beside the op: absolute/cpu.cc, rope/cpu.cc, bias/cpu.cc; bound into a Backend
// by cpu/backend.cc).
//
// The ops run the inner loops of simd_kernels.h (picked at run time for the processor), split
// across a thread pool along tokens or rows; bias matrices are written as rows of one
// precomputed Toeplitz generator. Accuracy: the same exact-phase sin/cos for every float dtype;
// FLOAT32 computes in float, the other dtypes in double, rounding once. The parity harness
// (tests/kernels/parity_test.cc) checks every op x dtype x layout x style x scaling x position
// mode against the reference backend.
#ifndef POSENC_KERNELS_CPU_CPU_H_
#define POSENC_KERNELS_CPU_CPU_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/common/positions.h"
#include "kernels/common/thread_pool.h"
#include "kernels/common/types.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/ops.h"

namespace posenc::kernels::cpu {

// What every CPU op runs with: the processor's inner loops and the backend's thread pool.
struct CpuContext {
  const SimdKernels& simd;
  ThreadPool& pool;
};

// Work below this many output elements runs on the calling thread.
inline constexpr int64_t kMinParallelElements = int64_t{1} << 16;

// Outputs of at least this many bytes (the size of the last-level cache here) are written with
// streaming stores (SimdKernels::stream_copy): they would not stay in cache anyway, and a streaming
// store does not read the line it writes.
inline constexpr int64_t kStreamMinBytes = int64_t{32} << 20;

// The row copy for an output of `bytes` bytes: streaming for large ones, else memcpy.
using CopyFn = void (*)(void* dst, const void* src, int64_t n);
CopyFn OutputCopy(const SimdKernels& simd, int64_t bytes);

// Fences the calling thread's streaming stores when it leaves the scope: one per parallel chunk
// that writes with OutputCopy's copy, so its rows are visible before the chunk is reported done.
class FenceStreams {
 public:
  explicit FenceStreams(const SimdKernels& simd) : simd_(simd) {}
  FenceStreams(const FenceStreams&) = delete;
  FenceStreams& operator=(const FenceStreams&) = delete;
  ~FenceStreams() { simd_.stream_fence(); }

 private:
  const SimdKernels& simd_;
};

// Items per parallel chunk for items of `per_item` elements.
inline int64_t Grain(int64_t per_item) {
  return std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(1, per_item));
}

// Frequencies omega_j as double-double values (hi + lo), for the exact phase of sincos_*.
struct SplitFrequencies {
  std::vector<double> hi, lo;
  double max = 0;  // largest |hi|
  explicit SplitFrequencies(const std::vector<long double>& omega);
};

// Loads n elements of a float dtype at element offset `at` into T.
template <typename T>
void LoadRow(const SimdKernels& simd, const void* base, DType dtype, int64_t at, int64_t n,
             T* out) {
  const auto* bytes = static_cast<const unsigned char*>(base) + at * DTypeSize(dtype);
  if constexpr (std::is_same_v<T, float>) {
    switch (dtype) {
      case DType::kFloat32: std::memcpy(out, bytes, n * sizeof(float)); return;
      case DType::kFloat16:
        simd.f16_to_f32(reinterpret_cast<const uint16_t*>(bytes), out, n);
        return;
      case DType::kBFloat16:
        simd.bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes), out, n);
        return;
      default: break;
    }
  } else {
    if (dtype == DType::kFloat64) {
      std::memcpy(out, bytes, n * sizeof(double));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(LoadAsDouble(base, dtype, at + i));
}

// Stores n values of T at element offset `at` of a buffer of `dtype` (rounding once).
template <typename T>
void StoreRow(const SimdKernels& simd, const T* in, void* base, DType dtype, int64_t at,
              int64_t n) {
  auto* bytes = static_cast<unsigned char*>(base) + at * DTypeSize(dtype);
  if constexpr (std::is_same_v<T, float>) {
    switch (dtype) {
      case DType::kFloat32: std::memcpy(bytes, in, n * sizeof(float)); return;
      case DType::kFloat16: simd.f32_to_f16(in, reinterpret_cast<uint16_t*>(bytes), n); return;
      case DType::kBFloat16: simd.f32_to_bf16(in, reinterpret_cast<uint16_t*>(bytes), n); return;
      default: break;
    }
  } else {
    if (dtype == DType::kFloat64) {
      std::memcpy(bytes, in, n * sizeof(double));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) StoreFromDouble(base, dtype, at + i, static_cast<double>(in[i]));
}

// cos/sin of p*omega_j for one row, j < n: c[j] = cos * scale, s[j] = sin * sign * scale. `p`
// holds one position (p_stride 0) or one per frequency (p_stride 1, M-RoPE). Vectorized, or in
// extended precision when the phase is beyond the vector reduction's exact range.
template <typename T>
void SinCos(const SimdKernels& simd, const double* p, int64_t p_stride, const SplitFrequencies& w,
            const std::vector<long double>& w_exact, int64_t n, double scale, double sign, T* c,
            T* s) {
  double pmax = 0;
  for (int64_t j = 0; j < (p_stride ? n : 1); ++j)
    pmax = std::max(pmax, std::fabs(p[j * p_stride]));
  if (pmax * w.max < kMaxVectorPhase) {
    if constexpr (std::is_same_v<T, float>) {
      simd.sincos_f32(p, p_stride, w.hi.data(), w.lo.data(), n, scale, sign, c, s);
    } else {
      simd.sincos_f64(p, p_stride, w.hi.data(), w.lo.data(), n, scale, sign, c, s);
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const long double angle = static_cast<long double>(p[j * p_stride]) * w_exact[j];
    c[j] = static_cast<T>(static_cast<double>(std::cos(angle)) * scale);
    s[j] = static_cast<T>(static_cast<double>(std::sin(angle)) * sign * scale);
  }
}

// Exact-phase cos/sin (unscaled) of p*omega_j, j < n, for the tokens of a table in order. A token
// whose position is the previous one's plus one takes them by angle addition in double
// (SimdKernels::angle_step) with the exact-phase cos/sin of omega_j itself; every kMaxSteps-th
// such token, and every other, anchors anew on SinCos. Each step adds a few double ulps: after
// kMaxSteps steps the values are within 2^-46 of the exact ones, far inside FLOAT32's 1e-6, at
// a fraction of the polynomial's cost.
class AngleWalker {
 public:
  static constexpr int kMaxSteps = 32;
  AngleWalker(const SimdKernels& simd, const SplitFrequencies& w,
              const std::vector<long double>& w_exact, int64_t n)
      : simd_(simd), w_(w), w_exact_(w_exact), n_(n), c_(n), s_(n), cw_(n), sw_(n) {
    const double one = 1;
    SinCos<double>(simd, &one, 0, w, w_exact, n, 1.0, 1.0, cw_.data(), sw_.data());
  }
  // The angles of position p as floats: cf[j] = float(cos * c_scale), sf[j] = float(sin * s_scale).
  void At(double p, double c_scale, double s_scale, float* cf, float* sf) {
    if (p == last_ + 1 && steps_ < kMaxSteps) {
      simd_.angle_step(c_.data(), s_.data(), cw_.data(), sw_.data(), n_, c_scale, s_scale, cf, sf);
      ++steps_;
    } else {
      SinCos<double>(simd_, &p, 0, w_, w_exact_, n_, 1.0, 1.0, c_.data(), s_.data());
      simd_.cos_sin_to_float(c_.data(), s_.data(), n_, c_scale, s_scale, cf, sf);
      steps_ = 0;
    }
    last_ = p;
  }

 private:
  const SimdKernels& simd_;
  const SplitFrequencies& w_;
  const std::vector<long double>& w_exact_;
  int64_t n_;
  std::vector<double> c_, s_, cw_, sw_;
  double last_ = -2;
  int steps_ = kMaxSteps;
};

// kernels/common/toeplitz.h's ExpandToeplitzRows over every row, across the pool (rows copied by
// OutputCopy).
absl::Status ParallelExpandToeplitz(const CpuContext& cpu, const unsigned char* generators,
                                    int64_t heads, int64_t q_len, int64_t k_len, int64_t esize,
                                    unsigned char* out);

// --- The ops (see each op's header; arguments as on Backend). ---
absl::Status Sinusoidal(const CpuContext& cpu, const SinusoidalPlan& plan,
                        const ResolvedPositions& positions, const TensorView& table);
absl::Status AddPositionEncoding(const CpuContext& cpu, const AddPositionEncodingPlan& plan,
                                 const ResolvedPositions& positions, const TensorView& y);
absl::Status RopeCache(const CpuContext& cpu, const RopeCachePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& cos, const TensorView& sin);
absl::Status ApplyRope(const CpuContext& cpu, const ApplyRopePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& q, const TensorView& k);
absl::Status AlibiBias(const CpuContext& cpu, const AlibiBiasPlan& plan,
                       absl::Span<const double> slopes, const TensorView& bias);
absl::Status RelativeBias(const CpuContext& cpu, const RelativeBiasPlan& plan,
                          const TensorView& bias);
absl::Status RelativeEmbedding(const CpuContext& cpu, const RelativeEmbeddingPlan& plan,
                               const TensorView& embeddings);

}  // namespace posenc::kernels::cpu

#endif  // POSENC_KERNELS_CPU_CPU_H_
