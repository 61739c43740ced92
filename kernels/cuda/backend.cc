// The CUDA backend (issue #12): the Backend subclass, device listing, and the device plumbing
// every op shares. Host code only (g++ and the CUDA runtime API); the kernels are in the ops'
// *.cu files behind kernels/cuda/launch.h.
//
// A request: the backend picks one of its streams (round robin), lays out its inputs, in-place
// tensors, outputs and scratch in ONE device allocation from the stream-ordered memory pool
// (cudaMallocAsync on the device's default pool, whose release threshold keeps
// device_pool_bytes cached between requests) and ONE pinned staging buffer (a free list of
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
// The server runs later calls on its cpu backend and reports NOT_SERVING (server/handlers.h,
// AdmitOutputs), so an orchestrator restarts it.
//
// Cancellation: the calling thread's Cancellation (kernels/common/cancellation.h) is checked
// before the upload, before the launches and before the download; the kernels themselves take
// microseconds to milliseconds and are not interrupted.
//
// Fallbacks to the CPU backend inside this backend (the same results within the parity
// tolerances): requests whose largest phase p*omega reaches 2^33 (omega > 4 from unusual
// scalings: the CPU reduces those in extended precision);
// DEEPSEEK with rotary_dim > 2 * kRopeChunk; more than 2^20 heads of q and k per token.
#include "kernels/backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/cancellation.h"
#include "kernels/common/status.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/rope/rope_math.h"

