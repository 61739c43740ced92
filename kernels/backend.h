// Backend: one implementation of every compute op (reference, optimized CPU, CUDA).
//
// Backends are called by the ops' Run* functions (ops.h), never directly by the server: every
// argument has been validated once by the op's plan, positions are resolved, outputs have the
// planned dtypes and shapes, and the RoPE frequencies are computed. Backends trust the plan: no
// re-validation, no layout switches (ApplyRope gets strides). Outputs are fully overwritten (no
// zero-fill needed). Each backend's code for an op sits with the op (e.g. rope/cpu.cc).
//
// Thread-safety: a Backend is immutable after construction; every method may be called
// concurrently from many threads.
#ifndef POSENC_KERNELS_BACKEND_H_
#define POSENC_KERNELS_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/ops.h"

namespace posenc::kernels {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;  // "reference", "cpu", "cuda"
  virtual std::string detail() const = 0;      // ISA, device
  // OK while the backend can compute; otherwise why it cannot any more (the cuda backend after a
  // sticky CUDA error, which leaves the process's CUDA context unusable until a restart).
  virtual absl::Status Usable() const { return absl::OkStatus(); }
  // Host memory a call takes beyond its tensors while it computes, given its output bytes (the
  // server counts it against --max_inflight_bytes): the cuda backend's pinned staging buffer.
  virtual int64_t HostStagingBytes(int64_t /*output_bytes*/) const { return 0; }

  virtual absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                                  const TensorView& table) const = 0;
  // All learned-table rows exist (RunAddPositionEncoding checked). y may alias plan.x.
  virtual absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                           const ResolvedPositions& positions,
                                           const TensorView& y) const = 0;
  virtual absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                                 const ResolvedPositions& positions, const TensorView& cos,
                                 const TensorView& sin) const = 0;
  // Rotates q and (if k.data) k in place.
  virtual absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                                 const ResolvedPositions& positions, const TensorView& q,
                                 const TensorView& k) const = 0;
  virtual absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                                 const TensorView& bias) const = 0;
  virtual absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const = 0;
  virtual absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                         const TensorView& embeddings) const = 0;
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

// A CUDA device this process can use (GetServerInfo lists them).
struct CudaDeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int64_t total_memory_bytes = 0;
  int compute_capability_major = 0, compute_capability_minor = 0;
  std::string driver_version;   // CUDA version the driver supports, "13.0"
  std::string runtime_version;  // CUDA runtime this build uses, "13.0"
};

// Whether this build contains the CUDA backend (configured with nvcc found or
// -DPOSENC_ENABLE_CUDA=ON).
bool CudaBuiltIn();

// The usable CUDA devices; empty when the build has no CUDA backend, no driver is loaded or no
// device is present (never an error: "auto" backends fall back to the CPU).
std::vector<CudaDeviceInfo> ListCudaDevices();

struct CudaBackendOptions {
  int device = 0;  // the CUDA device index (--cuda_device)
  // Streams that concurrent requests spread over (round robin): copies of one request overlap
  // the kernels and copies of others.
  int streams = 4;
  // Device memory the stream-ordered pool keeps for reuse between requests (its release
  // threshold); requests beyond it still run, the excess is returned to the driver.
  int64_t device_pool_bytes = int64_t{1} << 30;
  // Pinned (page-locked) staging buffers kept for reuse; larger requests get a buffer of their own.
  int64_t pinned_pool_bytes = int64_t{256} << 20;
};

// The CUDA backend on one device. UNIMPLEMENTED when the build has no CUDA backend; UNAVAILABLE
// (with the CUDA error name) when the device cannot be used (no driver, no such device).
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_BACKEND_H_
