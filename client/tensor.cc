// Tensor helpers: dtype conversions and compact-bias expansion. FLOAT16/BFLOAT16 rounding and the
// Toeplitz expansion are the kernels' own (kernels/common/types.h, toeplitz.h): one
// implementation of each in the tree.
#include "posenc/tensor.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/kernels_dtype.h"
#include "kernels/common/status.h"
#include "kernels/common/toeplitz.h"
#include "kernels/common/types.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/vocabulary.h"

namespace posenc::client {
namespace {

static_assert(std::endian::native == std::endian::little,
              "posenc tensors are little-endian; a big-endian host needs byte swaps here");

template <typename T>
T LoadRaw(const char* base, int64_t index) {
  T v;
  std::memcpy(&v, base + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

template <typename T>
void StoreRaw(char* base, int64_t index, T v) {
  std::memcpy(base + index * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

double LoadDouble(const char* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return LoadRaw<float>(base, i);
    case DType::kFloat16: return kernels::HalfToFloat(LoadRaw<uint16_t>(base, i));
    case DType::kBFloat16: return kernels::BFloat16ToFloat(LoadRaw<uint16_t>(base, i));
    case DType::kFloat64: return LoadRaw<double>(base, i);
    case DType::kInt32: return LoadRaw<int32_t>(base, i);
    case DType::kInt64: return static_cast<double>(LoadRaw<int64_t>(base, i));
  }
  return 0;
}

// Rounds to nearest; NaN gives 0 and out-of-range values saturate.
template <typename Int>
Int RoundToInt(double v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);
  if (r <= static_cast<double>(std::numeric_limits<Int>::min())) {
    return std::numeric_limits<Int>::min();
  }
  if (r >= static_cast<double>(std::numeric_limits<Int>::max())) {
    return std::numeric_limits<Int>::max();
  }
  return static_cast<Int>(r);
}

void StoreDouble(char* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::kFloat32: StoreRaw<float>(base, i, static_cast<float>(v)); return;
    case DType::kFloat16: StoreRaw<uint16_t>(base, i, kernels::DoubleToHalf(v)); return;
    case DType::kBFloat16: StoreRaw<uint16_t>(base, i, kernels::DoubleToBFloat16(v)); return;
    case DType::kFloat64: StoreRaw<double>(base, i, v); return;
    case DType::kInt32: StoreRaw<int32_t>(base, i, RoundToInt<int32_t>(v)); return;
    case DType::kInt64: StoreRaw<int64_t>(base, i, RoundToInt<int64_t>(v)); return;
  }
}

// prod(shape), or an error naming the shape when a dimension is negative or it overflows.
absl::StatusOr<int64_t> CheckedNumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tensor shape [", absl::StrJoin(shape, ", "), "]"));
    }
    n *= d;
  }
  return n;
}

// The full form [..., H, q_len, k_len] of a compact bias [..., H, X] in its dtype, with room for
// its bytes (not yet written); RESOURCE_EXHAUSTED when those cannot be sized.
absl::StatusOr<Tensor> SizedExpansion(const Tensor& compact, int64_t q_len, int64_t k_len) {
  Tensor full;
  full.dtype = compact.dtype;
  full.shape.assign(compact.shape.begin(), compact.shape.end() - 1);
  full.shape.push_back(q_len);
  full.shape.push_back(k_len);
  absl::StatusOr<int64_t> n = CheckedNumElements(full.shape);
  if (!n.ok() || *n > std::numeric_limits<int64_t>::max() / DTypeSize(full.dtype)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "expanded bias [", absl::StrJoin(full.shape, ", "), "] is too large to allocate"));
  }
  full.data.resize(static_cast<size_t>(*n * DTypeSize(full.dtype)));
  return full;
}

// A tensor of `shape` and `dtype` whose element i is fill(i).
template <typename Fill>
absl::StatusOr<Tensor> MakeTensor(size_t num_values, std::vector<int64_t> shape, DType dtype,
                                  Fill fill) {
  POSENC_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape));
  if (static_cast<size_t>(n) != num_values) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape [", absl::StrJoin(shape, ", "),
                                                   "] needs ", n, " values, got ", num_values));
  }
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(num_values * static_cast<size_t>(DTypeSize(dtype)));
  for (size_t i = 0; i < num_values; ++i) fill(t.data.data(), static_cast<int64_t>(i));
  return t;
}

}  // namespace

int64_t DTypeSize(DType dtype) { return kernels::DTypeSize(ToKernelsDType(dtype)); }

