// The `posenc` CLI binary (POSENC_CLI_PATH) run with popen against the in-process server over
// TCP: table output, JSON output, exit codes and stderr of errors, and .npy round trips (input
// files written here byte by byte, outputs read back with tests/common/npy.h, the parser of the
// .npy codec whose writer the CLI uses; tests/kernels/npy_test.cc checks both halves against
// hand-written bytes), `posenc bench` (summary, JSON, usage errors, a dead server); --png
// pictures decoded with libpng, and `posenc check` on caches and rotations of known error.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <png.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client_test_util.h"
#include "nlohmann/json.hpp"
#include "png_test_util.h"
#include "posenc/client.h"
#include "tests/common/command.h"
#include "tests/common/npy.h"

#ifndef POSENC_CLI_PATH
#error "POSENC_CLI_PATH must name the posenc binary (tests/CMakeLists.txt)"
#endif
#ifndef POSENC_HF_CONFIGS_DIR
#error "POSENC_HF_CONFIGS_DIR must name tests/hf_configs"
#endif

namespace posenc::client {
namespace {

using CliResult = ::posenc::testing::CommandResult;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("posenc_cli_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `posenc --server 127.0.0.1:PORT <args>`; stdout and stderr captured separately.
  CliResult Run(const std::string& args) const {
    return ::posenc::testing::RunCommand(
        absl::StrCat(POSENC_CLI_PATH, " --server ", testing::ServerAddress(), " ", args),
        Path("stderr.txt"));
  }

  // Runs `args`, expecting exit code `code` and, when `stream` is given, `needle` in that stream
  // (&CliResult::out or &CliResult::err).
  void ExpectExit(const std::string& args, int code, std::string CliResult::*stream = nullptr,
                  const std::string& needle = "") const {
    const CliResult r = Run(args);
    EXPECT_EQ(r.exit_code, code) << args << "\n" << r.err;
    if (stream != nullptr) {
      EXPECT_NE((r.*stream).find(needle), std::string::npos) << r.*stream;
    }
  }

  // A usage error: exit code 2 and `needle` in stderr.
  void ExpectUsageError(const std::string& args, const std::string& needle) const {
    ExpectExit(args, 2, &CliResult::err, needle);
  }
  // Exit code 0 and `needle` in stdout.
  void ExpectOutput(const std::string& args, const std::string& needle) const {
    ExpectExit(args, 0, &CliResult::out, needle);
  }

  std::filesystem::path dir_;
};

// A C-order .npy file (format 1.0) of dtype code `descr` holding `data`, put together by hand
// (tests/common/npy.h), independently of the .npy codec.
void WriteNpyByHand(const std::string& path, const std::string& descr,
                    const std::vector<int64_t>& shape, const std::string& data) {
  std::string dims;
  for (int64_t d : shape) absl::StrAppend(&dims, d, ", ");
  const std::string bytes =
      posenc::testing::NpyFileBytes(posenc::testing::NpyDict(descr, "(" + dims + ")"), data);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The bytes of `values` in the host's (little-endian) order, or reversed per element.
std::string FloatBytes(const std::vector<float>& values, bool big_endian = false) {
  std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  if (big_endian) {
    for (size_t i = 0; i < bytes.size(); i += 4) std::reverse(&bytes[i], &bytes[i] + 4);
  }
  return bytes;
}

void WriteFloat32Npy(const std::string& path, const std::vector<int64_t>& shape,
                     const std::vector<float>& values) {
  WriteNpyByHand(path, "<f4", shape, FloatBytes(values));
}

TEST_F(CliTest, SinusoidalPrintsAnAlignedTable) {
  CliResult r = Run("sinusoidal --positions 0:4 --dim 6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("table: FLOAT32 [4, 6]"), std::string::npos) << r.out;
  // Row of position 1: sin(1) = 0.841471, cos(1) = 0.540302 (6 significant digits).
  EXPECT_NE(r.out.find("0.841471"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.540302"), std::string::npos) << r.out;
  // Rows are labelled with their positions under a "pos" column.
  EXPECT_NE(r.out.find("pos |"), std::string::npos) << r.out;
}

TEST_F(CliTest, BigTablesAreSummarized) {
  CliResult r = Run("sinusoidal --positions 0:1000 --dim 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("..."), std::string::npos);
  EXPECT_LT(r.out.size(), 4000u);
  EXPECT_NE(r.out.find("999 |"), std::string::npos) << r.out;
}

TEST_F(CliTest, JsonOutputParsesAndMatchesTheLibrary) {
  CliResult r =
      Run("--format json rope-cache --positions 3:7 --head-dim 8 --scaling yarn "
          "--factor 4 --original-max-pos 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cos"]["shape"], (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(j["cos"]["dtype"], "FLOAT32");
  EXPECT_EQ(j["derived"]["scaling"], "yarn");
  EXPECT_GT(j["derived"]["attention_factor"].get<double>(), 1.0);

  std::unique_ptr<Client> client = testing::ConnectToSharedServer();
  RopeCacheOptions options;
  options.positions = Positions::Range(3, 4);
  options.config.head_dim = 8;
  options.config.scaling.type = RopeScalingType::kYarn;
  options.config.scaling.factor = 4.0;
  options.config.scaling.original_max_position_embeddings = 64;
  absl::StatusOr<RopeCacheResult> expected = client->RopeCache(options);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(j["sin"]["data"].get<std::vector<double>>(), expected->sin.ToDoubles());
  EXPECT_EQ(j["cos"]["data"].get<std::vector<double>>(), expected->cos.ToDoubles());
}

TEST_F(CliTest, JsonSingleTensorAndNonFiniteValues) {
  CliResult slopes = Run("--format json alibi-slopes --heads 8");
  ASSERT_EQ(slopes.exit_code, 0) << slopes.err;
  const nlohmann::json s = nlohmann::json::parse(slopes.out);
  EXPECT_EQ(s["shape"], (std::vector<int64_t>{8}));
  EXPECT_EQ(s["data"][0].get<double>(), 0.5);
  EXPECT_EQ(s["data"][7].get<double>(), std::ldexp(1.0, -8));

  CliResult bias = Run("alibi-bias --heads 2 --q-len 3 --k-len 3 --query-offset 0 --format json");
  ASSERT_EQ(bias.exit_code, 0) << bias.err;
  const nlohmann::json b = nlohmann::json::parse(bias.out);
  EXPECT_EQ(b["shape"], (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(b["data"][1], "-inf");  // key 1 is in the future of query 0
  EXPECT_EQ(b["slopes"].size(), 2u);
}

TEST_F(CliTest, CompactBiasExpandedLocallyEqualsTheFullForm) {
  CliResult full = Run("--format json alibi-bias --heads 3 --q-len 4 --k-len 7");
  CliResult compact =
      Run("--format json alibi-bias --heads 3 --q-len 4 --k-len 7 --form compact --expand");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_EQ(compact.exit_code, 0) << compact.err;
  EXPECT_EQ(nlohmann::json::parse(full.out), nlohmann::json::parse(compact.out));

  CliResult t5_full = Run("--format json relative-bias --q-len 5 --k-len 9 --random-table 3");
  CliResult t5_compact = Run(
      "--format json relative-bias --q-len 5 --k-len 9 --random-table 3 --form compact --expand");
  ASSERT_EQ(t5_full.exit_code, 0) << t5_full.err;
  EXPECT_EQ(nlohmann::json::parse(t5_full.out), nlohmann::json::parse(t5_compact.out));
}

TEST_F(CliTest, AnalyzePrintsEachPropertyAndJson) {
  CliResult text =
      Run("analyze --encoding alibi --heads 1 --count 1000 --collision bfloat16 "
          "--properties uniqueness,bounds,relative");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("first bfloat16 collision: positions 256 and 257"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("depends on key - query only: yes"), std::string::npos) << text.out;
  CliResult json =
      Run("analyze --encoding sinusoidal --dim 16 --count 300 --distances 1,7 "
          "--properties bounds,relative --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["family"], "sinusoidal");
  EXPECT_NEAR(j["bounds"]["norms"]["max"].get<double>(), std::sqrt(8.0), 1e-12);
  EXPECT_EQ(j["relative"]["rotations"].size(), 2u);
  EXPECT_LT(j["relative"]["rotations"][1]["residual"].get<double>(), 1e-13);
  CliResult png = Run(absl::StrCat("analyze --encoding alibi --heads 2 --count 64 ",
                                   "--properties decay --png ", Path("decay.png")));
  ASSERT_EQ(png.exit_code, 0) << png.err;
  EXPECT_TRUE(std::filesystem::exists(Path("decay.png")));
  ExpectUsageError("analyze --count 10", "--encoding is required");
  ExpectUsageError("analyze --encoding alibi --heads 2 --count 10 --properties nope",
                   "--properties: expected names of");
  ExpectExit("analyze --encoding sinusoidal --dim 8 --count 10 --distances 10", 1, &CliResult::err,
             "distances[0]");
}

TEST_F(CliTest, AnalyzeDrawsTheSimilarityHeatmapBesideTheCurves) {
  // Similarity alone: the heatmap of the 128 x 128 cells (512 positions in cells of 4).
  CliResult alone = Run(absl::StrCat(
      "analyze --encoding sinusoidal --dim 64 --count 512 --properties similarity --window 512 "
      "--max-cells 128 --png ",
      Path("similarity.png")));
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  const ::posenc::testing::Picture heatmap = ::posenc::testing::DecodePng(Path("similarity.png"));
  // 128 cells magnified 4 times (512 px) plus axes, labels and the colour bar.
  EXPECT_GT(heatmap.width, 512);
  EXPECT_LT(heatmap.width, 1000);
  EXPECT_GT(heatmap.height, 512);
  EXPECT_GT(heatmap.Colourful(), 512 * 512);  // the cells and the colour bar
  EXPECT_GT(heatmap.DistinctColours(), 50u);  // not constant: the similarity falls off the diagonal
  // With decay curves: the line plots on the left, the same heatmap on the right.
  CliResult both = Run(absl::StrCat(
      "analyze --encoding rope --head-dim 32 --count 512 --properties decay,similarity "
      "--window 512 --max-cells 128 --png ",
      Path("both.png")));
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const ::posenc::testing::Picture picture = ::posenc::testing::DecodePng(Path("both.png"));
  EXPECT_GT(picture.width, heatmap.width + 400);
  EXPECT_GE(picture.height, heatmap.height);
  EXPECT_GT(picture.Colourful(), 512 * 512);
  // Nothing drawable: a usage error that names the properties that draw.
  ExpectUsageError(absl::StrCat("analyze --encoding alibi --heads 2 --count 64 --properties bounds "
                                "--png ",
                                Path("none.png")),
                   "--png: nothing to draw");
}

TEST_F(CliTest, ServerErrorsPrintTheCodeAndExitOne) {
  CliResult r = Run("rope-cache --positions 0:4 --head-dim 8 --rotary-dim 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("error: INVALID_ARGUMENT: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("rotary_dim"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  ExpectUsageError("sinusoidal --positions 0:4 --dim 6 --no-such-flag",
                   "unknown flag --no-such-flag");
  ExpectUsageError("alibi-slopes --heads many", "--heads expects an integer");
  ExpectExit("sinusoidal --positions 5:2 --dim 4", 2);
  ExpectUsageError("alibi-bias --heads 2", "--q-len is required");
  ExpectUsageError("rope-cache --positions 0:4", "--head-dim is required");
  ExpectExit("no-such-command", 2);
  // Close misspellings get a suggestion.
  ExpectUsageError("rope-cach --positions 0:4 --head-dim 8",
                   "unknown subcommand 'rope-cach' (did you mean 'rope-cache'?)");
  ExpectUsageError("alibi-slopes --head 4", "unknown flag --head (did you mean '--heads'?)");
  ExpectUsageError("--timeout 1x info", "--timeout expects a positive duration");
  // Durations as absl::ParseDuration reads them.
  ExpectExit("--timeout 1m30s alibi-slopes --heads 2", 0);
}

TEST_F(CliTest, NpyToStandardOutputIsTheWholeOutput) {
  CliResult r = Run("sinusoidal --positions 0:4 --dim 4 --npy -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GE(r.out.size(), 10u);
  EXPECT_EQ(r.out.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(r.out.find("'shape': (4, 4)"), std::string::npos);
  EXPECT_EQ(r.out.size() % 64, (128 + 4 * 4 * 4) % 64);  // header padded to 64, then 16 floats
}

TEST_F(CliTest, HelpExitsZero) {
  ExpectOutput("--help", "apply-rope");
  ExpectOutput("apply-rope --help", "--out-q FILE");
}

TEST_F(CliTest, VersionPrintsTheProjectVersion) {
  ExpectOutput("--version", absl::StrCat("posenc ", POSENC_PROJECT_VERSION, " ("));
  ExpectOutput("info --version", absl::StrCat("posenc ", POSENC_PROJECT_VERSION));
}

TEST_F(CliTest, DescribeListsEveryLayerGroup) {
  // The config of the test file (tests/hf_configs wraps it with what transformers computes).
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) + "/llama-4-scout-17b-16e-instruct.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json file = nlohmann::json::parse(in);
  std::ofstream(Path("config.json")) << file["config"].dump();

  CliResult table = Run(absl::StrCat("describe --hf-config ", Path("config.json")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("model_type: llama4_text"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("num_layers: 48"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("NoPE"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("llama3"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("warning: "), std::string::npos) << table.out;
  // The NoPE layers' q scale and where each value came from.
  EXPECT_NE(table.out.find("attention temperature: q *= log(floor((p + 1) / 8192) + 1) * 0.1 + 1"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("text_config.rope_theta"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("nested config (text_config)"), std::string::npos) << table.out;

  CliResult json = Run(absl::StrCat("--format json describe --hf-config ", Path("config.json")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["groups"].size(), 2u);
  EXPECT_EQ(j["groups"][0]["rope_type"], "llama3");
  EXPECT_EQ(j["groups"][0]["style"], "gptj");
  EXPECT_EQ(j["groups"][0]["base"], 500000.0);
  EXPECT_TRUE(j["groups"][0]["softmax_scale_multiplier"].is_null());
  EXPECT_EQ(j["groups"][1]["nope"], true);
  EXPECT_EQ(j["groups"][1]["layers"], file["hf_expected"]["per_layer"]["nope_layers"]);
  EXPECT_FALSE(j["groups"][0].contains("attn_temperature_tuning"));
  EXPECT_EQ(j["groups"][1]["attn_temperature_tuning"]["floor_scale"], 8192.0);
  EXPECT_EQ(j["groups"][1]["attn_temperature_tuning"]["attn_scale"], 0.1);
  EXPECT_EQ(j["groups"][1]["attn_temperature_tuning"]["position_offset"], 1.0);
  EXPECT_EQ(j["groups"][1]["attn_temperature_tuning"]["key"], "attn_temperature_tuning");
  bool base_source = false;
  for (const auto& s : j["groups"][0]["sources"]) {
    base_source = base_source || (s["name"] == "base" && s["key"] == "text_config.rope_theta" &&
                                  s["origin"] == "nested config (text_config)");
  }
  EXPECT_TRUE(base_source) << j["groups"][0]["sources"].dump();
  EXPECT_FALSE(j["warnings"].empty());

  CliResult usage = Run("describe");
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
}

TEST_F(CliTest, DescribePrintsLlama4ScalingBeta) {
  // Ministral 3's class defaults: beta 0.1 over 16384, at position p (no + 1), after the rotation.
  std::ofstream(Path("ministral3.json")) << R"({"model_type": "ministral3"})";
  CliResult table = Run(absl::StrCat("describe --hf-config ", Path("ministral3.json")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("attention temperature: q *= log(floor(p / 16384) + 1) * 0.1 + 1 "
                           "(after the rotation); at p = 262143: 1.27726"),
            std::string::npos)
      << table.out;
  CliResult json =
      Run(absl::StrCat("--format json describe --hf-config ", Path("ministral3.json")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["groups"].size(), 1u);
  const nlohmann::json& t = j["groups"][0]["attn_temperature_tuning"];
  EXPECT_EQ(t["floor_scale"], 16384.0);
  EXPECT_EQ(t["position_offset"], 0.0);
  EXPECT_EQ(t["key"], "llama_4_scaling_beta");
  EXPECT_DOUBLE_EQ(t["scale_at_max_position"].get<double>(), 1.2772588722239782);
  EXPECT_TRUE(j["groups"][0]["softmax_scale_multiplier"].is_null());
}

// A config.json of tests/hf_configs: a published one's "config", or a config_only file whole.
std::string HfConfigText(const std::string& name) {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  const nlohmann::json file = nlohmann::json::parse(in);
  return file.contains("config") && file.contains("hf_expected") ? file["config"].dump()
                                                                 : file.dump();
}

TEST_F(CliTest, DescribePrintsTheIndexerSubmoduleAndRopeCacheSelectsIt) {
  std::ofstream(Path("glm5.json")) << HfConfigText("config_only/glm-5.3.json");
  CliResult table = Run(absl::StrCat("describe --hf-config ", Path("glm5.json")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("sub-module indexer: layers 0-2,6,10,14,18,22,26,30,34,38,42,46,50,"
                           "54,58,62,66,70,74: head 128, rotary 64 (first channels), deepseek"),
            std::string::npos)
      << table.out;
  CliResult json = Run(absl::StrCat("--format json describe --hf-config ", Path("glm5.json")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["submodules"].size(), 1u);
  const nlohmann::json& indexer = j["submodules"][0];
  EXPECT_EQ(indexer["name"], "indexer");
  EXPECT_EQ(indexer["layers"].size(), 21u);
  EXPECT_EQ(indexer["head_dim"], 128);
  EXPECT_EQ(indexer["rotary_dim"], 64);
  EXPECT_EQ(indexer["rotary_offset"], 0);
  EXPECT_EQ(indexer["style"], "deepseek");
  EXPECT_EQ(indexer["inv_freq"].size(), 32u);  // the attention's 64-wide table
  // rope-cache --submodule: DeepSeek-V3.2's indexer (NEOX) on the attention's frequencies.
  std::ofstream(Path("v32.json")) << HfConfigText("config_only/deepseek-v3.2-exp.json");
  CliResult cache = Run(absl::StrCat("--format json rope-cache --positions 0:2 --hf-config ",
                                     Path("v32.json"), " --submodule indexer"));
  ASSERT_EQ(cache.exit_code, 0) << cache.err;
  const nlohmann::json c = nlohmann::json::parse(cache.out);
  EXPECT_EQ(c["derived"]["submodule"], "indexer");
  EXPECT_EQ(c["derived"]["head_dim"], 128);
  EXPECT_EQ(c["derived"]["rotary_dim"], 64);
  EXPECT_EQ(c["derived"]["style"], "neox");
  ExpectExit(
      absl::StrCat("rope-cache --positions 0:2 --hf-config ", Path("v32.json"), " --submodule mla"),
      1, &CliResult::err, "config.submodule: \"mla\" is not a sub-module");
}

TEST_F(CliTest, DescribePrintsBothTowersOfAVisionLanguageConfig) {
  std::ofstream(Path("qwen2vl.json")) << HfConfigText("qwen2-vl-2b-instruct.json");
  CliResult table = Run(absl::StrCat("describe --hf-config ", Path("qwen2vl.json")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("model_type: qwen2_vl"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("num_layers: 28"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("(vision)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("models/qwen2_vl/modeling_qwen2_vl.py"), std::string::npos) << table.out;
  CliResult json = Run(absl::StrCat("--format json describe --hf-config ", Path("qwen2vl.json")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["groups"].size(), 2u);
  EXPECT_EQ(j["groups"][0]["layers"].size(), 28u);
  EXPECT_EQ(j["groups"][0]["mrope_section"], nlohmann::json::parse("[16, 24, 24]"));
  EXPECT_EQ(j["groups"][1]["layer_type"], "vision");
  EXPECT_TRUE(j["groups"][1]["layers"].empty());
  EXPECT_EQ(j["groups"][1]["head_dim"], 80);
  EXPECT_FALSE(j.contains("submodules"));
}

TEST_F(CliTest, HealthAndInfo) {
  CliResult health = Run("health");
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_NE(health.out.find("status: SERVING"), std::string::npos) << health.out;
  CliResult info = Run("--format json info");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json j = nlohmann::json::parse(info.out);
  EXPECT_FALSE(j["version"].get<std::string>().empty());
  EXPECT_TRUE(j["backends"].contains("reference"));
}

TEST_F(CliTest, ApplyRopeNpyRoundTrip) {
  std::vector<float> q(1 * 3 * 2 * 8);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  WriteFloat32Npy(Path("q.npy"), {1, 3, 2, 8}, q);

  CliResult forward =
      Run(absl::StrCat("apply-rope --q ", Path("q.npy"),
                       " --positions 100:103 --format none --out-q ", Path("rot.npy")));
  ASSERT_EQ(forward.exit_code, 0) << forward.err;
  CliResult backward =
      Run(absl::StrCat("apply-rope --q ", Path("rot.npy"),
                       " --positions 100:103 --inverse --format none --npy ", Path("back.npy")));
  ASSERT_EQ(backward.exit_code, 0) << backward.err;

  // The rotated file equals what the library computes.
  absl::StatusOr<posenc::testing::NpyArray> rotated = posenc::testing::ReadNpy(Path("rot.npy"));
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  EXPECT_EQ(rotated->descr, "<f4");
  EXPECT_EQ(rotated->shape, (std::vector<int64_t>{1, 3, 2, 8}));
  std::unique_ptr<Client> client = testing::ConnectToSharedServer();
  ApplyRopeOptions options;
  options.q = *Tensor::FromFloats(q, {1, 3, 2, 8});
  options.positions = Positions::Range(100, 3);
  absl::StatusOr<ApplyRopeResult> expected = client->ApplyRope(options);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(rotated->values, expected->q.ToDoubles());

  // And the inverse brings q back.
  absl::StatusOr<posenc::testing::NpyArray> back = posenc::testing::ReadNpy(Path("back.npy"));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->values.size(), q.size());
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(back->values[i], q[i], 2e-6) << i;
}

// The issue's headline: `apply-rope --shape 1,2048,8,128` through a server with a 1 MiB message
// limit (one head is 1 MiB: the client splits along heads, then tokens) gives the bytes of one
// call on a server without it.
TEST_F(CliTest, ApplyRopeSplitsThroughASmallServer) {
  server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "reference";  // as the shared server
  options.max_message_bytes = int64_t{1} << 20;
  auto small = server::PosencServer::Start(options);
  ASSERT_TRUE(small.ok()) << small.status();
  const std::string args = "--format none apply-rope --shape 1,2048,8,128 --fill iota --npy ";
  const CliResult split = ::posenc::testing::RunCommand(
      absl::StrCat(POSENC_CLI_PATH, " --server 127.0.0.1:", (*small)->port(), " ", args,
                   Path("split.npy")),
      Path("stderr.txt"));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  const CliResult whole = Run(args + Path("whole.npy"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  auto bytes = [this](const std::string& name) {
    std::ifstream in(Path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string split_npy = bytes("split.npy");
  EXPECT_GT(split_npy.size(), size_t{8} << 20);
  EXPECT_TRUE(split_npy == bytes("whole.npy")) << "the split result differs from one call's";
}

TEST_F(CliTest, NpyOutputOfEveryDTypeReadsBack) {
  // BFLOAT16 is written widened to <f4 (NumPy has no bfloat16).
  for (const char* dtype : {"float32", "float64", "float16", "bfloat16"}) {
    const std::string path = Path(absl::StrCat("table_", dtype, ".npy"));
    CliResult r = Run(absl::StrCat("sinusoidal --positions 0:5 --dim 4 --format none --dtype ",
                                   dtype, " --npy ", path));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (std::string(dtype) == "float16") {
      // The header and the size by hand, too.
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      EXPECT_NE(bytes.find("'descr': '<f2'"), std::string::npos);
      EXPECT_NE(bytes.find("'shape': (5, 4)"), std::string::npos);
      EXPECT_EQ(bytes.size() % 64, 40u);  // 64-byte aligned header + 5*4*2 bytes
    }
    absl::StatusOr<posenc::testing::NpyArray> table = posenc::testing::ReadNpy(path);
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_EQ(table->shape, (std::vector<int64_t>{5, 4}));
    EXPECT_NEAR(table->values[4], std::sin(1.0), 4e-3) << dtype;  // PE[1, 0]
  }
}

TEST_F(CliTest, UnsupportedNpyDTypeIsAClearError) {
  WriteNpyByHand(Path("bad.npy"), "<c8", {1, 2, 1, 2}, std::string(32, '\0'));  // complex64
  CliResult r = Run(absl::StrCat("apply-rope --q ", Path("bad.npy")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(Path("bad.npy") + ": npy dtype '<c8' is not supported"), std::string::npos)
      << r.err;
}

TEST_F(CliTest, BigEndianAndBoolNpyInputsAreRead) {
  // q big-endian ('>f4') rotates exactly as the same q little-endian.
  std::vector<float> q(1 * 3 * 2 * 8);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::cos(0.21f * static_cast<float>(i)) - 0.3f;
  WriteNpyByHand(Path("q_le.npy"), "<f4", {1, 3, 2, 8}, FloatBytes(q));
  WriteNpyByHand(Path("q_be.npy"), ">f4", {1, 3, 2, 8}, FloatBytes(q, /*big_endian=*/true));
  CliResult little =
      Run(absl::StrCat("--format json apply-rope --positions 5:8 --q ", Path("q_le.npy")));
  CliResult big =
      Run(absl::StrCat("--format json apply-rope --positions 5:8 --q ", Path("q_be.npy")));
  ASSERT_EQ(little.exit_code, 0) << little.err;
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_EQ(nlohmann::json::parse(big.out), nlohmann::json::parse(little.out));

  // An attention mask saved as a numpy bool array ('|b1') is the integer mask 0,1,1,1.
  WriteNpyByHand(Path("mask.npy"), "|b1", {1, 4}, std::string("\0\1\1\1", 4));
  CliResult from_file =
      Run(absl::StrCat("--format json sinusoidal --dim 4 --mask ", Path("mask.npy")));
  CliResult from_list = Run("--format json sinusoidal --dim 4 --mask 0,1,1,1");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  ASSERT_EQ(from_list.exit_code, 0) << from_list.err;
  EXPECT_EQ(nlohmann::json::parse(from_file.out), nlohmann::json::parse(from_list.out));
}

// Small shapes: the shared server runs the reference backend.
constexpr char kSmallBench[] = "bench --tokens 8 --heads 2 --head-dim 8 --max-relative 2";

TEST_F(CliTest, BenchCountRunPrintsTheSummary) {
  CliResult r = Run(absl::StrCat(kSmallBench, " --op mix --count 24 --concurrency 3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"op: mix", "calls: 24", "errors: 0", "errors_by_code: (none)",
                           "qps: ", "  p50: ", "  p90: ", "  p99: ", "  max: ", "mb_per_s: "}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  // stderr is not a terminal here: no progress line.
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(CliTest, BenchJsonSummary) {
  CliResult r =
      Run(absl::StrCat(kSmallBench, " --op mix --count 40 --concurrency 4 --interval 1h --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // one object, nothing else
  EXPECT_EQ(j["op"], "mix");
  EXPECT_EQ(j["calls"], 40);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_TRUE(j["errors_by_code"].empty());
  EXPECT_FALSE(j.contains("first_error"));
  EXPECT_GT(j["qps"].get<double>(), 0);
  EXPECT_GT(j["mb_per_s"].get<double>(), 0);
  EXPECT_GT(j["payload_bytes"].get<int64_t>(), 0);
  const nlohmann::json& latency = j["latency_ms"];
  EXPECT_GT(latency["p50"].get<double>(), 0);
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>());
  EXPECT_LE(latency["p90"].get<double>(), latency["p99"].get<double>());
  EXPECT_LE(latency["p99"].get<double>(), latency["max"].get<double>());
  // An interval longer than the run: one interval holding every call.
  ASSERT_EQ(j["intervals"].size(), 1u) << j.dump();
  EXPECT_EQ(j["intervals"][0]["calls"], 40);
}

TEST_F(CliTest, BenchEveryOpSucceeds) {
  for (const char* op : {"sinusoidal", "add_position_encoding", "rope_cache", "apply_rope",
                         "alibi_slopes", "alibi_bias", "relative_bias", "relative_embedding"}) {
    CliResult r = Run(absl::StrCat(kSmallBench, " --count 2 --concurrency 1 --json --op ", op));
    ASSERT_EQ(r.exit_code, 0) << op << "\n" << r.out << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["op"], op);
    EXPECT_EQ(j["calls"], 2) << op;
    EXPECT_GT(j["payload_bytes"].get<int64_t>(), 0) << op;
  }
}

TEST_F(CliTest, BenchUsageErrorsExitTwo) {
  ExpectUsageError("bench --concurrency 0", "--concurrency expects 1 .. 1024");
  ExpectUsageError("bench --duration 10", "--duration expects a duration");
  ExpectUsageError("bench --duration 0s", "--duration expects a duration");
  ExpectUsageError("bench --warmup -1s", "--warmup expects a duration");
  ExpectUsageError("bench --duration 1s --count 3", "not both");
  ExpectUsageError("bench --count 0", "--count expects 1 ..");
  ExpectUsageError("bench --op nope", "--op expects sinusoidal|");
  ExpectUsageError("bench --tokens 0", "--tokens expects 1 ..");
  ExpectUsageError("bench --tokens 1048576 --heads 1024", "over the bench's limit");
  ExpectOutput("bench --help", "example: posenc bench");
}

TEST_F(CliTest, BenchAgainstADeadPortReportsErrorsAndExitsOne) {
  // A port bound but not listening: every connection is refused.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);

  // The later --server wins over the fixture's.
  CliResult r = Run(absl::StrCat("bench --count 4 --concurrency 2 --json --server 127.0.0.1:", port,
                                 " --timeout 10s"));
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // the summary comes first
  EXPECT_EQ(j["calls"], 4);
  EXPECT_EQ(j["errors"], 4);
  EXPECT_EQ(j["errors_by_code"]["UNAVAILABLE"], 4) << j.dump();
  EXPECT_NE(j["first_error"].get<std::string>().find("UNAVAILABLE"), std::string::npos);
  EXPECT_EQ(j["payload_bytes"], 0);
}

// ---------------------------------------------------------------------------------------------
// --png heatmaps.
// ---------------------------------------------------------------------------------------------

using ::posenc::testing::DecodePng;
using ::posenc::testing::Picture;

// "PNG 442x614" from the CLI's "wrote FILE (PNG WxH: ...)" line.
std::pair<int, int> ReportedSize(const std::string& err) {
  int w = 0;
  int h = 0;
  const size_t at = err.find("(PNG ");
  if (at != std::string::npos) std::sscanf(err.c_str() + at, "(PNG %dx%d", &w, &h);
  return {w, h};
}

TEST_F(CliTest, PngHeatmapOfATable) {
  // 128 positions x 64 channels: one panel magnified 4x (256 x 512 px), a colour bar beside it.
  const CliResult r = Run(
      absl::StrCat("sinusoidal --positions 0:128 --dim 64 --format none --png ", Path("t.png")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Picture p = DecodePng(Path("t.png"));
  EXPECT_EQ(std::make_pair(p.width, p.height), ReportedSize(r.err)) << r.err;
  EXPECT_GE(p.width, 256 + 20);
  EXPECT_LE(p.width, 1200);
  EXPECT_GE(p.height, 512);
  EXPECT_LE(p.height, 1200);
  // The panel's 256 x 512 pixels plus the colour bar (20 x at most 400) are coloured.
  EXPECT_GE(p.Colourful(), 256 * 512);
  EXPECT_LE(p.Colourful(), 256 * 512 + 20 * 400);
  EXPECT_GE(p.DistinctColours(), 50u);
}

TEST_F(CliTest, PngHeatmapOfBiasesHasAPanelPerHead) {
  // 4 causal heads of 16 x 16, magnified 16x: 136 of the 256 cells of each are finite (coloured),
  // the 120 in the future -inf (grey).
  const CliResult r = Run(absl::StrCat(
      "alibi-bias --heads 4 --q-len 16 --k-len 16 --format none --png ", Path("a.png")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Picture p = DecodePng(Path("a.png"));
  EXPECT_EQ(std::make_pair(p.width, p.height), ReportedSize(r.err)) << r.err;
  EXPECT_GE(p.width, 4 * 256);
  const int64_t cells = 4 * 136 * 256;
  EXPECT_GE(p.Colourful(), cells);
  EXPECT_LE(p.Colourful(), cells + 20 * 400);
  EXPECT_GE(p.Count({200, 200, 200}), 4 * 120 * 256);  // the masked grey, and its legend swatch
  EXPECT_GE(p.DistinctColours(), 20u);

  // 20 heads: only the first 16 are drawn.
  const CliResult many = Run(absl::StrCat(
      "alibi-bias --heads 20 --q-len 16 --k-len 16 --format none --png ", Path("b.png")));
  ASSERT_EQ(many.exit_code, 0) << many.err;
  const Picture q = DecodePng(Path("b.png"));
  EXPECT_GE(q.Colourful(), 16 * 136 * 256);
  EXPECT_LE(q.Colourful(), 16 * 136 * 256 + 20 * 400);
}

TEST_F(CliTest, PngOfOtherCommands) {
  for (const std::string& args :
       {std::string("rope-cache --positions 0:64 --head-dim 16"),
        std::string("relative-bias --q-len 8 --k-len 8 --random-table 1 --heads 2"),
        std::string("relative-embedding --q-len 5 --k-len 5 --max-relative 2 --random-table 7"),
        std::string("apply-rope --shape 1,8,2,8 --fill iota"),
        std::string("add --shape 2,8,4 --fill random --positions 0:8")}) {
    const CliResult r = Run(absl::StrCat(args, " --format none --png ", Path("x.png")));
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    const Picture p = DecodePng(Path("x.png"));
    EXPECT_EQ(std::make_pair(p.width, p.height), ReportedSize(r.err)) << args;
    EXPECT_GE(p.DistinctColours(), 8u) << args;
    EXPECT_GE(p.Colourful(), 64 * 64) << args;
  }
}

TEST_F(CliTest, OutputFilesAreCheckedBeforeTheCall) {
  // Nothing listens on port 1: a usage error (exit 2) rather than UNAVAILABLE (exit 1) shows that
  // the path was checked first.
  const std::string missing = Path("no/such/dir/out");
  for (const std::string flag : {"--png", "--npy"}) {
    const CliResult r = Run(absl::StrCat("--server 127.0.0.1:1 sinusoidal --positions 0:4 --dim 4 ",
                                         flag, " ", missing));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(absl::StrCat(flag, ": cannot write '", missing, "'")), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  }
  const CliResult dir = Run(absl::StrCat("rope-cache --positions 0:4 --head-dim 8 --out-cos ",
                                         Path("")));  // the test's directory itself
  EXPECT_EQ(dir.exit_code, 2) << dir.err;
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
}

TEST_F(CliTest, HelpMentionsPngAndCheck) {
  ExpectOutput("sinusoidal --help", "--png FILE");
  ExpectOutput("alibi-bias --help", "--png alibi.png");
  ExpectOutput("check --help", "example: posenc check --cos");
  ExpectOutput("check --help", "--tolerance X");
  ExpectOutput("--help", "check");
}

// ---------------------------------------------------------------------------------------------
// posenc check.
// ---------------------------------------------------------------------------------------------

TEST_F(CliTest, CheckAFloat16CacheAgainstTheExactValues) {
  const std::string cos = Path("cos16.npy");
  const std::string sin = Path("sin16.npy");
  ASSERT_EQ(Run(absl::StrCat("rope-cache --positions 0:3000 --head-dim 16 --dtype float16 "
                             "--format none --out-cos ",
                             cos, " --out-sin ", sin))
                .exit_code,
            0);
  const std::string args =
      absl::StrCat("--format json check --head-dim 16 --cos ", cos, " --sin ", sin);
  // Correctly rounded float16: within the default tolerance (2^-10), off by up to half an ulp.
  const CliResult loose = Run(args);
  ASSERT_EQ(loose.exit_code, 0) << loose.err << loose.out;
  const nlohmann::json j = nlohmann::json::parse(loose.out);
  EXPECT_GT(j["max_abs_error"].get<double>(), 1e-5);
  EXPECT_LE(j["max_abs_error"].get<double>(), std::ldexp(1.0, -12) * 1.001);
  EXPECT_EQ(j["tolerance"].get<double>(), std::ldexp(1.0, -10));
  EXPECT_EQ(j["values"].get<int64_t>(), 2 * 3000 * 8);
  EXPECT_EQ(j["bands"].size(), 3u);  // [0, 1024), [1024, 2048), [2048, 4096)
  EXPECT_TRUE(j["bands"].contains("[2048, 4096)")) << j["bands"];
  const int64_t at = j["at_position"].get<int64_t>();
  EXPECT_TRUE(at >= 0 && at < 3000) << at;

  // A float32 tolerance fails it: exit 1, the failure said on stdout, the plot drawn (red bars).
  const CliResult tight = Run(absl::StrCat(args, " --tolerance 1e-6 --png ", Path("err.png")));
  EXPECT_EQ(tight.exit_code, 1) << tight.err;
  const nlohmann::json t = nlohmann::json::parse(tight.out);
  EXPECT_EQ(t["result"].get<std::string>().rfind("FAIL: ", 0), 0u) << t["result"];
  EXPECT_GT(t["over_tolerance"].get<int64_t>(), 0);
  const Picture plot = DecodePng(Path("err.png"));
  EXPECT_EQ(std::make_pair(plot.width, plot.height), ReportedSize(tight.err)) << tight.err;
  EXPECT_GT(plot.Count({215, 48, 39}), 10000);  // bars over the tolerance (and its line)
  EXPECT_GE(plot.DistinctColours(), 4u);
}

// A float32 cache with one value off by 1e-3: found at its position and element.
TEST_F(CliTest, CheckFindsAPerturbedValue) {
  const std::string cos = Path("cos.npy");
  ASSERT_EQ(Run(absl::StrCat("rope-cache --positions 1000:4000 --head-dim 8 --base 500000 "
                             "--format none --out-cos ",
                             cos))
                .exit_code,
            0);
  absl::StatusOr<posenc::testing::NpyArray> exact = posenc::testing::ReadNpy(cos);
  ASSERT_TRUE(exact.ok()) << exact.status();
  ASSERT_EQ(exact->shape, (std::vector<int64_t>{3000, 4}));
  std::vector<float> values(exact->values.begin(), exact->values.end());
  values[2500 * 4 + 3] += 1e-3f;
  WriteFloat32Npy(Path("bad.npy"), {3000, 4}, values);

  const std::string args = absl::StrCat(
      "--format json check --head-dim 8 --base 500000 "
      "--positions 1000:4000 --cos ",
      Path("bad.npy"));
  const CliResult strict = Run(args);  // default float32 tolerance 1e-6
  EXPECT_EQ(strict.exit_code, 1) << strict.err;
  const nlohmann::json j = nlohmann::json::parse(strict.out);
  EXPECT_NEAR(j["max_abs_error"].get<double>(), 1e-3, 1e-6);
  EXPECT_EQ(j["at_position"].get<int64_t>(), 3500);
  EXPECT_EQ(j["at_element"], "cos[2500, 3]");
  EXPECT_EQ(j["over_tolerance"].get<int64_t>(), 1);
  EXPECT_NEAR(j["bands"]["[2048, 4096)"].get<double>(), 1e-3, 1e-6);
  EXPECT_LT(j["bands"]["[1024, 2048)"].get<double>(), 1e-6);  // float32 rounding only
  EXPECT_EQ(Run(absl::StrCat(args, " --tolerance 1e-2")).exit_code, 0);

  // The unperturbed file passes; table output says so.
  const CliResult good =
      Run(absl::StrCat("check --head-dim 8 --base 500000 --positions 1000:4000 --cos ", cos));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("result: PASS"), std::string::npos) << good.out;
}

TEST_F(CliTest, CheckFullWidthCachesAndRotations) {
  // A neox-layout [T, d] cache (what `rope-cache --layout neox` writes) and a gptj one.
  for (const char* layout : {"neox", "gptj"}) {
    const std::string style = std::string(layout) == "gptj" ? " --style gptj" : "";
    ASSERT_EQ(Run(absl::StrCat("rope-cache --positions 0:50 --head-dim 8 --format none --layout ",
                               layout, style, " --out-sin ", Path("s.npy")))
                  .exit_code,
              0);
    const CliResult r =
        Run(absl::StrCat("--format json check --head-dim 8", style, " --sin ", Path("s.npy")));
    EXPECT_EQ(r.exit_code, 0) << layout << r.err;
    EXPECT_LT(nlohmann::json::parse(r.out)["max_abs_error"].get<double>(), 1e-7) << layout;
    // Read with the other layout, the same file is wrong.
    const CliResult wrong = Run(absl::StrCat("check --head-dim 8", style, " --cache-layout ",
                                             std::string(layout) == "gptj" ? "neox" : "gptj",
                                             " --sin ", Path("s.npy")));
    EXPECT_EQ(wrong.exit_code, 1) << layout;
  }

  // A float32 rotation by posenc, checked against the float64 one; then a perturbed one.
  std::vector<float> q(1 * 6 * 2 * 8);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  WriteFloat32Npy(Path("q.npy"), {1, 6, 2, 8}, q);
  ASSERT_EQ(Run(absl::StrCat("apply-rope --q ", Path("q.npy"),
                             " --positions 5000:5006 --format none --out-q ", Path("rot.npy")))
                .exit_code,
            0);
  const std::string args =
      absl::StrCat("--format json check --positions 5000:5006 --input ", Path("q.npy"));
  const CliResult ok = Run(absl::StrCat(args, " --rotated ", Path("rot.npy")));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_LT(nlohmann::json::parse(ok.out)["max_abs_error"].get<double>(), 1e-6);

  absl::StatusOr<posenc::testing::NpyArray> rot = posenc::testing::ReadNpy(Path("rot.npy"));
  ASSERT_TRUE(rot.ok()) << rot.status();
  std::vector<float> bad(rot->values.begin(), rot->values.end());
  bad[(0 * 6 + 4) * 16 + 1 * 8 + 5] -= 0.01f;  // token 4 (position 5004), head 1, channel 5
  WriteFloat32Npy(Path("bad.npy"), {1, 6, 2, 8}, bad);
  const CliResult off = Run(absl::StrCat(args, " --rotated ", Path("bad.npy")));
  EXPECT_EQ(off.exit_code, 1) << off.err;
  const nlohmann::json j = nlohmann::json::parse(off.out);
  EXPECT_EQ(j["at_position"].get<int64_t>(), 5004);
  EXPECT_EQ(j["at_element"], "rotated[0, 4, 1, 5]");
  EXPECT_NEAR(j["max_abs_error"].get<double>(), 0.01, 1e-6);
}

TEST_F(CliTest, CheckBadInputsAreClearErrors) {
  ASSERT_EQ(Run(absl::StrCat("rope-cache --positions 0:30 --head-dim 16 --format none --out-cos ",
                             Path("c30.npy")))
                .exit_code,
            0);
  ASSERT_EQ(Run(absl::StrCat("rope-cache --positions 0:20 --head-dim 16 --format none --out-sin ",
                             Path("s20.npy")))
                .exit_code,
            0);
  // cos and sin of different shapes.
  ExpectExit(
      absl::StrCat("check --head-dim 16 --cos ", Path("c30.npy"), " --sin ", Path("s20.npy")), 1,
      &CliResult::err, "differ in shape");
  // A cache for another rotary dim: its last axis is neither d/2 nor d.
  ExpectExit(absl::StrCat("check --head-dim 64 --cos ", Path("c30.npy")), 1, &CliResult::err,
             "the last axis must be d/2 = 32 (compact) or d = 64");
  // More rows than positions.
  ExpectExit(absl::StrCat("check --head-dim 16 --positions 0:10 --cos ", Path("c30.npy")), 1,
             &CliResult::err, "holds 30 rows (tokens), but the positions give 10");
  // A missing file.
  ExpectExit(absl::StrCat("check --head-dim 16 --cos ", Path("missing.npy")), 1, &CliResult::err,
             Path("missing.npy") + ": cannot open");
  // Rotated tensors of different shapes.
  WriteFloat32Npy(Path("x.npy"), {1, 2, 1, 4}, std::vector<float>(8, 1.0f));
  WriteFloat32Npy(Path("y.npy"), {1, 2, 2, 4}, std::vector<float>(16, 1.0f));
  ExpectExit(absl::StrCat("check --input ", Path("x.npy"), " --rotated ", Path("y.npy")), 1,
             &CliResult::err, "differ in shape");
  // Usage: no input, both kinds, half a pair.
  ExpectUsageError("check --head-dim 16", "give a cache");
  ExpectExit(absl::StrCat("check --cos ", Path("c30.npy"), " --rotated ", Path("x.npy")), 2);
  ExpectUsageError(absl::StrCat("check --rotated ", Path("x.npy")),
                   "--rotated and --input go together");
  ExpectExit(absl::StrCat("check --head-dim 16 --tolerance -1 --cos ", Path("c30.npy")), 2,
             &CliResult::err, "--tolerance expects a number >= 0");
}

// ---------------------------------------------------------------------------------------------
// mm-positions, rerotate and the one-table layouts of rope-cache (#21).
// ---------------------------------------------------------------------------------------------

// Qwen2-VL: 2 text tokens, an image of 1 x 4 x 4 patches (4 tokens after the 2 x 2 merge), 2
// text tokens: t, h, w of the image from 2, then text from 4; delta 6 - 8 = -2.
constexpr int64_t kSpanIds[3][8] = {
    {0, 1, 2, 2, 2, 2, 4, 5}, {0, 1, 2, 2, 3, 3, 4, 5}, {0, 1, 2, 3, 2, 3, 4, 5}};

TEST_F(CliTest, MmPositionsOfSpansAndOfTokensAgree) {
  const std::string ids_npy = Path("ids.npy"), deltas_npy = Path("deltas.npy");
  CliResult r = Run(absl::StrCat(
      "--format json mm-positions --family qwen2_vl --spans text:2,image:1x4x4,text:2 --npy ",
      ids_npy, " --out-deltas ", deltas_npy));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["position_ids"]["shape"], nlohmann::json({3, 1, 8}));
  EXPECT_EQ(j["mrope_position_deltas"]["data"], nlohmann::json({-2}));
  EXPECT_EQ(j["family"], "qwen2_vl");
  const absl::StatusOr<posenc::testing::NpyArray> ids = posenc::testing::ReadNpy(ids_npy);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->descr, "<i8");
  for (int a = 0; a < 3; ++a) {
    for (int t = 0; t < 8; ++t) EXPECT_EQ(ids->ints[a * 8 + t], kSpanIds[a][t]) << a << "," << t;
  }
  const absl::StatusOr<posenc::testing::NpyArray> deltas = posenc::testing::ReadNpy(deltas_npy);
  ASSERT_TRUE(deltas.ok()) << deltas.status();
  EXPECT_EQ(deltas->shape, (std::vector<int64_t>{1, 1}));
  // The same prompt as Qwen2-VL token ids (vision start 151652, image 151655) and its grid.
  r =
      Run("--format json mm-positions --family qwen2_vl --input-ids "
          "7,151652,151655,151655,151655,151655,8,9 --image-grid 1,4,4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["position_ids"], j["position_ids"]);
  // Decode steps from the delta: prompt_length + k + delta.
  r =
      Run("--format json mm-positions --family qwen2_vl --decode-deltas -2 --prompt-length 8 "
          "--steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["data"], nlohmann::json({6, 7, 8, 6, 7, 8, 6, 7, 8}));
  ExpectOutput("mm-positions --family qwen2_vl --spans text:2,image:1x4x4,text:2",
               "position_ids: INT64 [3, 1, 8]");
}

// ERNIE-4.5-VL through the CLI: the hand-derived video case (tests/golden_multimodal/
// hand_ernie45vl_one_video: text, <video_start>, a video [4, 4, 6] of 2 merged frames of 2 x 3,
// <video_end>, text) as token ids with every token id given, as spans, and from a config.json.
TEST_F(CliTest, MmPositionsOfErnie) {
  const nlohmann::json want = {0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 5, 6,
                               0, 1, 2, 2, 2, 3, 3, 3, 2, 2, 2, 3, 3, 3, 5, 6,
                               0, 1, 2, 3, 4, 2, 3, 4, 2, 3, 4, 2, 3, 4, 5, 6};
  const std::string tokens = "1,7,6,6,6,6,6,6,6,6,6,6,6,6,8,2";
  const std::string ids =
      " --image-token-id 5 --video-token-id 6 --video-start-token-id 7 --video-end-token-id 8";
  CliResult r = Run(absl::StrCat("--format json mm-positions --family ernie4_5_vl --input-ids ",
                                 tokens, " --video-grid 4,4,6", ids));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["position_ids"]["data"], want);
  EXPECT_EQ(j["mrope_position_deltas"]["data"], nlohmann::json({-9}));
  EXPECT_EQ(j["family"], "ernie4_5_vl");
  r = Run("--format json mm-positions --family ernie4_5_vl --spans text:2,video:4x4x6,text:2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["position_ids"]["data"], want);
  std::ofstream(Path("ernie.json"))
      << R"({"model_type": "ernie4_5_vl_moe", "image_token_id": 5, "video_token_id": 6, )"
      << R"("video_start_token_id": 7, "video_end_token_id": 8, )"
      << R"("vision_config": {"spatial_merge_size": 2, "temporal_merge_size": 2}})";
  r = Run(absl::StrCat("--format json mm-positions --hf-config ", Path("ernie.json"),
                       " --input-ids ", tokens, " --video-grid 4,4,6"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["position_ids"]["data"], want);
  // --temporal-merge-size 1: the grid is 4 frames (24 tokens), the prompt holds 12.
  r = Run(absl::StrCat("mm-positions --hf-config ", Path("ernie.json"), " --input-ids ", tokens,
                       " --video-grid 4,4,6 --temporal-merge-size 1"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("expected 24 video tokens (6), got 12"), std::string::npos) << r.err;
}

TEST_F(CliTest, MmPositionsPngHasAPanelPerAxis) {
  const CliResult r =
      Run(absl::StrCat("mm-positions --family qwen2_5_vl --format none --spans "
                       "'text:3,image:1x8x12,text:3;text:4,video:2x4x4@0.5,text:18' --png ",
                       Path("mm.png")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Picture p = DecodePng(Path("mm.png"));
  EXPECT_EQ(std::make_pair(p.width, p.height), ReportedSize(r.err)) << r.err;
  EXPECT_GE(p.Colourful(), 3 * 2 * 30);  // three panels of two sequences of 30 tokens
}

TEST_F(CliTest, MmPositionsBadInputs) {
  ExpectUsageError("mm-positions --family qwen2_vl", "give one of --input-ids");
  ExpectUsageError("mm-positions --family qwen2_vl --spans text:2 --input-ids 1,2",
                   "give one of --input-ids");
  ExpectUsageError("mm-positions --spans text:2", "give --family or --hf-config");
  ExpectUsageError("mm-positions --family qwen2_vl --spans text:2,image:1x4",
                   "'image:1x4' needs a grid TxHxW");
  ExpectUsageError("mm-positions --family qwen2_vl --spans text:2,audio:3",
                   "'audio:3' is not text:N");
  ExpectUsageError("mm-positions --family qwen2_vl --spans text:x", "needs text:N");
  ExpectUsageError("mm-positions --family qwen2_vl --spans video:1x4x4@soon",
                   "needs seconds after @");
  ExpectUsageError("mm-positions --family qwen2_vl --input-ids 1,2 --image-grid 1,4",
                   "--image-grid needs T,H,W per item");
  ExpectUsageError("mm-positions --family qwen2_vl --spans text:2 --mask 1,1",
                   "--mask goes with --input-ids");
  ExpectUsageError("mm-positions --family qwen2_vl --spans text:2 --steps 2",
                   "--steps goes with --decode-deltas");
  ExpectUsageError("mm-positions --family qwen2_vl --decode-deltas 1", "needs --prompt-length");
  ExpectUsageError("mm-positions --family qwen2_vl --input-ids 1,x", "--input-ids expects");
  ExpectUsageError("mm-positions --family qwen9 --spans text:2", "--family");
  // The server's error: the grid gives 4 tokens, the ids hold 3 image tokens.
  ExpectExit(
      "mm-positions --family qwen2_vl --input-ids 7,151652,151655,151655,151655,8 "
      "--image-grid 1,4,4",
      1, &CliResult::err, "INVALID_ARGUMENT");
}

TEST_F(CliTest, RerotateMovesKeysAsARotationAtTheTarget) {
  const std::string flags = "--shape 1,4,2,16 --fill random --seed 3 --dtype float64 --format none";
  ASSERT_EQ(
      Run(absl::StrCat("apply-rope ", flags, " --positions 100:104 --out-q ", Path("at100.npy")))
          .exit_code,
      0);
  ASSERT_EQ(Run(absl::StrCat("apply-rope ", flags, " --positions 37:41 --out-q ", Path("at37.npy")))
                .exit_code,
            0);
  const CliResult r = Run(absl::StrCat("rerotate --k ", Path("at100.npy"),
                                       " --positions 100:104 --delta -63 --head-dim 16 --out-k ",
                                       Path("moved.npy"), " --format none"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const absl::StatusOr<posenc::testing::NpyArray> moved =
      posenc::testing::ReadNpy(Path("moved.npy"));
  const absl::StatusOr<posenc::testing::NpyArray> direct =
      posenc::testing::ReadNpy(Path("at37.npy"));
  ASSERT_TRUE(moved.ok() && direct.ok());
  ASSERT_EQ(moved->shape, direct->shape);
  for (int64_t i = 0; i < moved->size(); ++i) {
    EXPECT_NEAR(moved->values[i], direct->values[i], 1e-12) << i;
  }
  // A delta per sequence ([B]) is a list.
  ASSERT_EQ(Run(absl::StrCat("apply-rope --shape 2,4,1,8 --dtype float64 --format none --out-q ",
                             Path("two.npy")))
                .exit_code,
            0);
  ExpectOutput(absl::StrCat("rerotate --k ", Path("two.npy"), " --delta 3,5"),
               "k: FLOAT64 [2, 4, 1, 8]");
}

TEST_F(CliTest, RerotateBadInputs) {
  WriteFloat32Npy(Path("k.npy"), {1, 2, 1, 4}, std::vector<float>(8, 1.0f));
  WriteNpyByHand(Path("ints.npy"), "<i8", {2}, std::string(16, '\0'));
  ExpectUsageError("rerotate --delta 3", "--k FILE.npy is required");
  ExpectUsageError(absl::StrCat("rerotate --k ", Path("k.npy")), "--delta is required");
  ExpectUsageError(absl::StrCat("rerotate --k ", Path("k.npy"), " --delta soon"),
                   "--delta expects a list of integers");
  ExpectUsageError(absl::StrCat("rerotate --k ", Path("k.npy"), " --delta 1 --npy a.npy --out-k ",
                                Path("b.npy")),
                   "--npy is --out-k");
  ExpectExit(absl::StrCat("rerotate --k ", Path("ints.npy"), " --delta 1"), 1, &CliResult::err,
             "expected a float array");
  // The server's: a delta per sequence for 3 sequences of a batch of 1.
  ExpectExit(absl::StrCat("rerotate --k ", Path("k.npy"), " --delta 1,2,3"), 1, &CliResult::err,
             "delta");
}

TEST_F(CliTest, RopeCacheWritesTheOneTableLayouts) {
  const std::string base = "rope-cache --positions 0:5 --head-dim 8 --format none";
  ASSERT_EQ(
      Run(absl::StrCat(base, " --out-cos ", Path("c.npy"), " --out-sin ", Path("s.npy"))).exit_code,
      0);
  ASSERT_EQ(
      Run(absl::StrCat(base, " --layout fused_cos_sin --out-table ", Path("f.npy"))).exit_code, 0);
  ASSERT_EQ(Run(absl::StrCat(base, " --layout complex --out-table ", Path("x.npy"))).exit_code, 0);
  const auto c = posenc::testing::ReadNpy(Path("c.npy"));
  const auto s = posenc::testing::ReadNpy(Path("s.npy"));
  const auto f = posenc::testing::ReadNpy(Path("f.npy"));
  const auto x = posenc::testing::ReadNpy(Path("x.npy"));
  ASSERT_TRUE(c.ok() && s.ok() && f.ok() && x.ok());
  EXPECT_EQ(f->shape, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(x->shape, (std::vector<int64_t>{5, 4, 2}));
  for (int t = 0; t < 5; ++t) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(f->values[t * 8 + j], c->values[t * 4 + j]);
      EXPECT_EQ(f->values[t * 8 + 4 + j], s->values[t * 4 + j]);
      EXPECT_EQ(x->values[(t * 4 + j) * 2], c->values[t * 4 + j]);
      EXPECT_EQ(x->values[(t * 4 + j) * 2 + 1], s->values[t * 4 + j]);
    }
  }
  ExpectOutput("rope-cache --positions 0:2 --head-dim 8 --layout complex",
               "freqs_cis: FLOAT32 [2, 4, 2]");
  ExpectUsageError(absl::StrCat(base, " --layout fused_cos_sin --out-cos ", Path("c.npy")),
                   "write it with --out-table");
  ExpectUsageError(absl::StrCat(base, " --out-table ", Path("t.npy")),
                   "--out-table writes the one table");
  ExpectUsageError(absl::StrCat(base, " --layout complex --out-table ", Path("no/dir/t.npy")),
                   "--out-table: cannot write");
  const CliResult png = Run(absl::StrCat(base, " --layout complex --png ", Path("x.png")));
  ASSERT_EQ(png.exit_code, 0) << png.err;
  EXPECT_GT(DecodePng(Path("x.png")).Colourful(), 0);
}

}  // namespace
}  // namespace posenc::client
