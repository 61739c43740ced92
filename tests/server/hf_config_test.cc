// Hugging Face config.json parsing, on the rotary settings of real public model configs
// (values as published on the Hugging Face hub; unrelated keys trimmed), checked through
// ParseHfRopeConfig and end to end through the RopeCache handler's derived values.
#include "server/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/handlers.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using kernels::RopeScalingType;
using testing::TestContext;

// meta-llama/Llama-3.1-8B
constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
  "num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "torch_dtype": "bfloat16", "vocab_size": 128256})";

// Qwen/Qwen2.5-7B-Instruct with the YaRN block its model card recommends for long context.
constexpr char kQwen25[] = R"({
  "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": 131072,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})";

// deepseek-ai/DeepSeek-V3
constexpr char kDeepSeekV3[] = R"({
  "hidden_size": 7168, "num_attention_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "max_position_embeddings": 163840, "rope_theta": 10000,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"}})";

// EleutherAI/gpt-neox-20b
constexpr char kNeox20b[] = R"({
  "hidden_size": 6144, "num_attention_heads": 64, "rotary_pct": 0.25,
  "rotary_emb_base": 10000, "max_position_embeddings": 2048, "use_parallel_residual": true})";

// mistralai/Mistral-7B-v0.3
constexpr char kMistral7b[] = R"({
  "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": null})";

// The published config.json of microsoft/Phi-3-vision-128k-instruct's language model (the
// Phi-3-mini-128k architecture: hidden 3072, 32 heads, head dim 96), LongRoPE under its older
// spelling "su", 48 factors each (d/2), from tests/hf_configs/config_only; and its factors.
std::string Phi3Vision128k(std::vector<double>* short_factor, std::vector<double>* long_factor) {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) +
                   "/config_only/phi-3-vision-128k-instruct.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  *short_factor = j["rope_scaling"]["short_factor"].get<std::vector<double>>();
  *long_factor = j["rope_scaling"]["long_factor"].get<std::vector<double>>();
  return text.str();
}

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

TEST(HfConfigTest, Llama31) {
  auto hf = ParseHfRopeConfig(kLlama31, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  const kernels::RopeConfig& c = hf->config;
  EXPECT_EQ(c.head_dim, 128);  // 4096 / 32
  EXPECT_FALSE(c.rotary_dim.has_value());
  EXPECT_EQ(c.base, 500000.0);
  EXPECT_EQ(c.scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c.scaling.factor, 8.0);
  EXPECT_EQ(c.scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(hf->style, kernels::RopeStyle::kNeox);

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

TEST(HfConfigTest, Qwen25Yarn) {
  auto hf = ParseHfRopeConfig(kQwen25, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 128);  // 3584 / 28
  EXPECT_EQ(hf->config.base, 1e6);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kYarn);  // "type" is an alias
  EXPECT_EQ(hf->config.scaling.factor, 4.0);
  EXPECT_EQ(hf->config.scaling.original_max_position_embeddings, 32768);

  const v1::RopeDerived d = Derived(kQwen25);
  EXPECT_NEAR(d.attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-15);
  EXPECT_EQ(d.factor(), 4.0);
  auto c = [](double r) {
    return 128 * std::log(32768 / (2 * std::numbers::pi * r)) / (2 * std::log(1e6));
  };
  EXPECT_EQ(d.yarn_low(), std::floor(c(32)));
  EXPECT_EQ(d.yarn_high(), std::ceil(c(1)));
}

TEST(HfConfigTest, DeepSeekV3) {
  auto hf = ParseHfRopeConfig(kDeepSeekV3, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 64);  // qk_rope_head_dim wins over hidden_size / heads
  EXPECT_EQ(hf->config.scaling.mscale, 1.0);
  EXPECT_EQ(hf->config.scaling.mscale_all_dim, 1.0);
  EXPECT_EQ(hf->config.scaling.beta_fast, 32.0);
  EXPECT_EQ(hf->config.scaling.beta_slow, 1.0);

  const v1::RopeDerived d = Derived(kDeepSeekV3);
  EXPECT_EQ(d.head_dim(), 64);
  EXPECT_EQ(d.rotary_dim(), 64);
  EXPECT_EQ(d.factor(), 40.0);
  EXPECT_EQ(d.attention_factor(), 1.0);  // mscale == mscale_all_dim
}

// A Hunyuan dense config.json in the shape tencent publishes (model_type hunyuan_v1_dense,
// rope_scaling type dynamic with alpha beside factor 1.0 and YaRN keys it does not read).
constexpr char kHunyuanDense[] = R"({
  "model_type": "hunyuan_v1_dense", "hidden_size": 4096, "num_attention_heads": 32,
  "head_dim": 128, "num_hidden_layers": 32, "max_position_embeddings": 262144,
  "rope_theta": 10000.0,
  "rope_scaling": {"alpha": 50.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                   "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"}})";

