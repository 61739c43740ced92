// The parity harness: every backend x op x dtype x layout x style x scaling x position mode
// against the reference backend (ggml's test-backend-ops is the model), plus the golden cases
// through each backend. ISA levels this processor lacks are reported as skipped.
//
// Tolerances (SPEC §2.2 accuracy, §8; relative to the largest input magnitude times the
// attention factor where inputs are rotated):
//   FLOAT64 1e-12, FLOAT32 apply 2e-6, FLOAT32 tables 1e-6, FLOAT16/BFLOAT16 1 output ulp of the
//   reference value; biases, buckets and table lookups exactly equal.
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;

// Unwritten output bytes read as a value no kernel writes (0xCDCD...).
constexpr unsigned char kFill = 0xCD;

Buffer Random(DType dtype, Shape shape, uint32_t seed, double lo = -3, double hi = 3) {
  return ::posenc::testing::RandomBuffer(dtype, std::move(shape), seed, lo, hi);
}

// One output ulp at the magnitude of v (fp16: 10 fraction bits, bf16: 7).
double Ulp(DType dtype, double v) {
  const int bits = dtype == DType::kFloat16 ? 10 : 7;
  const int min_exp = dtype == DType::kFloat16 ? -14 : -126;
  int e;
  std::frexp(std::max(std::fabs(v), 1e-300), &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - bits);
}

enum class Kind { kExact, kTable, kApply };

// Compares a backend's output with the reference's.
void ExpectParity(const Buffer& want, const Buffer& got, Kind kind, double magnitude,
                  const std::string& what, double max_position = 0x1p31) {
  ASSERT_EQ(want.view.shape, got.view.shape) << what;
  const DType dtype = want.view.dtype;
  int bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double w = want.at(i), g = got.at(i);
    if (std::isinf(w) || kind == Kind::kExact) {
      if (!(w == g || (std::isnan(w) && std::isnan(g)))) {
        if (++bad <= 3) ADD_FAILURE() << what << " [" << i << "]: got " << g << ", want " << w;
      }
      continue;
    }
    double tol;
    switch (dtype) {
      // The reference's phase carries the rounding of a long double product (2^-64 relative):
      // about 1e-10 at position 2^31, where the CPU backend's double-double phase is closer.
      case DType::kFloat64: tol = (1e-12 + 0x1p-62 * max_position) * magnitude; break;
      case DType::kFloat32: tol = (kind == Kind::kApply ? 2e-6 : 1e-6) * magnitude; break;
      default: tol = Ulp(dtype, std::max(std::fabs(w), std::fabs(g))) * 1.0001; break;
    }
    const double err = std::fabs(g - w);
    worst = std::max(worst, err / std::max(tol, 1e-300));
    if (!(err <= tol) && ++bad <= 3) {
      ADD_FAILURE() << what << " [" << i << "]: got " << g << ", want " << w << " (err " << err
                    << " > tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements out of tolerance";
}

struct BackendUnderTest {
  std::string name;
  std::unique_ptr<Backend> backend;
};

const Backend& Ref() {
  static const auto* b = MakeReferenceBackend().release();
  return *b;
}

// Every CPU ISA level this machine supports, single- and multi-threaded.
class ParityTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    const auto& [isa, threads] = GetParam();
    auto b = MakeCpuBackend(CpuBackendOptions{threads, isa});
    if (!b.ok()) GTEST_SKIP() << "cpu/" << isa << " not supported here: " << b.status();
    backend_ = std::move(*b);
  }
  std::string Tag() const { return std::string(backend_->name()) + "/" + backend_->detail(); }
  std::unique_ptr<Backend> backend_;
};

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64};

std::string Name(DType d) { return std::string(DTypeName(d)); }

// ---- position modes
// ------------------------------------------------------------------------------

struct PositionCase {
  std::string name;
  PositionSpec spec;
  std::vector<int64_t> storage;
};

