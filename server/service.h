// PositionEncodingService: the gRPC callback service of posenc.v1.PositionEncoding.
//
// Each method runs its handler (handlers.h) on the calling gRPC thread under the call's
// admission (admission.h: bytes in flight, heavy-call slots), and finishes a reactor that holds
// the admission until gRPC is done with the call (OnDone). Exceptions never escape:
// std::bad_alloc becomes RESOURCE_EXHAUSTED, anything else INTERNAL (logged). One access log line
// per call (logging.h) and its metrics (metrics.h).
//
// Thread-safety: all methods may run concurrently; the service holds only the read-only
// HandlerContext.
#ifndef POSENC_SERVER_SERVICE_H_
#define POSENC_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <limits>

#include "posenc/v1/posenc.grpc.pb.h"
#include "server/admission.h"
#include "server/handlers.h"
#include "server/metrics.h"

namespace posenc::server {

class PositionEncodingService final : public v1::PositionEncoding::CallbackService {
 public:
  // `ctx`'s backend and tables must outlive the service.
  explicit PositionEncodingService(HandlerContext ctx) : ctx_(WithConsumedRequests(ctx)) {}

  grpc::ServerUnaryReactor* Sinusoidal(grpc::CallbackServerContext* context,
                                       const v1::SinusoidalRequest* request,
                                       v1::SinusoidalResponse* response) override;
  grpc::ServerUnaryReactor* AddPositionEncoding(grpc::CallbackServerContext* context,
                                                const v1::AddPositionEncodingRequest* request,
                                                v1::AddPositionEncodingResponse* response) override;
  grpc::ServerUnaryReactor* RopeCache(grpc::CallbackServerContext* context,
                                      const v1::RopeCacheRequest* request,
                                      v1::RopeCacheResponse* response) override;
  grpc::ServerUnaryReactor* ApplyRope(grpc::CallbackServerContext* context,
                                      const v1::ApplyRopeRequest* request,
                                      v1::ApplyRopeResponse* response) override;
  grpc::ServerUnaryReactor* AlibiSlopes(grpc::CallbackServerContext* context,
                                        const v1::AlibiSlopesRequest* request,
                                        v1::AlibiSlopesResponse* response) override;
  grpc::ServerUnaryReactor* AlibiBias(grpc::CallbackServerContext* context,
                                      const v1::AlibiBiasRequest* request,
                                      v1::AlibiBiasResponse* response) override;
  grpc::ServerUnaryReactor* RelativeBias(grpc::CallbackServerContext* context,
                                         const v1::RelativeBiasRequest* request,
                                         v1::RelativeBiasResponse* response) override;
  grpc::ServerUnaryReactor* RelativeEmbedding(grpc::CallbackServerContext* context,
                                              const v1::RelativeEmbeddingRequest* request,
                                              v1::RelativeEmbeddingResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::GetServerInfoResponse* response) override;

  // From now on every call is refused with UNAVAILABLE (the server is draining); calls already
  // running go on until `abort_at`, when their kernel work stops with CANCELLED.
  void StartDraining(std::chrono::system_clock::time_point abort_at) {
    abort_at_ns_.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(abort_at.time_since_epoch()).count(),
        std::memory_order_relaxed);
    draining_.store(true, std::memory_order_release);
  }

  // Every call reports to `metrics` (OnStart/OnFinish) from now on; null = none. Set before the
  // server starts; `metrics` must outlive the service.
  void set_metrics(Metrics* metrics) { metrics_ = metrics; }
  // Every call is admitted by `admission` from now on; null = admit all. Set before the server
  // starts; `admission` must outlive the service.
  void set_admission(AdmissionControl* admission) { admission_ = admission; }

 private:
  static HandlerContext WithConsumedRequests(HandlerContext ctx) {
    ctx.consume_requests = true;  // gRPC does not read a request again after its handler
    return ctx;
  }

  const HandlerContext ctx_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> abort_at_ns_{std::numeric_limits<int64_t>::max()};
  Metrics* metrics_ = nullptr;
  AdmissionControl* admission_ = nullptr;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_SERVICE_H_
