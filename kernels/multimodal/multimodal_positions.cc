// MultimodalPositions: the plan (shapes, grids, the family's fields) and the run (the spans found
// in the token ids, or given, laid out by the family's rule); the decode steps.
#include "kernels/multimodal/multimodal_positions.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

using Kind = MultimodalSpan::Kind;

absl::Status CheckIntMatrix(const ConstTensorView& t, absl::string_view field, int64_t cols) {
  if (!IsIntDType(t.dtype)) {
    return Invalid(field, absl::StrCat("expected dtype INT32 or INT64, got ", DTypeName(t.dtype)));
  }
  if (t.shape.size() != 2 || (cols > 0 && t.shape[1] != cols)) {
    return Invalid(field, absl::StrCat("expected shape [", cols > 0 ? "N, 3" : "B, S", "], got ",
                                       ShapeString(t.shape)));
  }
  return absl::OkStatus();
}

// A grid's values: t, h, w >= 1, h and w multiples of the merge size, t*h'*w' < 2^31.
absl::Status CheckGrid(int64_t t, int64_t h, int64_t w, int64_t merge, absl::string_view field) {
  const std::string got = absl::StrCat("[", t, ", ", h, ", ", w, "]");
  if (t < 1 || h < 1 || w < 1 || t > kMaxPosition || h > kMaxPosition || w > kMaxPosition) {
    return Invalid(field, absl::StrCat("expected t, h, w in [1, 2^31), got ", got));
  }
  if (h % merge != 0 || w % merge != 0) {
    return Invalid(field, absl::StrCat("expected h and w multiples of spatial_merge_size ", merge,
                                       ", got ", got));
  }
  int64_t n = 0;
  if (!CheckedMul(t, h / merge, &n) || !CheckedMul(n, w / merge, &n) || n > kMaxPosition) {
    return Invalid(field, absl::StrCat("expected fewer than 2^31 tokens, got ", got));
  }
  return absl::OkStatus();
}

// A video's t: a multiple of the temporal merge size (ERNIE-4.5-VL's resampler pairs frames).
absl::Status CheckTemporalMerge(const PlannedGrid& g, absl::string_view field) {
  if (g.t % g.t_merge == 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat("expected t a multiple of temporal_merge_size ", g.t_merge,
                                     ", got [", g.t, ", ", g.h, ", ", g.w, "]"));
}

// The rows of an [N, 3] grid tensor, checked; the videos' seconds per grid (Qwen2.5-VL).
absl::Status ReadGrids(const MultimodalPositionsPlan& plan, const ConstTensorView& grid,
                       absl::string_view field, const ConstTensorView& seconds,
                       std::vector<PlannedGrid>* out) {
  if (grid.data == nullptr) return absl::OkStatus();
  POSENC_RETURN_IF_ERROR(CheckIntMatrix(grid, field, 3));
  for (int64_t i = 0; i < grid.shape[0]; ++i) {
    PlannedGrid g;
    g.row = absl::StrCat(field, "[", i, "]");
    g.t = LoadAsInt64(grid.data, grid.dtype, 3 * i);
    g.h = LoadAsInt64(grid.data, grid.dtype, 3 * i + 1);
    g.w = LoadAsInt64(grid.data, grid.dtype, 3 * i + 2);
    POSENC_RETURN_IF_ERROR(CheckGrid(g.t, g.h, g.w, plan.merge, g.row));
    if (field[0] == 'v') {
      g.t_merge = plan.temporal_merge;
      POSENC_RETURN_IF_ERROR(CheckTemporalMerge(g, g.row));
    }
    if (seconds.data != nullptr) {
      g.seconds = LoadAsDouble(seconds.data, seconds.dtype, i);
      g.seconds_float32 = seconds.dtype == DType::kFloat32;
    }
    out->push_back(std::move(g));
  }
  return absl::OkStatus();
}

