// The MultimodalPositions and VisionPositions requests as the kernels' arguments (convert.h):
// the request's fields over the config.json's (kernels/hf/vision.h) over the family's defaults.
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status.h"
#include "kernels/hf/vision.h"
#include "server/convert.h"

namespace posenc::server {
namespace {

// The normalizer names RopeConfig's field ("config.hf_config_json: ..."); these requests have
// hf_config_json at the top.
absl::Status TopLevelJsonField(absl::Status status) {
  constexpr absl::string_view kNested = "config.hf_config_json: ";
  if (status.ok() || !absl::StartsWith(status.message(), kNested)) return status;
  return absl::Status(status.code(),
                      absl::StrCat("hf_config_json: ", status.message().substr(kNested.size())));
}

// The families' names, from the rules' table: "qwen2_vl, qwen2_5_vl, ...".
std::string RuleNames() {
  std::string out;
  for (const kernels::MultimodalRule& r : kernels::MultimodalRules()) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", r.name);
  }
  return out;
}

// The family: the request's, else the config.json's model_type.
absl::StatusOr<kernels::MultimodalFamily> Family(const v1::MultimodalPositionsRequest& req,
                                                 const hf::MultimodalConfig* file) {
  POSENC_ASSIGN_OR_RETURN(std::optional<kernels::MultimodalFamily> family,
                          ToMultimodalFamily(req.family(), "family"));
  if (family) return *family;
  if (file != nullptr && file->rule != nullptr) return file->rule->family;
  if (file != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config_json: model_type '", kernels::Abbreviate(file->model_type),
        "' has no multimodal position rule in posenc (", RuleNames(), "); set family"));
  }
  return absl::InvalidArgumentError(
      "family: required without hf_config_json (MULTIMODAL_FAMILY_QWEN2_VL, ...)");
}

// The request's token ids over the file's.
void TokenIds(const v1::MultimodalTokenIds& ids, kernels::MultimodalTokenIds* out) {
  if (ids.has_image_token_id()) out->image = ids.image_token_id();
  if (ids.has_video_token_id()) out->video = ids.video_token_id();
  if (ids.has_vision_start_token_id()) out->vision_start = ids.vision_start_token_id();
  if (ids.has_video_start_token_id()) out->video_start = ids.video_start_token_id();
  if (ids.has_video_end_token_id()) out->video_end = ids.video_end_token_id();
}

absl::StatusOr<kernels::MultimodalSpan> ToSpan(const v1::MultimodalSpan& span,
                                               const std::string& field) {
  using Kind = kernels::MultimodalSpan::Kind;
  kernels::MultimodalSpan out;
  switch (span.kind_case()) {
    case v1::MultimodalSpan::kTextTokens: out.text_tokens = span.text_tokens(); return out;
    case v1::MultimodalSpan::kImage:
    case v1::MultimodalSpan::kVideo: {
      const bool video = span.kind_case() == v1::MultimodalSpan::kVideo;
      const v1::VisionSpan& v = video ? span.video() : span.image();
      out.kind = video ? Kind::kVideo : Kind::kImage;
      out.t = v.t();
      out.h = v.h();
      out.w = v.w();
      if (v.has_second_per_grid()) {
        POSENC_RETURN_IF_ERROR(
            CheckFinite(v.second_per_grid(),
                        absl::StrCat(field, video ? ".video" : ".image", ".second_per_grid")));
        out.second_per_grid = v.second_per_grid();
      }
      return out;
    }
    case v1::MultimodalSpan::KIND_NOT_SET: break;
  }
  return kernels::Invalid(field, "expected text_tokens, image or video, got none");
}

absl::Status ToSequences(const v1::MultimodalPositionsRequest& req,
                         kernels::MultimodalPositionsArgs* args) {
  for (int b = 0; b < req.sequences_size(); ++b) {
    std::vector<kernels::MultimodalSpan>& row = args->sequences.emplace_back();
    const v1::MultimodalSequence& seq = req.sequences(b);
    for (int i = 0; i < seq.spans_size(); ++i) {
      POSENC_ASSIGN_OR_RETURN(
          kernels::MultimodalSpan span,
          ToSpan(seq.spans(i), absl::StrCat("sequences[", b, "].spans[", i, "]")));
      row.push_back(span);
    }
  }
  return absl::OkStatus();
}

// The prompt's tensors (token form).
absl::Status ToPromptTensors(const v1::MultimodalPositionsRequest& req,
                             kernels::MultimodalPositionsArgs* args) {
  if (!req.has_input_ids()) return ToSequences(req, args);
  POSENC_ASSIGN_OR_RETURN(args->input_ids,
                          ToConstView(req.input_ids(), DTypeClass::kInt, "input_ids"));
  const std::pair<const v1::Tensor*, kernels::ConstTensorView*> ints[] = {
      {req.has_attention_mask() ? &req.attention_mask() : nullptr, &args->attention_mask},
      {req.has_image_grid_thw() ? &req.image_grid_thw() : nullptr, &args->image_grid_thw},
      {req.has_video_grid_thw() ? &req.video_grid_thw() : nullptr, &args->video_grid_thw}};
  const char* names[] = {"attention_mask", "image_grid_thw", "video_grid_thw"};
  for (size_t i = 0; i < 3; ++i) {
    if (ints[i].first == nullptr) continue;
    POSENC_ASSIGN_OR_RETURN(*ints[i].second,
                            ToConstView(*ints[i].first, DTypeClass::kInt, names[i]));
  }
  if (req.has_second_per_grid_ts()) {
    POSENC_ASSIGN_OR_RETURN(
        args->second_per_grid_ts,
        ToConstView(req.second_per_grid_ts(), DTypeClass::kFloat, "second_per_grid_ts"));
  }
  return ToSequences(req, args);
}

}  // namespace

