// The models of the Open Inference Protocol front end: each posenc op is a model of that name
// (apply_rope, rope_cache, ...), with one version, "1".
//
// A model's tensors and parameters are its posenc request's fields, named by their paths as the
// posenc errors name them: an input is a Tensor field of the request ("q", "positions.ids",
// "learned.table_inline"), an output a Tensor field of the response ("cos", "bias"), and a
// request parameter any scalar, enum or repeated-number field ("output_dtype",
// "config.scaling.factor", "positions.range.start"); a model's parameter prefix lets bare names
// stand for the fields of its configuration ("base" for "config.base" in the RoPE models,
// "dim" for "params.dim" in sinusoidal). inference_convert.h translates the calls by these names.
//
// Thread-safety: immutable tables.
#ifndef POSENC_SERVER_INFERENCE_MODELS_H_
#define POSENC_SERVER_INFERENCE_MODELS_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "server/handlers.h"

namespace posenc::server {

// One input or output tensor of a model, as ModelMetadata reports it.
struct InferenceTensor {
  absl::string_view name;      // the posenc field path ("q", "positions.ids")
  absl::string_view datatype;  // the usual datatype ("FP32"; float inputs take FP16/BF16/FP64 too)
  std::vector<int64_t> shape;  // -1: any size (ranks as usual: some ops take others)
  bool required = false;       // inputs only: a call without it is refused
};

struct InferenceModel;

// Runs one ModelInfer call of `model`: the request translated into the posenc request, the posenc
// handler, the response translated back. The request is handed over (its bytes move).
using InferFunction = grpc::Status (*)(const HandlerContext& ctx, const InferenceModel& model,
                                       inference::ModelInferRequest& request,
                                       inference::ModelInferResponse* response);

struct InferenceModel {
  absl::string_view name;  // "apply_rope"
  absl::string_view rpc;   // the posenc RPC it runs: "ApplyRope"
  // Bare parameter names also resolve under this field ("config"); empty: none.
  absl::string_view parameter_prefix;
  std::vector<InferenceTensor> inputs;
  std::vector<InferenceTensor> outputs;
  InferFunction infer = nullptr;
};

// posenc's only model version.
inline constexpr absl::string_view kInferenceModelVersion = "1";

// Every model, in posenc.proto's RPC order.
const std::vector<InferenceModel>& InferenceModels();
// The model named `name`; null when there is none.
const InferenceModel* FindInferenceModel(absl::string_view name);
// "sinusoidal, add_position_encoding, ...": for messages.
std::string InferenceModelNames();

// The model of `name` at `version` ("" or kInferenceModelVersion): NOT_FOUND naming the field
// (`name_field`: "model_name" or "name"; "model_version" / "version") otherwise.
absl::StatusOr<const InferenceModel*> ResolveInferenceModel(absl::string_view name,
                                                            absl::string_view version,
                                                            absl::string_view name_field,
                                                            absl::string_view version_field);

// ModelMetadata's answer for `model`.
void FillModelMetadata(const InferenceModel& model, inference::ModelMetadataResponse* response);

}  // namespace posenc::server

#endif  // POSENC_SERVER_INFERENCE_MODELS_H_
