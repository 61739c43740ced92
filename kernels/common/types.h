// Element types, shapes and borrowed tensor views shared by every kernel backend.
//
// Views never own memory: the caller keeps the bytes alive for the duration of the call.
// Data pointers need no particular alignment (loads and stores go through memcpy or unaligned
// vector loads). All views are row-major (C order) and little-endian.
//
// Thread-safety: plain values; the functions here are pure and thread-safe.
#ifndef POSENC_KERNELS_COMMON_TYPES_H_
#define POSENC_KERNELS_COMMON_TYPES_H_

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace posenc::kernels {

enum class DType { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64 };

// Bytes per element.
int64_t DTypeSize(DType dtype);
// "FLOAT32", "FLOAT16", ... as on the wire (without the DTYPE_ prefix).
absl::string_view DTypeName(DType dtype);
bool IsFloatDType(DType dtype);
bool IsIntDType(DType dtype);

using Shape = absl::InlinedVector<int64_t, 4>;

// "[2, 4, 8]".
// A shape from a request can have millions of entries: past 16, the rest is counted
// ("[1, 2, ..., 16, ... (999984 more)]").
std::string ShapeString(absl::Span<const int64_t> shape);

// Client-supplied text for an error message or a log line: at most `max_chars` bytes of it, then
// "... (N more bytes)".
std::string Abbreviate(absl::string_view text, size_t max_chars = 64);

// Sorted indices as runs: {0, 1, 2, 4, 6, 7} -> "0-2, 4, 6-7" (`separator` between runs); "" for
// none.
std::string IndexRuns(absl::Span<const int64_t> indices, absl::string_view separator = ", ");

// prod(shape); an empty shape is a scalar (1). Errors (INVALID_ARGUMENT, naming `field`) on a
// negative dimension or when the product overflows int64.
absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape, absl::string_view field);

// a*b, or nullopt-like failure: returns false on overflow (or negative operands).
bool CheckedMul(int64_t a, int64_t b, int64_t* out);
bool CheckedAdd(int64_t a, int64_t b, int64_t* out);

// A tensor's bytes: host memory, or (on_device) memory of the CUDA device the cuda backend
// computes on (a caller's CUDA IPC region, kernels/cuda/ipc.h), which only a backend that
// reads_device_memory() may be handed (CheckBackendReaches, kernels/backend.h) and no host code
// may dereference.
struct ConstTensorView {
  DType dtype = DType::kFloat32;
  Shape shape;
  const void* data = nullptr;
  bool on_device = false;

  int64_t NumElements() const;  // prod(shape); shapes of views are already validated.
  bool empty() const { return data == nullptr; }
};

struct TensorView {
  DType dtype = DType::kFloat32;
  Shape shape;
  void* data = nullptr;
  bool on_device = false;

  int64_t NumElements() const;
  // NOLINTNEXTLINE(google-explicit-constructor): a mutable view converts to a const one
  operator ConstTensorView() const { return {dtype, shape, data, on_device}; }
};

// One output tensor a plan will write: the response field it fills, its dtype and shape. Plans
// list their outputs so that a caller (the server) can check its limits and size its buffers
// before anything proportional to the output is allocated.
struct OutputSpec {
  absl::string_view name;  // a static string: the response field, e.g. "bias"
  DType dtype = DType::kFloat32;
  Shape shape;
};

// The arguments of an op whose request is one parameter struct and an output dtype.
template <typename Params>
struct ParamsArgs {
  Params params;
  DType output_dtype = DType::kFloat32;
};

// The check every plan makes of a requested output dtype:
// "output_dtype: expected FLOAT32, FLOAT16, BFLOAT16 or FLOAT64, got INT32".
absl::Status CheckFloatOutputDType(DType dtype);

// The compute type of a float dtype on the fast paths: FLOAT32 computes in float, every other
// dtype in double (FLOAT16/BFLOAT16 rotations and sums can cancel; only double keeps them within
// one output ulp). Calls fn.template operator()<T>() and returns its result.
template <typename Fn>
auto WithComputeType(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat32) return fn.template operator()<float>();
  return fn.template operator()<double>();
}

// --- Scalar conversions (round to nearest even; NaN stays NaN, overflow gives inf). ---
uint16_t FloatToHalf(float v);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float v);
float BFloat16ToFloat(uint16_t b);
// Correctly rounded from double (no double rounding through float).
uint16_t DoubleToHalf(double v);
uint16_t DoubleToBFloat16(double v);

// Element `index` of a buffer of `dtype`, widened to double (integers convert exactly up to
// 2^53).
double LoadAsDouble(const void* base, DType dtype, int64_t index);
// Stores `v` rounded to `dtype` (float types only; integer dtypes take llround).
void StoreFromDouble(void* base, DType dtype, int64_t index, double v);
// Element `index` of an INT32/INT64 buffer.
int64_t LoadAsInt64(const void* base, DType dtype, int64_t index);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_TYPES_H_
