// posenc-server: serves posenc.v1.PositionEncoding (plus health and reflection) over gRPC.
//
// Flags: the table POSENC_SERVER_FLAGS below writes each flag once: its type, its name, the
// option it sets (whose default in Options is the flag's default), its range and its help.
// Each flag has an environment variable POSENC_<NAME> (--listen: POSENC_LISTEN), used when the
// flag is not on the command line. `posenc-server --help` lists every flag with its variable,
// default and range (README.md, "Server flags").
// SIGTERM/SIGINT: health goes NOT_SERVING and new calls get UNAVAILABLE; after the grace,
// in-flight calls get until --drain_timeout after the signal to finish (then they are
// cancelled), new ones still getting UNAVAILABLE, and the listener closes; exit 0.
// --help (-h) lists the flags, --version prints "posenc-server VERSION (BUILD_TYPE build,
// COMPILER)"; both exit 0. An unknown flag, a missing or malformed value, a value out of its
// range, a stray argument or a bad environment value exits 2 naming it; a server that cannot
// start exits 1.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/posenc/v1/freed_memory.h"
#include "server/logging.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace {

// Every option of the process: the server's (server/server.h) and the process's own. Their
// defaults here are the flags' defaults.
struct Options {
  posenc::server::ServerOptions server;
  absl::Duration drain_timeout = absl::Seconds(10);
  std::string log_format = "text";
  std::string log_level = "info";
  // The library's default grace is 0 (tests); a deployed server gives load balancers a second.
  Options() { server.drain_grace = std::chrono::seconds(1); }
};

const Options& Defaults() {
  static const Options* const defaults = new Options();
  return *defaults;
}

// The values a flag accepts, checked after parsing (exit 2: "--NAME: expected RANGE, got V").
struct AnyValue {};
struct IntRange {
  int64_t min, max;
  const char* text = nullptr;  // the range in words; null: "MIN .. MAX"
};
struct DurationRange {
  absl::Duration min, max;
};
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

std::string RangeText(AnyValue) { return ""; }
std::string RangeText(const IntRange& r) {
  return r.text != nullptr ? r.text : absl::StrCat(r.min, " .. ", r.max);
}
std::string RangeText(const DurationRange& r) {
  auto text = [](absl::Duration d) {
    return d == absl::ZeroDuration() ? std::string("0s") : absl::FormatDuration(d);
  };
  return absl::StrCat(text(r.min), " .. ", text(r.max));
}

bool InRange(const std::string&, AnyValue) { return true; }
bool InRange(bool, AnyValue) { return true; }
bool InRange(int64_t v, const IntRange& r) { return v >= r.min && v <= r.max; }
bool InRange(absl::Duration v, const DurationRange& r) { return v >= r.min && v <= r.max; }

std::string ValueText(const std::string& v) { return v; }
std::string ValueText(bool v) { return v ? "true" : "false"; }
std::string ValueText(int64_t v) { return absl::StrCat(v); }
std::string ValueText(absl::Duration v) { return absl::FormatDuration(v); }

// An option's value as its flag's type, and back (narrowing after the range check).
template <typename Flag, typename Field>
Flag ToFlag(const Field& v) {
  if constexpr (std::is_same_v<Field, std::chrono::milliseconds>) {
    return absl::FromChrono(v);
  } else {
    return Flag(v);
  }
}
template <typename Field, typename Flag>
Field FromFlag(const Flag& v) {
  if constexpr (std::is_same_v<Field, std::chrono::milliseconds>) {
    return absl::ToChronoMilliseconds(v);
  } else {
    return static_cast<Field>(v);
  }
}

}  // namespace