absl::Status CheckSeconds(const MultimodalPositionsPlan& plan, const ConstTensorView& seconds,
                          const ConstTensorView& videos) {
  if (seconds.data == nullptr) return absl::OkStatus();
  if (plan.rule->temporal != TemporalRule::kSecondsTimesTokensPerSecond) {
    return Invalid("second_per_grid_ts", absl::StrCat("not read by family ", plan.rule->name,
                                                      " (only Qwen2.5-VL's rule reads it)"));
  }
  const int64_t m = videos.data == nullptr ? 0 : videos.shape.empty() ? 0 : videos.shape[0];
  if (seconds.dtype != DType::kFloat32 && seconds.dtype != DType::kFloat64) {
    return Invalid("second_per_grid_ts", absl::StrCat("expected dtype FLOAT32 or FLOAT64, got ",
                                                      DTypeName(seconds.dtype)));
  }
  if (seconds.shape.size() != 1 || seconds.shape[0] != m) {
    return Invalid("second_per_grid_ts",
                   absl::StrCat("expected shape [", m, "] (one per video_grid_thw row), got ",
                                ShapeString(seconds.shape)));
  }
  for (int64_t i = 0; i < m; ++i) {
    const double v = LoadAsDouble(seconds.data, seconds.dtype, i);
    if (!std::isfinite(v) || v < 0) {
      return Invalid(absl::StrCat("second_per_grid_ts[", i, "]"),
                     absl::StrCat("expected a finite number >= 0, got ", v));
    }
  }
  return absl::OkStatus();
}

// The rule's split of videos into single frames.
std::vector<PlannedGrid> SplitFrames(const std::vector<PlannedGrid>& videos) {
  std::vector<PlannedGrid> out;
  for (const PlannedGrid& g : videos) {
    for (int64_t f = 0; f < g.t; ++f) {
      PlannedGrid frame = g;
      frame.t = 1;
      frame.row = absl::StrCat(g.row, " frame ", f);
      out.push_back(frame);
    }
  }
  return out;
}

absl::Status PlanTokenForm(const MultimodalPositionsArgs& args, MultimodalPositionsPlan* plan) {
  POSENC_RETURN_IF_ERROR(CheckIntMatrix(args.input_ids, "input_ids", 0));
  plan->batch = args.input_ids.shape[0];
  plan->seq = args.input_ids.shape[1];
  if (plan->batch < 1 || plan->seq < 1) {
    return Invalid("input_ids", absl::StrCat("expected at least one sequence and one token, got "
                                             "shape ",
                                             ShapeString(args.input_ids.shape)));
  }
  plan->input_ids = args.input_ids;
  if (args.attention_mask.data != nullptr) {
    POSENC_RETURN_IF_ERROR(CheckIntMatrix(args.attention_mask, "attention_mask", 0));
    if (args.attention_mask.shape != args.input_ids.shape) {
      return Invalid("attention_mask",
                     absl::StrCat("expected input_ids' shape ", ShapeString(args.input_ids.shape),
                                  ", got ", ShapeString(args.attention_mask.shape)));
    }
    plan->attention_mask = args.attention_mask;
  }
  POSENC_RETURN_IF_ERROR(CheckSeconds(*plan, args.second_per_grid_ts, args.video_grid_thw));
  POSENC_RETURN_IF_ERROR(
      ReadGrids(*plan, args.image_grid_thw, "image_grid_thw", ConstTensorView{}, &plan->images));
  POSENC_RETURN_IF_ERROR(ReadGrids(*plan, args.video_grid_thw, "video_grid_thw",
                                   args.second_per_grid_ts, &plan->videos));
  if (plan->rule->split_video_frames) plan->videos = SplitFrames(plan->videos);
  plan->text_only = args.image_grid_thw.data == nullptr && args.video_grid_thw.data == nullptr;
  return absl::OkStatus();
}

