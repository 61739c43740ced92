// libFuzzer target: the posenc CLI's argument parser (client/cli/flags.h) on the flag tables of
// every subcommand (client/cli/commands.h; linked from posenc_cli), as client/cli/cli.cc drives it:
// the global flags up to the first positional argument, the subcommand's name, then its flags. No
// command runs (that would make a call).
//
// Input: NUL-separated arguments (at most 64). Errors must be INVALID_ARGUMENT with a message;
// a value that parsed must read back with its flag's type.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"

namespace posenc::cli {
namespace {

void CheckError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument || status.message().empty()) {
    std::abort();
  }
}

// Reads every flag of `groups` back with its own type.
void ReadBack(const ParsedFlags& flags, const std::vector<const FlagGroup*>& groups) {
  for (const FlagGroup* group : groups) {
    for (const FlagSpec& spec : *group) {
      if (!flags.Has(spec.name)) continue;
      bool typed = true;
      switch (spec.type) {
        case FlagType::kSwitch: typed = flags.Switch(spec.name); break;
        case FlagType::kString:
        case FlagType::kChoice: typed = flags.String(spec.name).has_value(); break;
        case FlagType::kInt: typed = flags.Int(spec.name).has_value(); break;
        case FlagType::kDouble: typed = flags.Double(spec.name).has_value(); break;
        case FlagType::kIntList: typed = !flags.IntList(spec.name).empty(); break;
        case FlagType::kDoubleList: typed = !flags.DoubleList(spec.name).empty(); break;
      }
      // "help" is also set by -h as a switch; every other flag has the type of its spec.
      if (!typed && spec.name != "help") std::abort();
    }
  }
}

}  // namespace
}  // namespace posenc::cli

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace posenc::cli;
  constexpr size_t kMaxArgs = 64;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  if (!input.empty()) {
    for (absl::string_view arg : absl::StrSplit(input, '\0')) {
      if (args.size() == kMaxArgs) return 0;
      args.emplace_back(arg);
    }
  }

  ParsedFlags flags;
  size_t next = 0;
  std::vector<const FlagGroup*> groups = {&GlobalFlags()};
  if (absl::Status s = ParseFlags(args, 0, groups, /*stop_at_positional=*/true, &flags, &next);
      !s.ok()) {
    CheckError(s);
    return 0;
  }
  if (next > args.size()) std::abort();
  if (next == args.size()) {
    ReadBack(flags, groups);
    return 0;
  }
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (c.name == args[next]) command = &c;
  }
  if (command == nullptr) command = &Commands()[args[next].size() % Commands().size()];
  groups.insert(groups.end(), command->flags.begin(), command->flags.end());
  if (absl::Status s =
          ParseFlags(args, next + 1, groups, /*stop_at_positional=*/false, &flags, nullptr);
      !s.ok()) {
    CheckError(s);
    return 0;
  }
  ReadBack(flags, groups);
  if (flags.Switch("help")) (void)FlagsHelp(groups);
  return 0;
}
