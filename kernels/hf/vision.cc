// The vision towers' table and the multimodal config reader (vision.h).
#include "kernels/hf/vision.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/status.h"
#include "kernels/hf/architectures.h"
#include "kernels/hf/sources.h"

namespace posenc::hf {
namespace {

using kernels::MropeLayout;
using kernels::RopeStyle;
using kernels::VisionTower;

// One vision tower: the model types whose vision_config it reads and the class defaults.
struct VisionRow {
  std::vector<absl::string_view> model_types;  // the root's (Pixtral: vision_config's) model_type
  Family family;  // source (the transformers file), theta: its default; the rest unused
  VisionTower tower;
  absl::string_view width_key;  // the vision hidden size key
  int64_t width = 0;
  absl::string_view heads_key;
  int64_t heads = 0;
  bool reads_theta = false;  // rope_theta in vision_config (else the hard-coded theta)
  MropeLayout layout = MropeLayout::kVision2d;
  RopeStyle style = RopeStyle::kNeox;
  int64_t window_size = 0, patch_size = 14, image_size = 0;
};

const std::vector<VisionRow>& VisionRows() {
  static const auto* rows = new std::vector<VisionRow>{
      {.model_types = {"qwen2_vl"},
       .family = {.source = "models/qwen2_vl/modeling_qwen2_vl.py (VisionRotaryEmbedding, "
                            "rot_pos_emb; Qwen2VLVisionConfig)"},
       .tower = VisionTower::kQwen,
       .width_key = "embed_dim",
       .width = 1280,
       .heads_key = "num_heads",
       .heads = 16},
      {.model_types = {"qwen2_5_vl"},
       .family = {.source = "models/qwen2_5_vl/modeling_qwen2_5_vl.py (rot_pos_emb, "
                            "get_window_index; Qwen2_5_VLVisionConfig)"},
       .tower = VisionTower::kQwen,
       .width_key = "hidden_size",
       .width = 3584,
       .heads_key = "num_heads",
       .heads = 16,
       .window_size = 112},
      {.model_types = {"qwen3_vl", "qwen3_vl_moe"},
       .family = {.source = "models/qwen3_vl/modeling_qwen3_vl.py (Qwen3VLVisionModel.rot_pos_emb; "
                            "Qwen3VLVisionConfig)"},
       .tower = VisionTower::kQwen,
       .width_key = "hidden_size",
       .width = 1152,
       .heads_key = "num_heads",
       .heads = 16,
       .patch_size = 16},
      {.model_types = {"glm4v"},
       .family = {.source = "models/glm4v/modeling_glm4v.py (Glm4vVisionRotaryEmbedding; "
                            "Glm4vVisionConfig)"},
       .tower = VisionTower::kQwen,
       .width_key = "hidden_size",
       .width = 1536,
       .heads_key = "num_heads",
       .heads = 12},
      {.model_types = {"pixtral"},
       .family = {.source = "models/pixtral/modeling_pixtral.py (PixtralRotaryEmbedding, "
                            "position_ids_in_meshgrid; PixtralVisionConfig)"},
       .tower = VisionTower::kPixtral,
       .width_key = "hidden_size",
       .width = 1024,
       .heads_key = "num_attention_heads",
       .heads = 16,
       .reads_theta = true,
       .layout = MropeLayout::kVision2dEvenOdd,
       .patch_size = 16,
       .image_size = 1024},
      {.model_types = {"llama4"},
       .family = {.source = "models/llama4/modeling_llama4.py (Llama4VisionRotaryEmbedding; "
                            "Llama4VisionConfig)"},
       .tower = VisionTower::kLlama4,
       .width_key = "hidden_size",
       .width = 768,
       .heads_key = "num_attention_heads",
       .heads = 16,
       .reads_theta = true,
       .style = RopeStyle::kGptj,
       .image_size = 448},
  };
  return *rows;
}

std::string ModelType(const Json& object) {
  const Json* mt = Find(object, "model_type");
  return mt != nullptr && mt->is_string() ? mt->get<std::string>() : "";
}

// The row of the root's model_type, else of vision_config's (Pixtral inside LLaVA / Mistral 3).
const VisionRow* FindRow(const Json& root, const Json& vision) {
  for (const std::string& name : {ModelType(root), ModelType(vision)}) {
    for (const VisionRow& row : VisionRows()) {
      for (absl::string_view t : row.model_types) {
        if (!name.empty() && t == name) return &row;
      }
    }
  }
  return nullptr;
}

// An integer of vision_config, else the row's default; its source recorded.
absl::StatusOr<int64_t> VisionInt(const Json& vision, absl::string_view key, int64_t fallback,
                                  const Family& f, std::vector<ValueSource>* sources,
                                  absl::string_view name) {
  const std::string path = absl::StrCat("vision_config.", key);
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> v, Get<int64_t>(vision, key, path));
  if (v) {
    ReadFrom(sources, f, name, path, absl::StrCat(*v));
    return *v;
  }
  Defaulted(sources, f, name, key, absl::StrCat(fallback));
  return fallback;
}

absl::Status ReadTowerRope(const Json& vision, const VisionRow& row, VisionTowerConfig* out) {
  std::vector<ValueSource>* sources = &out->rope.sources;
  const Family& f = row.family;
  POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                          Get<int64_t>(vision, "head_dim", "vision_config.head_dim"));
  if (head_dim) {
    ReadFrom(sources, f, "head_dim", "vision_config.head_dim", absl::StrCat(*head_dim));
  } else {
    POSENC_ASSIGN_OR_RETURN(int64_t width,
                            VisionInt(vision, row.width_key, row.width, f, sources, "hidden_size"));
    POSENC_ASSIGN_OR_RETURN(int64_t heads,
                            VisionInt(vision, row.heads_key, row.heads, f, sources, "num_heads"));
    if (heads < 1 || width < 1 || width % heads != 0) {
      return Invalid(absl::StrCat("vision_config.", row.width_key, " (", width,
                                  ") must be a positive multiple of vision_config.", row.heads_key,
                                  " (", heads, ")"));
    }
    head_dim = width / heads;
  }
  kernels::RopeConfig& c = out->rope.config;
  c.head_dim = *head_dim;
  c.mrope_layout = row.layout;
  c.style = row.style;
  c.base = 10000.0;
  if (row.reads_theta) {
    POSENC_ASSIGN_OR_RETURN(std::optional<double> theta,
                            Get<double>(vision, "rope_theta", "vision_config.rope_theta"));
    if (theta) {
      c.base = *theta;
      ReadFrom(sources, f, "base", "vision_config.rope_theta", ValueText(*theta));
    }
  }
  if (!row.reads_theta || c.base == 10000.0) Defaulted(sources, f, "base", "theta", "10000");
  Defaulted(sources, f, "mrope_layout", "the vision tower's 2-D RoPE",
            std::string(kernels::MropeLayoutName(row.layout)));
  Defaulted(sources, f, "pairing", "the vision tower's rotation",
            std::string(kernels::RopeStyleName(row.style)));
  out->rope.layer_type = std::string(kVisionLayerType);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<VisionTowerConfig>> VisionTowerOf(const Json& root) {
  const Json* vision = Find(root, "vision_config");
  const Json empty = Json::object();
  if (vision != nullptr && !vision->is_object()) {
    return Invalid(absl::StrCat("vision_config must be an object, got ", TypeName(*vision)));
  }
  if (vision == nullptr) vision = &empty;
  const VisionRow* row = FindRow(root, *vision);
  if (row == nullptr) return std::nullopt;
  VisionTowerConfig out;
  out.tower = row->tower;
  out.model_type = std::string(row->model_types.front());
  std::vector<ValueSource> geometry;  // not RoPE values: kept out of the group's sources
  POSENC_ASSIGN_OR_RETURN(
      out.spatial_merge_size,
      VisionInt(*vision, "spatial_merge_size", 2, row->family, &geometry, "spatial_merge_size"));
  POSENC_ASSIGN_OR_RETURN(out.window_size, VisionInt(*vision, "window_size", row->window_size,
                                                     row->family, &geometry, "window_size"));
  if (row->window_size == 0) out.window_size = 0;  // only Qwen2.5-VL's tower reads it
  POSENC_ASSIGN_OR_RETURN(out.patch_size, VisionInt(*vision, "patch_size", row->patch_size,
                                                    row->family, &geometry, "patch_size"));
  POSENC_ASSIGN_OR_RETURN(out.image_size, VisionInt(*vision, "image_size", row->image_size,
                                                    row->family, &geometry, "image_size"));
  POSENC_RETURN_IF_ERROR(ReadTowerRope(*vision, *row, &out));
  return out;
}

absl::StatusOr<std::optional<VisionTowerConfig>> ParseVisionTower(absl::string_view json_text) {
  POSENC_ASSIGN_OR_RETURN(const Json root, ParseObject(json_text));
  return VisionTowerOf(root);
}

absl::StatusOr<MultimodalConfig> ParseMultimodalConfig(absl::string_view json_text) {
  POSENC_ASSIGN_OR_RETURN(const Json root, ParseObject(json_text));
  MultimodalConfig out;
  const Json* text = Find(root, "text_config");
  for (const Json* object : {&root, text}) {
    if (object == nullptr || !object->is_object() || out.rule != nullptr) continue;
    out.model_type = ModelType(*object);
    out.rule = kernels::FindMultimodalRule(out.model_type);
  }
  // The token ids: the top level's, else text_config's.
  auto token = [&](absl::string_view key, int64_t* dst) -> absl::Status {
    for (const Json* object : {&root, text}) {
      if (object == nullptr || !object->is_object() || *dst >= 0) continue;
      POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> v, Get<int64_t>(*object, key, key));
      if (v) *dst = *v;
    }
    return absl::OkStatus();
  };
  kernels::MultimodalTokenIds& id = out.token_ids;
  POSENC_RETURN_IF_ERROR(token("image_token_id", &id.image));
  POSENC_RETURN_IF_ERROR(token("video_token_id", &id.video));
  POSENC_RETURN_IF_ERROR(token("vision_start_token_id", &id.vision_start));
  POSENC_RETURN_IF_ERROR(token("video_start_token_id", &id.video_start));
  POSENC_RETURN_IF_ERROR(token("video_end_token_id", &id.video_end));
  if (const Json* vision = Find(root, "vision_config"); vision != nullptr && vision->is_object()) {
    POSENC_ASSIGN_OR_RETURN(
        out.spatial_merge_size,
        Get<int64_t>(*vision, "spatial_merge_size", "vision_config.spatial_merge_size"));
    POSENC_ASSIGN_OR_RETURN(out.tokens_per_second, Get<double>(*vision, "tokens_per_second",
                                                               "vision_config.tokens_per_second"));
    if (out.rule != nullptr && out.rule->temporal_merge_size > 0) {
      POSENC_ASSIGN_OR_RETURN(
          out.temporal_merge_size,
          Get<int64_t>(*vision, "temporal_merge_size", "vision_config.temporal_merge_size"));
    }
  }
  return out;
}

}  // namespace posenc::hf
