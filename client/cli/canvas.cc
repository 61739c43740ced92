// The canvas, viridis and PNG output (canvas.h).
#include "client/cli/canvas.h"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/font.h"

namespace posenc::cli {
namespace {

// ---------------------------------------------------------------------------------------------
// Viridis: nine evenly spaced samples of the published map (matplotlib's viridis, as R's
// viridisLite lists them for n = 9: #440154 #472D7B #3B528B #2C728E #21908C #27AD81 #5DC863
// #AADC32 #FDE725), interpolated linearly in between. Within a few units of 255 of the full
// 256-entry map, which is all a heatmap needs.
// ---------------------------------------------------------------------------------------------
constexpr Rgb kViridisSamples[] = {
    {0x44, 0x01, 0x54}, {0x47, 0x2D, 0x7B}, {0x3B, 0x52, 0x8B},
    {0x2C, 0x72, 0x8E}, {0x21, 0x90, 0x8C}, {0x27, 0xAD, 0x81},
    {0x5D, 0xC8, 0x63}, {0xAA, 0xDC, 0x32}, {0xFD, 0xE7, 0x25},
};

}  // namespace

Rgb Viridis(double t) {
  if (!(t > 0)) t = 0;  // also NaN
  if (t > 1) t = 1;
  constexpr int kSegments = static_cast<int>(std::size(kViridisSamples)) - 1;
  const double x = t * kSegments;
  const int i = std::min(static_cast<int>(x), kSegments - 1);
  const double f = x - i;
  Rgb out;
  for (int c = 0; c < 3; ++c) {
    const double v =
        kViridisSamples[i][c] + f * (kViridisSamples[i + 1][c] - kViridisSamples[i][c]);
    out[c] = static_cast<uint8_t>(std::lround(v));
  }
  return out;
}

Canvas::Canvas(int width, int height, Rgb background)
    : width_(std::max(width, 1)), height_(std::max(height, 1)) {
  pixels_.resize(static_cast<size_t>(width_) * height_ * 3);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    std::copy(background.begin(), background.end(), pixels_.begin() + i);
  }
}

Canvas Beside(const Canvas& left, const Canvas& right, int gap) {
  Canvas out(left.width() + gap + right.width(), std::max(left.height(), right.height()));
  for (const auto& [picture, x0] : {std::pair<const Canvas*, int>{&left, 0},
                                    std::pair<const Canvas*, int>{&right, left.width() + gap}}) {
    for (int y = 0; y < picture->height(); ++y) {
      for (int x = 0; x < picture->width(); ++x) out.Set(x0 + x, y, picture->At(x, y));
    }
  }
  return out;
}

Rgb Canvas::At(int x, int y) const {
  const size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  return {pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void Canvas::Set(int x, int y, Rgb color) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  pixels_[i] = color[0];
  pixels_[i + 1] = color[1];
  pixels_[i + 2] = color[2];
}

void Canvas::FillRect(int x, int y, int w, int h, Rgb color) {
  const int x0 = std::max(x, 0);
  const int y0 = std::max(y, 0);
  const int x1 = std::min(x + w, width_);
  const int y1 = std::min(y + h, height_);
  for (int yy = y0; yy < y1; ++yy) {
    for (int xx = x0; xx < x1; ++xx) Set(xx, yy, color);
  }
}

void Canvas::FrameRect(int x, int y, int w, int h, Rgb color) {
  FillRect(x, y, w, 1, color);
  FillRect(x, y + h - 1, w, 1, color);
  FillRect(x, y, 1, h, color);
  FillRect(x + w - 1, y, 1, h, color);
}

void Canvas::Line(int x0, int y0, int x1, int y1, Rgb color) {
  const int dx = std::abs(x1 - x0);
  const int dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1;
  const int sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  while (true) {
    Set(x0, y0, color);
    if (x0 == x1 && y0 == y1) return;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void Canvas::Text(int x, int y, std::string_view text, Rgb color, int scale) {
  for (char c : text) {
    const Glyph& g = GlyphOf(c);
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) {
        if ((g.rows[row] >> (kGlyphWidth - 1 - col)) & 1) {
          FillRect(x + col * scale, y + row * scale, scale, scale, color);
        }
      }
    }
    x += kGlyphAdvance * scale;
  }
}

void Canvas::VerticalText(int x, int y, std::string_view text, Rgb color, int scale) {
  // Rotated a quarter turn counter-clockwise: the text's baseline runs up the left edge.
  int bottom = y + TextWidth(text, scale);
  for (char c : text) {
    const Glyph& g = GlyphOf(c);
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) {
        if ((g.rows[row] >> (kGlyphWidth - 1 - col)) & 1) {
          FillRect(x + row * scale, bottom - (col + 1) * scale, scale, scale, color);
        }
      }
    }
    bottom -= kGlyphAdvance * scale;
  }
}

int Canvas::TextWidth(std::string_view text, int scale) {
  if (text.empty()) return 0;
  return (static_cast<int>(text.size()) * kGlyphAdvance - 1) * scale;
}

int Canvas::TextHeight(int scale) { return kGlyphHeight * scale; }

absl::Status WritePng(const std::string& path, const Canvas& canvas) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(canvas.width());
  image.height = static_cast<png_uint_32>(canvas.height());
  image.format = PNG_FORMAT_RGB;
  errno = 0;
  if (png_image_write_to_file(&image, path.c_str(), /*convert_to_8bit=*/0, canvas.pixels().data(),
                              /*row_stride=*/0,
                              /*colormap=*/nullptr) == 0) {
    const std::string reason = errno != 0 ? std::strerror(errno) : std::string(image.message);
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot write the PNG: ", reason));
  }
  return absl::OkStatus();
}

std::string ShortNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return "0";
  // Four digits where that avoids an exponent (-1176, 0.0625), three with one (1.5e-07).
  const double a = std::fabs(v);
  return a >= 1e-3 && a < 1e5 ? absl::StrFormat("%.4g", v) : absl::StrFormat("%.3g", v);
}

double NiceStep(double span, int max_intervals) {
  if (!(span > 0) || !std::isfinite(span) || max_intervals < 1) return 1.0;
  const double raw = span / max_intervals;
  double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (int guard = 0; guard < 4; ++guard, decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade >= raw * (1 - 1e-12)) return m * decade;
    }
  }
  return raw;
}

}  // namespace posenc::cli
