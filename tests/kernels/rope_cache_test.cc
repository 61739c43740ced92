// The bounded RoPE frequency cache: exact hits, keys that separate configs, LRU eviction by
// entries and by bytes, and runs that store only when they complete; the one-table layouts built
// chunk by chunk.
#include "kernels/rope/rope_cache.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/cancellation.h"
#include "kernels/rope/config.h"
#include "kernels/rope/frequency_cache.h"
#include "tests/common/buffers.h"
#include "tests/common/rope_configs.h"

namespace posenc::kernels {
namespace {

constexpr size_t kBytes = size_t{1} << 20;  // far above what these tests store

RopeConfig Llama3() { return ::posenc::testing::Llama3Rope(8, 1, 4); }

TEST(RopeFrequencyCacheTest, HitsReturnExactlyWhatComputeReturns) {
  RopeFrequencyCache cache(8, kBytes);
  bool hit = true;
  auto first = cache.Get(Llama3(), 100, &hit);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(hit);
  auto second = cache.Get(Llama3(), 5000, &hit);  // llama3 ignores seq_len: same entry
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(hit);
  EXPECT_EQ(first->get(), second->get());
  auto direct = ComputeRopeFrequencies(Llama3(), 100);
  EXPECT_EQ((*second)->inv_freq, direct->inv_freq);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
}

TEST(RopeFrequencyCacheTest, EveryFieldSeparatesEntries) {
  const RopeConfig base = Llama3();
  std::vector<RopeConfig> variants(8, base);
  variants[1].base = 500000.0000001;
  variants[2].scaling.high_freq_factor = 4.5;
  variants[3].rotary_dim = 64;
  variants[4].inverse = true;
  variants[5].apply_attention_factor = false;
  variants[6].style = RopeStyle::kGptj;
  variants[7].mrope_section = {16, 24, 24};
  for (size_t i = 0; i < variants.size(); ++i) {
    for (size_t j = i + 1; j < variants.size(); ++j) {
      EXPECT_NE(RopeFrequencyCache::Key(variants[i], 10), RopeFrequencyCache::Key(variants[j], 10))
          << i << " vs " << j;
    }
  }
  // dynamic reads seq_len: different request lengths are different entries.
  RopeConfig dynamic;
  dynamic.head_dim = 64;
  dynamic.scaling.type = RopeScalingType::kDynamic;
  dynamic.scaling.factor = 2;
  dynamic.max_position_embeddings = 1024;
  EXPECT_NE(RopeFrequencyCache::Key(dynamic, 2000), RopeFrequencyCache::Key(dynamic, 3000));
  RopeFrequencyCache cache(4, kBytes);
  auto a = cache.Get(dynamic, 2000);
  auto b = cache.Get(dynamic, 3000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->effective_base, (*b)->effective_base);
}

TEST(RopeFrequencyCacheTest, EvictsTheLeastRecentlyUsedAndNeverCachesErrors) {
  RopeFrequencyCache cache(2, kBytes);
  RopeConfig c;
  for (int64_t d : {8, 16, 8, 32, 16}) {
    c.head_dim = d;
    ASSERT_TRUE(cache.Get(c, 0).ok());
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.hits(), 1);    // the second 8
  EXPECT_EQ(cache.misses(), 4);  // 8, 16, 32, and 16 again (evicted by 32)
  c.head_dim = 7;                // odd: invalid
  EXPECT_FALSE(cache.Get(c, 0).ok());
  EXPECT_FALSE(cache.Get(c, 0).ok());
  EXPECT_EQ(cache.size(), 2u);
  RopeFrequencyCache off(0, kBytes);
  bool hit = true;
  c.head_dim = 8;
  ASSERT_TRUE(off.Get(c, 0, &hit).ok());
  ASSERT_TRUE(off.Get(c, 0, &hit).ok());
  EXPECT_FALSE(hit);
  EXPECT_EQ(off.size(), 0u);
}

TEST(RopeFrequencyCacheTest, ConcurrentGetsAgree) {
  RopeFrequencyCache cache(3, kBytes);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      RopeConfig c;
      for (int i = 0; i < 200; ++i) {
        c.head_dim = 8 * (1 + (i + t) % 5);
        auto f = cache.Get(c, i);
        if (!f.ok() || (*f)->rotary_dim != c.head_dim) bad.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(cache.size(), 3u);
}

TEST(RopeFrequencyCacheTest, BoundedInBytes) {
  RopeConfig c;
  c.head_dim = 1024;  // 512 frequencies: about 8 KiB an entry
  std::string key = RopeFrequencyCache::Key(c, 0);
  const size_t entry = RopeFrequencyCache::EntryBytes(key, *ComputeRopeFrequencies(c, 0));
  EXPECT_GE(entry, 512 * sizeof(long double));
  RopeFrequencyCache cache(100, 2 * entry + entry / 2);  // room for two
  for (int64_t base : {1000, 2000, 3000, 4000}) {
    c.base = static_cast<double>(base);
    ASSERT_TRUE(cache.Get(c, 0).ok());
    EXPECT_LE(cache.bytes(), cache.max_bytes());
  }
  EXPECT_EQ(cache.size(), 2u);
  c.head_dim = 65536;  // one entry larger than the whole cache is not stored
  ASSERT_TRUE(cache.Get(c, 0).ok());
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_LE(cache.bytes(), cache.max_bytes());
  RopeFrequencyCache no_bytes(100, 0);
  ASSERT_TRUE(no_bytes.Get(c, 0).ok());
  EXPECT_EQ(no_bytes.size(), 0u);
}

// A cancelled call (deadline passed) computes nothing for the cache and leaves nothing in it.
class AlwaysCancelled final : public Cancellation {
 public:
  absl::Status Check() const override { return absl::DeadlineExceededError("deadline passed"); }
};

TEST(RopeFrequencyCacheTest, OnlyCompletedRunsFillIt) {
  RopeFrequencyCache cache(8, kBytes);
  const std::unique_ptr<Backend> backend = MakeReferenceBackend();
  RopeCacheArgs args;
  args.config.head_dim = 64;
  args.positions.kind = PositionSpec::Kind::kRange;
  args.positions.count = 4;
  absl::StatusOr<RopeCachePlan> plan = PlanRopeCache(args);
  ASSERT_TRUE(plan.ok()) << plan.status();
  testing::Buffer cos(plan->cos), sin(plan->sin);
  {
    const AlwaysCancelled cancelled;
    const ScopedCancellation scope(&cancelled);
    absl::StatusOr<RopeRunInfo> run = RunRopeCache(*backend, *plan, &cache, cos.view, sin.view);
    EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  EXPECT_EQ(cache.size(), 0u);
  absl::StatusOr<RopeRunInfo> run = RunRopeCache(*backend, *plan, &cache, cos.view, sin.view);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_FALSE(run->cache_hit);
  EXPECT_EQ(cache.size(), 1u);
  run = RunRopeCache(*backend, *plan, &cache, cos.view, sin.view);
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(run->cache_hit);
}

// Runs `args` in COMPACT, FUSED_COS_SIN and COMPLEX and expects the one tables to be the
// COMPACT bytes rearranged, with scratch of at most 1 MiB.
void ExpectOneTablesRearrangeCompact(const Backend& backend, RopeCacheArgs args) {
  absl::StatusOr<RopeCachePlan> compact = PlanRopeCache(args);
  ASSERT_TRUE(compact.ok()) << compact.status();
  EXPECT_EQ(compact->ScratchBytes(), 0);
  testing::Buffer cos(compact->cos), sin(compact->sin);
  ASSERT_TRUE(RunRopeCache(backend, *compact, nullptr, cos.view, sin.view).ok());
  const int64_t half = compact->width, rows = compact->positions.num_tokens;
  for (RopeCacheLayout layout : {RopeCacheLayout::kFusedCosSin, RopeCacheLayout::kComplex}) {
    args.layout = layout;
    absl::StatusOr<RopeCachePlan> one = PlanRopeCache(args);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_GT(one->ScratchBytes(), 0);
    EXPECT_LE(one->ScratchBytes(), int64_t{1} << 20);
    testing::Buffer table(one->cos, 0xCD), unused;
    absl::StatusOr<RopeRunInfo> run = RunRopeCache(backend, *one, nullptr, table.view, unused.view);
    ASSERT_TRUE(run.ok()) << run.status();
    int64_t wrong = 0;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < half; ++j) {
        const bool fused = layout == RopeCacheLayout::kFusedCosSin;
        const int64_t at_cos = fused ? t * 2 * half + j : (t * half + j) * 2;
        const int64_t at_sin = fused ? at_cos + half : at_cos + 1;
        wrong +=
            table.at(at_cos) != cos.at(t * half + j) || table.at(at_sin) != sin.at(t * half + j);
      }
    }
    EXPECT_EQ(wrong, 0) << "layout " << static_cast<int>(layout);
  }
}

// The one-table layouts are built from COMPACT chunks of tokens (bounded scratch): over several
// chunks, with M-RoPE ids and a padded mask, they are the COMPACT tables rearranged, bit for bit.
TEST(RopeCacheLayoutTest, OneTableLayoutsOverManyChunksAreCompactRearranged) {
  std::vector<int64_t> ids(3 * 2500), mask(2 * 3000, 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % 40000);
  for (size_t i = 0; i < 700; ++i) mask[i] = 0;  // row 0 left-padded
  std::vector<RopeCacheArgs> cases(3);
  cases[0].config.head_dim = 128;  // FLOAT32 range: 2048 tokens a chunk, 3 chunks
  cases[0].positions.kind = PositionSpec::Kind::kRange;
  cases[0].positions.count = 5000;
  cases[1].config.head_dim = 128;  // FLOAT64 M-RoPE: 1024 a chunk
  cases[1].config.mrope_section = {16, 24, 24};
  cases[1].output_dtype = DType::kFloat64;
  cases[1].positions.kind = PositionSpec::Kind::kIds;
  cases[1].positions.ids = {DType::kInt64, {3, 2500}, ids.data()};
  cases[2].config.head_dim = 64;  // BFLOAT16 mask: 8192 a chunk, 6000 tokens
  cases[2].output_dtype = DType::kBFloat16;
  cases[2].positions.kind = PositionSpec::Kind::kAttentionMask;
  cases[2].positions.mask = {DType::kInt64, {2, 3000}, mask.data()};
  absl::StatusOr<std::unique_ptr<Backend>> cpu = MakeCpuBackend({});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const std::unique_ptr<Backend> reference = MakeReferenceBackend();
  for (const Backend* backend : {reference.get(), cpu->get()}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(absl::StrCat(backend->name(), " case ", i));
      ExpectOneTablesRearrangeCompact(*backend, cases[i]);
    }
  }
}

// Hunyuan's alpha is a fixed base: no seq_len in the key; alpha and freq_factors separate keys.
TEST(RopeFrequencyCacheTest, AlphaAndFreqFactorsAreKeyed) {
  RopeConfig alpha;
  alpha.head_dim = 64;
  alpha.scaling.type = RopeScalingType::kDynamic;
  alpha.scaling.alpha = 1000;
  EXPECT_EQ(RopeFrequencyCache::Key(alpha, 10), RopeFrequencyCache::Key(alpha, 100000));
  RopeConfig other_alpha = alpha;
  other_alpha.scaling.alpha = 1000.5;
  EXPECT_NE(RopeFrequencyCache::Key(alpha, 10), RopeFrequencyCache::Key(other_alpha, 10));
  RopeConfig factors = alpha;
  factors.freq_factors.assign(32, 1.0);
  RopeConfig other_factors = factors;
  other_factors.freq_factors[31] = 1.0000001;
  EXPECT_NE(RopeFrequencyCache::Key(alpha, 10), RopeFrequencyCache::Key(factors, 10));
  EXPECT_NE(RopeFrequencyCache::Key(factors, 10), RopeFrequencyCache::Key(other_factors, 10));
  // The entry's cost grows with the factors (they are in its key).
  RopeFrequencyCache cache(4, kBytes);
  ASSERT_TRUE(cache.Get(alpha, 10).ok());
  const size_t without = cache.bytes();
  ASSERT_TRUE(cache.Get(factors, 10).ok());
  EXPECT_GE(cache.bytes() - without, without + 32 * sizeof(double));
}

// `config` fails validation with INVALID_ARGUMENT naming `field`, and its message contains
// `expected`.
void ExpectInvalid(const RopeConfig& config, const std::string& field, const std::string& text) {
  const absl::Status s = ValidateRopeConfig(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field + ":"), std::string::npos) << s;
  EXPECT_NE(s.message().find(text), std::string::npos) << s;
}

