// The CUDA backend (issue #12): the device plumbing every op shares (device listing, the
// stream pool, the stream-ordered device memory pool, pinned staging, CUDA errors) and the Backend
// that binds the ops' host launchers (cuda/cuda.h; absolute/cuda.cc, rope/cuda.cc, bias/cuda.cc).
// Host code only (g++ and the CUDA runtime API); the kernels are in the ops' *.cu files behind
// kernels/cuda/launch.h.
//
// A request (cuda/cuda.h, Request): one of the backend's streams (round robin), ONE device
// allocation from the stream-ordered memory pool (cudaMallocAsync on the device's default pool,
// whose release threshold keeps device_pool_bytes cached between requests) holding its inputs,
// in-place tensors, outputs and scratch, and ONE pinned staging buffer (a free list of
// page-locked buffers); inputs go up in one copy, the kernels run, results come back in one copy,
// then the stream is synchronized and the staging buffer goes back to the list. Requests on
// different threads overlap (different streams, or queued in order on the same one).
//
// Errors: every CUDA call's error becomes INTERNAL "cuda: <what>: <cudaGetErrorName> (<text>)".
// Non-sticky errors (cudaErrorMemoryAllocation, cudaErrorInvalidValue, a bad launch
// configuration) are cleared with cudaGetLastError and touch only their own request: the
// context, the pool and the streams stay usable. Sticky errors (an illegal address, a kernel
// fault, ECC: the CUDA context is corrupt and every later CUDA call in the process fails) mark
// the backend broken: later requests fail fast with INTERNAL naming the first error, and
// detail() and Usable() say so. No recovery is attempted in-process (cudaDeviceReset would pull
// memory from under requests still in flight on other threads); the process must be restarted.
// Backend::For then sends every call to the host backend, and the server reports NOT_SERVING
// (server/handlers.h, AdmitOutputs), so an orchestrator restarts it.
//
// Cancellation: the calling thread's Cancellation (kernels/common/cancellation.h) is checked
// before the upload, before the launches and before the download; the kernels themselves take
// microseconds to milliseconds and are not interrupted.
#include "kernels/backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/cancellation.h"
#include "kernels/common/status.h"
#include "kernels/cuda/cuda.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels {
namespace cuda {
namespace {

std::string VersionString(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorUnknown: return true;
    default: return false;
  }
}

std::string ErrorText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// Thread-safe free list of pinned host buffers, kept up to `cap` bytes.
class PinnedPool {
 public:
  explicit PinnedPool(int64_t cap) : cap_(cap) {}
  ~PinnedPool() {
    for (auto& b : free_) cudaFreeHost(b.ptr);
  }
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  absl::StatusOr<PinnedBuffer> Acquire(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The smallest cached buffer that fits.
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->size >= size && (best == free_.end() || it->size < best->size)) best = it;
      }
      if (best != free_.end()) {
        PinnedBuffer b = *best;
        free_.erase(best);
        cached_ -= static_cast<int64_t>(b.size);
        return b;
      }
    }
    PinnedBuffer b;
    b.size = std::max<size_t>(size, 1 << 16);
    if (cudaError_t e = cudaMallocHost(&b.ptr, b.size); e != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(
          absl::StrCat("cuda: pinned staging buffer of ", b.size, " bytes: ", ErrorText(e)));
    }
    return b;
  }
  void Release(PinnedBuffer b) {
    if (b.ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + static_cast<int64_t>(b.size) > cap_) {
      // Over the cap: drop the largest cached buffers first, or this one.
      std::sort(free_.begin(), free_.end(),
                [](const PinnedBuffer& x, const PinnedBuffer& y) { return x.size < y.size; });
      while (!free_.empty() && cached_ + static_cast<int64_t>(b.size) > cap_ &&
             free_.back().size > b.size) {
        cached_ -= static_cast<int64_t>(free_.back().size);
        cudaFreeHost(free_.back().ptr);
        free_.pop_back();
      }
      if (cached_ + static_cast<int64_t>(b.size) > cap_) {
        cudaFreeHost(b.ptr);
        return;
      }
    }
    cached_ += static_cast<int64_t>(b.size);
    free_.push_back(b);
  }

 private:
  const int64_t cap_;
  std::mutex mu_;
  std::vector<PinnedBuffer> free_;
  int64_t cached_ = 0;
};

}  // namespace

