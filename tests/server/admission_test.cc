// Admission control (server/admission.h): the in-flight byte budget, heavy-call slots, and, on a
// live server, that concurrent maximal requests stay within the budget and that health checks
// and small calls answer promptly while heavy calls run (issue #8).
#include "server/admission.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/errors_internal.h"
#include "gtest/gtest.h"
#include "posenc/errors.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

TEST(AdmissionControlTest, BytesAreBoundedAndReleasedWhenTheCallEnds) {
  AdmissionControl control({.max_inflight_bytes = 1000, .max_heavy_calls = 0});
  {
    CallAdmission a(&control, 100);
    ASSERT_TRUE(a.Admit(300).ok());  // 100 + 2 * 300
    EXPECT_EQ(control.inflight_bytes(), 700);
    CallAdmission b(&control, 100);
    const absl::Status refused = b.Admit(200);  // 500 more: over 1000
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(refused.message().find("--max_inflight_bytes=1000"), std::string::npos);
    EXPECT_NE(refused.message().find("retry"), std::string::npos);
    CallAdmission c(&control, 0);
    EXPECT_TRUE(c.Admit(150).ok());
    EXPECT_EQ(control.inflight_bytes(), 1000);
  }
  EXPECT_EQ(control.inflight_bytes(), 0);
}

TEST(AdmissionControlTest, HeavyCallsTakeSlotsSmallCallsDoNot) {
  AdmissionControl control({.max_inflight_bytes = 0, .max_heavy_calls = 1});
  CallAdmission heavy(&control, 0);
  ASSERT_TRUE(heavy.Admit(kHeavyCallBytes + 1).ok());
  EXPECT_EQ(control.heavy_calls(), 1);
  CallAdmission small(&control, 0);
  EXPECT_TRUE(small.Admit(kHeavyCallBytes).ok());  // at the threshold: not heavy
  CallAdmission second(&control, 0);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status refused = second.Admit(kHeavyCallBytes + 1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, kHeavyCallWait);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max_heavy_calls=1"), std::string::npos);
  heavy.EndCompute();  // the handler returned: the slot is free before the response is sent
  EXPECT_EQ(control.heavy_calls(), 0);
  CallAdmission third(&control, 0);
  EXPECT_TRUE(third.Admit(kHeavyCallBytes + 1).ok());
}

TEST(AdmissionControlTest, DefaultBudgetFitsThreeMaximalMessages) {
  EXPECT_GE(DefaultMaxInflightBytes(int64_t{256} << 20), int64_t{768} << 20);
}

// The peak resident memory of this process so far, bytes.
int64_t PeakRss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

v1::AlibiBiasRequest BigAlibi() {  // 16 x 1024 x 1024 FLOAT32: a 64 MiB response, 26 bytes asked
  v1::AlibiBiasRequest req;
  req.set_num_heads(16);
  req.set_q_len(1024);
  req.set_k_len(1024);
  return req;
}

std::unique_ptr<v1::PositionEncoding::Stub> Stub(const PosencServer& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
  return v1::PositionEncoding::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials(), args));
}

// Issue #8: 26-byte AlibiBias requests in parallel used to hold memory linear in their number.
TEST(AdmissionServerTest, ConcurrentMaximalRequestsStayWithinTheBudget) {
  ServerOptions options = testing::LocalServerOptions("cpu");
  options.max_inflight_bytes = int64_t{300} << 20;  // four such calls' worth: 2 x 64 MiB each
  options.max_heavy_calls = 0;                      // only the byte budget bounds them here
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int64_t rss_before = PeakRss();
  constexpr int kCalls = 12;
  std::atomic<int> ok{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&] {
      auto stub = Stub(**server);
      grpc::ClientContext context;
      // Twelve fresh connections at once: wait for each to be up rather than fail the first try.
      context.set_wait_for_ready(true);
      v1::AlibiBiasResponse resp;
      const grpc::Status s = stub->AlibiBias(&context, BigAlibi(), &resp);
      if (s.ok()) {
        ok.fetch_add(1);
      } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
                 s.error_message().find("--max_inflight_bytes") != std::string::npos) {
        refused.fetch_add(1);
        // A busy server asks for a retry (gRPC retry policies honour the pushback).
        const auto& trailers = context.GetServerTrailingMetadata();
        const auto pushback = trailers.find("grpc-retry-pushback-ms");
        EXPECT_TRUE(pushback != trailers.end() && pushback->second == "100");
        // ... and says so in its structured details: OVERLOADED, the limit, a retry delay.
        const client::ErrorDetails details =
            client::GetErrorDetails(client::internal::FromGrpcStatus(s));
        EXPECT_EQ(details.reason, "OVERLOADED");
        EXPECT_EQ(details.metadata.count("limit") ? details.metadata.at("limit") : "",
                  "max_inflight_bytes");
        EXPECT_EQ(details.retry_delay, std::chrono::milliseconds(100));
      } else {
        other.fetch_add(1);
        ADD_FAILURE() << s.error_code() << ": " << s.error_message();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok + refused, kCalls);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(ok.load(), 1);
  // Server: at most 300 MiB in flight; client: the responses it received (64 MiB each, held
  // until its call returned). Unbounded, 12 calls held 1.5 GiB on the server alone.
  const int64_t growth = PeakRss() - rss_before;
  EXPECT_LT(growth, int64_t{1100} << 20) << "peak RSS grew by " << (growth >> 20) << " MiB";
  // Everything was released: a call that needs the whole budget is admitted again.
  auto stub = Stub(**server);
  grpc::ClientContext context;
  v1::AlibiBiasResponse resp;
  EXPECT_TRUE(stub->AlibiBias(&context, BigAlibi(), &resp).ok());
}

