// The CPU implementation of RopeCache and ApplyRope (see cpu/cpu.h; the rotation loops are in
// rope/apply_rope_simd.cc).
#include "kernels/cpu/cpu.h"

#include <algorithm>
#include <cstring>
#include <optional>
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

// The cos/sin of token t (padding: position 0) times the factors into c and s, from SinCos (the
// tables that do not walk: FLOAT64, M-RoPE).
template <typename T>
void TokenCosSin(const CpuContext& cpu, const RopeConfig& config, const RopeFrequencies& freqs,
                 const SplitFrequencies& w, const CosSinFactors& f,
                 const ResolvedPositions& positions, int64_t t, std::vector<double>* pbuf, T* c,
                 T* s) {
  const int64_t half = freqs.rotary_dim / 2;
  int64_t stride;
  const double* p = TokenPositions(config, positions, t, half, pbuf->data(), &stride);
  SinCos<T>(cpu.simd, p, stride, w, freqs.inv_freq, half, f.scale, f.sign, c, s);
}

// Where the walker writes a RopeCache row of `layout` (row 0 of cos at c, of sin at s).
TableRows CacheRows(RopeCacheLayout layout, int64_t half, int64_t width, float* c, float* s,
                    bool stream = false) {
  TableRows rows;
  rows.stream = stream;
  rows.form = layout == RopeCacheLayout::kGptj ? RowForm::kPairs : RowForm::kSplit;
  rows.c = c;
  rows.s = s;
  rows.row_stride = width;
  rows.dup = layout == RopeCacheLayout::kNeox ? half : 0;
  return rows;
}

// One RopeCache row of cos and of sin in `layout` from the frequencies' values c, s (half each;
// for COMPACT and NEOX they may already be the row's start, cr and sr): COMPACT as they are, NEOX
// twice over, GPT-J each value twice.
template <typename T>
void PlaceCacheRow(RopeCacheLayout layout, int64_t half, const T* c, const T* s, T* cr, T* sr) {
  if (layout == RopeCacheLayout::kGptj) {
    for (int64_t j = 0; j < half; ++j) {
      cr[2 * j] = cr[2 * j + 1] = c[j];
      sr[2 * j] = sr[2 * j + 1] = s[j];
    }
    return;
  }
  if (c != cr) {
    std::copy(c, c + half, cr);
    std::copy(s, s + half, sr);
  }
  if (layout == RopeCacheLayout::kNeox) {
    std::copy(c, c + half, cr + half);
    std::copy(s, s + half, sr + half);
  }
}

// The FLOAT32 rows of tokens [t0, t1) walked straight into the tables, whatever their size:
// 131072 x 128 went from 0.42-0.46 of fill (8 KiB blocks streamed out, as RopeCacheT's other
// tables are) to 0.76-0.79 (BENCHMARKS.md, branch tables). Tables of kStreamMinBytes and more are
// streamed (`stream`), whole lines from the walk's registers or from its tiles staged in L1
// (TableRows::stream; the FenceStreams orders them before the worker's chunk is done).
void WalkCacheRowsInPlace(const CpuContext& cpu, const RopeCachePlan& plan, int64_t half,
                          const ResolvedPositions& positions, int64_t t0, int64_t t1,
                          double c_scale, double s_scale, bool stream, AngleWalker* walker,
                          const TensorView& cos, const TensorView& sin) {
  const int64_t width = plan.width;
  const FenceStreams fence(cpu.simd);
  auto* co = static_cast<float*>(cos.data);
  auto* so = static_cast<float*>(sin.data);
  ForEachRun<true>(positions, t0, t1, [&](int64_t t, double p, int64_t m) {
    walker->Rows(p, m, c_scale, s_scale,
                 CacheRows(plan.layout, half, width, co + t * width, so + t * width, stream));
  });
}