TEST(HfConfigTest, HunyuanDynamicAlpha) {
  auto hf = ParseHfRopeConfig(kHunyuanDense, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->model_type, "hunyuan_v1_dense");
  EXPECT_EQ(hf->config.head_dim, 128);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDynamic);
  EXPECT_EQ(hf->config.scaling.alpha, 50.0);
  // Besides the four keys transformers does not read for 'dynamic': where transformers differs.
  EXPECT_EQ(hf->warnings.size(), 5u);
  EXPECT_EQ(std::count_if(hf->warnings.begin(), hf->warnings.end(),
                          [](const std::string& w) {
                            return absl::StrContains(w, "past max_position_embeddings (262144)");
                          }),
            1)
      << absl::StrJoin(hf->warnings, "\n");
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
  // alpha 0 is falsy in transformers: plain dynamic NTK by factor.
  const std::string zero = absl::StrReplaceAll(kHunyuanDense, {{"50.0", "0"}});
  auto plain = ParseHfRopeConfig(zero, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->config.scaling.alpha.has_value());
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
TEST(HfConfigTest, FreqFactorsOnTopOfTheFile) {
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

TEST(HfConfigTest, GptNeox20b) {
  auto hf = ParseHfRopeConfig(kNeox20b, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 96);  // 6144 / 64
  EXPECT_EQ(hf->config.rotary_dim, 24);
  EXPECT_EQ(hf->config.base, 10000.0);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDefault);

  const v1::RopeDerived d = Derived(kNeox20b);
  EXPECT_EQ(d.head_dim(), 96);
  EXPECT_EQ(d.rotary_dim(), 24);
  ASSERT_EQ(d.inv_freq_size(), 12);
  for (int j = 0; j < 12; ++j) {
    EXPECT_NEAR(d.inv_freq(j), static_cast<double>(Omega(10000.0L, j, 24)), 1e-16) << j;
  }
}

TEST(HfConfigTest, Phi3Vision128kLongropeSpelledSu) {
  std::vector<double> short_factor, long_factor;
  const std::string json = Phi3Vision128k(&short_factor, &long_factor);
  auto hf = ParseHfRopeConfig(json, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 96);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kLongrope);
  // The top-level original_max_position_embeddings applies (Phi-3 keeps it there).
  EXPECT_EQ(hf->config.scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(hf->config.scaling.short_factor, short_factor);
  EXPECT_EQ(hf->config.scaling.long_factor, long_factor);

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

TEST(HfConfigTest, Mistral7bDefault) {
  auto hf = ParseHfRopeConfig(kMistral7b, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 128);
  EXPECT_EQ(hf->config.base, 1e6);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDefault);
  const v1::RopeDerived d = Derived(kMistral7b);
  EXPECT_EQ(d.scaling_type(), v1::ROPE_SCALING_DEFAULT);
  EXPECT_EQ(d.effective_base(), 1e6);
  EXPECT_NEAR(d.inv_freq(1), std::pow(1e6, -2.0 / 128), 1e-17);
}

TEST(HfConfigTest, RopeParametersKeyedByLayerType) {
  // Newer transformers (e.g. Gemma 3): one rope_parameters entry per attention type.
  constexpr char kJson[] = R"({"head_dim": 256, "max_position_embeddings": 131072,
    "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})";
  auto full = ParseHfRopeConfig(kJson, "full_attention");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->config.scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(full->config.base, 1e6);
  auto sliding = ParseHfRopeConfig(kJson, "sliding_attention");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->config.scaling.type, RopeScalingType::kDefault);
  EXPECT_EQ(sliding->config.base, 1e4);

  EXPECT_EQ(ParseHfRopeConfig(kJson, "").status().message(),
            "config.layer_type: required: the layers of this model differ (full_attention: "
            "layers not listed; sliding_attention: layers not listed); give a layer type or a "
            "layer index");
  EXPECT_NE(ParseHfRopeConfig(kJson, "global")
                .status()
                .message()
                .find("\"global\" is not a layer type of this model (full_attention, "
                      "sliding_attention; a layer index also works)"),
            std::string::npos);
  EXPECT_FALSE(ParseHfRopeConfig(kMistral7b, "full_attention").ok());
}

