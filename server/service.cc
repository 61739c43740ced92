#include "server/service.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "kernels/common/cancellation.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "server/call_cancellation.h"
#include "server/error_details.h"
#include "server/logging.h"
#include "server/status.h"
#include "server/summary.h"
#include "server/tsan.h"

namespace posenc::server {
namespace {

// A call's reactor: finishes the call and, when gRPC is done with it (the response sent or the
// call abandoned), releases what the call's admission holds and leaves the in-flight count.
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(AdmissionControl* control, int64_t request_bytes, std::atomic<int64_t>* in_flight)
      : admission_(control, request_bytes), in_flight_(in_flight) {
    in_flight_->fetch_add(1, std::memory_order_acq_rel);
  }
  CallAdmission& admission() { return admission_; }
  // gRPC runs OnDone on another thread than FinishCall's (server/tsan.h: no-ops outside TSan).
  void FinishCall(const grpc::Status& status) {
    TsanRelease(this);
    Finish(status);
  }
  // A call refused at once (draining) does not count as in flight.
  void LeaveInFlight() {
    if (in_flight_ != nullptr) in_flight_->fetch_sub(1, std::memory_order_acq_rel);
    in_flight_ = nullptr;
  }
  void OnDone() override {
    TsanAcquire(this);
    std::atomic<int64_t>* in_flight = in_flight_;
    delete this;  // the admission's bytes go back first
    if (in_flight != nullptr) in_flight->fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  CallAdmission admission_;
  std::atomic<int64_t>* in_flight_;
};

std::string RequestId(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("x-request-id");
  if (it == metadata.end()) return "-";
  return std::string(it->second.data(), it->second.size());
}

// Parses gRPC's request bytes (v1::ParseFromByteBuffer: large tensors sized once), then frees
// them (the parsed message holds the payload from here on). Bytes that do not parse get
// INVALID_ARGUMENT starting with the field that fails where one can be named
// ("config.hf_config_json: invalid UTF-8 ..."). Clear() leaves gRPC an empty buffer to destroy.
template <typename Request>
grpc::Status ParseRequest(const grpc::ByteBuffer* bytes, Request* request) {
  auto* buffer = const_cast<grpc::ByteBuffer*>(bytes);
  grpc::Status status;
  if (!v1::ParseFromByteBuffer(*buffer, request)) {
    const std::string what = absl::StrCat(buffer->Length(), " bytes that do not parse as ",
                                          Request::descriptor()->full_name());
    const std::string field = v1::DescribeParseFailure(*buffer, Request::descriptor());
    status = grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        field.empty() ? absl::StrCat("request: ", what, " (not protobuf, or another message)")
                      : absl::StrCat(field, "; the request: ", what));
  }
  buffer->Clear();
  return status;
}

// `response` serialized into gRPC's buffer: its tensors referenced, not copied
// (v1::SerializeToByteBuffer; the message lives until gRPC has sent them). Its size, 0 on error.
template <typename Response>
size_t SerializeResponse(std::shared_ptr<Response> response, grpc::ByteBuffer* bytes,
                         grpc::Status* status) {
  *status = v1::SerializeToByteBuffer(std::move(response), bytes);
  return status->ok() ? bytes->Length() : 0;
}

// Runs `handler` under the call's cancellation (deadline, client cancel, drain deadline) and
// admission, turning exceptions into statuses.
template <typename Request, typename Response, typename Handler>
grpc::Status RunHandler(const char* method, Handler handler, const HandlerContext& ctx,
                        const grpc::CallbackServerContext& context,
                        const std::atomic<int64_t>* abort_at_ns, CallAdmission* admission,
                        const Request& request, Response* response) {
  const CallCancellation cancellation(context, abort_at_ns);
  const kernels::ScopedCancellation scoped(&cancellation);
  const ScopedCallAdmission admitted(admission);
  grpc::Status status;
  try {
    status = handler(ctx, request, response);
    // Work that finished past the deadline (or after a cancel) is not sent either.
    if (status.ok()) status = ToGrpcStatus(cancellation.Check());
  } catch (const std::bad_alloc&) {
    status =
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StrCat(method, ": out of memory"));
  } catch (const std::exception& e) {
    status = grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat(method, ": internal error: ", e.what()));
  } catch (...) {
    status = grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(method, ": internal error"));
  }
  admission->EndCompute();
  return status;
}

}  // namespace

