// `posenc check`: how far a user's own RoPE values are from posenc's exact ones.
//
// Two inputs (NumPy .npy files, float16/32/64; a bfloat16 tensor saved widened to float32 is
// exact, give --dtype bfloat16 for its tolerance):
//   - a cos/sin cache: --cos FILE and/or --sin FILE, last axis W = d/2 (compact, as
//     `rope-cache` writes by default) or W = d (full width: NEOX halves [c, c] or GPT-J pairs
//     [c0, c0, c1, c1, ...], the `rope-cache --layout neox|gptj` files; --cache-layout picks one,
//     default the rotation style of the config), where d is the rotary dim. The leading axes are
//     read row by row as the tokens: [T, W], [1, T, W] and [B, T, W] (with ids [B, T]) all work.
//     Positions default to 0 .. T-1 for T rows.
//   - a rotated tensor: --rotated FILE (the user's rotation of q or k) and --input FILE (the
//     tensor before it, same shape), in --layout bshd (default), bhsd or thd.
// The configuration and positions come from the flags of rope-cache / apply-rope. posenc then
// computes its exact values in FLOAT64 (RopeCache, or ApplyRope on the input widened to FLOAT64)
// and the comparison runs in double on the client: the largest absolute error overall, where it
// is (position and element), and per position band. Bands double: [0, 1024), [1024, 2048),
// [2048, 4096), ... (errors of the usual float32 code grow in proportion to the position, so each
// band shows the next step up); only bands holding positions are listed. Padding tokens of an
// attention mask are not compared; M-RoPE tokens are placed by their first (temporal) position.
//
// Exit status: 0 when the largest error is within --tolerance, 1 when it is not (or on an error:
// unreadable file, shape mismatch; the message on stderr says which), 2 for usage errors.
// Default tolerance by the precision of the values (--dtype, else the file's dtype): FLOAT64
// 1e-9, FLOAT32 1e-6 (posenc's own promise), FLOAT16 2^-10 and BFLOAT16 2^-7 (one unit in the
// last place at 1.0, twice what correct rounding may lose), times the largest |exact value| when
// that is above 1 (attention factors, large inputs). --png FILE plots the largest error of each
// position (log scale) with the tolerance and the band edges.
//
// Thread-safety: commands run one at a time; the functions hold no state.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/canvas.h"
#include "client/cli/commands.h"
#include "client/cli/inputs.h"
#include "client/cli/npy.h"
#include "client/cli/rope_config.h"
#include "client/cli/wire_names.h"
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
// The kernels' kind of the client's positions: two enums, mapped by name (a kind added to
// either fails -Wswitch here).
kernels::PositionSpec::Kind KernelsKind(Positions::Kind kind) {
  using K = kernels::PositionSpec::Kind;
  switch (kind) {
    case Positions::Kind::kDefault: return K::kDefault;
    case Positions::Kind::kRange: return K::kRange;
    case Positions::Kind::kOffsets: return K::kOffsets;
    case Positions::Kind::kIds: return K::kIds;
    case Positions::Kind::kCuSeqlens: return K::kCuSeqlens;
    case Positions::Kind::kAttentionMask: return K::kAttentionMask;
  }
  return K::kDefault;  // not reached: every kind is above (-Wswitch)
}

