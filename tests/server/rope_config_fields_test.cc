// The RopeConfig field list lives in one place, posenc.proto; every mirror is checked against it
// here by walking the descriptors of posenc.v1.RopeConfig and RopeScaling:
//  - each field changes the kernels' config so that the frequency cache's key changes
//    (kernels::ForEachRopeField builds the key: a forgotten field would be a silent wrong hit);
//  - each field reaches the wire from the C++ client's struct (client::RopeConfig).
// Adding a field to the .proto fails this test until the table below has a row for it, and the
// row fails until the server's conversion, the kernels' field list and the client carry it.
// (The CLI's flags are held to the same list by tests/client's flag test; Python's by its tests.)
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "client/convert.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/rope/config.h"
#include "kernels/rope/frequency_cache.h"
#include "posenc/client.h"
#include "posenc/v1/posenc.pb.h"
#include "server/convert.h"

namespace posenc::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

constexpr char kLayeredJson[] =
    R"({"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 10000.0,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "linear", "factor": 4.0,
                                               "rope_theta": 1000000.0}}})";

struct FieldRow {
  std::string base = "head_dim: 64";  // text format of a v1::RopeConfig
  std::string variant;                // the same with the field set otherwise
  std::function<void(client::RopeConfig&)> set_client;
};

std::string Json(const char* json) {
  std::string text = "\"";
  for (const char* c = json; *c != '\0'; ++c) {
    if (*c == '"' || *c == '\\') text += '\\';
    text += *c == '\n' ? ' ' : *c;
  }
  return text + "\"";
}

// One row per field of RopeConfig ("name") and RopeScaling ("scaling.name").
std::map<std::string, FieldRow> Rows() {
  using C = client::RopeConfig;
  const std::string layered = "hf_config_json: " + Json(kLayeredJson);
  // DeepSeek-V3.2: the attention (64 wide, DEEPSEEK) or its DSA indexer (128, NEOX).
  const std::string indexed =
      "hf_config_json: " + Json(R"({"model_type": "deepseek_v32", "num_hidden_layers": 2})");
  return {
      {"head_dim", {.variant = "head_dim: 128", .set_client = [](C& c) { c.head_dim = 128; }}},
      {"rotary_dim",
       {.variant = "head_dim: 64 rotary_dim: 32", .set_client = [](C& c) { c.rotary_dim = 32; }}},
      {"base", {.variant = "head_dim: 64 base: 500000", .set_client = [](C& c) { c.base = 5e5; }}},
      {"style",
       {.variant = "head_dim: 64 style: ROPE_STYLE_GPTJ",
        .set_client = [](C& c) { c.style = client::RopeStyle::kGptj; }}},
      {"scaling",
       {.variant = "head_dim: 64 scaling { type: ROPE_SCALING_LINEAR factor: 2 }",
        .set_client = [](C& c) { c.scaling.factor = 2; }}},
      {"scaling.type",
       {.variant = "head_dim: 64 scaling { type: ROPE_SCALING_NTK }",
        .set_client = [](C& c) { c.scaling.type = client::RopeScalingType::kNtk; }}},
      {"scaling.factor",
       {.variant = "head_dim: 64 scaling { factor: 2 }",
        .set_client = [](C& c) { c.scaling.factor = 2; }}},
      {"scaling.original_max_position_embeddings",
       {.variant = "head_dim: 64 scaling { original_max_position_embeddings: 4096 }",
        .set_client = [](C& c) { c.scaling.original_max_position_embeddings = 4096; }}},
      {"scaling.beta_fast",
       {.variant = "head_dim: 64 scaling { beta_fast: 16 }",
        .set_client = [](C& c) { c.scaling.beta_fast = 16; }}},
      {"scaling.beta_slow",
       {.variant = "head_dim: 64 scaling { beta_slow: 2 }",
        .set_client = [](C& c) { c.scaling.beta_slow = 2; }}},
      {"scaling.truncate",
       {.variant = "head_dim: 64 scaling { truncate: false }",
        .set_client = [](C& c) { c.scaling.truncate = false; }}},
      {"scaling.mscale",
       {.variant = "head_dim: 64 scaling { mscale: 1 }",
        .set_client = [](C& c) { c.scaling.mscale = 1; }}},
      {"scaling.mscale_all_dim",
       {.variant = "head_dim: 64 scaling { mscale_all_dim: 1 }",
        .set_client = [](C& c) { c.scaling.mscale_all_dim = 1; }}},
      {"scaling.attention_factor",
       {.variant = "head_dim: 64 scaling { attention_factor: 1.5 }",
        .set_client = [](C& c) { c.scaling.attention_factor = 1.5; }}},
      {"scaling.low_freq_factor",
       {.variant = "head_dim: 64 scaling { low_freq_factor: 1 }",
        .set_client = [](C& c) { c.scaling.low_freq_factor = 1; }}},
      {"scaling.high_freq_factor",
       {.variant = "head_dim: 64 scaling { high_freq_factor: 4 }",
        .set_client = [](C& c) { c.scaling.high_freq_factor = 4; }}},
      {"scaling.long_factor",
       {.variant = "head_dim: 64 scaling { long_factor: [2] }",
        .set_client = [](C& c) { c.scaling.long_factor = {2}; }}},
      {"scaling.short_factor",
       {.variant = "head_dim: 64 scaling { short_factor: [2] }",
        .set_client = [](C& c) { c.scaling.short_factor = {2}; }}},
      {"scaling.partial_rotary_factor",
       {.variant = "head_dim: 64 scaling { partial_rotary_factor: 0.5 }",
        .set_client = [](C& c) { c.scaling.partial_rotary_factor = 0.5; }}},
      {"scaling.alpha",
       {.variant = "head_dim: 64 scaling { alpha: 50 }",
        .set_client = [](C& c) { c.scaling.alpha = 50; }}},
      {"max_position_embeddings",
       {.variant = "head_dim: 64 max_position_embeddings: 4096",
        .set_client = [](C& c) { c.max_position_embeddings = 4096; }}},
      {"mrope_section",
       {.variant = "head_dim: 64 mrope_section: [16, 8, 8]",
        .set_client =
            [](C& c) {
              c.mrope_section = {16, 8, 8};
            }}},
      {"mrope_layout",
       {.variant = "head_dim: 64 mrope_layout: MROPE_LAYOUT_INTERLEAVED",
        .set_client = [](C& c) { c.mrope_layout = client::MropeLayout::kInterleaved; }}},
      {"inverse",
       {.variant = "head_dim: 64 inverse: true", .set_client = [](C& c) { c.inverse = true; }}},
      {"apply_attention_factor",
       {.variant = "head_dim: 64 apply_attention_factor: false",
        .set_client = [](C& c) { c.apply_attention_factor = false; }}},
      {"seq_len",
       {.base = "head_dim: 64 scaling { type: ROPE_SCALING_LONGROPE }",
        .variant = "head_dim: 64 scaling { type: ROPE_SCALING_LONGROPE } seq_len: 9000",
        .set_client = [](C& c) { c.seq_len = 9000; }}},
      {"hf_config_json",
       {.variant = "hf_config_json: '{\"hidden_size\": 256, \"num_attention_heads\": 4}'",
        .set_client = [](C& c) { c.hf_config_json = "{}"; }}},
      {"layer_type",
       {.base = layered + " layer_type: 'sliding_attention'",
        .variant = layered + " layer_type: 'full_attention'",
        .set_client = [](C& c) { c.layer_type = "full_attention"; }}},
      {"submodule",
       {.base = indexed,
        .variant = indexed + " submodule: 'indexer'",
        .set_client = [](C& c) { c.submodule = "indexer"; }}},
      {"freq_factors",
       {.variant = "head_dim: 64 freq_factors: [2]",
        .set_client = [](C& c) { c.freq_factors = {2}; }}},
      {"frequency_axes",
       {.variant = "head_dim: 4 frequency_axes: [0, 1]",
        .set_client =
            [](C& c) {
              c.frequency_axes = {0, 1};
            }}},
  };
}

