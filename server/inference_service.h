// InferenceService: the Open Inference Protocol (KServe v2) front end of posenc-server, the
// gRPC service inference.GRPCInferenceService (proto/inference/grpc_service.proto) beside
// posenc.v1.PositionEncoding on the same server, port and CallRunner (call_runner.h: drain,
// cancellation, admission, errors' details, access log, metrics).
//
//   ServerLive                   live: true (also while draining)
//   ServerReady, ModelReady      ready unless draining or the backend is unusable (the states
//                                in which health reports NOT_SERVING); answered while draining
//   ServerMetadata               name "posenc", the version, extension "system_shared_memory"
//                                when --allow_shared_memory
//   ModelMetadata                a model's tensors (inference_models.h)
//   ModelInfer                   the model's posenc handler on the translated request
//                                (inference_convert.h)
//   SystemSharedMemory{Status,Register,Unregister}
//                                posenc's shared-memory handlers: the same registry as
//                                posenc.v1's RegisterSharedMemory (server/shared_memory.h)
// An unknown model or version is NOT_FOUND with reason MODEL_NOT_FOUND; every other error is
// the posenc handler's, or the translation's INVALID_ARGUMENT naming the input or parameter.
//
// Thread-safety: all methods may run concurrently; the service holds only the runner.
#ifndef POSENC_SERVER_INFERENCE_SERVICE_H_
#define POSENC_SERVER_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "inference/grpc_service.grpc.pb.h"
#include "server/call_runner.h"

namespace posenc::server {

class InferenceService final : public inference::GRPCInferenceService::Service {
 public:
  // `runner` must outlive the service.
  explicit InferenceService(CallRunner* runner);

 private:
  // Registers method number `index` (grpc_service.proto's order) on the runner.
  template <typename Request, typename Response, typename Handle>
  void Register(int index, const CallRunner::Method& method, Handle handle);
  void RegisterProbes();
  void RegisterInference();
  void RegisterSharedMemory();

  // Whether the server takes calls: not draining, and its backend usable.
  bool Ready() const;

  CallRunner* const runner_;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_INFERENCE_SERVICE_H_
