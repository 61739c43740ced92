// The table of multimodal position rules (multimodal_positions.h): one row per family, each
// naming the transformers function it repeats. ERNIE-4.5-VL is not a row: transformers' only
// implementation (Ernie4_5_VLMoeModel.get_rope_index, v5) starts the text after a vision span at
// start + max(h', w') rather than at the span's largest position + 1, and shares the v5 video
// code whose temporal ids are transformers issue #45381; its rule cannot be confirmed from a
// second source. (Its frequency layout is: MropeLayout ALTERNATING.)
#include "kernels/multimodal/multimodal_positions.h"

namespace posenc::kernels {

const std::vector<MultimodalRule>& MultimodalRules() {
  static const auto* rules = new std::vector<MultimodalRule>{
      {.family = MultimodalFamily::kQwen2Vl,
       .name = "qwen2_vl",
       .model_types = {"qwen2_vl", "qwen2_vl_text"},
       .source = "models/qwen2_vl/modeling_qwen2_vl.py, Qwen2VLModel.get_rope_index",
       .spans = SpanMarking::kVisionStartThenPad,
       .temporal = TemporalRule::kIndex,
       .split_video_frames = false,
       .image_token = 151655,
       .video_token = 151656,
       .vision_start = 151652},
      {.family = MultimodalFamily::kQwen25Vl,
       .name = "qwen2_5_vl",
       .model_types = {"qwen2_5_vl", "qwen2_5_vl_text"},
       .source = "models/qwen2_5_vl/modeling_qwen2_5_vl.py, Qwen2_5_VLModel.get_rope_index "
                 "(seconds per grid in float, as 4.49 and after PR #48669; 4.50 .. 4.57 "
                 "truncated them to an integer)",
       .spans = SpanMarking::kVisionStartThenPad,
       .temporal = TemporalRule::kSecondsTimesTokensPerSecond,
       .split_video_frames = false,
       .tokens_per_second = 4,  // Qwen2_5_VLVisionConfig's default (checkpoints set 2)
       .image_token = 151655,
       .video_token = 151656,
       .vision_start = 151652},
      {.family = MultimodalFamily::kQwen3Vl,
       .name = "qwen3_vl",
       .model_types = {"qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text"},
       .source = "models/qwen3_vl/modeling_qwen3_vl.py, Qwen3VLModel.get_rope_index (videos split "
                 "per temporal patch, time carried by timestamp text)",
       .spans = SpanMarking::kVisionStartThenPad,
       .temporal = TemporalRule::kIndex,
       .split_video_frames = true,
       .image_token = 151655,
       .video_token = 151656,
       .vision_start = 151652},
      {.family = MultimodalFamily::kGlm4v,
       .name = "glm4v",
       .model_types = {"glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text"},
       .source = "models/glm4v/modeling_glm4v.py, Glm4vModel.get_rope_index (each frame group of "
                 "a video a span of its own)",
       .spans = SpanMarking::kTokenRunsInVideoContext,
       .temporal = TemporalRule::kIndex,
       .split_video_frames = true,
       .image_token = 151343,
       .video_start = 151341,
       .video_end = 151342},
  };
  return *rules;
}

const MultimodalRule& MultimodalRuleOf(MultimodalFamily family) {
  for (const MultimodalRule& r : MultimodalRules()) {
    if (r.family == family) return r;
  }
  return MultimodalRules().front();
}

const MultimodalRule* FindMultimodalRule(absl::string_view model_type) {
  for (const MultimodalRule& r : MultimodalRules()) {
    for (absl::string_view name : r.model_types) {
      if (name == model_type) return &r;
    }
  }
  return nullptr;
}

}  // namespace posenc::kernels