namespace posenc::kernels {
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

// Thread-safe free list of pinned host buffers.
class PinnedPool {
 public:
  explicit PinnedPool(int64_t cap) : cap_(cap) {}
  ~PinnedPool() {
    for (auto& b : free_) cudaFreeHost(b.ptr);
  }
  struct Buffer {
    void* ptr = nullptr;
    size_t size = 0;
  };
  absl::StatusOr<Buffer> Acquire(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The smallest cached buffer that fits.
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->size >= size && (best == free_.end() || it->size < best->size)) best = it;
      }
      if (best != free_.end()) {
        Buffer b = *best;
        free_.erase(best);
        cached_ -= static_cast<int64_t>(b.size);
        return b;
      }
    }
    Buffer b;
    b.size = std::max<size_t>(size, 1 << 16);
    if (cudaError_t e = cudaMallocHost(&b.ptr, b.size); e != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(
          absl::StrCat("cuda: pinned staging buffer of ", b.size, " bytes: ", ErrorText(e)));
    }
    return b;
  }
  void Release(Buffer b) {
    if (b.ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + static_cast<int64_t>(b.size) > cap_) {
      // Over the cap: drop the largest cached buffers first, or this one.
      std::sort(free_.begin(), free_.end(),
                [](const Buffer& x, const Buffer& y) { return x.size < y.size; });
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
  std::vector<Buffer> free_;
  int64_t cached_ = 0;
};

class CudaBackend;

// One request's device and staging memory and its stream (see the file comment).
class Request {
 public:
  Request(const CudaBackend& backend, cudaStream_t stream, PinnedPool& pinned)
      : backend_(backend), stream_(stream), pinned_(pinned) {}
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

  absl::Status Upload();
  absl::Status Download();
  void* Device(int i) const { return device_ + segments_[i].offset; }
  cudaStream_t stream() const { return stream_; }
  absl::Status Check(int rc, const char* what);

 private:
  enum Kind { kIn = 0, kInOut = 1, kOut = 2, kScratch = 3 };
  struct Segment {
    Kind kind;
    void* host;
    size_t bytes, offset = 0;
  };
  int Add(Kind kind, void* host, size_t bytes) {
    segments_.push_back({kind, host, bytes});
    return static_cast<int>(segments_.size()) - 1;
  }

  const CudaBackend& backend_;
  cudaStream_t stream_;
  PinnedPool& pinned_;
  std::vector<Segment> segments_;
  unsigned char* device_ = nullptr;
  PinnedPool::Buffer staging_;
  size_t up_end_ = 0, down_begin_ = 0, down_end_ = 0;
  bool issued_ = false;
};

absl::Status CheckCancelled() {
  if (const Cancellation* c = CurrentCancellation()) return c->Check();
  return absl::OkStatus();
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, std::string device_name,
              std::vector<cudaStream_t> streams, std::unique_ptr<Backend> cpu)
      : options_(options),
        device_name_(std::move(device_name)),
        streams_(std::move(streams)),
        pinned_(options.pinned_pool_bytes),
        cpu_(std::move(cpu)) {}
  ~CudaBackend() override {
    cudaSetDevice(options_.device);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }

  absl::string_view name() const override { return "cuda"; }
  std::string detail() const override {
    std::string d = absl::StrCat("device ", options_.device, ": ", device_name_, ", ",
                                 streams_.size(), " streams");
    if (const char* broken = broken_.load()) {
      absl::StrAppend(&d, "; BROKEN after ", broken, " (restart the process)");
    }
    return d;
  }

  // The pinned staging buffer holds max(inputs, outputs); inputs are the request's tensors (a few
  // KiB of positions and frequencies besides), so about the outputs. A learned table given by
  // name uploads the rows a call reads, which can exceed that.
  int64_t HostStagingBytes(int64_t output_bytes) const override { return output_bytes; }

  absl::Status Usable() const override {
    if (const char* broken = broken_.load()) {
      return absl::InternalError(absl::StrCat("cuda: device ", options_.device,
                                              " unusable after a sticky error: ", broken,
                                              " (restart the process)"));
    }
    return absl::OkStatus();
  }

  // Called by Request on every CUDA error.
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
    if (cudaError_t e = cudaSetDevice(options_.device); e != cudaSuccess) {
      return Fail(e, "cudaSetDevice");
    }
    const size_t i = next_stream_.fetch_add(1, std::memory_order_relaxed) % streams_.size();
    return std::make_unique<Request>(*this, streams_[i], pinned_);
  }

  absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                          const TensorView& table) const override;
  absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                   const ResolvedPositions& positions,
                                   const TensorView& y) const override;
  absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& cos,
                         const TensorView& sin) const override;
  absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& q,
                         const TensorView& k) const override;
  absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                         const TensorView& bias) const override;
  absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const override;
  absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                 const TensorView& embeddings) const override;

 private:
  const CudaBackendOptions options_;
  const std::string device_name_;
  const std::vector<cudaStream_t> streams_;
  mutable std::atomic<size_t> next_stream_{0};
  mutable PinnedPool pinned_;
  mutable std::atomic<const char*> broken_{nullptr};  // the first sticky error's name
  std::unique_ptr<Backend> cpu_;
};

Request::~Request() {
  // The stream must be done with the staging buffer before it is reused (also after errors and
  // cancellations); device memory is freed in stream order.
  if (issued_) cudaStreamSynchronize(stream_);
  if (device_ != nullptr) cudaFreeAsync(device_, stream_);
  pinned_.Release(staging_);
  cudaGetLastError();
}

absl::Status Request::Check(int rc, const char* what) {
  const auto e = static_cast<cudaError_t>(rc);
  if (e == cudaSuccess) return absl::OkStatus();
  return backend_.Fail(e, what);
}