std::string_view DTypeName(DType dtype) {
  return v1::WireName(v1::WireFromKernel<v1::DType>(dtype));
}

std::optional<DType> ParseDType(std::string_view name) {
  // The wire's names ("float16", "FLOAT16", "DTYPE_FLOAT16"), then NumPy's and PyTorch's short
  // spellings, which are no wire names.
  if (const std::optional<v1::DType> wire = v1::ParseEnum<v1::DType>(name)) {
    return v1::KernelFromWire<DType>(*wire);
  }
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr std::pair<std::string_view, DType> kAliases[] = {
      {"f32", DType::kFloat32},    {"fp32", DType::kFloat32}, {"float", DType::kFloat32},
      {"f16", DType::kFloat16},    {"fp16", DType::kFloat16}, {"half", DType::kFloat16},
      {"bf16", DType::kBFloat16},  {"f64", DType::kFloat64},  {"fp64", DType::kFloat64},
      {"double", DType::kFloat64}, {"i32", DType::kInt32},    {"i64", DType::kInt64},
  };
  for (const auto& [alias, dtype] : kAliases) {
    if (lower == alias) return dtype;
  }
  return std::nullopt;
}

bool IsFloatDType(DType dtype) { return kernels::IsFloatDType(ToKernelsDType(dtype)); }

absl::StatusOr<Tensor> Tensor::FromFloats(std::span<const float> values, std::vector<int64_t> shape,
                                          DType dtype) {
  return MakeTensor(values.size(), std::move(shape), dtype, [&](char* base, int64_t i) {
    StoreDouble(base, dtype, i, values[static_cast<size_t>(i)]);
  });
}

absl::StatusOr<Tensor> Tensor::FromDoubles(std::span<const double> values,
                                           std::vector<int64_t> shape, DType dtype) {
  return MakeTensor(values.size(), std::move(shape), dtype, [&](char* base, int64_t i) {
    StoreDouble(base, dtype, i, values[static_cast<size_t>(i)]);
  });
}

absl::StatusOr<Tensor> Tensor::FromInt64s(std::span<const int64_t> values,
                                          std::vector<int64_t> shape, DType dtype) {
  if (dtype == DType::kInt32) {
    for (int64_t v : values) {
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("value ", v, " does not fit INT32"));
      }
    }
  }
  return MakeTensor(values.size(), std::move(shape), dtype, [&](char* base, int64_t i) {
    const int64_t v = values[static_cast<size_t>(i)];
    if (dtype == DType::kInt64) {
      StoreRaw<int64_t>(base, i, v);
    } else if (dtype == DType::kInt32) {
      StoreRaw<int32_t>(base, i, static_cast<int32_t>(v));
    } else {
      StoreDouble(base, dtype, i, static_cast<double>(v));
    }
  });
}

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Tensor::NumBytes() const { return NumElements() * DTypeSize(dtype); }

absl::Status Tensor::Validate() const {
  POSENC_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape));
  const int64_t size = DTypeSize(dtype);
  if (n > std::numeric_limits<int64_t>::max() / size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of ", std::string(DTypeName(dtype)),
                                                   " [", absl::StrJoin(shape, ", "),
                                                   "] has more bytes than an int64 counts"));
  }
  if (shared_memory.has_value()) {
    if (!data.empty() || shared_memory->byte_size != n * size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor in shared memory of ", std::string(DTypeName(dtype)), " [",
                       absl::StrJoin(shape, ", "), "] must refer to ", n, " * ", size,
                       " bytes with no data, got ", shared_memory->byte_size, " bytes and ",
                       data.size(), " bytes of data"));
    }
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(data.size()) != n * size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor data of ", std::string(DTypeName(dtype)),
                                                   " [", absl::StrJoin(shape, ", "), "] must hold ",
                                                   n, " * ", size, " bytes, got ", data.size()));
  }
  return absl::OkStatus();
}

absl::Status Tensor::ValidateInline() const {
  if (is_reference()) {
    return absl::InvalidArgumentError(
        "tensor: its bytes are in shared memory (read them with SharedMemoryRegion::Read)");
  }
  return Validate();
}

std::vector<double> Tensor::ToDoubles() const {
  const int64_t n = static_cast<int64_t>(data.size()) / DTypeSize(dtype);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = LoadDouble(data.data(), dtype, i);
  return out;
}

