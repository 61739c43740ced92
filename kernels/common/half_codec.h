// FLOAT16 / BFLOAT16 conversions as host-device functions (kernels/common/host_device.h) for the
// CUDA kernels and the CPU's float rotations: the same results, bit for bit, as
// kernels/common/types.h's DoubleToHalf, HalfToFloat, DoubleToBFloat16 and BFloat16ToFloat
// (round to nearest even, correctly rounded from double; NaN stays NaN, overflow gives inf), and
// from float the same as from the float's (exact) double. tests/kernels/cuda_math_test.cc checks
// them against types.h on every fp16 pattern and on random and boundary values.
//
// Integer arithmetic on the value's bits: no frexp/ldexp/rint, so host and device agree exactly.
// On the device the finite values convert with the hardware's round-to-nearest-even conversions
// (cvt.rn: one instruction instead of dozens of emulated 64-bit integer operations), which give
// the same bits; NaN keeps the canonical patterns below (the hardware would keep payloads).
#ifndef POSENC_KERNELS_COMMON_HALF_CODEC_H_
#define POSENC_KERNELS_COMMON_HALF_CODEC_H_

#include <cstdint>

#include "kernels/common/host_device.h"

namespace posenc::kernels::hd {

// Rounds |v| (as the bits of a double, sign cleared) to units of 2^unit_exp, where unit_exp is
// max(E - mant_bits, min_unit) for v in [2^E, 2^(E+1)); returns the small format's bits without
// sign, given its exponent bias. Overflow returns inf_bits.
POSENC_HOST_DEVICE uint32_t RoundToSmallFloat(uint64_t bits, int mant_bits, int min_unit, int bias,
                                              uint32_t inf_bits) {
  const int e_field = static_cast<int>((bits >> 52) & 0x7ff);
  if (e_field == 0) return 0;  // zero or double subnormal: far below either format's unit
  const int e = e_field - 1023;
  if (e > bias) return inf_bits;
  const uint64_t sig = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int unit = e - mant_bits > min_unit ? e - mant_bits : min_unit;
  const int shift = unit - (e - 52);  // >= 52 - mant_bits
  uint64_t q;
  if (shift >= 64) {
    q = 0;  // below half a unit
  } else {
    q = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  uint32_t out;
  if (unit == min_unit && e - mant_bits <= min_unit) {
    out = static_cast<uint32_t>(q);  // subnormal (q == 2^mant_bits rolls into the min normal)
  } else {
    // normal: q in [2^mant_bits, 2^(mant_bits+1)]; the carry of q == 2^(mant_bits+1) moves into
    // the exponent by the addition.
    out = (static_cast<uint32_t>(e + bias) << mant_bits) +
          static_cast<uint32_t>(q - (uint64_t{1} << mant_bits));
  }
  return out >= inf_bits ? inf_bits : out;
}

// v correctly rounded to a 16-bit float format (sign, NaN and inf handled here; the magnitude by
// RoundToSmallFloat).
POSENC_HOST_DEVICE uint16_t DoubleToSmallFloatBits(double v, int mant_bits, int min_unit, int bias,
                                                   uint16_t inf_bits, uint16_t nan_bits) {
  const uint64_t bits = BitCast<uint64_t>(v);
  const uint16_t sign = (bits >> 63) ? 0x8000 : 0;
  const uint64_t mag = bits & ~(uint64_t{1} << 63);
  if (mag > 0x7ff0000000000000ull) return sign | nan_bits;
  if (mag == 0x7ff0000000000000ull) return sign | inf_bits;
  return static_cast<uint16_t>(sign | RoundToSmallFloat(mag, mant_bits, min_unit, bias, inf_bits));
}

POSENC_HOST_DEVICE uint16_t DoubleToHalfBits(double v) {
#if defined(__CUDA_ARCH__)
  if (v == v) {  // not NaN: cvt.rn.f16.f64 (sm_53 and later) rounds once, overflow gives inf
    uint16_t h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(v));
    return h;
  }
#endif
  return DoubleToSmallFloatBits(v, /*mant_bits=*/10, /*min_unit=*/-24, /*bias=*/15, 0x7c00, 0x7e00);
}

POSENC_HOST_DEVICE uint16_t DoubleToBFloat16Bits(double v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (v == v) {  // cvt.rn.bf16.f64: sm_90 and later
    uint16_t h;
    asm("cvt.rn.bf16.f64 %0, %1;" : "=h"(h) : "d"(v));
    return h;
  }
#endif
  return DoubleToSmallFloatBits(v, /*mant_bits=*/7, /*min_unit=*/-133, /*bias=*/127, 0x7f80,
                                0x7fc0);
}

POSENC_HOST_DEVICE float HalfBitsToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7fffu) <= 0x7c00u) {  // not NaN: cvt.f32.f16 is exact
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
#endif
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(man) * 5.9604644775390625e-08f;  // 2^-24, exact
    return BitCast<float>(BitCast<uint32_t>(mag) | sign);
  }
  if (exp == 31) return BitCast<float>(sign | (man ? 0x7fc00000u : 0x7f800000u));
  return BitCast<float>(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

POSENC_HOST_DEVICE float BFloat16BitsToFloat(uint16_t b) {
  return BitCast<float>(static_cast<uint32_t>(b) << 16);
}

// v correctly rounded to FLOAT16 (DoubleToHalfBits(v), in 32-bit integer arithmetic).
POSENC_HOST_DEVICE uint16_t FloatToHalfBits(float v) {
#if defined(__CUDA_ARCH__)
  if (v == v) {  // not NaN: cvt.rn.f16.f32
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
  }
#endif
  const uint32_t x = BitCast<uint32_t>(v);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // >= 65520: inf
  if (a >= 0x38800000u) {                      // >= 2^-14: a normal half
    const uint32_t m = a - 0x38000000u;        // the exponent rebiased from 127 to 15
    return static_cast<uint16_t>(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: zero (2^-25 ties to even)
  // A subnormal half: units of 2^-24, q = sig * 2^(e - 150 + 24) rounded to nearest even.
  const int shift = 126 - static_cast<int>(a >> 23);  // 14 .. 24
  const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// v correctly rounded to BFLOAT16 (DoubleToBFloat16Bits(v), in 32-bit integer arithmetic).
POSENC_HOST_DEVICE uint16_t FloatToBFloat16Bits(float v) {
  const uint32_t x = BitCast<uint32_t>(v);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// The codec of FLOAT16 (kBf16 false) or BFLOAT16 (true) by a template flag, for code written once
// for both.
template <bool kBf16>
POSENC_HOST_DEVICE float SmallFloatToFloat(uint16_t bits) {
  return kBf16 ? BFloat16BitsToFloat(bits) : HalfBitsToFloat(bits);
}
template <bool kBf16>
POSENC_HOST_DEVICE uint16_t FloatToSmallFloat(float v) {
  return kBf16 ? FloatToBFloat16Bits(v) : FloatToHalfBits(v);
}
template <bool kBf16>
POSENC_HOST_DEVICE uint16_t DoubleToSmallFloat(double v) {
  return kBf16 ? DoubleToBFloat16Bits(v) : DoubleToHalfBits(v);
}

}  // namespace posenc::kernels::hd

#endif  // POSENC_KERNELS_COMMON_HALF_CODEC_H_
