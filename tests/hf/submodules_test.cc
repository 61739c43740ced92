// The sub-modules with a RoPE of their own (kernels/hf/submodules.h): the DSA lightning indexer of
// DeepSeek-V3.2 (NEOX, every layer) and GLM-5 (interleaved, its "full" layers) beside their MLA
// attention (interleaved, DEEPSEEK), on the reconstructed published files of
// tests/hf_configs/config_only (README there) and hand-made ones; the errors name their key.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "kernels/hf/config.h"
#include "kernels/rope/config.h"
#include "tests/hf/sample_configs.h"

namespace posenc::hf {
namespace {

using hf::testing::ConfigOnly;
using kernels::RopeStyle;

int WarningsWith(const std::vector<std::string>& warnings, const std::string& text) {
  int n = 0;
  for (const std::string& w : warnings) n += absl::StrContains(w, text) ? 1 : 0;
  return n;
}

// The message of a failed parse (and a failure where it succeeds).
std::string ErrorOf(const std::string& json, const ParseOptions& options) {
  auto hf = ParseModelRope(json, options);
  EXPECT_FALSE(hf.ok()) << json;
  if (hf.ok()) return "";
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(hf.status().message());
}

std::string ErrorOf(const std::string& json) { return ErrorOf(json, ParseOptions{}); }

TEST(HfSubmodulesTest, DeepSeekV32IndexerIsNeoxOnTheAttentionsFrequencies) {
  const std::string v32 = ConfigOnly("deepseek-v3.2-exp");
  auto hf = ParseModelRope(v32, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  // The MLA attention: the 64-wide rope slice, interleaved (the class removes rope_interleave).
  EXPECT_EQ(hf->model_type, "deepseek_v32");
  EXPECT_EQ(hf->config.head_dim, 64);
  EXPECT_FALSE(hf->config.rotary_dim.has_value());
  EXPECT_EQ(hf->style, RopeStyle::kDeepseek);
  EXPECT_EQ(hf->config.scaling.type, kernels::RopeScalingType::kYarn);
  EXPECT_EQ(hf->config.scaling.factor, 40.0);
  EXPECT_TRUE(hf->layer_ropes.at(0).softmax_mscale);
  EXPECT_EQ(hf->warnings, std::vector<std::string>{});
  EXPECT_EQ(hf->submodule, "");
  // The indexer: the first 64 of its 128 channels, NEOX, every layer.
  ASSERT_EQ(hf->submodules.size(), 1u);
  const SubmoduleRope& indexer = hf->submodules[0];
  EXPECT_EQ(indexer.name, "indexer");
  ASSERT_EQ(indexer.layers.size(), 61u);
  EXPECT_EQ(indexer.layers.front(), 0);
  EXPECT_EQ(indexer.layers.back(), 60);
  EXPECT_EQ(indexer.rotary_offset, 0);
  EXPECT_EQ(indexer.config.head_dim, 128);
  EXPECT_EQ(indexer.config.rotary_dim, 64);
  EXPECT_EQ(indexer.config.style, RopeStyle::kNeox);
  EXPECT_EQ(indexer.warnings, std::vector<std::string>{});
  // One rotary table: the same frequencies, correction range and attention factor, exactly.
  auto mla = kernels::ComputeRopeFrequencies(hf->config, -1);
  auto idx = kernels::ComputeRopeFrequencies(indexer.config, -1);
  ASSERT_TRUE(mla.ok() && idx.ok());
  EXPECT_EQ(idx->inv_freq, mla->inv_freq);
  EXPECT_EQ(idx->attention_factor, mla->attention_factor);
  EXPECT_EQ(idx->yarn_low, mla->yarn_low);
  EXPECT_EQ(idx->yarn_high, mla->yarn_high);
  // Selected: the indexer's config, alone or on a named layer.
  for (const char* layer : {"", "5"}) {
    auto sel = ParseModelRope(v32, {.layer_type = layer, .submodule = "indexer"});
    ASSERT_TRUE(sel.ok()) << sel.status();
    EXPECT_EQ(sel->submodule, "indexer");
    EXPECT_EQ(sel->config.head_dim, 128);
    EXPECT_EQ(sel->config.rotary_dim, 64);
    EXPECT_EQ(sel->style, RopeStyle::kNeox);
  }
}

TEST(HfSubmodulesTest, DeepSeekV32KeysTransformersDoesNotReadAreWarnings) {
  const std::string v32 = ConfigOnly("deepseek-v3.2-exp");
  auto hf = ParseModelRope(absl::StrReplaceAll(v32, {{"\"index_head_dim\"",
                                                      "\"rope_interleave\": false,\n  "
                                                      "\"indexer_rope_interleave\": true,\n  "
                                                      "\"index_head_dim\""}}),
                           ParseOptions{.submodule = "indexer"});
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->layer_ropes.at(0).config.style, RopeStyle::kDeepseek);
  EXPECT_EQ(WarningsWith(hf->warnings, "rope_interleave: false is not read by transformers"), 1);
  EXPECT_EQ(hf->style, RopeStyle::kNeox);
  EXPECT_EQ(WarningsWith(hf->warnings, "indexer_rope_interleave: true is not read by transformers"),
            1);
}

TEST(HfSubmodulesTest, GlmMoeDsaIndexerRunsOnTheFullLayersInterleaved) {
  const std::string glm = ConfigOnly("glm-5.3");
  auto hf = ParseModelRope(glm, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->model_type, "glm_moe_dsa");
  EXPECT_EQ(hf->config.head_dim, 64);  // qk_rope_head_dim, not the file's head_dim 192
  EXPECT_EQ(hf->style, RopeStyle::kDeepseek);
  EXPECT_EQ(hf->config.base, 8e6);
  EXPECT_EQ(hf->warnings, std::vector<std::string>{});
  ASSERT_EQ(hf->submodules.size(), 1u);
  const SubmoduleRope& indexer = hf->submodules[0];
  std::vector<int64_t> full = {0, 1, 2};
  for (int64_t i = 6; i <= 74; i += 4) full.push_back(i);
  EXPECT_EQ(indexer.layers, full);
  EXPECT_EQ(indexer.layers.size(), 21u);
  EXPECT_EQ(indexer.config.style, RopeStyle::kDeepseek);
  EXPECT_EQ(indexer.config.head_dim, 128);
  EXPECT_EQ(indexer.config.rotary_dim, 64);
  EXPECT_EQ(indexer.warnings, std::vector<std::string>{});
  // A full layer by index; a shared one has no indexer.
  auto six = ParseModelRope(glm, {.layer_type = "6", .submodule = "indexer"});
  ASSERT_TRUE(six.ok()) << six.status();
  EXPECT_EQ(six->style, RopeStyle::kDeepseek);
  EXPECT_EQ(ErrorOf(glm, {.layer_type = "3", .submodule = "indexer"}),
            "config.submodule: layer 3 does not run the indexer (a shared layer: it reuses the "
            "top-k of layer 2); the layers that run it: 0-2, 6, 10, 14, 18, 22, 26, 30, 34, 38, "
            "42, 46, 50, 54, 58, 62, 66, 70, 74");
  // The same layers from transformers' rule (index_topk_freq 4, index_skip_topk_offset 3) and
  // from index_topk_pattern.
  const std::string start = "\"indexer_types\": [";
  const size_t from = glm.find(start);
  const size_t to = glm.find(']', from);
  ASSERT_NE(from, std::string::npos);
  const std::string no_types = glm.substr(0, from) + "\"no_types\": 0" + glm.substr(to + 1);
  auto rule = ParseModelRope(no_types, "");
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_EQ(rule->submodules.at(0).layers, full);
  std::string pattern;
  for (int64_t i = 0; i < 78; ++i) {
    pattern += std::find(full.begin(), full.end(), i) != full.end() ? 'F' : 'S';
  }
  auto by_pattern = ParseModelRope(
      absl::StrReplaceAll(no_types, {{"\"index_topk_pattern\": null",
                                      "\"index_topk_pattern\": \"" + pattern + "\""}}),
      "");
  ASSERT_TRUE(by_pattern.ok()) << by_pattern.status();
  EXPECT_EQ(by_pattern->submodules.at(0).layers, full);
}

TEST(HfSubmodulesTest, GlmMoeDsaIndexerKeyFalseIsAWarningAndDefaultsAreTheClasses) {
  const std::string glm = ConfigOnly("glm-5.3");
  auto hf = ParseModelRope(absl::StrReplaceAll(glm, {{"\"indexer_rope_interleave\": true",
                                                      "\"indexer_rope_interleave\": false"}}),
                           ParseOptions{.submodule = "indexer"});
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->style, RopeStyle::kDeepseek);  // transformers', whatever the key says
  EXPECT_EQ(WarningsWith(hf->warnings,
                         "indexer_rope_interleave: false: transformers rotates the "
                         "indexer interleaved regardless"),
            1);
  // No keys: GlmMoeDsaConfig's defaults (index_head_dim 128, qk_rope_head_dim 64, every layer
  // full: index_topk_freq 1), and the absent key's warning (vLLM would rotate NEOX).
  hf = ParseModelRope(R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 4})", "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->submodules.size(), 1u);
  EXPECT_EQ(hf->submodules[0].layers, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(hf->submodules[0].config.head_dim, 128);
  EXPECT_EQ(hf->submodules[0].config.rotary_dim, 64);
  EXPECT_EQ(hf->config.max_position_embeddings, 202752);
  EXPECT_EQ(WarningsWith(hf->submodules[0].warnings, "indexer_rope_interleave absent"), 1);
}