std::vector<float> Tensor::ToFloats() const {
  const int64_t n = static_cast<int64_t>(data.size()) / DTypeSize(dtype);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = static_cast<float>(LoadDouble(data.data(), dtype, i));
  }
  return out;
}

std::vector<int64_t> Tensor::ToInt64s() const {
  const int64_t n = static_cast<int64_t>(data.size()) / DTypeSize(dtype);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t& v = out[static_cast<size_t>(i)];
    if (dtype == DType::kInt64) {
      v = LoadRaw<int64_t>(data.data(), i);
    } else if (dtype == DType::kInt32) {
      v = LoadRaw<int32_t>(data.data(), i);
    } else {
      v = RoundToInt<int64_t>(LoadDouble(data.data(), dtype, i));
    }
  }
  return out;
}

double Tensor::At(int64_t index) const { return LoadDouble(data.data(), dtype, index); }

absl::StatusOr<Tensor> ConvertTensor(const Tensor& tensor, DType dtype) {
  POSENC_RETURN_IF_ERROR(tensor.ValidateInline());
  if (tensor.dtype == dtype) return tensor;
  if (!IsFloatDType(dtype) && !IsFloatDType(tensor.dtype)) {
    return Tensor::FromInt64s(tensor.ToInt64s(), tensor.shape, dtype);
  }
  return Tensor::FromDoubles(tensor.ToDoubles(), tensor.shape, dtype);
}

absl::StatusOr<Tensor> ExpandToeplitz(const Tensor& compact, int64_t q_len, int64_t k_len) {
  POSENC_RETURN_IF_ERROR(compact.ValidateInline());
  if (q_len <= 0 || k_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("q_len and k_len must be positive, got ", q_len, " and ", k_len));
  }
  if (compact.shape.empty() || compact.shape.back() != q_len + k_len - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("compact bias must be [..., H, q_len + k_len - 1] = [..., ", q_len + k_len - 1,
                     "], got [", absl::StrJoin(compact.shape, ", "), "]"));
  }
  const int64_t heads = compact.NumElements() / (q_len + k_len - 1);  // heads (times batch)
  POSENC_ASSIGN_OR_RETURN(Tensor full, SizedExpansion(compact, q_len, k_len));
  kernels::ExpandToeplitzRows(compact.data.data(), heads, q_len, k_len, DTypeSize(compact.dtype),
                              /*row_begin=*/0, /*row_end=*/heads * q_len, full.data.data());
  return full;
}

absl::StatusOr<Tensor> ExpandBloomRows(const Tensor& rows, int64_t q_len,
                                       std::optional<int64_t> query_offset, FutureMode future) {
  POSENC_RETURN_IF_ERROR(rows.ValidateInline());
  if (!IsFloatDType(rows.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("BLOOM rows must have a float dtype, got ",
                                                   std::string(DTypeName(rows.dtype))));
  }
  if (rows.shape.empty() || rows.shape.back() <= 0 || q_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BLOOM rows must be [..., H, k_len] with k_len > 0 and q_len > 0, got [",
                     absl::StrJoin(rows.shape, ", "), "] and q_len ", q_len));
  }
  const int64_t k_len = rows.shape.back();
  const int64_t offset = query_offset.value_or(k_len - q_len);
  const int64_t num_rows = rows.NumElements() / k_len;
  const size_t esize = static_cast<size_t>(DTypeSize(rows.dtype));
  // The element stored after the query's position (MASK: -inf, ZERO: 0).
  std::string fill(esize, '\0');
  StoreDouble(fill.data(), rows.dtype, 0,
              future != FutureMode::kZero ? -std::numeric_limits<double>::infinity() : 0.0);
  POSENC_ASSIGN_OR_RETURN(Tensor full, SizedExpansion(rows, q_len, k_len));
  char* out = full.data.data();
  for (int64_t r = 0; r < num_rows; ++r) {
    const char* row = rows.data.data() + static_cast<size_t>(r * k_len) * esize;
    for (int64_t i = 0; i < q_len; ++i, out += static_cast<size_t>(k_len) * esize) {
      // Keys 0 .. visible-1 are at or before the query; the rest lie in its future.
      const int64_t visible =
          future == FutureMode::kLinear ? k_len : std::clamp<int64_t>(offset + i + 1, 0, k_len);
      std::memcpy(out, row, static_cast<size_t>(visible) * esize);
      for (int64_t j = visible; j < k_len; ++j) {
        std::memcpy(out + static_cast<size_t>(j) * esize, fill.data(), esize);
      }
    }
  }
  return full;
}

}  // namespace posenc::client
