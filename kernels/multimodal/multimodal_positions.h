// MultimodalPositions: the M-RoPE position ids [3, B, S] (t, h, w) of a prompt of text, images
// and videos, and the per-sequence deltas that give the decode steps' positions, as the vision-
// language models compute them (transformers' get_rope_index); and those decode positions.
//
// The rule, for every family (checked against transformers' own outputs, tests/golden_multimodal):
//   a text token gets (p, p, p) and the next p is p + 1; a vision span of merged grid
//   t x h' x w' (h' = h / m, w' = w / m, m = spatial_merge_size) starting at p gets
//   (p + T(i), p + j, p + k) for its tokens in (i, j, k) raster order, and the next token starts
//   at the span's largest position + 1. Padding slots (attention_mask 0) hold 1. The delta of a
//   sequence is max(its positions) + 1 - S (S the padded length); decode step k of a sequence
//   whose prompt is S long has position S + k + delta on all three axes.
// What differs per family is in the table of rules (multimodal_rules.cc, each naming its
// transformers source): how spans are found in the token ids, T(i), whether a video's
// temporal patches are spans of their own, and whether they are merged first (ERNIE-4.5-VL: a
// video grid t x h x w is a span of t / temporal_merge_size frames).
//
// Input: token ids [B, S] with the model's special token ids (spans are found as transformers
// finds them; every span's token count is checked against its grid, naming the span, the grid row
// and the expected and received counts), or spans (text runs, images and videos with their grid),
// one list per sequence, left-padded to the longest.
//
// Use: PlanMultimodalPositions -> allocate the plan's outputs -> RunMultimodalPositions (integer
// bookkeeping, the same on every backend); PlanMultimodalDecode -> RunMultimodalDecode.
#ifndef POSENC_KERNELS_MULTIMODAL_MULTIMODAL_POSITIONS_H_
#define POSENC_KERNELS_MULTIMODAL_MULTIMODAL_POSITIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

enum class MultimodalFamily { kQwen2Vl, kQwen25Vl, kQwen3Vl, kGlm4v, kErnie45Vl };

// How a family finds its vision spans in the token ids.
enum class SpanMarking {
  // Qwen: an image (video) span is the token after <vision_start> when it is the image (video)
  // token, and the grid's t*h'*w' tokens from there (Qwen2VLModel.get_rope_index).
  kVisionStartThenPad,
  // GLM-4V: every run of the image token is a span, a video frame inside <video_start> ..
  // <video_end>, an image outside (Glm4vModel.get_rope_index).
  kTokenRunsInVideoContext,
  // ERNIE-4.5-VL: a run of the image token outside <video_start> .. <video_end> is an image, a
  // run of the video token inside is a video (a whole video, all its frames); either token
  // elsewhere is text (Ernie4_5_VLModel.get_rope_index's token types).
  kTypedRunsInVideoContext,
};

// T(i), the temporal offset of a span's frame i.
enum class TemporalRule {
  // i (Qwen2-VL; Qwen3-VL and GLM-4V, whose video spans are single frames: 0).
  kIndex,
  // videos floor(i * second_per_grid_t * tokens_per_second) (in the arithmetic of the seconds'
  // dtype, as torch promotes), images 0 (Qwen2.5-VL).
  kSecondsTimesTokensPerSecond,
};

// A family's rule: one row of the table.
struct MultimodalRule {
  MultimodalFamily family;
  absl::string_view name;                      // "qwen2_vl", as the wire's enum less its prefix
  std::vector<absl::string_view> model_types;  // config.json model_type values
  absl::string_view source;                    // the transformers file and function
  SpanMarking spans;
  TemporalRule temporal;
  bool split_video_frames;  // each temporal patch of a video is a [1, h, w] span of its own
  // A video's temporal patches merged by vision_config.temporal_merge_size (its t' = t / that):
  // the default, 0 where the rule reads none (ERNIE-4.5-VL: 2).
  int64_t temporal_merge_size = 0;
  double tokens_per_second = 0;  // Qwen2.5-VL's default (vision_config.tokens_per_second)
  // The special token ids of the published checkpoints (config.json's defaults).
  int64_t image_token = -1, video_token = -1, vision_start = -1, video_start = -1, video_end = -1;
};

const MultimodalRule& MultimodalRuleOf(MultimodalFamily family);
// The family whose model_types include `model_type` (text or composite), or null.
const MultimodalRule* FindMultimodalRule(absl::string_view model_type);
const std::vector<MultimodalRule>& MultimodalRules();

