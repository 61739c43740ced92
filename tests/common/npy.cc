// The test view of a .npy file (kernels::ReadNpyFile, then every element as a double and, for
// integer arrays, as an int64) and .npy files put together by hand.
#include "tests/common/npy.h"

#include "absl/strings/str_cat.h"
#include "kernels/common/npy.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"

namespace posenc::testing {

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(const kernels::NpyArray array, kernels::ReadNpyFile(path));
  NpyArray a;
  a.descr = array.descr;
  a.shape.assign(array.shape.begin(), array.shape.end());
  const int64_t n = static_cast<int64_t>(array.bytes.size()) / kernels::DTypeSize(array.dtype);
  const bool integer = kernels::IsIntDType(array.dtype);
  a.values.resize(static_cast<size_t>(n));
  if (integer) a.ints.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    a.values[static_cast<size_t>(i)] = kernels::LoadAsDouble(array.bytes.data(), array.dtype, i);
    if (integer) {
      a.ints[static_cast<size_t>(i)] = kernels::LoadAsInt64(array.bytes.data(), array.dtype, i);
    }
  }
  return a;
}

std::string NpyFileBytes(const std::string& dict, const std::string& data, int major) {
  const int length_bytes = major == 1 ? 2 : 4;
  const size_t preamble = 8 + static_cast<size_t>(length_bytes);
  std::string header = dict;
  while ((preamble + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (int i = 0; i < length_bytes; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return out + header + data;
}

std::string NpyDict(const std::string& descr, const std::string& shape, bool fortran) {
  return absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", fortran ? "True" : "False",
                      ", 'shape': ", shape, ", }");
}

}  // namespace posenc::testing
