// The CUDA entry points of kernels/backend.h for builds without the CUDA backend (no nvcc, or
// -DPOSENC_ENABLE_CUDA=OFF). Builds with CUDA compile kernels/cuda/backend.cc and the families'
// cuda.cc instead.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/ipc.h"

namespace posenc::kernels {

bool CudaBuiltIn() { return false; }

std::vector<CudaDeviceInfo> ListCudaDevices() { return {}; }

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions&,
                                                         std::shared_ptr<const Backend>) {
  return absl::UnimplementedError(
      "cuda is not built into this server (cpu, reference and auto are; build where nvcc is "
      "installed, or with -DPOSENC_ENABLE_CUDA=ON)");
}

absl::StatusOr<std::unique_ptr<CudaIpcRegion>> OpenCudaIpcRegion(absl::string_view raw_handle,
                                                                 int device, int64_t offset,
                                                                 int64_t byte_size) {
  if (absl::Status s = CheckCudaIpcArgs(raw_handle, device, offset, byte_size); !s.ok()) return s;
  return absl::FailedPreconditionError(
      "CUDA IPC regions need the cuda backend, which is not built into this server (build where "
      "nvcc is installed, or with -DPOSENC_ENABLE_CUDA=ON)");
}

}  // namespace posenc::kernels
