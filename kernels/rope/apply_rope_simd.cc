// ApplyRope's inner loops for the CPU backend: rotating head rows in place (see
// cpu/simd_kernels.h for the table they fill and RopeRows for what one call covers). Built once
// per ISA level (POSENC_SIMD_NS).
//
// The vector levels (AVX2, AVX-512) rotate FLOAT32 and FLOAT16/BFLOAT16 rows with intrinsics,
// frequencies outermost (RotateRowsInLanes); FLOAT16/BFLOAT16 in float with rope_math.h's
// RotatePairInFloat (RotateHalfPair's bits, the CUDA kernel's). The scalar level, and FLOAT64
// everywhere, run portable loops; the scalar level rotates FLOAT16/BFLOAT16 in double (as before
// the float rotation existed: its results are unchanged).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/half_codec.h"
#include "kernels/cpu/immintrin.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/rope/rope_math.h"

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {
namespace {

// ---- portable loops ----------------------------------------------------------------------------

// The channels of pair j in a row of rotary width 2*half, in GPT-J or NEOX order.
inline int64_t ChannelA(bool gptj, int64_t j) { return gptj ? 2 * j : j; }
inline int64_t ChannelB(bool gptj, int64_t half, int64_t j) { return gptj ? 2 * j + 1 : j + half; }

// One row in place, pairs in one order (the compiler vectorizes both loops).
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

// One row from `in` (pairs in gptj_in order) to `out` (gptj_out order), pairs [j0, j1): the same
// arithmetic as RotateRow.
template <typename T>
void RotatePairs(const T* in, T* out, const T* c, const T* s, int64_t half, bool gptj_in,
                 bool gptj_out, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    const T xa = in[ChannelA(gptj_in, j)], xb = in[ChannelB(gptj_in, half, j)];
    out[ChannelA(gptj_out, j)] = xa * c[j] - xb * s[j];
    out[ChannelB(gptj_out, half, j)] = xb * c[j] + xa * s[j];
  }
}

// Calls fn(in, out, r) for each row of each group r: `out` the row, `in` the row itself, or
// (DEEPSEEK: the orders differ) a copy of its rotary channels in the scratch.
template <typename E, typename RowFn>
void EachRow(const RopeRows& a, RowFn fn) {
  auto* x = static_cast<E*>(a.x);
  auto* scratch = static_cast<E*>(a.scratch);
  const size_t bytes = static_cast<size_t>(2 * a.half) * sizeof(E);
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t g = 0; g < a.group; ++g) {
      E* row = x + r * a.row_stride + g * a.group_stride;
      if (a.gptj_in == a.gptj_out) {
        fn(row, row, r);
      } else {
        std::memcpy(scratch, row, bytes);
        fn(scratch, row, r);
      }
    }
  }
}

// FLOAT32 (scalar level) and FLOAT64 rows.
template <typename T>
void RotateRowsPortable(const RopeRows& a, const T* c, const T* s) {
  EachRow<T>(a, [&](const T* in, T* out, int64_t r) {
    const T* cr = c + r * a.table_stride;
    const T* sr = s + r * a.table_stride;
    if (in == out) {
      RotateRow<T>(out, cr, sr, a.half, a.gptj_in);
    } else {
      RotatePairs<T>(in, out, cr, sr, a.half, a.gptj_in, a.gptj_out, 0, a.half);
    }
  });
}

// FLOAT16/BFLOAT16 rows in double (the scalar level): widen the rotary channels, rotate, round
// back via fp32 (a double rounding, still within one output ulp of the exact value).
template <void (*Load)(const uint16_t*, float*, int64_t),
          void (*Store)(const float*, uint16_t*, int64_t)>
void RotateHalfRowsInDouble(const RopeRows& a, const HalfRopeFactors& f) {
  constexpr int64_t kSlice = 512;  // pairs per slice
  uint16_t h[2 * kSlice];
  float fl[2 * kSlice];
  double d[2 * kSlice];
  const int64_t half = a.half;
  EachRow<uint16_t>(a, [&](const uint16_t* in, uint16_t* out, int64_t r) {
    const double* c = f.c + r * a.table_stride;
    const double* s = f.s + r * a.table_stride;
    for (int64_t j0 = 0; j0 < half; j0 += kSlice) {
      const int64_t m = std::min<int64_t>(kSlice, half - j0);
      // NEOX order in the slice: the m first elements of the pairs, then the m second ones.
      for (int64_t j = 0; j < m; ++j) {
        h[j] = in[ChannelA(a.gptj_in, j0 + j)];
        h[m + j] = in[ChannelB(a.gptj_in, half, j0 + j)];
      }
      Load(h, fl, 2 * m);
      for (int64_t i = 0; i < 2 * m; ++i) d[i] = fl[i];
      RotateRow<double>(d, c + j0, s + j0, m, /*gptj=*/false);
      for (int64_t i = 0; i < 2 * m; ++i) fl[i] = static_cast<float>(d[i]);
      Store(fl, h, 2 * m);
      for (int64_t j = 0; j < m; ++j) {
        out[ChannelA(a.gptj_out, j0 + j)] = h[j];
        out[ChannelB(a.gptj_out, half, j0 + j)] = h[m + j];
      }
    }
  });
}

// Pairs [j0, j1) of one row through rope_math.h's RotateHalfPair, the factors from table index
// `t` on (the vector loops' tails and the blocks whose float results are not all finite).
template <bool kBf16>
void RotateHalfPairs(const uint16_t* in, uint16_t* out, const HalfRopeFactors& f, int64_t t,
                     int64_t half, bool gptj_in, bool gptj_out, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    uint16_t a = in[ChannelA(gptj_in, j)], b = in[ChannelB(gptj_in, half, j)];
    hd::RotateHalfPair<kBf16>(&a, &b, f.cf[t + j], f.t_hi[t + j], f.t_lo[t + j], f.c[t + j],
                              f.s[t + j]);
    out[ChannelA(gptj_out, j)] = a;
    out[ChannelB(gptj_out, half, j)] = b;
  }
}