absl::Status PlanSpanForm(MultimodalPositionsArgs& args, MultimodalPositionsPlan* plan) {
  if (args.attention_mask.data != nullptr || args.image_grid_thw.data != nullptr ||
      args.video_grid_thw.data != nullptr || args.second_per_grid_ts.data != nullptr) {
    return Invalid(args.attention_mask.data != nullptr ? "attention_mask" : "sequences",
                   "spans carry their own grids and padding: attention_mask, image_grid_thw, "
                   "video_grid_thw and second_per_grid_ts go with input_ids only");
  }
  plan->batch = static_cast<int64_t>(args.sequences.size());
  for (size_t b = 0; b < args.sequences.size(); ++b) {
    int64_t length = 0;
    for (size_t i = 0; i < args.sequences[b].size(); ++i) {
      const MultimodalSpan& s = args.sequences[b][i];
      const std::string field = absl::StrCat("sequences[", b, "].spans[", i, "]");
      int64_t n = s.text_tokens;
      if (s.kind == Kind::kText) {
        if (n < 1 || n > kMaxPosition) {
          return Invalid(field, absl::StrCat("expected a text run of 1 .. 2^31-1 tokens, got ", n));
        }
      } else {
        POSENC_RETURN_IF_ERROR(CheckGrid(s.t, s.h, s.w, plan->merge, field));
        if (s.kind == Kind::kVideo &&
            (!std::isfinite(s.second_per_grid) || s.second_per_grid < 0)) {
          return Invalid(field, absl::StrCat("expected second_per_grid finite and >= 0, got ",
                                             s.second_per_grid));
        }
        if (s.kind == Kind::kVideo) {
          POSENC_RETURN_IF_ERROR(CheckTemporalMerge(
              {.t = s.t, .h = s.h, .w = s.w, .t_merge = plan->temporal_merge}, field));
        }
        n = (s.kind == Kind::kVideo ? s.t / plan->temporal_merge : s.t) * (s.h / plan->merge) *
            (s.w / plan->merge);
      }
      if (!CheckedAdd(length, n, &length) || length > kMaxPosition) {
        return Invalid(absl::StrCat("sequences[", b, "]"), "expected fewer than 2^31 tokens");
      }
    }
    plan->seq = std::max(plan->seq, length);
  }
  if (plan->batch < 1 || plan->seq < 1) {
    return Invalid("sequences", "expected at least one sequence with at least one token");
  }
  plan->sequences = std::move(args.sequences);
  return absl::OkStatus();
}

// ---- The run ------------------------------------------------------------------------------

// The positions of one sequence's real tokens, built span by span.
class SequenceLayout {
 public:
  SequenceLayout(const MultimodalPositionsPlan& plan, int64_t b) : plan_(plan), b_(b) {}

  void Text(int64_t n) {
    for (int64_t k = 0; k < n; ++k) Push(next_ + k, next_ + k, next_ + k);
    next_ += n;
  }

  // A vision span of grid g at the next position; `video` selects Qwen2.5-VL's time rule.
  absl::Status Vision(const PlannedGrid& g, bool video, absl::string_view what) {
    const int64_t hh = g.h / plan_.merge, ww = g.w / plan_.merge, p = next_;
    int64_t top = p;
    for (int64_t i = 0; i < g.t / g.t_merge; ++i) {
      const int64_t ti = TemporalOffset(g, video, i);
      if (ti > kMaxPosition - p || hh - 1 > kMaxPosition - p || ww - 1 > kMaxPosition - p) {
        return Invalid(
            absl::StrCat(plan_.input_ids.data ? "input_ids[" : "sequences[", b_, "]"),
            absl::StrCat(what, ": positions past 2^31 - 1 (frame ", i, " at ", p, " + ", ti, ")"));
      }
      for (int64_t j = 0; j < hh; ++j) {
        for (int64_t k = 0; k < ww; ++k) Push(p + ti, p + j, p + k);
      }
      top = std::max({top, p + ti, p + hh - 1, p + ww - 1});
    }
    next_ = top + 1;
    return absl::OkStatus();
  }

  int64_t size() const { return static_cast<int64_t>(t_.size()); }
  int64_t max() const { return next_ - 1; }  // -1 when empty
  const std::vector<int64_t>& axis(int a) const { return a == 0 ? t_ : a == 1 ? h_ : w_; }

