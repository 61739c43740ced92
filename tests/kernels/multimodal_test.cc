// The general rules behind the multimodal golden cases, on hand-made inputs: the frequency-to-
// axis map's presets against an explicit map and with every scaling, RerotateKeys against a direct
// rotation across the whole position range on every backend, MultimodalPositions' token and span
// forms against each other and an independent restatement over grids, batch sizes and paddings,
// VisionPositions' orders, and the errors of each.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"
#include "tests/common/cuda_math_backend.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;
using ::posenc::testing::RandomBuffer;
using ::testing::HasSubstr;

ConstTensorView Ints(const std::vector<int64_t>& v, Shape shape) {
  return {DType::kInt64, std::move(shape), v.data()};
}

std::vector<int64_t> Int64s(const Buffer& b) {
  const auto* p = static_cast<const int64_t*>(b.view.data);
  return std::vector<int64_t>(p, p + b.size());
}

// ---- The frequency-to-axis map ------------------------------------------------------------

std::vector<int64_t> AxesOf(const RopeConfig& c) {
  std::vector<int64_t> out;
  for (int64_t j = 0; j < c.rotary_dim.value_or(c.head_dim) / 2; ++j) {
    out.push_back(MropeComponent(c, j));
  }
  return out;
}

TEST(FrequencyAxesTest, PresetsNameTheirAxesAndFrequencies) {
  RopeConfig c;
  c.head_dim = 16;  // 8 slots
  c.mrope_section = {2, 3, 3};
  EXPECT_EQ(AxesOf(c), (std::vector<int64_t>{0, 0, 1, 1, 1, 2, 2, 2}));
  c.mrope_section = {2, 2, 2, 2};  // a fourth axis
  EXPECT_EQ(AxesOf(c), (std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(RopePositionAxes(c), 4);
  // ERNIE: [s_h, s_w, s_t] = [3, 3, 2]: h/w alternate over slots 0..5 at frequencies 0,3,1,4,2,5.
  c.mrope_section = {3, 3, 2};
  c.mrope_layout = MropeLayout::kAlternating;
  EXPECT_EQ(AxesOf(c), (std::vector<int64_t>{1, 2, 1, 2, 1, 2, 0, 0}));
  std::vector<int64_t> sources;
  for (int64_t j = 0; j < 8; ++j) sources.push_back(FrequencySource(c, j));
  EXPECT_EQ(sources, (std::vector<int64_t>{0, 3, 1, 4, 2, 5, 6, 7}));
  // Vision: halves over frequencies 2i; Pixtral's odd ones on the second axis.
  c.mrope_section.clear();
  c.mrope_layout = MropeLayout::kVision2d;
  EXPECT_EQ(AxesOf(c), (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(FrequencySource(c, 5), 2);
  c.mrope_layout = MropeLayout::kVision2dEvenOdd;
  EXPECT_EQ(FrequencySource(c, 5), 3);
  EXPECT_EQ(RopePositionAxes(c), 2);
  NormalizePositionAxes(&c);
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{4, 4}));
  EXPECT_TRUE(ValidateRopeConfig(c).ok());
}

// A preset and the explicit frequency_axes of the same slots rotate alike (the preset's own
// frequencies: CONTIGUOUS and INTERLEAVED keep slot j at frequency j), with YaRN on top.
TEST(FrequencyAxesTest, ExplicitMapEqualsPresetUnderEveryLayoutAndYarn) {
  const std::vector<int64_t> ids = {5, 90, 1234, 7, 300000, 11, 2, 65536, 3};  // [3, 3]
  for (MropeLayout layout : {MropeLayout::kContiguous, MropeLayout::kInterleaved}) {
    RopeConfig preset;
    preset.head_dim = 32;
    preset.mrope_section = {6, 5, 5};
    preset.mrope_layout = layout;
    preset.scaling.type = RopeScalingType::kYarn;
    preset.scaling.factor = 4;
    preset.max_position_embeddings = 4096;
    RopeConfig explicit_map = preset;
    explicit_map.mrope_section.clear();
    explicit_map.frequency_axes = AxesOf(preset);
    for (const auto& backend : ::posenc::testing::EveryTestBackend()) {
      std::vector<std::vector<double>> outs;
      for (const RopeConfig& c : {preset, explicit_map}) {
        auto plan = PlanApplyRope(
            {.config = c,
             .layout = TensorLayout::kTHD,
             .q = RandomBuffer(DType::kFloat64, {3, 2, 32}, 1, -1, 1).view,
             .positions = {.kind = PositionSpec::Kind::kIds, .ids = Ints(ids, {3, 3})}});
        ASSERT_TRUE(plan.ok()) << plan.status();
        Buffer q = RandomBuffer(DType::kFloat64, {3, 2, 32}, 1, -1, 1);
        ASSERT_TRUE(RunApplyRope(*backend, *plan, nullptr, q.view, TensorView{}).ok());
        outs.emplace_back();
        for (int64_t i = 0; i < q.size(); ++i) outs.back().push_back(q.at(i));
      }
      EXPECT_EQ(outs[0], outs[1]) << backend->name();
    }
  }
}

TEST(FrequencyAxesTest, ValidationNamesTheField) {
  RopeConfig c;
  c.head_dim = 16;
  c.mrope_section = {3, 3, 2};
  c.mrope_layout = MropeLayout::kAlternating;
  EXPECT_TRUE(ValidateRopeConfig(c).ok());
  c.mrope_section = {4, 2, 2};
  EXPECT_THAT(ValidateRopeConfig(c).message(), HasSubstr("s_h == s_w"));
  c.mrope_layout = MropeLayout::kInterleaved;
  c.mrope_section = {4, 4};
  EXPECT_THAT(ValidateRopeConfig(c).message(), HasSubstr("config.mrope_section: expected 3"));
  c.mrope_layout = MropeLayout::kContiguous;
  c.mrope_section = {1, 1, 1, 1, 4};
  EXPECT_THAT(ValidateRopeConfig(c).message(), HasSubstr("2 .. 4 entries"));
  c.mrope_section = {};
  c.frequency_axes = {0, 1, 2, 3, 0, 1, 2, 4};
  EXPECT_THAT(ValidateRopeConfig(c).message(), HasSubstr("config.frequency_axes[7]"));
  c.frequency_axes = {0, 1};
  EXPECT_THAT(ValidateRopeConfig(c).message(), HasSubstr("expected rotary_dim/2 = 8 entries"));
  c.frequency_axes.clear();
  c.head_dim = 18;
  c.mrope_layout = MropeLayout::kVision2d;
  EXPECT_THAT(ValidateRopeConfig(c).message(), HasSubstr("multiple of 4"));
  // Positions then need the leading axis.
  c.head_dim = 16;
  std::vector<int64_t> ids = {1, 2, 3};
  auto plan = PlanRopeCache(
      {.config = c, .positions = {.kind = PositionSpec::Kind::kIds, .ids = Ints(ids, {3, 1})}});
  EXPECT_THAT(plan.status().message(), HasSubstr("expected ids of shape [2, ...]"));
}

// ---- RerotateKeys -------------------------------------------------------------------------

// k rotated (FLOAT32) at p, moved by delta, against the reference's FLOAT64 rotation of the
// unrotated key at p + delta: within 1e-6 of the key's magnitude for positions up to 2^31 - 1.
void ExpectRerotationMatchesDirect(const Backend& backend, RopeConfig config, TensorLayout layout,
                                   const Shape& shape, const std::vector<int64_t>& p,
                                   const Shape& p_shape, const std::vector<int64_t>& delta,
                                   const Shape& delta_shape, const std::vector<int64_t>& target) {
  const auto reference = MakeReferenceBackend();
  const Buffer raw = RandomBuffer(DType::kFloat64, shape, 7, -2, 2);
  auto rotate = [&](const std::vector<int64_t>& at, DType dtype) {
    Buffer x(dtype, shape);
    for (int64_t i = 0; i < raw.size(); ++i) x.set(i, raw.at(i));
    auto plan =
        PlanApplyRope({.config = config,
                       .layout = layout,
                       .q = x.view,
                       .positions = {.kind = PositionSpec::Kind::kIds, .ids = Ints(at, p_shape)}});
    EXPECT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(RunApplyRope(*reference, *plan, nullptr, x.view, TensorView{}).ok());
    return x;
  };
  Buffer k = rotate(p, DType::kFloat32);
  const Buffer want = rotate(target, DType::kFloat64);
  auto plan =
      PlanRerotateKeys({.config = config,
                        .layout = layout,
                        .k = k.view,
                        .positions = {.kind = PositionSpec::Kind::kIds, .ids = Ints(p, p_shape)},
                        .delta = Ints(delta, delta_shape)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto run = RunRerotateKeys(backend, *plan, nullptr, k.view);
  ASSERT_TRUE(run.ok()) << run.status();
  double worst = 0;
  for (int64_t i = 0; i < k.size(); ++i) worst = std::max(worst, std::fabs(k.at(i) - want.at(i)));
  EXPECT_LE(worst, 1e-6 * 2) << backend.name() << " " << backend.detail();  // |k| <= 2
}

TEST(RerotateKeysTest, OneRotationMatchesADirectRotationAcrossTheWholeRange) {
  const int64_t top = kMaxPosition;
  const std::vector<int64_t> p = {0, 1, top, top - 5, 1 << 20, 123456789, 70000, top};
  const std::vector<int64_t> d = {top, 5, -top, 5, -(1 << 20), 1000000000, -69999, 0};
  std::vector<int64_t> target(p.size());
  for (size_t i = 0; i < p.size(); ++i) target[i] = p[i] + d[i];
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
    RopeConfig config;
    config.head_dim = 64;
    config.rotary_dim = 48;  // partial: the last 16 channels untouched
    config.base = 500000;
    config.style = style;
    for (const auto& backend : ::posenc::testing::EveryTestBackend()) {
      ExpectRerotationMatchesDirect(*backend, config, TensorLayout::kTHD, {8, 2, 64}, p, {8}, d,
                                    {8}, target);
    }
  }
}

TEST(RerotateKeysTest, PerSequenceAndPerAxisDeltas) {
  // BSHD [2, 3, 1, 16]: one delta per sequence.
  RopeConfig config;
  config.head_dim = 16;
  const std::vector<int64_t> p = {10, 11, 12, 4000, 4001, 4002};
  const std::vector<int64_t> d = {-10, 7};
  const std::vector<int64_t> target = {0, 1, 2, 4007, 4008, 4009};
  for (const auto& backend : ::posenc::testing::EveryTestBackend()) {
    ExpectRerotationMatchesDirect(*backend, config, TensorLayout::kBSHD, {2, 3, 1, 16}, p, {2, 3},
                                  d, {2}, target);
  }
  // M-RoPE: a delta per axis and token, of mixed signs within a token.
  config.mrope_section = {2, 3, 3};
  config.mrope_layout = MropeLayout::kInterleaved;
  const std::vector<int64_t> pm = {50, 60, 5, 6, 7, 8};           // [3, 2]
  const std::vector<int64_t> dm = {-40, 100, 9, -6, 0, 1 << 24};  // [3, 2]
  std::vector<int64_t> tm(6);
  for (int i = 0; i < 6; ++i) tm[i] = pm[i] + dm[i];
  for (const auto& backend : ::posenc::testing::EveryTestBackend()) {
    ExpectRerotationMatchesDirect(*backend, config, TensorLayout::kTHD, {2, 3, 16}, pm, {3, 2}, dm,
                                  {3, 2}, tm);
  }
}

TEST(RerotateKeysTest, ErrorsNameTheField) {
  RopeConfig config;
  config.head_dim = 8;
  Buffer k(DType::kFloat32, {2, 1, 8});
  const std::vector<int64_t> p = {3, 4};
  auto plan_of = [&](const std::vector<int64_t>& d, Shape shape, RopeConfig c) {
    return PlanRerotateKeys({.config = c,
                             .layout = TensorLayout::kTHD,
                             .k = k.view,
                             .positions = {.kind = PositionSpec::Kind::kIds, .ids = Ints(p, {2})},
                             .delta = Ints(d, std::move(shape))});
  };
  const std::vector<int64_t> d3 = {1, 2, 3};
  EXPECT_THAT(plan_of(d3, {3}, config).status().message(),
              HasSubstr("delta: expected shape [], [2]"));
  RopeConfig inverse = config;
  inverse.inverse = true;
  EXPECT_THAT(plan_of(d3, {}, inverse).status().message(), HasSubstr("config.inverse"));
  const std::vector<int64_t> back = {-3, -5};
  auto plan = plan_of(back, {2}, config);
  ASSERT_TRUE(plan.ok());
  const auto run = RunRerotateKeys(*MakeReferenceBackend(), *plan, nullptr, k.view);
  EXPECT_THAT(run.status().message(),
              HasSubstr("delta: token 1 at position 4 moves by -5, expected a target"));
  RopeConfig mrope = config;
  mrope.mrope_section = {2, 1, 1};
  const std::vector<int64_t> p3 = {3, 4, 3, 4, 3, 4};
  EXPECT_THAT(
      PlanRerotateKeys({.config = mrope,
                        .layout = TensorLayout::kTHD,
                        .k = k.view,
                        .positions = {.kind = PositionSpec::Kind::kIds, .ids = Ints(p3, {3, 2})},
                        .delta = Ints(back, {2})})
          .status()
          .message(),
      HasSubstr("a leading axis of 3"));
}

// ---- MultimodalPositions ------------------------------------------------------------------

// The rule restated over spans (README of tests/golden_multimodal), left-padded to `seq`.
struct Restated {
  std::vector<int64_t> ids;     // [3, B, S]
  std::vector<int64_t> deltas;  // [B]
};

Restated Restate(const std::vector<std::vector<MultimodalSpan>>& seqs, MultimodalFamily family,
                 int64_t merge, double tps, int64_t seq, int64_t video_t_merge = 1) {
  const auto b_count = static_cast<int64_t>(seqs.size());
  Restated r{std::vector<int64_t>(3 * b_count * seq, 1), {}};
  for (int64_t b = 0; b < b_count; ++b) {
    std::vector<std::array<int64_t, 3>> pos;
    int64_t next = 0;
    for (const MultimodalSpan& s : seqs[b]) {
      if (s.kind == MultimodalSpan::Kind::kText) {
        for (int64_t k = 0; k < s.text_tokens; ++k) pos.push_back({next + k, next + k, next + k});
        next += s.text_tokens;
        continue;
      }
      const bool split =
          s.kind == MultimodalSpan::Kind::kVideo &&
          (family == MultimodalFamily::kQwen3Vl || family == MultimodalFamily::kGlm4v);
      for (int64_t part = 0; part < (split ? s.t : 1); ++part) {
        const int64_t frames = split                                    ? 1
                               : s.kind == MultimodalSpan::Kind::kVideo ? s.t / video_t_merge
                                                                        : s.t;
        int64_t top = next;
        for (int64_t i = 0; i < frames; ++i) {
          int64_t ti = i;
          if (family == MultimodalFamily::kQwen25Vl) {
            ti = s.kind == MultimodalSpan::Kind::kVideo
                     ? static_cast<int64_t>(std::floor(i * s.second_per_grid * tps))
                     : 0;
          }
          for (int64_t y = 0; y < s.h / merge; ++y) {
            for (int64_t x = 0; x < s.w / merge; ++x) {
              pos.push_back({next + ti, next + y, next + x});
              top = std::max({top, next + ti, next + y, next + x});
            }
          }
        }
        next = top + 1;
      }
    }
    const int64_t pad = seq - static_cast<int64_t>(pos.size());
    for (size_t k = 0; k < pos.size(); ++k) {
      for (int a = 0; a < 3; ++a) r.ids[(a * b_count + b) * seq + pad + k] = pos[k][a];
    }
    r.deltas.push_back(next - seq);
  }
  return r;
}

// The token form of spans (Qwen: <vs> pads per image, per video or per frame; GLM: <boi>
// <|image|>... <eoi> for images, <bov> frames with a text token between <eov>; ERNIE: as GLM
// with its own video token, a video one run), left padded; text tokens random ids.
struct Tokens {
  std::vector<int64_t> ids, mask, images, videos;  // images/videos: [N, 3] rows
  std::vector<double> seconds;
  int64_t seq = 0;
};

Tokens Tokenize(const std::vector<std::vector<MultimodalSpan>>& seqs, const MultimodalRule& rule,
                int64_t merge, int64_t seq, int64_t t_merge = 1) {
  Tokens t;
  t.seq = seq;
  std::mt19937 rng(3);
  std::vector<std::vector<int64_t>> rows;
  const bool qwen = rule.spans == SpanMarking::kVisionStartThenPad;
  for (const auto& spans : seqs) {
    std::vector<int64_t> row;
    for (const MultimodalSpan& s : spans) {
      if (s.kind == MultimodalSpan::Kind::kText) {
        for (int64_t k = 0; k < s.text_tokens; ++k) row.push_back(1000 + rng() % 40000);
        continue;
      }
      const bool video = s.kind == MultimodalSpan::Kind::kVideo;
      auto& grids = video ? t.videos : t.images;
      grids.insert(grids.end(), {s.t, s.h, s.w});
      if (video) t.seconds.push_back(s.second_per_grid);
      const int64_t frame = (s.h / merge) * (s.w / merge);
      const bool split = video && rule.split_video_frames;
      const bool ernie = rule.spans == SpanMarking::kTypedRunsInVideoContext;
      const int64_t pad = (qwen || ernie) && video ? rule.video_token : rule.image_token;
      const int64_t frames = video && ernie ? s.t / t_merge : s.t;
      // GLM <|begin_of_image|> <|end_of_image|>; ERNIE <|IMAGE_START|> <|IMAGE_END|>.
      const int64_t image_start = ernie ? 101304 : 151339, image_end = ernie ? 101305 : 151340;
      for (int64_t part = 0; part < (split ? s.t : 1); ++part) {
        // The text the rule expects between the sub-spans (a timestamp); it must be text, and
        // the model's (already given) span before the first counts as text too.
        if (part > 0) row.push_back(1000 + rng() % 40000);
        if (qwen) row.push_back(rule.vision_start);
        if (!qwen && video && part == 0) row.push_back(rule.video_start);
        if (!qwen && !video) row.push_back(image_start);
        row.insert(row.end(), static_cast<size_t>(split ? frame : frames * frame), pad);
        if (!qwen && !video) row.push_back(image_end);
        if (!qwen && video && part == (split ? s.t - 1 : 0)) row.push_back(rule.video_end);
      }
    }
    rows.push_back(row);
  }
  for (const auto& row : rows) {
    const int64_t pad = seq - static_cast<int64_t>(row.size());
    for (int64_t k = 0; k < pad; ++k) {
      t.ids.push_back(0);
      t.mask.push_back(0);
    }
    for (int64_t v : row) {
      t.ids.push_back(v);
      t.mask.push_back(1);
    }
  }
  return t;
}

// The spans of `seqs` with the text the token form adds (vision markers, timestamps) made
// explicit, so both forms describe the same prompt.
std::vector<std::vector<MultimodalSpan>> WithMarkers(
    const std::vector<std::vector<MultimodalSpan>>& seqs, const MultimodalRule& rule) {
  const bool qwen = rule.spans == SpanMarking::kVisionStartThenPad;
  auto text = [](int64_t n) {
    return MultimodalSpan{.kind = MultimodalSpan::Kind::kText, .text_tokens = n};
  };
  std::vector<std::vector<MultimodalSpan>> out;
  for (const auto& spans : seqs) {
    std::vector<MultimodalSpan> row;
    for (const MultimodalSpan& s : spans) {
      if (s.kind == MultimodalSpan::Kind::kText) {
        row.push_back(s);
        continue;
      }
      const bool video = s.kind == MultimodalSpan::Kind::kVideo;
      const bool split = video && rule.split_video_frames;
      for (int64_t part = 0; part < (split ? s.t : 1); ++part) {
        const int64_t before =
            (part > 0 ? 1 : 0) + (qwen ? 1 : 0) + (!qwen && (!video || part == 0) ? 1 : 0);
        if (before > 0) row.push_back(text(before));
        MultimodalSpan piece = s;
        if (split) piece.t = 1;
        row.push_back(piece);
        if (!qwen && (!video || part == (split ? s.t - 1 : 0))) row.push_back(text(1));
      }
    }
    out.push_back(row);
  }
  return out;
}

int64_t Length(const std::vector<MultimodalSpan>& spans, int64_t merge) {
  int64_t n = 0;
  for (const MultimodalSpan& s : spans) {
    n +=
        s.kind == MultimodalSpan::Kind::kText ? s.text_tokens : s.t * (s.h / merge) * (s.w / merge);
  }
  return n;
}

MultimodalSpan Text(int64_t n) { return {.kind = MultimodalSpan::Kind::kText, .text_tokens = n}; }
MultimodalSpan Image(int64_t t, int64_t h, int64_t w) {
  return {.kind = MultimodalSpan::Kind::kImage, .t = t, .h = h, .w = w};
}
MultimodalSpan Video(int64_t t, int64_t h, int64_t w, double seconds = 1) {
  return {.kind = MultimodalSpan::Kind::kVideo, .t = t, .h = h, .w = w, .second_per_grid = seconds};
}

TEST(MultimodalPositionsTest, TokenAndSpanFormsAgreeWithTheRuleOverGridsBatchesAndPadding) {
  const std::vector<std::vector<std::vector<MultimodalSpan>>> prompts = {
      {{Text(3), Image(1, 4, 6), Text(2), Video(3, 6, 4, 0.5), Text(5)},
       {Text(1), Video(2, 2, 8, 2.0), Image(1, 8, 8), Text(1)},
       {Text(4)}},
      {{Image(2, 6, 2), Text(7)}, {Text(2), Image(1, 2, 2), Image(1, 4, 4), Text(3)}},
      {{Text(1), Video(4, 4, 4, 1.25), Text(1)}},
  };
  for (const MultimodalRule& rule : MultimodalRules()) {
    for (int64_t merge : {2, 1}) {
      for (const auto& prompt : prompts) {
        const auto spans = WithMarkers(prompt, rule);
        int64_t seq = 0;
        for (const auto& s : spans) seq = std::max(seq, Length(s, merge) + 2);  // 2+ pad slots
        const Restated want = Restate(spans, rule.family, merge, 3.0, seq);
        const std::string what = absl::StrCat(rule.name, " merge ", merge);
        // Token form.
        const Tokens tok = Tokenize(prompt, rule, merge, seq);
        const auto b = static_cast<int64_t>(prompt.size());
        // ERNIE's videos here have odd t: merged by 1 (by 2: ErnieHandMadeCases).
        const int64_t t_merge = rule.temporal_merge_size > 0 ? 1 : 0;
        MultimodalPositionsArgs args{.family = rule.family,
                                     .spatial_merge_size = merge,
                                     .tokens_per_second = 3.0,
                                     .temporal_merge_size = t_merge,
                                     .input_ids = Ints(tok.ids, {b, seq}),
                                     .attention_mask = Ints(tok.mask, {b, seq})};
        if (!tok.images.empty()) {
          args.image_grid_thw = Ints(tok.images, {static_cast<int64_t>(tok.images.size()) / 3, 3});
        }
        if (!tok.videos.empty()) {
          args.video_grid_thw = Ints(tok.videos, {static_cast<int64_t>(tok.videos.size()) / 3, 3});
          if (rule.family == MultimodalFamily::kQwen25Vl) {
            args.second_per_grid_ts = {
                DType::kFloat64, {static_cast<int64_t>(tok.seconds.size())}, tok.seconds.data()};
          }
        }
        auto plan = PlanMultimodalPositions(args);
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
        Buffer ids(plan->position_ids), deltas(plan->mrope_position_deltas);
        const absl::Status run = RunMultimodalPositions(*plan, ids.view, deltas.view);
        ASSERT_TRUE(run.ok()) << what << ": " << run;
        EXPECT_EQ(Int64s(ids), want.ids) << what << " token form";
        EXPECT_EQ(Int64s(deltas), want.deltas) << what << " token form";
        // Span form (left-padded to the longest sequence: the deltas count from its length).
        auto span_plan = PlanMultimodalPositions({.family = rule.family,
                                                  .spatial_merge_size = merge,
                                                  .tokens_per_second = 3.0,
                                                  .temporal_merge_size = t_merge,
                                                  .sequences = spans});
        ASSERT_TRUE(span_plan.ok()) << what << ": " << span_plan.status();
        Buffer sids(span_plan->position_ids), sdeltas(span_plan->mrope_position_deltas);
        ASSERT_TRUE(RunMultimodalPositions(*span_plan, sids.view, sdeltas.view).ok());
        const int64_t shorter = seq - span_plan->seq;  // the token form's extra padding
        const Restated tight = Restate(spans, rule.family, merge, 3.0, seq - shorter);
        EXPECT_EQ(Int64s(sids), tight.ids) << what << " span form";
        EXPECT_EQ(Int64s(sdeltas), tight.deltas) << what << " span form";
      }
    }
  }
}

TEST(MultimodalPositionsTest, GridsAndTokensThatDisagreeNameTheSpan) {
  const MultimodalRule& qwen = MultimodalRuleOf(MultimodalFamily::kQwen2Vl);
  const int64_t vs = qwen.vision_start, img = qwen.image_token;
  // An image of [1, 4, 4] (4 tokens merged) given 3 image tokens.
  std::vector<int64_t> ids = {7, vs, img, img, img, 9};
  std::vector<int64_t> grid = {1, 4, 4};
  auto run = [&](const std::vector<int64_t>& g, Shape gs) -> absl::Status {
    auto plan = PlanMultimodalPositions({.family = MultimodalFamily::kQwen2Vl,
                                         .input_ids = Ints(ids, {1, 6}),
                                         .image_grid_thw = Ints(g, std::move(gs))});
    if (!plan.ok()) return plan.status();
    Buffer p(plan->position_ids), d(plan->mrope_position_deltas);
    return RunMultimodalPositions(*plan, p.view, d.view);
  };
  EXPECT_THAT(run(grid, {1, 3}).message(),
              HasSubstr("input_ids[0]: image span at token 2 (image_grid_thw[0] = [1, 4, 4], 2x2 "
                        "merged): expected 4 image tokens (151655), got 3"));
  std::vector<int64_t> two = {1, 2, 6, 1, 2, 2};
  EXPECT_THAT(run(two, {2, 3}).message(),
              HasSubstr("image_grid_thw: 2 images given, the input_ids hold 1"));
  std::vector<int64_t> odd = {1, 3, 4};
  EXPECT_THAT(run(odd, {1, 3}).message(),
              HasSubstr("image_grid_thw[0]: expected h and w multiples of spatial_merge_size 2"));
  ids = {7, img, img, img, 9, 9};
  EXPECT_THAT(run(grid, {1, 3}).message(),
              HasSubstr("image token 151655 at token 1 is not in a span"));
  ids = {7, vs, img, 8, 9, 9};
  std::vector<int64_t> none;
  EXPECT_THAT(run(none, {0, 3}).message(), HasSubstr("has no grid"));
}

// ERNIE-4.5-VL's rule as transformers 4.57 writes it (models/ernie4_5_vl/modular_ernie4_5_vl.py,
// Ernie4_5_VLModel.get_rope_index), derived by hand. Token types: the image token outside
// <video_start> .. <video_end> is image, the video token inside is video, all else text; each run
// of one type is a group. A text group of n at p: (p+k, p+k, p+k). An image group of grid
// [t, h, w] at p: t x h/2 x w/2 tokens (spatial_merge_size 2), (p + i, p + j, p + k) in raster
// order; a video group alike with t / temporal_merge_size (2) frames. Every group starts at the
// previous group's largest position + 1. Padding slots (mask 0) hold 1; delta = max + 1 - S.
// Without grids: cumsum(mask) - 1, padding 1, delta = max + 1 - S (0 without a mask).
// Token ids here: image 5, video 6, video start 7, video end 8; text anything else.
struct ErnieCase {
  std::string name;
  std::vector<int64_t> ids, mask, images, videos;  // grids: rows of 3
  int64_t batch;
  std::vector<int64_t> want_ids, want_deltas;  // [3, B, S], [B]
};

std::vector<ErnieCase> ErnieHandMadeCases() {
  return {
      // Text only, no grids, no mask: 0..3, delta 0.
      {"text only", {1, 2, 3, 4}, {}, {}, {}, 1, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {0}},
      // Text only with left padding (no grids: transformers' text branch): [1, 0, 1] (max 1,
      // delta 1 + 1 - 3 = -1) and [0, 1, 2] (delta 0).
      {"text with mask",
       {0, 1, 2, 1, 2, 3},
       {0, 1, 1, 1, 1, 1},
       {},
       {},
       2,
       {1, 0, 1, 0, 1, 2, 1, 0, 1, 0, 1, 2, 1, 0, 1, 0, 1, 2},
       {-1, 0}},
      // One image [1, 4, 4] (2 x 2 tokens) after two text tokens: at p = 2 t = 2, h = 2 2 3 3,
      // w = 2 3 2 3; max 3, the text after at 4, 5; delta 5 + 1 - 8 = -2.
      {"one image",
       {1, 2, 5, 5, 5, 5, 3, 4},
       {},
       {1, 4, 4},
       {},
       1,
       {0, 1, 2, 2, 2, 2, 4, 5, 0, 1, 2, 2, 3, 3, 4, 5, 0, 1, 2, 3, 2, 3, 4, 5},
       {-2}},
      // One video [4, 4, 6]: 4 / 2 = 2 frames of 2 x 3. Text 1 at 0, <video_start> at 1, the
      // video at p = 2: frame 0 t = 2, frame 1 t = 3; h = 2 2 2 3 3 3, w = 2 3 4 2 3 4 per
      // frame; max 4, so <video_end> at 5 and text at 6; delta 6 + 1 - 16 = -9.
      {"one video",
       {1, 7, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 8, 2},
       {},
       {},
       {4, 4, 6},
       1,
       {0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 5, 6,   // t
        0, 1, 2, 2, 2, 3, 3, 3, 2, 2, 2, 3, 3, 3, 5, 6,   // h
        0, 1, 2, 3, 4, 2, 3, 4, 2, 3, 4, 2, 3, 4, 5, 6},  // w
       {-9}},
      // Two images in sequence 0 ([1, 4, 4] at p = 1: t 1, h 1 1 2 2, w 1 2 1 2, next 3; text
      // at 3; [1, 2, 4] at p = 4: t 4 4, h 4 4, w 4 5, next 6; text at 6), left-padded by 2:
      // delta 6 + 1 - 11 = -4. Sequence 1 text only (padded by 5): 0..5, delta 5 + 1 - 11 = -5.
      {"two images, left padding",
       {0, 0, 1, 5, 5, 5, 5, 2, 5, 5, 3, 0, 0, 0, 0, 0, 1, 2, 3, 4, 9, 10},
       {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1},
       {1, 4, 4, 1, 2, 4},
       {},
       2,
       {1, 1, 0, 1, 1, 1, 1, 3, 4, 4, 6, 1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5,   // t
        1, 1, 0, 1, 1, 2, 2, 3, 4, 4, 6, 1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5,   // h
        1, 1, 0, 1, 2, 1, 2, 3, 4, 5, 6, 1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5},  // w
       {-4, -5}},
      // The context decides: the video token before <video_start> and the image token inside
      // the video are text. Video [2, 2, 4]: 1 frame of 1 x 2 at p = 3: (3, 3, 3), (3, 3, 4);
      // next 5. delta 6 + 1 - 7 = 0.
      {"token types by video context",
       {1, 6, 7, 6, 6, 5, 8},
       {},
       {},
       {2, 2, 4},
       1,
       {0, 1, 2, 3, 3, 5, 6, 0, 1, 2, 3, 3, 5, 6, 0, 1, 2, 3, 4, 5, 6},
       {0}},
  };
}

absl::StatusOr<std::pair<std::vector<int64_t>, std::vector<int64_t>>> RunErnie(const ErnieCase& c) {
  const auto s = static_cast<int64_t>(c.ids.size()) / c.batch;
  MultimodalPositionsArgs args{
      .family = MultimodalFamily::kErnie45Vl,
      .token_ids = {.image = 5, .video = 6, .video_start = 7, .video_end = 8},
      .input_ids = Ints(c.ids, {c.batch, s})};
  if (!c.mask.empty()) args.attention_mask = Ints(c.mask, {c.batch, s});
  if (!c.images.empty()) {
    args.image_grid_thw = Ints(c.images, {static_cast<int64_t>(c.images.size()) / 3, 3});
  }
  if (!c.videos.empty()) {
    args.video_grid_thw = Ints(c.videos, {static_cast<int64_t>(c.videos.size()) / 3, 3});
  }
  POSENC_ASSIGN_OR_RETURN(MultimodalPositionsPlan plan, PlanMultimodalPositions(args));
  Buffer ids(plan.position_ids), deltas(plan.mrope_position_deltas);
  POSENC_RETURN_IF_ERROR(RunMultimodalPositions(plan, ids.view, deltas.view));
  return std::make_pair(Int64s(ids), Int64s(deltas));
}

TEST(MultimodalPositionsTest, ErnieHandDerivedCases) {
  for (const ErnieCase& c : ErnieHandMadeCases()) {
    auto got = RunErnie(c);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    EXPECT_EQ(got->first, c.want_ids) << c.name;
    EXPECT_EQ(got->second, c.want_deltas) << c.name;
  }
  // Decode from the two-image case's deltas [-4, -5] after its 11 tokens: 7, 8 and 6, 7.
  const std::vector<int64_t> deltas = {-4, -5};
  auto plan =
      PlanMultimodalDecode({.deltas = Ints(deltas, {2, 1}), .prompt_length = 11, .num_steps = 2});
  ASSERT_TRUE(plan.ok());
  Buffer out(plan->position_ids);
  ASSERT_TRUE(RunMultimodalDecode(*plan, out.view).ok());
  EXPECT_EQ(Int64s(out), (std::vector<int64_t>{7, 8, 6, 7, 7, 8, 6, 7, 7, 8, 6, 7}));
  // The span form of the video case: text 2, video [4, 4, 6], text 2.
  auto spans = PlanMultimodalPositions(
      {.family = MultimodalFamily::kErnie45Vl, .sequences = {{Text(2), Video(4, 4, 6), Text(2)}}});
  ASSERT_TRUE(spans.ok()) << spans.status();
  Buffer ids(spans->position_ids), d(spans->mrope_position_deltas);
  ASSERT_TRUE(RunMultimodalPositions(*spans, ids.view, d.view).ok());
  EXPECT_EQ(Int64s(ids), ErnieHandMadeCases()[3].want_ids);
  EXPECT_EQ(Int64s(d), ErnieHandMadeCases()[3].want_deltas);
}

TEST(MultimodalPositionsTest, ErnieGridsThatDisagreeNameTheSpan) {
  ErnieCase c = ErnieHandMadeCases()[3];  // one video, 12 tokens
  c.videos = {4, 4, 4};                   // 2 frames of 2 x 2: 8 tokens
  EXPECT_THAT(RunErnie(c).status().message(),
              HasSubstr("input_ids[0]: video span at token 2 (video_grid_thw[0] = [4, 4, 4], 2x2 "
                        "merged, t by 2): expected 8 video tokens (6), got 12"));
  c.videos = {3, 4, 6};
  EXPECT_THAT(RunErnie(c).status().message(),
              HasSubstr("video_grid_thw[0]: expected t a multiple of temporal_merge_size 2, got "
                        "[3, 4, 6]"));
  c.videos = {4, 4, 6, 2, 2, 2};
  EXPECT_THAT(RunErnie(c).status().message(),
              HasSubstr("video_grid_thw: 2 videos given, the input_ids hold 1"));
  c = ErnieHandMadeCases()[2];  // one image
  c.images = {};
  c.videos = {2, 4, 4};  // grids present, but the image run has none
  EXPECT_THAT(RunErnie(c).status().message(), HasSubstr("the image span at token 2 has no grid"));
  auto qwen = PlanMultimodalPositions(
      {.family = MultimodalFamily::kQwen2Vl, .temporal_merge_size = 2, .sequences = {{Text(1)}}});
  EXPECT_THAT(qwen.status().message(), HasSubstr("temporal_merge_size: not read by family "
                                                 "qwen2_vl"));
  auto odd = PlanMultimodalPositions(
      {.family = MultimodalFamily::kErnie45Vl, .sequences = {{Video(3, 2, 2)}}});
  EXPECT_THAT(odd.status().message(),
              HasSubstr("sequences[0].spans[0]: expected t a multiple of temporal_merge_size 2"));
}

TEST(MultimodalPositionsTest, DecodeStepsContinueFromTheDeltas) {
  const std::vector<int64_t> deltas = {-5, 12};
  auto plan =
      PlanMultimodalDecode({.deltas = Ints(deltas, {2, 1}), .prompt_length = 20, .num_steps = 2});
  ASSERT_TRUE(plan.ok());
  Buffer out(plan->position_ids);
  ASSERT_TRUE(RunMultimodalDecode(*plan, out.view).ok());
  EXPECT_EQ(Int64s(out), (std::vector<int64_t>{15, 16, 32, 33, 15, 16, 32, 33, 15, 16, 32, 33}));
  const std::vector<int64_t> bad = {-21};
  auto neg = PlanMultimodalDecode({.deltas = Ints(bad, {1}), .prompt_length = 20});
  ASSERT_TRUE(neg.ok());
  Buffer o(neg->position_ids);
  EXPECT_THAT(RunMultimodalDecode(*neg, o.view).message(), HasSubstr("decode.deltas[0]"));
}

// ---- VisionPositions ----------------------------------------------------------------------

TEST(VisionPositionsTest, QwenWindowsCoverEveryUnitOnceInWindowOrder) {
  // Merged grids 5x3 and 4x4 (a multiple of the 2-unit window: transformers pads a whole empty
  // window, which drops out), two frames of the first.
  const std::vector<int64_t> grid = {2, 10, 6, 1, 8, 8};
  auto plan = PlanVisionPositions({.tower = VisionTower::kQwen,
                                   .grid = Ints(grid, {2, 3}),
                                   .spatial_merge_size = 2,
                                   .window_size = 56,
                                   .patch_size = 14});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->window_units, 2);
  Buffer pos(plan->position_ids), win(plan->window_index), cu(plan->cu_window_seqlens);
  ASSERT_TRUE(RunVisionPositions(*plan, pos.view, TensorView{}, win.view, cu.view).ok());
  std::vector<int64_t> index = Int64s(win);
  std::vector<int64_t> sorted = index;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int64_t>(i));
  // Frame 0 of the 5x3 grid: windows (0,0) units 0,1,3,4; (0,1) units 2,5; ...
  EXPECT_EQ(std::vector<int64_t>(index.begin(), index.begin() + 6),
            (std::vector<int64_t>{0, 1, 3, 4, 2, 5}));
  // 2 frames x 3x2 windows + 2x2 windows = 16 windows.
  const std::vector<int64_t> cus = Int64s(cu);
  ASSERT_EQ(cus.size(), 17u);
  EXPECT_EQ(cus[1], 16);  // 4 units of 4 patches
  EXPECT_EQ(cus[2], 24);
  EXPECT_EQ(cus.back(), pos.size() / 2);
}

TEST(VisionPositionsTest, ErrorsNameTheField) {
  const std::vector<int64_t> grid = {1, 3, 4};
  EXPECT_THAT(PlanVisionPositions({.grid = Ints(grid, {1, 3})}).status().message(),
              HasSubstr("grid[0]: expected h and w multiples of spatial_merge_size 2"));
  EXPECT_THAT(PlanVisionPositions({.tower = VisionTower::kPixtral, .grid = Ints(grid, {1, 3})})
                  .status()
                  .message(),
              HasSubstr("patch_size"));
  const std::vector<int64_t> big = {20, 2};
  EXPECT_THAT(PlanVisionPositions({.tower = VisionTower::kPixtral,
                                   .grid = Ints(big, {1, 2}),
                                   .patch_size = 16,
                                   .image_size = 256})
                  .status()
                  .message(),
              HasSubstr("grid[0]: expected at most image_size / patch_size = 16"));
}

}  // namespace
}  // namespace posenc::kernels