#if defined(__AVX512F__) || defined(__AVX2__)

// ---- float lanes -----------------------------------------------------------------------------
// The level's vectors, one set of wrappers over the vector width W in bytes (64 on AVX-512, 32 on
// AVX2): Vf, kLanes floats with what rope_math.h's RotatePairInFloat needs (found by
// argument-dependent lookup), Dwords, kLanes 32-bit lanes, and Words, kLanes 16-bit ones.
// Arithmetic in the compilers' vector extensions (which is what the intrinsics are); an
// intrinsic, picked by the width, where there is no generic form.
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#else
constexpr int kVecBytes = 32;
#endif
constexpr int64_t kLanes = kVecBytes / sizeof(float);
template <int W>
struct RawOf;
template <>
struct RawOf<64> {
  using F = __m512;
  using I = __m512i;
  using H = __m256i;  // kLanes words
};
template <>
struct RawOf<32> {
  using F = __m256;
  using I = __m256i;
  using H = __m128i;
};
using RawF = RawOf<kVecBytes>::F;
using RawI = RawOf<kVecBytes>::I;
using RawH = RawOf<kVecBytes>::H;
using Dwords = uint32_t __attribute__((vector_size(kVecBytes)));

template <int W>
struct VecF {
  typename RawOf<W>::F v;
};
using Vf = VecF<kVecBytes>;

inline Vf LoadF(const float* p) {
  Vf v;
  std::memcpy(&v.v, p, sizeof v.v);
  return v;
}
template <int W>
inline VecF<W> operator*(VecF<W> a, VecF<W> b) {
  return {a.v * b.v};
}
template <int W>
inline VecF<W> Add(VecF<W> a, VecF<W> b) {
  return {a.v + b.v};
}
template <int W>
inline VecF<W> Sub(VecF<W> a, VecF<W> b) {
  return {a.v - b.v};
}
template <int W>
inline VecF<W> Fma(VecF<W> a, VecF<W> b, VecF<W> c) {
  if constexpr (W == 64) {
    return {_mm512_fmadd_ps(a.v, b.v, c.v)};
  } else {
    return {_mm256_fmadd_ps(a.v, b.v, c.v)};
  }
}
// c - a * b with one rounding: VFNMADD (GCC did not fold a negated operand used twice, as in
// RotatePairInFloat, into it: a VXORPS and a VMOVAPS more per vector).
template <int W>
inline VecF<W> Fnma(VecF<W> a, VecF<W> b, VecF<W> c) {
  if constexpr (W == 64) {
    return {_mm512_fnmadd_ps(a.v, b.v, c.v)};
  } else {
    return {_mm256_fnmadd_ps(a.v, b.v, c.v)};
  }
}
inline Dwords Bits(Vf a) { return (Dwords)a.v; }
inline Vf FromBits(Dwords b) { return {(RawF)b}; }

// For GPT-J pairs kept interleaved in a vector (x_a, x_b, x_a, x_b, ...): each pair's two lanes
// swapped (SwapPairs), and the lanes [0, kLanes/2) (DupPairs, high false) or [kLanes/2, kLanes)
// (high true) of a vector of per-pair values, each doubled.
template <int W>
inline VecF<W> SwapPairs(VecF<W> a) {
  if constexpr (W == 64) {
    return {_mm512_permute_ps(a.v, 0xb1)};
  } else {
    return {_mm256_permute_ps(a.v, 0xb1)};
  }
}
template <int W>
inline VecF<W> DupPairs(VecF<W> a, bool high) {
  if constexpr (W == 64) {
    const __m512i lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i idx = high ? _mm512_add_epi32(lo, _mm512_set1_epi32(8)) : lo;
    return {_mm512_permutex2var_ps(a.v, idx, a.v)};  // (permutexvar: GCC 12 warns inside it)
  } else {
    const __m256i lo = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
    return {_mm256_permutevar8x32_ps(a.v, high ? _mm256_add_epi32(lo, _mm256_set1_epi32(4)) : lo)};
  }
}
// a with the sign of its even lanes flipped.
template <int W>
inline VecF<W> NegateEven(VecF<W> a) {
  constexpr int kS = INT32_MIN;
  if constexpr (W == 64) {
    const __m512i m = _mm512_set_epi32(0, kS, 0, kS, 0, kS, 0, kS, 0, kS, 0, kS, 0, kS, 0, kS);
    return {_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.v), m))};
  } else {
    return {_mm256_xor_ps(a.v, _mm256_castsi256_ps(_mm256_set_epi32(0, kS, 0, kS, 0, kS, 0, kS)))};
  }
}

// Whether a lane is inf or NaN (AVX-512: fpclass categories 0x01 QNaN, 0x08 +inf, 0x10 -inf,
// 0x80 SNaN; AVX2: its magnitude's bits above the largest float's).
template <int W>
inline bool AnyNotFinite(VecF<W> a) {
  if constexpr (W == 64) {
    const __mmask16 m = _mm512_fpclass_ps_mask(a.v, 0x99);
    return _kortestz_mask16_u8(m, m) == 0;
  } else {
    const __m256i mag = _mm256_and_si256(_mm256_castps_si256(a.v), _mm256_set1_epi32(0x7fffffff));
    const __m256i bad = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f7fffff));
    return !_mm256_testz_si256(bad, bad);
  }
}

