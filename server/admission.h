// Admission control: what bounds the memory and the CPU that calls in flight can take.
//
// Two limits, both applied when a handler knows its planned outputs (CheckOutputLimits calls
// AdmitCurrentCall), before anything proportional to them is allocated:
//   - bytes in flight (--max_inflight_bytes): each call holds its request's bytes plus twice its
//     planned response bytes (the response message and its serialization), plus the backend's
//     host staging (the cuda backend's pinned buffer, about the response again), until gRPC is
//     done with it (the call's reactor OnDone); a call that would go over gets RESOURCE_EXHAUSTED;
//   - heavy calls at once (--max_heavy_calls): a call whose outputs are over kHeavyCallBytes
//     takes a slot for its compute; without a free slot within kHeavyCallWait it gets
//     RESOURCE_EXHAUSTED. The rest of the machine stays with small calls and health checks.
// RESOURCE_EXHAUSTED from admission is retryable: the message says so and names the limit.
//
// Thread-safety: AdmissionControl is safe for concurrent use; a CallAdmission belongs to one
// call (its handler thread installs it with ScopedCallAdmission).
#ifndef POSENC_SERVER_ADMISSION_H_
#define POSENC_SERVER_ADMISSION_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace posenc::server {

struct AdmissionOptions {
  int64_t max_inflight_bytes = 0;  // 0: no byte bound
  int64_t max_heavy_calls = 0;     // 0: no bound on heavy calls
};

// Outputs above this many bytes make a call heavy (a few milliseconds of compute and more).
inline constexpr int64_t kHeavyCallBytes = int64_t{4} << 20;
// How long a heavy call may wait for a slot before it is refused.
inline constexpr std::chrono::milliseconds kHeavyCallWait{100};

// The default byte bound: a quarter of the memory this process may use (its cgroup's memory.max,
// else the machine's), and at least three maximal messages (a request and a response twice).
int64_t DefaultMaxInflightBytes(int64_t max_message_bytes);

class AdmissionControl {
 public:
  explicit AdmissionControl(const AdmissionOptions& options) : options_(options) {}

  const AdmissionOptions& options() const { return options_; }
  int64_t inflight_bytes() const;
  int64_t heavy_calls() const;

  // Takes `bytes` of the in-flight budget, or RESOURCE_EXHAUSTED naming the limit.
  absl::Status AcquireBytes(int64_t bytes, int64_t request_bytes);
  void ReleaseBytes(int64_t bytes);
  // Takes a heavy-call slot (waiting at most kHeavyCallWait), or RESOURCE_EXHAUSTED.
  absl::Status AcquireHeavy();
  void ReleaseHeavy();

 private:
  const AdmissionOptions options_;
  mutable std::mutex mu_;
  std::condition_variable slot_freed_;
  int64_t bytes_ = 0;
  int64_t heavy_ = 0;
};

// One call's admission: its request bytes from the start, its planned outputs once admitted.
// Releases its bytes when destroyed (at the call's OnDone) and its heavy slot when the handler
// ends (EndCompute) or at the latest when destroyed.
class CallAdmission {
 public:
  CallAdmission(AdmissionControl* control, int64_t request_bytes)
      : control_(control), request_bytes_(request_bytes) {}
  ~CallAdmission();
  CallAdmission(const CallAdmission&) = delete;
  CallAdmission& operator=(const CallAdmission&) = delete;

  // Admits planned outputs of `output_bytes`, and `staging_bytes` more that the backend holds on
  // the host while it computes (Backend::HostStagingBytes) (CheckOutputLimits and AdmitOutputs
  // call this through AdmitCurrentCall); at most once a call.
  absl::Status Admit(int64_t output_bytes, int64_t staging_bytes = 0);
  void EndCompute();
  // True when Admit refused the call (busy: worth retrying shortly, unlike a hard limit).
  bool refused() const { return refused_; }
  // The backend that ran the call (AdmitOutputs notes it); empty before, or for calls that ran
  // none. Names are the backends' static strings.
  absl::string_view backend() const { return backend_; }
  void set_backend(absl::string_view backend) { backend_ = backend; }

 private:
  AdmissionControl* const control_;  // null: admit everything
  const int64_t request_bytes_;
  int64_t held_bytes_ = 0;
  bool heavy_ = false;
  bool refused_ = false;
  absl::string_view backend_;
};

// The calling thread's call admission (null outside a call), for CheckOutputLimits.
absl::Status AdmitCurrentCall(int64_t output_bytes, int64_t staging_bytes = 0);
// Notes the backend that runs the calling thread's call (nothing outside a call).
void NoteCurrentCallBackend(absl::string_view backend);

class ScopedCallAdmission {
 public:
  explicit ScopedCallAdmission(CallAdmission* admission);
  ~ScopedCallAdmission();
  ScopedCallAdmission(const ScopedCallAdmission&) = delete;
  ScopedCallAdmission& operator=(const ScopedCallAdmission&) = delete;

 private:
  CallAdmission* const previous_;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_ADMISSION_H_