absl::StatusOr<kernels::ResolvedPositions> ResolveFor(const Positions& positions,
                                                      kernels::TokenGrid grid, int64_t tokens) {
  kernels::PositionSpec spec;
  spec.kind = KernelsKind(positions.kind);
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
class ErrorPlot {
 public:
  ErrorPlot(const std::string& title, const std::vector<std::string>& notes,
            const std::vector<std::pair<int64_t, double>>& points, double tolerance)
      : points_(points),
        tolerance_(tolerance),
        top_(kMargin + (1 + static_cast<int>(notes.size())) * line_h_ + 10),
        canvas_(Width(title, notes), top_ + kPlotH + 4 + 6 + text_h_ + 8 + text_h_ + kMargin) {
    canvas_.Text(kMargin, kMargin, title, kBlack);
    for (size_t i = 0; i < notes.size(); ++i) {
      canvas_.Text(kMargin, kMargin + static_cast<int>(i + 1) * line_h_, notes[i], kGrey);
    }
    SetRanges();
  }

  Canvas Draw() && {
    DrawGrid();
    DrawBars();
    DrawTolerance();
    canvas_.FrameRect(kLeft - 1, top_ - 1, kPlotW + 2, kPlotH + 2, kGrey);
    DrawPositionAxis();
    const std::string y_axis = "max abs error";
    canvas_.VerticalText(kMargin, top_ + (kPlotH - Canvas::TextWidth(y_axis)) / 2, y_axis, kBlack);
    return std::move(canvas_);
  }

 private:
  static constexpr Rgb kBlack = {0, 0, 0};
  static constexpr Rgb kGrey = {110, 110, 110};
  static constexpr Rgb kLight = {215, 215, 215};
  static constexpr Rgb kRed = {215, 48, 39};
  static constexpr int kMargin = 12;
  static constexpr int kPlotW = 800;
  static constexpr int kPlotH = 360;
  static inline const int kLeft =
      kMargin + Canvas::TextHeight() + 8 + Canvas::TextWidth("1e-100") + 8;

  int Width(const std::string& title, const std::vector<std::string>& notes) const {
    int width = std::max(kLeft + kPlotW + 24 + kMargin, 2 * kMargin + Canvas::TextWidth(title));
    for (const std::string& note : notes) {
      width = std::max(width, 2 * kMargin + Canvas::TextWidth(note));
    }
    return width;
  }

  // Positions linear, errors in whole decades around the data and the tolerance, with headroom
  // beyond the extremes so that the tolerance line stays clear of the frame.
  void SetRanges() {
    pmin_ = points_.front().first;
    pmax_ = std::max(points_.back().first, pmin_ + 1);
    double emin = tolerance_ > 0 ? tolerance_ : 1.0;
    double emax = emin;
    for (const auto& [p, e] : points_) {
      if (e > 0 && std::isfinite(e)) {
        emin = std::min(emin, e);
        emax = std::max(emax, e);
      }
    }
    dlo_ = static_cast<int>(std::floor(std::log10(emin) - 0.15));
    dhi_ = static_cast<int>(std::ceil(std::log10(emax) + 0.15));
    if (dhi_ <= dlo_) dhi_ = dlo_ + 1;
  }

  int YOf(double e) const {
    if (!std::isfinite(e)) return top_;
    const double f = (std::log10(e) - dlo_) / (dhi_ - dlo_);
    return top_ + kPlotH - 1 -
           static_cast<int>(std::lround(std::clamp(f, 0.0, 1.0) * (kPlotH - 1)));
  }

  int XOf(int64_t p) const {
    return kLeft + static_cast<int>(static_cast<double>(p - pmin_) /
                                    static_cast<double>(pmax_ - pmin_) * (kPlotW - 1));
  }

  // Decades and band edges.
  void DrawGrid() {
    const int decade_step = std::max(1, (dhi_ - dlo_ + 9) / 10);
    for (int d = dlo_; d <= dhi_; d += decade_step) {
      const int y = YOf(std::pow(10.0, d));
      canvas_.FillRect(kLeft, y, kPlotW, 1, kLight);
      canvas_.FillRect(kLeft - 5, y, 4, 1, kBlack);
      const std::string label = absl::StrCat("1e", d);
      canvas_.Text(kLeft - 8 - Canvas::TextWidth(label), y - text_h_ / 2 + 1, label, kBlack);
    }
    for (int band = BandOf(pmin_) + 1; BandStart(band) <= pmax_ && band < 40; ++band) {
      const int x = XOf(BandStart(band));
      for (int y = top_; y < top_ + kPlotH; y += 4) canvas_.FillRect(x, y, 1, 2, kLight);
    }
  }

  // The largest error of the positions falling in each pixel column.
  void DrawBars() {
    const Rgb bar = Viridis(0.3);
    const int bar_w = static_cast<int>(std::clamp<int64_t>(kPlotW / (pmax_ - pmin_ + 1), 1, 16));
    std::vector<double> column(static_cast<size_t>(kPlotW), -1.0);
    for (const auto& [p, e] : points_) {
      double& c = column[static_cast<size_t>(XOf(p) - kLeft)];
      c = std::max(c, e);
    }
    for (int i = 0; i < kPlotW; ++i) {
      const double e = column[static_cast<size_t>(i)];
      if (e <= 0) continue;  // exact (or no position here): no bar
      const int y = YOf(e);
      const int x0 = std::clamp(kLeft + i - bar_w / 2, kLeft, kLeft + kPlotW - bar_w);
      canvas_.FillRect(x0, y, bar_w, top_ + kPlotH - y, e > tolerance_ ? kRed : bar);
    }
  }

  // The tolerance: a dashed black line, labelled.
  void DrawTolerance() {
    if (!(tolerance_ > 0)) return;
    const int y = YOf(tolerance_);
    for (int x = kLeft; x < kLeft + kPlotW; x += 8) canvas_.FillRect(x, y, 5, 2, kBlack);
    const std::string label = absl::StrCat("tolerance ", ShortNumber(tolerance_));
    const int label_w = Canvas::TextWidth(label);
    const int lx = kLeft + kPlotW - label_w - 6;
    const int ly = y - text_h_ - 6 >= top_ + 2 ? y - text_h_ - 6 : y + 6;  // above if room
    canvas_.FillRect(lx - 3, ly - 2, label_w + 6, text_h_ + 4, {255, 255, 255});
    canvas_.Text(lx, ly, label, kBlack);
  }

  // Position ticks (multiples of a 1-2-5 step) and the axis name.
  void DrawPositionAxis() {
    const int64_t span = pmax_ - pmin_;
    const int max_ticks = std::max(2, kPlotW / (Canvas::TextWidth(absl::StrCat(pmax_)) + 24));
    const int64_t step =
        std::max<int64_t>(1, std::llround(NiceStep(static_cast<double>(span), max_ticks)));
    for (int64_t p = (pmin_ + step - 1) / step * step; p <= pmax_; p += step) {
      const int x = XOf(p);
      canvas_.FillRect(x, top_ + kPlotH + 1, 1, 4, kBlack);
      const std::string label = absl::StrCat(p);
      canvas_.Text(x - Canvas::TextWidth(label) / 2, top_ + kPlotH + 8, label, kBlack);
    }
    const std::string x_axis = "position";
    canvas_.Text(kLeft + (kPlotW - Canvas::TextWidth(x_axis)) / 2, top_ + kPlotH + 8 + text_h_ + 6,
                 x_axis, kBlack);
  }

  const std::vector<std::pair<int64_t, double>>& points_;
  const double tolerance_;
  const int text_h_ = Canvas::TextHeight();
  const int line_h_ = text_h_ + 6;
  const int top_;
  Canvas canvas_;
  int64_t pmin_ = 0, pmax_ = 1;
  int dlo_ = 0, dhi_ = 1;
};

Canvas RenderPlot(const std::string& title, const std::vector<std::string>& notes,
                  const std::vector<std::pair<int64_t, double>>& points, double tolerance) {
  return ErrorPlot(title, notes, points, tolerance).Draw();
}

constexpr std::string_view kCheckSummary =
    "compare your own RoPE cos/sin cache or rotated tensor with posenc's exact values";

constexpr std::string_view kCheckDetails =
    "example: posenc check --cos cos.npy --sin sin.npy --head-dim 128 --base 500000 \\\n"
    "           --scaling llama3 --factor 8 --original-max-pos 8192 --png err.png\n"
    "         posenc check --rotated q_rot.npy --input q.npy --positions 4096:8192 "
    "--head-dim 64 --dtype bfloat16\n"
    "A cache is [T, d/2] (compact) or [T, d] (neox halves / gptj pairs, --cache-layout), rows\n"
    "at --positions (default 0..T-1); a rotated tensor has the shape of --input (--layout).\n"
    "Reports the largest absolute error (float64 comparison) overall, where it sits and per\n"
    "position band [0,1024), [1024,2048), [2048,4096), ...; exit status 0 within --tolerance,\n"
    "1 over it. Default tolerance: FLOAT64 1e-9, FLOAT32 1e-6, FLOAT16 2^-10, BFLOAT16 2^-7,\n"
    "times the largest |exact value| above 1. --png FILE plots the error per position.";

const FlagGroup& CheckFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"cos", FlagType::kString, "FILE", "your cos cache (.npy): [T, d/2] or [T, d]"},
      {"sin", FlagType::kString, "FILE", "your sin cache (.npy), as --cos"},
      EnumFlagSpec<client::RopeCacheLayout>(
          "cache-layout",
          "a full-width [T, d] cache: neox halves or gptj pairs (default: the config's style)"),
      {"rotated", FlagType::kString, "FILE", "your rotated q or k (.npy), with --input"},
      {"input", FlagType::kString, "FILE", "the tensor before your rotation (.npy)"},
      EnumFlagSpec<client::TensorLayout>("layout", "layout of --rotated/--input (default bshd)"),
      FloatDTypeFlag(
          "precision your values were computed in (default the file's dtype); sets the default "
          "tolerance"),
      {"tolerance", FlagType::kDouble, "X",
       "largest absolute error accepted (exit 0), default by --dtype (see above)"},
      {"png", FlagType::kString, "FILE", "plot the largest error per position (log scale) in FILE"},
  };
  return *kFlags;
}

