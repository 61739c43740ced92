#include "server/call_runner.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "kernels/common/cancellation.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "server/call_cancellation.h"
#include "server/error_details.h"
#include "server/logging.h"
#include "server/status.h"
#include "server/tsan.h"

namespace posenc::server {

// A call's reactor: finishes the call and, when gRPC is done with it (the response sent or the
// call abandoned), releases what the call's admission holds and leaves the in-flight count.
class CallRunner::Reactor final : public grpc::ServerUnaryReactor {
 public:
  Reactor(AdmissionControl* control, int64_t request_bytes, std::atomic<int64_t>* in_flight)
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

namespace {

std::string RequestId(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("x-request-id");
  if (it == metadata.end()) return "-";
  return std::string(it->second.data(), it->second.size());
}

// INVALID_ARGUMENT for request bytes that do not parse, naming the field where one can be named
// ("config.hf_config_json: invalid UTF-8 ...; the request: N bytes that do not parse as T"), and
// the message type otherwise.
grpc::Status Unparseable(const grpc::ByteBuffer& bytes, const google::protobuf::Message& request) {
  const std::string what = absl::StrCat(bytes.Length(), " bytes that do not parse as ",
                                        request.GetDescriptor()->full_name());
  const std::string field = v1::DescribeParseFailure(bytes, request.GetDescriptor());
  return WithErrorDetails(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                   field.empty()
                       ? absl::StrCat("request: ", what, " (not protobuf, or another message)")
                       : absl::StrCat(field, "; the request: ", what)),
      ErrorCause{.unparseable = true});
}

// Parses gRPC's request bytes (v1::ParseFromByteBuffer: large tensor fields sized once, no copy
// of the bytes first; with `wire`, v1::ParseLeavingTensorData: large tensors' data left in the
// slices, which `wire` then holds), then frees them (the parsed message and `wire` hold the
// payload from here on). The buffer is const to gRPC's handler but ours to read and clear;
// Clear() leaves gRPC an empty buffer to destroy.
grpc::Status ParseRequest(const grpc::ByteBuffer* bytes, google::protobuf::Message* request,
                          v1::WireTensors* wire) {
  auto* buffer = const_cast<grpc::ByteBuffer*>(bytes);
  grpc::Status status;
  const bool parsed = wire != nullptr ? v1::ParseLeavingTensorData(*buffer, request, wire)
                                      : v1::ParseFromByteBuffer(*buffer, request);
  if (!parsed) status = Unparseable(*buffer, *request);
  buffer->Clear();
  return status;
}

// Serializes `response` into gRPC's buffer with its tensors referenced, not copied
// (v1::SerializeToByteBuffer): the payload moves (a swap, no copy) into a message the buffer's
// slices keep alive until gRPC has sent them, and `response` is left empty. The tensors the
// handler sends back from the received slices (`wire`) are referenced there.
grpc::Status SerializeAndFree(google::protobuf::Message* response, const WireTensors& wire,
                              grpc::ByteBuffer* bytes) {
  std::shared_ptr<google::protobuf::Message> owned(response->New());
  response->GetReflection()->Swap(response, owned.get());
  if (!wire.sent_back().empty()) {
    return v1::SerializeWithWireData(std::move(owned), wire.sent_back(), bytes);
  }
  return v1::SerializeToByteBuffer(std::move(owned), bytes);
}

// Whether the call's bytes came off a socket (TCP, a Unix socket): then its received slices are
// memory the transport read them into, which the handler may write. An in-process channel hands
// over the sender's own slices (the C++ client's reference its caller's tensors).
bool ReceivedOffASocket(const grpc::CallbackServerContext& context) {
  const std::string peer = context.peer();
  for (const absl::string_view scheme : {"ipv4:", "ipv6:", "unix:", "unix-abstract:"}) {
    if (absl::StartsWith(peer, scheme)) return true;
  }
  return false;
}

}  // namespace

CallRunner::CallRunner(HandlerContext ctx)
    : ctx_([&ctx] {
        ctx.consume_requests = true;  // each request is parsed by Serve and read once
        return ctx;
      }()) {}

grpc::Status CallRunner::RunHandler(const Method& method, const Call& call,
                                    CallAdmission* admission,
                                    absl::FunctionRef<grpc::Status()> handle) const {
  const CallCancellation cancellation(*call.context, &abort_at_ns_);
  const kernels::ScopedCancellation scoped(&cancellation);
  const ScopedCallAdmission admitted(admission);
  grpc::Status status;
  try {
    status = handle();
    // Work that finished past the deadline (or after a cancel) is not sent either.
    if (status.ok()) status = ToGrpcStatus(cancellation.Check());
  } catch (const std::bad_alloc&) {
    status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat(method.name, ": out of memory"));
  } catch (const std::exception& e) {
    status = grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat(method.name, ": internal error: ", e.what()));
  } catch (...) {
    status =
        grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(method.name, ": internal error"));
  }
  admission->EndCompute();
  return status;
}

