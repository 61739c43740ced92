// CUDA IPC regions (kernels/cuda/ipc.h): cudaIpcOpenMemHandle, the allocation's size from the
// driver's cuMemGetAddressRange (fetched with cudaGetDriverEntryPointByVersion: linking libcuda
// would stop the binaries from starting where no driver is installed, as on CI), and
// cudaIpcCloseMemHandle when the region goes.
#include "kernels/cuda/ipc.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace posenc::kernels {
namespace {

std::string ErrorText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

class OpenedIpcRegion final : public CudaIpcRegion {
 public:
  OpenedIpcRegion(void* base, int device, int64_t offset, int64_t byte_size,
                  int64_t allocation_bytes)
      : base_(base),
        device_(device),
        offset_(offset),
        byte_size_(byte_size),
        allocation_bytes_(allocation_bytes) {}
  ~OpenedIpcRegion() override {
    int current = -1;
    cudaGetDevice(&current);
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(base_);
    if (current >= 0) cudaSetDevice(current);
    cudaGetLastError();
  }
  OpenedIpcRegion(const OpenedIpcRegion&) = delete;
  OpenedIpcRegion& operator=(const OpenedIpcRegion&) = delete;

  void* data() const override { return static_cast<unsigned char*>(base_) + offset_; }
  int64_t byte_size() const override { return byte_size_; }
  int device() const override { return device_; }
  int64_t allocation_bytes() const override { return allocation_bytes_; }

 private:
  void* const base_;
  const int device_;
  const int64_t offset_, byte_size_, allocation_bytes_;
};

// The size of the allocation `base` starts (cuMemGetAddressRange), or 0 where the driver does
// not offer the function.
absl::StatusOr<size_t> AllocationBytes(void* base) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020,
                                                   cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: the driver offers no cuMemGetAddressRange (",
                     e != cudaSuccess ? ErrorText(e) : "symbol not found",
                     "): the range of an IPC handle cannot be checked"));
  }
  CUdeviceptr start = 0;
  size_t size = 0;
  const CUresult r = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn)(
      &start, &size, reinterpret_cast<CUdeviceptr>(base));
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuda: cuMemGetAddressRange of an opened IPC handle failed: CUresult ", r));
  }
  // The opened pointer is the allocation's start; count only what lies after it.
  return size - static_cast<size_t>(reinterpret_cast<CUdeviceptr>(base) - start);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaIpcRegion>> OpenCudaIpcRegion(absl::string_view raw_handle,
                                                                 int device, int64_t offset,
                                                                 int64_t byte_size) {
  if (absl::Status s = CheckCudaIpcArgs(raw_handle, device, offset, byte_size); !s.ok()) return s;
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA IPC regions need a CUDA device, and this process has none (",
                     e != cudaSuccess ? ErrorText(e) : "0 devices", ")"));
  }
  if (device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("device_id: expected 0 .. ", count - 1,
                                                   " (this machine's CUDA devices), got ", device));
  }
  int current = -1;
  cudaGetDevice(&current);
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: device ", device, " is not usable: ", ErrorText(e)));
  }
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, raw_handle.data(), sizeof(handle));
  void* base = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
  absl::StatusOr<std::unique_ptr<CudaIpcRegion>> result;
  if (e != cudaSuccess) {
    cudaGetLastError();
    result = absl::InvalidArgumentError(absl::StrCat(
        "raw_handle: cudaIpcOpenMemHandle on device ", device, " refused it: ", ErrorText(e),
        " (expected a handle from cudaIpcGetMemHandle in another process that still holds the "
        "memory, on this device)"));
  } else if (absl::StatusOr<size_t> allocated = AllocationBytes(base); !allocated.ok()) {
    cudaIpcCloseMemHandle(base);
    result = allocated.status();
  } else if (static_cast<uint64_t>(offset) + static_cast<uint64_t>(byte_size) > *allocated) {
    cudaIpcCloseMemHandle(base);
    result = absl::InvalidArgumentError(absl::StrCat(
        "byte_size: offset ", offset, " + byte_size ", byte_size, " = ", offset + byte_size,
        " bytes, beyond the allocation of ", *allocated, " bytes the handle opens"));
  } else {
    result = std::make_unique<OpenedIpcRegion>(base, device, offset, byte_size,
                                               static_cast<int64_t>(*allocated));
  }
  cudaGetLastError();
  if (current >= 0) cudaSetDevice(current);
  return result;
}

}  // namespace posenc::kernels
