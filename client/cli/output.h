// How the posenc CLI shows results: an aligned table for people, JSON for programs.
//
// Table: every tensor gets a header line "name: DTYPE [shape]" and a matrix per leading index
// (rows = the second-to-last axis, e.g. positions or queries; columns = the last axis; a 1-D
// tensor prints as one column), values with 6 significant digits; big tensors are summarized
// with "..." as NumPy does (first and last rows/columns/blocks) unless `full` is set. Extra values
// (derived RoPE values, slopes, server info) print as "key: value" lines before the tensors.
//
// JSON (one line): a command with one tensor prints {"shape": [...], "dtype": "FLOAT32",
// "data": [...flat, row-major...], <extra keys>}; a command with several prints
// {"<name>": {tensor}, ..., <extra keys>}; one without tensors prints its extra keys. Data is
// never truncated. Non-finite values are the strings "inf", "-inf", "nan" (JSON has no such
// numbers; Python's float() reads them).
//
// Thread-safety: plain values; the functions are thread-safe.
#ifndef POSENC_CLIENT_CLI_OUTPUT_H_
#define POSENC_CLIENT_CLI_OUTPUT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "client/cli/flags.h"
#include "nlohmann/json.hpp"
#include "posenc/tensor.h"

namespace posenc::cli {

enum class OutputFormat { kTable, kJson, kNone };

struct NamedTensor {
  std::string name;
  client::Tensor tensor;
  // Labels of the rows (the second-to-last axis), e.g. the positions of a table; empty: the
  // row index. `row_title` heads the label column ("pos", "query", ...).
  std::vector<int64_t> row_labels;
  std::string row_title;
};

struct CommandOutput {
  std::vector<NamedTensor> tensors;  // the first is the main output
  nlohmann::ordered_json extras = nlohmann::ordered_json::object();
  // Table format only: when set, these preformatted lines are printed instead of the extras (a
  // command's own table, e.g. `describe`); JSON always shows the extras.
  std::string text;
  int exit_code = 0;  // e.g. 1 for `health` when the server is not SERVING
  // Set by a command's own switch (`bench --json`): overrides the global --format.
  std::optional<OutputFormat> format;
};

struct TableOptions {
  bool full = false;    // no "..." summarization
  int edge_rows = 6;    // rows shown at each end when summarizing
  int edge_cols = 4;    // columns shown at each end
  int edge_blocks = 2;  // matrices shown at each end
};

// {"shape": [...], "dtype": "...", "data": [...]}.
nlohmann::ordered_json TensorToJson(const client::Tensor& tensor);

// The aligned table of one tensor (without the header line).
std::string FormatTable(const NamedTensor& tensor, const TableOptions& options);

void PrintOutput(const CommandOutput& output, OutputFormat format, const TableOptions& options,
                 std::ostream& out);

// The flags that name a .npy output file ("-": standard output).
inline constexpr std::string_view kNpyOutputFlags[] = {"npy",   "out-cos", "out-sin",   "out-table",
                                                       "out-q", "out-k",   "out-deltas"};

// Checks, before any call is made, that every output file the flags name (kNpyOutputFlags and
// --png) can be written: its directory exists and is writable,
// and the path is not a directory. A usage error naming the flag and the path otherwise.
absl::Status CheckOutputFiles(const ParsedFlags& flags);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_OUTPUT_H_