// kLanes words from the low halves of kLanes dwords (kHighZero: the high halves are known to be
// zero, so AVX2's saturating pack needs no mask first), and back (zero-extended).
template <bool kHighZero = false, int W = kVecBytes>
inline typename RawOf<W>::H LowWords(Dwords w) {
  if constexpr (W == 64) {
    return _mm512_cvtepi32_epi16((typename RawOf<W>::I)w);
  } else {
    const auto lo = (typename RawOf<W>::I)(kHighZero ? w : w & 0xffffu);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(lo, lo), 0x08));
  }
}
template <int W = kVecBytes>
inline Dwords Widen(typename RawOf<W>::H h) {
  if constexpr (W == 64) {
    return (Dwords)_mm512_cvtepu16_epi32(h);
  } else {
    return (Dwords)_mm256_cvtepu16_epi32(h);
  }
}
inline RawH LoadWords(const uint16_t* p) {
  RawH h;
  std::memcpy(&h, p, sizeof h);
  return h;
}
inline void StoreWords(uint16_t* p, RawH h) { std::memcpy(p, &h, sizeof h); }
inline Dwords LoadDwords(const uint16_t* p) {
  Dwords w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
inline void StoreDwords(uint16_t* p, Dwords w) { std::memcpy(p, &w, sizeof w); }
template <int W = kVecBytes>
inline Vf HalfToVf(typename RawOf<W>::H h) {
  if constexpr (W == 64) {
    return {_mm512_cvtph_ps(h)};
  } else {
    return {_mm256_cvtph_ps(h)};
  }
}
template <int W>
inline typename RawOf<W>::H VfToHalf(VecF<W> v) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  if constexpr (W == 64) {
    return _mm512_cvtps_ph(v.v, kRound);
  } else {
    return _mm256_cvtps_ph(v.v, kRound);
  }
}

inline Dwords Set1(uint32_t v) { return Dwords{} + v; }
inline Dwords Add(Dwords a, Dwords b) { return a + b; }
inline Dwords And(Dwords a, Dwords b) { return a & b; }
inline Dwords Or(Dwords a, Dwords b) { return a | b; }
inline Dwords Shl16(Dwords a) { return a << 16; }
inline Dwords Shr16(Dwords a) { return a >> 16; }

// ---- storage formats: kLanes consecutive elements, or kLanes GPT-J pairs ----------------------
// Load/Store move kLanes consecutive elements; LoadPairs/StorePairs kLanes pairs (2j, 2j + 1),
// de-interleaved into (x_a, x_b). For the 16-bit formats a pair is one dword: element 2j in the
// low half, 2j + 1 in the high half.

// FLOAT32: the pairs de-interleaved by permutes.
struct F32 {
  using Elem = float;
  static Vf Load(const float* p) { return LoadF(p); }
#if defined(__AVX512F__)
  static void Store(float* p, Vf v) { _mm512_storeu_ps(p, v.v); }
  static void LoadPairs(const float* p, Vf* a, Vf* b) {
    const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    *a = {_mm512_permutex2var_ps(lo, even, hi)};
    *b = {_mm512_permutex2var_ps(lo, odd, hi)};
  }
  static void StorePairs(float* p, Vf a, Vf b) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    _mm512_storeu_ps(p, _mm512_permutex2var_ps(a.v, lo, b.v));
    _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(a.v, hi, b.v));
  }
#else
  static void Store(float* p, Vf v) { _mm256_storeu_ps(p, v.v); }
  static void LoadPairs(const float* p, Vf* a, Vf* b) {
    const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    // shuffle_ps picks within 128-bit lanes: [0 2 8 10 | 4 6 12 14]; the permute restores order.
    *a = {_mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8))};
    *b = {_mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8))};
  }
  static void StorePairs(float* p, Vf a, Vf b) {
    const __m256 lo = _mm256_unpacklo_ps(a.v, b.v), hi = _mm256_unpackhi_ps(a.v, b.v);
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
#endif
};

// FLOAT16: F16C conversions (round to nearest even, subnormals kept).
struct F16 {
  using Elem = uint16_t;
  static constexpr bool kBf16 = false;
  static constexpr bool kFlushesDenormals = false;
  static Vf Load(const uint16_t* p) { return HalfToVf(LoadWords(p)); }
  static void Store(uint16_t* p, Vf v) { StoreWords(p, VfToHalf(v)); }
  static void LoadPairs(const uint16_t* p, Vf* a, Vf* b) {
    const Dwords w = LoadDwords(p);
    *a = HalfToVf(LowWords(w));
    *b = HalfToVf(LowWords(Shr16(w)));
  }
  static void StorePairs(uint16_t* p, Vf a, Vf b) {
    StoreDwords(p, Or(Widen(VfToHalf(a)), Shl16(Widen(VfToHalf(b)))));
  }
};

