// Backend: one implementation of every compute op (reference, optimized CPU, CUDA).
//
// Callers plan first (ops.h), check limits, allocate outputs of the planned shapes and dtypes,
// then call the backend. Backends may assume planned, validated inputs but still return an
// error instead of crashing on anything inconsistent. Outputs are fully overwritten (no
// zero-fill needed). A backend that cannot run an op/dtype returns UNIMPLEMENTED.
//
// Thread-safety: a Backend is immutable after construction; every method may be called
// concurrently from many threads.
#ifndef POSENC_KERNELS_BACKEND_H_
#define POSENC_KERNELS_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/ops.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;  // "reference", "cpu", "cuda"
  virtual std::string detail() const = 0;     // ISA, device

  // out: [grid..., D] of any float dtype; padding tokens get zero rows.
  virtual absl::Status Sinusoidal(const SinusoidalParams& params,
                                  const ResolvedPositions& positions, TensorView out) const = 0;

  // x: [B,T,D] (planned); y: planned shape, x's dtype. y may alias x for ADD.
  virtual absl::Status AddPositionEncoding(const AddPositionEncodingParams& params,
                                           ConstTensorView x, const ResolvedPositions& positions,
                                           TensorView y) const = 0;

  // cos, sin: planned shape, any float dtype; padding tokens get cos = 1, sin = 0 (times m).
  virtual absl::Status RopeCache(const RopeConfig& config, const RopeFrequencies& freqs,
                                 RopeCacheLayout layout, const ResolvedPositions& positions,
                                 TensorView cos, TensorView sin) const = 0;

  // Rotates q and (if k.data) k in place. Padding tokens pass through unchanged.
  virtual absl::Status ApplyRope(const RopeConfig& config, const RopeFrequencies& freqs,
                                 TensorLayout layout, const ApplyRopeDims& dims,
                                 const ResolvedPositions& positions, TensorView q,
                                 TensorView k) const = 0;

  virtual absl::Status AlibiBias(const AlibiBiasParams& params, TensorView out) const = 0;
  virtual absl::Status RelativeBias(const RelativeBiasParams& params, TensorView out) const = 0;
  virtual absl::Status RelativeEmbedding(const RelativeEmbeddingParams& params,
                                         TensorView out) const = 0;
};

// The float64 / extended-precision oracle: clarity over speed.
std::unique_ptr<Backend> MakeReferenceBackend();

struct CpuBackendOptions {
  // Total threads for one large request (the calling thread included); 0 = one per core.
  int threads = 0;
  // "" picks the best instruction set this processor has; "avx512", "avx2" or "scalar" forces
  // one (the parity harness runs every level the machine supports).
  std::string isa;
};

// The optimized CPU backend (SIMD with run-time dispatch, a thread pool, exact phases).
absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend(const CpuBackendOptions& options);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_BACKEND_H_