 private:
  int64_t TemporalOffset(const PlannedGrid& g, bool video, int64_t i) const {
    if (plan_.rule->temporal == TemporalRule::kIndex) return i;
    if (!video) return 0;
    if (g.seconds_float32) {
      const float v = static_cast<float>(i) * static_cast<float>(g.seconds) *
                      static_cast<float>(plan_.tokens_per_second);
      return static_cast<int64_t>(std::floor(std::min<double>(v, 4e18)));
    }
    const double v = static_cast<double>(i) * g.seconds * plan_.tokens_per_second;
    return static_cast<int64_t>(std::floor(std::min(v, 4e18)));
  }
  void Push(int64_t t, int64_t h, int64_t w) {
    t_.push_back(t);
    h_.push_back(h);
    w_.push_back(w);
  }

  const MultimodalPositionsPlan& plan_;
  int64_t b_;
  int64_t next_ = 0;
  std::vector<int64_t> t_, h_, w_;
};

// The grids of the token form, consumed in order over the batch.
struct GridQueue {
  const std::vector<PlannedGrid>* grids;
  const char* kind;   // "image" or "video"
  const char* field;  // "image_grid_thw" or "video_grid_thw"
  const char* unit;   // what a grid row is: "images", "videos" or "video frame spans"
  size_t next = 0;
};

// The real tokens of sequence b (attention_mask 1).
std::vector<int64_t> RealTokens(const MultimodalPositionsPlan& plan, int64_t b) {
  std::vector<int64_t> out;
  const ConstTensorView& ids = plan.input_ids;
  for (int64_t s = 0; s < plan.seq; ++s) {
    const int64_t i = b * plan.seq + s;
    const bool real = plan.attention_mask.data == nullptr ||
                      LoadAsInt64(plan.attention_mask.data, plan.attention_mask.dtype, i) != 0;
    if (real) out.push_back(LoadAsInt64(ids.data, ids.dtype, i));
  }
  return out;
}

// How many times `token` repeats from index i.
int64_t RunLength(const std::vector<int64_t>& tokens, size_t i, int64_t token) {
  size_t j = i;
  while (j < tokens.size() && tokens[j] == token) ++j;
  return static_cast<int64_t>(j - i);
}

// The vision span of `run` tokens (`token`) at real token i of sequence b, against the next grid
// of `queue`: the token count must be the grid's.
absl::Status TakeSpan(const MultimodalPositionsPlan& plan, SequenceLayout* layout, GridQueue* queue,
                      int64_t b, size_t i, int64_t run, int64_t token) {
  const std::string where = absl::StrCat("input_ids[", b, "]");
  const bool video = queue->field[0] == 'v';
  if (queue->next >= queue->grids->size()) {
    return Invalid(
        where, absl::StrCat("the ", queue->kind, " span at token ", i,
                            " has no grid: ", queue->field, " holds ", queue->grids->size(), " ",
                            queue->unit, " for the whole batch, all taken by earlier spans"));
  }
  const PlannedGrid& g = (*queue->grids)[queue->next++];
  const int64_t expected = g.t / g.t_merge * (g.h / plan.merge) * (g.w / plan.merge);
  if (run != expected) {
    return Invalid(
        where, absl::StrCat(queue->kind, " span at token ", i, " (", g.row, " = [", g.t, ", ", g.h,
                            ", ", g.w, "], ", plan.merge, "x", plan.merge, " merged",
                            g.t_merge > 1 ? absl::StrCat(", t by ", g.t_merge) : std::string(),
                            "): expected ", expected, " ", queue->kind, " tokens (", token,
                            "), got ", run));
  }
  return layout->Vision(g, video, absl::StrCat(queue->kind, " span at token ", i));
}

// Qwen: <vision_start> then the image (video) token starts a span of the grid's tokens.
absl::Status LayoutQwen(const MultimodalPositionsPlan& plan, const std::vector<int64_t>& tokens,
                        int64_t b, GridQueue* images, GridQueue* videos, SequenceLayout* layout) {
  const MultimodalTokenIds& id = plan.token_ids;
  size_t i = 0;
  while (i < tokens.size()) {
    const int64_t tok = tokens[i];
    const bool pad = tok == id.image || tok == id.video;
    if (!pad) {
      layout->Text(1);
      ++i;
      continue;
    }
    GridQueue* queue = tok == id.image ? images : videos;
    if (i == 0 || tokens[i - 1] != id.vision_start) {
      return Invalid(absl::StrCat("input_ids[", b, "]"),
                     absl::StrCat(queue->kind, " token ", tok, " at token ", i,
                                  " is not in a span: expected it after <vision_start> (",
                                  id.vision_start, "), got ", i == 0 ? "none" : "token ",
                                  i == 0 ? std::string() : absl::StrCat(tokens[i - 1])));
    }
    const int64_t run = RunLength(tokens, i, tok);
    POSENC_RETURN_IF_ERROR(TakeSpan(plan, layout, queue, b, i, run, tok));
    i += static_cast<size_t>(run);
  }
  return absl::OkStatus();
}

