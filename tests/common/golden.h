// Loads the float64 golden cases of tests/golden and tests/golden_multimodal (case.json + one .npy
// per array).
#ifndef POSENC_TESTS_COMMON_GOLDEN_H_
#define POSENC_TESTS_COMMON_GOLDEN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tests/common/npy.h"

namespace posenc::testing {

struct GoldenCase {
  std::string name;
  std::string function;
  nlohmann::json params;
  std::map<std::string, NpyArray> inputs;
  std::map<std::string, NpyArray> outputs;
  nlohmann::json tolerance;                // case.json's "tolerance" (the multimodal cases)
  std::vector<std::string> informational;  // outputs not to be tested
};

// The directory of the golden cases (POSENC_GOLDEN_DIR, overridable by the environment variable
// of the same name).
std::string GoldenDir();

// The directory of the multimodal cases (POSENC_GOLDEN_MULTIMODAL_DIR, overridable by the
// environment variable of the same name).
std::string GoldenMultimodalDir();

// Every case name in the directory (default GoldenDir()), sorted.
std::vector<std::string> ListGoldenCases();
std::vector<std::string> ListGoldenCases(const std::string& dir);

absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& name);
absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& dir, const std::string& name);

// The largest magnitude of `a`'s values (0 for none).
double MaxAbs(const NpyArray& a);
// A multimodal case's tolerance: FLOAT32 results within 1e-6 relative to `scale` (the inputs'
// magnitude, at least 1), FLOAT64 within the case's atol (default 1e-12).
double MultimodalTolerance(const GoldenCase& c, bool float32, double scale);

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_GOLDEN_H_
