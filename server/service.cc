#include "server/service.h"

#include <type_traits>

namespace posenc::server {

PositionEncodingService::PositionEncodingService(CallRunner* runner) : runner_(runner) {
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
  CheckMethodIndex(v1::PositionEncoding::service_full_name(), index, method, Request::descriptor());
  const HandlerContext* ctx = &runner_->context();
  // ApplyRope reads q and k once, rotating them into its response: their data stays in gRPC's
  // slices until then (handlers.cc, ApplyRope).
  const CallRunner::Method how{.name = method,
                               .leave_tensor_data = std::is_same_v<Request, v1::ApplyRopeRequest>};
  MarkMethodRawCallback(index, runner_->RawHandler<Request, Response>(
                                   how, [ctx, handler](const Request& request, Response* response) {
                                     return handler(*ctx, request, response);
                                   }));
}

}  // namespace posenc::server
