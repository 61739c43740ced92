#include "tests/common/cuda_math_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bias/bias_math.h"
#include "kernels/common/half_codec.h"
#include "kernels/cpu/cpu.h"
#include "kernels/rope/rope_math.h"

namespace posenc::testing {
namespace {

using namespace ::posenc::kernels;  // a test-only file
namespace hd = ::posenc::kernels::hd;

// device_elements.cuh's loads and stores, with the same codec.
double LoadHd(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat64: return static_cast<const double*>(base)[i];
    case DType::kFloat16: return hd::HalfBitsToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16: return hd::BFloat16BitsToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return 0;
  }
}

void StoreHd(void* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; return;
    case DType::kFloat16: static_cast<uint16_t*>(base)[i] = hd::DoubleToHalfBits(v); return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = hd::DoubleToBFloat16Bits(v); return;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    default: return;
  }
}

// Element copies of `esize` bytes (the Toeplitz expander is type-blind).
void CopyElement(const void* src, int64_t si, void* dst, int64_t di, int64_t esize) {
  std::memcpy(static_cast<unsigned char*>(dst) + di * esize,
              static_cast<const unsigned char*>(src) + si * esize, static_cast<size_t>(esize));
}

void ExpandToeplitz(const void* gen, int64_t heads, int64_t q_len, int64_t k_len, int64_t esize,
                    void* out) {
  const int64_t gen_len = q_len + k_len - 1;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < q_len; ++i) {
      for (int64_t j = 0; j < k_len; ++j) {
        CopyElement(gen, hd::ToeplitzSource(q_len, gen_len, h, i, j), out,
                    (h * q_len + i) * k_len + j, esize);
      }
    }
  }
}

// A bias from its generator rows, value(h, t) for t < q_len + k_len - 1: written straight into the
// output in the compact form, expanded into each head's Toeplitz matrix in the full form (the two
// steps of kernels/bias/cuda.cc).
template <typename Value>
void WriteBiasFromGenerators(const TensorView& bias, bool compact, int64_t heads, int64_t q_len,
                             int64_t k_len, Value value) {
  const int64_t gen_len = q_len + k_len - 1;
  std::vector<unsigned char> scratch;
  void* gen = bias.data;
  if (!compact) {
    scratch.resize(heads * gen_len * DTypeSize(bias.dtype));
    gen = scratch.data();
  }
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < gen_len; ++t) StoreHd(gen, bias.dtype, h * gen_len + t, value(h, t));
  }
  if (!compact) ExpandToeplitz(gen, heads, q_len, k_len, DTypeSize(bias.dtype), bias.data);
}

// rope/cuda.cc's AngleInputs: with `seq` > 0 (ApplyRope) and positions that count up within
// each sequence, formed from each sequence's first as the kernel forms them (the same on every
// component).
struct Angles {
  cpu::SplitFrequencies w;
  std::vector<int32_t> pos;  // -1 padding
  std::vector<int8_t> comp;
  double scale = 1, sign = 1;
  int64_t tokens = 0;
  Angles(const RopeConfig& config, const RopeFrequencies& freqs, const ResolvedPositions& r,
         int64_t seq = 0)
      : w(freqs.inv_freq), pos(r.pos.size()), tokens(r.num_tokens) {
    const bool from_starts = r.ConsecutiveIn(seq);
    for (int64_t c = 0; c < r.components; ++c) {
      for (int64_t t = 0; t < r.num_tokens; ++t) {
        pos[c * r.num_tokens + t] =
            from_starts ? static_cast<int32_t>(r.pos[t - t % seq]) + static_cast<int32_t>(t % seq)
            : r.IsValid(t) ? static_cast<int32_t>(r.At(t, c))
                           : -1;
      }
    }
    if (!config.mrope_section.empty()) {
      for (size_t j = 0; j < w.hi.size(); ++j) {
        comp.push_back(static_cast<int8_t>(MropeComponent(config, static_cast<int64_t>(j))));
      }
    }
    const double m = freqs.CosSinScale();
    scale = config.inverse ? 1.0 / m : m;
    sign = config.inverse ? -1.0 : 1.0;
  }
  // rope/cuda.cu's AnglePosition.
  double Position(int64_t t, int64_t j) const {
    if (comp.empty()) return pos[t];
    return pos[comp[j] * tokens + t];
  }
};

