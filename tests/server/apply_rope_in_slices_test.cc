// ApplyRope's q and k rotated where gRPC received them (CallRunner::Method::leave_tensor_data,
// kernels::RunApplyRopeInPieces) and sent back from there: over TCP the answers are the kernel's,
// bit for bit, for every mix of tensors left in the slices and kept in the message; over an
// in-process channel, whose slices are the sender's own memory, the sender's bytes are never
// written.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/rope/apply_rope.h"
#include "posenc/client.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using client::ApplyRopeOptions;
using client::Client;
using client::DType;
using client::Tensor;

Tensor Random(std::vector<int64_t> shape, int seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> value(-2.0F, 2.0F);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = value(rng);
  return *Tensor::FromFloats(values, std::move(shape));
}

// q (and k) rotated in process by the cpu backend, as the server's would.
void Expect(const Tensor& q, const Tensor* k, kernels::TensorLayout layout, const Tensor& got_q,
            const Tensor* got_k) {
  auto cpu = kernels::MakeCpuBackend({});
  ASSERT_TRUE(cpu.ok());
  std::string want_q = q.data, want_k = k != nullptr ? k->data : "";
  const kernels::TensorView qv{
      kernels::DType::kFloat32, {q.shape.begin(), q.shape.end()}, want_q.data()};
  kernels::TensorView kv;
  if (k != nullptr)
    kv = {kernels::DType::kFloat32, {k->shape.begin(), k->shape.end()}, want_k.data()};
  auto plan = kernels::PlanApplyRope({.layout = layout, .q = qv, .k = kv});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(kernels::RunApplyRope(**cpu, *plan, nullptr, qv, kv).ok());
  EXPECT_TRUE(got_q.data == want_q) << "q differs from the kernel's";
  if (k != nullptr) {
    ASSERT_NE(got_k, nullptr);
    EXPECT_TRUE(got_k->data == want_k) << "k differs from the kernel's";
  }
}

class ApplyRopeInSlicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = testing::LocalServerOptions("cpu");
    auto server = PosencServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto client = Client::Connect("127.0.0.1:" + std::to_string(server_->port()));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  std::unique_ptr<PosencServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ApplyRopeInSlicesTest, LargeTensorsOverTcpAreTheKernels) {
  struct Case {
    client::TensorLayout layout;
    kernels::TensorLayout kernel_layout;
    std::vector<int64_t> q, k;  // k empty: q only
  };
  const Case cases[] = {
      // q 1.2 MiB, k 300 KiB: both left in the slices (GQA).
      {client::TensorLayout::kBSHD,
       kernels::TensorLayout::kBSHD,
       {1, 300, 16, 64},
       {1, 300, 4, 64}},
      {client::TensorLayout::kBHSD, kernels::TensorLayout::kBHSD, {2, 8, 150, 64}, {2, 2, 150, 64}},
      {client::TensorLayout::kTHD, kernels::TensorLayout::kTHD, {500, 8, 64}, {}},
      // k under 64 KiB stays in the message: q is taken whole too.
      {client::TensorLayout::kBSHD,
       kernels::TensorLayout::kBSHD,
       {1, 200, 32, 64},
       {1, 200, 1, 64}},
      // q under 64 KiB, k over: k is taken whole too.
      {client::TensorLayout::kBSHD, kernels::TensorLayout::kBSHD, {1, 64, 2, 64}, {1, 64, 8, 64}},
  };
  int seed = 0;
  for (const Case& c : cases) {
    ApplyRopeOptions options;
    options.layout = c.layout;
    options.q = Random(c.q, ++seed);
    if (!c.k.empty()) options.k = Random(c.k, ++seed);
    auto result = client_->ApplyRope(options);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->k.has_value(), !c.k.empty());
    SCOPED_TRACE(::testing::Message() << "q " << c.q.size() << "-d, seed " << seed);
    Expect(options.q, options.k ? &*options.k : nullptr, c.kernel_layout, result->q,
           result->k ? &*result->k : nullptr);
  }
}

TEST_F(ApplyRopeInSlicesTest, BadSizesOffTheWireAreTheUsualErrors) {
  v1::ApplyRopeRequest request;
  request.mutable_q()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : {1, 300, 16, 64}) request.mutable_q()->add_shape(d);
  request.mutable_q()->set_data(std::string(300 * 16 * 64 * 4 - 4, '\0'));  // one float short
  auto stub = v1::PositionEncoding::NewStub(client_->channel());
  grpc::ClientContext context;
  v1::ApplyRopeResponse response;
  const grpc::Status status = stub->ApplyRope(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("q: data has 1228796 bytes, expected 1228800"),
            std::string::npos)
      << status.error_message();
}

// An in-process channel carries the sender's own slices: q here references the caller's bytes
// (v1::BorrowedBytes), which the server must not rotate in place.
TEST_F(ApplyRopeInSlicesTest, InProcessSendersBytesAreNotWritten) {
  const Tensor q = Random({1, 300, 16, 64}, 42);
  const std::string before = q.data;
  auto without = std::make_shared<v1::ApplyRopeRequest>();
  without->mutable_q()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : q.shape) without->mutable_q()->add_shape(d);
  grpc::ByteBuffer request;
  v1::BorrowedBytes borrowed;
  ASSERT_TRUE(v1::SerializeToByteBuffer(without, &request).ok());
  borrowed.Append(1, q.data, &request);
  grpc::GenericStub stub(server_->InProcessChannel());
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  grpc::Status status;
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  stub.UnaryCall(&context, "/posenc.v1.PositionEncoding/ApplyRope", grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) {
                   const std::lock_guard<std::mutex> lock(mu);
                   status = std::move(s);
                   done = true;
                   done_cv.notify_all();
                 });
  {
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
  }
  v1::ApplyRopeResponse parsed;
  const bool parses = v1::ParseFromByteBuffer(response, &parsed);
  response.Clear();  // (a response sending the request's slices back would hold q's bytes)
  request.Clear();
  borrowed.Wait();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(q.data == before) << "the server wrote into the sender's bytes";
  ASSERT_TRUE(parses);
  Tensor got;
  got.data = parsed.q().data();
  Expect(q, nullptr, kernels::TensorLayout::kBSHD, got, nullptr);
}

}  // namespace
}  // namespace posenc::server
