#include "tests/common/golden.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifndef POSENC_GOLDEN_DIR
#define POSENC_GOLDEN_DIR "tests/golden"
#endif
#ifndef POSENC_GOLDEN_MULTIMODAL_DIR
#define POSENC_GOLDEN_MULTIMODAL_DIR "tests/golden_multimodal"
#endif

namespace posenc::testing {

std::string GoldenDir() {
  if (const char* env = std::getenv("POSENC_GOLDEN_DIR"); env != nullptr && *env) return env;
  return POSENC_GOLDEN_DIR;
}

std::string GoldenMultimodalDir() {
  if (const char* env = std::getenv("POSENC_GOLDEN_MULTIMODAL_DIR"); env != nullptr && *env) {
    return env;
  }
  return POSENC_GOLDEN_MULTIMODAL_DIR;
}

std::vector<std::string> ListGoldenCases() { return ListGoldenCases(GoldenDir()); }

std::vector<std::string> ListGoldenCases(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "case.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& name) {
  return LoadGoldenCase(GoldenDir(), name);
}

absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& root, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(root) / name;
  std::ifstream in(dir / "case.json");
  if (!in) return absl::NotFoundError(absl::StrCat((dir / "case.json").string(), ": cannot open"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(name, ": bad case.json"));
  GoldenCase c;
  c.name = name;
  c.function = j.value("function", "");
  c.params = j.value("params", nlohmann::json::object());
  c.tolerance = j.value("tolerance", nlohmann::json::object());
  c.informational = j.value("informational_outputs", std::vector<std::string>());
  for (const char* group : {"inputs", "outputs"}) {
    const nlohmann::json arrays = j.value(group, nlohmann::json::object());
    for (const auto& [key, spec] : arrays.items()) {
      absl::StatusOr<NpyArray> a = ReadNpy((dir / spec.at("file").get<std::string>()).string());
      if (!a.ok()) return a.status();
      (std::string(group) == "inputs" ? c.inputs : c.outputs)[key] = std::move(*a);
    }
  }
  return c;
}

double MaxAbs(const NpyArray& a) {
  double m = 0;
  for (double v : a.values) m = std::max(m, std::fabs(v));
  return m;
}

double MultimodalTolerance(const GoldenCase& c, bool float32, double scale) {
  if (float32) return 1e-6 * std::max(1.0, scale);
  return c.tolerance.value("atol", 1e-12);
}

}  // namespace posenc::testing
