// The CPU implementation of Sinusoidal and AddPositionEncoding (see cpu/cpu.h).
#include "kernels/cpu/cpu.h"

#include <algorithm>
#include <optional>
#include <type_traits>
#include <vector>

namespace posenc::kernels::cpu {
namespace {

// Writes one sinusoidal row (layout of sinusoidal.h) from the cos/sin of its frequencies.
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

// The rows of tokens [t0, t1) of an even-D table computed in float, walked (AngleWalker): a
// FLOAT32 table straight into the output (8192 x 1024: 0.91-0.95 of fill with angle_rows'
// register-tiled rows, against 0.32-0.39 for blocks computed, then streamed out; BENCHMARKS.md,
// branches tables and sin), its rows streamed from the registers where the table is large
// (TableRows::stream; "Streamed table rows"), FLOAT16 / BFLOAT16 into blocks of kTableBlockBytes,
// converted. Padding rows are zero.
void WalkSinusoidalRows(const CpuContext& cpu, const SinusoidalPlan& plan,
                        const SplitFrequencies& w, const ResolvedPositions& positions,
                        const TensorView& out, int64_t t0, int64_t t1) {
  const int64_t dim = plan.params.dim, half = dim / 2;
  const bool interleaved = plan.params.layout == SinusoidalLayout::kInterleaved;
  AngleWalker walker(cpu.simd, w, plan.frequencies, half);
  const bool stream =
      out.dtype == DType::kFloat32 && positions.num_tokens * dim * int64_t{4} >= kStreamMinBytes;
  // Rows of tokens [u0, u1) from `base` on (token u0's row).
  const auto walk = [&](float* base, int64_t u0, int64_t u1) {
    ForEachRun<false>(positions, u0, u1, [&](int64_t t, double p, int64_t m) {
      float* row = base + (t - u0) * dim;
      if (p < 0) {
        std::fill(row, row + m * dim, 0.0f);
        return;
      }
      TableRows rows;
      rows.form = interleaved ? RowForm::kInterleaved : RowForm::kSplit;
      rows.s = row;
      rows.c = interleaved ? row : row + half;
      rows.row_stride = dim;
      rows.stream = stream;
      walker.Rows(p, m, 1.0, 1.0, rows);
    });
  };
  if (out.dtype == DType::kFloat32) {
    const FenceStreams fence(cpu.simd);
    walk(static_cast<float*>(out.data) + t0 * dim, t0, t1);
    return;
  }
  const FenceStreams fence(cpu.simd);
  const int64_t block_rows =
      std::max<int64_t>(1, kTableBlockBytes / (dim * static_cast<int64_t>(sizeof(float))));
  std::vector<float> block(static_cast<size_t>(block_rows * dim));
  for (int64_t b0 = t0; b0 < t1; b0 += block_rows) {
    const int64_t b1 = std::min(t1, b0 + block_rows);
    walk(block.data(), b0, b1);
    StoreRow<float>(cpu.simd, block.data(), out.data, out.dtype, b0 * dim, (b1 - b0) * dim);
  }
}

template <typename T>
absl::Status SinusoidalT(const CpuContext& cpu, const SinusoidalPlan& plan,
                         const ResolvedPositions& positions, const TensorView& out) {
  const SinusoidalParams& params = plan.params;
  const std::vector<long double>& exact = plan.frequencies;
  const SplitFrequencies w(exact);
  const int64_t nfreq = static_cast<int64_t>(exact.size());
  const int64_t dim = params.dim;
  const int64_t row_bytes = dim * DTypeSize(out.dtype);
  constexpr bool kFloat = std::is_same_v<T, float>;
  const bool f32 = kFloat && out.dtype == DType::kFloat32;
  // FLOAT32-computed tables of an even D walk (WalkSinusoidalRows). Odd D (and FLOAT64) place
  // each row from its cos/sin (PlaceSinusoidal), FLOAT32 rows copied out whole (streamed when the
  // table is large).
  const bool rows_walk = kFloat && dim % 2 == 0;
  const CopyFn copy = OutputCopy(cpu.simd, positions.num_tokens * row_bytes);
  return cpu.pool.ParallelFor(positions.num_tokens, Grain(dim), [&](int64_t t0, int64_t t1) {
    if (rows_walk) {
      WalkSinusoidalRows(cpu, plan, w, positions, out, t0, t1);
      return;
    }
    const FenceStreams fence(cpu.simd);
    std::vector<T> c(static_cast<size_t>(nfreq + 1)), s(c.size()), row(static_cast<size_t>(dim));
    std::optional<AngleWalker> walker;
    if constexpr (kFloat) walker.emplace(cpu.simd, w, exact, nfreq);
    for (int64_t t = t0; t < t1; ++t) {
      if (!positions.IsValid(t)) {
        std::fill(row.begin(), row.end(), T(0));
      } else {
        const double p = static_cast<double>(positions.At(t));
        if constexpr (kFloat) {
          TableRows one;
          one.c = c.data();
          one.s = s.data();
          walker->Rows(p, 1, 1.0, 1.0, one);
        } else {
          SinCos<T>(cpu.simd, &p, 0, w, exact, nfreq, 1.0, 1.0, c.data(), s.data());
        }
        PlaceSinusoidal<T>(params, nfreq, c.data(), s.data(), row.data());
      }
      if (f32) {
        copy(static_cast<unsigned char*>(out.data) + t * row_bytes, row.data(), row_bytes);
      } else {
        StoreRow<T>(cpu.simd, row.data(), out.data, out.dtype, t * dim, dim);
      }
    }
  });
}

template <typename T>
absl::Status AddT(const CpuContext& cpu, const AddPositionEncodingPlan& plan,
                  const ResolvedPositions& positions, const TensorView& y) {
  const AddPositionEncodingParams& params = plan.params;
  const ConstTensorView& x = plan.x;
  const int64_t dim = plan.dim, out_dim = plan.out_dim, pe_dim = plan.pe_dim;
  const std::vector<long double>& exact = plan.frequencies;
  const SplitFrequencies w(exact);
  const int64_t nfreq = static_cast<int64_t>(exact.size());
  const T scale = static_cast<T>(params.scale);
  return cpu.pool.ParallelFor(positions.num_tokens, Grain(out_dim), [&](int64_t t0, int64_t t1) {
    std::vector<T> c(static_cast<size_t>(nfreq + 1)), s(c.size());
    std::vector<T> pe(static_cast<size_t>(pe_dim)), xs(static_cast<size_t>(dim));
    for (int64_t t = t0; t < t1; ++t) {
      if (!positions.IsValid(t)) {
        std::fill(pe.begin(), pe.end(), T(0));
      } else if (params.sinusoidal) {
        const double p = static_cast<double>(positions.At(t) + plan.shift);
        SinCos<T>(cpu.simd, &p, 0, w, exact, nfreq, 1.0, 1.0, c.data(), s.data());
        PlaceSinusoidal<T>(*params.sinusoidal, nfreq, c.data(), s.data(), pe.data());
      } else {
        LoadRow<T>(cpu.simd, params.learned.data, params.learned.dtype,
                   (positions.At(t) + params.table_offset) * pe_dim, pe_dim, pe.data());
      }
      LoadRow<T>(cpu.simd, x.data, x.dtype, t * dim, dim, xs.data());
      if (params.combine == Combine::kAdd) {
        for (int64_t i = 0; i < dim; ++i) xs[i] = xs[i] * scale + pe[i];
        StoreRow<T>(cpu.simd, xs.data(), y.data, y.dtype, t * dim, dim);
      } else {
        for (int64_t i = 0; i < dim; ++i) xs[i] = xs[i] * scale;
        StoreRow<T>(cpu.simd, xs.data(), y.data, y.dtype, t * out_dim, dim);
        StoreRow<T>(cpu.simd, pe.data(), y.data, y.dtype, t * out_dim + dim, pe_dim);
      }
    }
  });
}

}  // namespace

absl::Status Sinusoidal(const CpuContext& cpu, const SinusoidalPlan& plan,
                        const ResolvedPositions& positions, const TensorView& table) {
  // Tables are computed in float for FLOAT32 (and FLOAT16/BFLOAT16, rounding once from the
  // exact-phase float sin/cos), in double for FLOAT64.
  if (table.dtype == DType::kFloat64) return SinusoidalT<double>(cpu, plan, positions, table);
  return SinusoidalT<float>(cpu, plan, positions, table);
}

absl::Status AddPositionEncoding(const CpuContext& cpu, const AddPositionEncodingPlan& plan,
                                 const ResolvedPositions& positions, const TensorView& y) {
  // x*scale + PE can cancel: only FLOAT32 computes in fp32, the others in double.
  return WithComputeType(plan.x.dtype,
                         [&]<typename T>() { return AddT<T>(cpu, plan, positions, y); });
}

}  // namespace posenc::kernels::cpu
