// posenc-server: serves posenc.v1.PositionEncoding (plus health and reflection) over gRPC.
//
// Flags, each with an environment variable used when the flag is not on the command line:
//   --listen               POSENC_LISTEN               host:port (default 0.0.0.0:50051)
//   --max_message_bytes    POSENC_MAX_MESSAGE_BYTES    largest message (default 256 MiB)
//   --max_output_elements  POSENC_MAX_OUTPUT_ELEMENTS  largest output tensor, elements
//   --backend              POSENC_BACKEND              cpu (default), reference, cuda or auto
//   --cuda_device          POSENC_CUDA_DEVICE          the GPU of the cuda backend (0)
//   --cuda_small_call_bytes POSENC_CUDA_SMALL_CALL_BYTES  smaller calls run on cpu (1 MiB)
//   --threads              POSENC_THREADS              threads per large request (0 = cores)
//   --cache_entries        POSENC_CACHE_ENTRIES        RoPE frequency cache size (0 = off)
//   --cache_bytes          POSENC_CACHE_BYTES          RoPE frequency cache bytes (64 MiB)
//   --max_inflight_bytes   POSENC_MAX_INFLIGHT_BYTES   requests + responses in flight (auto)
//   --max_heavy_calls      POSENC_MAX_HEAVY_CALLS      calls over 4 MiB of output at once (auto)
//   --tables               POSENC_TABLES               directory of *.npy/*.safetensors tables
//   --drain_timeout        POSENC_DRAIN_TIMEOUT        shutdown bound for in-flight calls (10s)
//   --drain_grace          POSENC_DRAIN_GRACE          NOT_SERVING before the listener closes (1s)
//   --tls_cert, --tls_key  POSENC_TLS_CERT, _TLS_KEY   PEM certificate chain and key: TLS
//   --tls_client_ca        POSENC_TLS_CLIENT_CA        PEM CA for client certificates: mTLS
//   --metrics_address      POSENC_METRICS_ADDRESS      host:port of Prometheus /metrics (off)
//   --log_format           POSENC_LOG_FORMAT           text (default) or json (one object a line)
//   --log_level            POSENC_LOG_LEVEL            trace .. off (default info)
// SIGTERM/SIGINT: health goes NOT_SERVING and new calls get UNAVAILABLE; after the grace,
// in-flight calls get until --drain_timeout after the signal to finish (then they are
// cancelled), new ones still getting UNAVAILABLE, and the listener closes; exit 0.
// --help (-h) lists the flags with their environment variables and defaults, --version prints
// "posenc-server VERSION (BUILD_TYPE build, COMPILER)"; both exit 0. An unknown flag, a missing
// or malformed value, a stray argument or a bad environment value exits 2 naming it; a server
// that cannot start exits 1.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/logging.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "Address to listen on, host:port (env POSENC_LISTEN)");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20,
          "Largest request or response message in bytes, at most 2147483647 "
          "(env POSENC_MAX_MESSAGE_BYTES)");
ABSL_FLAG(int64_t, max_output_elements, int64_t{1} << 26,
          "Largest number of elements of one output tensor (env POSENC_MAX_OUTPUT_ELEMENTS)");
ABSL_FLAG(std::string, backend, "cpu",
          "Compute backend: cpu (optimized SIMD + threads), reference (the float64 oracle), cuda "
          "(a GPU; start-up fails without one) or auto (cuda when the build has it and a device "
          "is present, else cpu) (env POSENC_BACKEND)");
ABSL_FLAG(int64_t, cuda_device, 0,
          "The CUDA device the cuda backend runs on (env POSENC_CUDA_DEVICE)");
ABSL_FLAG(int64_t, cuda_small_call_bytes, posenc::kernels::kDefaultCudaSmallCallBytes,
          "With the cuda backend, calls whose outputs total fewer bytes run on the cpu backend "
          "(a device round trip costs more); 0 = every call on the device "
          "(env POSENC_CUDA_SMALL_CALL_BYTES)");
ABSL_FLAG(int64_t, threads, 0,
          "Threads one large request may use on the cpu backend; 0 = one per core; small "
          "requests always run on the calling thread (env POSENC_THREADS)");