// A one-table RopeCache holds COMPACT chunks beside its output (RopeCachePlan::ScratchBytes):
// admission counts them. 4096 x 128 FLOAT32: cos + sin 2 MiB (4 MiB admitted: output and its
// response), one table 2 MiB and 1 MiB of chunks (5 MiB): a 4.5 MiB budget takes the first only.
TEST(AdmissionServerTest, OneTableCacheScratchIsAdmitted) {
  ServerOptions options = testing::LocalServerOptions("cpu");
  options.max_inflight_bytes = int64_t{9} << 19;  // 4.5 MiB
  options.max_heavy_calls = 0;
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  auto call = [&](v1::RopeCacheLayout layout, int64_t tokens) {
    v1::RopeCacheRequest req;
    req.mutable_positions()->mutable_range()->set_count(tokens);
    req.mutable_config()->set_head_dim(128);
    req.set_layout(layout);
    grpc::ClientContext context;
    v1::RopeCacheResponse resp;
    return stub->RopeCache(&context, req, &resp);
  };
  // The server releases a call's bytes just after writing its response, so the next call may
  // still find them counted for a moment (seen under the whole suite's load): a call that fits
  // the budget alone is retried until the last one's bytes are gone.
  auto admitted = [&](v1::RopeCacheLayout layout, int64_t tokens) {
    grpc::Status s = call(layout, tokens);
    for (int i = 0; i < 100 && s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      s = call(layout, tokens);
    }
    return s;
  };
  EXPECT_TRUE(admitted(v1::ROPE_CACHE_LAYOUT_COMPACT, 4096).ok());
  EXPECT_TRUE(admitted(v1::ROPE_CACHE_LAYOUT_COMPLEX, 2048).ok());  // 1 + 1 + 1 MiB
  for (v1::RopeCacheLayout layout :
       {v1::ROPE_CACHE_LAYOUT_FUSED_COS_SIN, v1::ROPE_CACHE_LAYOUT_COMPLEX}) {
    const grpc::Status s = call(layout, 4096);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << layout;
    EXPECT_NE(s.error_message().find("--max_inflight_bytes"), std::string::npos)
        << s.error_message();
  }
}

// Issue #8: with heavy calls running on a 2-core machine, health checks timed out.
// Issue #8: health answers for the service's full name as well as for the whole server.
TEST(HealthTest, AnswersForTheServerAndForTheServiceByName) {
  auto server = PosencServer::Start(testing::LocalServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  for (const std::string service : {"", "posenc.v1.PositionEncoding"}) {
    int serving = 0;
    const grpc::Status status =
        testing::HealthCheck(channel, &serving, std::chrono::seconds(5), service);
    EXPECT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(serving, 1) << service;
  }
  int serving = 0;
  EXPECT_EQ(testing::HealthCheck(channel, &serving, std::chrono::seconds(5), "no.such.Service")
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(AdmissionServerTest, HealthAndSmallCallsAnswerWhileHeavyCallsRun) {
  ServerOptions options = testing::LocalServerOptions("cpu");
  options.max_heavy_calls = 1;
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::atomic<bool> stop{false};
  std::atomic<int> heavy_done{0};
  std::vector<std::thread> load;
  for (int i = 0; i < 3; ++i) {
    load.emplace_back([&] {
      auto stub = Stub(**server);
      while (!stop.load()) {
        grpc::ClientContext context;
        context.set_wait_for_ready(true);
        v1::AlibiBiasResponse resp;
        const grpc::Status s = stub->AlibiBias(&context, BigAlibi(), &resp);
        if (s.ok()) heavy_done.fetch_add(1);
      }
    });
  }
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto small = v1::PositionEncoding::NewStub(channel);
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto start = std::chrono::steady_clock::now();
    int serving = 0;
    const grpc::Status health = testing::HealthCheck(channel, &serving, std::chrono::seconds(2));
    EXPECT_TRUE(health.ok()) << health.error_message();
    EXPECT_EQ(serving, 1);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::AlibiSlopesRequest req;
    req.set_num_heads(8);
    v1::AlibiSlopesResponse resp;
    EXPECT_TRUE(small->AlibiSlopes(&context, req, &resp).ok());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  stop.store(true);
  for (std::thread& t : load) t.join();
  EXPECT_GE(heavy_done.load(), 1);
  // Each pair answered within its 2 s deadline (above); typically within milliseconds. The median
  // bound leaves room for a loaded CI machine, where single calls can wait for a core.
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 250.0) << "median health check + small call: " << ms[ms.size() / 2]
                                      << " ms, slowest " << ms.back() << " ms";
}

}  // namespace
}  // namespace posenc::server
