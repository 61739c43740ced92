// Request bytes that do not parse, sent raw to an in-process server (issue #20, item 6): the parse
// of proto/posenc/v1/byte_buffer.h on gRPC's buffer. Each gets INVALID_ARGUMENT naming the field
// where one can be named (also as the BadRequest field of the error details), nothing is sized
// past the bytes sent, and the server keeps serving.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

constexpr char kApplyRope[] = "/posenc.v1.PositionEncoding/ApplyRope";

class UnparseableRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = PosencServer::Start(testing::LocalServerOptions("reference"));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    // The server still answers a valid call.
    auto stub = v1::PositionEncoding::NewStub(server_->InProcessChannel());
    v1::AlibiSlopesRequest good;
    good.set_num_heads(8);
    v1::AlibiSlopesResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub->AlibiSlopes(&context, good, &response).ok());
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  // `bytes` sent as the request of `method`, in `pieces` slices, over `channel` (default: the
  // in-process channel, which hands the server these very slices).
  grpc::Status Send(const std::string& bytes, const char* method = kApplyRope, size_t pieces = 1,
                    std::shared_ptr<grpc::Channel> channel = nullptr) {
    grpc::GenericStub generic(channel != nullptr ? channel : server_->InProcessChannel());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    std::vector<grpc::Slice> slices;
    const size_t step = std::max<size_t>(1, (bytes.size() + pieces - 1) / pieces);
    for (size_t at = 0; at < bytes.size(); at += step) {
      slices.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
    }
    const grpc::ByteBuffer request(slices.data(), slices.size());
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&done](grpc::Status status) { done.set_value(std::move(status)); });
    return done.get_future().get();
  }

  std::unique_ptr<PosencServer> server_;
};

// The BadRequest field of the error's details; "" when there is none.
std::string FieldOfDetails(const grpc::Status& status) {
  google::rpc::Status details;
  if (!details.ParseFromString(status.error_details())) return "";
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::BadRequest bad;
    if (any.UnpackTo(&bad) && bad.field_violations_size() > 0) {
      return bad.field_violations(0).field();
    }
  }
  return "";
}

// A valid ApplyRope request, serialized, with q FLOAT32 [1, tokens, 2, 64] (512 bytes a token).
std::string LargeRequest(int64_t tokens) {
  v1::ApplyRopeRequest request;
  *request.mutable_q() = testing::FloatTensor({1, tokens, 2, 64});
  request.mutable_config()->set_head_dim(64);
  return request.SerializeAsString();
}

TEST_F(UnparseableRequestTest, InvalidUtf8InAStringFieldNamesTheField) {
  v1::ApplyRopeRequest request;
  *request.mutable_q() = testing::FloatTensor({1, 4, 2, 8});
  request.mutable_config()->set_hf_config_json("{\"rope_theta\": \"\xc3\x28\"}");
  std::string bytes;
  ASSERT_TRUE(request.SerializePartialToString(&bytes));
  const grpc::Status status = Send(bytes);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("config.hf_config_json: invalid UTF-8", 0), 0u)
      << status.error_message();
  EXPECT_NE(status.error_message().find("do not parse as posenc.v1.ApplyRopeRequest"),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(FieldOfDetails(status), "config.hf_config_json");
}

TEST_F(UnparseableRequestTest, TruncatedLargeRequestsNameTheField) {
  const std::string good = LargeRequest(2048);
  ASSERT_TRUE(Send(good).ok());
  for (const size_t keep : {good.size() / 2, good.size() - 1, size_t{70000}}) {
    const grpc::Status status = Send(good.substr(0, keep));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << keep;
    EXPECT_FALSE(FieldOfDetails(status).empty()) << status.error_message();  // q or config
    EXPECT_NE(status.error_message().find("runs past the end"), std::string::npos)
        << status.error_message();
  }
}

TEST_F(UnparseableRequestTest, GarbageAfterALargeTensorIsInvalidArgument) {
  // A malformed key after the tensor (no field to name), then a wire type that does not exist.
  for (const std::string& tail : {std::string("\xff\xff\xff", 3), std::string("\x0f", 1)}) {
    const grpc::Status status = Send(LargeRequest(1024) + tail);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("do not parse as posenc.v1.ApplyRopeRequest"),
              std::string::npos)
        << status.error_message();
  }
}

// A top-level END_GROUP tag stops protobuf's parse early; it then backs up past the last chunk it
// read, which gRPC's own reader asserts on (the process aborted). Refused, over any slicing and
// over TCP (where the server receives the bytes in its own slices), and the server goes on.
TEST_F(UnparseableRequestTest, AStrayEndGroupBeforeMoreSlicesIsInvalidArgument) {
  const std::string bytes = LargeRequest(4) + std::string("\x0c", 1) + LargeRequest(400);
  const auto tcp = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
  for (const size_t pieces : {size_t{1}, size_t{2}, size_t{7}, size_t{500}}) {
    for (const auto& channel : {std::shared_ptr<grpc::Channel>(), tcp}) {
      const grpc::Status status = Send(bytes, kApplyRope, pieces, channel);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << pieces << ": " << status.error_message();
      EXPECT_NE(status.error_message().find("do not parse as posenc.v1.ApplyRopeRequest"),
                std::string::npos)
          << status.error_message();
    }
  }
}

TEST_F(UnparseableRequestTest, HostileLengthsAndNestingAreRefused) {
  // q claiming 1 GiB in a request of 70 KiB (large enough for the sizing walk): refused, not
  // sized (the walk checks every length against the bytes left before it reserves).
  std::string claim("\x0a\x80\x80\x80\x80\x04", 6);
  claim.append(size_t{70} << 10, 'x');
  grpc::Status status = Send(claim);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("q: a length of 1073741824 bytes runs past", 0), 0u)
      << status.error_message();
  // 100,000 nested groups (an unknown field's wire type 3): refused without deep recursion.
  status = Send(std::string(100000, '\x0b'));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  // A large string in a nested message, the message one byte short.
  v1::ApplyRopeRequest request;
  request.mutable_config()->set_hf_config_json(std::string(100000, ' '));
  std::string bytes = request.SerializeAsString();
  bytes[bytes.size() - 1] = '\0';  // still valid UTF-8: parses
  EXPECT_NE(Send(bytes).error_code(), grpc::StatusCode::INTERNAL);
  bytes.pop_back();
  status = Send(bytes);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("config", 0), 0u) << status.error_message();
}

}  // namespace
}  // namespace posenc::server