// What one check compared and how it went, filled by CheckCache or CheckRotated.
struct Checked {
  Comparison cmp;
  std::string compared;   // what was compared, with the paths
  std::string reference;  // posenc's side
  DType dtype = DType::kFloat64;
  // The comparisons to recount against the tolerance once it is known.
  std::vector<std::function<int64_t(double)>> recount;
  std::deque<Tensor> keep;  // user and exact tensors the recounts read (stable addresses)
  std::string plot_title;   // `compared` without the paths
  std::string plot_reference;

  // Compares `user` with `exact` and keeps both for the recount.
  void Add(const std::string& name, Tensor user, Tensor exact,
           const kernels::ResolvedPositions& resolved,
           const std::function<int64_t(int64_t)>& token_of) {
    Compare(name, user, exact, resolved, token_of, &cmp);
    keep.push_back(std::move(user));
    keep.push_back(std::move(exact));
    const Tensor* u = &keep[keep.size() - 2];
    const Tensor* e = &keep.back();
    recount.push_back([u, e, resolved, token_of](double tol) {
      return CountOver(*u, *e, resolved, token_of, tol);
    });
  }
};

// --cos/--sin, read and checked against each other.
struct CacheInput {
  std::string name;
  std::string path;
  Tensor user;
};

absl::StatusOr<std::vector<CacheInput>> ReadCacheInputs(const ParsedFlags& flags) {
  std::vector<CacheInput> inputs;
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
  return inputs;
}

