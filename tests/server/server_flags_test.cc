// The command line of the real posenc-server binary (POSENC_SERVER_PATH): --help lists every
// flag with its environment variable and default, --version prints the project version and the
// build, and every usage error (unknown flag, missing or malformed value, stray argument, bad
// environment value) exits 2 naming the culprit before anything starts. Each run is bounded by
// timeout(1), so a server started by mistake fails the test instead of hanging it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"

#ifndef POSENC_SERVER_PATH
#error "POSENC_SERVER_PATH must name the posenc-server binary (tests/CMakeLists.txt)"
#endif
#ifndef POSENC_README_PATH
#error "POSENC_README_PATH must name the repository's README.md (tests/CMakeLists.txt)"
#endif
#ifndef POSENC_PROJECT_VERSION
#error "POSENC_PROJECT_VERSION must be CMake's PROJECT_VERSION (tests/CMakeLists.txt)"
#endif

namespace posenc::server {
namespace {

using Result = ::posenc::testing::CommandResult;

// Runs `[env] posenc-server args` under `timeout 20`; stdout and stderr captured separately.
Result RunServer(const std::string& args, const std::string& env = "") {
  const std::string err_path =
      (std::filesystem::path(::testing::TempDir()) /
       absl::StrCat("posenc_server_flags_", ::getpid(), "_",
                    ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".err"))
          .string();
  Result result = ::posenc::testing::RunCommand(
      absl::StrCat(env, " timeout 20 ", POSENC_SERVER_PATH, " ", args), err_path);
  std::filesystem::remove(err_path);
  return result;
}

// Every flag of server/main.cc and its environment variable (the README's table).
const std::vector<std::pair<std::string, std::string>> kFlags = {
    {"listen", "POSENC_LISTEN"},
    {"backend", "POSENC_BACKEND"},
    {"threads", "POSENC_THREADS"},
    {"cache_entries", "POSENC_CACHE_ENTRIES"},
    {"cache_bytes", "POSENC_CACHE_BYTES"},
    {"max_message_bytes", "POSENC_MAX_MESSAGE_BYTES"},
    {"max_output_elements", "POSENC_MAX_OUTPUT_ELEMENTS"},
    {"max_inflight_bytes", "POSENC_MAX_INFLIGHT_BYTES"},
    {"max_heavy_calls", "POSENC_MAX_HEAVY_CALLS"},
    {"allow_shared_memory", "POSENC_ALLOW_SHARED_MEMORY"},
    {"max_shared_memory_regions", "POSENC_MAX_SHARED_MEMORY_REGIONS"},
    {"max_shared_memory_bytes", "POSENC_MAX_SHARED_MEMORY_BYTES"},
    {"retain_free_memory_bytes", "POSENC_RETAIN_FREE_MEMORY_BYTES"},
    {"tables", "POSENC_TABLES"},
    {"drain_timeout", "POSENC_DRAIN_TIMEOUT"},
    {"drain_grace", "POSENC_DRAIN_GRACE"},
    {"tls_cert", "POSENC_TLS_CERT"},
    {"tls_key", "POSENC_TLS_KEY"},
    {"tls_client_ca", "POSENC_TLS_CLIENT_CA"},
    {"metrics_address", "POSENC_METRICS_ADDRESS"},
    {"log_format", "POSENC_LOG_FORMAT"},
    {"log_level", "POSENC_LOG_LEVEL"},
    {"cuda_device", "POSENC_CUDA_DEVICE"},
    {"cuda_small_call_bytes", "POSENC_CUDA_SMALL_CALL_BYTES"},
};

TEST(ServerFlagsTest, HelpListsEveryFlagWithItsEnvironmentVariableAndDefault) {
  const Result r = RunServer("--help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("usage: posenc-server"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("No flags matched"), std::string::npos) << r.out;
  for (const auto& [flag, env] : kFlags) {
    EXPECT_NE(r.out.find(absl::StrCat("\n  --", flag, " (env ", env, ", default ")),
              std::string::npos)
        << flag << "\n"
        << r.out;
  }
  // With the range the flag is checked against, where it has one.
  EXPECT_NE(r.out.find("--drain_timeout (env POSENC_DRAIN_TIMEOUT, default 10s, 0s .. 1h)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--threads (env POSENC_THREADS, default 0, 0 .. 1024)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--listen (env POSENC_LISTEN, default \"0.0.0.0:50051\")"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
  // Only this program's flags: one per line that starts a flag, plus --help and --version.
  int flag_lines = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StartsWith(line, "  --")) ++flag_lines;
  }
  EXPECT_EQ(flag_lines, static_cast<int>(kFlags.size()) + 2) << r.out;

  const Result h = RunServer("-h");
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out, r.out);
}

// README.md's "Server flags" table has one row per flag of --help, with its variable.
TEST(ServerFlagsTest, TheReadmeTableHasEveryFlag) {
  const Result r = RunServer("--help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream file(POSENC_README_PATH);
  ASSERT_TRUE(file.good()) << POSENC_README_PATH;
  std::stringstream text;
  text << file.rdbuf();
  // The section, up to the next one.
  const std::string all = text.str();
  const size_t begin = all.find("\n## Server flags\n");
  ASSERT_NE(begin, std::string::npos) << "README.md has no \"## Server flags\" section";
  const std::string readme = all.substr(begin, all.find("\n## ", begin + 1) - begin);
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(readme, '\n')) {
    if (absl::StartsWith(line, "| `--")) ++rows;
  }
  int flags = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    // "  --name (env POSENC_NAME, default ..."
    if (!absl::StartsWith(line, "  --") || !absl::StrContains(line, " (env ")) continue;
    ++flags;
    const std::vector<absl::string_view> words = absl::StrSplit(line.substr(2), ' ');
    const absl::string_view env = absl::StripSuffix(words[2], ",");
    EXPECT_TRUE(absl::StrContains(readme, absl::StrCat("| `", words[0], "` | `", env, "` |")))
        << "README.md's Server flags table lacks a row for " << words[0] << " (" << env << ")";
  }
  EXPECT_EQ(rows, flags) << "README.md's Server flags table has a row for a flag that is gone";
}

TEST(ServerFlagsTest, HelpAnswersEvenWithABadEnvironmentValue) {
  const Result r = RunServer("--help", "POSENC_THREADS=many");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("POSENC_THREADS"), std::string::npos) << r.out;
}