TEST(HfConfigTest, Qwen2VlMropeAndInterleave) {
  constexpr char kQwen2Vl[] = R"({"hidden_size": 3584, "num_attention_heads": 28,
    "rope_theta": 1000000.0, "max_position_embeddings": 32768,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})";
  auto hf = ParseHfRopeConfig(kQwen2Vl, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDefault);
  EXPECT_EQ(hf->config.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(hf->mrope_layout.has_value());

  constexpr char kQwen3Vl[] = R"({"head_dim": 128, "rope_theta": 5000000,
    "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20],
                     "mrope_interleaved": true}})";
  hf = ParseHfRopeConfig(kQwen3Vl, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->mrope_layout, kernels::MropeLayout::kInterleaved);

  // rope_interleave (DeepSeek V3's key): de-interleave, then rotate_half.
  constexpr char kInterleave[] = R"({"qk_rope_head_dim": 64, "rope_interleave": true})";
  hf = ParseHfRopeConfig(kInterleave, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->style, kernels::RopeStyle::kDeepseek);
}

TEST(HfConfigTest, TopLevelOriginalOverridesNestedAndIntegralFloatsAreIntegers) {
  constexpr char kJson[] = R"({"head_dim": 64.0, "max_position_embeddings": 65536.0,
    "original_max_position_embeddings": 2048,
    "rope_scaling": {"rope_type": "yarn", "factor": 32,
                     "original_max_position_embeddings": 4096}})";
  auto hf = ParseHfRopeConfig(kJson, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 64);
  EXPECT_EQ(hf->config.max_position_embeddings, 65536);
  EXPECT_EQ(hf->config.scaling.original_max_position_embeddings, 2048);
}

TEST(HfConfigTest, Errors) {
  struct Bad {
    const char* json;
    const char* message_part;
  };
  const Bad cases[] = {
      {"", "malformed JSON"},
      {"[1, 2]", "expected a JSON object, got array"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "xpos"}})",
       "rope_scaling.rope_type: unknown rope type 'xpos'"},
      {R"({"text_config": [1]})", "text_config must be an object"},
      {R"({"head_dim": 64, "layer_types": "full"})", "layer_types must be an array"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": 3}})", "rope_type must be a string"},
      {R"({"head_dim": 64, "rope_scaling": "linear"})", "rope_scaling must be an object"},
      {R"({"head_dim": 64.5})", "head_dim must be an integer"},
      {R"({"head_dim": 64, "rotary_pct": 1.5})", "rotary_pct must be in (0, 1]"},
      {R"({"rotary_pct": 0.5})", "rotary_pct needs a head dim"},
      {R"({"hidden_size": 4096, "num_attention_heads": 0})", "num_attention_heads"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "longrope",
           "long_factor": [1, "x"]}})",
       "rope_scaling.long_factor[1] must be a finite number"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "truncate": 1}})",
       "rope_scaling.truncate must be true or false"},
      {R"({"head_dim": 18446744073709551615})", "too large"},
  };
  for (const Bad& c : cases) {
    absl::StatusOr<HfRopeConfig> hf = ParseHfRopeConfig(c.json, "");
    ASSERT_FALSE(hf.ok()) << c.json;
    EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(hf.status().message().find(c.message_part), std::string::npos)
        << hf.status().message() << "\nexpected: " << c.message_part;
  }
}

