// AnalyzeEncoding's properties 1-3: uniqueness (and the collision at a precision), bounds and
// norms, relative structure. Formulas and methods: analysis.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/analysis/analysis.h"
#include "kernels/analysis/curve.h"
#include "kernels/common/cancellation.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

// All pairs when n(n-1)/2 * width stays under this; the offsets method's K shrinks to keep
// count * K * width under kOffsetWork (multiply-adds, a few seconds on one core).
constexpr int64_t kExactWork = int64_t{1} << 32;
constexpr int64_t kOffsetWork = int64_t{1} << 34;

absl::Status CheckCancelled() {
  const Cancellation* c = CurrentCancellation();
  return c == nullptr ? absl::OkStatus() : c->Check();
}

// ||a - b||^2 over w values, stopping early once it passes `bound`.
double Distance2(const double* a, const double* b, int64_t w, double bound) {
  double s = 0.0;
  for (int64_t i = 0; i < w; ++i) {
    const double d = a[i] - b[i];
    s += d * d;
    if ((i & 15) == 15 && s > bound) return s;
  }
  return s;
}

struct Closest {
  double d2 = std::numeric_limits<double>::infinity();
  int64_t p = -1, q = -1;
  void Offer(double v, int64_t a, int64_t b) {
    if (v < d2) d2 = v, p = a, q = b;
  }
};

absl::Status ExactClosest(const Backend& backend, const AnalysisPlan& plan, Closest* best) {
  const int64_t n = plan.args.count, w = plan.width, s = plan.args.start;
  std::vector<double> rows;
  POSENC_RETURN_IF_ERROR(AnalysisRows(backend, plan, s, n, &rows));
  for (int64_t p = 0; p < n; ++p) {
    if ((p & 63) == 0) POSENC_RETURN_IF_ERROR(CheckCancelled());
    for (int64_t q = p + 1; q < n; ++q) {
      best->Offer(Distance2(&rows[p * w], &rows[q * w], w, best->d2), s + p, s + q);
    }
  }
  return absl::OkStatus();
}

absl::Status OffsetClosest(const Backend& backend, const AnalysisPlan& plan, int64_t k_max,
                           Closest* best) {
  const int64_t w = plan.width, end = plan.args.start + plan.args.count;
  return ForEachRowChunk(backend, plan, plan.args.start, end,
                         [&](int64_t c, int64_t n, const std::vector<double>& rows) {
                           const int64_t m = static_cast<int64_t>(rows.size()) / w;
                           for (int64_t i = 0; i < n; ++i) {
                             for (int64_t j = i + 1; j <= i + k_max && j < m; ++j) {
                               best->Offer(Distance2(&rows[i * w], &rows[j * w], w, best->d2),
                                           c + i, c + j);
                             }
                           }
                           return absl::OkStatus();
                         },
                         {.halo = k_max});
}

uint64_t HashRow(const double* row, int64_t w) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (int64_t i = 0; i < w; ++i) {
    uint64_t bits;
    std::memcpy(&bits, &row[i], sizeof(bits));
    h ^= bits + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
  }
  return h ^ (h >> 33);
}

