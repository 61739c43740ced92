// What kernels/backend.h declares beside the backends themselves.
#include "kernels/backend.h"

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"

namespace posenc::kernels {

absl::Status CheckBackendReaches(
    const Backend& backend,
    std::initializer_list<std::pair<absl::string_view, ConstTensorView>> views) {
  for (const auto& [field, view] : views) {
    if (!view.on_device || view.data == nullptr) continue;
    if (backend.reads_device_memory()) {
      // The device faults (a sticky error, fatal to the process's CUDA context) on a misaligned
      // element.
      const int64_t esize = DTypeSize(view.dtype);
      if (reinterpret_cast<uintptr_t>(view.data) % static_cast<uintptr_t>(esize) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": a tensor in device memory must start at a multiple of its element size (",
            esize, " bytes for ", DTypeName(view.dtype), "); its offset is not"));
      }
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          field, ": the tensor lives in CUDA device memory, which the ", backend.name(),
          " backend cannot read (device regions need the cuda backend: --backend=cuda)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOnHost(absl::string_view field, const ConstTensorView& view) {
  if (!view.on_device || view.data == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(field,
                   ": expected host memory (this tensor is read or written by host code), "
                   "got a CUDA device range"));
}

}  // namespace posenc::kernels