// Position modes for a [B, S] grid (B = 2, S = 5), with large positions in the mix.
std::vector<PositionCase> BatchSeqPositions() {
  std::vector<PositionCase> out;
  out.push_back({"default", PositionSpec{}, {}});
  PositionCase range{"range", PositionSpec{}, {}};
  range.spec.kind = PositionSpec::Kind::kRange;
  range.spec.start = 123456789;
  out.push_back(range);
  PositionCase offsets{"offsets", PositionSpec{}, {}};
  offsets.spec.kind = PositionSpec::Kind::kOffsets;
  offsets.spec.offsets = {7, kMaxPosition - 4};
  out.push_back(offsets);
  PositionCase ids_s{"ids_s", PositionSpec{}, {3, 3, 1000000, 0, 65537}};
  out.push_back(ids_s);
  PositionCase ids_bs{"ids_bs", PositionSpec{}, {9, 8, 7, 6, 5, kMaxPosition, 1, 2, 3, 4}};
  out.push_back(ids_bs);
  PositionCase mask{"mask", PositionSpec{}, {0, 0, 1, 1, 1, 1, 1, 1, 0, 1}};
  out.push_back(mask);
  for (auto& c : out) {
    if (c.name == "ids_s") {
      c.spec.kind = PositionSpec::Kind::kIds;
      c.spec.ids = {DType::kInt64, {5}, nullptr};
    } else if (c.name == "ids_bs") {
      c.spec.kind = PositionSpec::Kind::kIds;
      c.spec.ids = {DType::kInt64, {2, 5}, nullptr};
    } else if (c.name == "mask") {
      c.spec.kind = PositionSpec::Kind::kAttentionMask;
      c.spec.mask = {DType::kInt64, {2, 5}, nullptr};
    }
  }
  return out;
}

// Points the spec's views at the case's own storage (after copies).
PositionSpec Bind(PositionCase& c) {
  PositionSpec s = c.spec;
  if (s.kind == PositionSpec::Kind::kIds) s.ids.data = c.storage.data();
  if (s.kind == PositionSpec::Kind::kAttentionMask) s.mask.data = c.storage.data();
  return s;
}

// ---- RoPE configs -----------------------------------------------------------------------------

std::vector<std::pair<std::string, RopeConfig>> RopeConfigs(int64_t head_dim, int64_t rotary) {
  std::vector<double> long_factor, short_factor;
  for (int64_t j = 0; j < rotary / 2; ++j) {
    long_factor.push_back(1.0 + 0.37 * static_cast<double>(j));
    short_factor.push_back(1.0 + 0.01 * static_cast<double>(j));
  }
  // The config with `scaling` (and, where given, a base, max_position_embeddings and inverse).
  auto with = [&](RopeScaling scaling, double base = 10000.0,
                  std::optional<int64_t> max_position_embeddings = std::nullopt,
                  bool inverse = false) {
    return RopeConfig{.head_dim = head_dim,
                      .rotary_dim = rotary,
                      .base = base,
                      .scaling = std::move(scaling),
                      .max_position_embeddings = max_position_embeddings,
                      .inverse = inverse};
  };
  using T = RopeScalingType;
  std::vector<std::pair<std::string, RopeConfig>> out;
  out.emplace_back("default", with({}));
  out.emplace_back("linear", with({.type = T::kLinear, .factor = 4}));
  out.emplace_back("ntk", with({.type = T::kNtk, .factor = 3}));
  out.emplace_back("dynamic", with({.type = T::kDynamic, .factor = 2}, 10000.0, 4096));
  // `factor` times an `original` context, with the type's own fields added below.
  auto extended = [](T type, double factor, int64_t original) {
    return RopeScaling{
        .type = type, .factor = factor, .original_max_position_embeddings = original};
  };
  RopeScaling yarn = extended(T::kYarn, 40, 4096);
  yarn.mscale = 1.0;
  yarn.mscale_all_dim = 0.5;
  out.emplace_back("yarn", with(yarn, 500000));
  RopeScaling llama3 = extended(T::kLlama3, 8, 8192);
  llama3.low_freq_factor = 1;
  llama3.high_freq_factor = 4;
  out.emplace_back("llama3", with(llama3, 500000));
  out.emplace_back("longrope", with({.type = T::kLongrope,
                                     .original_max_position_embeddings = 4096,
                                     .long_factor = long_factor,
                                     .short_factor = short_factor},
                                    10000.0, 131072));
  out.emplace_back("proportional",
                   with({.type = T::kProportional, .factor = 2, .partial_rotary_factor = 0.5}));
  RopeScaling llama3_step = extended(T::kLlama3, 16, 8192);  // Llama 4 Scout: low == high
  llama3_step.low_freq_factor = 1;
  llama3_step.high_freq_factor = 1;
  out.emplace_back("llama3_step", with(llama3_step, 500000));
  out.emplace_back("yarn_inverse",
                   with({.type = T::kYarn, .factor = 4, .original_max_position_embeddings = 2048},
                        10000.0, std::nullopt, /*inverse=*/true));
  out.emplace_back("dynamic_alpha", with({.type = T::kDynamic, .alpha = 1000}));
  // GGUF-style per-frequency divisors on top of YaRN's frequencies.
  RopeConfig factors = with(yarn, 500000);
  for (int64_t j = 0; j < rotary / 2; ++j) {
    factors.freq_factors.push_back(j % 3 == 0 ? 1.0 : 1.0 + 0.73 * static_cast<double>(j));
  }
  out.emplace_back("yarn_freq_factors", std::move(factors));
  return out;
}

