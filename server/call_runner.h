// CallRunner: what every method of posenc-server's gRPC services runs on, shared by
// posenc.v1.PositionEncoding (service.h) and the Open Inference Protocol (inference_service.h).
//
// Every method is registered on raw bytes (a callback handler of grpc::ByteBuffer), so the
// runner itself parses each request (proto/posenc/v1/byte_buffer.h: large tensor fields sized
// once): bytes that are not a valid request message get INVALID_ARGUMENT naming the field where
// the parse can name one (invalid UTF-8 in a string, a truncated field), else the message type,
// an access log line and the posenc_unparseable_requests_total metric (gRPC's own parser would
// answer with a bare status and no trace). A parsed request runs its handler on the calling gRPC
// thread under the call's cancellation (deadline, client cancel, drain deadline) and admission
// (admission.h: bytes in flight, heavy-call slots); the response is serialized into gRPC's
// buffer with its tensors referenced, not copied (the payload then lives in the buffer only), and
// the call's reactor holds the admission until gRPC is done with the call (OnDone).
// Exceptions never escape: std::bad_alloc becomes RESOURCE_EXHAUSTED, anything else INTERNAL.
// Every failed call gets its structured details (error_details.h); one access log line per call
// (logging.h) and its metrics (metrics.h).
//
// Draining (StartDraining) is the runner's, so one drain covers both services: new calls get
// UNAVAILABLE, except the methods marked serve_while_draining (the inference protocol's liveness,
// readiness and metadata probes, which then answer "not ready").
//
// Thread-safety: all methods may run concurrently; the runner holds only the read-only
// HandlerContext and atomics. set_metrics/set_admission before the server starts.
#ifndef POSENC_SERVER_CALL_RUNNER_H_
#define POSENC_SERVER_CALL_RUNNER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/functional/function_ref.h"
#include "google/protobuf/message.h"
#include "server/admission.h"
#include "server/call_tensors.h"
#include "server/handlers.h"
#include "server/metrics.h"
#include "server/summary.h"

namespace posenc::server {

class CallRunner {
 public:
  // How one method is served.
  struct Method {
    const char* name = "";  // "ApplyRope": the metrics' method label and the access log's rpc
    // Answered while the server drains (probes), instead of UNAVAILABLE.
    bool serve_while_draining = false;
    // The access log's input and output (summary.h's by default).
    std::string (*summarize_request)(const google::protobuf::Message&) = &SummarizeRequest;
    std::string (*summarize_response)(const google::protobuf::Message&) = &SummarizeResponse;
    // The request is summarized before its handler runs, for a handler that moves out of the
    // request what the summary reads (ModelInfer's raw_input_contents). Otherwise after the call
    // is finished, off its latency (posenc.v1's handlers move only Tensor.data, which summaries
    // do not read).
    bool summarize_request_first = false;
    // The data of the request's large top-level tensors is left in gRPC's received slices for
    // the handler (v1::ParseLeavingTensorData, WireTensors in call_tensors.h) instead of parsed
    // into the message, when the call came off a socket: ApplyRope, which rotates q and k in place
    // there and sends them back from there (no copy of their bytes in the server).
    bool leave_tensor_data = false;
  };

  // `ctx`'s backend and tables must outlive the runner. Every request is handed over to its
  // handler (ctx.consume_requests is set): the runner does not read it after the handler.
  explicit CallRunner(HandlerContext ctx);

  const HandlerContext& context() const { return ctx_; }

  // From now on every call is refused with UNAVAILABLE (the server is draining), but the methods
  // marked serve_while_draining; calls already running go on until `abort_at`, when their kernel
  // work stops with CANCELLED.
  void StartDraining(std::chrono::system_clock::time_point abort_at);
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  // Blocks until no call is in flight (every call's reactor done) or `deadline` passes; true when
  // idle. With StartDraining first, the server can close its listener only when nothing runs,
  // so that no call ever meets a half-shut server (gRPC cancels those: CANCELLED, not the
  // retryable UNAVAILABLE).
  bool WaitUntilIdle(std::chrono::system_clock::time_point deadline) const;
  int64_t calls_in_flight() const { return calls_in_flight_.load(std::memory_order_acquire); }
  // Calls served so far (started, whatever their end).
  int64_t calls_started() const { return calls_started_.load(std::memory_order_relaxed); }

  // Every call reports to `metrics` (OnStart/OnFinish) from now on; null = none. `metrics` must
  // outlive the runner.
  void set_metrics(Metrics* metrics) { metrics_ = metrics; }
  // Every call is admitted by `admission` from now on; null = admit all. `admission` must outlive
  // the runner.
  void set_admission(AdmissionControl* admission) { admission_ = admission; }

  // A raw-bytes callback handler of `method` for grpc::Service::MarkMethodRawCallback: each call
  // parses a Request, runs `handle(request, &response)` (grpc::Status; request as a non-const
  // lvalue: the handler owns it) and sends the Response. The runner must outlive the server.
  template <typename Request, typename Response, typename Handle>
  grpc::internal::MethodHandler* RawHandler(Method method, Handle handle) {
    return new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
        [this, method, handle](grpc::CallbackServerContext* context,
                               const grpc::ByteBuffer* request_bytes,
                               grpc::ByteBuffer* response_bytes) {
          Request request;
          Response response;
          return Serve(method, Call{context, request_bytes, response_bytes, &request, &response},
                       [&handle, &request, &response] { return handle(request, &response); });
        });
  }

 private:
  struct Call {
    grpc::CallbackServerContext* context;
    const grpc::ByteBuffer* request_bytes;
    grpc::ByteBuffer* response_bytes;
    google::protobuf::Message* request;
    google::protobuf::Message* response;
  };
  class Reactor;

  // One call of `method`: parse, admit, handle, serialize, log, count.
  grpc::ServerUnaryReactor* Serve(const Method& method, const Call& call,
                                  absl::FunctionRef<grpc::Status()> handle);
  // The call's status before its response is serialized: refused, unparseable, late or handled.
  // `input` gets the request's summary when the method summarizes first; `summarize_later` is set
  // when the request parsed and is to be summarized once the call is finished.
  // `wire` receives the tensor data left in the received slices (Method::leave_tensor_data).
  grpc::Status Handle(const Method& method, const Call& call, Reactor* reactor, std::string* input,
                      bool* summarize_later, WireTensors* wire,
                      absl::FunctionRef<grpc::Status()> handle);
  // The handler under the call's cancellation and admission, exceptions turned into statuses.
  grpc::Status RunHandler(const Method& method, const Call& call, CallAdmission* admission,
                          absl::FunctionRef<grpc::Status()> handle) const;

  const HandlerContext ctx_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> abort_at_ns_{std::numeric_limits<int64_t>::max()};
  std::atomic<int64_t> calls_in_flight_{0};
  std::atomic<int64_t> calls_started_{0};
  Metrics* metrics_ = nullptr;
  AdmissionControl* admission_ = nullptr;
};

// Aborts the process (at start-up) unless method number `index` of the generated service
// `service_full_name` is `method` taking `request`: the raw registration numbers methods in the
// .proto's order, which a service's registration list must follow.
void CheckMethodIndex(const char* service_full_name, int index, const char* method,
                      const google::protobuf::Descriptor* request);

}  // namespace posenc::server

#endif  // POSENC_SERVER_CALL_RUNNER_H_
