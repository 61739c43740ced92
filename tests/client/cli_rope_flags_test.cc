// Every field of posenc.v1.RopeConfig and RopeScaling, walked from the descriptors, has a flag of
// the CLI (client/cli/rope_config.cc) that sets it: the row's command line, parsed with the CLI's
// RoPE flags and converted to the wire by the client library, sets the field. A field added to
// the .proto fails here until the CLI has a flag for it (and this table a row).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/flags.h"
#include "client/cli/rope_config.h"
#include "client/convert.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The field's path ("scaling.factor") -> a command line of the CLI's RoPE flags that sets it.
// "@config.json" stands for the path of a config.json written by the test.
const std::map<std::string, std::vector<std::string>>& FlagOfField() {
  static const auto* const kRows = new std::map<std::string, std::vector<std::string>>{
      {"head_dim", {"--head-dim", "64"}},
      {"rotary_dim", {"--rotary-dim", "32"}},
      {"base", {"--base", "500000"}},
      {"style", {"--style", "gptj"}},
      {"scaling.type", {"--scaling", "yarn"}},
      {"scaling.factor", {"--factor", "4"}},
      {"scaling.original_max_position_embeddings", {"--original-max-pos", "4096"}},
      {"scaling.beta_fast", {"--beta-fast", "16"}},
      {"scaling.beta_slow", {"--beta-slow", "2"}},
      {"scaling.truncate", {"--no-truncate"}},
      {"scaling.mscale", {"--mscale", "1"}},
      {"scaling.mscale_all_dim", {"--mscale-all-dim", "1"}},
      {"scaling.attention_factor", {"--attention-factor", "1.2"}},
      {"scaling.low_freq_factor", {"--low-freq-factor", "1"}},
      {"scaling.high_freq_factor", {"--high-freq-factor", "4"}},
      {"scaling.long_factor", {"--long-factor", "1,2"}},
      {"scaling.short_factor", {"--short-factor", "1,2"}},
      {"scaling.partial_rotary_factor", {"--partial-rotary-factor", "0.5"}},
      {"scaling.alpha", {"--alpha", "50"}},
      {"max_position_embeddings", {"--max-pos", "8192"}},
      {"mrope_section", {"--mrope-section", "16,8,8"}},
      {"mrope_layout", {"--mrope-layout", "interleaved"}},
      {"frequency_axes", {"--frequency-axes", "0,1,2,0"}},
      {"inverse", {"--inverse"}},
      {"apply_attention_factor", {"--no-attention-factor"}},
      {"seq_len", {"--seq-len", "100"}},
      {"hf_config_json", {"--hf-config", "@config.json"}},
      {"layer_type", {"--layer-type", "full_attention"}},
      {"submodule", {"--submodule", "indexer"}},
      {"freq_factors", {"--freq-factors", "1,2"}},
  };
  return *kRows;
}

// Every field path of `message` (message fields walked into: "scaling.factor").
void FieldPaths(const google::protobuf::Descriptor* message, const std::string& prefix,
                std::vector<const FieldDescriptor*>* fields, std::vector<std::string>* paths) {
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* f = message->field(i);
    const std::string path = prefix + std::string(f->name());
    if (f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated()) {
      FieldPaths(f->message_type(), path + ".", fields, paths);
      continue;
    }
    fields->push_back(f);
    paths->push_back(path);
  }
}

// Whether the field at `path` of `config` is set (present, or not empty).
bool IsSet(const v1::RopeConfig& config, const std::string& path) {
  const Message* message = &config;
  std::string rest = path;
  for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
    const FieldDescriptor* f = message->GetDescriptor()->FindFieldByName(rest.substr(0, dot));
    message = &message->GetReflection()->GetMessage(*message, f);
  }
  const FieldDescriptor* f = message->GetDescriptor()->FindFieldByName(rest);
  return f->is_repeated() ? message->GetReflection()->FieldSize(*message, f) > 0
                          : message->GetReflection()->HasField(*message, f);
}

TEST(CliRopeFlagsTest, EveryRopeConfigFieldHasAFlagThatSetsIt) {
  const std::string json_path =
      (std::filesystem::path(::testing::TempDir()) / "cli_rope_flags_config.json").string();
  std::ofstream(json_path) << R"({"head_dim": 64})";
  std::vector<const FieldDescriptor*> fields;
  std::vector<std::string> paths;
  FieldPaths(v1::RopeConfig::descriptor(), "", &fields, &paths);
  std::set<std::string> cli_flags;
  for (const FlagSpec& spec : RopeConfigFlags()) cli_flags.insert(std::string(spec.name));
  for (const std::string& path : paths) {
    const auto row = FlagOfField().find(path);
    if (row == FlagOfField().end()) {
      ADD_FAILURE() << "posenc.v1.RopeConfig." << path << " has no CLI flag: add one to "
                    << "RopeConfigFlags() and ReadRopeConfigFlags() (client/cli/rope_config.cc), "
                    << "then a row {\"" << path << "\", {\"--FLAG\", \"VALUE\"}} to FlagOfField() "
                    << "here";
      continue;
    }
    std::vector<std::string> args = row->second;
    for (std::string& a : args) {
      if (a == "@config.json") a = json_path;
    }
    EXPECT_TRUE(cli_flags.count(args[0].substr(2)) == 1)
        << path << ": " << args[0] << " is not a flag of RopeConfigFlags()";
    const FlagGroup* groups[] = {&RopeConfigFlags()};
    ParsedFlags flags;
    const absl::Status parsed = ParseFlags(args, 0, groups, false, &flags, nullptr);
    ASSERT_TRUE(parsed.ok()) << absl::StrJoin(args, " ") << ": " << parsed;
    const absl::StatusOr<client::RopeConfig> config = ReadRopeConfigFlags(flags);
    ASSERT_TRUE(config.ok()) << absl::StrJoin(args, " ") << ": " << config.status();
    v1::RopeConfig wire;
    client::internal::ToProto(*config, &wire);
    EXPECT_TRUE(IsSet(wire, path)) << absl::StrJoin(args, " ") << " does not set RopeConfig."
                                   << path << " (" << wire.ShortDebugString() << ")";
  }
  // Rows of fields the .proto no longer has.
  for (const auto& [path, args] : FlagOfField()) {
    EXPECT_NE(std::find(paths.begin(), paths.end(), path), paths.end())
        << "FlagOfField() has a row for RopeConfig." << path << ", which the .proto does not have";
  }
  std::filesystem::remove(json_path);
}

}  // namespace
}  // namespace posenc::cli