// The flags, each written once: X(type, name, option of Options, range, help).
// clang-format off
#define POSENC_SERVER_FLAGS(X)                                                                   \
  X(std::string, listen, server.listen_address, AnyValue{},                                     \
    "Address to listen on, host:port")                                                           \
  X(int64_t, max_message_bytes, server.max_message_bytes, (IntRange{1, 2147483647}),             \
    "Largest request or response message in bytes (protobuf's limit is 2 GiB - 1)")             \
  X(int64_t, max_output_elements, server.max_output_elements, (IntRange{1, kNoMax, ">= 1"}),     \
    "Largest number of elements of one output tensor")                                           \
  X(std::string, backend, server.backend, AnyValue{},                                            \
    "Compute backend: cpu (optimized SIMD + threads), reference (the float64 oracle), cuda (a "  \
    "GPU, beside the cpu backend; start-up fails without one) or auto (cuda when the build has " \
    "it and a device is present, else cpu)")                                                     \
  X(int64_t, cuda_device, server.cuda_device, (IntRange{0, 1023}),                               \
    "The CUDA device the cuda backend runs on")                                                  \
  X(int64_t, cuda_small_call_bytes, server.cuda_small_call_bytes,                                \
    (IntRange{0, kNoMax, "0 or a byte count"}),                                                  \
    "With the cuda backend, calls whose outputs total fewer bytes run on the cpu backend (a "    \
    "device round trip costs more); 0 = every call on the device")                               \
  X(int64_t, threads, server.threads, (IntRange{0, 1024}),                                       \
    "Threads one large request may use on the cpu backend (the one cpu backend of the process, " \
    "also beside cuda); 0 = one per core; small requests always run on the calling thread")      \
  X(int64_t, cache_entries, server.cache_entries, (IntRange{0, 1 << 20}),                        \
    "Entries of the bounded RoPE frequency cache, keyed by the full config (every field, plus "  \
    "seq_len for dynamic/longrope); 0 disables it")                                              \
  X(int64_t, cache_bytes, server.cache_bytes, (IntRange{0, int64_t{1} << 40, "0 .. 2^40"}),      \
    "Bytes the RoPE frequency cache may hold (keys, frequencies, bookkeeping); least recently "  \
    "used entries go first; 0 disables it")                                                      \
  X(int64_t, max_inflight_bytes, server.max_inflight_bytes,                                      \
    (IntRange{-1, kNoMax, "-1, 0 or a byte count"}),                                             \
    "Bytes of requests and responses in flight (each call counts its request and twice its "     \
    "planned response); a call that would go over gets RESOURCE_EXHAUSTED (retryable). -1: a "   \
    "quarter of the memory the process may use (cgroup limit, else the machine's), at least 3 x " \
    "--max_message_bytes; 0: unbounded")                                                         \
  X(int64_t, max_heavy_calls, server.max_heavy_calls, (IntRange{-1, 4096}),                      \
    "Calls with more than 4 MiB of output computing at once; another waits up to 100 ms for a "  \
    "slot, then gets RESOURCE_EXHAUSTED (retryable). Small calls and health checks are never "   \
    "held. -1: one less than the cores (at least 1); 0: unbounded")                              \
  X(bool, allow_shared_memory, server.allow_shared_memory, AnyValue{},                           \
    "Accept registrations of POSIX shared-memory regions (RegisterSharedMemory) and tensors "     \
    "passed as references into them, for callers on the same host (the same /dev/shm)")         \
  X(int64_t, max_shared_memory_regions, server.max_shared_memory_regions, (IntRange{1, 1024}),   \
    "Shared-memory regions registered at once")                                                  \
  X(int64_t, max_shared_memory_bytes, server.max_shared_memory_bytes,                            \
    (IntRange{1, kNoMax, ">= 1"}),                                                               \
    "Bytes of shared memory registered at once (the regions' sizes summed; mapped, not "         \
    "allocated)")                                                                                \
  X(int64_t, retain_free_memory_bytes, server.retain_free_memory_bytes,                          \
    (IntRange{0, kNoMax, "0 or a byte count"}),                                                  \
    "Free memory the allocator keeps for the next calls' large tensors instead of returning it " \
    "at once (no fresh pages for the kernel to zero per call; resident memory stays at its peak " \
    "until no call has run for 10 s); 0 = the C library's defaults")                            \
  X(std::string, tables, server.tables_dir, AnyValue{},                                          \
    "Directory whose *.npy and *.safetensors files are loaded at start-up as named tables "      \
    "(NAME.npy -> NAME, NAME.safetensors -> NAME/TENSOR); a bad file stops start-up")            \
  X(absl::Duration, drain_timeout, drain_timeout, (DurationRange{absl::ZeroDuration(),           \
    absl::Hours(1)}),                                                                            \
    "On SIGTERM/SIGINT, how long in-flight calls may run before they are cancelled; the "        \
    "process exits within this time of the signal. A duration: 10s, 500ms, 1m")                  \
  X(absl::Duration, drain_grace, server.drain_grace, (DurationRange{absl::ZeroDuration(),        \
    absl::Hours(1)}),                                                                            \
    "On SIGTERM/SIGINT, how long health reports NOT_SERVING (new calls get UNAVAILABLE) before " \
    "the listener closes, so load balancers notice; part of --drain_timeout. A duration: 1s, 0s")\
  X(std::string, tls_cert, server.tls_cert_file, AnyValue{},                                     \
    "PEM file with the server's certificate chain; with --tls_key the server speaks TLS only")   \
  X(std::string, tls_key, server.tls_key_file, AnyValue{},                                       \
    "PEM file with the private key of --tls_cert")                                               \
  X(std::string, tls_client_ca, server.tls_client_ca_file, AnyValue{},                           \
    "PEM file with the CA certificate(s) client certificates must chain to; set = mutual TLS, "  \
    "clients without a valid certificate are refused; needs --tls_cert and --tls_key")           \
  X(std::string, metrics_address, server.metrics_address, AnyValue{},                            \
    "host:port to serve Prometheus metrics on (GET /metrics, plain HTTP); empty = off")          \
  X(std::string, log_format, log_format, AnyValue{},                                             \
    "text, or json: one JSON object per line")                                                   \
  X(std::string, log_level, log_level, AnyValue{},                                               \
    "trace, debug, info, warn, error or off; access lines are info (errors: error)")
