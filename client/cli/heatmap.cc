// Heatmaps of the commands' results (heatmap.h): the description of each command's result as
// panels, and their rendering.
#include "client/cli/heatmap.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/canvas.h"
#include "client/cli/commands.h"

namespace posenc::cli {
namespace {

constexpr Rgb kBlack = {0, 0, 0};
constexpr Rgb kGrey = {110, 110, 110};
constexpr Rgb kMaskGrey = {200, 200, 200};  // -inf, +inf and NaN cells

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
