// libFuzzer target: an Open Inference Protocol ModelInfer request's bytes -> parse -> the model
// (server/inference_models.h) -> the translation into the posenc request
// (server/inference_convert.h: parameters and tensors by reflection, raw and typed contents,
// shared-memory parameters) -> the posenc handler on the CPU backend -> the response translated
// back, with no network.
//
// Input: a serialized inference.ModelInferRequest (proto/inference/grpc_service.proto); bytes
// that do not parse are skipped. No shared-memory registry (every reference is refused). On
// success every output without shared memory has a raw_output_contents entry of exactly
// prod(shape) * sizeof(datatype) bytes, the entries together at most max_message_bytes; every
// error has a message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "inference/grpc_service.pb.h"
#include "proto/posenc/v1/wire_dtype.h"
#include "server/handlers.h"
#include "server/inference_convert.h"
#include "server/inference_models.h"
#include "server/status.h"
#include "tests/fuzz/handler_fixture.h"

namespace posenc::server {
namespace {

struct Fixture : HandlerFixture {
  Fixture() { ctx.consume_requests = true; }  // as the gRPC service hands requests over
};

int64_t ExpectedBytes(const inference::ModelInferResponse::InferOutputTensor& output) {
  const std::optional<v1::DType> wire = DTypeOfDatatype(output.datatype());
  const std::optional<kernels::DType> dtype =
      wire.has_value() ? v1::FromWireDType(*wire) : std::nullopt;
  if (!dtype.has_value()) std::abort();  // an output without a datatype posenc has
  int64_t bytes = kernels::DTypeSize(*dtype);
  for (int64_t d : output.shape()) {
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes)) std::abort();
  }
  return bytes;
}

void CheckResponse(const HandlerContext& ctx, const inference::ModelInferResponse& response) {
  if (response.outputs_size() != response.raw_output_contents_size()) std::abort();
  int64_t total = 0;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const int64_t bytes = static_cast<int64_t>(response.raw_output_contents(i).size());
    if (bytes != ExpectedBytes(response.outputs(i))) std::abort();  // bytes unlike the shape
    total += bytes;
  }
  if (total > ctx.limits.max_message_bytes) std::abort();
}

grpc::Status Infer(const HandlerContext& ctx, inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response) {
  absl::StatusOr<const InferenceModel*> model = ResolveInferenceModel(
      request.model_name(), request.model_version(), "model_name", "model_version");
  if (!model.ok()) return ToGrpcStatus(model.status());
  return (*model)->infer(ctx, **model, request, response);
}

}  // namespace
}  // namespace posenc::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace posenc::server;
  static Fixture* fixture = new Fixture();
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  inference::ModelInferResponse response;
  if (CheckHandlerStatus(request.model_name(), Infer(fixture->ctx, request, &response))) {
    CheckResponse(fixture->ctx, response);
  }
  return 0;
}
