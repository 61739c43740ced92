// The CLI's .npy files: posenc::client's ReadNpy / WriteNpy (posenc/npy.h: the accepted files,
// the errors), and the path "-" writing to standard output.
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
