#include "server/table_loader.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/common/file.h"
#include "kernels/common/npy.h"
#include "nlohmann/json.hpp"
#include "server/status.h"
#include "spdlog/spdlog.h"

namespace posenc::server {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using kernels::DType;

// Largest .safetensors JSON header (the safetensors library's own limit is 100 MB).
constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

// The unsigned little-endian integer in the `n` (<= 8) bytes at `p`.
uint64_t ReadLittleEndian(const char* p, int n) {
  uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(p[i]);
  return value;
}

// prod(shape) * item_size, or false when a dimension is < 1 or the product overflows int64.
bool TableBytes(absl::Span<const int64_t> shape, int64_t item_size, int64_t* bytes) {
  int64_t total = item_size;
  for (int64_t d : shape) {
    if (d < 1 || !kernels::CheckedMul(total, d, &total)) return false;
  }
  *bytes = total;
  return true;
}

// ---------------------------------------------------------------------------------------------
// .safetensors
// ---------------------------------------------------------------------------------------------

absl::StatusOr<DType> SafetensorsDType(absl::string_view dtype) {
  if (dtype == "F32") return DType::kFloat32;
  if (dtype == "F16") return DType::kFloat16;
  if (dtype == "BF16") return DType::kBFloat16;
  if (dtype == "F64") return DType::kFloat64;
  const absl::string_view expected = "expected F32, F16, BF16 or F64";
  for (absl::string_view integer : {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"}) {
    if (dtype == integer) {
      return Invalid(
          absl::StrCat("dtype ", dtype, " is not a float dtype: tables are float, ", expected));
    }
  }
  return Invalid(absl::StrCat("unsupported dtype \"", dtype, "\": ", expected));
}

// `value` as JSON for an error message, cut to at most 80 characters.
// Arrays and objects nested in `value` show as [...] and {...}: dump() recurses, and a header
// nested a million levels deep would overflow the stack.
std::string ShortDump(const Json& value) {
  constexpr size_t kMax = 80;
  auto flat = [](const Json& v) -> std::string {
    if (v.is_array()) return v.empty() ? "[]" : "[...]";
    if (v.is_object()) return v.empty() ? "{}" : "{...}";
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  std::string text;
  if (value.is_array()) {
    text = "[";
    for (const Json& element : value) {
      if (text.size() > kMax) break;
      absl::StrAppend(&text, text.size() > 1 ? "," : "", flat(element));
    }
    text += "]";
  } else {
    text = flat(value);
  }
  if (text.size() > kMax) text = absl::StrCat(text.substr(0, kMax - 3), "...");
  return text;
}

// A tensor name for an error message, cut to at most 200 characters.
std::string Quoted(absl::string_view name) {
  if (name.size() > 200) return absl::StrCat("\"", name.substr(0, 197), "...\"");
  return absl::StrCat("\"", name, "\"");
}

// A JSON number that is an integer in [0, 2^63).
bool AsNonNegativeInt(const Json& value, int64_t* out) {
  if (!value.is_number_unsigned()) return false;
  const uint64_t v = value.get<uint64_t>();
  if (v > kMaxInt64) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// One entry of the header: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
absl::StatusOr<LoadedTable> ParseSafetensorsEntry(const std::string& tensor, const Json& info,
                                                  absl::string_view data, absl::string_view stem) {
  const std::string where = absl::StrCat("tensor ", Quoted(tensor), ": ");
  if (tensor.empty()) return Invalid("tensor \"\": expected a non-empty tensor name");
  if (!info.is_object()) {
    return Invalid(absl::StrCat(where, "expected a JSON object, got ", info.type_name()));
  }
  LoadedTable table;
  table.name = absl::StrCat(stem, "/", tensor);

  auto dtype = info.find("dtype");
  if (dtype == info.end() || !dtype->is_string()) {
    return Invalid(absl::StrCat(where, "dtype: expected a string such as \"F32\""));
  }
  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  auto parsed_dtype = SafetensorsDType(dtype_name);
  if (!parsed_dtype.ok()) return Invalid(absl::StrCat(where, parsed_dtype.status().message()));
  table.dtype = *parsed_dtype;

  auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array()) {
    return Invalid(absl::StrCat(where, "shape: expected an array such as [1024, 768]"));
  }
  for (const Json& d : *shape) {
    int64_t dim = 0;
    if (!AsNonNegativeInt(d, &dim)) {
      return Invalid(absl::StrCat(where, "shape ", ShortDump(*shape),
                                  ": expected non-negative integers below 2^63"));
    }
    table.shape.push_back(dim);
  }
  if (table.shape.size() != 2) {
    return Invalid(absl::StrCat(where, "shape ", kernels::ShapeString(table.shape),
                                ": expected rank 2 ([rows, cols]), got rank ", table.shape.size()));
  }
  int64_t expected = 0;
  if (!TableBytes(table.shape, kernels::DTypeSize(table.dtype), &expected)) {
    return Invalid(absl::StrCat(where, "shape ", kernels::ShapeString(table.shape),
                                ": every dimension must be >= 1 and the table smaller than "
                                "2^63 bytes"));
  }

  auto offsets = info.find("data_offsets");
  int64_t begin = 0;
  int64_t end = 0;
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 ||
      !AsNonNegativeInt((*offsets)[0], &begin) || !AsNonNegativeInt((*offsets)[1], &end)) {
    return Invalid(
        absl::StrCat(where, "data_offsets: expected [begin, end], two non-negative integers, got ",
                     offsets == info.end() ? std::string("nothing") : ShortDump(*offsets)));
  }
  const std::string offsets_text = absl::StrCat("data_offsets [", begin, ", ", end, "]");
  if (begin > end) return Invalid(absl::StrCat(where, offsets_text, ": begin is after end"));
  if (end > static_cast<int64_t>(data.size())) {
    return Invalid(absl::StrCat(where, offsets_text, " out of range: the data section holds ",
                                data.size(), " bytes"));
  }
  if (end - begin != expected) {
    return Invalid(absl::StrCat(where, offsets_text, " hold ", end - begin, " bytes, expected ",
                                expected, " (", dtype_name, " ", kernels::ShapeString(table.shape),
                                ")"));
  }
  table.bytes.assign(data.data() + begin, static_cast<size_t>(expected));
  return table;
}

}  // namespace

absl::StatusOr<LoadedTable> ParseNpy(absl::string_view contents, absl::string_view stem) {
  POSENC_ASSIGN_OR_RETURN(kernels::NpyArray array, kernels::ParseNpy(contents));
  if (!kernels::IsFloatDType(array.dtype)) {
    return Invalid(absl::StrCat("dtype '", array.descr,
                                "' is not a float dtype: tables are float, expected 'f2', 'f4' or "
                                "'f8' (either byte order)"));
  }
  const std::string shape_text = kernels::NpyShapeString(array.shape);
  if (array.shape.size() != 2) {
    return Invalid(absl::StrCat("shape ", shape_text, ": expected rank 2 ([rows, cols]), got rank ",
                                array.shape.size()));
  }
  if (array.shape[0] < 1 || array.shape[1] < 1) {
    return Invalid(absl::StrCat("shape ", shape_text, ": every dimension must be >= 1"));
  }
  LoadedTable table;
  table.name = std::string(stem);
  table.dtype = array.dtype;
  table.shape = std::move(array.shape);
  table.bytes = std::move(array.bytes);
  return table;
}

absl::StatusOr<std::vector<LoadedTable>> ParseSafetensors(absl::string_view contents,
                                                          absl::string_view stem) {
  if (contents.size() < 8) {
    return Invalid(absl::StrCat("truncated: ", contents.size(),
                                " bytes, shorter than the 8-byte .safetensors header length"));
  }
  const uint64_t header_length = ReadLittleEndian(contents.data(), 8);
  if (header_length > kMaxSafetensorsHeaderBytes) {
    return Invalid(absl::StrCat("header length ", header_length, " exceeds the limit of ",
                                kMaxSafetensorsHeaderBytes, " bytes (not a .safetensors file?)"));
  }
  if (header_length > contents.size() - 8) {
    return Invalid(absl::StrCat("header length ", header_length, " runs past the end of the file (",
                                contents.size() - 8, " bytes follow the length)"));
  }
  const absl::string_view header = contents.substr(8, static_cast<size_t>(header_length));
  const absl::string_view data = contents.substr(8 + static_cast<size_t>(header_length));

  // nlohmann::json keeps the last of repeated keys; the callback sees every top-level key.
  std::set<std::string> keys;
  std::string repeated;
  const Json::parser_callback_t note_keys = [&keys, &repeated](int depth, Json::parse_event_t event,
                                                               Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !keys.insert(parsed.get_ref<const std::string&>()).second && repeated.empty()) {
      repeated = parsed.get_ref<const std::string&>();
    }
    return true;
  };
  const Json root = Json::parse(header.begin(), header.end(), note_keys,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) return Invalid("header is not valid JSON");
  if (!root.is_object()) {
    return Invalid(absl::StrCat("header: expected a JSON object, got ", root.type_name()));
  }
  if (!repeated.empty()) {
    return Invalid(absl::StrCat("tensor ", Quoted(repeated), ": listed twice in the header"));
  }
  std::vector<LoadedTable> tables;
  for (const auto& [tensor, info] : root.items()) {
    if (tensor == "__metadata__") {
      if (!info.is_object()) {
        return Invalid(
            absl::StrCat("__metadata__: expected a JSON object, got ", info.type_name()));
      }
      continue;
    }
    POSENC_ASSIGN_OR_RETURN(LoadedTable table, ParseSafetensorsEntry(tensor, info, data, stem));
    tables.push_back(std::move(table));
  }
  return tables;
}

