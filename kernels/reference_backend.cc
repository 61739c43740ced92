// The reference backend: every op written as directly as its formula, in double precision with
// phases formed in extended precision (x87 long double: a 64-bit significand, so p*omega_j
// carries an absolute error below 2^-33 for every p < 2^31, and sinl/cosl reduce exactly).
//
// This is the oracle every faster backend is tested against: clarity over speed.
#include <cmath>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace posenc::kernels {
namespace {

static_assert(std::numeric_limits<long double>::digits >= 64,
              "the reference backend needs an extended-precision long double (x86-64)");

constexpr double kInf = std::numeric_limits<double>::infinity();

absl::Status CheckOut(const TensorView& out, absl::Span<const int64_t> shape, absl::string_view name) {
  if (out.data == nullptr || !IsFloatDType(out.dtype) ||
      !std::equal(out.shape.begin(), out.shape.end(), shape.begin(), shape.end())) {
    return absl::InternalError(absl::StrCat(name, ": output view does not match the planned ",
                                            ShapeString(shape), " float tensor (got ",
                                            ShapeString(out.shape), ")"));
  }
  return absl::OkStatus();
}

// One row of a sinusoidal table for position p (columns as documented in ops.h).
void SinusoidalRow(const SinusoidalParams& params, const std::vector<long double>& omega,
                   int64_t p, double* row) {
  const int64_t dim = params.dim;
  const int64_t half = dim / 2;
  const int64_t nfreq = static_cast<int64_t>(omega.size());
  const long double pl = static_cast<long double>(p);
  for (int64_t c = 0; c < dim; ++c) {
    int64_t k;
    bool is_sin;
    if (params.layout == SinusoidalLayout::kInterleaved) {
      k = c / 2;
      is_sin = c % 2 == 0;
    } else {
      k = c < half ? c : c - half;
      is_sin = c < half;
      if (c >= 2 * half) k = nfreq;  // odd D: trailing zero column
    }
    if (k >= nfreq) {
      row[c] = 0.0;
      continue;
    }
    const long double angle = pl * omega[k];
    row[c] = static_cast<double>(is_sin ? std::sin(angle) : std::cos(angle));
  }
}

class ReferenceBackend final : public Backend {
 public:
  absl::string_view name() const override { return "reference"; }
  std::string detail() const override {
    return "scalar float64 oracle, phases in 80-bit extended precision";
  }

  absl::Status Sinusoidal(const SinusoidalParams& params, const ResolvedPositions& positions,
                          TensorView out) const override {
    Shape shape = positions.grid;
    shape.push_back(params.dim);
    if (auto s = CheckOut(out, shape, "table"); !s.ok()) return s;
    const std::vector<long double> omega = SinusoidalFrequencies(params);
    std::vector<double> row(static_cast<size_t>(params.dim));
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      if (positions.IsValid(t)) {
        SinusoidalRow(params, omega, positions.At(t), row.data());
      } else {
        std::fill(row.begin(), row.end(), 0.0);
      }
      for (int64_t c = 0; c < params.dim; ++c) {
        StoreFromDouble(out.data, out.dtype, t * params.dim + c, row[c]);
      }
    }
    return absl::OkStatus();
  }

