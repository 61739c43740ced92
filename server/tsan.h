// ThreadSanitizer hand-off annotations for objects that gRPC passes between threads.
// Debian's gRPC is not built with -fsanitize=thread, so TSan cannot see the synchronization inside
// it: an object made on the thread that finishes a call and destroyed on the thread that runs
// OnDone looks racy. TsanRelease before the hand-off and TsanAcquire after it tell TSan what gRPC
// guarantees. Both compile to nothing outside TSan builds (the tsan preset).
#ifndef POSENC_SERVER_TSAN_H_
#define POSENC_SERVER_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define POSENC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define POSENC_TSAN 1
#endif
#endif

#ifdef POSENC_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace posenc::server {

inline void TsanRelease([[maybe_unused]] void* handed_off) {
#ifdef POSENC_TSAN
  __tsan_release(handed_off);
#endif
}

inline void TsanAcquire([[maybe_unused]] void* handed_off) {
#ifdef POSENC_TSAN
  __tsan_acquire(handed_off);
#endif
}

}  // namespace posenc::server

#endif  // POSENC_SERVER_TSAN_H_