// rope/cuda.cu's ApplyRopeKernel: FLOAT32 in float, FLOAT64 in double, FLOAT16/BFLOAT16 pair by
// pair through RotateHalfPair (float, double where that is not finite) on the storage bits.
template <typename T>
void ApplyRopeT(const ApplyRopePlan& plan, const Angles& a, const TensorView& q,
                const TensorView& k) {
  const int64_t half = static_cast<int64_t>(a.w.hi.size());
  const int style = static_cast<int>(plan.config.style);
  const bool inverse = plan.config.inverse;
  const bool small = plan.dtype == DType::kFloat16 || plan.dtype == DType::kBFloat16;
  std::vector<T> c(half), s(half), buf(2 * half);
  std::vector<float> cf(half), t_hi(half), t_lo(half);
  std::vector<uint16_t> bits(2 * half);
  for (int64_t t = 0; t < plan.tokens; ++t) {
    if (a.pos[t] < 0) continue;
    for (int64_t j = 0; j < half; ++j) {
      hd::RopeCosSin<T>(a.Position(t, j), a.w.hi[j], a.w.lo[j], a.scale, a.sign, &c[j], &s[j]);
      if (small) hd::FloatRotationFactors(c[j], s[j], &cf[j], &t_hi[j], &t_lo[j]);
    }
    for (int64_t h = 0; h < plan.q_heads + plan.k_heads; ++h) {
      const bool is_q = h < plan.q_heads;
      const TensorView& x = is_q ? q : k;
      const HeadStrides& st = is_q ? plan.q_strides : plan.k_strides;
      const int64_t row =
          ApplyRopePlan::TokenBase(st, plan.seq, t) + (is_q ? h : h - plan.q_heads) * st.head;
      auto* x16 = static_cast<uint16_t*>(x.data) + row;
      for (int64_t e = 0; e < 2 * half; ++e) {
        if (small) {
          bits[e] = x16[e];
        } else {
          buf[e] = static_cast<T>(LoadHd(x.data, x.dtype, row + e));
        }
      }
      for (int64_t j = 0; j < half; ++j) {
        int64_t ia, ib, oa, ob;
        hd::PairChannels(style, inverse, half, j, &ia, &ib);
        hd::OutputChannels(style, inverse, half, j, &oa, &ob);
        if (small) {
          uint16_t xa = bits[ia], xb = bits[ib];
          if (x.dtype == DType::kBFloat16) {
            hd::RotateHalfPair<true>(&xa, &xb, cf[j], t_hi[j], t_lo[j], c[j], s[j]);
          } else {
            hd::RotateHalfPair<false>(&xa, &xb, cf[j], t_hi[j], t_lo[j], c[j], s[j]);
          }
          x16[oa] = xa;
          x16[ob] = xb;
          continue;
        }
        T xa = buf[ia], xb = buf[ib];
        hd::RotatePair<T>(&xa, &xb, c[j], s[j]);
        StoreHd(x.data, x.dtype, row + oa, static_cast<double>(xa));
        StoreHd(x.data, x.dtype, row + ob, static_cast<double>(xb));
      }
    }
  }
}

class CudaMathHostBackend final : public Backend {
 public:
  explicit CudaMathHostBackend(std::unique_ptr<Backend> cpu) : cpu_(std::move(cpu)) {}
  absl::string_view name() const override { return "cuda-math-host"; }
  std::string detail() const override { return "the CUDA kernels' math on the host"; }

