// CUDA IPC regions (Triton's CudaSharedMemoryRegister semantics; ARCHITECTURE.md "GPU callers"):
// device memory another process exported with cudaIpcGetMemHandle, opened in this one so that the
// cuda backend computes on it where it lives (TensorView::on_device). No CUDA header here: the
// server includes this without the toolkit. Defined by kernels/cuda/ipc.cc in CUDA builds and by
// kernels/cuda/not_built.cc (FAILED_PRECONDITION) without CUDA.
//
// The exporting process keeps the allocation alive while it is registered (its contract, as in
// Triton: CUDA gives no guard against it freeing the memory). A handle cannot be opened in the
// process that exported it (cudaIpcOpenMemHandle refuses its own handles).
//
// Thread-safety: a CudaIpcRegion is immutable; it may be used from many threads and is closed by
// its destructor (after the last call holding it).
#ifndef POSENC_KERNELS_CUDA_IPC_H_
#define POSENC_KERNELS_CUDA_IPC_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace posenc::kernels {

// sizeof(cudaIpcMemHandle_t): the raw handle as Triton's clients send it.
inline constexpr size_t kCudaIpcHandleBytes = 64;

// An opened CUDA IPC region: [data(), data() + byte_size()) on CUDA device device(), a range
// within the exporter's allocation (checked against the allocation's size when opened).
class CudaIpcRegion {
 public:
  virtual ~CudaIpcRegion() = default;
  virtual void* data() const = 0;  // a device pointer: never dereferenced on the host
  virtual int64_t byte_size() const = 0;
  virtual int device() const = 0;
  // The size of the whole allocation the handle opened (>= offset + byte_size).
  virtual int64_t allocation_bytes() const = 0;
};

// The checks that need no device, INVALID_ARGUMENT naming the field (Triton's names):
// raw_handle of exactly kCudaIpcHandleBytes bytes, device_id >= 0, offset >= 0, byte_size > 0,
// offset + byte_size without overflow.
inline absl::Status CheckCudaIpcArgs(absl::string_view raw_handle, int device, int64_t offset,
                                     int64_t byte_size) {
  if (raw_handle.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("raw_handle: expected ", kCudaIpcHandleBytes,
                                                   " bytes (a cudaIpcMemHandle_t), got ",
                                                   raw_handle.size()));
  }
  if (device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device_id: expected >= 0, got ", device));
  }
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset: expected >= 0, got ", offset));
  }
  if (byte_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size: expected > 0, got ", byte_size));
  }
  if (offset > INT64_MAX - byte_size) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size: offset ", offset, " + byte_size ",
                                                   byte_size, " overflows 64 bits"));
  }
  return absl::OkStatus();
}

// Opens `raw_handle` on CUDA device `device` (cudaIpcOpenMemHandle, peer access enabled lazily)
// and returns the range [offset, offset + byte_size) of the allocation, closed by the region's
// destructor (cudaIpcCloseMemHandle). Errors: CheckCudaIpcArgs's; FAILED_PRECONDITION without
// CUDA in this build or without a usable device; INVALID_ARGUMENT naming device_id for a device
// that does not exist, raw_handle for a handle CUDA refuses (malformed, from this process, of a
// process that has exited or freed it, of another device), byte_size for a range beyond the
// allocation (its size from cuMemGetAddressRange: the handle carries none).
absl::StatusOr<std::unique_ptr<CudaIpcRegion>> OpenCudaIpcRegion(absl::string_view raw_handle,
                                                                 int device, int64_t offset,
                                                                 int64_t byte_size);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_CUDA_IPC_H_