// BFLOAT16 by integer rounding (round to nearest even, subnormals kept; the caller has checked
// that every value is finite, so no NaN reaches the rounding).
struct Bf16 {
  using Elem = uint16_t;
  static constexpr bool kBf16 = true;
  static constexpr bool kFlushesDenormals = false;
  // The bf16 of each lane in the high half of its dword (the low half is garbage).
  static Dwords RoundHigh(Vf v) {
    const Dwords u = Bits(v);
    return Add(u, Add(Set1(0x7fff), And(Shr16(u), Set1(1))));
  }
  static Vf Load(const uint16_t* p) { return FromBits(Shl16(Widen(LoadWords(p)))); }
  static void Store(uint16_t* p, Vf v) { StoreWords(p, LowWords<true>(Shr16(RoundHigh(v)))); }
  static void LoadPairs(const uint16_t* p, Vf* a, Vf* b) {
    const Dwords w = LoadDwords(p);
    *a = FromBits(Shl16(w));
    *b = FromBits(And(w, Set1(0xffff0000u)));
  }
#if defined(__AVX512F__)
  static void StorePairs(uint16_t* p, Vf a, Vf b) {
    StoreDwords(p, Or(Shr16(RoundHigh(a)), And(RoundHigh(b), Set1(0xffff0000u))));
  }
#else
  // AVX2, where the rounding is most of a bfloat16 rotation's work: the words of two vectors
  // merged by one blend (GPT-J) or one pack (StoreTwo: 2 kLanes consecutive elements in one
  // store) rather than a mask, pack and permute for each vector.
  static void StorePairs(uint16_t* p, Vf a, Vf b) {
    StoreDwords(
        p, (Dwords)_mm256_blend_epi16((__m256i)Shr16(RoundHigh(a)), (__m256i)RoundHigh(b), 0xaa));
  }
  static void StoreTwo(uint16_t* p, Vf a, Vf b) {
    const auto packed = _mm256_packus_epi32((__m256i)Shr16(RoundHigh(a)),
                                            (__m256i)Shr16(RoundHigh(b)));  // 128-bit lanes
    StoreDwords(p, (Dwords)_mm256_permute4x64_epi64(packed, 0xd8));
  }
#endif
};

#if !defined(__AVX512F__)
// BFLOAT16 NEOX rows whose channels all rotate, on AVX2: each half read and written as GPT-J pairs
// are (SplitNeox below).
struct Bf16Split : Bf16 {
  static constexpr bool kSplitNeox = true;
};
#endif

