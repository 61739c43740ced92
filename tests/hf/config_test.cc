// The config.json normalizer (kernels/hf/config.h) on published configs and their variants:
// the config of each layer, the architectures' defaults, warnings for the keys transformers does
// not read, and every malformed or hostile input rejected with INVALID_ARGUMENT naming the key
// (the same files through the RPCs: tests/server/hf_config_test.cc, hf_configs_test.cc).
#include "kernels/hf/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "kernels/rope/config.h"
#include "kernels/rope/frequency_cache.h"
#include "nlohmann/json.hpp"
#include "tests/hf/sample_configs.h"

namespace posenc::hf {
namespace {

using hf::testing::kDeepSeekV3, hf::testing::kHunyuanDense, hf::testing::kLlama31,
    hf::testing::kMistral7b, hf::testing::kNeox20b, hf::testing::kQwen25,
    hf::testing::Phi3Vision128k;
using kernels::RopeScalingType;

TEST(HfConfigTest, Llama31) {
  auto hf = ParseModelRope(kLlama31, "");
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
}

TEST(HfConfigTest, Qwen25Yarn) {
  auto hf = ParseModelRope(kQwen25, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 128);  // 3584 / 28
  EXPECT_EQ(hf->config.base, 1e6);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kYarn);  // "type" is an alias
  EXPECT_EQ(hf->config.scaling.factor, 4.0);
  EXPECT_EQ(hf->config.scaling.original_max_position_embeddings, 32768);
}

TEST(HfConfigTest, DeepSeekV3) {
  auto hf = ParseModelRope(kDeepSeekV3, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 64);  // qk_rope_head_dim wins over hidden_size / heads
  EXPECT_EQ(hf->config.scaling.mscale, 1.0);
  EXPECT_EQ(hf->config.scaling.mscale_all_dim, 1.0);
  EXPECT_EQ(hf->config.scaling.beta_fast, 32.0);
  EXPECT_EQ(hf->config.scaling.beta_slow, 1.0);
}

TEST(HfConfigTest, GptNeox20b) {
  auto hf = ParseModelRope(kNeox20b, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 96);  // 6144 / 64
  EXPECT_EQ(hf->config.rotary_dim, 24);
  EXPECT_EQ(hf->config.base, 10000.0);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDefault);
}

TEST(HfConfigTest, Mistral7bDefault) {
  auto hf = ParseModelRope(kMistral7b, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 128);
  EXPECT_EQ(hf->config.base, 1e6);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDefault);
}

TEST(HfConfigTest, HunyuanDynamicAlpha) {
  auto hf = ParseModelRope(kHunyuanDense, "");
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
  // alpha 0 is falsy in transformers: plain dynamic NTK by factor.
  const std::string zero = absl::StrReplaceAll(kHunyuanDense, {{"50.0", "0"}});
  auto plain = ParseModelRope(zero, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->config.scaling.alpha.has_value());
}

TEST(HfConfigTest, Phi3Vision128kLongropeSpelledSu) {
  std::vector<double> short_factor, long_factor;
  const std::string json = Phi3Vision128k(&short_factor, &long_factor);
  auto hf = ParseModelRope(json, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 96);
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kLongrope);
  // The top-level original_max_position_embeddings applies (Phi-3 keeps it there).
  EXPECT_EQ(hf->config.scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(hf->config.scaling.short_factor, short_factor);
  EXPECT_EQ(hf->config.scaling.long_factor, long_factor);
}

