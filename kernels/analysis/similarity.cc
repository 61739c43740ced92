// Cosine similarity over a window and add vs concat (similarity.h): AnalyzeSimilarity.
#include "kernels/analysis/similarity.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/analysis/curve.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

constexpr double kDegrees = 180.0 / std::numbers::pi;

// The similarity matrix of the window (rows, cols, cell, matrix), and the zero rows met.
absl::Status SimilarityMatrix(const Backend& backend, const AnalysisPlan& plan, int64_t w,
                              SimilarityResult* r, int64_t* zero_rows) {
  const int64_t width = plan.width;
  const int64_t max_cells =
      std::max<int64_t>(1, std::min(plan.args.max_cells, kMaxSimilarityValues / width));
  r->cell = (w + max_cells - 1) / max_cells;
  POSENC_ASSIGN_OR_RETURN(const Bins bins, MakeBins(r->window_start, w, (w + r->cell - 1) / r->cell,
                                                    BinSpacing::kLinear, "max_cells"));
  r->rows = r->cols = bins.size();
  BinnedMeans means(bins, static_cast<int>(width));
  std::vector<double> unit(static_cast<size_t>(width));
  POSENC_RETURN_IF_ERROR(
      ForEachRowChunk(backend, plan, r->window_start, r->window_start + w,
                      [&](int64_t c, int64_t n, const std::vector<double>& rows) {
                        for (int64_t t = 0; t < n; ++t) {
                          const double* row = &rows[t * width];
                          double norm2 = 0;
                          for (int64_t i = 0; i < width; ++i) norm2 += row[i] * row[i];
                          const double inv = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
                          *zero_rows += norm2 == 0;
                          for (int64_t i = 0; i < width; ++i) unit[i] = row[i] * inv;
                          means.Add(c + t, unit.data());
                        }
                        return absl::OkStatus();
                      }));
  // The cells' mean unit vectors, [cells, width].
  std::vector<std::vector<double>> columns;
  for (int64_t i = 0; i < width; ++i) columns.push_back(means.Means(static_cast<int>(i)));
  r->matrix.assign(static_cast<size_t>(r->rows * r->cols), 0.0);
  for (int64_t a = 0; a < r->rows; ++a) {
    for (int64_t b = a; b < r->cols; ++b) {
      double dot = 0;
      for (int64_t i = 0; i < width; ++i) dot += columns[i][a] * columns[i][b];
      r->matrix[a * r->cols + b] = r->matrix[b * r->cols + a] = dot;
    }
  }
  return absl::OkStatus();
}

struct Tokens {
  int64_t n = 0;
  std::vector<double> unit;  // x/|x|, [n, width]
  std::vector<double> norm;  // |x|
};

absl::StatusOr<Tokens> LoadTokens(const AnalysisPlan& plan) {
  const ConstTensorView& e = plan.args.embeddings;
  const int64_t width = plan.width;
  Tokens t;
  std::vector<double> x;
  if (e.empty()) {
    if (plan.args.samples > kMaxAnalysisSamples) {
      return absl::InvalidArgumentError(absl::StrCat("samples: SIMILARITY draws 1 .. ",
                                                     kMaxAnalysisSamples, " token embeddings, got ",
                                                     plan.args.samples));
    }
    t.n = plan.args.samples;
    x = GaussianSamples(plan.args.seed, t.n * width);
  } else {
    if (e.shape[1] != width || e.shape[0] > kMaxAnalysisSamples) {
      return absl::InvalidArgumentError(
          absl::StrCat("embeddings: SIMILARITY adds the encoding to rows [1 .. ",
                       kMaxAnalysisSamples, ", D = ", width, "], got ", ShapeString(e.shape)));
    }
    t.n = e.shape[0];
    x.resize(static_cast<size_t>(t.n * width));
    for (size_t i = 0; i < x.size(); ++i) x[i] = LoadAsDouble(e.data, e.dtype, i);
  }
  t.unit = x;
  for (int64_t s = 0; s < t.n; ++s) {
    double n2 = 0;
    for (int64_t i = 0; i < width; ++i) n2 += x[s * width + i] * x[s * width + i];
    if (!(n2 > 0) || !std::isfinite(n2)) {
      return absl::InvalidArgumentError(
          absl::StrCat("embeddings: row ", s, " has norm ", std::sqrt(n2), ", expected > 0"));
    }
    t.norm.push_back(std::sqrt(n2));
    for (int64_t i = 0; i < width; ++i) t.unit[s * width + i] /= t.norm.back();
  }
  return t;
}

