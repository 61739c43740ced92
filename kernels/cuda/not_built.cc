// The CUDA entry points of kernels/backend.h for builds without the CUDA backend (no nvcc, or
// -DPOSENC_ENABLE_CUDA=OFF). Builds with CUDA compile kernels/cuda/backend.cc and the families'
// cuda.cc instead.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace posenc::kernels {

bool CudaBuiltIn() { return false; }

std::vector<CudaDeviceInfo> ListCudaDevices() { return {}; }

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions&,
                                                         std::shared_ptr<const Backend>) {
  return absl::UnimplementedError(
      "cuda is not built into this server (cpu, reference and auto are; build where nvcc is "
      "installed, or with -DPOSENC_ENABLE_CUDA=ON)");
}

}  // namespace posenc::kernels
