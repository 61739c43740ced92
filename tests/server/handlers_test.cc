// Handler happy paths: every RPC's response equals a direct call of the kernels with the same
// parameters (byte for byte, on the reference backend: plan, then run), with the right dtype and
// shape.
#include "server/handlers.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/analysis/analysis.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/ops.h"
#include "server/admission.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::FloatTensor, testing::Int64Tensor, testing::MakeTensor, testing::Parse,
    testing::TestContext, testing::Values;

template <typename Message>
std::vector<int64_t> ShapeOf(const Message& t) {
  return {t.shape().begin(), t.shape().end()};
}

kernels::ConstTensorView View(const v1::Tensor& t, kernels::DType dtype) {
  return {dtype, kernels::Shape(t.shape().begin(), t.shape().end()), t.data().data()};
}

// Zeroed bytes for a planned output; `view` views them.
std::string Allocate(const kernels::OutputSpec& spec, kernels::TensorView* view) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  std::string bytes(static_cast<size_t>(n * kernels::DTypeSize(spec.dtype)), '\0');
  *view = {spec.dtype, spec.shape, bytes.data()};
  return bytes;
}

// The bytes `run` writes into a zeroed output planned as `spec`; `run` must succeed.
std::string RunInto(const kernels::OutputSpec& spec,
                    const std::function<absl::Status(const kernels::TensorView&)>& run) {
  kernels::TensorView view;
  std::string bytes = Allocate(spec, &view);
  const absl::Status status = run(view);
  EXPECT_TRUE(status.ok()) << status;
  return bytes;
}

TEST(HandleApplyRopeTest, MatchesDirectKernelCall) {
  TestContext t;
  v1::ApplyRopeRequest req;
  *req.mutable_q() = FloatTensor({2, 5, 3, 16});
  *req.mutable_k() = FloatTensor({2, 5, 1, 16}, -0.75f);
  req.mutable_positions()->mutable_offsets()->add_offsets(3);
  req.mutable_positions()->mutable_offsets()->add_offsets(7);
  v1::RopeConfig* config = req.mutable_config();
  config->set_rotary_dim(8);
  config->set_base(500000);
  config->set_style(v1::ROPE_STYLE_GPTJ);
  config->mutable_scaling()->set_type(v1::ROPE_SCALING_YARN);
  config->mutable_scaling()->set_factor(4);
  config->mutable_scaling()->set_original_max_position_embeddings(2048);

  v1::ApplyRopeResponse resp;
  grpc::Status status = HandleApplyRope(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();

  // The same through the kernels.
  const kernels::RopeConfig cfg{.rotary_dim = 8,
                                .base = 500000,
                                .style = kernels::RopeStyle::kGptj,
                                .scaling = {.type = kernels::RopeScalingType::kYarn,
                                            .factor = 4,
                                            .original_max_position_embeddings = 2048}};
  kernels::PositionSpec spec;
  spec.kind = kernels::PositionSpec::Kind::kOffsets;
  spec.offsets = {3, 7};
  const kernels::ConstTensorView q = View(req.q(), kernels::DType::kFloat32);
  const kernels::ConstTensorView k = View(req.k(), kernels::DType::kFloat32);
  std::string q_bytes = req.q().data(), k_bytes = req.k().data();  // rotated in place
  kernels::TensorView q_out{q.dtype, q.shape, q_bytes.data()};
  kernels::TensorView k_out{k.dtype, k.shape, k_bytes.data()};
  auto plan = kernels::PlanApplyRope({.config = cfg,
                                      .layout = kernels::TensorLayout::kBSHD,
                                      .q = q_out,
                                      .k = k_out,
                                      .positions = spec});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto run = kernels::RunApplyRope(*t.backend, *plan, /*cache=*/nullptr, q_out, k_out);
  ASSERT_TRUE(run.ok()) << run.status();
  const kernels::RopeFrequencies* freqs = run->frequencies.get();

  EXPECT_EQ(resp.q().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(ShapeOf(resp.q()), (std::vector<int64_t>{2, 5, 3, 16}));
  EXPECT_EQ(ShapeOf(resp.k()), (std::vector<int64_t>{2, 5, 1, 16}));
  EXPECT_EQ(resp.q().data(), q_bytes);
  EXPECT_EQ(resp.k().data(), k_bytes);
  EXPECT_NE(resp.q().data(), req.q().data());  // it did rotate

  const v1::RopeDerived& d = resp.derived();
  EXPECT_EQ(d.head_dim(), 16);
  EXPECT_EQ(d.rotary_dim(), 8);
  EXPECT_EQ(d.style(), v1::ROPE_STYLE_GPTJ);
  EXPECT_EQ(d.scaling_type(), v1::ROPE_SCALING_YARN);
  EXPECT_DOUBLE_EQ(d.attention_factor(), freqs->attention_factor);
  EXPECT_TRUE(d.attention_factor_applied());
  EXPECT_DOUBLE_EQ(d.factor(), 4.0);
  EXPECT_DOUBLE_EQ(d.yarn_low(), freqs->yarn_low);
  EXPECT_DOUBLE_EQ(d.yarn_high(), freqs->yarn_high);
  ASSERT_EQ(d.inv_freq_size(), 4);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(d.inv_freq(j), static_cast<double>(freqs->inv_freq[j])) << j;
  }
}

TEST(HandleApplyRopeTest, InverseUndoesForwardInFloat64WithoutK) {
  TestContext t;
  std::vector<double> x(1 * 3 * 6 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i)) * 3.0;
  v1::ApplyRopeRequest req;
  *req.mutable_q() = MakeTensor(v1::DTYPE_FLOAT64, {1, 3, 6, 32}, x);  // BHSD: 3 heads, 6 tokens
  req.set_layout(v1::TENSOR_LAYOUT_BHSD);
  req.mutable_positions()->mutable_range()->set_start(1000);
  req.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_YARN);
  req.mutable_config()->mutable_scaling()->set_factor(8);
  req.mutable_config()->mutable_scaling()->set_original_max_position_embeddings(512);

  v1::ApplyRopeResponse forward;
  ASSERT_TRUE(HandleApplyRope(t.ctx, req, &forward).ok());
  EXPECT_FALSE(forward.has_k());
  EXPECT_GT(forward.derived().attention_factor(), 1.0);

  *req.mutable_q() = forward.q();
  req.mutable_config()->set_inverse(true);
  v1::ApplyRopeResponse back;
  ASSERT_TRUE(HandleApplyRope(t.ctx, req, &back).ok());
  const std::vector<double> y = Values<double>(back.q());
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-12) << i;
}

