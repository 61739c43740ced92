// PositionEncodingService: the gRPC callback service of posenc.v1.PositionEncoding.
//
// Each method runs its handler (handlers.h) on the calling gRPC thread and finishes the
// default reactor. Exceptions never escape: std::bad_alloc becomes RESOURCE_EXHAUSTED, anything
// else INTERNAL (logged). One access log line per call (method, status, latency, x-request-id).
//
// Thread-safety: all methods may run concurrently; the service holds only the read-only
// HandlerContext.
#ifndef POSENC_SERVER_SERVICE_H_
#define POSENC_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "posenc/v1/posenc.grpc.pb.h"
#include "server/handlers.h"

namespace posenc::server {

class PositionEncodingService final : public v1::PositionEncoding::CallbackService {
 public:
  // `ctx`'s backend and tables must outlive the service.
  explicit PositionEncodingService(HandlerContext ctx) : ctx_(ctx) {}

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

 private:
  const HandlerContext ctx_;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_SERVICE_H_
