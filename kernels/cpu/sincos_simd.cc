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

// The rows of `out` from frequency j on (kInterleaved and kSplit; kSplit's duplicates stay `dup`
// further on).
template <RowForm kForm>
TableRows FromFrequency(const TableRows& out, int64_t j) {
  TableRows rest = out;
  if constexpr (kForm == RowForm::kInterleaved) {
    rest.s += 2 * j;
  } else {
    rest.c += j;
    rest.s += j;
  }
  return rest;
}

#if defined(__AVX2__)
// The vector levels' walk of the kInterleaved and kSplit forms, register-tiled: for
// each block of kBlock frequencies the state (c, s) and the step (cw, sw) stay in registers for
// kTileRows rows, each row's floats stored as whole vectors (interleaved: sin/cos pairs put side by
// side by a permute), the state stored back once per tile. The row-by-row loop (AngleRowsT) loads
// and stores the state of every frequency for every row: 2 stores of doubles per vector of
// output floats, which sit in the store buffer behind the output's cache misses and cut how many
// output lines are in flight (Sinusoidal 8192 x 1024: 0.71 -> 0.95 of fill interleaved,
// 0.46 -> 0.74 concat; BENCHMARKS.md, branch sin). kStream: with non-temporal stores, whole lines
// at a time (a large table written once: no read of each line before it is written; concat
// 8192 x 1024 on an AVX2 host 0.63 -> 0.95 of fill, BENCHMARKS.md "Streamed table rows"; on an
// AVX-512 host 0.67-0.80 -> 1.13-1.31). kDup: kSplit rows whose values repeat `dup` floats on
// (RopeCache NEOX), each vector stored twice; they had kept the row-by-row loop (RopeCache NEOX
// on an AVX-512 host, one thread: 4096 x 128 in the caches 0.97 -> 1.9-2.3 of fill, 131072 x 128
// 0.50 -> 0.63-0.71; streamed, a line-aligned table makes 1.15-1.32 where one 16 bytes past a line
// makes 0.61-0.69: its first and last frequencies go row by row; BENCHMARKS.md "RopeCache NEOX
// tiled, AVX-512 tables streamed, the pool's polling").
// The same arithmetic per element as AngleRowsT (RopeAngleStep's products, then one FMA each).
// Frequencies [0, n - n % kBlock); the caller walks the rest.
constexpr int64_t kTileRows = 8;

// A vector of floats into a table row: non-temporal where kStream (whole 64-byte lines, aligned
// to their size), else a plain store.
template <bool kStream, typename V>
inline void StoreFloats(float* to, V v) {
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64) {
    if constexpr (kStream) {
      _mm512_stream_ps(to, v);
    } else {
      _mm512_storeu_ps(to, v);
    }
    return;
  }
#endif
  if constexpr (sizeof(V) == 32) {
    if constexpr (kStream) {
      _mm256_stream_ps(to, v);
    } else {
      _mm256_storeu_ps(to, v);
    }
  }
}

#if defined(__AVX512F__)
// Two vectors of 8 doubles: 16 floats, a whole 64-byte line, to each row a block writes (split;
// with kDup that line again `dup` floats on), two lines (interleaved), streamed or not.
constexpr bool kStreams = true;
// Misaligned rows end to end staged in L1 and stream-copied (AngleRowsStaged).
constexpr bool kStagesRows = true;
template <RowForm, bool kStream>
constexpr int64_t kBlock = 16;

