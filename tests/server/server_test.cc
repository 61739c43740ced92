// The in-process server: standard services (health, reflection), GetServerInfo, options
// validation and shutdown.
#include "server/server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/thread_pool.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "tests/server/server_process.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

grpc::ByteBuffer FromString(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::unique_ptr<PosencServer> StartLocal() {
  ServerOptions options = testing::LocalServerOptions();
  auto server = PosencServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

// One ServerReflectionInfo exchange: list_services (field 7, empty string).
class ListServicesReactor : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit ListServicesReactor(grpc::GenericStub* stub) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    request_ = FromString(std::string("\x3a\x00", 2));
    stub->PrepareBidiStreamingCall(&context_,
                                   "/grpc.reflection.v1alpha.ServerReflection/"
                                   "ServerReflectionInfo",
                                   grpc::StubOptions(), this);
    StartWrite(&request_);
    StartRead(&reply_);
    StartCall();
  }
  void OnWriteDone(bool /*ok*/) override { StartWritesDone(); }
  void OnReadDone(bool ok) override {
    if (ok) text_ = ToString(reply_);
  }
  void OnDone(const grpc::Status& status) override { done_.set_value(status); }

  grpc::Status Await() { return done_.get_future().get(); }
  const std::string& text() const { return text_; }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_, reply_;
  std::string text_;
  std::promise<grpc::Status> done_;
};

