// The CLI's names of the wire's enums (wire_names.h).
#include "client/cli/wire_names.h"

#include <deque>
#include <mutex>
#include <string>
#include <utility>

namespace posenc::cli {

std::string_view KeepForever(std::string text) {
  static std::mutex mu;
  static auto* const kept = new std::deque<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(text));
  return kept->back();
}

FlagSpec FloatDTypeFlag(std::string_view help) {
  std::string choices;
  for (v1::DType wire : v1::SpecifiedValues<v1::DType>()) {
    const std::string name = v1::LowerName(wire);
    const std::optional<client::DType> dtype = client::ParseDType(name);
    if (!dtype.has_value() || !client::IsFloatDType(*dtype)) continue;
    if (!choices.empty()) choices += '|';
    choices += name;
  }
  return {"dtype", FlagType::kChoice, "", help, KeepForever(std::move(choices))};
}

std::optional<client::DType> DTypeFlag(const ParsedFlags& flags) {
  const std::optional<std::string> value = flags.String("dtype");
  return value.has_value() ? client::ParseDType(*value) : std::nullopt;
}

}  // namespace posenc::cli