// The layout of a user's cache whose last axis is `width`, posenc's compact one `half`:
// compact (d/2) or full width (d: --cache-layout, default the config's pairing).
absl::StatusOr<client::RopeCacheLayout> CacheLayout(const ParsedFlags& flags,
                                                    const CacheInput& first, int64_t width,
                                                    int64_t half,
                                                    const client::RopeDerived& derived) {
  const std::string what = absl::StrCat("--", first.name, " ", Described(first.path, first.user));
  auto layout = EnumFlag<client::RopeCacheLayout>(flags, "cache-layout");
  if (width == 2 * half && half > 0) {
    if (layout == client::RopeCacheLayout::kUnspecified) {
      layout = derived.style == client::RopeStyle::kGptj ? client::RopeCacheLayout::kGptj
                                                         : client::RopeCacheLayout::kNeox;
    }
    if (layout == client::RopeCacheLayout::kCompact) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": --cache-layout compact needs the last axis d/2 = ", half, ", got ", width));
    }
    return layout;
  }
  if (width != half) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the last axis must be d/2 = ", half, " (compact) or d = ", 2 * half,
                     " (neox/gptj) for rotary dim d = ", derived.rotary_dim, ", got ", width));
  }
  if (layout != client::RopeCacheLayout::kUnspecified &&
      layout != client::RopeCacheLayout::kCompact) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": --cache-layout ", NameOf(layout),
                                                   " needs the last axis d = ", 2 * half, ", got ",
                                                   width));
  }
  return client::RopeCacheLayout::kCompact;
}