#if defined(__AVX512F__)
// VCVTNEPS2BF16 (AVX512_BF16; the level's compiler flags do not include it, so inline assembly,
// run only where the processor has it: HasAvx512Bf16). It flushes float subnormals to zero: the
// loop checks for them (kFlushesDenormals) and takes the scalar path there.
inline __m256i CvtNeps2Bf16(__m512 v) {
  __m256i r;
  asm("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(v));
  return r;
}
struct Bf16Native : Bf16 {
  static constexpr bool kFlushesDenormals = true;
  // Whether a lane of a or b is inf, NaN or a nonzero float below 2^-126 (0x20: subnormal).
  template <int kVecs>
  static bool AnyNotFiniteOrDenormal(const Vf* a, const Vf* b) {
    __mmask16 m = _mm512_fpclass_ps_mask(a[0].v, 0xb9);
    for (int u = 0; u < kVecs; ++u) {
      if (u > 0) m = _kor_mask16(m, _mm512_fpclass_ps_mask(a[u].v, 0xb9));
      m = _kor_mask16(m, _mm512_fpclass_ps_mask(b[u].v, 0xb9));
    }
    return _kortestz_mask16_u8(m, m) == 0;
  }
  static void Store(uint16_t* p, Vf v) { StoreWords(p, CvtNeps2Bf16(v.v)); }
  static void StorePairs(uint16_t* p, Vf a, Vf b) {
    StoreDwords(p, Or(Widen(CvtNeps2Bf16(a.v)), Shl16(Widen(CvtNeps2Bf16(b.v)))));
  }
};
#endif

// NEOX rows of a format with kSplitNeox (Bf16Split) in passes of an even number of vectors: each
// half's 2 kLanes consecutive elements are loaded and stored as the format's GPT-J pairs are
// (Fmt::LoadPairs: one load, the even elements into vector u and the odd ones into u + 1, by a
// shift and a mask; Fmt::StorePairs: the two merged by one blend), and each vector rotates against
// the same elements of the other half with the tables' even or odd entries. Widening loads and
// shifts per vector, and a pack and a lane permute per two, had held NEOX BFLOAT16's arithmetic on
// AVX2 to 0.68-0.70 of the in-place limit in the caches where GPT-J's made 0.88
// (BM_ApplyRopeInCache, BSHD: 11.9 -> 14.1 GB/s, BHSD 10.3 -> 12.1). The same roundings of the
// same values: the same bits. Taken for whole rotations only: with partial rotary (rows that also
// hold channels passing through, memory-bound) the same loop measured 0.90-0.92x (BENCHMARKS.md).
template <class Fmt, bool kGptjIn, bool kGptjOut, int kVecs>
constexpr bool SplitNeox() {
  if constexpr (requires { Fmt::kSplitNeox; }) {
    return Fmt::kSplitNeox && !kGptjIn && !kGptjOut && kVecs % 2 == 0;
  }
  return false;
}

// kLanes pairs at pair j: GPT-J elements 2j.., or NEOX elements j.. and half + j...
template <class Fmt, bool kGptj>
inline void LoadPairsAt(const typename Fmt::Elem* in, int64_t half, int64_t j, Vf* xa, Vf* xb) {
  if constexpr (kGptj) {
    Fmt::LoadPairs(in + 2 * j, xa, xb);
  } else {
    *xa = Fmt::Load(in + j);
    *xb = Fmt::Load(in + half + j);
  }
}
template <class Fmt, bool kGptj>
inline void StorePairsAt(typename Fmt::Elem* out, int64_t half, int64_t j, Vf xa, Vf xb) {
  if constexpr (kGptj) {
    Fmt::StorePairs(out + 2 * j, xa, xb);
  } else {
    Fmt::Store(out + j, xa);
    Fmt::Store(out + half + j, xb);
  }
}
// kVecs*kLanes pairs at pair j into xa[u] and xb[u]: kSplit (SplitNeox) loads each NEOX half's
// 2 kLanes elements as the format's GPT-J pairs, even elements into vector u, odd into u + 1.
template <class Fmt, bool kGptj, int kVecs, bool kSplit>
inline void LoadRowPairs(const typename Fmt::Elem* in, int64_t half, int64_t j, Vf* xa, Vf* xb) {
  if constexpr (kSplit) {
    for (int u = 0; u < kVecs; u += 2) {
      Fmt::LoadPairs(in + j + u * kLanes, &xa[u], &xa[u + 1]);
      Fmt::LoadPairs(in + half + j + u * kLanes, &xb[u], &xb[u + 1]);
    }
  } else {
    for (int u = 0; u < kVecs; ++u)
      LoadPairsAt<Fmt, kGptj>(in, half, j + u * kLanes, &xa[u], &xb[u]);
  }
}
// kVecs*kLanes pairs at pair j, vector u's from xa[u] and xb[u]: NEOX places two vectors at a time
// where the format stores two together (Fmt::StoreTwo), or, kSplit, as LoadRowPairs split them.
template <class Fmt, bool kGptj, int kVecs, bool kSplit>
inline void StoreRowPairs(typename Fmt::Elem* out, int64_t half, int64_t j, const Vf* xa,
                          const Vf* xb) {
  if constexpr (kSplit) {
    for (int u = 0; u < kVecs; u += 2) {
      Fmt::StorePairs(out + j + u * kLanes, xa[u], xa[u + 1]);
      Fmt::StorePairs(out + half + j + u * kLanes, xb[u], xb[u + 1]);
    }
    return;
  }
  int u = 0;
  if constexpr (!kGptj && requires { &Fmt::StoreTwo; }) {
    for (; u + 1 < kVecs; u += 2) {
      Fmt::StoreTwo(out + j + u * kLanes, xa[u], xa[u + 1]);
      Fmt::StoreTwo(out + half + j + u * kLanes, xb[u], xb[u + 1]);
    }
  }
  for (; u < kVecs; ++u) StorePairsAt<Fmt, kGptj>(out, half, j + u * kLanes, xa[u], xb[u]);
}

// ---- the rotations in lanes ---------------------------------------------------------------------

// FLOAT32: x_a c - x_b s and x_b c + x_a s, each product rounded, as RotateRow (the same bits).
struct F32Rotation {
  struct Tables {
    const float* c;
    const float* s;
  };
  struct Lanes {
    Vf c, s;
    Lanes() = default;
    Lanes(const Tables& tab, int64_t i) : c(LoadF(tab.c + i)), s(LoadF(tab.s + i)) {}
  };
  static void Rotate(Vf* xa, Vf* xb, const Lanes& l) {
    const Vf a = *xa, b = *xb;
    *xa = Sub(a * l.c, b * l.s);
    *xb = Add(b * l.c, a * l.s);
  }
  template <class Fmt, int kVecs>
  static bool AnyNotFinite(const Vf* /*xa*/, const Vf* /*xb*/) {
    return false;  // inf and NaN take the arithmetic as they come, as in RotateRow
  }
  template <class Fmt>
  static void Pairs(const float* in, float* out, const Tables& tab, int64_t t, int64_t half,
                    bool gptj_in, bool gptj_out, int64_t j0, int64_t j1) {
    RotatePairs<float>(in, out, tab.c + t, tab.s + t, half, gptj_in, gptj_out, j0, j1);
  }
};

// FLOAT16/BFLOAT16 in float (rope_math.h). Results are checked before they are stored: any inf
// or NaN (and, for a conversion that flushes float subnormals, any subnormal) sends the pairs
// through RotateHalfPairs, which gives the same bits for the others.
struct HalfRotation {
  using Tables = HalfRopeFactors;
  struct Lanes {
    Vf c, t_hi, t_lo;
    Lanes() = default;
    Lanes(const Tables& tab, int64_t i)
        : c(LoadF(tab.cf + i)), t_hi(LoadF(tab.t_hi + i)), t_lo(LoadF(tab.t_lo + i)) {}
  };
  static void Rotate(Vf* xa, Vf* xb, const Lanes& l) {
    hd::RotatePairInFloat(xa, xb, l.c, l.t_hi, l.t_lo);
  }
  template <class Fmt, int kVecs>
  static bool AnyNotFinite(const Vf* xa, const Vf* xb) {
    if constexpr (Fmt::kFlushesDenormals) {
      return Fmt::template AnyNotFiniteOrDenormal<kVecs>(xa, xb);
    } else {
      // One check of the sum: an overflowing sum only sends the pairs the slow way.
      Vf sum = Add(xa[0], xb[0]);
      for (int u = 1; u < kVecs; ++u) sum = Add(sum, Add(xa[u], xb[u]));
      return POSENC_SIMD_NS::AnyNotFinite(sum);
    }
  }
  template <class Fmt>
  static void Pairs(const uint16_t* in, uint16_t* out, const Tables& tab, int64_t t, int64_t half,
                    bool gptj_in, bool gptj_out, int64_t j0, int64_t j1) {
    RotateHalfPairs<Fmt::kBf16>(in, out, tab, t, half, gptj_in, gptj_out, j0, j1);
  }
};

// GPT-J rows (pairs interleaved in and out) without de-interleaving them: the format's vectors of
// consecutive elements as they are (x_a below holds pairs [j, j + kLanes/2) interleaved, x_b the
// next kLanes/2), each lane rotated against its pair's other lane (SwapPairs) with the factors
// doubled per pair and t negated on the x_a lanes: c (x_a - x_b t) and c (x_b + x_a t) by the same
// roundings as HalfRotation, so the same bits, without the permutes and word packing that
// de-interleaving costs (FLOAT16 GPT-J on one thread: those had made it the slowest style).
template <class Fmt>
struct Interleaved : Fmt {
  static void LoadPairs(const typename Fmt::Elem* p, Vf* a, Vf* b) {
    *a = Fmt::Load(p);
    *b = Fmt::Load(p + kLanes);
  }
  static void StorePairs(typename Fmt::Elem* p, Vf a, Vf b) {
    Fmt::Store(p, a);
    Fmt::Store(p + kLanes, b);
  }
};
struct InterleavedHalfRotation : HalfRotation {
  struct Lanes {
    Vf c[2], t_hi[2], t_lo[2];  // [0] for x_a's pairs, [1] for x_b's
    Lanes() = default;
    Lanes(const Tables& tab, int64_t i) {
      const Vf cf = LoadF(tab.cf + i), th = LoadF(tab.t_hi + i), tl = LoadF(tab.t_lo + i);
      for (int h = 0; h < 2; ++h) {
        c[h] = DupPairs(cf, h == 1);
        t_hi[h] = NegateEven(DupPairs(th, h == 1));
        t_lo[h] = NegateEven(DupPairs(tl, h == 1));
      }
    }
  };
  static void Rotate(Vf* xa, Vf* xb, const Lanes& l) {
    Vf* x[2] = {xa, xb};
    for (int h = 0; h < 2; ++h) {
      const Vf other = SwapPairs(*x[h]);
      *x[h] = l.c[h] * Fma(other, l.t_lo[h], Fma(other, l.t_hi[h], *x[h]));
    }
  }
};

// Up to this many vectors of pairs per row in one pass (rotary dims to 128 on AVX-512 in one).
constexpr int kMaxVecs = 4;

// With RopeRows::prefetch each row's first pass asks for the lines this far ahead of it (the rows
// that follow in memory: the next heads and tokens in BSHD/THD). The rotation in place is then one
// stream read and written back, and FLOAT16/BFLOAT16 spend enough work per byte that the
// out-of-order window alone keeps too few of its misses in flight (BSHD fp16 on one thread: 0.66
// of the in-place limit where BHSD's four heads at once, four streams, made 0.93). Measured
// (BENCHMARKS.md "ApplyRope: the rows 4 KiB ahead"): 2-8 KiB all help, 4 KiB best over the dtypes
// and thread counts.
constexpr int64_t kPrefetchBytes = 4096;

// Asks for the `bytes` from p + kPrefetchBytes on (a read prefetch: the lines come exclusive
// when no other core holds them, so the store that follows needs no second trip). Past the end
// of the tensor the hint names memory nobody uses: a prefetch never faults (x86 PREFETCHh, Arm
// PRFM).
inline void PrefetchAhead(const void* p, int64_t bytes) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
  for (int64_t b = 0; b < bytes; b += 64) {
    // An integer, not pointer arithmetic: the address may lie past the tensor (only a hint).
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + static_cast<uintptr_t>(b)), 0, 3);
  }
}

