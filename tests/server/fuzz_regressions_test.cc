// Server-side findings of the fuzz targets (tests/fuzz), as ordinary unit tests: each case is
// the input a fuzzer found (or its minimal form), which once crashed, and now gets a clear error.
// The inputs themselves are replayed by tests/fuzz/run_smoke.sh from tests/fuzz/regressions/.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/table_loader.h"

namespace posenc::server {
namespace {

using ::testing::HasSubstr;

std::string Safetensors(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

// table_fuzz: a shape nested a million arrays deep overflowed the stack while the error message
// quoted it (nlohmann::json::dump recurses). Nested values now show as [...].
TEST(FuzzRegressions, SafetensorsDeeplyNestedShapeIsAnError) {
  constexpr size_t kDepth = 1'000'000;
  const std::string header =
      absl::StrCat(R"({"t": {"dtype": "F32", "shape": )", std::string(kDepth, '['),
                   std::string(kDepth, ']'), R"(, "data_offsets": [0, 0]}})");
  absl::StatusOr<std::vector<LoadedTable>> tables = ParseSafetensors(Safetensors(header, ""), "x");
  ASSERT_FALSE(tables.ok());
  EXPECT_EQ(tables.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tables.status().message(),
              HasSubstr("tensor \"t\": shape [[...]]: expected non-negative integers"));
}

TEST(FuzzRegressions, SafetensorsNestedOffsetsAreQuotedShallowly) {
  const std::string header =
      R"({"t": {"dtype": "F32", "shape": [1, 1], "data_offsets": [[[0]], {"a": [1]}]}})";
  absl::StatusOr<std::vector<LoadedTable>> tables =
      ParseSafetensors(Safetensors(header, std::string(4, '\0')), "x");
  ASSERT_FALSE(tables.ok());
  EXPECT_THAT(tables.status().message(),
              HasSubstr("data_offsets: expected [begin, end], two non-negative integers, got "
                        "[[...],{...}]"));
}

}  // namespace
}  // namespace posenc::server