grpc::Status CallRunner::Handle(const Method& method, const Call& call, Reactor* reactor,
                                std::string* input, bool* summarize_later, WireTensors* wire,
                                absl::FunctionRef<grpc::Status()> handle) {
  if (draining() && !method.serve_while_draining) {
    reactor->LeaveInFlight();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the server is draining (shutting down); retry on another replica");
  }
  const bool leave = method.leave_tensor_data &&
                     call.request_bytes->Length() >= v1::kLargeFieldBytes &&
                     ReceivedOffASocket(*call.context);
  if (grpc::Status parsed =
          ParseRequest(call.request_bytes, call.request, leave ? wire->left() : nullptr);
      !parsed.ok()) {
    if (metrics_ != nullptr) metrics_->OnUnparseable(method.name);
    return parsed;
  }
  if (call.context->deadline() < std::chrono::system_clock::now()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call ran");
  }
  // The handler may move tensor bytes out of the request (consume_requests).
  if (AccessLogEnabled(grpc::StatusCode::INTERNAL)) {
    if (method.summarize_request_first) {
      *input = method.summarize_request(*call.request);
    } else {
      *summarize_later = true;
    }
  }
  const ScopedWireTensors scoped_wire(wire);
  return RunHandler(method, call, &reactor->admission(), handle);
}

grpc::ServerUnaryReactor* CallRunner::Serve(const Method& method, const Call& call,
                                            absl::FunctionRef<grpc::Status()> handle) {
  const auto start = std::chrono::steady_clock::now();
  if (metrics_ != nullptr) metrics_->OnStart();
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  const size_t request_size = call.request_bytes->Length();
  auto* reactor = new Reactor(admission_, static_cast<int64_t>(request_size), &calls_in_flight_);
  std::string input;
  bool summarize_later = false;
  WireTensors wire;  // tensor data left in the received slices, until the response holds it
  grpc::Status status = Handle(method, call, reactor, &input, &summarize_later, &wire, handle);
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    // gRPC retry policies (A6) honour this: a busy server (admission refused the call) asks for a
    // retry after the heavy-call wait; a request over a hard limit must not be retried at all.
    call.context->AddTrailingMetadata(
        "grpc-retry-pushback-ms",
        reactor->admission().refused() ? absl::StrCat(kHeavyCallWait.count()) : "-1");
  }
  if (!status.ok()) {
    status = WithErrorDetails(status, ErrorCause{.overloaded = reactor->admission().refused(),
                                                 .retry_after = kHeavyCallWait});
  }
  std::string output;
  if (status.ok() && AccessLogEnabled(grpc::StatusCode::OK)) {
    output = method.summarize_response(*call.response);
  }
  if (status.ok()) status = SerializeAndFree(call.response, wire, call.response_bytes);
  const size_t response_size = status.ok() ? call.response_bytes->Length() : 0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics_ != nullptr) {
    metrics_->OnFinish(method.name, status.error_code(), seconds, request_size, response_size);
  }
  // The access line is written (and the request summarized, Method::summarize_request_first
  // aside) after the call is finished, off its latency (a tiny call's summary and line cost tens
  // of microseconds, a fifth of its round trip): what it needs from the call's context and
  // reactor, which gRPC may free once finished, is copied first; the request is this call's.
  const bool log = AccessLogEnabled(status.error_code());
  std::string request_id;
  std::string backend;
  if (log) {
    request_id = RequestId(*call.context);
    backend = std::string(reactor->admission().backend().empty() ? ctx_.backend->name()
                                                                 : reactor->admission().backend());
  }
  reactor->FinishCall(status);
  if (log) {
    if (summarize_later) input = method.summarize_request(*call.request);
    LogAccess(AccessRecord{method.name, request_id, status.error_code(), seconds * 1e3, backend,
                           input, output, request_size, response_size, status.error_message()});
  }
  return reactor;
}

void CallRunner::StartDraining(std::chrono::system_clock::time_point abort_at) {
  abort_at_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(abort_at.time_since_epoch()).count(),
      std::memory_order_relaxed);
  draining_.store(true, std::memory_order_release);
}

bool CallRunner::WaitUntilIdle(std::chrono::system_clock::time_point deadline) const {
  // Polled: calls end on gRPC's threads, and a few milliseconds do not matter at shutdown.
  while (calls_in_flight() > 0) {
    if (std::chrono::system_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void CheckMethodIndex(const char* service_full_name, int index, const char* method,
                      const google::protobuf::Descriptor* request) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_full_name);
  const google::protobuf::MethodDescriptor* descriptor =
      service != nullptr && index < service->method_count() ? service->method(index) : nullptr;
  if (descriptor == nullptr || descriptor->input_type() != request ||
      descriptor->name() != method) {
    std::fprintf(stderr, "posenc: the method list of %s does not match its .proto at %s\n",
                 service_full_name, method);
    std::abort();
  }
}

}  // namespace posenc::server
