#include "server/call_cancellation.h"

#include "absl/strings/str_format.h"

namespace posenc::server {

CallCancellation::CallCancellation(const grpc::ServerContextBase* context,
                                   std::chrono::system_clock::time_point deadline,
                                   std::chrono::steady_clock::time_point start,
                                   const std::atomic<int64_t>* abort_at_ns)
    : context_(context), deadline_(deadline), start_(start), abort_at_ns_(abort_at_ns) {}

CallCancellation::CallCancellation(const grpc::ServerContextBase& context,
                                   const std::atomic<int64_t>* abort_at_ns)
    : CallCancellation(&context, context.deadline(), std::chrono::steady_clock::now(),
                       abort_at_ns) {}

absl::Status CallCancellation::Check() const {
  if (const int code = stopped_code_.load(std::memory_order_relaxed); code != 0) {
    return Stopped(static_cast<absl::StatusCode>(code));
  }
  absl::StatusCode code = absl::StatusCode::kOk;
  // The deadline first: when it passes, gRPC also marks the call cancelled.
  if (deadline_ != std::chrono::system_clock::time_point::max() &&
      std::chrono::system_clock::now() >= deadline_) {
    code = absl::StatusCode::kDeadlineExceeded;
  } else if (context_ != nullptr && context_->IsCancelled()) {
    code = absl::StatusCode::kCancelled;
  } else if (abort_at_ns_ != nullptr &&
             std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                     .count() >= abort_at_ns_->load(std::memory_order_relaxed)) {
    // The server's drain deadline passed: gRPC cancels the call, but does not always mark the
    // callback context cancelled while its handler still runs, so the server says so itself.
    code = absl::StatusCode::kCancelled;
  } else {
    return absl::OkStatus();
  }
  int expected = 0;
  stopped_code_.compare_exchange_strong(expected, static_cast<int>(code),
                                        std::memory_order_relaxed);
  return Stopped(static_cast<absl::StatusCode>(stopped_code_.load(std::memory_order_relaxed)));
}

absl::Status CallCancellation::Stopped(absl::StatusCode code) const {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  if (code == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(
        absl::StrFormat("deadline passed after %.1f ms of work; the work was abandoned", ms));
  }
  return absl::CancelledError(absl::StrFormat(
      "the call was cancelled (by the client, or by a server drain past its deadline) after "
      "%.1f ms of work; the work was abandoned",
      ms));
}

}  // namespace posenc::server