// clang-format on

#define POSENC_DEFINE_FLAG(type, name, option, range, help) \
  ABSL_FLAG(type, name, ToFlag<type>(Defaults().option), help);
POSENC_SERVER_FLAGS(POSENC_DEFINE_FLAG)
#undef POSENC_DEFINE_FLAG

namespace {

// Each flag's name and range in words (--help, the environment).
struct FlagRow {
  const char* name;
  std::string range;
};
const std::vector<FlagRow>& FlagRows() {
#define POSENC_FLAG_ROW(type, name, option, range, help) FlagRow{#name, RangeText(range)},
  static const auto* const rows = new std::vector<FlagRow>{POSENC_SERVER_FLAGS(POSENC_FLAG_ROW)};
#undef POSENC_FLAG_ROW
  return *rows;
}

// POSENC_<NAME>: the environment variable of flag `name`.
std::string EnvName(absl::string_view name) {
  return absl::StrCat("POSENC_", absl::AsciiStrToUpper(name));
}

constexpr char kProgram[] = "posenc-server";
constexpr char kDescription[] =
    "Serves posenc.v1.PositionEncoding, grpc.health.v1.Health and server reflection over gRPC. "
    "Each flag --name has an environment variable POSENC_NAME, used when the flag is not on "
    "the command line. SIGTERM or SIGINT drains the server (--drain_grace, --drain_timeout). "
    "Exit status: 0 after a drain; 1 when the server cannot start (bad TLS file, bad table, "
    "address in use); 2 for an unknown flag or a bad flag or environment value.";

// "posenc-server 0.1.0 (Release build, GNU 12.2.0)": CMake's PROJECT_VERSION, build type and
// compiler (CMakeLists.txt).
std::string VersionLine() {
  return absl::StrCat(kProgram, " ", POSENC_VERSION, " (", POSENC_BUILD_TYPE, " build, ",
                      POSENC_COMPILER, ")");
}

// The flags of this program are the ones defined in this file; Abseil's own (--flagfile,
// --fromenv, --helpfull, ...) stay out of --help (--helpfull lists them).
bool IsServerFlagFile(absl::string_view filename) {
  return absl::EndsWith(filename, "server/main.cc");
}

void ConfigureUsage() {
  absl::SetProgramUsageMessage(kDescription);  // absl prints it after "posenc-server: "
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsServerFlagFile;
  config.contains_help_flags = IsServerFlagFile;
  config.contains_helppackage_flags = IsServerFlagFile;
  config.version_string = [] { return VersionLine() + "\n"; };
  // Flags report the file they are defined in; show it from the repository root.
  config.normalize_filename = [](absl::string_view filename) {
    const size_t server = filename.rfind("server/main.cc");
    return std::string(server == absl::string_view::npos ? filename : filename.substr(server));
  };
  absl::SetFlagsUsageConfig(config);
}

// `text` broken into lines of at most `width` columns (words longer than that stay whole), each
// starting with `indent` spaces.
std::string Wrap(absl::string_view text, size_t indent, size_t width) {
  std::string out;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

// --help: every flag of the table with its environment variable, default, range and help,
// sorted by name.
std::string Help() {
  std::vector<FlagRow> rows = FlagRows();
  std::sort(rows.begin(), rows.end(), [](const FlagRow& a, const FlagRow& b) {
    return absl::string_view(a.name) < absl::string_view(b.name);
  });
  std::string out = absl::StrCat("usage: ", kProgram, " [--flag=value ...]\n\n",
                                 Wrap(kDescription, 0, 100), "\nflags:\n");
  for (const FlagRow& row : rows) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(row.name);
    const std::string value = flag->DefaultValue();
    absl::StrAppend(&out, "  --", row.name, " (env ", EnvName(row.name), ", default ",
                    flag->IsOfType<std::string>() ? absl::StrCat("\"", value, "\"") : value,
                    row.range.empty() ? "" : absl::StrCat(", ", row.range), ")\n",
                    Wrap(flag->Help(), 6, 100));
  }
  absl::StrAppend(&out, "  --help, -h\n",
                  Wrap("this help; --helpfull adds Abseil's own flags", 6, 100), "  --version\n",
                  Wrap("the version, build type and compiler", 6, 100));
  return out;
}

// --help / -h and --version, answered before anything else is looked at (even a bad
// environment value). Returns true when one was answered.
bool AnswerHelpOrVersion(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::fputs(Help().c_str(), stdout);
      return true;
    }
    if (arg == "--version" || arg == "-version") {
      std::printf("%s\n", VersionLine().c_str());
      return true;
    }
  }
  return false;
}