TEST(HandleRopeCacheTest, MatchesDirectKernelCall) {
  TestContext t;
  v1::RopeCacheRequest req;
  *req.mutable_positions()->mutable_ids() = Int64Tensor({2, 3}, {0, 5, 9, 100, 4096, 70000});
  req.mutable_config()->set_head_dim(64);
  req.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_LLAMA3);
  req.mutable_config()->mutable_scaling()->set_factor(8);
  req.mutable_config()->mutable_scaling()->set_low_freq_factor(1);
  req.mutable_config()->mutable_scaling()->set_high_freq_factor(4);
  req.mutable_config()->mutable_scaling()->set_original_max_position_embeddings(8192);
  req.set_output_dtype(v1::DTYPE_FLOAT64);
  req.set_layout(v1::ROPE_CACHE_LAYOUT_NEOX);
  v1::RopeCacheResponse resp;
  grpc::Status status = HandleRopeCache(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();

  const kernels::RopeConfig cfg{.head_dim = 64,
                                .scaling = {.type = kernels::RopeScalingType::kLlama3,
                                            .factor = 8,
                                            .original_max_position_embeddings = 8192,
                                            .low_freq_factor = 1,
                                            .high_freq_factor = 4}};
  kernels::PositionSpec spec;
  spec.kind = kernels::PositionSpec::Kind::kIds;
  spec.ids = View(req.positions().ids(), kernels::DType::kInt64);
  auto plan = kernels::PlanRopeCache({.config = cfg,
                                      .layout = kernels::RopeCacheLayout::kNeox,
                                      .positions = spec,
                                      .output_dtype = kernels::DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cos.shape, (kernels::Shape{2, 3, 64}));
  kernels::TensorView cos, sin;
  std::string cos_bytes = Allocate(plan->cos, &cos);
  std::string sin_bytes = Allocate(plan->sin, &sin);
  auto run = kernels::RunRopeCache(*t.backend, *plan, /*cache=*/nullptr, cos, sin);
  ASSERT_TRUE(run.ok()) << run.status();
  const kernels::RopeFrequencies* freqs = run->frequencies.get();

  EXPECT_EQ(resp.cos().dtype(), v1::DTYPE_FLOAT64);
  EXPECT_EQ(ShapeOf(resp.cos()), (std::vector<int64_t>{2, 3, 64}));
  EXPECT_EQ(ShapeOf(resp.sin()), (std::vector<int64_t>{2, 3, 64}));
  EXPECT_EQ(resp.cos().data(), cos_bytes);
  EXPECT_EQ(resp.sin().data(), sin_bytes);
  EXPECT_EQ(resp.derived().scaling_type(), v1::ROPE_SCALING_LLAMA3);
  ASSERT_EQ(resp.derived().inv_freq_size(), 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(resp.derived().inv_freq(j), static_cast<double>(freqs->inv_freq[j]));
  }
}

TEST(HandleRopeCacheTest, DefaultsAreFloat32Compact) {
  TestContext t;
  auto req = Parse<v1::RopeCacheRequest>(
      "positions { range { start: 10 count: 7 } } config { head_dim: 128 rotary_dim: 64 }");
  v1::RopeCacheResponse resp;
  ASSERT_TRUE(HandleRopeCache(t.ctx, req, &resp).ok());
  EXPECT_EQ(resp.cos().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(ShapeOf(resp.cos()), (std::vector<int64_t>{7, 32}));
  EXPECT_EQ(resp.cos().data().size(), 7u * 32u * 4u);
  EXPECT_EQ(resp.derived().effective_base(), 10000.0);
  EXPECT_EQ(resp.derived().attention_factor(), 1.0);
  // cos(p * omega_0) with omega_0 = 1: position 10.
  EXPECT_NEAR(Values<float>(resp.cos())[0], std::cos(10.0), 1e-6);

  req.set_output_dtype(v1::DTYPE_BFLOAT16);
  v1::RopeCacheResponse bf16;
  ASSERT_TRUE(HandleRopeCache(t.ctx, req, &bf16).ok());
  EXPECT_EQ(bf16.sin().dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(bf16.sin().data().size(), 7u * 32u * 2u);
}

TEST(HandleAnalyzeEncodingTest, MatchesDirectKernelCall) {
  TestContext t;
  const auto req = Parse<v1::AnalyzeEncodingRequest>(
      "alibi { num_heads: 1 } start: 0 count: 1000 collision_dtype: DTYPE_BFLOAT16 distances: [3] "
      "properties: [ANALYSIS_PROPERTY_UNIQUENESS, ANALYSIS_PROPERTY_BOUNDS, "
      "ANALYSIS_PROPERTY_RELATIVE]");
  v1::AnalyzeEncodingResponse resp;
  ASSERT_TRUE(HandleAnalyzeEncoding(t.ctx, req, &resp).ok());
  kernels::AnalysisArgs args;
  args.encoding.family = kernels::AnalysisFamily::kAlibi;
  args.encoding.alibi.num_heads = 1;
  args.count = 1000;
  args.collision_dtype = kernels::DType::kBFloat16;
  args.distances = {3};
  args.properties = {kernels::AnalysisProperty::kUniqueness, kernels::AnalysisProperty::kBounds,
                     kernels::AnalysisProperty::kRelative};
  auto plan = kernels::PlanAnalysis(args);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto want = kernels::RunAnalysis(*t.backend, *plan);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(resp.family(), "alibi");
  EXPECT_EQ(resp.width(), 1);
  EXPECT_EQ(resp.uniqueness().min_distance(), want->uniqueness->min_distance);
  EXPECT_TRUE(resp.uniqueness().collision_found());
  EXPECT_EQ(resp.uniqueness().collision_dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(resp.uniqueness().collision_q(), 257);
  EXPECT_EQ(resp.bounds().values().min(), want->bounds->values.min);
  EXPECT_EQ(resp.bounds().norms().max(), want->bounds->norms.max);
  EXPECT_TRUE(resp.relative().bias().depends_on_distance_only());
  EXPECT_FALSE(resp.has_decay());
}

TEST(HandleAnalyzeEncodingTest, RangeOverTheOutputLimitIsResourceExhausted) {
  TestContext t;
  t.ctx.limits.max_output_elements = 100;
  v1::AnalyzeEncodingResponse resp;
  const grpc::Status status = HandleAnalyzeEncoding(
      t.ctx, Parse<v1::AnalyzeEncodingRequest>("sinusoidal { dim: 4 } count: 101"), &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("--max_output_elements=100"), std::string::npos);
}

TEST(HandleSinusoidalTest, MatchesDirectKernelCall) {
  TestContext t;
  const auto req = Parse<v1::SinusoidalRequest>(
      "positions { range { start: 3 count: 9 } } params { dim: 17 layout: SINUSOIDAL_LAYOUT_CONCAT "
      "}"
      " output_dtype: DTYPE_FLOAT16");
  v1::SinusoidalResponse resp;
  ASSERT_TRUE(HandleSinusoidal(t.ctx, req, &resp).ok());

  const kernels::SinusoidalParams params{.dim = 17, .layout = kernels::SinusoidalLayout::kConcat};
  const kernels::PositionSpec spec{
      .kind = kernels::PositionSpec::Kind::kRange, .start = 3, .count = 9};
  auto plan = kernels::PlanSinusoidal(
      {.params = params, .positions = spec, .output_dtype = kernels::DType::kFloat16});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(resp.table().dtype(), v1::DTYPE_FLOAT16);
  EXPECT_EQ(ShapeOf(resp.table()), (std::vector<int64_t>{9, 17}));
  EXPECT_EQ(resp.table().data(), RunInto(plan->table, [&](const kernels::TensorView& out) {
              return kernels::RunSinusoidal(*t.backend, *plan, out);
            }));
}

TEST(HandleAddPositionEncodingTest, LearnedTableByNameEqualsInline) {
  TestContext t;
  const v1::Tensor table = FloatTensor({10, 8}, 1.5f);
  ASSERT_TRUE(
      t.tables.Add("opt_positions", kernels::DType::kFloat32, kernels::Shape{10, 8}, table.data())
          .ok());
  v1::AddPositionEncodingRequest req;
  *req.mutable_x() = FloatTensor({2, 4, 8});
  req.mutable_positions()->mutable_offsets()->add_offsets(0);
  req.mutable_positions()->mutable_offsets()->add_offsets(4);
  req.set_scale(2.0);
  req.mutable_learned()->set_table_offset(2);
  *req.mutable_learned()->mutable_table_inline() = table;
  v1::AddPositionEncodingResponse inline_resp;
  ASSERT_TRUE(HandleAddPositionEncoding(t.ctx, req, &inline_resp).ok());

  req.mutable_learned()->set_table_name("opt_positions");
  v1::AddPositionEncodingResponse named_resp;
  grpc::Status status = HandleAddPositionEncoding(t.ctx, req, &named_resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(named_resp.y().data(), inline_resp.y().data());
  EXPECT_EQ(ShapeOf(named_resp.y()), (std::vector<int64_t>{2, 4, 8}));

  // y = 2x + E[p + 2]: token (1, 3) has position 7 and reads row 9.
  const std::vector<float> x = Values<float>(req.x());
  const std::vector<float> e = Values<float>(table);
  const std::vector<float> y = Values<float>(named_resp.y());
  for (int c = 0; c < 8; ++c) {
    const int i = (1 * 4 + 3) * 8 + c;
    EXPECT_FLOAT_EQ(y[i], 2.0f * x[i] + e[9 * 8 + c]);
  }

  // An unknown name lists the loaded tables.
  req.mutable_learned()->set_table_name("bart");
  status = HandleAddPositionEncoding(t.ctx, req, &named_resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "learned.table_name: no table named \"bart\" (loaded: opt_positions)");
}

TEST(HandleAddPositionEncodingTest, SinusoidalConcatMatchesDirectCall) {
  TestContext t;
  v1::AddPositionEncodingRequest req;
  *req.mutable_x() = FloatTensor({3, 6});  // [T, D]: B = 1
  req.set_combine(v1::COMBINE_CONCAT);
  req.mutable_sinusoidal()->set_dim(4);
  v1::AddPositionEncodingResponse resp;
  grpc::Status status = HandleAddPositionEncoding(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ShapeOf(resp.y()), (std::vector<int64_t>{3, 10}));

  kernels::AddPositionEncodingParams params;
  params.combine = kernels::Combine::kConcat;
  params.sinusoidal = kernels::SinusoidalParams{};
  params.sinusoidal->dim = 4;
  const kernels::ConstTensorView x = View(req.x(), kernels::DType::kFloat32);
  auto plan = kernels::PlanAddPositionEncoding(
      {.params = params, .x = x, .positions = kernels::PositionSpec{}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(resp.y().data(), RunInto(plan->y, [&](const kernels::TensorView& y) {  // FLOAT32
              return kernels::RunAddPositionEncoding(*t.backend, *plan, y);
            }));
}

TEST(HandleAlibiSlopesTest, DefaultFloat32AndFloat64MatchKernel) {
  TestContext t;
  v1::AlibiSlopesRequest req;
  req.set_num_heads(12);
  v1::AlibiSlopesResponse resp;
  ASSERT_TRUE(HandleAlibiSlopes(t.ctx, req, &resp).ok());
  auto expected = kernels::AlibiSlopes(12, 8.0);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(resp.slopes().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(ShapeOf(resp.slopes()), (std::vector<int64_t>{12}));
  const std::vector<float> f32 = Values<float>(resp.slopes());
  for (int h = 0; h < 12; ++h) EXPECT_EQ(f32[h], static_cast<float>((*expected)[h]));

  req.set_output_dtype(v1::DTYPE_FLOAT64);
  req.set_max_bias(16);
  ASSERT_TRUE(HandleAlibiSlopes(t.ctx, req, &resp).ok());
  expected = kernels::AlibiSlopes(12, 16.0);
  EXPECT_EQ(Values<double>(resp.slopes()), *expected);
}

TEST(HandleAlibiBiasTest, MatchesDirectKernelCall) {
  TestContext t;
  const auto req =
      Parse<v1::AlibiBiasRequest>("num_heads: 6 q_len: 4 k_len: 9 future: FUTURE_MODE_LINEAR");
  v1::AlibiBiasResponse resp;
  ASSERT_TRUE(HandleAlibiBias(t.ctx, req, &resp).ok());

  const kernels::AlibiBiasParams params{
      .num_heads = 6, .q_len = 4, .k_len = 9, .future = kernels::FutureMode::kLinear};
  auto plan = kernels::PlanAlibiBias({.params = params, .output_dtype = kernels::DType::kFloat32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  kernels::TensorView out, slopes;
  std::string bytes = Allocate(plan->bias, &out);
  std::string slope_bytes = Allocate(plan->slopes, &slopes);
  ASSERT_TRUE(kernels::RunAlibiBias(*t.backend, *plan, out, slopes).ok());
  EXPECT_EQ(ShapeOf(resp.bias()), (std::vector<int64_t>{6, 4, 9}));
  EXPECT_EQ(resp.bias().data(), bytes);
  EXPECT_EQ(resp.slopes().dtype(), v1::DTYPE_FLOAT64);
  EXPECT_EQ(Values<double>(resp.slopes()), *kernels::AlibiSlopes(6, 8.0));
}

TEST(HandleRelativeBiasTest, BucketsAndNamedTableMatchKernels) {
  TestContext t;
  v1::RelativeBiasRequest req;
  req.set_q_len(5);
  req.set_k_len(7);
  req.set_bidirectional(false);
  req.set_form(v1::BIAS_FORM_BUCKETS);
  v1::RelativeBiasResponse resp;
  grpc::Status status = HandleRelativeBias(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.bias().dtype(), v1::DTYPE_INT32);
  EXPECT_EQ(ShapeOf(resp.bias()), (std::vector<int64_t>{5, 7}));
  const std::vector<int32_t> buckets = Values<int32_t>(resp.bias());
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) {
      const int64_t rp = j - (i + 7 - 5);  // query_offset defaults to k_len - q_len
      EXPECT_EQ(buckets[i * 7 + j], kernels::T5Bucket(rp, false, 32, 128)) << i << "," << j;
    }
  }

  const v1::Tensor table = FloatTensor({32, 3});
  ASSERT_TRUE(t.tables.Add("t5", kernels::DType::kFloat32, {32, 3}, table.data()).ok());
  req.set_form(v1::BIAS_FORM_FULL);
  req.set_table_name("t5");
  status = HandleRelativeBias(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();

  const kernels::RelativeBiasParams params{.q_len = 5,
                                           .k_len = 7,
                                           .bidirectional = false,
                                           .table = View(table, kernels::DType::kFloat32)};
  auto plan =
      kernels::PlanRelativeBias({.params = params, .output_dtype = kernels::DType::kFloat32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(ShapeOf(resp.bias()), (std::vector<int64_t>{3, 5, 7}));
  EXPECT_EQ(resp.bias().data(), RunInto(plan->bias, [&](const kernels::TensorView& out) {
              return kernels::RunRelativeBias(*t.backend, *plan, out);
            }));
}

TEST(HandleRelativeEmbeddingTest, MatchesDirectKernelCall) {
  TestContext t;
  auto req = Parse<v1::RelativeEmbeddingRequest>("q_len: 3 k_len: 6 max_relative: 2 key_offset: 1");
  *req.mutable_table_inline() = FloatTensor({5, 4});
  req.set_output_dtype(v1::DTYPE_FLOAT64);
  v1::RelativeEmbeddingResponse resp;
  ASSERT_TRUE(HandleRelativeEmbedding(t.ctx, req, &resp).ok());

  const kernels::RelativeEmbeddingParams params{
      .q_len = 3,
      .k_len = 6,
      .max_relative = 2,
      .key_offset = 1,
      .table = View(req.table_inline(), kernels::DType::kFloat32)};
  auto plan =
      kernels::PlanRelativeEmbedding({.params = params, .output_dtype = kernels::DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(ShapeOf(resp.embeddings()), (std::vector<int64_t>{3, 6, 4}));
  EXPECT_EQ(resp.embeddings().data(),
            RunInto(plan->embeddings, [&](const kernels::TensorView& out) {
              return kernels::RunRelativeEmbedding(*t.backend, *plan, out);
            }));
}

TEST(HandleGetServerInfoTest, ReportsBackendLimitsAndTables) {
  TestContext t;
  t.ctx.limits = Limits{1000, 4096};
  ASSERT_TRUE(t.tables.Add("rel", kernels::DType::kFloat16, {5, 2}, std::string(20, '\0')).ok());
  v1::GetServerInfoResponse resp;
  ASSERT_TRUE(HandleGetServerInfo(t.ctx, v1::GetServerInfoRequest(), &resp).ok());
  EXPECT_FALSE(resp.version().empty());
  EXPECT_FALSE(resp.build().empty());
  ASSERT_EQ(resp.backends_size(), 1);
  EXPECT_EQ(resp.backends(0).name(), "reference");
  EXPECT_TRUE(resp.backends(0).is_default());
  EXPECT_EQ(resp.limits().max_output_elements(), 1000);
  EXPECT_EQ(resp.limits().max_message_bytes(), 4096);
  ASSERT_EQ(resp.tables_size(), 1);
  EXPECT_EQ(resp.tables(0).name(), "rel");
  EXPECT_EQ(resp.tables(0).dtype(), v1::DTYPE_FLOAT16);
  EXPECT_EQ(ShapeOf(resp.tables(0)), (std::vector<int64_t>{5, 2}));
}

// A device backend beside a host backend (as the cuda backend beside the process's cpu
// backend): calls under 1000 bytes of output go to the host; it stages through host memory as
// large as its outputs; usable, or broken by a sticky error (then Usable() says why). Its ops
// are never run here: they fail.
class FakeDeviceBackend final : public kernels::Backend {
 public:
  FakeDeviceBackend(bool usable, const kernels::Backend* host) : usable_(usable), host_(host) {}
  absl::string_view name() const override { return "cuda"; }
  std::string detail() const override { return usable_ ? "device 0" : "device 0: BROKEN"; }
  absl::Status Usable() const override { return usable_ ? absl::OkStatus() : Broken(); }
  int64_t HostStagingBytes(int64_t output_bytes) const override { return output_bytes; }
  const kernels::Backend* host() const override { return host_; }
  int64_t small_call_bytes() const override { return 1000; }
  absl::Status Sinusoidal(const kernels::SinusoidalPlan&, const kernels::ResolvedPositions&,
                          const kernels::TensorView&) const override {
    return Broken();
  }
  absl::Status AddPositionEncoding(const kernels::AddPositionEncodingPlan&,
                                   const kernels::ResolvedPositions&,
                                   const kernels::TensorView&) const override {
    return Broken();
  }
  absl::Status RopeCache(const kernels::RopeCachePlan&, const kernels::RopeFrequencies&,
                         const kernels::ResolvedPositions&, const kernels::TensorView&,
                         const kernels::TensorView&) const override {
    return Broken();
  }
  absl::Status ApplyRope(const kernels::ApplyRopePlan&, const kernels::RopeFrequencies&,
                         const kernels::ResolvedPositions&, const kernels::TensorView&,
                         const kernels::TensorView&) const override {
    return Broken();
  }
  absl::Status AlibiBias(const kernels::AlibiBiasPlan&, absl::Span<const double>,
                         const kernels::TensorView&) const override {
    return Broken();
  }
  absl::Status RelativeBias(const kernels::RelativeBiasPlan&,
                            const kernels::TensorView&) const override {
    return Broken();
  }
  absl::Status RelativeEmbedding(const kernels::RelativeEmbeddingPlan&,
                                 const kernels::TensorView&) const override {
    return Broken();
  }

 private:
  static absl::Status Broken() {
    return absl::InternalError(
        "cuda: device 0 unusable after a sticky error: cudaErrorIllegalAddress");
  }
  const bool usable_;
  const kernels::Backend* host_;
};

// A handler context whose backend is a FakeDeviceBackend beside the cpu backend.
struct DeviceBesideCpu {
  explicit DeviceBesideCpu(bool usable)
      : cpu(*kernels::MakeCpuBackend(kernels::CpuBackendOptions{})), device(usable, cpu.get()) {
    t.ctx.backend = &device;
  }
  std::unique_ptr<kernels::Backend> cpu;
  FakeDeviceBackend device;
  TestContext t;
};

TEST(HandleGetServerInfoTest, ListsTheHostBackendAndCuda) {
  DeviceBesideCpu c(/*usable=*/true);
  TestContext& t = c.t;
  t.ctx.devices = {{.index = 0,
                    .name = "GPU",
                    .total_memory_bytes = 1 << 30,
                    .compute_capability_major = 9,
                    .compute_capability_minor = 0,
                    .driver_version = "13.0",
                    .runtime_version = "13.0"}};
  t.ctx.cuda_device = 0;
  v1::GetServerInfoResponse resp;
  ASSERT_TRUE(HandleGetServerInfo(t.ctx, v1::GetServerInfoRequest(), &resp).ok());
  ASSERT_EQ(resp.backends_size(), 2);
  EXPECT_EQ(resp.backends(0).name(), "cuda");
  EXPECT_TRUE(resp.backends(0).is_default());
  EXPECT_EQ(resp.backends(0).small_call_bytes(), 1000);
  EXPECT_EQ(resp.backends(1).name(), "cpu");
  EXPECT_FALSE(resp.backends(1).is_default());
  EXPECT_EQ(resp.backends(1).small_call_bytes(), 0);
  EXPECT_EQ(resp.cuda_built_in(), kernels::CudaBuiltIn());
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).compute_capability(), "9.0");
  EXPECT_EQ(resp.devices(0).total_memory_bytes(), 1 << 30);
  EXPECT_TRUE(resp.devices(0).in_use());
}

// Backend::For, the one choice: a device backend's calls whose planned outputs total under its
// small_call_bytes run on its host backend, and each call is counted by the backend that ran it.
TEST(AdmitOutputsTest, SmallCallsRunOnTheHostBackend) {
  DeviceBesideCpu c(/*usable=*/true);
  TestContext& t = c.t;
  Metrics metrics;
  t.ctx.metrics = &metrics;
  const kernels::Shape small{10, 10}, large{10, 100};  // 400 and 4000 bytes of FLOAT32
  auto backend = AdmitOutputs(t.ctx, {{"table", kernels::DType::kFloat32, &small}});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ(*backend, c.cpu.get());
  backend = AdmitOutputs(t.ctx, {{"table", kernels::DType::kFloat32, &large}});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ(*backend, &c.device);
  const std::string text = metrics.Text();
  EXPECT_NE(text.find("posenc_backend_calls_total{backend=\"cpu\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("posenc_backend_calls_total{backend=\"cuda\"} 1"), std::string::npos);
  EXPECT_NE(text.find("posenc_backend_calls_total{backend=\"reference\"} 0"), std::string::npos);

  // A host backend runs every call itself; limits still apply.
  TestContext host;
  backend = AdmitOutputs(host.ctx, {{"table", kernels::DType::kFloat32, &small}});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "reference");
  host.ctx.limits.max_output_elements = 50;
  EXPECT_EQ(AdmitOutputs(host.ctx, {{"table", kernels::DType::kFloat32, &small}}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(AdmitOutputsTest, DeviceCallsAlsoHoldTheirHostStaging) {
  DeviceBesideCpu c(/*usable=*/true);
  TestContext& t = c.t;
  AdmissionControl control({.max_inflight_bytes = 1 << 20});
  const kernels::Shape small{10, 10}, large{10, 100};  // 400 and 4000 bytes of FLOAT32
  {
    CallAdmission call(&control, /*request_bytes=*/100);
    ScopedCallAdmission scope(&call);
    auto backend = AdmitOutputs(t.ctx, {{"table", kernels::DType::kFloat32, &large}});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cuda");
    EXPECT_EQ(control.inflight_bytes(), 100 + 2 * 4000 + 4000);  // request, response x2, staging
  }
  {
    CallAdmission call(&control, /*request_bytes=*/100);
    ScopedCallAdmission scope(&call);
    auto backend = AdmitOutputs(t.ctx, {{"table", kernels::DType::kFloat32, &small}});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cpu");
    EXPECT_EQ(control.inflight_bytes(), 100 + 2 * 400);  // the cpu backend stages nothing
  }
  EXPECT_EQ(control.inflight_bytes(), 0);
}

TEST(AdmitOutputsTest, CallsLeaveABackendThatCannotComputeAnyMore) {
  DeviceBesideCpu c(/*usable=*/false);
  TestContext& t = c.t;
  std::vector<absl::Status> told;
  t.ctx.on_backend_unusable = [&](const absl::Status& why) { told.push_back(why); };
  const kernels::Shape small{10, 10}, large{10, 100};  // 400 and 4000 bytes of FLOAT32
  // Small calls and large ones alike run on the cpu backend, and the server is told each time.
  for (const kernels::Shape* shape : {&small, &large}) {
    auto backend = AdmitOutputs(t.ctx, {{"table", kernels::DType::kFloat32, shape}});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cpu");
  }
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[0].code(), absl::StatusCode::kInternal);
  EXPECT_NE(told[0].message().find("cudaErrorIllegalAddress"), std::string::npos);

  // A whole RPC: computed on the cpu backend, correct.
  const auto req = Parse<v1::SinusoidalRequest>(  // 64 x 64 FLOAT32: 16 KiB
      "positions { range { count: 64 } } params { dim: 64 }");
  v1::SinusoidalResponse resp;
  const grpc::Status status = HandleSinusoidal(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(told.size(), 3u);
  EXPECT_EQ(ShapeOf(resp.table()), (std::vector<int64_t>{64, 64}));
}

TEST(CheckOutputLimitsTest, BoundariesAndMessages) {
  const Limits limits{100, 1000};
  const kernels::Shape at_limit = {10, 10}, over = {101}, big = {int64_t{1} << 40, 1 << 30, 64};
  EXPECT_TRUE(CheckOutputLimits(limits, {{"a", kernels::DType::kFloat64, &at_limit}}).ok());
  absl::Status s = CheckOutputLimits(limits, {{"a", kernels::DType::kFloat32, &over}});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "a [101] has 1.0e+02 elements, over --max_output_elements=100");
  // Products past int64 are still reported, not wrapped around.
  s = CheckOutputLimits(limits, {{"b", kernels::DType::kFloat32, &big}});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // Bytes add up over outputs: 2 x 100 x 8 = 1600 > 1000.
  const kernels::Shape hundred = {100};
  s = CheckOutputLimits(limits, {{"cos", kernels::DType::kFloat64, &hundred},
                                 {"sin", kernels::DType::kFloat64, &hundred}});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max_message_bytes=1000"), std::string::npos) << s.message();
}

TEST(HandleApplyRopeTest, ResponseBytesOverLimitIsResourceExhausted) {
  TestContext t;
  t.ctx.limits.max_message_bytes = 1024;
  v1::ApplyRopeRequest req;
  *req.mutable_q() = FloatTensor({1, 8, 2, 16});  // 1024 bytes
  *req.mutable_k() = FloatTensor({1, 8, 1, 16});  // + 512
  v1::ApplyRopeResponse resp;
  grpc::Status status = HandleApplyRope(t.ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("--max_message_bytes=1024"), std::string::npos);
}

// Issue #8: derived.inv_freq (d/2 doubles) counts in the response's bytes like cos and sin.
TEST(HandleRopeCacheTest, DerivedFrequenciesCountInTheMessageLimit) {
  TestContext t;
  t.ctx.limits.max_message_bytes = 300 << 10;
  v1::RopeCacheRequest req;
  req.mutable_config()->set_head_dim(65536);
  req.mutable_positions()->mutable_range()->set_count(1);
  req.set_output_dtype(v1::DTYPE_FLOAT16);  // cos + sin: 128 KiB; inv_freq: 256 KiB
  v1::RopeCacheResponse resp;
  grpc::Status status = HandleRopeCache(t.ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("derived.inv_freq"), std::string::npos)
      << status.error_message();
  t.ctx.limits.max_message_bytes = 400 << 10;
  EXPECT_TRUE(HandleRopeCache(t.ctx, req, &resp).ok());
}

TEST(TableRegistryTest, RejectsBadTables) {
  TableRegistry tables;
  EXPECT_FALSE(tables.Add("", kernels::DType::kFloat32, {1}, std::string(4, '\0')).ok());
  EXPECT_FALSE(tables.Add("i", kernels::DType::kInt32, {1}, std::string(4, '\0')).ok());
  EXPECT_FALSE(tables.Add("z", kernels::DType::kFloat32, {0, 4}, "").ok());
  EXPECT_FALSE(tables.Add("b", kernels::DType::kFloat32, {2, 2}, std::string(15, '\0')).ok());
  EXPECT_TRUE(tables.Add("ok", kernels::DType::kFloat32, {2, 2}, std::string(16, '\0')).ok());
  EXPECT_FALSE(tables.Add("ok", kernels::DType::kFloat32, {2, 2}, std::string(16, '\0')).ok());
  EXPECT_TRUE(tables.Find("ok", "table_name").ok());
  EXPECT_EQ(tables.Find("nope", "table_name").status().message(),
            "table_name: no table named \"nope\" (loaded: ok)");
}

}  // namespace
}  // namespace posenc::server
