// Issue #20 item 3: tiny calls keep their latency while large calls move through the new data
// paths: ApplyRope on q and k in registered shared memory (rotated in place), and ApplyRope on q
// and k of MiB in the message (the byte-buffer path: referenced, not copied, when serialized;
// sized once when parsed). A generous bound, as AdmissionServerTest's: speed is measured in
// tests/bench (BENCHMARKS.md "Data path" has this test's figures), not asserted here.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shm_object.h"

namespace posenc::server {
namespace {

using Stub = v1::PositionEncoding::Stub;

std::shared_ptr<grpc::Channel> TcpChannel(const PosencServer& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server.port()),
                                   grpc::InsecureChannelCredentials(), args);
}

grpc::Status ApplyRope(Stub* stub, const v1::ApplyRopeRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ApplyRopeResponse response;
  return stub->ApplyRope(&context, request, &response);
}

// q [1, tokens, 32, 128] FLOAT32 in the message.
v1::ApplyRopeRequest InlineRequest(int64_t tokens) {
  v1::ApplyRopeRequest request;
  *request.mutable_q() = testing::FloatTensor({1, tokens, 32, 128}, 0.5f);
  return request;
}

// q [1, tokens, 32, 128] FLOAT32 at the start of region "big", rotated in place.
v1::ApplyRopeRequest SharedRequest(int64_t tokens) {
  v1::ApplyRopeRequest request;
  v1::Tensor* q = request.mutable_q();
  q->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : {int64_t{1}, tokens, int64_t{32}, int64_t{128}}) q->add_shape(d);
  q->mutable_shared_memory()->set_region("big");
  q->mutable_shared_memory()->set_byte_size(tokens * 32 * 128 * 4);
  return request;
}

// Runs `request` on its own channel until `stop`; counts the calls that succeeded.
std::thread Load(const PosencServer& server, v1::ApplyRopeRequest request,
                 const std::atomic<bool>& stop, std::atomic<int>* done) {
  return std::thread([&server, request = std::move(request), &stop, done] {
    auto stub = v1::PositionEncoding::NewStub(TcpChannel(server));
    while (!stop.load()) {
      const grpc::Status status = ApplyRope(stub.get(), request);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (status.ok()) done->fetch_add(1);
    }
  });
}

TEST(SmallCallsUnderLoadTest, TinyCallsAnswerWhileSharedMemoryAndByteBufferCallsRun) {
  ServerOptions options = testing::LocalServerOptions("cpu");
  options.allow_shared_memory = true;
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int64_t kSharedTokens = 2048;  // 32 MiB in shared memory
  constexpr int64_t kInlineTokens = 512;   // 8 MiB each way in the messages
  testing::ShmObject object(kSharedTokens * 32 * 128 * 4);
  std::memset(object.at(0), 0, static_cast<size_t>(object.bytes()));
  auto tiny = v1::PositionEncoding::NewStub(TcpChannel(**server));
  {
    grpc::ClientContext context;
    v1::RegisterSharedMemoryRequest registration;
    registration.set_name("big");
    registration.set_key(object.key());
    registration.set_byte_size(object.bytes());
    v1::RegisterSharedMemoryResponse response;
    ASSERT_TRUE(tiny->RegisterSharedMemory(&context, registration, &response).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> shared_done{0}, inline_done{0};
  std::vector<std::thread> load;
  load.push_back(Load(**server, SharedRequest(kSharedTokens), stop, &shared_done));
  load.push_back(Load(**server, InlineRequest(kInlineTokens), stop, &inline_done));

  const v1::ApplyRopeRequest small = InlineRequest(1);  // [1, 1, 32, 128]: 16 KiB
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status status = ApplyRope(tiny.get(), small);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  stop.store(true);
  for (std::thread& t : load) t.join();
  EXPECT_GE(shared_done.load(), 1);
  EXPECT_GE(inline_done.load(), 1);
  std::sort(ms.begin(), ms.end());
  const double p50 = ms[ms.size() / 2], p99 = ms[ms.size() * 99 / 100];
  std::printf(
      "tiny ApplyRope under load: p50 %.2f ms, p99 %.2f ms (%d shared-memory and %d "
      "inline calls of 32 / 8 MiB beside them)\n",
      p50, p99, shared_done.load(), inline_done.load());
  // Typically a few milliseconds; the bound leaves room for a loaded 2-core CI machine.
  EXPECT_LT(p50, 250.0) << "slowest " << ms.back() << " ms";
}

}  // namespace
}  // namespace posenc::server
