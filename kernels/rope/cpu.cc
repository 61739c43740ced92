// The CPU implementation of RopeCache and ApplyRope (see cpu/cpu.h; the rotation loops are in
// rope/apply_rope_simd.cc).
#include "kernels/cpu/cpu.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace posenc::kernels::cpu {
namespace {

// The positions of token t for every frequency (M-RoPE), or its one position; padding tokens
// behave as position 0.
const double* TokenPositions(const RopeConfig& config, const ResolvedPositions& positions,
                             int64_t t, int64_t half, double* buf, int64_t* stride) {
  if (config.mrope_section.empty()) {
    buf[0] = positions.IsValid(t) ? static_cast<double>(positions.At(t)) : 0.0;
    *stride = 0;
    return buf;
  }
  for (int64_t j = 0; j < half; ++j) {
    buf[j] = positions.IsValid(t) ? static_cast<double>(positions.At(t, MropeComponent(config, j)))
                                  : 0.0;
  }
  *stride = 1;
  return buf;
}

// The multiplier and sign of cos/sin: m and +1 forward, 1/m and -1 inverse.
struct CosSinFactors {
  double scale, sign;
  CosSinFactors(const RopeConfig& config, const RopeFrequencies& freqs) {
    const double m = freqs.CosSinScale();
    scale = config.inverse ? 1.0 / m : m;
    sign = config.inverse ? -1.0 : 1.0;
  }
};

template <typename T>
absl::Status RopeCacheT(const CpuContext& cpu, const RopeCachePlan& plan,
                        const RopeFrequencies& freqs, const ResolvedPositions& positions,
                        const TensorView& cos, const TensorView& sin) {
  const int64_t half = freqs.rotary_dim / 2;
  const int64_t width = plan.width;
  const RopeCacheLayout layout = plan.layout;
  const SplitFrequencies w(freqs.inv_freq);
  const CosSinFactors f(plan.config, freqs);
  const bool direct =
      std::is_same_v<T, float> && cos.dtype == DType::kFloat32 && layout != RopeCacheLayout::kGptj;
  return cpu.pool.ParallelFor(positions.num_tokens, Grain(2 * width), [&](int64_t t0, int64_t t1) {
    std::vector<T> c(static_cast<size_t>(half)), s(c.size());
    std::vector<T> cw(static_cast<size_t>(width)), sw(cw.size());
    std::vector<double> pbuf(static_cast<size_t>(half) + 1);
    for (int64_t t = t0; t < t1; ++t) {
      int64_t stride;
      const double* p = TokenPositions(plan.config, positions, t, half, pbuf.data(), &stride);
      if (direct) {
        // FLOAT32 COMPACT/NEOX: straight into the output rows (NEOX repeats the first half).
        T* cd = static_cast<T*>(cos.data) + t * width;
        T* sd = static_cast<T*>(sin.data) + t * width;
        SinCos<T>(cpu.simd, p, stride, w, freqs.inv_freq, half, f.scale, f.sign, cd, sd);
        if (layout == RopeCacheLayout::kNeox) {
          std::memcpy(cd + half, cd, half * sizeof(T));
          std::memcpy(sd + half, sd, half * sizeof(T));
        }
        continue;
      }
      SinCos<T>(cpu.simd, p, stride, w, freqs.inv_freq, half, f.scale, f.sign, c.data(), s.data());
      const T* cr = c.data();
      const T* sr = s.data();
      if (layout == RopeCacheLayout::kNeox) {
        std::copy(c.begin(), c.end(), cw.begin());
        std::copy(c.begin(), c.end(), cw.begin() + half);
        std::copy(s.begin(), s.end(), sw.begin());
        std::copy(s.begin(), s.end(), sw.begin() + half);
        cr = cw.data();
        sr = sw.data();
      } else if (layout == RopeCacheLayout::kGptj) {
        for (int64_t j = 0; j < half; ++j) {
          cw[2 * j] = cw[2 * j + 1] = c[j];
          sw[2 * j] = sw[2 * j + 1] = s[j];
        }
        cr = cw.data();
        sr = sw.data();
      }
      StoreRow<T>(cpu.simd, cr, cos.data, cos.dtype, t * width, width);
      StoreRow<T>(cpu.simd, sr, sin.data, sin.dtype, t * width, width);
    }
  });
}

// Rotates the `heads` head rows of one token starting at element `base` of x.
template <typename T>
void RotateToken(const SimdKernels& simd, const TensorView& x, int64_t base, int64_t heads,
                 int64_t head_stride, const T* c, const T* s, int64_t half, bool gptj) {
  if constexpr (std::is_same_v<T, float>) {
    simd.apply_rope_f32(static_cast<float*>(x.data) + base, heads, head_stride, c, s, half, gptj);
  } else {
    switch (x.dtype) {
      case DType::kFloat64:
        simd.apply_rope_f64(static_cast<double*>(x.data) + base, heads, head_stride, c, s, half,
                            gptj);
        break;
      case DType::kFloat16:
        simd.apply_rope_f16(static_cast<uint16_t*>(x.data) + base, heads, head_stride, c, s, half,
                            gptj);
        break;
      case DType::kBFloat16:
        simd.apply_rope_bf16(static_cast<uint16_t*>(x.data) + base, heads, head_stride, c, s, half,
                             gptj);
        break;
      default: break;
    }
  }
}

// DEEPSEEK: the first 2*half channels of each of `heads` rows (element type E, the storage type)
// move between GPT-J pair order [x0 x1 x2 x3 ..] and NEOX order [x0 x2 .. | x1 x3 ..]: forward
// de-interleaves before the NEOX rotation, inverse re-interleaves after it. A permutation, so
// the rotation's arithmetic is the NEOX loop's, exactly.
template <typename E>
void PermuteRows(void* data, int64_t base, int64_t heads, int64_t head_stride, int64_t half,
                 bool deinterleave, std::vector<unsigned char>* scratch) {
  scratch->resize(static_cast<size_t>(2 * half) * sizeof(E));
  E* tmp = reinterpret_cast<E*>(scratch->data());
  for (int64_t h = 0; h < heads; ++h) {
    E* row = static_cast<E*>(data) + base + h * head_stride;
    std::memcpy(tmp, row, static_cast<size_t>(2 * half) * sizeof(E));
    for (int64_t j = 0; j < half; ++j) {
      if (deinterleave) {
        row[j] = tmp[2 * j];
        row[j + half] = tmp[2 * j + 1];
      } else {
        row[2 * j] = tmp[j];
        row[2 * j + 1] = tmp[j + half];
      }
    }
  }
}

void PermuteToken(const TensorView& x, int64_t base, int64_t heads, int64_t head_stride,
                  int64_t half, bool deinterleave, std::vector<unsigned char>* scratch) {
  switch (DTypeSize(x.dtype)) {
    case 2:
      PermuteRows<uint16_t>(x.data, base, heads, head_stride, half, deinterleave, scratch);
      break;
    case 4:
      PermuteRows<uint32_t>(x.data, base, heads, head_stride, half, deinterleave, scratch);
      break;
    default: PermuteRows<uint64_t>(x.data, base, heads, head_stride, half, deinterleave, scratch);
  }
}

// RotateToken in `style`: DEEPSEEK is a permutation around the NEOX rotation.
template <typename T>
void RotateTokenStyled(const SimdKernels& simd, const TensorView& x, int64_t base, int64_t heads,
                       int64_t head_stride, const T* c, const T* s, int64_t half, RopeStyle style,
                       bool inverse, std::vector<unsigned char>* scratch) {
  if (style != RopeStyle::kDeepseek) {
    RotateToken<T>(simd, x, base, heads, head_stride, c, s, half, style == RopeStyle::kGptj);
    return;
  }
  if (!inverse) PermuteToken(x, base, heads, head_stride, half, /*deinterleave=*/true, scratch);
  RotateToken<T>(simd, x, base, heads, head_stride, c, s, half, /*gptj=*/false);
  if (inverse) PermuteToken(x, base, heads, head_stride, half, /*deinterleave=*/false, scratch);
}

template <typename T>
absl::Status ApplyRopeT(const CpuContext& cpu, const ApplyRopePlan& plan,
                        const RopeFrequencies& freqs, const ResolvedPositions& positions,
                        const TensorView& q, const TensorView& k) {
  const int64_t half = freqs.rotary_dim / 2;
  const SplitFrequencies w(freqs.inv_freq);
  const CosSinFactors f(plan.config, freqs);
  const RopeStyle style = plan.config.style;
  const bool inverse = plan.config.inverse;
  // Angles once per token, shared by all heads of q and k.
  const int64_t per_token = (plan.q_heads + plan.k_heads) * plan.head_dim;
  return cpu.pool.ParallelFor(plan.tokens, Grain(per_token), [&](int64_t t0, int64_t t1) {
    std::vector<T> c(static_cast<size_t>(half)), s(c.size());
    std::vector<double> pbuf(static_cast<size_t>(half) + 1);
    std::vector<unsigned char> scratch;
    for (int64_t t = t0; t < t1; ++t) {
      if (!positions.IsValid(t)) continue;  // padding passes through unchanged
      int64_t stride;
      const double* p = TokenPositions(plan.config, positions, t, half, pbuf.data(), &stride);
      SinCos<T>(cpu.simd, p, stride, w, freqs.inv_freq, half, f.scale, f.sign, c.data(), s.data());
      RotateTokenStyled<T>(cpu.simd, q, ApplyRopePlan::TokenBase(plan.q_strides, plan.seq, t),
                           plan.q_heads, plan.q_strides.head, c.data(), s.data(), half, style,
                           inverse, &scratch);
      if (plan.has_k()) {
        RotateTokenStyled<T>(cpu.simd, k, ApplyRopePlan::TokenBase(plan.k_strides, plan.seq, t),
                             plan.k_heads, plan.k_strides.head, c.data(), s.data(), half, style,
                             inverse, &scratch);
      }
    }
  });
}

}  // namespace

absl::Status RopeCache(const CpuContext& cpu, const RopeCachePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& cos, const TensorView& sin) {
  // Tables: float for FLOAT32/FLOAT16/BFLOAT16 (rounding once from exact-phase floats).
  if (cos.dtype == DType::kFloat64) {
    return RopeCacheT<double>(cpu, plan, freqs, positions, cos, sin);
  }
  return RopeCacheT<float>(cpu, plan, freqs, positions, cos, sin);
}

absl::Status ApplyRope(const CpuContext& cpu, const ApplyRopePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& q, const TensorView& k) {
  // FLOAT32 rotates in fp32; FLOAT64, FLOAT16 and BFLOAT16 in double (see simd_kernels.h).
  return WithComputeType(
      plan.dtype, [&]<typename T>() { return ApplyRopeT<T>(cpu, plan, freqs, positions, q, k); });
}

}  // namespace posenc::kernels::cpu