TEST(PosencServerTest, HealthIsServing) {
  auto server = StartLocal();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  int serving = 0;
  grpc::Status status = testing::HealthCheck(server->InProcessChannel(), &serving);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(serving, grpc::health::v1::HealthCheckResponse::SERVING);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

TEST(PosencServerTest, HealthOverTcpToo) {
  auto server = StartLocal();
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                     grpc::InsecureChannelCredentials());
  int serving = 0;
  grpc::Status status = testing::HealthCheck(channel, &serving);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(serving, grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(PosencServerTest, ReflectionListsTheServices) {
  auto server = StartLocal();
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(server->InProcessChannel());
  ListServicesReactor reactor(&stub);
  grpc::Status status = reactor.Await();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(reactor.text().find("posenc.v1.PositionEncoding"), std::string::npos);
  EXPECT_NE(reactor.text().find("inference.GRPCInferenceService"), std::string::npos);
  EXPECT_NE(reactor.text().find("grpc.health.v1.Health"), std::string::npos);
}

TEST(PosencServerTest, GetServerInfo) {
  ServerOptions options = testing::LocalServerOptions();
  options.max_message_bytes = 1 << 20;
  options.max_output_elements = 12345;
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  grpc::ClientContext context;
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_FALSE(info.version().empty());
  ASSERT_EQ(info.backends_size(), 1);
  EXPECT_EQ(info.backends(0).name(), "cpu");
  EXPECT_TRUE(info.backends(0).is_default());
  EXPECT_EQ(info.limits().max_message_bytes(), 1 << 20);
  EXPECT_EQ(info.limits().max_output_elements(), 12345);
  EXPECT_EQ(info.tables_size(), 0);
}

// An output over a hard limit is RESOURCE_EXHAUSTED that no retry can cure: the trailers say
// so (grpc-retry-pushback-ms -1 stops gRPC retry policies).
TEST(PosencServerTest, OutputOverALimitAsksForNoRetry) {
  auto server = PosencServer::Start(testing::LocalServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  v1::AlibiBiasRequest req;
  req.set_num_heads(64);
  req.set_q_len(1 << 20);
  req.set_k_len(1 << 20);
  grpc::ClientContext context;
  v1::AlibiBiasResponse resp;
  const grpc::Status status = stub->AlibiBias(&context, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto pushback = trailers.find("grpc-retry-pushback-ms");
  ASSERT_NE(pushback, trailers.end());
  EXPECT_EQ(pushback->second, "-1");
}

TEST(PosencServerTest, RequestOverMessageLimitIsRejectedByGrpc) {
  ServerOptions options = testing::LocalServerOptions();
  options.max_message_bytes = 4096;
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  v1::ApplyRopeRequest req;
  req.mutable_q()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : {1, 16, 4, 32}) req.mutable_q()->add_shape(d);
  req.mutable_q()->mutable_data()->resize(16 * 4 * 32 * 4);
  grpc::ClientContext context;
  v1::ApplyRopeResponse resp;
  grpc::Status status = stub->ApplyRope(&context, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
}

TEST(PosencServerTest, ApplyRopeRoundTripThroughTheServer) {
  auto server = StartLocal();
  ASSERT_NE(server, nullptr);
  auto stub = v1::PositionEncoding::NewStub(server->InProcessChannel());
  v1::ApplyRopeRequest req;
  req.mutable_q()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : {1, 2, 1, 4}) req.mutable_q()->add_shape(d);
  const std::vector<float> x = {1, 0, 0, 0, 1, 0, 0, 0};
  req.mutable_q()->set_data(std::string(reinterpret_cast<const char*>(x.data()), 32));
  grpc::ClientContext context;
  context.AddMetadata("x-request-id", "test-123");
  v1::ApplyRopeResponse resp;
  grpc::Status status = stub->ApplyRope(&context, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<float> y(8);
  std::memcpy(y.data(), resp.q().data().data(), 32);
  // Token 0 (position 0) is unchanged; token 1 rotates pair (x0, x2) by 1 radian.
  EXPECT_FLOAT_EQ(y[0], 1.0f);
  EXPECT_NEAR(y[4], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[6], std::sin(1.0), 1e-6);
}

TEST(PosencServerTest, StartRejectsBadOptions) {
  ServerOptions options = testing::LocalServerOptions("cuda");
  if (kernels::ListCudaDevices().empty()) {
    // Without CUDA in the build: UNIMPLEMENTED; built, but no device (no driver): UNAVAILABLE.
    auto server = PosencServer::Start(options);
    EXPECT_EQ(server.status().code(), kernels::CudaBuiltIn() ? absl::StatusCode::kUnavailable
                                                             : absl::StatusCode::kUnimplemented);
    EXPECT_TRUE(absl::StartsWith(server.status().message(), "backend: cuda")) << server.status();
  }
  options.cuda_small_call_bytes = -1;
  EXPECT_EQ(PosencServer::Start(options).status().message(),
            "cuda_small_call_bytes: expected >= 0, got -1");
  options.cuda_small_call_bytes = 0;
  options.backend = "gpu";
  EXPECT_EQ(PosencServer::Start(options).status().message(),
            "backend: expected auto, cpu, reference or cuda, got \"gpu\"");
  options.backend = "cpu";
  options.threads = -1;
  EXPECT_EQ(PosencServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.threads = 0;

  options.backend = "reference";
  options.max_message_bytes = int64_t{1} << 31;
  EXPECT_EQ(PosencServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.max_message_bytes = 1 << 20;
  options.max_output_elements = 0;
  EXPECT_EQ(PosencServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);

  options.max_output_elements = 1 << 20;
  options.listen_address = "not an address";
  EXPECT_FALSE(PosencServer::Start(options).ok());
}

TEST(PosencServerTest, AutoBackendIsCpuWithoutACudaDevice) {
  if (!kernels::ListCudaDevices().empty()) GTEST_SKIP() << "a CUDA device is present";
  auto server = PosencServer::Start(testing::LocalServerOptions("auto"));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(absl::StartsWith((*server)->backend_description(), "cpu ("))
      << (*server)->backend_description();
}

// The threads of process `pid` named as the compute pool's workers.
int ComputeWorkers(pid_t pid) {
  int n = 0;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == kernels::ThreadPool::kWorkerName) ++n;
  }
  return n;
}

// --threads=N: the process computes on at most N threads (the calling one and N - 1 workers of
// the one cpu backend's pool), with the cuda backend too (its host backend is that cpu backend).
// Without a device, --backend=cuda does not start, and auto makes the same cpu backend.
TEST(PosencServerTest, ThreadsBoundsTheComputeThreadsOfTheProcess) {
  const std::string backend = kernels::ListCudaDevices().empty() ? "auto" : "cuda";
  for (int threads : {2, 3}) {
    testing::ServerProcess server(
        {"--listen=127.0.0.1:0", "--backend=" + backend, "--threads=" + std::to_string(threads)});
    ASSERT_TRUE(server.started());
    ASSERT_GT(server.WaitForPort(std::chrono::seconds(30)), 0) << server.output();
    EXPECT_EQ(ComputeWorkers(server.pid()), threads - 1) << backend << " --threads=" << threads;
  }
}

TEST(PosencServerTest, PortInUseFails) {
  auto first = StartLocal();
  ASSERT_NE(first, nullptr);
  ServerOptions options;
  options.listen_address = "127.0.0.1:" + std::to_string(first->port());
  auto second = PosencServer::Start(options);
  EXPECT_FALSE(second.ok());
}

TEST(PosencServerTest, ShutdownIsIdempotentAndRefusesNewCalls) {
  auto server = StartLocal();
  ASSERT_NE(server, nullptr);
  // Over TCP: gRPC 1.51 crashes the *client* on an in-process channel whose server is gone.
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                     grpc::InsecureChannelCredentials());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  auto stub = v1::PositionEncoding::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetServerInfoResponse info;
  EXPECT_FALSE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
}

}  // namespace
}  // namespace posenc::server
