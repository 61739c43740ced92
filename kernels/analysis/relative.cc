// AnalyzeEncoding's property 3, relative structure: the fitted rotation of every frequency pair
// per distance (SINUSOIDAL, ROPE) and the shift structure of a bias (ALIBI, T5). Formulas:
// analysis.h.
#include "kernels/bias/relative.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/analysis/analysis.h"
#include "kernels/bias/alibi.h"
#include "kernels/common/status.h"
#include "kernels/rope/config.h"

namespace posenc::kernels {
namespace {

// T5's bucket edges are looked for among the first distances only (the last bucket starts at
// max_distance at the latest).
constexpr int64_t kMaxEdgeScan = int64_t{1} << 22;

// One frequency pair of a row: columns a, b; PE(p+k) = R(sign * k * omega) PE(p) in (a, b).
struct Pair {
  int64_t a = 0, b = 0;
  long double omega = 0;
};
struct Pairs {
  std::vector<Pair> pairs;
  int sign = 1;  // +1: (cos, sin) pairs (RoPE); -1: (sin, cos) pairs (sinusoidal)
};

Pairs SinusoidalPairs(const SinusoidalParams& params) {
  Pairs out;
  out.sign = -1;
  const std::vector<long double> omega = SinusoidalFrequencies(params);
  const int64_t half = params.dim / 2;
  for (int64_t k = 0; k < half; ++k) {
    if (params.layout == SinusoidalLayout::kInterleaved) {
      out.pairs.push_back({2 * k, 2 * k + 1, omega[k]});
    } else {
      out.pairs.push_back({k, k + half, omega[k]});
    }
  }
  return out;
}

absl::StatusOr<Pairs> RopePairs(const AnalysisPlan& plan) {
  RopeConfig config = plan.args.encoding.rope;
  const int64_t end = plan.args.start + plan.args.count;
  if (!config.seq_len) config.seq_len = end;
  POSENC_ASSIGN_OR_RETURN(RopeFrequencies f, ComputeRopeFrequencies(config, end - 1));
  Pairs out;
  for (int64_t j = 0; j < plan.width / 2; ++j) {
    out.pairs.push_back({2 * j, 2 * j + 1, f.inv_freq[FrequencySource(config, j)]});
  }
  return out;
}

// Sums of one pair over p for one distance.
struct PairSums {
  double dot = 0, cross = 0;      // pass 1: sum x.y, sum x cross y
  double residual = 0, norm = 0;  // pass 2: sum |y - R x|^2, sum |y|^2
  double angle = 0;               // between the passes
};

// Runs `visit(x_row, y_row)` over p in [start, end - k), x = PE(p), y = PE(p + k).
template <typename Visit>
absl::Status ForEachShiftedPair(const Backend& backend, const AnalysisPlan& plan, int64_t k,
                                Visit visit) {
  const int64_t w = plan.width, last = plan.args.start + plan.args.count - k;
  std::vector<double> x, y;
  for (int64_t c = plan.args.start; c < last; c += plan.chunk_rows) {
    const int64_t n = std::min(plan.chunk_rows, last - c);
    POSENC_RETURN_IF_ERROR(AnalysisRows(backend, plan, c, n, &x));
    POSENC_RETURN_IF_ERROR(AnalysisRows(backend, plan, c + k, n, &y));
    for (int64_t i = 0; i < n; ++i) visit(&x[i * w], &y[i * w]);
  }
  return absl::OkStatus();
}

double WrapAngle(long double a) {
  const long double two_pi = 2 * std::numbers::pi_v<long double>;
  a = std::fmod(a, two_pi);
  if (a > std::numbers::pi_v<long double>) a -= two_pi;
  if (a <= -std::numbers::pi_v<long double>) a += two_pi;
  return static_cast<double>(a);
}

RotationFit Summarize(const Pairs& pairs, const std::vector<PairSums>& sums, int64_t k) {
  RotationFit fit;
  fit.distance = k;
  double residual = 0, norm = 0;
  for (size_t j = 0; j < sums.size(); ++j) {
    residual += sums[j].residual;
    norm += sums[j].norm;
    const double r = sums[j].norm > 0 ? std::sqrt(sums[j].residual / sums[j].norm) : 0.0;
    if (r > fit.worst_pair_residual || fit.worst_pair < 0) {
      fit.worst_pair_residual = r;
      fit.worst_pair = static_cast<int64_t>(j);
    }
    const long double expected = pairs.sign * static_cast<long double>(k) * pairs.pairs[j].omega;
    fit.max_angle_error =
        std::max(fit.max_angle_error, std::abs(WrapAngle(sums[j].angle - expected)));
  }
  fit.residual = norm > 0 ? std::sqrt(residual / norm) : 0.0;
  return fit;
}

absl::StatusOr<RotationFit> FitRotation(const Backend& backend, const AnalysisPlan& plan,
                                        const Pairs& pairs, int64_t k) {
  std::vector<PairSums> sums(pairs.pairs.size());
  POSENC_RETURN_IF_ERROR(
      ForEachShiftedPair(backend, plan, k, [&](const double* x, const double* y) {
        for (size_t j = 0; j < sums.size(); ++j) {
          const Pair& q = pairs.pairs[j];
          sums[j].dot += x[q.a] * y[q.a] + x[q.b] * y[q.b];
          sums[j].cross += x[q.a] * y[q.b] - x[q.b] * y[q.a];
        }
      }));
  for (PairSums& s : sums) s.angle = std::atan2(s.cross, s.dot);
  POSENC_RETURN_IF_ERROR(
      ForEachShiftedPair(backend, plan, k, [&](const double* x, const double* y) {
        for (size_t j = 0; j < sums.size(); ++j) {
          const Pair& q = pairs.pairs[j];
          const double c = std::cos(sums[j].angle), s = std::sin(sums[j].angle);
          const double ea = y[q.a] - (c * x[q.a] - s * x[q.b]);
          const double eb = y[q.b] - (s * x[q.a] + c * x[q.b]);
          sums[j].residual += ea * ea + eb * eb;
          sums[j].norm += y[q.a] * y[q.a] + y[q.b] * y[q.b];
        }
      }));
  return Summarize(pairs, sums, k);
}

// ---- biases ---------------------------------------------------------------------------------

// The FULL bias [H, W, W] of W queries and keys, widened; each query's own key is column i.
absl::StatusOr<std::vector<double>> BiasWindow(const Backend& backend, const AnalysisPlan& plan,
                                               int64_t w, int64_t* heads) {
  const AnalysisEncoding& e = plan.args.encoding;
  std::vector<double> out(static_cast<size_t>(plan.width * w * w));
  *heads = plan.width;
  if (e.family == AnalysisFamily::kAlibi) {
    AlibiBiasParams p;
    p.num_heads = e.alibi.num_heads;
    p.mode = e.alibi.mode;
    p.future = e.alibi.future;
    p.max_bias = e.alibi.max_bias;
    p.q_len = p.k_len = w;
    p.query_offset = 0;
    POSENC_ASSIGN_OR_RETURN(AlibiBiasPlan plan_, PlanAlibiBias({p, DType::kFloat64}));
    std::vector<double> slopes(static_cast<size_t>(p.num_heads));
    POSENC_RETURN_IF_ERROR(RunAlibiBias(backend, plan_,
                                        {DType::kFloat64, plan_.bias.shape, out.data()},
                                        {DType::kFloat64, plan_.slopes.shape, slopes.data()}));
    return out;
  }
  RelativeBiasArgs args = T5BiasArgs(e.t5, DType::kFloat64);
  args.params.q_len = args.params.k_len = w;
  args.params.query_offset = args.params.key_offset = plan.args.start;
  POSENC_ASSIGN_OR_RETURN(RelativeBiasPlan plan_, PlanRelativeBias(std::move(args)));
  if (plan_.bias.dtype == DType::kFloat64) {
    POSENC_RETURN_IF_ERROR(
        RunRelativeBias(backend, plan_, {DType::kFloat64, plan_.bias.shape, out.data()}));
    return out;
  }
  std::vector<int32_t> ids(static_cast<size_t>(w * w));
  POSENC_RETURN_IF_ERROR(
      RunRelativeBias(backend, plan_, {DType::kInt32, plan_.bias.shape, ids.data()}));
  std::copy(ids.begin(), ids.end(), out.begin());
  return out;
}

// |a - b| where equal infinities (masked entries on both sides) count as 0.
double Deviation(double a, double b) {
  if (a == b) return 0.0;
  return std::abs(a - b);
}

void ShiftDeviations(const std::vector<double>& bias, int64_t heads, int64_t w, BiasStructure* s) {
  for (int64_t h = 0; h < heads; ++h) {
    const double* m = &bias[h * w * w];
    for (int64_t i = 0; i + 1 < w; ++i) {
      for (int64_t j = 0; j + 1 < w; ++j) {
        const double a = m[i * w + j], b = m[(i + 1) * w + j + 1];
        s->max_shift_deviation = std::max(s->max_shift_deviation, Deviation(a, b));
        const double ra = a - m[i * w + i], rb = b - m[(i + 1) * w + i + 1];
        s->max_shift_deviation_row_centered =
            std::max(s->max_shift_deviation_row_centered, Deviation(ra, rb));
      }
    }
  }
  s->depends_on_distance_only = s->max_shift_deviation == 0.0;
}

void T5Edges(const AnalysisPlan& plan, BiasStructure* s) {
  const T5AnalysisParams& t = plan.args.encoding.t5;
  const int64_t end = std::min({plan.args.start + plan.args.count,
                                std::max<int64_t>(4 * t.max_distance, 1) + 1, kMaxEdgeScan});
  int64_t previous = -1;
  for (int64_t d = 0; d < end; ++d) {
    const int64_t b = T5Bucket(-d, t.bidirectional, t.num_buckets, t.max_distance);
    if (b != previous) s->bucket_edges.push_back(d);
    previous = b;
  }
  const int64_t last = s->bucket_edges.empty() ? 0 : s->bucket_edges.back();
  s->note = absl::StrCat("T5: the bias is a function of j - i (Toeplitz) through buckets: ",
                         s->bucket_edges.size(), " buckets for keys 0 .. ", end - 1,
                         " tokens back; the distances of one bucket share one "
                         "bias, and every distance >= ",
                         last, " shares the last one (no longer told apart)");
}

void AlibiNote(const AnalysisPlan& plan, BiasStructure* s) {
  if (plan.args.encoding.alibi.mode == AlibiMode::kBloom) {
    s->note = absl::StrCat(
        "BLOOM: +m_h * key position depends on the key position, not on j - i (raw deviation ",
        s->max_shift_deviation,
        " per step); minus each query's bias at its own position (a "
        "per-row constant the softmax ignores) it is relative: -m_h * (i - j)");
  } else {
    s->note = "ALiBi: -m_h * |i - j| depends on j - i only, linearly";
  }
}

absl::StatusOr<BiasStructure> AnalyzeBiasStructure(const Backend& backend,
                                                   const AnalysisPlan& plan) {
  BiasStructure s;
  s.window = std::min(plan.args.count, kMaxBiasWindow);
  int64_t heads = 1;
  POSENC_ASSIGN_OR_RETURN(std::vector<double> bias, BiasWindow(backend, plan, s.window, &heads));
  ShiftDeviations(bias, heads, s.window, &s);
  if (plan.args.encoding.family == AnalysisFamily::kT5) {
    T5Edges(plan, &s);
  } else {
    AlibiNote(plan, &s);
  }
  return s;
}

}  // namespace

absl::StatusOr<RelativeResult> AnalyzeRelative(const Backend& backend, const AnalysisPlan& plan) {
  RelativeResult r;
  const AnalysisFamily family = plan.args.encoding.family;
  if (family == AnalysisFamily::kLearned) {
    r.applicable = false;
    r.note = "a learned table has no relative structure to fit";
    return r;
  }
  if (family == AnalysisFamily::kAlibi || family == AnalysisFamily::kT5) {
    POSENC_ASSIGN_OR_RETURN(r.bias, AnalyzeBiasStructure(backend, plan));
    return r;
  }
  Pairs pairs;
  if (family == AnalysisFamily::kSinusoidal) {
    pairs = SinusoidalPairs(plan.args.encoding.sinusoidal);
  } else {
    POSENC_ASSIGN_OR_RETURN(pairs, RopePairs(plan));
  }
  r.pairs = static_cast<int64_t>(pairs.pairs.size());
  r.note = "per distance k: the best rotation of each frequency pair taking PE(p) to PE(p+k)";
  for (int64_t k : plan.distances) {
    POSENC_ASSIGN_OR_RETURN(RotationFit fit, FitRotation(backend, plan, pairs, k));
    r.rotations.push_back(fit);
  }
  return r;
}

}  // namespace posenc::kernels
