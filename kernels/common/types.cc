#include "kernels/common/types.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace posenc::kernels {

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "FLOAT32";
    case DType::kFloat16: return "FLOAT16";
    case DType::kBFloat16: return "BFLOAT16";
    case DType::kFloat64: return "FLOAT64";
    case DType::kInt32: return "INT32";
    case DType::kInt64: return "INT64";
  }
  return "UNKNOWN";
}

bool IsFloatDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat64;
}

bool IsIntDType(DType dtype) { return dtype == DType::kInt32 || dtype == DType::kInt64; }

std::string ShapeString(absl::Span<const int64_t> shape) {
  constexpr size_t kShown = 16;
  if (shape.size() <= kShown) return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
  return absl::StrCat("[", absl::StrJoin(shape.subspan(0, kShown), ", "), ", ... (",
                      shape.size() - kShown, " more)]");
}

std::string Abbreviate(absl::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  return absl::StrCat(text.substr(0, max_chars), "... (", text.size() - max_chars, " more bytes)");
}

std::string IndexRuns(absl::Span<const int64_t> indices, absl::string_view separator) {
  std::string out;
  for (size_t i = 0; i < indices.size();) {
    size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    absl::StrAppend(&out, i == 0 ? "" : separator, indices[i]);
    if (j > i) absl::StrAppend(&out, "-", indices[j]);
    i = j + 1;
  }
  return out;
}

bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, out);
}

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape, absl::string_view field) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": shape ", ShapeString(shape), " has a negative dimension"));
    }
    if (!CheckedMul(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": shape ", ShapeString(shape), " overflows int64 elements"));
    }
  }
  return n;
}

int64_t ConstTensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- fp16 / bf16 ----------------------------------------------------------------------------

namespace {

// Rounds the magnitude `a` (finite, >= 0, as a double) to binary16 and returns the bit pattern
// without sign. Exact for doubles: the double carries the whole input, so one rounding.
uint16_t HalfBitsFromAbs(double a) {
  if (std::isnan(a)) return 0x7e00;
  if (a >= 65520.0) return 0x7c00;  // rounds to inf (max half 65504, halfway 65520)
  if (a < std::ldexp(1.0, -14)) {
    // Subnormal range: units of 2^-24.
    double q = std::nearbyint(a * std::ldexp(1.0, 24));  // ties to even (default mode)
    return static_cast<uint16_t>(q);                     // 1024 rolls into the min normal
  }
  int e;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // a in [2^(e-1), 2^e): exponent field e-1+15, mantissa 10 bits.
  double scaled = std::nearbyint(m * 2048.0);  // in [1024, 2048]
  int exp_field = e - 1 + 15;
  if (scaled == 2048.0) {
    scaled = 1024.0;
    ++exp_field;
  }
  if (exp_field >= 31) return 0x7c00;
  return static_cast<uint16_t>((exp_field << 10) | (static_cast<int>(scaled) - 1024));
}

}  // namespace

uint16_t DoubleToHalf(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isinf(v)) return sign | 0x7c00;
  return sign | HalfBitsFromAbs(std::fabs(v));
}

uint16_t FloatToHalf(float v) { return DoubleToHalf(static_cast<double>(v)); }

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t bits = std::bit_cast<uint32_t>(mag) | sign;
  return std::bit_cast<float>(bits);
}

uint16_t DoubleToBFloat16(double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xffc0 : 0x7fc0;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (std::isinf(a)) return sign | 0x7f80;
  if (a == 0.0) return sign;
  // bf16 has 8 significant bits and float's exponent range (min normal 2^-126, subnormal unit
  // 2^-133).
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int unit_exp = std::max(e - 8, -133);
  double q = std::nearbyint(std::ldexp(a, -unit_exp));  // ties to even
  double r = std::ldexp(q, unit_exp);
  if (r >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  float f = static_cast<float>(r);  // exact: r has <= 8 significant bits
  return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}

uint16_t FloatToBFloat16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// ---- element access ---------------------------------------------------------------------------

namespace {

// The T stored at p (any alignment).
template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

double LoadAsDouble(const void* base, DType dtype, int64_t index) {
  const auto* p = static_cast<const unsigned char*>(base) + index * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32: return Load<float>(p);
    case DType::kFloat64: return Load<double>(p);
    case DType::kFloat16: return HalfToFloat(Load<uint16_t>(p));
    case DType::kBFloat16: return BFloat16ToFloat(Load<uint16_t>(p));
    case DType::kInt32: return Load<int32_t>(p);
    case DType::kInt64: return static_cast<double>(Load<int64_t>(p));
  }
  return 0.0;
}

void StoreFromDouble(void* base, DType dtype, int64_t index, double v) {
  auto* p = static_cast<unsigned char*>(base) + index * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32: return Store(p, static_cast<float>(v));
    case DType::kFloat64: return Store(p, v);
    case DType::kFloat16: return Store(p, DoubleToHalf(v));
    case DType::kBFloat16: return Store(p, DoubleToBFloat16(v));
    case DType::kInt32: return Store(p, static_cast<int32_t>(std::llround(v)));
    case DType::kInt64: return Store(p, static_cast<int64_t>(std::llround(v)));
  }
}

int64_t LoadAsInt64(const void* base, DType dtype, int64_t index) {
  const auto* p = static_cast<const unsigned char*>(base) + index * DTypeSize(dtype);
  return dtype == DType::kInt32 ? Load<int32_t>(p) : Load<int64_t>(p);
}

absl::Status CheckFloatOutputDType(DType dtype) {
  if (IsFloatDType(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "output_dtype: expected FLOAT32, FLOAT16, BFLOAT16 or FLOAT64, got ", DTypeName(dtype)));
}

}  // namespace posenc::kernels
