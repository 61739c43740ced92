// Scale-out and faults, with real processes: three posenc-server binaries on loopback ports and
// one posenc::client::Client with round_robin over all three (an address list, as a headless
// Service's DNS name gives it), under a bounded load (a call count and a time limit):
//   1. one server is SIGKILLed and later restarted on its port: no call fails (UNAVAILABLE is
//      retried on the others) and every live server serves a share (read from its /metrics);
//   2. one server gets SIGTERM while a long call runs on it: the long call completes, the load
//      moves to the others without a failed call, and the server exits 0 within its drain
//      timeout.
// No containers: this is what a Deployment of identical replicas does, minus Kubernetes.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "posenc/client.h"
#include "tests/common/sanitized.h"
#include "tests/server/server_process.h"

namespace posenc::server {
namespace {

using Clock = std::chrono::steady_clock;
using testing::HttpGet;
using testing::ServerProcess;

constexpr char kDrainTimeout[] = "20s";
constexpr double kDrainTimeoutS = 20;

// The long call of the drain phase: 2^18 positions x 256 cos/sin pairs in FLOAT16 (256 MiB, about
// 1-3 s on one thread); a quarter under the sanitizers, which make it ~5x slower. (The test once
// asked GCC's __SANITIZE_ADDRESS__, which clang 14 does not define: the clang ASan tree then ran
// the full size, 16-20 s beside the load, against the 20 s drain timeout.)
constexpr int64_t kLongPositions =
    ::posenc::testing::kSanitizedBuild ? int64_t{1} << 16 : int64_t{1} << 18;

// One replica: the process and its ports (the gRPC port stays the same across a restart, as a
// pod's address would; the metrics port is new each start).
struct Replica {
  std::unique_ptr<ServerProcess> process;
  int port = 0;
  int metrics_port = 0;
};

// Starts posenc-server on 127.0.0.1:`port` (0: any free port) with metrics on a free port.
// Large limits: the long call of the drain phase returns 256 MiB.
bool Start(Replica* replica, int port) {
  replica->process = std::make_unique<ServerProcess>(std::vector<std::string>{
      absl::StrCat("--listen=127.0.0.1:", port), "--metrics_address=127.0.0.1:0", "--backend=cpu",
      "--threads=1", "--drain_grace=500ms", absl::StrCat("--drain_timeout=", kDrainTimeout),
      "--max_message_bytes=1073741824", "--max_output_elements=268435456", "--max_heavy_calls=0",
      "--max_inflight_bytes=0"});
  if (!replica->process->started()) return false;
  replica->port = replica->process->WaitForPort(std::chrono::seconds(30));
  replica->metrics_port = replica->process->WaitForMetricsPort(std::chrono::seconds(30));
  return replica->port > 0 && replica->metrics_port > 0 && (port == 0 || replica->port == port);
}

// OK calls of the load's methods this process has finished: posenc_requests_total{code="OK"}
// summed over AlibiSlopes and RopeCache; -1 when /metrics does not answer.
int64_t OkCalls(const Replica& replica) {
  const std::string http = HttpGet(replica.metrics_port, "/metrics");
  const size_t body = http.find("\r\n\r\n");
  if (http.find("200 OK") == std::string::npos || body == std::string::npos) return -1;
  int64_t total = 0;
  std::istringstream lines(http.substr(body));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("posenc_requests_total{", 0) != 0) continue;
    if (line.find("code=\"OK\"") == std::string::npos) continue;
    if (line.find("method=\"AlibiSlopes\"") == std::string::npos &&
        line.find("method=\"RopeCache\"") == std::string::npos) {
      continue;
    }
    total += static_cast<int64_t>(std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return total;
}

// A bounded load: `threads` threads calling AlibiSlopes and RopeCache in turn on one shared
// client and checking each result, until Stop(), kMaxCalls calls or kMaxSeconds.
class Load {
 public:
  static constexpr int64_t kMaxCalls = 200'000;
  static constexpr double kMaxSeconds = 120;

  Load(const client::Client* client, int threads) : client_(client), start_(Clock::now()) {
    for (int t = 0; t < threads; ++t) {
      workers_.emplace_back([this, t] { Run(t); });
    }
  }
  ~Load() { Stop(); }

  void Stop() {
    stop_ = true;
    for (std::thread& w : workers_) {
      if (w.joinable()) w.join();
    }
  }

  int64_t ok() const { return ok_.load(); }
  int64_t failed() const { return failed_.load(); }
  int64_t done() const { return ok() + failed(); }
  std::string failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }

