// Typed reads of config.json values for the normalizer (kernels/hf; internal to it). Every
// error is INVALID_ARGUMENT "config.hf_config_json: PATH must be ..., got TYPE", PATH the key's
// path in the file ("text_config.rope_scaling.factor"). A key that is absent or JSON null is
// "not given" (nullopt, an empty array).
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_HF_JSON_H_
#define POSENC_KERNELS_HF_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace posenc::hf {

using Json = nlohmann::json;

// INVALID_ARGUMENT "config.hf_config_json: <message>".
absl::Status Invalid(absl::string_view message);

// The text of a config.json as a JSON object: at most kMaxConfigBytes, nested at most
// kMaxConfigDepth deep (both checked before parsing), well-formed.
absl::StatusOr<Json> ParseObject(absl::string_view json_text);

std::string TypeName(const Json& value);

// The value at `key` of `object`, or null when absent or JSON null (both mean "not given").
const Json* Find(const Json& object, absl::string_view key);

absl::StatusOr<double> ToDouble(const Json& value, absl::string_view path);
// Integers, also written as 4096.0 (some exporters do), within int64.
absl::StatusOr<int64_t> ToInt(const Json& value, absl::string_view path);
absl::StatusOr<bool> ToBool(const Json& value, absl::string_view path);
absl::StatusOr<double> ToFiniteDouble(const Json& value, absl::string_view path);

// The value at `key` of `object` read by ToDouble, ToInt or ToBool, or nullopt when not given.
template <typename T>
absl::StatusOr<std::optional<T>> Get(const Json& object, absl::string_view key,
                                     absl::string_view path) {
  const Json* value = Find(object, key);
  if (value == nullptr) return std::nullopt;
  absl::StatusOr<T> v;
  if constexpr (std::is_same_v<T, double>) {
    v = ToDouble(*value, path);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    v = ToInt(*value, path);
  } else {
    static_assert(std::is_same_v<T, bool>);
    v = ToBool(*value, path);
  }
  if (!v.ok()) return v.status();
  return *v;
}

// The arrays at `key` of `object` (empty when absent).
absl::StatusOr<std::vector<double>> GetDoubleArray(const Json& object, absl::string_view key,
                                                   absl::string_view path);
absl::StatusOr<std::vector<int64_t>> GetIntArray(const Json& object, absl::string_view key,
                                                 absl::string_view path);

// Nesting deeper than kMaxConfigDepth (arrays and objects, outside strings) is refused before
// the parser sees it.
absl::Status CheckNesting(absl::string_view text);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_JSON_H_