// One device: its streams, its pinned staging pool and whether a sticky error broke it.
class CudaDevice {
 public:
  CudaDevice(int index, std::string name, std::vector<cudaStream_t> streams,
             int64_t pinned_pool_bytes)
      : index_(index),
        name_(std::move(name)),
        streams_(std::move(streams)),
        pinned_(pinned_pool_bytes) {}
  ~CudaDevice() {
    cudaSetDevice(index_);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string detail() const {
    std::string d = absl::StrCat("device ", index_, ": ", name_, ", ", streams_.size(), " streams");
    if (const char* broken = broken_.load()) {
      absl::StrAppend(&d, "; BROKEN after ", broken, " (restart the process)");
    }
    return d;
  }

  absl::Status Usable() const {
    if (const char* broken = broken_.load()) {
      return absl::InternalError(absl::StrCat("cuda: device ", index_,
                                              " unusable after a sticky error: ", broken,
                                              " (restart the process)"));
    }
    return absl::OkStatus();
  }

  // Every CUDA error of a request: cleared if it is not sticky, else the device is broken.
  absl::Status Fail(cudaError_t e, absl::string_view what) const {
    cudaGetLastError();  // clears a non-sticky error of this thread
    if (IsSticky(e)) {
      const char* expected = nullptr;
      broken_.compare_exchange_strong(expected, cudaGetErrorName(e));
    }
    return absl::InternalError(absl::StrCat("cuda: ", what, ": ", ErrorText(e)));
  }

  absl::StatusOr<std::unique_ptr<Request>> Begin() const {
    POSENC_RETURN_IF_ERROR(Usable());
    POSENC_RETURN_IF_ERROR(CheckCancelled());
    if (cudaError_t e = cudaSetDevice(index_); e != cudaSuccess) return Fail(e, "cudaSetDevice");
    const size_t i = next_stream_.fetch_add(1, std::memory_order_relaxed) % streams_.size();
    return std::make_unique<Request>(*this, streams_[i]);
  }

  PinnedPool& pinned() const { return pinned_; }

 private:
  const int index_;
  const std::string name_;
  const std::vector<cudaStream_t> streams_;
  mutable std::atomic<size_t> next_stream_{0};
  mutable PinnedPool pinned_;
  mutable std::atomic<const char*> broken_{nullptr};  // the first sticky error's name
};

absl::StatusOr<std::unique_ptr<Request>> CudaContext::Begin() const { return device.Begin(); }

absl::Status CheckCancelled() {
  if (const Cancellation* c = CurrentCancellation()) return c->Check();
  return absl::OkStatus();
}

absl::Status OnHost(const CudaContext& ctx, std::initializer_list<TensorView*> views,
                    const std::function<absl::Status()>& host_call) {
  struct Staged {
    TensorView* view;
    TensorView device;  // the view as given
    std::vector<unsigned char> bytes;
  };
  std::vector<Staged> staged;
  for (TensorView* v : views) {
    if (v->on_device && v->data != nullptr) staged.push_back({v, *v, {}});
  }
  if (staged.empty()) return host_call();
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());  // makes the device current
  absl::Status status;
  size_t down = 0;
  for (; down < staged.size() && status.ok(); ++down) {
    Staged& s = staged[down];
    s.bytes.resize(static_cast<size_t>(s.device.NumElements() * DTypeSize(s.device.dtype)));
    status =
        r->Check(cudaMemcpy(s.bytes.data(), s.device.data, s.bytes.size(), cudaMemcpyDeviceToHost),
                 "host hand-off: copy down");
    s.view->data = s.bytes.data();
    s.view->on_device = false;
  }
  if (status.ok()) status = host_call();
  for (size_t i = 0; i < down; ++i) {
    Staged& s = staged[i];
    if (status.ok()) {
      status = r->Check(
          cudaMemcpy(s.device.data, s.bytes.data(), s.bytes.size(), cudaMemcpyHostToDevice),
          "host hand-off: copy up");
    }
    *s.view = s.device;
  }
  return status;
}

std::vector<int32_t> DevicePositions(const ResolvedPositions& positions) {
  std::vector<int32_t> out(positions.pos.size());
  for (int64_t c = 0; c < positions.components; ++c) {
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      out[c * positions.num_tokens + t] =
          positions.IsValid(t) ? static_cast<int32_t>(positions.At(t, c)) : -1;
    }
  }
  return out;
}