template <RowForm kForm, bool kStream, bool kDup>
void AngleRowsTiled(double* __restrict c, double* __restrict s, const double* __restrict cw,
                    const double* __restrict sw, int64_t n, int64_t rows, double c_scale,
                    double s_scale, const TableRows& out) {
  const __m512d csc = _mm512_set1_pd(c_scale), ssc = _mm512_set1_pd(s_scale);
  // Lanes of (sin[0..7], cos[0..7]) as sin0 cos0 sin1 cos1 ...
  const __m512i pairs = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r1 = std::min(rows, r0 + kTileRows);
    for (int64_t j = 0; j + kBlock<kForm, kStream> <= n; j += kBlock<kForm, kStream>) {
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
          StoreFloats<kStream>(row, _mm512_permutex2var_ps(_mm512_castps256_ps512(sf0), pairs,
                                                           _mm512_castps256_ps512(cf0)));
          StoreFloats<kStream>(row + 16, _mm512_permutex2var_ps(_mm512_castps256_ps512(sf1), pairs,
                                                                _mm512_castps256_ps512(cf1)));
        } else {
          float* crow = out.c + r * out.row_stride + j;
          float* srow = out.s + r * out.row_stride + j;
          const __m512 cv = _mm512_insertf32x8(_mm512_castps256_ps512(cf0), cf1, 1);
          const __m512 sv = _mm512_insertf32x8(_mm512_castps256_ps512(sf0), sf1, 1);
          StoreFloats<kStream>(crow, cv);
          StoreFloats<kStream>(srow, sv);
          if constexpr (kDup) {
            StoreFloats<kStream>(crow + out.dup, cv);
            StoreFloats<kStream>(srow + out.dup, sv);
          }
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
// kV vectors of 4 doubles a block. Streamed (TableRows::stream), a block writes whole 64-byte
// lines to each row: 8 frequencies interleaved (16 floats), 16 split (16 floats to each of c and
// s; the step then read from L1 each row, since 16 vectors of state and step would not leave
// registers for the rest). Plain stores keep 8 split frequencies (half lines, which the next
// block completes while the lines are still in the cache).
constexpr bool kStreams = true;
// Not staged (AngleRowsStaged): this level measured on an AVX-512 host with the AVX2 kernels,
// 32768 x 128 1.45x but 131072 x 128 0.85x (BENCHMARKS.md "RopeCache NEOX tiled").
constexpr bool kStagesRows = false;
template <RowForm kForm, bool kStream>
constexpr int kVecs = (kForm == RowForm::kSplit && kStream) ? 4 : 2;
template <RowForm kForm, bool kStream>
constexpr int64_t kBlock = 4 * kVecs<kForm, kStream>;

template <RowForm kForm, bool kStream, bool kDup>
void AngleRowsTiled(double* __restrict c, double* __restrict s, const double* __restrict cw,
                    const double* __restrict sw, int64_t n, int64_t rows, double c_scale,
                    double s_scale, const TableRows& out) {
  constexpr int kV = kVecs<kForm, kStream>;
  constexpr int64_t kB = kBlock<kForm, kStream>;
  const __m256d csc = _mm256_set1_pd(c_scale), ssc = _mm256_set1_pd(s_scale);
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r1 = std::min(rows, r0 + kTileRows);
    for (int64_t j = 0; j + kB <= n; j += kB) {
      __m256d cv[kV], sv[kV], cwv[kV], swv[kV];
      for (int64_t v = 0; v < kV; ++v) {
        cv[v] = _mm256_loadu_pd(c + j + 4 * v);
        sv[v] = _mm256_loadu_pd(s + j + 4 * v);
        cwv[v] = _mm256_loadu_pd(cw + j + 4 * v);
        swv[v] = _mm256_loadu_pd(sw + j + 4 * v);
      }
      for (int64_t r = r0; r < r1; ++r) {
        __m128 cf[kV], sf[kV];
        for (int64_t v = 0; v < kV; ++v) {
          cf[v] = _mm256_cvtpd_ps(_mm256_mul_pd(cv[v], csc));
          sf[v] = _mm256_cvtpd_ps(_mm256_mul_pd(sv[v], ssc));
        }
        if constexpr (kForm == RowForm::kInterleaved) {
          float* row = out.s + r * out.row_stride + 2 * j;
          for (int64_t v = 0; v < kV; ++v) {
            StoreFloats<kStream>(row + 8 * v, _mm256_set_m128(_mm_unpackhi_ps(sf[v], cf[v]),
                                                              _mm_unpacklo_ps(sf[v], cf[v])));
          }
        } else {
          float* crow = out.c + r * out.row_stride + j;
          float* srow = out.s + r * out.row_stride + j;
          for (int64_t v = 0; v < kV; v += 2) {
            const __m256 cv8 = _mm256_set_m128(cf[v + 1], cf[v]);
            const __m256 sv8 = _mm256_set_m128(sf[v + 1], sf[v]);
            StoreFloats<kStream>(crow + 4 * v, cv8);
            StoreFloats<kStream>(srow + 4 * v, sv8);
            if constexpr (kDup) {
              StoreFloats<kStream>(crow + out.dup + 4 * v, cv8);
              StoreFloats<kStream>(srow + out.dup + 4 * v, sv8);
            }
          }
        }
        // RopeAngleStep: c' = c*cw - s*sw, s' = s*cw + c*sw; the step of four vectors from L1.
        for (int64_t v = 0; v < kV; ++v) {
          const __m256d cw4 = kV == 2 ? cwv[v] : _mm256_loadu_pd(cw + j + 4 * v);
          const __m256d sw4 = kV == 2 ? swv[v] : _mm256_loadu_pd(sw + j + 4 * v);
          const __m256d cn = _mm256_fmsub_pd(cv[v], cw4, _mm256_mul_pd(sv[v], sw4));
          sv[v] = _mm256_fmadd_pd(sv[v], cw4, _mm256_mul_pd(cv[v], sw4));
          cv[v] = cn;
        }
      }
      for (int64_t v = 0; v < kV; ++v) {
        _mm256_storeu_pd(c + j + 4 * v, cv[v]);
        _mm256_storeu_pd(s + j + 4 * v, sv[v]);
      }
    }
  }
}
#endif

// The tiled walk over the whole blocks of frequencies, AngleRowsT over the rest.
template <RowForm kForm, bool kStream, bool kDup>
void AngleRowsBlocks(double* c, double* s, const double* cw, const double* sw, int64_t n,
                     int64_t rows, double c_scale, double s_scale, const TableRows& out) {
  const int64_t nb = n - n % kBlock<kForm, kStream>;
  if (nb > 0) AngleRowsTiled<kForm, kStream, kDup>(c, s, cw, sw, nb, rows, c_scale, s_scale, out);
  if (nb == n) return;
  AngleRowsT<kForm, kDup>(c + nb, s + nb, cw + nb, sw + nb, n - nb, rows, c_scale, s_scale,
                          FromFrequency<kForm>(out, nb));
}

// Where the rows of `out` start whole 64-byte lines at the same frequency `lead` in every row, c
// and s alike, the duplicate columns too (the row stride and `dup` multiples of a line): the
// frequency; else -1.
template <RowForm kForm>
int64_t LineLead(const TableRows& out) {
  constexpr int64_t kLine = 64, kFloats = kForm == RowForm::kInterleaved ? 2 : 1;
  const auto at = [](const float* p) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kLine);
  };
  if (out.row_stride * static_cast<int64_t>(sizeof(float)) % kLine != 0) return -1;
  if (out.dup * static_cast<int64_t>(sizeof(float)) % kLine != 0) return -1;
  if (kForm == RowForm::kSplit && at(out.c) != at(out.s)) return -1;
  const int64_t lead_bytes = (kLine - at(out.s)) % kLine;
  if (lead_bytes % (kFloats * static_cast<int64_t>(sizeof(float))) != 0) return -1;
  return lead_bytes / (kFloats * static_cast<int64_t>(sizeof(float)));
}