// GLM-4V and ERNIE-4.5-VL: runs of the vision tokens, typed by whether they lie between
// <video_start> and <video_end>. GLM-4V: the image token, a video frame inside, an image outside.
// ERNIE-4.5-VL: the image token outside is an image, the video token inside a whole video; either
// elsewhere is text.
absl::Status LayoutRuns(const MultimodalPositionsPlan& plan, const std::vector<int64_t>& tokens,
                        int64_t b, GridQueue* images, GridQueue* videos, SequenceLayout* layout) {
  const MultimodalTokenIds& id = plan.token_ids;
  const bool typed = plan.rule->spans == SpanMarking::kTypedRunsInVideoContext;
  bool in_video = false;
  size_t i = 0;
  while (i < tokens.size()) {
    const int64_t tok = tokens[i];
    if (tok == id.video_start) in_video = true;
    if (tok == id.video_end) in_video = false;
    GridQueue* queue = nullptr;
    if (tok == id.image && !(typed && in_video)) queue = in_video ? videos : images;
    if (typed && in_video && tok == id.video) queue = videos;
    if (queue == nullptr) {
      layout->Text(1);
      ++i;
      continue;
    }
    const int64_t run = RunLength(tokens, i, tok);
    POSENC_RETURN_IF_ERROR(TakeSpan(plan, layout, queue, b, i, run, tok));
    i += static_cast<size_t>(run);
  }
  return absl::OkStatus();
}

// The family's way of finding spans.
absl::Status LayoutTokens(const MultimodalPositionsPlan& plan, const std::vector<int64_t>& tokens,
                          int64_t b, GridQueue* images, GridQueue* videos, SequenceLayout* layout) {
  switch (plan.rule->spans) {
    case SpanMarking::kVisionStartThenPad:
      return LayoutQwen(plan, tokens, b, images, videos, layout);
    case SpanMarking::kTokenRunsInVideoContext:
    case SpanMarking::kTypedRunsInVideoContext:
      return LayoutRuns(plan, tokens, b, images, videos, layout);
  }
  return absl::OkStatus();
}

// Every grid of the token form must have found its span.
absl::Status CheckAllTaken(const GridQueue& q) {
  if (q.next == q.grids->size()) return absl::OkStatus();
  return Invalid(q.field,
                 absl::StrCat(q.grids->size(), " ", q.unit, " given, the input_ids hold ", q.next,
                              " (the first without a span: ", (*q.grids)[q.next].row, ")"));
}

// The span form's sequence b.
absl::Status LayoutSpans(const MultimodalPositionsPlan& plan, int64_t b, SequenceLayout* layout) {
  const std::vector<MultimodalSpan>& spans = plan.sequences[b];
  for (size_t i = 0; i < spans.size(); ++i) {
    const MultimodalSpan& s = spans[i];
    if (s.kind == Kind::kText) {
      layout->Text(s.text_tokens);
      continue;
    }
    const bool video = s.kind == Kind::kVideo;
    const PlannedGrid g{.t = s.t,
                        .h = s.h,
                        .w = s.w,
                        .t_merge = video ? plan.temporal_merge : 1,
                        .seconds = s.second_per_grid};
    const std::string what = absl::StrCat("spans[", i, "]");
    if (video && plan.rule->split_video_frames) {
      PlannedGrid frame = g;
      frame.t = 1;
      for (int64_t f = 0; f < g.t; ++f) POSENC_RETURN_IF_ERROR(layout->Vision(frame, true, what));
    } else {
      POSENC_RETURN_IF_ERROR(layout->Vision(g, video, what));
    }
  }
  return absl::OkStatus();
}

