// Pictures for the posenc CLI: `--png FILE` heatmaps of the tensor a command returns, and the
// drawing pieces `posenc check` uses for its error plot.
//
// A heatmap shows each value as a colour of viridis (perceptually uniform, readable in grey and by
// most colour-blind readers), one shared scale over every panel drawn, with a title line (what,
// dtype, shape), axis names and ticks (position / channel for tables, query / key for biases) and
// a colour bar labelled with the minimum and maximum. Tensors with more than two axes get one
// panel per head (per channel for relative-embedding, per sequence for tables of [B, S]
// positions), at most kMaxPanels of them ("first 16 of 32 heads"). An axis longer than the
// panel's pixel budget (1024 px for one panel, less for several) is downsampled by block
// averaging (the mean of the finite values of each block; the subtitle says by how much); short
// axes are magnified by an integer factor. -inf/+inf/NaN (masked ALiBi entries) are drawn grey
// and kept out of the scale.
//
// The file is written with libpng. Text uses a small 5x7 bitmap font (ASCII 32..126).
//
// Thread-safety: plain values and pure functions; thread-safe.
#ifndef POSENC_CLIENT_CLI_PNG_H_
#define POSENC_CLIENT_CLI_PNG_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "client/cli/flags.h"
#include "client/cli/output.h"

namespace posenc::cli {

// The `--png FILE` flag of every command that draws a heatmap of its result.
inline constexpr FlagSpec kPngFlag = {
    "png", FlagType::kString, "FILE",
    "also draw the result as a heatmap PNG in FILE (see the example above)"};

// At most this many panels per picture.
inline constexpr int kMaxPanels = 16;

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

// Writes `canvas` as an 8-bit RGB PNG; errors name the path.
absl::Status WritePng(const std::string& path, const Canvas& canvas);

// "1e-07", "0.5", "-3.25", "-1176", "1.5e+05": a short label for an axis or a colour bar.
std::string ShortNumber(double v);

// Checks, before any call is made, that every output file the flags name (--npy, --png,
// --out-cos, --out-sin, --out-q, --out-k) can be written: its directory exists and is writable,
// and the path is not a directory. A usage error naming the flag and the path otherwise.
absl::Status CheckOutputFiles(const ParsedFlags& flags);

// With --png FILE, draws the main result of `command` (sinusoidal, add, rope-cache, apply-rope,
// alibi-bias, relative-bias, relative-embedding) into FILE and says so on stderr. Does nothing
// for other commands or without the flag. INVALID_ARGUMENT when the result cannot be drawn (an
// empty tensor).
absl::Status MaybeWriteHeatmap(std::string_view command, const ParsedFlags& flags,
                               const CommandOutput& output);

// The help lines about --png of `command` (with an example); empty when it draws nothing.
std::string HeatmapHelp(std::string_view command);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_PNG_H_
