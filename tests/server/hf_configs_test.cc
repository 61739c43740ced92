// Every published config.json of tests/hf_configs (see its README) through the normalizer and
// the RopeCache / ApplyRope handlers on the reference and cpu backends, against what Hugging Face
// transformers computes (`hf_expected`): inv_freq (float64, 1e-12 relative), attention scaling,
// pairing, head and rotary dims, per layer type where the model's layers differ, and the cos/sin
// tables those frequencies give.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "server/handlers.h"
#include "tests/hf/sample_configs.h"
#include "tests/server/server_test_util.h"

#ifndef POSENC_HF_CONFIGS_DIR
#error "POSENC_HF_CONFIGS_DIR must name tests/hf_configs"
#endif

namespace posenc::server {
namespace {

using Json = nlohmann::json;
using hf::testing::ConfigOnly;

Json Load(const std::string& name) {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) + "/" + name + ".json");
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

// The two backends every case runs on.
struct Backends {
  std::unique_ptr<kernels::Backend> reference = kernels::MakeReferenceBackend();
  std::unique_ptr<kernels::Backend> cpu = *kernels::MakeCpuBackend({});
};

v1::RopeStyle Style(const std::string& hf) {
  if (hf == "neox") return v1::ROPE_STYLE_NEOX;
  if (hf == "gptj" || hf == "llama4_complex") return v1::ROPE_STYLE_GPTJ;
  if (hf == "deepseek_interleave") return v1::ROPE_STYLE_DEEPSEEK;
  ADD_FAILURE() << "unknown rotation_style " << hf;
  return v1::ROPE_STYLE_UNSPECIFIED;
}

void ExpectRelative(double got, double want, const std::string& what) {
  if (want == 0) {
    EXPECT_EQ(got, 0.0) << what;
  } else {
    EXPECT_LE(std::fabs(got - want), 1e-12 * std::fabs(want))
        << what << ": got " << got << ", want " << want;
  }
}

// inv_freq_float64 {count, first[3], last[3]} against the derived inv_freq.
void ExpectInvFreq(const v1::RopeDerived& d, const Json& expected, const std::string& what) {
  ASSERT_EQ(d.inv_freq_size(), expected["count"].get<int>()) << what;
  const int n = d.inv_freq_size();
  for (int i = 0; i < 3; ++i) {
    ExpectRelative(d.inv_freq(i), expected["first"][i].get<double>(),
                   what + " inv_freq[" + std::to_string(i) + "]");
    ExpectRelative(d.inv_freq(n - 3 + i), expected["last"][i].get<double>(),
                   what + " inv_freq[" + std::to_string(n - 3 + i) + "]");
  }
}

struct Call {
  std::string json;
  std::string layer_type;
  int64_t seq_len = 1;  // the tables at initialization (dynamic: base; longrope: short factors)
  bool mrope = false;   // positions as M-RoPE ids [3, n] (text tokens: t = h = w)
};

// RopeCache (FLOAT64, COMPACT) at positions 0 .. 2 and 4097 on `backend`; checks the table
// against the derived frequencies and returns the response.
v1::RopeCacheResponse Cache(const kernels::Backend& backend, const Call& call,
                            const std::string& what) {
  TableRegistry tables;
  HandlerContext ctx{&backend, Limits{}, &tables};
  v1::RopeCacheRequest req;
  *req.mutable_positions()->mutable_ids() =
      call.mrope ? testing::Int64Tensor({3, 4}, {0, 1, 2, 4097, 0, 1, 2, 4097, 0, 1, 2, 4097})
                 : testing::Int64Tensor({4}, {0, 1, 2, 4097});
  req.mutable_config()->set_hf_config_json(call.json);
  req.mutable_config()->set_layer_type(call.layer_type);
  if (call.seq_len > 0) req.mutable_config()->set_seq_len(call.seq_len);
  req.set_output_dtype(v1::DTYPE_FLOAT64);
  v1::RopeCacheResponse resp;
  const grpc::Status status = HandleRopeCache(ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << what << ": " << status.error_message();
  if (!status.ok()) return resp;
  const v1::RopeDerived& d = resp.derived();
  const int half = d.inv_freq_size();
  const auto* cos = reinterpret_cast<const double*>(resp.cos().data().data());
  const auto* sin = reinterpret_cast<const double*>(resp.sin().data().data());
  const double m = d.attention_factor_applied() ? d.attention_factor() : 1.0;
  const int64_t positions[] = {0, 1, 2, 4097};
  for (int t = 0; t < 4; ++t) {
    for (int j = 0; j < half; ++j) {
      const long double angle = static_cast<long double>(positions[t]) * d.inv_freq(j);
      EXPECT_NEAR(cos[t * half + j], static_cast<double>(std::cos(angle)) * m, 1e-9)
          << what << " p=" << positions[t] << " j=" << j;
      EXPECT_NEAR(sin[t * half + j], static_cast<double>(std::sin(angle)) * m, 1e-9)
          << what << " p=" << positions[t] << " j=" << j;
    }
  }
  return resp;
}

// One expected block (flat hf_expected, an as_published / with_model_card_yarn variant, or a
// per_layer_type entry with the file-level fields as fallback).
void Check(const Call& call, const Json& block, const Json& file_level, const std::string& what) {
  Backends backends;
  for (const kernels::Backend* backend : {backends.reference.get(), backends.cpu.get()}) {
    const std::string where = what + " [" + std::string(backend->name()) + "]";
    const v1::RopeCacheResponse resp = Cache(*backend, call, where);
    const v1::RopeDerived& d = resp.derived();
    if (block.contains("inv_freq_float64")) ExpectInvFreq(d, block["inv_freq_float64"], where);
    if (block.contains("attention_scaling")) {
      EXPECT_NEAR(d.attention_factor(), block["attention_scaling"].get<double>(), 1e-15) << where;
    }
    const Json& style = block.contains("rotation_style") ? block : file_level;
    if (style.contains("rotation_style")) {
      EXPECT_EQ(d.style(), Style(style["rotation_style"].get<std::string>())) << where;
    }
    if (block.contains("head_dim_used")) {
      EXPECT_EQ(d.head_dim(), block["head_dim_used"].get<int64_t>()) << where;
      EXPECT_EQ(d.rotary_dim(), d.head_dim()) << where;  // proportional: a full-width table
    } else if (file_level.contains("head_dim")) {
      EXPECT_EQ(d.head_dim(), file_level["head_dim"].get<int64_t>()) << where;
    }
    if (block.contains("rotary_dim")) {
      EXPECT_EQ(d.rotary_dim(), block["rotary_dim"].get<int64_t>()) << where;
    }
    if (block.contains("rope_theta") && d.scaling_type() != v1::ROPE_SCALING_DYNAMIC) {
      EXPECT_EQ(d.effective_base(), block["rope_theta"].get<double>()) << where;
    }
    if (block.contains("factor")) {
      EXPECT_EQ(d.factor(), block["factor"].get<double>()) << where;
    }
    if (block.contains("correction_range_used")) {
      EXPECT_NEAR(d.yarn_low(), block["correction_range_used"][0].get<double>(), 1e-12) << where;
      EXPECT_NEAR(d.yarn_high(), block["correction_range_used"][1].get<double>(), 1e-12) << where;
    }
    EXPECT_FALSE(d.nope()) << where;
  }
}

std::string ConfigText(const Json& file, bool with_overlay) {
  Json config = file["config"];
  if (with_overlay) {
    for (auto it = file["config_overlay"]["keys"].begin();
         it != file["config_overlay"]["keys"].end(); ++it) {
      config[it.key()] = it.value();
    }
  }
  return config.dump();
}

class HfConfigsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfConfigsTest, MatchesTransformers) {
  const std::string name = GetParam();
  const Json file = Load(name);
  const Json& expected = file["hf_expected"];
  const std::string json = ConfigText(file, false);

