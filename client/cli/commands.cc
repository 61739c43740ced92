// The command table of the posenc CLI (commands.h) and its usage errors.
#include "client/cli/commands.h"

#include "absl/strings/cord.h"
#include "client/cli/flags.h"

namespace posenc::cli {
namespace {

constexpr char kUsagePayloadUrl[] = "type.posenc.dev/cli.usage";

}  // namespace

absl::Status UsageError(std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(AbslView(message));
  status.SetPayload(kUsagePayloadUrl, absl::Cord("usage"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayloadUrl).has_value();
}

const std::vector<Command>& Commands() {
  static const std::vector<Command>* const kCommands = new std::vector<Command>{
      SinusoidalCommand(),
      AddCommand(),
      RopeCacheCommand(),
      ApplyRopeCommand(),
      RerotateCommand(),
      MmPositionsCommand(),
      CheckCommand(),
      AlibiSlopesCommand(),
      AlibiBiasCommand(),
      RelativeBiasCommand(),
      RelativeEmbeddingCommand(),
      BenchCommand(),
      DescribeCommand(),
      InfoCommand(),
      HealthCommand(),
      AnalyzeCommand(),
  };
  return *kCommands;
}

}  // namespace posenc::cli
