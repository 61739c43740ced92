#include "proto/posenc/v1/freed_memory.h"

#include <algorithm>
#include <climits>
#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace posenc::v1 {

bool RetainFreedMemory(int64_t retain_bytes) {
#if defined(__GLIBC__)
  if (retain_bytes <= 0) return false;
  // mallopt answers 0 where it refuses, and sanitizers' allocators refuse every option.
  return mallopt(M_ARENA_MAX, 1) != 0 && mallopt(M_MMAP_MAX, 0) != 0 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<int64_t>(retain_bytes, INT_MAX))) != 0;
#else
  (void)retain_bytes;
  return false;
#endif
}

void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  (void)malloc_trim(0);
#endif
}

IdleMemoryRelease::IdleMemoryRelease(std::function<int64_t()> activity,
                                     std::function<int64_t()> in_flight,
                                     std::chrono::milliseconds idle)
    : activity_(std::move(activity)),
      in_flight_(std::move(in_flight)),
      idle_(idle),
      thread_([this] { Run(); }) {}

IdleMemoryRelease::~IdleMemoryRelease() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

int64_t IdleMemoryRelease::releases() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return releases_;
}

void IdleMemoryRelease::Run() {
  int64_t released_at = activity_();  // nothing to release before the first call
  int64_t seen = released_at;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, idle_, [this] { return stop_; })) {
    const int64_t now = activity_();
    if (now == seen && now != released_at && in_flight_() == 0) {
      lock.unlock();
      ReleaseFreedMemory();
      lock.lock();
      ++releases_;
      released_at = now;
    }
    seen = now;
  }
}

}  // namespace posenc::v1
