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
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
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

  // Beside a device backend (cuda): the host backend it was made with, which runs the calls whose
  // outputs total fewer than small_call_bytes() bytes, every call once Usable() fails, and the
  // inputs the device does not compute exactly. Null (and 0) for the host backends.
  virtual const Backend* host() const { return nullptr; }
  virtual int64_t small_call_bytes() const { return 0; }

  // Whether the backend reads and writes views whose bytes live on its device
  // (TensorView::on_device): the cuda backend; the host backends refuse them
  // (CheckBackendReaches).
  virtual bool reads_device_memory() const { return false; }

  // The backend that runs a call whose planned outputs total output_bytes: host() for small
  // calls and once this backend is unusable, else this one; a call with tensors on the device
  // (device_tensors) stays on the device whatever its size (a host backend cannot read them; an
  // unusable device fails it with its sticky error). The one place a call's backend is chosen
  // (the server asks before admitting a call, then runs the call on the answer).
  const Backend& For(int64_t output_bytes, bool device_tensors = false) const {
    const Backend* h = host();
    if (device_tensors) return *this;
    if (h != nullptr && (output_bytes < small_call_bytes() || !Usable().ok())) return *h;
    return *this;
  }

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

// OK when `backend` may be handed every view of `views` ({request field, view}); else
// FAILED_PRECONDITION naming the first view on the device (TensorView::on_device) that a host
// backend would have to read. Every Run<Op> checks its tensors with it.
absl::Status CheckBackendReaches(
    const Backend& backend,
    std::initializer_list<std::pair<absl::string_view, ConstTensorView>> views);

// OK when `view` lives in host memory; else FAILED_PRECONDITION naming `field`: a tensor that host
// code reads or writes (an op's host-side input or output) cannot be a device range.
absl::Status CheckOnHost(absl::string_view field, const ConstTensorView& view);

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

// Default of CudaBackendOptions::small_call_bytes (--cuda_small_call_bytes): 1 MiB. A call's
// fixed cost on the device is a launch, a stream synchronization and the copies' setup (tens of
// microseconds); the host backend produces 1 MiB of output in about that time on one core, so
// smaller calls cannot win on the device. Not yet measured on a GPU (BENCHMARKS.md, CUDA).
inline constexpr int64_t kDefaultCudaSmallCallBytes = int64_t{1} << 20;

struct CudaBackendOptions {
  int device = 0;  // the CUDA device index (--cuda_device)
  // Calls whose outputs total fewer bytes run on the host backend (Backend::For).
  int64_t small_call_bytes = kDefaultCudaSmallCallBytes;
  // Streams that concurrent requests spread over (round robin): copies of one request overlap
  // the kernels and copies of others.
  int streams = 4;
  // Device memory the stream-ordered pool keeps for reuse between requests (its release
  // threshold); requests beyond it still run, the excess is returned to the driver.
  int64_t device_pool_bytes = int64_t{1} << 30;
  // Pinned (page-locked) staging buffers kept for reuse; larger requests get a buffer of their own.
  int64_t pinned_pool_bytes = int64_t{256} << 20;
};

// The CUDA backend on one device, beside `host` (the process's one CPU backend, shared: no second
// thread pool), which runs its small calls and the inputs the device does not compute exactly.
// UNIMPLEMENTED when the build has no CUDA backend; INVALID_ARGUMENT without a host or with
// streams outside 1 .. 64; UNAVAILABLE (with the CUDA error name) when the device cannot be used
// (no driver, no such device).
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options,
                                                         std::shared_ptr<const Backend> host);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_BACKEND_H_
