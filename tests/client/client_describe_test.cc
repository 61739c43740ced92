// DescribeRope and RopeCache with a config.json through the C++ client and the shared in-process
// server over TCP: a vision-language config described as both towers (the vision tower last,
// layer_type "vision", no layers) and selected with layer_type "vision"; DeepSeek-V3.2's DSA
// indexer as a sub-module (its own head, rotary width and pairing on the attention's frequencies)
// and selected with RopeConfig::submodule; a selector the model lacks is INVALID_ARGUMENT naming
// config.submodule.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "client_test_util.h"
#include "nlohmann/json.hpp"
#include "posenc/client.h"

#ifndef POSENC_HF_CONFIGS_DIR
#error "POSENC_HF_CONFIGS_DIR must name tests/hf_configs"
#endif

namespace posenc::client {
namespace {

using testing::ConnectToSharedServer;

std::string ReadFile(const std::string& path) {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) + "/" + path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The config of a tests/hf_configs file (which wraps it with what transformers computes).
std::string PublishedConfig(const std::string& name) {
  return nlohmann::json::parse(ReadFile(name + ".json"))["config"].dump();
}

TEST(ClientDescribeTest, VisionLanguageConfigIsBothTowers) {
  auto client = ConnectToSharedServer();
  const std::string qwen2vl = PublishedConfig("qwen2-vl-2b-instruct");
  absl::StatusOr<DescribeRopeResult> result = client->DescribeRope({.hf_config_json = qwen2vl});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model_type, "qwen2_vl");
  EXPECT_EQ(result->num_layers, 28);  // the text model's
  ASSERT_EQ(result->groups.size(), 2u);
  EXPECT_EQ(result->groups[0].layers.size(), 28u);
  EXPECT_EQ(result->groups[0].mrope_section, (std::vector<int64_t>{16, 24, 24}));
  const RopeLayerGroup& vision = result->groups[1];
  EXPECT_EQ(vision.layer_type, "vision");
  EXPECT_TRUE(vision.layers.empty());
  EXPECT_EQ(vision.derived.head_dim, 80);  // embed_dim 1280 / num_heads 16
  EXPECT_TRUE(result->submodules.empty());
  // layer_type "vision": the tower's table, 2-D ids (row, column).
  RopeCacheOptions options;
  options.positions = Positions::Ids({0, 3, 0, 5}, {2, 2});
  options.config = {.hf_config_json = qwen2vl, .layer_type = "vision"};
  absl::StatusOr<RopeCacheResult> cache = client->RopeCache(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->derived.layer_type, "vision");
  EXPECT_EQ(cache->derived.head_dim, 80);
  EXPECT_EQ(cache->derived.inv_freq, vision.derived.inv_freq);
}

TEST(ClientDescribeTest, DeepSeekV32IndexerIsASubmodule) {
  auto client = ConnectToSharedServer();
  const std::string v32 = ReadFile("config_only/deepseek-v3.2-exp.json");
  absl::StatusOr<DescribeRopeResult> result = client->DescribeRope({.hf_config_json = v32});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model_type, "deepseek_v32");
  ASSERT_EQ(result->groups.size(), 1u);
  EXPECT_EQ(result->groups[0].derived.style, RopeStyle::kDeepseek);
  ASSERT_EQ(result->submodules.size(), 1u);
  const RopeSubmodule& indexer = result->submodules[0];
  EXPECT_EQ(indexer.name, "indexer");
  EXPECT_EQ(indexer.layers.size(), 61u);
  EXPECT_EQ(indexer.rotary_offset, 0);
  EXPECT_EQ(indexer.derived.head_dim, 128);
  EXPECT_EQ(indexer.derived.rotary_dim, 64);
  EXPECT_EQ(indexer.derived.style, RopeStyle::kNeox);
  EXPECT_EQ(indexer.derived.inv_freq, result->groups[0].derived.inv_freq);
  EXPECT_FALSE(indexer.sources.empty());

  RopeCacheOptions options;
  options.positions = Positions::Range(0, 4);
  options.config = {.hf_config_json = v32, .submodule = "indexer"};
  absl::StatusOr<RopeCacheResult> cache = client->RopeCache(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->derived.submodule, "indexer");
  EXPECT_EQ(cache->derived.head_dim, 128);
  EXPECT_EQ(cache->derived.style, RopeStyle::kNeox);

  options.config = {.hf_config_json = PublishedConfig("mistral-7b-instruct-v0.3"),
                    .submodule = "indexer"};
  cache = client->RopeCache(options);
  ASSERT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("config.submodule: \"indexer\" is not a sub-module"),
            std::string::npos)
      << cache.status();
}

}  // namespace
}  // namespace posenc::client
