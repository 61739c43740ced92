// Every case of tests/golden_multimodal (transformers' own functions: M-RoPE position ids and
// decode steps, M-RoPE tables and rotation in the Qwen2-VL, Qwen3-VL and GLM-4V layouts, the vision
// towers' 2-D RoPE, KV re-rotation) through every backend: ids exactly, FLOAT64 within the case's
// atol, FLOAT32 within 1e-6 relative to the magnitude of the inputs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/multimodal/vision_positions.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"
#include "tests/common/cuda_math_backend.h"
#include "tests/common/golden.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;
using ::posenc::testing::GoldenCase;
using ::posenc::testing::NpyArray;

constexpr unsigned char kFill = 0xAB;  // never read unwritten output bytes

ConstTensorView IdsView(const NpyArray& a) {
  return {DType::kInt64, Shape(a.shape.begin(), a.shape.end()), a.ints.data()};
}

std::vector<double> ReadAll(const TensorView& t) {
  std::vector<double> out(static_cast<size_t>(t.NumElements()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadAsDouble(t.data, t.dtype, i);
  return out;
}

using ::posenc::testing::MaxAbs;

// The case's FLOAT64 atol, or FLOAT32's 1e-6 relative to `scale` (the inputs' magnitude).
double Tolerance(const GoldenCase& c, DType dtype, double scale) {
  return ::posenc::testing::MultimodalTolerance(c, dtype == DType::kFloat32, scale);
}

void ExpectNear(const std::vector<double>& got, const NpyArray& want, double tol,
                const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(got[i] - want.values[i]);
    worst = std::max(worst, diff);
    if (!(diff <= tol) && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want.values[i]
                    << " (diff " << diff << " > " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance (worst " << worst << ")";
}

void ExpectIds(const std::vector<int64_t>& got, const NpyArray& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want.ints[i]) << what << " [" << i << "]";
  }
}

const Backend* g_backend = nullptr;
const Backend& UnderTest() { return *g_backend; }

// The int64 values of an output buffer.
std::vector<int64_t> Ints(const Buffer& b) {
  const auto* p = static_cast<const int64_t*>(b.view.data);
  return std::vector<int64_t>(p, p + b.size());
}

// A `dtype` buffer holding the values of an input array; `shape` defaults to the array's.
Buffer Filled(DType dtype, const NpyArray& values, Shape shape = {}) {
  if (shape.empty()) shape.assign(values.shape.begin(), values.shape.end());
  Buffer b(dtype, shape, kFill);
  for (int64_t i = 0; i < values.size(); ++i) b.set(i, values.values[i]);
  return b;
}

// The case's cos and sin through RopeCache in `layout`, at `spec`.
void CheckCosSin(const GoldenCase& c, DType dtype, const RopeConfig& config, RopeCacheLayout layout,
                 const PositionSpec& spec, const std::string& what) {
  auto cache =
      PlanRopeCache({.config = config, .layout = layout, .positions = spec, .output_dtype = dtype});
  ASSERT_TRUE(cache.ok()) << cache.status();
  Buffer cos(cache->cos, kFill), sin(cache->sin, kFill);
  auto run = RunRopeCache(UnderTest(), *cache, /*cache=*/nullptr, cos.view, sin.view);
  ASSERT_TRUE(run.ok()) << run.status();
  ExpectNear(ReadAll(cos.view), c.outputs.at("cos"), Tolerance(c, dtype, 1), what + " cos");
  ExpectNear(ReadAll(sin.view), c.outputs.at("sin"), Tolerance(c, dtype, 1), what + " sin");
}

// The case's q and k rotated through ApplyRope in `layout`, at `spec`, against q_embed and
// k_embed; a 3-D q/k ([L, H, D]: one sequence) gets a batch of one.
void CheckRotation(const GoldenCase& c, DType dtype, const RopeConfig& config, TensorLayout layout,
                   const PositionSpec& spec, const std::string& what) {
  const NpyArray& q_in = c.inputs.at("q");
  const NpyArray& k_in = c.inputs.at("k");
  Shape qs(q_in.shape.begin(), q_in.shape.end()), ks(k_in.shape.begin(), k_in.shape.end());
  if (qs.size() == 3) {
    qs.insert(qs.begin(), 1);
    ks.insert(ks.begin(), 1);
  }
  Buffer q = Filled(dtype, q_in, qs), k = Filled(dtype, k_in, ks);
  auto plan = PlanApplyRope(
      {.config = config, .layout = layout, .q = q.view, .k = k.view, .positions = spec});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto applied = RunApplyRope(UnderTest(), *plan, /*cache=*/nullptr, q.view, k.view);
  ASSERT_TRUE(applied.ok()) << applied.status();
  const double scale = std::max(MaxAbs(q_in), MaxAbs(k_in));
  ExpectNear(ReadAll(q.view), c.outputs.at("q_embed"), Tolerance(c, dtype, scale),
             what + " q_embed");
  ExpectNear(ReadAll(k.view), c.outputs.at("k_embed"), Tolerance(c, dtype, scale),
             what + " k_embed");
}

// The RoPE of an mrope_apply case: its model's layout, pairing and partial rotary.
RopeConfig MropeApplyConfig(const GoldenCase& c) {
  RopeConfig config;
  config.head_dim = c.params.at("head_dim").get<int64_t>();
  config.base = c.params.at("rope_theta").get<double>();
  config.mrope_section = c.params.at("mrope_section").get<std::vector<int64_t>>();
  const std::string model = c.params.at("model").get<std::string>();
  if (model == "qwen3_vl") config.mrope_layout = MropeLayout::kInterleaved;
  if (model == "glm4v") {
    config.style = RopeStyle::kGptj;
    config.rotary_dim = c.params.at("rotary_dim").get<int64_t>();
  }
  return config;
}

// cos/sin through RopeCache (ids [3, B, S], the full-width layout of the model's pairing) and
// q_embed/k_embed through ApplyRope (BHSD).
void CheckMropeApply(const GoldenCase& c, DType dtype) {
  const RopeConfig config = MropeApplyConfig(c);
  const PositionSpec spec{.kind = PositionSpec::Kind::kIds,
                          .ids = IdsView(c.inputs.at("position_ids"))};
  const std::string what = c.name + " " + std::string(DTypeName(dtype));
  const RopeCacheLayout layout =
      config.style == RopeStyle::kGptj ? RopeCacheLayout::kGptj : RopeCacheLayout::kNeox;
  CheckCosSin(c, dtype, config, layout, spec, what);
  CheckRotation(c, dtype, config, TensorLayout::kBHSD, spec, what);
}

// The outputs of a VisionPositions plan.
struct VisionOutputs {
  VisionPositionsPlan plan;
  Buffer position_ids, flat_ids, window_index, cu_window_seqlens;

  explicit VisionOutputs(const VisionPositionsArgs& args) {
    absl::StatusOr<VisionPositionsPlan> p = PlanVisionPositions(args);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    plan = *p;
    position_ids = Buffer(plan.position_ids, kFill);
    if (plan.has_flat_ids()) flat_ids = Buffer(plan.flat_ids, kFill);
    if (plan.has_windows()) {
      window_index = Buffer(plan.window_index, kFill);
      cu_window_seqlens = Buffer(plan.cu_window_seqlens, kFill);
    }
    EXPECT_TRUE(RunVisionPositions(plan, position_ids.view, flat_ids.view, window_index.view,
                                   cu_window_seqlens.view)
                    .ok());
  }
  // position_ids [2, L] as transformers' [L, 2] pairs.
  std::vector<int64_t> Pairs() const {
    const std::vector<int64_t> a = Ints(position_ids);
    std::vector<int64_t> out(a.size());
    const size_t n = a.size() / 2;
    for (size_t i = 0; i < n; ++i) {
      out[2 * i] = a[i];
      out[2 * i + 1] = a[n + i];
    }
    return out;
  }
};

// A vision tower's 2-D RoPE: cos/sin through RopeCache (ids [2, L]) and, where the case has q/k,
// the rotation through ApplyRope (`layout` of the case's q/k).
struct VisionRope {
  RopeConfig config;
  RopeCacheLayout cache_layout = RopeCacheLayout::kNeox;
  TensorLayout qk_layout = TensorLayout::kBSHD;
};

void CheckVisionRope(const GoldenCase& c, DType dtype, const VisionRope& rope,
                     const Buffer& position_ids) {
  const std::string what = c.name + " " + std::string(DTypeName(dtype));
  const PositionSpec spec{.kind = PositionSpec::Kind::kIds, .ids = position_ids.view};
  CheckCosSin(c, dtype, rope.config, rope.cache_layout, spec, what);
  if (c.inputs.contains("q")) CheckRotation(c, dtype, rope.config, rope.qk_layout, spec, what);
}

RopeConfig VisionConfig(int64_t head_dim, double theta, MropeLayout layout) {
  RopeConfig config;
  config.head_dim = head_dim;
  config.base = theta;
  config.mrope_layout = layout;
  return config;
}

void CheckQwenVision(const GoldenCase& c) {
  VisionPositionsArgs args{.tower = VisionTower::kQwen,
                           .grid = IdsView(c.inputs.at("grid_thw")),
                           .spatial_merge_size = c.params.at("spatial_merge_size").get<int64_t>()};
  if (c.function == "qwen25vl_vision_window_rope") {
    args.window_size = c.params.at("window_size").get<int64_t>();
    args.patch_size = c.params.at("patch_size").get<int64_t>();
  }
  const VisionOutputs out(args);
  ExpectIds(out.Pairs(), c.outputs.at("pos_ids"), c.name + " pos_ids");
  if (args.window_size > 0) {
    ExpectIds(Ints(out.window_index), c.outputs.at("window_index"), c.name + " window_index");
    ExpectIds(Ints(out.cu_window_seqlens), c.outputs.at("cu_window_seqlens"),
              c.name + " cu_window_seqlens");
  }
  const VisionRope rope{.config = VisionConfig(c.params.at("vision_head_dim").get<int64_t>(),
                                               c.params.at("theta").get<double>(),
                                               MropeLayout::kVision2d)};
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    CheckVisionRope(c, dtype, rope, out.position_ids);
  }
}