TEST(HfConfigTest, KeysTransformersDoesNotReadAreWarnings) {
  // transformers logs unused keys and goes on; so does posenc, reporting them.
  constexpr char kJson[] = R"({"model_type": "qwen3", "head_dim": 128, "rope_theta": 1000000,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                     "attn_factor": 0.8, "low_freq_factor": 1}})";
  auto hf = ParseModelRope(kJson, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kYarn);
  EXPECT_FALSE(hf->config.scaling.low_freq_factor.has_value());
  ASSERT_EQ(hf->warnings.size(), 2u);
  EXPECT_EQ(hf->warnings[0],
            "rope_scaling.attn_factor: not read for rope_type 'yarn' (ignored, as transformers "
            "does)");
  EXPECT_EQ(hf->model_type, "qwen3");

  // A model_type posenc has no row for: generic defaults, said so.
  hf = ParseModelRope(R"({"model_type": "newarch", "head_dim": 64})", "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->warnings.size(), 1u);
  EXPECT_NE(hf->warnings[0].find("'newarch' has no architecture defaults"), std::string::npos);
}

TEST(HfConfigTest, RopeParametersKeyedByLayerType) {
  // Newer transformers (e.g. Gemma 3): one rope_parameters entry per attention type.
  constexpr char kJson[] = R"({"head_dim": 256, "max_position_embeddings": 131072,
    "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})";
  auto full = ParseModelRope(kJson, "full_attention");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->config.scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(full->config.base, 1e6);
  auto sliding = ParseModelRope(kJson, "sliding_attention");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->config.scaling.type, RopeScalingType::kDefault);
  EXPECT_EQ(sliding->config.base, 1e4);

  EXPECT_EQ(ParseModelRope(kJson, "").status().message(),
            "config.layer_type: required: the layers of this model differ (full_attention: "
            "layers not listed; sliding_attention: layers not listed); give a layer type or a "
            "layer index");
  EXPECT_NE(ParseModelRope(kJson, "global")
                .status()
                .message()
                .find("\"global\" is not a layer type of this model (full_attention, "
                      "sliding_attention; a layer index also works)"),
            std::string::npos);
  EXPECT_FALSE(ParseModelRope(kMistral7b, "full_attention").ok());
}

TEST(HfConfigTest, Qwen2VlMropeAndInterleave) {
  constexpr char kQwen2Vl[] = R"({"hidden_size": 3584, "num_attention_heads": 28,
    "rope_theta": 1000000.0, "max_position_embeddings": 32768,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})";
  auto hf = ParseModelRope(kQwen2Vl, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.scaling.type, RopeScalingType::kDefault);
  EXPECT_EQ(hf->config.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(hf->mrope_layout.has_value());

  constexpr char kQwen3Vl[] = R"({"head_dim": 128, "rope_theta": 5000000,
    "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20],
                     "mrope_interleaved": true}})";
  hf = ParseModelRope(kQwen3Vl, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->mrope_layout, kernels::MropeLayout::kInterleaved);

  // rope_interleave (DeepSeek V3's key): de-interleave, then rotate_half.
  constexpr char kInterleave[] = R"({"qk_rope_head_dim": 64, "rope_interleave": true})";
  hf = ParseModelRope(kInterleave, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->style, kernels::RopeStyle::kDeepseek);
}

TEST(HfConfigTest, TopLevelOriginalOverridesNestedAndIntegralFloatsAreIntegers) {
  constexpr char kJson[] = R"({"head_dim": 64.0, "max_position_embeddings": 65536.0,
    "original_max_position_embeddings": 2048,
    "rope_scaling": {"rope_type": "yarn", "factor": 32,
                     "original_max_position_embeddings": 4096}})";
  auto hf = ParseModelRope(kJson, "");
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
    absl::StatusOr<ModelRope> hf = ParseModelRope(c.json, "");
    ASSERT_FALSE(hf.ok()) << c.json;
    EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(hf.status().message().find(c.message_part), std::string::npos)
        << hf.status().message() << "\nexpected: " << c.message_part;
  }
}