// A user's cos/sin cache against posenc's FLOAT64 RopeCache at the same positions.
absl::Status CheckCache(const ParsedFlags& flags, const client::Client& client, Positions positions,
                        const client::RopeConfig& config, Checked* out) {
  POSENC_ASSIGN_OR_RETURN(std::vector<CacheInput> inputs, ReadCacheInputs(flags));
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
  POSENC_ASSIGN_OR_RETURN(options.layout,
                          CacheLayout(flags, inputs[0], width, half, exact.derived));
  if (options.layout != client::RopeCacheLayout::kCompact) {
    POSENC_ASSIGN_OR_RETURN(exact, client.RopeCache(options));
  }
  const std::string layout_name = NameOf(options.layout);
  kernels::TokenGrid grid;
  grid.kind = kernels::TokenGrid::Kind::kTable;
  POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions resolved, ResolveFor(positions, grid, tokens));
  out->plot_title = absl::StrCat(inputs.size() == 2 ? "cos, sin" : inputs[0].name, " ",
                                 std::string(client::DTypeName(first.dtype)), " ",
                                 ShapeText(first.shape), " (", layout_name, ")");
  std::vector<std::string> parts;
  out->dtype = inputs[0].user.dtype;
  for (CacheInput& in : inputs) {
    parts.push_back(absl::StrCat(in.name, " ", Described(in.path, in.user)));
    out->dtype = Coarser(out->dtype, in.user.dtype);
    out->Add(in.name, std::move(in.user), in.name == "cos" ? exact.cos : exact.sin, resolved,
             [width](int64_t i) { return i / width; });
  }
  const client::RopeDerived& d = exact.derived;
  out->compared = absl::StrCat(absl::StrJoin(parts, ", "), " (", layout_name, ")");
  out->plot_reference = absl::StrCat("posenc FLOAT64 cache, rotary dim ", d.rotary_dim, ", base ",
                                     absl::StrCat(d.effective_base));
  out->reference = absl::StrCat("posenc RopeCache FLOAT64, rotary_dim ", d.rotary_dim,
                                ", effective base ", absl::StrCat(d.effective_base),
                                ", attention factor ", absl::StrCat(d.attention_factor));
  return absl::OkStatus();
}

// The token grid of a [B, S, H, D] / [B, H, S, D] / [T, H, D] tensor and the token of its
// element i.
struct TensorTokens {
  kernels::TokenGrid grid;
  int64_t tokens = 0;
  std::function<int64_t(int64_t)> token_of;
};

TensorTokens TokensOf(const std::vector<int64_t>& s, client::TensorLayout layout) {
  TensorTokens t;
  if (layout == client::TensorLayout::kTHD) {
    t.grid.kind = kernels::TokenGrid::Kind::kPacked;
    t.grid.tokens = t.tokens = s[0];
    const int64_t per_token = s[1] * s[2];
    t.token_of = [per_token](int64_t i) { return i / per_token; };
    return t;
  }
  t.grid.kind = kernels::TokenGrid::Kind::kBatchSeq;
  t.grid.batch = s[0];
  if (layout == client::TensorLayout::kBHSD) {
    t.grid.seq = s[2];
    t.tokens = s[0] * s[2];
    const int64_t heads = s[1], seq = s[2], dim = s[3];
    t.token_of = [heads, seq, dim](int64_t i) {
      return i / (heads * seq * dim) * seq + (i / dim) % seq;
    };
    return t;
  }
  t.grid.seq = s[1];
  t.tokens = s[0] * s[1];
  const int64_t per_token = s[2] * s[3];
  t.token_of = [per_token](int64_t i) { return i / per_token; };
  return t;
}

