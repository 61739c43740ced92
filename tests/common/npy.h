// .npy files for tests: the golden cases and the CLI's outputs read through the one .npy codec
// (kernels/common/npy.h), every element widened to double for comparisons.
#ifndef POSENC_TESTS_COMMON_NPY_H_
#define POSENC_TESTS_COMMON_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace posenc::testing {

struct NpyArray {
  std::string descr;  // as the file spells it: "<f8", "<i8", "|b1", ...
  std::vector<int64_t> shape;
  std::vector<double> values;  // every element widened to double (ints exact below 2^53)
  std::vector<int64_t> ints;   // filled for integer (and bool) arrays

  int64_t size() const { return static_cast<int64_t>(values.size()); }
};

// Every file kernels::ReadNpyFile reads; its errors (starting with the path).
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

// The bytes of a .npy file put together by hand, independently of the codec: the magic, version
// `major`.0, the header length (2 bytes for version 1, 4 otherwise), `dict` padded with spaces to
// end at a multiple of 64 bytes and closed by '\n', then `data`.
std::string NpyFileBytes(const std::string& dict, const std::string& data, int major = 1);

// The header dict numpy writes: NpyDict("<f4", "(2, 3)") is
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
std::string NpyDict(const std::string& descr, const std::string& shape, bool fortran = false);

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_NPY_H_
