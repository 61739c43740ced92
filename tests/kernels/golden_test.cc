// Every golden case of tests/golden through the reference backend, in FLOAT64 to the
// tolerances of the golden README, and in FLOAT32 to SPEC's accuracy promise.
#include "tests/common/golden.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"
#include "tests/common/cuda_math_backend.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;
using ::posenc::testing::GoldenCase;
using ::posenc::testing::NpyArray;
using json = nlohmann::json;

std::vector<std::unique_ptr<Backend>> AllBackends() {
  return ::posenc::testing::EveryTestBackend();
}

// The backend under test (the golden functions below run through it).
const Backend* g_backend = nullptr;
const Backend& UnderTest() { return *g_backend; }

// Float64 tolerance of the golden README for a phase at position p.
double PhaseTolerance(double p) {
  if (p <= (1 << 17)) return 1e-10;
  if (p <= (1 << 24)) return 1e-8;
  return 1e-7;
}

ConstTensorView IdsView(const NpyArray& a) {
  return {DType::kInt64, Shape(a.shape.begin(), a.shape.end()), a.ints.data()};
}

RopeScalingType ScalingType(const std::string& name) {
  if (name == "linear") return RopeScalingType::kLinear;
  if (name == "ntk") return RopeScalingType::kNtk;
  if (name == "dynamic") return RopeScalingType::kDynamic;
  if (name == "yarn") return RopeScalingType::kYarn;
  if (name == "llama3") return RopeScalingType::kLlama3;
  if (name == "longrope") return RopeScalingType::kLongrope;
  return RopeScalingType::kDefault;
}

// A golden (Hugging Face style) scaling dict into a RopeConfig.
RopeConfig MakeRopeConfig(int64_t head_dim, std::optional<int64_t> rotary_dim, double base,
                          const json& scaling) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.base = base;
  if (scaling.is_null()) return c;
  RopeScaling& s = c.scaling;
  s.type = ScalingType(scaling.value("rope_type", scaling.value("type", "default")));
  auto opt = [&](const char* key, std::optional<double>& out) {
    if (scaling.contains(key)) out = scaling[key].get<double>();
  };
  opt("factor", s.factor);
  opt("beta_fast", s.beta_fast);
  opt("beta_slow", s.beta_slow);
  opt("mscale", s.mscale);
  opt("mscale_all_dim", s.mscale_all_dim);
  opt("attention_factor", s.attention_factor);
  opt("low_freq_factor", s.low_freq_factor);
  opt("high_freq_factor", s.high_freq_factor);
  if (scaling.contains("truncate")) s.truncate = scaling["truncate"].get<bool>();
  if (scaling.contains("original_max_position_embeddings")) {
    s.original_max_position_embeddings = scaling["original_max_position_embeddings"].get<int64_t>();
  }
  if (scaling.contains("max_position_embeddings")) {
    c.max_position_embeddings = scaling["max_position_embeddings"].get<int64_t>();
  }
  if (scaling.contains("seq_len")) c.seq_len = scaling["seq_len"].get<int64_t>();
  if (scaling.contains("long_factor"))
    s.long_factor = scaling["long_factor"].get<std::vector<double>>();
  if (scaling.contains("short_factor")) {
    s.short_factor = scaling["short_factor"].get<std::vector<double>>();
  }
  return c;
}

template <typename T>
std::vector<double> Widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