absl::StatusOr<bool> SameRows(const Backend& backend, const AnalysisPlan& plan, DType dtype,
                              int64_t p, int64_t q) {
  std::vector<double> a, b;
  POSENC_RETURN_IF_ERROR(AnalysisRows(backend, plan, p, 1, &a, dtype));
  POSENC_RETURN_IF_ERROR(AnalysisRows(backend, plan, q, 1, &b, dtype));
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Within one hash group [g, e) (sorted by position): the smallest q equal to an earlier member,
// if it comes before the collision found so far.
absl::Status GroupCollision(const Backend& backend, const AnalysisPlan& plan, DType dtype,
                            const std::vector<std::pair<uint64_t, int64_t>>& keys, size_t g,
                            size_t e, UniquenessResult* r) {
  for (size_t q = g + 1; q < e; ++q) {
    if (r->collision_found && keys[q].second >= r->collision_q) return absl::OkStatus();
    for (size_t p = g; p < q && p < g + 16; ++p) {
      POSENC_ASSIGN_OR_RETURN(bool same,
                              SameRows(backend, plan, dtype, keys[p].second, keys[q].second));
      if (!same) continue;
      r->collision_found = true;
      r->collision_p = keys[p].second;
      r->collision_q = keys[q].second;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// The smallest q whose row (in `dtype`) equals an earlier row p: (hash, position) of every row,
// sorted; each hash group's members are checked against its earlier members, bit for bit.
absl::Status FirstCollision(const Backend& backend, const AnalysisPlan& plan, UniquenessResult* r) {
  const DType dtype = *plan.args.collision_dtype;
  const int64_t w = plan.width, end = plan.args.start + plan.args.count;
  std::vector<std::pair<uint64_t, int64_t>> keys;
  keys.reserve(static_cast<size_t>(plan.args.count));
  POSENC_RETURN_IF_ERROR(
      ForEachRowChunk(backend, plan, plan.args.start, end,
                      [&](int64_t c, int64_t n, const std::vector<double>& rows) {
                        for (int64_t i = 0; i < n; ++i)
                          keys.emplace_back(HashRow(&rows[i * w], w), c + i);
                        return absl::OkStatus();
                      },
                      {.dtype = dtype}));
  std::sort(keys.begin(), keys.end());
  r->collision_searched = true;
  r->collision_dtype = dtype;
  for (size_t g = 0; g < keys.size();) {
    size_t e = g + 1;
    while (e < keys.size() && keys[e].first == keys[g].first) ++e;
    POSENC_RETURN_IF_ERROR(GroupCollision(backend, plan, dtype, keys, g, e, r));
    g = e;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UniquenessResult> AnalyzeUniqueness(const Backend& backend,
                                                   const AnalysisPlan& plan) {
  UniquenessResult r;
  const int64_t n = plan.args.count, w = plan.width;
  Closest best;
  if (n >= 2 && n <= kExactUniquenessPositions && (n * (n - 1) / 2) <= kExactWork / w) {
    r.exact = true;
    r.method = absl::StrCat("all pairs of the ", n, " positions");
    POSENC_RETURN_IF_ERROR(ExactClosest(backend, plan, &best));
  } else if (n >= 2) {
    const int64_t k = std::clamp<int64_t>(kOffsetWork / (n * w), 1,
                                          std::min(plan.args.uniqueness_offsets, n - 1));
    r.method = absl::StrCat("offsets q - p = 1 .. ", k, " of every position (", n,
                            " positions: more than ", kExactUniquenessPositions,
                            " or too wide for all pairs)");
    POSENC_RETURN_IF_ERROR(OffsetClosest(backend, plan, k, &best));
  } else {
    r.method = "one position: no pair";
  }
  if (best.p >= 0) {
    r.min_distance = std::sqrt(best.d2);
    r.min_p = best.p;
    r.min_q = best.q;
  }
  if (plan.args.collision_dtype) POSENC_RETURN_IF_ERROR(FirstCollision(backend, plan, &r));
  return r;
}

namespace {

struct Accumulator {
  Summary s;
  long double sum = 0;
  int64_t n = 0;
  void Add(double v, int64_t position) {
    if (n == 0 || v < s.min) s.min = v, s.argmin = position;
    if (n == 0 || v > s.max) s.max = v, s.argmax = position;
    sum += v;
    ++n;
  }
  Summary Done() {
    s.mean = n > 0 ? static_cast<double>(sum / n) : 0.0;
    return s;
  }
};

}  // namespace

absl::StatusOr<BoundsResult> AnalyzeBounds(const Backend& backend, const AnalysisPlan& plan) {
  const int64_t w = plan.width, end = plan.args.start + plan.args.count;
  Accumulator values, norms;
  POSENC_RETURN_IF_ERROR(
      ForEachRowChunk(backend, plan, plan.args.start, end,
                      [&](int64_t c, int64_t n, const std::vector<double>& rows) {
                        for (int64_t i = 0; i < n; ++i) {
                          long double sq = 0;
                          for (int64_t j = 0; j < w; ++j) {
                            const double v = rows[i * w + j];
                            values.Add(v, c + i);
                            sq += static_cast<long double>(v) * v;
                          }
                          norms.Add(static_cast<double>(std::sqrt(sq)), c + i);
                        }
                        return absl::OkStatus();
                      }));
  return BoundsResult{values.Done(), norms.Done()};
}

}  // namespace posenc::kernels
