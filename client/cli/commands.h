// The subcommands of the posenc CLI: one per RPC, plus `info`, `health` and `bench` (bench.h).
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

// The client library's names that the commands' sources (commands, check, bench, png) use.
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

// An INVALID_ARGUMENT status marked as a command-line usage error.
absl::Status UsageError(std::string_view message);
bool IsUsageError(const absl::Status& status);

// Reads the RoPE configuration flags of rope-cache and apply-rope (which `bench` takes too) into
// a RopeConfig.
absl::StatusOr<client::RopeConfig> ReadRopeConfigFlags(const ParsedFlags& flags);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_COMMANDS_H_
