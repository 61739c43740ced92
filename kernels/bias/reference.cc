// The reference implementation of AlibiBias, RelativeBias and RelativeEmbedding (see
// reference/reference.h).
#include "kernels/reference/reference.h"

#include <cmath>
#include <limits>
#include <vector>

namespace posenc::kernels::reference {

absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                       const TensorView& out) {
  const AlibiBiasParams& p = plan.params;
  const int64_t qoff = plan.query_offset;
  std::vector<double> kpos(static_cast<size_t>(p.k_len));
  // The bias between query at qpos and key index j (raw) with position kp.
  auto value = [&](double m, int64_t qpos, int64_t j, double kp) -> double {
    const bool future = j > qpos;
    if (future && p.mode != AlibiMode::kSymmetric) {
      if (p.future == FutureMode::kMask) return -std::numeric_limits<double>::infinity();
      if (p.future == FutureMode::kZero) return 0.0;
    }
    switch (p.mode) {
      case AlibiMode::kCausal: return -m * static_cast<double>(qpos - j);
      case AlibiMode::kSymmetric: return -m * std::fabs(static_cast<double>(qpos - j));
      case AlibiMode::kBloom: return m * kp;
    }
    return 0.0;
  };
  int64_t idx = 0;
  for (int64_t b = 0; b < plan.batch; ++b) {
    plan.KeyPositions(b, kpos.data());
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const double m = slopes[h];
      if (p.form == BiasForm::kCompact && p.mode == AlibiMode::kBloom) {
        for (int64_t j = 0; j < p.k_len; ++j)
          StoreFromDouble(out.data, out.dtype, idx++, m * kpos[j]);
      } else if (p.form == BiasForm::kCompact) {
        // v[t] is the bias of (i, j) with j - i = t - (q_len - 1): qpos - kpos = qoff - rel,
        // evaluated at i = 0, j = rel.
        for (int64_t t = 0; t < p.q_len + p.k_len - 1; ++t) {
          const int64_t rel = t - (p.q_len - 1);
          StoreFromDouble(out.data, out.dtype, idx++,
                          value(m, qoff, rel, static_cast<double>(rel)));
        }
      } else {
        for (int64_t i = 0; i < p.q_len; ++i) {
          for (int64_t j = 0; j < p.k_len; ++j) {
            StoreFromDouble(out.data, out.dtype, idx++, value(m, qoff + i, j, kpos[j]));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& out) {
  const RelativeBiasParams& p = plan.params;
  if (p.form == BiasForm::kBuckets) {
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t j = 0; j < p.k_len; ++j) {
        StoreFromDouble(out.data, out.dtype, i * p.k_len + j,
                        static_cast<double>(plan.Bucket(i, j)));
      }
    }
    return absl::OkStatus();
  }
  const int64_t heads = plan.heads;
  auto table = [&](int64_t bucket, int64_t h) {
    return LoadAsDouble(p.table.data, p.table.dtype, bucket * heads + h);
  };
  int64_t idx = 0;
  for (int64_t h = 0; h < heads; ++h) {
    if (p.form == BiasForm::kCompact) {
      for (int64_t t = 0; t < p.q_len + p.k_len - 1; ++t) {
        // (i, j) = (0, t - (q_len - 1)): the same key - query difference.
        StoreFromDouble(out.data, out.dtype, idx++, table(plan.Bucket(0, t - (p.q_len - 1)), h));
      }
      continue;
    }
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t j = 0; j < p.k_len; ++j) {
        StoreFromDouble(out.data, out.dtype, idx++, table(plan.Bucket(i, j), h));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan, const TensorView& out) {
  const RelativeEmbeddingParams& p = plan.params;
  const int64_t dim = plan.dim;
  int64_t idx = 0;
  for (int64_t i = 0; i < p.q_len; ++i) {
    for (int64_t j = 0; j < p.k_len; ++j) {
      const int64_t row = plan.Row(i, j);
      for (int64_t c = 0; c < dim; ++c) {
        StoreFromDouble(out.data, out.dtype, idx++,
                        LoadAsDouble(p.table.data, p.table.dtype, row * dim + c));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc::kernels::reference
