// Typed JSON reads for the config.json normalizer (json.h).
#include "kernels/hf/json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "kernels/hf/config.h"

namespace posenc::hf {
namespace {

constexpr absl::string_view kPrefix = "config.hf_config_json: ";

// The array at `key` of `object` (empty when absent), element i read by
// element(value, "PATH[i]"); `elements` names them in the error for something else than an array.
template <typename T, typename Element>
absl::StatusOr<std::vector<T>> GetArray(const Json& object, absl::string_view key,
                                        absl::string_view path, absl::string_view elements,
                                        Element element) {
  std::vector<T> out;
  const Json* value = Find(object, key);
  if (value == nullptr) return out;
  if (!value->is_array()) {
    return Invalid(
        absl::StrCat(path, " must be an array of ", elements, ", got ", TypeName(*value)));
  }
  out.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    POSENC_ASSIGN_OR_RETURN(T v, element((*value)[i], absl::StrCat(path, "[", i, "]")));
    out.push_back(v);
  }
  return out;
}

}  // namespace

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(kPrefix, message));
}

std::string TypeName(const Json& value) { return value.type_name(); }

// The value at `key` of `object`, or null when absent or JSON null (both mean "not given").
const Json* Find(const Json& object, absl::string_view key) {
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<double> ToDouble(const Json& value, absl::string_view path) {
  if (!value.is_number()) {
    return Invalid(absl::StrCat(path, " must be a number, got ", TypeName(value)));
  }
  const double v = value.get<double>();
  if (!std::isfinite(v)) return Invalid(absl::StrCat(path, " must be finite, got ", v));
  return v;
}

absl::StatusOr<int64_t> ToInt(const Json& value, absl::string_view path) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(absl::StrCat(path, " is too large: ", u));
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    // Some exporters write integers as 4096.0; accept integral values within range.
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
    return Invalid(absl::StrCat(path, " must be an integer, got ", d));
  }
  return Invalid(absl::StrCat(path, " must be an integer, got ", TypeName(value)));
}

absl::StatusOr<bool> ToBool(const Json& value, absl::string_view path) {
  if (!value.is_boolean()) {
    return Invalid(absl::StrCat(path, " must be true or false, got ", TypeName(value)));
  }
  return value.get<bool>();
}

absl::StatusOr<double> ToFiniteDouble(const Json& value, absl::string_view path) {
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    return Invalid(absl::StrCat(path, " must be a finite number, got ",
                                value.is_number() ? value.dump() : TypeName(value)));
  }
  return value.get<double>();
}

absl::StatusOr<std::vector<double>> GetDoubleArray(const Json& object, absl::string_view key,
                                                   absl::string_view path) {
  return GetArray<double>(object, key, path, "numbers", ToFiniteDouble);
}

absl::StatusOr<std::vector<int64_t>> GetIntArray(const Json& object, absl::string_view key,
                                                 absl::string_view path) {
  return GetArray<int64_t>(object, key, path, "integers", ToInt);
}

// Nesting deeper than kMaxConfigDepth (arrays and objects, outside strings) is refused before
// the parser sees it.
absl::Status CheckNesting(absl::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxConfigDepth) {
        return Invalid(absl::StrCat("nests deeper than ", kMaxConfigDepth, " levels at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseObject(absl::string_view json_text) {
  // Bounded before parsing: a JSON tree takes some 30 times its text in memory, and every level
  // of nesting a stack frame.
  if (json_text.size() > kMaxConfigBytes) {
    return Invalid(absl::StrCat("is ", json_text.size(), " bytes, over the ", kMaxConfigBytes,
                                " a config.json may have (published ones are under 100 KB)"));
  }
  POSENC_RETURN_IF_ERROR(CheckNesting(json_text));
  // No exceptions escape: a parse error names where it is.
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return Invalid(
        absl::StrCat("malformed JSON at byte ", e.byte, ": ", kernels::Abbreviate(e.what(), 200)));
  } catch (const Json::exception& e) {  // e.g. a number beyond double's range
    return Invalid(absl::StrCat("malformed JSON: ", kernels::Abbreviate(e.what(), 200)));
  }
  if (!root.is_object()) {
    return Invalid(absl::StrCat("expected a JSON object, got ", TypeName(root)));
  }
  return root;
}

}  // namespace posenc::hf
