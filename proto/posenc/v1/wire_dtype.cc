#include "proto/posenc/v1/wire_dtype.h"

namespace posenc::v1 {
namespace {

struct Pair {
  DType wire;
  kernels::DType kernel;
};

constexpr Pair kPairs[] = {
    {DTYPE_FLOAT32, kernels::DType::kFloat32},   {DTYPE_FLOAT16, kernels::DType::kFloat16},
    {DTYPE_BFLOAT16, kernels::DType::kBFloat16}, {DTYPE_FLOAT64, kernels::DType::kFloat64},
    {DTYPE_INT32, kernels::DType::kInt32},       {DTYPE_INT64, kernels::DType::kInt64},
};

}  // namespace

DType ToWireDType(kernels::DType dtype) {
  for (const Pair& p : kPairs) {
    if (p.kernel == dtype) return p.wire;
  }
  return DTYPE_UNSPECIFIED;
}

std::optional<kernels::DType> FromWireDType(int dtype) {
  for (const Pair& p : kPairs) {
    if (p.wire == dtype) return p.kernel;
  }
  return std::nullopt;
}

}  // namespace posenc::v1
