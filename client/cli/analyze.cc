// The analyze command (AnalyzeEncoding): the properties of an encoding over a position range.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/canvas.h"
#include "client/cli/commands.h"
#include "client/cli/heatmap.h"
#include "client/cli/inputs.h"
#include "client/cli/lineplot.h"
#include "client/cli/rope_config.h"
#include "client/cli/wire_names.h"
#include "kernels/common/status.h"
#include "proto/posenc/v1/vocabulary.h"

namespace posenc::cli {
namespace {

const FlagGroup& AnalyzeFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"encoding", FlagType::kChoice, "", "the encoding analysed (required)",
       "sinusoidal|learned|rope|alibi|t5"},
      {"start", FlagType::kInt, "P", "first position (biases: distance) (default 0)"},
      {"count", FlagType::kInt, "N", "number of positions (required)"},
      {"properties", FlagType::kString, "LIST",
       "uniqueness,bounds,relative,decay,extrapolation,similarity (default all)"},
      {"collision", FlagType::kChoice, "", "look for the first collision at this precision",
       "float16|bfloat16"},
      {"offsets", FlagType::kInt, "K", "uniqueness past 4096 positions: offsets 1..K (default 64)"},
      {"distances", FlagType::kIntList, "LIST", "relative/decay distances k (default 1,2,4,..)"},
      {"samples", FlagType::kInt, "N", "decay: random q/k pairs per distance (default 256)"},
      {"seed", FlagType::kInt, "N", "decay/similarity: seed of the random draws (default 0)"},
      {"window", FlagType::kInt, "N", "similarity: positions in the window (default 256)"},
      {"max-cells", FlagType::kInt, "N", "similarity: cells per axis (default 256)"},
      {"embeddings", FlagType::kString, "FILE",
       "decay: q rows (and k rows without --keys), similarity: token rows, from a .npy [n, D]"},
      {"keys", FlagType::kString, "FILE", "decay: k rows from a .npy of the shape of --embeddings"},
      {"dim", FlagType::kInt, "D", "sinusoidal: table width"},
      EnumFlagSpec<client::SinusoidalLayout>("layout", "sinusoidal column layout"),
      EnumFlagSpec<client::FreqScheme>("freq", "sinusoidal frequency scheme"),
      {"heads", FlagType::kInt, "N", "alibi: number of heads"},
      {"max-bias", FlagType::kDouble, "B", "alibi: maximum bias (default 8)"},
      EnumFlagSpec<client::AlibiMode>("mode", "alibi: bias formula (default causal)"),
      {"unidirectional", FlagType::kSwitch, "", "t5: decoder buckets"},
      {"num-buckets", FlagType::kInt, "N", "t5: number of buckets (default 32)"},
      {"max-distance", FlagType::kInt, "N", "t5: max distance (default 128)"},
      {"table", FlagType::kString, "FILE", "learned/t5: the table from a .npy file"},
      {"table-name", FlagType::kString, "NAME", "learned/t5: a table loaded by the server"},
      {"random-table", FlagType::kInt, "SEED", "learned/t5: a random table for a demo"},
      {"table-offset", FlagType::kInt, "N", "learned: position p reads row p + N"},
      {"json", FlagType::kSwitch, "", "print JSON (as --format json)"},
      {"png", FlagType::kString, "FILE",
       "draw the relative residuals, decay/extrapolation curves and similarity heatmap into FILE"},
  };
  return *kFlags;
}

absl::Status ReadProperties(const ParsedFlags& flags, client::AnalyzeEncodingOptions* o) {
  const std::optional<std::string> text = flags.String("properties");
  if (!text.has_value()) return absl::OkStatus();
  for (absl::string_view name : absl::StrSplit(*text, ',', absl::SkipEmpty())) {
    const std::optional<v1::AnalysisProperty> p =
        v1::ParseEnum<v1::AnalysisProperty>(std::string(name));
    if (!p.has_value() || *p == v1::ANALYSIS_PROPERTY_UNSPECIFIED) {
      return UsageError(absl::StrCat("--properties: expected names of ",
                                     v1::Choices<v1::AnalysisProperty>(","), ", got ", name));
    }
    o->properties.push_back(static_cast<client::AnalysisProperty>(*p));
  }
  return absl::OkStatus();
}