void CheckPixtral(const GoldenCase& c) {
  const VisionOutputs out({.tower = VisionTower::kPixtral,
                           .grid = IdsView(c.inputs.at("patch_grid_hw")),
                           .patch_size = c.params.at("patch_size").get<int64_t>(),
                           .image_size = c.params.at("image_size").get<int64_t>()});
  ExpectIds(Ints(out.flat_ids), c.outputs.at("position_ids"), c.name + " position_ids");
  const VisionRope rope{.config = VisionConfig(c.params.at("head_dim").get<int64_t>(),
                                               c.params.at("rope_theta").get<double>(),
                                               MropeLayout::kVision2dEvenOdd),
                        .qk_layout = TensorLayout::kBHSD};
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    CheckVisionRope(c, dtype, rope, out.position_ids);
  }
}

void CheckLlama4Vision(const GoldenCase& c) {
  const VisionOutputs out({.tower = VisionTower::kLlama4,
                           .patch_size = c.params.at("patch_size").get<int64_t>(),
                           .image_size = c.params.at("image_size").get<int64_t>()});
  VisionRope rope{
      .config = VisionConfig(c.params.at("head_dim").get<int64_t>(),
                             c.params.at("rope_theta").get<double>(), MropeLayout::kVision2d),
      .cache_layout = RopeCacheLayout::kCompact};
  rope.config.style = RopeStyle::kGptj;
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    CheckVisionRope(c, dtype, rope, out.position_ids);
  }
}

