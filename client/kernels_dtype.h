// client::DType <-> kernels::DType. The client's public enum (posenc/tensor.h) mirrors the
// kernels' value for value, so the two convert by a cast; the static_asserts keep them in step.
// For code beside the client library that also uses kernels/ (the CLI, the client tests); the
// public headers in client/include do not include this one.
//
// Thread-safety: pure functions.
#ifndef POSENC_CLIENT_KERNELS_DTYPE_H_
#define POSENC_CLIENT_KERNELS_DTYPE_H_

#include "kernels/common/types.h"
#include "posenc/tensor.h"

namespace posenc::client {

static_assert(static_cast<int>(DType::kFloat32) == static_cast<int>(kernels::DType::kFloat32));
static_assert(static_cast<int>(DType::kFloat16) == static_cast<int>(kernels::DType::kFloat16));
static_assert(static_cast<int>(DType::kBFloat16) == static_cast<int>(kernels::DType::kBFloat16));
static_assert(static_cast<int>(DType::kFloat64) == static_cast<int>(kernels::DType::kFloat64));
static_assert(static_cast<int>(DType::kInt32) == static_cast<int>(kernels::DType::kInt32));
static_assert(static_cast<int>(DType::kInt64) == static_cast<int>(kernels::DType::kInt64));

inline kernels::DType ToKernelsDType(DType dtype) { return static_cast<kernels::DType>(dtype); }
inline DType FromKernelsDType(kernels::DType dtype) { return static_cast<DType>(dtype); }

}  // namespace posenc::client

#endif  // POSENC_CLIENT_KERNELS_DTYPE_H_