// Rows of kSplit tables that lie end to end (cos and sin each one run of memory: RopeCache COMPACT
// and NEOX, whose duplicates make the second half of a row) take at most this many floats per
// table for kTileRows rows to be staged (AngleRowsStaged): 16 KiB, in L1 with the other table's.
constexpr int64_t kStageFloats = 4096;

template <bool kDup>
bool StagedRows(const TableRows& out, int64_t n) {
  const int64_t width = kDup ? 2 * n : n;
  return (!kDup || out.dup == n) && out.row_stride == width &&
         out.row_stride * kTileRows <= kStageFloats;
}

// Streamed rows that do not start on a line (StagedRows): each tile of rows walked with plain
// stores into buffers in L1, then copied out with StreamCopy (the run's whole lines streamed, its
// first and last line plain). Streamed in place, such a row's frequencies before its first whole
// line and after its last went row by row with plain stores, a quarter of a row of 64 (RopeCache
// 131072 x 128 NEOX 16 bytes past a line, one thread on an AVX-512 host: 0.61-0.69 of fill where
// a line-aligned table made 1.15-1.32; staged 0.66 -> 0.73, and 32768 x 128 0.78 -> 1.07:
// BENCHMARKS.md "RopeCache NEOX tiled").
template <bool kDup>
void AngleRowsStaged(double* c, double* s, const double* cw, const double* sw, int64_t n,
                     int64_t rows, double c_scale, double s_scale, const TableRows& out) {
  alignas(64) float stage_c[kStageFloats];
  alignas(64) float stage_s[kStageFloats];
  TableRows staged = out;
  staged.c = stage_c;
  staged.s = stage_s;
  staged.stream = false;
  const int64_t stride = out.row_stride;
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t m = std::min(kTileRows, rows - r0);
    AngleRowsBlocks<RowForm::kSplit, false, kDup>(c, s, cw, sw, n, m, c_scale, s_scale, staged);
    const int64_t bytes = m * stride * static_cast<int64_t>(sizeof(float));
    StreamCopy(out.c + r0 * stride, stage_c, bytes);
    StreamCopy(out.s + r0 * stride, stage_s, bytes);
  }
}