  // Waits until `n` more calls than now have finished; false after `timeout` (or when the
  // load stopped on its own bounds).
  bool WaitForMoreCalls(int64_t n, std::chrono::seconds timeout) {
    const int64_t target = done() + n;
    const auto end = Clock::now() + timeout;
    while (done() < target) {
      if (Clock::now() > end || finished_) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  void Run(int thread) {
    for (int64_t i = 0; !stop_; ++i) {
      if (done() >= kMaxCalls ||
          std::chrono::duration<double>(Clock::now() - start_).count() > kMaxSeconds) {
        finished_ = true;
        return;
      }
      absl::Status status;
      if ((i + thread) % 2 == 0) {
        const auto slopes = client_->AlibiSlopes({.num_heads = 8});
        status = slopes.status();
        // ALiBi slopes of 8 heads: 2^-1 .. 2^-8.
        if (status.ok() &&
            (slopes->shape != std::vector<int64_t>{8} || slopes->ToDoubles().front() != 0.5 ||
             slopes->ToDoubles().back() != 1.0 / 256)) {
          status = absl::InternalError("wrong slopes");
        }
      } else {
        client::RopeCacheOptions rope;
        rope.positions = client::Positions::Range(0, 256);
        rope.config.head_dim = 64;
        const auto cache = client_->RopeCache(rope);
        status = cache.status();
        // Position 0: cos 1, sin 0.
        if (status.ok() &&
            (cache->cos.shape != std::vector<int64_t>{256, 32} ||
             cache->cos.ToDoubles().front() != 1.0 || cache->sin.ToDoubles().front() != 0.0)) {
          status = absl::InternalError("wrong cos/sin cache");
        }
      }
      if (status.ok()) {
        ++ok_;
      } else {
        ++failed_;
        std::lock_guard<std::mutex> lock(mu_);
        if (failures_.size() < 2000) absl::StrAppend(&failures_, status.ToString(), "\n");
      }
    }
  }

  const client::Client* client_;
  const Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::atomic<int64_t> ok_{0};
  std::atomic<int64_t> failed_{0};
  std::mutex mu_;
  std::string failures_;
  std::vector<std::thread> workers_;
};

TEST(ScaleOutTest, RoundRobinSurvivesKillRestartAndDrain) {
  const auto test_start = Clock::now();
  std::vector<Replica> replicas(3);
  for (Replica& r : replicas) {
    ASSERT_TRUE(Start(&r, 0)) << r.process->output();
  }
  const std::string target =
      absl::StrCat("ipv4:127.0.0.1:", replicas[0].port, ",127.0.0.1:", replicas[1].port,
                   ",127.0.0.1:", replicas[2].port);
  client::ClientOptions options;
  options.max_attempts = 5;
  options.timeout = std::chrono::seconds(20);
  auto client = client::Client::Connect(target, options);
  ASSERT_TRUE(client.ok()) << client.status();

  Load load(client->get(), 4);
  ASSERT_TRUE(load.WaitForMoreCalls(300, std::chrono::seconds(60))) << load.failures();

  // 1. SIGKILL replica 1 under load; calls go on; restart it on its port after 1 s.
  const int killed_port = replicas[1].port;
  ASSERT_EQ(kill(replicas[1].process->pid(), SIGKILL), 0);
  ASSERT_TRUE(replicas[1].process->WaitForExit(std::chrono::seconds(10)).has_value());
  const int64_t before_kill = load.done();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t while_down = load.done() - before_kill;
  EXPECT_GT(while_down, 0) << "no call finished while a replica was down";
  ASSERT_TRUE(Start(&replicas[1], killed_port)) << replicas[1].process->output();

  // Every live replica (the restarted one included) serves a share of the next calls, once
  // the client has reconnected to it (its first call; bounded).
  for (int i = 0; i < 2000 && OkCalls(replicas[1]) <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(OkCalls(replicas[1]), 0) << "the client did not come back to the restarted replica";
  std::vector<int64_t> before(3);
  for (int i = 0; i < 3; ++i) before[i] = OkCalls(replicas[i]);
  ASSERT_TRUE(load.WaitForMoreCalls(900, std::chrono::seconds(60))) << load.failures();
  std::vector<int64_t> share(3);
  int64_t window = 0;
  for (int i = 0; i < 3; ++i) {
    const int64_t after = OkCalls(replicas[i]);
    ASSERT_GE(before[i], 0);
    ASSERT_GE(after, 0);
    share[i] = after - before[i];
    window += share[i];
  }
  std::printf(
      "kill: %lld calls finished in the 1 s a replica was down; after its restart the "
      "replicas served %lld / %lld / %lld of %lld calls\n",
      static_cast<long long>(while_down), static_cast<long long>(share[0]),
      static_cast<long long>(share[1]), static_cast<long long>(share[2]),
      static_cast<long long>(window));
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(share[i] * 10, window) << "replica " << i << " served less than 10% of the calls";
  }
  EXPECT_EQ(load.failed(), 0) << load.failures();

  // 2. SIGTERM replica 2 while a long call runs on it.
  client::ClientOptions direct_options;
  direct_options.max_message_bytes = int64_t{1} << 30;
  direct_options.timeout = std::chrono::seconds(60);
  auto direct =
      client::Client::Connect(absl::StrCat("127.0.0.1:", replicas[2].port), direct_options);
  ASSERT_TRUE(direct.ok()) << direct.status();
  // Connected before the long call starts, so that the call is on the server when the signal
  // comes: connecting alone once took more than the 150 ms below (ASan, a busy machine), and the
  // call then found the listener closed ("Connection refused").
  const absl::StatusOr<client::ServerInfo> info = (*direct)->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  client::RopeCacheOptions long_rope;
  long_rope.positions = client::Positions::Range(0, kLongPositions);
  long_rope.config.head_dim = 512;
  long_rope.output_dtype = client::DType::kFloat16;
  auto long_call = (*direct)->RopeCacheAsync(long_rope);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ASSERT_EQ(long_call.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the long call finished before the signal; the test needs a longer call";
  const auto signal_time = Clock::now();
  const int64_t before_term = load.done();
  ASSERT_EQ(kill(replicas[2].process->pid(), SIGTERM), 0);

  ASSERT_EQ(long_call.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const auto long_result = long_call.get();
  ASSERT_TRUE(long_result.ok()) << long_result.status();
  EXPECT_EQ(long_result->cos.shape, (std::vector<int64_t>{kLongPositions, 256}));
  const double long_done_s = std::chrono::duration<double>(Clock::now() - signal_time).count();

  const std::optional<int> exit_status = replicas[2].process->WaitForExit(std::chrono::seconds(30));
  ASSERT_TRUE(exit_status.has_value()) << replicas[2].process->output();
  const double exit_s = std::chrono::duration<double>(Clock::now() - signal_time).count();
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << *exit_status;
  EXPECT_LT(exit_s, kDrainTimeoutS);
  // Soon after its last call: the clients' health Watch streams do not hold the drain open.
  EXPECT_LT(exit_s, long_done_s + 3.0);
  const int64_t during_drain = load.done() - before_term;
  // The load goes on on the two others after the replica has gone.
  ASSERT_TRUE(load.WaitForMoreCalls(300, std::chrono::seconds(60))) << load.failures();
  std::vector<int64_t> after_drain(2);
  for (int i = 0; i < 2; ++i) after_drain[i] = OkCalls(replicas[i]);
  load.Stop();

  // The drained replica's log: the long call finished OK after the signal.
  const std::string out = replicas[2].process->output();
  const size_t draining = out.find("draining");
  ASSERT_NE(draining, std::string::npos) << out;
  EXPECT_NE(out.find("rpc=RopeCache", draining), std::string::npos) << out.substr(draining);
  EXPECT_NE(out.find("posenc-server stopped"), std::string::npos);

  std::printf(
      "drain: the long call finished %.2f s after SIGTERM, the process exited after "
      "%.2f s (drain timeout %s); %lld calls finished meanwhile on the others\n",
      long_done_s, exit_s, kDrainTimeout, static_cast<long long>(during_drain));
  std::printf(
      "load: %lld calls OK, %lld failed; replicas 0 and 1 served %lld and %lld OK calls "
      "(replica 1 since its restart); %.1f s in all\n",
      static_cast<long long>(load.ok()), static_cast<long long>(load.failed()),
      static_cast<long long>(after_drain[0]), static_cast<long long>(after_drain[1]),
      std::chrono::duration<double>(Clock::now() - test_start).count());
  EXPECT_EQ(load.failed(), 0) << load.failures();
  EXPECT_GT(after_drain[0], 0);
  EXPECT_GT(after_drain[1], 0);
}

}  // namespace
}  // namespace posenc::server
