#include "client/cli/output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"

namespace posenc::cli {
namespace {

using client::Tensor;
using Json = nlohmann::ordered_json;

constexpr int64_t kEllipsis = -1;

// The indices 0..n-1 to show: all of them, or the first and last `edge` around a kEllipsis.
std::vector<int64_t> ShownIndices(int64_t n, int edge, bool full) {
  std::vector<int64_t> out;
  if (full || n <= 2 * edge + 1) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  for (int64_t i = 0; i < edge; ++i) out.push_back(i);
  out.push_back(kEllipsis);
  for (int64_t i = n - edge; i < n; ++i) out.push_back(i);
  return out;
}

std::string FormatNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return "0";  // also -0
  return absl::StrFormat("%.6g", v);
}

Json JsonNumber(double v) {
  if (std::isfinite(v)) return v;
  return FormatNumber(v);
}

// Renders rows of cells as right-aligned columns; the first column is the row label, set off
// from the values by " |".
std::string RenderGrid(const std::vector<std::vector<std::string>>& grid) {
  std::vector<size_t> widths;
  for (const auto& row : grid) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : grid) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += std::string(widths[c] - row[c].size() + (c == 0 ? 0 : 2), ' ');
      line += row[c];
      if (c == 0) line += " |";
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

// A short rendering of an extra value for the table format (long arrays summarized).
std::string ExtraToString(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return FormatNumber(value.get<double>());
  if (value.is_array() && value.size() > 9) {
    std::vector<std::string> items;
    for (size_t i = 0; i < 4; ++i) items.push_back(ExtraToString(value[i]));
    items.push_back("...");
    for (size_t i = value.size() - 4; i < value.size(); ++i) {
      items.push_back(ExtraToString(value[i]));
    }
    return absl::StrCat("[", absl::StrJoin(items, ", "), "] (", value.size(), " values)");
  }
  if (value.is_array()) {
    std::vector<std::string> items;
    for (const Json& v : value) items.push_back(ExtraToString(v));
    return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
  }
  return value.dump();
}

void PrintExtras(const Json& extras, const std::string& indent, std::ostream& out) {
  for (const auto& [key, value] : extras.items()) {
    if (value.is_object() && value.empty()) {
      out << indent << key << ": (none)\n";
    } else if (value.is_object()) {
      out << indent << key << ":\n";
      PrintExtras(value, indent + "  ", out);
    } else {
      out << indent << key << ": " << ExtraToString(value) << "\n";
    }
  }
}

}  // namespace

Json TensorToJson(const Tensor& tensor) {
  Json j;
  j["shape"] = tensor.shape;
  j["dtype"] = std::string(client::DTypeName(tensor.dtype));
  Json data = Json::array();
  if (client::IsFloatDType(tensor.dtype)) {
    for (double v : tensor.ToDoubles()) data.push_back(JsonNumber(v));
  } else {
    for (int64_t v : tensor.ToInt64s()) data.push_back(v);
  }
  j["data"] = std::move(data);
  return j;
}

std::string FormatTable(const NamedTensor& named, const TableOptions& options) {
  const Tensor& t = named.tensor;
  const bool is_int = !client::IsFloatDType(t.dtype);
  const std::vector<int64_t> ints = is_int ? t.ToInt64s() : std::vector<int64_t>{};
  auto cell = [&](int64_t index) {
    return is_int ? absl::StrCat(ints[static_cast<size_t>(index)]) : FormatNumber(t.At(index));
  };
  if (t.shape.empty()) return cell(0) + "\n";

  // Rank 1 prints as a column; rank >= 2 as matrices of the last two axes.
  const size_t rank = t.shape.size();
  const int64_t rows = rank == 1 ? t.shape[0] : t.shape[rank - 2];
  const int64_t cols = rank == 1 ? 1 : t.shape[rank - 1];
  int64_t blocks = 1;
  for (size_t d = 0; d + 2 < rank; ++d) blocks *= t.shape[d];
  if (rows == 0 || cols == 0 || blocks == 0) return "(empty)\n";

  const std::vector<int64_t> shown_rows = ShownIndices(rows, options.edge_rows, options.full);
  const std::vector<int64_t> shown_cols = ShownIndices(cols, options.edge_cols, options.full);
  std::string out;
  for (int64_t b : ShownIndices(blocks, options.edge_blocks, options.full)) {
    if (!out.empty()) out += "\n";  // a blank line between matrices
    if (b == kEllipsis) {
      out += "...\n";
      continue;
    }
    if (rank > 2) {
      // The block's multi-index, NumPy style: [1, 0, :, :].
      std::vector<std::string> index(rank, ":");
      int64_t rest = b;
      for (size_t d = rank - 2; d-- > 0;) {
        index[d] = absl::StrCat(rest % t.shape[d]);
        rest /= t.shape[d];
      }
      absl::StrAppend(&out, "[", absl::StrJoin(index, ", "), "]\n");
    }
    std::vector<std::vector<std::string>> grid;
    std::vector<std::string> header = {named.row_title};
    for (int64_t c : shown_cols) {
      header.push_back(c == kEllipsis ? "..." : (rank == 1 ? "value" : absl::StrCat(c)));
    }
    grid.push_back(std::move(header));
    for (int64_t r : shown_rows) {
      std::vector<std::string> line;
      if (r == kEllipsis) {
        line.assign(shown_cols.size() + 1, "...");
      } else {
        line.push_back(absl::StrCat(
            static_cast<size_t>(r) < named.row_labels.size() ? named.row_labels[r] : r));
        for (int64_t c : shown_cols) {
          line.push_back(c == kEllipsis ? "..." : cell((b * rows + r) * cols + c));
        }
      }
      grid.push_back(std::move(line));
    }
    out += RenderGrid(grid);
  }
  return out;
}

void PrintOutput(const CommandOutput& output, OutputFormat format, const TableOptions& options,
                 std::ostream& out) {
  switch (format) {
    case OutputFormat::kNone: return;
    case OutputFormat::kJson: {
      Json j = Json::object();
      if (output.tensors.size() == 1) {
        j = TensorToJson(output.tensors[0].tensor);
      } else {
        for (const NamedTensor& t : output.tensors) j[t.name] = TensorToJson(t.tensor);
      }
      for (const auto& [key, value] : output.extras.items()) j[key] = value;
      out << j.dump() << "\n";
      return;
    }
    case OutputFormat::kTable:
      if (output.text.empty()) {
        PrintExtras(output.extras, "", out);
      } else {
        out << output.text;
      }
      for (size_t i = 0; i < output.tensors.size(); ++i) {
        const NamedTensor& t = output.tensors[i];
        if (i > 0 || !output.extras.empty()) out << "\n";
        out << t.name << ": " << client::DTypeName(t.tensor.dtype) << " ["
            << absl::StrJoin(t.tensor.shape, ", ") << "]\n";
        out << FormatTable(t, options);
      }
      return;
  }
}

absl::Status CheckOutputFiles(const ParsedFlags& flags) {
  namespace fs = std::filesystem;
  std::vector<std::string_view> file_flags(std::begin(kNpyOutputFlags), std::end(kNpyOutputFlags));
  file_flags.push_back("png");
  for (std::string_view flag : file_flags) {
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

}  // namespace posenc::cli
