// Distance decay of RoPE, ALiBi and T5 (decay.h): AnalyzeDecay.
#include "kernels/analysis/decay.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/analysis/curve.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

absl::StatusOr<Bins> CurveBins(const AnalysisPlan& plan) {
  return MakeBins(plan.args.start, plan.args.count, std::min(plan.args.count, kCurvePoints),
                  BinSpacing::kLog, "count");
}

std::vector<double> Centres(const Bins& bins) {
  std::vector<double> x;
  for (int64_t b = 0; b < bins.size(); ++b) x.push_back(bins.Centre(b));
  return x;
}

struct QkPairs {
  int64_t n = 0;
  std::vector<double> re, im;  // h_j of pair s at [s * half + j]
};

// q and k as float64 [n, head_dim]: random and independent, or the embedding rows as q and the
// key rows as k (without keys: q = k = each embedding row).
absl::Status LoadQk(const AnalysisPlan& plan, int64_t head_dim, int64_t* n, std::vector<double>* q,
                    std::vector<double>* k) {
  const ConstTensorView& e = plan.args.embeddings;
  if (e.empty()) {
    if (plan.args.samples > kMaxAnalysisSamples) {
      return absl::InvalidArgumentError(absl::StrCat("samples: DECAY draws 1 .. ",
                                                     kMaxAnalysisSamples, " q/k pairs, got ",
                                                     plan.args.samples));
    }
    *n = plan.args.samples;
    std::vector<double> g = GaussianSamples(plan.args.seed, 2 * *n * head_dim);
    q->assign(g.begin(), g.begin() + *n * head_dim);
    k->assign(g.begin() + *n * head_dim, g.end());
    return absl::OkStatus();
  }
  if (e.shape[1] != head_dim || e.shape[0] > kMaxAnalysisSamples) {
    return absl::InvalidArgumentError(absl::StrCat("embeddings: DECAY takes q/k rows [1 .. ",
                                                   kMaxAnalysisSamples, ", head_dim = ", head_dim,
                                                   "], got ", ShapeString(e.shape)));
  }
  *n = e.shape[0];
  const auto load = [](const ConstTensorView& t, std::vector<double>* out) {
    out->resize(static_cast<size_t>(t.NumElements()));
    for (size_t i = 0; i < out->size(); ++i) (*out)[i] = LoadAsDouble(t.data, t.dtype, i);
  };
  load(e, q);
  if (plan.args.keys.empty()) {
    *k = *q;
  } else {
    load(plan.args.keys, k);  // the shape of e (PlanAnalysis)
  }
  return absl::OkStatus();
}

// h_j = z_q conj(z_k) of every pair and slot.
absl::StatusOr<QkPairs> Products(const AnalysisPlan& plan, int64_t half) {
  const RopeConfig& config = plan.args.encoding.rope;
  const int64_t head_dim = config.head_dim;
  QkPairs p;
  std::vector<double> q, k;
  POSENC_RETURN_IF_ERROR(LoadQk(plan, head_dim, &p.n, &q, &k));
  const bool neox = config.style == RopeStyle::kNeox;
  p.re.resize(static_cast<size_t>(p.n * half));
  p.im.resize(p.re.size());
  for (int64_t s = 0; s < p.n; ++s) {
    const double* qs = &q[s * head_dim];
    const double* ks = &k[s * head_dim];
    for (int64_t j = 0; j < half; ++j) {
      const int64_t a = neox ? j : 2 * j;
      const int64_t b = neox ? j + half : 2 * j + 1;
      p.re[s * half + j] = qs[a] * ks[a] + qs[b] * ks[b];
      p.im[s * half + j] = qs[b] * ks[a] - qs[a] * ks[b];
    }
  }
  return p;
}

// max over pairs of max_j |h_{j+1} - h_j|, with h_{d/2} = 0.
double MaxStep(const QkPairs& p, int64_t half) {
  double best = 0;
  for (int64_t s = 0; s < p.n; ++s) {
    for (int64_t j = 0; j < half; ++j) {
      const size_t i = s * half + j;
      const double re = (j + 1 < half ? p.re[i + 1] : 0.0) - p.re[i];
      const double im = (j + 1 < half ? p.im[i + 1] : 0.0) - p.im[i];
      best = std::max(best, std::hypot(re, im));
    }
  }
  return best;
}

// The mean over the pairs of |sum_j Re(h_j (c_j + i s_j))| from a COMPLEX row (c_j, s_j).
double MeanAbsDot(const QkPairs& p, const double* row, int64_t half) {
  double sum_abs = 0;
  for (int64_t k = 0; k < p.n; ++k) {
    const double* re = &p.re[k * half];
    const double* im = &p.im[k * half];
    double dot = 0;
    for (int64_t j = 0; j < half; ++j) dot += re[j] * row[2 * j] - im[j] * row[2 * j + 1];
    sum_abs += std::fabs(dot);
  }
  return sum_abs / static_cast<double>(p.n);
}

