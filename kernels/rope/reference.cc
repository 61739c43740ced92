// The reference implementation of RopeCache and ApplyRope (see reference/reference.h).
#include "kernels/reference/reference.h"

#include <cmath>
#include <vector>

namespace posenc::kernels::reference {
namespace {

// cos/sin of every frequency for token t, times m (forward) or 1/m with sin negated (inverse).
void RowCosSin(const RopeConfig& config, const RopeFrequencies& freqs,
               const ResolvedPositions& positions, int64_t t, long double* c, long double* s) {
  const int64_t half = freqs.rotary_dim / 2;
  const long double m = freqs.CosSinScale();
  const long double scale = config.inverse ? 1.0L / m : m;
  const long double sign = config.inverse ? -1.0L : 1.0L;
  for (int64_t j = 0; j < half; ++j) {
    // Padding tokens behave as position 0.
    const int64_t p = positions.IsValid(t) ? positions.At(t, MropeComponent(config, j)) : 0;
    const long double angle = static_cast<long double>(p) * freqs.inv_freq[j];
    c[j] = std::cos(angle) * scale;
    s[j] = sign * std::sin(angle) * scale;
  }
}

// Rotates the `heads` head rows of one token, head h at x[base + h * head_stride]. DEEPSEEK reads
// GPT-J pairs and writes them at NEOX places (inverse: reads NEOX places, writes GPT-J pairs),
// so every channel is read before any is written.
void RotateToken(RopeStyle style, bool inverse, int64_t base, int64_t heads, int64_t head_stride,
                 int64_t half, const long double* c, const long double* sn, const TensorView& x) {
  std::vector<long double> in(static_cast<size_t>(2 * half));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t row = base + h * head_stride;
    for (int64_t i = 0; i < 2 * half; ++i) in[i] = LoadAsDouble(x.data, x.dtype, row + i);
    for (int64_t j = 0; j < half; ++j) {
      const int64_t neox_a = j, neox_b = j + half, gptj_a = 2 * j, gptj_b = 2 * j + 1;
      int64_t ra = neox_a, rb = neox_b, wa = neox_a, wb = neox_b;  // read and write channels
      if (style == RopeStyle::kGptj) {
        ra = wa = gptj_a;
        rb = wb = gptj_b;
      } else if (style == RopeStyle::kDeepseek) {
        if (inverse) {
          wa = gptj_a;
          wb = gptj_b;
        } else {
          ra = gptj_a;
          rb = gptj_b;
        }
      }
      const long double xa = in[ra];
      const long double xb = in[rb];
      StoreFromDouble(x.data, x.dtype, row + wa, static_cast<double>(xa * c[j] - xb * sn[j]));
      StoreFromDouble(x.data, x.dtype, row + wb, static_cast<double>(xb * c[j] + xa * sn[j]));
    }
  }
}

}  // namespace

absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                       const ResolvedPositions& positions, const TensorView& cos,
                       const TensorView& sin) {
  const int64_t half = freqs.rotary_dim / 2;
  const int64_t width = plan.width;
  std::vector<long double> c(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < positions.num_tokens; ++t) {
    RowCosSin(plan.config, freqs, positions, t, c.data(), sn.data());
    for (int64_t j = 0; j < half; ++j) {
      int64_t cols[2];
      int n = 1;
      switch (plan.layout) {
        case RopeCacheLayout::kCompact:
        case RopeCacheLayout::kFusedCosSin:  // RunRopeCache asks the backends for COMPACT
        case RopeCacheLayout::kComplex: cols[0] = j; break;
        case RopeCacheLayout::kNeox:
          cols[0] = j;
          cols[1] = j + half;
          n = 2;
          break;
        case RopeCacheLayout::kGptj:
          cols[0] = 2 * j;
          cols[1] = 2 * j + 1;
          n = 2;
          break;
      }
      for (int i = 0; i < n; ++i) {
        StoreFromDouble(cos.data, cos.dtype, t * width + cols[i], static_cast<double>(c[j]));
        StoreFromDouble(sin.data, sin.dtype, t * width + cols[i], static_cast<double>(sn[j]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                       const ResolvedPositions& positions, const TensorView& q,
                       const TensorView& k) {
  const int64_t half = freqs.rotary_dim / 2;
  std::vector<long double> c(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < plan.tokens; ++t) {
    if (!positions.IsValid(t)) continue;  // padding passes through unchanged
    RowCosSin(plan.config, freqs, positions, t, c.data(), sn.data());
    RotateToken(plan.config.style, plan.config.inverse,
                ApplyRopePlan::TokenBase(plan.q_strides, plan.seq, t), plan.q_heads,
                plan.q_strides.head, half, c.data(), sn.data(), q);
    if (plan.has_k()) {
      RotateToken(plan.config.style, plan.config.inverse,
                  ApplyRopePlan::TokenBase(plan.k_strides, plan.seq, t), plan.k_heads,
                  plan.k_strides.head, half, c.data(), sn.data(), k);
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc::kernels::reference