// A user's rotation of --input against posenc's FLOAT64 ApplyRope of it.
absl::Status CheckRotated(const ParsedFlags& flags, const client::Client& client,
                          const Positions& positions, const client::RopeConfig& config,
                          Checked* out) {
  const std::string rotated_path = *flags.String("rotated");
  const std::string input_path = *flags.String("input");
  POSENC_ASSIGN_OR_RETURN(Tensor rotated, ReadFloatNpy("rotated", rotated_path));
  POSENC_ASSIGN_OR_RETURN(Tensor input, ReadFloatNpy("input", input_path));
  if (rotated.shape != input.shape) {
    return absl::InvalidArgumentError(absl::StrCat("--rotated ", Described(rotated_path, rotated),
                                                   " and --input ", Described(input_path, input),
                                                   " differ in shape"));
  }
  client::TensorLayout layout = EnumFlag<client::TensorLayout>(flags, "layout");
  if (layout == client::TensorLayout::kUnspecified) layout = client::TensorLayout::kBSHD;
  const std::string layout_name = NameOf(layout);
  if (input.shape.size() != (layout == client::TensorLayout::kTHD ? 3u : 4u)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input ", Described(input_path, input), ": layout ", layout_name,
        layout == client::TensorLayout::kTHD
            ? " needs [T, H, D]"
            : absl::StrCat(" needs [B, ", layout == client::TensorLayout::kBSHD ? "S, H" : "H, S",
                           ", D]")));
  }
  client::ApplyRopeOptions options;
  POSENC_ASSIGN_OR_RETURN(options.q, client::ConvertTensor(input, DType::kFloat64));
  options.positions = positions;
  options.config = config;
  options.layout = layout;
  POSENC_ASSIGN_OR_RETURN(client::ApplyRopeResult exact, client.ApplyRope(options));
  const TensorTokens t = TokensOf(input.shape, layout);
  POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions resolved,
                          ResolveFor(positions, t.grid, t.tokens));
  out->dtype = rotated.dtype;
  const std::string described = Described(rotated_path, rotated);
  out->plot_title = absl::StrCat("rotated ", std::string(client::DTypeName(rotated.dtype)), " ",
                                 ShapeText(rotated.shape), " (", layout_name, ")");
  out->Add("rotated", std::move(rotated), std::move(exact.q), resolved, t.token_of);
  const client::RopeDerived& d = exact.derived;
  out->compared = absl::StrCat("rotated ", described, " (", layout_name, ") from input ",
                               Described(input_path, input));
  out->plot_reference = absl::StrCat("posenc FLOAT64 rotation, rotary dim ", d.rotary_dim,
                                     ", base ", absl::StrCat(d.effective_base));
  out->reference = absl::StrCat("posenc ApplyRope FLOAT64 on the input, rotary_dim ", d.rotary_dim,
                                ", effective base ", absl::StrCat(d.effective_base),
                                ", attention factor ", absl::StrCat(d.attention_factor));
  return absl::OkStatus();
}

// The largest error of each position band that holds positions: {"[0, 1024)": e, ...}.
Json BandsJson(const std::vector<std::pair<int64_t, double>>& points) {
  Json bands = Json::object();
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
  return bands;
}