template <typename T>
absl::Status RopeCacheT(const CpuContext& cpu, const RopeCachePlan& plan,
                        const RopeFrequencies& freqs, const ResolvedPositions& positions,
                        const TensorView& cos, const TensorView& sin) {
  const int64_t half = freqs.rotary_dim / 2;
  const int64_t width = plan.width;
  const RopeCacheLayout layout = plan.layout;
  const SplitFrequencies w(freqs.inv_freq);
  const CosSinFactors f(plan.config, freqs);
  // FLOAT32-computed tables (FLOAT32/FLOAT16/BFLOAT16) of one position per token walk
  // (AngleWalker: runs of consecutive positions, rows by angle addition from exact anchors).
  constexpr bool kFloat = std::is_same_v<T, float>;
  const bool walk = kFloat && plan.config.mrope_section.empty();
  const bool f32 = kFloat && cos.dtype == DType::kFloat32;
  const int64_t row_bytes = width * DTypeSize(cos.dtype);
  const int64_t total_bytes = 2 * positions.num_tokens * row_bytes;
  // Walked FLOAT32 tables straight into their rows (WalkCacheRowsInPlace). The others are placed
  // in blocks of kTableBlockBytes per table, each block stored in one piece: FLOAT32 blocks
  // (M-RoPE) copied out whole (streamed when the tables are large; a block of rows, not each row,
  // so that few of the lines are partly written with plain stores: streamed rows of 512 bytes at
  // the buffer's 16-byte offset had made 131072 x 128 2x slower than plain stores), the others
  // converted.
  const bool direct = walk && f32;
  const int64_t block_rows =
      std::max<int64_t>(1, kTableBlockBytes / (width * static_cast<int64_t>(sizeof(T))));
  const CopyFn copy = OutputCopy(cpu.simd, total_bytes);
  const double c_scale = f.scale, s_scale = f.sign * f.scale;
  return cpu.pool.ParallelFor(positions.num_tokens, Grain(2 * width), [&](int64_t t0, int64_t t1) {
    std::optional<AngleWalker> walker;
    if (walk) walker.emplace(cpu.simd, w, freqs.inv_freq, half);
    if constexpr (kFloat) {
      if (direct) {
        WalkCacheRowsInPlace(cpu, plan, half, positions, t0, t1, c_scale, s_scale,
                             total_bytes >= kStreamMinBytes, &*walker, cos, sin);
        return;
      }
    }
    const FenceStreams fence(cpu.simd);
    std::vector<T> c(static_cast<size_t>(half)), s(c.size());
    std::vector<T> cb(static_cast<size_t>(block_rows * width)), sb(cb.size());
    std::vector<double> pbuf(static_cast<size_t>(half) + 1);
    for (int64_t b0 = t0; b0 < t1; b0 += block_rows) {
      const int64_t b1 = std::min(t1, b0 + block_rows);
      if constexpr (kFloat) {
        if (walk) {
          ForEachRun<true>(positions, b0, b1, [&](int64_t t, double p, int64_t m) {
            walker->Rows(
                p, m, c_scale, s_scale,
                CacheRows(layout, half, width, &cb[(t - b0) * width], &sb[(t - b0) * width]));
          });
        }
      }
      if (!walk) {
        for (int64_t t = b0; t < b1; ++t) {
          // COMPACT and NEOX rows take the values where they go; GPT-J's are spread from c, s.
          T* cr = &cb[(t - b0) * width];
          T* sr = &sb[(t - b0) * width];
          const bool gptj = layout == RopeCacheLayout::kGptj;
          TokenCosSin<T>(cpu, plan.config, freqs, w, f, positions, t, &pbuf, gptj ? c.data() : cr,
                         gptj ? s.data() : sr);
          PlaceCacheRow<T>(layout, half, gptj ? c.data() : cr, gptj ? s.data() : sr, cr, sr);
        }
      }
      const int64_t n = (b1 - b0) * width;
      if (f32) {
        copy(static_cast<unsigned char*>(cos.data) + b0 * row_bytes, cb.data(),
             n * static_cast<int64_t>(sizeof(T)));
        copy(static_cast<unsigned char*>(sin.data) + b0 * row_bytes, sb.data(),
             n * static_cast<int64_t>(sizeof(T)));
        continue;
      }
      StoreRow<T>(cpu.simd, cb.data(), cos.data, cos.dtype, b0 * width, n);
      StoreRow<T>(cpu.simd, sb.data(), sin.data, sin.dtype, b0 * width, n);
    }
  });
}

// Tokens whose angles are computed together before their rows are rotated (BHSD: head by head,
// kChunkTokens rows in a run).
constexpr int64_t kChunkTokens = 128;