// The tables of vectors u and u + 1 of a split NEOX pass: entries [i, i + 2 kLanes) de-interleaved
// (even entries for u, odd for u + 1), as F32's GPT-J pairs are. (A template: the AVX-512 level
// compiles no split pass.)
template <class Rot>
void SplitLanes(const typename Rot::Tables& tab, int64_t i, typename Rot::Lanes* even,
                typename Rot::Lanes* odd) {
  F32::LoadPairs(tab.cf + i, &even->c, &odd->c);
  F32::LoadPairs(tab.t_hi + i, &even->t_hi, &odd->t_hi);
  F32::LoadPairs(tab.t_lo + i, &even->t_lo, &odd->t_lo);
}

// Pairs [j, j + kVecs*kLanes) of every row, row (r, g) read from in + r*in_stride +
// g*group_stride and written to out + r*out_stride + g*group_stride with the tables from entry
// r*table_stride: all of a row's pairs are loaded before any is stored (so `in` may be `out` for
// DEEPSEEK too when one pass covers the row). The tables stay in registers for the rows that share
// them: every row where kShared (the heads of one token), else the rows of one group (a few heads
// of one token in BHSD: loading the tables for each row had made that layout load three factor
// vectors per vector of pairs, 0.3 of the in-place limit on FLOAT16).
template <class Fmt, class Rot, bool kGptjIn, bool kGptjOut, bool kShared, int kVecs>
void RotatePass(const typename Fmt::Elem* in, int64_t in_stride, typename Fmt::Elem* out,
                int64_t out_stride, const RopeRows& a, const typename Rot::Tables& tab, int64_t j) {
  using Lanes = typename Rot::Lanes;
  using E = typename Fmt::Elem;
  constexpr bool kSplit = SplitNeox<Fmt, kGptjIn, kGptjOut, kVecs>();
  // Locals: the vector stores may alias anything, so fields of `a` would be reloaded each row.
  const int64_t half = a.half, rows = a.rows, ts = a.table_stride;
  const int64_t row_bytes = 2 * half * static_cast<int64_t>(sizeof(E));
  // Asked for ahead: the row's whole stride, the channels that pass through (partial rotary)
  // included, so that the lines asked for are one stream without holes, as the processor's own
  // prefetchers fetch it anyway. Only the rotary channels' lines had made partial rotary slower
  // than a whole rotation of twice the bytes (BSHD rot 64 of 128 on one thread, AVX2 host:
  // FLOAT32 12-13.5 -> 16.3-16.8 GB/s, BFLOAT16 6.4-8.6 -> 15.4-15.9; BENCHMARKS.md).
  const int64_t ahead_bytes =
      std::min(std::max(row_bytes, in_stride * static_cast<int64_t>(sizeof(E))), kPrefetchBytes);
  // One row (its tables in `l`, entry t on).
  auto rotate_row = [&](const E* in_r, E* out_r, int64_t t, const Lanes* l) {
    if (a.prefetch && j == 0) PrefetchAhead(in_r, ahead_bytes);
    Vf xa[kVecs], xb[kVecs];
    LoadRowPairs<Fmt, kGptjIn, kVecs, kSplit>(in_r, half, j, xa, xb);
    for (int u = 0; u < kVecs; ++u) Rot::Rotate(&xa[u], &xb[u], l[u]);
    if (__builtin_expect(Rot::template AnyNotFinite<Fmt, kVecs>(xa, xb), 0)) {
      if constexpr (kGptjIn != kGptjOut) {
        if (in_r == out_r) {  // DEEPSEEK in one pass: the pairs one by one from a copy of the row
          E row[int64_t{2} * kVecs * kLanes];
          std::memcpy(row, in_r, static_cast<size_t>(2 * half) * sizeof(E));
          Rot::template Pairs<Fmt>(row, out_r, tab, t, half, kGptjIn, kGptjOut, 0, half);
          return;
        }
      }
      Rot::template Pairs<Fmt>(in_r, out_r, tab, t, half, kGptjIn, kGptjOut, j, j + kVecs * kLanes);
      return;
    }
    StoreRowPairs<Fmt, kGptjOut, kVecs, kSplit>(out_r, half, j, xa, xb);
  };
  Lanes l[kVecs];
  // The tables of the pass's vectors from entry t + j on.
  auto load_lanes = [&](int64_t t) {
    if constexpr (kSplit) {
      for (int u = 0; u < kVecs; u += 2) SplitLanes<Rot>(tab, t + j + u * kLanes, &l[u], &l[u + 1]);
    } else {
      for (int u = 0; u < kVecs; ++u) l[u] = Lanes(tab, t + j + u * kLanes);
    }
  };
  if constexpr (kShared) {
    load_lanes(0);
    for (int64_t r = 0; r < rows; ++r) rotate_row(in + r * in_stride, out + r * out_stride, 0, l);
  } else {
    const int64_t group = a.group, gs = a.group_stride;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = r * ts;
      load_lanes(t);
      for (int64_t g = 0; g < group; ++g) {
        rotate_row(in + r * in_stride + g * gs, out + r * out_stride + g * gs, t, l);
      }
    }
  }
}

