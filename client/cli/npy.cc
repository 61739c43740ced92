// The CLI's .npy output: posenc::client's .npy files (posenc/npy.h), and "-" for standard output.
#include "client/cli/npy.h"

#include <iostream>

#include "kernels/common/status.h"
#include "posenc/npy.h"

namespace posenc::cli {

absl::StatusOr<client::Tensor> ReadNpy(const std::string& path) { return client::ReadNpy(path); }

absl::Status WriteNpy(const std::string& path, const client::Tensor& tensor) {
  if (path == "-") {
    POSENC_ASSIGN_OR_RETURN(const std::string bytes, client::SerializeNpy(tensor));
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) return absl::UnavailableError("-: cannot write the .npy to standard output");
    return absl::OkStatus();
  }
  return client::WriteNpy(path, tensor);
}

}  // namespace posenc::cli
