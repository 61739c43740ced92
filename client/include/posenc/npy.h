// .npy files of posenc::client::Tensor: what the CLI's --npy writes and its inputs read, for a
// C++ caller to save a result (RopeCache tables, the FUSED_COS_SIN / COMPLEX layouts, biases) for
// NumPy or to load a tensor from one. One codec (the server's and the CLI's): format 1.0/2.0/3.0,
// C order, float16/32/64 and int32/int64 in either byte order; bool and 8/16-bit integer arrays
// read as INT32, 'u4' as INT64. NumPy has no bfloat16: WriteNpy refuses BFLOAT16 (ConvertTensor to
// FLOAT32 first, which is exact) and shared-memory references (Read them first).
//
// Errors are INVALID_ARGUMENT (NOT_FOUND for a missing file) and start with the path.
// Thread-safety: the functions are thread-safe (distinct files).
#ifndef POSENC_CLIENT_INCLUDE_POSENC_NPY_H_
#define POSENC_CLIENT_INCLUDE_POSENC_NPY_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "posenc/tensor.h"

namespace posenc::client {

absl::StatusOr<Tensor> ReadNpy(const std::string& path);
// The tensor from a whole .npy file's bytes.
absl::StatusOr<Tensor> ParseNpy(std::string_view bytes);
absl::Status WriteNpy(const std::string& path, const Tensor& tensor);
// The bytes of a .npy file (format 1.0, or 2.0 for a long header) holding `tensor`.
absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor);

}  // namespace posenc::client

#endif  // POSENC_CLIENT_INCLUDE_POSENC_NPY_H_