// The special token ids the rule reads (-1: the family's default).
struct MultimodalTokenIds {
  int64_t image = -1;  // Qwen <|image_pad|>; GLM <|image|> (images and video frames); ERNIE's image
                       // placeholder
  int64_t video = -1;  // Qwen <|video_pad|>; ERNIE's video placeholder
  int64_t vision_start = -1;  // Qwen <|vision_start|>
  int64_t video_start = -1;   // GLM <|begin_of_video|>; ERNIE's video start
  int64_t video_end = -1;     // GLM <|end_of_video|>; ERNIE's video end
};

// One span of a sequence given as spans.
struct MultimodalSpan {
  enum class Kind { kText, kImage, kVideo };
  Kind kind = Kind::kText;
  int64_t text_tokens = 0;       // kText
  int64_t t = 0, h = 0, w = 0;   // kImage / kVideo: the grid in patches, before merging
  double second_per_grid = 1.0;  // kVideo, Qwen2.5-VL: seconds per temporal patch
};

struct MultimodalPositionsArgs {
  MultimodalFamily family = MultimodalFamily::kQwen2Vl;
  MultimodalTokenIds token_ids;
  int64_t spatial_merge_size = 2;
  double tokens_per_second = 0;     // 0: the family's default
  int64_t temporal_merge_size = 0;  // 0: the family's default (only ERNIE-4.5-VL's rule reads it)
  // Token form.
  ConstTensorView input_ids;           // INT32/INT64 [B, S]
  ConstTensorView image_grid_thw;      // INT32/INT64 [N, 3], in order over the batch
  ConstTensorView video_grid_thw;      // INT32/INT64 [M, 3]
  ConstTensorView second_per_grid_ts;  // FLOAT32/FLOAT64 [M] (Qwen2.5-VL; default 1)
  ConstTensorView attention_mask;      // INT32/INT64 [B, S] of 0/1 (token form only)
  // Span form (input_ids absent): one list per sequence.
  std::vector<std::vector<MultimodalSpan>> sequences;
};

// A vision span resolved: its grid (before merging) and seconds per temporal patch.
struct PlannedGrid {
  int64_t t = 0, h = 0, w = 0;
  int64_t t_merge = 1;  // the span has t / t_merge frames (ERNIE-4.5-VL's videos)
  double seconds = 1.0;
  bool seconds_float32 = false;  // T(i) in float arithmetic (the seconds came as FLOAT32)
  std::string row;               // the grid row it came from ("video_grid_thw[1]"), for errors
};

struct MultimodalPositionsPlan {
  const MultimodalRule* rule = nullptr;
  MultimodalTokenIds token_ids;  // the family's defaults filled in
  int64_t merge = 2;
  int64_t temporal_merge = 1;  // the videos' grids below are already divided by it
  double tokens_per_second = 0;
  int64_t batch = 0, seq = 0;
  ConstTensorView input_ids, attention_mask;
  std::vector<PlannedGrid> images, videos;  // token form (videos split per frame where the rule
                                            // says so)
  std::vector<std::vector<MultimodalSpan>> sequences;  // span form
  bool text_only = false;            // token form without any grid (transformers' text branch)
  OutputSpec position_ids;           // INT64 [3, B, S]
  OutputSpec mrope_position_deltas;  // INT64 [B, 1]
};

// Every check that needs no pass over the token ids: shapes, dtypes, grid values, the family's
// fields; the output sizes (bounded before allocation).
absl::StatusOr<MultimodalPositionsPlan> PlanMultimodalPositions(MultimodalPositionsArgs args);

// Fills position_ids and mrope_position_deltas (the planned INT64 shapes). INVALID_ARGUMENT when
// the token ids and the grids disagree: which sequence, span and grid row, the expected and the
// received token counts.
absl::Status RunMultimodalPositions(const MultimodalPositionsPlan& plan,
                                    const TensorView& position_ids, const TensorView& deltas);

// Decode steps: position_ids [3, B, K] = prompt_length + k + delta[b] on all three axes.
struct MultimodalDecodeArgs {
  ConstTensorView deltas;     // INT32/INT64 [B] or [B, 1] (MultimodalPositions' deltas)
  int64_t prompt_length = 0;  // the padded prompt length S (transformers' cache_position[0])
  int64_t num_steps = 1;      // K
};

struct MultimodalDecodePlan {
  ConstTensorView deltas;
  int64_t batch = 0, prompt_length = 0, num_steps = 0;
  OutputSpec position_ids;  // INT64 [3, B, K]
};

absl::StatusOr<MultimodalDecodePlan> PlanMultimodalDecode(const MultimodalDecodeArgs& args);
// INVALID_ARGUMENT (naming the sequence) when a position falls outside [0, 2^31).
absl::Status RunMultimodalDecode(const MultimodalDecodePlan& plan, const TensorView& position_ids);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_MULTIMODAL_MULTIMODAL_POSITIONS_H_
