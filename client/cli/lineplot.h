// Line plots for the CLI's curves (`posenc analyze --png`): several labelled series over shared
// axes (linear or log10), ticks and tick labels, axis names, a title with note lines, a legend
// and labelled vertical markers (a trained length, a wavelength limit). Several plots can be
// stacked into one picture (one panel each, the same width). Drawn on a Canvas (canvas.h).
//
//   title                                   (one line, black; then the notes, grey)
//   panel title
//   y ticks |  plot area (800 x 300 px)   |  legend: a swatch and the label of each series
//   y name  |  markers: dashed, labelled  |
//           +-----------------------------+
//             x ticks, x name
//
// Points: (x[i], y[i]) pairs; consecutive drawable points are joined by a 2-px line. A point is
// drawable when both values are finite (and > 0 on a log axis); one that is not breaks the line
// there (a gap) and is counted in a note. A series of one drawable point is drawn as a dot.
// Colours: the Okabe-Ito palette (readable by most colour-blind readers); past its 7 colours
// they repeat with a dashed line.
//
// Thread-safety: plain values and pure functions; thread-safe.
#ifndef POSENC_CLIENT_CLI_LINEPLOT_H_
#define POSENC_CLIENT_CLI_LINEPLOT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli/canvas.h"

namespace posenc::cli {

enum class AxisScale { kLinear, kLog };

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // the same length, >= 1
};

// A vertical line at x across the plot area, its label at the top.
struct PlotMarker {
  double x = 0;
  std::string label;
};

struct LinePlot {
  std::string title;  // the panel's own title (may be empty)
  std::string x_axis, y_axis;
  AxisScale x_scale = AxisScale::kLinear;
  AxisScale y_scale = AxisScale::kLinear;
  std::vector<PlotSeries> series;   // at least one
  std::vector<PlotMarker> markers;  // outside the x range: left out
};

// One picture of `panels` stacked top to bottom under `title` and `notes`. INVALID_ARGUMENT,
// naming the panel and the series, when there is no panel, a panel has no series, a series has
// no points or x and y of different lengths, or a panel has no drawable point at all.
absl::StatusOr<Canvas> RenderLinePlots(const std::string& title,
                                       const std::vector<std::string>& notes,
                                       const std::vector<LinePlot>& panels);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_LINEPLOT_H_