// k [S, Hkv, D] rotated (NEOX) at positions [S], moved by delta [S] (THD, per token), against
// the direct rotation of the unrotated key at positions + delta.
void CheckKvRerotate(const GoldenCase& c, DType dtype) {
  RopeConfig config;
  config.head_dim = c.params.at("head_dim").get<int64_t>();
  config.rotary_dim = c.params.at("rotary_dim").get<int64_t>();
  config.base = c.params.at("rope_theta").get<double>();
  const NpyArray& k_in = c.inputs.at("k");
  Buffer k = Filled(dtype, k_in);
  auto plan = PlanRerotateKeys(
      {.config = config,
       .layout = TensorLayout::kTHD,
       .k = k.view,
       .positions = {.kind = PositionSpec::Kind::kIds, .ids = IdsView(c.inputs.at("positions"))},
       .delta = IdsView(c.inputs.at("delta"))});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto run = RunRerotateKeys(UnderTest(), *plan, /*cache=*/nullptr, k.view);
  ASSERT_TRUE(run.ok()) << run.status();
  ExpectNear(ReadAll(k.view), c.outputs.at("k_rerotated"), Tolerance(c, dtype, MaxAbs(k_in)),
             c.name + " " + std::string(DTypeName(dtype)) + " k_rerotated");
}

MultimodalFamily Family(const std::string& model) {
  for (const MultimodalRule& r : MultimodalRules()) {
    if (r.name == model) return r.family;
  }
  ADD_FAILURE() << "unknown model " << model;
  return MultimodalFamily::kQwen2Vl;
}

