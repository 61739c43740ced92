// Where each value came from (sources.h).
#include "kernels/hf/sources.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/types.h"

namespace posenc::hf {
namespace {

// The origin of a value read at `key_path` (a class-default RoPE dict's path says so).
std::string OriginOf(const Family& f, absl::string_view key_path) {
  if (absl::StrContains(key_path, "class default")) return DefaultOrigin(f);
  return absl::StartsWith(key_path, "text_config.") ? "nested config (text_config)" : "file";
}

}  // namespace

std::string DefaultOrigin(const Family& f) {
  return absl::StrCat("architecture default (", f.source, ")");
}

std::string ValueText(double v) { return absl::StrFormat("%.10g", v); }

void ReadFrom(std::vector<ValueSource>* out, const Family& f, absl::string_view name,
              absl::string_view key_path, std::string value) {
  out->push_back(
      {std::string(name), std::string(key_path), OriginOf(f, key_path), std::move(value)});
}

void Defaulted(std::vector<ValueSource>* out, const Family& f, absl::string_view name,
               absl::string_view key, std::string value) {
  out->push_back({std::string(name), std::string(key), DefaultOrigin(f), std::move(value)});
}

// A JSON value as text; arrays by their length.
std::string JsonText(const Json& v) {
  if (v.is_array()) return absl::StrCat("[", v.size(), " values]");
  if (v.is_number()) return ValueText(v.get<double>());
  return kernels::Abbreviate(v.dump(), 64);
}

}  // namespace posenc::hf