bool UsageError(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n(%s --help lists the flags)\n", kProgram, message.c_str(),
               kProgram);
  return false;
}

// Checks the command line before absl::ParseCommandLine sees it, with the grammar Abseil uses
// (-name, --name=value, --name value, --[no]bool, everything after "--" positional), so that
// every usage error exits with status 2 (Abseil's parser exits 1): an unknown flag, a missing
// or malformed value of one of this program's flags, a positional argument (there are none).
// The values are parsed here (and set: the same values absl::ParseCommandLine sets after);
// Abseil's own flags (--flagfile, --helpfull, ...) are left to absl::ParseCommandLine. Returns
// false after printing the error.
bool CheckCommandLine(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") {
      if (i + 1 < argc) return UsageError(absl::StrCat("unexpected argument '", argv[i + 1], "'"));
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      return UsageError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    absl::string_view name = arg.substr(arg[1] == '-' ? 2 : 1);
    absl::string_view value;
    const size_t eq = name.find('=');
    const bool has_value = eq != absl::string_view::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    // Abseil's usage flags (not registered flags; values only after '='): absl::ParseCommandLine
    // answers them.
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
        name == "helpmatch" || name == "helpon" || name == "version" || name == "only_check_args") {
      continue;
    }
    absl::CommandLineFlag* flag = name.empty() ? nullptr : absl::FindCommandLineFlag(name);
    bool negative = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negative = flag != nullptr && flag->IsOfType<bool>() && !has_value;
      if (!negative) flag = nullptr;
    }
    if (flag == nullptr || flag->IsRetired()) {
      return UsageError(absl::StrCat("unknown flag '", arg, "'"));
    }
    std::string text(value);
    if (flag->IsOfType<bool>()) {
      if (!has_value) text = negative ? "false" : "true";
    } else if (!has_value) {
      if (i + 1 >= argc) return UsageError(absl::StrCat("--", name, ": missing value"));
      text = argv[++i];
    }
    if (!IsServerFlagFile(flag->Filename())) continue;
    std::string error;
    if (!flag->ParseFrom(text, &error)) {
      return UsageError(absl::StrCat(
          "--", name, ": ", error.empty() ? absl::StrCat("bad value '", text, "'") : error));
    }
  }
  return true;
}

// Environment values go in before the command line is parsed, so a flag given on the command
// line wins. Returns false (after printing why) on an unparsable value.
bool ApplyEnvironment() {
  for (const FlagRow& row : FlagRows()) {
    const std::string env = EnvName(row.name);
    const char* v = std::getenv(env.c_str());
    if (v == nullptr || *v == '\0') continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(row.name);
    std::string error;
    if (!flag->ParseFrom(v, &error)) {
      const char* expected = flag->IsOfType<absl::Duration>() ? "a duration like 10s or 500ms"
                             : flag->IsOfType<bool>()         ? "true or false"
                                                              : "an integer";
      std::fprintf(stderr, "%s: %s: expected %s, got \"%s\"\n", kProgram, env.c_str(), expected, v);
      return false;
    }
  }
  return true;
}

