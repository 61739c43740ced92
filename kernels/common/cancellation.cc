#include "kernels/common/cancellation.h"

namespace posenc::kernels {
namespace {
thread_local const Cancellation* current = nullptr;
}  // namespace

const Cancellation* CurrentCancellation() { return current; }

ScopedCancellation::ScopedCancellation(const Cancellation* cancellation) : previous_(current) {
  current = cancellation;
}

ScopedCancellation::~ScopedCancellation() { current = previous_; }

}  // namespace posenc::kernels
