// The optimized CPU backend: the reference's ops, vectorized (simd_kernels.h, picked at run
// time for the processor), split across a thread pool along tokens or rows, with the bias
// matrices written as rows of one precomputed Toeplitz generator.
//
// Accuracy: the same exact-phase sin/cos for every float dtype (see simd_kernels.h); fp16/bf16
// compute in fp32 and round once. The parity harness (tests/kernels/parity_test.cc) checks every
// op x dtype x layout x style x scaling x position mode against the reference backend.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/common/thread_pool.h"

namespace posenc::kernels {
namespace {

using cpu::SimdKernels;

// Work below this many output elements runs on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;

int64_t Grain(int64_t per_item) {
  return std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(1, per_item));
}

// omega as a double-double, for the exact phase.
struct Omega {
  std::vector<double> hi, lo;
  double max = 0;
  explicit Omega(const std::vector<long double>& w) : hi(w.size()), lo(w.size()) {
    for (size_t j = 0; j < w.size(); ++j) {
      hi[j] = static_cast<double>(w[j]);
      lo[j] = static_cast<double>(w[j] - static_cast<long double>(hi[j]));
      max = std::max(max, std::fabs(hi[j]));
    }
  }
};

// Loads n elements of a float dtype at element offset `at` into T.
template <typename T>
void LoadRow(const SimdKernels& k, const void* base, DType dtype, int64_t at, int64_t n, T* out) {
  const auto* bytes = static_cast<const unsigned char*>(base) + at * DTypeSize(dtype);
  if constexpr (std::is_same_v<T, float>) {
    switch (dtype) {
      case DType::kFloat32: std::memcpy(out, bytes, n * sizeof(float)); return;
      case DType::kFloat16: k.f16_to_f32(reinterpret_cast<const uint16_t*>(bytes), out, n); return;
      case DType::kBFloat16:
        k.bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes), out, n);
        return;
      default: break;
    }
  } else {
    if (dtype == DType::kFloat64) {
      std::memcpy(out, bytes, n * sizeof(double));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(LoadAsDouble(base, dtype, at + i));
}

// Stores n values of T at element offset `at` of a buffer of `dtype` (rounding once).
template <typename T>
void StoreRow(const SimdKernels& k, const T* in, void* base, DType dtype, int64_t at, int64_t n) {
  auto* bytes = static_cast<unsigned char*>(base) + at * DTypeSize(dtype);
  if constexpr (std::is_same_v<T, float>) {
    switch (dtype) {
      case DType::kFloat32: std::memcpy(bytes, in, n * sizeof(float)); return;
      case DType::kFloat16: k.f32_to_f16(in, reinterpret_cast<uint16_t*>(bytes), n); return;
      case DType::kBFloat16: k.f32_to_bf16(in, reinterpret_cast<uint16_t*>(bytes), n); return;
      default: break;
    }
  } else {
    if (dtype == DType::kFloat64) {
      std::memcpy(bytes, in, n * sizeof(double));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) StoreFromDouble(base, dtype, at + i, static_cast<double>(in[i]));
}

// cos/sin of p*omega_j for one row: vectorized, or in extended precision when the phase is
// beyond the vector reduction's exact range.
template <typename T>
void SinCos(const SimdKernels& k, const double* p, int64_t p_stride, const Omega& w,
            const std::vector<long double>& w_exact, int64_t n, double scale, double sign, T* c,
            T* s) {
  double pmax = 0;
  for (int64_t j = 0; j < (p_stride ? n : 1); ++j) pmax = std::max(pmax, std::fabs(p[j * p_stride]));
  if (pmax * w.max < cpu::kMaxVectorPhase) {
    if constexpr (std::is_same_v<T, float>) {
      k.sincos_f32(p, p_stride, w.hi.data(), w.lo.data(), n, scale, sign, c, s);
    } else {
      k.sincos_f64(p, p_stride, w.hi.data(), w.lo.data(), n, scale, sign, c, s);
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const long double angle = static_cast<long double>(p[j * p_stride]) * w_exact[j];
    c[j] = static_cast<T>(static_cast<double>(std::cos(angle)) * scale);
    s[j] = static_cast<T>(static_cast<double>(std::sin(angle)) * sign * scale);
  }
}

// Writes one sinusoidal row (layout of ops.h) from the cos/sin of its frequencies.
template <typename T>
void PlaceSinusoidal(const SinusoidalParams& params, int64_t nfreq, const T* c, const T* s,
                     T* row) {
  const int64_t dim = params.dim, half = dim / 2;
  if (params.layout == SinusoidalLayout::kInterleaved) {
    for (int64_t k = 0; k < half; ++k) {
      row[2 * k] = s[k];
      row[2 * k + 1] = c[k];
    }
    if (dim % 2) row[dim - 1] = nfreq > half ? s[half] : T(0);
  } else {
    for (int64_t k = 0; k < half; ++k) {
      row[k] = s[k];
      row[half + k] = c[k];
    }
    if (dim % 2) row[dim - 1] = T(0);
  }
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const SimdKernels* k, int threads) : k_(*k), pool_(threads) {}

  absl::string_view name() const override { return "cpu"; }
  std::string detail() const override {
    return absl::StrCat(k_.name, ", ", pool_.parallelism(), " thread",
                        pool_.parallelism() == 1 ? "" : "s");
  }

  absl::Status Sinusoidal(const SinusoidalParams& params, const ResolvedPositions& positions,
                          TensorView out) const override {
    if (out.dtype == DType::kFloat64) return SinusoidalT<double>(params, positions, out);
    return SinusoidalT<float>(params, positions, out);
  }

  absl::Status AddPositionEncoding(const AddPositionEncodingParams& params, ConstTensorView x,
                                   const ResolvedPositions& positions,
                                   TensorView y) const override {
    // Every row must exist before anything is written (y may alias x).
    if (auto s = CheckAddPositionEncodingViews(params, x, positions, y); !s.ok()) return s;
    // x*scale + PE can cancel: only FLOAT32 computes in fp32, the others in double.
    if (x.dtype == DType::kFloat32) return AddT<float>(params, x, positions, y);
    return AddT<double>(params, x, positions, y);
  }

  absl::Status RopeCache(const RopeConfig& config, const RopeFrequencies& freqs,
                         RopeCacheLayout layout, const ResolvedPositions& positions,
                         TensorView cos, TensorView sin) const override {
    if (cos.dtype == DType::kFloat64) {
      return RopeCacheT<double>(config, freqs, layout, positions, cos, sin);
    }
    return RopeCacheT<float>(config, freqs, layout, positions, cos, sin);
  }

  absl::Status ApplyRope(const RopeConfig& config, const RopeFrequencies& freqs,
                         TensorLayout layout, const ApplyRopeDims& dims,
                         const ResolvedPositions& positions, TensorView q,
                         TensorView k) const override {
    if (positions.num_tokens != dims.tokens) {
      return absl::InternalError("ApplyRope: positions do not match the plan");
    }
    // FLOAT32 rotates in fp32; FLOAT64, FLOAT16 and BFLOAT16 in double (see simd_kernels.h).
    if (q.dtype == DType::kFloat32) {
      return ApplyT<float>(config, freqs, layout, dims, positions, q, k);
    }
    return ApplyT<double>(config, freqs, layout, dims, positions, q, k);
  }

  absl::Status AlibiBias(const AlibiBiasParams& p, TensorView out) const override {
    absl::StatusOr<std::vector<double>> slopes = AlibiSlopes(p.num_heads, p.max_bias);
    if (!slopes.ok()) return slopes.status();
    const int64_t qoff = p.query_offset.value_or(p.k_len - p.q_len);
    const bool masked = p.attention_mask.data != nullptr;
    const int64_t batch = masked ? p.attention_mask.shape[0] : 1;
    std::vector<double> kpos(static_cast<size_t>(batch * p.k_len));
    for (int64_t b = 0; b < batch; ++b) {
      int64_t real = 0;
      for (int64_t j = 0; j < p.k_len; ++j) {
        int64_t m = 1;
        if (masked) {
          m = LoadAsInt64(p.attention_mask.data, p.attention_mask.dtype, b * p.k_len + j);
          if (m != 0 && m != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "attention_mask: expected 0 or 1, got ", m, " at [", b, ", ", j, "]"));
          }
        }
        kpos[b * p.k_len + j] = static_cast<double>(masked ? (m ? real : 0) : j);
        real += m;
      }
    }
    const double inf = std::numeric_limits<double>::infinity();
    const int64_t esize = DTypeSize(out.dtype);
    auto* bytes = static_cast<unsigned char*>(out.data);
    const int64_t gen_len = p.q_len + p.k_len - 1;

    if (p.mode != AlibiMode::kBloom) {
      // Toeplitz: v[t] is the bias at key - query index difference t - (q_len - 1).
      auto value = [&](double m, int64_t rel) {  // rel = j - i; qpos - kpos = qoff - rel
        const int64_t diff = qoff - rel;
        if (diff < 0 && p.mode == AlibiMode::kCausal) {
          if (p.future == FutureMode::kMask) return -inf;
          if (p.future == FutureMode::kZero) return 0.0;
        }
        return p.mode == AlibiMode::kCausal ? -m * static_cast<double>(diff)
                                            : -m * std::fabs(static_cast<double>(diff));
      };
      std::vector<unsigned char> gens(static_cast<size_t>(p.num_heads * gen_len * esize));
      std::vector<double> v(static_cast<size_t>(gen_len));
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t t = 0; t < gen_len; ++t) v[t] = value((*slopes)[h], t - (p.q_len - 1));
        StoreRow<double>(k_, v.data(), gens.data(), out.dtype, h * gen_len, gen_len);
      }
      if (p.form == BiasForm::kCompact) {
        std::memcpy(bytes, gens.data(), gens.size());
        return absl::OkStatus();
      }
      return StreamToeplitz(gens.data(), p.num_heads, p.q_len, p.k_len, esize, bytes);
    }

    // BLOOM: each (batch, head) has one row m_h * kpos; query rows differ only in where the
    // future rule starts.
    std::vector<unsigned char> rows(static_cast<size_t>(batch * p.num_heads * p.k_len * esize));
    std::vector<double> v(static_cast<size_t>(p.k_len));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t j = 0; j < p.k_len; ++j) v[j] = (*slopes)[h] * kpos[b * p.k_len + j];
        StoreRow<double>(k_, v.data(), rows.data(), out.dtype, (b * p.num_heads + h) * p.k_len,
                         p.k_len);
      }
    }
    if (p.form == BiasForm::kCompact) {
      std::memcpy(bytes, rows.data(), rows.size());
      return absl::OkStatus();
    }
    std::vector<unsigned char> fill(static_cast<size_t>(p.k_len * esize));
    std::vector<double> fv(static_cast<size_t>(p.k_len),
                           p.future == FutureMode::kMask ? -inf : 0.0);
    StoreRow<double>(k_, fv.data(), fill.data(), out.dtype, 0, p.k_len);
    const int64_t row_bytes = p.k_len * esize;
    return pool_.ParallelFor(batch * p.num_heads * p.q_len, Grain(p.k_len), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t bh = r / p.q_len, i = r % p.q_len;
        unsigned char* dst = bytes + r * row_bytes;
        const unsigned char* src = rows.data() + bh * row_bytes;
        // keys j <= qpos keep the formula; the rest follow the future rule
        int64_t keep = p.future == FutureMode::kLinear
                           ? p.k_len
                           : std::clamp<int64_t>(qoff + i + 1, 0, p.k_len);
        std::memcpy(dst, src, keep * esize);
        std::memcpy(dst + keep * esize, fill.data(), (p.k_len - keep) * esize);
      }
    });
  }

  absl::Status RelativeBias(const RelativeBiasParams& p, TensorView out) const override {
    const int64_t qoff = p.query_offset.value_or(p.k_len - p.q_len);
    const int64_t gen_len = p.q_len + p.k_len - 1;
    std::vector<int32_t> buckets(static_cast<size_t>(gen_len));
    for (int64_t t = 0; t < gen_len; ++t) {
      const int64_t rel = t - (p.q_len - 1);  // j - i
      buckets[t] = static_cast<int32_t>(
          T5Bucket(p.key_offset - qoff + rel, p.bidirectional, p.num_buckets, p.max_distance));
    }
    auto* bytes = static_cast<unsigned char*>(out.data);
    if (p.form == BiasForm::kBuckets) {
      if (out.dtype != DType::kInt32) return absl::InternalError("buckets are INT32");
      return StreamToeplitz(reinterpret_cast<const unsigned char*>(buckets.data()), 1, p.q_len,
                            p.k_len, 4, bytes);
    }
    const int64_t heads = p.table.shape[1];
    const int64_t esize = DTypeSize(out.dtype);
    std::vector<unsigned char> gens(static_cast<size_t>(heads * gen_len * esize));
    std::vector<double> v(static_cast<size_t>(gen_len));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < gen_len; ++t) {
        v[t] = LoadAsDouble(p.table.data, p.table.dtype, buckets[t] * heads + h);
      }
      StoreRow<double>(k_, v.data(), gens.data(), out.dtype, h * gen_len, gen_len);
    }
    if (p.form == BiasForm::kCompact) {
      std::memcpy(bytes, gens.data(), gens.size());
      return absl::OkStatus();
    }
    return StreamToeplitz(gens.data(), heads, p.q_len, p.k_len, esize, bytes);
  }

  absl::Status RelativeEmbedding(const RelativeEmbeddingParams& p, TensorView out) const override {
    const int64_t qoff = p.query_offset.value_or(p.k_len - p.q_len);
    const int64_t dim = p.table.shape[1];
    const int64_t kmax = p.max_relative;
    const int64_t esize = DTypeSize(out.dtype);
    const int64_t row_bytes = dim * esize;
    // The table once in the output dtype; then every (i, j) is one row copy.
    std::vector<unsigned char> table(static_cast<size_t>((2 * kmax + 1) * row_bytes));
    std::vector<double> row(static_cast<size_t>(dim));
    for (int64_t r = 0; r < 2 * kmax + 1; ++r) {
      LoadRow<double>(k_, p.table.data, p.table.dtype, r * dim, dim, row.data());
      StoreRow<double>(k_, row.data(), table.data(), out.dtype, r * dim, dim);
    }
    auto* bytes = static_cast<unsigned char*>(out.data);
    return pool_.ParallelFor(p.q_len, Grain(p.k_len * dim), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = 0; j < p.k_len; ++j) {
          const int64_t rel = std::clamp((p.key_offset + j) - (qoff + i), -kmax, kmax);
          std::memcpy(bytes + (i * p.k_len + j) * row_bytes, table.data() + (rel + kmax) * row_bytes,
                      row_bytes);
        }
      }
    });
  }

 private:
  // out[h, i, :] = gen[h, q_len-1-i .. q_len-1-i+k_len): each row one contiguous copy.
  absl::Status StreamToeplitz(const unsigned char* gens, int64_t heads, int64_t q_len,
                              int64_t k_len, int64_t esize, unsigned char* out) const {
    const int64_t gen_len = q_len + k_len - 1;
    const int64_t row_bytes = k_len * esize;
    return pool_.ParallelFor(heads * q_len, Grain(k_len), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t h = r / q_len, i = r % q_len;
        std::memcpy(out + r * row_bytes, gens + (h * gen_len + (q_len - 1 - i)) * esize, row_bytes);
      }
    });
  }

  template <typename T>
  absl::Status SinusoidalT(const SinusoidalParams& params, const ResolvedPositions& positions,
                           TensorView out) const {
    const std::vector<long double> exact = SinusoidalFrequencies(params);
    const Omega w(exact);
    const int64_t nfreq = static_cast<int64_t>(exact.size());
    const int64_t dim = params.dim;
    return pool_.ParallelFor(positions.num_tokens, Grain(dim), [&](int64_t t0, int64_t t1) {
      std::vector<T> c(static_cast<size_t>(nfreq + 1)), s(c.size()), row(static_cast<size_t>(dim));
      for (int64_t t = t0; t < t1; ++t) {
        if (!positions.IsValid(t)) {
          std::fill(row.begin(), row.end(), T(0));
        } else {
          const double p = static_cast<double>(positions.At(t));
          SinCos<T>(k_, &p, 0, w, exact, nfreq, 1.0, 1.0, c.data(), s.data());
          PlaceSinusoidal<T>(params, nfreq, c.data(), s.data(), row.data());
        }
        StoreRow<T>(k_, row.data(), out.data, out.dtype, t * dim, dim);
      }
    });
  }

  template <typename T>
  absl::Status AddT(const AddPositionEncodingParams& params, ConstTensorView x,
                    const ResolvedPositions& positions, TensorView y) const {
    const int64_t dim = x.shape.back();
    const int64_t out_dim = y.shape.back();
    const int64_t pe_dim = params.combine == Combine::kAdd ? dim : out_dim - dim;
    const int64_t shift = params.sinusoidal && params.padding_idx ? *params.padding_idx + 1 : 0;
    std::vector<long double> exact;
    if (params.sinusoidal) exact = SinusoidalFrequencies(*params.sinusoidal);
    const Omega w(exact);
    const int64_t nfreq = static_cast<int64_t>(exact.size());
    const T scale = static_cast<T>(params.scale);
    return pool_.ParallelFor(positions.num_tokens, Grain(out_dim), [&](int64_t t0, int64_t t1) {
      std::vector<T> c(static_cast<size_t>(nfreq + 1)), s(c.size());
      std::vector<T> pe(static_cast<size_t>(pe_dim)), xs(static_cast<size_t>(dim));
      for (int64_t t = t0; t < t1; ++t) {
        if (!positions.IsValid(t)) {
          std::fill(pe.begin(), pe.end(), T(0));
        } else if (params.sinusoidal) {
          const double p = static_cast<double>(positions.At(t) + shift);
          SinCos<T>(k_, &p, 0, w, exact, nfreq, 1.0, 1.0, c.data(), s.data());
          PlaceSinusoidal<T>(*params.sinusoidal, nfreq, c.data(), s.data(), pe.data());
        } else {
          LoadRow<T>(k_, params.learned.data, params.learned.dtype,
                     (positions.At(t) + params.table_offset) * pe_dim, pe_dim, pe.data());
        }
        LoadRow<T>(k_, x.data, x.dtype, t * dim, dim, xs.data());
        if (params.combine == Combine::kAdd) {
          for (int64_t i = 0; i < dim; ++i) xs[i] = xs[i] * scale + pe[i];
          StoreRow<T>(k_, xs.data(), y.data, y.dtype, t * dim, dim);
        } else {
          for (int64_t i = 0; i < dim; ++i) xs[i] = xs[i] * scale;
          StoreRow<T>(k_, xs.data(), y.data, y.dtype, t * out_dim, dim);
          StoreRow<T>(k_, pe.data(), y.data, y.dtype, t * out_dim + dim, pe_dim);
        }
      }
    });
  }

  // The positions of token t for every frequency (M-RoPE), or its one position.
  static const double* TokenPositions(const RopeConfig& config, const ResolvedPositions& positions,
                                      int64_t t, int64_t half, double* buf, int64_t* stride) {
    if (config.mrope_section.empty()) {
      buf[0] = positions.IsValid(t) ? static_cast<double>(positions.At(t)) : 0.0;
      *stride = 0;
      return buf;
    }
    for (int64_t j = 0; j < half; ++j) {
      buf[j] = positions.IsValid(t)
                   ? static_cast<double>(positions.At(t, MropeComponent(config, j)))
                   : 0.0;
    }
    *stride = 1;
    return buf;
  }

  template <typename T>
  absl::Status RopeCacheT(const RopeConfig& config, const RopeFrequencies& freqs,
                          RopeCacheLayout layout, const ResolvedPositions& positions,
                          TensorView cos, TensorView sin) const {
    const int64_t half = freqs.rotary_dim / 2;
    const int64_t width = layout == RopeCacheLayout::kCompact ? half : 2 * half;
    const Omega w(freqs.inv_freq);
    const double m = freqs.CosSinScale();
    const double scale = config.inverse ? 1.0 / m : m;
    const double sign = config.inverse ? -1.0 : 1.0;
    const bool direct = std::is_same_v<T, float> && cos.dtype == DType::kFloat32 &&
                        layout != RopeCacheLayout::kGptj;
    return pool_.ParallelFor(positions.num_tokens, Grain(2 * width), [&](int64_t t0, int64_t t1) {
      std::vector<T> c(static_cast<size_t>(half)), s(c.size());
      std::vector<T> cw(static_cast<size_t>(width)), sw(cw.size());
      std::vector<double> pbuf(static_cast<size_t>(half) + 1);
      for (int64_t t = t0; t < t1; ++t) {
        int64_t stride;
        const double* p = TokenPositions(config, positions, t, half, pbuf.data(), &stride);
        if (direct) {
          // FLOAT32 COMPACT/NEOX: straight into the output rows (NEOX repeats the first half).
          T* cd = static_cast<T*>(cos.data) + t * width;
          T* sd = static_cast<T*>(sin.data) + t * width;
          SinCos<T>(k_, p, stride, w, freqs.inv_freq, half, scale, sign, cd, sd);
          if (layout == RopeCacheLayout::kNeox) {
            std::memcpy(cd + half, cd, half * sizeof(T));
            std::memcpy(sd + half, sd, half * sizeof(T));
          }
          continue;
        }
        SinCos<T>(k_, p, stride, w, freqs.inv_freq, half, scale, sign, c.data(), s.data());
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
        StoreRow<T>(k_, cr, cos.data, cos.dtype, t * width, width);
        StoreRow<T>(k_, sr, sin.data, sin.dtype, t * width, width);
      }
    });
  }

  template <typename T>
  absl::Status ApplyT(const RopeConfig& config, const RopeFrequencies& freqs, TensorLayout layout,
                      const ApplyRopeDims& dims, const ResolvedPositions& positions, TensorView q,
                      TensorView k) const {
    const int64_t half = freqs.rotary_dim / 2;
    const Omega w(freqs.inv_freq);
    const double m = freqs.CosSinScale();
    const double scale = config.inverse ? 1.0 / m : m;
    const double sign = config.inverse ? -1.0 : 1.0;
    const bool gptj = config.style == RopeStyle::kGptj;
    const int64_t d = dims.head_dim;
    // Element offset of head 0 of token t, and the stride between heads.
    auto head_base = [&](int64_t t, int64_t heads) {
      const int64_t b = t / dims.seq, s = t % dims.seq;
      switch (layout) {
        case TensorLayout::kBSHD: return (b * dims.seq + s) * heads * d;
        case TensorLayout::kBHSD: return (b * heads * dims.seq + s) * d;
        case TensorLayout::kTHD: return s * heads * d;
      }
      return int64_t{0};
    };
    auto head_stride = [&](int64_t) { return layout == TensorLayout::kBHSD ? dims.seq * d : d; };
    auto rotate = [&](TensorView x, int64_t heads, int64_t t, const T* c, const T* s) {
      const int64_t base = head_base(t, heads);
      const int64_t stride = head_stride(heads);
      if constexpr (std::is_same_v<T, float>) {
        k_.rotate_f32(static_cast<float*>(x.data) + base, heads, stride, c, s, half, gptj);
      } else {
        switch (x.dtype) {
          case DType::kFloat64:
            k_.rotate_f64(static_cast<double*>(x.data) + base, heads, stride, c, s, half, gptj);
            break;
          case DType::kFloat16:
            k_.rotate_f16(static_cast<uint16_t*>(x.data) + base, heads, stride, c, s, half, gptj);
            break;
          case DType::kBFloat16:
            k_.rotate_bf16(static_cast<uint16_t*>(x.data) + base, heads, stride, c, s, half, gptj);
            break;
          default: break;
        }
      }
    };
    const int64_t per_token = (dims.q_heads + dims.k_heads) * d;
    return pool_.ParallelFor(dims.tokens, Grain(per_token), [&](int64_t t0, int64_t t1) {
      std::vector<T> c(static_cast<size_t>(half)), s(c.size());
      std::vector<double> pbuf(static_cast<size_t>(half) + 1);
      for (int64_t t = t0; t < t1; ++t) {
        if (!positions.IsValid(t)) continue;  // padding passes through unchanged
        int64_t stride;
        const double* p = TokenPositions(config, positions, t, half, pbuf.data(), &stride);
        SinCos<T>(k_, p, stride, w, freqs.inv_freq, half, scale, sign, c.data(), s.data());
        rotate(q, dims.q_heads, t, c.data(), s.data());
        if (k.data != nullptr) rotate(k, dims.k_heads, t, c.data(), s.data());
      }
    });
  }

  const SimdKernels& k_;
  mutable ThreadPool pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend(const CpuBackendOptions& options) {
  const SimdKernels* k = cpu::SelectKernels(options.isa.empty() ? nullptr : options.isa.c_str());
  if (k == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "isa: expected avx512, avx2 or scalar (one this processor supports), got '", options.isa,
        "'"));
  }
  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(k, threads);
}

}  // namespace posenc::kernels