TEST(HfSubmodulesTest, OtherConfigsWithIndexTopkFollowVllm) {
  // vLLM's is_v32 test (index_topk) on a model_type posenc has no indexer row for.
  constexpr char kV3WithIndexer[] = R"({"model_type": "deepseek_v3", "num_hidden_layers": 2,
    "qk_rope_head_dim": 64, "index_topk": 2048, "index_head_dim": 128})";
  auto hf = ParseModelRope(kV3WithIndexer, "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->submodules.size(), 1u);
  EXPECT_EQ(hf->submodules[0].config.style, RopeStyle::kNeox);
  EXPECT_EQ(WarningsWith(hf->submodules[0].warnings, "the indexer's pairing follows vLLM"), 1);
  hf = ParseModelRope(absl::StrReplaceAll(kV3WithIndexer, {{"\"index_topk\"",
                                                            "\"indexer_rope_interleave\": true, "
                                                            "\"index_topk\""}}),
                      "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->submodules.at(0).config.style, RopeStyle::kGptj);
  // DeepSeek V3 itself has none.
  hf = ParseModelRope(R"({"model_type": "deepseek_v3"})", "");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_TRUE(hf->submodules.empty());
}

TEST(HfSubmodulesTest, ErrorsNameTheFieldAndTheKey) {
  const std::string glm = R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 4, )";
  EXPECT_EQ(ErrorOf(glm + R"("indexer_types": 4})"),
            "config.hf_config_json: indexer_types must be an array of strings, got number");
  EXPECT_EQ(ErrorOf(glm + R"("indexer_types": ["full", "full", "oops", "full"]})"),
            "config.hf_config_json: indexer_types[2]: expected \"full\" or \"shared\", got "
            "\"oops\"");
  EXPECT_EQ(ErrorOf(glm + R"("indexer_types": ["full", "shared"]})"),
            "config.hf_config_json: indexer_types: 2 entries for 4 layers (num_hidden_layers)");
  EXPECT_NE(ErrorOf(glm + R"("indexer_types": ["shared", "full", "full", "full"]})")
                .find("indexer_types: layer 0 must run the indexer"),
            std::string::npos);
  EXPECT_NE(ErrorOf(glm + R"("index_topk_freq": 4, "index_skip_topk_offset": 0})")
                .find("index_skip_topk_offset: layer 0 must run the indexer"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(glm + R"("index_topk_pattern": "FFX"})"),
            "config.hf_config_json: index_topk_pattern[2]: expected \"F\" or \"S\", got \"X\"");
  EXPECT_EQ(ErrorOf(glm + R"("index_head_dim": 63})"),
            "config.hf_config_json: index_head_dim: expected an even number >= "
            "qk_rope_head_dim (64), got 63");
  EXPECT_EQ(ErrorOf(R"({"model_type": "llama", "head_dim": 64, "index_topk": 8,
                      "qk_rope_head_dim": 3})"),
            "config.hf_config_json: qk_rope_head_dim: expected an even number > 0, got 3");
  // The selector.
  EXPECT_EQ(ErrorOf(R"({"model_type": "llama"})", {.submodule = "indexer"}),
            "config.submodule: \"indexer\" is not a sub-module of model_type 'llama' (none of its "
            "layers has a RoPE of its own)");
  EXPECT_EQ(ErrorOf(glm + "\"index_topk\": 8}", {.submodule = "mla"}),
            "config.submodule: \"mla\" is not a sub-module of model_type 'glm_moe_dsa' (its "
            "sub-modules: indexer)");
  EXPECT_NE(ErrorOf(R"({"model_type": "qwen2_vl", "vision_config": {}})",
                    {.layer_type = "vision", .submodule = "indexer"})
                .find("config.submodule: \"indexer\" is a part of a text layer"),
            std::string::npos);
}

}  // namespace
}  // namespace posenc::hf
