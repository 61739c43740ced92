// Heatmaps and the drawing pieces behind them (png.h): viridis, a 5x7 bitmap font, a canvas,
// libpng output, and the description of each command's result as panels.
#include "client/cli/png.h"

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"

namespace posenc::cli {
namespace {

constexpr Rgb kBlack = {0, 0, 0};
constexpr Rgb kGrey = {110, 110, 110};
constexpr Rgb kMaskGrey = {200, 200, 200};  // -inf, +inf and NaN cells

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

// ---------------------------------------------------------------------------------------------
// The font: 5 columns x 8 rows per glyph (rows 0..6 for capitals and digits, row 7 for the
// descenders of g j p q y , _), one byte per row, bit 4 the leftmost column.
// ---------------------------------------------------------------------------------------------
struct Glyph {
  char c;
  uint8_t rows[8];
};

constexpr Glyph kGlyphs[] = {
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'!', {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00}},
    {'"', {0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'#', {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00}},
    {'\'', {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00}},
    {'*', {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00}},
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E, 0x00}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E, 0x00}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00}},
    {';', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08, 0x00}},
    {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00}},
    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C, 0x00}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00}},
    {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00}},
    {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00}},
    {'Y', {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04, 0x00}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00}},
    {'[', {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00}},
    {']', {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00}},
    {'^', {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00}},
    {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E, 0x00}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E, 0x00}},
    {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F, 0x00}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00}},
    {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00}},
    {'g', {0x00, 0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00}},
    {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11, 0x00}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00}},
    {'p', {0x00, 0x00, 0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x01}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E, 0x00}},
    {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06, 0x00}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00}},
    {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00}},
    {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00}},
    {'{', {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02, 0x00}},
    {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00}},
    {'}', {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08, 0x00}},
};
constexpr int kGlyphWidth = 5;
constexpr int kGlyphHeight = 8;
constexpr int kGlyphAdvance = 6;  // one blank column between characters