TEST(HfConfigTest, ArchitectureDefaultsAndLayers) {
  // Gemma 3 text config with nothing but the head: transformers' class defaults fill the rest.
  constexpr char kGemma3[] = R"({"model_type": "gemma3", "text_config": {
    "model_type": "gemma3_text", "head_dim": 128, "num_hidden_layers": 12,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}}})";
  auto sliding = ParseModelRope(kGemma3, "sliding_attention");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->config.base, 10000.0);
  EXPECT_EQ(sliding->config.scaling.type, RopeScalingType::kDefault);
  EXPECT_EQ(sliding->config.max_position_embeddings, 131072);
  auto full = ParseModelRope(kGemma3, "11");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->layer_type, "full_attention");
  EXPECT_EQ(full->config.base, 1e6);
  EXPECT_EQ(full->config.scaling.factor, 8.0);
  ASSERT_EQ(full->layer_ropes.size(), 2u);
  EXPECT_EQ(full->layer_ropes[1].layers, (std::vector<int64_t>{5, 11}));
  EXPECT_NE(ParseModelRope(kGemma3, "12").status().message().find("layer index 12 is not"),
            std::string::npos);

  // Cohere 2: interleaved pairs; full-attention layers (every 4th) have no RoPE.
  constexpr char kCohere2[] = R"({"model_type": "cohere2", "hidden_size": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 8, "rope_theta": 50000})";
  auto nope = ParseModelRope(kCohere2, "3");
  ASSERT_TRUE(nope.ok()) << nope.status();
  EXPECT_TRUE(nope->config.nope);
  EXPECT_EQ(nope->style, kernels::RopeStyle::kGptj);
  auto rope = ParseModelRope(kCohere2, "sliding_attention");
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_FALSE(rope->config.nope);

  // ChatGLM (remote code): half the head rotates, interleaved, base 10000 * rope_ratio.
  auto glm = ParseModelRope(R"({"model_type": "chatglm", "kv_channels": 128,
    "hidden_size": 4096, "num_attention_heads": 32, "rope_ratio": 500, "seq_length": 131072})",
                            "");
  ASSERT_TRUE(glm.ok()) << glm.status();
  EXPECT_EQ(glm->config.head_dim, 128);
  EXPECT_EQ(glm->config.rotary_dim, 64);
  EXPECT_EQ(glm->config.base, 5e6);
  EXPECT_EQ(glm->style, kernels::RopeStyle::kGptj);
  EXPECT_EQ(glm->config.max_position_embeddings, 131072);

  // StableLM's class default partial_rotary_factor 0.25; GPT-NeoX's rotary_pct default 0.25.
  auto stablelm = ParseModelRope(
      R"({"model_type": "stablelm", "hidden_size": 2560, "num_attention_heads": 32})", "");
  ASSERT_TRUE(stablelm.ok()) << stablelm.status();
  EXPECT_EQ(stablelm->config.rotary_dim, 20);
  auto neox = ParseModelRope(
      R"({"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64})", "");
  ASSERT_TRUE(neox.ok()) << neox.status();
  EXPECT_EQ(neox->config.rotary_dim, 24);

  // DeepSeek V2: interleaved pairs in GPT-J order; V3 without rope_interleave: DEEPSEEK; V3 with
  // rope_interleave false: NEOX.
  auto v2 = ParseModelRope(R"({"model_type": "deepseek_v2"})", "");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->style, kernels::RopeStyle::kGptj);
  EXPECT_EQ(v2->config.head_dim, 64);
  auto v3 = ParseModelRope(R"({"model_type": "kimi_k2", "qk_rope_head_dim": 64})", "");
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->style, kernels::RopeStyle::kDeepseek);
  auto v3_off = ParseModelRope(R"({"model_type": "deepseek_v3", "rope_interleave": false})", "");
  ASSERT_TRUE(v3_off.ok()) << v3_off.status();
  EXPECT_EQ(v3_off->style, kernels::RopeStyle::kNeox);
}

// The warnings of `hf` that contain `text`.
int WarningsWith(const ModelRope& hf, absl::string_view text) {
  return static_cast<int>(std::count_if(hf.warnings.begin(), hf.warnings.end(),
                                        [&](auto& w) { return absl::StrContains(w, text); }));
}

// The origin of the first source named `name` of the model's first group ("" when none).
std::string OriginOf(const ModelRope& hf, absl::string_view name) {
  for (const ValueSource& s : hf.layer_ropes.at(0).sources) {
    if (s.name == name) return s.origin;
  }
  return "";
}

