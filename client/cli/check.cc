// posenc check (check.h): read the user's files, ask posenc for the exact FLOAT64 values, compare
// in double, summarize per position band, optionally plot.
#include "client/cli/check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/npy.h"
#include "client/cli/png.h"
#include "client/kernels_dtype.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"

namespace posenc::cli {
namespace {

// Band k >= 1 holds positions [kFirstBand * 2^(k-1), kFirstBand * 2^k); band 0 is [0, kFirstBand).
constexpr int64_t kFirstBand = 1024;

int BandOf(int64_t position) {
  int band = 0;
  for (int64_t edge = kFirstBand; position >= edge; edge *= 2) ++band;
  return band;
}

int64_t BandStart(int band) { return band == 0 ? 0 : kFirstBand << (band - 1); }
int64_t BandEnd(int band) { return kFirstBand << band; }

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string Described(const std::string& path, const Tensor& t) {
  return absl::StrCat(path, " ", std::string(client::DTypeName(t.dtype)), " ", ShapeText(t.shape));
}

// "[4093, 17]": the multi-index of flat element `index` in `shape`.
std::string IndexText(int64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = index % shape[d];
    index /= shape[d];
  }
  return ShapeText(idx);
}

absl::StatusOr<Tensor> ReadFloatNpy(std::string_view flag, const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
  if (!client::IsFloatDType(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("--", std::string(flag), " ", path,
                                                   ": expected a float array, got ",
                                                   std::string(client::DTypeName(t.dtype))));
  }
  if (t.NumElements() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", std::string(flag), " ", path, ": the array ", ShapeText(t.shape), " is empty"));
  }
  return t;
}

// The position of every token of `grid`, as the server resolves them (kernels/common/positions),
// for the `tokens` tokens of the server's result: M-RoPE ids ([3, ...]) are tried when the plain
// reading gives another number of tokens.
absl::StatusOr<kernels::ResolvedPositions> ResolveFor(const Positions& positions,
                                                      kernels::TokenGrid grid, int64_t tokens) {
  kernels::PositionSpec spec;
  spec.kind = static_cast<kernels::PositionSpec::Kind>(static_cast<int>(positions.kind));
  spec.start = positions.start;
  spec.count = positions.count;
  spec.offsets = positions.offsets;
  spec.cu_seqlens = positions.cu_seqlens;
  const kernels::ConstTensorView view = {
      client::ToKernelsDType(positions.tensor.dtype),
      kernels::Shape(positions.tensor.shape.begin(), positions.tensor.shape.end()),
      positions.tensor.data.data()};
  if (positions.kind == Positions::Kind::kIds) spec.ids = view;
  if (positions.kind == Positions::Kind::kAttentionMask) spec.mask = view;
  absl::Status first_error;
  for (int64_t components : {1, 3}) {
    grid.components = components;
    absl::StatusOr<kernels::PositionPlan> plan = kernels::PlanPositions(spec, grid);
    if (!plan.ok()) {
      if (first_error.ok()) first_error = plan.status();
      continue;
    }
    if (plan->num_tokens != tokens) continue;
    return kernels::ResolvePositions(*plan);
  }
  if (!first_error.ok()) return first_error;
  return absl::InvalidArgumentError(
      absl::StrCat("the positions do not give the ", tokens, " tokens of the result"));
}

// Everything compared, value by value.
struct Comparison {
  double max_error = 0;
  int64_t worst_position = -1;
  std::string worst_element;  // "cos[4093, 17]"
  int64_t over_tolerance = 0;
  int64_t compared = 0;
  double max_exact = 0;  // largest |exact value|
  // (position, largest error of a token there), one entry per compared token.
  std::vector<std::pair<int64_t, double>> per_token;
};

// Compares `user` with `exact` (same number of elements); element i belongs to token
// token_of(i). The tolerance is applied afterwards (CountOver).
template <typename TokenOf>
void Compare(const std::string& name, const Tensor& user, const Tensor& exact,
             const kernels::ResolvedPositions& positions, TokenOf token_of, Comparison* out) {
  const int64_t n = user.NumElements();
  std::vector<double> token_max(static_cast<size_t>(positions.num_tokens), -1.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t token = token_of(i);
    if (!positions.IsValid(token)) continue;
    const double e = exact.At(i);
    const double u = user.At(i);
    double err = std::fabs(u - e);
    if (std::isnan(err)) err = std::numeric_limits<double>::infinity();  // NaN in the file
    out->max_exact = std::max(out->max_exact, std::fabs(e));
    ++out->compared;
    double& slot = token_max[static_cast<size_t>(token)];
    slot = std::max(slot, err);
    if (err > out->max_error || out->worst_position < 0) {
      out->max_error = std::max(out->max_error, err);
      out->worst_position = positions.At(token);
      out->worst_element = name + IndexText(i, user.shape);
    }
  }
  for (int64_t t = 0; t < positions.num_tokens; ++t) {
    if (token_max[static_cast<size_t>(t)] >= 0) {
      out->per_token.emplace_back(positions.At(t), token_max[static_cast<size_t>(t)]);
    }
  }
}

// The number of values over `tolerance`, known only after Compare (the default tolerance scales
// with the largest exact value): a second pass over the data.
template <typename TokenOf>
int64_t CountOver(const Tensor& user, const Tensor& exact,
                  const kernels::ResolvedPositions& positions, TokenOf token_of, double tolerance) {
  int64_t over = 0;
  const int64_t n = user.NumElements();
  for (int64_t i = 0; i < n; ++i) {
    if (!positions.IsValid(token_of(i))) continue;
    const double err = std::fabs(user.At(i) - exact.At(i));
    if (!(err <= tolerance)) ++over;
  }
  return over;
}

double DefaultTolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return std::ldexp(1.0, -10);
    case DType::kBFloat16: return std::ldexp(1.0, -7);
    case DType::kFloat32: return 1e-6;
    default: return 1e-9;
  }
}

