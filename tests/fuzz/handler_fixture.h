// What the handler fuzz targets (rpc_fuzz, inference_fuzz, shm_fuzz) share: a CPU backend of one
// thread, a RoPE frequency cache and a HandlerContext with small limits, so that a run stays fast
// (an output the limits should have refused shows up as an allocation over -malloc_limit_mb);
// and the check every target makes of a handler's status.
#ifndef POSENC_TESTS_FUZZ_HANDLER_FIXTURE_H_
#define POSENC_TESTS_FUZZ_HANDLER_FIXTURE_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/rope/frequency_cache.h"
#include "server/handlers.h"

namespace posenc::server {

struct HandlerFixture {
  HandlerFixture() {
    kernels::CpuBackendOptions options;
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<kernels::Backend>> cpu = kernels::MakeCpuBackend(options);
    if (!cpu.ok()) std::abort();
    backend = *std::move(cpu);
    ctx.backend = backend.get();
    ctx.limits.max_output_elements = int64_t{1} << 20;
    ctx.limits.max_message_bytes = int64_t{16} << 20;
    ctx.rope_cache = &cache;
  }
  std::unique_ptr<kernels::Backend> backend;
  kernels::RopeFrequencyCache cache{64, size_t{1} << 20};
  HandlerContext ctx;
};

// A handler's status checked: every error says what was wrong (an empty message aborts).
// POSENC_FUZZ_VERBOSE=1 prints each input's status (to check that the seeds succeed). Returns
// status.ok().
inline bool CheckHandlerStatus(const std::string& what, const grpc::Status& status) {
  static const bool verbose = std::getenv("POSENC_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s: %d %s\n", what.c_str(), static_cast<int>(status.error_code()),
                 status.error_message().c_str());
  }
  if (!status.ok() && status.error_message().empty()) std::abort();
  return status.ok();
}

}  // namespace posenc::server

#endif  // POSENC_TESTS_FUZZ_HANDLER_FIXTURE_H_