ABSL_FLAG(int64_t, cache_entries, 1024,
          "Entries of the bounded RoPE frequency cache, keyed by the full config (every field, "
          "plus seq_len for dynamic/longrope); 0 disables it (env POSENC_CACHE_ENTRIES)");
ABSL_FLAG(int64_t, cache_bytes, int64_t{64} << 20,
          "Bytes the RoPE frequency cache may hold (keys, frequencies, bookkeeping); least "
          "recently used entries go first; 0 disables it (env POSENC_CACHE_BYTES)");
ABSL_FLAG(int64_t, max_inflight_bytes, -1,
          "Bytes of requests and responses in flight (each call counts its request and twice its "
          "planned response); a call that would go over gets RESOURCE_EXHAUSTED (retryable). "
          "-1: a quarter of the memory the process may use (cgroup limit, else the machine's), "
          "at least 3 x --max_message_bytes; 0: unbounded (env POSENC_MAX_INFLIGHT_BYTES)");
ABSL_FLAG(int64_t, max_heavy_calls, -1,
          "Calls with more than 4 MiB of output computing at once; another waits up to 100 ms "
          "for a slot, then gets RESOURCE_EXHAUSTED (retryable). Small calls and health checks "
          "are never held. -1: one less than the cores (at least 1); 0: unbounded "
          "(env POSENC_MAX_HEAVY_CALLS)");
ABSL_FLAG(std::string, tables, "",
          "Directory whose *.npy and *.safetensors files are loaded at start-up as named "
          "tables (NAME.npy -> NAME, NAME.safetensors -> NAME/TENSOR); a bad file stops "
          "start-up (env POSENC_TABLES)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "On SIGTERM/SIGINT, how long in-flight calls may run before they are cancelled; the "
          "process exits within this time of the signal. A duration: 10s, 500ms, 1m; 0 .. 1h "
          "(env POSENC_DRAIN_TIMEOUT)");
ABSL_FLAG(absl::Duration, drain_grace, absl::Seconds(1),
          "On SIGTERM/SIGINT, how long health reports NOT_SERVING (new calls get UNAVAILABLE) "
          "before the listener closes, so load balancers notice; part of --drain_timeout. "
          "A duration: 1s, 0s; 0 .. 1h (env POSENC_DRAIN_GRACE)");

ABSL_FLAG(std::string, tls_cert, "",
          "PEM file with the server's certificate chain; with --tls_key the server speaks TLS "
          "only (env POSENC_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM file with the private key of --tls_cert (env POSENC_TLS_KEY)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM file with the CA certificate(s) client certificates must chain to; set = mutual "
          "TLS, clients without a valid certificate are refused; needs --tls_cert and --tls_key "
          "(env POSENC_TLS_CLIENT_CA)");
ABSL_FLAG(std::string, metrics_address, "",
          "host:port to serve Prometheus metrics on (GET /metrics, plain HTTP); empty = off "
          "(env POSENC_METRICS_ADDRESS)");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per line (env POSENC_LOG_FORMAT)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off; access lines are info (errors: error) "
          "(env POSENC_LOG_LEVEL)");

