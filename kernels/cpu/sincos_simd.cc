// Exact-phase sin/cos of p*omega for the CPU backend (see simd_kernels.h), shared by Sinusoidal,
// AddPositionEncoding, RopeCache and ApplyRope. Built once per ISA level (POSENC_SIMD_NS).
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/immintrin.h"
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

#if defined(__AVX2__)
// The vector levels' walk of the kInterleaved and (dup-free) kSplit forms, register-tiled: for
// each block of kBlock frequencies the state (c, s) and the step (cw, sw) stay in registers for
// kTileRows rows, each row's floats stored as whole vectors (interleaved: sin/cos pairs put side by
// side by a permute), the state stored back once per tile. The row-by-row loop (AngleRowsT) loads
// and stores the state of every frequency for every row: 2 stores of doubles per vector of
// output floats, which sit in the store buffer behind the output's cache misses and cut how many
// output lines are in flight (Sinusoidal 8192 x 1024: 0.71 -> 0.95 of fill interleaved,
// 0.46 -> 0.74 concat; BENCHMARKS.md, branch sin).
// The same arithmetic per element as AngleRowsT (RopeAngleStep's products, then one FMA each).
// Frequencies [0, n - n % kBlock); the caller walks the rest.
constexpr int64_t kTileRows = 8;

#if defined(__AVX512F__)
constexpr int64_t kBlock = 16;  // two vectors of 8 doubles

template <RowForm kForm>
void AngleRowsTiled(double* __restrict c, double* __restrict s, const double* __restrict cw,
                    const double* __restrict sw, int64_t n, int64_t rows, double c_scale,
                    double s_scale, const TableRows& out) {
  const __m512d csc = _mm512_set1_pd(c_scale), ssc = _mm512_set1_pd(s_scale);
  // Lanes of (sin[0..7], cos[0..7]) as sin0 cos0 sin1 cos1 ...
  const __m512i pairs = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r1 = std::min(rows, r0 + kTileRows);
    for (int64_t j = 0; j + kBlock <= n; j += kBlock) {
      __m512d c0 = _mm512_loadu_pd(c + j), c1 = _mm512_loadu_pd(c + j + 8);
      __m512d s0 = _mm512_loadu_pd(s + j), s1 = _mm512_loadu_pd(s + j + 8);
      const __m512d cw0 = _mm512_loadu_pd(cw + j), cw1 = _mm512_loadu_pd(cw + j + 8);
      const __m512d sw0 = _mm512_loadu_pd(sw + j), sw1 = _mm512_loadu_pd(sw + j + 8);
      for (int64_t r = r0; r < r1; ++r) {
        const __m256 cf0 = _mm512_cvtpd_ps(_mm512_mul_pd(c0, csc));
        const __m256 cf1 = _mm512_cvtpd_ps(_mm512_mul_pd(c1, csc));
        const __m256 sf0 = _mm512_cvtpd_ps(_mm512_mul_pd(s0, ssc));
        const __m256 sf1 = _mm512_cvtpd_ps(_mm512_mul_pd(s1, ssc));
        if constexpr (kForm == RowForm::kInterleaved) {
          float* row = out.s + r * out.row_stride + 2 * j;
          _mm512_storeu_ps(row, _mm512_permutex2var_ps(_mm512_castps256_ps512(sf0), pairs,
                                                       _mm512_castps256_ps512(cf0)));
          _mm512_storeu_ps(row + 16, _mm512_permutex2var_ps(_mm512_castps256_ps512(sf1), pairs,
                                                            _mm512_castps256_ps512(cf1)));
        } else {
          _mm512_storeu_ps(out.c + r * out.row_stride + j,
                           _mm512_insertf32x8(_mm512_castps256_ps512(cf0), cf1, 1));
          _mm512_storeu_ps(out.s + r * out.row_stride + j,
                           _mm512_insertf32x8(_mm512_castps256_ps512(sf0), sf1, 1));
        }
        // RopeAngleStep: c' = c*cw - s*sw, s' = s*cw + c*sw.
        const __m512d cn0 = _mm512_fmsub_pd(c0, cw0, _mm512_mul_pd(s0, sw0));
        const __m512d cn1 = _mm512_fmsub_pd(c1, cw1, _mm512_mul_pd(s1, sw1));
        s0 = _mm512_fmadd_pd(s0, cw0, _mm512_mul_pd(c0, sw0));
        s1 = _mm512_fmadd_pd(s1, cw1, _mm512_mul_pd(c1, sw1));
        c0 = cn0;
        c1 = cn1;
      }
      _mm512_storeu_pd(c + j, c0);
      _mm512_storeu_pd(c + j + 8, c1);
      _mm512_storeu_pd(s + j, s0);
      _mm512_storeu_pd(s + j + 8, s1);
    }
  }
}
#else
constexpr int64_t kBlock = 8;  // two vectors of 4 doubles

