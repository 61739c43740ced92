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

// Bytes of each table's rows placed in a block before the block is stored (RopeCache's and
// Sinusoidal's tables that are not written in place).
inline constexpr int64_t kTableBlockBytes = 8192;

// The FLOAT32-computed rows of a table (RopeCache, Sinusoidal) for runs of consecutive positions.
// Rows(p, m, ...) writes the rows of positions p .. p+m-1: the first from an exact anchor (SinCos
// in double, the full polynomial), each next one from the previous by angle addition in double
// (SimdKernels::angle_rows, rope_math.h's RopeAngleStep, frequencies vectorized) with the
// exact-phase cos/sin of omega_j itself, anchoring anew every kMaxSteps rows and wherever a run
// does not continue the last one. A run that goes on from the previous call's last position
// continues the walk without a new anchor.
//
// Error: the anchor and cw, sw are within ~1 double ulp (2^-53) of the exact values; each step
// multiplies and adds values of magnitude <= 1, adding at most a few ulps of 2^-53 to c and s
// (rounding, plus the error of cw, sw carried along), and the errors add up at most linearly.
// After kMaxSteps = 256 steps the values are within ~2^8 * 2^-51 = 2^-43 (~1e-13) of the exact
// ones: far inside FLOAT32's 1e-6 (and its rounding, 2^-25), whatever the position below 2^31,
// since the anchors' phase is exact. A sincos costs ~30 double operations per frequency, a step
// 4; anchors every 256 rows instead of 32 make them ~1/256 of the rows.
class AngleWalker {
 public:
  static constexpr int64_t kMaxSteps = 256;
  AngleWalker(const SimdKernels& simd, const SplitFrequencies& w,
              const std::vector<long double>& w_exact, int64_t n)
      : simd_(simd), w_(w), w_exact_(w_exact), n_(n), c_(n), s_(n), cw_(n), sw_(n) {
    const double one = 1;
    SinCos<double>(simd, &one, 0, w, w_exact, n, 1.0, 1.0, cw_.data(), sw_.data());
  }
  // The rows of positions p .. p+rows-1 into `out` (row r at out.c/out.s + r*out.row_stride):
  // float(cos * c_scale) and float(sin * s_scale) of every frequency in out.form.
  void Rows(double p, int64_t rows, double c_scale, double s_scale, TableRows out) {
    while (rows > 0) {
      if (p != next_ || steps_ >= kMaxSteps) {
        SinCos<double>(simd_, &p, 0, w_, w_exact_, n_, 1.0, 1.0, c_.data(), s_.data());
        steps_ = 0;
      }
      const int64_t m = std::min(rows, kMaxSteps - steps_);
      simd_.angle_rows(c_.data(), s_.data(), cw_.data(), sw_.data(), n_, m, c_scale, s_scale, out);
      steps_ += m;
      p += static_cast<double>(m);
      next_ = p;
      rows -= m;
      out.c += m * out.row_stride;
      out.s += m * out.row_stride;
    }
  }

 private:
  const SimdKernels& simd_;
  const SplitFrequencies& w_;
  const std::vector<long double>& w_exact_;
  int64_t n_;
  std::vector<double> c_, s_, cw_, sw_;
  double next_ = -1;  // the position the state (c_, s_) holds; -1: none
  int64_t steps_ = kMaxSteps;
};

// Runs of consecutive positions among tokens [t0, t1): calls run(t, p, m) for each maximal run of
// m tokens from t whose positions are p, p+1, ..., p+m-1. Padding tokens count as position 0 when
// kPadAsZero, else they come as runs of their own with p = -1.
template <bool kPadAsZero, typename Run>
void ForEachRun(const ResolvedPositions& positions, int64_t t0, int64_t t1, const Run& run) {
  const auto at = [&](int64_t t) {
    return positions.IsValid(t) ? positions.At(t) : (kPadAsZero ? int64_t{0} : int64_t{-1});
  };
  for (int64_t t = t0; t < t1;) {
    const int64_t p = at(t);
    int64_t e = t + 1;
    if (p < 0) {
      while (e < t1 && at(e) < 0) ++e;
    } else {
      while (e < t1 && at(e) == p + (e - t)) ++e;
    }
    run(t, static_cast<double>(p), e - t);
    t = e;
  }
}

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
