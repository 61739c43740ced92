// The `posenc` CLI binary (POSENC_CLI_PATH) run with popen against the in-process server over
// TCP: table output, JSON output, exit codes and stderr of errors, and .npy round trips (input
// files written here byte by byte, outputs read back with tests/common/npy.h, the parser of the
// .npy codec whose writer the CLI uses; tests/kernels/npy_test.cc checks both halves against
// hand-written bytes).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client_test_util.h"
#include "nlohmann/json.hpp"
#include "posenc/client.h"
#include "tests/common/npy.h"

#ifndef POSENC_CLI_PATH
#error "POSENC_CLI_PATH must name the posenc binary (tests/CMakeLists.txt)"
#endif

namespace posenc::client {
namespace {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

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
    const std::string err_path = Path("stderr.txt");
    const std::string command = absl::StrCat(POSENC_CLI_PATH, " --server ",
                                             testing::ServerAddress(), " ", args, " 2>", err_path);
    CliResult result;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
      ADD_FAILURE() << "popen failed: " << command;
      return result;
    }
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream err(err_path);
    std::stringstream ss;
    ss << err.rdbuf();
    result.err = ss.str();
    return result;
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

TEST_F(CliTest, ServerErrorsPrintTheCodeAndExitOne) {
  CliResult r = Run("rope-cache --positions 0:4 --head-dim 8 --rotary-dim 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("error: INVALID_ARGUMENT: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("rotary_dim"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  ExpectExit("sinusoidal --positions 0:4 --dim 6 --no-such-flag", 2, &CliResult::err,
             "unknown flag --no-such-flag");
  ExpectExit("alibi-slopes --heads many", 2, &CliResult::err, "--heads expects an integer");
  ExpectExit("sinusoidal --positions 5:2 --dim 4", 2);
  ExpectExit("alibi-bias --heads 2", 2, &CliResult::err, "--q-len is required");
  ExpectExit("no-such-command", 2);
}

TEST_F(CliTest, HelpExitsZero) {
  ExpectExit("--help", 0, &CliResult::out, "apply-rope");
  ExpectExit("apply-rope --help", 0, &CliResult::out, "--out-q FILE");
}

TEST_F(CliTest, VersionPrintsTheProjectVersion) {
  ExpectExit("--version", 0, &CliResult::out,
             absl::StrCat("posenc ", POSENC_PROJECT_VERSION, " ("));
  ExpectExit("info --version", 0, &CliResult::out, absl::StrCat("posenc ", POSENC_PROJECT_VERSION));
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

}  // namespace
}  // namespace posenc::client