// Streamed where the rows allow it (TableRows::stream): rows that start lines (LineLead) in place,
// the frequencies before the first line row by row, the rest in streamed blocks; rows end to end
// that do not, staged (AngleRowsStaged). Else plain stores.
template <RowForm kForm, bool kDup>
void AngleRowsBlocked(double* c, double* s, const double* cw, const double* sw, int64_t n,
                      int64_t rows, double c_scale, double s_scale, const TableRows& out) {
  constexpr int64_t kStreamBlock = kBlock<kForm, true>;
  const int64_t lead = kStreams && out.stream ? LineLead<kForm>(out) : -1;
  if constexpr (kForm == RowForm::kSplit) {
    if (kStagesRows && out.stream && lead != 0 && StagedRows<kDup>(out, n)) {
      AngleRowsStaged<kDup>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      return;
    }
  }
  if (lead < 0 || lead + kStreamBlock > n) {
    AngleRowsBlocks<kForm, false, kDup>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
    return;
  }
  if (lead > 0) AngleRowsT<kForm, kDup>(c, s, cw, sw, lead, rows, c_scale, s_scale, out);
  AngleRowsBlocks<kForm, true, kDup>(c + lead, s + lead, cw + lead, sw + lead, n - lead, rows,
                                     c_scale, s_scale, FromFrequency<kForm>(out, lead));
}
#endif

}  // namespace

void AngleRows(double* c, double* s, const double* cw, const double* sw, int64_t n, int64_t rows,
               double c_scale, double s_scale, const TableRows& out) {
  switch (out.form) {
    case RowForm::kInterleaved:
#if defined(__AVX2__)
      AngleRowsBlocked<RowForm::kInterleaved, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
#else
      AngleRowsT<RowForm::kInterleaved, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
#endif
      return;
    case RowForm::kPairs:
      AngleRowsT<RowForm::kPairs, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      return;
    case RowForm::kSplit:
#if defined(__AVX2__)
      if (out.dup > 0) {
        AngleRowsBlocked<RowForm::kSplit, true>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      } else {
        AngleRowsBlocked<RowForm::kSplit, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      }
#else
      if (out.dup > 0) {
        AngleRowsT<RowForm::kSplit, true>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      } else {
        AngleRowsT<RowForm::kSplit, false>(c, s, cw, sw, n, rows, c_scale, s_scale, out);
      }
#endif
      return;
  }
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
