// The thread pool: coverage of [0, n) in chunks, inline small work, and cancellation polling.
#include "kernels/common/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/cancellation.h"
#include "kernels/ops.h"

namespace posenc::kernels {
namespace {

// Reports DEADLINE_EXCEEDED from the `after`-th check on.
class CountdownCancellation final : public Cancellation {
 public:
  explicit CountdownCancellation(int after) : left_(after) {}
  absl::Status Check() const override {
    if (left_.fetch_sub(1) > 0) return absl::OkStatus();
    return absl::DeadlineExceededError("deadline passed");
  }

 private:
  mutable std::atomic<int> left_;
};

TEST(ThreadPoolTest, CoversEveryIndexOnceAcrossThreads) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(10007);
    ASSERT_TRUE(pool.ParallelFor(10007, 13,
                                 [&](int64_t b, int64_t e) {
                                   for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
                                 })
                    .ok());
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPoolTest, SmallWorkRunsInlineOnTheCaller) {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  std::thread::id ran;
  ASSERT_TRUE(
      pool.ParallelFor(100, 1000, [&](int64_t, int64_t) { ran = std::this_thread::get_id(); })
          .ok());
  EXPECT_EQ(ran, caller);
}

TEST(ThreadPoolTest, StopsStartingChunksOnceCancelled) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    CountdownCancellation cancel(3);
    ScopedCancellation scope(&cancel);
    std::atomic<int64_t> done{0};
    absl::Status s = pool.ParallelFor(1 << 20, 1, [&](int64_t b, int64_t e) { done += e - b; });
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_LT(done.load(), 1 << 20);
  }
  EXPECT_EQ(CurrentCancellation(), nullptr);  // the scope restored the previous (none)
}

TEST(ThreadPoolTest, CpuBackendReturnsTheCancellationStatus) {
  auto backend = MakeCpuBackend({2, ""});
  ASSERT_TRUE(backend.ok());
  const AlibiBiasParams p{.num_heads = 8, .q_len = 512, .k_len = 512};
  auto plan = PlanAlibiBias({.params = p, .output_dtype = DType::kFloat32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<float> out(8 * 512 * 512);
  std::vector<double> slopes(8);
  TensorView view{plan->bias.dtype, plan->bias.shape, out.data()};                // [8, 512, 512]
  TensorView slopes_view{plan->slopes.dtype, plan->slopes.shape, slopes.data()};  // FLOAT64 [8]
  CountdownCancellation cancel(1);
  ScopedCancellation scope(&cancel);
  EXPECT_EQ(RunAlibiBias(**backend, *plan, view, slopes_view).code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace posenc::kernels