// Every flag's range checked (false after printing the first one out of range), then its value
// copied into `options`.
bool ReadFlags(Options* options) {
#define POSENC_READ_FLAG(type, name, option, range, help)                       \
  if (const type value = absl::GetFlag(FLAGS_##name); InRange(value, range)) {  \
    options->option = FromFlag<std::decay_t<decltype(options->option)>>(value); \
  } else {                                                                      \
    std::fprintf(stderr, "%s: --%s: expected %s, got %s\n", kProgram, #name,    \
                 RangeText(range).c_str(), ValueText(value).c_str());           \
    return false;                                                               \
  }
  POSENC_SERVER_FLAGS(POSENC_READ_FLAG)
#undef POSENC_READ_FLAG
  return true;
}

// The options from the environment and the command line; exit status 2 (after printing why)
// on a usage error.
bool ParseOptions(int argc, char** argv, Options* options) {
  // The environment first, then the command line over it.
  if (!ApplyEnvironment() || !CheckCommandLine(argc, argv)) return false;
  absl::ParseCommandLine(argc, argv);
  if (!ReadFlags(options)) return false;
  const auto log_format = posenc::server::ParseLogFormat(options->log_format);
  const auto log_level = posenc::server::ParseLogLevel(options->log_level);
  for (const absl::Status& status : {log_format.status(), log_level.status()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, std::string(status.message()).c_str());
      return false;
    }
  }
  posenc::server::ConfigureLogging(*log_format, *log_level);
  return true;
}

// The lines scripts and operators read once the server is up.
void LogStarted(const posenc::server::ServerOptions& options,
                const posenc::server::PosencServer& server) {
  // A TCP listener with the port it got (port 0 picks one); a Unix socket as given.
  const std::string& listen = options.listen_address;
  const bool unix_socket = listen.starts_with("unix:") || listen.starts_with("unix-abstract:");
  const std::string address =
      unix_socket ? listen
                  : listen.substr(0, listen.rfind(':') + 1) + std::to_string(server.port());
  // Scripts wait for this line (spdlog's default sink is stdout, flushed per line).
  spdlog::info(
      "posenc-server listening on {} (backend={} max_message_bytes={} "
      "max_output_elements={})",
      address, server.backend_description(), options.max_message_bytes,
      options.max_output_elements);
  const char* transport = "plaintext";
  if (!options.tls_cert_file.empty()) {
    transport =
        options.tls_client_ca_file.empty() ? "TLS" : "mutual TLS (client certificates required)";
  }
  spdlog::info("transport: {}", transport);
  if (server.metrics_port() != 0) {
    spdlog::info("metrics on http://{}{}/metrics",
                 options.metrics_address.substr(0, options.metrics_address.rfind(':') + 1),
                 server.metrics_port());
  }
}

// Starts the server and serves until SIGTERM/SIGINT has drained it, then exits the process (0);
// returns 1 when the server cannot start.
int Serve(const Options& options) {
  // Block the shutdown signals before any thread starts, so that every thread inherits the
  // mask and only the waiter below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // The allocator's policy, before any other thread exists (proto/posenc/v1/freed_memory.h).
  (void)posenc::v1::RetainFreedMemory(options.server.retain_free_memory_bytes);
  auto server = posenc::server::PosencServer::Start(options.server);
  if (!server.ok()) {
    spdlog::critical("posenc-server: {}", server.status().ToString());
    return 1;
  }
  LogStarted(options.server, **server);
  const absl::Duration drain_timeout = options.drain_timeout;
  std::thread waiter([&signals, &server, drain_timeout] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info(
        "signal {}: draining (health NOT_SERVING, new calls UNAVAILABLE, in-flight calls get "
        "{})",
        signal, absl::FormatDuration(drain_timeout));
    (*server)->Shutdown(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(drain_timeout));
  });
  (*server)->Wait();
  waiter.join();
  spdlog::info("posenc-server stopped");
  // Every call is done and the listener is closed: exit now, without the destructors. gRPC
  // 1.51's teardown (grpc_shutdown, from ~grpc::Server) joins its executor threads, and after a
  // large response one of them can sit in a poll for up to ~10 s, which would push the exit past
  // --drain_timeout and into the orchestrator's kill timeout.
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  ConfigureUsage();
  if (AnswerHelpOrVersion(argc, argv)) return 0;
  Options options;
  if (!ParseOptions(argc, argv, &options)) return 2;
  return Serve(options);
}