absl::Status ReadTableEncoding(const ParsedFlags& flags, const std::string& encoding,
                               client::AnalyzeEncodingOptions* o) {
  if (encoding == "learned") {
    client::LearnedTable table;
    POSENC_RETURN_IF_ERROR(
        TableFromFlags(flags, {o->start + o->count, 16}, &table.table_inline, &table.table_name));
    table.table_offset = flags.Int("table-offset").value_or(0);
    o->learned = std::move(table);
    return absl::OkStatus();
  }
  client::T5Analysis t5;
  if (flags.Switch("unidirectional")) t5.bidirectional = false;
  t5.num_buckets = flags.Int("num-buckets");
  t5.max_distance = flags.Int("max-distance");
  if (flags.Has("table") || flags.Has("table-name") || flags.Has("random-table")) {
    POSENC_RETURN_IF_ERROR(
        TableFromFlags(flags, {t5.num_buckets.value_or(32), 4}, &t5.table_inline, &t5.table_name));
  }
  o->t5 = std::move(t5);
  return absl::OkStatus();
}

absl::Status ReadEncoding(const ParsedFlags& flags, client::AnalyzeEncodingOptions* o) {
  const std::optional<std::string> encoding = flags.String("encoding");
  if (!encoding.has_value()) {
    return UsageError("--encoding is required (sinusoidal, learned, rope, alibi or t5)");
  }
  if (*encoding == "sinusoidal") {
    POSENC_ASSIGN_OR_RETURN(const int64_t dim, RequiredInt(flags, "dim"));
    o->sinusoidal = client::SinusoidalParams{dim, flags.Double("base"),
                                             EnumFlag<client::SinusoidalLayout>(flags, "layout"),
                                             EnumFlag<client::FreqScheme>(flags, "freq")};
  } else if (*encoding == "rope") {
    POSENC_ASSIGN_OR_RETURN(o->config, ReadRopeConfigFlags(flags));
  } else if (*encoding == "alibi") {
    POSENC_ASSIGN_OR_RETURN(const int64_t heads, RequiredInt(flags, "heads"));
    o->alibi = client::AlibiAnalysis{heads, flags.Double("max-bias"),
                                     EnumFlag<client::AlibiMode>(flags, "mode"),
                                     client::FutureMode::kUnspecified};
  } else {
    return ReadTableEncoding(flags, *encoding, o);
  }
  return absl::OkStatus();
}

absl::StatusOr<client::AnalyzeEncodingOptions> ReadAnalyzeOptions(const ParsedFlags& flags) {
  client::AnalyzeEncodingOptions o;
  o.start = flags.Int("start").value_or(0);
  POSENC_ASSIGN_OR_RETURN(o.count, RequiredInt(flags, "count"));
  POSENC_RETURN_IF_ERROR(ReadEncoding(flags, &o));
  POSENC_RETURN_IF_ERROR(ReadProperties(flags, &o));
  if (const std::optional<std::string> c = flags.String("collision"); c.has_value()) {
    o.collision_dtype = *c == "float16" ? DType::kFloat16 : DType::kBFloat16;
  }
  o.uniqueness_offsets = flags.Int("offsets");
  o.distances = flags.IntList("distances");
  o.samples = flags.Int("samples");
  o.seed = static_cast<uint64_t>(flags.Int("seed").value_or(0));
  o.window = flags.Int("window");
  o.max_cells = flags.Int("max-cells");
  if (const std::optional<std::string> path = flags.String("embeddings"); path.has_value()) {
    POSENC_ASSIGN_OR_RETURN(o.embeddings, FloatTensorFromFile(flags, *path));
  }
  if (const std::optional<std::string> path = flags.String("keys"); path.has_value()) {
    POSENC_ASSIGN_OR_RETURN(o.keys, FloatTensorFromFile(flags, *path));
  }
  return o;
}

// ---- output -----------------------------------------------------------------------------------

std::string G(double v) { return absl::StrFormat("%.6g", v); }

