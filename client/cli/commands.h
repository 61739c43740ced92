// The subcommands of the posenc CLI (posenc_cli), one per RPC plus `check`, `bench`, `info` and
// `health`, each in the file of its family: absolute.cc (sinusoidal, add), rope.cc
// (rope-cache, apply-rope, describe), multimodal.cc (mm-positions, rerotate), bias.cc
// (alibi-slopes, alibi-bias, relative-bias, relative-embedding), check.cc, bench.cc, info.cc (info,
// health), analyze.cc; Commands() lists them in the order of `posenc --help` (commands.cc). cli.h
// runs a command line.
//
// A command reads its (already type-checked) flags, builds the request with the public client
// library, makes the call, writes any .npy files it was asked for and returns what to print.
// Usage mistakes (conflicting or missing flags) come back as UsageError() statuses, which the
// CLI reports with exit code 2; everything else (RPC and file errors) exits 1.
//
// Thread-safety: the command table is immutable; commands run one at a time.
#ifndef POSENC_CLIENT_CLI_COMMANDS_H_
#define POSENC_CLIENT_CLI_COMMANDS_H_

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/flags.h"
#include "client/cli/output.h"
#include "nlohmann/json.hpp"
#include "posenc/client.h"

namespace posenc::cli {

// The client library's names that the commands use.
using client::DType;
using client::Positions;
using client::Tensor;
using Json = nlohmann::ordered_json;

struct Command {
  std::string_view name;
  std::string_view summary;  // one line
  std::string_view details;  // more help text (examples), may be empty
  std::vector<const FlagGroup*> flags;
  absl::StatusOr<CommandOutput> (*run)(const ParsedFlags& flags, const client::Client& client);
};

// Every subcommand, in the order of `posenc --help`.
const std::vector<Command>& Commands();

// The commands, by family.
Command SinusoidalCommand();  // absolute.cc
Command AddCommand();
Command RopeCacheCommand();  // rope.cc
Command ApplyRopeCommand();
Command DescribeCommand();
Command MmPositionsCommand();  // multimodal.cc
Command RerotateCommand();
Command AlibiSlopesCommand();  // bias.cc
Command AlibiBiasCommand();
Command RelativeBiasCommand();
Command RelativeEmbeddingCommand();
Command CheckCommand();  // check.cc
Command BenchCommand();  // bench.cc
Command InfoCommand();   // info.cc
Command HealthCommand();
Command AnalyzeCommand();  // analyze.cc

// An INVALID_ARGUMENT status marked as a command-line usage error.
absl::Status UsageError(std::string_view message);
bool IsUsageError(const absl::Status& status);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_COMMANDS_H_