bool ExactOnDevice(int64_t max_position, int64_t shift, const cpu::SplitFrequencies& w) {
  return static_cast<double>(std::max<int64_t>(max_position, 0) + shift) * w.max <
         hd::kMaxExactPhase;
}

Request::~Request() {
  // The stream must be done with the staging buffer before it is reused (also after errors and
  // cancellations); device memory is freed in stream order.
  if (issued_) cudaStreamSynchronize(stream_);
  if (memory_ != nullptr) cudaFreeAsync(memory_, stream_);
  device_.pinned().Release(staging_);
  cudaGetLastError();
}

absl::Status Request::Check(int rc, const char* what) {
  const auto e = static_cast<cudaError_t>(rc);
  if (e == cudaSuccess) return absl::OkStatus();
  return device_.Fail(e, what);
}

absl::Status Request::Upload() {
  // Layout: [inputs | in-out | outputs | scratch], each segment 256-byte aligned: the inputs and
  // in-out tensors go up in one copy, the in-out tensors and outputs come down in one.
  constexpr size_t kAlign = 256;
  const auto padded = [](size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  size_t offset = 0;
  for (int kind = kIn; kind <= kScratch; ++kind) {
    if (kind == kInOut) down_begin_ = offset;  // the download starts at the in-out tensors
    for (Segment& s : segments_) {
      if (s.kind != kind) continue;
      s.offset = offset;
      offset += padded(s.bytes);
    }
    if (kind == kInOut) up_end_ = offset;  // the upload ends after them
    if (kind == kOut) down_end_ = offset;
  }
  const size_t total = std::max<size_t>(offset, kAlign);
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&memory_), total, stream_);
      e != cudaSuccess) {
    memory_ = nullptr;
    return device_.Fail(e, absl::StrCat("cudaMallocAsync of ", total, " bytes"));
  }
  issued_ = true;
  // The download copies the outputs' alignment padding too, which no kernel writes: cleared, so
  // that every byte it reads is defined (compute-sanitizer's initcheck gates on this).
  for (const Segment& s : segments_) {
    if (s.kind == kOut && padded(s.bytes) > s.bytes) {
      POSENC_RETURN_IF_ERROR(Check(
          cudaMemsetAsync(memory_ + s.offset + s.bytes, 0, padded(s.bytes) - s.bytes, stream_),
          "clear padding"));
    }
  }
  const size_t staging = std::max(up_end_, down_end_ - down_begin_);
  if (staging == 0) return absl::OkStatus();
  POSENC_ASSIGN_OR_RETURN(staging_, device_.pinned().Acquire(staging));
  if (up_end_ == 0) return absl::OkStatus();
  auto* pin = static_cast<unsigned char*>(staging_.ptr);
  for (const Segment& s : segments_) {
    if ((s.kind == kIn || s.kind == kInOut) && s.bytes)
      std::memcpy(pin + s.offset, s.host, s.bytes);
  }
  POSENC_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(memory_, pin, up_end_, cudaMemcpyHostToDevice, stream_), "upload"));
  return CheckCancelled();
}