// The tolerance (--tolerance, else the default of the values' precision: --dtype, else the
// files') and where it came from.
std::pair<double, std::string> ToleranceOf(const ParsedFlags& flags, const Checked& c) {
  if (std::optional<double> given = flags.Double("tolerance")) return {*given, "--tolerance"};
  const DType dtype = DTypeFlag(flags).value_or(c.dtype);
  const double scale = std::max(1.0, c.cmp.max_exact);
  return {DefaultTolerance(dtype) * scale,
          absl::StrCat("default for ", std::string(client::DTypeName(dtype)),
                       scale > 1 ? absl::StrCat(" x ", ShortNumber(scale)) : "")};
}

// The report of a finished check (and its plot with --png).
absl::StatusOr<CommandOutput> Report(const ParsedFlags& flags, Checked c) {
  if (c.cmp.compared == 0) {
    return absl::InvalidArgumentError("no values to compare (every token is padding)");
  }
  const auto [tolerance, tolerance_from] = ToleranceOf(flags, c);
  for (const auto& count : c.recount) c.cmp.over_tolerance += count(tolerance);
  const Comparison& cmp = c.cmp;
  const std::vector<std::pair<int64_t, double>> points = PerPosition(std::move(c.cmp.per_token));
  const bool pass = cmp.max_error <= tolerance;
  const std::string result = pass ? std::string("PASS: within tolerance")
                                  : absl::StrCat("FAIL: ", cmp.over_tolerance, " of ", cmp.compared,
                                                 " values over the tolerance");
  CommandOutput out;
  out.extras["compared"] = c.compared;
  out.extras["reference"] = c.reference;
  out.extras["positions"] =
      absl::StrCat(points.size(), " distinct, ", points.front().first, " .. ", points.back().first);
  out.extras["values"] = cmp.compared;
  out.extras["max_abs_error"] = ErrorJson(cmp.max_error);
  out.extras["at_position"] = cmp.worst_position;
  out.extras["at_element"] = cmp.worst_element;
  out.extras["tolerance"] = tolerance;
  out.extras["tolerance_from"] = tolerance_from;
  out.extras["over_tolerance"] = cmp.over_tolerance;
  out.extras["bands"] = BandsJson(points);
  out.extras["result"] = result;
  out.exit_code = pass ? 0 : 1;
  if (std::optional<std::string> path = flags.String("png")) {
    const Canvas plot = RenderPlot(
        absl::StrCat("check: max |error| per position, ", c.plot_title),
        {absl::StrCat("vs ", c.plot_reference),
         absl::StrCat("worst ", ShortNumber(cmp.max_error), " at position ", cmp.worst_position,
                      "; tolerance ", ShortNumber(tolerance), " (", tolerance_from, ")"),
         pass ? result
              : absl::StrCat("FAIL: ", cmp.over_tolerance, " of ", cmp.compared,
                             " values over (red)")},
        points, tolerance);
    POSENC_RETURN_IF_ERROR(WritePng(*path, plot));
    std::cerr << "wrote " << *path << " (PNG " << plot.width() << "x" << plot.height()
              << ": error per position)\n";
  }
  return out;
}

absl::StatusOr<CommandOutput> RunCheck(const ParsedFlags& flags, const client::Client& client) {
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
  if (std::optional<double> tolerance = flags.Double("tolerance"); !(tolerance.value_or(0) >= 0)) {
    return UsageError(absl::StrCat("--tolerance expects a number >= 0, got ", *tolerance));
  }
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(Positions positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(client::RopeConfig config, ReadRopeConfigFlags(flags));
  Checked checked;
  if (cache_mode) {
    POSENC_RETURN_IF_ERROR(CheckCache(flags, client, positions, config, &checked));
  } else {
    POSENC_RETURN_IF_ERROR(CheckRotated(flags, client, positions, config, &checked));
  }
  return Report(flags, std::move(checked));
}

}  // namespace

Command CheckCommand() {
  return {"check",
          kCheckSummary,
          kCheckDetails,
          {&CheckFlags(), &PositionFlags(), &RopeConfigFlags()},
          &RunCheck};
}

}  // namespace posenc::cli
