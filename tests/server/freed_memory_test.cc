// IdleMemoryRelease (proto/posenc/v1/freed_memory.h): hands free memory back only after calls
// ran and then stopped for the whole quiet spell, never while one is in flight.
#include "proto/posenc/v1/freed_memory.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "gtest/gtest.h"

namespace posenc::v1 {
namespace {

using std::chrono::milliseconds;

// Waits up to 5 s for `release` to reach `n` releases.
bool WaitForReleases(const IdleMemoryRelease& release, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (release.releases() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

TEST(FreedMemoryTest, NothingIsRetainedForZeroBytes) {
  EXPECT_FALSE(RetainFreedMemory(0));
  EXPECT_FALSE(RetainFreedMemory(-1));
  ReleaseFreedMemory();  // always safe
}

TEST(IdleMemoryReleaseTest, ReleasesOnceAfterCallsStop) {
  std::atomic<int64_t> started{0}, in_flight{0};
  IdleMemoryRelease release([&] { return started.load(); }, [&] { return in_flight.load(); },
                            milliseconds(10));
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(release.releases(), 0) << "no call ran: nothing to hand back";
  started = 3;
  ASSERT_TRUE(WaitForReleases(release, 1));
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(release.releases(), 1) << "no call since the release: once is enough";
  started = 4;
  ASSERT_TRUE(WaitForReleases(release, 2));
}

TEST(IdleMemoryReleaseTest, NeverWhileACallIsInFlight) {
  std::atomic<int64_t> started{0}, in_flight{1};
  IdleMemoryRelease release([&] { return started.load(); }, [&] { return in_flight.load(); },
                            milliseconds(10));
  std::this_thread::sleep_for(milliseconds(30));  // its first look: no call yet
  started = 1;
  std::this_thread::sleep_for(milliseconds(80));
  EXPECT_EQ(release.releases(), 0);
  in_flight = 0;
  ASSERT_TRUE(WaitForReleases(release, 1));
}

TEST(IdleMemoryReleaseTest, NotWhileCallsKeepStarting) {
  std::atomic<int64_t> started{0}, in_flight{0};
  std::atomic<bool> busy{true};
  IdleMemoryRelease release([&] { return started.load(); }, [&] { return in_flight.load(); },
                            milliseconds(40));
  std::thread caller([&] {
    while (busy) {
      ++started;
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(release.releases(), 0) << "a call started within every quiet spell";
  busy = false;
  caller.join();
  ASSERT_TRUE(WaitForReleases(release, 1));
}

}  // namespace
}  // namespace posenc::v1
