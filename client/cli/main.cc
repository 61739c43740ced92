// posenc: the command-line client of the posenc service.
//
//   posenc [--server HOST:PORT] [--format table|json|none] [--timeout 30s] [--full]
//          SUBCOMMAND [flags]
//
// Global flags may also follow the subcommand (a repeated flag: the last one wins). Exit codes:
// 0 success; 1 the call (or a file) failed, with "error: CODE: message" on stderr, or `health`
// found the server not SERVING, or a `bench` call failed; 2 usage error (also an output file that
// cannot be written: checked before any call); 130 `bench` stopped by Ctrl-C. `posenc --help`
// lists the subcommands, `posenc SUBCOMMAND --help` their flags; `posenc --version` prints the
// version.
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "client/cli/output.h"
#include "client/cli/png.h"
#include "kernels/common/file.h"
#include "posenc/client.h"

namespace posenc::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr char kDefaultServer[] = "localhost:50051";

const FlagGroup kGlobalFlags = {
    {"server", FlagType::kString, "HOST:PORT",
     "server address (default $POSENC_SERVER, else localhost:50051)"},
    {"format", FlagType::kChoice, "", "output format (default table)", "table|json|none"},
    {"timeout", FlagType::kString, "DURATION",
     "deadline of the call: 30s, 500ms, 2m (default 30s)"},
    {"full", FlagType::kSwitch, "", "print every element (no \"...\" summarization)"},
    {"tls", FlagType::kSwitch, "",
     "connect with TLS, trusting the system's roots (implied by --tls-ca)"},
    {"tls-ca", FlagType::kString, "FILE", "PEM CA certificate(s) to trust for the server (TLS)"},
    {"tls-cert", FlagType::kString, "FILE",
     "PEM client certificate for mutual TLS (with --tls-key)"},
    {"tls-key", FlagType::kString, "FILE", "PEM private key of --tls-cert"},
    {"version", FlagType::kSwitch, "", "print the version and exit"},
    {"help", FlagType::kSwitch, "", "show help (also -h)"},
};

// "posenc 0.1.0 (Release build, GNU 12.2.0)": CMake's PROJECT_VERSION, build type and compiler.
int PrintVersion() {
  std::cout << "posenc " << POSENC_VERSION << " (" << POSENC_BUILD_TYPE << " build, "
            << POSENC_COMPILER << ")\n";
  return EXIT_SUCCESS;
}

std::string MainHelp() {
  std::string out =
      "usage: posenc [global flags] SUBCOMMAND [flags]\n\n"
      "The command-line client of the posenc position-encoding service.\n\n"
      "subcommands:\n";
  size_t width = 0;
  for (const Command& c : Commands()) width = std::max(width, c.name.size());
  for (const Command& c : Commands()) {
    std::string name(c.name);
    name.resize(width + 2, ' ');
    absl::StrAppend(&out, "  ", name, absl::string_view(c.summary.data(), c.summary.size()), "\n");
  }
  const FlagGroup* groups[] = {&kGlobalFlags};
  absl::StrAppend(&out, "\nglobal flags:\n", FlagsHelp(groups),
                  "\nPositions: --positions START:END is half-open (0:8 = 0..7); also a list "
                  "3,5,9 or an .npy file.\n"
                  "Run 'posenc SUBCOMMAND --help' for the flags of a subcommand.\n");
  return out;
}

std::string CommandHelp(const Command& command) {
  std::string out = absl::StrCat(
      "usage: posenc [global flags] ", absl::string_view(command.name.data(), command.name.size()),
      " [flags]\n\n", absl::string_view(command.summary.data(), command.summary.size()), "\n");
  if (!command.details.empty()) {
    absl::StrAppend(&out, absl::string_view(command.details.data(), command.details.size()), "\n");
  }
  absl::StrAppend(&out, HeatmapHelp(command.name));
  if (!command.flags.empty()) absl::StrAppend(&out, "\nflags:\n", FlagsHelp(command.flags));
  const FlagGroup* groups[] = {&kGlobalFlags};
  absl::StrAppend(&out, "\nglobal flags:\n", FlagsHelp(groups));
  return out;
}

// "30s", "500ms", "2m", "1.5" (seconds).
// absl::ParseDuration's forms ("30s", "500ms", "1m30s", "1.5h"); positive and at most a year.
std::optional<std::chrono::milliseconds> ParseTimeout(const std::string& text) {
  absl::Duration duration;
  if (!absl::ParseDuration(text, &duration) || duration <= absl::ZeroDuration() ||
      duration > absl::Hours(24 * 365)) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(duration)));
}

int UsageFailure(const std::string& message, const std::string& help_hint) {
  std::cerr << "error: " << message << "\n" << help_hint << "\n";
  return kExitUsage;
}

