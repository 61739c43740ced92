// Inner loops of the CPU backend; see simd_kernels.h. Built once per ISA level with
// POSENC_SIMD_NS set to scalar, avx2 or avx512 and the matching target flags.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/cpu/simd_kernels.h"
#include "kernels/common/types.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {
namespace {

// pi/2 split in three parts of 20, 20 and 53 bits: k * kPio2A and k * kPio2B are exact for
// k < 2^33, so theta - k*A - k*B loses nothing.
constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kPio2A = 1.5707950592041016;       // 0x1.921fap+0: top 20 bits of pi/2
constexpr double kPio2B = 1.2675900507019833e-06;   // 0x1.54442p-20: the next 20 bits
constexpr double kPio2C = 7.443547480486623e-13;    // pi/2 - A - B, rounded
constexpr double kRoundMagic = 6755399441055744.0;   // 1.5 * 2^52

// fdlibm __kernel_sin / __kernel_cos minimax coefficients on [-pi/4, pi/4].
constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                 kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                 kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                 kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                 kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;

// kFull: the whole fdlibm polynomial (double accuracy, for FLOAT64 and FLOAT16/BFLOAT16 math);
// otherwise terms through r^9 / r^10, whose truncation error (below 2e-9) vanishes in a float.
template <typename T, bool kFull>
inline void SinCosImpl(const double* __restrict p, int64_t p_stride, const double* __restrict w_hi,
                       const double* __restrict w_lo, int64_t n, double scale, double sign,
                       T* __restrict c, T* __restrict s) {
  for (int64_t j = 0; j < n; ++j) {
    const double pj = p[j * p_stride];
    const double hi = pj * w_hi[j];
    const double lo = std::fma(pj, w_hi[j], -hi) + pj * w_lo[j];
    const double k = (hi * kTwoOverPi + kRoundMagic) - kRoundMagic;
    const double r = (((hi - k * kPio2A) - k * kPio2B) - k * kPio2C) + lo;
    // k mod 4 (k is an integer-valued double; floor(k/4) by rounding k/4 - 0.375).
    const double q = k - 4.0 * ((k * 0.25 - 0.375 + kRoundMagic) - kRoundMagic);
    const double z = r * r;
    double sin_r, cos_r;
    if constexpr (kFull) {
      sin_r = r + r * z * (kS1 + z * (kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)))));
      cos_r = 1.0 - 0.5 * z + z * z * (kC1 + z * (kC2 + z * (kC3 + z * (kC4 + z * (kC5 + z * kC6)))));
    } else {
      sin_r = r + r * z * (kS1 + z * (kS2 + z * (kS3 + z * kS4)));
      cos_r = 1.0 - 0.5 * z + z * z * (kC1 + z * (kC2 + z * (kC3 + z * kC4)));
    }
    const bool odd = q == 1.0 || q == 3.0;
    double sv = odd ? cos_r : sin_r;
    double cv = odd ? sin_r : cos_r;
    sv = q >= 2.0 ? -sv : sv;
    cv = (q == 1.0 || q == 2.0) ? -cv : cv;
    c[j] = static_cast<T>(cv * scale);
    s[j] = static_cast<T>(sv * (sign * scale));
  }
}

void SinCosF32(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo,
               int64_t n, double scale, double sign, float* c, float* s) {
  SinCosImpl<float, false>(p, p_stride, w_hi, w_lo, n, scale, sign, c, s);
}

void SinCosF64(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo,
               int64_t n, double scale, double sign, double* c, double* s) {
  SinCosImpl<double, true>(p, p_stride, w_hi, w_lo, n, scale, sign, c, s);
}

template <typename T>
inline void RotateRow(T* __restrict x, const T* __restrict c, const T* __restrict s, int64_t half,
                      bool gptj) {
  if (!gptj) {
    T* __restrict a = x;
    T* __restrict b = x + half;
    for (int64_t j = 0; j < half; ++j) {
      const T xa = a[j], xb = b[j];
      a[j] = xa * c[j] - xb * s[j];
      b[j] = xb * c[j] + xa * s[j];
    }
  } else {
    for (int64_t j = 0; j < half; ++j) {
      const T xa = x[2 * j], xb = x[2 * j + 1];
      x[2 * j] = xa * c[j] - xb * s[j];
      x[2 * j + 1] = xb * c[j] + xa * s[j];
    }
  }
}

