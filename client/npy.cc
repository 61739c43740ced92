// posenc::client's .npy files: client::Tensor in and out of the one .npy codec
// (kernels/common/npy.h): the dtype mapping and the moves of shape and bytes.
#include "posenc/npy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/kernels_dtype.h"
#include "kernels/common/npy.h"
#include "kernels/common/status.h"

namespace posenc::client {
namespace {

Tensor FromArray(kernels::NpyArray array) {
  Tensor tensor;
  tensor.dtype = FromKernelsDType(array.dtype);
  tensor.shape.assign(array.shape.begin(), array.shape.end());
  tensor.data = std::move(array.bytes);
  return tensor;
}

}  // namespace

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(kernels::NpyArray array, kernels::ReadNpyFile(path));
  return FromArray(std::move(array));
}

absl::StatusOr<Tensor> ParseNpy(std::string_view bytes) {
  POSENC_ASSIGN_OR_RETURN(kernels::NpyArray array,
                          kernels::ParseNpy(absl::string_view(bytes.data(), bytes.size())));
  return FromArray(std::move(array));
}

absl::Status WriteNpy(const std::string& path, const Tensor& tensor) {
  if (absl::Status s = tensor.ValidateInline(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return kernels::WriteNpyFile(path, ToKernelsDType(tensor.dtype), tensor.shape, tensor.data);
}

absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor) {
  POSENC_RETURN_IF_ERROR(tensor.ValidateInline());
  return kernels::SerializeNpy(ToKernelsDType(tensor.dtype), tensor.shape, tensor.data);
}

}  // namespace posenc::client
