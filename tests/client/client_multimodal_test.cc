// The multimodal golden cases (tests/golden_multimodal, #21) through the C++ client and the shared
// in-process servers over TCP, on the reference and cpu backends: MultimodalPositions (ids and
// deltas exact; decode steps), VisionPositions (Qwen and Qwen2.5-VL window order, Pixtral flat ids
// exact), the M-RoPE application cases and the vision towers' cos/sin tables through RopeCache and
// ApplyRope, and RerotateKeys (float64 within the case's atol, float32 within 1e-6 relative), the
// one-table RopeCache layouts, and a grid that disagrees with the tokens failing with the span
// named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "client_test_util.h"
#include "posenc/client.h"
#include "tests/common/golden.h"

namespace posenc::client {
namespace {

using posenc::testing::GoldenCase;
using posenc::testing::NpyArray;
using testing::ConnectToSharedServer;

std::vector<GoldenCase> Cases(const std::string& function) {
  std::vector<GoldenCase> out;
  const std::string dir = posenc::testing::GoldenMultimodalDir();
  for (const std::string& name : posenc::testing::ListGoldenCases(dir)) {
    absl::StatusOr<GoldenCase> c = posenc::testing::LoadGoldenCase(dir, name);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok() && c->function == function) out.push_back(*std::move(c));
  }
  return out;
}

Tensor Ints(const NpyArray& a) {
  absl::StatusOr<Tensor> t = Tensor::FromInt64s(a.ints, a.shape);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

Tensor Floats(const NpyArray& a, DType dtype) {
  absl::StatusOr<Tensor> t = Tensor::FromDoubles(a.values, a.shape, dtype);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

std::optional<Tensor> IntsIfAny(const GoldenCase& c, const std::string& name) {
  if (!c.inputs.contains(name)) return std::nullopt;
  return Ints(c.inputs.at(name));
}

void ExpectIds(const Tensor& got, const NpyArray& want, const std::string& what) {
  EXPECT_EQ(got.shape, want.shape) << what;
  EXPECT_EQ(got.ToInt64s(), want.ints) << what;
}

MultimodalFamily FamilyOf(const std::string& model) {
  if (model == "qwen2_vl") return MultimodalFamily::kQwen2Vl;
  if (model == "qwen2_5_vl") return MultimodalFamily::kQwen25Vl;
  if (model == "qwen3_vl") return MultimodalFamily::kQwen3Vl;
  if (model == "ernie4_5_vl") return MultimodalFamily::kErnie45Vl;
  EXPECT_EQ(model, "glm4v");
  return MultimodalFamily::kGlm4v;
}

MultimodalPositionsOptions RopeIndexOptions(const GoldenCase& c) {
  const auto& p = c.params;
  MultimodalPositionsOptions o{.family = FamilyOf(p.at("model").get<std::string>()),
                               .spatial_merge_size = p.at("spatial_merge_size").get<int64_t>()};
  if (p.contains("tokens_per_second"))
    o.tokens_per_second = p.at("tokens_per_second").get<double>();
  auto id = [&](const char* key) -> std::optional<int64_t> {
    if (!p.contains(key)) return std::nullopt;
    return p.at(key).get<int64_t>();
  };
  o.token_ids = {.image_token_id = id("image_token_id"),
                 .video_token_id = id("video_token_id"),
                 .vision_start_token_id = id("vision_start_token_id"),
                 .video_start_token_id = id("video_start_token_id"),
                 .video_end_token_id = id("video_end_token_id")};
  o.input_ids = Ints(c.inputs.at("input_ids"));
  o.attention_mask = IntsIfAny(c, "attention_mask");
  o.image_grid_thw = IntsIfAny(c, "image_grid_thw");
  o.video_grid_thw = IntsIfAny(c, "video_grid_thw");
  if (c.inputs.contains("second_per_grid_ts")) {
    o.second_per_grid_ts = Floats(c.inputs.at("second_per_grid_ts"), DType::kFloat64);
  }
  return o;
}

using posenc::testing::MaxAbs;

// The case's FLOAT64 atol, or FLOAT32's 1e-6 relative to `scale` (the inputs' magnitude).
double Tolerance(const GoldenCase& c, DType dtype, double scale) {
  return posenc::testing::MultimodalTolerance(c, dtype == DType::kFloat32, scale);
}

// VisionPositions options of a Qwen tower case (Qwen2-VL or the Qwen2.5-VL window order).
VisionPositionsOptions QwenVisionOptions(const GoldenCase& c) {
  const auto& p = c.params;
  VisionPositionsOptions o{.tower = VisionTower::kQwen,
                           .grid = Ints(c.inputs.at("grid_thw")),
                           .spatial_merge_size = p.at("spatial_merge_size").get<int64_t>(),
                           .window_size = p.value("window_size", int64_t{0})};
  if (p.contains("patch_size")) o.patch_size = p.at("patch_size").get<int64_t>();
  return o;
}

void ExpectNear(const Tensor& got, const NpyArray& want, double tol, const std::string& what) {
  const std::vector<double> values = got.ToDoubles();
  ASSERT_EQ(static_cast<int64_t>(values.size()), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    worst = std::max(worst, std::fabs(values[i] - want.values[i]));
  }
  EXPECT_LE(worst, tol) << what;
}

// RopeCache (cos and sin in `layout`) and ApplyRope (q and k of the case, `qk_layout`) of one
// RoPE at `ids`, against the case's cos, sin, q_embed and k_embed.
struct RopeAtIds {
  RopeConfig config;
  RopeCacheLayout layout = RopeCacheLayout::kNeox;
  TensorLayout qk_layout = TensorLayout::kBSHD;
};

void ExpectCosSin(const Client& client, const GoldenCase& c, const RopeAtIds& rope,
                  const Tensor& ids, DType dtype) {
  absl::StatusOr<RopeCacheResult> cache = client.RopeCache({.positions = Positions::Ids(ids),
                                                            .config = rope.config,
                                                            .output_dtype = dtype,
                                                            .layout = rope.layout});
  ASSERT_TRUE(cache.ok()) << cache.status();
  ExpectNear(cache->cos, c.outputs.at("cos"), Tolerance(c, dtype, 1), "cos");
  ExpectNear(cache->sin, c.outputs.at("sin"), Tolerance(c, dtype, 1), "sin");
}

void ExpectRotated(const Client& client, const GoldenCase& c, const RopeAtIds& rope,
                   const Tensor& ids, DType dtype) {
  const NpyArray& q_in = c.inputs.at("q");
  const NpyArray& k_in = c.inputs.at("k");
  ApplyRopeOptions o{.q = Floats(q_in, dtype),
                     .k = Floats(k_in, dtype),
                     .positions = Positions::Ids(ids),
                     .config = rope.config,
                     .layout = rope.qk_layout};
  if (o.q.shape.size() == 3) {  // [L, H, D]: one sequence
    o.q.shape.insert(o.q.shape.begin(), 1);
    o.k->shape.insert(o.k->shape.begin(), 1);
  }
  absl::StatusOr<ApplyRopeResult> r = client.ApplyRope(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const double tol = Tolerance(c, dtype, std::max(MaxAbs(q_in), MaxAbs(k_in)));
  ExpectNear(r->q, c.outputs.at("q_embed"), tol, "q_embed");
  ASSERT_TRUE(r->k.has_value());
  ExpectNear(*r->k, c.outputs.at("k_embed"), tol, "k_embed");
}

// Both, in FLOAT64 and FLOAT32 (ApplyRope only where the case has q and k).
void ExpectRopeAtIds(const Client& client, const GoldenCase& c, const RopeAtIds& rope,
                     const Tensor& ids) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    SCOPED_TRACE(::testing::Message() << c.name << " dtype " << static_cast<int>(dtype));
    ExpectCosSin(client, c, rope, ids, dtype);
    if (c.inputs.contains("q")) ExpectRotated(client, c, rope, ids, dtype);
  }
}

// The RoPE of an mrope_apply case: its model's layout, pairing and partial rotary.
RopeAtIds MropeApplyRope(const GoldenCase& c) {
  RopeAtIds rope{.qk_layout = TensorLayout::kBHSD};
  RopeConfig& config = rope.config;
  config.head_dim = c.params.at("head_dim").get<int64_t>();
  config.base = c.params.at("rope_theta").get<double>();
  config.mrope_section = c.params.at("mrope_section").get<std::vector<int64_t>>();
  const std::string model = c.params.at("model").get<std::string>();
  if (model == "qwen3_vl") config.mrope_layout = MropeLayout::kInterleaved;
  if (model == "glm4v") {
    config.style = RopeStyle::kGptj;
    config.rotary_dim = c.params.at("rotary_dim").get<int64_t>();
    rope.layout = RopeCacheLayout::kGptj;
  }
  return rope;
}

RopeConfig VisionConfig(int64_t head_dim, double theta, MropeLayout layout) {
  RopeConfig config;
  config.head_dim = head_dim;
  config.base = theta;
  config.mrope_layout = layout;
  return config;
}

// Every case against a server on each host backend (reference and cpu).
class ClientMultimodalTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    client_ = ConnectToSharedServer(GetParam());
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<Client> client_;
};

INSTANTIATE_TEST_SUITE_P(Backends, ClientMultimodalTest, ::testing::Values("reference", "cpu"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(ClientMultimodalTest, RopeIndexOfEveryCaseIsExact) {
  const std::vector<GoldenCase> cases = Cases("mrope_rope_index");
  ASSERT_GE(cases.size(), 8u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<MultimodalPositionsResult> r = client_->MultimodalPositions(RopeIndexOptions(c));
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectIds(r->position_ids, c.outputs.at("position_ids"), "position_ids");
    ASSERT_TRUE(r->mrope_position_deltas.has_value());
    ExpectIds(*r->mrope_position_deltas, c.outputs.at("mrope_position_deltas"), "deltas");
    EXPECT_EQ(r->family, FamilyOf(c.params.at("model").get<std::string>()));
    EXPECT_NE(r->source.find("get_rope_index"), std::string::npos) << r->source;
  }
}

TEST_P(ClientMultimodalTest, DecodeStepsOfEveryCaseAreExact) {
  const std::vector<GoldenCase> cases = Cases("mrope_decode_position_ids");
  ASSERT_GE(cases.size(), 2u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    MultimodalPositionsOptions o{.family = FamilyOf(c.params.at("model").get<std::string>())};
    o.decode = MultimodalDecode{.deltas = Ints(c.inputs.at("mrope_position_deltas")),
                                .prompt_length = c.params.at("prompt_length").get<int64_t>(),
                                .num_steps = c.params.at("num_steps").get<int64_t>()};
    absl::StatusOr<MultimodalPositionsResult> r = client_->MultimodalPositions(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectIds(r->position_ids, c.outputs.at("position_ids"), "position_ids");
    EXPECT_FALSE(r->mrope_position_deltas.has_value());
  }
}

TEST_P(ClientMultimodalTest, GridDisagreeingWithTheTokensNamesTheSpan) {
  const std::vector<GoldenCase> cases = Cases("mrope_rope_index");
  ASSERT_FALSE(cases.empty());
  MultimodalPositionsOptions o = RopeIndexOptions(cases.front());
  ASSERT_TRUE(o.image_grid_thw.has_value());
  std::vector<int64_t> grids = o.image_grid_thw->ToInt64s();
  grids[1] += 2 * *o.spatial_merge_size;
  o.image_grid_thw = *Tensor::FromInt64s(grids, o.image_grid_thw->shape);
  absl::StatusOr<MultimodalPositionsResult> r = client_->MultimodalPositions(o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("input_ids["), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("expected"), std::string::npos) << r.status();
}

TEST_P(ClientMultimodalTest, QwenVisionPositionsAndWindowsAreExact) {
  std::vector<GoldenCase> cases = Cases("qwen_vision_rope");
  for (GoldenCase& c : Cases("qwen25vl_vision_window_rope")) cases.push_back(std::move(c));
  ASSERT_GE(cases.size(), 3u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<VisionPositionsResult> r = client_->VisionPositions(QwenVisionOptions(c));
    ASSERT_TRUE(r.ok()) << r.status();
    // transformers' pos_ids are [L, 2] (row, col) pairs; posenc's ids [2, L].
    const std::vector<int64_t> ids = r->position_ids.ToInt64s();
    const NpyArray& want = c.outputs.at("pos_ids");
    ASSERT_EQ(static_cast<int64_t>(ids.size()), want.size());
    const size_t n = ids.size() / 2;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(ids[i], want.ints[2 * i]) << i;
      ASSERT_EQ(ids[n + i], want.ints[2 * i + 1]) << i;
    }
    if (c.outputs.contains("window_index")) {
      ASSERT_TRUE(r->window_index.has_value() && r->cu_window_seqlens.has_value());
      ExpectIds(*r->window_index, c.outputs.at("window_index"), "window_index");
      ExpectIds(*r->cu_window_seqlens, c.outputs.at("cu_window_seqlens"), "cu_window_seqlens");
    } else {
      EXPECT_FALSE(r->window_index.has_value());
    }
  }
}

TEST_P(ClientMultimodalTest, PixtralFlatIdsAreExact) {
  const std::vector<GoldenCase> cases = Cases("pixtral_rope_2d");
  ASSERT_FALSE(cases.empty());
  for (const GoldenCase& c : cases) {
    VisionPositionsOptions o{.tower = VisionTower::kPixtral,
                             .grid = Ints(c.inputs.at("patch_grid_hw")),
                             .patch_size = c.params.at("patch_size").get<int64_t>(),
                             .image_size = c.params.at("image_size").get<int64_t>()};
    absl::StatusOr<VisionPositionsResult> r = client_->VisionPositions(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->flat_ids.has_value());
    ExpectIds(*r->flat_ids, c.outputs.at("position_ids"), c.name + " flat_ids");
  }
}

TEST_P(ClientMultimodalTest, RerotateKeysOfEveryCaseInFloat64AndFloat32) {
  const std::vector<GoldenCase> cases = Cases("kv_rerotate");
  ASSERT_GE(cases.size(), 3u);
  for (const GoldenCase& c : cases) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      SCOPED_TRACE(::testing::Message() << c.name << " dtype " << static_cast<int>(dtype));
      const NpyArray& k = c.inputs.at("k");
      RerotateKeysOptions o{.k = Floats(k, dtype),
                            .positions = Positions::Ids(Ints(c.inputs.at("positions"))),
                            .delta = Ints(c.inputs.at("delta")),
                            .layout = TensorLayout::kTHD};
      o.config.head_dim = c.params.at("head_dim").get<int64_t>();
      o.config.rotary_dim = c.params.at("rotary_dim").get<int64_t>();
      o.config.base = c.params.at("rope_theta").get<double>();
      absl::StatusOr<RerotateKeysResult> r = client_->RerotateKeys(o);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->k.dtype, dtype);
      ExpectNear(r->k, c.outputs.at("k_rerotated"), Tolerance(c, dtype, MaxAbs(k)), "k");
    }
  }
}

