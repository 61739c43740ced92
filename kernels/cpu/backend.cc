// The optimized CPU backend: binds the CPU implementation of each op (cpu.h) to the processor's
// inner loops and a thread pool.
#include "kernels/backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/common/toeplitz.h"
#include "kernels/cpu/cpu.h"

namespace posenc::kernels {
namespace cpu {

SplitFrequencies::SplitFrequencies(const std::vector<long double>& omega)
    : hi(omega.size()), lo(omega.size()) {
  for (size_t j = 0; j < omega.size(); ++j) {
    hi[j] = static_cast<double>(omega[j]);
    lo[j] = static_cast<double>(omega[j] - static_cast<long double>(hi[j]));
    max = std::max(max, std::fabs(hi[j]));
  }
}

namespace {

void MemCopy(void* dst, const void* src, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n));
}

}  // namespace

CopyFn OutputCopy(const SimdKernels& simd, int64_t bytes) {
  return bytes >= kStreamMinBytes ? simd.stream_copy : MemCopy;
}

absl::Status ParallelExpandToeplitz(const CpuContext& cpu, const unsigned char* generators,
                                    int64_t heads, int64_t q_len, int64_t k_len, int64_t esize,
                                    unsigned char* out) {
  const CopyFn copy = OutputCopy(cpu.simd, heads * q_len * k_len * esize);
  return cpu.pool.ParallelFor(heads * q_len, Grain(k_len), [&](int64_t r0, int64_t r1) {
    const FenceStreams fence(cpu.simd);
    ExpandToeplitzRows(generators, heads, q_len, k_len, esize, r0, r1, out, copy);
  });
}

}  // namespace cpu

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const cpu::SimdKernels* simd, int threads)
      : simd_(*simd), pool_(threads), cpu_{simd_, pool_} {}

  absl::string_view name() const override { return "cpu"; }
  std::string detail() const override {
    return absl::StrCat(simd_.name, ", ", pool_.parallelism(), " thread",
                        pool_.parallelism() == 1 ? "" : "s");
  }
  absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                          const TensorView& table) const override {
    return cpu::Sinusoidal(cpu_, plan, positions, table);
  }
  absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                   const ResolvedPositions& positions,
                                   const TensorView& y) const override {
    return cpu::AddPositionEncoding(cpu_, plan, positions, y);
  }
  absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& cos,
                         const TensorView& sin) const override {
    return cpu::RopeCache(cpu_, plan, freqs, positions, cos, sin);
  }
  absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& q,
                         const TensorView& k) const override {
    return cpu::ApplyRope(cpu_, plan, freqs, positions, q, k);
  }
  absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                         const TensorView& bias) const override {
    return cpu::AlibiBias(cpu_, plan, slopes, bias);
  }
  absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const override {
    return cpu::RelativeBias(cpu_, plan, bias);
  }
  absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                 const TensorView& embeddings) const override {
    return cpu::RelativeEmbedding(cpu_, plan, embeddings);
  }

 private:
  const cpu::SimdKernels& simd_;
  mutable ThreadPool pool_;
  cpu::CpuContext cpu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend(const CpuBackendOptions& options) {
  const cpu::SimdKernels* simd =
      cpu::SelectKernels(options.isa.empty() ? nullptr : options.isa.c_str());
  if (simd == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("isa: expected avx512, avx2 or scalar (one this processor supports), got '",
                     options.isa, "'"));
  }
  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(simd, threads);
}

}  // namespace posenc::kernels
