// The CPU backend's table walk (cpu.h's AngleWalker: rows by angle addition in double from exact
// anchors, re-anchored every 256 rows) against the reference backend's FLOAT64 tables (long
// double sin/cos): randomized positions far from 0 (up to 2^31-1) in runs that cross re-anchor
// and block boundaries, with jumps, repeats and steps back between them, for RopeCache (every
// layout) and Sinusoidal (both layouts, even and odd D), in tables below and above the streaming
// size, on every ISA level and 1 or 2 threads. FLOAT32 within 1e-6 of the truth (times the
// attention factor), FLOAT16/BFLOAT16 within one output ulp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/rope/config.h"
#include "kernels/rope/rope_cache.h"
#include "tests/common/buffers.h"
#include "tests/common/position_specs.h"
#include "tests/common/sanitized.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;
using ::posenc::testing::IdsSpec;
using ::posenc::testing::kSanitizedBuild;
using ::posenc::testing::RangeSpec;

constexpr unsigned char kFill = 0xCD;  // unwritten output reads as a value no kernel writes

// One output ulp at the magnitude of v (fp16: 10 fraction bits, bf16: 7).
double Ulp(DType dtype, double v) {
  const int bits = dtype == DType::kFloat16 ? 10 : 7;
  const int min_exp = dtype == DType::kFloat16 ? -14 : -126;
  int e;
  std::frexp(std::max(std::fabs(v), 1e-300), &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - bits);
}

// `got` (any float dtype) against the FLOAT64 reference `truth` of the same shape.
void ExpectNearTruth(const Buffer& truth, const Buffer& got, double magnitude,
                     const std::string& what) {
  ASSERT_EQ(truth.view.shape, got.view.shape) << what;
  const DType dtype = got.view.dtype;
  int bad = 0;
  for (int64_t i = 0; i < truth.size(); ++i) {
    const double w = truth.at(i), g = got.at(i);
    const double tol = dtype == DType::kFloat32
                           ? 1e-6 * magnitude
                           : Ulp(dtype, std::max(std::fabs(w), std::fabs(g))) * 1.0001;
    const double err = std::fabs(g - w);
    if (!(err <= tol) && ++bad <= 3) {
      ADD_FAILURE() << what << " [" << i << "]: got " << g << ", want " << w << " (err " << err
                    << " > tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << truth.size() << " out of tolerance";
}

// Runs of consecutive positions far from 0: lengths 1 .. 1200 (many cross the walker's 256-row
// anchors and the blocks of rows), some ending at 2^31-1, some near 0, the rest anywhere; between
// runs a jump, a repeat or a step back.
std::vector<int64_t> RandomRuns(uint32_t seed, int runs) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> ids;
  for (int r = 0; r < runs; ++r) {
    const int64_t len = r % 3 == 0 ? std::uniform_int_distribution<int64_t>(1, 40)(gen)
                                   : std::uniform_int_distribution<int64_t>(200, 1200)(gen);
    int64_t start;
    switch (r % 4) {
      case 0: start = kMaxPosition + 1 - len; break;
      case 1: start = std::uniform_int_distribution<int64_t>(0, 5000)(gen); break;
      default:
        start =
            std::uniform_int_distribution<int64_t>(kMaxPosition / 2, kMaxPosition + 1 - len)(gen);
        break;
    }
    for (int64_t i = 0; i < len; ++i) ids.push_back(start + i);
    const int64_t step = std::uniform_int_distribution<int64_t>(-3, 5)(gen);
    if (step != 1 && ids.back() + step >= 0 && ids.back() + step <= kMaxPosition) {
      ids.push_back(ids.back() + step);
    }
  }
  return ids;
}

const Backend& Ref() {
  static const auto* b = MakeReferenceBackend().release();
  return *b;
}

struct Level {
  std::string name;
  std::unique_ptr<Backend> backend;
};

// The CPU backend on every ISA level this processor has, 1 and 2 threads.
std::vector<Level> Levels() {
  std::vector<Level> out;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    for (int threads : {1, 2}) {
      auto b = MakeCpuBackend(CpuBackendOptions{threads, isa});
      if (b.ok()) out.push_back({std::string(isa) + "_t" + std::to_string(threads), std::move(*b)});
    }
  }
  return out;
}

// The best ISA level this processor has, 2 threads: for the cases whose point is a path, not an
// ISA.
std::vector<Level> BestLevel() {
  std::vector<Level> out = Levels();
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const Level& l) { return l.name.find("_t2") == std::string::npos; }),
            out.end());
  out.resize(std::min<size_t>(out.size(), 1));
  return out;
}