TEST(HfConfigTest, AttentionTemperatureScaleStepsAtTheBoundaries) {
  // llama_4_scaling_beta (offset 0): 1 + beta ln(1 + floor(p / L)); hand-computed in double.
  auto beta = [](double l, int64_t p) { return kernels::AttentionTemperatureScale(l, 0.1, 0, p); };
  const double kLn2 = 1.0693147180559945;                                  // 1 + 0.1 ln 2
  for (int64_t p : {0, 8192, 16383}) EXPECT_EQ(beta(16384, p), 1.0) << p;  // Ministral 3
  EXPECT_DOUBLE_EQ(beta(16384, 16384), kLn2);
  EXPECT_DOUBLE_EQ(beta(16384, 32767), kLn2);
  EXPECT_DOUBLE_EQ(beta(16384, 32768), 1.109861228866811);
  EXPECT_DOUBLE_EQ(beta(16384, 262143), 1.2772588722239782);
  EXPECT_DOUBLE_EQ(beta(16384, 1048576), 1.4174387269895636);
  EXPECT_DOUBLE_EQ(beta(16384, 2147483647), 2.178350206951907);
  EXPECT_EQ(beta(8192, 8191), 1.0);  // Mistral 4's defaults
  EXPECT_DOUBLE_EQ(beta(8192, 8192), kLn2);
  EXPECT_DOUBLE_EQ(beta(8192, 16383), kLn2);
  EXPECT_DOUBLE_EQ(beta(8192, 16384), 1.109861228866811);
  EXPECT_DOUBLE_EQ(beta(8192, 262143), 1.3465735902799727);
  EXPECT_DOUBLE_EQ(beta(8192, 1048576), 1.4859812404361672);
  // Llama 4 (offset 1) steps one position earlier at the same L.
  auto llama4 = [](int64_t p) { return kernels::AttentionTemperatureScale(8192, 0.1, 1, p); };
  EXPECT_EQ(llama4(8190), 1.0);
  EXPECT_DOUBLE_EQ(llama4(8191), kLn2);
  EXPECT_DOUBLE_EQ(llama4(16383), 1.109861228866811);
  EXPECT_DOUBLE_EQ(llama4(262143), 1.349650756146648);
}

TEST(HfConfigTest, Ministral3Llama4ScalingBeta) {
  // Nothing but the model_type: Ministral3Config's class-default YaRN dict, beta 0.1 over 16384.
  auto hf = ParseModelRope(R"({"model_type": "ministral3"})", "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  const kernels::RopeConfig& c = hf->config;
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.base, 1e6);
  EXPECT_EQ(c.scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c.scaling.factor, 16.0);
  EXPECT_EQ(c.scaling.original_max_position_embeddings, 16384);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_EQ(hf->style, kernels::RopeStyle::kNeox);
  ASSERT_EQ(hf->layer_ropes.size(), 1u);
  const LayerRope& g = hf->layer_ropes[0];
  ASSERT_TRUE(g.temperature_tuning.has_value());
  EXPECT_EQ(g.temperature_tuning->floor_scale, 16384.0);
  EXPECT_EQ(g.temperature_tuning->attn_scale, 0.1);
  EXPECT_EQ(g.temperature_tuning->position_offset, 0.0);
  EXPECT_EQ(g.temperature_tuning->key, "llama_4_scaling_beta");
  EXPECT_FALSE(g.softmax_mscale);  // Ministral3Attention: head_dim^-0.5, no mscale^2
  EXPECT_EQ(hf->warnings, std::vector<std::string>{});
  const std::string ministral3 =
      "architecture default (models/ministral3/configuration_ministral3.py)";
  EXPECT_EQ(OriginOf(*hf, "attn_scale"), ministral3);
  EXPECT_EQ(OriginOf(*hf, "floor_scale"), ministral3);
  EXPECT_EQ(OriginOf(*hf, "softmax_scale"), ministral3);

  // A Mistral 3 composite whose text_config gives beta and L (and the class's copy of
  // max_position_embeddings): read from it, neither key "not read".
  constexpr char kGiven[] = R"({"model_type": "mistral3", "text_config": {
    "model_type": "ministral3", "head_dim": 128, "max_position_embeddings": 262144,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 32.0,
      "original_max_position_embeddings": 8192, "beta_fast": 32.0, "beta_slow": 1.0,
      "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.2,
      "max_position_embeddings": 262144}}})";
  hf = ParseModelRope(kGiven, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->model_type, "ministral3");
  ASSERT_TRUE(hf->layer_ropes.at(0).temperature_tuning.has_value());
  EXPECT_EQ(hf->layer_ropes[0].temperature_tuning->floor_scale, 8192.0);
  EXPECT_EQ(hf->layer_ropes[0].temperature_tuning->attn_scale, 0.2);
  EXPECT_EQ(WarningsWith(*hf, "llama_4_scaling_beta"), 0);
  EXPECT_EQ(WarningsWith(*hf, "max_position_embeddings"), 0);
  EXPECT_EQ(OriginOf(*hf, "attn_scale"), "nested config (text_config)");

  // Without beta: transformers' attention cannot run; posenc reports no scaling and says so.
  hf = ParseModelRope(R"({"model_type": "ministral3", "rope_parameters": {"rope_type": "yarn",
    "factor": 16.0, "original_max_position_embeddings": 16384}})",
                      "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FALSE(hf->layer_ropes.at(0).temperature_tuning.has_value());
  EXPECT_EQ(WarningsWith(*hf, "rope_parameters.llama_4_scaling_beta absent"), 1);
}

