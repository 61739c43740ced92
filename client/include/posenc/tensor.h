// posenc::client::Tensor: a dense tensor as the posenc wire carries it, in plain C++.
//
// A Tensor owns its bytes: `data` holds prod(shape) * DTypeSize(dtype) bytes, little-endian,
// row-major (C order), exactly as the `posenc.v1.Tensor` message (the KServe v2 / Triton
// convention). A scalar has an empty shape and one element. Or it refers to them: with
// `shared_memory` set, its bytes lie in a registered shared-memory region (posenc/shared_memory.h)
// and `data` stays empty. The helpers convert between C++
// number types and every wire dtype, rounding to nearest even (FLOAT16/BFLOAT16 are rounded
// correctly from double, never through float).
//
// This header also holds the local expansion of the compact bias forms (posenc.proto, BiasForm):
// the server may send a Toeplitz generator instead of a q_len x k_len matrix per head, and the
// client rebuilds the full matrix at memory speed (one memcpy per row).
//
// Thread-safety: Tensor is a plain value type (no internal synchronization: concurrent reads are
// safe, a write needs exclusive access). The free functions are pure and thread-safe.
#ifndef POSENC_CLIENT_TENSOR_H_
#define POSENC_CLIENT_TENSOR_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace posenc::client {

// Element type of a Tensor (the wire's DType without UNSPECIFIED).
enum class DType { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64 };

// Bytes per element: 4, 2, 2, 8, 4, 8.
int64_t DTypeSize(DType dtype);
// "FLOAT32", "FLOAT16", "BFLOAT16", "FLOAT64", "INT32", "INT64" (the wire names without the
// "DTYPE_" prefix).
std::string_view DTypeName(DType dtype);
// Parses a dtype name, case-insensitively: the names above or "float32", "fp16", "f16", "bf16",
// "f64", "double", "float", "half", ... Returns nullopt for anything else.
std::optional<DType> ParseDType(std::string_view name);
bool IsFloatDType(DType dtype);

// A byte range of a shared-memory region registered with the server (posenc.v1.SharedMemoryRef;
// posenc::client::SharedMemoryRegion hands them out).
struct SharedMemoryRef {
  std::string region;     // the name the region was registered under
  int64_t offset = 0;     // bytes from the start of the registered range
  int64_t byte_size = 0;  // the tensor's bytes exactly
  bool operator==(const SharedMemoryRef&) const = default;
};

struct Tensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string data;  // raw bytes: little-endian, row-major (empty for a reference)
  // Set: the bytes are in shared memory instead of `data`. An input the server reads there (an
  // ApplyRope input is rotated in place there); a result the server wrote there. The server checks
  // byte_size against dtype and shape and the range against its region (errors name the field).
  std::optional<SharedMemoryRef> shared_memory;

  // Values converted (rounded to nearest even) to `dtype`; INVALID_ARGUMENT when the number of
  // values is not prod(shape). An integer `dtype` takes the value rounded to nearest.
  static absl::StatusOr<Tensor> FromFloats(std::span<const float> values,
                                           std::vector<int64_t> shape,
                                           DType dtype = DType::kFloat32);
  static absl::StatusOr<Tensor> FromDoubles(std::span<const double> values,
                                            std::vector<int64_t> shape,
                                            DType dtype = DType::kFloat64);
  // INT32 or INT64 (or a float dtype: the values converted). INT32 values must fit.
  static absl::StatusOr<Tensor> FromInt64s(std::span<const int64_t> values,
                                           std::vector<int64_t> shape, DType dtype = DType::kInt64);

  // prod(shape) (1 for a scalar). Only meaningful on a valid shape (see Validate()).
  int64_t NumElements() const;
  // NumElements() * DTypeSize(dtype): the bytes of `data`, or of the referenced range.
  int64_t NumBytes() const;
  // Whether the bytes are in shared memory (`shared_memory` set).
  bool is_reference() const { return shared_memory.has_value(); }
  // OK when no dimension is negative and data.size() == NumElements() * DTypeSize(dtype) (a
  // reference: `data` empty and shared_memory->byte_size that size); otherwise INVALID_ARGUMENT
  // naming expected and received sizes.
  absl::Status Validate() const;
  // Validate() for code that reads the bytes: a reference (its bytes are in shared memory, read
  // through SharedMemoryRegion::Read) is INVALID_ARGUMENT too.
  absl::Status ValidateInline() const;

  // Every element widened to double (exact for every float dtype, FLOAT16 and BFLOAT16
  // included, and for integers up to 2^53). Requires a valid tensor with its bytes in `data`
  // (elements past the end of `data` are not read: the result then has data.size() /
  // DTypeSize(dtype) entries; a reference's are read through SharedMemoryRegion::Read).
  std::vector<double> ToDoubles() const;
  // Every element converted to float (FLOAT64 rounded to nearest).
  std::vector<float> ToFloats() const;
  // Integer dtypes exactly; float dtypes rounded to nearest (NaN gives 0).
  std::vector<int64_t> ToInt64s() const;
  // Element `index` widened to double; 0 <= index < NumElements().
  double At(int64_t index) const;
};

// A copy of `tensor` converted to `dtype` (through double: exact widening, correctly rounded
// narrowing).
absl::StatusOr<Tensor> ConvertTensor(const Tensor& tensor, DType dtype);

// Expands the compact (Toeplitz) bias form of ALiBi CAUSAL/SYMMETRIC and T5 relative bias:
// `compact` is [..., H, q_len + k_len - 1] and the result is [..., H, q_len, k_len] with
//   full[..., h, i, j] = compact[..., h, j - i + q_len - 1]
// in the same dtype (a byte copy: row i of head h is the contiguous slice starting at
// q_len - 1 - i). INVALID_ARGUMENT when the last axis is not q_len + k_len - 1, the rank is
// below 1 or q_len/k_len are not positive; RESOURCE_EXHAUSTED when the result cannot be sized.
absl::StatusOr<Tensor> ExpandToeplitz(const Tensor& compact, int64_t q_len, int64_t k_len);

// What CAUSAL/BLOOM ALiBi puts where a key lies after its query (the wire's FutureMode);
// UNSPECIFIED is MASK.
enum class FutureMode { kUnspecified, kMask, kZero, kLinear };

// Expands the compact form of BLOOM ALiBi: `rows` is [..., H, k_len] (the row m_h * kpos,
// [B, H, k_len] with an attention mask) and the result is [..., H, q_len, k_len] with
//   full[..., h, i, j] = rows[..., h, j]   if j <= query_offset + i
//                      = -inf / 0 / rows[..., h, j] (MASK / ZERO / LINEAR) otherwise.
// `query_offset` defaults (nullopt) to k_len - q_len, as on the wire. Float dtypes only.
absl::StatusOr<Tensor> ExpandBloomRows(const Tensor& rows, int64_t q_len,
                                       std::optional<int64_t> query_offset = std::nullopt,
                                       FutureMode future = FutureMode::kMask);

}  // namespace posenc::client

#endif  // POSENC_CLIENT_TENSOR_H_