const DType kWalkTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// RopeCache of `spec` in `layout` on every level and walked dtype against the FLOAT64 reference.
void CheckRopeCache(const RopeConfig& config, RopeCacheLayout layout, const PositionSpec& spec,
                    const std::vector<Level>& levels, const std::string& what) {
  auto ref_plan = PlanRopeCache(
      {.config = config, .layout = layout, .positions = spec, .output_dtype = DType::kFloat64});
  ASSERT_TRUE(ref_plan.ok()) << ref_plan.status();
  Buffer tc(ref_plan->cos), ts(ref_plan->sin);
  auto info = RunRopeCache(Ref(), *ref_plan, /*cache=*/nullptr, tc.view, ts.view);
  ASSERT_TRUE(info.ok()) << info.status();
  const double m = std::max(1.0, config.inverse ? 1 / info->frequencies->attention_factor
                                                : info->frequencies->attention_factor);
  for (DType dtype : kWalkTypes) {
    auto plan = PlanRopeCache(
        {.config = config, .layout = layout, .positions = spec, .output_dtype = dtype});
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const Level& level : levels) {
      Buffer gc(plan->cos, kFill), gs(plan->sin, kFill);
      ASSERT_TRUE(RunRopeCache(*level.backend, *plan, /*cache=*/nullptr, gc.view, gs.view).ok());
      const std::string tag = what + " " + level.name + " dtype" +
                              std::to_string(static_cast<int>(dtype)) + " layout" +
                              std::to_string(static_cast<int>(layout));
      ExpectNearTruth(tc, gc, m, tag + " cos");
      ExpectNearTruth(ts, gs, m, tag + " sin");
    }
  }
}

void CheckSinusoidal(const SinusoidalParams& params, const PositionSpec& spec,
                     const std::vector<Level>& levels, const std::string& what) {
  auto ref_plan =
      PlanSinusoidal({.params = params, .positions = spec, .output_dtype = DType::kFloat64});
  ASSERT_TRUE(ref_plan.ok()) << ref_plan.status();
  Buffer truth(ref_plan->table);
  ASSERT_TRUE(RunSinusoidal(Ref(), *ref_plan, truth.view).ok());
  for (DType dtype : kWalkTypes) {
    auto plan = PlanSinusoidal({.params = params, .positions = spec, .output_dtype = dtype});
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const Level& level : levels) {
      Buffer got(plan->table, kFill);
      ASSERT_TRUE(RunSinusoidal(*level.backend, *plan, got.view).ok());
      ExpectNearTruth(truth, got, 1.0,
                      what + " " + level.name + " dtype" + std::to_string(static_cast<int>(dtype)) +
                          " D=" + std::to_string(params.dim) + " layout" +
                          std::to_string(static_cast<int>(params.layout)));
    }
  }
}

TEST(TableWalkTest, RopeCacheRandomRunsFarFromZero) {
  const std::vector<Level> levels = Levels();
  ASSERT_FALSE(levels.empty());
  uint32_t seed = 19;
  for (int64_t d : {128, 64}) {
    for (double base : {10000.0, 500000.0}) {
      RopeConfig config;
      config.head_dim = d;
      config.base = base;
      const std::vector<int64_t> ids = RandomRuns(seed++, kSanitizedBuild ? 3 : 8);
      for (RopeCacheLayout layout :
           {RopeCacheLayout::kCompact, RopeCacheLayout::kNeox, RopeCacheLayout::kGptj}) {
        CheckRopeCache(config, layout, IdsSpec(ids), levels,
                       "RopeCache d" + std::to_string(d) + " base" + std::to_string(base));
      }
    }
  }
  // Inverse tables with an attention factor (YaRN): the scale and sign ride on the walk.
  RopeConfig yarn;
  yarn.head_dim = 64;
  yarn.inverse = true;
  yarn.scaling.type = RopeScalingType::kYarn;
  yarn.scaling.factor = 4;
  yarn.scaling.original_max_position_embeddings = 2048;
  CheckRopeCache(yarn, RopeCacheLayout::kNeox, IdsSpec(RandomRuns(seed++, kSanitizedBuild ? 2 : 6)),
                 levels, "RopeCache yarn inverse");
}

TEST(TableWalkTest, SinusoidalRandomRunsFarFromZero) {
  const std::vector<Level> levels = Levels();
  ASSERT_FALSE(levels.empty());
  uint32_t seed = 29;
  for (int64_t dim : {256, 64, 127, 2}) {
    for (SinusoidalLayout layout : {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcat}) {
      const std::vector<int64_t> ids = RandomRuns(seed++, kSanitizedBuild ? 2 : 6);
      CheckSinusoidal({dim, 10000.0, layout, std::nullopt}, IdsSpec(ids), levels, "Sinusoidal");
    }
  }
}

