// The per-element math of the CUDA RoPE/sinusoid kernels (kernels/rope/cuda.cu,
// kernels/absolute/cuda.cu) as host-device functions (kernels/common/host_device.h), tested on the
// CPU against the reference backend in every build (tests/kernels/cuda_math_test.cc).
//
// Exact phase, as the CPU backend's (cpu/sincos_simd.cc): omega_j is a double-double
// (hi + lo, cpu.h's SplitFrequencies), the phase p*omega_j = hi + lo is formed with one FMA, and
// the mod-pi/2 reduction is a three-part Cody-Waite in double (k*A and k*B exact for k < 2^33,
// i.e. phases below kMaxExactPhase), then fdlibm's minimax polynomials. Within 2 ulp of double
// for the full polynomial; the short one (FLOAT32 outputs) is off by < 2e-9, invisible in a float.
// Callers check p_max * omega_max < kMaxExactPhase first (larger phases go elsewhere).
#ifndef POSENC_KERNELS_ROPE_ROPE_MATH_H_
#define POSENC_KERNELS_ROPE_ROPE_MATH_H_

#include <cstdint>

#include "kernels/common/half_codec.h"
#include "kernels/common/host_device.h"

namespace posenc::kernels::hd {

// Phases below this reduce exactly (k < 2^33); the same bound as cpu/simd_kernels.h.
constexpr double kMaxExactPhase = 8589934592.0;  // 2^33

// cos and sin of p * (w_hi + w_lo). kFull: the whole fdlibm polynomial (FLOAT64, FLOAT16/BFLOAT16
// math); otherwise terms through r^9 / r^10 (FLOAT32).
template <bool kFull>
POSENC_HOST_DEVICE void SinCosExactPhase(double p, double w_hi, double w_lo, double* c_out,
                                         double* s_out) {
  constexpr double kTwoOverPi = 0.63661977236758134308;
  constexpr double kPio2A = 1.5707950592041016;       // top 20 bits of pi/2
  constexpr double kPio2B = 1.2675900507019833e-06;   // the next 20 bits
  constexpr double kPio2C = 7.443547480486623e-13;    // pi/2 - A - B, rounded
  constexpr double kRoundMagic = 6755399441055744.0;  // 1.5 * 2^52
  constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                   kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                   kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
  constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                   kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                   kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;
  const double hi = p * w_hi;
  const double lo = Fma(p, w_hi, -hi) + p * w_lo;
  const double k = (hi * kTwoOverPi + kRoundMagic) - kRoundMagic;
  const double r = (((hi - k * kPio2A) - k * kPio2B) - k * kPio2C) + lo;
  const double q = k - 4.0 * ((k * 0.25 - 0.375 + kRoundMagic) - kRoundMagic);  // k mod 4
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
  *c_out = cv;
  *s_out = sv;
}

// cos/sin of RoPE frequency j at position p, times the cos/sin factors (scale m or 1/m, sign +1
// or -1 for the inverse), in the compute type T (float for FLOAT32, double otherwise) as the CPU
// backend rounds them (cpu.h's SinCos).
template <typename T>
POSENC_HOST_DEVICE void RopeCosSin(double p, double w_hi, double w_lo, double scale, double sign,
                                   T* c, T* s) {
  double cv, sv;
  SinCosExactPhase<sizeof(T) == 8>(p, w_hi, w_lo, &cv, &sv);
  *c = static_cast<T>(cv * scale);
  *s = static_cast<T>(sv * (sign * scale));
}

// One step of a table walker, the one implementation of it (the CUDA RopeCache kernel per
// frequency, the CPU backend's AngleWalker across a row of frequencies, cpu/sincos_simd.cc): the
// unscaled cos/sin at p + 1 from those at p by angle addition with cw, sw = cos/sin of the
// frequency (exact in double). D: double, or a vector of doubles with * and -. Each step adds
// about one double rounding to c and s (~1e-16), and the rounding of cw, sw once more; a few
// hundred steps from an exact anchor stay far inside a FLOAT32 or half ulp (cpu.h's AngleWalker).
template <typename D>
POSENC_HOST_DEVICE void RopeAngleStep(D cw, D sw, D* c, D* s) {
  const D cn = *c * cw - *s * sw;
  const D sn = *s * cw + *c * sw;
  *c = cn;
  *s = sn;
}

// The cos/sin of one frequency along a table's tokens: the one implementation of the CUDA table
// kernels' walk (rope/cuda.cu's RopeCacheKernel, absolute/cuda.cu's SinusoidalKernel) and of their
// host emulation (tests/common/cuda_math_backend.cc). AngleWalkTo(&w, p) leaves the unscaled
// cos/sin at position p in w.c, w.s: the exact-phase value (SinCosExactPhase<kFull>) at the first
// position and wherever p does not follow the previous one, one RopeAngleStep where p is the
// previous position + 1 (the step's cos/sin computed once, exactly, by StartAngleWalk) and the
// same value again where p repeats it. kWalk false: the exact value at every position (FLOAT64
// tables). P: the position type (double, or int64_t: integer compares, a conversion to double only
// at the anchors). A plain struct and free functions: host-side POSENC_HOST_DEVICE is `static`.
template <typename P>
struct AngleWalk {
  double w_hi = 0, w_lo = 0;  // omega
  double cw = 1, sw = 0;      // cos/sin of omega (kWalk)
  P prev = 0;                 // the previous position (started)
  double c = 1, s = 0;        // cos/sin at prev
  bool started = false;
};

template <bool kWalk, typename P>
POSENC_HOST_DEVICE AngleWalk<P> StartAngleWalk(double w_hi, double w_lo) {
  AngleWalk<P> w;
  w.w_hi = w_hi;
  w.w_lo = w_lo;
  if constexpr (kWalk) SinCosExactPhase<true>(1.0, w_hi, w_lo, &w.cw, &w.sw);
  return w;
}

template <bool kFull, bool kWalk, typename P>
POSENC_HOST_DEVICE void AngleWalkTo(AngleWalk<P>* w, P p) {
  if (kWalk && w->started && p == w->prev + 1) {
    RopeAngleStep(w->cw, w->sw, &w->c, &w->s);
  } else if (!(kWalk && w->started && p == w->prev)) {
    SinCosExactPhase<kFull>(static_cast<double>(p), w->w_hi, w->w_lo, &w->c, &w->s);
  }
  w->prev = p;
  w->started = true;
}

// One rotation: x_a' = x_a c - x_b s, x_b' = x_b c + x_a s (c, s carry m and the sign).
template <typename T>
POSENC_HOST_DEVICE void RotatePair(T* xa, T* xb, T c, T s) {
  const T a = *xa, b = *xb;
  *xa = a * c - b * s;
  *xb = b * c + a * s;
}

// FLOAT16 / BFLOAT16 rotations in float (the CPU's AVX2/AVX-512 loops, lane by lane, and the
// CUDA kernel): with t = s / c,
//   x_a' = c (x_a - x_b t),   x_b' = c (x_b + x_a t),
// c rounded to float, t kept as a float pair t_hi + t_lo (48 bits). The inner sums are FMAs:
// where x_a - x_b t cancels, its error stays relative to the (small) sum, and the product with c
// only adds a relative error; the result is within about 2^-22 |x'| + 2^-47 |x_b s| of the exact
// rotation, as close as the double rotation (RotatePair<double>) and far inside one fp16/bf16
// ulp, at three operations per output. x_a, x_b are fp16/bf16 values (exact in float).
//
// The factors of one pair from its cos/sin (c and s carry m and the sign). Where |t| > 2^20 (c
// near 0) or c is not a normal float they set c to NaN, so the rotation gives NaN and the pair
// takes the double path (RotateHalfPair).
POSENC_HOST_DEVICE void FloatRotationFactors(double c, double s, float* cf, float* t_hi,
                                             float* t_lo) {
  const double t = s / c;
  *t_hi = static_cast<float>(t);
  *t_lo = static_cast<float>(t - static_cast<double>(*t_hi));
  // Unless |t| <= 2^20 and |c| >= 2^-100 (false for NaN), c's bits OR 0x7fc00000: a NaN. Integer
  // arithmetic on the bits, no branch or float compare: the CPU's loop over j vectorizes.
  constexpr uint64_t kAbs = ~(uint64_t{1} << 63);
  const uint32_t bad =
      static_cast<uint32_t>((BitCast<uint64_t>(t) & kAbs) > 0x4130000000000000ull) |
      static_cast<uint32_t>((BitCast<uint64_t>(c) & kAbs) < 0x39b0000000000000ull);
  *cf = BitCast<float>(BitCast<uint32_t>(static_cast<float>(c)) | (bad * 0x7fc00000u));
}

// The rotation of one pair in float lanes (F: float, or a vector of floats with operator*, Fma and
// Fnma).
template <typename F>
POSENC_HOST_DEVICE void RotatePairInFloat(F* xa, F* xb, F c, F t_hi, F t_lo) {
  const F a = *xa, b = *xb;
  *xa = c * Fnma(b, t_lo, Fnma(b, t_hi, a));
  *xb = c * Fma(a, t_lo, Fma(a, t_hi, b));
}

POSENC_HOST_DEVICE bool IsFiniteFloat(float v) {
  return (BitCast<uint32_t>(v) & 0x7f800000u) != 0x7f800000u;
}

// One FLOAT16 (kBf16 false) or BFLOAT16 pair: the float rotation, rounded once from float; where
// that is not finite (inf/NaN inputs, overflow, the factors' NaN) the double rotation with the
// exact cos/sin, rounded once from double. exact(&cd, &sd) gives those, called only there (the
// CUDA kernel keeps them in shared memory and reads them only then). Every CPU and CUDA path of
// these dtypes gives exactly these bits.
template <bool kBf16, typename Exact>
POSENC_HOST_DEVICE void RotateHalfPairWith(uint16_t* a, uint16_t* b, float c, float t_hi,
                                           float t_lo, const Exact& exact) {
  const float xa = SmallFloatToFloat<kBf16>(*a), xb = SmallFloatToFloat<kBf16>(*b);
  float ra = xa, rb = xb;
  RotatePairInFloat<float>(&ra, &rb, c, t_hi, t_lo);
  if (IsFiniteFloat(ra) && IsFiniteFloat(rb)) {
    *a = FloatToSmallFloat<kBf16>(ra);
    *b = FloatToSmallFloat<kBf16>(rb);
    return;
  }
  double cd, sd;
  exact(&cd, &sd);
  double da = xa, db = xb;
  RotatePair<double>(&da, &db, cd, sd);
  *a = DoubleToSmallFloat<kBf16>(da);
  *b = DoubleToSmallFloat<kBf16>(db);
}

// The same with the exact cos/sin (cd, sd) at hand.
template <bool kBf16>
POSENC_HOST_DEVICE void RotateHalfPair(uint16_t* a, uint16_t* b, float c, float t_hi, float t_lo,
                                       double cd, double sd) {
  RotateHalfPairWith<kBf16>(a, b, c, t_hi, t_lo, [cd, sd](double* c_out, double* s_out) {
    *c_out = cd;
    *s_out = sd;
  });
}

// Pair j of a head row of rotary width 2*half: the channels of its two elements.
//   NEOX (style 0):  (j, j + half)      GPTJ (style 1):  (2j, 2j + 1)
// DEEPSEEK (style 2) reads GPT-J pairs and writes NEOX positions (forward) or the reverse
// (inverse): PairChannels gives the input channels, and OutputChannels the output ones.
POSENC_HOST_DEVICE void PairChannels(int style, bool inverse, int64_t half, int64_t j, int64_t* a,
                                     int64_t* b) {
  const bool gptj_in = style == 1 || (style == 2 && !inverse);
  *a = gptj_in ? 2 * j : j;
  *b = gptj_in ? 2 * j + 1 : j + half;
}
POSENC_HOST_DEVICE void OutputChannels(int style, bool inverse, int64_t half, int64_t j, int64_t* a,
                                       int64_t* b) {
  const bool gptj_out = style == 1 || (style == 2 && inverse);
  *a = gptj_out ? 2 * j : j;
  *b = gptj_out ? 2 * j + 1 : j + half;
}

// RopeCache's columns of frequency j: layout 0 COMPACT (j), 1 NEOX (j and j + half), 2 GPTJ
// (2j and 2j + 1). Returns how many (1 or 2).
POSENC_HOST_DEVICE int CacheColumns(int layout, int64_t half, int64_t j, int64_t* c0, int64_t* c1) {
  if (layout == 0) {
    *c0 = *c1 = j;
    return 1;
  }
  *c0 = layout == 1 ? j : 2 * j;
  *c1 = layout == 1 ? j + half : 2 * j + 1;
  return 2;
}

// What column `col` of a sinusoidal row (absolute/sinusoidal.h) holds: returns 0 for
// sin(p*omega_k), 1 for cos(p*omega_k), -1 for a zero column. INTERLEAVED (layout 0): sin at 2k,
// cos at 2k+1; CONCAT (1): sin at k, cos at half + k (half = floor(D/2)). Odd D: INTERLEAVED with
// nfreq > half frequencies (VASWANI) ends with sin(p*omega_half), otherwise the last column is 0.
POSENC_HOST_DEVICE int SinusoidSource(int layout, int64_t dim, int64_t nfreq, int64_t col,
                                      int64_t* k) {
  const int64_t half = dim / 2;
  if (col >= 2 * half) {  // the last column of an odd D
    *k = half;
    return layout == 0 && nfreq > half ? 0 : -1;
  }
  if (layout == 0) {
    *k = col / 2;
    return static_cast<int>(col % 2);
  }
  *k = col < half ? col : col - half;
  return col < half ? 0 : 1;
}

// The columns of frequency slot j, 0 <= j < ceil(D/2), of a sinusoidal row (SinusoidSource's
// inverse; the CUDA table kernel's work item): for j < floor(D/2) sin(p*omega_j) at *sin_col and
// cos(p*omega_j) at *cos_col (INTERLEAVED: 2j, 2j+1; CONCAT: j, half + j); for the last slot of an
// odd D, the last column at *sin_col and *cos_col = -1. Returns false where the slot's column is
// zero (odd D, unless INTERLEAVED with nfreq > half frequencies: sin(p*omega_half) there).
POSENC_HOST_DEVICE bool SinusoidSlotColumns(int layout, int64_t dim, int64_t nfreq, int64_t j,
                                            int64_t* sin_col, int64_t* cos_col) {
  const int64_t half = dim / 2;
  if (j >= half) {
    *sin_col = dim - 1;
    *cos_col = -1;
    return layout == 0 && nfreq > half;
  }
  *sin_col = layout == 0 ? 2 * j : j;
  *cos_col = layout == 0 ? 2 * j + 1 : half + j;
  return true;
}

// Column `col` of a sinusoidal row at position p in the compute type T (float rounds the
// short-polynomial value once, as the CPU backend's FLOAT32 tables; double keeps the full one).
template <typename T>
POSENC_HOST_DEVICE T SinusoidValue(int layout, int64_t dim, int64_t nfreq, int64_t col, double p,
                                   const double* w_hi, const double* w_lo) {
  int64_t k;
  const int which = SinusoidSource(layout, dim, nfreq, col, &k);
  if (which < 0) return T(0);
  double c, s;
  SinCosExactPhase<sizeof(T) == 8>(p, w_hi[k], w_lo[k], &c, &s);
  return static_cast<T>(which == 0 ? s : c);
}

}  // namespace posenc::kernels::hd

#endif  // POSENC_KERNELS_ROPE_ROPE_MATH_H_
