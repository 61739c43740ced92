// The reference implementation of Sinusoidal and AddPositionEncoding (see reference/reference.h).
#include "kernels/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace posenc::kernels::reference {
namespace {

// One row of a sinusoidal table for position p (columns as documented in sinusoidal.h).
void SinusoidalRow(const SinusoidalParams& params, const std::vector<long double>& omega, int64_t p,
                   double* row) {
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

}  // namespace

absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                        const TensorView& table) {
  const SinusoidalParams& params = plan.params;
  const std::vector<long double>& omega = plan.frequencies;
  std::vector<double> row(static_cast<size_t>(params.dim));
  for (int64_t t = 0; t < positions.num_tokens; ++t) {
    if (positions.IsValid(t)) {
      SinusoidalRow(params, omega, positions.At(t), row.data());
    } else {
      std::fill(row.begin(), row.end(), 0.0);
    }
    for (int64_t c = 0; c < params.dim; ++c) {
      StoreFromDouble(table.data, table.dtype, t * params.dim + c, row[c]);
    }
  }
  return absl::OkStatus();
}

absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                 const ResolvedPositions& positions, const TensorView& y) {
  const AddPositionEncodingParams& params = plan.params;
  const ConstTensorView& x = plan.x;
  const int64_t dim = plan.dim, out_dim = plan.out_dim, pe_dim = plan.pe_dim;
  const std::vector<long double>& omega = plan.frequencies;
  std::vector<double> pe(static_cast<size_t>(pe_dim));
  std::vector<double> xs(static_cast<size_t>(dim));
  for (int64_t t = 0; t < positions.num_tokens; ++t) {
    if (!positions.IsValid(t)) {
      std::fill(pe.begin(), pe.end(), 0.0);
    } else if (params.sinusoidal) {
      SinusoidalRow(*params.sinusoidal, omega, positions.At(t) + plan.shift, pe.data());
    } else {
      const int64_t row = positions.At(t) + params.table_offset;
      for (int64_t c = 0; c < pe_dim; ++c) {
        pe[c] = LoadAsDouble(params.learned.data, params.learned.dtype, row * pe_dim + c);
      }
    }
    // Read the whole row first: y may alias x.
    for (int64_t c = 0; c < dim; ++c) {
      xs[c] = LoadAsDouble(x.data, x.dtype, t * dim + c) * params.scale;
    }
    if (params.combine == Combine::kAdd) {
      for (int64_t c = 0; c < dim; ++c)
        StoreFromDouble(y.data, y.dtype, t * dim + c, xs[c] + pe[c]);
    } else {
      for (int64_t c = 0; c < dim; ++c) StoreFromDouble(y.data, y.dtype, t * out_dim + c, xs[c]);
      for (int64_t c = 0; c < pe_dim; ++c) {
        StoreFromDouble(y.data, y.dtype, t * out_dim + dim + c, pe[c]);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc::kernels::reference