// Sequence b's positions into the outputs: its real tokens in order, padding slots 1 (token
// form: where attention_mask is 0; span form: on the left).
void WriteSequence(const MultimodalPositionsPlan& plan, int64_t b, const SequenceLayout& layout,
                   int64_t* out, int64_t* delta) {
  const int64_t n = plan.batch * plan.seq;
  const int64_t pad = plan.seq - layout.size();
  int64_t k = 0;
  bool has_pad = false;
  for (int64_t s = 0; s < plan.seq; ++s) {
    const int64_t i = b * plan.seq + s;
    const bool real =
        plan.input_ids.data != nullptr
            ? plan.attention_mask.data == nullptr ||
                  LoadAsInt64(plan.attention_mask.data, plan.attention_mask.dtype, i) != 0
            : s >= pad;
    has_pad = has_pad || !real;
    for (int a = 0; a < 3; ++a) out[a * n + i] = real ? layout.axis(a)[k] : 1;
    if (real) ++k;
  }
  // transformers' text branch (no grids) takes the maximum over the padding slots' 1 too.
  int64_t top = layout.max();
  if (plan.text_only && has_pad) top = std::max<int64_t>(top, 1);
  *delta = top + 1 - plan.seq;
}

}  // namespace

absl::StatusOr<MultimodalPositionsPlan> PlanMultimodalPositions(MultimodalPositionsArgs args) {
  MultimodalPositionsPlan plan;
  plan.rule = &MultimodalRuleOf(args.family);
  plan.token_ids = args.token_ids;
  MultimodalTokenIds& id = plan.token_ids;
  if (id.image < 0) id.image = plan.rule->image_token;
  if (id.video < 0) id.video = plan.rule->video_token;
  if (id.vision_start < 0) id.vision_start = plan.rule->vision_start;
  if (id.video_start < 0) id.video_start = plan.rule->video_start;
  if (id.video_end < 0) id.video_end = plan.rule->video_end;
  if (args.spatial_merge_size < 1 || args.spatial_merge_size > 64) {
    return Invalid("spatial_merge_size",
                   absl::StrCat("expected 1 .. 64, got ", args.spatial_merge_size));
  }
  plan.merge = args.spatial_merge_size;
  if (!std::isfinite(args.tokens_per_second) || args.tokens_per_second < 0) {
    return Invalid("tokens_per_second",
                   absl::StrCat("expected a finite number >= 0, got ", args.tokens_per_second));
  }
  plan.tokens_per_second =
      args.tokens_per_second > 0 ? args.tokens_per_second : plan.rule->tokens_per_second;
  if (args.temporal_merge_size != 0 && plan.rule->temporal_merge_size == 0) {
    return Invalid("temporal_merge_size",
                   absl::StrCat("not read by family ", plan.rule->name,
                                " (only ERNIE-4.5-VL's rule merges a video's frames)"));
  }
  if (args.temporal_merge_size < 0 || args.temporal_merge_size > 64) {
    return Invalid("temporal_merge_size",
                   absl::StrCat("expected 1 .. 64, got ", args.temporal_merge_size));
  }
  plan.temporal_merge = args.temporal_merge_size > 0         ? args.temporal_merge_size
                        : plan.rule->temporal_merge_size > 0 ? plan.rule->temporal_merge_size
                                                             : 1;
  if (args.input_ids.data != nullptr) {
    if (!args.sequences.empty()) {
      return Invalid("sequences", "give the prompt as input_ids or as sequences, not both");
    }
    POSENC_RETURN_IF_ERROR(PlanTokenForm(args, &plan));
  } else {
    POSENC_RETURN_IF_ERROR(PlanSpanForm(args, &plan));
  }
  int64_t elements = 0;
  if (!CheckedMul(3 * plan.batch, plan.seq, &elements)) {
    return Invalid("input_ids", "3 * batch * seq overflows");
  }
  plan.position_ids = {"position_ids", DType::kInt64, {3, plan.batch, plan.seq}};
  plan.mrope_position_deltas = {"mrope_position_deltas", DType::kInt64, {plan.batch, 1}};
  return plan;
}