TEST(ServerFlagsTest, VersionPrintsTheProjectVersionAndTheBuild) {
  const Result r = RunServer("--version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.out, absl::StrCat("posenc-server ", POSENC_PROJECT_VERSION, " (")))
      << r.out;
  EXPECT_NE(r.out.find(" build, "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("NDEBUG"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(ServerFlagsTest, UsageErrorsExitTwoNamingTheCulprit) {
  struct Case {
    std::string env;
    std::string args;
    std::string needle;  // in stderr
  };
  const std::vector<Case> cases = {
      {"", "--bogus", "unknown flag '--bogus'"},
      {"", "-bogus=1", "unknown flag '-bogus=1'"},
      {"", "--nolisten", "unknown flag '--nolisten'"},
      {"", "--threads=many", "--threads: "},
      {"", "--threads", "--threads: missing value"},
      {"", "--drain_timeout=forever", "--drain_timeout: "},
      {"", "--max_message_bytes=1e99", "--max_message_bytes: "},
      // "--name value": the value is taken, so the error is the later flag.
      {"", "--drain_timeout 2s --bogus", "unknown flag '--bogus'"},
      {"", "stray", "unexpected argument 'stray'"},
      {"", "-- stray", "unexpected argument 'stray'"},
      {"", "--threads=2000", "--threads: expected 0 .. 1024"},
      {"", "--cuda_device=-1", "--cuda_device: expected 0 .. 1023, got -1"},
      {"", "--cuda_small_call_bytes=-5", "--cuda_small_call_bytes: expected 0 or a byte count"},
      {"", "--max_output_elements=0", "--max_output_elements: expected >= 1, got 0"},
      {"", "--max_message_bytes=0", "--max_message_bytes: expected 1 .. 2147483647, got 0"},
      {"", "--drain_grace=2h", "--drain_grace: expected 0s .. 1h, got 2h"},
      {"POSENC_CACHE_BYTES=-1", "", "--cache_bytes: expected 0 .. 2^40, got -1"},
      {"POSENC_CUDA_DEVICE=x", "", "POSENC_CUDA_DEVICE: expected an integer"},
      {"POSENC_ALLOW_SHARED_MEMORY=maybe", "",
       "POSENC_ALLOW_SHARED_MEMORY: expected true or false"},
      {"", "--log_level=loud", "log_level"},
      {"POSENC_DRAIN_TIMEOUT=forever", "", "POSENC_DRAIN_TIMEOUT"},
      {"POSENC_THREADS=many", "--threads=2", "POSENC_THREADS"},
  };
  for (const Case& c : cases) {
    const Result r = RunServer(absl::StrCat("--listen=127.0.0.1:0 ", c.args), c.env);
    EXPECT_EQ(r.exit_code, 2) << c.env << " " << c.args << "\n" << r.err << r.out;
    EXPECT_NE(r.err.find(c.needle), std::string::npos)
        << c.env << " " << c.args << ": " << c.needle << "\n"
        << r.err;
  }
}

}  // namespace
}  // namespace posenc::server