absl::StatusOr<kernels::MultimodalPositionsArgs> ToMultimodalPositionsArgs(
    const v1::MultimodalPositionsRequest& req) {
  std::optional<hf::MultimodalConfig> file;
  if (!req.hf_config_json().empty()) {
    absl::StatusOr<hf::MultimodalConfig> parsed = hf::ParseMultimodalConfig(req.hf_config_json());
    if (!parsed.ok()) return TopLevelJsonField(parsed.status());
    file = *std::move(parsed);
  }
  kernels::MultimodalPositionsArgs args;
  POSENC_ASSIGN_OR_RETURN(args.family, Family(req, file ? &*file : nullptr));
  if (file) {
    args.token_ids = file->token_ids;
    args.spatial_merge_size = file->spatial_merge_size.value_or(2);
    args.tokens_per_second = file->tokens_per_second.value_or(0);
    args.temporal_merge_size = file->temporal_merge_size.value_or(0);
  }
  TokenIds(req.token_ids(), &args.token_ids);
  if (req.has_spatial_merge_size()) args.spatial_merge_size = req.spatial_merge_size();
  if (req.has_tokens_per_second()) {
    POSENC_RETURN_IF_ERROR(CheckFinite(req.tokens_per_second(), "tokens_per_second"));
    args.tokens_per_second = req.tokens_per_second();
  }
  if (req.has_temporal_merge_size()) {
    if (req.temporal_merge_size() < 1) {
      return kernels::Invalid("temporal_merge_size",
                              absl::StrCat("expected 1 .. 64, got ", req.temporal_merge_size()));
    }
    args.temporal_merge_size = req.temporal_merge_size();
  }
  POSENC_RETURN_IF_ERROR(ToPromptTensors(req, &args));
  return args;
}

absl::StatusOr<std::optional<kernels::MultimodalFamily>> ToDecodeFamily(
    const v1::MultimodalPositionsRequest& req) {
  POSENC_ASSIGN_OR_RETURN(std::optional<kernels::MultimodalFamily> family,
                          ToMultimodalFamily(req.family(), "family"));
  if (family || req.hf_config_json().empty()) return family;
  absl::StatusOr<hf::MultimodalConfig> file = hf::ParseMultimodalConfig(req.hf_config_json());
  if (!file.ok()) return TopLevelJsonField(file.status());
  if (file->rule == nullptr) return std::nullopt;
  return file->rule->family;
}

absl::StatusOr<kernels::MultimodalDecodeArgs> ToMultimodalDecodeArgs(
    const v1::MultimodalDecode& d) {
  kernels::MultimodalDecodeArgs args;
  if (d.has_deltas()) {
    POSENC_ASSIGN_OR_RETURN(args.deltas,
                            ToConstView(d.deltas(), DTypeClass::kInt, "decode.deltas"));
  }
  args.prompt_length = d.prompt_length();
  args.num_steps = d.num_steps();
  return args;
}

absl::StatusOr<kernels::VisionPositionsArgs> ToVisionPositionsArgs(
    const v1::VisionPositionsRequest& req) {
  kernels::VisionPositionsArgs args;
  POSENC_ASSIGN_OR_RETURN(std::optional<kernels::VisionTower> tower,
                          ToVisionTower(req.tower(), "tower"));
  if (!req.hf_config_json().empty()) {
    absl::StatusOr<std::optional<hf::VisionTowerConfig>> parsed =
        hf::ParseVisionTower(req.hf_config_json());
    if (!parsed.ok()) return TopLevelJsonField(parsed.status());
    const std::optional<hf::VisionTowerConfig>& file = *parsed;
    if (!file && !tower) {
      return absl::InvalidArgumentError(
          "hf_config_json: no vision tower posenc knows (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, "
          "Pixtral, Llama 4); set tower");
    }
    if (file) {
      args.tower = file->tower;
      args.spatial_merge_size = file->spatial_merge_size;
      args.window_size = file->window_size;
      args.patch_size = file->patch_size;
      args.image_size = file->image_size;
    }
  } else if (!tower) {
    return absl::InvalidArgumentError(
        "tower: required without hf_config_json (VISION_TOWER_QWEN, PIXTRAL or LLAMA4)");
  }
  if (tower) args.tower = *tower;
  if (req.has_spatial_merge_size()) args.spatial_merge_size = req.spatial_merge_size();
  if (req.has_window_size()) args.window_size = req.window_size();
  if (req.has_patch_size()) args.patch_size = req.patch_size();
  if (req.has_image_size()) args.image_size = req.image_size();
  if (req.has_grid()) {
    POSENC_ASSIGN_OR_RETURN(args.grid, ToConstView(req.grid(), DTypeClass::kInt, "grid"));
  }
  return args;
}

}  // namespace posenc::server