// Every field of RopeConfig, with RopeScaling's as "scaling.<name>".
std::vector<std::string> ProtoFieldNames() {
  std::vector<std::string> names;
  const Descriptor* config = v1::RopeConfig::descriptor();
  for (int i = 0; i < config->field_count(); ++i) {
    const FieldDescriptor* field = config->field(i);
    names.push_back(field->name());
    if (field->message_type() == v1::RopeScaling::descriptor()) {
      for (int j = 0; j < field->message_type()->field_count(); ++j) {
        names.push_back(field->name() + "." + field->message_type()->field(j)->name());
      }
    }
  }
  return names;
}

std::string CacheKey(const std::string& text) {
  v1::RopeConfig wire;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &wire)) << text;
  absl::StatusOr<kernels::RopeConfig> config = ToRopeConfig(wire);
  EXPECT_TRUE(config.ok()) << text << ": " << config.status();
  return config.ok() ? kernels::RopeFrequencyCache::Key(*config, 100) : "";
}

// Whether `path` ("scaling.factor") is set in `message` (present, non-empty or non-default).
bool IsSet(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Message* at = &message;
  std::string rest = path;
  for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
    const FieldDescriptor* field = at->GetDescriptor()->FindFieldByName(rest.substr(0, dot));
    if (field == nullptr || !at->GetReflection()->HasField(*at, field)) return false;
    at = &at->GetReflection()->GetMessage(*at, field);
  }
  const FieldDescriptor* field = at->GetDescriptor()->FindFieldByName(rest);
  if (field == nullptr) return false;
  return field->is_repeated() ? at->GetReflection()->FieldSize(*at, field) > 0
                              : at->GetReflection()->HasField(*at, field);
}

TEST(RopeConfigFieldsTest, EveryProtoFieldHasARow) {
  const std::map<std::string, FieldRow> rows = Rows();
  for (const std::string& name : ProtoFieldNames()) {
    EXPECT_TRUE(rows.count(name) == 1)
        << "posenc.v1.RopeConfig." << name << " has no row here: carry it through "
        << "server/convert.cc (ToRopeConfig), kernels::RopeConfig and kernels::ForEachRopeField "
        << "(the cache key), client::RopeConfig and client/convert.cc, the CLI's flags and the "
           "Python client, then add its row";
  }
  EXPECT_EQ(rows.size(), ProtoFieldNames().size()) << "a row names no field of the proto";
}

TEST(RopeConfigFieldsTest, EveryFieldChangesTheFrequencyCacheKey) {
  for (const auto& [name, row] : Rows()) {
    EXPECT_NE(CacheKey(row.base), CacheKey(row.variant))
        << name << ": the frequency cache would give the base config's frequencies";
  }
}

TEST(RopeConfigFieldsTest, EveryFieldReachesTheWireFromTheClient) {
  for (const auto& [name, row] : Rows()) {
    client::RopeConfig config;
    row.set_client(config);
    v1::RopeConfig wire;
    client::internal::ToProto(config, &wire);
    EXPECT_TRUE(IsSet(wire, name)) << name << " is not set on the wire by client::RopeConfig";
  }
}

}  // namespace
}  // namespace posenc::server
