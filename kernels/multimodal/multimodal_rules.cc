// The table of multimodal position rules (multimodal_positions.h): one row per family, each
// naming the transformers function it repeats.
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
      // ERNIE-4.5-VL, as transformers 4.57 states it (models/ernie4_5_vl/modular_ernie4_5_vl.py,
      // Ernie4_5_VLModel.get_rope_index; ernie4_5_vl_moe's first version, which reads the same
      // token types from mm_token_type_ids, agrees): an image run of grid t x h x w is t x h' x w'
      // tokens at (p + i, p + j, p + k); a video run is (t / temporal_merge_size) x h' x w' tokens
      // laid out alike; the next token starts at the span's largest position + 1; padding slots
      // hold 1; deltas as Qwen's. transformers 5's rewrite (Ernie4_5_VLMoeModel.get_rope_index
      // with Qwen2VLModel.get_vision_position_ids) starts the next token at p + max(h', w') and
      // writes padding 0: the same ids for every image and for every video whose t / 2 <=
      // max(h', w'), other ids for longer videos and padding (README, "ERNIE-4.5-VL").
      {.family = MultimodalFamily::kErnie45Vl,
       .name = "ernie4_5_vl",
       .model_types = {"ernie4_5_vl", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text"},
       .source = "models/ernie4_5_vl/modular_ernie4_5_vl.py, Ernie4_5_VLModel.get_rope_index "
                 "(transformers 4.57; videos merged by vision_config.temporal_merge_size)",
       .spans = SpanMarking::kTypedRunsInVideoContext,
       .temporal = TemporalRule::kIndex,
       .split_video_frames = false,
       .temporal_merge_size = 2,  // Ernie4_5_VLMoeVisionConfig's default
       .image_token = 100295,
       .video_token = 103367,
       .video_start = 101306,
       .video_end = 101307},
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