namespace {

constexpr char kProgram[] = "posenc-server";
constexpr char kDescription[] =
    "Serves posenc.v1.PositionEncoding, grpc.health.v1.Health and server reflection over gRPC. "
    "Each flag has an environment variable (named in its help), used when the flag is not on "
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

// --help: every flag of this file with its default and its help (which names the environment
// variable), sorted by name.
std::string Help() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && IsServerFlagFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string out = absl::StrCat("usage: ", kProgram, " [--flag=value ...]\n\n",
                                 Wrap(kDescription, 0, 100), "\nflags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    // Each help text ends with "(env POSENC_...)": that goes on the flag's line.
    std::string help = flag->Help();
    std::string env;
    if (const size_t at = help.rfind(" (env "); at != std::string::npos && help.back() == ')') {
      env = absl::StrCat("env ", help.substr(at + 6, help.size() - at - 7), ", ");
      help.resize(at);
    }
    const std::string value = flag->DefaultValue();
    absl::StrAppend(&out, "  --", flag->Name(), " (", env, "default ",
                    flag->IsOfType<std::string>() ? absl::StrCat("\"", value, "\"") : value, ")\n",
                    Wrap(help, 6, 100));
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

// Environment defaults go in before the command line is parsed, so a flag given on the
// command line wins. Returns false (after printing why) on an unparsable value.
bool ApplyEnvironment() {
  if (const char* v = std::getenv("POSENC_LISTEN"); v != nullptr && *v != '\0') {
    absl::SetFlag(&FLAGS_listen, v);
  }
  if (const char* v = std::getenv("POSENC_BACKEND"); v != nullptr && *v != '\0') {
    absl::SetFlag(&FLAGS_backend, v);
  }
  if (const char* v = std::getenv("POSENC_TABLES"); v != nullptr && *v != '\0') {
    absl::SetFlag(&FLAGS_tables, v);
  }
  struct StringEnv {
    const char* name;
    absl::Flag<std::string>* flag;
  };
  for (const StringEnv& env :
       {StringEnv{"POSENC_TLS_CERT", &FLAGS_tls_cert}, StringEnv{"POSENC_TLS_KEY", &FLAGS_tls_key},
        StringEnv{"POSENC_TLS_CLIENT_CA", &FLAGS_tls_client_ca},
        StringEnv{"POSENC_METRICS_ADDRESS", &FLAGS_metrics_address},
        StringEnv{"POSENC_LOG_FORMAT", &FLAGS_log_format},
        StringEnv{"POSENC_LOG_LEVEL", &FLAGS_log_level}}) {
    if (const char* v = std::getenv(env.name); v != nullptr && *v != '\0') {
      absl::SetFlag(env.flag, v);
    }
  }
  struct IntEnv {
    const char* name;
    absl::Flag<int64_t>* flag;
  };
  for (const IntEnv& env : {IntEnv{"POSENC_MAX_MESSAGE_BYTES", &FLAGS_max_message_bytes},
                            IntEnv{"POSENC_MAX_OUTPUT_ELEMENTS", &FLAGS_max_output_elements},
                            IntEnv{"POSENC_THREADS", &FLAGS_threads},
                            IntEnv{"POSENC_CACHE_ENTRIES", &FLAGS_cache_entries},
                            IntEnv{"POSENC_CACHE_BYTES", &FLAGS_cache_bytes},
                            IntEnv{"POSENC_MAX_INFLIGHT_BYTES", &FLAGS_max_inflight_bytes},
                            IntEnv{"POSENC_MAX_HEAVY_CALLS", &FLAGS_max_heavy_calls},
                            IntEnv{"POSENC_CUDA_DEVICE", &FLAGS_cuda_device},
                            IntEnv{"POSENC_CUDA_SMALL_CALL_BYTES", &FLAGS_cuda_small_call_bytes}}) {
    const char* v = std::getenv(env.name);
    if (v == nullptr || *v == '\0') continue;
    int64_t value = 0;
    if (!absl::SimpleAtoi(v, &value)) {
      std::fprintf(stderr, "posenc-server: %s: expected an integer, got \"%s\"\n", env.name, v);
      return false;
    }
    absl::SetFlag(env.flag, value);
  }
  struct DurationEnv {
    const char* name;
    absl::Flag<absl::Duration>* flag;
  };
  for (const DurationEnv& env : {DurationEnv{"POSENC_DRAIN_TIMEOUT", &FLAGS_drain_timeout},
                                 DurationEnv{"POSENC_DRAIN_GRACE", &FLAGS_drain_grace}}) {
    const char* v = std::getenv(env.name);
    if (v == nullptr || *v == '\0') continue;
    absl::Duration value;
    if (!absl::ParseDuration(v, &value)) {
      std::fprintf(stderr, "posenc-server: %s: expected a duration like 10s or 500ms, got \"%s\"\n",
                   env.name, v);
      return false;
    }
    absl::SetFlag(env.flag, value);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ConfigureUsage();
  if (AnswerHelpOrVersion(argc, argv)) return 0;
  // The environment first, then the command line over it.
  if (!ApplyEnvironment()) return 2;
  if (!CheckCommandLine(argc, argv)) return 2;
  absl::ParseCommandLine(argc, argv);

  posenc::server::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_output_elements = absl::GetFlag(FLAGS_max_output_elements);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.tables_dir = absl::GetFlag(FLAGS_tables);
  // Integer flags with their ranges (the message says the expected range in words).
  struct IntRange {
    const char* name;
    absl::Flag<int64_t>* flag;
    int64_t min, max;
    const char* expected;
  };
  for (const IntRange& f : {
           IntRange{"threads", &FLAGS_threads, 0, 1024, "0 .. 1024"},
           IntRange{"cache_entries", &FLAGS_cache_entries, 0, 1 << 20, "0 .. 1048576"},
           IntRange{"cache_bytes", &FLAGS_cache_bytes, 0, int64_t{1} << 40, "0 .. 2^40"},
           IntRange{"max_inflight_bytes", &FLAGS_max_inflight_bytes, -1,
                    std::numeric_limits<int64_t>::max(), "-1, 0 or a byte count"},
           IntRange{"max_heavy_calls", &FLAGS_max_heavy_calls, -1, 4096, "-1 .. 4096"},
           IntRange{"cuda_device", &FLAGS_cuda_device, 0, 1023, "0 .. 1023"},
           IntRange{"cuda_small_call_bytes", &FLAGS_cuda_small_call_bytes, 0,
                    std::numeric_limits<int64_t>::max(), "0 or a byte count"},
       }) {
    const int64_t value = absl::GetFlag(*f.flag);
    if (value < f.min || value > f.max) {
      std::fprintf(stderr, "posenc-server: --%s: expected %s, got %lld\n", f.name, f.expected,
                   static_cast<long long>(value));
      return 2;
    }
  }
  options.threads = static_cast<int>(absl::GetFlag(FLAGS_threads));
  options.cache_entries = absl::GetFlag(FLAGS_cache_entries);
  options.cache_bytes = absl::GetFlag(FLAGS_cache_bytes);
  options.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  options.max_heavy_calls = absl::GetFlag(FLAGS_max_heavy_calls);
  options.cuda_device = static_cast<int>(absl::GetFlag(FLAGS_cuda_device));
  options.cuda_small_call_bytes = absl::GetFlag(FLAGS_cuda_small_call_bytes);
  const absl::Duration drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  for (const auto& [name, value] : {std::pair{"drain_timeout", drain_timeout},
                                    std::pair{"drain_grace", absl::GetFlag(FLAGS_drain_grace)}}) {
    if (value < absl::ZeroDuration() || value > absl::Hours(1)) {
      std::fprintf(stderr, "posenc-server: --%s: expected 0s .. 1h, got %s\n", name,
                   absl::FormatDuration(value).c_str());
      return 2;
    }
  }
  options.drain_grace = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_drain_grace));
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int32_t>::max()) {
    std::fprintf(stderr, "posenc-server: --max_message_bytes: expected 1 .. 2147483647, got %lld\n",
                 static_cast<long long>(options.max_message_bytes));
    return 2;
  }

  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  const auto log_format = posenc::server::ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  const auto log_level = posenc::server::ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  for (const absl::Status& status : {log_format.status(), log_level.status()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "posenc-server: %s\n", std::string(status.message()).c_str());
      return 2;
    }
  }
  posenc::server::ConfigureLogging(*log_format, *log_level);

  // Block the shutdown signals before any thread starts, so that every thread inherits the
  // mask and only the waiter below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = posenc::server::PosencServer::Start(options);
  if (!server.ok()) {
    spdlog::critical("posenc-server: {}", server.status().ToString());
    return 1;
  }
  const std::string address =
      options.listen_address.substr(0, options.listen_address.rfind(':') + 1) +
      std::to_string((*server)->port());
  // Scripts wait for this line (spdlog's default sink is stdout, flushed per line).
  spdlog::info(
      "posenc-server listening on {} (backend={} max_message_bytes={} "
      "max_output_elements={})",
      address, (*server)->backend_description(), options.max_message_bytes,
      options.max_output_elements);
  const char* transport = "plaintext";
  if (!options.tls_cert_file.empty()) {
    transport =
        options.tls_client_ca_file.empty() ? "TLS" : "mutual TLS (client certificates required)";
  }
  spdlog::info("transport: {}", transport);
  if ((*server)->metrics_port() != 0) {
    spdlog::info("metrics on http://{}{}/metrics",
                 options.metrics_address.substr(0, options.metrics_address.rfind(':') + 1),
                 (*server)->metrics_port());
  }

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
