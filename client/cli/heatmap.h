// `--png FILE` heatmaps of the tensor a command returns (drawn on a Canvas, canvas.h).
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
// Thread-safety: plain values and pure functions; thread-safe.
#ifndef POSENC_CLIENT_CLI_HEATMAP_H_
#define POSENC_CLIENT_CLI_HEATMAP_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/canvas.h"
#include "client/cli/flags.h"
#include "client/cli/output.h"

namespace posenc::cli {

// The `--png FILE` flag of every command that draws a heatmap of its result.
inline constexpr FlagSpec kPngFlag = {
    "png", FlagType::kString, "FILE",
    "also draw the result as a heatmap PNG in FILE (see the example above)"};

// At most this many panels per picture.
inline constexpr int kMaxPanels = 16;

// With --png FILE, draws the main result of `command` (sinusoidal, add, rope-cache, apply-rope,
// alibi-bias, relative-bias, relative-embedding; mm-positions: a panel per position axis) into FILE
// and says so on stderr. Does nothing for other commands or without the flag. INVALID_ARGUMENT when
// the result cannot be drawn (an empty tensor).
absl::Status MaybeWriteHeatmap(std::string_view command, const ParsedFlags& flags,
                               const CommandOutput& output);

// One matrix drawn as the commands' heatmaps are (one panel, same scale, ticks, colour bar and
// block averaging of axes longer than 1024 px), for pictures of results that are not a command's
// tensor (`posenc analyze`'s similarity matrix). Row i is labelled row_start + i * row_step on the
// axis, column j col_start + j * col_step.
struct MatrixHeatmap {
  std::string title;
  std::vector<std::string> notes;  // lines under the title
  std::string row_axis, col_axis;
  int64_t row_start = 0, row_step = 1;
  int64_t col_start = 0, col_step = 1;
  client::Tensor matrix;  // [rows, cols], any dtype
};

// INVALID_ARGUMENT when `map.matrix` is not 2-D with at least one element.
absl::StatusOr<Canvas> RenderMatrixHeatmap(const MatrixHeatmap& map);

// The help lines about --png of `command` (with an example); empty when it draws nothing.
std::string HeatmapHelp(std::string_view command);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_HEATMAP_H_
