#include "server/service.h"

#include <chrono>
#include <exception>
#include <new>
#include <string>

#include "kernels/common/cancellation.h"
#include "server/call_cancellation.h"
#include "server/logging.h"
#include "server/status.h"
#include "server/summary.h"
#include "server/tsan.h"
#include "spdlog/spdlog.h"

namespace posenc::server {
namespace {

// A call's reactor: finishes the call and, when gRPC is done with it (the response sent or the
// call abandoned), releases what the call's admission holds.
class AdmittedReactor final : public grpc::ServerUnaryReactor {
 public:
  AdmittedReactor(AdmissionControl* control, int64_t request_bytes)
      : admission_(control, request_bytes) {}
  CallAdmission& admission() { return admission_; }
  // gRPC runs OnDone on another thread than FinishCall's (server/tsan.h: no-ops outside TSan).
  void FinishCall(const grpc::Status& status) {
    TsanRelease(this);
    Finish(status);
  }
  void OnDone() override {
    TsanAcquire(this);
    delete this;
  }

 private:
  CallAdmission admission_;
};

std::string RequestId(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("x-request-id");
  if (it == metadata.end()) return "-";
  return std::string(it->second.data(), it->second.size());
}

// Runs `handler`, turning exceptions into statuses, logs one access line and finishes the call.
// While draining every call is refused (UNAVAILABLE). The handler runs under the call's
// CallCancellation: the kernels stop once the deadline passes or the call is cancelled, and a
// stopped (or failed) call's partly written response is freed at once.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* Run(const char* method, grpc::CallbackServerContext* context,
                              const Request* request, Response* response, bool draining,
                              const std::atomic<int64_t>* abort_at_ns, Metrics* metrics,
                              AdmissionControl* admission, absl::string_view backend,
                              Handler handler) {
  const auto start = std::chrono::steady_clock::now();
  if (metrics != nullptr) metrics->OnStart();
  // Before the handler: it may move tensor bytes out of the request (consume_requests).
  const size_t request_bytes = request->ByteSizeLong();
  auto* reactor = new AdmittedReactor(admission, static_cast<int64_t>(request_bytes));
  const std::string input =
      AccessLogEnabled(grpc::StatusCode::INTERNAL) ? SummarizeRequest(*request) : std::string();
  grpc::Status status;
  if (draining) {
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the server is draining (shutting down); retry on another replica");
  } else if (context->deadline() < std::chrono::system_clock::now()) {
    status =
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call ran");
  } else {
    const CallCancellation cancellation(*context, abort_at_ns);
    const kernels::ScopedCancellation scoped(&cancellation);
    const ScopedCallAdmission admitted(&reactor->admission());
    try {
      status = handler(*request, response);
      // Work that finished past the deadline (or after a cancel) is not sent either.
      if (status.ok()) status = ToGrpcStatus(cancellation.Check());
    } catch (const std::bad_alloc&) {
      status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            std::string(method) + ": out of memory");
    } catch (const std::exception& e) {
      status = grpc::Status(grpc::StatusCode::INTERNAL,
                            std::string(method) + ": internal error: " + e.what());
    } catch (...) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + ": internal error");
    }
    reactor->admission().EndCompute();
    if (!status.ok() && response->GetArena() == nullptr) {
      Response empty;
      response->Swap(&empty);
    }
  }
  const size_t response_bytes = status.ok() ? response->ByteSizeLong() : 0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics != nullptr) {
    metrics->OnFinish(method, status.error_code(), seconds, request_bytes, response_bytes);
  }
  if (AccessLogEnabled(status.error_code())) {
    const std::string request_id = RequestId(*context);
    const std::string output = status.ok() ? SummarizeResponse(*response) : std::string();
    LogAccess(AccessRecord{method, request_id, status.error_code(), seconds * 1e3, backend, input,
                           output, request_bytes, response_bytes, status.error_message()});
  }
  reactor->FinishCall(status);
  return reactor;
}

}  // namespace

#define POSENC_SERVICE_METHOD_(Method)                                                            \
  grpc::ServerUnaryReactor* PositionEncodingService::Method(grpc::CallbackServerContext* context, \
                                                            const v1::Method##Request* request,   \
                                                            v1::Method##Response* response) {     \
    return Run(#Method, context, request, response, draining_.load(std::memory_order_acquire),    \
               &abort_at_ns_, metrics_, admission_, ctx_.backend->name(),                         \
               [this](const v1::Method##Request& req, v1::Method##Response* resp) {               \
                 return Handle##Method(ctx_, req, resp);                                          \
               });                                                                                \
  }

POSENC_SERVICE_METHOD_(Sinusoidal)
POSENC_SERVICE_METHOD_(AddPositionEncoding)
POSENC_SERVICE_METHOD_(RopeCache)
POSENC_SERVICE_METHOD_(ApplyRope)
POSENC_SERVICE_METHOD_(AlibiSlopes)
POSENC_SERVICE_METHOD_(AlibiBias)
POSENC_SERVICE_METHOD_(RelativeBias)
POSENC_SERVICE_METHOD_(RelativeEmbedding)
POSENC_SERVICE_METHOD_(GetServerInfo)

#undef POSENC_SERVICE_METHOD_

}  // namespace posenc::server
