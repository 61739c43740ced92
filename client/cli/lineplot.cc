// Line plots (lineplot.h): axis ranges and ticks, the layout of stacked panels, and the drawing.
#include "client/cli/lineplot.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace posenc::cli {
namespace {

constexpr Rgb kBlack = {0, 0, 0};
constexpr Rgb kGrey = {110, 110, 110};
constexpr Rgb kLight = {225, 225, 225};
constexpr Rgb kWhite = {255, 255, 255};
// Okabe & Ito's colour-blind-safe palette without its yellow (too pale on white) and black (the
// axes' colour): blue, vermillion, bluish green, reddish purple, orange, sky blue, dark grey.
constexpr Rgb kPalette[] = {{0, 114, 178}, {213, 94, 0},   {0, 158, 115}, {204, 121, 167},
                            {230, 159, 0}, {86, 180, 233}, {80, 80, 80}};
constexpr int kPaletteSize = static_cast<int>(std::size(kPalette));

constexpr int kMargin = 12;
constexpr int kPlotW = 800;
constexpr int kPlotH = 300;
constexpr int kMaxXTicks = 8;
constexpr int kMaxYTicks = 6;
constexpr int kSwatchW = 28;
constexpr int kPanelGap = 2 * kMargin;
const int kTextH = Canvas::TextHeight();
const int kLineH = kTextH + 6;

Rgb SeriesColour(size_t i) { return kPalette[i % kPaletteSize]; }
bool SeriesDashed(size_t i) { return i >= static_cast<size_t>(kPaletteSize); }

// One axis: its scale and range, in the plotted unit (log10 of the value on a log axis).
struct Axis {
  AxisScale scale = AxisScale::kLinear;
  double lo = 0, hi = 1;

  bool Drawable(double v) const {
    return std::isfinite(v) && (scale == AxisScale::kLinear || v > 0);
  }
  double Unit(double v) const { return scale == AxisScale::kLog ? std::log10(v) : v; }
  double Fraction(double v) const { return (Unit(v) - lo) / (hi - lo); }
};

struct Tick {
  double at = 0;  // in the plotted unit
  std::string label;
};

// The range of the plotted units `u` (not empty): linear with 5 % headroom (`pad`), log in whole
// decades; a single value gets a range around it.
Axis MakeAxis(AxisScale scale, const std::vector<double>& u, bool pad) {
  Axis a{scale};
  const auto [lo, hi] = std::minmax_element(u.begin(), u.end());
  a.lo = *lo;
  a.hi = *hi;
  if (scale == AxisScale::kLog) {
    a.lo = std::floor(a.lo);
    a.hi = std::max(std::ceil(a.hi), a.lo + 1);
    return a;
  }
  if (a.hi == a.lo) {
    const double half = a.lo == 0 ? 1.0 : std::fabs(a.lo) * 0.5;
    a.lo -= half;
    a.hi += half;
  } else if (pad) {
    const double margin = 0.05 * (a.hi - a.lo);
    a.lo -= margin;
    a.hi += margin;
  }
  return a;
}

std::vector<Tick> AxisTicks(const Axis& a, int max_ticks) {
  std::vector<Tick> ticks;
  if (a.scale == AxisScale::kLog) {
    const int first = static_cast<int>(std::ceil(a.lo));
    const int last = static_cast<int>(std::floor(a.hi));
    const int step = std::max(1, (last - first + max_ticks - 1) / max_ticks);
    for (int d = first; d <= last; d += step)
      ticks.push_back({double(d), ShortNumber(std::pow(10.0, d))});
    return ticks;
  }
  const double step = NiceStep(a.hi - a.lo, max_ticks);
  for (double k = std::ceil(a.lo / step); k * step <= a.hi + 1e-9 * step; k += 1) {
    const double v = k * step;
    ticks.push_back({v, ShortNumber(std::fabs(v) < 1e-9 * step ? 0.0 : v)});
  }
  return ticks;
}

// What a panel needs to be drawn: its axes, ticks and the count of points left out.
struct PanelGeometry {
  Axis x, y;
  std::vector<Tick> x_ticks, y_ticks;
  int64_t skipped = 0;
  int y_label_w = 0;  // the widest y tick label
  int legend_w = 0;   // swatch and the longest series label
  int height = 0;     // the whole panel, title to x axis name (or the legend, if longer)
};

absl::Status CheckPanel(const LinePlot& p, size_t index) {
  const std::string name = p.title.empty() ? absl::StrCat("panel ", index) : p.title;
  if (p.series.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("line plot '", name, "': no series"));
  }
  for (const PlotSeries& s : p.series) {
    if (s.x.size() != s.y.size()) {
      return absl::InvalidArgumentError(absl::StrCat("line plot '", name, "', series '", s.label,
                                                     "': ", s.x.size(), " x values but ",
                                                     s.y.size(), " y values"));
    }
    if (s.x.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line plot '", name, "', series '", s.label, "': no points"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PanelGeometry> MeasurePanel(const LinePlot& p, size_t index) {
  if (absl::Status s = CheckPanel(p, index); !s.ok()) return s;
  PanelGeometry g;
  const Axis probe_x{p.x_scale}, probe_y{p.y_scale};
  std::vector<double> xs, ys;
  for (const PlotSeries& s : p.series) {
    g.legend_w = std::max(g.legend_w, kSwatchW + 8 + Canvas::TextWidth(s.label));
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!probe_x.Drawable(s.x[i]) || !probe_y.Drawable(s.y[i])) {
        ++g.skipped;
        continue;
      }
      xs.push_back(probe_x.Unit(s.x[i]));
      ys.push_back(probe_y.Unit(s.y[i]));
    }
  }
  if (g.skipped > 0) {  // the legend's last line
    g.legend_w =
        std::max(g.legend_w, Canvas::TextWidth(absl::StrCat(g.skipped, " points not drawn")));
  }
  if (xs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("line plot '", p.title.empty() ? absl::StrCat("panel ", index) : p.title,
                     "': no drawable point (every x, y is NaN, infinite or <= 0 on a log axis)"));
  }
  g.x = MakeAxis(p.x_scale, xs, /*pad=*/false);
  g.y = MakeAxis(p.y_scale, ys, /*pad=*/true);
  g.x_ticks = AxisTicks(g.x, kMaxXTicks);
  g.y_ticks = AxisTicks(g.y, kMaxYTicks);
  for (const Tick& t : g.y_ticks) g.y_label_w = std::max(g.y_label_w, Canvas::TextWidth(t.label));
  const int title_h = p.title.empty() ? 0 : kLineH;
  const int below_h = 4 + 4 + kTextH + 6 + kTextH;  // tick, labels, axis name
  const int legend_h = static_cast<int>(p.series.size()) * kLineH + (g.skipped > 0 ? kLineH : 0);
  g.height = title_h + std::max(kPlotH + below_h, legend_h);
  return g;
}