  if (expected.contains("as_published")) {  // qwen2.5: the file, then with the card's YaRN
    Check({json}, expected["as_published"], expected["as_published"], name + " as published");
    Check({ConfigText(file, true)}, expected["with_model_card_yarn"],
          expected["with_model_card_yarn"], name + " with the card's yarn");
    return;
  }
  if (expected.contains("per_layer")) {
    // Llama 4: the flat values are the RoPE layers'; every NoPE layer passes q/k through.
    const Json& nope_layers = expected["per_layer"]["nope_layers"];
    Check({json, "chunked_attention"}, expected, expected, name + " chunked_attention");
    Check({json, "0"}, expected, expected, name + " layer 0");
    Backends backends;
    for (const Json& layer : nope_layers) {
      for (const std::string& selector :
           {std::to_string(layer.get<int>()), std::string("full_attention")}) {
        const v1::RopeCacheResponse resp =
            Cache(*backends.cpu, {json, selector}, name + " NoPE " + selector);
        EXPECT_TRUE(resp.derived().nope()) << selector;
        for (double w : resp.derived().inv_freq()) EXPECT_EQ(w, 0.0) << selector;
      }
    }
    int nope_count = 0;
    for (int i = 0; i < 48; ++i) {
      const Call call{json, std::to_string(i)};
      nope_count += Cache(*backends.reference, call, name).derived().nope() ? 1 : 0;
    }
    EXPECT_EQ(nope_count, expected["per_layer"]["nope_layer_count"].get<int>());
  } else if (expected.contains("inv_freq_float64")) {
    Check({.json = json, .mrope = expected.contains("mrope")}, expected, expected, name);
  }
  if (expected.contains("example_seq_len_2M")) {  // dynamic NTK past max_position_embeddings
    const Json& example = expected["example_seq_len_2M"];
    Backends backends;
    const Call call{json, "", example["seq_len"].get<int64_t>()};
    const v1::RopeDerived d = Cache(*backends.cpu, call, name + " long").derived();
    EXPECT_NEAR(d.effective_base(), example["effective_base"].get<double>(),
                1e-12 * example["effective_base"].get<double>());
    ExpectInvFreq(d, example["inv_freq_float64"], name + " long");
  }
  if (expected.contains("long_factor_inv_freq_float64")) {  // LongRoPE past L0
    Backends backends;
    const int64_t l0 = expected["original_max_position_embeddings"].get<int64_t>();
    for (const kernels::Backend* backend : {backends.reference.get(), backends.cpu.get()}) {
      const v1::RopeDerived d = Cache(*backend, {json, "", l0 + 1}, name + " long").derived();
      EXPECT_TRUE(d.longrope_long_factors());
      ExpectInvFreq(d, expected["long_factor_inv_freq_float64"], name + " long");
      EXPECT_NEAR(d.attention_factor(), expected["attention_scaling"].get<double>(), 1e-15);
    }
  }
  if (expected.contains("per_layer_type")) {
    const Json& per_layer = expected["per_layer_type"];
    for (auto it = per_layer.begin(); it != per_layer.end(); ++it) {
      const Json& block = it.value();
      Check({json, it.key()}, block, expected, name + " " + it.key());
      // Each listed layer index selects the same RoPE.
      for (const Json& layer : block["layers"]) {
        Check({json, std::to_string(layer.get<int>())}, block, expected,
              name + " layer " + std::to_string(layer.get<int>()));
      }
    }
  }
}

std::vector<std::string> AllConfigs() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(POSENC_HF_CONFIGS_DIR)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Published, HfConfigsTest, ::testing::ValuesIn(AllConfigs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(HfConfigsTest, AllTwentyFiveArePresent) { EXPECT_EQ(AllConfigs().size(), 25u); }

// DescribeRope on the multi-layer-type models: the groups, their layers, types, bases, NoPE and
// the softmax-scale multiplier, against hf_expected.
v1::DescribeRopeResponse Describe(const std::string& name) {
  const std::unique_ptr<kernels::Backend> backend = kernels::MakeReferenceBackend();
  HandlerContext ctx{backend.get(), Limits{}, nullptr};
  v1::DescribeRopeRequest req;
  req.mutable_config()->set_hf_config_json(ConfigText(Load(name), false));
  v1::DescribeRopeResponse resp;
  const grpc::Status status = HandleDescribeRope(ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
  return resp;
}

std::vector<int64_t> Layers(const Json& list) { return list.get<std::vector<int64_t>>(); }

// The group's source of `name` is {key, origin, value}.
void ExpectSource(const v1::RopeLayerGroup& g, const std::string& name, const std::string& key,
                  const std::string& origin, const std::string& value) {
  for (const v1::RopeValueSource& s : g.sources()) {
    if (s.name() != name) continue;
    EXPECT_EQ(s.key(), key) << name;
    EXPECT_EQ(s.origin(), origin) << name;
    EXPECT_EQ(s.value(), value) << name;
    return;
  }
  ADD_FAILURE() << "no source named " << name << " in group " << g.layer_type();
}

constexpr char kNested[] = "nested config (text_config)";

TEST(DescribeRopeTest, Gemma3SlidingAndFullLayers) {
  const Json want = Load("gemma-3-27b-it")["hf_expected"]["per_layer_type"];
  const v1::DescribeRopeResponse resp = Describe("gemma-3-27b-it");
  EXPECT_EQ(resp.model_type(), "gemma3_text");
  EXPECT_EQ(resp.num_layers(), 62);
  ASSERT_EQ(resp.groups_size(), 2);
  const v1::RopeLayerGroup& sliding = resp.groups(0);
  const v1::RopeLayerGroup& full = resp.groups(1);
  EXPECT_EQ(sliding.layer_type(), "sliding_attention");
  EXPECT_EQ(std::vector<int64_t>(sliding.layers().begin(), sliding.layers().end()),
            Layers(want["sliding_attention"]["layers"]));
  EXPECT_EQ(sliding.base(), 10000.0);
  EXPECT_EQ(sliding.derived().scaling_type(), v1::ROPE_SCALING_DEFAULT);
  EXPECT_EQ(sliding.derived().head_dim(), 128);
  EXPECT_EQ(sliding.derived().rotary_dim(), 128);
  EXPECT_EQ(sliding.derived().style(), v1::ROPE_STYLE_NEOX);
  EXPECT_FALSE(sliding.derived().nope());
  EXPECT_EQ(full.layer_type(), "full_attention");
  EXPECT_EQ(std::vector<int64_t>(full.layers().begin(), full.layers().end()),
            Layers(want["full_attention"]["layers"]));
  EXPECT_EQ(full.base(), 1e6);
  EXPECT_EQ(full.derived().scaling_type(), v1::ROPE_SCALING_LINEAR);
  EXPECT_EQ(full.derived().factor(), 8.0);
  EXPECT_EQ(full.derived().attention_factor(), 1.0);
  EXPECT_EQ(full.max_position_embeddings(), 131072);
  for (const v1::RopeLayerGroup& g : resp.groups()) {
    EXPECT_FALSE(g.has_softmax_scale_multiplier());
    EXPECT_EQ(g.longrope_switch_seq_len(), 0);
    EXPECT_EQ(g.derived().inv_freq_size(), 64);
    EXPECT_FALSE(g.has_attn_temperature_tuning());
  }
  // Where each value came from: the file nests its keys in text_config and leaves the bases,
  // the context and the layer pattern to Gemma3TextConfig's defaults.
  const std::string gemma3 = "architecture default (models/gemma3/configuration_gemma3.py)";
  for (const v1::RopeLayerGroup& g : resp.groups()) {
    ExpectSource(g, "head_dim", "text_config.head_dim", kNested, "128");
    ExpectSource(g, "max_position_embeddings", "max_position_embeddings", gemma3, "131072");
    ExpectSource(g, "layer_types", "sliding_window_pattern", gemma3,
                 "every 6th layer full_attention");
    ExpectSource(g, "num_layers", "text_config.num_hidden_layers", kNested, "62");
    ExpectSource(g, "pairing", "the architecture's rotation", gemma3, "neox");
  }
  ExpectSource(sliding, "base", "rope_local_base_freq", gemma3, "10000");
  ExpectSource(sliding, "rope_type", "no rope_scaling / rope_parameters", gemma3, "default");
  ExpectSource(full, "base", "rope_theta", gemma3, "1000000");
  ExpectSource(full, "rope_type", "text_config.rope_scaling.rope_type", kNested, "linear");
  ExpectSource(full, "scaling.factor", "text_config.rope_scaling.factor", kNested, "8");
}

TEST(DescribeRopeTest, Llama4NoPELayersAndTheLlama3Warning) {
  const Json want = Load("llama-4-scout-17b-16e-instruct")["hf_expected"];
  const v1::DescribeRopeResponse resp = Describe("llama-4-scout-17b-16e-instruct");
  EXPECT_EQ(resp.model_type(), "llama4_text");
  EXPECT_EQ(resp.num_layers(), 48);
  ASSERT_EQ(resp.groups_size(), 2);
  const v1::RopeLayerGroup& rope = resp.groups(0);
  const v1::RopeLayerGroup& nope = resp.groups(1);
  EXPECT_FALSE(rope.derived().nope());
  EXPECT_EQ(rope.layers_size(), 36);
  EXPECT_EQ(rope.base(), 500000.0);
  EXPECT_EQ(rope.derived().scaling_type(), v1::ROPE_SCALING_LLAMA3);
  EXPECT_EQ(rope.derived().style(), v1::ROPE_STYLE_GPTJ);
  EXPECT_EQ(rope.derived().factor(), 16.0);
  EXPECT_EQ(rope.max_position_embeddings(), 10485760);
  EXPECT_EQ(rope.original_max_position_embeddings(), 8192);
  EXPECT_TRUE(nope.derived().nope());
  EXPECT_EQ(std::vector<int64_t>(nope.layers().begin(), nope.layers().end()),
            Layers(want["per_layer"]["nope_layers"]));
  for (double w : nope.derived().inv_freq()) EXPECT_EQ(w, 0.0);
  // low_freq_factor == high_freq_factor: transformers warns, posenc reports it.
  ASSERT_FALSE(resp.warnings().empty());
  bool found = false;
  for (const std::string& w : resp.warnings())
    found = found || w.find("high_freq_factor") != w.npos;
  EXPECT_TRUE(found) << resp.warnings(0);
  EXPECT_FALSE(rope.warnings().empty());
  // Attention temperature tuning on the NoPE layers only, Llama4TextConfig's defaults (the file
  // leaves the keys out).
  EXPECT_FALSE(rope.has_attn_temperature_tuning());
  ASSERT_TRUE(nope.has_attn_temperature_tuning());
  EXPECT_EQ(nope.attn_temperature_tuning().floor_scale(), 8192.0);
  EXPECT_EQ(nope.attn_temperature_tuning().attn_scale(), 0.1);
  EXPECT_EQ(nope.attn_temperature_tuning().position_offset(), 1.0);
  EXPECT_EQ(nope.attn_temperature_tuning().key(), "attn_temperature_tuning");
  const std::string llama4 = "architecture default (models/llama4/configuration_llama4.py)";
  ExpectSource(nope, "attn_temperature_tuning", "attn_temperature_tuning", llama4, "true");
  ExpectSource(nope, "floor_scale", "floor_scale", llama4, "8192");
  ExpectSource(nope, "attn_scale", "attn_scale", llama4, "0.1");
  // Nesting: every key the file gives is under text_config.
  for (const v1::RopeLayerGroup* g : {&rope, &nope}) {
    ExpectSource(*g, "base", "text_config.rope_theta", kNested, "500000");
    ExpectSource(*g, "head_dim", "text_config.head_dim", kNested, "128");
    ExpectSource(*g, "max_position_embeddings", "text_config.max_position_embeddings", kNested,
                 "10485760");
    ExpectSource(*g, "scaling.factor", "text_config.rope_scaling.factor", kNested, "16");
    ExpectSource(*g, "scaling.original_max_position_embeddings",
                 "text_config.rope_scaling.original_max_position_embeddings", kNested, "8192");
    ExpectSource(*g, "pairing", "the architecture's rotation", llama4, "gptj");
    ExpectSource(*g, "nope", "no_rope_layer_interval", llama4, "every 4th layer");
  }
  // A file that gives the keys: read from it; turned off: no tuning reported.
  Json file = Load("llama-4-scout-17b-16e-instruct");
  file["config"]["text_config"]["floor_scale"] = 4096;
  file["config"]["text_config"]["attn_scale"] = 0.25;
  const std::unique_ptr<kernels::Backend> backend = kernels::MakeReferenceBackend();
  HandlerContext ctx{backend.get(), Limits{}, nullptr};
  v1::DescribeRopeRequest req;
  req.mutable_config()->set_hf_config_json(ConfigText(file, false));
  v1::DescribeRopeResponse given;
  ASSERT_TRUE(HandleDescribeRope(ctx, req, &given).ok());
  ASSERT_EQ(given.groups_size(), 2);
  EXPECT_EQ(given.groups(1).attn_temperature_tuning().floor_scale(), 4096.0);
  EXPECT_EQ(given.groups(1).attn_temperature_tuning().attn_scale(), 0.25);
  ExpectSource(given.groups(1), "floor_scale", "text_config.floor_scale", kNested, "4096");
  file["config"]["text_config"]["attn_temperature_tuning"] = false;
  req.mutable_config()->set_hf_config_json(ConfigText(file, false));
  v1::DescribeRopeResponse off;
  ASSERT_TRUE(HandleDescribeRope(ctx, req, &off).ok());
  ASSERT_EQ(off.groups_size(), 2);
  EXPECT_FALSE(off.groups(1).has_attn_temperature_tuning());
  ExpectSource(off.groups(1), "attn_temperature_tuning", "text_config.attn_temperature_tuning",
               kNested, "false");
}

TEST(DescribeRopeTest, DeepSeekV3SoftmaxScaleMultiplier) {
  const Json want = Load("deepseek-v3")["hf_expected"];
  const v1::DescribeRopeResponse resp = Describe("deepseek-v3");
  EXPECT_EQ(resp.model_type(), "deepseek_v3");
  EXPECT_EQ(resp.num_layers(), 61);
  ASSERT_EQ(resp.groups_size(), 1);
  const v1::RopeLayerGroup& g = resp.groups(0);
  EXPECT_EQ(g.layers_size(), 61);
  EXPECT_EQ(g.layer_type(), "");
  EXPECT_EQ(g.base(), 10000.0);
  EXPECT_EQ(g.derived().scaling_type(), v1::ROPE_SCALING_YARN);
  EXPECT_EQ(g.derived().style(), v1::ROPE_STYLE_DEEPSEEK);
  EXPECT_EQ(g.derived().rotary_dim(), 64);
  EXPECT_EQ(g.derived().attention_factor(), 1.0);
  EXPECT_EQ(g.max_position_embeddings(), 163840);
  EXPECT_EQ(g.original_max_position_embeddings(), 4096);
  ASSERT_TRUE(g.has_softmax_scale_multiplier());
  ExpectRelative(g.softmax_scale_multiplier(), want["softmax_scale"]["multiplier"].get<double>(),
                 "softmax_scale_multiplier");
  // The file has no rope_interleave: DeepseekV3Config's default (true) decides the pairing.
  const std::string v3 =
      "architecture default (models/deepseek_v3/configuration_deepseek_v3.py (Kimi K2: its "
      "remote configuration_deepseek.py, the same class))";
  ExpectSource(g, "pairing", "rope_interleave (class default true)", v3, "deepseek");
  ExpectSource(g, "head_dim", "qk_rope_head_dim", "file", "64");
  ExpectSource(g, "rope_type", "rope_scaling.type", "file", "yarn");
  ExpectSource(g, "scaling.mscale_all_dim", "rope_scaling.mscale_all_dim", "file", "1");
  ExpectSource(g, "base", "rope_theta", "file", "10000");
}

// DescribeRope of `json` (an hf_config_json) on the reference backend.
v1::DescribeRopeResponse DescribeJson(const std::string& json) {
  const std::unique_ptr<kernels::Backend> backend = kernels::MakeReferenceBackend();
  HandlerContext ctx{backend.get(), Limits{}, nullptr};
  v1::DescribeRopeRequest req;
  req.mutable_config()->set_hf_config_json(json);
  v1::DescribeRopeResponse resp;
  const grpc::Status status = HandleDescribeRope(ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return resp;
}

TEST(DescribeRopeTest, Ministral3VlLlama4ScalingBetaAndNoSoftmaxMultiplier) {
  // A Mistral 3 composite around a Ministral 3 text model and a Pixtral tower.
  const v1::DescribeRopeResponse resp = DescribeJson(R"({"model_type": "mistral3",
    "text_config": {"model_type": "ministral3", "num_hidden_layers": 4, "head_dim": 128,
      "max_position_embeddings": 262144,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
        "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1,
        "max_position_embeddings": 262144}},
    "vision_config": {"model_type": "pixtral"}})");
  EXPECT_EQ(resp.model_type(), "ministral3");
  ASSERT_EQ(resp.groups_size(), 2);
  const v1::RopeLayerGroup& text = resp.groups(0);
  EXPECT_EQ(text.layers_size(), 4);
  ASSERT_TRUE(text.has_attn_temperature_tuning());
  EXPECT_EQ(text.attn_temperature_tuning().floor_scale(), 16384.0);
  EXPECT_EQ(text.attn_temperature_tuning().attn_scale(), 0.1);
  EXPECT_EQ(text.attn_temperature_tuning().position_offset(), 0.0);
  EXPECT_EQ(text.attn_temperature_tuning().key(), "llama_4_scaling_beta");
  // mscale(16, 1)^2 = 1.6314 would be a mis-report: Ministral3Attention keeps head_dim^-0.5.
  EXPECT_FALSE(text.has_softmax_scale_multiplier());
  ExpectSource(text, "attn_scale", "text_config.rope_parameters.llama_4_scaling_beta", kNested,
               "0.1");
  ExpectSource(text, "floor_scale", "text_config.rope_parameters.original_max_position_embeddings",
               kNested, "16384");
  for (const std::string& w : resp.warnings()) {
    EXPECT_EQ(w.find("llama_4_scaling_beta"), std::string::npos) << w;
    EXPECT_EQ(w.find("max_position_embeddings"), std::string::npos) << w;
  }
  const v1::RopeLayerGroup& vision = resp.groups(1);
  EXPECT_EQ(vision.layer_type(), "vision");
  EXPECT_EQ(vision.layers_size(), 0);
  EXPECT_FALSE(vision.has_attn_temperature_tuning());
}

TEST(DescribeRopeTest, Qwen2VlIsDescribedAsBothTowers) {
  const v1::DescribeRopeResponse resp = Describe("qwen2-vl-2b-instruct");
  EXPECT_EQ(resp.num_layers(), 28);  // the text model's
  ASSERT_EQ(resp.groups_size(), 2);
  EXPECT_EQ(resp.groups(0).layers_size(), 28);
  const v1::RopeLayerGroup& vision = resp.groups(1);
  EXPECT_EQ(vision.layer_type(), "vision");
  EXPECT_EQ(vision.layers_size(), 0);
  EXPECT_EQ(vision.derived().head_dim(), 80);  // embed_dim 1280 / num_heads 16
  EXPECT_EQ(vision.base(), 10000.0);
  bool named = false;
  for (const v1::RopeValueSource& s : vision.sources()) {
    named = named || s.origin().find("models/qwen2_vl/modeling_qwen2_vl.py") != std::string::npos;
  }
  EXPECT_TRUE(named);
}

// RopeCache with hf_config_json and `layer_type` on `backend` at positions 0 and 4097 (as
// (row, column) ids for "vision"): the status and the response.
grpc::Status CacheOf(const kernels::Backend& backend, const std::string& json,
                     const std::string& layer_type, v1::RopeCacheResponse* resp) {
  TableRegistry tables;
  HandlerContext ctx{&backend, Limits{}, &tables};
  v1::RopeCacheRequest req;
  *req.mutable_positions()->mutable_ids() = layer_type == "vision"
                                                ? testing::Int64Tensor({2, 2}, {0, 3, 0, 5})
                                                : testing::Int64Tensor({2}, {0, 4097});
  req.mutable_config()->set_hf_config_json(json);
  req.mutable_config()->set_layer_type(layer_type);
  req.set_output_dtype(v1::DTYPE_FLOAT64);
  return HandleRopeCache(ctx, req, resp);
}

TEST(HfConfigsTest, Llama4NeedsNoLayerTypeAndVisionNeedsAVisionConfig) {
  const std::string scout = ConfigText(Load("llama-4-scout-17b-16e-instruct"), false);
  Backends backends;
  for (const kernels::Backend* backend : {backends.reference.get(), backends.cpu.get()}) {
    v1::RopeCacheResponse plain;
    v1::RopeCacheResponse chunked;
    ASSERT_TRUE(CacheOf(*backend, scout, "", &plain).ok());
    ASSERT_TRUE(CacheOf(*backend, scout, "chunked_attention", &chunked).ok());
    EXPECT_EQ(plain.derived().layer_type(), "chunked_attention");
    EXPECT_FALSE(plain.derived().nope());
    ASSERT_EQ(plain.derived().inv_freq_size(), chunked.derived().inv_freq_size());
    for (int j = 0; j < plain.derived().inv_freq_size(); ++j) {
      EXPECT_EQ(plain.derived().inv_freq(j), chunked.derived().inv_freq(j)) << j;
    }
    EXPECT_EQ(plain.cos().data(), chunked.cos().data());
    bool named = false;
    for (const std::string& w : plain.derived().warnings()) {
      named = named || w.find("layers 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47 have no RoPE") !=
                           std::string::npos;
    }
    EXPECT_TRUE(named);
  }
  // layer_type "vision" on Qwen2-VL: the tower's RoPE; on a text-only file: which towers exist.
  v1::RopeCacheResponse vision;
  ASSERT_TRUE(
      CacheOf(*backends.cpu, ConfigText(Load("qwen2-vl-2b-instruct"), false), "vision", &vision)
          .ok());
  EXPECT_EQ(vision.derived().head_dim(), 80);
  EXPECT_EQ(vision.derived().layer_type(), "vision");
  v1::RopeCacheResponse none;
  const grpc::Status status =
      CacheOf(*backends.cpu, ConfigText(Load("mistral-7b-instruct-v0.3"), false), "vision", &none);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("has none posenc knows (Qwen2-VL"), std::string::npos)
      << status.error_message();
}

TEST(DescribeRopeTest, ExplicitConfigIsOneGroupAndLayerTypeIsRefused) {
  const std::unique_ptr<kernels::Backend> backend = kernels::MakeReferenceBackend();
  HandlerContext ctx{backend.get(), Limits{}, nullptr};
  v1::DescribeRopeRequest req;
  req.mutable_config()->set_head_dim(64);
  req.mutable_config()->set_base(5e5);
  v1::DescribeRopeResponse resp;
  ASSERT_TRUE(HandleDescribeRope(ctx, req, &resp).ok());
  ASSERT_EQ(resp.groups_size(), 1);
  EXPECT_EQ(resp.groups(0).layers_size(), 0);
  EXPECT_EQ(resp.groups(0).base(), 5e5);
  EXPECT_EQ(resp.groups(0).derived().inv_freq_size(), 32);

  v1::DescribeRopeRequest by_layer;
  by_layer.mutable_config()->set_hf_config_json(ConfigText(Load("gemma-3-27b-it"), false));
  by_layer.mutable_config()->set_layer_type("5");
  const grpc::Status status = HandleDescribeRope(ctx, by_layer, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("config.layer_type"), std::string::npos);
}

void ExpectSameFrequencies(const v1::RopeDerived& a, const v1::RopeDerived& b) {
  ASSERT_EQ(a.inv_freq_size(), b.inv_freq_size());
  for (int j = 0; j < a.inv_freq_size(); ++j) EXPECT_EQ(a.inv_freq(j), b.inv_freq(j)) << j;
  EXPECT_EQ(a.attention_factor(), b.attention_factor());
}

TEST(DescribeRopeTest, DeepSeekV32IndexerIsASubmoduleWithItsOwnPairing) {
  const v1::DescribeRopeResponse resp = DescribeJson(ConfigOnly("deepseek-v3.2-exp"));
  EXPECT_EQ(resp.model_type(), "deepseek_v32");
  ASSERT_EQ(resp.groups_size(), 1);
  const v1::RopeLayerGroup& mla = resp.groups(0);
  EXPECT_EQ(mla.derived().head_dim(), 64);
  EXPECT_EQ(mla.derived().style(), v1::ROPE_STYLE_DEEPSEEK);
  EXPECT_EQ(mla.derived().yarn_low(), 10.0);  // YaRN 40 / 4096: DeepSeek V3's correction range
  ASSERT_TRUE(mla.has_softmax_scale_multiplier());
  ExpectRelative(mla.softmax_scale_multiplier(), 1.8738542070926265, "softmax_scale_multiplier");
  ASSERT_EQ(resp.submodules_size(), 1);
  const v1::RopeSubmodule& indexer = resp.submodules(0);
  EXPECT_EQ(indexer.name(), "indexer");
  EXPECT_EQ(indexer.layers_size(), 61);
  EXPECT_EQ(indexer.rotary_offset(), 0);
  EXPECT_EQ(indexer.derived().head_dim(), 128);
  EXPECT_EQ(indexer.derived().rotary_dim(), 64);
  EXPECT_EQ(indexer.derived().style(), v1::ROPE_STYLE_NEOX);
  ExpectSameFrequencies(indexer.derived(), mla.derived());
  bool pairing = false;
  for (const v1::RopeValueSource& s : indexer.sources()) {
    pairing = pairing ||
              (s.name() == "pairing" && s.key().find("DeepseekV32Indexer") != std::string::npos);
  }
  EXPECT_TRUE(pairing);
  // The request's style is the attention's; the indexer keeps its own.
  const std::unique_ptr<kernels::Backend> backend = kernels::MakeReferenceBackend();
  HandlerContext ctx{backend.get(), Limits{}, nullptr};
  v1::DescribeRopeRequest req;
  req.mutable_config()->set_hf_config_json(ConfigOnly("deepseek-v3.2-exp"));
  req.mutable_config()->set_style(v1::ROPE_STYLE_GPTJ);
  v1::DescribeRopeResponse styled;
  ASSERT_TRUE(HandleDescribeRope(ctx, req, &styled).ok());
  EXPECT_EQ(styled.groups(0).derived().style(), v1::ROPE_STYLE_GPTJ);
  EXPECT_EQ(styled.submodules(0).derived().style(), v1::ROPE_STYLE_NEOX);
  // DescribeRope describes every sub-module: a selector is refused.
  req.mutable_config()->set_submodule("indexer");
  const grpc::Status status = HandleDescribeRope(ctx, req, &styled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("config.submodule: DescribeRope describes every layer"),
            std::string::npos)
      << status.error_message();
  // DeepSeek V3 has no indexer.
  EXPECT_EQ(Describe("deepseek-v3").submodules_size(), 0);
}

TEST(DescribeRopeTest, Glm5IndexerRunsOnTheFullLayersInterleaved) {
  const v1::DescribeRopeResponse resp = DescribeJson(ConfigOnly("glm-5.3"));
  EXPECT_EQ(resp.model_type(), "glm_moe_dsa");
  EXPECT_EQ(resp.num_layers(), 78);
  ASSERT_EQ(resp.groups_size(), 1);
  EXPECT_EQ(resp.groups(0).derived().style(), v1::ROPE_STYLE_DEEPSEEK);
  EXPECT_EQ(resp.groups(0).derived().head_dim(), 64);
  EXPECT_EQ(resp.groups(0).base(), 8e6);
  ASSERT_EQ(resp.submodules_size(), 1);
  const v1::RopeSubmodule& indexer = resp.submodules(0);
  ASSERT_EQ(indexer.layers_size(), 21);
  EXPECT_EQ(indexer.layers(3), 6);
  EXPECT_EQ(indexer.layers(20), 74);
  EXPECT_EQ(indexer.derived().style(), v1::ROPE_STYLE_DEEPSEEK);
  ExpectSameFrequencies(indexer.derived(), resp.groups(0).derived());
  EXPECT_EQ(indexer.warnings_size(), 0);
}

// RopeCache of `config` at positions 0 and 4097 on `backend`.
grpc::Status CacheWith(const kernels::Backend& backend, const v1::RopeConfig& config,
                       v1::RopeCacheResponse* resp) {
  TableRegistry tables;
  HandlerContext ctx{&backend, Limits{}, &tables};
  v1::RopeCacheRequest req;
  *req.mutable_positions()->mutable_ids() = testing::Int64Tensor({2}, {0, 4097});
  *req.mutable_config() = config;
  req.set_output_dtype(v1::DTYPE_FLOAT64);
  return HandleRopeCache(ctx, req, resp);
}

TEST(HfConfigsTest, IndexerSubmoduleThroughRopeCache) {
  Backends backends;
  v1::RopeConfig config;
  config.set_hf_config_json(ConfigOnly("deepseek-v3.2-exp"));
  for (const kernels::Backend* backend : {backends.reference.get(), backends.cpu.get()}) {
    v1::RopeCacheResponse mla;
    ASSERT_TRUE(CacheWith(*backend, config, &mla).ok());
    v1::RopeConfig with = config;
    with.set_submodule("indexer");
    with.set_layer_type("60");
    v1::RopeCacheResponse indexer;
    const grpc::Status status = CacheWith(*backend, with, &indexer);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(indexer.derived().submodule(), "indexer");
    EXPECT_EQ(indexer.derived().head_dim(), 128);
    EXPECT_EQ(indexer.derived().rotary_dim(), 64);
    EXPECT_EQ(indexer.derived().style(), v1::ROPE_STYLE_NEOX);
    ExpectSameFrequencies(indexer.derived(), mla.derived());
    EXPECT_EQ(indexer.cos().data(), mla.cos().data());  // one rotary table
    EXPECT_EQ(mla.derived().submodule(), "");
  }
  // GLM-5's shared layers have no indexer; without hf_config_json there is none to select.
  v1::RopeConfig glm;
  glm.set_hf_config_json(ConfigOnly("glm-5.3"));
  glm.set_submodule("indexer");
  glm.set_layer_type("3");
  v1::RopeCacheResponse resp;
  grpc::Status status = CacheWith(*backends.cpu, glm, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("config.submodule: layer 3 does not run the indexer"),
            std::string::npos)
      << status.error_message();
  v1::RopeConfig explicit_config;
  explicit_config.set_head_dim(64);
  explicit_config.set_submodule("indexer");
  status = CacheWith(*backends.cpu, explicit_config, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "config.submodule: only used with config.hf_config_json, got \"indexer\""),
            std::string::npos)
      << status.error_message();
}