// B(r) from a COMPLEX row of m e^{i r theta_j}.
double RelativeBound(const double* row, int64_t half, double m) {
  double sre = 0, sim = 0, bound = 0;
  for (int64_t j = 0; j < half; ++j) {
    sre += row[2 * j];
    sim += row[2 * j + 1];
    bound += std::hypot(sre, sim);
  }
  return bound / (m * static_cast<double>(half));
}

// theta_j of every slot and m, as the plan's rows use them (seq_len as AnalysisRows sets it).
void Frequencies(const AnalysisPlan& plan, RopeDecay* d) {
  RopeConfig config = plan.args.encoding.rope;
  const int64_t end = plan.args.start + plan.args.count;
  if (!config.seq_len) config.seq_len = end;
  const RopeFrequencies f = ComputeValidRopeFrequencies(config, end - 1);
  d->attention_factor = f.CosSinScale();
  for (int64_t j = 0; j < f.rotary_dim / 2; ++j) {
    d->frequencies.push_back(static_cast<double>(f.inv_freq[FrequencySource(config, j)]));
  }
}

// The wavelength limit and the random-phase level F (decay.h).
void Levels(RopeDecay* d) {
  double slowest = kInf, level = 0;
  int64_t zeros = 0, rotating = 0;
  for (double theta : d->frequencies) {
    if (theta > 0) {
      slowest = std::min(slowest, theta);
      ++rotating;
    } else {
      ++zeros;
    }
    level += std::sqrt(static_cast<double>(zeros * zeros) + std::numbers::pi * rotating / 4);
  }
  d->wavelength_limit = slowest < kInf ? 2 * std::numbers::pi / slowest : kInf;
  d->random_phase_level = level / static_cast<double>(d->frequencies.size());
}

// Means of B over the octaves of the distance: {0}, {1}, [2, 4), [4, 8), ...
class OctaveMeans {
 public:
  void Add(int64_t r, double v) {
    const int k = r == 0 ? 0 : 64 - std::countl_zero(static_cast<uint64_t>(r));
    sum_[k] += v;
    ++count_[k];
  }
  // The start of the first octave (clipped to `start`) whose mean is <= level; -1 if none.
  int64_t FirstAtOrBelow(double level, int64_t start) const {
    for (int k = 0; k < 65; ++k) {
      if (count_[k] > 0 && sum_[k] / static_cast<double>(count_[k]) <= level) {
        return std::max(start, k == 0 ? int64_t{0} : int64_t{1} << (k - 1));
      }
    }
    return -1;
  }

 private:
  double sum_[65] = {};
  int64_t count_[65] = {};
};

// Whether distance r of bin b is one the mean |q.k| is taken at.
bool DotDistance(const Bins& bins, int64_t b, int64_t r) {
  const int64_t width = bins.last[b] - bins.first[b] + 1;
  const int64_t stride = (width + kDotDistancesPerBin - 1) / kDotDistancesPerBin;
  return (r - bins.first[b]) % stride == 0;
}

}  // namespace

absl::StatusOr<RopeDecay> ComputeRopeDecay(const Backend& backend, const AnalysisPlan& plan) {
  RopeDecay d;
  Frequencies(plan, &d);
  Levels(&d);
  const int64_t half = static_cast<int64_t>(d.frequencies.size());
  POSENC_ASSIGN_OR_RETURN(const QkPairs pairs, Products(plan, half));
  POSENC_ASSIGN_OR_RETURN(const Bins bins, CurveBins(plan));
  const double m = d.attention_factor;
  d.bound_scale = m * m * MaxStep(pairs, half);
  BinnedMeans dots(bins, 1), bounds(bins, 1);
  OctaveMeans octaves;
  int64_t b = 0;
  POSENC_RETURN_IF_ERROR(ForEachRowChunk(
      backend, plan, plan.args.start, plan.args.start + plan.args.count,
      [&](int64_t c, int64_t n, const std::vector<double>& rows) {
        for (int64_t t = 0; t < n; ++t) {
          const int64_t r = c + t;
          const double* row = &rows[t * 2 * half];
          while (r > bins.last[b]) ++b;
          const double bound = RelativeBound(row, half, m);
          bounds.Add(r, &bound);
          octaves.Add(r, bound);
          if (!DotDistance(bins, b, r)) continue;
          const double dot = m * MeanAbsDot(pairs, row, half);  // row has one m already
          dots.Add(r, &dot);
        }
        return absl::OkStatus();
      }));
  d.mean_abs_dot = {"mean |q.k|", Centres(bins), dots.Means(0)};
  d.bound = {"RoFormer bound", Centres(bins), bounds.Means(0)};
  d.decay_stops_at = octaves.FirstAtOrBelow(1.05 * d.random_phase_level, plan.args.start);
  return d;
}

