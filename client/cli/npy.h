// Reading and writing NumPy .npy files (format version 1.0; 2.0 and 3.0 are also read).
//
// Supported dtypes: '<f4' FLOAT32, '<f8' FLOAT64, '<f2' FLOAT16, '<i4' INT32, '<i8' INT64
// (little-endian; '=' is read as '<' on this little-endian host). C order only. Anything else
// (big-endian, Fortran order, other types) is INVALID_ARGUMENT naming the file and what it has.
// NumPy has no bfloat16: WriteNpy refuses BFLOAT16 (widen it to FLOAT32 first, which is exact).
//
// Thread-safety: the functions are thread-safe (distinct files).
#ifndef POSENC_CLIENT_CLI_NPY_H_
#define POSENC_CLIENT_CLI_NPY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "posenc/tensor.h"

namespace posenc::cli {

absl::StatusOr<client::Tensor> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const client::Tensor& tensor);

// The same, on bytes in memory (used by the file functions).
absl::StatusOr<client::Tensor> ParseNpy(std::string_view bytes, std::string_view name);
absl::StatusOr<std::string> SerializeNpy(const client::Tensor& tensor);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_NPY_H_