std::vector<double> ReadAll(const TensorView& t) {
  std::vector<double> out(static_cast<size_t>(t.NumElements()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadAsDouble(t.data, t.dtype, i);
  return out;
}

// Output buffers start as 0xAB bytes: never read unwritten data.
constexpr unsigned char kFill = 0xAB;

void ExpectNear(const std::vector<double>& got, const NpyArray& want,
                const std::function<double(size_t)>& tol, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want.values[i];
    if (std::isinf(w)) {
      EXPECT_EQ(got[i], w) << what << " [" << i << "]";
      continue;
    }
    if (!(std::fabs(got[i] - w) <= tol(i))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << w << " (diff "
                      << std::fabs(got[i] - w) << " > " << tol(i) << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance";
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

void CheckSinusoidal(const GoldenCase& c, DType dtype, double f32_tol) {
  const NpyArray& pos = c.inputs.at("positions");
  SinusoidalParams p;
  p.dim = c.params.at("dim").get<int64_t>();
  p.base = c.params.value("base", 10000.0);
  p.layout = c.params.value("layout", "interleaved") == "concat" ? SinusoidalLayout::kConcat
                                                                 : SinusoidalLayout::kInterleaved;
  const std::string scheme = c.params.value("freq_scheme", "");
  p.scheme = scheme == "t2t"       ? FreqScheme::kT2t
             : scheme == "vaswani" ? FreqScheme::kVaswani
                                   : std::optional<FreqScheme>();
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = IdsView(pos);
  absl::StatusOr<SinusoidalPlan> plan =
      PlanSinusoidal({.params = p, .positions = spec, .output_dtype = dtype});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer out(plan->table, kFill);
  absl::Status s = RunSinusoidal(UnderTest(), *plan, out.view);
  ASSERT_TRUE(s.ok()) << s;
  ExpectNear(
      ReadAll(out.view), c.outputs.at("table"),
      [&](size_t i) {
        return dtype == DType::kFloat64 ? PhaseTolerance(pos.values[i / p.dim]) : f32_tol;
      },
      c.name + " table " + std::string(DTypeName(dtype)));
}

void CheckInvFreq(const GoldenCase& c) {
  const int64_t dim = c.params.at("dim").get<int64_t>();
  RopeConfig config = MakeRopeConfig(dim, std::nullopt, c.params.value("base", 10000.0),
                                     c.params.value("scaling", json()));
  absl::StatusOr<RopeFrequencies> f = ComputeRopeFrequencies(config, -1);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<double> inv(f->inv_freq.begin(), f->inv_freq.end());
  const NpyArray& want = c.outputs.at("inv_freq");
  ExpectNear(
      inv, want, [&](size_t i) { return 1e-14 * std::fabs(want.values[i]); }, c.name + " inv_freq");
  const double m = c.outputs.at("attention_scaling").values[0];
  EXPECT_NEAR(f->attention_factor, m, 1e-14 * std::fabs(m)) << c.name;
}

void CheckCosSin(const GoldenCase& c, DType dtype) {
  const NpyArray& pos = c.inputs.at("positions");
  const int64_t dim = c.params.at("dim").get<int64_t>();
  RopeConfig config = MakeRopeConfig(dim, std::nullopt, c.params.value("base", 10000.0),
                                     c.params.value("scaling", json()));
  const RopeCacheLayout layout =
      c.params.value("layout", "neox") == "gptj" ? RopeCacheLayout::kGptj : RopeCacheLayout::kNeox;
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = IdsView(pos);
  absl::StatusOr<RopeCachePlan> plan =
      PlanRopeCache({.config = config, .layout = layout, .positions = spec, .output_dtype = dtype});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer cos(plan->cos, kFill), sin(plan->sin, kFill);
  absl::StatusOr<RopeRunInfo> run =
      RunRopeCache(UnderTest(), *plan, /*cache=*/nullptr, cos.view, sin.view);
  ASSERT_TRUE(run.ok()) << run.status();
  const double m = std::max(1.0, run->frequencies->attention_factor);
  auto tol = [&](size_t i) {
    return dtype == DType::kFloat64 ? PhaseTolerance(pos.values[i / dim]) * m : 1e-6 * m;
  };
  const std::string what = c.name + " " + std::string(DTypeName(dtype));
  ExpectNear(ReadAll(cos.view), c.outputs.at("cos"), tol, what + " cos");
  ExpectNear(ReadAll(sin.view), c.outputs.at("sin"), tol, what + " sin");
}

void CheckApplyRope(const GoldenCase& c, DType dtype, double rel_tol) {
  const NpyArray& x = c.inputs.at("x");
  const NpyArray& pos = c.inputs.at("positions");
  const int seq_axis = c.params.value("seq_axis", -3);
  Shape shape(x.shape.begin(), x.shape.end());
  // Bring every golden layout to rank 4.
  while (shape.size() < 4) {
    if (shape.size() == 2) {
      shape.insert(shape.begin() + (seq_axis == -2 ? 1 : 0), 1);  // [S,D] -> [S,1,D]
    } else {
      shape.insert(shape.begin(), 1);
    }
  }
  const TensorLayout layout =
      seq_axis == -3 || x.shape.size() == 2 ? TensorLayout::kBSHD : TensorLayout::kBHSD;
  RopeConfig config =
      MakeRopeConfig(shape.back(), c.params.value("rotary_dim", shape.back()),
                     c.params.value("base", 10000.0), c.params.value("scaling", json()));
  config.style = c.params.value("style", "neox") == "gptj" ? RopeStyle::kGptj : RopeStyle::kNeox;
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = IdsView(pos);
  Buffer q(dtype, shape, kFill);
  for (int64_t i = 0; i < x.size(); ++i) q.set(i, x.values[i]);
  absl::StatusOr<ApplyRopePlan> plan =
      PlanApplyRope({.config = config, .layout = layout, .q = q.view, .positions = spec});
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<RopeRunInfo> run =
      RunApplyRope(UnderTest(), *plan, /*cache=*/nullptr, q.view, TensorView{});
  ASSERT_TRUE(run.ok()) << run.status();
  double max_abs = 0;
  for (double v : x.values) max_abs = std::max(max_abs, std::fabs(v));
  const double scale = std::max(1.0, run->frequencies->attention_factor) * max_abs;
  double max_pos = 0;
  for (double p : pos.values) max_pos = std::max(max_pos, p);
  ExpectNear(
      ReadAll(q.view), c.outputs.at("y"),
      [&](size_t) {
        return dtype == DType::kFloat64 ? PhaseTolerance(max_pos) * scale : rel_tol * scale;
      },
      c.name + " y " + std::string(DTypeName(dtype)));
}

void CheckAlibiSlopes(const GoldenCase& c) {
  for (int64_t n : c.params.at("num_heads_list").get<std::vector<int64_t>>()) {
    absl::StatusOr<std::vector<double>> s = AlibiSlopes(n);
    ASSERT_TRUE(s.ok()) << s.status();
    const NpyArray& want = c.outputs.at("slopes_h" + std::to_string(n));
    ExpectNear(
        *s, want, [&](size_t i) { return 1e-14 * want.values[i]; },
        c.name + " h" + std::to_string(n));
  }
}

AlibiMode Mode(const std::string& m) {
  return m == "bloom"       ? AlibiMode::kBloom
         : m == "symmetric" ? AlibiMode::kSymmetric
                            : AlibiMode::kCausal;
}

// The bias of `plan` on the backend under test (empty, with a failure, if the run fails).
std::vector<double> RunAlibi(const AlibiBiasPlan& plan) {
  Buffer out(plan.bias, kFill), slopes(plan.slopes, kFill);
  const absl::Status s = RunAlibiBias(UnderTest(), plan, out.view, slopes.view);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? ReadAll(out.view) : std::vector<double>();
}

void CheckAlibiBias(const GoldenCase& c, DType dtype) {
  AlibiBiasParams p;
  p.num_heads = c.params.at("num_heads").get<int64_t>();
  p.q_len = c.params.at("q_len").get<int64_t>();
  p.k_len = c.params.at("k_len").get<int64_t>();
  if (c.params.contains("q_offset")) p.query_offset = c.params["q_offset"].get<int64_t>();
  p.mode = Mode(c.params.value("mode", "causal"));
  const std::string future = c.params.value("future", "mask");
  p.future = future == "zero"     ? FutureMode::kZero
             : future == "linear" ? FutureMode::kLinear
                                  : FutureMode::kMask;
  absl::StatusOr<AlibiBiasPlan> plan = PlanAlibiBias({.params = p, .output_dtype = dtype});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const NpyArray& want = c.outputs.at("bias");
  ExpectNear(
      RunAlibi(*plan), want,
      [&](size_t i) {
        return dtype == DType::kFloat64 ? 1e-12 * std::max(1.0, std::fabs(want.values[i]))
                                        : 1e-6 * std::max(1.0, std::fabs(want.values[i]));
      },
      c.name + " " + std::string(DTypeName(dtype)));
}

void CheckBloomTensor(const GoldenCase& c) {
  const NpyArray& mask = c.inputs.at("attention_mask");
  AlibiBiasParams p;
  p.num_heads = c.params.at("num_heads").get<int64_t>();
  p.q_len = 1;
  p.k_len = mask.shape[1];
  p.mode = AlibiMode::kBloom;
  p.form = BiasForm::kCompact;
  p.attention_mask = IdsView(mask);
  absl::StatusOr<AlibiBiasPlan> plan =
      PlanAlibiBias({.params = p, .output_dtype = DType::kFloat64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->bias.shape, (Shape{mask.shape[0], p.num_heads, p.k_len}));
  const NpyArray& want = c.outputs.at("alibi");
  ExpectNear(
      RunAlibi(*plan), want,
      [&](size_t i) { return 1e-12 * std::max(1.0, std::fabs(want.values[i])); }, c.name);
}

void CheckT5Bucket(const GoldenCase& c) {
  const NpyArray& rp = c.inputs.at("relative_position");
  const NpyArray& want = c.outputs.at("bucket");
  const bool bidir = c.params.at("bidirectional").get<bool>();
  const int64_t nb = c.params.at("num_buckets").get<int64_t>();
  const int64_t md = c.params.at("max_distance").get<int64_t>();
  for (int64_t i = 0; i < rp.size(); ++i) {
    EXPECT_EQ(T5Bucket(rp.ints[i], bidir, nb, md), want.ints[i]) << c.name << " rp=" << rp.ints[i];
  }
}

void CheckT5Bias(const GoldenCase& c, DType dtype) {
  const NpyArray& table = c.inputs.at("table");
  RelativeBiasParams p;
  p.q_len = c.params.at("q_len").get<int64_t>();
  p.k_len = c.params.at("k_len").get<int64_t>();
  if (c.params.contains("q_offset")) p.query_offset = c.params["q_offset"].get<int64_t>();
  p.key_offset = c.params.value("k_offset", int64_t{0});
  p.bidirectional = c.params.value("bidirectional", true);
  p.num_buckets = c.params.value("num_buckets", int64_t{32});
  p.max_distance = c.params.value("max_distance", int64_t{128});
  p.table = {DType::kFloat64, Shape(table.shape.begin(), table.shape.end()), table.values.data()};
  absl::StatusOr<RelativeBiasPlan> plan = PlanRelativeBias({.params = p, .output_dtype = dtype});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer out(plan->bias, kFill);
  absl::Status s = RunRelativeBias(UnderTest(), *plan, out.view);
  ASSERT_TRUE(s.ok()) << s;
  const NpyArray& want = c.outputs.at("bias");
  ExpectNear(
      ReadAll(out.view), want,
      [&](size_t i) { return dtype == DType::kFloat64 ? 0.0 : 1e-7 * std::fabs(want.values[i]); },
      c.name + " " + std::string(DTypeName(dtype)));
}

void RunCase(const GoldenCase& c);

TEST_P(GoldenTest, MatchesEveryBackend) {
  absl::StatusOr<GoldenCase> loaded = ::posenc::testing::LoadGoldenCase(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const auto& backend : AllBackends()) {
    SCOPED_TRACE(std::string(backend->name()) + " " + backend->detail());
    g_backend = backend.get();
    RunCase(*loaded);
  }
  g_backend = nullptr;
}

// `check` in FLOAT64 and FLOAT32.
void InFloat64And32(const GoldenCase& c, void (*check)(const GoldenCase&, DType)) {
  check(c, DType::kFloat64);
  check(c, DType::kFloat32);
}

// `check` in each dtype, with that dtype's tolerance.
void InDTypes(const GoldenCase& c, void (*check)(const GoldenCase&, DType, double),
              std::initializer_list<std::pair<DType, double>> tolerances) {
  for (const auto& [dtype, tolerance] : tolerances) check(c, dtype, tolerance);
}

// Each golden function's checks, in every output dtype it is checked in.
using Check = void (*)(const GoldenCase&);
const std::map<std::string, Check>& Checks() {
  using D = DType;
  static const auto* const checks = new std::map<std::string, Check>{
      {"sinusoidal_table",
       [](const GoldenCase& c) {
         InDTypes(c, CheckSinusoidal, {{D::kFloat64, 0}, {D::kFloat32, 1e-6}});
       }},
      {"rope_inv_freq", CheckInvFreq},
      {"rope_cos_sin", [](const GoldenCase& c) { InFloat64And32(c, CheckCosSin); }},
      {"apply_rope",
       [](const GoldenCase& c) {
         InDTypes(
             c, CheckApplyRope,
             {{D::kFloat64, 0}, {D::kFloat32, 2e-6}, {D::kFloat16, 2e-3}, {D::kBFloat16, 1.6e-2}});
       }},
      {"alibi_slopes", CheckAlibiSlopes},
      {"alibi_bias", [](const GoldenCase& c) { InFloat64And32(c, CheckAlibiBias); }},
      {"bloom_alibi_tensor", CheckBloomTensor},
      {"t5_relative_position_bucket", CheckT5Bucket},
      {"t5_bias", [](const GoldenCase& c) { InFloat64And32(c, CheckT5Bias); }},
  };
  return *checks;
}

void RunCase(const GoldenCase& c) {
  const auto check = Checks().find(c.function);
  ASSERT_NE(check, Checks().end()) << c.name << ": unknown golden function " << c.function;
  check->second(c);
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenTest,
                         ::testing::ValuesIn(::posenc::testing::ListGoldenCases()),
                         [](const auto& info) { return info.param; });

TEST(GoldenDirTest, HasEveryCase) {
  EXPECT_GE(::posenc::testing::ListGoldenCases().size(), 36u)
      << "golden cases not found in " << ::posenc::testing::GoldenDir();
}

// ---- Cases computed here ------------------------------------------------------------------
// Scalings without a published float64 oracle file: each case's frequencies written out from
// its formula in plain double (std::pow), cos/sin of p*omega_j in double, against every backend.

struct ComputedRopeCase {
  std::string name;
  RopeConfig config;
  std::vector<double> omega;  // the formula's omega_j, in double
};

std::vector<ComputedRopeCase> ComputedRopeCases() {
  std::vector<ComputedRopeCase> out;
  // Hunyuan-A13B style: dynamic with alpha 1000, d = 128; factor 1 is in the file but not read.
  {
    ComputedRopeCase c{.name = "dynamic_alpha"};
    c.config.head_dim = 128;
    c.config.base = 10000;
    c.config.scaling.type = RopeScalingType::kDynamic;
    c.config.scaling.factor = 1.0;
    c.config.scaling.alpha = 1000;
    const double base = 10000 * std::pow(1000.0, 128.0 / 126.0);
    for (int j = 0; j < 64; ++j) c.omega.push_back(1 / std::pow(base, 2.0 * j / 128.0));
    out.push_back(std::move(c));
  }
  // freq_factors after linear scaling, partial rotary (d = 32 of 64), base 500000.
  {
    ComputedRopeCase c{.name = "linear_freq_factors"};
    c.config.head_dim = 64;
    c.config.rotary_dim = 32;
    c.config.base = 500000;
    c.config.scaling.type = RopeScalingType::kLinear;
    c.config.scaling.factor = 4;
    for (int j = 0; j < 16; ++j) {
      const double f = j < 4 ? 1.0 : 1.0 + 2.5 * j;
      c.config.freq_factors.push_back(f);
      c.omega.push_back(1 / std::pow(500000.0, 2.0 * j / 32.0) / 4 / f);
    }
    out.push_back(std::move(c));
  }
  // freq_factors with alpha: both new scalings at once.
  {
    ComputedRopeCase c{.name = "alpha_freq_factors"};
    c.config.head_dim = 64;
    c.config.scaling.type = RopeScalingType::kDynamic;
    c.config.scaling.alpha = 2.5;
    const double base = 10000 * std::pow(2.5, 64.0 / 62.0);
    for (int j = 0; j < 32; ++j) {
      const double f = 0.5 + 0.125 * j;
      c.config.freq_factors.push_back(f);
      c.omega.push_back(1 / std::pow(base, 2.0 * j / 64.0) / f);
    }
    out.push_back(std::move(c));
  }
  return out;
}

TEST(ComputedGoldenTest, AlphaAndFreqFactorsOnEveryBackend) {
  std::vector<int64_t> ids = {0, 1, 2, 7, 1000, 65535, 1000000, 123456789, kMaxPosition};
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = {DType::kInt64, {static_cast<int64_t>(ids.size())}, ids.data()};
  for (const ComputedRopeCase& c : ComputedRopeCases()) {
    const absl::StatusOr<RopeFrequencies> f = ComputeRopeFrequencies(c.config, kMaxPosition);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->inv_freq.size(), c.omega.size());
    for (size_t j = 0; j < c.omega.size(); ++j) {
      EXPECT_NEAR(static_cast<double>(f->inv_freq[j]), c.omega[j], 4e-15 * c.omega[j])
          << c.name << " omega_" << j;
    }
    EXPECT_EQ(f->seq_len, 0) << c.name;  // alpha: no seq_len-dependent growth
    EXPECT_EQ(f->attention_factor, 1.0) << c.name;
    const int64_t half = static_cast<int64_t>(c.omega.size());
    for (const auto& backend : AllBackends()) {
      for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
        const std::string what = c.name + " " + std::string(backend->name()) + " " +
                                 backend->detail() + " " + std::string(DTypeName(dtype));
        auto plan = PlanRopeCache({.config = c.config,
                                   .layout = RopeCacheLayout::kCompact,
                                   .positions = spec,
                                   .output_dtype = dtype});
        ASSERT_TRUE(plan.ok()) << plan.status();
        Buffer cos(plan->cos, kFill), sin(plan->sin, kFill);
        auto run = RunRopeCache(*backend, *plan, /*cache=*/nullptr, cos.view, sin.view);
        ASSERT_TRUE(run.ok()) << what << ": " << run.status();
        for (size_t i = 0; i < ids.size(); ++i) {
          const double p = static_cast<double>(ids[i]);
          for (int64_t j = 0; j < half; ++j) {
            // The double formula's own error: omega_j to a few ulps, so the phase to
            // p*omega_j*eps; FLOAT32's promise on top.
            const double w = c.omega[static_cast<size_t>(j)];
            const double tol = 1e-13 + 8e-16 * p * w + (dtype == DType::kFloat32 ? 1e-6 : 0.0);
            const int64_t k = static_cast<int64_t>(i) * half + j;
            ASSERT_NEAR(cos.at(k), std::cos(p * w), tol) << what << " p=" << p << " j=" << j;
            ASSERT_NEAR(sin.at(k), std::sin(p * w), tol) << what << " p=" << p << " j=" << j;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace posenc::kernels