TEST(HfConfigTest, Llama4ScalingBetaErrorsNameTheKeys) {
  // Beta without the divisor: transformers would divide by None.
  auto hf = ParseModelRope(R"({"model_type": "ministral3", "rope_parameters": {
    "rope_type": "yarn", "factor": 16.0, "llama_4_scaling_beta": 0.1}})",
                           "");
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hf.status().message().find("rope_parameters.llama_4_scaling_beta needs "
                                       "rope_parameters.original_max_position_embeddings > 0"),
            std::string::npos)
      << hf.status().message();
  hf = ParseModelRope(R"({"model_type": "ministral3", "rope_parameters": {
    "rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16384,
    "llama_4_scaling_beta": "0.1"}})",
                      "");
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hf.status().message().find("rope_parameters.llama_4_scaling_beta"), std::string::npos)
      << hf.status().message();
  // Another architecture: transformers ignores the key; the warning says who reads it.
  hf = ParseModelRope(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn",
    "factor": 4.0, "original_max_position_embeddings": 8192, "llama_4_scaling_beta": 0.1}})",
                      "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(WarningsWith(*hf,
                         "rope_scaling.llama_4_scaling_beta: read by ministral3 / mistral4 "
                         "only; transformers ignores it here"),
            1);
  EXPECT_FALSE(hf->layer_ropes.at(0).temperature_tuning.has_value());
  EXPECT_TRUE(hf->layer_ropes[0].softmax_mscale);
}

TEST(HfConfigTest, Mistral4MlaWithLlama4ScalingBeta) {
  auto hf = ParseModelRope(R"({"model_type": "mistral4"})", "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 64);  // qk_rope_head_dim's default
  EXPECT_FALSE(hf->config.rotary_dim.has_value());
  EXPECT_EQ(hf->style, kernels::RopeStyle::kDeepseek);  // rope_interleave's default true
  EXPECT_EQ(hf->config.base, 10000.0);
  EXPECT_EQ(hf->config.scaling.factor, 128.0);
  EXPECT_EQ(hf->config.max_position_embeddings, 1048576);
  ASSERT_TRUE(hf->layer_ropes.at(0).temperature_tuning.has_value());
  EXPECT_EQ(hf->layer_ropes[0].temperature_tuning->floor_scale, 8192.0);
  EXPECT_EQ(hf->layer_ropes[0].temperature_tuning->attn_scale, 0.1);
  EXPECT_EQ(hf->layer_ropes[0].temperature_tuning->position_offset, 0.0);
  EXPECT_FALSE(hf->layer_ropes[0].softmax_mscale);
  EXPECT_EQ(hf->warnings, std::vector<std::string>{});
  // The class's partial_rotary_factor (qk_rope / (qk_nope + qk_rope)) is of the whole qk head:
  // it does not shrink the 64-wide rope slice; one that disagrees is a warning.
  constexpr char kPartial[] = R"({"model_type": "mistral4", "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 64, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0,
      "factor": 128.0, "original_max_position_embeddings": 8192, "llama_4_scaling_beta": 0.1,
      "partial_rotary_factor": 0.5}})";
  hf = ParseModelRope(kPartial, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.head_dim, 64);
  EXPECT_FALSE(hf->config.rotary_dim.has_value());
  EXPECT_EQ(hf->warnings, std::vector<std::string>{});
  hf = ParseModelRope(absl::StrReplaceAll(kPartial, {{"\"partial_rotary_factor\": 0.5",
                                                      "\"partial_rotary_factor\": 0.25"}}),
                      "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FALSE(hf->config.rotary_dim.has_value());
  EXPECT_EQ(WarningsWith(*hf, "is 32 channels, not qk_rope_head_dim (64)"), 1);
  // DeepSeek V3 keeps its softmax-scale multiplier.
  auto v3 = ParseModelRope(kDeepSeekV3, "");
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_TRUE(v3->layer_ropes.at(0).softmax_mscale);
}