TEST(HfConfigTest, KeysTransformersDoesNotReadAreWarnings) {
  // transformers logs unused keys and goes on; so does posenc, reporting them.
  constexpr char kJson[] = R"({"model_type": "qwen3", "head_dim": 128, "rope_theta": 1000000,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                     "attn_factor": 0.8, "low_freq_factor": 1}})";
  auto hf = ParseHfRopeConfig(kJson, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kYarn);
  EXPECT_FALSE(hf->config.scaling.low_freq_factor.has_value());
  ASSERT_EQ(hf->warnings.size(), 2u);
  EXPECT_EQ(hf->warnings[0],
            "rope_scaling.attn_factor: not read for rope_type 'yarn' (ignored, as transformers "
            "does)");
  EXPECT_EQ(hf->model_type, "qwen3");

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

  // A model_type posenc has no row for: generic defaults, said so.
  hf = ParseHfRopeConfig(R"({"model_type": "newarch", "head_dim": 64})", "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->warnings.size(), 1u);
  EXPECT_NE(hf->warnings[0].find("'newarch' has no architecture defaults"), std::string::npos);
}

TEST(HfConfigTest, ArchitectureDefaultsAndLayers) {
  // Gemma 3 text config with nothing but the head: transformers' class defaults fill the rest.
  constexpr char kGemma3[] = R"({"model_type": "gemma3", "text_config": {
    "model_type": "gemma3_text", "head_dim": 128, "num_hidden_layers": 12,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}}})";
  auto sliding = ParseHfRopeConfig(kGemma3, "sliding_attention");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->config.base, 10000.0);
  EXPECT_EQ(sliding->config.scaling.type, RopeScalingType::kDefault);
  EXPECT_EQ(sliding->config.max_position_embeddings, 131072);
  auto full = ParseHfRopeConfig(kGemma3, "11");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->layer_type, "full_attention");
  EXPECT_EQ(full->config.base, 1e6);
  EXPECT_EQ(full->config.scaling.factor, 8.0);
  ASSERT_EQ(full->layer_ropes.size(), 2u);
  EXPECT_EQ(full->layer_ropes[1].layers, (std::vector<int64_t>{5, 11}));
  EXPECT_NE(ParseHfRopeConfig(kGemma3, "12").status().message().find("layer index 12 is not"),
            std::string::npos);

  // Cohere 2: interleaved pairs; full-attention layers (every 4th) have no RoPE.
  constexpr char kCohere2[] = R"({"model_type": "cohere2", "hidden_size": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 8, "rope_theta": 50000})";
  auto nope = ParseHfRopeConfig(kCohere2, "3");
  ASSERT_TRUE(nope.ok()) << nope.status();
  EXPECT_TRUE(nope->config.nope);
  EXPECT_EQ(nope->style, kernels::RopeStyle::kGptj);
  auto rope = ParseHfRopeConfig(kCohere2, "sliding_attention");
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_FALSE(rope->config.nope);

  // ChatGLM (remote code): half the head rotates, interleaved, base 10000 * rope_ratio.
  auto glm = ParseHfRopeConfig(R"({"model_type": "chatglm", "kv_channels": 128,
    "hidden_size": 4096, "num_attention_heads": 32, "rope_ratio": 500, "seq_length": 131072})",
                               "");
  ASSERT_TRUE(glm.ok()) << glm.status();
  EXPECT_EQ(glm->config.head_dim, 128);
  EXPECT_EQ(glm->config.rotary_dim, 64);
  EXPECT_EQ(glm->config.base, 5e6);
  EXPECT_EQ(glm->style, kernels::RopeStyle::kGptj);
  EXPECT_EQ(glm->config.max_position_embeddings, 131072);

  // StableLM's class default partial_rotary_factor 0.25; GPT-NeoX's rotary_pct default 0.25.
  auto stablelm = ParseHfRopeConfig(
      R"({"model_type": "stablelm", "hidden_size": 2560, "num_attention_heads": 32})", "");
  ASSERT_TRUE(stablelm.ok()) << stablelm.status();
  EXPECT_EQ(stablelm->config.rotary_dim, 20);
  auto neox = ParseHfRopeConfig(
      R"({"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64})", "");
  ASSERT_TRUE(neox.ok()) << neox.status();
  EXPECT_EQ(neox->config.rotary_dim, 24);

  // DeepSeek V2: interleaved pairs in GPT-J order; V3 without rope_interleave: DEEPSEEK; V3 with
  // rope_interleave false: NEOX.
  auto v2 = ParseHfRopeConfig(R"({"model_type": "deepseek_v2"})", "");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->style, kernels::RopeStyle::kGptj);
  EXPECT_EQ(v2->config.head_dim, 64);
  auto v3 = ParseHfRopeConfig(R"({"model_type": "kimi_k2", "qk_rope_head_dim": 64})", "");
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->style, kernels::RopeStyle::kDeepseek);
  auto v3_off = ParseHfRopeConfig(R"({"model_type": "deepseek_v3", "rope_interleave": false})", "");
  ASSERT_TRUE(v3_off.ok()) << v3_off.status();
  EXPECT_EQ(v3_off->style, kernels::RopeStyle::kNeox);
}

TEST(HfConfigTest, HostileJsonIsRejectedWithoutCrashing) {
  // Deep nesting (parsed and destroyed without recursion), huge numbers, odd bytes.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_FALSE(ParseHfRopeConfig(deep, "").ok());
  const std::string deep_object =
      R"({"rope_scaling": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(ParseHfRopeConfig(deep_object, "").ok());
  EXPECT_FALSE(ParseHfRopeConfig(R"({"rope_theta": 1e999})", "").ok());
  EXPECT_FALSE(ParseHfRopeConfig(std::string("{\"a\": \"\xff\xfe\"}"), "").ok());
  EXPECT_FALSE(ParseHfRopeConfig(std::string("{\0}", 3), "").ok());
  auto nulls = ParseHfRopeConfig(R"({"head_dim": null, "rope_scaling": null})", "");
  ASSERT_TRUE(nulls.ok()) << nulls.status();  // null means absent, as in Python configs
  EXPECT_EQ(nulls->config.head_dim, 0);
}

TEST(HfConfigTest, RequestFieldsOutsideTheJsonStillApply) {
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
