// The .npy codec: the preamble, a strict parser of the header's Python dict, the dtype codes and
// the data (byte-swapped or widened where needed), and the format 1.0 writer.
#include "kernels/common/npy.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/file.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

static_assert(std::endian::native == std::endian::little,
              "posenc tensors are little-endian: '=' descrs and the byte swaps assume that host");

constexpr absl::string_view kMagic("\x93NUMPY", 6);
constexpr absl::string_view kSupportedCodes =
    "supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 b1 in either byte order; bfloat16 has no .npy "
    "dtype code";

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

// `status` with "PREFIX: " in front of its message.
absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

// The unsigned integer in the `n` (<= 8) bytes at `p`, least significant byte first unless
// `big_endian`.
uint64_t LoadUnsigned(const char* p, int n, bool big_endian) {
  uint64_t value = 0;
  for (int i = 0; i < n; ++i) {
    value = (value << 8) | static_cast<unsigned char>(p[big_endian ? i : n - 1 - i]);
  }
  return value;
}

// prod(shape) * item_size, or false when a dimension is negative or the product overflows
// int64.
bool ByteSize(absl::Span<const int64_t> shape, int64_t item_size, int64_t* bytes) {
  int64_t total = item_size;
  for (int64_t d : shape) {
    if (!CheckedMul(total, d, &total)) return false;
  }
  *bytes = total;
  return true;
}

// ---------------------------------------------------------------------------------------------
// The header
// ---------------------------------------------------------------------------------------------

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// The header of a .npy file: the repr of a Python dict such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ending in '\n'. Accepts exactly that subset of Python literals
// (strings without escapes, True/False, tuples of non-negative integers) and the keys descr,
// fortran_order and shape, each once, as numpy's own reader does.
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool has_descr = false;
    bool has_fortran = false;
    bool has_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    SkipSpace();
    while (!Consume('}')) {
      POSENC_ASSIGN_OR_RETURN(const std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after '", key, "'"));
      SkipSpace();
      if (key == "descr") {
        if (has_descr) return Error("key 'descr' given twice");
        has_descr = true;
        if (Peek() == '[') {
          return Error(
              "descr: structured (record) dtypes are not supported, expected a code such as "
              "'<f4'");
        }
        POSENC_ASSIGN_OR_RETURN(header.descr, ParseString());
      } else if (key == "fortran_order") {
        if (has_fortran) return Error("key 'fortran_order' given twice");
        has_fortran = true;
        POSENC_ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
      } else if (key == "shape") {
        if (has_shape) return Error("key 'shape' given twice");
        has_shape = true;
        POSENC_ASSIGN_OR_RETURN(header.shape, ParseTuple());
      } else {
        return Error(
            absl::StrCat("unexpected key '", key, "' (expected descr, fortran_order and shape)"));
      }
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
      } else if (Peek() != '}') {
        return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after '}'");
    if (!has_descr || !has_fortran || !has_shape) {
      return Invalid(".npy header: expected the keys descr, fortran_order and shape");
    }
    return header;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return Invalid(absl::StrCat(".npy header: ", what, " at offset ", pos_));
  }
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool Consume(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  absl::StatusOr<std::string> ParseString() {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a quoted string");
    ++pos_;
    const size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' || text_[pos_] == '\n') return Error("unsupported string");
      ++pos_;
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    std::string out(text_.substr(begin, pos_ - begin));
    ++pos_;
    return out;
  }

  absl::StatusOr<bool> ParseBool() {
    if (absl::StartsWith(text_.substr(pos_), "True")) {
      pos_ += 4;
      return true;
    }
    if (absl::StartsWith(text_.substr(pos_), "False")) {
      pos_ += 5;
      return false;
    }
    return Error("fortran_order: expected True or False");
  }

  absl::StatusOr<std::vector<int64_t>> ParseTuple() {
    if (!Consume('(')) return Error("shape: expected a tuple such as (1024, 768)");
    std::vector<int64_t> dims;
    SkipSpace();
    while (!Consume(')')) {
      if (Peek() < '0' || Peek() > '9') {
        return Error("shape: expected a non-negative integer");
      }
      int64_t value = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        const int digit = Peek() - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return Error("shape: dimension too large");
        }
        value = value * 10 + digit;
        ++pos_;
      }
      Consume('L');  // Python 2 longs: (3L, 4L)
      dims.push_back(value);
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
      } else if (Peek() != ')') {
        return Error("shape: expected ',' or ')'");
      }
    }
    return dims;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Dtype codes
