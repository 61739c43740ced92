// One pure function per RPC of posenc.v1.PositionEncoding.
//
// Each handler converts the request's wire fields into the op's arguments (convert.h), plans the
// op (kernels/ops.h: all validation), checks the planned outputs against the server's limits
// before allocating anything sized by the request, allocates the response tensors and runs the
// op. No math and no validation of the op's parameters here: both live in kernels/.
//
// Handlers never throw on malformed input (they return INVALID_ARGUMENT, OUT_OF_RANGE or
// RESOURCE_EXHAUSTED); an allocation failure may still throw std::bad_alloc, which the service
// turns into RESOURCE_EXHAUSTED.
//
// Thread-safety: handlers are reentrant; the context's members must be safe for concurrent
// reads (Backend and a filled TableRegistry are).
#ifndef POSENC_SERVER_HANDLERS_H_
#define POSENC_SERVER_HANDLERS_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/common/types.h"
#include "kernels/rope/frequency_cache.h"
#include "posenc/v1/posenc.pb.h"
#include "server/metrics.h"
#include "server/shared_memory.h"
#include "server/tables.h"

namespace posenc::server {

struct Limits {
  int64_t max_output_elements = int64_t{1} << 26;  // per output tensor
  int64_t max_message_bytes = int64_t{256} << 20;  // all output tensors of one response
  // The admission bounds (admission.h), reported by GetServerInfo; 0: unbounded.
  int64_t max_inflight_bytes = 0;
  int64_t max_heavy_calls = 0;
};

struct HandlerContext {
  const kernels::Backend* backend = nullptr;  // not owned; required
  Limits limits;
  const TableRegistry* tables = nullptr;  // not owned; null means no tables
  // The caller hands over each request: handlers may move tensor bytes out of it (ApplyRope
  // rotates q and k in the request's own buffers, then moves them into the response) instead of
  // copying. The gRPC service sets this (the callback API's request object is not read again
  // after the handler); callers that reuse a request must leave it false.
  bool consume_requests = false;
  // RoPE frequencies by config (not owned; null computes every time), and where its hits and
  // misses are counted (null: not counted).
  kernels::RopeFrequencyCache* rope_cache = nullptr;
  Metrics* metrics = nullptr;
  // The CUDA devices seen at start-up (GetServerInfo) and the one `backend` runs on (-1: none).
  std::vector<kernels::CudaDeviceInfo> devices;
  int cuda_device = -1;
  // Called, from the thread of any call and possibly many times, when `backend` reports that it
  // cannot compute any more (Backend::Usable: a sticky CUDA error; Backend::For then sends every
  // call to its host backend). The server logs it once and reports NOT_SERVING. May be empty.
  std::function<void(const absl::Status&)> on_backend_unusable;
  // The registered shared-memory regions (not owned; null: none, every reference and
  // registration is FAILED_PRECONDITION). The registration RPCs change it; calls read it.
  SharedMemoryRegistry* shared_memory = nullptr;
};

// A planned output tensor, for CheckOutputLimits: usually one of a kernel plan's outputs.
struct PlannedOutput {
  PlannedOutput(absl::string_view name, kernels::DType dtype, const kernels::Shape* shape)
      : name(name), dtype(dtype), shape(shape) {}
  // NOLINTNEXTLINE(google-explicit-constructor): a plan's outputs are passed as they are
  PlannedOutput(const kernels::OutputSpec& spec)
      : name(spec.name), dtype(spec.dtype), shape(&spec.shape) {}
  absl::string_view name;  // the response field, e.g. "bias"
  kernels::DType dtype;
  const kernels::Shape* shape;
};

// The calling thread's cancellation (kernels/common/cancellation.h) first: its error when the
// call's deadline passed or it was cancelled. Then RESOURCE_EXHAUSTED when an output has more than
// max_output_elements elements, or the outputs
// together more than max_message_bytes bytes; the message names the output and the limit:
// "bias [64, 1048576, 1048576] has 7.0e+13 elements, over --max_output_elements=67108864".
// Last, the call's admission (server/admission.h) when the service installed one: bytes in
// flight and heavy-call slots, RESOURCE_EXHAUSTED (retryable) when they are taken.
absl::Status CheckOutputLimits(const Limits& limits, std::initializer_list<PlannedOutput> outputs);

// CheckOutputLimits with ctx.limits, then the backend that runs the call: ctx.backend->For(the
// outputs' bytes) (kernels/backend.h: a device backend's host backend for small calls and once
// it is unusable; then ctx.on_backend_unusable is told). The choice is noted on the call's
// admission (the access log's backend) and counted (posenc_backend_calls_total).
// `scratch_bytes`: host memory the run holds beside its outputs (a plan's ScratchBytes), admitted
// with them but no part of the response.
absl::StatusOr<const kernels::Backend*> AdmitOutputs(const HandlerContext& ctx,
                                                     std::initializer_list<PlannedOutput> outputs,
                                                     int64_t scratch_bytes = 0);

// The RPCs of posenc.v1.PositionEncoding, in the service's order (posenc.proto): X(Method).
// (clang-format 14 reflows this macro differently on every run: kept by hand.)
// clang-format off
#define POSENC_FOR_EACH_RPC(X) \
  X(Sinusoidal)                \
  X(AddPositionEncoding)       \
  X(RopeCache)                 \
  X(ApplyRope)                 \
  X(AlibiSlopes)               \
  X(AlibiBias)                 \
  X(RelativeBias)              \
  X(RelativeEmbedding)         \
  X(GetServerInfo)             \
  X(DescribeRope)              \
  X(RegisterSharedMemory)      \
  X(UnregisterSharedMemory)    \
  X(SharedMemoryStatus)        \
  X(RerotateKeys)              \
  X(MultimodalPositions)       \
  X(VisionPositions)            \
  X(AnalyzeEncoding)           \
  X(RegisterCudaSharedMemory)
// clang-format on

// One handler per RPC:
//   grpc::Status HandleApplyRope(const HandlerContext& ctx, const v1::ApplyRopeRequest& req,
//                                v1::ApplyRopeResponse* resp);
// and so on for every method of POSENC_FOR_EACH_RPC.
#define POSENC_DECLARE_HANDLER_(Method)                                                  \
  grpc::Status Handle##Method(const HandlerContext& ctx, const v1::Method##Request& req, \
                              v1::Method##Response* resp);
POSENC_FOR_EACH_RPC(POSENC_DECLARE_HANDLER_)
#undef POSENC_DECLARE_HANDLER_

}  // namespace posenc::server

#endif  // POSENC_SERVER_HANDLERS_H_
