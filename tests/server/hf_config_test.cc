// Hugging Face config.json through the RPCs (config.hf_config_json): the derived values of
// RopeCache against the formulas, request fields beside the file, errors of the kernels' checks
// reported against the JSON. The normalizer itself: tests/hf/config_test.cc.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "server/handlers.h"
#include "tests/hf/sample_configs.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using hf::testing::kDeepSeekV3, hf::testing::kHunyuanDense, hf::testing::kLlama31,
    hf::testing::kMistral7b, hf::testing::kNeox20b, hf::testing::kQwen25,
    hf::testing::Phi3Vision128k;
using testing::TestContext;

// RopeCache through the handler for one position, returning the derived values.
v1::RopeDerived Derived(const std::string& json, int64_t seq_len = 0) {
  TestContext t;
  v1::RopeCacheRequest req;
  req.mutable_positions()->mutable_range()->set_count(1);
  req.mutable_config()->set_hf_config_json(json);
  if (seq_len > 0) req.mutable_config()->set_seq_len(seq_len);
  v1::RopeCacheResponse resp;
  grpc::Status status = HandleRopeCache(t.ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return resp.derived();
}

long double Omega(long double base, int j, int d) { return std::pow(base, -2.0L * j / d); }

TEST(HfConfigRpcTest, Llama31) {
  const v1::RopeDerived d = Derived(kLlama31);
  EXPECT_EQ(d.head_dim(), 128);
  EXPECT_EQ(d.rotary_dim(), 128);
  EXPECT_EQ(d.scaling_type(), v1::ROPE_SCALING_LLAMA3);
  EXPECT_EQ(d.attention_factor(), 1.0);
  ASSERT_EQ(d.inv_freq_size(), 64);
  // The llama3 rule: keep short wavelengths, divide long ones by 8, blend in between.
  const long double two_pi = 2 * std::numbers::pi_v<long double>;
  int kept = 0, divided = 0, blended = 0;
  for (int j = 0; j < 64; ++j) {
    const long double w = Omega(500000.0L, j, 128);
    const long double wavelen = two_pi / w;
    long double expected;
    if (wavelen < 8192.0L / 4) {
      expected = w;
      ++kept;
    } else if (wavelen > 8192.0L / 1) {
      expected = w / 8;
      ++divided;
    } else {
      const long double g = (8192.0L / wavelen - 1) / (4 - 1);
      expected = (1 - g) * w / 8 + g * w;
      ++blended;
    }
    EXPECT_NEAR(d.inv_freq(j), static_cast<double>(expected), 1e-15 * static_cast<double>(w)) << j;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // The lowest frequency is divided by the factor.
  EXPECT_NEAR(d.inv_freq(63), static_cast<double>(Omega(500000.0L, 63, 128) / 8), 1e-22);
}

TEST(HfConfigRpcTest, Qwen25Yarn) {
  const v1::RopeDerived d = Derived(kQwen25);
  EXPECT_NEAR(d.attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-15);
  EXPECT_EQ(d.factor(), 4.0);
  auto c = [](double r) {
    return 128 * std::log(32768 / (2 * std::numbers::pi * r)) / (2 * std::log(1e6));
  };
  EXPECT_EQ(d.yarn_low(), std::floor(c(32)));
  EXPECT_EQ(d.yarn_high(), std::ceil(c(1)));
}

TEST(HfConfigRpcTest, DeepSeekV3) {
  const v1::RopeDerived d = Derived(kDeepSeekV3);
  EXPECT_EQ(d.head_dim(), 64);
  EXPECT_EQ(d.rotary_dim(), 64);
  EXPECT_EQ(d.factor(), 40.0);
  EXPECT_EQ(d.attention_factor(), 1.0);  // mscale == mscale_all_dim
}

TEST(HfConfigRpcTest, GptNeox20b) {
  const v1::RopeDerived d = Derived(kNeox20b);
  EXPECT_EQ(d.head_dim(), 96);
  EXPECT_EQ(d.rotary_dim(), 24);
  ASSERT_EQ(d.inv_freq_size(), 12);
  for (int j = 0; j < 12; ++j) {
    EXPECT_NEAR(d.inv_freq(j), static_cast<double>(Omega(10000.0L, j, 24)), 1e-16) << j;
  }
}

TEST(HfConfigRpcTest, Mistral7bDefault) {
  const v1::RopeDerived d = Derived(kMistral7b);
  EXPECT_EQ(d.scaling_type(), v1::ROPE_SCALING_DEFAULT);
  EXPECT_EQ(d.effective_base(), 1e6);
  EXPECT_NEAR(d.inv_freq(1), std::pow(1e6, -2.0 / 128), 1e-17);
}

TEST(HfConfigRpcTest, HunyuanDynamicAlpha) {
  // Fixed: the same frequencies at every sequence length, b' = b * alpha^(d/(d-2)).
  const long double b2 = 10000.0L * std::pow(50.0L, 128.0L / 126.0L);
  for (int64_t seq_len : {0, 5000, 1000000}) {
    const v1::RopeDerived d = Derived(kHunyuanDense, seq_len);
    EXPECT_NEAR(d.effective_base(), static_cast<double>(b2), 1e-15 * static_cast<double>(b2));
    EXPECT_EQ(d.seq_len(), 0);
    EXPECT_EQ(d.attention_factor(), 1.0);
    ASSERT_EQ(d.inv_freq_size(), 64);
    for (int j = 0; j < 64; ++j) {
      const double want = static_cast<double>(Omega(b2, j, 128));
      EXPECT_NEAR(d.inv_freq(j), want, 1e-15 * want) << j;
    }
  }
  // A negative alpha is the JSON's error.
  const std::string negative = absl::StrReplaceAll(kHunyuanDense, {{"50.0", "-5.0"}});
  v1::RopeCacheRequest req;
  req.mutable_positions()->mutable_range()->set_count(1);
  req.mutable_config()->set_hf_config_json(negative);
  TestContext t;
  v1::RopeCacheResponse resp;
  const grpc::Status status = HandleRopeCache(t.ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "config.hf_config_json: config.scaling.alpha: expected > 0, got -5");
}

// freq_factors apply on top of the file's frequencies and are named as the wire field.

TEST(HfConfigRpcTest, Phi3Vision128kLongropeSpelledSu) {
  std::vector<double> short_factor, long_factor;
  const std::string json = Phi3Vision128k(&short_factor, &long_factor);
  const double m = std::sqrt(1 + std::log(32.0) / std::log(4096.0));  // s = 131072 / 4096
  const v1::RopeDerived short_d = Derived(json);                      // seq_len 1 <= 4096
  EXPECT_FALSE(short_d.longrope_long_factors());
  EXPECT_NEAR(short_d.attention_factor(), m, 1e-15);
  const v1::RopeDerived long_d = Derived(json, 8192);
  EXPECT_TRUE(long_d.longrope_long_factors());
  ASSERT_EQ(long_d.inv_freq_size(), 48);
  for (int j = 0; j < 48; ++j) {
    const double base_omega = static_cast<double>(Omega(10000.0L, j, 96));
    EXPECT_NEAR(short_d.inv_freq(j), base_omega / short_factor[j], 1e-15 * base_omega) << j;
    EXPECT_NEAR(long_d.inv_freq(j), base_omega / long_factor[j], 1e-15 * base_omega) << j;
  }
}

TEST(HfConfigRpcTest, KeysTransformersDoesNotReadAreWarnings) {
  constexpr char kJson[] = R"({"model_type": "qwen3", "head_dim": 128, "rope_theta": 1000000,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                     "attn_factor": 0.8, "low_freq_factor": 1}})";
  TestContext t;
  v1::RopeCacheRequest req;
  req.mutable_positions()->mutable_range()->set_count(1);
  req.mutable_config()->set_hf_config_json(kJson);
  v1::RopeCacheResponse resp;
  grpc::Status status = HandleRopeCache(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(resp.derived().warnings_size(), 2);
  EXPECT_EQ(resp.derived().model_type(), "qwen3");
  EXPECT_NEAR(resp.derived().attention_factor(), 0.1 * std::log(4.0) + 1, 1e-15);
}

TEST(HfConfigRpcTest, FreqFactorsOnTopOfTheFile) {
  v1::RopeCacheRequest req;
  req.mutable_positions()->mutable_range()->set_count(1);
  req.mutable_config()->set_hf_config_json(kHunyuanDense);
  for (int j = 0; j < 64; ++j) req.mutable_config()->add_freq_factors(j < 32 ? 1.0 : 8.0);
  TestContext t;
  v1::RopeCacheResponse resp;
  grpc::Status status = HandleRopeCache(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const v1::RopeDerived plain = Derived(kHunyuanDense);
  for (int j = 0; j < 64; ++j) {
    EXPECT_EQ(resp.derived().inv_freq(j), j < 32 ? plain.inv_freq(j) : plain.inv_freq(j) / 8) << j;
  }
  req.mutable_config()->set_freq_factors(7, -1.0);
  status = HandleRopeCache(t.ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "config.freq_factors[7]: expected a finite number > 0, got -1");
}

TEST(HfConfigRpcTest, RequestFieldsOutsideTheJsonStillApply) {
  TestContext t;
  v1::ApplyRopeRequest req;
  *req.mutable_q() = testing::FloatTensor({1, 3, 2, 128});
  req.mutable_config()->set_hf_config_json(kQwen25);
  req.mutable_config()->set_style(v1::ROPE_STYLE_GPTJ);
  req.mutable_config()->set_apply_attention_factor(false);
  v1::ApplyRopeResponse resp;
  grpc::Status status = HandleApplyRope(t.ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.derived().style(), v1::ROPE_STYLE_GPTJ);
  EXPECT_FALSE(resp.derived().attention_factor_applied());
  EXPECT_GT(resp.derived().attention_factor(), 1.0);
  EXPECT_EQ(resp.derived().head_dim(), 128);
}

}  // namespace
}  // namespace posenc::server
