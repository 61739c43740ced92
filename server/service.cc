#include "server/service.h"

#include <chrono>
#include <exception>
#include <new>
#include <string>

#include "spdlog/spdlog.h"

namespace posenc::server {
namespace {

std::string RequestId(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("x-request-id");
  if (it == metadata.end()) return "-";
  return std::string(it->second.data(), it->second.size());
}

// Runs `handler`, turning exceptions into statuses, logs one access line and finishes the call.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* Run(const char* method, grpc::CallbackServerContext* context,
                              const Request* request, Response* response, Handler handler) {
  const auto start = std::chrono::steady_clock::now();
  grpc::Status status;
  if (context->deadline() < std::chrono::system_clock::now()) {
    status =
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call ran");
  } else {
    try {
      status = handler(*request, response);
    } catch (const std::bad_alloc&) {
      status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            std::string(method) + ": out of memory");
    } catch (const std::exception& e) {
      status = grpc::Status(grpc::StatusCode::INTERNAL,
                            std::string(method) + ": internal error: " + e.what());
    } catch (...) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + ": internal error");
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (status.error_code() == grpc::StatusCode::INTERNAL) {
    spdlog::error("rpc={} request_id={} status={} latency_ms={:.3f} error=\"{}\"", method,
                  RequestId(*context), static_cast<int>(status.error_code()), ms,
                  status.error_message());
  } else {
    spdlog::info(
        "rpc={} request_id={} status={} latency_ms={:.3f} request_bytes={} "
        "response_bytes={}",
        method, RequestId(*context), static_cast<int>(status.error_code()), ms,
        request->ByteSizeLong(), status.ok() ? response->ByteSizeLong() : 0);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

#define POSENC_SERVICE_METHOD_(Method)                                                            \
  grpc::ServerUnaryReactor* PositionEncodingService::Method(grpc::CallbackServerContext* context, \
                                                            const v1::Method##Request* request,   \
                                                            v1::Method##Response* response) {     \
    return Run(#Method, context, request, response,                                               \
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
