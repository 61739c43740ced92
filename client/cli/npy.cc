// client::Tensor <-> the .npy codec: the dtype mapping and the moves of shape and bytes.
#include "client/cli/npy.h"

#include <utility>

#include "kernels/common/npy.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"

namespace posenc::cli {
namespace {

using client::DType;

// The client's DType mirrors kernels::DType value for value, so they convert by a cast.
static_assert(static_cast<int>(DType::kFloat32) == static_cast<int>(kernels::DType::kFloat32));
static_assert(static_cast<int>(DType::kFloat16) == static_cast<int>(kernels::DType::kFloat16));
static_assert(static_cast<int>(DType::kBFloat16) == static_cast<int>(kernels::DType::kBFloat16));
static_assert(static_cast<int>(DType::kFloat64) == static_cast<int>(kernels::DType::kFloat64));
static_assert(static_cast<int>(DType::kInt32) == static_cast<int>(kernels::DType::kInt32));
static_assert(static_cast<int>(DType::kInt64) == static_cast<int>(kernels::DType::kInt64));

}  // namespace

absl::StatusOr<client::Tensor> ReadNpy(const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(kernels::NpyArray array, kernels::ReadNpyFile(path));
  client::Tensor tensor;
  tensor.dtype = static_cast<DType>(array.dtype);
  tensor.shape.assign(array.shape.begin(), array.shape.end());
  tensor.data = std::move(array.bytes);
  return tensor;
}

absl::Status WriteNpy(const std::string& path, const client::Tensor& tensor) {
  return kernels::WriteNpyFile(path, static_cast<kernels::DType>(tensor.dtype), tensor.shape,
                               tensor.data);
}

}  // namespace posenc::cli
