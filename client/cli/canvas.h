// Pictures for the posenc CLI: an RGB canvas with the drawing operations the heatmaps
// (heatmap.h) and `posenc check`'s error plot need, text in the 5x8 font (font.h), viridis, and
// PNG output with libpng.
//
// Thread-safety: plain values and pure functions; thread-safe.
#ifndef POSENC_CLIENT_CLI_CANVAS_H_
#define POSENC_CLIENT_CLI_CANVAS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace posenc::cli {

using Rgb = std::array<uint8_t, 3>;

// Viridis at t in [0, 1] (clamped; NaN gives the low end).
Rgb Viridis(double t);

// An RGB image with the drawing operations the pictures need. Drawing outside is clipped.
class Canvas {
 public:
  Canvas(int width, int height, Rgb background = {255, 255, 255});

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }  // RGB, row-major
  Rgb At(int x, int y) const;

  void Set(int x, int y, Rgb color);
  void FillRect(int x, int y, int w, int h, Rgb color);
  void FrameRect(int x, int y, int w, int h, Rgb color);  // 1-px outline
  void Line(int x0, int y0, int x1, int y1, Rgb color);   // Bresenham

  // Text in the 5x7 font magnified `scale` times; (x, y) is the top-left corner. Vertical text
  // reads bottom to top, (x, y) its top-left corner too.
  void Text(int x, int y, std::string_view text, Rgb color, int scale = kTextScale);
  void VerticalText(int x, int y, std::string_view text, Rgb color, int scale = kTextScale);
  static int TextWidth(std::string_view text, int scale = kTextScale);
  static int TextHeight(int scale = kTextScale);  // one line, without spacing

  static constexpr int kTextScale = 2;

 private:
  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

// `left` and `right` side by side on one white canvas, top-aligned, `gap` px apart.
Canvas Beside(const Canvas& left, const Canvas& right, int gap = 16);

// Writes `canvas` as an 8-bit RGB PNG; errors name the path.
absl::Status WritePng(const std::string& path, const Canvas& canvas);

// "1e-07", "0.5", "-3.25", "-1176", "1.5e+05": a short label for an axis or a colour bar.
std::string ShortNumber(double v);

// The smallest step 1, 2 or 5 x 10^k (k any integer) that covers `span` in at most
// `max_intervals` steps, e.g. NiceStep(1000, 5) = 200, NiceStep(0.3, 3) = 0.1; 1 for a span that
// is not > 0 and finite.
double NiceStep(double span, int max_intervals);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_CANVAS_H_