// Draws one panel; (left, top) is the top-left corner of its plot area.
class PanelPainter {
 public:
  PanelPainter(const LinePlot& p, const PanelGeometry& g, int left, int top, Canvas* canvas)
      : p_(p), g_(g), left_(left), top_(top), canvas_(*canvas) {}

  void Draw() {
    DrawGrid();
    DrawMarkers();
    for (size_t i = 0; i < p_.series.size(); ++i) DrawSeries(p_.series[i], i);
    canvas_.FrameRect(left_ - 1, top_ - 1, kPlotW + 2, kPlotH + 2, kGrey);
    DrawAxes();
    DrawLegend();
  }

 private:
  int Px(double unit) const {
    return left_ +
           static_cast<int>(std::lround((unit - g_.x.lo) / (g_.x.hi - g_.x.lo) * (kPlotW - 1)));
  }
  int Py(double unit) const {
    return top_ + kPlotH - 1 -
           static_cast<int>(std::lround((unit - g_.y.lo) / (g_.y.hi - g_.y.lo) * (kPlotH - 1)));
  }

  void DrawGrid() {
    for (const Tick& t : g_.y_ticks) canvas_.FillRect(left_, Py(t.at), kPlotW, 1, kLight);
    for (const Tick& t : g_.x_ticks) canvas_.FillRect(Px(t.at), top_, 1, kPlotH, kLight);
  }

  void DrawMarkers() {
    for (const PlotMarker& m : p_.markers) {
      if (!g_.x.Drawable(m.x)) continue;
      const double u = g_.x.Unit(m.x);
      if (u < g_.x.lo || u > g_.x.hi) continue;
      const int x = Px(u);
      for (int y = top_; y < top_ + kPlotH; y += 6) canvas_.FillRect(x, y, 1, 3, kGrey);
      const int w = Canvas::TextWidth(m.label);
      const int lx = x + 4 + w <= left_ + kPlotW ? x + 4 : x - 4 - w;  // right of it if room
      canvas_.FillRect(lx - 2, top_ + 2, w + 4, kTextH + 2, kWhite);
      canvas_.Text(lx, top_ + 3, m.label, kGrey);
    }
  }