// The angles of up to kChunkTokens tokens, token i's pair j at entry i*half + j: cos/sin in the
// compute type T and, for FLOAT16/BFLOAT16 on the vector levels, their float factors.
template <typename T>
struct ChunkAngles {
  std::vector<T> c, s;
  std::vector<float> cf, t_hi, t_lo;
  // Angles of up to `tokens` tokens (at most kChunkTokens): a call on a few tokens (a decode
  // step, a piece of a received message) clears no more than it uses.
  ChunkAngles(int64_t tokens, int64_t half, bool factors)
      : c(static_cast<size_t>(std::min(tokens, kChunkTokens) * half)),
        s(c.size()),
        cf(factors ? c.size() : 0),
        t_hi(cf.size()),
        t_lo(cf.size()) {}
};

// Rotates `rows` (RopeRows, x set) of dtype x.dtype with the angles from entry `at` on.
template <typename T>
void RotateRows(const SimdKernels& simd, DType dtype, const RopeRows& rows, const ChunkAngles<T>& g,
                int64_t at) {
  if constexpr (std::is_same_v<T, float>) {
    simd.apply_rope_f32(rows, g.c.data() + at, g.s.data() + at);
  } else if (dtype == DType::kFloat64) {
    simd.apply_rope_f64(rows, g.c.data() + at, g.s.data() + at);
  } else {
    const bool factors = !g.cf.empty();
    const HalfRopeFactors f{g.c.data() + at, g.s.data() + at, factors ? g.cf.data() + at : nullptr,
                            factors ? g.t_hi.data() + at : nullptr,
                            factors ? g.t_lo.data() + at : nullptr};
    (dtype == DType::kFloat16 ? simd.apply_rope_f16 : simd.apply_rope_bf16)(rows, f);
  }
}

// Heads rotated together in BHSD, each token's angles loaded once for all of them
// (RopeRows::group). [1,4096,32,128] FLOAT16 on one thread, a model of the loop: 12 GB/s head by
// head, 19 with groups of 2, 29 with 4 and 27 with 8 (token-major BSHD: 35).
constexpr int64_t kHeadGroup = 4;

// Rotates the `heads` rows of tokens [u0, u1) of x (strides `st`) with the chunk's angles (token
// u0 first). Token-major layouts (BSHD, THD: a token's heads together) go token by token, every
// head of a token sharing its angles; BHSD goes kHeadGroup heads at a time over runs of
// consecutive tokens of one sequence, whose rows are adjacent in memory.
template <typename T>
void RotateChunk(const SimdKernels& simd, const ApplyRopePlan& plan,
                 const ResolvedPositions& positions, const TensorView& x, const HeadStrides& st,
                 int64_t heads, int64_t u0, int64_t u1, const ChunkAngles<T>& g, RopeRows rows,
                 std::vector<unsigned char>* scratch) {
  const int64_t half = rows.half, esize = DTypeSize(x.dtype);
  auto* bytes = static_cast<unsigned char*>(x.data);
  const bool token_major = st.head <= st.seq || u1 - u0 == 1;
  const int64_t max_rows = token_major ? heads : u1 - u0;
  if (rows.gptj_in != rows.gptj_out) {
    scratch->resize(static_cast<size_t>(max_rows * 2 * half * esize));
    rows.scratch = scratch->data();
  }
  if (token_major) {
    rows.rows = heads;
    rows.row_stride = st.head;
    rows.table_stride = 0;
    for (int64_t t = u0; t < u1; ++t) {
      if (!positions.IsValid(t)) continue;  // padding passes through unchanged
      rows.x = bytes + ApplyRopePlan::TokenBase(st, plan.seq, t) * esize;
      RotateRows<T>(simd, x.dtype, rows, g, (t - u0) * half);
    }
    return;
  }
  rows.row_stride = st.seq;
  rows.table_stride = half;
  rows.group_stride = st.head;
  // kHeadGroup heads at once are as many streams, which the processor's own prefetchers follow:
  // asking ahead as well only cost there (BHSD on two threads: 0.82x).
  rows.prefetch = false;
  for (int64_t h = 0; h < heads; h += kHeadGroup) {
    rows.group = std::min(kHeadGroup, heads - h);
    for (int64_t t = u0; t < u1;) {
      if (!positions.IsValid(t)) {
        ++t;
        continue;
      }
      int64_t e = t + 1;
      while (e < u1 && positions.IsValid(e) && e / plan.seq == t / plan.seq) ++e;
      rows.x = bytes + (ApplyRopePlan::TokenBase(st, plan.seq, t) + h * st.head) * esize;
      rows.rows = e - t;
      RotateRows<T>(simd, x.dtype, rows, g, (t - u0) * half);
      t = e;
    }
  }
}

