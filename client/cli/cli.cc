// The posenc CLI's command line (cli.h): global flags, help, the subcommand, the client.
#include "client/cli/cli.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/heatmap.h"
#include "client/cli/output.h"
#include "kernels/common/file.h"
#include "kernels/common/status.h"
#include "posenc/client.h"

namespace posenc::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr char kDefaultServer[] = "localhost:50051";

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
  const FlagGroup* groups[] = {&GlobalFlags()};
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
  const FlagGroup* groups[] = {&GlobalFlags()};
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

}  // namespace

const FlagGroup& GlobalFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
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
  return *kFlags;
}

namespace {

// The subcommand a command line names and its flags (global ones included), or the exit code
// when there is nothing to run (help, version, a usage error: printed).
struct Invocation {
  const Command* command = nullptr;
  ParsedFlags flags;
  std::string hint;  // "run 'posenc NAME --help' for usage"
  std::optional<int> exit_code;
};

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Invocation Parse(const std::vector<std::string>& args) {
  Invocation inv;
  size_t next = 0;
  const FlagGroup* global_groups[] = {&GlobalFlags()};
  if (absl::Status s =
          ParseFlags(args, 0, global_groups, /*stop_at_positional=*/true, &inv.flags, &next);
      !s.ok()) {
    inv.exit_code = UsageFailure(std::string(s.message()), "run 'posenc --help' for usage");
    return inv;
  }
  if (inv.flags.Switch("version")) {
    inv.exit_code = PrintVersion();
    return inv;
  }
  if (next == args.size()) {
    (inv.flags.Switch("help") ? std::cout : std::cerr) << MainHelp();
    inv.exit_code = inv.flags.Switch("help") ? EXIT_SUCCESS : kExitUsage;
    return inv;
  }
  std::string name = args[next];
  if (name == "help") {
    if (next + 1 >= args.size()) {
      std::cout << MainHelp();
      inv.exit_code = EXIT_SUCCESS;
      return inv;
    }
    name = args[next + 1];
    inv.flags.Set("help", true);
    next = args.size() - 1;
  }
  inv.command = FindCommand(name);
  if (inv.command == nullptr) {
    std::vector<std::string_view> names;
    for (const Command& c : Commands()) names.push_back(c.name);
    inv.exit_code =
        UsageFailure(absl::StrCat("unknown subcommand '", name, "'", DidYouMean(name, names)),
                     "run 'posenc --help' for the list of subcommands");
    return inv;
  }
  inv.hint = absl::StrCat("run 'posenc ", name, " --help' for usage");
  std::vector<const FlagGroup*> groups = {&GlobalFlags()};
  groups.insert(groups.end(), inv.command->flags.begin(), inv.command->flags.end());
  if (absl::Status s =
          ParseFlags(args, next + 1, groups, /*stop_at_positional=*/false, &inv.flags, nullptr);
      !s.ok()) {
    inv.exit_code = UsageFailure(std::string(s.message()), inv.hint);
  } else if (inv.flags.Switch("help")) {
    std::cout << CommandHelp(*inv.command);
    inv.exit_code = EXIT_SUCCESS;
  } else if (inv.flags.Switch("version")) {
    inv.exit_code = PrintVersion();
  }
  return inv;
}

// TLS: any of the flags turns it on; a client key/cert pair adds mutual TLS.
absl::Status TlsFromFlags(const ParsedFlags& flags, client::ClientOptions* options) {
  const std::optional<std::string> tls_ca = flags.String("tls-ca");
  const std::optional<std::string> tls_cert = flags.String("tls-cert");
  const std::optional<std::string> tls_key = flags.String("tls-key");
  if (tls_cert.has_value() != tls_key.has_value()) {
    return UsageError("--tls-cert and --tls-key go together (mutual TLS needs both)");
  }
  if (!flags.Switch("tls") && !tls_ca && !tls_cert) return absl::OkStatus();
  options->use_tls = true;
  struct PemFlag {
    const char* name;
    const std::optional<std::string>& path;
    std::string* out;
  };
  for (const PemFlag& pem : {PemFlag{"--tls-ca", tls_ca, &options->tls_root_certs},
                             PemFlag{"--tls-cert", tls_cert, &options->tls_client_cert},
                             PemFlag{"--tls-key", tls_key, &options->tls_client_key}}) {
    if (!pem.path) continue;
    absl::StatusOr<std::string> text = kernels::ReadFileToString(*pem.path);
    if (!text.ok() || text->find("-----BEGIN ") == std::string::npos) {
      return UsageError(absl::StrCat(pem.name, ": cannot read a PEM file at '", *pem.path, "'"));
    }
    *pem.out = *std::move(text);
  }
  return absl::OkStatus();
}

// The client the flags describe (--timeout, --tls*, --server, else $POSENC_SERVER).
absl::StatusOr<std::unique_ptr<client::Client>> ClientFromFlags(const ParsedFlags& flags) {
  client::ClientOptions options;
  if (std::optional<std::string> timeout = flags.String("timeout")) {
    std::optional<std::chrono::milliseconds> parsed = ParseTimeout(*timeout);
    if (!parsed.has_value()) {
      return UsageError(
          absl::StrCat("--timeout expects a positive duration such as 30s, 500ms or 1m30s, got '",
                       *timeout, "'"));
    }
    options.timeout = *parsed;
  }
  POSENC_RETURN_IF_ERROR(TlsFromFlags(flags, &options));
  std::string server = kDefaultServer;
  if (const char* env = std::getenv("POSENC_SERVER"); env != nullptr && *env != '\0') {
    server = env;
  }
  server = flags.String("server").value_or(server);
  absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Connect(server, options);
  if (!client.ok()) return UsageError(std::string(client.status().message()));
  return client;
}

// A failed command's message on stderr (with a hint where one helps); the exit code.
int CommandFailure(const Invocation& inv, const absl::Status& status) {
  if (IsUsageError(status)) return UsageFailure(std::string(status.message()), inv.hint);
  std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  if (status.code() == absl::StatusCode::kResourceExhausted &&
      (inv.command->name == "alibi-bias" || inv.command->name == "relative-bias") &&
      inv.flags.String("form").value_or("") == "full") {
    std::cerr << "hint: the compact form carries q_len + k_len - 1 values per head instead of "
                 "q_len x k_len: leave --form unset (fetched compact, expanded here) or use "
                 "--form compact\n";
  }
  return kExitFailure;
}

// The command's output on stdout in --format (nothing when a .npy goes to stdout).
void Print(const ParsedFlags& flags, const CommandOutput& output) {
  const std::string format = flags.String("format").value_or("table");
  const OutputFormat output_format = format == "json"   ? OutputFormat::kJson
                                     : format == "none" ? OutputFormat::kNone
                                                        : OutputFormat::kTable;
  TableOptions table_options;
  table_options.full = flags.Switch("full");
  // A .npy written to standard output (`--npy -`) is the whole of it.
  bool npy_on_stdout = false;
  for (std::string_view flag : kNpyOutputFlags) {
    npy_on_stdout |= flags.String(flag).value_or("") == "-";
  }
  PrintOutput(output, npy_on_stdout ? OutputFormat::kNone : output.format.value_or(output_format),
              table_options, std::cout);
}

}  // namespace

int RunCli(const std::vector<std::string>& args) {
  const Invocation inv = Parse(args);
  if (inv.exit_code.has_value()) return *inv.exit_code;
  // Output files (--npy, --png, --out-*) must be writable before any call is made.
  if (absl::Status s = CheckOutputFiles(inv.flags); !s.ok()) {
    return UsageFailure(std::string(s.message()), inv.hint);
  }
  absl::StatusOr<std::unique_ptr<client::Client>> client = ClientFromFlags(inv.flags);
  if (!client.ok()) return UsageFailure(std::string(client.status().message()), inv.hint);
  absl::StatusOr<CommandOutput> output = inv.command->run(inv.flags, **client);
  if (!output.ok()) return CommandFailure(inv, output.status());
  if (absl::Status s = MaybeWriteHeatmap(inv.command->name, inv.flags, *output); !s.ok()) {
    std::cerr << "error: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
    return kExitFailure;
  }
  Print(inv.flags, *output);
  return output->exit_code;
}

}  // namespace posenc::cli
