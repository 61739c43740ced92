// PositionEncodingService: the gRPC service posenc.v1.PositionEncoding.
//
// Each method of posenc.proto runs its handler (handlers.h) on the server's CallRunner
// (call_runner.h: raw-bytes parsing, drain, cancellation, admission, errors' details, access
// log, metrics).
//
// Thread-safety: all methods may run concurrently; the service holds only the runner.
#ifndef POSENC_SERVER_SERVICE_H_
#define POSENC_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "posenc/v1/posenc.grpc.pb.h"
#include "server/call_runner.h"
#include "server/handlers.h"

namespace posenc::server {

class PositionEncodingService final : public v1::PositionEncoding::Service {
 public:
  // `runner` must outlive the service.
  explicit PositionEncodingService(CallRunner* runner);

 private:
  template <typename Request, typename Response>
  using Handler = grpc::Status (*)(const HandlerContext&, const Request&, Response*);

  // Registers method number `index` of the service (the .proto's order) on raw bytes.
  template <typename Request, typename Response>
  void Register(int index, const char* method, Handler<Request, Response> handler);

  CallRunner* const runner_;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_SERVICE_H_
