#include "server/summary.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace posenc::server {
namespace {

// Appends " name=value" (no leading space when `out` is empty).
void Add(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, out->empty() ? "" : " ", name, "=", value);
}

void AddTensor(std::string* out, absl::string_view name, const v1::Tensor& tensor) {
  Add(out, name, TensorSummary(tensor));
}

void AddPositions(std::string* out, const v1::Positions& positions) {
  switch (positions.kind_case()) {
    case v1::Positions::kRange:
      Add(out, "positions",
          absl::StrCat("range[", positions.range().start(), ",+", positions.range().count(), ")"));
      break;
    case v1::Positions::kOffsets:
      Add(out, "positions", absl::StrCat("offsets[", positions.offsets().offsets_size(), "]"));
      break;
    case v1::Positions::kIds:
      Add(out, "positions", absl::StrCat("ids:", TensorSummary(positions.ids())));
      break;
    case v1::Positions::kCuSeqlens:
      Add(out, "positions",
          absl::StrCat("cu_seqlens[", positions.cu_seqlens().cu_seqlens_size(), "]"));
      break;
    case v1::Positions::kAttentionMask:
      Add(out, "positions", absl::StrCat("mask:", TensorSummary(positions.attention_mask())));
      break;
    case v1::Positions::KIND_NOT_SET:
      break;
  }
}

std::string DTypeName(v1::DType dtype) {
  const std::string& name = v1::DType_Name(dtype);
  if (name.empty()) return absl::StrCat("DTYPE_", static_cast<int>(dtype));
  return absl::StartsWith(name, "DTYPE_") ? name.substr(6) : name;
}

void AddOutputDType(std::string* out, v1::DType dtype) {
  if (dtype != v1::DTYPE_UNSPECIFIED) Add(out, "output_dtype", DTypeName(dtype));
}

template <typename Request>
void AddTable(std::string* out, const Request& request) {
  if (request.has_table_inline()) AddTensor(out, "table", request.table_inline());
  if (!request.table_name().empty())
    Add(out, "table", absl::StrCat("\"", request.table_name(), "\""));
}

}  // namespace

std::string TensorSummary(const v1::Tensor& tensor) {
  return absl::StrCat(DTypeName(tensor.dtype()), "[", absl::StrJoin(tensor.shape(), ","), "]");
}

std::string SummarizeRequest(const v1::SinusoidalRequest& request) {
  std::string out;
  AddPositions(&out, request.positions());
  Add(&out, "dim", absl::StrCat(request.params().dim()));
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::AddPositionEncodingRequest& request) {
  std::string out;
  AddTensor(&out, "x", request.x());
  AddPositions(&out, request.positions());
  if (request.has_learned()) {
    AddTable(&out, request.learned());
  } else if (request.has_sinusoidal()) {
    Add(&out, "sinusoidal_dim", absl::StrCat(request.sinusoidal().dim()));
  }
  return out;
}

std::string SummarizeRequest(const v1::RopeCacheRequest& request) {
  std::string out;
  AddPositions(&out, request.positions());
  Add(&out, "head_dim", absl::StrCat(request.config().head_dim()));
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::ApplyRopeRequest& request) {
  std::string out;
  AddTensor(&out, "q", request.q());
  if (request.has_k()) AddTensor(&out, "k", request.k());
  AddPositions(&out, request.positions());
  return out;
}

std::string SummarizeRequest(const v1::AlibiSlopesRequest& request) {
  std::string out;
  Add(&out, "heads", absl::StrCat(request.num_heads()));
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::AlibiBiasRequest& request) {
  std::string out;
  Add(&out, "heads", absl::StrCat(request.num_heads()));
  Add(&out, "q_len", absl::StrCat(request.q_len()));
  Add(&out, "k_len", absl::StrCat(request.k_len()));
  if (request.has_attention_mask()) AddTensor(&out, "mask", request.attention_mask());
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::RelativeBiasRequest& request) {
  std::string out;
  Add(&out, "q_len", absl::StrCat(request.q_len()));
  Add(&out, "k_len", absl::StrCat(request.k_len()));
  AddTable(&out, request);
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::RelativeEmbeddingRequest& request) {
  std::string out;
  Add(&out, "q_len", absl::StrCat(request.q_len()));
  Add(&out, "k_len", absl::StrCat(request.k_len()));
  AddTable(&out, request);
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::GetServerInfoRequest& /*request*/) { return ""; }

std::string SummarizeResponse(const v1::SinusoidalResponse& response) {
  std::string out;
  AddTensor(&out, "table", response.table());
  return out;
}

std::string SummarizeResponse(const v1::AddPositionEncodingResponse& response) {
  std::string out;
  AddTensor(&out, "y", response.y());
  return out;
}

std::string SummarizeResponse(const v1::RopeCacheResponse& response) {
  std::string out;
  AddTensor(&out, "cos", response.cos());
  AddTensor(&out, "sin", response.sin());
  return out;
}

std::string SummarizeResponse(const v1::ApplyRopeResponse& response) {
  std::string out;
  AddTensor(&out, "q", response.q());
  if (response.has_k()) AddTensor(&out, "k", response.k());
  return out;
}

std::string SummarizeResponse(const v1::AlibiSlopesResponse& response) {
  std::string out;
  AddTensor(&out, "slopes", response.slopes());
  return out;
}

std::string SummarizeResponse(const v1::AlibiBiasResponse& response) {
  std::string out;
  AddTensor(&out, "bias", response.bias());
  return out;
}

std::string SummarizeResponse(const v1::RelativeBiasResponse& response) {
  std::string out;
  AddTensor(&out, "bias", response.bias());
  return out;
}

std::string SummarizeResponse(const v1::RelativeEmbeddingResponse& response) {
  std::string out;
  AddTensor(&out, "embeddings", response.embeddings());
  return out;
}

std::string SummarizeResponse(const v1::GetServerInfoResponse& /*response*/) { return ""; }

}  // namespace posenc::server