template <typename T>
void RotateRows(T* x, int64_t rows, int64_t row_stride, const T* c, const T* s, int64_t half,
                bool gptj) {
  constexpr int64_t kLine = 64 / sizeof(T);
  constexpr int64_t kAhead = 4;  // rows ahead: measured best of 1, 2, 4
  for (int64_t r = 0; r < rows; ++r) {
    // Asking for the rotary lines of the row four ahead keeps memory busy where the hardware
    // prefetchers fall behind: NEOX walks two half-rows at once, and partial rotary touches only
    // part of each row (measured on one thread: NEOX 0.75 -> 1.1 of triad, rot64 0.8 -> 1.3).
    if (r + kAhead < rows) {
      const T* next = x + (r + kAhead) * row_stride;
      for (int64_t i = 0; i < 2 * half; i += kLine) __builtin_prefetch(next + i, 1, 3);
    }
    RotateRow(x + r * row_stride, c, s, half, gptj);
  }
}

void RotateF32(float* x, int64_t rows, int64_t stride, const float* c, const float* s,
               int64_t half, bool gptj) {
  RotateRows<float>(x, rows, stride, c, s, half, gptj);
}

void RotateF64(double* x, int64_t rows, int64_t stride, const double* c, const double* s,
               int64_t half, bool gptj) {
  RotateRows<double>(x, rows, stride, c, s, half, gptj);
}

void Bf16ToF32(const uint16_t* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
  }
}

void F32ToBf16(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(in[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

void F16ToF32(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void F32ToF16(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

// fp16/bf16 rows: widen the rotary channels to double, rotate, round back (via fp32: a double
// rounding, still within one output ulp of the exact value).
template <void (*Load)(const uint16_t*, float*, int64_t),
          void (*Store)(const float*, uint16_t*, int64_t)>
void RotateHalfRows(uint16_t* x, int64_t rows, int64_t stride, const double* c, const double* s,
                    int64_t half, bool gptj) {
  constexpr int64_t kSlice = 1024;  // pairs per slice
  float f[2 * kSlice];
  double d[2 * kSlice];
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = x + r * stride;
    for (int64_t j0 = 0; j0 < half; j0 += kSlice) {
      const int64_t m = std::min<int64_t>(kSlice, half - j0);
      // GPT-J slices are contiguous pairs; NEOX slices take the same range of both halves.
      uint16_t* a = gptj ? row + 2 * j0 : row + j0;
      uint16_t* b = gptj ? nullptr : row + half + j0;
      Load(a, f, gptj ? 2 * m : m);
      if (!gptj) Load(b, f + m, m);
      for (int64_t i = 0; i < 2 * m; ++i) d[i] = f[i];
      RotateRow<double>(d, c + j0, s + j0, m, gptj);
      for (int64_t i = 0; i < 2 * m; ++i) f[i] = static_cast<float>(d[i]);
      Store(f, a, gptj ? 2 * m : m);
      if (!gptj) Store(f + m, b, m);
    }
  }
}

void ScaleAddF32(const float* __restrict x, const float* __restrict pe, float scale,
                 float* __restrict y, int64_t n) {
  if (pe == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + pe[i];
  }
}

#define POSENC_STR2(x) #x
#define POSENC_STR(x) POSENC_STR2(x)

constexpr SimdKernels kKernels = {
    POSENC_STR(POSENC_SIMD_NS),
    SinCosF32,
    SinCosF64,
    RotateF32,
    RotateF64,
    RotateHalfRows<F16ToF32, F32ToF16>,
    RotateHalfRows<Bf16ToF32, F32ToBf16>,
    F32ToF16,
    F32ToBf16,
    F16ToF32,
    Bf16ToF32,
    ScaleAddF32,
};

}  // namespace

const SimdKernels& Kernels() { return kKernels; }

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
