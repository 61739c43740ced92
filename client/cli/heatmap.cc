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
  std::vector<int64_t> col_labels;  // label of each column; empty: the column index
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

// The panels of each command's result (`map` has the title; t is the main tensor, rank >= 2).
void DescribeTable(std::string_view command, const NamedTensor& main, Heatmap* map) {
  map->row_labels = main.row_labels;
  map->row_axis = map->row_labels.empty() ? "token" : "position";
  map->col_axis = "channel";
  AddMatrixPanels(main.tensor, {command == "add" ? "batch" : "sequence"}, "", kMaxPanels, map);
}

void DescribeRopeCache(const ParsedFlags& flags, const CommandOutput& output, Heatmap* map) {
  const NamedTensor& main = output.tensors[0];
  const Tensor& t = main.tensor;
  map->title = absl::StrCat("rope-cache: cos, sin ", std::string(client::DTypeName(t.dtype)), " ",
                            ShapeText(t));
  map->row_labels = main.row_labels;
  map->row_axis = map->row_labels.empty() ? "token" : "position";
  const std::string layout = flags.String("layout").value_or("compact");
  map->col_axis = layout == "compact" ? "frequency j" : absl::StrCat("channel (", layout, ")");
  if (main.name == "freqs_cis" && t.shape.size() == 3) {  // [n, d/2, 2]: cos and sin panels
    map->title = absl::StrCat("rope-cache: freqs_cis (cos, sin pairs) ",
                              std::string(client::DTypeName(t.dtype)), " ", ShapeText(t));
    map->col_axis = "frequency j";
    const int64_t n = t.shape[0], half = t.shape[1];
    map->panels.push_back({&t, "cos", 0, 2 * half, 2, n, half});
    map->panels.push_back({&t, "sin", 1, 2 * half, 2, n, half});
    return;
  }
  for (const NamedTensor& named : output.tensors) {
    if (named.tensor.shape.size() < 2) continue;
    AddMatrixPanels(named.tensor, {"sequence"}, named.name,
                    kMaxPanels / static_cast<int>(output.tensors.size()), map);
  }
}

// mm-positions: position_ids [A, B, S], one panel per axis (t, h, w) of sequences x tokens.
void DescribeMultimodal(const Tensor& t, Heatmap* map) {
  map->row_axis = "sequence";
  map->col_axis = "token";
  if (t.shape.size() != 3) {
    AddMatrixPanels(t, {}, "", kMaxPanels, map);
    return;
  }
  static constexpr std::string_view kAxes[] = {"t", "h", "w", "axis 3"};
  const int64_t rows = t.shape[1], cols = t.shape[2];
  for (int64_t a = 0; a < t.shape[0] && a < 4; ++a) {
    map->panels.push_back({&t, std::string(kAxes[a]), a * rows * cols, cols, 1, rows, cols});
  }
}

void DescribeApplyRope(const ParsedFlags& flags, const Tensor& t, Heatmap* map) {
  const size_t rank = t.shape.size();
  const std::string layout = flags.String("layout").value_or("bshd");
  map->col_axis = "channel";
  if (layout == "bhsd" && rank == 4) {
    map->row_axis = "position index";
    AddMatrixPanels(t, {"batch", "head"}, "", kMaxPanels, map);
  } else if (rank == 4 || rank == 3) {
    // BSHD [B, S, H, D] or THD [T, H, D]: one panel per head, rows = the tokens.
    const int64_t heads = t.shape[rank - 2];
    const int64_t width = t.shape[rank - 1];
    const int64_t tokens = t.NumElements() / (heads * width);
    map->row_axis = rank == 4 && t.shape[0] > 1 ? "token (batch x seq)" : "token";
    AddStridedPanels(t, heads, width, tokens, heads * width, width, 1, "head", map);
  } else {
    map->row_axis = "row";
    AddMatrixPanels(t, {}, "", kMaxPanels, map);
  }
}

void DescribeBias(const ParsedFlags& flags, const NamedTensor& main, Heatmap* map) {
  const Tensor& t = main.tensor;
  if (main.name == "buckets") {
    map->row_axis = "query";
    map->col_axis = "key";
    AddMatrixPanels(t, {}, "", kMaxPanels, map);
  } else if (CompactBias(flags)) {
    const bool bloom = flags.String("mode").value_or("") == "bloom";
    map->row_axis = "head";
    map->col_axis = bloom ? "key" : "diagonal: key - query + q_len - 1";
    map->notes.push_back("compact form: one row per head");
    AddMatrixPanels(t, {"batch"}, "", kMaxPanels, map);
  } else {
    map->row_axis = "query";
    map->col_axis = "key";
    AddMatrixPanels(t,
                    t.shape.size() == 4 ? std::vector<std::string>{"batch", "head"}
                                        : std::vector<std::string>{"head"},
                    "", kMaxPanels, map);
  }
}