absl::Status RunMultimodalPositions(const MultimodalPositionsPlan& plan,
                                    const TensorView& position_ids, const TensorView& deltas) {
  GridQueue images{&plan.images, "image", "image_grid_thw", "images"};
  GridQueue videos{&plan.videos, "video", "video_grid_thw",
                   plan.rule->split_video_frames ? "video frame spans" : "videos"};
  auto* out = static_cast<int64_t*>(position_ids.data);
  auto* delta = static_cast<int64_t*>(deltas.data);
  for (int64_t b = 0; b < plan.batch; ++b) {
    SequenceLayout layout(plan, b);
    if (plan.input_ids.data == nullptr) {
      POSENC_RETURN_IF_ERROR(LayoutSpans(plan, b, &layout));
    } else {
      const std::vector<int64_t> tokens = RealTokens(plan, b);
      POSENC_RETURN_IF_ERROR(LayoutTokens(plan, tokens, b, &images, &videos, &layout));
    }
    WriteSequence(plan, b, layout, out, delta + b);
  }
  if (plan.input_ids.data != nullptr) {
    POSENC_RETURN_IF_ERROR(CheckAllTaken(images));
    POSENC_RETURN_IF_ERROR(CheckAllTaken(videos));
  }
  return absl::OkStatus();
}

absl::StatusOr<MultimodalDecodePlan> PlanMultimodalDecode(const MultimodalDecodeArgs& args) {
  MultimodalDecodePlan plan;
  const ConstTensorView& d = args.deltas;
  if (d.data == nullptr) return Invalid("decode.deltas", "required (MultimodalPositions' deltas)");
  if (!IsIntDType(d.dtype)) {
    return Invalid("decode.deltas",
                   absl::StrCat("expected dtype INT32 or INT64, got ", DTypeName(d.dtype)));
  }
  if (d.shape.empty() || d.shape.size() > 2 || d.shape[0] < 1 ||
      (d.shape.size() == 2 && d.shape[1] != 1)) {
    return Invalid("decode.deltas",
                   absl::StrCat("expected shape [B] or [B, 1], got ", ShapeString(d.shape)));
  }
  if (args.prompt_length < 0 || args.prompt_length > kMaxPosition) {
    return Invalid("decode.prompt_length",
                   absl::StrCat("expected 0 .. 2^31 - 1, got ", args.prompt_length));
  }
  if (args.num_steps < 1 || args.num_steps > kMaxPosition) {
    return Invalid("decode.num_steps",
                   absl::StrCat("expected 1 .. 2^31 - 1, got ", args.num_steps));
  }
  plan.deltas = d;
  plan.batch = d.shape[0];
  plan.prompt_length = args.prompt_length;
  plan.num_steps = args.num_steps;
  plan.position_ids = {"position_ids", DType::kInt64, {3, plan.batch, plan.num_steps}};
  return plan;
}

absl::Status RunMultimodalDecode(const MultimodalDecodePlan& plan, const TensorView& position_ids) {
  auto* out = static_cast<int64_t*>(position_ids.data);
  const int64_t n = plan.batch * plan.num_steps;
  for (int64_t b = 0; b < plan.batch; ++b) {
    const int64_t delta = LoadAsInt64(plan.deltas.data, plan.deltas.dtype, b);
    const bool small = delta >= -kMaxPosition && delta <= kMaxPosition;  // no overflow below
    const int64_t first = small ? plan.prompt_length + delta : -1;
    if (first < 0 || first > kMaxPosition - (plan.num_steps - 1)) {
      return Invalid(
          absl::StrCat("decode.deltas[", b, "]"),
          absl::StrCat("prompt_length ", plan.prompt_length, " + delta ", delta, " + steps 0 .. ",
                       plan.num_steps - 1, " leaves the positions [0, 2^31)"));
    }
    for (int64_t k = 0; k < plan.num_steps; ++k) {
      for (int a = 0; a < 3; ++a) out[a * n + b * plan.num_steps + k] = first + k;
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc::kernels
