#include "kernels/common/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace posenc::kernels {
namespace {

// How long a worker that has run out of chunks, and a caller whose helpers are still running,
// poll before they block on a condition variable. Waking a blocked thread costs tens of
// microseconds on a VM (a futex wake, and an idle virtual CPU brought back): the decode step
// [64,1,32,128] on two threads took 48-50 us a call with the workers blocking between calls, more
// than on one (42), and 24-25 us with them polling 50 us (BENCHMARKS.md, "The pool's workers
// poll before they sleep"). Bounded, so an idle pool costs nothing after it.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` for up to kSpin; whether it became true.
template <typename Ready>
bool SpinUntil(Ready ready) {
  if (ready()) return true;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

}  // namespace

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn;
  const Cancellation* cancellation = nullptr;
  std::atomic<bool> stopped{false};
  int64_t n = 0;
  int64_t chunk = 0;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
};

ThreadPool::ThreadPool(int parallelism) : parallelism_(std::max(1, parallelism)) {
  for (int i = 1; i < parallelism_; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
#if defined(__linux__)
    pthread_setname_np(workers_.back().native_handle(), kWorkerName);  // named before we return
#endif
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks(Job& job) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1);
    if (c >= job.chunks) return;
    if (job.cancellation != nullptr && !job.stopped.load(std::memory_order_relaxed) &&
        !job.cancellation->Check().ok()) {
      job.stopped.store(true, std::memory_order_relaxed);
    }
    if (!job.stopped.load(std::memory_order_relaxed)) {
      const int64_t begin = c * job.chunk;
      (*job.fn)(begin, std::min(job.n, begin + job.chunk));
    }
    if (job.done.fetch_add(1) + 1 == job.chunks) {
      std::lock_guard<std::mutex> lock(job.mu);
      job.cv.notify_all();
    }
  }
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(static_cast<int64_t>(queue_.size()), std::memory_order_release);
    }
    RunChunks(*job);
  }
}

absl::Status ThreadPool::ParallelFor(int64_t n, int64_t grain,
                                     const std::function<void(int64_t, int64_t)>& fn) {
  const Cancellation* cancellation = CurrentCancellation();
  if (cancellation != nullptr) {
    if (absl::Status s = cancellation->Check(); !s.ok()) return s;
  }
  if (n <= 0) return absl::OkStatus();
  grain = std::max<int64_t>(1, grain);
  if (n <= grain) {
    fn(0, n);
    return absl::OkStatus();
  }
  // Chunks of 1..16 grains: enough chunks for every thread, short enough to poll cancellation.
  const int64_t per_thread = (n + parallelism_ - 1) / parallelism_;
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->cancellation = cancellation;
  job->n = n;
  job->chunk = std::clamp<int64_t>(per_thread, grain, 16 * grain);
  job->chunks = (n + job->chunk - 1) / job->chunk;
  if (parallelism_ > 1 && job->chunks > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t helpers = std::min<int64_t>(parallelism_ - 1, job->chunks - 1);
    for (int64_t i = 0; i < helpers; ++i) queue_.push_back(job);
    queued_.store(static_cast<int64_t>(queue_.size()), std::memory_order_release);
  }
  cv_.notify_all();
  RunChunks(*job);
  if (!SpinUntil([&] { return job->done.load(std::memory_order_acquire) == job->chunks; })) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == job->chunks; });
  }
  if (job->stopped.load()) return cancellation->Check();
  return absl::OkStatus();
}

}  // namespace posenc::kernels
