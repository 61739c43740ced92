// AnalyzeEncoding: the plan (every check once), the rows of each family (through the family's own
// op) and the run of the requested properties.
#include "kernels/analysis/analysis.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/bias/alibi.h"
#include "kernels/bias/relative.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"
#include "kernels/rope/rope_cache.h"

namespace posenc::kernels {
namespace {

constexpr int64_t kMaxDefaultDistances = 16;
constexpr int64_t kMaxSamples = int64_t{1} << 20;
constexpr int64_t kMaxWindow = 4096;
constexpr int64_t kMaxCells = 1024;

PositionSpec Range(int64_t first, int64_t n) {
  PositionSpec s;
  s.kind = PositionSpec::Kind::kRange;
  s.start = first;
  s.count = n;
  return s;
}

// A status of a family's op, its field names prefixed with the request's ("alibi.").
absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// The float64 widening of a computed tensor into out[offset ..].
void Widen(const void* data, DType dtype, int64_t n, double* out) {
  if (dtype == DType::kFloat64) {
    std::memcpy(out, data, static_cast<size_t>(n) * sizeof(double));
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = LoadAsDouble(data, dtype, i);
}

// Runs a planned op into a buffer of its output spec and widens it into `out`.
template <typename Run>
absl::Status RunInto(const OutputSpec& spec, std::vector<double>* out, Run run) {
  POSENC_ASSIGN_OR_RETURN(int64_t n, NumElements(spec.shape, spec.name));
  std::vector<unsigned char> bytes(static_cast<size_t>(n * DTypeSize(spec.dtype)));
  TensorView view{spec.dtype, spec.shape, bytes.data()};
  POSENC_RETURN_IF_ERROR(run(view));
  out->resize(static_cast<size_t>(n));
  Widen(bytes.data(), spec.dtype, n, out->data());
  return absl::OkStatus();
}

absl::StatusOr<SinusoidalPlan> SinusoidalRowsPlan(const AnalysisEncoding& e, int64_t first,
                                                  int64_t n, DType dtype) {
  return PlanSinusoidal({e.sinusoidal, Range(first, n), dtype});
}

absl::StatusOr<RopeCachePlan> RopeRowsPlan(const AnalysisEncoding& e, int64_t seq_len,
                                           int64_t first, int64_t n, DType dtype) {
  RopeCacheArgs a{e.rope, RopeCacheLayout::kComplex, Range(first, n), dtype};
  if (!a.config.seq_len && seq_len > 0) a.config.seq_len = seq_len;
  return PlanRopeCache(std::move(a));
}

// ALiBi rows: the bias of a key p tokens back per head, p = first .. first+n-1, as [H, 1, n] with
// column j = distance first + n-1-j (CAUSAL/SYMMETRIC); BLOOM's +m*kpos as CAUSAL with a LINEAR
// future and the query at -first (column j = key position first + j).
absl::StatusOr<AlibiBiasPlan> AlibiRowsPlan(const AnalysisEncoding& e, int64_t first, int64_t n,
                                            DType dtype) {
  AlibiBiasParams p;
  p.num_heads = e.alibi.num_heads;
  p.max_bias = e.alibi.max_bias;
  p.q_len = 1;
  p.k_len = n;
  p.form = BiasForm::kFull;
  if (e.alibi.mode == AlibiMode::kBloom) {
    p.mode = AlibiMode::kCausal;
    p.future = FutureMode::kLinear;
    p.query_offset = -first;
  } else {
    p.mode = e.alibi.mode;
    p.query_offset = first + n - 1;
  }
  absl::StatusOr<AlibiBiasPlan> plan = PlanAlibiBias({p, dtype});
  if (!plan.ok()) return Prefixed(plan.status(), "alibi.");
  return plan;
}

// T5 rows: relative position -p (keys before the query) or, `after`, +p (keys after it),
// [H, 1, n] (or bucket ids [1, n]) with column j = distance first + n-1-j (before) or first + j
// (after).
absl::StatusOr<RelativeBiasPlan> T5RowsPlan(const AnalysisEncoding& e, int64_t first, int64_t n,
                                            DType dtype, bool after = false) {
  RelativeBiasArgs args = T5BiasArgs(e.t5, dtype);
  args.params.q_len = 1;
  args.params.k_len = n;
  args.params.query_offset = after ? 0 : first + n - 1;
  args.params.key_offset = after ? first : 0;
  absl::StatusOr<RelativeBiasPlan> plan = PlanRelativeBias(std::move(args));
  if (!plan.ok()) return Prefixed(plan.status(), "t5.");
  return plan;
}

// [H, n] column-major-by-distance output of a bias op -> rows [n, H] (reversed unless `forward`).
void BiasColumnsToRows(const std::vector<double>& hn, int64_t heads, int64_t n, bool forward,
                       std::vector<double>* out) {
  out->resize(static_cast<size_t>(n * heads));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = forward ? i : n - 1 - i;
    for (int64_t h = 0; h < heads; ++h) (*out)[i * heads + h] = hn[h * n + j];
  }
}

absl::Status LearnedRows(const AnalysisEncoding& e, int64_t first, int64_t n, DType dtype,
                         std::vector<double>* out) {
  const int64_t rows = e.learned.shape[0], d = e.learned.shape[1];
  if (first < 0 || first + n > rows) {
    return Invalid("learned", absl::StrCat("positions ", first, " .. ", first + n - 1,
                                           " lie outside the table's ", rows, " rows"));
  }
  out->resize(static_cast<size_t>(n * d));
  unsigned char cell[8];
  for (int64_t i = 0; i < n * d; ++i) {
    double v = LoadAsDouble(e.learned.data, e.learned.dtype, first * d + i);
    if (dtype != DType::kFloat64) {
      StoreFromDouble(cell, dtype, 0, v);
      v = LoadAsDouble(cell, dtype, 0);
    }
    (*out)[i] = v;
  }
  return absl::OkStatus();
}

absl::Status T5Rows(const Backend& backend, const AnalysisEncoding& e, int64_t first, int64_t n,
                    DType dtype, bool after, std::vector<double>* out) {
  POSENC_ASSIGN_OR_RETURN(RelativeBiasPlan plan, T5RowsPlan(e, first, n, dtype, after));
  const int64_t heads = std::max<int64_t>(plan.heads, 1);
  std::vector<double> hn;
  POSENC_RETURN_IF_ERROR(RunInto(plan.bias, &hn, [&](const TensorView& bias) {
    return RunRelativeBias(backend, plan, bias);
  }));
  BiasColumnsToRows(hn, heads, n, after, out);
  return absl::OkStatus();
}

absl::Status BiasRows(const Backend& backend, const AnalysisEncoding& e, int64_t first, int64_t n,
                      DType dtype, std::vector<double>* out) {
  std::vector<double> hn;
  int64_t heads = 1;
  if (e.family == AnalysisFamily::kAlibi) {
    POSENC_ASSIGN_OR_RETURN(AlibiBiasPlan plan, AlibiRowsPlan(e, first, n, dtype));
    heads = plan.params.num_heads;
    std::vector<double> slopes(static_cast<size_t>(heads));
    TensorView slopes_view{DType::kFloat64, plan.slopes.shape, slopes.data()};
    POSENC_RETURN_IF_ERROR(RunInto(plan.bias, &hn, [&](const TensorView& bias) {
      return RunAlibiBias(backend, plan, bias, slopes_view);
    }));
    BiasColumnsToRows(hn, heads, n, e.alibi.mode == AlibiMode::kBloom, out);
    return absl::OkStatus();
  }
  return T5Rows(backend, e, first, n, dtype, /*after=*/false, out);
}

// The width of a row, from a one-position plan of the family's op (which checks the encoding).
absl::StatusOr<int64_t> RowWidth(const AnalysisEncoding& e, int64_t first) {
  switch (e.family) {
    case AnalysisFamily::kSinusoidal: {
      POSENC_RETURN_IF_ERROR(ValidateSinusoidal(e.sinusoidal, "sinusoidal"));
      return e.sinusoidal.dim;
    }
    case AnalysisFamily::kLearned: {
      const ConstTensorView& t = e.learned;
      if (t.empty() || t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0 ||
          !IsFloatDType(t.dtype)) {
        return Invalid("learned", absl::StrCat("expected a float table [rows, D], got ",
                                               DTypeName(t.dtype), " ", ShapeString(t.shape)));
      }
      return t.shape[1];
    }
    case AnalysisFamily::kRope: {
      POSENC_ASSIGN_OR_RETURN(RopeCachePlan plan, RopeRowsPlan(e, 0, first, 1, DType::kFloat64));
      return plan.width * 2;
    }
    case AnalysisFamily::kAlibi: {
      POSENC_ASSIGN_OR_RETURN(AlibiBiasPlan plan, AlibiRowsPlan(e, first, 1, DType::kFloat64));
      return plan.params.num_heads;
    }
    case AnalysisFamily::kT5: {
      POSENC_ASSIGN_OR_RETURN(RelativeBiasPlan plan, T5RowsPlan(e, first, 1, DType::kFloat64));
      return std::max<int64_t>(plan.heads, 1);
    }
  }
  return absl::InternalError("unknown encoding family");
}

absl::Status CheckRange(const AnalysisArgs& a) {
  if (a.count < 1 || a.count > kMaxAnalysisPositions) {
    return Invalid("count",
                   absl::StrCat("expected 1 .. ", kMaxAnalysisPositions, ", got ", a.count));
  }
  if (a.start < 0 || a.start > kMaxPosition - (a.count - 1)) {
    return Invalid(
        "start", absl::StrCat("expected 0 .. ", kMaxPosition - (a.count - 1),
                              " (the last position start + count - 1 <= 2^31 - 1), got ", a.start));
  }
  return absl::OkStatus();
}

absl::Status CheckIn(absl::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return Invalid(field, absl::StrCat("expected ", lo, " .. ", hi, ", got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const AnalysisArgs& a) {
  if (a.collision_dtype && *a.collision_dtype != DType::kFloat16 &&
      *a.collision_dtype != DType::kBFloat16) {
    return Invalid("collision_dtype", absl::StrCat("expected FLOAT16 or BFLOAT16, got ",
                                                   DTypeName(*a.collision_dtype)));
  }
  POSENC_RETURN_IF_ERROR(
      CheckIn("uniqueness_offsets", a.uniqueness_offsets, 1, kMaxUniquenessOffsets));
  POSENC_RETURN_IF_ERROR(CheckIn("samples", a.samples, 1, kMaxSamples));
  POSENC_RETURN_IF_ERROR(CheckIn("window", a.window, 1, kMaxWindow));
  POSENC_RETURN_IF_ERROR(CheckIn("max_cells", a.max_cells, 1, kMaxCells));
  const ConstTensorView& t = a.embeddings;
  if (!t.empty() &&
      (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0 || !IsFloatDType(t.dtype))) {
    return Invalid("embeddings", absl::StrCat("expected a float tensor [n, D], got ",
                                              DTypeName(t.dtype), " ", ShapeString(t.shape)));
  }
  const ConstTensorView& k = a.keys;
  if (!k.empty() && t.empty()) {
    return Invalid("keys", "given without embeddings (the query rows they pair with)");
  }
  if (!k.empty() && (k.shape != t.shape || !IsFloatDType(k.dtype))) {
    return Invalid("keys", absl::StrCat("expected a float tensor of the shape of embeddings ",
                                        ShapeString(t.shape), ", got ", DTypeName(k.dtype), " ",
                                        ShapeString(k.shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ResolveDistances(const AnalysisArgs& a) {
  if (static_cast<int64_t>(a.distances.size()) > kMaxAnalysisDistances) {
    return Invalid("distances", absl::StrCat("expected at most ", kMaxAnalysisDistances,
                                             " entries, got ", a.distances.size()));
  }
  for (size_t i = 0; i < a.distances.size(); ++i) {
    const int64_t k = a.distances[i];
    if (k < 1 || k > a.count - 1) {
      return Invalid(absl::StrCat("distances[", i, "]"),
                     absl::StrCat("expected 1 .. count - 1 = ", a.count - 1, ", got ", k));
    }
  }
  if (!a.distances.empty()) return a.distances;
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= a.count - 1 && static_cast<int64_t>(out.size()) < kMaxDefaultDistances;
       k *= 2) {
    out.push_back(k);
  }
  return out;
}

absl::Status MarkProperties(const std::vector<AnalysisProperty>& props, AnalysisPlan* plan) {
  if (props.empty()) {
    std::fill(std::begin(plan->wants), std::end(plan->wants), true);
    return absl::OkStatus();
  }
  for (size_t i = 0; i < props.size(); ++i) {
    bool& w = plan->wants[static_cast<int>(props[i])];
    if (w) {
      return Invalid(absl::StrCat("properties[", i, "]"),
                     absl::StrCat("expected each property once, got ",
                                  AnalysisPropertyName(props[i]), " twice"));
    }
    w = true;
  }
  return absl::OkStatus();
}

// What the run allocates at most: two chunks of rows (and a bias op's buffer beside each), the
// exact uniqueness table, the collision search's (hash, position) per position, the bias window
// and the similarity window.
int64_t WorkingBytes(const AnalysisPlan& p) {
  const int64_t row_bytes = p.width * 8;
  int64_t bytes = 4 * p.chunk_rows * row_bytes;
  if (p.Wants(AnalysisProperty::kUniqueness)) {
    bytes += std::min(p.args.count, kExactUniquenessPositions) * row_bytes;
    if (p.args.collision_dtype) bytes += 16 * p.args.count;
  }
  // RELATIVE: biases compare a FULL window (and its copy); rotation fits read two chunks.
  const AnalysisFamily family = p.args.encoding.family;
  const int64_t w = std::min(p.args.count, kMaxBiasWindow);
  if (p.Wants(AnalysisProperty::kRelative) &&
      (family == AnalysisFamily::kAlibi || family == AnalysisFamily::kT5)) {
    bytes += 2 * w * w * p.width * 8;
  }
  if (p.Wants(AnalysisProperty::kSimilarity)) {
    const int64_t sw = std::min(p.args.window, p.args.count);
    bytes += sw * sw * 8 + sw * row_bytes * 2;
  }
  return bytes;
}

}  // namespace

RelativeBiasArgs T5BiasArgs(const T5AnalysisParams& t, DType dtype) {
  RelativeBiasArgs args;
  args.params.bidirectional = t.bidirectional;
  args.params.num_buckets = t.num_buckets;
  args.params.max_distance = t.max_distance;
  args.params.table = t.table;
  args.params.form = t.table.empty() ? BiasForm::kBuckets : BiasForm::kFull;
  if (!t.table.empty()) args.output_dtype = dtype;
  return args;
}

absl::StatusOr<AnalysisPlan> PlanAnalysis(AnalysisArgs args) {
  POSENC_RETURN_IF_ERROR(CheckRange(args));
  POSENC_RETURN_IF_ERROR(CheckOptions(args));
  AnalysisPlan plan;
  POSENC_RETURN_IF_ERROR(MarkProperties(args.properties, &plan));
  POSENC_ASSIGN_OR_RETURN(plan.width, RowWidth(args.encoding, args.start));
  if (args.encoding.family == AnalysisFamily::kLearned &&
      args.start + args.count > args.encoding.learned.shape[0]) {
    return Invalid("count", absl::StrCat("expected start + count <= the learned table's ",
                                         args.encoding.learned.shape[0], " rows, got ", args.start,
                                         " + ", args.count));
  }
  POSENC_ASSIGN_OR_RETURN(plan.distances, ResolveDistances(args));
  plan.chunk_rows = std::clamp<int64_t>(kAnalysisChunkBytes / (plan.width * 8), 1, args.count);
  plan.args = std::move(args);
  plan.working_bytes = WorkingBytes(plan);
  return plan;
}

absl::Status AnalysisRows(const Backend& backend, const AnalysisPlan& plan, int64_t first,
                          int64_t n, std::vector<double>* out, DType dtype) {
  const AnalysisEncoding& e = plan.args.encoding;
  switch (e.family) {
    case AnalysisFamily::kSinusoidal: {
      POSENC_ASSIGN_OR_RETURN(SinusoidalPlan p, SinusoidalRowsPlan(e, first, n, dtype));
      return RunInto(p.table, out,
                     [&](const TensorView& t) { return RunSinusoidal(backend, p, t); });
    }
    case AnalysisFamily::kLearned: return LearnedRows(e, first, n, dtype, out);
    case AnalysisFamily::kRope: {
      const int64_t seq_len = plan.args.start + plan.args.count;
      POSENC_ASSIGN_OR_RETURN(RopeCachePlan p, RopeRowsPlan(e, seq_len, first, n, dtype));
      return RunInto(p.cos, out, [&](const TensorView& t) {
        return RunRopeCache(backend, p, nullptr, t, TensorView{}).status();
      });
    }
    case AnalysisFamily::kAlibi:
    case AnalysisFamily::kT5: return BiasRows(backend, e, first, n, dtype, out);
  }
  return absl::InternalError("unknown encoding family");
}

absl::Status T5RowsAfter(const Backend& backend, const AnalysisPlan& plan, int64_t first, int64_t n,
                         std::vector<double>* out, DType dtype) {
  if (plan.args.encoding.family != AnalysisFamily::kT5) {
    return absl::InternalError("T5RowsAfter: the plan's encoding is not T5");
  }
  return T5Rows(backend, plan.args.encoding, first, n, dtype, /*after=*/true, out);
}

absl::StatusOr<AnalysisResult> RunAnalysis(const Backend& backend, const AnalysisPlan& plan) {
  AnalysisResult r;
  if (plan.Wants(AnalysisProperty::kUniqueness)) {
    POSENC_ASSIGN_OR_RETURN(r.uniqueness, AnalyzeUniqueness(backend, plan));
  }
  if (plan.Wants(AnalysisProperty::kBounds)) {
    POSENC_ASSIGN_OR_RETURN(r.bounds, AnalyzeBounds(backend, plan));
  }
  if (plan.Wants(AnalysisProperty::kRelative)) {
    POSENC_ASSIGN_OR_RETURN(r.relative, AnalyzeRelative(backend, plan));
  }
  if (plan.Wants(AnalysisProperty::kDecay)) {
    POSENC_ASSIGN_OR_RETURN(r.decay, AnalyzeDecay(backend, plan));
  }
  if (plan.Wants(AnalysisProperty::kExtrapolation)) {
    POSENC_ASSIGN_OR_RETURN(r.extrapolation, AnalyzeExtrapolation(backend, plan));
  }
  if (plan.Wants(AnalysisProperty::kSimilarity)) {
    POSENC_ASSIGN_OR_RETURN(r.similarity, AnalyzeSimilarity(backend, plan));
  }
  return r;
}

absl::string_view AnalysisFamilyName(AnalysisFamily family) {
  switch (family) {
    case AnalysisFamily::kSinusoidal: return "sinusoidal";
    case AnalysisFamily::kLearned: return "learned";
    case AnalysisFamily::kRope: return "rope";
    case AnalysisFamily::kAlibi: return "alibi";
    case AnalysisFamily::kT5: return "t5";
  }
  return "unknown";
}

absl::string_view AnalysisPropertyName(AnalysisProperty property) {
  switch (property) {
    case AnalysisProperty::kUniqueness: return "uniqueness";
    case AnalysisProperty::kBounds: return "bounds";
    case AnalysisProperty::kRelative: return "relative";
    case AnalysisProperty::kDecay: return "decay";
    case AnalysisProperty::kExtrapolation: return "extrapolation";
    case AnalysisProperty::kSimilarity: return "similarity";
  }
  return "unknown";
}

}  // namespace posenc::kernels
