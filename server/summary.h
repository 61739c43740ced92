// One-line summaries of requests and responses for the access log: the main tensors' dtype and
// shape, and the sizes that decide the work, e.g. "q=FLOAT32[1,4096,32,128]
// positions=range[0,+4096)". Never touches tensor data, so it costs the same for any size.
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_SUMMARY_H_
#define POSENC_SERVER_SUMMARY_H_

#include <string>

#include "posenc/v1/posenc.pb.h"

namespace posenc::server {

// "FLOAT32[1,4096,32,128]" (a scalar: "FLOAT32[]").
std::string TensorSummary(const v1::Tensor& tensor);

std::string SummarizeRequest(const v1::SinusoidalRequest& request);
std::string SummarizeRequest(const v1::AddPositionEncodingRequest& request);
std::string SummarizeRequest(const v1::RopeCacheRequest& request);
std::string SummarizeRequest(const v1::ApplyRopeRequest& request);
std::string SummarizeRequest(const v1::AlibiSlopesRequest& request);
std::string SummarizeRequest(const v1::AlibiBiasRequest& request);
std::string SummarizeRequest(const v1::RelativeBiasRequest& request);
std::string SummarizeRequest(const v1::RelativeEmbeddingRequest& request);
std::string SummarizeRequest(const v1::GetServerInfoRequest& request);
std::string SummarizeRequest(const v1::DescribeRopeRequest& request);

std::string SummarizeResponse(const v1::SinusoidalResponse& response);
std::string SummarizeResponse(const v1::AddPositionEncodingResponse& response);
std::string SummarizeResponse(const v1::RopeCacheResponse& response);
std::string SummarizeResponse(const v1::ApplyRopeResponse& response);
std::string SummarizeResponse(const v1::AlibiSlopesResponse& response);
std::string SummarizeResponse(const v1::AlibiBiasResponse& response);
std::string SummarizeResponse(const v1::RelativeBiasResponse& response);
std::string SummarizeResponse(const v1::RelativeEmbeddingResponse& response);
std::string SummarizeResponse(const v1::GetServerInfoResponse& response);
std::string SummarizeResponse(const v1::DescribeRopeResponse& response);

}  // namespace posenc::server

#endif  // POSENC_SERVER_SUMMARY_H_