absl::Status Request::Download() {
  POSENC_RETURN_IF_ERROR(CheckCancelled());
  auto* pin = static_cast<unsigned char*>(staging_.ptr);
  const size_t bytes = down_end_ - down_begin_;
  if (bytes) {
    // The staging buffer is reused for the download: the upload before it is stream-ordered.
    POSENC_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(pin, memory_ + down_begin_, bytes, cudaMemcpyDeviceToHost, stream_),
              "download"));
  }
  POSENC_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), "kernels"));
  for (const Segment& s : segments_) {
    if ((s.kind == kInOut || s.kind == kOut) && s.bytes) {
      std::memcpy(s.host, pin + (s.offset - down_begin_), s.bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace cuda

namespace {

// Binds the ops' host launchers (cuda/cuda.h) to one device and the host backend.
class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<cuda::CudaDevice> device, std::shared_ptr<const Backend> host,
              int64_t small_call_bytes)
      : device_(std::move(device)),
        host_(std::move(host)),
        small_call_bytes_(small_call_bytes),
        ctx_{*device_, *host_} {}

  absl::string_view name() const override { return "cuda"; }
  std::string detail() const override { return device_->detail(); }
  absl::Status Usable() const override { return device_->Usable(); }
  bool reads_device_memory() const override { return true; }
  // The pinned staging buffer holds max(inputs, outputs); inputs are the request's tensors (a few
  // KiB of positions and frequencies besides), so about the outputs. A learned table given by
  // name uploads the rows a call reads, which can exceed that.
  int64_t HostStagingBytes(int64_t output_bytes) const override { return output_bytes; }
  const Backend* host() const override { return host_.get(); }
  int64_t small_call_bytes() const override { return small_call_bytes_; }

  absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                          const TensorView& table) const override {
    return cuda::Sinusoidal(ctx_, plan, positions, table);
  }
  absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                   const ResolvedPositions& positions,
                                   const TensorView& y) const override {
    return cuda::AddPositionEncoding(ctx_, plan, positions, y);
  }
  absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& cos,
                         const TensorView& sin) const override {
    return cuda::RopeCache(ctx_, plan, freqs, positions, cos, sin);
  }
  absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& q,
                         const TensorView& k) const override {
    return cuda::ApplyRope(ctx_, plan, freqs, positions, q, k);
  }
  absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                         const TensorView& bias) const override {
    return cuda::AlibiBias(ctx_, plan, slopes, bias);
  }
  absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const override {
    return cuda::RelativeBias(ctx_, plan, bias);
  }
  absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                 const TensorView& embeddings) const override {
    return cuda::RelativeEmbedding(ctx_, plan, embeddings);
  }

 private:
  const std::unique_ptr<cuda::CudaDevice> device_;
  const std::shared_ptr<const Backend> host_;
  const int64_t small_call_bytes_;
  const cuda::CudaContext ctx_;
};

}  // namespace

bool CudaBuiltIn() { return true; }

std::vector<CudaDeviceInfo> ListCudaDevices() {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.compute_capability_major = prop.major;
    info.compute_capability_minor = prop.minor;
    info.driver_version = cuda::VersionString(driver);
    info.runtime_version = cuda::VersionString(runtime);
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options,
                                                         std::shared_ptr<const Backend> host) {
  auto unavailable = [&](cudaError_t e, absl::string_view what) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("cuda device ", options.device,
                                               " is not usable: ", what, ": ", cuda::ErrorText(e)));
  };
  if (host == nullptr) {
    return absl::InvalidArgumentError("cuda: a host backend is required (the process's cpu one)");
  }
  if (options.streams < 1 || options.streams > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda streams: expected 1 .. 64, got ", options.streams));
  }
  if (options.small_call_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda small_call_bytes: expected >= 0, got ", options.small_call_bytes));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return unavailable(e, "cudaGetDeviceCount");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(absl::StrCat("cuda device ", options.device, " does not exist (",
                                               count, " device", count == 1 ? "" : "s",
                                               ": cudaErrorInvalidDevice)"));
  }
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return unavailable(e, "cudaSetDevice");
  }
  if (cudaError_t e = cudaFree(nullptr); e != cudaSuccess) {  // creates the context
    return unavailable(e, "context creation");
  }
  cudaDeviceProp prop;
  if (cudaError_t e = cudaGetDeviceProperties(&prop, options.device); e != cudaSuccess) {
    return unavailable(e, "cudaGetDeviceProperties");
  }
  // The stream-ordered pool keeps up to device_pool_bytes between requests.
  cudaMemPool_t pool;
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, options.device); e != cudaSuccess) {
    return unavailable(e, "cudaDeviceGetDefaultMemPool");
  }
  uint64_t threshold = static_cast<uint64_t>(std::max<int64_t>(options.device_pool_bytes, 0));
  if (cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
      e != cudaSuccess) {
    return unavailable(e, "cudaMemPoolSetAttribute");
  }
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < options.streams; ++i) {
    cudaStream_t s;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
      for (cudaStream_t made : streams) cudaStreamDestroy(made);
      return unavailable(e, "cudaStreamCreate");
    }
    streams.push_back(s);
  }
  auto device = std::make_unique<cuda::CudaDevice>(
      options.device, absl::StrFormat("%s (sm_%d%d)", prop.name, prop.major, prop.minor),
      std::move(streams), options.pinned_pool_bytes);
  return std::make_unique<CudaBackend>(std::move(device), std::move(host),
                                       options.small_call_bytes);
}

}  // namespace posenc::kernels
