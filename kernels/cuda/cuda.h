// The CUDA backend's host side, shared by its ops (as cpu/cpu.h is for the CPU backend): the
// device plumbing every op uses (cuda/backend.cc: one request's device memory, pinned staging
// and stream; CUDA errors) and the host launcher of each op, defined beside the op
// (absolute/cuda.cc, rope/cuda.cc, bias/cuda.cc; their kernels are the families' cuda.cu files
// behind cuda/launch.h). g++ and the CUDA runtime API only: never included by a .cu file.
//
// A request: Begin() picks one of the device's streams (round robin); the launcher registers its
// inputs, in-place tensors, outputs and scratch (Request::Input/InOut/Output/Scratch), Upload()
// lays them out in ONE device allocation from the stream-ordered memory pool and ONE pinned
// staging buffer and copies the inputs up in one copy; the launcher fills its launch struct from
// Device() pointers and launches (Check() turns the launch's error into a Status); Download()
// copies the results back in one copy and synchronizes the stream. A tensor that already lives
// on the device (TensorView::on_device: a caller's CUDA IPC region) is no segment of the
// allocation: Device() is its own pointer, nothing is copied for it (ApplyRope rotates in place
// in the caller's buffer, outputs are written straight into the caller's range).
//
// A launcher hands the inputs the device does not compute exactly (phases beyond
// hd::kMaxExactPhase, DEEPSEEK rotary parts beyond kRopeChunk, more than 2^20 heads per token)
// to ctx.host, the CPU backend the CUDA backend was made with (the same results within the
// parity tolerances).
//
// Thread-safety: a CudaContext may be used by many threads at once; a Request by one.
#ifndef POSENC_KERNELS_CUDA_CUDA_H_
#define POSENC_KERNELS_CUDA_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"

namespace posenc::kernels::cuda {

class CudaDevice;  // the streams, the pinned pool and the sticky-error state (cuda/backend.cc)

// A page-locked host buffer of the device's pinned pool.
struct PinnedBuffer {
  void* ptr = nullptr;
  size_t size = 0;
};

// One request's device and staging memory and its stream (see the file comment).
class Request {
 public:
  Request(const CudaDevice& device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Segments, in any order; Device(i) is valid after Upload().
  int Input(const void* host, size_t bytes) { return Add(kIn, const_cast<void*>(host), bytes); }
  int InOut(void* host, size_t bytes) { return Add(kInOut, host, bytes); }
  int Output(void* host, size_t bytes) { return Add(kOut, host, bytes); }
  int Scratch(size_t bytes) { return Add(kScratch, nullptr, bytes); }
  template <typename T>
  int Input(const std::vector<T>& v) {
    return Input(v.data(), v.size() * sizeof(T));
  }
  // A whole tensor as an input, an in-place tensor or an output (used where it is when it lives
  // on the device).
  int Input(const ConstTensorView& t) {
    return Add(t.on_device ? kOnDevice : kIn, const_cast<void*>(t.data), TensorBytes(t));
  }
  int InOut(const TensorView& t) {
    return Add(t.on_device ? kOnDevice : kInOut, t.data, TensorBytes(t));
  }
  int Output(const TensorView& t) {
    return Add(t.on_device ? kOnDevice : kOut, t.data, TensorBytes(t));
  }

  absl::Status Upload();
  absl::Status Download();
  void* Device(int i) const {
    const Segment& s = segments_[i];
    return s.kind == kOnDevice ? s.host : memory_ + s.offset;
  }
  template <typename T>
  const T* DeviceAs(int i) const {
    return static_cast<const T*>(Device(i));
  }
  cudaStream_t stream() const { return stream_; }
  // OK for cudaSuccess; else the error as a Status (INTERNAL "cuda: <what>: <name> (<text>)").
  absl::Status Check(int rc, const char* what);

 private:
  enum Kind { kIn = 0, kInOut = 1, kOut = 2, kScratch = 3, kOnDevice = 4 };
  struct Segment {
    Kind kind;
    void* host;  // kOnDevice: the device pointer
    size_t bytes, offset = 0;
  };
  static size_t TensorBytes(const ConstTensorView& t) {
    return static_cast<size_t>(t.NumElements() * DTypeSize(t.dtype));
  }
  int Add(Kind kind, void* host, size_t bytes) {
    segments_.push_back({kind, host, bytes});
    return static_cast<int>(segments_.size()) - 1;
  }

  const CudaDevice& device_;
  cudaStream_t stream_;
  std::vector<Segment> segments_;
  unsigned char* memory_ = nullptr;
  PinnedBuffer staging_;
  size_t up_end_ = 0, down_begin_ = 0, down_end_ = 0;
  bool issued_ = false;
};

// What every CUDA op runs with: the device (Begin() starts a request on it) and the host backend
// for the inputs the device does not compute exactly.
struct CudaContext {
  const CudaDevice& device;
  const Backend& host;

  // A request on the next stream; fails fast once the device is broken, and when the calling
  // thread's call is cancelled.
  absl::StatusOr<std::unique_ptr<Request>> Begin() const;
};

// The host hand-off of a call whose tensors live on the device: runs `host_call` with every
// device view among `views` replaced by a host copy of it (copied down first), then copies each
// back up to where it lives. Host views are left as they are. Used by the launchers for the inputs
// the device does not compute exactly.
absl::Status OnHost(const CudaContext& ctx, std::initializer_list<TensorView*> views,
                    const std::function<absl::Status()>& host_call);

// The calling thread's Cancellation (kernels/common/cancellation.h), checked between the steps
// of a request.
absl::Status CheckCancelled();

// Positions as int32 (component-major), -1 for padding tokens (all components).
std::vector<int32_t> DevicePositions(const ResolvedPositions& positions);

// Whether every phase p * omega of positions up to max_position (shifted by `shift`) reduces
// exactly on the device (below hd::kMaxExactPhase); larger ones go to the host backend.
bool ExactOnDevice(int64_t max_position, int64_t shift, const cpu::SplitFrequencies& w);

// --- The ops (see each op's header; arguments as on Backend). ---
absl::Status Sinusoidal(const CudaContext& ctx, const SinusoidalPlan& plan,
                        const ResolvedPositions& positions, const TensorView& table);
absl::Status AddPositionEncoding(const CudaContext& ctx, const AddPositionEncodingPlan& plan,
                                 const ResolvedPositions& positions, const TensorView& y);
absl::Status RopeCache(const CudaContext& ctx, const RopeCachePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& cos, const TensorView& sin);
absl::Status ApplyRope(const CudaContext& ctx, const ApplyRopePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& q, const TensorView& k);
absl::Status AlibiBias(const CudaContext& ctx, const AlibiBiasPlan& plan,
                       absl::Span<const double> slopes, const TensorView& bias);
absl::Status RelativeBias(const CudaContext& ctx, const RelativeBiasPlan& plan,
                          const TensorView& bias);
absl::Status RelativeEmbedding(const CudaContext& ctx, const RelativeEmbeddingPlan& plan,
                               const TensorView& embeddings);

}  // namespace posenc::kernels::cuda

#endif  // POSENC_KERNELS_CUDA_CUDA_H_