template <RowForm kForm>
void AngleRowsTiled(double* __restrict c, double* __restrict s, const double* __restrict cw,
                    const double* __restrict sw, int64_t n, int64_t rows, double c_scale,
                    double s_scale, const TableRows& out) {
  const __m256d csc = _mm256_set1_pd(c_scale), ssc = _mm256_set1_pd(s_scale);
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r1 = std::min(rows, r0 + kTileRows);
    for (int64_t j = 0; j + kBlock <= n; j += kBlock) {
      __m256d c0 = _mm256_loadu_pd(c + j), c1 = _mm256_loadu_pd(c + j + 4);
      __m256d s0 = _mm256_loadu_pd(s + j), s1 = _mm256_loadu_pd(s + j + 4);
      const __m256d cw0 = _mm256_loadu_pd(cw + j), cw1 = _mm256_loadu_pd(cw + j + 4);
      const __m256d sw0 = _mm256_loadu_pd(sw + j), sw1 = _mm256_loadu_pd(sw + j + 4);
      for (int64_t r = r0; r < r1; ++r) {
        const __m128 cf0 = _mm256_cvtpd_ps(_mm256_mul_pd(c0, csc));
        const __m128 cf1 = _mm256_cvtpd_ps(_mm256_mul_pd(c1, csc));
        const __m128 sf0 = _mm256_cvtpd_ps(_mm256_mul_pd(s0, ssc));
        const __m128 sf1 = _mm256_cvtpd_ps(_mm256_mul_pd(s1, ssc));
        if constexpr (kForm == RowForm::kInterleaved) {
          float* row = out.s + r * out.row_stride + 2 * j;
          _mm256_storeu_ps(row,
                           _mm256_set_m128(_mm_unpackhi_ps(sf0, cf0), _mm_unpacklo_ps(sf0, cf0)));
          _mm256_storeu_ps(row + 8,
                           _mm256_set_m128(_mm_unpackhi_ps(sf1, cf1), _mm_unpacklo_ps(sf1, cf1)));
        } else {
          _mm256_storeu_ps(out.c + r * out.row_stride + j, _mm256_set_m128(cf1, cf0));
          _mm256_storeu_ps(out.s + r * out.row_stride + j, _mm256_set_m128(sf1, sf0));
        }
        const __m256d cn0 = _mm256_fmsub_pd(c0, cw0, _mm256_mul_pd(s0, sw0));
        const __m256d cn1 = _mm256_fmsub_pd(c1, cw1, _mm256_mul_pd(s1, sw1));
        s0 = _mm256_fmadd_pd(s0, cw0, _mm256_mul_pd(c0, sw0));
        s1 = _mm256_fmadd_pd(s1, cw1, _mm256_mul_pd(c1, sw1));
        c0 = cn0;
        c1 = cn1;
      }
      _mm256_storeu_pd(c + j, c0);
      _mm256_storeu_pd(c + j + 4, c1);
      _mm256_storeu_pd(s + j, s0);
      _mm256_storeu_pd(s + j + 4, s1);
    }
  }
}
#endif

// The tiled walk over the whole blocks of frequencies, AngleRowsT over the rest.
template <RowForm kForm>
void AngleRowsBlocked(double* c, double* s, const double* cw, const double* sw, int64_t n,
                      int64_t rows, double c_scale, double s_scale, const TableRows& out) {
  const int64_t nb = n - n % kBlock;
  if (nb > 0) AngleRowsTiled<kForm>(c, s, cw, sw, nb, rows, c_scale, s_scale, out);
  if (nb == n) return;
  TableRows rest = out;
  if constexpr (kForm == RowForm::kInterleaved) {
    rest.s += 2 * nb;
  } else {
    rest.c += nb;
    rest.s += nb;
  }
  AngleRowsT<kForm, false>(c + nb, s + nb, cw + nb, sw + nb, n - nb, rows, c_scale, s_scale, rest);
}
#endif

}  // namespace

void AngleRows(double* c, double* s, const double* cw, const double* sw, int64_t n, int64_t rows,
               double c_scale, double s_scale, const TableRows& out) {
  switch (out.form) {
    case RowForm::kInterleaved:
#if defined(__AVX2__)
      AngleRowsBlocked<RowForm::kInterleaved>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
#else
      AngleRowsT<RowForm::kInterleaved, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
#endif
      return;
    case RowForm::kPairs:
      AngleRowsT<RowForm::kPairs, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      return;
    case RowForm::kSplit:
      if (out.dup > 0) {
        AngleRowsT<RowForm::kSplit, true>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      } else {
#if defined(__AVX2__)
        AngleRowsBlocked<RowForm::kSplit>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
#else
        AngleRowsT<RowForm::kSplit, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
#endif
      }
      return;
  }
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