absl::Status Request::Upload() {
  // Layout: [inputs | in-out | outputs | scratch], each segment 256-byte aligned: the inputs and
  // in-out tensors go up in one copy, the in-out tensors and outputs come down in one.
  constexpr size_t kAlign = 256;
  size_t offset = 0;
  for (int kind = kIn; kind <= kScratch; ++kind) {
    if (kind == kInOut) down_begin_ = offset;  // the download starts at the in-out tensors
    for (Segment& s : segments_) {
      if (s.kind != kind) continue;
      s.offset = offset;
      offset += (s.bytes + kAlign - 1) / kAlign * kAlign;
    }
    if (kind == kInOut) up_end_ = offset;  // the upload ends after them
    if (kind == kOut) down_end_ = offset;
  }
  const size_t total = std::max<size_t>(offset, kAlign);
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&device_), total, stream_);
      e != cudaSuccess) {
    device_ = nullptr;
    return backend_.Fail(e, absl::StrCat("cudaMallocAsync of ", total, " bytes"));
  }
  issued_ = true;
  const size_t staging = std::max(up_end_, down_end_ - down_begin_);
  if (staging == 0) return absl::OkStatus();
  POSENC_ASSIGN_OR_RETURN(staging_, pinned_.Acquire(staging));
  if (up_end_ == 0) return absl::OkStatus();
  auto* pin = static_cast<unsigned char*>(staging_.ptr);
  for (const Segment& s : segments_) {
    if ((s.kind == kIn || s.kind == kInOut) && s.bytes)
      std::memcpy(pin + s.offset, s.host, s.bytes);
  }
  POSENC_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(device_, pin, up_end_, cudaMemcpyHostToDevice, stream_), "upload"));
  return CheckCancelled();
}