// Tables of 32 MiB (the streaming size of other outputs): one long run ending at 2^31-1 (128
// anchors per table; FLOAT16/BFLOAT16 in blocks of rows, each a continuation of the last).
// Sanitizer builds: 4 MiB (16 anchors).
TEST(TableWalkTest, LargeTablesEndingAtTheLastPosition) {
  const std::vector<Level> levels = BestLevel();
  ASSERT_FALSE(levels.empty());
  RopeConfig config;
  config.head_dim = 128;
  const int64_t n = kSanitizedBuild ? 4096 : 32768;  // 2 x 32768 x 128 FLOAT32 = 32 MiB
  CheckRopeCache(config, RopeCacheLayout::kNeox, RangeSpec(kMaxPosition + 1 - n, n), levels,
                 "RopeCache large");
  const int64_t rows = kSanitizedBuild ? 1024 : 8192;  // 8192 x 1024 FLOAT32 = 32 MiB
  CheckSinusoidal({1024, 10000.0, SinusoidalLayout::kInterleaved, std::nullopt},
                  RangeSpec(kMaxPosition + 1 - rows, rows), levels, "Sinusoidal large");
}

// FLOAT32 Sinusoidal tables of 32 MiB or more, whose rows the AVX2 level streams out
// (non-temporal stores, whole 64-byte lines), with the table placed at each kind of distance from
// a line: rows that start lines at frequency 0, at a later frequency (those before it written row
// by row), and interleaved rows whose lines would start between the sin and cos of a pair (not
// streamed); also rows of 1000 floats, whose stride is no whole number of lines (not streamed).
// The best level, two threads (each fences its own rows). Every element written and within
// [-1, 1]; rows around the anchors and blocks, and every 61st, within 1e-6 of the truth.
// Sanitizer builds: 4 MiB, below the streaming size (the plain path).
TEST(TableWalkTest, StreamedSinusoidalRowsAtEveryAlignment) {
  const std::vector<Level> levels = BestLevel();
  ASSERT_FALSE(levels.empty());
  for (int64_t dim : {1024, 1000}) {
    const int64_t rows = kSanitizedBuild ? 1024 : dim == 1024 ? 8192 : 8400;  // >= 32 MiB
    const int64_t first = kMaxPosition + 1 - rows;
    std::vector<int64_t> sampled;
    for (int64_t r = 0; r < rows; ++r) {
      if (r % 61 == 0 || r % 256 <= 1 || r % 256 == 255 || r >= rows - 2) sampled.push_back(r);
    }
    std::vector<int64_t> sampled_ids;
    for (int64_t r : sampled) sampled_ids.push_back(first + r);
    for (SinusoidalLayout layout : {SinusoidalLayout::kConcat, SinusoidalLayout::kInterleaved}) {
      const SinusoidalParams params{dim, 10000.0, layout, std::nullopt};
      auto ref_plan = PlanSinusoidal(
          {.params = params, .positions = IdsSpec(sampled_ids), .output_dtype = DType::kFloat64});
      ASSERT_TRUE(ref_plan.ok()) << ref_plan.status();
      Buffer truth(ref_plan->table);
      ASSERT_TRUE(RunSinusoidal(Ref(), *ref_plan, truth.view).ok());
      auto plan = PlanSinusoidal(
          {.params = params, .positions = RangeSpec(first, rows), .output_dtype = DType::kFloat32});
      ASSERT_TRUE(plan.ok()) << plan.status();
      const std::vector<int64_t> offsets =
          dim == 1024 ? std::vector<int64_t>{0, 4, 8, 48} : std::vector<int64_t>{0};
      for (int64_t offset : offsets) {  // bytes past a 64-byte line
        for (const Level& level : levels) {
          const std::string what = "Sinusoidal D=" + std::to_string(dim) + " layout" +
                                   std::to_string(static_cast<int>(layout)) + " offset " +
                                   std::to_string(offset) + " " + level.name;
          std::vector<float> bytes(static_cast<size_t>(rows * dim + 32));
          std::fill(bytes.begin(), bytes.end(), -7.0f);  // no sin or cos
          const auto line = (reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64;
          float* table = reinterpret_cast<float*>(line + static_cast<uintptr_t>(offset));
          ASSERT_TRUE(
              RunSinusoidal(*level.backend, *plan, {DType::kFloat32, plan->table.shape, table})
                  .ok());
          const int64_t outside = std::count_if(table, table + rows * dim,
                                                [](float v) { return !(std::fabs(v) <= 1); });
          EXPECT_EQ(outside, 0) << what << ": elements unwritten or outside [-1, 1]";
          int bad = 0;
          for (size_t i = 0; i < sampled.size(); ++i) {
            for (int64_t k = 0; k < dim; ++k) {
              const double want = truth.at(static_cast<int64_t>(i) * dim + k);
              const double got = table[sampled[i] * dim + k];
              if (!(std::fabs(got - want) <= 1e-6) && ++bad <= 3) {
                ADD_FAILURE() << what << " row " << sampled[i] << " [" << k << "]: got " << got
                              << ", want " << want;
              }
            }
          }
          EXPECT_EQ(bad, 0) << what;
        }
      }
    }
  }
}

// FLOAT32 RopeCache tables of 32 MiB or more, whose rows the vector levels stream out (whole
// 64-byte lines; NEOX writes each line twice, half a row apart), with cos and sin placed at each
// kind of distance from a line: rows that start lines at frequency 0 or later (those before it
// written row by row), rows whose halves are no whole number of lines apart (head_dim 120: not
// streamed), and GPT-J pairs (row by row). The best level, two threads. Every element written and
// within [-1, 1]; rows around the anchors and every 61st within 1e-6 of the truth. Sanitizer
// builds: 4 MiB, below the streaming size (the plain tiled path).
TEST(TableWalkTest, StreamedRopeCacheRowsAtEveryAlignment) {
  const std::vector<Level> levels = BestLevel();
  ASSERT_FALSE(levels.empty());
  for (int64_t d : {128, 96, 120}) {
    const int64_t rows = (kSanitizedBuild ? 4 : 32) * (int64_t{1} << 20) / (2 * d * 4) + 1;
    const int64_t first = kMaxPosition + 1 - rows;
    std::vector<int64_t> sampled, sampled_ids;
    for (int64_t r = 0; r < rows; ++r) {
      if (r % 61 == 0 || r % 256 <= 1 || r % 256 == 255 || r >= rows - 2) {
        sampled.push_back(r);
        sampled_ids.push_back(first + r);
      }
    }
    RopeConfig config;
    config.head_dim = d;
    for (RopeCacheLayout layout :
         {RopeCacheLayout::kNeox, RopeCacheLayout::kCompact, RopeCacheLayout::kGptj}) {
      auto ref_plan = PlanRopeCache({.config = config,
                                     .layout = layout,
                                     .positions = IdsSpec(sampled_ids),
                                     .output_dtype = DType::kFloat64});
      ASSERT_TRUE(ref_plan.ok()) << ref_plan.status();
      Buffer tc(ref_plan->cos), ts(ref_plan->sin);
      ASSERT_TRUE(RunRopeCache(Ref(), *ref_plan, /*cache=*/nullptr, tc.view, ts.view).ok());
      auto plan = PlanRopeCache({.config = config,
                                 .layout = layout,
                                 .positions = RangeSpec(first, rows),
                                 .output_dtype = DType::kFloat32});
      ASSERT_TRUE(plan.ok()) << plan.status();
      const int64_t width = plan->width, n = rows * width;
      for (int64_t offset : {0, 4, 16, 48}) {  // bytes past a 64-byte line, cos and sin alike
        for (const Level& level : levels) {
          const std::string what = "RopeCache d" + std::to_string(d) + " layout" +
                                   std::to_string(static_cast<int>(layout)) + " offset " +
                                   std::to_string(offset) + " " + level.name;
          std::vector<float> cb(static_cast<size_t>(n + 32), -7.0f), sb(cb.size(), -7.0f);
          const auto at = [&](std::vector<float>& b) {
            const auto line = (reinterpret_cast<uintptr_t>(b.data()) + 63) / 64 * 64;
            return reinterpret_cast<float*>(line + static_cast<uintptr_t>(offset));
          };
          float* c = at(cb);
          float* s = at(sb);
          ASSERT_TRUE(RunRopeCache(*level.backend, *plan, /*cache=*/nullptr,
                                   {DType::kFloat32, plan->cos.shape, c},
                                   {DType::kFloat32, plan->sin.shape, s})
                          .ok());
          const auto outside = [](const float* t, int64_t m) {
            return std::count_if(t, t + m, [](float v) { return !(std::fabs(v) <= 1); });
          };
          EXPECT_EQ(outside(c, n), 0) << what << ": cos unwritten or outside [-1, 1]";
          EXPECT_EQ(outside(s, n), 0) << what << ": sin unwritten or outside [-1, 1]";
          int bad = 0;
          for (size_t i = 0; i < sampled.size(); ++i) {
            for (int64_t k = 0; k < width; ++k) {
              const int64_t want_at = static_cast<int64_t>(i) * width + k;
              const int64_t got_at = sampled[i] * width + k;
              for (const auto& [want, got] : {std::pair{tc.at(want_at), double{c[got_at]}},
                                              std::pair{ts.at(want_at), double{s[got_at]}}}) {
                if (!(std::fabs(got - want) <= 1e-6) && ++bad <= 3) {
                  ADD_FAILURE() << what << " row " << sampled[i] << " [" << k << "]: got " << got
                                << ", want " << want;
                }
              }
            }
          }
          EXPECT_EQ(bad, 0) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace posenc::kernels
