// Freed memory kept in the process for reuse, instead of going back to the operating system at
// once (issue #20, "the wire at the link's speed"). Built into posenc_proto.
//
// A large message's buffers (gRPC's parse of a tensor into a fresh std::string, a response the
// client receives) are allocated and freed once per call. With glibc's defaults each one over
// 32 MiB (and, on a thread's own arena, over 64 MiB or beside another) is a fresh mapping whose
// pages the kernel zeroes on first touch (clear_page_erms was a quarter of both sides' CPU in a
// 128 MiB ApplyRope); freed, it goes back to the system. RetainFreedMemory makes the allocator
// serve every size from one heap (one arena, no separate mappings) and keep up to `retain_bytes`
// of free memory at its top, so that the next call's buffers reuse pages already faulted in.
//
// The cost: the process's resident memory stays at its peak (what its largest calls held at
// once, plus at most `retain_bytes` at the heap's top) until ReleaseFreedMemory, which returns
// every free page; IdleMemoryRelease calls it after a quiet spell. One arena means threads share
// the allocator's lock (posenc's calls allocate a few large buffers, not many small ones).
//
// Thread-safety: RetainFreedMemory at start-up, before other threads exist; ReleaseFreedMemory
// from any thread.
#ifndef POSENC_PROTO_POSENC_V1_FREED_MEMORY_H_
#define POSENC_PROTO_POSENC_V1_FREED_MEMORY_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace posenc::v1 {

// The default of posenc-server's --retain_free_memory_bytes.
inline constexpr int64_t kDefaultRetainFreeBytes = int64_t{1} << 30;

// Sets the process's allocator as above, keeping up to `retain_bytes` (capped at 2 GiB - 1) free
// at the heap's top; false (nothing changed) when `retain_bytes` <= 0 or the allocator is not
// glibc's (sanitizer builds replace it too).
bool RetainFreedMemory(int64_t retain_bytes);

// Returns the process's free memory to the system now (glibc's malloc_trim); a no-op elsewhere.
void ReleaseFreedMemory();

// A thread calling ReleaseFreedMemory once work has stopped for `idle`: `activity` returns how
// many calls have started so far and `in_flight` how many run now; after a check that sees calls
// started since the last release, none in flight and none started for `idle`, it releases.
class IdleMemoryRelease {
 public:
  IdleMemoryRelease(std::function<int64_t()> activity, std::function<int64_t()> in_flight,
                    std::chrono::milliseconds idle);
  ~IdleMemoryRelease();
  IdleMemoryRelease(const IdleMemoryRelease&) = delete;
  IdleMemoryRelease& operator=(const IdleMemoryRelease&) = delete;

  // How many times it has released (for tests).
  int64_t releases() const;

 private:
  void Run();

  const std::function<int64_t()> activity_;
  const std::function<int64_t()> in_flight_;
  const std::chrono::milliseconds idle_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int64_t releases_ = 0;
  std::thread thread_;
};

}  // namespace posenc::v1

#endif  // POSENC_PROTO_POSENC_V1_FREED_MEMORY_H_