int Run(const std::vector<std::string>& args) {
  ParsedFlags flags;
  size_t next = 0;
  const FlagGroup* global_groups[] = {&kGlobalFlags};
  if (absl::Status s =
          ParseFlags(args, 0, global_groups, /*stop_at_positional=*/true, &flags, &next);
      !s.ok()) {
    return UsageFailure(std::string(s.message()), "run 'posenc --help' for usage");
  }
  if (flags.Switch("version")) return PrintVersion();
  if (next == args.size()) {
    if (flags.Switch("help")) {
      std::cout << MainHelp();
      return EXIT_SUCCESS;
    }
    std::cerr << MainHelp();
    return kExitUsage;
  }
  std::string name = args[next];
  if (name == "help") {
    if (next + 1 >= args.size()) {
      std::cout << MainHelp();
      return EXIT_SUCCESS;
    }
    name = args[next + 1];
    flags.Set("help", true);
    next = args.size() - 1;
  }
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (c.name == name) command = &c;
  }
  if (command == nullptr) {
    std::vector<std::string_view> names;
    for (const Command& c : Commands()) names.push_back(c.name);
    return UsageFailure(absl::StrCat("unknown subcommand '", name, "'", DidYouMean(name, names)),
                        "run 'posenc --help' for the list of subcommands");
  }
  const std::string hint = absl::StrCat("run 'posenc ", name, " --help' for usage");

  std::vector<const FlagGroup*> groups = {&kGlobalFlags};
  groups.insert(groups.end(), command->flags.begin(), command->flags.end());
  if (absl::Status s =
          ParseFlags(args, next + 1, groups, /*stop_at_positional=*/false, &flags, nullptr);
      !s.ok()) {
    return UsageFailure(std::string(s.message()), hint);
  }
  if (flags.Switch("help")) {
    std::cout << CommandHelp(*command);
    return EXIT_SUCCESS;
  }
  if (flags.Switch("version")) return PrintVersion();

  // Output files (--npy, --png, --out-*) must be writable before any call is made.
  if (absl::Status s = CheckOutputFiles(flags); !s.ok()) {
    return UsageFailure(std::string(s.message()), hint);
  }

  client::ClientOptions options;
  if (std::optional<std::string> timeout = flags.String("timeout")) {
    std::optional<std::chrono::milliseconds> parsed = ParseTimeout(*timeout);
    if (!parsed.has_value()) {
      return UsageFailure(
          absl::StrCat("--timeout expects a positive duration such as 30s, 500ms or 1m30s, got '",
                       *timeout, "'"),
          hint);
    }
    options.timeout = *parsed;
  }
  // TLS: any of the flags turns it on; a client key/cert pair adds mutual TLS.
  const std::optional<std::string> tls_ca = flags.String("tls-ca");
  const std::optional<std::string> tls_cert = flags.String("tls-cert");
  const std::optional<std::string> tls_key = flags.String("tls-key");
  if (tls_cert.has_value() != tls_key.has_value()) {
    return UsageFailure("--tls-cert and --tls-key go together (mutual TLS needs both)", hint);
  }
  if (flags.Switch("tls") || tls_ca || tls_cert) {
    options.use_tls = true;
    struct PemFlag {
      const char* name;
      const std::optional<std::string>& path;
      std::string* out;
    };
    for (const PemFlag& pem : {PemFlag{"--tls-ca", tls_ca, &options.tls_root_certs},
                               PemFlag{"--tls-cert", tls_cert, &options.tls_client_cert},
                               PemFlag{"--tls-key", tls_key, &options.tls_client_key}}) {
      if (!pem.path) continue;
      absl::StatusOr<std::string> text = kernels::ReadFileToString(*pem.path);
      if (!text.ok() || text->find("-----BEGIN ") == std::string::npos) {
        return UsageFailure(absl::StrCat(pem.name, ": cannot read a PEM file at '", *pem.path, "'"),
                            hint);
      }
      *pem.out = *std::move(text);
    }
  }
  std::string server = kDefaultServer;
  if (const char* env = std::getenv("POSENC_SERVER"); env != nullptr && *env != '\0') {
    server = env;
  }
  server = flags.String("server").value_or(server);
  const std::string format = flags.String("format").value_or("table");
  const OutputFormat output_format = format == "json"   ? OutputFormat::kJson
                                     : format == "none" ? OutputFormat::kNone
                                                        : OutputFormat::kTable;

  absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Connect(server, options);
  if (!client.ok()) {
    return UsageFailure(std::string(client.status().message()), hint);
  }
  absl::StatusOr<CommandOutput> output = command->run(flags, **client);
  if (!output.ok()) {
    if (IsUsageError(output.status())) {
      return UsageFailure(std::string(output.status().message()), hint);
    }
    std::cerr << "error: " << absl::StatusCodeToString(output.status().code()) << ": "
              << output.status().message() << "\n";
    if (output.status().code() == absl::StatusCode::kResourceExhausted &&
        (command->name == "alibi-bias" || command->name == "relative-bias") &&
        flags.String("form").value_or("") == "full") {
      std::cerr << "hint: the compact form carries q_len + k_len - 1 values per head instead of "
                   "q_len x k_len: leave --form unset (fetched compact, expanded here) or use "
                   "--form compact\n";
    }
    return kExitFailure;
  }
  if (absl::Status s = MaybeWriteHeatmap(command->name, flags, *output); !s.ok()) {
    std::cerr << "error: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
    return kExitFailure;
  }
  TableOptions table_options;
  table_options.full = flags.Switch("full");
  // A .npy written to standard output (`--npy -`) is the whole of it.
  bool npy_on_stdout = false;
  for (std::string_view flag : {"npy", "out-cos", "out-sin", "out-q", "out-k"}) {
    npy_on_stdout |= flags.String(flag).value_or("") == "-";
  }
  PrintOutput(*output, npy_on_stdout ? OutputFormat::kNone : output->format.value_or(output_format),
              table_options, std::cout);
  return output->exit_code;
}

}  // namespace
}  // namespace posenc::cli

int main(int argc, char** argv) {
  return posenc::cli::Run(std::vector<std::string>(argv + 1, argv + argc));
}