TEST(RopeConfigTest, BadAlphaAndFreqFactorsAreNamed) {
  RopeConfig alpha;
  alpha.head_dim = 64;
  alpha.scaling.type = RopeScalingType::kDynamic;
  alpha.scaling.alpha = 1000;
  EXPECT_TRUE(ValidateRopeConfig(alpha).ok());  // no factor, no max_position_embeddings needed
  for (double bad : {0.0, -2.0}) {
    alpha.scaling.alpha = bad;
    ExpectInvalid(alpha, "config.scaling.alpha", absl::StrCat("expected > 0, got ", bad));
  }
  alpha.scaling.alpha = std::nan("");
  ExpectInvalid(alpha, "config.scaling.alpha", "expected a finite number, got nan");
  RopeConfig linear = alpha;
  linear.scaling.type = RopeScalingType::kLinear;
  linear.scaling.factor = 2;
  linear.scaling.alpha = 1000;
  ExpectInvalid(linear, "config.scaling.alpha", "is not a field of rope type 'linear'");

  RopeConfig c;
  c.head_dim = 64;
  c.rotary_dim = 32;
  c.freq_factors.assign(16, 1.5);
  EXPECT_TRUE(ValidateRopeConfig(c).ok());
  c.freq_factors.assign(32, 1.5);  // head_dim/2, not rotary_dim/2
  ExpectInvalid(c, "config.freq_factors", "expected rotary_dim/2 = 16 entries, got 32");
  c.freq_factors.assign(16, 1.5);
  c.freq_factors[3] = 0;
  ExpectInvalid(c, "config.freq_factors[3]", "expected a finite number > 0, got 0");
  c.freq_factors[3] = -1;
  ExpectInvalid(c, "config.freq_factors[3]", "expected a finite number > 0, got -1");
  c.freq_factors[3] = std::nan("");
  ExpectInvalid(c, "config.freq_factors[3]", "expected a finite number > 0, got nan");
  c.freq_factors[3] = std::numeric_limits<double>::infinity();
  ExpectInvalid(c, "config.freq_factors[3]", "expected a finite number > 0, got inf");
  // Named as the wire field even for a config read from a config.json.
  c.freq_factors.resize(5);
  c.from_hf_config_json = true;
  const absl::Status s = ValidateRopeConfig(c);
  EXPECT_TRUE(absl::StartsWith(s.message(), "config.freq_factors:")) << s;
}

TEST(RopeConfigTest, HeadDimIsCapped) {
  RopeConfig c;
  c.head_dim = kMaxRopeHeadDim;
  EXPECT_TRUE(ValidateRopeConfig(c).ok());
  c.head_dim = kMaxRopeHeadDim + 2;
  EXPECT_EQ(ValidateRopeConfig(c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ValidateRopeConfig(c).message().find("config.head_dim"), std::string::npos);
}

}  // namespace
}  // namespace posenc::kernels