namespace {

DecayResult RopeDecayResult(const AnalysisPlan& plan, RopeDecay d) {
  DecayResult r;
  r.method = absl::StrCat(
      plan.args.encoding.rope.head_dim, "-dim q/k: ",
      plan.args.embeddings.empty()
          ? absl::StrCat(plan.args.samples, " random N(0, 1) pairs")
          : absl::StrCat(plan.args.embeddings.shape[0],
                         plan.args.keys.empty() ? " given rows, q = k" : " given q/k row pairs"),
      "; RoFormer relative bound (1/(d/2)) sum_j |S_j|");
  r.samples = plan.args.embeddings.empty() ? plan.args.samples : plan.args.embeddings.shape[0];
  r.seed = plan.args.seed;
  r.decay_stops_at = d.decay_stops_at;
  r.note = absl::StrFormat(
      "attention factor m = %.6g; |q.k| <= %.6g * (d/2) * bound; random-phase level of the "
      "bound %.4g (decay_stops_at: the first octave of distances whose mean is within 5 %% of it); "
      "wavelength limit "
      "2 pi / min theta = %.6g",
      d.attention_factor, d.bound_scale, d.random_phase_level, d.wavelength_limit);
  r.curves = {std::move(d.mean_abs_dot), std::move(d.bound)};
  return r;
}

// The binned means per head of the rows `source` gives over the plan's distances: one curve per
// head, labelled "head h" (or "bucket" for bucket ids) followed by `suffix`.
absl::Status AppendBiasCurves(const Backend& backend, const AnalysisPlan& plan, const Bins& bins,
                              AnalysisRowsFn source, const std::string& suffix, bool buckets,
                              std::vector<AnalysisCurve>* curves) {
  const int heads = static_cast<int>(plan.width);
  BinnedMeans means(bins, heads);
  POSENC_RETURN_IF_ERROR(
      ForEachRowChunk(backend, plan, plan.args.start, plan.args.start + plan.args.count,
                      [&](int64_t c, int64_t n, const std::vector<double>& rows) {
                        for (int64_t t = 0; t < n; ++t) means.Add(c + t, &rows[t * heads]);
                        return absl::OkStatus();
                      },
                      {.rows = source}));
  for (int h = 0; h < heads; ++h) {
    curves->push_back(
        {absl::StrCat(buckets ? std::string("bucket") : absl::StrCat("head ", h), suffix),
         Centres(bins), means.Means(h)});
  }
  return absl::OkStatus();
}

absl::StatusOr<DecayResult> BiasDecay(const Backend& backend, const AnalysisPlan& plan) {
  POSENC_ASSIGN_OR_RETURN(const Bins bins, CurveBins(plan));
  DecayResult r;
  const bool alibi = plan.args.encoding.family == AnalysisFamily::kAlibi;
  const bool buckets = !alibi && plan.args.encoding.t5.table.empty();
  // Bidirectional T5 buckets tell keys after the query apart from those before: both sides.
  const bool both_sides = !alibi && plan.args.encoding.t5.bidirectional;
  r.method = alibi     ? "ALiBi bias of a key r tokens back, per head"
             : buckets ? "T5 bucket of a key r tokens back (no table given)"
                       : "T5 bias of a key r tokens back, per head";
  if (both_sides) absl::StrAppend(&r.method, "; \", after\": a key r tokens after the query");
  POSENC_RETURN_IF_ERROR(
      AppendBiasCurves(backend, plan, bins, &AnalysisRows, "", buckets, &r.curves));
  if (both_sides) {
    POSENC_RETURN_IF_ERROR(
        AppendBiasCurves(backend, plan, bins, &T5RowsAfter, ", after", buckets, &r.curves));
  }
  r.note = "each point: the mean over the distances of its bin";
  return r;
}

}  // namespace

absl::StatusOr<DecayResult> AnalyzeDecay(const Backend& backend, const AnalysisPlan& plan) {
  switch (plan.args.encoding.family) {
    case AnalysisFamily::kRope: {
      POSENC_ASSIGN_OR_RETURN(RopeDecay d, ComputeRopeDecay(backend, plan));
      return RopeDecayResult(plan, std::move(d));
    }
    case AnalysisFamily::kAlibi:
    case AnalysisFamily::kT5: return BiasDecay(backend, plan);
    case AnalysisFamily::kSinusoidal:
    case AnalysisFamily::kLearned: break;
  }
  DecayResult r;
  r.method = "not applicable";
  r.note =
      "DECAY measures q.k under RoPE and the ALiBi/T5 biases; an absolute encoding adds "
      "no distance term of its own (see RELATIVE and SIMILARITY)";
  return r;
}

}  // namespace posenc::kernels
