// posenc::client::Tensor: a dense tensor as the posenc wire carries it, in plain C++.
//
// A Tensor owns its bytes: `data` holds prod(shape) * DTypeSize(dtype) bytes, little-endian,
// row-major (C order), exactly as the `posenc.v1.Tensor` message (the KServe v2 / Triton
// convention). A scalar has an empty shape and one element. The helpers convert between C++
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

struct Tensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string data;  // raw bytes: little-endian, row-major

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
  // OK when no dimension is negative and data.size() == NumElements() * DTypeSize(dtype);
  // otherwise INVALID_ARGUMENT naming expected and received sizes.
  absl::Status Validate() const;

  // Every element widened to double (exact for every float dtype, FLOAT16 and BFLOAT16
  // included, and for integers up to 2^53). Requires a valid tensor (elements past the end of
  // `data` are not read: the result then has data.size() / DTypeSize(dtype) entries).
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
