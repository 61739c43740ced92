// client::Tensor <-> the .npy codec: the dtype mapping and the moves of shape and bytes.
#include "client/cli/npy.h"

#include <iostream>
#include <utility>

#include "client/kernels_dtype.h"
#include "kernels/common/npy.h"
#include "kernels/common/status.h"

namespace posenc::cli {

absl::StatusOr<client::Tensor> ReadNpy(const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(kernels::NpyArray array, kernels::ReadNpyFile(path));
  client::Tensor tensor;
  tensor.dtype = client::FromKernelsDType(array.dtype);
  tensor.shape.assign(array.shape.begin(), array.shape.end());
  tensor.data = std::move(array.bytes);
  return tensor;
}

absl::Status WriteNpy(const std::string& path, const client::Tensor& tensor) {
  if (path == "-") {
    POSENC_ASSIGN_OR_RETURN(
        const std::string bytes,
        kernels::SerializeNpy(client::ToKernelsDType(tensor.dtype), tensor.shape, tensor.data));
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) return absl::UnavailableError("-: cannot write the .npy to standard output");
    return absl::OkStatus();
  }
  return kernels::WriteNpyFile(path, client::ToKernelsDType(tensor.dtype), tensor.shape,
                               tensor.data);
}

}  // namespace posenc::cli