// get_rope_index: the token form with the case's special token ids.
void CheckRopeIndex(const GoldenCase& c) {
  const auto& p = c.params;
  MultimodalPositionsArgs args{.family = Family(p.at("model").get<std::string>()),
                               .spatial_merge_size = p.at("spatial_merge_size").get<int64_t>(),
                               .tokens_per_second = p.value("tokens_per_second", 0.0),
                               .input_ids = IdsView(c.inputs.at("input_ids"))};
  MultimodalTokenIds& id = args.token_ids;
  id.image = p.at("image_token_id").get<int64_t>();
  id.video = p.at("video_token_id").get<int64_t>();
  id.vision_start = p.value("vision_start_token_id", int64_t{-1});
  id.video_start = p.value("video_start_token_id", int64_t{-1});
  id.video_end = p.value("video_end_token_id", int64_t{-1});
  auto optional = [&](const char* name) {
    return c.inputs.contains(name) ? IdsView(c.inputs.at(name)) : ConstTensorView{};
  };
  args.attention_mask = optional("attention_mask");
  args.image_grid_thw = optional("image_grid_thw");
  args.video_grid_thw = optional("video_grid_thw");
  if (c.inputs.contains("second_per_grid_ts")) {
    const NpyArray& s = c.inputs.at("second_per_grid_ts");
    args.second_per_grid_ts = {DType::kFloat64, Shape(s.shape.begin(), s.shape.end()),
                               s.values.data()};
  }
  auto plan = PlanMultimodalPositions(args);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer ids(plan->position_ids, kFill), deltas(plan->mrope_position_deltas, kFill);
  const absl::Status run = RunMultimodalPositions(*plan, ids.view, deltas.view);
  ASSERT_TRUE(run.ok()) << run;
  ExpectIds(Ints(ids), c.outputs.at("position_ids"), c.name + " position_ids");
  ExpectIds(Ints(deltas), c.outputs.at("mrope_position_deltas"), c.name + " deltas");
}

void CheckDecode(const GoldenCase& c) {
  auto plan = PlanMultimodalDecode({.deltas = IdsView(c.inputs.at("mrope_position_deltas")),
                                    .prompt_length = c.params.at("prompt_length").get<int64_t>(),
                                    .num_steps = c.params.at("num_steps").get<int64_t>()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer ids(plan->position_ids, kFill);
  ASSERT_TRUE(RunMultimodalDecode(*plan, ids.view).ok());
  ExpectIds(Ints(ids), c.outputs.at("position_ids"), c.name + " position_ids");
}

using Check = std::function<void(const GoldenCase&)>;

void InFloat64And32(const GoldenCase& c, void (*check)(const GoldenCase&, DType)) {
  check(c, DType::kFloat64);
  check(c, DType::kFloat32);
}

const std::map<std::string, Check>& Checks() {
  static const auto* const checks = new std::map<std::string, Check>{
      {"mrope_apply", [](const GoldenCase& c) { InFloat64And32(c, CheckMropeApply); }},
      {"qwen_vision_rope", CheckQwenVision},
      {"qwen25vl_vision_window_rope", CheckQwenVision},
      {"pixtral_rope_2d", CheckPixtral},
      {"mrope_rope_index", CheckRopeIndex},
      {"mrope_decode_position_ids", CheckDecode},
      {"kv_rerotate", [](const GoldenCase& c) { InFloat64And32(c, CheckKvRerotate); }},
      {"llama4_vision_rope", CheckLlama4Vision},
  };
  return *checks;
}

class GoldenMultimodalTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenMultimodalTest, MatchesEveryBackend) {
  absl::StatusOr<GoldenCase> loaded =
      ::posenc::testing::LoadGoldenCase(::posenc::testing::GoldenMultimodalDir(), GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const auto check = Checks().find(loaded->function);
  ASSERT_NE(check, Checks().end()) << "unknown golden function " << loaded->function;
  for (const auto& backend : ::posenc::testing::EveryTestBackend()) {
    SCOPED_TRACE(std::string(backend->name()) + " " + backend->detail());
    g_backend = backend.get();
    check->second(*loaded);
  }
  g_backend = nullptr;
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenMultimodalTest,
                         ::testing::ValuesIn(::posenc::testing::ListGoldenCases(
                             ::posenc::testing::GoldenMultimodalDir())),
                         [](const auto& info) { return info.param; });

// The 23 cases from transformers and the 3 hand-derived ERNIE-4.5-VL ones (hand_*).
TEST(GoldenMultimodalDirTest, HasEveryCase) {
  EXPECT_EQ(::posenc::testing::ListGoldenCases(::posenc::testing::GoldenMultimodalDir()).size(),
            26u)
      << "cases not found in " << ::posenc::testing::GoldenMultimodalDir();
}

}  // namespace
}  // namespace posenc::kernels