absl::Status Request::Download() {
  POSENC_RETURN_IF_ERROR(CheckCancelled());
  auto* pin = static_cast<unsigned char*>(staging_.ptr);
  const size_t bytes = down_end_ - down_begin_;
  if (bytes) {
    // The staging buffer is reused for the download: the upload before it is stream-ordered.
    POSENC_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(pin, device_ + down_begin_, bytes, cudaMemcpyDeviceToHost, stream_),
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

// ---- RoPE -------------------------------------------------------------------------------------

// Positions as int32 (component-major), -1 for padding tokens (all components).
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

// Whether every phase p * omega of positions up to max_position (shifted by `shift`) reduces
// exactly on the device (below hd::kMaxExactPhase); larger ones go to the CPU backend.
bool ExactOnDevice(int64_t max_position, int64_t shift, const cpu::SplitFrequencies& w) {
  return static_cast<double>(std::max<int64_t>(max_position, 0) + shift) * w.max <
         hd::kMaxExactPhase;
}

// What the angle kernels need, packed for one upload.
struct AngleInputs {
  cpu::SplitFrequencies w;
  std::vector<int32_t> positions;
  std::vector<int8_t> component;  // empty without M-RoPE
  double scale = 1, sign = 1;
  bool exact_range = true;  // every phase below hd::kMaxExactPhase

  AngleInputs(const RopeConfig& config, const RopeFrequencies& freqs,
              const ResolvedPositions& resolved)
      : w(freqs.inv_freq), positions(DevicePositions(resolved)) {
    const double m = freqs.CosSinScale();
    scale = config.inverse ? 1.0 / m : m;
    sign = config.inverse ? -1.0 : 1.0;
    if (!config.mrope_section.empty()) {
      for (size_t j = 0; j < w.hi.size(); ++j) {
        component.push_back(static_cast<int8_t>(MropeComponent(config, static_cast<int64_t>(j))));
      }
    }
    exact_range = ExactOnDevice(resolved.max_position, 0, w);
  }

  cuda::RopeAngles Bind(Request& r, int64_t tokens) {
    cuda::RopeAngles a;
    a.w_hi = static_cast<const double*>(r.Device(hi_));
    a.w_lo = static_cast<const double*>(r.Device(lo_));
    a.positions = static_cast<const int32_t*>(r.Device(pos_));
    a.component = component.empty() ? nullptr : static_cast<const int8_t*>(r.Device(comp_));
    a.tokens = tokens;
    a.half = static_cast<int64_t>(w.hi.size());
    a.scale = scale;
    a.sign = sign;
    return a;
  }
  void Add(Request& r) {
    hi_ = r.Input(w.hi);
    lo_ = r.Input(w.lo);
    pos_ = r.Input(positions);
    if (!component.empty()) comp_ = r.Input(component);
  }

 private:
  int hi_ = -1, lo_ = -1, pos_ = -1, comp_ = -1;
};

absl::Status CudaBackend::RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                                    const ResolvedPositions& positions, const TensorView& cos,
                                    const TensorView& sin) const {
  AngleInputs angles(plan.config, freqs, positions);
  if (!angles.exact_range) return cpu_->RopeCache(plan, freqs, positions, cos, sin);
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  angles.Add(*r);
  const size_t bytes = static_cast<size_t>(cos.NumElements() * DTypeSize(cos.dtype));
  const int c = r->Output(cos.data, bytes), s = r->Output(sin.data, bytes);
  POSENC_RETURN_IF_ERROR(r->Upload());
  cuda::RopeCacheLaunch l;
  l.angles = angles.Bind(*r, positions.num_tokens);
  l.cos = r->Device(c);
  l.sin = r->Device(s);
  l.dtype = static_cast<int>(cos.dtype);
  l.layout = static_cast<int>(plan.layout);
  l.width = plan.width;
  POSENC_RETURN_IF_ERROR(r->Check(cuda::LaunchRopeCache(l, r->stream()), "RopeCache kernel"));
  return r->Download();
}

absl::Status CudaBackend::ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                                    const ResolvedPositions& positions, const TensorView& q,
                                    const TensorView& k) const {
  const int64_t half = freqs.rotary_dim / 2;
  AngleInputs angles(plan.config, freqs, positions);
  const bool device_ok = angles.exact_range &&
                         !(plan.config.style == RopeStyle::kDeepseek && half > cuda::kRopeChunk) &&
                         (plan.q_heads + plan.k_heads) * 2 * cuda::kRopeChunk < (int64_t{1} << 31);
  if (!device_ok) {
    return cpu_->ApplyRope(plan, freqs, positions, q, k);
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  angles.Add(*r);
  const int64_t esize = DTypeSize(plan.dtype);
  const int qi = r->InOut(q.data, static_cast<size_t>(q.NumElements() * esize));
  const int ki = plan.has_k() ? r->InOut(k.data, static_cast<size_t>(k.NumElements() * esize)) : -1;
  POSENC_RETURN_IF_ERROR(r->Upload());
  cuda::ApplyRopeLaunch l;
  l.angles = angles.Bind(*r, plan.tokens);
  l.q = r->Device(qi);
  l.k = ki >= 0 ? r->Device(ki) : nullptr;
  l.dtype = static_cast<int>(plan.dtype);
  l.style = static_cast<int>(plan.config.style);
  l.inverse = plan.config.inverse;
  l.seq = plan.seq;
  l.q_heads = plan.q_heads;
  l.k_heads = plan.has_k() ? plan.k_heads : 0;
  l.q_batch = plan.q_strides.batch;
  l.q_seq = plan.q_strides.seq;
  l.q_head = plan.q_strides.head;
  l.k_batch = plan.k_strides.batch;
  l.k_seq = plan.k_strides.seq;
  l.k_head = plan.k_strides.head;
  // 16-byte accesses when every head row and pair block starts on a 16-byte boundary (the
  // device buffers are 256-byte aligned).
  const int64_t v = 16 / esize;
  const int64_t run = plan.config.style == RopeStyle::kGptj ? 2 * half : half;
  bool vec = run % v == 0 && cuda::kRopeChunk % v == 0;
  for (int64_t s : {l.q_batch, l.q_seq, l.q_head, l.k_batch, l.k_seq, l.k_head}) {
    vec = vec && s % v == 0;
  }
  l.vector = vec ? static_cast<int>(v) : 1;
  POSENC_RETURN_IF_ERROR(r->Check(cuda::LaunchApplyRope(l, r->stream()), "ApplyRope kernel"));
  return r->Download();
}

// ---- absolute ---------------------------------------------------------------------------------

absl::Status CudaBackend::Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                                     const TensorView& table) const {
  const std::vector<long double> exact = SinusoidalFrequencies(plan.params);
  const cpu::SplitFrequencies w(exact);
  if (!ExactOnDevice(positions.max_position, 0, w)) {
    return cpu_->Sinusoidal(plan, positions, table);
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  const std::vector<int32_t> pos = DevicePositions(positions);
  // At least one frequency entry, so that the device pointers are never dangling.
  std::vector<double> hi = w.hi, lo = w.lo;
  hi.push_back(0);
  lo.push_back(0);
  const int hi_i = r->Input(hi), lo_i = r->Input(lo), pos_i = r->Input(pos);
  const int out =
      r->Output(table.data, static_cast<size_t>(table.NumElements() * DTypeSize(table.dtype)));
  POSENC_RETURN_IF_ERROR(r->Upload());
  cuda::SinusoidalLaunch l;
  l.w_hi = static_cast<const double*>(r->Device(hi_i));
  l.w_lo = static_cast<const double*>(r->Device(lo_i));
  l.positions = static_cast<const int32_t*>(r->Device(pos_i));
  l.out = r->Device(out);
  l.dtype = static_cast<int>(table.dtype);
  l.layout = static_cast<int>(plan.params.layout);
  l.tokens = positions.num_tokens;
  l.dim = plan.params.dim;
  l.nfreq = static_cast<int64_t>(exact.size());
  POSENC_RETURN_IF_ERROR(r->Check(cuda::LaunchSinusoidal(l, r->stream()), "Sinusoidal kernel"));
  return r->Download();
}

absl::Status CudaBackend::AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                              const ResolvedPositions& positions,
                                              const TensorView& y) const {
  const AddPositionEncodingParams& params = plan.params;
  const cpu::SplitFrequencies w(plan.frequencies);
  const bool sinusoidal = params.sinusoidal.has_value();
  if (sinusoidal && !ExactOnDevice(positions.max_position, plan.shift, w)) {
    return cpu_->AddPositionEncoding(plan, positions, y);
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  const std::vector<int32_t> pos = DevicePositions(positions);
  const int pos_i = r->Input(pos);
  const int64_t esize = DTypeSize(plan.x.dtype);
  const int x_i = r->Input(plan.x.data, static_cast<size_t>(plan.x.NumElements() * esize));
  const int y_i = r->Output(y.data, static_cast<size_t>(y.NumElements() * esize));
  cuda::AddPositionEncodingLaunch l;
  std::vector<double> hi = w.hi, lo = w.lo;
  hi.push_back(0);  // never empty
  lo.push_back(0);
  int hi_i = -1, lo_i = -1, table_i = -1;
  int64_t first_row = 0;
  if (sinusoidal) {
    hi_i = r->Input(hi);
    lo_i = r->Input(lo);
    l.nfreq = static_cast<int64_t>(plan.frequencies.size());
    l.shift = plan.shift;
    l.layout = static_cast<int>(params.sinusoidal->layout);
  } else {
    // Only the learned rows the request reads (RunAddPositionEncoding checked them all).
    int64_t last_row = -1;
    first_row = INT64_MAX;
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      if (!positions.IsValid(t)) continue;
      first_row = std::min(first_row, positions.At(t) + params.table_offset);
      last_row = std::max(last_row, positions.At(t) + params.table_offset);
    }
    if (last_row < 0) first_row = last_row = 0;  // every token is padding
    const int64_t row_bytes = plan.pe_dim * DTypeSize(params.learned.dtype);
    table_i =
        r->Input(static_cast<const unsigned char*>(params.learned.data) + first_row * row_bytes,
                 static_cast<size_t>((last_row - first_row + 1) * row_bytes));
    l.table_dtype = static_cast<int>(params.learned.dtype);
    l.table_offset = params.table_offset - first_row;
  }
  POSENC_RETURN_IF_ERROR(r->Upload());
  l.x = r->Device(x_i);
  l.y = r->Device(y_i);
  l.dtype = static_cast<int>(plan.x.dtype);
  l.positions = static_cast<const int32_t*>(r->Device(pos_i));
  l.tokens = positions.num_tokens;
  l.dim = plan.dim;
  l.pe_dim = plan.pe_dim;
  l.out_dim = plan.out_dim;
  l.scale = params.scale;
  l.concat = params.combine == Combine::kConcat;
  if (sinusoidal) {
    l.w_hi = static_cast<const double*>(r->Device(hi_i));
    l.w_lo = static_cast<const double*>(r->Device(lo_i));
  } else {
    l.table = r->Device(table_i);
  }
  POSENC_RETURN_IF_ERROR(
      r->Check(cuda::LaunchAddPositionEncoding(l, r->stream()), "AddPositionEncoding kernel"));
  return r->Download();
}

