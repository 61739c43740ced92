#include "tests/common/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace posenc::testing {
namespace {

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// The value of `key` in the header dict, e.g. 'descr': '<f8'.
std::string HeaderField(const std::string& header, const std::string& key) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  at = header.find(':', at);
  if (at == std::string::npos) return "";
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  if (header[at] == '\'') {
    size_t end = header.find('\'', at + 1);
    return header.substr(at + 1, end - at - 1);
  }
  if (header[at] == '(') {
    size_t end = header.find(')', at);
    return header.substr(at + 1, end - at - 1);
  }
  size_t end = header.find_first_of(",}", at);
  return header.substr(at, end - at);
}

}  // namespace

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return Bad(path, "not an npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    offset = 10;
  } else {
    if (bytes.size() < 12) return Bad(path, "truncated header");
    uint32_t n;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n;
    offset = 12;
  }
  if (offset + header_len > bytes.size()) return Bad(path, "truncated header");
  const std::string header = bytes.substr(offset, header_len);
  NpyArray a;
  a.descr = HeaderField(header, "descr");
  if (HeaderField(header, "fortran_order") != "False") return Bad(path, "fortran order");
  std::stringstream shape(HeaderField(header, "shape"));
  std::string dim;
  while (std::getline(shape, dim, ',')) {
    if (dim.find_first_not_of(' ') == std::string::npos) continue;
    a.shape.push_back(std::stoll(dim));
  }
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  const char* data = bytes.data() + offset + header_len;
  const size_t avail = bytes.size() - offset - header_len;
  auto need = [&](size_t width) { return static_cast<size_t>(n) * width <= avail; };
  a.values.resize(static_cast<size_t>(n));
  if (a.descr == "<f8") {
    if (!need(8)) return Bad(path, "truncated data");
    std::memcpy(a.values.data(), data, static_cast<size_t>(n) * 8);
  } else if (a.descr == "<f4") {
    if (!need(4)) return Bad(path, "truncated data");
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      a.values[i] = v;
    }
  } else if (a.descr == "<i8" || a.descr == "<i4" || a.descr == "|b1" || a.descr == "|u1") {
    const size_t w = a.descr == "<i8" ? 8 : a.descr == "<i4" ? 4 : 1;
    if (!need(w)) return Bad(path, "truncated data");
    a.ints.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = 0;
      if (w == 8) {
        std::memcpy(&v, data + 8 * i, 8);
      } else if (w == 4) {
        int32_t v32;
        std::memcpy(&v32, data + 4 * i, 4);
        v = v32;
      } else {
        v = static_cast<unsigned char>(data[i]);
      }
      a.ints[i] = v;
      a.values[i] = static_cast<double>(v);
    }
  } else {
    return Bad(path, absl::StrCat("unsupported dtype ", a.descr));
  }
  return a;
}

}  // namespace posenc::testing
