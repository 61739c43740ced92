// posenc-server: serves posenc.v1.PositionEncoding (plus health and reflection) over gRPC.
//
// Flags, each with an environment variable used when the flag is not on the command line:
//   --listen               POSENC_LISTEN               host:port (default 0.0.0.0:50051)
//   --max_message_bytes    POSENC_MAX_MESSAGE_BYTES    largest message (default 256 MiB)
//   --max_output_elements  POSENC_MAX_OUTPUT_ELEMENTS  largest output tensor, elements
//   --backend              POSENC_BACKEND              cpu (default), reference or auto
//   --threads              POSENC_THREADS              threads per large request (0 = cores)
// SIGTERM/SIGINT: health goes NOT_SERVING, in-flight calls get 5 s, exit 0.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
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
          "Compute backend: cpu (optimized SIMD + threads), reference (the float64 oracle) or "
          "auto (the best available) (env POSENC_BACKEND)");
ABSL_FLAG(int64_t, threads, 0,
          "Threads one large request may use on the cpu backend; 0 = one per core; small "
          "requests always run on the calling thread (env POSENC_THREADS)");

namespace {

// Environment defaults go in before the command line is parsed, so a flag given on the
// command line wins. Returns false (after printing why) on an unparsable value.
bool ApplyEnvironment() {
  if (const char* v = std::getenv("POSENC_LISTEN"); v != nullptr && *v != '\0') {
    absl::SetFlag(&FLAGS_listen, v);
  }
  if (const char* v = std::getenv("POSENC_BACKEND"); v != nullptr && *v != '\0') {
    absl::SetFlag(&FLAGS_backend, v);
  }
  struct IntEnv {
    const char* name;
    absl::Flag<int64_t>* flag;
  };
  for (const IntEnv& env : {IntEnv{"POSENC_MAX_MESSAGE_BYTES", &FLAGS_max_message_bytes},
                            IntEnv{"POSENC_MAX_OUTPUT_ELEMENTS", &FLAGS_max_output_elements},
                            IntEnv{"POSENC_THREADS", &FLAGS_threads}}) {
    const char* v = std::getenv(env.name);
    if (v == nullptr || *v == '\0') continue;
    int64_t value = 0;
    if (!absl::SimpleAtoi(v, &value)) {
      std::fprintf(stderr, "posenc-server: %s: expected an integer, got \"%s\"\n", env.name, v);
      return false;
    }
    absl::SetFlag(env.flag, value);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("posenc-server: the posenc position-encoding gRPC service");
  if (!ApplyEnvironment()) return 2;
  absl::ParseCommandLine(argc, argv);

  posenc::server::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_output_elements = absl::GetFlag(FLAGS_max_output_elements);
  options.backend = absl::GetFlag(FLAGS_backend);
  if (absl::GetFlag(FLAGS_threads) < 0 || absl::GetFlag(FLAGS_threads) > 1024) {
    std::fprintf(stderr, "posenc-server: --threads: expected 0 .. 1024, got %lld\n",
                 static_cast<long long>(absl::GetFlag(FLAGS_threads)));
    return 2;
  }
  options.threads = static_cast<int>(absl::GetFlag(FLAGS_threads));
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int32_t>::max()) {
    std::fprintf(stderr, "posenc-server: --max_message_bytes: expected 1 .. 2147483647, got %lld\n",
                 static_cast<long long>(options.max_message_bytes));
    return 2;
  }

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

  std::thread waiter([&signals, &server] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("signal {}: draining (health NOT_SERVING, 5 s for in-flight calls)", signal);
    (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  });
  (*server)->Wait();
  waiter.join();
  spdlog::info("posenc-server stopped");
  return 0;
}