// ---- biases -----------------------------------------------------------------------------------

std::vector<double> TableAsDouble(const ConstTensorView& t) {
  std::vector<double> out(static_cast<size_t>(t.NumElements()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = LoadAsDouble(t.data, t.dtype, static_cast<int64_t>(i));
  }
  return out;
}

// The bias output from its generator rows (heads rows of q_len + k_len - 1 values, element size
// esize): in the compact form the generators are the output; in the full form each row expands into
// its q_len x k_len Toeplitz matrix. Then the output goes back to the host.
absl::Status ExpandBiasAndDownload(Request& r, bool compact, int gen, int out, int64_t heads,
                                   int64_t q_len, int64_t k_len, int64_t esize) {
  if (!compact) {
    POSENC_RETURN_IF_ERROR(CheckCancelled());
    cuda::ToeplitzLaunch t{r.Device(gen), r.Device(out), heads,
                           q_len,         k_len,         static_cast<int>(esize)};
    POSENC_RETURN_IF_ERROR(r.Check(cuda::LaunchToeplitzExpand(t, r.stream()), "Toeplitz kernel"));
  }
  return r.Download();
}

absl::Status CudaBackend::AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                                    const TensorView& bias) const {
  const AlibiBiasParams& p = plan.params;
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  const std::vector<double> slope_vec(slopes.begin(), slopes.end());
  const int slopes_i = r->Input(slope_vec);
  const int64_t esize = DTypeSize(bias.dtype);
  const int out = r->Output(bias.data, static_cast<size_t>(bias.NumElements() * esize));
  const bool bloom = p.mode == AlibiMode::kBloom;
  const bool compact = p.form == BiasForm::kCompact;
  std::vector<double> kpos;  // BLOOM: each batch row's key positions
  int kpos_i = -1, gen = out;
  if (bloom) {
    kpos.resize(static_cast<size_t>(plan.batch * p.k_len));
    for (int64_t b = 0; b < plan.batch; ++b) plan.KeyPositions(b, kpos.data() + b * p.k_len);
    kpos_i = r->Input(kpos);
  } else if (!compact) {
    gen = r->Scratch(static_cast<size_t>(p.num_heads * (p.q_len + p.k_len - 1) * esize));
  }
  POSENC_RETURN_IF_ERROR(r->Upload());
  cuda::AlibiLaunch l;
  l.slopes = static_cast<const double*>(r->Device(slopes_i));
  l.kpos = bloom ? static_cast<const double*>(r->Device(kpos_i)) : nullptr;
  l.out = r->Device(gen);
  l.dtype = static_cast<int>(bias.dtype);
  l.mode = static_cast<int>(p.mode);
  l.future = static_cast<int>(p.future);
  l.compact = compact;
  l.batch = plan.batch;
  l.heads = p.num_heads;
  l.q_len = p.q_len;
  l.k_len = p.k_len;
  l.query_offset = plan.query_offset;
  if (bloom) {
    POSENC_RETURN_IF_ERROR(r->Check(cuda::LaunchAlibiBloom(l, r->stream()), "AlibiBias kernel"));
    return r->Download();
  }
  POSENC_RETURN_IF_ERROR(
      r->Check(cuda::LaunchAlibiGenerators(l, r->stream()), "AlibiBias generator kernel"));
  return ExpandBiasAndDownload(*r, compact, gen, out, p.num_heads, p.q_len, p.k_len, esize);
}