struct RopeResult {
  Buffer q, k;
  double magnitude = 1;
};

// The one helper of this harness: ApplyRope rotates in place, so each backend gets its own copy
// of the inputs (plan, then run; the run resolves the positions and computes the frequencies).
absl::StatusOr<RopeResult> RunApply(const Backend& backend, const RopeConfig& config,
                                    TensorLayout layout, const PositionSpec& spec, const Buffer& q0,
                                    const Buffer* k0) {
  RopeResult r;
  r.q = q0;
  if (k0) r.k = *k0;
  const TensorView k = k0 ? r.k.view : TensorView{};
  POSENC_ASSIGN_OR_RETURN(
      const ApplyRopePlan plan,
      PlanApplyRope(
          {.config = config, .layout = layout, .q = r.q.view, .k = k, .positions = spec}));
  POSENC_ASSIGN_OR_RETURN(const RopeRunInfo info,
                          RunApplyRope(backend, plan, /*cache=*/nullptr, r.q.view, k));
  const RopeFrequencies& f = *info.frequencies;
  double max_abs = 0;
  for (int64_t i = 0; i < q0.size(); ++i) max_abs = std::max(max_abs, std::fabs(q0.at(i)));
  const double m = plan.config.inverse ? 1 / f.attention_factor : f.attention_factor;
  r.magnitude = max_abs * std::max(1.0, f.CosSinScale() * std::max(1.0, m));
  return r;
}

