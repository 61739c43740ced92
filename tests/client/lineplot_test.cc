// The CLI's line plots (client/cli/lineplot.h): PNGs that decode with the drawn size, ticks and
// their labels where the axes put them, the legend, markers, log axes, and every bad input.
#include "client/cli/lineplot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/canvas.h"
#include "png_test_util.h"

namespace posenc::cli {
namespace {

using ::posenc::testing::DecodePng;
using ::posenc::testing::Picture;

constexpr std::array<uint8_t, 3> kBlackPx = {0, 0, 0};
constexpr std::array<uint8_t, 3> kGreyPx = {110, 110, 110};
constexpr std::array<uint8_t, 3> kBluePx = {0, 114, 178};       // the first series
constexpr std::array<uint8_t, 3> kVermillionPx = {213, 94, 0};  // the second

PlotSeries Ramp(const std::string& label, int n, double slope, double x_step = 1.0) {
  PlotSeries s{label, {}, {}};
  for (int i = 0; i < n; ++i) {
    s.x.push_back(i * x_step);
    s.y.push_back(slope * i / (n - 1));
  }
  return s;
}

Picture WriteAndRead(const Canvas& canvas, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  EXPECT_TRUE(WritePng(path, canvas).ok());
  return DecodePng(path);
}

// The plot frame: the grey rectangle whose top edge is the longest grey run of a row.
struct Frame {
  int left = 0, top = 0, right = 0, bottom = 0;  // the plot area inside the 1-px frame
};

Frame FindFrame(const Picture& p) {
  Frame f;
  int best = 0;
  for (int y = 0; y < p.height; ++y) {
    for (int x = 0, run = 0; x < p.width; ++x) {
      run = p.At(x, y) == kGreyPx ? run + 1 : 0;
      if (run > best) {
        best = run;
        f = {x - run + 2, y + 1, x - 1, 0};
      }
    }
  }
  int y = f.top;
  while (y < p.height && p.At(f.left - 1, y) == kGreyPx) ++y;
  f.bottom = y - 2;
  return f;
}

// Whether `text` appears in `colour` with its top-left corner at (x, y): every pixel the font
// sets has that colour in the picture.
bool TextAt(const Picture& p, int x, int y, const std::string& text,
            std::array<uint8_t, 3> colour = kBlackPx) {
  Canvas ref(Canvas::TextWidth(text), Canvas::TextHeight());
  ref.Text(0, 0, text, {0, 0, 0});
  int set = 0;
  for (int dy = 0; dy < ref.height(); ++dy) {
    for (int dx = 0; dx < ref.width(); ++dx) {
      if (ref.At(dx, dy) != Rgb{0, 0, 0}) continue;
      ++set;
      if (x + dx >= p.width || y + dy >= p.height || p.At(x + dx, y + dy) != colour) return false;
    }
  }
  return set > 0;
}

TEST(LinePlotTest, PngDecodesWithTicksLabelsAndLegendWhereTheAxesPutThem) {
  LinePlot plot;
  plot.title = "decay";
  plot.x_axis = "distance";
  plot.y_axis = "mean |q.k|";
  plot.series = {Ramp("scaled", 1001, 1.0), Ramp("unscaled", 1001, 0.5)};
  absl::StatusOr<Canvas> canvas = RenderLinePlots("RoPE decay", {"a note"}, {plot});
  ASSERT_TRUE(canvas.ok()) << canvas.status();
  const Picture p = WriteAndRead(*canvas, "/lineplot.png");
  ASSERT_EQ(p.width, canvas->width());
  ASSERT_EQ(p.height, canvas->height());
  EXPECT_EQ(p.rgb, canvas->pixels());
  EXPECT_GT(p.Count(kBluePx), 800);
  EXPECT_GT(p.Count(kVermillionPx), 800);

  const Frame f = FindFrame(p);
  ASSERT_EQ(f.right - f.left + 1, 800);
  ASSERT_EQ(f.bottom - f.top + 1, 300);
  // x: 0 .. 1000 without headroom, ticks every 200 (NiceStep(1000, 8)), labels centred under them.
  for (int v = 0; v <= 1000; v += 200) {
    const int x = f.left + static_cast<int>(std::lround(v / 1000.0 * 799));
    EXPECT_EQ(p.At(x, f.bottom + 2), kBlackPx) << v;
    const std::string label = absl::StrCat(v);
    EXPECT_TRUE(TextAt(p, x - Canvas::TextWidth(label) / 2, f.bottom + 9, label)) << label;
  }
  // y: 0 .. 1 with 5 % headroom, ticks every 0.2, labels right-aligned left of the ticks.
  for (int k = 0; k <= 5; ++k) {
    const double u = (0.2 * k + 0.05) / 1.1;
    const int y = f.bottom - static_cast<int>(std::lround(u * 299));
    EXPECT_EQ(p.At(f.left - 3, y), kBlackPx) << k;
    const std::string label = ShortNumber(0.2 * k);
    EXPECT_TRUE(
        TextAt(p, f.left - 9 - Canvas::TextWidth(label), y - Canvas::TextHeight() / 2 + 1, label))
        << label;
  }
  EXPECT_TRUE(TextAt(p, f.right + 1 + 16 + 28 + 8, f.top, "scaled"));
  EXPECT_TRUE(TextAt(p, 12, 12, "RoPE decay"));
  EXPECT_TRUE(TextAt(p, f.left + (800 - Canvas::TextWidth("distance")) / 2,
                     f.bottom + 9 + Canvas::TextHeight() + 6, "distance"));
  // The first point of the scaled ramp sits at the bottom-left, its last at the top-right.
  EXPECT_EQ(p.At(f.left + 400, f.bottom - static_cast<int>(std::lround(0.55 / 1.1 * 299))),
            kBluePx);
}

TEST(LinePlotTest, LogAxesMarkersAndStackedPanels) {
  LinePlot decay;
  decay.title = "bound";
  decay.x_scale = AxisScale::kLog;
  decay.y_scale = AxisScale::kLog;
  PlotSeries s{"1/x", {}, {}};
  for (double x = 1; x <= 1e4; x *= 1.1) {
    s.x.push_back(x);
    s.y.push_back(1.0 / x);
  }
  s.x.push_back(0.0);  // not drawable on a log axis: counted, not drawn
  s.y.push_back(1.0);
  decay.series = {s};
  decay.markers = {{100.0, "trained length 100"}, {1e9, "beyond the range"}};
  LinePlot second = decay;
  second.title = "again";
  absl::StatusOr<Canvas> one = RenderLinePlots("t", {}, {decay});
  absl::StatusOr<Canvas> two = RenderLinePlots("t", {}, {decay, second});
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(one->width(), two->width());
  EXPECT_GT(two->height(), one->height() + 300);
  const Picture p = WriteAndRead(*one, "/lineplot_log.png");
  const Frame f = FindFrame(p);
  // Decades 1 .. 1e4 on x: "100" at the middle.
  const int x100 = f.left + static_cast<int>(std::lround(0.5 * 799));
  EXPECT_TRUE(TextAt(p, x100 - Canvas::TextWidth("100") / 2, f.bottom + 9, "100"));
  EXPECT_TRUE(TextAt(p, f.left - Canvas::TextWidth("1") / 2, f.bottom + 9, "1"));
  // The marker: a dashed grey column at x = 100.
  int dashes = 0;
  for (int y = f.top; y <= f.bottom; ++y) dashes += p.At(x100, y) == kGreyPx;
  EXPECT_GT(dashes, 100);
  EXPECT_TRUE(
      TextAt(p, f.right + 1 + 16, f.top + Canvas::TextHeight() + 6, "1 points not drawn", kGreyPx));
}

TEST(LinePlotTest, NonFiniteValuesBreakTheLineAndAreCounted) {
  LinePlot plot;
  PlotSeries s = Ramp("gappy", 101, 1.0);
  s.y[50] = std::numeric_limits<double>::quiet_NaN();
  s.x[60] = std::numeric_limits<double>::infinity();
  plot.series = {s, PlotSeries{"all nan", {1.0}, {std::nan("")}}};
  absl::StatusOr<Canvas> canvas = RenderLinePlots("gaps", {}, {plot});
  ASSERT_TRUE(canvas.ok()) << canvas.status();
  const Picture p = WriteAndRead(*canvas, "/lineplot_gaps.png");
  const Frame f = FindFrame(p);
  EXPECT_TRUE(TextAt(p, f.right + 1 + 16, f.top + 2 * (Canvas::TextHeight() + 6),
                     "3 points not drawn", kGreyPx));
}

TEST(LinePlotTest, ManySeriesRepeatTheColoursDashed) {
  LinePlot plot;
  for (int i = 0; i < 9; ++i) plot.series.push_back(Ramp(absl::StrCat("head ", i), 50, i + 1.0));
  absl::StatusOr<Canvas> canvas = RenderLinePlots("heads", {}, {plot});
  ASSERT_TRUE(canvas.ok()) << canvas.status();
  EXPECT_GT(canvas->height(), 9 * (Canvas::TextHeight() + 6));
}

TEST(LinePlotTest, BadInputsAreNamed) {
  auto error = [](const std::vector<LinePlot>& panels) {
    absl::StatusOr<Canvas> c = RenderLinePlots("t", {}, panels);
    EXPECT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(c.status().message());
  };
  EXPECT_EQ(error({}), "line plot 't': no panels");
  LinePlot empty;
  empty.title = "decay";
  EXPECT_EQ(error({empty}), "line plot 'decay': no series");
  LinePlot no_points = empty;
  no_points.series = {PlotSeries{"head 0", {}, {}}};
  EXPECT_EQ(error({no_points}), "line plot 'decay', series 'head 0': no points");
  LinePlot mismatch;
  mismatch.series = {PlotSeries{"s", {1, 2, 3}, {1, 2}}};
  EXPECT_EQ(error({mismatch}), "line plot 'panel 0', series 's': 3 x values but 2 y values");
  LinePlot nan;
  nan.title = "nan";
  nan.series = {PlotSeries{"s", {1, 2}, {std::nan(""), std::nan("")}}};
  EXPECT_NE(error({nan}).find("line plot 'nan': no drawable point"), std::string::npos);
  LinePlot log = nan;
  log.y_scale = AxisScale::kLog;
  log.series = {PlotSeries{"s", {1, 2}, {0.0, -1.0}}};
  EXPECT_NE(error({log}).find("<= 0 on a log axis"), std::string::npos);
  // A constant series and a single point are fine (a range is made around the value).
  LinePlot flat;
  flat.series = {PlotSeries{"flat", {0, 1, 2}, {3, 3, 3}}, PlotSeries{"dot", {1}, {3}}};
  EXPECT_TRUE(RenderLinePlots("t", {}, {flat}).ok());
}

TEST(LinePlotTest, NiceStepIsOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_EQ(NiceStep(1000, 8), 200);
  EXPECT_EQ(NiceStep(1000, 5), 200);
  EXPECT_EQ(NiceStep(1000, 10), 100);
  EXPECT_DOUBLE_EQ(NiceStep(0.3, 3), 0.1);
  EXPECT_DOUBLE_EQ(NiceStep(1.1, 6), 0.2);
  EXPECT_EQ(NiceStep(7e6, 7), 1e6);
  EXPECT_EQ(NiceStep(0, 5), 1);
  EXPECT_EQ(NiceStep(std::nan(""), 5), 1);
  EXPECT_EQ(NiceStep(10, 0), 1);
}

}  // namespace
}  // namespace posenc::cli
