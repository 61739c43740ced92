#include "server/inference_models.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "server/inference_convert.h"
#include "server/status.h"

namespace posenc::server {
namespace {

// One ModelInfer call of the model whose posenc RPC `Handler` serves.
template <typename Request, typename Response,
          grpc::Status (*Handler)(const HandlerContext&, const Request&, Response*)>
grpc::Status Infer(const HandlerContext& ctx, const InferenceModel& model,
                   inference::ModelInferRequest& request, inference::ModelInferResponse* response) {
  Request posenc_request;
  if (absl::Status s = ToPosencRequest(model, &request, &posenc_request); !s.ok()) {
    return ToGrpcStatus(s);
  }
  Response posenc_response;
  if (grpc::Status s = Handler(ctx, posenc_request, &posenc_response); !s.ok()) return s;
  return ToGrpcStatus(FromPosencResponse(model, request, &posenc_response, response));
}

#define POSENC_INFER_(Method) &Infer<v1::Method##Request, v1::Method##Response, &Handle##Method>

// The positions inputs of the ops that take a Positions message (range, offsets and cu_seqlens
// are parameters: positions.range.start, positions.cu_seqlens.cu_seqlens, ...).
InferenceTensor PositionIds(std::vector<int64_t> shape) {
  return {"positions.ids", "INT64", std::move(shape)};
}
InferenceTensor PositionMask() { return {"positions.attention_mask", "INT64", {-1, -1}}; }

// The models in posenc.proto's RPC order, by family.
void AddAbsoluteModels(std::vector<InferenceModel>* models) {
  models->push_back({"sinusoidal",
                     "Sinusoidal",
                     "params",
                     {PositionIds({-1}), PositionMask()},
                     {{"table", "FP32", {-1, -1}}},
                     POSENC_INFER_(Sinusoidal)});
  models->push_back({"add_position_encoding",
                     "AddPositionEncoding",
                     "",
                     {{"x", "FP32", {-1, -1, -1}, true},
                      PositionIds({-1, -1}),
                      PositionMask(),
                      {"learned.table_inline", "FP32", {-1, -1}}},
                     {{"y", "FP32", {-1, -1, -1}}},
                     POSENC_INFER_(AddPositionEncoding)});
}

void AddRopeModels(std::vector<InferenceModel>* models) {
  const std::vector<int64_t> heads = {-1, -1, -1, -1};
  models->push_back({"rope_cache",
                     "RopeCache",
                     "config",
                     {PositionIds({-1}), PositionMask()},
                     // FUSED_COS_SIN / COMPLEX layouts: one table instead of cos and sin.
                     {{"cos", "FP32", {-1, -1}},
                      {"sin", "FP32", {-1, -1}},
                      {"cos_sin", "FP32", {-1, -1}},
                      {"freqs_cis", "FP32", {-1, -1, -1}}},
                     POSENC_INFER_(RopeCache)});
  models->push_back(
      {"apply_rope",
       "ApplyRope",
       "config",
       {{"q", "FP32", heads, true}, {"k", "FP32", heads}, PositionIds({-1, -1}), PositionMask()},
       {{"q", "FP32", heads}, {"k", "FP32", heads}},
       POSENC_INFER_(ApplyRope)});
}

void AddBiasModels(std::vector<InferenceModel>* models) {
  const InferenceTensor table = {"table_inline", "FP32", {-1, -1}};
  models->push_back({"alibi_slopes",
                     "AlibiSlopes",
                     "",
                     {},
                     {{"slopes", "FP32", {-1}}},
                     POSENC_INFER_(AlibiSlopes)});
  models->push_back({"alibi_bias",
                     "AlibiBias",
                     "",
                     {{"attention_mask", "INT64", {-1, -1}}},
                     {{"bias", "FP32", {-1, -1, -1}}, {"slopes", "FP64", {-1}}},
                     POSENC_INFER_(AlibiBias)});
  models->push_back({"relative_bias",
                     "RelativeBias",
                     "",
                     {table},
                     {{"bias", "FP32", {-1, -1, -1}}},
                     POSENC_INFER_(RelativeBias)});
  models->push_back({"relative_embedding",
                     "RelativeEmbedding",
                     "",
                     {table},
                     {{"embeddings", "FP32", {-1, -1, -1}}},
                     POSENC_INFER_(RelativeEmbedding)});
}

#undef POSENC_INFER_

void AddTensor(const InferenceTensor& tensor,
               inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(std::string(tensor.name));
  out->set_datatype(std::string(tensor.datatype));
  out->mutable_shape()->Assign(tensor.shape.begin(), tensor.shape.end());
}

}  // namespace

const std::vector<InferenceModel>& InferenceModels() {
  static const std::vector<InferenceModel>* const models = [] {
    auto* all = new std::vector<InferenceModel>;
    AddAbsoluteModels(all);
    AddRopeModels(all);
    AddBiasModels(all);
    return all;
  }();
  return *models;
}

const InferenceModel* FindInferenceModel(absl::string_view name) {
  for (const InferenceModel& model : InferenceModels()) {
    if (model.name == name) return &model;
  }
  return nullptr;
}

std::string InferenceModelNames() {
  std::vector<absl::string_view> names;
  for (const InferenceModel& model : InferenceModels()) names.push_back(model.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<const InferenceModel*> ResolveInferenceModel(absl::string_view name,
                                                            absl::string_view version,
                                                            absl::string_view name_field,
                                                            absl::string_view version_field) {
  const InferenceModel* model = FindInferenceModel(name);
  if (model == nullptr) {
    return absl::NotFoundError(absl::StrCat(name_field, ": no model named \"",
                                            kernels::Abbreviate(name),
                                            "\" (models: ", InferenceModelNames(), ")"));
  }
  if (!version.empty() && version != kInferenceModelVersion) {
    return absl::NotFoundError(absl::StrCat(version_field, ": model ", name, " has no version \"",
                                            kernels::Abbreviate(version),
                                            "\" (versions: ", kInferenceModelVersion, ")"));
  }
  return model;
}

void FillModelMetadata(const InferenceModel& model, inference::ModelMetadataResponse* response) {
  response->set_name(std::string(model.name));
  response->add_versions(std::string(kInferenceModelVersion));
  response->set_platform("posenc");
  for (const InferenceTensor& tensor : model.inputs) AddTensor(tensor, response->add_inputs());
  for (const InferenceTensor& tensor : model.outputs) AddTensor(tensor, response->add_outputs());
}

}  // namespace posenc::server