TEST_P(ParityTest, ApplyRopeEveryLayoutStyleScalingAndPositionMode) {
  int combos = 0;
  for (DType dtype : kFloatTypes) {
    for (TensorLayout layout : {TensorLayout::kBSHD, TensorLayout::kBHSD}) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj, RopeStyle::kDeepseek}) {
        for (int64_t rotary : {int64_t{16}, int64_t{10}}) {  // full and partial rotary
          for (auto& [sname, config0] : RopeConfigs(16, rotary)) {
            for (PositionCase pc : BatchSeqPositions()) {
              RopeConfig config = config0;
              config.style = style;
              const Shape qs =
                  layout == TensorLayout::kBSHD ? Shape{2, 5, 3, 16} : Shape{2, 3, 5, 16};
              const Shape ks =
                  layout == TensorLayout::kBSHD ? Shape{2, 5, 1, 16} : Shape{2, 1, 5, 16};
              Buffer q = Random(dtype, qs, 1 + combos), k = Random(dtype, ks, 1000 + combos);
              const PositionSpec spec = Bind(pc);
              auto want = RunApply(Ref(), config, layout, spec, q, &k);
              ASSERT_TRUE(want.ok()) << want.status();
              auto got = RunApply(*backend_, config, layout, spec, q, &k);
              ASSERT_TRUE(got.ok()) << got.status();
              const std::string what = Tag() + " ApplyRope " + Name(dtype) +
                                       (layout == TensorLayout::kBSHD ? " BSHD " : " BHSD ") +
                                       (style == RopeStyle::kNeox   ? "neox "
                                        : style == RopeStyle::kGptj ? "gptj "
                                                                    : "deepseek ") +
                                       "rot" + std::to_string(rotary) + " " + sname + " " + pc.name;
              ExpectParity(want->q, got->q, Kind::kApply, want->magnitude, what + " q");
              ExpectParity(want->k, got->k, Kind::kApply, want->magnitude, what + " k");
              ++combos;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(combos, 4 * 2 * 3 * 2 * 12 * 6);
}

TEST_P(ParityTest, ApplyRopePackedAndMrope) {
  for (DType dtype : kFloatTypes) {
    // THD with cu_seqlens and offsets, no k.
    RopeConfig config;
    config.head_dim = 8;
    PositionSpec cu;
    cu.kind = PositionSpec::Kind::kCuSeqlens;
    cu.cu_seqlens = {0, 3, 3, 7};
    cu.offsets = {5, 0, 1 << 30};
    Buffer q = Random(dtype, {7, 2, 8}, 42);
    auto want = RunApply(Ref(), config, TensorLayout::kTHD, cu, q, nullptr);
    auto got = RunApply(*backend_, config, TensorLayout::kTHD, cu, q, nullptr);
    ASSERT_TRUE(want.ok() && got.ok());
    ExpectParity(want->q, got->q, Kind::kApply, want->magnitude, Tag() + " THD " + Name(dtype));
    // M-RoPE, both section layouts, with a large head_dim (fp16 rows wider than one slice).
    for (MropeLayout ml : {MropeLayout::kContiguous, MropeLayout::kInterleaved}) {
      RopeConfig mc;
      mc.head_dim = 128;
      mc.mrope_section = {16, 24, 24};
      mc.mrope_layout = ml;
      std::vector<int64_t> ids(3 * 4);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7919 % 5000);
      PositionSpec ps;
      ps.kind = PositionSpec::Kind::kIds;
      ps.ids = {DType::kInt64, {3, 4}, ids.data()};
      Buffer mq = Random(dtype, {1, 4, 2, 128}, 43);
      auto w = RunApply(Ref(), mc, TensorLayout::kBSHD, ps, mq, nullptr);
      auto g = RunApply(*backend_, mc, TensorLayout::kBSHD, ps, mq, nullptr);
      ASSERT_TRUE(w.ok() && g.ok()) << w.status() << g.status();
      ExpectParity(w->q, g->q, Kind::kApply, w->magnitude, Tag() + " M-RoPE " + Name(dtype));
    }
  }
}

TEST_P(ParityTest, RopeCacheEveryScalingLayoutAndDtype) {
  std::vector<int64_t> ids = {0, 1, 2, 4095, 4096, 65535, 1000000, 123456789, kMaxPosition};
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = {DType::kInt64, {static_cast<int64_t>(ids.size())}, ids.data()};
  for (DType dtype : kFloatTypes) {
    for (auto& [sname, config] : RopeConfigs(64, 64)) {
      for (RopeCacheLayout layout :
           {RopeCacheLayout::kCompact, RopeCacheLayout::kNeox, RopeCacheLayout::kGptj}) {
        auto plan = PlanRopeCache(
            {.config = config, .layout = layout, .positions = spec, .output_dtype = dtype});
        ASSERT_TRUE(plan.ok()) << plan.status();
        Buffer wc(plan->cos, kFill), ws(plan->sin, kFill);
        Buffer gc(plan->cos, kFill), gs(plan->sin, kFill);
        auto want = RunRopeCache(Ref(), *plan, /*cache=*/nullptr, wc.view, ws.view);
        ASSERT_TRUE(want.ok()) << want.status();
        ASSERT_TRUE(RunRopeCache(*backend_, *plan, /*cache=*/nullptr, gc.view, gs.view).ok());
        const RopeFrequencies* f = want->frequencies.get();
        const double m =
            std::max(1.0, config.inverse ? 1 / f->attention_factor : f->attention_factor);
        const std::string what = Tag() + " RopeCache " + Name(dtype) + " " + sname + " layout" +
                                 std::to_string(static_cast<int>(layout));
        ExpectParity(wc, gc, Kind::kTable, m, what + " cos");
        ExpectParity(ws, gs, Kind::kTable, m, what + " sin");
      }
    }
  }
}

TEST_P(ParityTest, SinusoidalEveryLayoutSchemeAndOddDims) {
  std::vector<int64_t> ids = {0, 1, 17, 4096, 99999, 1 << 24, kMaxPosition};
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = {DType::kInt64, {static_cast<int64_t>(ids.size())}, ids.data()};
  for (DType dtype : kFloatTypes) {
    for (int64_t dim : {1, 2, 3, 5, 8, 64, 127}) {
      for (SinusoidalLayout layout : {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcat}) {
        for (FreqScheme scheme : {FreqScheme::kVaswani, FreqScheme::kT2t}) {
          SinusoidalParams p{dim, 10000.0, layout, scheme};
          auto plan = PlanSinusoidal({.params = p, .positions = spec, .output_dtype = dtype});
          ASSERT_TRUE(plan.ok()) << plan.status();
          Buffer want(plan->table, kFill), got(plan->table, kFill);
          ASSERT_TRUE(RunSinusoidal(Ref(), *plan, want.view).ok());
          ASSERT_TRUE(RunSinusoidal(*backend_, *plan, got.view).ok());
          ExpectParity(want, got, Kind::kTable, 1.0,
                       Tag() + " Sinusoidal " + Name(dtype) + " D=" + std::to_string(dim));
        }
      }
    }
  }
}

TEST_P(ParityTest, AddPositionEncodingSourcesAndCombines) {
  std::vector<double> table(64 * 6);
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(static_cast<double>(i));
  for (DType dtype : kFloatTypes) {
    for (bool learned : {false, true}) {
      for (Combine combine : {Combine::kAdd, Combine::kConcat}) {
        for (PositionCase pc : BatchSeqPositions()) {
          if (learned && pc.name != "default" && pc.name != "mask") continue;  // table is short
          AddPositionEncodingParams p;
          p.combine = combine;
          p.scale = std::sqrt(6.0);
          if (learned) {
            p.learned = {DType::kFloat64, {64, 6}, table.data()};
            p.table_offset = 2;
          } else {
            p.sinusoidal =
                SinusoidalParams{0, 10000.0, SinusoidalLayout::kConcat, FreqScheme::kT2t};
            p.padding_idx = 1;
          }
          const PositionSpec spec = Bind(pc);
          Buffer x = Random(dtype, {2, 5, 6}, 5);
          auto plan = PlanAddPositionEncoding({.params = p, .x = x.view, .positions = spec});
          ASSERT_TRUE(plan.ok()) << plan.status();
          Buffer want(plan->y, kFill), got(plan->y, kFill);
          ASSERT_TRUE(RunAddPositionEncoding(Ref(), *plan, want.view).ok());
          ASSERT_TRUE(RunAddPositionEncoding(*backend_, *plan, got.view).ok());
          ExpectParity(want, got, Kind::kApply, 3 * std::sqrt(6.0) + 1,
                       Tag() + " AddPositionEncoding " + Name(dtype) + " " + pc.name +
                           (learned ? " learned" : " sinusoidal"));
        }
      }
    }
  }
}

TEST_P(ParityTest, BiasesAndEmbeddingsAreExact) {
  std::vector<int64_t> mask = {0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1};
  for (DType dtype : kFloatTypes) {
    for (AlibiMode mode : {AlibiMode::kCausal, AlibiMode::kSymmetric, AlibiMode::kBloom}) {
      for (FutureMode future : {FutureMode::kMask, FutureMode::kZero, FutureMode::kLinear}) {
        for (BiasForm form : {BiasForm::kFull, BiasForm::kCompact}) {
          for (bool masked : {false, true}) {
            if (masked && mode != AlibiMode::kBloom) continue;
            for (int64_t qoff : {int64_t{-3}, int64_t{2}, int64_t{40}}) {
              AlibiBiasParams p{.num_heads = 6,
                                .q_len = 5,
                                .k_len = 7,
                                .query_offset = qoff,
                                .mode = mode,
                                .future = future,
                                .form = form};
              if (masked) p.attention_mask = {DType::kInt64, {2, 7}, mask.data()};
              auto plan = PlanAlibiBias({.params = p, .output_dtype = dtype});
              ASSERT_TRUE(plan.ok()) << plan.status();
              Buffer want(plan->bias, kFill), got(plan->bias, kFill);
              Buffer want_slopes(plan->slopes, kFill), got_slopes(plan->slopes, kFill);
              ASSERT_TRUE(RunAlibiBias(Ref(), *plan, want.view, want_slopes.view).ok());
              ASSERT_TRUE(RunAlibiBias(*backend_, *plan, got.view, got_slopes.view).ok());
              ExpectParity(want, got, Kind::kExact, 1,
                           Tag() + " AlibiBias " + Name(dtype) + " mode" +
                               std::to_string(static_cast<int>(mode)) + " future" +
                               std::to_string(static_cast<int>(future)) + " form" +
                               std::to_string(static_cast<int>(form)) + " qoff" +
                               std::to_string(qoff));
            }
          }
        }
      }
    }
    std::vector<double> table(32 * 4);
    for (size_t i = 0; i < table.size(); ++i) table[i] = std::cos(static_cast<double>(i)) * 3;
    for (bool bidir : {true, false}) {
      for (BiasForm form : {BiasForm::kFull, BiasForm::kCompact, BiasForm::kBuckets}) {
        const RelativeBiasParams p{.q_len = 9,
                                   .k_len = 300,
                                   .query_offset = 150,
                                   .key_offset = 3,
                                   .bidirectional = bidir,
                                   .form = form,
                                   .table = {DType::kFloat64, {32, 4}, table.data()}};
        // BUCKETS are INT32 whatever the float dtype of the other forms.
        auto plan = PlanRelativeBias(
            {.params = p,
             .output_dtype = form == BiasForm::kBuckets ? std::nullopt : std::optional(dtype)});
        ASSERT_TRUE(plan.ok()) << plan.status();
        const DType out = plan->bias.dtype;
        Buffer want(plan->bias, kFill), got(plan->bias, kFill);
        ASSERT_TRUE(RunRelativeBias(Ref(), *plan, want.view).ok());
        ASSERT_TRUE(RunRelativeBias(*backend_, *plan, got.view).ok());
        ExpectParity(want, got, Kind::kExact, 1, Tag() + " RelativeBias " + Name(out));
      }
    }
    std::vector<float> emb(9 * 5);
    for (size_t i = 0; i < emb.size(); ++i) emb[i] = static_cast<float>(i) * 0.25f - 3;
    const RelativeEmbeddingParams e{
        .q_len = 6, .k_len = 11, .max_relative = 4, .table = {DType::kFloat32, {9, 5}, emb.data()}};
    auto plan = PlanRelativeEmbedding({.params = e, .output_dtype = dtype});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Buffer want(plan->embeddings, kFill), got(plan->embeddings, kFill);
    ASSERT_TRUE(RunRelativeEmbedding(Ref(), *plan, want.view).ok());
    ASSERT_TRUE(RunRelativeEmbedding(*backend_, *plan, got.view).ok());
    ExpectParity(want, got, Kind::kExact, 1, Tag() + " RelativeEmbedding " + Name(dtype));
  }
}

TEST_P(ParityTest, LargeRequestsSplitAcrossThreadsMatch) {
  // Big enough to be split into chunks: every chunk boundary must agree with the reference.
  RopeConfig config;
  config.head_dim = 64;
  Buffer q = Random(DType::kFloat32, {1, 257, 8, 64}, 77);
  Buffer k = Random(DType::kFloat32, {1, 257, 2, 64}, 78);
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kRange;
  spec.start = 1 << 20;
  auto want = RunApply(Ref(), config, TensorLayout::kBSHD, spec, q, &k);
  auto got = RunApply(*backend_, config, TensorLayout::kBSHD, spec, q, &k);
  ASSERT_TRUE(want.ok() && got.ok());
  ExpectParity(want->q, got->q, Kind::kApply, want->magnitude, Tag() + " large q");
  ExpectParity(want->k, got->k, Kind::kApply, want->magnitude, Tag() + " large k");
  std::vector<float> table(32 * 3, 0.5f);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
  const RelativeBiasParams p{
      .q_len = 300, .k_len = 301, .table = {DType::kFloat32, {32, 3}, table.data()}};
  auto plan = PlanRelativeBias({.params = p, .output_dtype = DType::kFloat32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer w(plan->bias, kFill), g(plan->bias, kFill);
  ASSERT_TRUE(RunRelativeBias(Ref(), *plan, w.view).ok());
  ASSERT_TRUE(RunRelativeBias(*backend_, *plan, g.view).ok());
  ExpectParity(w, g, Kind::kExact, 1, Tag() + " large T5");
}

TEST_P(ParityTest, LearnedTableOutOfRangeIsReportedNotWritten) {
  std::vector<float> table(4 * 2, 1.0f);
  AddPositionEncodingParams p;
  p.learned = {DType::kFloat32, {4, 2}, table.data()};
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kRange;
  spec.start = 3;
  Buffer x = Random(DType::kFloat32, {1, 2, 2}, 1);
  auto plan = PlanAddPositionEncoding({.params = p, .x = x.view, .positions = spec});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer y(plan->y, kFill);
  EXPECT_EQ(RunAddPositionEncoding(*backend_, *plan, y.view).code(), absl::StatusCode::kOutOfRange);
}

INSTANTIATE_TEST_SUITE_P(Cpu, ParityTest,
                         ::testing::Combine(::testing::Values("avx512", "avx2", "scalar"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_t" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace posenc::kernels