// Adds the add/concat changes of every token at one encoding row to sums[0..3].
void AddConcatAt(const Tokens& t, const double* pe, int64_t width, double sums[4]) {
  double pe2 = 0;
  for (int64_t i = 0; i < width; ++i) pe2 += pe[i] * pe[i];
  for (int64_t s = 0; s < t.n; ++s) {
    const double* u = &t.unit[s * width];
    double a = 0;
    for (int64_t i = 0; i < width; ++i) a += u[i] * pe[i];
    const double x = t.norm[s];
    const double b = std::sqrt(std::max(0.0, pe2 - a * a));
    sums[0] += std::fabs(std::hypot(x + a, b) - x) / x;
    sums[1] += std::atan2(b, x + a) * kDegrees;
    sums[2] += std::hypot(x, std::sqrt(pe2)) / x - 1.0;
    sums[3] += std::atan2(std::sqrt(pe2), x) * kDegrees;
  }
}

absl::Status AddConcat(const Backend& backend, const AnalysisPlan& plan, int64_t w,
                       SimilarityResult* r) {
  POSENC_ASSIGN_OR_RETURN(const Tokens t, LoadTokens(plan));
  r->random_embeddings = plan.args.embeddings.empty();
  const int64_t width = plan.width;
  // Every stride-th position of the window, so that the work stays within kAddConcatWork.
  const int64_t per_position = t.n * width;
  const int64_t positions = std::clamp<int64_t>(kAddConcatWork / per_position, 1, w);
  const int64_t stride = (w + positions - 1) / positions;
  double sums[4] = {0, 0, 0, 0};
  int64_t used = 0;
  POSENC_RETURN_IF_ERROR(
      ForEachRowChunk(backend, plan, r->window_start, r->window_start + w,
                      [&](int64_t c, int64_t n, const std::vector<double>& rows) {
                        for (int64_t i = 0; i < n; ++i) {
                          if ((c + i - r->window_start) % stride != 0) continue;
                          AddConcatAt(t, &rows[i * width], width, sums);
                          ++used;
                        }
                        return absl::OkStatus();
                      }));
  const double count = static_cast<double>(used * t.n);
  r->add_norm_change = sums[0] / count;
  r->add_angle_degrees = sums[1] / count;
  r->concat_norm_change = sums[2] / count;
  r->concat_angle_degrees = sums[3] / count;
  if (stride > 1) {
    absl::StrAppend(&r->note, "; add vs concat over every ", stride, "th position (", used, " of ",
                    w, ")");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimilarityResult> AnalyzeSimilarity(const Backend& backend,
                                                   const AnalysisPlan& plan) {
  SimilarityResult r;
  const AnalysisFamily family = plan.args.encoding.family;
  if (family == AnalysisFamily::kAlibi || family == AnalysisFamily::kT5) {
    r.note = "not applicable: a bias has no encoding vector per position";
    return r;
  }
  r.window_start = plan.args.start;
  r.window = std::min(plan.args.window, plan.args.count);
  int64_t zero_rows = 0;
  POSENC_RETURN_IF_ERROR(SimilarityMatrix(backend, plan, r.window, &r, &zero_rows));
  r.note = absl::StrCat("cosine similarity, each cell the mean over ", r.cell, " x ", r.cell,
                        " positions");
  if (zero_rows > 0) absl::StrAppend(&r.note, "; ", zero_rows, " zero rows count as 0");
  if (family == AnalysisFamily::kRope) {
    absl::StrAppend(&r.note, "; add vs concat not applicable: RoPE rotates q/k, adds nothing");
    return r;
  }
  POSENC_RETURN_IF_ERROR(AddConcat(backend, plan, r.window, &r));
  return r;
}

}  // namespace posenc::kernels