// An error as JSON: a number, or "inf" (a NaN or infinity in the file), as output.h writes
// non-finite values.
Json ErrorJson(double e) { return std::isfinite(e) ? Json(e) : Json("inf"); }

// The less precise of two float dtypes (the larger default tolerance).
DType Coarser(DType a, DType b) { return DefaultTolerance(a) >= DefaultTolerance(b) ? a : b; }

// (position, error) pairs merged to the largest error per position, sorted by position.
std::vector<std::pair<int64_t, double>> PerPosition(std::vector<std::pair<int64_t, double>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& [p, e] : v) {
    if (!out.empty() && out.back().first == p) {
      out.back().second = std::max(out.back().second, e);
    } else {
      out.emplace_back(p, e);
    }
  }
  return out;
}

// The error plot: the largest error of each position (bars, log scale), the tolerance, the band
// edges.
Canvas RenderPlot(const std::string& title, const std::vector<std::string>& notes,
                  const std::vector<std::pair<int64_t, double>>& points, double tolerance) {
  constexpr Rgb kBlack = {0, 0, 0};
  constexpr Rgb kGrey = {110, 110, 110};
  constexpr Rgb kLight = {215, 215, 215};
  constexpr Rgb kRed = {215, 48, 39};
  const Rgb kBar = Viridis(0.3);
  const int text_h = Canvas::TextHeight();
  const int line_h = text_h + 6;
  constexpr int kMargin = 12;
  const int header_h = kMargin + (1 + static_cast<int>(notes.size())) * line_h + 10;
  const int left = kMargin + text_h + 8 + Canvas::TextWidth("1e-100") + 8;
  const int pw = 800;
  const int ph = 360;
  const int top = header_h;
  int width = std::max(left + pw + 24 + kMargin, 2 * kMargin + Canvas::TextWidth(title));
  for (const std::string& note : notes) {
    width = std::max(width, 2 * kMargin + Canvas::TextWidth(note));
  }
  const int height = top + ph + 4 + 6 + text_h + 8 + text_h + kMargin;
  Canvas canvas(width, height);
  canvas.Text(kMargin, kMargin, title, kBlack);
  for (size_t i = 0; i < notes.size(); ++i) {
    canvas.Text(kMargin, kMargin + static_cast<int>(i + 1) * line_h, notes[i], kGrey);
  }

  // Ranges: positions linear, errors in whole decades around the data and the tolerance.
  const int64_t pmin = points.front().first;
  const int64_t pmax = std::max(points.back().first, pmin + 1);
  double emin = tolerance > 0 ? tolerance : 1.0;
  double emax = emin;
  for (const auto& [p, e] : points) {
    if (e > 0 && std::isfinite(e)) {
      emin = std::min(emin, e);
      emax = std::max(emax, e);
    }
  }
  // Headroom beyond the extremes, so that the tolerance line stays clear of the frame.
  int dlo = static_cast<int>(std::floor(std::log10(emin) - 0.15));
  int dhi = static_cast<int>(std::ceil(std::log10(emax) + 0.15));
  if (dhi <= dlo) dhi = dlo + 1;
  auto y_of = [&](double e) {
    if (!std::isfinite(e)) return top;
    const double f = (std::log10(e) - dlo) / (dhi - dlo);
    return top + ph - 1 - static_cast<int>(std::lround(std::clamp(f, 0.0, 1.0) * (ph - 1)));
  };
  auto x_of = [&](int64_t p) {
    return left + static_cast<int>(static_cast<double>(p - pmin) /
                                   static_cast<double>(pmax - pmin) * (pw - 1));
  };

  // Grid: decades, band edges.
  const int decade_step = std::max(1, (dhi - dlo + 9) / 10);
  for (int d = dlo; d <= dhi; d += decade_step) {
    const int y = y_of(std::pow(10.0, d));
    canvas.FillRect(left, y, pw, 1, kLight);
    canvas.FillRect(left - 5, y, 4, 1, kBlack);
    const std::string label = absl::StrCat("1e", d);
    canvas.Text(left - 8 - Canvas::TextWidth(label), y - text_h / 2 + 1, label, kBlack);
  }
  for (int band = BandOf(pmin) + 1; BandStart(band) <= pmax && band < 40; ++band) {
    const int x = x_of(BandStart(band));
    for (int y = top; y < top + ph; y += 4) canvas.FillRect(x, y, 1, 2, kLight);
  }

  // Bars: the largest error of the positions falling in each pixel column.
  const int bar_w = static_cast<int>(std::clamp<int64_t>(pw / (pmax - pmin + 1), 1, 16));
  std::vector<double> column(static_cast<size_t>(pw), -1.0);
  for (const auto& [p, e] : points) {
    double& c = column[static_cast<size_t>(x_of(p) - left)];
    c = std::max(c, e);
  }
  for (int i = 0; i < pw; ++i) {
    const double e = column[static_cast<size_t>(i)];
    if (e <= 0) continue;  // exact (or no position here): no bar
    const int y = y_of(e);
    const int x0 = std::clamp(left + i - bar_w / 2, left, left + pw - bar_w);
    canvas.FillRect(x0, y, bar_w, top + ph - y, e > tolerance ? kRed : kBar);
  }

  // The tolerance: a dashed black line, labelled.
  if (tolerance > 0) {
    const int y = y_of(tolerance);
    for (int x = left; x < left + pw; x += 8) canvas.FillRect(x, y, 5, 2, kBlack);
    const std::string label = absl::StrCat("tolerance ", ShortNumber(tolerance));
    const int label_w = Canvas::TextWidth(label);
    const int lx = left + pw - label_w - 6;
    const int ly = y - text_h - 6 >= top + 2 ? y - text_h - 6 : y + 6;  // above the line if room
    canvas.FillRect(lx - 3, ly - 2, label_w + 6, text_h + 4, {255, 255, 255});
    canvas.Text(lx, ly, label, kBlack);
  }
  canvas.FrameRect(left - 1, top - 1, pw + 2, ph + 2, kGrey);

  // Position ticks: multiples of a 1-2-5 step.
  const int64_t span = pmax - pmin;
  const int max_ticks = std::max(2, pw / (Canvas::TextWidth(absl::StrCat(pmax)) + 24));
  int64_t step = 1;
  for (int64_t decade = 1; step * max_ticks < span && decade < (int64_t{1} << 50); decade *= 10) {
    for (int64_t m : {1, 2, 5}) {
      step = m * decade;
      if (step * max_ticks >= span) break;
    }
  }
  for (int64_t p = (pmin + step - 1) / step * step; p <= pmax; p += step) {
    const int x = x_of(p);
    canvas.FillRect(x, top + ph + 1, 1, 4, kBlack);
    const std::string label = absl::StrCat(p);
    canvas.Text(x - Canvas::TextWidth(label) / 2, top + ph + 8, label, kBlack);
  }
  const std::string x_axis = "position";
  canvas.Text(left + (pw - Canvas::TextWidth(x_axis)) / 2, top + ph + 8 + text_h + 6, x_axis,
              kBlack);
  const std::string y_axis = "max abs error";
  canvas.VerticalText(kMargin, top + (ph - Canvas::TextWidth(y_axis)) / 2, y_axis, kBlack);
  return canvas;
}

}  // namespace