// ApplyRope of q = e_`channel` (one token at position 1, one head of 128) with `json`'s indexer.
std::vector<double> RotateUnitByIndexer(const kernels::Backend& backend, const std::string& json,
                                        int channel) {
  TableRegistry tables;
  HandlerContext ctx{&backend, Limits{}, &tables};
  std::vector<double> q(128, 0.0);
  q[channel] = 1.0;
  v1::ApplyRopeRequest req;
  *req.mutable_q() = testing::MakeTensor(v1::DTYPE_FLOAT64, {1, 1, 1, 128}, q);
  *req.mutable_positions()->mutable_ids() = testing::Int64Tensor({1, 1}, {1});
  req.mutable_config()->set_hf_config_json(json);
  req.mutable_config()->set_submodule("indexer");
  v1::ApplyRopeResponse resp;
  const grpc::Status status = HandleApplyRope(ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return status.ok() ? testing::Values<double>(resp.q()) : std::vector<double>(128);
}

TEST(HfConfigsTest, IndexerApplyRopeByHand) {
  // Base 10000, no scaling, rotary 64 of 128: omega_0 = 1, so position 1 turns pair 0 by 1 rad.
  constexpr double kCos1 = 0.5403023058681398;
  constexpr double kSin1 = 0.8414709848078965;
  Backends backends;
  for (const kernels::Backend* backend : {backends.reference.get(), backends.cpu.get()}) {
    // DeepSeek-V3.2: NEOX on the first 64 channels; channels 64..127 pass through.
    std::vector<double> out = RotateUnitByIndexer(
        *backend, R"({"model_type": "deepseek_v32", "num_hidden_layers": 2})", 0);
    EXPECT_NEAR(out[0], kCos1, 1e-15);
    EXPECT_NEAR(out[32], kSin1, 1e-15);
    for (int c = 64; c < 128; ++c) EXPECT_EQ(out[c], 0.0) << c;
    out = RotateUnitByIndexer(*backend, R"({"model_type": "deepseek_v32", "num_hidden_layers": 2})",
                              70);
    EXPECT_EQ(out[70], 1.0);
    // GLM-5: interleaved pairs (0, 1), the output de-interleaved as transformers'.
    out = RotateUnitByIndexer(*backend, R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 2,
      "indexer_rope_interleave": true})",
                              1);
    EXPECT_NEAR(out[32], kCos1, 1e-15);
    EXPECT_NEAR(out[0], -kSin1, 1e-15);
  }
}

}  // namespace
}  // namespace posenc::server