// The rows of one call. Each row is walked whole in one pass where it fits kPass vectors (rows
// outermost, all of a row's lines at once, the shared tables in registers: measured 0.95-1.0 of
// the in-place limit on FLOAT32 and fp16/bf16 rows of 128, against 0.5-0.8 with the frequencies
// outermost or the tables reloaded per row), else in passes of kPass vectors, then smaller ones,
// then the scalar tail.
template <class Fmt, class Rot, bool kGptjIn, bool kGptjOut, bool kShared, int kPass>
void RotateRowsInLanes(const typename Fmt::Elem* in, int64_t in_stride, typename Fmt::Elem* out,
                       int64_t out_stride, const RopeRows& a, const typename Rot::Tables& tab) {
  int64_t j = 0;
  for (; j + kPass * kLanes <= a.half; j += kPass * kLanes) {
    RotatePass<Fmt, Rot, kGptjIn, kGptjOut, kShared, kPass>(in, in_stride, out, out_stride, a, tab,
                                                            j);
  }
  if (j + 2 * kLanes <= a.half) {
    RotatePass<Fmt, Rot, kGptjIn, kGptjOut, kShared, 2>(in, in_stride, out, out_stride, a, tab, j);
    j += 2 * kLanes;
  }
  if (j + kLanes <= a.half) {
    RotatePass<Fmt, Rot, kGptjIn, kGptjOut, kShared, 1>(in, in_stride, out, out_stride, a, tab, j);
    j += kLanes;
  }
  if (j == a.half) return;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t g = 0; g < a.group; ++g) {
      Rot::template Pairs<Fmt>(in + r * in_stride + g * a.group_stride,
                               out + r * out_stride + g * a.group_stride, tab, r * a.table_stride,
                               a.half, kGptjIn, kGptjOut, j, a.half);
    }
  }
}

template <class Fmt, class Rot, bool kGptjIn, bool kGptjOut, int kPass = kMaxVecs>
void RotateRowsInLanes(const typename Fmt::Elem* in, int64_t in_stride, typename Fmt::Elem* out,
                       int64_t out_stride, const RopeRows& a, const typename Rot::Tables& tab) {
  if (a.table_stride == 0) {
    RotateRowsInLanes<Fmt, Rot, kGptjIn, kGptjOut, true, kPass>(in, in_stride, out, out_stride, a,
                                                                tab);
  } else {
    RotateRowsInLanes<Fmt, Rot, kGptjIn, kGptjOut, false, kPass>(in, in_stride, out, out_stride, a,
                                                                 tab);
  }
}

// The widest pass: on AVX2 (8 pairs a vector) 8 vectors, so that a row of 64 pairs (head_dim 128)
// is loaded whole before any store. DEEPSEEK then rotates in place rather than from a copy (the
// copy had made DEEPSEEK FLOAT16 0.38 of the in-place limit on one thread, NEOX 0.83), and a
// FLOAT32 row's 8 lines are read from memory in one pass rather than two of 4 (NEOX and GPT-J
// [1,4096,32,128] and [8,2048,32,128]: 1.23-1.32x on one thread, 1.16-1.24x on two). The
// registers do not hold 8 vectors of pairs and their tables: the compiler keeps some in L1, which
// costs where the rows are in the caches already (the decode step [64,1,32,128] FLOAT32: 0.90x),
// so FLOAT32 takes it only for tensors that are not (RopeRows::prefetch); FLOAT16/BFLOAT16 rows
// of 4 lines measured 0.75-1.08x and keep passes of kMaxVecs. On AVX-512 kMaxVecs already covers
// 64 pairs.
#if defined(__AVX512F__)
constexpr int kWholeRowVecs = kMaxVecs;
#else
constexpr int kWholeRowVecs = 2 * kMaxVecs;
#endif

