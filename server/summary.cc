#include "server/summary.h"

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "kernels/common/types.h"

namespace posenc::server {
namespace {

// Appends " name=value" (no leading space when `out` is empty).
void Add(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, out->empty() ? "" : " ", name, "=", value);
}

void Add(std::string* out, absl::string_view name, int64_t value) {
  Add(out, name, absl::StrCat(value));
}

void AddTensor(std::string* out, absl::string_view name, const v1::Tensor& tensor) {
  Add(out, name, TensorSummary(tensor));
}

// "name=DTYPE[shape]": the summary of a response of one tensor.
std::string OneTensor(absl::string_view name, const v1::Tensor& tensor) {
  std::string out;
  AddTensor(&out, name, tensor);
  return out;
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
    case v1::Positions::KIND_NOT_SET: break;
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
    Add(out, "table", absl::StrCat("\"", kernels::Abbreviate(request.table_name()), "\""));
}

// Sinusoidal and RopeCache requests (a table at positions): the positions, the row size and the
// output dtype.
template <typename Request>
std::string SummarizeTableAt(const Request& request, absl::string_view size_name, int64_t size) {
  std::string out;
  AddPositions(&out, request.positions());
  Add(&out, size_name, size);
  AddOutputDType(&out, request.output_dtype());
  return out;
}

// RelativeBias and RelativeEmbedding requests: the lengths, the table and the output dtype.
template <typename Request>
std::string SummarizeRelative(const Request& request) {
  std::string out;
  Add(&out, "q_len", request.q_len());
  Add(&out, "k_len", request.k_len());
  AddTable(&out, request);
  AddOutputDType(&out, request.output_dtype());
  return out;
}

}  // namespace

std::string TensorSummary(const v1::Tensor& tensor) {
  return absl::StrCat(DTypeName(tensor.dtype()), "[", absl::StrJoin(tensor.shape(), ","), "]");
}

std::string SummarizeRequest(const v1::SinusoidalRequest& request) {
  return SummarizeTableAt(request, "dim", request.params().dim());
}

std::string SummarizeRequest(const v1::AddPositionEncodingRequest& request) {
  std::string out;
  AddTensor(&out, "x", request.x());
  AddPositions(&out, request.positions());
  if (request.has_learned()) {
    AddTable(&out, request.learned());
  } else if (request.has_sinusoidal()) {
    Add(&out, "sinusoidal_dim", request.sinusoidal().dim());
  }
  return out;
}

std::string SummarizeRequest(const v1::RopeCacheRequest& request) {
  return SummarizeTableAt(request, "head_dim", request.config().head_dim());
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
  Add(&out, "heads", request.num_heads());
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::AlibiBiasRequest& request) {
  std::string out;
  Add(&out, "heads", request.num_heads());
  Add(&out, "q_len", request.q_len());
  Add(&out, "k_len", request.k_len());
  if (request.has_attention_mask()) AddTensor(&out, "mask", request.attention_mask());
  AddOutputDType(&out, request.output_dtype());
  return out;
}

std::string SummarizeRequest(const v1::RelativeBiasRequest& request) {
  return SummarizeRelative(request);
}

std::string SummarizeRequest(const v1::RelativeEmbeddingRequest& request) {
  return SummarizeRelative(request);
}

std::string SummarizeRequest(const v1::GetServerInfoRequest& /*request*/) { return ""; }

std::string SummarizeResponse(const v1::SinusoidalResponse& response) {
  return OneTensor("table", response.table());
}

std::string SummarizeResponse(const v1::AddPositionEncodingResponse& response) {
  return OneTensor("y", response.y());
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
  return OneTensor("slopes", response.slopes());
}

std::string SummarizeResponse(const v1::AlibiBiasResponse& response) {
  return OneTensor("bias", response.bias());
}

std::string SummarizeResponse(const v1::RelativeBiasResponse& response) {
  return OneTensor("bias", response.bias());
}

std::string SummarizeResponse(const v1::RelativeEmbeddingResponse& response) {
  return OneTensor("embeddings", response.embeddings());
}

std::string SummarizeResponse(const v1::GetServerInfoResponse& /*response*/) { return ""; }

std::string SummarizeRequest(const v1::DescribeRopeRequest& request) {
  std::string out;
  if (!request.config().hf_config_json().empty()) {
    Add(&out, "hf_config_json_bytes",
        static_cast<int64_t>(request.config().hf_config_json().size()));
  } else {
    Add(&out, "head_dim", request.config().head_dim());
  }
  return out;
}

std::string SummarizeResponse(const v1::DescribeRopeResponse& response) {
  std::string out;
  Add(&out, "groups", response.groups_size());
  if (response.warnings_size() > 0) Add(&out, "warnings", response.warnings_size());
  return out;
}

}  // namespace posenc::server