// From this many bytes of q and k on, the rows are asked for ahead of the rotation
// (RopeRows::prefetch): those tensors are not in the caches, while a smaller call's (a decode
// step's 1-2 MiB) usually are, where the prefetches only cost (decode on two threads: 8 % slower
// with them).
constexpr int64_t kPrefetchFromBytes = int64_t{4} << 20;

template <typename T>
absl::Status ApplyRopeT(const CpuContext& cpu, const ApplyRopePlan& plan,
                        const RopeFrequencies& freqs, const ResolvedPositions& positions,
                        const TensorView& q, const TensorView& k) {
  const int64_t half = freqs.rotary_dim / 2;
  const SplitFrequencies w(freqs.inv_freq);
  const CosSinFactors f(plan.config, freqs);
  const RopeStyle style = plan.config.style;
  const bool deepseek = style == RopeStyle::kDeepseek, inverse = plan.config.inverse;
  RopeRows rows;
  rows.half = half;
  // DEEPSEEK reads GPT-J pairs and writes them at NEOX places (inverse: the other way round).
  rows.gptj_in = style == RopeStyle::kGptj || (deepseek && !inverse);
  rows.gptj_out = style == RopeStyle::kGptj || (deepseek && inverse);
  const bool small = plan.dtype == DType::kFloat16 || plan.dtype == DType::kBFloat16;
  auto* const factors = small ? cpu.simd.half_rotation_factors : nullptr;
  // Angles once per token, shared by all heads of q and k.
  const int64_t per_token = (plan.q_heads + plan.k_heads) * plan.head_dim;
  rows.prefetch = per_token * plan.tokens * DTypeSize(plan.dtype) >= kPrefetchFromBytes;
  return cpu.pool.ParallelFor(plan.tokens, Grain(per_token), [&](int64_t t0, int64_t t1) {
    ChunkAngles<T> g(t1 - t0, half, factors != nullptr);
    std::vector<double> pbuf(static_cast<size_t>(half) + 1);
    std::vector<unsigned char> scratch;
    for (int64_t u0 = t0; u0 < t1; u0 += kChunkTokens) {
      const int64_t u1 = std::min(u0 + kChunkTokens, t1);
      for (int64_t t = u0; t < u1; ++t) {
        if (!positions.IsValid(t)) continue;
        const int64_t at = (t - u0) * half;
        int64_t stride;
        const double* p = TokenPositions(plan.config, positions, t, half, pbuf.data(), &stride);
        SinCos<T>(cpu.simd, p, stride, w, freqs.inv_freq, half, f.scale, f.sign, &g.c[at],
                  &g.s[at]);
        if constexpr (std::is_same_v<T, double>) {
          if (factors) factors(&g.c[at], &g.s[at], half, &g.cf[at], &g.t_hi[at], &g.t_lo[at]);
        }
      }
      RotateChunk<T>(cpu.simd, plan, positions, q, plan.q_strides, plan.q_heads, u0, u1, g, rows,
                     &scratch);
      if (plan.has_k()) {
        RotateChunk<T>(cpu.simd, plan, positions, k, plan.k_strides, plan.k_heads, u0, u1, g, rows,
                       &scratch);
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
  // FLOAT32 rotates in fp32, FLOAT64 in double; FLOAT16 and BFLOAT16 take their angles in double
  // and rotate as simd_kernels.h's apply_rope_f16 says (DEEPSEEK's order in the same loops).
  return WithComputeType(
      plan.dtype, [&]<typename T>() { return ApplyRopeT<T>(cpu, plan, freqs, positions, q, k); });
}

}  // namespace posenc::kernels::cpu