  absl::Status AddPositionEncoding(const AddPositionEncodingParams& params, ConstTensorView x,
                                   const ResolvedPositions& positions,
                                   TensorView y) const override {
    // Every row must exist before anything is written (y may alias x).
    if (auto s = CheckAddPositionEncodingViews(params, x, positions, y); !s.ok()) return s;
    const int64_t dim = x.shape.back();
    const int64_t out_dim = y.shape.back();
    const int64_t pe_dim = params.sinusoidal ? params.sinusoidal->dim : params.learned.shape[1];
    const int64_t shift = params.sinusoidal && params.padding_idx ? *params.padding_idx + 1 : 0;
    std::vector<long double> omega;
    if (params.sinusoidal) omega = SinusoidalFrequencies(*params.sinusoidal);
    std::vector<double> pe(static_cast<size_t>(pe_dim));
    std::vector<double> xs(static_cast<size_t>(dim));
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      if (!positions.IsValid(t)) {
        std::fill(pe.begin(), pe.end(), 0.0);
      } else if (params.sinusoidal) {
        SinusoidalRow(*params.sinusoidal, omega, positions.At(t) + shift, pe.data());
      } else {
        const int64_t row = positions.At(t) + params.table_offset;
        for (int64_t c = 0; c < pe_dim; ++c) {
          pe[c] = LoadAsDouble(params.learned.data, params.learned.dtype, row * pe_dim + c);
        }
      }
      for (int64_t c = 0; c < dim; ++c) {
        xs[c] = LoadAsDouble(x.data, x.dtype, t * dim + c) * params.scale;
      }
      if (params.combine == Combine::kAdd) {
        for (int64_t c = 0; c < dim; ++c) {
          StoreFromDouble(y.data, y.dtype, t * dim + c, xs[c] + pe[c]);
        }
      } else {
        for (int64_t c = 0; c < dim; ++c) StoreFromDouble(y.data, y.dtype, t * out_dim + c, xs[c]);
        for (int64_t c = 0; c < pe_dim; ++c) {
          StoreFromDouble(y.data, y.dtype, t * out_dim + dim + c, pe[c]);
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status RopeCache(const RopeConfig& config, const RopeFrequencies& freqs,
                         RopeCacheLayout layout, const ResolvedPositions& positions,
                         TensorView cos, TensorView sin) const override {
    const int64_t half = freqs.rotary_dim / 2;
    const int64_t width = layout == RopeCacheLayout::kCompact ? half : 2 * half;
    Shape shape = positions.grid;
    shape.push_back(width);
    if (auto s = CheckOut(cos, shape, "cos"); !s.ok()) return s;
    if (auto s = CheckOut(sin, shape, "sin"); !s.ok()) return s;
    std::vector<long double> c(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      RowCosSin(config, freqs, positions, t, c.data(), sn.data());
      for (int64_t j = 0; j < half; ++j) {
        int64_t cols[2];
        int n = 1;
        if (layout == RopeCacheLayout::kCompact) {
          cols[0] = j;
        } else if (layout == RopeCacheLayout::kNeox) {
          cols[0] = j;
          cols[1] = j + half;
          n = 2;
        } else {
          cols[0] = 2 * j;
          cols[1] = 2 * j + 1;
          n = 2;
        }
        for (int i = 0; i < n; ++i) {
          StoreFromDouble(cos.data, cos.dtype, t * width + cols[i], static_cast<double>(c[j]));
          StoreFromDouble(sin.data, sin.dtype, t * width + cols[i], static_cast<double>(sn[j]));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status ApplyRope(const RopeConfig& config, const RopeFrequencies& freqs,
                         TensorLayout layout, const ApplyRopeDims& dims,
                         const ResolvedPositions& positions, TensorView q,
                         TensorView k) const override {
    if (positions.num_tokens != dims.tokens) {
      return absl::InternalError("ApplyRope: positions do not match the plan");
    }
    const int64_t half = freqs.rotary_dim / 2;
    std::vector<long double> c(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = 0; t < dims.tokens; ++t) {
      if (!positions.IsValid(t)) continue;  // padding passes through unchanged
      RowCosSin(config, freqs, positions, t, c.data(), sn.data());
      const int64_t b = t / dims.seq, s = t % dims.seq;
      RotateToken(config.style, layout, dims, dims.q_heads, b, s, half, c.data(), sn.data(), q);
      if (k.data != nullptr) {
        RotateToken(config.style, layout, dims, dims.k_heads, b, s, half, c.data(), sn.data(), k);
      }
    }
    return absl::OkStatus();
  }

  absl::Status AlibiBias(const AlibiBiasParams& p, TensorView out) const override {
    absl::StatusOr<std::vector<double>> slopes = AlibiSlopes(p.num_heads, p.max_bias);
    if (!slopes.ok()) return slopes.status();
    const int64_t qoff = p.query_offset.value_or(p.k_len - p.q_len);
    const bool masked = p.attention_mask.data != nullptr;
    const int64_t batch = masked ? p.attention_mask.shape[0] : 1;
    // Key positions per batch row (BLOOM with a mask: the count of real tokens before it).
    std::vector<int64_t> kpos(static_cast<size_t>(batch * p.k_len));
    for (int64_t b = 0; b < batch; ++b) {
      int64_t real = 0;
      for (int64_t j = 0; j < p.k_len; ++j) {
        if (!masked) {
          kpos[b * p.k_len + j] = j;
          continue;
        }
        const int64_t m = LoadAsInt64(p.attention_mask.data, p.attention_mask.dtype,
                                      b * p.k_len + j);
        if (m != 0 && m != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "attention_mask: expected 0 or 1, got ", m, " at [", b, ", ", j, "]"));
        }
        kpos[b * p.k_len + j] = m ? real : 0;
        real += m;
      }
    }
    // The bias between query at qpos and key index j (raw) with position kp.
    auto value = [&](double m, int64_t qpos, int64_t j, int64_t kp) -> double {
      const bool future = j > qpos;
      if (future && p.mode != AlibiMode::kSymmetric) {
        if (p.future == FutureMode::kMask) return -kInf;
        if (p.future == FutureMode::kZero) return 0.0;
      }
      switch (p.mode) {
        case AlibiMode::kCausal: return -m * static_cast<double>(qpos - j);
        case AlibiMode::kSymmetric: return -m * std::fabs(static_cast<double>(qpos - j));
        case AlibiMode::kBloom: return m * static_cast<double>(kp);
      }
      return 0.0;
    };
    int64_t idx = 0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        const double m = (*slopes)[h];
        if (p.form == BiasForm::kCompact && p.mode == AlibiMode::kBloom) {
          for (int64_t j = 0; j < p.k_len; ++j) {
            StoreFromDouble(out.data, out.dtype, idx++,
                            m * static_cast<double>(kpos[b * p.k_len + j]));
          }
        } else if (p.form == BiasForm::kCompact) {
          // v[t] is the bias of (i, j) with j - i = t - (q_len - 1); take i = q_len - 1 - min
          // so that the formula sees the same qpos - kpos difference.
          for (int64_t t = 0; t < p.q_len + p.k_len - 1; ++t) {
            const int64_t rel = t - (p.q_len - 1);  // j - i
            // qpos - kpos = qoff + i - j = qoff - rel; evaluate at i = 0, j = rel.
            StoreFromDouble(out.data, out.dtype, idx++, value(m, qoff, rel, rel));
          }
        } else {
          for (int64_t i = 0; i < p.q_len; ++i) {
            for (int64_t j = 0; j < p.k_len; ++j) {
              StoreFromDouble(out.data, out.dtype, idx++,
                              value(m, qoff + i, j, kpos[b * p.k_len + j]));
            }
          }
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status RelativeBias(const RelativeBiasParams& p, TensorView out) const override {
    const int64_t qoff = p.query_offset.value_or(p.k_len - p.q_len);
    auto bucket = [&](int64_t i, int64_t j) {
      return T5Bucket((p.key_offset + j) - (qoff + i), p.bidirectional, p.num_buckets,
                      p.max_distance);
    };
    if (p.form == BiasForm::kBuckets) {
      if (out.dtype != DType::kInt32) return absl::InternalError("buckets are INT32");
      for (int64_t i = 0; i < p.q_len; ++i) {
        for (int64_t j = 0; j < p.k_len; ++j) {
          StoreFromDouble(out.data, out.dtype, i * p.k_len + j, static_cast<double>(bucket(i, j)));
        }
      }
      return absl::OkStatus();
    }
    const int64_t heads = p.table.shape[1];
    auto table = [&](int64_t bkt, int64_t h) {
      return LoadAsDouble(p.table.data, p.table.dtype, bkt * heads + h);
    };
    int64_t idx = 0;
    for (int64_t h = 0; h < heads; ++h) {
      if (p.form == BiasForm::kCompact) {
        for (int64_t t = 0; t < p.q_len + p.k_len - 1; ++t) {
          // (i, j) = (0, t - (q_len - 1)): the same key - query difference.
          StoreFromDouble(out.data, out.dtype, idx++, table(bucket(0, t - (p.q_len - 1)), h));
        }
        continue;
      }
      for (int64_t i = 0; i < p.q_len; ++i) {
        for (int64_t j = 0; j < p.k_len; ++j) {
          StoreFromDouble(out.data, out.dtype, idx++, table(bucket(i, j), h));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status RelativeEmbedding(const RelativeEmbeddingParams& p, TensorView out) const override {
    const int64_t qoff = p.query_offset.value_or(p.k_len - p.q_len);
    const int64_t dim = p.table.shape[1];
    const int64_t kmax = p.max_relative;
    int64_t idx = 0;
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t j = 0; j < p.k_len; ++j) {
        const int64_t rel = std::clamp((p.key_offset + j) - (qoff + i), -kmax, kmax);
        const int64_t row = rel + kmax;
        for (int64_t c = 0; c < dim; ++c) {
          StoreFromDouble(out.data, out.dtype, idx++,
                          LoadAsDouble(p.table.data, p.table.dtype, row * dim + c));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  // cos/sin of every frequency for token t, times m (forward) or 1/m with sin negated (inverse).
  static void RowCosSin(const RopeConfig& config, const RopeFrequencies& freqs,
                        const ResolvedPositions& positions, int64_t t, long double* c,
                        long double* s) {
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

  static int64_t Offset(TensorLayout layout, const ApplyRopeDims& dims, int64_t heads, int64_t b,
                        int64_t s, int64_t h) {
    switch (layout) {
      case TensorLayout::kBSHD: return ((b * dims.seq + s) * heads + h) * dims.head_dim;
      case TensorLayout::kBHSD: return ((b * heads + h) * dims.seq + s) * dims.head_dim;
      case TensorLayout::kTHD: return (s * heads + h) * dims.head_dim;
    }
    return 0;
  }

  static void RotateToken(RopeStyle style, TensorLayout layout, const ApplyRopeDims& dims,
                          int64_t heads, int64_t b, int64_t s, int64_t half, const long double* c,
                          const long double* sn, TensorView x) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = Offset(layout, dims, heads, b, s, h);
      for (int64_t j = 0; j < half; ++j) {
        const int64_t ia = base + (style == RopeStyle::kNeox ? j : 2 * j);
        const int64_t ib = base + (style == RopeStyle::kNeox ? j + half : 2 * j + 1);
        const long double xa = LoadAsDouble(x.data, x.dtype, ia);
        const long double xb = LoadAsDouble(x.data, x.dtype, ib);
        StoreFromDouble(x.data, x.dtype, ia, static_cast<double>(xa * c[j] - xb * sn[j]));
        StoreFromDouble(x.data, x.dtype, ib, static_cast<double>(xb * c[j] + xa * sn[j]));
      }
    }
  }
};

}  // namespace

std::unique_ptr<Backend> MakeReferenceBackend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace posenc::kernels