PositionEncodingService::PositionEncodingService(HandlerContext ctx)
    : ctx_([&ctx] {
        ctx.consume_requests = true;  // each request is parsed by Serve and read once
        return ctx;
      }()) {
  int index = 0;
#define POSENC_REGISTER_(Method) \
  Register<v1::Method##Request, v1::Method##Response>(index++, #Method, &Handle##Method);
  POSENC_FOR_EACH_RPC(POSENC_REGISTER_)
#undef POSENC_REGISTER_
}

template <typename Request, typename Response>
void PositionEncodingService::Register(int index, const char* method,
                                       Handler<Request, Response> handler) {
  // The generated Service numbers its methods in the .proto's order; POSENC_FOR_EACH_RPC must
  // list them in that order (checked here, once, at startup).
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::PositionEncoding::service_full_name());
  const google::protobuf::MethodDescriptor* descriptor =
      service != nullptr && index < service->method_count() ? service->method(index) : nullptr;
  if (descriptor == nullptr || descriptor->input_type() != Request::descriptor() ||
      descriptor->name() != method) {
    std::fprintf(stderr, "posenc: POSENC_FOR_EACH_RPC does not match posenc.proto at %s\n", method);
    std::abort();
  }
  MarkMethodRawCallback(
      index,
      new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this, method, handler](grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
            return Serve<Request, Response>(method, handler, context, request, response);
          }));
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* PositionEncodingService::Serve(const char* method,
                                                         Handler<Request, Response> handler,
                                                         grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request_bytes,
                                                         grpc::ByteBuffer* response_bytes) {
  const auto start = std::chrono::steady_clock::now();
  if (metrics_ != nullptr) metrics_->OnStart();
  const size_t request_size = request_bytes->Length();
  auto* reactor =
      new CallReactor(admission_, static_cast<int64_t>(request_size), &calls_in_flight_);
  Request request;
  auto response = std::make_shared<Response>();
  std::string input;
  grpc::Status status;
  bool unparseable = false;
  if (draining_.load(std::memory_order_acquire)) {
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the server is draining (shutting down); retry on another replica");
    reactor->LeaveInFlight();
  } else if (status = ParseRequest(request_bytes, &request); !status.ok()) {
    unparseable = true;
    if (metrics_ != nullptr) metrics_->OnUnparseable(method);
  } else if (context->deadline() < std::chrono::system_clock::now()) {
    status =
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call ran");
  } else {
    // Before the handler: it may move tensor bytes out of the request (consume_requests).
    if (AccessLogEnabled(grpc::StatusCode::INTERNAL)) input = SummarizeRequest(request);
    status = RunHandler(method, handler, ctx_, *context, &abort_at_ns_, &reactor->admission(),
                        request, response.get());
  }
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    // gRPC retry policies (A6) honour this: a busy server (admission refused the call) asks for a
    // retry after the heavy-call wait; a request over a hard limit must not be retried at all.
    context->AddTrailingMetadata(
        "grpc-retry-pushback-ms",
        reactor->admission().refused() ? absl::StrCat(kHeavyCallWait.count()) : "-1");
  }
  if (!status.ok()) {
    status = WithErrorDetails(status, ErrorCause{.overloaded = reactor->admission().refused(),
                                                 .unparseable = unparseable,
                                                 .retry_after = kHeavyCallWait});
  }
  size_t response_size = 0;
  std::string output;
  if (status.ok()) {
    if (AccessLogEnabled(grpc::StatusCode::OK)) output = SummarizeResponse(*response);
    response_size = SerializeResponse(std::move(response), response_bytes, &status);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics_ != nullptr) {
    metrics_->OnFinish(method, status.error_code(), seconds, request_size, response_size);
  }
  if (AccessLogEnabled(status.error_code())) {
    LogAccess(AccessRecord{method, RequestId(*context), status.error_code(), seconds * 1e3,
                           reactor->admission().backend().empty() ? ctx_.backend->name()
                                                                  : reactor->admission().backend(),
                           input, output, request_size, response_size, status.error_message()});
  }
  reactor->FinishCall(status);
  return reactor;
}

void PositionEncodingService::StartDraining(std::chrono::system_clock::time_point abort_at) {
  abort_at_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(abort_at.time_since_epoch()).count(),
      std::memory_order_relaxed);
  draining_.store(true, std::memory_order_release);
}

bool PositionEncodingService::WaitUntilIdle(std::chrono::system_clock::time_point deadline) const {
  // Polled: calls end on gRPC's threads, and a few milliseconds do not matter at shutdown.
  while (calls_in_flight() > 0) {
    if (std::chrono::system_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace posenc::server
