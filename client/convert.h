// Conversions between the public client types (posenc/client.h) and the generated posenc.v1
// messages. Private to the client library: nothing outside client/*.cc includes this header.
//
// To-proto conversions check what the wire cannot express (e.g. an inconsistent Tensor, both
// sources of AddPositionEncoding set) and return INVALID_ARGUMENT naming the field; everything
// else is left to the server, which validates every request.
//
// Thread-safety: pure functions, thread-safe.
#ifndef POSENC_CLIENT_CONVERT_H_
#define POSENC_CLIENT_CONVERT_H_

#include <concepts>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "posenc/client.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::client::internal {

v1::DType ToProto(DType dtype);
absl::StatusOr<DType> FromProto(v1::DType dtype, absl::string_view field);

// `field` names the tensor in error messages ("q", "positions.ids", ...).
absl::Status ToProto(const Tensor& tensor, absl::string_view field, v1::Tensor* out);
// ToProto without the bytes (dtype, shape, reference; the tensor validated unless `shape_only`,
// for one that holds no bytes): for a caller that sends the bytes from the tensor's own memory
// (v1::BorrowedBytes).
absl::Status ToProtoWithoutBytes(const Tensor& tensor, absl::string_view field, v1::Tensor* out,
                                 bool shape_only = false);
absl::StatusOr<Tensor> FromProto(const v1::Tensor& tensor, absl::string_view field);
// Moves the bytes out of `tensor` (responses are consumed once).
absl::StatusOr<Tensor> FromProto(v1::Tensor&& tensor, absl::string_view field);

// Leaves `out` untouched for Kind::kDefault (the message stays absent).
absl::Status ToProto(const Positions& positions, v1::Positions* out);
void ToProto(const SinusoidalParams& params, v1::SinusoidalParams* out);
void ToProto(const RopeConfig& config, v1::RopeConfig* out);
RopeDerived FromProto(const v1::RopeDerived& derived);

absl::StatusOr<v1::SinusoidalRequest> ToRequest(const SinusoidalOptions& options);
absl::StatusOr<v1::AddPositionEncodingRequest> ToRequest(const AddPositionEncodingOptions& options);
absl::StatusOr<v1::RopeCacheRequest> ToRequest(const RopeCacheOptions& options);
absl::StatusOr<v1::ApplyRopeRequest> ToRequest(const ApplyRopeOptions& options);
// ToRequest with q and k without their bytes (Client::ApplyRope sends them from the caller's
// tensors, v1::BorrowedBytes). `shapes_only`: q and k hold no bytes at all (a split piece's, whose
// boxes are sent from the caller's checked tensors), so their sizes are not checked against them.
absl::StatusOr<v1::ApplyRopeRequest> ToRequestWithoutBytes(const ApplyRopeOptions& options,
                                                           bool shapes_only = false);
absl::StatusOr<v1::AlibiSlopesRequest> ToRequest(const AlibiSlopesOptions& options);
absl::StatusOr<v1::AlibiBiasRequest> ToRequest(const AlibiBiasOptions& options);
absl::StatusOr<v1::RelativeBiasRequest> ToRequest(const RelativeBiasOptions& options);
absl::StatusOr<v1::RelativeEmbeddingRequest> ToRequest(const RelativeEmbeddingOptions& options);
absl::StatusOr<v1::RegisterSharedMemoryRequest> ToRequest(const SharedMemoryRegistration& region);
absl::StatusOr<v1::RegisterCudaSharedMemoryRequest> ToRequest(
    const CudaSharedMemoryRegistration& region);
// convert_multimodal.cc
absl::StatusOr<v1::RerotateKeysRequest> ToRequest(const RerotateKeysOptions& options);
absl::StatusOr<v1::MultimodalPositionsRequest> ToRequest(const MultimodalPositionsOptions& options);
absl::StatusOr<v1::VisionPositionsRequest> ToRequest(const VisionPositionsOptions& options);
absl::StatusOr<v1::AnalyzeEncodingRequest> ToRequest(const AnalyzeEncodingOptions& options);
// convert_analysis.cc
AnalyzeEncodingResult FromProto(const v1::AnalyzeEncodingResponse& response);
void ToProto(const RopeScaling& scaling, v1::RopeScaling* out);
absl::Status ToProto(const LearnedTable& table, v1::LearnedTable* out);
// Requests the client builds itself (GetServerInfo, Unregister, SharedMemoryStatus): as they are.
template <typename Request>
requires std::derived_from<Request, google::protobuf::Message> absl::StatusOr<Request> ToRequest(
    const Request& request) {
  return request;
}

// The responses of several tensors; their bytes are moved out.
absl::StatusOr<RopeCacheResult> FromProto(v1::RopeCacheResponse&& response);
absl::StatusOr<ApplyRopeResult> FromProto(v1::ApplyRopeResponse&& response);
absl::StatusOr<AlibiBiasResult> FromProto(v1::AlibiBiasResponse&& response);
absl::StatusOr<ServerInfo> FromProto(const v1::GetServerInfoResponse& response);
DescribeRopeResult FromProto(const v1::DescribeRopeResponse& response);
std::vector<SharedMemoryRegionStatus> FromProto(const v1::SharedMemoryStatusResponse& response);
absl::StatusOr<RerotateKeysResult> FromProto(v1::RerotateKeysResponse&& response);
absl::StatusOr<MultimodalPositionsResult> FromProto(v1::MultimodalPositionsResponse&& response);
absl::StatusOr<VisionPositionsResult> FromProto(v1::VisionPositionsResponse&& response);

}  // namespace posenc::client::internal

#endif  // POSENC_CLIENT_CONVERT_H_