absl::StatusOr<std::vector<LoadedTable>> LoadTableFile(const std::string& path) {
  const fs::path file(path);
  const std::string extension = file.extension().string();
  const std::string stem = file.stem().string();
  if (extension != ".npy" && extension != ".safetensors") {
    return Invalid(absl::StrCat(path, ": expected a .npy or .safetensors file"));
  }
  POSENC_ASSIGN_OR_RETURN(const std::string contents, kernels::ReadFileToString(path));
  std::vector<LoadedTable> tables;
  absl::Status status;
  if (extension == ".npy") {
    auto table = ParseNpy(contents, stem);
    if (table.ok()) {
      tables.push_back(std::move(table).value());
    } else {
      status = table.status();
    }
  } else {
    auto parsed = ParseSafetensors(contents, stem);
    if (parsed.ok()) {
      tables = std::move(parsed).value();
    } else {
      status = parsed.status();
    }
  }
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  return tables;
}

absl::Status LoadTableDirectory(const std::string& dir, TableRegistry* registry) {
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such directory"));
  }
  if (error) return Invalid(absl::StrCat(dir, ": ", error.message()));
  if (!fs::is_directory(status)) return Invalid(absl::StrCat(dir, ": not a directory"));

  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    paths.push_back(it->path());
  }
  if (error) return Invalid(absl::StrCat(dir, ": cannot list: ", error.message()));
  std::sort(paths.begin(), paths.end());

  int loaded = 0;
  for (const fs::path& path : paths) {
    const std::string extension = path.extension().string();
    if (extension != ".npy" && extension != ".safetensors") {
      spdlog::debug("tables: ignoring {} (not .npy or .safetensors)", path.string());
      continue;
    }
    POSENC_ASSIGN_OR_RETURN(std::vector<LoadedTable> tables, LoadTableFile(path.string()));
    for (LoadedTable& table : tables) {
      const std::string description =
          absl::StrCat(kernels::DTypeName(table.dtype), " ", kernels::ShapeString(table.shape));
      const std::string name = table.name;
      if (absl::Status added = registry->Add(std::move(table.name), table.dtype,
                                             std::move(table.shape), std::move(table.bytes));
          !added.ok()) {
        return absl::Status(added.code(), absl::StrCat(path.string(), ": ", added.message()));
      }
      spdlog::info("table \"{}\": {} from {}", name, description, path.string());
      ++loaded;
    }
  }
  spdlog::info("tables: {} loaded from {}", loaded, dir);
  return absl::OkStatus();
}

}  // namespace posenc::server