// The glyph of `c`; '?' for characters the font does not have.
const Glyph& GlyphOf(char c) {
  static const Glyph* const* const kTable = [] {
    static const Glyph* table[128] = {};
    for (const Glyph& g : kGlyphs) table[static_cast<unsigned char>(g.c)] = &g;
    return table;
  }();
  const auto index = static_cast<unsigned char>(c);
  const Glyph* g = index < 128 ? kTable[index] : nullptr;
  return g != nullptr ? *g : *kTable[static_cast<unsigned char>('?')];
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Colours, canvas, PNG.
// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// Output files, checked before the call.
// ---------------------------------------------------------------------------------------------
absl::Status CheckOutputFiles(const ParsedFlags& flags) {
  namespace fs = std::filesystem;
  for (std::string_view flag : {"npy", "png", "out-cos", "out-sin", "out-q", "out-k"}) {
    const std::optional<std::string> path = flags.String(flag);
    if (!path.has_value()) continue;
    const std::string what = absl::StrCat("--", std::string(flag), ": cannot write '", *path, "'");
    if (path->empty()) return UsageError(absl::StrCat("--", std::string(flag), " needs a path"));
    if (*path == "-" && flag != "png") continue;  // standard output
    std::error_code ec;
    const fs::path file(*path);
    fs::path dir = file.parent_path();
    if (dir.empty()) dir = ".";
    if (!fs::exists(dir, ec)) {
      return UsageError(absl::StrCat(what, ": the directory '", dir.string(), "' does not exist"));
    }
    if (!fs::is_directory(dir, ec)) {
      return UsageError(absl::StrCat(what, ": '", dir.string(), "' is not a directory"));
    }
    const bool exists = fs::exists(file, ec);
    if (exists && fs::is_directory(file, ec)) {
      return UsageError(absl::StrCat(what, ": it is a directory"));
    }
    const std::string probe = exists ? *path : dir.string();
    if (::access(probe.c_str(), W_OK) != 0) {
      return UsageError(absl::StrCat(what, ": ", exists ? "the file" : "its directory",
                                     " is not writable (", std::strerror(errno), ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// ---------------------------------------------------------------------------------------------
// Heatmaps.
// ---------------------------------------------------------------------------------------------

// One matrix of a picture: element (r, c) is tensor->At(offset + r*row_stride + c*col_stride).
struct Panel {
  const Tensor* tensor = nullptr;
  std::string title;
  int64_t offset = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
  int64_t rows = 0;
  int64_t cols = 0;
};

struct Heatmap {
  std::string title;                // what, dtype, shape
  std::vector<std::string> notes;   // further lines under the title
  std::string row_axis;             // name of the vertical axis (rows, top to bottom)
  std::string col_axis;             // name of the horizontal axis (columns, left to right)
  std::vector<int64_t> row_labels;  // label of each row; empty: the row index
  std::vector<Panel> panels;        // every panel has the same rows and cols
};

std::string ShapeText(const Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.shape, ", "), "]");
}

std::string Plural(int64_t n, std::string_view noun) {
  return absl::StrCat(n, " ", std::string(noun), n == 1 ? "" : "s");
}

// Panels over the leading axes of `t` ([..., R, C]: one R x C matrix per leading index), at most
// `limit`; `axis_names` names the leading axes ("batch", "head"), `prefix` starts each title.
// Adds a note when some are left out.
void AddMatrixPanels(const Tensor& t, const std::vector<std::string>& axis_names,
                     const std::string& prefix, int limit, Heatmap* map) {
  const size_t rank = t.shape.size();
  const int64_t rows = t.shape[rank - 2];
  const int64_t cols = t.shape[rank - 1];
  int64_t count = 1;
  for (size_t d = 0; d + 2 < rank; ++d) count *= t.shape[d];
  for (int64_t b = 0; b < count && b < limit; ++b) {
    std::vector<std::string> parts;
    int64_t rest = b;
    for (size_t d = rank - 2; d-- > 0;) {
      const std::string name = d < axis_names.size() ? axis_names[d] : absl::StrCat("axis ", d);
      // A leading axis of size 1 says nothing: leave it out of the title.
      if (t.shape[d] > 1) parts.insert(parts.begin(), absl::StrCat(name, " ", rest % t.shape[d]));
      rest /= t.shape[d];
    }
    std::string title = prefix;
    if (!parts.empty()) {
      absl::StrAppend(&title, title.empty() ? "" : " ", absl::StrJoin(parts, ", "));
    }
    map->panels.push_back({&t, title, b * rows * cols, cols, 1, rows, cols});
  }
  if (count > limit) {
    const std::string noun = rank == 3 && !axis_names.empty() ? axis_names[0] : "panel";
    map->notes.push_back(absl::StrCat(prefix, prefix.empty() ? "" : ": ", "first ", limit, " of ",
                                      Plural(count, noun)));
  }
}

// Panels of one axis `axis` of a 3-D [R?, ...] tensor laid out with strides: panel p starts at
// p * panel_stride and its rows/cols step by row_stride/col_stride.
void AddStridedPanels(const Tensor& t, int64_t count, int64_t panel_stride, int64_t rows,
                      int64_t row_stride, int64_t cols, int64_t col_stride, const std::string& noun,
                      Heatmap* map) {
  for (int64_t p = 0; p < count && p < kMaxPanels; ++p) {
    map->panels.push_back({&t, count > 1 ? absl::StrCat(noun, " ", p) : std::string(),
                           p * panel_stride, row_stride, col_stride, rows, cols});
  }
  if (count > kMaxPanels) {
    map->notes.push_back(absl::StrCat("first ", kMaxPanels, " of ", Plural(count, noun)));
  }
}

bool CompactBias(const ParsedFlags& flags) {
  return flags.String("form").value_or("") == "compact" && !flags.Switch("expand");
}

// What each command's result looks like as a picture; nullopt for commands that draw nothing.
absl::StatusOr<std::optional<Heatmap>> Describe(std::string_view command, const ParsedFlags& flags,
                                                const CommandOutput& output) {
  if (output.tensors.empty()) return std::nullopt;
  const NamedTensor& main = output.tensors[0];
  const Tensor& t = main.tensor;
  if (t.shape.size() < 2 || t.NumElements() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--png draws 2-D and 3-D results, got ", main.name, " ", ShapeText(t)));
  }
  const size_t rank = t.shape.size();
  Heatmap map;
  map.title = absl::StrCat(std::string(command), ": ", main.name, " ",
                           std::string(client::DTypeName(t.dtype)), " ", ShapeText(t));
  if (command == "sinusoidal" || command == "add") {
    map.row_labels = main.row_labels;
    map.row_axis = map.row_labels.empty() ? "token" : "position";
    map.col_axis = "channel";
    AddMatrixPanels(t, {command == "add" ? "batch" : "sequence"}, "", kMaxPanels, &map);
  } else if (command == "rope-cache") {
    map.title = absl::StrCat(std::string(command), ": cos, sin ",
                             std::string(client::DTypeName(t.dtype)), " ", ShapeText(t));
    map.row_labels = main.row_labels;
    map.row_axis = map.row_labels.empty() ? "token" : "position";
    const std::string layout = flags.String("layout").value_or("compact");
    map.col_axis = layout == "compact" ? "frequency j" : absl::StrCat("channel (", layout, ")");
    for (const NamedTensor& named : output.tensors) {
      if (named.tensor.shape.size() < 2) continue;
      AddMatrixPanels(named.tensor, {"sequence"}, named.name,
                      kMaxPanels / static_cast<int>(output.tensors.size()), &map);
    }
  } else if (command == "apply-rope") {
    const std::string layout = flags.String("layout").value_or("bshd");
    map.col_axis = "channel";
    if (layout == "bhsd" && rank == 4) {
      map.row_axis = "position index";
      AddMatrixPanels(t, {"batch", "head"}, "", kMaxPanels, &map);
    } else if (rank == 4 || rank == 3) {
      // BSHD [B, S, H, D] or THD [T, H, D]: one panel per head, rows = the tokens.
      const int64_t heads = t.shape[rank - 2];
      const int64_t width = t.shape[rank - 1];
      const int64_t tokens = t.NumElements() / (heads * width);
      map.row_axis = rank == 4 && t.shape[0] > 1 ? "token (batch x seq)" : "token";
      AddStridedPanels(t, heads, width, tokens, heads * width, width, 1, "head", &map);
    } else {
      map.row_axis = "row";
      AddMatrixPanels(t, {}, "", kMaxPanels, &map);
    }
  } else if (command == "alibi-bias" || command == "relative-bias") {
    if (main.name == "buckets") {
      map.row_axis = "query";
      map.col_axis = "key";
      AddMatrixPanels(t, {}, "", kMaxPanels, &map);
    } else if (CompactBias(flags)) {
      const bool bloom = flags.String("mode").value_or("") == "bloom";
      map.row_axis = "head";
      map.col_axis = bloom ? "key" : "diagonal: key - query + q_len - 1";
      map.notes.push_back("compact form: one row per head");
      AddMatrixPanels(t, {"batch"}, "", kMaxPanels, &map);
    } else {
      map.row_axis = "query";
      map.col_axis = "key";
      AddMatrixPanels(
          t,
          rank == 4 ? std::vector<std::string>{"batch", "head"} : std::vector<std::string>{"head"},
          "", kMaxPanels, &map);
    }
  } else if (command == "relative-embedding") {
    if (rank != 3) {
      map.row_axis = "row";
      map.col_axis = "column";
      AddMatrixPanels(t, {}, "", kMaxPanels, &map);
    } else {
      // [q, k, D]: one query x key panel per channel d.
      const int64_t q = t.shape[0];
      const int64_t k = t.shape[1];
      const int64_t d = t.shape[2];
      map.row_axis = "query";
      map.col_axis = "key";
      AddStridedPanels(t, d, 1, q, k * d, k, d, "channel", &map);
    }
  } else {
    return std::nullopt;
  }
  return map;
}

// The indices 0, step, 2*step, ... < n with a 1-2-5 step that leaves at most `max_ticks` ticks.
std::vector<int64_t> Ticks(int64_t n, int64_t max_ticks) {
  max_ticks = std::max<int64_t>(max_ticks, 1);
  int64_t step = 1;
  for (int64_t decade = 1;; decade *= 10) {
    bool found = false;
    for (int64_t m : {1, 2, 5}) {
      step = m * decade;
      if ((n - 1) / step + 1 <= max_ticks) {
        found = true;
        break;
      }
    }
    if (found || decade > (int64_t{1} << 50)) break;
  }
  std::vector<int64_t> ticks;
  for (int64_t i = 0; i < n; i += step) ticks.push_back(i);
  return ticks;
}

// The displayed cells of one panel: the mean of the finite values of each fr x fc block (NaN
// when a block has none).
std::vector<double> PanelCells(const Panel& p, int64_t fr, int64_t fc, int64_t dr, int64_t dc) {
  std::vector<double> sum(static_cast<size_t>(dr * dc), 0.0);
  std::vector<int64_t> count(sum.size(), 0);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t base = p.offset + r * p.row_stride;
    const int64_t cr = r / fr;
    for (int64_t c = 0; c < p.cols; ++c) {
      const double v = p.tensor->At(base + c * p.col_stride);
      if (!std::isfinite(v)) continue;
      const size_t cell = static_cast<size_t>(cr * dc + c / fc);
      sum[cell] += v;
      ++count[cell];
    }
  }
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = count[i] > 0 ? sum[i] / static_cast<double>(count[i])
                          : std::numeric_limits<double>::quiet_NaN();
  }
  return sum;
}

Canvas Render(Heatmap map) {
  const int n = static_cast<int>(map.panels.size());
  const int grid_cols = std::min(n, 4);
  const int grid_rows = (n + grid_cols - 1) / grid_cols;
  // Pixels per panel axis: at most `budget` (longer axes are averaged down), and short axes
  // magnified towards `target`.
  const int64_t budget = n == 1 ? 1024 : n == 2 ? 512 : n == 3 ? 340 : 256;
  const int64_t target = std::min<int64_t>(budget, 512);
  const int64_t rows = map.panels[0].rows;
  const int64_t cols = map.panels[0].cols;

  // Block factors (downsampling) and magnification.
  const int64_t fr = (rows + budget - 1) / budget;
  const int64_t fc = (cols + budget - 1) / budget;
  const int64_t dr = (rows + fr - 1) / fr;
  const int64_t dc = (cols + fc - 1) / fc;
  const int64_t s = std::max<int64_t>(1, std::min(target / dr, target / dc));
  // A thin panel (one query, or a narrow table) is stretched along its short axis to a quarter
  // of the target: cells need not be square.
  const int64_t min_px = target / 4;
  const int sy =
      static_cast<int>(dr * s >= min_px ? s : std::min(budget / dr, (min_px + dr - 1) / dr));
  const int sx =
      static_cast<int>(dc * s >= min_px ? s : std::min(budget / dc, (min_px + dc - 1) / dc));
  const int pw = static_cast<int>(dc) * sx;
  const int ph = static_cast<int>(dr) * sy;
  if (fr > 1 || fc > 1) {
    map.notes.push_back(absl::StrCat("downsampled: each cell is the mean of ", fr, " x ", fc, " (",
                                     map.row_axis, " x ", map.col_axis, ") values"));
  }

  // Values, range and non-finite entries over every panel.
  std::vector<std::vector<double>> cells;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  bool neg_inf = false;
  bool pos_inf = false;
  bool nan = false;
  for (const Panel& p : map.panels) {
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        const double v = p.tensor->At(p.offset + r * p.row_stride + c * p.col_stride);
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        } else if (std::isnan(v)) {
          nan = true;
        } else {
          (v < 0 ? neg_inf : pos_inf) = true;
        }
      }
    }
    cells.push_back(PanelCells(p, fr, fc, dr, dc));
  }
  if (n > 1) {
    map.notes.push_back(n == 2 ? std::string("one colour scale for both panels")
                               : absl::StrCat("one colour scale for all ", n, " panels"));
  }
  const bool any_finite = lo <= hi;
  if (!any_finite) lo = hi = 0;

  // Ticks and their labels.
  const int text_h = Canvas::TextHeight();
  auto row_label = [&](int64_t i) {
    return absl::StrCat(static_cast<size_t>(i) < map.row_labels.size() ? map.row_labels[i] : i);
  };
  const std::vector<int64_t> row_ticks = Ticks(rows, std::max(2, ph / (text_h + 32)));
  const int col_label_w = Canvas::TextWidth(absl::StrCat(cols - 1));
  const std::vector<int64_t> col_ticks = Ticks(cols, std::max(2, pw / (col_label_w + 16)));
  int row_label_w = 0;
  for (int64_t i : row_ticks) row_label_w = std::max(row_label_w, Canvas::TextWidth(row_label(i)));

  // Layout: margins, a header, a grid of panel cells, the colour bar on the right.
  constexpr int kMargin = 12;
  const int line_h = text_h + 6;
  const int header_h = kMargin + line_h * (1 + static_cast<int>(map.notes.size())) + 6;
  const int title_h = map.panels[0].title.empty() ? 0 : line_h;
  const int left_w = text_h + 6 + row_label_w + 9;  // axis name, labels, tick
  const int below_h = 4 + 4 + text_h + 6 + text_h;  // tick, labels, axis name
  const int cell_w = left_w + std::max(pw, Canvas::TextWidth(map.col_axis)) + 24;
  const int cell_h = title_h + ph + below_h + 16;
  const int bar_h = std::clamp(ph, 160, 400);
  const std::string hi_text = ShortNumber(hi);
  const std::string lo_text = ShortNumber(lo);
  // The middle of the bar; a value that is zero but for rounding (a symmetric range) shows as 0.
  const double mid = 0.5 * (lo + hi);
  const std::string mid_text = ShortNumber(std::fabs(mid) < 1e-4 * (hi - lo) ? 0.0 : mid);
  const bool non_finite = neg_inf || pos_inf || nan;
  std::vector<std::string> kinds;
  if (neg_inf) kinds.push_back("-inf");
  if (pos_inf) kinds.push_back("inf");
  if (nan) kinds.push_back("nan");
  const std::string mask_text = absl::StrJoin(kinds, "/");
  int bar_label_w = std::max(
      {Canvas::TextWidth(hi_text), Canvas::TextWidth(lo_text), Canvas::TextWidth(mid_text)});
  if (non_finite) bar_label_w = std::max(bar_label_w, Canvas::TextWidth(mask_text) - 28);
  const int bar_x = kMargin + grid_cols * cell_w;
  const int bar_w = 20;
  int width = bar_x + bar_w + 8 + bar_label_w + kMargin;
  width = std::max(width, kMargin * 2 + Canvas::TextWidth(map.title));
  for (const std::string& note : map.notes) {
    width = std::max(width, kMargin * 2 + Canvas::TextWidth(note));
  }
  const int bar_y = header_h + title_h;
  const int height = std::max(header_h + grid_rows * cell_h,
                              bar_y + bar_h + (non_finite ? 3 * line_h : line_h) + kMargin);

  Canvas canvas(width, height);
  canvas.Text(kMargin, kMargin, map.title, kBlack);
  for (size_t i = 0; i < map.notes.size(); ++i) {
    canvas.Text(kMargin, kMargin + line_h * static_cast<int>(i + 1), map.notes[i], kGrey);
  }

  for (int i = 0; i < n; ++i) {
    const Panel& p = map.panels[i];
    const int cx = kMargin + (i % grid_cols) * cell_w;
    const int cy = header_h + (i / grid_cols) * cell_h;
    const int px = cx + left_w;
    const int py = cy + title_h;
    if (!p.title.empty()) canvas.Text(px, cy, p.title, kBlack);
    for (int64_t r = 0; r < dr; ++r) {
      for (int64_t c = 0; c < dc; ++c) {
        const double v = cells[i][static_cast<size_t>(r * dc + c)];
        const Rgb color = std::isnan(v) ? kMaskGrey
                          : hi > lo     ? Viridis((v - lo) / (hi - lo))
                                        : Viridis(0.5);
        canvas.FillRect(px + static_cast<int>(c) * sx, py + static_cast<int>(r) * sy, sx, sy,
                        color);
      }
    }
    canvas.FrameRect(px - 1, py - 1, pw + 2, ph + 2, kGrey);
    // Row ticks (left) and column ticks (below), at the centre of the cell holding the index.
    for (int64_t t : row_ticks) {
      const int y = py + static_cast<int>(t / fr) * sy + sy / 2;
      canvas.FillRect(px - 5, y, 4, 1, kBlack);
      const std::string label = row_label(t);
      canvas.Text(px - 9 - Canvas::TextWidth(label), y - text_h / 2 + 1, label, kBlack);
    }
    for (int64_t t : col_ticks) {
      const int x = px + static_cast<int>(t / fc) * sx + sx / 2;
      canvas.FillRect(x, py + ph + 1, 1, 4, kBlack);
      const std::string label = absl::StrCat(t);
      canvas.Text(x - Canvas::TextWidth(label) / 2, py + ph + 8, label, kBlack);
    }
    canvas.Text(px + (pw - Canvas::TextWidth(map.col_axis)) / 2, py + ph + 8 + text_h + 6,
                map.col_axis, kBlack);
    const int row_axis_len = Canvas::TextWidth(map.row_axis);
    canvas.VerticalText(cx, py + std::max(0, (ph - row_axis_len) / 2), map.row_axis, kBlack);
  }

  // The colour bar: the maximum at the top.
  for (int y = 0; y < bar_h; ++y) {
    canvas.FillRect(bar_x, bar_y + y, bar_w, 1,
                    Viridis(1.0 - static_cast<double>(y) / std::max(1, bar_h - 1)));
  }
  canvas.FrameRect(bar_x - 1, bar_y - 1, bar_w + 2, bar_h + 2, kGrey);
  const int label_x = bar_x + bar_w + 8;
  canvas.Text(label_x, bar_y, hi_text, kBlack);
  canvas.Text(label_x, bar_y + (bar_h - text_h) / 2, mid_text, kBlack);
  canvas.Text(label_x, bar_y + bar_h - text_h, lo_text, kBlack);
  if (non_finite) {
    const int y = bar_y + bar_h + line_h;
    canvas.FillRect(bar_x, y, bar_w, text_h, kMaskGrey);
    canvas.FrameRect(bar_x - 1, y - 1, bar_w + 2, text_h + 2, kGrey);
    canvas.Text(bar_x, y + line_h, mask_text, kBlack);
  }
  return canvas;
}

}  // namespace

