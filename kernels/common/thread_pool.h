// ThreadPool: a fixed set of worker threads for splitting one large request along rows/tokens.
//
// ParallelFor(n, grain, fn) calls fn(begin, end) over disjoint chunks covering [0, n), each at
// least `grain` long (but the last) and at most 16 grains, on the pool's workers and on the
// calling thread, and returns when every chunk is done. Work that fits in one chunk runs inline
// on the caller: no thread hop for small requests. Many callers may use one pool at once; their
// chunks interleave. Between chunks it polls the caller's Cancellation (cancellation.h): once that
// reports an error no further chunk starts, and ParallelFor returns that error.
//
// A worker that has run out of chunks, and a caller whose chunks are done while its helpers' are
// not, poll for up to 50 us before they block (thread_pool.cc's kSpin): back-to-back calls (a
// decode step after another) then find their helpers awake.
//
// Thread-safety: ParallelFor may be called concurrently from any number of threads.
#ifndef POSENC_KERNELS_COMMON_THREAD_POOL_H_
#define POSENC_KERNELS_COMMON_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "kernels/common/cancellation.h"

namespace posenc::kernels {

class ThreadPool {
 public:
  // The name of every worker thread (Linux: /proc/PID/task/TID/comm), so that a process's compute
  // threads can be counted (--threads).
  static constexpr const char kWorkerName[] = "posenc-compute";

  // `parallelism` counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(int parallelism);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int parallelism() const { return parallelism_; }

  absl::Status ParallelFor(int64_t n, int64_t grain,
                           const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Job;
  void WorkerLoop();
  static void RunChunks(Job& job);

  const int parallelism_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<int64_t> queued_{0};  // queue_.size(), read without mu_ by spinning workers
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_THREAD_POOL_H_
