// The RerotateKeys, MultimodalPositions and VisionPositions requests and responses (convert.h).
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/convert.h"
#include "kernels/common/status.h"

namespace posenc::client::internal {
namespace {

// An optional tensor field: set when given (`mutable_field` is called only then: a message
// field once touched is present on the wire).
template <typename Message>
absl::Status SetTensor(const std::optional<Tensor>& tensor, absl::string_view field,
                       Message* request, v1::Tensor* (Message::*mutable_field)()) {
  if (!tensor.has_value()) return absl::OkStatus();
  return ToProto(*tensor, field, (request->*mutable_field)());
}

// An optional response tensor: moved out when present.
template <typename Message>
absl::Status TakeTensor(Message* response, bool (Message::*has_field)() const,
                        v1::Tensor* (Message::*mutable_field)(), absl::string_view field,
                        std::optional<Tensor>* out) {
  if (!(response->*has_field)()) return absl::OkStatus();
  POSENC_ASSIGN_OR_RETURN(*out, FromProto(std::move(*(response->*mutable_field)()), field));
  return absl::OkStatus();
}

void SetTokenIds(const MultimodalTokenIds& ids, v1::MultimodalTokenIds* out) {
  if (ids.image_token_id) out->set_image_token_id(*ids.image_token_id);
  if (ids.video_token_id) out->set_video_token_id(*ids.video_token_id);
  if (ids.vision_start_token_id) out->set_vision_start_token_id(*ids.vision_start_token_id);
  if (ids.video_start_token_id) out->set_video_start_token_id(*ids.video_start_token_id);
  if (ids.video_end_token_id) out->set_video_end_token_id(*ids.video_end_token_id);
}

void SetSpan(const MultimodalSpan& span, v1::MultimodalSpan* out) {
  if (span.kind == MultimodalSpan::Kind::kText) {
    out->set_text_tokens(span.text_tokens);
    return;
  }
  v1::VisionSpan* grid =
      span.kind == MultimodalSpan::Kind::kImage ? out->mutable_image() : out->mutable_video();
  grid->set_t(span.t);
  grid->set_h(span.h);
  grid->set_w(span.w);
  if (span.second_per_grid) grid->set_second_per_grid(*span.second_per_grid);
}

absl::Status ToPrompt(const MultimodalPositionsOptions& o, v1::MultimodalPositionsRequest* r) {
  using Request = v1::MultimodalPositionsRequest;
  POSENC_RETURN_IF_ERROR(SetTensor(o.input_ids, "input_ids", r, &Request::mutable_input_ids));
  POSENC_RETURN_IF_ERROR(
      SetTensor(o.attention_mask, "attention_mask", r, &Request::mutable_attention_mask));
  POSENC_RETURN_IF_ERROR(
      SetTensor(o.image_grid_thw, "image_grid_thw", r, &Request::mutable_image_grid_thw));
  POSENC_RETURN_IF_ERROR(
      SetTensor(o.video_grid_thw, "video_grid_thw", r, &Request::mutable_video_grid_thw));
  POSENC_RETURN_IF_ERROR(SetTensor(o.second_per_grid_ts, "second_per_grid_ts", r,
                                   &Request::mutable_second_per_grid_ts));
  for (const std::vector<MultimodalSpan>& spans : o.sequences) {
    v1::MultimodalSequence* seq = r->add_sequences();
    for (const MultimodalSpan& span : spans) SetSpan(span, seq->add_spans());
  }
  if (o.decode.has_value()) {
    v1::MultimodalDecode* d = r->mutable_decode();
    POSENC_RETURN_IF_ERROR(ToProto(o.decode->deltas, "decode.deltas", d->mutable_deltas()));
    d->set_prompt_length(o.decode->prompt_length);
    d->set_num_steps(o.decode->num_steps);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::RerotateKeysRequest> ToRequest(const RerotateKeysOptions& options) {
  v1::RerotateKeysRequest request;
  POSENC_RETURN_IF_ERROR(ToProto(options.k, "k", request.mutable_k()));
  POSENC_RETURN_IF_ERROR(ToProto(options.positions, request.mutable_positions()));
  POSENC_RETURN_IF_ERROR(ToProto(options.delta, "delta", request.mutable_delta()));
  ToProto(options.config, request.mutable_config());
  request.set_layout(static_cast<v1::TensorLayout>(options.layout));
  return request;
}

absl::StatusOr<v1::MultimodalPositionsRequest> ToRequest(
    const MultimodalPositionsOptions& options) {
  v1::MultimodalPositionsRequest request;
  request.set_hf_config_json(options.hf_config_json);
  request.set_family(static_cast<v1::MultimodalFamily>(options.family));
  SetTokenIds(options.token_ids, request.mutable_token_ids());
  if (options.spatial_merge_size) request.set_spatial_merge_size(*options.spatial_merge_size);
  if (options.tokens_per_second) request.set_tokens_per_second(*options.tokens_per_second);
  if (options.temporal_merge_size) request.set_temporal_merge_size(*options.temporal_merge_size);
  POSENC_RETURN_IF_ERROR(ToPrompt(options, &request));
  return request;
}

absl::StatusOr<v1::VisionPositionsRequest> ToRequest(const VisionPositionsOptions& options) {
  v1::VisionPositionsRequest request;
  request.set_hf_config_json(options.hf_config_json);
  request.set_tower(static_cast<v1::VisionTower>(options.tower));
  POSENC_RETURN_IF_ERROR(
      SetTensor(options.grid, "grid", &request, &v1::VisionPositionsRequest::mutable_grid));
  if (options.spatial_merge_size) request.set_spatial_merge_size(*options.spatial_merge_size);
  if (options.window_size) request.set_window_size(*options.window_size);
  if (options.patch_size) request.set_patch_size(*options.patch_size);
  if (options.image_size) request.set_image_size(*options.image_size);
  return request;
}

absl::StatusOr<RerotateKeysResult> FromProto(v1::RerotateKeysResponse&& response) {
  RerotateKeysResult result{.derived = FromProto(response.derived())};
  POSENC_ASSIGN_OR_RETURN(result.k, FromProto(std::move(*response.mutable_k()), "k"));
  return result;
}

absl::StatusOr<MultimodalPositionsResult> FromProto(v1::MultimodalPositionsResponse&& response) {
  MultimodalPositionsResult result{.family = static_cast<MultimodalFamily>(response.family()),
                                   .source = response.source()};
  POSENC_ASSIGN_OR_RETURN(result.position_ids,
                          FromProto(std::move(*response.mutable_position_ids()), "position_ids"));
  using Response = v1::MultimodalPositionsResponse;
  POSENC_RETURN_IF_ERROR(TakeTensor(&response, &Response::has_mrope_position_deltas,
                                    &Response::mutable_mrope_position_deltas,
                                    "mrope_position_deltas", &result.mrope_position_deltas));
  return result;
}

absl::StatusOr<VisionPositionsResult> FromProto(v1::VisionPositionsResponse&& response) {
  VisionPositionsResult result{.tower = static_cast<VisionTower>(response.tower())};
  POSENC_ASSIGN_OR_RETURN(result.position_ids,
                          FromProto(std::move(*response.mutable_position_ids()), "position_ids"));
  using Response = v1::VisionPositionsResponse;
  POSENC_RETURN_IF_ERROR(TakeTensor(&response, &Response::has_flat_ids, &Response::mutable_flat_ids,
                                    "flat_ids", &result.flat_ids));
  POSENC_RETURN_IF_ERROR(TakeTensor(&response, &Response::has_window_index,
                                    &Response::mutable_window_index, "window_index",
                                    &result.window_index));
  POSENC_RETURN_IF_ERROR(TakeTensor(&response, &Response::has_cu_window_seqlens,
                                    &Response::mutable_cu_window_seqlens, "cu_window_seqlens",
                                    &result.cu_window_seqlens));
  return result;
}

}  // namespace posenc::client::internal