TEST_P(ClientMultimodalTest, MropeApplicationOfEveryCase) {
  const std::vector<GoldenCase> cases = Cases("mrope_apply");
  ASSERT_GE(cases.size(), 5u);
  for (const GoldenCase& c : cases) {
    ExpectRopeAtIds(*client_, c, MropeApplyRope(c), Ints(c.inputs.at("position_ids")));
  }
}

// The vision towers' tables: the patch ids from VisionPositions, then RopeCache and ApplyRope
// with the tower's 2-D layout.
TEST_P(ClientMultimodalTest, VisionCosSinOfEveryCase) {
  std::vector<GoldenCase> qwen = Cases("qwen_vision_rope");
  for (GoldenCase& c : Cases("qwen25vl_vision_window_rope")) qwen.push_back(std::move(c));
  ASSERT_GE(qwen.size(), 3u);
  for (const GoldenCase& c : qwen) {
    const auto& p = c.params;
    absl::StatusOr<VisionPositionsResult> ids = client_->VisionPositions(QwenVisionOptions(c));
    ASSERT_TRUE(ids.ok()) << ids.status();
    const RopeAtIds rope{.config =
                             VisionConfig(p.at("vision_head_dim").get<int64_t>(),
                                          p.at("theta").get<double>(), MropeLayout::kVision2d)};
    ExpectRopeAtIds(*client_, c, rope, ids->position_ids);
  }
  for (const GoldenCase& c : Cases("pixtral_rope_2d")) {
    absl::StatusOr<VisionPositionsResult> ids =
        client_->VisionPositions({.tower = VisionTower::kPixtral,
                                  .grid = Ints(c.inputs.at("patch_grid_hw")),
                                  .patch_size = c.params.at("patch_size").get<int64_t>(),
                                  .image_size = c.params.at("image_size").get<int64_t>()});
    ASSERT_TRUE(ids.ok()) << ids.status();
    const RopeAtIds rope{.config = VisionConfig(c.params.at("head_dim").get<int64_t>(),
                                                c.params.at("rope_theta").get<double>(),
                                                MropeLayout::kVision2dEvenOdd),
                         .qk_layout = TensorLayout::kBHSD};
    ExpectRopeAtIds(*client_, c, rope, ids->position_ids);
  }
}