const FlagGroup& CheckFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"cos", FlagType::kString, "FILE", "your cos cache (.npy): [T, d/2] or [T, d]"},
      {"sin", FlagType::kString, "FILE", "your sin cache (.npy), as --cos"},
      {"cache-layout", FlagType::kChoice, "",
       "a full-width [T, d] cache: neox halves or gptj pairs (default: the config's style)",
       "compact|neox|gptj"},
      {"rotated", FlagType::kString, "FILE", "your rotated q or k (.npy), with --input"},
      {"input", FlagType::kString, "FILE", "the tensor before your rotation (.npy)"},
      {"layout", FlagType::kChoice, "", "layout of --rotated/--input (default bshd)",
       "bshd|bhsd|thd"},
      FloatDTypeFlag(
          "precision your values were computed in (default the file's dtype); sets the default "
          "tolerance"),
      {"tolerance", FlagType::kDouble, "X",
       "largest absolute error accepted (exit 0), default by --dtype (see above)"},
      {"png", FlagType::kString, "FILE", "plot the largest error per position (log scale) in FILE"},
  };
  return *kFlags;
}

absl::StatusOr<CommandOutput> RunCheck(const ParsedFlags& flags, const client::Client& client,
                                       Positions positions, client::RopeConfig config) {
  const bool cache_mode = flags.Has("cos") || flags.Has("sin");
  const bool rotated_mode = flags.Has("rotated") || flags.Has("input");
  if (cache_mode == rotated_mode) {
    return UsageError(
        "give a cache (--cos FILE and/or --sin FILE) or a rotated tensor (--rotated FILE "
        "--input FILE), not both");
  }
  if (rotated_mode && !(flags.Has("rotated") && flags.Has("input"))) {
    return UsageError("--rotated and --input go together (your result and what you rotated)");
  }
  if (cache_mode && flags.Has("layout")) {
    return UsageError("--layout is the layout of --rotated/--input; a cache takes --cache-layout");
  }
  if (rotated_mode && flags.Has("cache-layout")) {
    return UsageError("--cache-layout is for --cos/--sin; a rotated tensor takes --layout");
  }
  std::optional<double> tolerance = flags.Double("tolerance");
  if (tolerance.has_value() && !(*tolerance >= 0)) {
    return UsageError(absl::StrCat("--tolerance expects a number >= 0, got ", *tolerance));
  }

  Comparison cmp;
  std::string compared;
  std::string reference;
  DType dtype = DType::kFloat64;
  // The comparisons to recount against the tolerance once it is known.
  std::vector<std::function<int64_t(double)>> recount;
  std::deque<Tensor> keep;  // user and exact tensors the recounts read (stable addresses)
  std::string plot_title;   // `compared` without the paths
  std::string plot_reference;

  if (cache_mode) {
    struct Input {
      std::string name;
      std::string path;
      Tensor user;
    };
    std::vector<Input> inputs;
    for (const char* name : {"cos", "sin"}) {
      if (std::optional<std::string> path = flags.String(name)) {
        POSENC_ASSIGN_OR_RETURN(Tensor t, ReadFloatNpy(name, *path));
        if (t.shape.size() < 2) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " ", Described(*path, t),
                                                         ": expected [T, W] (or [..., T, W])"));
        }
        inputs.push_back({name, *path, std::move(t)});
      }
    }
    if (inputs.size() == 2 && inputs[0].user.shape != inputs[1].user.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cos ", Described(inputs[0].path, inputs[0].user), " and --sin ",
                       Described(inputs[1].path, inputs[1].user), " differ in shape"));
    }
    const Tensor& first = inputs[0].user;
    const int64_t width = first.shape.back();
    const int64_t rows = first.NumElements() / width;
    if (positions.kind == Positions::Kind::kDefault) positions = Positions::Range(0, rows);

    client::RopeCacheOptions options;
    options.positions = positions;
    options.config = config;
    options.output_dtype = DType::kFloat64;
    options.layout = client::RopeCacheLayout::kCompact;
    POSENC_ASSIGN_OR_RETURN(client::RopeCacheResult exact, client.RopeCache(options));
    const int64_t half = exact.cos.shape.back();
    const int64_t tokens = exact.cos.NumElements() / std::max<int64_t>(half, 1);
    if (tokens != rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", inputs[0].name, " ", Described(inputs[0].path, first), " holds ", rows,
                       " rows (tokens), but the positions give ", tokens,
                       positions.kind == Positions::Kind::kRange
                           ? absl::StrCat(" (", positions.start, " .. ",
                                          positions.start + positions.count - 1, ")")
                           : std::string()));
    }
    std::string layout_name = "compact";
    if (width == 2 * half && half > 0) {
      layout_name =
          flags.String("cache-layout")
              .value_or(exact.derived.style == client::RopeStyle::kGptj ? "gptj" : "neox");
      if (layout_name == "compact") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", inputs[0].name, " ", Described(inputs[0].path, first), ": --cache-layout compact",
            " needs the last axis d/2 = ", half, ", got ", width));
      }
      options.layout =
          layout_name == "gptj" ? client::RopeCacheLayout::kGptj : client::RopeCacheLayout::kNeox;
      POSENC_ASSIGN_OR_RETURN(exact, client.RopeCache(options));
    } else if (width != half) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", inputs[0].name, " ", Described(inputs[0].path, first),
          ": the last axis must be d/2 = ", half, " (compact) or d = ", 2 * half,
          " (neox/gptj) for rotary dim d = ", exact.derived.rotary_dim, ", got ", width));
    } else if (flags.String("cache-layout").value_or("compact") != "compact") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", inputs[0].name, " ", Described(inputs[0].path, first), ": --cache-layout ",
          *flags.String("cache-layout"), " needs the last axis d = ", 2 * half, ", got ", width));
    }

    kernels::TokenGrid grid;
    grid.kind = kernels::TokenGrid::Kind::kTable;
    POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions resolved,
                            ResolveFor(positions, grid, tokens));
    plot_title = absl::StrCat(inputs.size() == 2 ? "cos, sin" : inputs[0].name, " ",
                              std::string(client::DTypeName(first.dtype)), " ",
                              ShapeText(first.shape), " (", layout_name, ")");
    auto token_of = [width](int64_t i) { return i / width; };
    std::vector<std::string> parts;
    dtype = inputs[0].user.dtype;
    for (Input& in : inputs) {
      const Tensor& ex = in.name == "cos" ? exact.cos : exact.sin;
      Compare(in.name, in.user, ex, resolved, token_of, &cmp);
      parts.push_back(absl::StrCat(in.name, " ", Described(in.path, in.user)));
      dtype = Coarser(dtype, in.user.dtype);
      keep.push_back(std::move(in.user));
      keep.push_back(ex);
      const Tensor* u = &keep[keep.size() - 2];
      const Tensor* e = &keep.back();
      recount.push_back([u, e, resolved, token_of](double tol) {
        return CountOver(*u, *e, resolved, token_of, tol);
      });
    }
    compared = absl::StrCat(absl::StrJoin(parts, ", "), " (", layout_name, ")");
    plot_reference = absl::StrCat("posenc FLOAT64 cache, rotary dim ", exact.derived.rotary_dim,
                                  ", base ", absl::StrCat(exact.derived.effective_base));
    reference = absl::StrCat("posenc RopeCache FLOAT64, rotary_dim ", exact.derived.rotary_dim,
                             ", effective base ", absl::StrCat(exact.derived.effective_base),
                             ", attention factor ", absl::StrCat(exact.derived.attention_factor));
  } else {
    const std::string rotated_path = *flags.String("rotated");
    const std::string input_path = *flags.String("input");
    POSENC_ASSIGN_OR_RETURN(Tensor rotated, ReadFloatNpy("rotated", rotated_path));
    POSENC_ASSIGN_OR_RETURN(Tensor input, ReadFloatNpy("input", input_path));
    if (rotated.shape != input.shape) {
      return absl::InvalidArgumentError(absl::StrCat("--rotated ", Described(rotated_path, rotated),
                                                     " and --input ", Described(input_path, input),
                                                     " differ in shape"));
    }
    const std::string layout = flags.String("layout").value_or("bshd");
    const size_t rank = input.shape.size();
    if (rank != (layout == "thd" ? 3u : 4u)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input ", Described(input_path, input), ": layout ", layout,
          layout == "thd"
              ? " needs [T, H, D]"
              : absl::StrCat(" needs [B, ", layout == "bshd" ? "S, H" : "H, S", ", D]")));
    }
    client::ApplyRopeOptions options;
    POSENC_ASSIGN_OR_RETURN(options.q, client::ConvertTensor(input, DType::kFloat64));
    options.positions = positions;
    options.config = config;
    options.layout = layout == "thd"    ? client::TensorLayout::kTHD
                     : layout == "bhsd" ? client::TensorLayout::kBHSD
                                        : client::TensorLayout::kBSHD;
    POSENC_ASSIGN_OR_RETURN(client::ApplyRopeResult exact, client.ApplyRope(options));

    const std::vector<int64_t>& s = input.shape;
    kernels::TokenGrid grid;
    std::function<int64_t(int64_t)> token_of;
    int64_t tokens = 0;
    if (layout == "thd") {
      grid.kind = kernels::TokenGrid::Kind::kPacked;
      grid.tokens = tokens = s[0];
      const int64_t per_token = s[1] * s[2];
      token_of = [per_token](int64_t i) { return i / per_token; };
    } else if (layout == "bhsd") {
      grid.kind = kernels::TokenGrid::Kind::kBatchSeq;
      grid.batch = s[0];
      grid.seq = s[2];
      tokens = s[0] * s[2];
      const int64_t heads = s[1], seq = s[2], dim = s[3];
      token_of = [heads, seq, dim](int64_t i) {
        return i / (heads * seq * dim) * seq + (i / dim) % seq;
      };
    } else {
      grid.kind = kernels::TokenGrid::Kind::kBatchSeq;
      grid.batch = s[0];
      grid.seq = s[1];
      tokens = s[0] * s[1];
      const int64_t per_token = s[2] * s[3];
      token_of = [per_token](int64_t i) { return i / per_token; };
    }
    POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions resolved,
                            ResolveFor(positions, grid, tokens));
    Compare("rotated", rotated, exact.q, resolved, token_of, &cmp);
    dtype = rotated.dtype;
    keep.push_back(std::move(rotated));
    keep.push_back(std::move(exact.q));
    const Tensor* u = &keep[0];
    const Tensor* e = &keep[1];
    recount.push_back([u, e, resolved, token_of](double tol) {
      return CountOver(*u, *e, resolved, token_of, tol);
    });
    compared = absl::StrCat("rotated ", Described(rotated_path, *u), " (", layout, ") from input ",
                            Described(input_path, input));
    plot_title = absl::StrCat("rotated ", std::string(client::DTypeName(u->dtype)), " ",
                              ShapeText(u->shape), " (", layout, ")");
    plot_reference = absl::StrCat("posenc FLOAT64 rotation, rotary dim ", exact.derived.rotary_dim,
                                  ", base ", absl::StrCat(exact.derived.effective_base));
    reference =
        absl::StrCat("posenc ApplyRope FLOAT64 on the input, rotary_dim ", exact.derived.rotary_dim,
                     ", effective base ", absl::StrCat(exact.derived.effective_base),
                     ", attention factor ", absl::StrCat(exact.derived.attention_factor));
  }

  if (cmp.compared == 0) {
    return absl::InvalidArgumentError("no values to compare (every token is padding)");
  }
  std::string tolerance_from = "--tolerance";
  if (std::optional<DType> d =
          flags.Has("dtype") ? client::ParseDType(*flags.String("dtype")) : std::nullopt) {
    dtype = *d;
  }
  if (!tolerance.has_value()) {
    const double scale = std::max(1.0, cmp.max_exact);
    tolerance = DefaultTolerance(dtype) * scale;
    tolerance_from = absl::StrCat("default for ", std::string(client::DTypeName(dtype)),
                                  scale > 1 ? absl::StrCat(" x ", ShortNumber(scale)) : "");
  }
  for (const auto& count : recount) cmp.over_tolerance += count(*tolerance);

  const std::vector<std::pair<int64_t, double>> points = PerPosition(std::move(cmp.per_token));
  Json bands = Json::object();
  {
    int band = -1;
    double band_max = 0;
    auto flush = [&] {
      if (band >= 0) {
        bands[absl::StrCat("[", BandStart(band), ", ", BandEnd(band), ")")] = ErrorJson(band_max);
      }
    };
    for (const auto& [p, e] : points) {
      if (BandOf(p) != band) {
        flush();
        band = BandOf(p);
        band_max = 0;
      }
      band_max = std::max(band_max, e);
    }
    flush();
  }
  const bool pass = cmp.max_error <= *tolerance;

  CommandOutput out;
  out.extras["compared"] = compared;
  out.extras["reference"] = reference;
  out.extras["positions"] =
      absl::StrCat(points.size(), " distinct, ", points.front().first, " .. ", points.back().first);
  out.extras["values"] = cmp.compared;
  out.extras["max_abs_error"] = ErrorJson(cmp.max_error);
  out.extras["at_position"] = cmp.worst_position;
  out.extras["at_element"] = cmp.worst_element;
  out.extras["tolerance"] = *tolerance;
  out.extras["tolerance_from"] = tolerance_from;
  out.extras["over_tolerance"] = cmp.over_tolerance;
  out.extras["bands"] = std::move(bands);
  out.extras["result"] = pass ? "PASS: within tolerance"
                              : absl::StrCat("FAIL: ", cmp.over_tolerance, " of ", cmp.compared,
                                             " values over the tolerance");
  out.exit_code = pass ? 0 : 1;

  if (std::optional<std::string> path = flags.String("png")) {
    const Canvas plot = RenderPlot(
        absl::StrCat("check: max |error| per position, ", plot_title),
        {absl::StrCat("vs ", plot_reference),
         absl::StrCat("worst ", ShortNumber(cmp.max_error), " at position ", cmp.worst_position,
                      "; tolerance ", ShortNumber(*tolerance), " (", tolerance_from, ")"),
         pass ? std::string("PASS: within tolerance")
              : absl::StrCat("FAIL: ", cmp.over_tolerance, " of ", cmp.compared,
                             " values over (red)")},
        points, *tolerance);
    POSENC_RETURN_IF_ERROR(WritePng(*path, plot));
    std::cerr << "wrote " << *path << " (PNG " << plot.width() << "x" << plot.height()
              << ": error per position)\n";
  }
  return out;
}

}  // namespace posenc::cli
