// Cancellation of long-running kernel work (deadlines, cancelled calls).
//
// The caller of a backend op installs a Cancellation for the current thread with
// ScopedCancellation; the optimized backends poll it between chunks of work (a few hundred
// microseconds each) on every thread working for the call, stop early, and return its status
// (CANCELLED or DEADLINE_EXCEEDED). Outputs of a stopped op are partly written and must be
// discarded. The reference backend does not poll (it is the oracle, not a serving path).
//
// Thread-safety: Check() may be called from any thread, concurrently.
#ifndef POSENC_KERNELS_COMMON_CANCELLATION_H_
#define POSENC_KERNELS_COMMON_CANCELLATION_H_

#include "absl/status/status.h"

namespace posenc::kernels {

class Cancellation {
 public:
  virtual ~Cancellation() = default;
  // OK to go on; otherwise the status to stop with.
  virtual absl::Status Check() const = 0;
};

// The calling thread's cancellation, or null.
const Cancellation* CurrentCancellation();

// Installs `cancellation` for the calling thread for the scope's lifetime (nesting restores).
class ScopedCancellation {
 public:
  explicit ScopedCancellation(const Cancellation* cancellation);
  ~ScopedCancellation();
  ScopedCancellation(const ScopedCancellation&) = delete;
  ScopedCancellation& operator=(const ScopedCancellation&) = delete;

 private:
  const Cancellation* previous_;
};

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_CANCELLATION_H_
