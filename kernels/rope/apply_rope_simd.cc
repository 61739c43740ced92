// ApplyRope's inner loops for the CPU backend: rotating head rows in place (see
// cpu/simd_kernels.h for the table they fill). Built once per ISA level (POSENC_SIMD_NS).
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd_kernels.h"

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {
namespace {

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

}  // namespace

void ApplyRopeRotateF32(float* x, int64_t rows, int64_t stride, const float* c, const float* s,
                        int64_t half, bool gptj) {
  RotateRows<float>(x, rows, stride, c, s, half, gptj);
}

void ApplyRopeRotateF64(double* x, int64_t rows, int64_t stride, const double* c, const double* s,
                        int64_t half, bool gptj) {
  RotateRows<double>(x, rows, stride, c, s, half, gptj);
}

void ApplyRopeRotateF16(uint16_t* x, int64_t rows, int64_t stride, const double* c, const double* s,
                        int64_t half, bool gptj) {
  RotateHalfRows<F16ToF32, F32ToF16>(x, rows, stride, c, s, half, gptj);
}

void ApplyRopeRotateBf16(uint16_t* x, int64_t rows, int64_t stride, const double* c,
                         const double* s, int64_t half, bool gptj) {
  RotateHalfRows<Bf16ToF32, F32ToBf16>(x, rows, stride, c, s, half, gptj);
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
