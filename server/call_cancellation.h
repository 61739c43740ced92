// CallCancellation: the kernels::Cancellation of one gRPC call (its deadline, client cancel).
//
// call_runner.cc installs one around every handler (kernels::ScopedCancellation), so the optimized
// backends stop between chunks of work once the client's deadline has passed or the call was
// cancelled (by the client, or by the server when a drain runs past its deadline), and the call
// ends with DEADLINE_EXCEEDED or CANCELLED instead of finishing work nobody will read.
//
// Thread-safety: Check() may be called from any thread, concurrently (the kernels' pool workers
// poll it). grpc::ServerContextBase::IsCancelled() is documented thread-safe and "always safe to
// call when using sync or callback API" (grpcpp/server_context.h, gRPC 1.51). The context must
// outlive the CallCancellation (it does: the handler runs before the call is finished).
#ifndef POSENC_SERVER_CALL_CANCELLATION_H_
#define POSENC_SERVER_CALL_CANCELLATION_H_

#include <grpcpp/server_context.h>

#include <atomic>
#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "kernels/common/cancellation.h"

namespace posenc::server {

class CallCancellation final : public kernels::Cancellation {
 public:
  // `start`: when the call's work began (for the message). `deadline`: the call's deadline
  // (time_point::max() when none); `context` may be null (deadline only, for tests).
  // `abort_at_ns` (optional): a server-wide time (system_clock nanoseconds since the epoch) after
  // which every call's work stops with CANCELLED: the drain deadline of a shutting-down server.
  CallCancellation(const grpc::ServerContextBase* context,
                   std::chrono::system_clock::time_point deadline,
                   std::chrono::steady_clock::time_point start,
                   const std::atomic<int64_t>* abort_at_ns = nullptr);
  // The call's own deadline and cancellation (and the server's abort time); work began now.
  explicit CallCancellation(const grpc::ServerContextBase& context,
                            const std::atomic<int64_t>* abort_at_ns = nullptr);

  // OK while the call is live; else DEADLINE_EXCEEDED ("deadline passed after 12.3 ms of
  // work; the work was abandoned") or CANCELLED ("the call was cancelled after ...").
  absl::Status Check() const override;

 private:
  absl::Status Stopped(absl::StatusCode code) const;

  const grpc::ServerContextBase* const context_;
  const std::chrono::system_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point start_;
  const std::atomic<int64_t>* const abort_at_ns_;
  // Set on the first failed Check, so later polls (many threads, every chunk) are one load.
  mutable std::atomic<int> stopped_code_{0};
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_CALL_CANCELLATION_H_
