// The CPU implementation of AlibiBias, RelativeBias and RelativeEmbedding (see cpu/cpu.h):
// one generator row per head (Toeplitz) or per (batch, head) (BLOOM), then every output row is
// one contiguous copy.
#include "kernels/cpu/cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace posenc::kernels::cpu {

absl::Status AlibiBias(const CpuContext& cpu, const AlibiBiasPlan& plan,
                       absl::Span<const double> slopes, const TensorView& out) {
  const AlibiBiasParams& p = plan.params;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t esize = DTypeSize(out.dtype);
  auto* bytes = static_cast<unsigned char*>(out.data);

  if (p.mode != AlibiMode::kBloom) {
    const int64_t gen_len = p.q_len + p.k_len - 1;
    // Toeplitz: v[t] is the bias at key - query index difference t - (q_len - 1).
    auto value = [&](double m, int64_t rel) {  // rel = j - i; qpos - kpos = qoff - rel
      const int64_t diff = plan.query_offset - rel;
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
      for (int64_t t = 0; t < gen_len; ++t) v[t] = value(slopes[h], t - (p.q_len - 1));
      StoreRow<double>(cpu.simd, v.data(), gens.data(), out.dtype, h * gen_len, gen_len);
    }
    if (p.form == BiasForm::kCompact) {
      std::memcpy(bytes, gens.data(), gens.size());
      return absl::OkStatus();
    }
    return ParallelExpandToeplitz(cpu, gens.data(), p.num_heads, p.q_len, p.k_len, esize, bytes);
  }

  // BLOOM: each (batch, head) has one row m_h * kpos; query rows differ only in where the future
  // rule starts.
  const int64_t rows_count = plan.batch * p.num_heads;
  std::vector<unsigned char> rows(static_cast<size_t>(rows_count * p.k_len * esize));
  std::vector<double> kpos(static_cast<size_t>(p.k_len)), v(kpos.size());
  for (int64_t b = 0; b < plan.batch; ++b) {
    plan.KeyPositions(b, kpos.data());
    for (int64_t h = 0; h < p.num_heads; ++h) {
      for (int64_t j = 0; j < p.k_len; ++j) v[j] = slopes[h] * kpos[j];
      StoreRow<double>(cpu.simd, v.data(), rows.data(), out.dtype, (b * p.num_heads + h) * p.k_len,
                       p.k_len);
    }
  }
  if (p.form == BiasForm::kCompact) {
    std::memcpy(bytes, rows.data(), rows.size());
    return absl::OkStatus();
  }
  std::vector<unsigned char> fill(static_cast<size_t>(p.k_len * esize));
  std::vector<double> fv(static_cast<size_t>(p.k_len), p.future == FutureMode::kMask ? -inf : 0.0);
  StoreRow<double>(cpu.simd, fv.data(), fill.data(), out.dtype, 0, p.k_len);
  const int64_t row_bytes = p.k_len * esize;
  const CopyFn copy = OutputCopy(cpu.simd, rows_count * p.q_len * row_bytes);
  return cpu.pool.ParallelFor(rows_count * p.q_len, Grain(p.k_len), [&](int64_t r0, int64_t r1) {
    const FenceStreams fence(cpu.simd);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bh = r / p.q_len, i = r % p.q_len;
      unsigned char* dst = bytes + r * row_bytes;
      const unsigned char* src = rows.data() + bh * row_bytes;
      // keys j <= qpos keep the formula; the rest follow the future rule
      const int64_t keep = p.future == FutureMode::kLinear
                               ? p.k_len
                               : std::clamp<int64_t>(plan.query_offset + i + 1, 0, p.k_len);
      copy(dst, src, keep * esize);
      copy(dst + keep * esize, fill.data(), (p.k_len - keep) * esize);
    }
  });
}

absl::Status RelativeBias(const CpuContext& cpu, const RelativeBiasPlan& plan,
                          const TensorView& out) {
  const RelativeBiasParams& p = plan.params;
  const int64_t gen_len = p.q_len + p.k_len - 1;
  std::vector<int32_t> buckets(static_cast<size_t>(gen_len));
  // Generator t is the pair (i, j) = (0, t - (q_len - 1)): the same key - query difference.
  for (int64_t t = 0; t < gen_len; ++t) {
    buckets[t] = static_cast<int32_t>(plan.Bucket(0, t - (p.q_len - 1)));
  }
  auto* bytes = static_cast<unsigned char*>(out.data);
  if (p.form == BiasForm::kBuckets) {
    return ParallelExpandToeplitz(cpu, reinterpret_cast<const unsigned char*>(buckets.data()), 1,
                                  p.q_len, p.k_len, sizeof(int32_t), bytes);
  }
  const int64_t heads = plan.heads;
  const int64_t esize = DTypeSize(out.dtype);
  std::vector<unsigned char> gens(static_cast<size_t>(heads * gen_len * esize));
  std::vector<double> v(static_cast<size_t>(gen_len));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < gen_len; ++t) {
      v[t] = LoadAsDouble(p.table.data, p.table.dtype, buckets[t] * heads + h);
    }
    StoreRow<double>(cpu.simd, v.data(), gens.data(), out.dtype, h * gen_len, gen_len);
  }
  if (p.form == BiasForm::kCompact) {
    std::memcpy(bytes, gens.data(), gens.size());
    return absl::OkStatus();
  }
  return ParallelExpandToeplitz(cpu, gens.data(), heads, p.q_len, p.k_len, esize, bytes);
}

absl::Status RelativeEmbedding(const CpuContext& cpu, const RelativeEmbeddingPlan& plan,
                               const TensorView& out) {
  const RelativeEmbeddingParams& p = plan.params;
  const int64_t dim = plan.dim;
  const int64_t rows = 2 * p.max_relative + 1;
  const int64_t row_bytes = dim * DTypeSize(out.dtype);
  // The table once in the output dtype; then every (i, j) is one row copy.
  std::vector<unsigned char> table(static_cast<size_t>(rows * row_bytes));
  std::vector<double> row(static_cast<size_t>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    LoadRow<double>(cpu.simd, p.table.data, p.table.dtype, r * dim, dim, row.data());
    StoreRow<double>(cpu.simd, row.data(), table.data(), out.dtype, r * dim, dim);
  }
  auto* bytes = static_cast<unsigned char*>(out.data);
  return cpu.pool.ParallelFor(p.q_len, Grain(p.k_len * dim), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = 0; j < p.k_len; ++j) {
        std::memcpy(bytes + (i * p.k_len + j) * row_bytes,
                    table.data() + plan.Row(i, j) * row_bytes, row_bytes);
      }
    }
  });
}

}  // namespace posenc::kernels::cpu
