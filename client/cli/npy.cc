#include "client/cli/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace posenc::cli {
namespace {

using client::DType;
using client::Tensor;

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

struct DescrEntry {
  std::string_view descr;
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {
    {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<f2", DType::kFloat16},
    {"<i4", DType::kInt32},   {"<i8", DType::kInt64},
};

// The value of `key` in the header dict (a Python literal such as
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"), up to the next top-level
// comma or the closing brace.
std::optional<std::string_view> HeaderValue(std::string_view header, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    const std::string quoted =
        absl::StrCat(std::string(1, quote), AbslView(key), std::string(1, quote));
    size_t pos = header.find(quoted);
    if (pos == std::string_view::npos) continue;
    pos = header.find(':', pos + quoted.size());
    if (pos == std::string_view::npos) return std::nullopt;
    std::string_view rest = header.substr(pos + 1);
    int depth = 0;
    size_t end = 0;
    for (; end < rest.size(); ++end) {
      const char c = rest[end];
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if ((c == ',' && depth == 0) || (c == '}' && depth == 0)) break;
    }
    const absl::string_view value = absl::StripAsciiWhitespace(AbslView(rest.substr(0, end)));
    return std::string_view(value.data(), value.size());
  }
  return std::nullopt;
}

absl::Status Invalid(std::string_view name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(AbslView(name), ": ", AbslView(what)));
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(std::string_view bytes, std::string_view name) {
  if (bytes.size() < kMagicSize + 4 || bytes.substr(0, kMagicSize) != kMagic) {
    return Invalid(name, "not a .npy file (no \\x93NUMPY magic)");
  }
  const auto major = static_cast<uint8_t>(bytes[kMagicSize]);
  size_t header_len = 0;
  size_t header_start = 0;
  if (major == 1) {
    header_len =
        static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Invalid(name, "truncated .npy header");
    for (int i = 3; i >= 0; --i) {
      header_len = (header_len << 8) | static_cast<uint8_t>(bytes[8 + i]);
    }
    header_start = 12;
  } else {
    return Invalid(name, absl::StrCat("unsupported .npy format version ", major));
  }
  if (bytes.size() < header_start + header_len) return Invalid(name, "truncated .npy header");
  const std::string_view header = bytes.substr(header_start, header_len);

  std::optional<std::string_view> descr = HeaderValue(header, "descr");
  std::optional<std::string_view> fortran = HeaderValue(header, "fortran_order");
  std::optional<std::string_view> shape_text = HeaderValue(header, "shape");
  if (!descr || !fortran || !shape_text) {
    return Invalid(name, absl::StrCat("malformed .npy header: ", AbslView(header)));
  }
  if (*fortran != "False") {
    return Invalid(name, "Fortran-order arrays are not supported (save a C-order array)");
  }
  std::string d(*descr);
  if (d.size() >= 2 && (d.front() == '\'' || d.front() == '"') && d.back() == d.front()) {
    d = d.substr(1, d.size() - 2);
  }
  if (d.size() == 3 && d[0] == '=') d[0] = '<';
  Tensor tensor;
  bool known = false;
  for (const DescrEntry& e : kDescrs) {
    if (d == e.descr) {
      tensor.dtype = e.dtype;
      known = true;
    }
  }
  if (!known) {
    return Invalid(name, absl::StrCat("npy dtype '", d,
                                      "' is not supported (supported: <f4 <f8 <f2 <i4 <i8)"));
  }
  std::string_view dims = *shape_text;
  if (dims.size() < 2 || dims.front() != '(' || dims.back() != ')') {
    return Invalid(name, absl::StrCat("malformed shape ", AbslView(dims)));
  }
  dims = dims.substr(1, dims.size() - 2);
  for (absl::string_view item : absl::StrSplit(AbslView(dims), ',', absl::SkipWhitespace())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &v) || v < 0) {
      return Invalid(name, absl::StrCat("malformed shape (", AbslView(dims), ")"));
    }
    tensor.shape.push_back(v);
  }
  const std::string_view payload = bytes.substr(header_start + header_len);
  int64_t n = 1;
  for (int64_t v : tensor.shape) {
    if (v > 0 && n > std::numeric_limits<int64_t>::max() / v / 8) {
      return Invalid(name, "shape too large");
    }
    n *= v;
  }
  const auto expected = static_cast<size_t>(n * client::DTypeSize(tensor.dtype));
  if (payload.size() != expected) {
    return Invalid(name,
                   absl::StrCat("expected ", expected, " bytes of data for ", d, " (",
                                absl::StrJoin(tensor.shape, ", "), "), found ", payload.size()));
  }
  tensor.data.assign(payload);
  return tensor;
}

absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor) {
  if (absl::Status s = tensor.Validate(); !s.ok()) return s;
  std::string_view descr;
  for (const DescrEntry& e : kDescrs) {
    if (e.dtype == tensor.dtype) descr = e.descr;
  }
  if (descr.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(client::DTypeName(tensor.dtype)),
                     " cannot be stored in .npy (NumPy has no such dtype)"));
  }
  std::string shape = absl::StrJoin(tensor.shape, ", ");
  if (tensor.shape.size() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", AbslView(descr),
                                    "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces and a final newline so that the data starts at a multiple of 64 bytes.
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff) {
    return absl::InvalidArgumentError("shape too long for a version 1.0 .npy header");
  }
  std::string out(kMagic, kMagicSize);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out += tensor.data;
  return out;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseNpy(bytes, path);
}

absl::Status WriteNpy(const std::string& path, const Tensor& tensor) {
  absl::StatusOr<std::string> bytes = SerializeNpy(tensor);
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace posenc::cli
