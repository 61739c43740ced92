// The bounded RoPE frequency cache: exact hits, keys that separate configs, LRU eviction.
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/rope/config.h"
#include "kernels/rope/frequency_cache.h"

namespace posenc::kernels {
namespace {

RopeConfig Llama3() {
  RopeConfig c;
  c.head_dim = 128;
  c.base = 500000;
  c.scaling.type = RopeScalingType::kLlama3;
  c.scaling.factor = 8;
  c.scaling.low_freq_factor = 1;
  c.scaling.high_freq_factor = 4;
  c.scaling.original_max_position_embeddings = 8192;
  return c;
}

TEST(RopeFrequencyCacheTest, HitsReturnExactlyWhatComputeReturns) {
  RopeFrequencyCache cache(8);
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
  RopeFrequencyCache cache(4);
  auto a = cache.Get(dynamic, 2000);
  auto b = cache.Get(dynamic, 3000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->effective_base, (*b)->effective_base);
}

TEST(RopeFrequencyCacheTest, EvictsTheLeastRecentlyUsedAndNeverCachesErrors) {
  RopeFrequencyCache cache(2);
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
  RopeFrequencyCache off(0);
  bool hit = true;
  c.head_dim = 8;
  ASSERT_TRUE(off.Get(c, 0, &hit).ok());
  ASSERT_TRUE(off.Get(c, 0, &hit).ok());
  EXPECT_FALSE(hit);
  EXPECT_EQ(off.size(), 0u);
}

TEST(RopeFrequencyCacheTest, ConcurrentGetsAgree) {
  RopeFrequencyCache cache(3);
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

}  // namespace
}  // namespace posenc::kernels