// ---------------------------------------------------------------------------------------------

// What a descr such as '>i2' says about the data in the file, and the dtype it is read into.
struct NpyCode {
  char kind = 'f';          // 'f' float, 'i' signed, 'u' unsigned, 'b' bool
  int item_size = 4;        // bytes per element in the file
  bool big_endian = false;  // the file's byte order
  DType dtype = DType::kFloat32;
  // The element widens on reading (item_size < DTypeSize(dtype)).
  bool widens() const { return item_size != DTypeSize(dtype); }
};

absl::StatusOr<NpyCode> ParseDescr(absl::string_view descr) {
  const auto unsupported = [descr] {
    return Invalid(
        absl::StrCat("npy dtype '", descr, "' is not supported (", kSupportedCodes, ")"));
  };
  if (descr.size() != 3 || descr[2] < '1' || descr[2] > '8') return unsupported();
  NpyCode code;
  code.kind = descr[1];
  code.item_size = descr[2] - '0';
  const char order = descr[0];
  code.big_endian = order == '>';
  const bool known_order = order == '<' || order == '>' || order == '=' ||
                           (order == '|' && code.item_size == 1);  // '|': byte order moot
  if (!known_order) return unsupported();
  struct Known {
    char kind;
    int item_size;
    DType dtype;
  };
  static constexpr Known kKnown[] = {
      {'f', 2, DType::kFloat16}, {'f', 4, DType::kFloat32}, {'f', 8, DType::kFloat64},
      {'i', 4, DType::kInt32},   {'i', 8, DType::kInt64},   {'b', 1, DType::kInt32},
      {'i', 1, DType::kInt32},   {'u', 1, DType::kInt32},   {'i', 2, DType::kInt32},
      {'u', 2, DType::kInt32},   {'u', 4, DType::kInt64},
  };
  for (const Known& known : kKnown) {
    if (known.kind == code.kind && known.item_size == code.item_size) {
      code.dtype = known.dtype;
      return code;
    }
  }
  return unsupported();
}

// The `n` elements of `data` in the file's code, as little-endian `code.dtype` into `out`
// (n * DTypeSize(code.dtype) bytes).
void DecodeElements(const NpyCode& code, const char* data, int64_t n, char* out) {
  const int64_t out_size = DTypeSize(code.dtype);
  if (!code.widens()) {
    if (!code.big_endian) {
      std::memcpy(out, data, static_cast<size_t>(n * out_size));
      return;
    }
    for (int64_t e = 0; e < n; ++e) {
      std::reverse_copy(data + e * out_size, data + (e + 1) * out_size, out + e * out_size);
    }
    return;
  }
  const int bits = 8 * code.item_size;
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t raw = LoadUnsigned(data + e * code.item_size, code.item_size, code.big_endian);
    int64_t value = static_cast<int64_t>(raw);
    if (code.kind == 'b') {
      value = raw != 0;
    } else if (code.kind == 'i' && (raw >> (bits - 1)) != 0) {
      value = static_cast<int64_t>(raw) - (int64_t{1} << bits);  // sign-extend
    }
    if (code.dtype == DType::kInt32) {
      const int32_t narrow = static_cast<int32_t>(value);  // exact: at most 16 bits
      std::memcpy(out + e * 4, &narrow, 4);
    } else {
      std::memcpy(out + e * 8, &value, 8);
    }
  }
}

// The code SerializeNpy writes for `dtype`, or "" when .npy has none (BFLOAT16).
absl::string_view DescrOf(DType dtype) {
  static constexpr std::pair<DType, absl::string_view> kWritten[] = {
      {DType::kFloat16, "<f2"}, {DType::kFloat32, "<f4"}, {DType::kFloat64, "<f8"},
      {DType::kInt32, "<i4"},   {DType::kInt64, "<i8"},
  };
  for (const auto& [written, descr] : kWritten) {
    if (written == dtype) return descr;
  }
  return "";
}

}  // namespace

