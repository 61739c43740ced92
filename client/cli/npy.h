// The CLI's .npy files: client::Tensor in and out of the one .npy codec (kernels/common/npy.h,
// where the accepted files are listed: format 1.0/2.0/3.0, C order, float16/32/64 and
// int32/int64 in either byte order, bool and 8/16-bit integer arrays read as INT32, 'u4' as
// INT64). Errors are INVALID_ARGUMENT (NOT_FOUND for a missing file) and start with the path.
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

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_NPY_H_