  // A 2-px line through the drawable points; dashed series draw every other 6 px of it.
  void DrawSeries(const PlotSeries& s, size_t index) {
    const Rgb colour = SeriesColour(index);
    const bool dashed = SeriesDashed(index);
    bool have_last = false;
    int lx = 0, ly = 0;
    double run = 0;  // length drawn so far, for the dashes
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!g_.x.Drawable(s.x[i]) || !g_.y.Drawable(s.y[i])) {
        have_last = false;
        continue;
      }
      const int x = Px(g_.x.Unit(s.x[i]));
      const int y = Py(g_.y.Unit(s.y[i]));
      if (!have_last) {
        canvas_.FillRect(x - 1, y - 1, 3, 3, colour);  // a lone point stays visible
      } else if (!dashed || std::fmod(run, 12.0) < 6.0) {
        canvas_.Line(lx, ly, x, y, colour);
        canvas_.Line(lx, ly + 1, x, y + 1, colour);
      }
      if (have_last) run += std::hypot(x - lx, y - ly);
      lx = x;
      ly = y;
      have_last = true;
    }
  }

  void DrawAxes() {
    for (const Tick& t : g_.y_ticks) {
      const int y = Py(t.at);
      canvas_.FillRect(left_ - 5, y, 4, 1, kBlack);
      canvas_.Text(left_ - 9 - Canvas::TextWidth(t.label), y - kTextH / 2 + 1, t.label, kBlack);
    }
    for (const Tick& t : g_.x_ticks) {
      const int x = Px(t.at);
      canvas_.FillRect(x, top_ + kPlotH + 1, 1, 4, kBlack);
      canvas_.Text(x - Canvas::TextWidth(t.label) / 2, top_ + kPlotH + 8, t.label, kBlack);
    }
    canvas_.Text(left_ + (kPlotW - Canvas::TextWidth(p_.x_axis)) / 2,
                 top_ + kPlotH + 8 + kTextH + 6, p_.x_axis, kBlack);
    const int name_x = left_ - 9 - g_.y_label_w - 8 - kTextH;
    canvas_.VerticalText(name_x, top_ + std::max(0, (kPlotH - Canvas::TextWidth(p_.y_axis)) / 2),
                         p_.y_axis, kBlack);
  }

  void DrawLegend() {
    const int x = left_ + kPlotW + 16;
    int y = top_;
    for (size_t i = 0; i < p_.series.size(); ++i, y += kLineH) {
      const int mid = y + kTextH / 2;
      for (int sx = 0; sx < kSwatchW; sx += SeriesDashed(i) ? 12 : kSwatchW) {
        canvas_.FillRect(x + sx, mid - 1, SeriesDashed(i) ? 6 : kSwatchW, 2, SeriesColour(i));
      }
      canvas_.Text(x + kSwatchW + 8, y, p_.series[i].label, kBlack);
    }
    if (g_.skipped > 0) {
      canvas_.Text(x, y, absl::StrCat(g_.skipped, " points not drawn"), kGrey);
    }
  }

  const LinePlot& p_;
  const PanelGeometry& g_;
  const int left_, top_;
  Canvas& canvas_;
};

}  // namespace

absl::StatusOr<Canvas> RenderLinePlots(const std::string& title,
                                       const std::vector<std::string>& notes,
                                       const std::vector<LinePlot>& panels) {
  if (panels.empty()) return absl::InvalidArgumentError("line plot '" + title + "': no panels");
  std::vector<PanelGeometry> geometry;
  const int header_h = kMargin + kLineH * (1 + static_cast<int>(notes.size())) + kMargin;
  int y_label_w = 0, legend_w = 0, height = header_h + kMargin;
  for (size_t i = 0; i < panels.size(); ++i) {
    absl::StatusOr<PanelGeometry> g = MeasurePanel(panels[i], i);
    if (!g.ok()) return g.status();
    y_label_w = std::max(y_label_w, g->y_label_w);
    legend_w = std::max(legend_w, g->legend_w);
    height += g->height + (i > 0 ? kPanelGap : 0);
    geometry.push_back(*std::move(g));
  }
  const int left = kMargin + kTextH + 8 + y_label_w + 9;
  int width = left + kPlotW + 16 + legend_w + kMargin;
  width = std::max(width, 2 * kMargin + Canvas::TextWidth(title));
  for (const std::string& n : notes) width = std::max(width, 2 * kMargin + Canvas::TextWidth(n));
  Canvas canvas(width, height);
  canvas.Text(kMargin, kMargin, title, kBlack);
  for (size_t i = 0; i < notes.size(); ++i) {
    canvas.Text(kMargin, kMargin + kLineH * static_cast<int>(i + 1), notes[i], kGrey);
  }
  int top = header_h;
  for (size_t i = 0; i < panels.size(); ++i) {
    const int title_h = panels[i].title.empty() ? 0 : kLineH;
    if (title_h > 0) canvas.Text(left, top, panels[i].title, kBlack);
    PanelPainter(panels[i], geometry[i], left, top + title_h, &canvas).Draw();
    top += geometry[i].height + kPanelGap;
  }
  return canvas;
}

}  // namespace posenc::cli