absl::Status CudaBackend::RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const {
  const RelativeBiasParams& p = plan.params;
  const int64_t gen_len = p.q_len + p.k_len - 1;
  // The bucket of each distance, on the host by the reference's T5Bucket (bias/bias_math.h).
  std::vector<int32_t> buckets(static_cast<size_t>(gen_len));
  for (int64_t t = 0; t < gen_len; ++t) {
    buckets[t] = static_cast<int32_t>(plan.Bucket(0, t - (p.q_len - 1)));
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  const int buckets_i = r->Input(buckets);
  const int64_t esize = DTypeSize(bias.dtype);
  const int out = r->Output(bias.data, static_cast<size_t>(bias.NumElements() * esize));
  if (p.form == BiasForm::kBuckets) {
    POSENC_RETURN_IF_ERROR(r->Upload());
    return ExpandBiasAndDownload(*r, /*compact=*/false, buckets_i, out, /*heads=*/1, p.q_len,
                                 p.k_len, /*esize=*/4);
  }
  const std::vector<double> table = TableAsDouble(p.table);
  const int table_i = r->Input(table);
  const bool compact = p.form == BiasForm::kCompact;
  const int gen = compact ? out : r->Scratch(static_cast<size_t>(plan.heads * gen_len * esize));
  POSENC_RETURN_IF_ERROR(r->Upload());
  cuda::T5GeneratorLaunch g;
  g.buckets = static_cast<const int32_t*>(r->Device(buckets_i));
  g.table = static_cast<const double*>(r->Device(table_i));
  g.out = r->Device(gen);
  g.dtype = static_cast<int>(bias.dtype);
  g.heads = plan.heads;
  g.gen_len = gen_len;
  POSENC_RETURN_IF_ERROR(
      r->Check(cuda::LaunchT5Generators(g, r->stream()), "RelativeBias generator kernel"));
  return ExpandBiasAndDownload(*r, compact, gen, out, plan.heads, p.q_len, p.k_len, esize);
}

absl::Status CudaBackend::RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                            const TensorView& embeddings) const {
  const RelativeEmbeddingParams& p = plan.params;
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Begin());
  const std::vector<double> table = TableAsDouble(p.table);
  const int table_i = r->Input(table);
  const int out = r->Output(
      embeddings.data, static_cast<size_t>(embeddings.NumElements() * DTypeSize(embeddings.dtype)));
  POSENC_RETURN_IF_ERROR(r->Upload());
  cuda::RelativeEmbeddingLaunch l;
  l.table = static_cast<const double*>(r->Device(table_i));
  l.out = r->Device(out);
  l.dtype = static_cast<int>(embeddings.dtype);
  l.q_len = p.q_len;
  l.k_len = p.k_len;
  l.dim = plan.dim;
  l.query_offset = plan.query_offset;
  l.key_offset = p.key_offset;
  l.max_relative = p.max_relative;
  POSENC_RETURN_IF_ERROR(
      r->Check(cuda::LaunchRelativeEmbedding(l, r->stream()), "RelativeEmbedding kernel"));
  return r->Download();
}

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
    info.driver_version = VersionString(driver);
    info.runtime_version = VersionString(runtime);
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  auto unavailable = [&](cudaError_t e, absl::string_view what) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("cuda device ", options.device, " is not usable: ", what, ": ", ErrorText(e)));
  };
  if (options.streams < 1 || options.streams > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda streams: expected 1 .. 64, got ", options.streams));
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
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu, MakeCpuBackend(CpuBackendOptions{}));
  return std::make_unique<CudaBackend>(
      options, absl::StrFormat("%s (sm_%d%d)", prop.name, prop.major, prop.minor),
      std::move(streams), std::move(cpu));
}

}  // namespace posenc::kernels