// Rows in place, in passes of kWholeRowVecs vectors where `wide`, else of kMaxVecs.
template <class Fmt, class Rot, bool kGptjIn, bool kGptjOut>
void RotateInPlace(typename Fmt::Elem* x, int64_t stride, const RopeRows& a,
                   const typename Rot::Tables& tab, bool wide) {
  if (wide) {
    RotateRowsInLanes<Fmt, Rot, kGptjIn, kGptjOut, kWholeRowVecs>(x, stride, x, stride, a, tab);
  } else {
    RotateRowsInLanes<Fmt, Rot, kGptjIn, kGptjOut>(x, stride, x, stride, a, tab);
  }
}

// One call's rows in lanes, in place. DEEPSEEK (the orders differ) reads from a copy of every
// row's rotary channels in the scratch, unless one pass covers each row (then a row is read
// whole before it is written).
template <class Fmt, class Rot>
void RotateInLanes(const RopeRows& a, const typename Rot::Tables& tab) {
  using E = typename Fmt::Elem;
  auto* x = static_cast<E*>(a.x);
  const int64_t stride = a.row_stride;
  const bool whole_row = a.half == kWholeRowVecs * kLanes;
  const bool wide =
      whole_row && (a.gptj_in != a.gptj_out || (std::is_same_v<Rot, F32Rotation> && a.prefetch));
  const bool one_pass =
      whole_row || a.half == kMaxVecs * kLanes || a.half == 2 * kLanes || a.half == kLanes;
  if (a.gptj_in == a.gptj_out || one_pass) {
    if (a.gptj_in && a.gptj_out) {
      if constexpr (std::is_same_v<Fmt, F16> && std::is_same_v<Rot, HalfRotation>) {
        RotateRowsInLanes<Interleaved<Fmt>, InterleavedHalfRotation, true, true>(x, stride, x,
                                                                                 stride, a, tab);
      } else {
        RotateInPlace<Fmt, Rot, true, true>(x, stride, a, tab, wide);
      }
    } else if (a.gptj_in) {
      RotateInPlace<Fmt, Rot, true, false>(x, stride, a, tab, wide);
    } else if (a.gptj_out) {
      RotateInPlace<Fmt, Rot, false, true>(x, stride, a, tab, wide);
    } else {
      RotateInPlace<Fmt, Rot, false, false>(x, stride, a, tab, wide);
    }
    return;
  }
  if (a.group > 1) {  // the copies below hold one row per table entry: the group's rows in turn
    RopeRows b = a;
    b.group = 1;
    for (int64_t g = 0; g < a.group; ++g) {
      b.x = x + g * a.group_stride;
      RotateInLanes<Fmt, Rot>(b, tab);
    }
    return;
  }
  auto* scratch = static_cast<E*>(a.scratch);
  const int64_t width = 2 * a.half;
  for (int64_t r = 0; r < a.rows; ++r) {
    std::memcpy(scratch + r * width, x + r * stride, static_cast<size_t>(width) * sizeof(E));
  }
  if (a.gptj_in) {
    RotateRowsInLanes<Fmt, Rot, true, false>(scratch, width, x, stride, a, tab);
  } else {
    RotateRowsInLanes<Fmt, Rot, false, true>(scratch, width, x, stride, a, tab);
  }
}

#endif  // __AVX512F__ || __AVX2__

}  // namespace

void ApplyRopeRotateF32(const RopeRows& rows, const float* c, const float* s) {
#if defined(__AVX512F__) || defined(__AVX2__)
  RotateInLanes<F32, F32Rotation>(rows, {c, s});
#else
  RotateRowsPortable<float>(rows, c, s);
#endif
}

void ApplyRopeRotateF64(const RopeRows& rows, const double* c, const double* s) {
  RotateRowsPortable<double>(rows, c, s);
}

void ApplyRopeRotateF16(const RopeRows& rows, const HalfRopeFactors& f) {
#if defined(__AVX512F__) || defined(__AVX2__)
  RotateInLanes<F16, HalfRotation>(rows, f);
#else
  RotateHalfRowsInDouble<F16ToF32, F32ToF16>(rows, f);
#endif
}

void ApplyRopeRotateBf16(const RopeRows& rows, const HalfRopeFactors& f) {
#if defined(__AVX512F__)
  static const bool native = HasAvx512Bf16();
  if (native) {
    RotateInLanes<Bf16Native, HalfRotation>(rows, f);
    return;
  }
#endif
  ApplyRopeRotateBf16Portable(rows, f);
}

void ApplyRopeRotateBf16Portable(const RopeRows& rows, const HalfRopeFactors& f) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  if (!rows.gptj_in && !rows.gptj_out && 2 * rows.half == rows.row_stride) {
    RotateInLanes<Bf16Split, HalfRotation>(rows, f);
    return;
  }
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
  RotateInLanes<Bf16, HalfRotation>(rows, f);
#else
  RotateHalfRowsInDouble<Bf16ToF32, F32ToBf16>(rows, f);
#endif
}

void HalfRotationFactors(const double* c, const double* s, int64_t n, float* cf, float* t_hi,
                         float* t_lo) {
  for (int64_t j = 0; j < n; ++j) hd::FloatRotationFactors(c[j], s[j], &cf[j], &t_hi[j], &t_lo[j]);
}

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