// Llama 4 Scout's text model as published (tests/hf_configs).
std::string Llama4Scout() {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) + "/llama-4-scout-17b-16e-instruct.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str())["config"].dump();
}

TEST(HfConfigTest, RopeAndNopeLayersNeedNoLayerType) {
  // Llama 4: every rotary layer shares one RoPE, every 4th layer is NoPE.
  const std::string scout = Llama4Scout();
  auto hf = ParseModelRope(scout, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto layer0 = ParseModelRope(scout, "0");
  ASSERT_TRUE(layer0.ok()) << layer0.status();
  EXPECT_EQ(hf->layer_type, "chunked_attention");
  EXPECT_FALSE(hf->config.nope);
  EXPECT_EQ(kernels::RopeFrequencyCache::Key(hf->config, 0),
            kernels::RopeFrequencyCache::Key(layer0->config, 0));
  EXPECT_EQ(WarningsWith(*hf, "layers 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47 have no RoPE"),
            1);
  // SmolLM 3 (no layer types, every 4th NoPE) and Cohere 2 (full_attention NoPE).
  hf = ParseModelRope(R"({"model_type": "smollm3", "num_hidden_layers": 8, "hidden_size": 2048,
    "num_attention_heads": 16})",
                      "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FALSE(hf->config.nope);
  EXPECT_EQ(WarningsWith(*hf, "layers 3, 7 have no RoPE"), 1);
  hf = ParseModelRope(R"({"model_type": "cohere2", "hidden_size": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 8, "rope_theta": 50000})",
                      "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->layer_type, "sliding_attention");
  EXPECT_EQ(WarningsWith(*hf, "layers 3, 7 have no RoPE"), 1);
  // Gemma 3's two RoPEs still need a layer_type.
  const auto gemma3 = ParseModelRope(R"({"model_type": "gemma3_text", "head_dim": 128,
    "num_hidden_layers": 12})",
                                     "");
  EXPECT_EQ(gemma3.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gemma3.status().message().find("required"), std::string::npos)
      << gemma3.status().message();
}

TEST(HfConfigTest, HostileJsonIsRejectedWithoutCrashing) {
  // Deep nesting (parsed and destroyed without recursion), huge numbers, odd bytes.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_FALSE(ParseModelRope(deep, "").ok());
  const std::string deep_object =
      R"({"rope_scaling": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(ParseModelRope(deep_object, "").ok());
  EXPECT_FALSE(ParseModelRope(R"({"rope_theta": 1e999})", "").ok());
  EXPECT_FALSE(ParseModelRope(std::string("{\"a\": \"\xff\xfe\"}"), "").ok());
  EXPECT_FALSE(ParseModelRope(std::string("{\0}", 3), "").ok());
  auto nulls = ParseModelRope(R"({"head_dim": null, "rope_scaling": null})", "");
  ASSERT_TRUE(nulls.ok()) << nulls.status();  // null means absent, as in Python configs
  EXPECT_EQ(nulls->config.head_dim, 0);
}

TEST(HfConfigTest, ConfigJsonTooLargeIsRefusedBeforeParsing) {
  std::string json = "{\"rope_theta\": 10000, \"pad\": [";
  while (json.size() <= kMaxConfigBytes) json += "[],";
  json += "[]]}";
  const auto hf = ParseModelRope(json, "");
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hf.status().message().find("config.hf_config_json"), std::string::npos);
  EXPECT_NE(hf.status().message().find("bytes, over the"), std::string::npos);
}

TEST(HfConfigTest, ConfigJsonNestedTooDeepIsRefused) {
  const std::string json = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  const auto hf = ParseModelRope(json, "");
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hf.status().message().find("nests deeper than 64 levels"), std::string::npos);
  // Brackets inside strings are text, not nesting.
  const std::string in_string =
      "{\"rope_theta\": 10000, \"note\": \"" + std::string(1000, '[') + "\", \"head_dim\": 64}";
  EXPECT_TRUE(ParseModelRope(in_string, "").ok());
}

TEST(HfConfigTest, MalformedConfigJsonSaysWhere) {
  const auto hf = ParseModelRope("{\"rope_theta\": 10000,, }", "");
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hf.status().message().find("malformed JSON at byte 22"), std::string::npos)
      << hf.status().message();
}

}  // namespace
}  // namespace posenc::hf