std::string NpyShapeString(absl::Span<const int64_t> shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view contents) {
  if (contents.substr(0, kMagic.size()) != kMagic) {
    return Invalid("not a .npy file: bad magic (expected \\x93NUMPY)");
  }
  if (contents.size() < 10) {
    return Invalid(
        absl::StrCat("truncated: ", contents.size(), " bytes, shorter than the .npy preamble"));
  }
  const int major = static_cast<unsigned char>(contents[6]);
  const int minor = static_cast<unsigned char>(contents[7]);
  int length_bytes = 0;
  if (major == 1 && minor == 0) {
    length_bytes = 2;
  } else if ((major == 2 || major == 3) && minor == 0) {
    length_bytes = 4;
  } else {
    return Invalid(absl::StrCat("unsupported .npy format version ", major, ".", minor,
                                " (1.0, 2.0 and 3.0 are)"));
  }
  const size_t preamble = 8 + static_cast<size_t>(length_bytes);
  if (contents.size() < preamble) {
    return Invalid(
        absl::StrCat("truncated: ", contents.size(), " bytes, shorter than the .npy preamble"));
  }
  const uint64_t header_length = LoadUnsigned(contents.data() + 8, length_bytes, false);
  if (header_length > contents.size() - preamble) {
    return Invalid(absl::StrCat("header length ", header_length, " runs past the end of the file (",
                                contents.size() - preamble, " bytes follow the preamble)"));
  }
  POSENC_ASSIGN_OR_RETURN(
      const NpyHeader header,
      NpyHeaderParser(contents.substr(preamble, static_cast<size_t>(header_length))).Parse());
  POSENC_ASSIGN_OR_RETURN(const NpyCode code, ParseDescr(header.descr));
  const std::string what = absl::StrCat("'", header.descr, "' ", NpyShapeString(header.shape));
  if (header.fortran_order) {
    return Invalid(absl::StrCat("fortran_order is True (", what,
                                "): expected a C-order array (numpy: np.ascontiguousarray)"));
  }
  int64_t file_bytes = 0;
  int64_t array_bytes = 0;
  if (!ByteSize(header.shape, code.item_size, &file_bytes) ||
      !ByteSize(header.shape, DTypeSize(code.dtype), &array_bytes)) {
    return Invalid(absl::StrCat("shape ", NpyShapeString(header.shape), " of '", header.descr,
                                "': the array must be smaller than 2^63 bytes"));
  }
  const absl::string_view data = contents.substr(preamble + static_cast<size_t>(header_length));
  if (static_cast<uint64_t>(data.size()) != static_cast<uint64_t>(file_bytes)) {
    return Invalid(
        absl::StrCat("data holds ", data.size(), " bytes, expected ", file_bytes, " (", what, ")"));
  }
  NpyArray array;
  array.dtype = code.dtype;
  array.shape.assign(header.shape.begin(), header.shape.end());
  array.descr = header.descr;
  array.bytes.resize(static_cast<size_t>(array_bytes));
  DecodeElements(code, data.data(), file_bytes / code.item_size, array.bytes.data());
  return array;
}

absl::StatusOr<std::string> SerializeNpy(DType dtype, absl::Span<const int64_t> shape,
                                         absl::string_view bytes) {
  const absl::string_view descr = DescrOf(dtype);
  if (descr.empty()) {
    return Invalid(
        absl::StrCat(DTypeName(dtype), " cannot be stored in .npy (NumPy has no such dtype)"));
  }
  int64_t expected = 0;
  if (!ByteSize(shape, DTypeSize(dtype), &expected)) {
    return Invalid(absl::StrCat("shape ", ShapeString(shape),
                                ": expected non-negative dimensions and fewer than 2^63 bytes"));
  }
  if (static_cast<uint64_t>(bytes.size()) != static_cast<uint64_t>(expected)) {
    return Invalid(absl::StrCat(DTypeName(dtype), " ", ShapeString(shape), " needs ", expected,
                                " bytes of data, got ", bytes.size()));
  }
  std::string header = absl::StrCat(
      "{'descr': '", descr, "', 'fortran_order': False, 'shape': ", NpyShapeString(shape), ", }");
  // Spaces and a final newline, so that the data starts at a multiple of 64 bytes.
  const size_t unpadded = kMagic.size() + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff) {
    return Invalid(
        absl::StrCat("shape of rank ", shape.size(), " is too long for a version 1.0 .npy header"));
  }
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(bytes.data(), bytes.size());
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(const std::string contents, ReadFileToString(path));
  absl::StatusOr<NpyArray> array = ParseNpy(contents);
  if (!array.ok()) return Prefixed(path, array.status());
  return array;
}

absl::Status WriteNpyFile(const std::string& path, DType dtype, absl::Span<const int64_t> shape,
                          absl::string_view bytes) {
  absl::StatusOr<std::string> contents = SerializeNpy(dtype, shape, bytes);
  if (!contents.ok()) return Prefixed(path, contents.status());
  return WriteStringToFile(path, *contents);
}

}  // namespace posenc::kernels
