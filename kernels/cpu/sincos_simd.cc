// Exact-phase sin/cos of p*omega for the CPU backend (see simd_kernels.h), shared by Sinusoidal,
// AddPositionEncoding, RopeCache and ApplyRope. Built once per ISA level (POSENC_SIMD_NS).
#include <cstdint>

#include "kernels/cpu/simd_kernels.h"
#include "kernels/rope/rope_math.h"

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {

// rope_math.h's RopeCosSin (exact phase, fdlibm polynomials), the same function the CUDA kernels
// run, in loops that the compiler vectorizes for the ISA level. FLOAT32 takes the short polynomial
// (truncation error below 2e-9, invisible in a float); double the whole one (FLOAT64, and
// FLOAT16/BFLOAT16 math).
void SinCosF32(const double* __restrict p, int64_t p_stride, const double* __restrict w_hi,
               const double* __restrict w_lo, int64_t n, double scale, double sign,
               float* __restrict c, float* __restrict s) {
  for (int64_t j = 0; j < n; ++j) {
    hd::RopeCosSin<float>(p[j * p_stride], w_hi[j], w_lo[j], scale, sign, &c[j], &s[j]);
  }
}

void SinCosF64(const double* __restrict p, int64_t p_stride, const double* __restrict w_hi,
               const double* __restrict w_lo, int64_t n, double scale, double sign,
               double* __restrict c, double* __restrict s) {
  for (int64_t j = 0; j < n; ++j) {
    hd::RopeCosSin<double>(p[j * p_stride], w_hi[j], w_lo[j], scale, sign, &c[j], &s[j]);
  }
}

namespace {

// AngleRows for one row form (TableRows) and, for kSplit, with or without the duplicate columns:
// the state's floats into row r, then one step of every frequency (hd::RopeAngleStep, the
// arithmetic the CUDA kernel runs), frequencies vectorized.
template <RowForm kForm, bool kDup>
void AngleRowsT(double* __restrict c, double* __restrict s, const double* __restrict cw,
                const double* __restrict sw, int64_t n, int64_t rows, double c_scale,
                double s_scale, const TableRows& out) {
  const int64_t dup = out.dup;
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict cr = out.c + r * out.row_stride;
    float* __restrict sr = out.s + r * out.row_stride;
    for (int64_t j = 0; j < n; ++j) {
      double cj = c[j], sj = s[j];
      const float cv = static_cast<float>(cj * c_scale);
      const float sv = static_cast<float>(sj * s_scale);
      if constexpr (kForm == RowForm::kInterleaved) {
        sr[2 * j] = sv;
        sr[2 * j + 1] = cv;
      } else if constexpr (kForm == RowForm::kPairs) {
        cr[2 * j] = cv;
        cr[2 * j + 1] = cv;
        sr[2 * j] = sv;
        sr[2 * j + 1] = sv;
      } else {
        cr[j] = cv;
        sr[j] = sv;
        if constexpr (kDup) {
          cr[j + dup] = cv;
          sr[j + dup] = sv;
        }
      }
      hd::RopeAngleStep<double>(cw[j], sw[j], &cj, &sj);
      c[j] = cj;
      s[j] = sj;
    }
  }
}

}  // namespace

void AngleRows(double* c, double* s, const double* cw, const double* sw, int64_t n, int64_t rows,
               double c_scale, double s_scale, const TableRows& out) {
  switch (out.form) {
    case RowForm::kInterleaved:
      AngleRowsT<RowForm::kInterleaved, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      return;
    case RowForm::kPairs:
      AngleRowsT<RowForm::kPairs, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      return;
    case RowForm::kSplit:
      if (out.dup > 0) {
        AngleRowsT<RowForm::kSplit, true>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      } else {
        AngleRowsT<RowForm::kSplit, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      }
      return;
  }
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
