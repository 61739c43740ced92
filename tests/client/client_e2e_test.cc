// End to end: the client library over real TCP to an in-process server on the reference
// backend. Every RPC is called with non-trivial parameters and its result compared element by
// element with a direct run of the same op on the kernels' reference backend (kernels/ops.h:
// plan, then run), computed in float64, within the output dtype's tolerance.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "client_test_util.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/ops.h"
#include "posenc/client.h"
#include "tests/common/rope_configs.h"

namespace posenc::client {
namespace {

using testing::ConnectToSharedServer;
using testing::ExpectNear;
using testing::RandomTensor;
using testing::View;

const kernels::Backend& Reference() {
  static const kernels::Backend* const backend = kernels::MakeReferenceBackend().release();
  return *backend;
}

std::vector<int64_t> Vec(const kernels::Shape& shape) { return {shape.begin(), shape.end()}; }

int64_t Product(const kernels::Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A planned float64 output (the reference runs are planned with output_dtype FLOAT64) and a
// view of it.
struct Output {
  kernels::Shape shape;
  std::vector<double> values;

  explicit Output(const kernels::OutputSpec& spec)
      : shape(spec.shape), values(static_cast<size_t>(Product(spec.shape))) {
    EXPECT_EQ(spec.dtype, kernels::DType::kFloat64) << spec.name;
  }
  kernels::TensorView view() { return {kernels::DType::kFloat64, shape, values.data()}; }
};

// Expects `actual`, the server's `name`, near what the reference backend's run(backend, plan,
// out) writes to `plan`'s one output `spec`.
template <typename Plan, typename Run>
void ExpectReference(const Tensor& actual, Run run, const Plan& plan,
                     const kernels::OutputSpec& spec, const std::string& name) {
  Output expected(spec);
  const absl::Status s = run(Reference(), plan, expected.view());
  ASSERT_TRUE(s.ok()) << s;
  ExpectNear(actual, Vec(expected.shape), expected.values, name);
}

// A copy of `t` as float64 (the reference computes in float64 end to end).
Tensor AsFloat64(const Tensor& t) {
  absl::StatusOr<Tensor> wide = ConvertTensor(t, DType::kFloat64);
  EXPECT_TRUE(wide.ok()) << wide.status();
  return *wide;
}

// The kernels' description of the same positions (views borrow from `p`). The factories set
// only the fields of their kind, so copying every field describes the same positions.
kernels::PositionSpec SpecOf(const Positions& p) {
  using Kind = kernels::PositionSpec::Kind;
  static constexpr Kind kKinds[] = {Kind::kDefault, Kind::kRange,     Kind::kOffsets,
                                    Kind::kIds,     Kind::kCuSeqlens, Kind::kAttentionMask};
  kernels::PositionSpec spec;
  spec.kind = kKinds[static_cast<int>(p.kind)];
  spec.start = p.start;
  spec.count = p.count;
  spec.offsets = p.offsets;
  spec.cu_seqlens = p.cu_seqlens;
  if (p.kind == Positions::Kind::kIds) spec.ids = View(p.tensor);
  if (p.kind == Positions::Kind::kAttentionMask) spec.mask = View(p.tensor);
  return spec;
}

// The parameters a RopeScaling carries besides its type, alike (name and type) in the client's
// and the kernels' struct: `ScalingParams(to) = ScalingParams(from)` copies them all.
template <typename Scaling>
auto ScalingParams(Scaling& s) {
  return std::tie(s.factor, s.original_max_position_embeddings, s.beta_fast, s.beta_slow,
                  s.truncate, s.mscale, s.mscale_all_dim, s.attention_factor, s.low_freq_factor,
                  s.high_freq_factor, s.long_factor, s.short_factor, s.partial_rotary_factor);
}

kernels::RopeConfig KernelConfig(const RopeConfig& c) {
  kernels::RopeConfig k;
  k.head_dim = c.head_dim;
  k.rotary_dim = c.rotary_dim;
  k.base = c.base.value_or(10000.0);
  k.style = c.style == RopeStyle::kGptj ? kernels::RopeStyle::kGptj : kernels::RopeStyle::kNeox;
  static constexpr kernels::RopeScalingType kTypes[] = {
      kernels::RopeScalingType::kDefault, kernels::RopeScalingType::kDefault,
      kernels::RopeScalingType::kLinear,  kernels::RopeScalingType::kNtk,
      kernels::RopeScalingType::kDynamic, kernels::RopeScalingType::kYarn,
      kernels::RopeScalingType::kLlama3,  kernels::RopeScalingType::kLongrope};
  const RopeScaling& s = c.scaling;
  k.scaling.type = kTypes[static_cast<int>(s.type)];
  ScalingParams(k.scaling) = ScalingParams(s);
  k.max_position_embeddings = c.max_position_embeddings;
  k.mrope_section = c.mrope_section;
  k.mrope_layout = c.mrope_layout == MropeLayout::kInterleaved ? kernels::MropeLayout::kInterleaved
                                                               : kernels::MropeLayout::kContiguous;
  k.inverse = c.inverse;
  k.apply_attention_factor = c.apply_attention_factor.value_or(true);
  k.seq_len = c.seq_len;
  return k;
}

void ExpectDerived(const RopeDerived& d, const kernels::RopeFrequencies& f) {
  EXPECT_EQ(d.head_dim, f.head_dim);
  EXPECT_EQ(d.rotary_dim, f.rotary_dim);
  EXPECT_DOUBLE_EQ(d.effective_base, f.effective_base);
  EXPECT_DOUBLE_EQ(d.attention_factor, f.attention_factor);
  EXPECT_EQ(d.attention_factor_applied, f.attention_factor_applied);
  EXPECT_DOUBLE_EQ(d.factor, f.factor);
  EXPECT_EQ(d.seq_len, f.seq_len);
  EXPECT_DOUBLE_EQ(d.yarn_low, f.yarn_low);
  EXPECT_DOUBLE_EQ(d.yarn_high, f.yarn_high);
  EXPECT_EQ(d.longrope_long_factors, f.longrope_long_factors);
  ASSERT_EQ(d.inv_freq.size(), f.inv_freq.size());
  for (size_t j = 0; j < d.inv_freq.size(); ++j) {
    EXPECT_NEAR(d.inv_freq[j], static_cast<double>(f.inv_freq[j]),
                1e-15 * static_cast<double>(f.inv_freq[j]))
        << "inv_freq[" << j << "]";
  }
}

class ClientE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = ConnectToSharedServer();
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<Client> client_;
};

// ---------------------------------------------------------------------------------------------
// AnalyzeEncoding.
// ---------------------------------------------------------------------------------------------
TEST_F(ClientE2ETest, AnalyzeSinusoidalIsAnExactRotationOfNormSqrtHalfDim) {
  AnalyzeEncodingOptions options;
  options.sinusoidal = SinusoidalParams{.dim = 64, .layout = SinusoidalLayout::kConcat};
  options.start = 10;
  options.count = 2000;
  options.distances = {1, 500};
  options.collision_dtype = DType::kBFloat16;
  options.properties = {AnalysisProperty::kUniqueness, AnalysisProperty::kBounds,
                        AnalysisProperty::kRelative};
  absl::StatusOr<AnalyzeEncodingResult> r = client_->AnalyzeEncoding(options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->family, "sinusoidal");
  EXPECT_EQ(r->width, 64);
  ASSERT_TRUE(r->uniqueness.has_value());
  EXPECT_TRUE(r->uniqueness->exact);
  EXPECT_GT(r->uniqueness->min_distance, 0.0);
  EXPECT_TRUE(r->uniqueness->collision_searched);
  EXPECT_EQ(r->uniqueness->collision_dtype, DType::kBFloat16);
  ASSERT_TRUE(r->bounds.has_value());
  EXPECT_NEAR(r->bounds->norms.min, std::sqrt(32.0), 1e-12);
  ASSERT_TRUE(r->relative.has_value());
  ASSERT_EQ(r->relative->rotations.size(), 2u);
  EXPECT_LT(r->relative->rotations[1].residual, 1e-13);
  EXPECT_FALSE(r->decay.has_value());
}

TEST_F(ClientE2ETest, AnalyzeT5ReportsItsBucketEdgesAndBadRangesNameTheField) {
  AnalyzeEncodingOptions options;
  options.t5 = T5Analysis{};
  options.count = 300;
  options.properties = {AnalysisProperty::kRelative};
  absl::StatusOr<AnalyzeEncodingResult> r = client_->AnalyzeEncoding(options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->relative->bias.has_value());
  EXPECT_EQ(r->relative->bias->bucket_edges.back(), 91);
  options.distances = {300};
  r = client_->AnalyzeEncoding(options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetErrorDetails(r.status()).field, "distances[0]");
  options.distances = {};
  options.alibi = AlibiAnalysis{.num_heads = 2};
  EXPECT_EQ(client_->AnalyzeEncoding(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // two encodings
}

// ---------------------------------------------------------------------------------------------
// Sinusoidal.
// ---------------------------------------------------------------------------------------------
void CheckSinusoidal(const Client& client, const SinusoidalOptions& options) {
  SCOPED_TRACE(::testing::Message() << "dim " << options.params.dim);
  absl::StatusOr<Tensor> table = client.Sinusoidal(options);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->dtype, options.output_dtype.value_or(DType::kFloat32));

  kernels::SinusoidalParams params;
  params.dim = options.params.dim;
  params.base = options.params.base.value_or(10000.0);
  params.layout = options.params.layout == SinusoidalLayout::kConcat
                      ? kernels::SinusoidalLayout::kConcat
                      : kernels::SinusoidalLayout::kInterleaved;
  params.scheme = options.params.freq_scheme == FreqScheme::kVaswani ? kernels::FreqScheme::kVaswani
                  : options.params.freq_scheme == FreqScheme::kT2t
                      ? kernels::FreqScheme::kT2t
                      : std::optional<kernels::FreqScheme>();
  absl::StatusOr<kernels::SinusoidalPlan> plan =
      kernels::PlanSinusoidal({.params = params,
                               .positions = SpecOf(options.positions),
                               .output_dtype = kernels::DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectReference(*table, kernels::RunSinusoidal, *plan, plan->table, "table");
}

TEST_F(ClientE2ETest, SinusoidalRangeConcatMatchesReference) {
  SinusoidalOptions options;
  options.positions = Positions::Range(5, 7);
  options.params.dim = 11;  // odd: the last column is zero
  options.params.base = 500.0;
  options.params.layout = SinusoidalLayout::kConcat;
  options.params.freq_scheme = FreqScheme::kVaswani;
  CheckSinusoidal(*client_, options);
}

TEST_F(ClientE2ETest, SinusoidalIdsFloat16MatchesReference) {
  SinusoidalOptions options;
  options.positions = Positions::Ids({0, 3, 1000, 65535, 7, 123456}, {2, 3});
  options.params.dim = 16;
  options.output_dtype = DType::kFloat16;
  CheckSinusoidal(*client_, options);
}

TEST_F(ClientE2ETest, SinusoidalAttentionMaskBFloat16MatchesReference) {
  SinusoidalOptions options;
  options.positions = Positions::AttentionMask({0, 0, 1, 1, 1, 1, 1, 1}, {2, 4});
  options.params.dim = 8;
  options.output_dtype = DType::kBFloat16;
  CheckSinusoidal(*client_, options);
}

// ---------------------------------------------------------------------------------------------
// AddPositionEncoding.
// ---------------------------------------------------------------------------------------------
void CheckAdd(const Client& client, const AddPositionEncodingOptions& options) {
  absl::StatusOr<Tensor> y = client.AddPositionEncoding(options);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype, options.x.dtype);

  kernels::AddPositionEncodingParams params;
  params.combine =
      options.combine == Combine::kConcat ? kernels::Combine::kConcat : kernels::Combine::kAdd;
  params.scale = options.scale.value_or(1.0);
  params.padding_idx = options.padding_idx;
  Tensor table64;
  if (options.sinusoidal.has_value()) {
    kernels::SinusoidalParams s;
    s.dim = options.sinusoidal->dim;
    s.base = options.sinusoidal->base.value_or(10000.0);
    s.layout = options.sinusoidal->layout == SinusoidalLayout::kConcat
                   ? kernels::SinusoidalLayout::kConcat
                   : kernels::SinusoidalLayout::kInterleaved;
    params.sinusoidal = s;
  } else {
    table64 = AsFloat64(*options.learned->table_inline);
    params.learned = View(table64);
    params.table_offset = options.learned->table_offset;
  }
  const Tensor x64 = AsFloat64(options.x);  // y has x's dtype: FLOAT64
  absl::StatusOr<kernels::AddPositionEncodingPlan> plan = kernels::PlanAddPositionEncoding(
      {.params = params, .x = View(x64), .positions = SpecOf(options.positions)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectReference(*y, kernels::RunAddPositionEncoding, *plan, plan->y, "y");
}

TEST_F(ClientE2ETest, AddSinusoidalWithOffsetsAndScaleMatchesReference) {
  AddPositionEncodingOptions options{.x = RandomTensor({2, 4, 6}, DType::kFloat32, 1),
                                     .positions = Positions::Offsets({3, 10})};
  options.sinusoidal = SinusoidalParams{};  // dim 0: the width of x
  options.scale = std::sqrt(6.0);
  CheckAdd(*client_, options);
}

TEST_F(ClientE2ETest, AddLearnedConcatWithMaskMatchesReference) {
  AddPositionEncodingOptions options{
      .x = RandomTensor({2, 4, 3}, DType::kFloat64, 2),
      .positions = Positions::AttentionMask({0, 1, 1, 1, 1, 1, 1, 1}, {2, 4})};
  LearnedTable learned;
  learned.table_inline = RandomTensor({20, 5}, DType::kFloat32, 3);
  learned.table_offset = 2;
  options.learned = learned;
  options.combine = Combine::kConcat;
  CheckAdd(*client_, options);
}

TEST_F(ClientE2ETest, AddLearnedPastTheTableIsOutOfRange) {
  AddPositionEncodingOptions options;
  options.x = RandomTensor({1, 4, 5}, DType::kFloat32, 4);
  options.positions = Positions::Range(7, 4);  // rows 9..12 of a 10-row table
  LearnedTable learned;
  learned.table_inline = RandomTensor({10, 5}, DType::kFloat32, 5);
  learned.table_offset = 2;
  options.learned = learned;
  absl::StatusOr<Tensor> y = client_->AddPositionEncoding(options);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kOutOfRange) << y.status();
}

// ---------------------------------------------------------------------------------------------
// RopeCache.
// ---------------------------------------------------------------------------------------------
void CheckRopeCache(const Client& client, const RopeCacheOptions& options,
                    const kernels::RopeConfig& config) {
  absl::StatusOr<RopeCacheResult> result = client.RopeCache(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->cos.dtype, options.output_dtype.value_or(DType::kFloat32));

  static constexpr kernels::RopeCacheLayout kLayouts[] = {
      kernels::RopeCacheLayout::kCompact, kernels::RopeCacheLayout::kCompact,
      kernels::RopeCacheLayout::kNeox, kernels::RopeCacheLayout::kGptj};
  const kernels::RopeCacheLayout layout = kLayouts[static_cast<int>(options.layout)];
  absl::StatusOr<kernels::RopeCachePlan> plan =
      kernels::PlanRopeCache({.config = config,
                              .layout = layout,
                              .positions = SpecOf(options.positions),
                              .output_dtype = kernels::DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Output cos(plan->cos);
  Output sin(plan->sin);
  absl::StatusOr<kernels::RopeRunInfo> run =
      kernels::RunRopeCache(Reference(), *plan, /*cache=*/nullptr, cos.view(), sin.view());
  ASSERT_TRUE(run.ok()) << run.status();
  ExpectNear(result->cos, Vec(cos.shape), cos.values, "cos");
  ExpectNear(result->sin, Vec(sin.shape), sin.values, "sin");
  ExpectDerived(result->derived, *run->frequencies);
}

TEST_F(ClientE2ETest, RopeCacheYarnGptjIdsMatchesReference) {
  RopeCacheOptions options{.positions = Positions::Ids({0, 1, 7, 100, 4096, 123456}, {2, 3}),
                           .config = {.head_dim = 64,
                                      .rotary_dim = 32,
                                      .base = 1e6,
                                      .style = RopeStyle::kGptj,
                                      .scaling = {.type = RopeScalingType::kYarn,
                                                  .factor = 4.0,
                                                  .original_max_position_embeddings = 4096},
                                      .max_position_embeddings = 16384},
                           .layout = RopeCacheLayout::kGptj};
  CheckRopeCache(*client_, options, KernelConfig(options.config));
}

TEST_F(ClientE2ETest, RopeCacheMropeFloat64MatchesReference) {
  RopeCacheOptions options{
      .positions = Positions::Ids({0, 1, 2, 3, 0, 5, 5, 6, 0, 7, 9, 6}, {3, 4}),
      .config = {.head_dim = 8,
                 .mrope_section = {2, 1, 1},
                 .mrope_layout = MropeLayout::kInterleaved},
      .output_dtype = DType::kFloat64,
      .layout = RopeCacheLayout::kNeox};
  CheckRopeCache(*client_, options, KernelConfig(options.config));
}

TEST_F(ClientE2ETest, RopeCacheHfConfigLlama3BFloat16MatchesExplicitReference) {
  RopeCacheOptions options;
  options.positions = Positions::Range(8000, 33);
  options.config.hf_config_json = R"({
      "hidden_size": 2048, "num_attention_heads": 32, "max_position_embeddings": 131072,
      "rope_theta": 500000.0, "torch_dtype": "bfloat16",
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";
  options.output_dtype = DType::kBFloat16;
  kernels::RopeConfig config = ::posenc::testing::Llama3Rope(32.0, 1.0, 4.0, /*head_dim=*/64);
  config.max_position_embeddings = 131072;
  CheckRopeCache(*client_, options, config);
}

TEST_F(ClientE2ETest, RopeCacheOddRotaryDimIsInvalidArgumentNamingTheField) {
  RopeCacheOptions options;
  options.positions = Positions::Range(0, 4);
  options.config.head_dim = 8;
  options.config.rotary_dim = 5;
  absl::StatusOr<RopeCacheResult> result = client_->RopeCache(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("rotary_dim"), std::string::npos) << result.status();
}

// ---------------------------------------------------------------------------------------------
// ApplyRope.
// ---------------------------------------------------------------------------------------------
void CheckApplyRope(const Client& client, const ApplyRopeOptions& options) {
  absl::StatusOr<ApplyRopeResult> result = client.ApplyRope(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->k.has_value(), options.k.has_value());

  static constexpr kernels::TensorLayout kLayouts[] = {
      kernels::TensorLayout::kBSHD, kernels::TensorLayout::kBSHD, kernels::TensorLayout::kBHSD,
      kernels::TensorLayout::kTHD};
  const kernels::TensorLayout layout = kLayouts[static_cast<int>(options.layout)];
  // Rotated in place, in float64 copies of q and k.
  Tensor q = AsFloat64(options.q);
  Tensor k = options.k.has_value() ? AsFloat64(*options.k) : Tensor();
  const kernels::DType f64 = kernels::DType::kFloat64;
  kernels::TensorView q_view{f64, kernels::Shape(q.shape.begin(), q.shape.end()), q.data.data()};
  kernels::TensorView k_view{f64, kernels::Shape(k.shape.begin(), k.shape.end()),
                             options.k ? k.data.data() : nullptr};
  absl::StatusOr<kernels::ApplyRopePlan> plan =
      kernels::PlanApplyRope({.config = KernelConfig(options.config),
                              .layout = layout,
                              .q = q_view,
                              .k = k_view,
                              .positions = SpecOf(options.positions)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<kernels::RopeRunInfo> run =
      kernels::RunApplyRope(Reference(), *plan, /*cache=*/nullptr, q_view, k_view);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(result->q.dtype, options.q.dtype);
  ExpectNear(result->q, q.shape, q.ToDoubles(), "q");
  if (options.k.has_value()) ExpectNear(*result->k, k.shape, k.ToDoubles(), "k");
  ExpectDerived(result->derived, *run->frequencies);
}

TEST_F(ClientE2ETest, ApplyRopeLlama3GqaBshdMatchesReference) {
  ApplyRopeOptions options{.q = RandomTensor({2, 3, 4, 16}, DType::kFloat32, 10),
                           .k = RandomTensor({2, 3, 2, 16}, DType::kFloat32, 11),
                           .positions = Positions::Offsets({0, 100000}),
                           .config = {.base = 500000.0,
                                      .scaling = {.type = RopeScalingType::kLlama3,
                                                  .factor = 8.0,
                                                  .original_max_position_embeddings = 8192,
                                                  .low_freq_factor = 1.0,
                                                  .high_freq_factor = 4.0}}};
  CheckApplyRope(*client_, options);
}

TEST_F(ClientE2ETest, ApplyRopePartialBhsdBFloat16MatchesReference) {
  ApplyRopeOptions options{
      .q = RandomTensor({2, 3, 5, 12}, DType::kBFloat16, 12),
      .positions = Positions::Ids({4, 2, 9000, 1, 3}),  // [S], broadcast over the batch
      .config = {.rotary_dim = 8,
                 .style = RopeStyle::kGptj,
                 .scaling = {.type = RopeScalingType::kDynamic, .factor = 2.0},
                 .max_position_embeddings = 2048},
      .layout = TensorLayout::kBHSD};
  CheckApplyRope(*client_, options);
}

TEST_F(ClientE2ETest, ApplyRopePackedThdFloat16MatchesReference) {
  ApplyRopeOptions options{.q = RandomTensor({7, 2, 8}, DType::kFloat16, 13),
                           .k = RandomTensor({7, 1, 8}, DType::kFloat16, 14),
                           .positions = Positions::CuSeqlens({0, 3, 7}, {5, 0}),
                           .config = {.scaling = {.type = RopeScalingType::kYarn,
                                                  .factor = 8.0,
                                                  .original_max_position_embeddings = 4096,
                                                  .mscale = 1.0,
                                                  .mscale_all_dim = 0.707}},
                           .layout = TensorLayout::kTHD};
  CheckApplyRope(*client_, options);
}

TEST_F(ClientE2ETest, ApplyRopeInverseUndoesTheRotation) {
  ApplyRopeOptions forward;
  forward.q = RandomTensor({1, 6, 2, 32}, DType::kFloat32, 15);
  forward.positions = Positions::Range(1000, 6);
  forward.config.scaling.type = RopeScalingType::kYarn;
  forward.config.scaling.factor = 16.0;
  forward.config.scaling.original_max_position_embeddings = 2048;
  absl::StatusOr<ApplyRopeResult> rotated = client_->ApplyRope(forward);
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  EXPECT_GT(rotated->derived.attention_factor, 1.0);

  ApplyRopeOptions backward = forward;
  backward.q = rotated->q;
  backward.config.inverse = true;
  absl::StatusOr<ApplyRopeResult> restored = client_->ApplyRope(backward);
  ASSERT_TRUE(restored.ok()) << restored.status();
  const std::vector<double> original = forward.q.ToDoubles();
  const std::vector<double> back = restored->q.ToDoubles();
  ASSERT_EQ(original.size(), back.size());
  for (size_t i = 0; i < back.size(); ++i) EXPECT_NEAR(back[i], original[i], 2e-6) << i;
}

TEST_F(ClientE2ETest, ApplyRopeInconsistentTensorIsRejectedBeforeSending) {
  ApplyRopeOptions options;
  options.q = RandomTensor({1, 2, 1, 8}, DType::kFloat32, 16);
  options.q.data.pop_back();
  absl::StatusOr<ApplyRopeResult> result = client_->ApplyRope(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message().rfind("q: ", 0), 0u) << result.status();
}

TEST_F(ClientE2ETest, ApplyRopeHeadDimMismatchComesBackFromTheServer) {
  ApplyRopeOptions options;
  options.q = RandomTensor({1, 2, 1, 8}, DType::kFloat32, 17);
  options.config.head_dim = 16;
  absl::StatusOr<ApplyRopeResult> result = client_->ApplyRope(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("head_dim"), std::string::npos) << result.status();
}

// ---------------------------------------------------------------------------------------------
// ALiBi.
// ---------------------------------------------------------------------------------------------
TEST_F(ClientE2ETest, AlibiSlopesMatchReference) {
  for (const auto& [heads, max_bias, dtype] :
       {std::tuple<int64_t, double, DType>{12, 8.0, DType::kFloat32},
        std::tuple<int64_t, double, DType>{6, 4.0, DType::kFloat64},
        std::tuple<int64_t, double, DType>{64, 8.0, DType::kBFloat16}}) {
    AlibiSlopesOptions options{.num_heads = heads, .max_bias = max_bias, .output_dtype = dtype};
    absl::StatusOr<Tensor> slopes = client_->AlibiSlopes(options);
    ASSERT_TRUE(slopes.ok()) << slopes.status();
    absl::StatusOr<std::vector<double>> expected = kernels::AlibiSlopes(heads, max_bias);
    ASSERT_TRUE(expected.ok());
    ExpectNear(*slopes, {heads}, *expected, absl::StrCat("slopes of ", heads, " heads"));
  }
}

AlibiBiasResult CheckAlibiBias(const Client& client, const AlibiBiasOptions& options) {
  absl::StatusOr<AlibiBiasResult> result = client.AlibiBias(options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  static constexpr kernels::AlibiMode kModes[] = {
      kernels::AlibiMode::kCausal, kernels::AlibiMode::kCausal, kernels::AlibiMode::kSymmetric,
      kernels::AlibiMode::kBloom};
  static constexpr kernels::FutureMode kFutures[] = {
      kernels::FutureMode::kMask, kernels::FutureMode::kMask, kernels::FutureMode::kZero,
      kernels::FutureMode::kLinear};
  static constexpr kernels::BiasForm kForms[] = {kernels::BiasForm::kFull, kernels::BiasForm::kFull,
                                                 kernels::BiasForm::kCompact,
                                                 kernels::BiasForm::kBuckets};
  kernels::AlibiBiasParams params{.num_heads = options.num_heads,
                                  .q_len = options.q_len,
                                  .k_len = options.k_len,
                                  .query_offset = options.query_offset,
                                  .mode = kModes[static_cast<int>(options.mode)],
                                  .future = kFutures[static_cast<int>(options.future)],
                                  .max_bias = options.max_bias.value_or(8.0),
                                  .form = kForms[static_cast<int>(options.form)]};
  if (options.attention_mask.has_value()) params.attention_mask = View(*options.attention_mask);
  absl::StatusOr<kernels::AlibiBiasPlan> plan =
      kernels::PlanAlibiBias({.params = params, .output_dtype = kernels::DType::kFloat64});
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  Output expected(plan->bias);
  Output expected_slopes(plan->slopes);
  absl::Status s =
      kernels::RunAlibiBias(Reference(), *plan, expected.view(), expected_slopes.view());
  EXPECT_TRUE(s.ok()) << s;
  ExpectNear(result->bias, Vec(expected.shape), expected.values, "bias");
  absl::StatusOr<std::vector<double>> slopes =
      kernels::AlibiSlopes(options.num_heads, params.max_bias);
  EXPECT_TRUE(slopes.ok());
  EXPECT_EQ(result->slopes.dtype, DType::kFloat64);
  ExpectNear(result->slopes, {options.num_heads}, *slopes, "slopes");
  return *std::move(result);
}

TEST_F(ClientE2ETest, AlibiBiasCausalLinearMatchesReference) {
  AlibiBiasOptions options{.num_heads = 6, .q_len = 5, .k_len = 9, .future = FutureMode::kLinear};
  CheckAlibiBias(*client_, options);
}

TEST_F(ClientE2ETest, AlibiBiasCausalMaskDecodeMatchesReference) {
  AlibiBiasOptions options{.num_heads = 12, .q_len = 1, .k_len = 37};
  options.query_offset = 30;  // keys 31..36 lie in the future: -inf
  options.output_dtype = DType::kFloat16;
  AlibiBiasResult result = CheckAlibiBias(*client_, options);
  EXPECT_TRUE(std::isinf(result.bias.At(36)) && result.bias.At(36) < 0);
}

TEST_F(ClientE2ETest, AlibiBiasSymmetricWithOffsetMatchesReference) {
  AlibiBiasOptions options{.num_heads = 3,
                           .q_len = 4,
                           .k_len = 4,
                           .query_offset = -2,
                           .mode = AlibiMode::kSymmetric,
                           .max_bias = 5.0,
                           .output_dtype = DType::kFloat64};
  CheckAlibiBias(*client_, options);
}

TEST_F(ClientE2ETest, AlibiBiasBloomWithMaskMatchesReference) {
  AlibiBiasOptions options{.num_heads = 4,
                           .q_len = 3,
                           .k_len = 6,
                           .mode = AlibiMode::kBloom,
                           .future = FutureMode::kZero};
  options.attention_mask = *Tensor::FromInt64s(
      std::vector<int64_t>{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 6}, DType::kInt32);
  CheckAlibiBias(*client_, options);
}

// ---------------------------------------------------------------------------------------------
// T5 relative bias and Shaw relative embeddings.
// ---------------------------------------------------------------------------------------------
Tensor CheckRelativeBias(const Client& client, const RelativeBiasOptions& options) {
  absl::StatusOr<Tensor> bias = client.RelativeBias(options);
  EXPECT_TRUE(bias.ok()) << bias.status();
  if (!bias.ok()) return {};
  kernels::RelativeBiasParams params{.q_len = options.q_len,
                                     .k_len = options.k_len,
                                     .query_offset = options.query_offset,
                                     .key_offset = options.key_offset.value_or(0),
                                     .bidirectional = options.bidirectional.value_or(true),
                                     .num_buckets = options.num_buckets.value_or(32),
                                     .max_distance = options.max_distance.value_or(128)};
  params.form = options.form == BiasForm::kBuckets   ? kernels::BiasForm::kBuckets
                : options.form == BiasForm::kCompact ? kernels::BiasForm::kCompact
                                                     : kernels::BiasForm::kFull;
  if (options.table_inline.has_value()) params.table = View(*options.table_inline);
  // BUCKETS are INT32 (the plan's default); the float forms are planned in FLOAT64.
  const bool buckets = params.form == kernels::BiasForm::kBuckets;
  absl::StatusOr<kernels::RelativeBiasPlan> plan = kernels::PlanRelativeBias(
      {.params = params,
       .output_dtype = buckets ? std::nullopt : std::optional(kernels::DType::kFloat64)});
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  if (buckets) {
    // Buckets straight from the formula.
    EXPECT_EQ(bias->dtype, DType::kInt32);
    std::vector<double> expected;
    const int64_t query_offset = options.query_offset.value_or(options.k_len - options.q_len);
    for (int64_t i = 0; i < options.q_len; ++i) {
      for (int64_t j = 0; j < options.k_len; ++j) {
        const int64_t rp = (params.key_offset + j) - (query_offset + i);
        expected.push_back(static_cast<double>(
            kernels::T5Bucket(rp, params.bidirectional, params.num_buckets, params.max_distance)));
      }
    }
    EXPECT_EQ(bias->shape, Vec(plan->bias.shape));
    EXPECT_EQ(bias->ToDoubles(), expected);
    return *std::move(bias);
  }
  ExpectReference(*bias, kernels::RunRelativeBias, *plan, plan->bias, "bias");
  return *std::move(bias);
}

TEST_F(ClientE2ETest, RelativeBiasDecoderWithOffsetsMatchesReference) {
  RelativeBiasOptions options{.q_len = 6,
                              .k_len = 10,
                              .query_offset = 40,
                              .key_offset = 5,
                              .bidirectional = false,
                              .num_buckets = 16,
                              .max_distance = 40,
                              .table_inline = RandomTensor({16, 3}, DType::kFloat32, 20)};
  CheckRelativeBias(*client_, options);
}

TEST_F(ClientE2ETest, RelativeBiasEncoderFloat16MatchesReference) {
  RelativeBiasOptions options{.q_len = 12,
                              .k_len = 12,
                              .table_inline = RandomTensor({32, 8}, DType::kBFloat16, 21),
                              .output_dtype = DType::kFloat16};
  CheckRelativeBias(*client_, options);
}

TEST_F(ClientE2ETest, RelativeBiasBucketsMatchTheFormula) {
  RelativeBiasOptions options{
      .q_len = 9, .k_len = 200, .query_offset = 150, .form = BiasForm::kBuckets};
  CheckRelativeBias(*client_, options);
}

TEST_F(ClientE2ETest, RelativeBiasWithoutTableIsInvalidArgument) {
  RelativeBiasOptions options{.q_len = 2, .k_len = 2};
  absl::StatusOr<Tensor> bias = client_->RelativeBias(options);
  ASSERT_FALSE(bias.ok());
  EXPECT_EQ(bias.status().code(), absl::StatusCode::kInvalidArgument) << bias.status();
  EXPECT_NE(bias.status().message().find("table"), std::string::npos) << bias.status();
}

TEST_F(ClientE2ETest, RelativeEmbeddingMatchesReference) {
  RelativeEmbeddingOptions options{.q_len = 4,
                                   .k_len = 6,
                                   .max_relative = 2,
                                   .table_inline = RandomTensor({5, 3}, DType::kFloat64, 30),
                                   .query_offset = 1,
                                   .key_offset = -1,
                                   .output_dtype = DType::kFloat16};
  absl::StatusOr<Tensor> embeddings = client_->RelativeEmbedding(options);
  ASSERT_TRUE(embeddings.ok()) << embeddings.status();

  kernels::RelativeEmbeddingParams params;
  params.q_len = options.q_len;
  params.k_len = options.k_len;
  params.max_relative = options.max_relative;
  params.query_offset = options.query_offset;
  params.key_offset = *options.key_offset;
  params.table = View(*options.table_inline);
  absl::StatusOr<kernels::RelativeEmbeddingPlan> plan =
      kernels::PlanRelativeEmbedding({.params = params, .output_dtype = kernels::DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectReference(*embeddings, kernels::RunRelativeEmbedding, *plan, plan->embeddings,
                  "embeddings");
}

// ---------------------------------------------------------------------------------------------
// The compact bias forms, expanded locally, equal the FULL form the server sends.
// ---------------------------------------------------------------------------------------------
TEST_F(ClientE2ETest, ExpandToeplitzOfCompactAlibiEqualsServerFullForm) {
  for (AlibiMode mode : {AlibiMode::kCausal, AlibiMode::kSymmetric}) {
    for (std::optional<int64_t> query_offset :
         {std::optional<int64_t>(), std::optional<int64_t>(1)}) {
      AlibiBiasOptions options{.num_heads = 4, .q_len = 5, .k_len = 9, .mode = mode};
      options.query_offset = query_offset;
      absl::StatusOr<AlibiBiasResult> full = client_->AlibiBias(options);
      ASSERT_TRUE(full.ok()) << full.status();
      options.form = BiasForm::kCompact;
      absl::StatusOr<AlibiBiasResult> compact = client_->AlibiBias(options);
      ASSERT_TRUE(compact.ok()) << compact.status();
      EXPECT_EQ(compact->bias.shape, (std::vector<int64_t>{4, 5 + 9 - 1}));
      absl::StatusOr<Tensor> expanded = ExpandToeplitz(compact->bias, 5, 9);
      ASSERT_TRUE(expanded.ok()) << expanded.status();
      EXPECT_EQ(expanded->shape, full->bias.shape);
      EXPECT_EQ(expanded->data, full->bias.data) << "mode " << static_cast<int>(mode);
    }
  }
}

TEST_F(ClientE2ETest, ExpandToeplitzOfCompactT5EqualsServerFullForm) {
  RelativeBiasOptions options{.q_len = 7,
                              .k_len = 300,
                              .query_offset = 250,
                              .table_inline = RandomTensor({32, 5}, DType::kFloat32, 40)};
  absl::StatusOr<Tensor> full = client_->RelativeBias(options);
  ASSERT_TRUE(full.ok()) << full.status();
  options.form = BiasForm::kCompact;
  absl::StatusOr<Tensor> compact = client_->RelativeBias(options);
  ASSERT_TRUE(compact.ok()) << compact.status();
  absl::StatusOr<Tensor> expanded = ExpandToeplitz(*compact, 7, 300);
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  EXPECT_EQ(expanded->shape, full->shape);
  EXPECT_EQ(expanded->data, full->data);
}

TEST_F(ClientE2ETest, ExpandBloomRowsOfCompactBloomEqualsServerFullForm) {
  for (FutureMode future : {FutureMode::kMask, FutureMode::kZero, FutureMode::kLinear}) {
    AlibiBiasOptions options{
        .num_heads = 3, .q_len = 4, .k_len = 7, .mode = AlibiMode::kBloom, .future = future};
    options.attention_mask =
        *Tensor::FromInt64s(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 7});
    absl::StatusOr<AlibiBiasResult> full = client_->AlibiBias(options);
    ASSERT_TRUE(full.ok()) << full.status();
    options.form = BiasForm::kCompact;
    absl::StatusOr<AlibiBiasResult> compact = client_->AlibiBias(options);
    ASSERT_TRUE(compact.ok()) << compact.status();
    EXPECT_EQ(compact->bias.shape, (std::vector<int64_t>{2, 3, 7}));
    absl::StatusOr<Tensor> expanded = ExpandBloomRows(compact->bias, 4, std::nullopt, future);
    ASSERT_TRUE(expanded.ok()) << expanded.status();
    EXPECT_EQ(expanded->shape, full->bias.shape);
    EXPECT_EQ(expanded->ToDoubles(), full->bias.ToDoubles())
        << "future " << static_cast<int>(future);
  }
}

// ---------------------------------------------------------------------------------------------
// Server info, health, connection errors, concurrency.
// ---------------------------------------------------------------------------------------------
TEST_F(ClientE2ETest, GetServerInfoReportsTheReferenceBackendAndLimits) {
  absl::StatusOr<ServerInfo> info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->version.empty());
  ASSERT_FALSE(info->backends.empty());
  bool found = false;
  for (const ServerInfo::Backend& b : info->backends) {
    if (b.name == "reference") {
      found = true;
      EXPECT_TRUE(b.is_default);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(info->max_message_bytes, int64_t{256} << 20);
  EXPECT_EQ(info->max_output_elements, int64_t{1} << 26);
  EXPECT_TRUE(info->tables.empty());
}

TEST_F(ClientE2ETest, HealthIsServing) {
  absl::StatusOr<HealthStatus> health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
  EXPECT_EQ(HealthStatusName(*health), "SERVING");
}

TEST_F(ClientE2ETest, HealthOfAnUnknownServiceIsNotFound) {
  absl::StatusOr<HealthStatus> health = client_->Health("no.such.Service");
  ASSERT_FALSE(health.ok());
  EXPECT_EQ(health.status().code(), absl::StatusCode::kNotFound) << health.status();
}

TEST_F(ClientE2ETest, InProcessChannelWorksToo) {
  std::unique_ptr<Client> client = Client::FromChannel(testing::SharedServer().InProcessChannel());
  absl::StatusOr<HealthStatus> health = client->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
}

TEST(ClientConnectTest, UnreachableServerIsUnavailable) {
  ClientOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  options.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect("127.0.0.1:1", options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Tensor> slopes = (*client)->AlibiSlopes({.num_heads = 4});
  ASSERT_FALSE(slopes.ok());
  EXPECT_EQ(slopes.status().code(), absl::StatusCode::kUnavailable) << slopes.status();
}

TEST(ClientConnectTest, InvalidOptionsAreRejected) {
  EXPECT_EQ(Client::Connect("", {}).status().code(), absl::StatusCode::kInvalidArgument);
  ClientOptions options;
  options.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(Client::Connect("localhost:1", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientE2ETest, OneClientServesManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<Tensor> slopes = client_->AlibiSlopes({.num_heads = 1 + (t + i) % 16});
        if (!slopes.ok() || slopes->NumElements() != 1 + (t + i) % 16) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace posenc::client
