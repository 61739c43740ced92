// NumPy .npy files: the one reader and writer of the tree. The server's table loader, the CLI's
// .npy inputs and outputs and the golden test cases all go through it.
//
// Reading (ParseNpy, ReadNpyFile) accepts
//   - format versions 1.0, 2.0 and 3.0 (a 2- or 4-byte little-endian header length);
//   - the header dict as numpy writes it, {'descr': '<f4', 'fortran_order': False,
//     'shape': (3, 4), }: either quote, keys in any order, each once, optional trailing comma,
//     Python 2 longs (3L); nothing else (numpy's own reader is as strict);
//   - these dtype codes, in either byte order ('<' little, '>' big, '=' native, which is
//     little on every host posenc builds for, '|' for one-byte codes):
//       'f2' 'f4' 'f8'            FLOAT16  FLOAT32  FLOAT64
//       'i4' 'i8'                 INT32    INT64
//       'b1' 'i1' 'u1' 'i2' 'u2'  INT32  (widened exactly; a bool ('b1') reads as 0 or 1, so
//                                         attention masks saved as bool or uint8 arrays load as
//                                         integer masks)
//       'u4'                      INT64  (widened exactly)
//     Big-endian data is byte-swapped: NpyArray::bytes is always little-endian, as every tensor
//     of the tree.
// and refuses with INVALID_ARGUMENT, saying what the file has: other dtype codes (complex, 'u8',
// 'V2', ...: bfloat16 has no .npy dtype code), structured dtypes, fortran_order True, malformed
// or truncated headers, a shape whose size in bytes overflows int64, and data that is not exactly
// prod(shape) * itemsize bytes. Every read of the input is bounds-checked and nothing is
// allocated before the sizes have been checked against the bytes present. ParseNpy's messages do
// not name a file (callers prefix the name they know); ReadNpyFile's start with the path.
// Dimensions of 0 and rank 0 (a scalar) are valid .npy arrays: callers that need more check it.
//
// Writing (SerializeNpy, WriteNpyFile) produces format 1.0, little-endian, C order, the header
// padded with spaces so that the data starts at a multiple of 64 bytes (as numpy does). BFLOAT16
// has no .npy dtype code and is refused (widen it to FLOAT32 first, which is exact); the
// other dtypes are written as '<f2', '<f4', '<f8', '<i4' and '<i8'.
//
// Thread-safety: pure functions, thread-safe (the file functions on distinct files).
#ifndef POSENC_KERNELS_COMMON_NPY_H_
#define POSENC_KERNELS_COMMON_NPY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

// An array read from a .npy file.
struct NpyArray {
  DType dtype = DType::kFloat32;
  Shape shape;        // numpy's shape: () is a scalar, dimensions may be 0
  std::string bytes;  // prod(shape) * DTypeSize(dtype) bytes, little-endian, row-major
  std::string descr;  // the dtype code as the file spells it ('<f4', '>i8', '|b1'), for messages
};

// The array in the bytes of a .npy file.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view contents);

// The bytes of a .npy file holding `bytes`, which must be prod(shape) * DTypeSize(dtype)
// little-endian, row-major bytes (INVALID_ARGUMENT otherwise, or for BFLOAT16, or for a
// negative dimension).
absl::StatusOr<std::string> SerializeNpy(DType dtype, absl::Span<const int64_t> shape,
                                         absl::string_view bytes);

// ParseNpy on the contents of the file at `path` (errors start with "PATH: ").
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// Writes SerializeNpy(dtype, shape, bytes) to the file at `path` (errors start with "PATH: ").
absl::Status WriteNpyFile(const std::string& path, DType dtype, absl::Span<const int64_t> shape,
                          absl::string_view bytes);

// A shape as a .npy header writes it: "(4, 8)", "(4,)", "()".
std::string NpyShapeString(absl::Span<const int64_t> shape);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_NPY_H_
