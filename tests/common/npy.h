// A small reader for NumPy .npy files (format 1.x/2.x, little-endian, C order), for tests.
#ifndef POSENC_TESTS_COMMON_NPY_H_
#define POSENC_TESTS_COMMON_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace posenc::testing {

struct NpyArray {
  std::string descr;           // "<f8", "<i8", ...
  std::vector<int64_t> shape;
  std::vector<double> values;  // every element widened to double (ints exact below 2^53)
  std::vector<int64_t> ints;   // filled for integer arrays

  int64_t size() const { return static_cast<int64_t>(values.size()); }
};

absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_NPY_H_