void DescribeRelativeEmbedding(const Tensor& t, Heatmap* map) {
  if (t.shape.size() != 3) {
    map->row_axis = "row";
    map->col_axis = "column";
    AddMatrixPanels(t, {}, "", kMaxPanels, map);
    return;
  }
  // [q, k, D]: one query x key panel per channel d.
  const int64_t q = t.shape[0];
  const int64_t k = t.shape[1];
  const int64_t d = t.shape[2];
  map->row_axis = "query";
  map->col_axis = "key";
  AddStridedPanels(t, d, 1, q, k * d, k, d, "channel", map);
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
  Heatmap map;
  map.title = absl::StrCat(std::string(command), ": ", main.name, " ",
                           std::string(client::DTypeName(t.dtype)), " ", ShapeText(t));
  if (command == "sinusoidal" || command == "add") {
    DescribeTable(command, main, &map);
  } else if (command == "rope-cache") {
    DescribeRopeCache(flags, output, &map);
  } else if (command == "apply-rope") {
    DescribeApplyRope(flags, t, &map);
  } else if (command == "alibi-bias" || command == "relative-bias") {
    DescribeBias(flags, main, &map);
  } else if (command == "relative-embedding") {
    DescribeRelativeEmbedding(t, &map);
  } else if (command == "mm-positions") {
    DescribeMultimodal(t, &map);
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

class Renderer {
 public:
  explicit Renderer(Heatmap map) : map_(std::move(map)) {}

  Canvas Draw() && {
    ComputeScale();
    GatherValues();
    ComputeLayout();
    Canvas canvas(width_, height_);
    canvas.Text(kMargin, kMargin, map_.title, kBlack);
    for (size_t i = 0; i < map_.notes.size(); ++i) {
      canvas.Text(kMargin, kMargin + line_h_ * static_cast<int>(i + 1), map_.notes[i], kGrey);
    }
    for (int i = 0; i < n_; ++i) DrawPanel(i, &canvas);
    DrawColourBar(&canvas);
    return canvas;
  }

 private:
  static constexpr int kMargin = 12;
  static constexpr int kBarW = 20;

  // Pixels per panel axis: at most `budget` (longer axes are averaged down by block factors
  // fr x fc), and short axes magnified towards `target`.
  void ComputeScale() {
    n_ = static_cast<int>(map_.panels.size());
    grid_cols_ = std::min(n_, 4);
    grid_rows_ = (n_ + grid_cols_ - 1) / grid_cols_;
    const int64_t budget = n_ == 1 ? 1024 : n_ == 2 ? 512 : n_ == 3 ? 340 : 256;
    const int64_t target = std::min<int64_t>(budget, 512);
    rows_ = map_.panels[0].rows;
    cols_ = map_.panels[0].cols;
    fr_ = (rows_ + budget - 1) / budget;
    fc_ = (cols_ + budget - 1) / budget;
    dr_ = (rows_ + fr_ - 1) / fr_;
    dc_ = (cols_ + fc_ - 1) / fc_;
    const int64_t s = std::max<int64_t>(1, std::min(target / dr_, target / dc_));
    // A thin panel (one query, or a narrow table) is stretched along its short axis to a quarter
    // of the target: cells need not be square.
    const int64_t min_px = target / 4;
    sy_ =
        static_cast<int>(dr_ * s >= min_px ? s : std::min(budget / dr_, (min_px + dr_ - 1) / dr_));
    sx_ =
        static_cast<int>(dc_ * s >= min_px ? s : std::min(budget / dc_, (min_px + dc_ - 1) / dc_));
    pw_ = static_cast<int>(dc_) * sx_;
    ph_ = static_cast<int>(dr_) * sy_;
    if (fr_ > 1 || fc_ > 1) {
      map_.notes.push_back(absl::StrCat("downsampled: each cell is the mean of ", fr_, " x ", fc_,
                                        " (", map_.row_axis, " x ", map_.col_axis, ") values"));
    }
  }

  // Values, range and non-finite entries over every panel.
  void GatherValues() {
    for (const Panel& p : map_.panels) {
      for (int64_t r = 0; r < p.rows; ++r) {
        for (int64_t c = 0; c < p.cols; ++c) {
          const double v = p.tensor->At(p.offset + r * p.row_stride + c * p.col_stride);
          if (std::isfinite(v)) {
            lo_ = std::min(lo_, v);
            hi_ = std::max(hi_, v);
          } else if (std::isnan(v)) {
            nan_ = true;
          } else {
            (v < 0 ? neg_inf_ : pos_inf_) = true;
          }
        }
      }
      cells_.push_back(PanelCells(p, fr_, fc_, dr_, dc_));
    }
    if (n_ > 1) {
      map_.notes.push_back(n_ == 2 ? std::string("one colour scale for both panels")
                                   : absl::StrCat("one colour scale for all ", n_, " panels"));
    }
    if (!(lo_ <= hi_)) lo_ = hi_ = 0;  // nothing finite
  }

  static std::string Label(const std::vector<int64_t>& labels, int64_t i) {
    return absl::StrCat(static_cast<size_t>(i) < labels.size() ? labels[i] : i);
  }
  std::string RowLabel(int64_t i) const { return Label(map_.row_labels, i); }
  std::string ColLabel(int64_t i) const { return Label(map_.col_labels, i); }

  // Ticks, labels and the layout: margins, a header, a grid of panel cells, the colour bar on
  // the right.
  void ComputeLayout() {
    row_ticks_ = Ticks(rows_, std::max(2, ph_ / (text_h_ + 32)));
    const int col_label_w = Canvas::TextWidth(ColLabel(cols_ - 1));
    col_ticks_ = Ticks(cols_, std::max(2, pw_ / (col_label_w + 16)));
    int row_label_w = 0;
    for (int64_t i : row_ticks_)
      row_label_w = std::max(row_label_w, Canvas::TextWidth(RowLabel(i)));
    header_h_ = kMargin + line_h_ * (1 + static_cast<int>(map_.notes.size())) + 6;
    title_h_ = map_.panels[0].title.empty() ? 0 : line_h_;
    left_w_ = text_h_ + 6 + row_label_w + 9;            // axis name, labels, tick
    const int below_h = 4 + 4 + text_h_ + 6 + text_h_;  // tick, labels, axis name
    cell_w_ = left_w_ + std::max(pw_, Canvas::TextWidth(map_.col_axis)) + 24;
    cell_h_ = title_h_ + ph_ + below_h + 16;
    bar_h_ = std::clamp(ph_, 160, 400);
    hi_text_ = ShortNumber(hi_);
    lo_text_ = ShortNumber(lo_);
    // The middle of the bar; a value that is zero but for rounding (a symmetric range) shows 0.
    const double mid = 0.5 * (lo_ + hi_);
    mid_text_ = ShortNumber(std::fabs(mid) < 1e-4 * (hi_ - lo_) ? 0.0 : mid);
    std::vector<std::string> kinds;
    if (neg_inf_) kinds.push_back("-inf");
    if (pos_inf_) kinds.push_back("inf");
    if (nan_) kinds.push_back("nan");
    mask_text_ = absl::StrJoin(kinds, "/");
    int bar_label_w = std::max(
        {Canvas::TextWidth(hi_text_), Canvas::TextWidth(lo_text_), Canvas::TextWidth(mid_text_)});
    if (NonFinite()) bar_label_w = std::max(bar_label_w, Canvas::TextWidth(mask_text_) - 28);
    bar_x_ = kMargin + grid_cols_ * cell_w_;
    width_ = bar_x_ + kBarW + 8 + bar_label_w + kMargin;
    width_ = std::max(width_, kMargin * 2 + Canvas::TextWidth(map_.title));
    for (const std::string& note : map_.notes) {
      width_ = std::max(width_, kMargin * 2 + Canvas::TextWidth(note));
    }
    bar_y_ = header_h_ + title_h_;
    height_ = std::max(header_h_ + grid_rows_ * cell_h_,
                       bar_y_ + bar_h_ + (NonFinite() ? 3 * line_h_ : line_h_) + kMargin);
  }

  bool NonFinite() const { return neg_inf_ || pos_inf_ || nan_; }

  void DrawPanel(int i, Canvas* canvas) const {
    const Panel& p = map_.panels[i];
    const int cx = kMargin + (i % grid_cols_) * cell_w_;
    const int cy = header_h_ + (i / grid_cols_) * cell_h_;
    const int px = cx + left_w_;
    const int py = cy + title_h_;
    if (!p.title.empty()) canvas->Text(px, cy, p.title, kBlack);
    for (int64_t r = 0; r < dr_; ++r) {
      for (int64_t c = 0; c < dc_; ++c) {
        const double v = cells_[i][static_cast<size_t>(r * dc_ + c)];
        const Rgb color = std::isnan(v) ? kMaskGrey
                          : hi_ > lo_   ? Viridis((v - lo_) / (hi_ - lo_))
                                        : Viridis(0.5);
        canvas->FillRect(px + static_cast<int>(c) * sx_, py + static_cast<int>(r) * sy_, sx_, sy_,
                         color);
      }
    }
    canvas->FrameRect(px - 1, py - 1, pw_ + 2, ph_ + 2, kGrey);
    // Row ticks (left) and column ticks (below), at the centre of the cell holding the index.
    for (int64_t t : row_ticks_) {
      const int y = py + static_cast<int>(t / fr_) * sy_ + sy_ / 2;
      canvas->FillRect(px - 5, y, 4, 1, kBlack);
      const std::string label = RowLabel(t);
      canvas->Text(px - 9 - Canvas::TextWidth(label), y - text_h_ / 2 + 1, label, kBlack);
    }
    for (int64_t t : col_ticks_) {
      const int x = px + static_cast<int>(t / fc_) * sx_ + sx_ / 2;
      canvas->FillRect(x, py + ph_ + 1, 1, 4, kBlack);
      const std::string label = ColLabel(t);
      canvas->Text(x - Canvas::TextWidth(label) / 2, py + ph_ + 8, label, kBlack);
    }
    canvas->Text(px + (pw_ - Canvas::TextWidth(map_.col_axis)) / 2, py + ph_ + 8 + text_h_ + 6,
                 map_.col_axis, kBlack);
    const int row_axis_len = Canvas::TextWidth(map_.row_axis);
    canvas->VerticalText(cx, py + std::max(0, (ph_ - row_axis_len) / 2), map_.row_axis, kBlack);
  }

  // The colour bar, the maximum at the top, and the swatch of the non-finite values.
  void DrawColourBar(Canvas* canvas) const {
    for (int y = 0; y < bar_h_; ++y) {
      canvas->FillRect(bar_x_, bar_y_ + y, kBarW, 1,
                       Viridis(1.0 - static_cast<double>(y) / std::max(1, bar_h_ - 1)));
    }
    canvas->FrameRect(bar_x_ - 1, bar_y_ - 1, kBarW + 2, bar_h_ + 2, kGrey);
    const int label_x = bar_x_ + kBarW + 8;
    canvas->Text(label_x, bar_y_, hi_text_, kBlack);
    canvas->Text(label_x, bar_y_ + (bar_h_ - text_h_) / 2, mid_text_, kBlack);
    canvas->Text(label_x, bar_y_ + bar_h_ - text_h_, lo_text_, kBlack);
    if (NonFinite()) {
      const int y = bar_y_ + bar_h_ + line_h_;
      canvas->FillRect(bar_x_, y, kBarW, text_h_, kMaskGrey);
      canvas->FrameRect(bar_x_ - 1, y - 1, kBarW + 2, text_h_ + 2, kGrey);
      canvas->Text(bar_x_, y + line_h_, mask_text_, kBlack);
    }
  }

  Heatmap map_;
  const int text_h_ = Canvas::TextHeight();
  const int line_h_ = text_h_ + 6;
  // ComputeScale
  int n_ = 0, grid_cols_ = 1, grid_rows_ = 1;
  int64_t rows_ = 0, cols_ = 0, fr_ = 1, fc_ = 1, dr_ = 0, dc_ = 0;
  int sx_ = 1, sy_ = 1, pw_ = 0, ph_ = 0;
  // GatherValues
  std::vector<std::vector<double>> cells_;
  double lo_ = std::numeric_limits<double>::infinity();
  double hi_ = -std::numeric_limits<double>::infinity();
  bool neg_inf_ = false, pos_inf_ = false, nan_ = false;
  // ComputeLayout
  std::vector<int64_t> row_ticks_, col_ticks_;
  int header_h_ = 0, title_h_ = 0, left_w_ = 0, cell_w_ = 0, cell_h_ = 0;
  int bar_x_ = 0, bar_y_ = 0, bar_h_ = 0, width_ = 0, height_ = 0;
  std::string hi_text_, lo_text_, mid_text_, mask_text_;
};

Canvas Render(Heatmap map) { return Renderer(std::move(map)).Draw(); }

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

std::vector<int64_t> AxisLabels(int64_t n, int64_t start, int64_t step) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = start + i * step;
  return labels;
}

}  // namespace

absl::StatusOr<Canvas> RenderMatrixHeatmap(const MatrixHeatmap& map) {
  const client::Tensor& t = map.matrix;
  if (t.shape.size() != 2 || t.NumElements() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a heatmap draws one non-empty matrix, got shape ", ShapeText(t)));
  }
  Heatmap heatmap{map.title,
                  map.notes,
                  map.row_axis,
                  map.col_axis,
                  AxisLabels(t.shape[0], map.row_start, map.row_step),
                  AxisLabels(t.shape[1], map.col_start, map.col_step),
                  {Panel{&t, "", 0, t.shape[1], 1, t.shape[0], t.shape[1]}}};
  return Render(std::move(heatmap));
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
    {"mm-positions",
     "posenc mm-positions --family qwen2_vl --spans text:4,image:1x8x12,text:4 --png ids.png"},
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