  // absolute/cuda.cu's AddPositionEncodingKernel, element by element (the whole row of x is
  // read first: y may alias x).
  template <typename T>
  static void AddT(const AddPositionEncodingPlan& plan, const ResolvedPositions& positions,
                   const TensorView& y) {
    const AddPositionEncodingParams& params = plan.params;
    const cpu::SplitFrequencies w(plan.frequencies);
    const T scale = static_cast<T>(params.scale);
    const bool concat = params.combine == Combine::kConcat;
    std::vector<T> xs(plan.dim);
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      for (int64_t c = 0; c < plan.dim; ++c) {
        xs[c] = static_cast<T>(LoadHd(plan.x.data, plan.x.dtype, t * plan.dim + c)) * scale;
      }
      for (int64_t col = 0; col < plan.out_dim; ++col) {
        const bool x_col = col < plan.dim;
        const int64_t pe_col = concat ? col - plan.dim : col;
        T pe = 0;
        if (positions.IsValid(t) && (!concat || !x_col)) {
          if (params.sinusoidal) {
            pe = hd::SinusoidValue<T>(static_cast<int>(params.sinusoidal->layout), plan.pe_dim,
                                      static_cast<int64_t>(plan.frequencies.size()), pe_col,
                                      static_cast<double>(positions.At(t) + plan.shift),
                                      w.hi.data(), w.lo.data());
          } else {
            pe = static_cast<T>(
                LoadAsDouble(params.learned.data, params.learned.dtype,
                             (positions.At(t) + params.table_offset) * plan.pe_dim + pe_col));
          }
        }
        const T v = x_col ? (concat ? xs[col] : xs[col] + pe) : pe;
        StoreHd(y.data, y.dtype, t * plan.out_dim + col, static_cast<double>(v));
      }
    }
  }

  absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                          const TensorView& table) const override {
    // absolute/cuda.cu's SinusoidalKernel: per frequency slot (SinusoidSlotColumns) the walk of
    // K = 16 tokens (AngleWalk, short-polynomial anchors), FLOAT64 exact per entry (full
    // polynomial); each value rounded once from double.
    const std::vector<long double>& exact = plan.frequencies;
    const cpu::SplitFrequencies w(exact);
    const int64_t dim = plan.params.dim, nfreq = static_cast<int64_t>(exact.size());
    const int layout = static_cast<int>(plan.params.layout);
    const bool f64 = table.dtype == DType::kFloat64;
    const int64_t walk = f64 ? 1 : 16;
    for (int64_t t0 = 0; t0 < positions.num_tokens; t0 += walk) {
      const int64_t t1 = std::min(t0 + walk, positions.num_tokens);
      for (int64_t j = 0; j < (dim + 1) / 2; ++j) {
        int64_t sc, cc;
        const bool live = hd::SinusoidSlotColumns(layout, dim, nfreq, j, &sc, &cc);
        const double w_hi = live ? w.hi[j] : 0.0, w_lo = live ? w.lo[j] : 0.0;
        hd::AngleWalk<int64_t> a = f64 ? hd::StartAngleWalk<false, int64_t>(w_hi, w_lo)
                                       : hd::StartAngleWalk<true, int64_t>(w_hi, w_lo);
        for (int64_t t = t0; t < t1; ++t) {
          double sv = 0, cv = 0;
          if (live && positions.IsValid(t)) {
            const int64_t p = positions.At(t);
            if (f64) {
              hd::AngleWalkTo<true, false>(&a, p);
            } else {
              hd::AngleWalkTo<false, true>(&a, p);
            }
            sv = a.s;
            cv = a.c;
          }
          StoreHd(table.data, table.dtype, t * dim + sc, sv);
          if (cc >= 0) StoreHd(table.data, table.dtype, t * dim + cc, cv);
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                   const ResolvedPositions& positions,
                                   const TensorView& y) const override {
    if (plan.x.dtype == DType::kFloat32) {
      AddT<float>(plan, positions, y);
    } else {
      AddT<double>(plan, positions, y);
    }
    return absl::OkStatus();
  }
  absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& cos,
                         const TensorView& sin) const override {
    // rope/cuda.cu's RopeCacheKernel: FLOAT64 exact per entry; the others walk K = 8 tokens per
    // frequency (AngleWalk: short-polynomial anchors, RopeAngleStep for p == prev + 1, the same
    // value for p == prev).
    const Angles a(plan.config, freqs, positions);
    const int64_t half = static_cast<int64_t>(a.w.hi.size());
    const bool f64 = cos.dtype == DType::kFloat64;
    const int64_t walk = f64 ? 1 : 8;
    for (int64_t t0 = 0; t0 < positions.num_tokens; t0 += walk) {
      const int64_t t1 = std::min(t0 + walk, positions.num_tokens);
      for (int64_t j = 0; j < half; ++j) {
        hd::AngleWalk<double> w = f64 ? hd::StartAngleWalk<false, double>(a.w.hi[j], a.w.lo[j])
                                      : hd::StartAngleWalk<true, double>(a.w.hi[j], a.w.lo[j]);
        for (int64_t t = t0; t < t1; ++t) {
          const double p = a.pos[t] < 0 ? 0.0 : a.Position(t, j);
          if (f64) {
            hd::AngleWalkTo<true, false>(&w, p);
          } else {
            hd::AngleWalkTo<false, true>(&w, p);
          }
          double cv = w.c * a.scale, sv = w.s * (a.sign * a.scale);
          if (cos.dtype == DType::kFloat32) {  // rounded to float first, as the kernel
            cv = static_cast<float>(cv);
            sv = static_cast<float>(sv);
          }
          int64_t c0, c1;
          const int n = hd::CacheColumns(static_cast<int>(plan.layout), half, j, &c0, &c1);
          for (int64_t col : {c0, c1}) {
            StoreHd(cos.data, cos.dtype, t * plan.width + col, cv);
            StoreHd(sin.data, sin.dtype, t * plan.width + col, sv);
            if (n == 1) break;
          }
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& q,
                         const TensorView& k) const override {
    const Angles a(plan.config, freqs, positions, plan.seq);
    if (plan.dtype == DType::kFloat32) {
      ApplyRopeT<float>(plan, a, q, k);
    } else {
      ApplyRopeT<double>(plan, a, q, k);
    }
    return absl::OkStatus();
  }
  absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                         const TensorView& bias) const override {
    const AlibiBiasParams& p = plan.params;
    const int future = static_cast<int>(p.future);
    if (p.mode == AlibiMode::kBloom) {
      const int64_t q = p.form == BiasForm::kCompact ? 1 : p.q_len;
      std::vector<double> kpos(p.k_len);
      int64_t idx = 0;
      for (int64_t b = 0; b < plan.batch; ++b) {
        plan.KeyPositions(b, kpos.data());
        for (int64_t h = 0; h < p.num_heads; ++h) {
          for (int64_t i = 0; i < q; ++i) {
            const int64_t keep = p.form == BiasForm::kCompact
                                     ? p.k_len
                                     : hd::BloomKeep(plan.query_offset, i, p.k_len, future);
            for (int64_t j = 0; j < p.k_len; ++j) {
              const double fill = future == 0 ? -std::numeric_limits<double>::infinity() : 0.0;
              StoreHd(bias.data, bias.dtype, idx++, j < keep ? slopes[h] * kpos[j] : fill);
            }
          }
        }
      }
      return absl::OkStatus();
    }
    WriteBiasFromGenerators(bias, p.form == BiasForm::kCompact, p.num_heads, p.q_len, p.k_len,
                            [&](int64_t h, int64_t t) {
                              return hd::AlibiToeplitzValue(slopes[h], plan.query_offset, p.q_len,
                                                            t, static_cast<int>(p.mode), future);
                            });
    return absl::OkStatus();
  }
  absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const override {
    const RelativeBiasParams& p = plan.params;
    const int64_t gen_len = p.q_len + p.k_len - 1;
    std::vector<int32_t> buckets(gen_len);
    for (int64_t t = 0; t < gen_len; ++t) {
      buckets[t] = static_cast<int32_t>(plan.Bucket(0, t - (p.q_len - 1)));
    }
    if (p.form == BiasForm::kBuckets) {
      ExpandToeplitz(buckets.data(), 1, p.q_len, p.k_len, 4, bias.data);
      return absl::OkStatus();
    }
    WriteBiasFromGenerators(bias, p.form == BiasForm::kCompact, plan.heads, p.q_len, p.k_len,
                            [&](int64_t h, int64_t t) {
                              return LoadAsDouble(p.table.data, p.table.dtype,
                                                  buckets[t] * plan.heads + h);
                            });
    return absl::OkStatus();
  }
  absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                 const TensorView& embeddings) const override {
    const RelativeEmbeddingParams& p = plan.params;
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t j = 0; j < p.k_len; ++j) {
        const int64_t row =
            hd::RelativeEmbeddingRow(plan.query_offset, p.key_offset, p.max_relative, i, j);
        for (int64_t c = 0; c < plan.dim; ++c) {
          StoreHd(embeddings.data, embeddings.dtype, (i * p.k_len + j) * plan.dim + c,
                  LoadAsDouble(p.table.data, p.table.dtype, row * plan.dim + c));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace

std::unique_ptr<kernels::Backend> MakeCudaMathHostBackend() {
  auto cpu = kernels::MakeCpuBackend(kernels::CpuBackendOptions{1, ""});
  return std::make_unique<CudaMathHostBackend>(std::move(*cpu));
}

std::vector<std::unique_ptr<Backend>> EveryTestBackend() {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(MakeReferenceBackend());
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    auto b = MakeCpuBackend(CpuBackendOptions{1, isa});
    if (b.ok()) out.push_back(std::move(*b));
  }
  out.push_back(MakeCudaMathHostBackend());
  if (!ListCudaDevices().empty()) {
    auto b = MakeCudaBackend({}, *MakeCpuBackend(CpuBackendOptions{1, ""}));
    if (b.ok()) out.push_back(std::move(*b));
  }
  return out;
}

}  // namespace posenc::testing