// "bfloat16" ("" when absent).
std::string DTypeText(const std::optional<DType>& dtype) {
  return dtype ? absl::AsciiStrToLower(AbslView(client::DTypeName(*dtype))) : std::string();
}

Json SummaryJson(const client::AnalysisSummary& s) {
  return {
      {"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"argmin", s.argmin}, {"argmax", s.argmax}};
}

Json CurvesJson(const std::vector<client::AnalysisCurve>& curves) {
  Json out = Json::array();
  for (const client::AnalysisCurve& c : curves) {
    out.push_back({{"label", c.label}, {"x", c.x}, {"y", c.y}});
  }
  return out;
}

Json UniquenessJson(const client::UniquenessAnalysis& u) {
  Json j = {{"exact", u.exact},
            {"method", u.method},
            {"min_distance", u.min_distance},
            {"min_p", u.min_p},
            {"min_q", u.min_q}};
  if (u.collision_searched) {
    j["collision"] = {{"dtype", DTypeText(u.collision_dtype)},
                      {"found", u.collision_found},
                      {"p", u.collision_p},
                      {"q", u.collision_q}};
  }
  return j;
}

Json RelativeJson(const client::RelativeAnalysis& r) {
  Json j = {{"applicable", r.applicable}, {"note", r.note}, {"pairs", r.pairs}};
  Json fits = Json::array();
  for (const client::RotationFit& f : r.rotations) {
    fits.push_back({{"distance", f.distance},
                    {"residual", f.residual},
                    {"worst_pair_residual", f.worst_pair_residual},
                    {"worst_pair", f.worst_pair},
                    {"max_angle_error", f.max_angle_error}});
  }
  j["rotations"] = std::move(fits);
  if (r.bias.has_value()) {
    const client::BiasStructure& b = *r.bias;
    j["bias"] = {{"depends_on_distance_only", b.depends_on_distance_only},
                 {"max_shift_deviation", b.max_shift_deviation},
                 {"max_shift_deviation_row_centered", b.max_shift_deviation_row_centered},
                 {"window", b.window},
                 {"bucket_edges", b.bucket_edges},
                 {"note", b.note}};
  }
  return j;
}

Json LaterJson(const client::AnalyzeEncodingResult& r, Json j) {
  if (r.decay.has_value()) {
    j["decay"] = {{"method", r.decay->method},
                  {"curves", CurvesJson(r.decay->curves)},
                  {"decay_stops_at", r.decay->decay_stops_at},
                  {"samples", r.decay->samples},
                  {"seed", r.decay->seed},
                  {"note", r.decay->note}};
  }
  if (r.extrapolation.has_value()) {
    Json series = Json::array();
    for (const client::ExtrapolationSeries& s : r.extrapolation->series) {
      series.push_back({{"scaling", s.scaling}, {"curves", CurvesJson(s.curves)}});
    }
    j["extrapolation"] = {{"original_context", r.extrapolation->original_context},
                          {"series", std::move(series)},
                          {"note", r.extrapolation->note}};
  }
  if (r.similarity.has_value()) {
    const client::SimilarityAnalysis& s = *r.similarity;
    j["similarity"] = {{"window_start", s.window_start},
                       {"window", s.window},
                       {"rows", s.rows},
                       {"cols", s.cols},
                       {"cell", s.cell},
                       {"matrix", s.matrix},
                       {"add_norm_change", s.add_norm_change},
                       {"add_angle_degrees", s.add_angle_degrees},
                       {"concat_norm_change", s.concat_norm_change},
                       {"concat_angle_degrees", s.concat_angle_degrees},
                       {"random_embeddings", s.random_embeddings},
                       {"note", s.note}};
  }
  return j;
}

Json AnalysisJson(const client::AnalyzeEncodingResult& r) {
  Json j = {{"family", r.family}, {"width", r.width}};
  if (r.uniqueness.has_value()) j["uniqueness"] = UniquenessJson(*r.uniqueness);
  if (r.bounds.has_value()) {
    j["bounds"] = {{"values", SummaryJson(r.bounds->values)},
                   {"norms", SummaryJson(r.bounds->norms)}};
  }
  if (r.relative.has_value()) j["relative"] = RelativeJson(*r.relative);
  return LaterJson(r, std::move(j));
}

std::string UniquenessText(const client::UniquenessAnalysis& u) {
  std::string t = absl::StrCat("uniqueness: min ||PE(p) - PE(q)|| = ", G(u.min_distance), " at (",
                               u.min_p, ", ", u.min_q, ")\n  method: ", u.method, "\n");
  if (!u.collision_searched) return t;
  const std::string dtype = DTypeText(u.collision_dtype);
  if (u.collision_found) {
    absl::StrAppend(&t, "  first ", dtype, " collision: positions ", u.collision_p, " and ",
                    u.collision_q, " have equal encodings\n");
  } else {
    absl::StrAppend(&t, "  no ", dtype, " collision in the range\n");
  }
  return t;
}

std::string SummaryText(std::string_view name, const client::AnalysisSummary& s) {
  return absl::StrFormat("  %-7s min %-12s (p=%d)  max %-12s (p=%d)  mean %s\n", name, G(s.min),
                         s.argmin, G(s.max), s.argmax, G(s.mean));
}

std::string RelativeText(const client::RelativeAnalysis& r) {
  std::string t = absl::StrCat("relative: ", r.note, "\n");
  if (!r.rotations.empty()) {
    absl::StrAppend(&t, absl::StrFormat("  %10s  %-12s  %-12s  %s\n", "k", "residual", "worst pair",
                                        "max angle error (rad)"));
  }
  for (const client::RotationFit& f : r.rotations) {
    absl::StrAppend(&t, absl::StrFormat("  %10d  %-12s  %-12s  %s\n", f.distance, G(f.residual),
                                        absl::StrCat(G(f.worst_pair_residual), " #", f.worst_pair),
                                        G(f.max_angle_error)));
  }
  if (r.bias.has_value()) {
    const client::BiasStructure& b = *r.bias;
    absl::StrAppend(
        &t, "  depends on key - query only: ", b.depends_on_distance_only ? "yes" : "no",
        " (max shift deviation ", G(b.max_shift_deviation), ", less each row's own ",
        G(b.max_shift_deviation_row_centered), ", window ", b.window, ")\n  ", b.note, "\n");
    if (!b.bucket_edges.empty()) {
      absl::StrAppend(&t, "  bucket edges: ", absl::StrJoin(b.bucket_edges, ", "), "\n");
    }
  }
  return t;
}

std::string AnalysisText(const client::AnalyzeEncodingResult& r,
                         const client::AnalyzeEncodingOptions& o) {
  std::string t = absl::StrCat("encoding: ", r.family, " (", r.width, " values per position), ",
                               "positions ", o.start, " .. ", o.start + o.count - 1, "\n");
  if (r.uniqueness.has_value()) absl::StrAppend(&t, UniquenessText(*r.uniqueness));
  if (r.bounds.has_value()) {
    absl::StrAppend(&t, "bounds:\n", SummaryText("values", r.bounds->values),
                    SummaryText("norms", r.bounds->norms));
  }
  if (r.relative.has_value()) absl::StrAppend(&t, RelativeText(*r.relative));
  if (r.decay.has_value()) {
    absl::StrAppend(&t, "decay: ", r.decay->method, "; stops decaying at ", r.decay->decay_stops_at,
                    " ", r.decay->note, "\n");
  }
  if (r.extrapolation.has_value()) {
    absl::StrAppend(&t, "extrapolation: ", r.extrapolation->series.size(),
                    " scalings, original context ", r.extrapolation->original_context, "\n");
  }
  if (r.similarity.has_value()) {
    const client::SimilarityAnalysis& s = *r.similarity;
    absl::StrAppend(&t, "similarity: ", s.rows, "x", s.cols, " cells; add: norm change ",
                    G(s.add_norm_change), ", angle ", G(s.add_angle_degrees),
                    " deg; concat: norm change ", G(s.concat_norm_change), ", angle ",
                    G(s.concat_angle_degrees), " deg\n");
  }
  return t;
}

// ---- --png: the curves as line plots (client/cli/lineplot.h) ----------------------------------

// The curves of `curves` (their wavelength curves only, or all others), labels prefixed.
std::vector<PlotSeries> Series(const std::vector<client::AnalysisCurve>& curves,
                               const std::string& prefix, bool wavelength) {
  std::vector<PlotSeries> out;
  for (const client::AnalysisCurve& c : curves) {
    if ((c.label == "wavelength") != wavelength || c.x.empty()) continue;
    out.push_back({absl::StrCat(prefix, c.label), c.x, c.y});
  }
  return out;
}

// A distance axis over more than three decades is drawn log (distance 0 is then left out).
AxisScale DistanceScale(const std::vector<PlotSeries>& series) {
  double lo = 0, hi = 0;
  for (const PlotSeries& s : series) {
    for (double x : s.x) {
      if (x > 0 && (lo == 0 || x < lo)) lo = x;
      hi = std::max(hi, x);
    }
  }
  return lo > 0 && hi > 1000 * lo ? AxisScale::kLog : AxisScale::kLinear;
}

void AppendExtrapolation(const client::ExtrapolationAnalysis& e, std::vector<LinePlot>* panels) {
  LinePlot curves{.title = "extrapolation: mean |q.k| and RoFormer bound B per scaling",
                  .x_axis = "distance",
                  .y_axis = "|q.k|, B"};
  LinePlot waves{.title = "wavelength per frequency slot (tokens)",
                 .x_axis = "slot j",
                 .y_axis = "wavelength",
                 .y_scale = AxisScale::kLog};
  for (const client::ExtrapolationSeries& s : e.series) {
    for (PlotSeries& p : Series(s.curves, s.scaling + ": ", false)) {
      curves.series.push_back(std::move(p));
    }
    for (PlotSeries& p : Series(s.curves, s.scaling + ": ", true)) {
      waves.series.push_back(std::move(p));
    }
  }
  curves.x_scale = DistanceScale(curves.series);
  if (e.original_context > 0) {
    curves.markers.push_back({static_cast<double>(e.original_context), "trained length"});
    // A slot whose wavelength lies above this line never completed a period in training.
    double last_slot = 0;
    for (const PlotSeries& w : waves.series) {
      if (!w.x.empty()) last_slot = std::max(last_slot, w.x.back());
    }
    const double context = static_cast<double>(e.original_context);
    if (!waves.series.empty()) {
      waves.series.push_back({"trained length", {0, last_slot}, {context, context}});
    }
  }
  if (!curves.series.empty()) panels->push_back(std::move(curves));
  if (!waves.series.empty()) panels->push_back(std::move(waves));
}

// RELATIVE's rotation fits: the residual per distance k (log axes; exact zeros cannot be drawn on
// a log axis and are counted as not drawn, a linear axis is used when every residual is 0).
void AppendRelative(const client::RelativeAnalysis& rel, std::vector<LinePlot>* panels) {
  if (rel.rotations.empty()) return;
  LinePlot plot{.title = "relative: residual of the best rotation taking PE(p) to PE(p+k)",
                .x_axis = "distance k",
                .y_axis = "relative residual",
                .x_scale = AxisScale::kLog};
  PlotSeries all{.label = "all pairs"}, worst{.label = "worst frequency pair"};
  bool positive = false;
  for (const client::RotationFit& f : rel.rotations) {
    all.x.push_back(static_cast<double>(f.distance));
    all.y.push_back(f.residual);
    worst.x.push_back(static_cast<double>(f.distance));
    worst.y.push_back(f.worst_pair_residual);
    positive = positive || f.residual > 0 || f.worst_pair_residual > 0;
  }
  plot.y_scale = positive ? AxisScale::kLog : AxisScale::kLinear;
  plot.series = {std::move(all), std::move(worst)};
  panels->push_back(std::move(plot));
}

// The similarity matrix as a heatmap (heatmap.h): cell (i, j) is the mean cosine similarity of
// the positions of cells i and j; axes labelled with each cell's first position.
absl::StatusOr<std::optional<Canvas>> SimilarityHeatmap(const client::AnalyzeEncodingResult& r) {
  if (!r.similarity.has_value() || r.similarity->matrix.empty()) return std::nullopt;
  const client::SimilarityAnalysis& s = *r.similarity;
  MatrixHeatmap map{
      .title = absl::StrCat("cosine similarity of ", r.family, " encodings, positions ",
                            s.window_start, " .. ", s.window_start + s.window - 1),
      .row_axis = "position p",
      .col_axis = "position q",
      .row_start = s.window_start,
      .row_step = s.cell,
      .col_start = s.window_start,
      .col_step = s.cell};
  if (s.cell > 1) {
    map.notes.push_back(absl::StrCat("each cell: the mean over ", s.cell, " x ", s.cell,
                                     " position pairs (labels: a cell's first position)"));
  }
  POSENC_ASSIGN_OR_RETURN(map.matrix, client::Tensor::FromDoubles(s.matrix, {s.rows, s.cols}));
  POSENC_ASSIGN_OR_RETURN(Canvas canvas, RenderMatrixHeatmap(map));
  return canvas;
}

// The curves as line plots (relative, decay, extrapolation), the similarity matrix as a heatmap
// beside them.
absl::Status MaybeWritePng(const ParsedFlags& flags, const client::AnalyzeEncodingResult& r) {
  const std::optional<std::string> path = flags.String("png");
  if (!path.has_value()) return absl::OkStatus();
  std::vector<LinePlot> panels;
  if (r.relative.has_value()) AppendRelative(*r.relative, &panels);
  if (r.decay.has_value()) {
    const bool rope = r.family == "rope";
    LinePlot decay{.title = rope ? "decay: mean |q.k| and the RoFormer bound B per distance"
                                 : "decay: bias per distance, per head",
                   .x_axis = "distance",
                   .y_axis = rope ? "|q.k|, B" : "bias"};
    decay.series = Series(r.decay->curves, "", false);
    if (rope) decay.x_scale = DistanceScale(decay.series);
    if (r.decay->decay_stops_at >= 0) {
      decay.markers.push_back({static_cast<double>(r.decay->decay_stops_at), "B stops decaying"});
    }
    if (!decay.series.empty()) panels.push_back(std::move(decay));
  }
  if (r.extrapolation.has_value()) AppendExtrapolation(*r.extrapolation, &panels);
  POSENC_ASSIGN_OR_RETURN(std::optional<Canvas> heatmap, SimilarityHeatmap(r));
  if (panels.empty() && !heatmap.has_value()) {
    return UsageError(
        "--png: nothing to draw (ask for --properties relative (sinusoidal, rope), decay, "
        "extrapolation or similarity)");
  }
  std::optional<Canvas> picture = std::move(heatmap);
  if (!panels.empty()) {
    POSENC_ASSIGN_OR_RETURN(
        Canvas plots, RenderLinePlots(absl::StrCat("posenc analyze: ", r.family), {}, panels));
    picture = picture.has_value() ? Beside(plots, *picture) : std::move(plots);
  }
  return WritePng(*path, *picture);
}

absl::StatusOr<CommandOutput> RunAnalyze(const ParsedFlags& flags, const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(client::AnalyzeEncodingOptions options, ReadAnalyzeOptions(flags));
  POSENC_ASSIGN_OR_RETURN(client::AnalyzeEncodingResult result, client.AnalyzeEncoding(options));
  POSENC_RETURN_IF_ERROR(MaybeWritePng(flags, result));
  CommandOutput out;
  out.extras = AnalysisJson(result);
  out.text = AnalysisText(result, options);
  if (flags.Switch("json")) out.format = OutputFormat::kJson;
  return out;
}

}  // namespace

Command AnalyzeCommand() {
  return {"analyze",
          "the properties of an encoding over a position range (AnalyzeEncoding)",
          "example: posenc analyze --encoding rope --head-dim 128 --base 500000 --count 131072 "
          "--collision bfloat16\n"
          "         posenc analyze --encoding sinusoidal --dim 512 --count 4096 "
          "--properties uniqueness,bounds,relative --json\n"
          "         posenc analyze --encoding alibi --heads 8 --count 2048",
          {&AnalyzeFlags(), &RopeConfigFlags()},
          &RunAnalyze};
}

}  // namespace posenc::cli