TEST_P(ClientMultimodalTest, Llama4VisionCosSin) {
  const std::vector<GoldenCase> cases = Cases("llama4_vision_rope");
  ASSERT_FALSE(cases.empty());
  for (const GoldenCase& c : cases) {
    absl::StatusOr<VisionPositionsResult> ids =
        client_->VisionPositions({.tower = VisionTower::kLlama4,
                                  .patch_size = c.params.at("patch_size").get<int64_t>(),
                                  .image_size = c.params.at("image_size").get<int64_t>()});
    ASSERT_TRUE(ids.ok()) << ids.status();
    RopeAtIds rope{
        .config = VisionConfig(c.params.at("head_dim").get<int64_t>(),
                               c.params.at("rope_theta").get<double>(), MropeLayout::kVision2d),
        .layout = RopeCacheLayout::kCompact};
    rope.config.style = RopeStyle::kGptj;
    ExpectRopeAtIds(*client_, c, rope, ids->position_ids);
  }
}

TEST_P(ClientMultimodalTest, OneTableCacheLayoutsAreCompactRearranged) {
  RopeCacheOptions o{.positions = Positions::Range(0, 5)};
  o.config.head_dim = 16;
  absl::StatusOr<RopeCacheResult> compact = client_->RopeCache(o);
  ASSERT_TRUE(compact.ok()) << compact.status();
  o.layout = RopeCacheLayout::kFusedCosSin;
  absl::StatusOr<RopeCacheResult> fused = client_->RopeCache(o);
  o.layout = RopeCacheLayout::kComplex;
  absl::StatusOr<RopeCacheResult> cis = client_->RopeCache(o);
  ASSERT_TRUE(fused.ok() && cis.ok()) << fused.status() << cis.status();
  ASSERT_TRUE(fused->cos_sin.has_value() && cis->freqs_cis.has_value());
  // The one table in its own field, cos and sin empty (as the Python client's, None there).
  EXPECT_FALSE(fused->freqs_cis.has_value() || cis->cos_sin.has_value());
  EXPECT_FALSE(compact->cos_sin.has_value() || compact->freqs_cis.has_value());
  for (const RopeCacheResult* one : {&*fused, &*cis}) {
    EXPECT_TRUE(one->cos.shape.empty() && one->cos.data.empty() && one->sin.data.empty());
  }
  EXPECT_EQ(fused->cos_sin->shape, (std::vector<int64_t>{5, 16}));
  EXPECT_EQ(cis->freqs_cis->shape, (std::vector<int64_t>{5, 8, 2}));
  const std::vector<float> c = compact->cos.ToFloats(), s = compact->sin.ToFloats();
  const std::vector<float> f = fused->cos_sin->ToFloats(), x = cis->freqs_cis->ToFloats();
  for (size_t t = 0; t < 5; ++t) {
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_EQ(f[t * 16 + j], c[t * 8 + j]);
      EXPECT_EQ(f[t * 16 + 8 + j], s[t * 8 + j]);
      EXPECT_EQ(x[(t * 8 + j) * 2], c[t * 8 + j]);
      EXPECT_EQ(x[(t * 8 + j) * 2 + 1], s[t * 8 + j]);
    }
  }
}

}  // namespace
}  // namespace posenc::client
