// `posenc bench`: a closed-loop load generator built on the public client library.
//
// --concurrency N threads each make one synchronous call after another (the client library has
// no asynchronous calls; the threads share its one channel) for --duration D or until --count N
// calls are done, after an unmeasured --warmup. One op, or `mix`: round-robin over all eight, so
// a long run touches every RPC (the soak test, tests/soak/soak.sh). The summary: calls, errors
// by status code, QPS, latency percentiles of the successful calls, and MB/s of tensor payload
// (request + response). Any error makes the exit code 1, after the summary; Ctrl-C stops the run
// early and still prints it (exit code 130 when nothing failed).
//
// Thread-safety: RunBench is called once, from the CLI's main thread; it starts and joins its
// own worker threads.
#ifndef POSENC_CLIENT_CLI_BENCH_H_
#define POSENC_CLIENT_CLI_BENCH_H_

#include "absl/status/statusor.h"
#include "client/cli/flags.h"
#include "client/cli/output.h"
#include "posenc/client.h"

namespace posenc::cli {

// The flags of `posenc bench`; its command also takes the RoPE configuration flags of
// rope-cache (read with ReadRopeConfigFlags(), commands.h).
extern const FlagGroup kBenchFlags;
// The help text of `posenc bench --help` (examples and what is measured).
extern const char kBenchDetails[];

absl::StatusOr<CommandOutput> RunBench(const ParsedFlags& flags, const client::Client& client);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_BENCH_H_