absl::Status MaybeWriteHeatmap(std::string_view command, const ParsedFlags& flags,
                               const CommandOutput& output) {
  const std::optional<std::string> path = flags.String("png");
  if (!path.has_value()) return absl::OkStatus();
  absl::StatusOr<std::optional<Heatmap>> map = Describe(command, flags, output);
  if (!map.ok()) return map.status();
  if (!map->has_value()) return absl::OkStatus();
  const Canvas canvas = Render(**std::move(map));
  if (absl::Status s = WritePng(*path, canvas); !s.ok()) return s;
  std::cerr << "wrote " << *path << " (PNG " << canvas.width() << "x" << canvas.height()
            << ": heatmap of " << output.tensors[0].name << ")\n";
  return absl::OkStatus();
}

namespace {

// An example command line of each command that takes --png.
struct HeatmapExample {
  std::string_view command;
  std::string_view example;
};
constexpr HeatmapExample kHeatmapExamples[] = {
    {"sinusoidal", "posenc sinusoidal --positions 0:128 --dim 64 --png table.png"},
    {"add", "posenc add --shape 2,64,32 --fill random --positions 0:64 --png y.png"},
    {"rope-cache", "posenc rope-cache --positions 0:256 --head-dim 64 --png cache.png"},
    {"apply-rope", "posenc apply-rope --shape 1,64,4,32 --fill ones --png q.png"},
    {"alibi-bias", "posenc alibi-bias --heads 8 --q-len 32 --k-len 32 --png alibi.png"},
    {"relative-bias",
     "posenc relative-bias --q-len 64 --k-len 64 --random-table 1 --heads 4 --png t5.png"},
    {"relative-embedding",
     "posenc relative-embedding --q-len 16 --k-len 16 --max-relative 4 --random-table 7 "
     "--png emb.png"},
};

}  // namespace

std::string HeatmapHelp(std::string_view command) {
  const auto it = std::find_if(std::begin(kHeatmapExamples), std::end(kHeatmapExamples),
                               [&](const HeatmapExample& e) { return e.command == command; });
  if (it == std::end(kHeatmapExamples)) return "";
  const std::string_view example = it->example;
  return absl::StrCat(
      "--png FILE draws the result as a heatmap (viridis, colour bar with min and max; one panel\n"
      "per head or channel, at most ",
      kMaxPanels,
      "; long axes averaged down to 1024 px), e.g.\n"
      "         ",
      std::string(example), "\n");
}

}  // namespace posenc::cli
