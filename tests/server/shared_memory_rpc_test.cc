// Shared memory through a real server: registration RPCs, inputs and outputs as references
// (ApplyRope in place, outputs written into the caller's range), results equal to the inline
// calls', and every malformed reference a row naming its field.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/errors_internal.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "posenc/errors.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shm_object.h"

namespace posenc::server {
namespace {

using testing::FloatTensor;

constexpr int64_t kObjectBytes = 1 << 20;

using Object = testing::ShmObject;

v1::SharedMemoryRef Ref(const std::string& region, int64_t offset, int64_t bytes) {
  v1::SharedMemoryRef ref;
  ref.set_region(region);
  ref.set_offset(offset);
  ref.set_byte_size(bytes);
  return ref;
}

// `tensor`'s bytes copied into the object at `offset`; the tensor then refers to them.
v1::Tensor Shared(v1::Tensor tensor, const Object& object, int64_t offset,
                  const std::string& region = "r") {
  std::memcpy(object.at(offset), tensor.data().data(), tensor.data().size());
  *tensor.mutable_shared_memory() = Ref(region, offset, static_cast<int64_t>(tensor.data().size()));
  tensor.clear_data();
  return tensor;
}

class SharedMemoryRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = testing::LocalServerOptions();
    options.allow_shared_memory = true;
    auto server = PosencServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::PositionEncoding::NewStub(server_->InProcessChannel());
    v1::RegisterSharedMemoryRequest reg;
    reg.set_name("r");
    reg.set_key(object_.key());
    reg.set_byte_size(kObjectBytes);
    v1::RegisterSharedMemoryResponse resp;
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->RegisterSharedMemory(&context, reg, &resp).ok());
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::PositionEncoding::Stub::*method)(grpc::ClientContext*,
                                                                       const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return (stub_.get()->*method)(&context, request, response);
  }

  Object object_{kObjectBytes};
  std::unique_ptr<PosencServer> server_;
  std::unique_ptr<v1::PositionEncoding::Stub> stub_;
};

TEST_F(SharedMemoryRpcTest, ApplyRopeRotatesInPlaceAsTheInlineCallDoes) {
  v1::ApplyRopeRequest inline_request;
  *inline_request.mutable_q() = FloatTensor({1, 16, 4, 64}, 0.3f);
  *inline_request.mutable_k() = FloatTensor({1, 16, 2, 64}, 0.7f);
  inline_request.mutable_positions()->mutable_range()->set_start(1000);
  inline_request.mutable_config()->set_base(500000);
  v1::ApplyRopeResponse expected;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::ApplyRope, inline_request, &expected).ok());

  v1::ApplyRopeRequest request = inline_request;
  const int64_t q_bytes = static_cast<int64_t>(inline_request.q().data().size());
  *request.mutable_q() = Shared(inline_request.q(), object_, 0);
  *request.mutable_k() = Shared(inline_request.k(), object_, q_bytes + 64);
  v1::ApplyRopeResponse response;
  const grpc::Status status = Call(&v1::PositionEncoding::Stub::ApplyRope, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(response.q().data().empty());
  EXPECT_EQ(response.q().shared_memory().offset(), 0);
  EXPECT_EQ(response.k().shared_memory().offset(), q_bytes + 64);
  EXPECT_EQ(std::memcmp(object_.at(0), expected.q().data().data(), expected.q().data().size()), 0);
  EXPECT_EQ(
      std::memcmp(object_.at(q_bytes + 64), expected.k().data().data(), expected.k().data().size()),
      0);
  EXPECT_EQ(response.derived().SerializeAsString(), expected.derived().SerializeAsString());
}

TEST_F(SharedMemoryRpcTest, OutputsGoIntoTheCallersRange) {
  v1::RopeCacheRequest request;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "positions { range { count: 128 } } config { head_dim: 64 }", &request));
  v1::RopeCacheResponse expected;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::RopeCache, request, &expected).ok());
  const int64_t bytes = 128 * 32 * 4;
  (*request.mutable_output_shared_memory())["cos"] = Ref("r", 4096, bytes);
  (*request.mutable_output_shared_memory())["sin"] = Ref("r", 4096 + bytes, bytes);
  v1::RopeCacheResponse response;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::RopeCache, request, &response).ok());
  EXPECT_TRUE(response.cos().data().empty());
  EXPECT_EQ(response.cos().shape(0), 128);
  EXPECT_EQ(response.sin().shared_memory().offset(), 4096 + bytes);
  EXPECT_EQ(std::memcmp(object_.at(4096), expected.cos().data().data(), bytes), 0);
  EXPECT_EQ(std::memcmp(object_.at(4096 + bytes), expected.sin().data().data(), bytes), 0);

  // One output in shared memory, the other inline.
  request.mutable_output_shared_memory()->erase("sin");
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::RopeCache, request, &response).ok());
  EXPECT_EQ(response.sin().data(), expected.sin().data());
}

TEST_F(SharedMemoryRpcTest, InputAndOutputOfAddPositionEncodingInSharedMemory) {
  v1::AddPositionEncodingRequest request;
  request.mutable_sinusoidal();
  *request.mutable_x() = FloatTensor({2, 8, 16});
  v1::AddPositionEncodingResponse expected;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::AddPositionEncoding, request, &expected).ok());
  const int64_t bytes = static_cast<int64_t>(expected.y().data().size());
  *request.mutable_x() = Shared(request.x(), object_, 0);
  (*request.mutable_output_shared_memory())["y"] = Ref("r", bytes, bytes);
  v1::AddPositionEncodingResponse response;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::AddPositionEncoding, request, &response).ok());
  EXPECT_EQ(std::memcmp(object_.at(bytes), expected.y().data().data(), bytes), 0);
}

TEST_F(SharedMemoryRpcTest, StatusAndUnregister) {
  v1::SharedMemoryStatusResponse status;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, v1::SharedMemoryStatusRequest(),
                   &status)
                  .ok());
  ASSERT_EQ(status.regions_size(), 1);
  EXPECT_EQ(status.regions(0).key(), object_.key());
  EXPECT_EQ(status.regions(0).byte_size(), kObjectBytes);
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(
      Call(&v1::PositionEncoding::Stub::GetServerInfo, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_TRUE(info.limits().shared_memory_allowed());
  v1::UnregisterSharedMemoryRequest unregister;
  unregister.set_name("r");
  v1::UnregisterSharedMemoryResponse done;
  EXPECT_TRUE(Call(&v1::PositionEncoding::Stub::UnregisterSharedMemory, unregister, &done).ok());
  const grpc::Status again =
      Call(&v1::PositionEncoding::Stub::UnregisterSharedMemory, unregister, &done);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::NOT_FOUND);
}

// CUDA regions need a server computing on that device: this one runs on the host. The status
// says each region's kind.
TEST_F(SharedMemoryRpcTest, CudaRegionsNeedTheCudaBackend) {
  v1::RegisterCudaSharedMemoryRequest request;
  request.set_name("gpu");
  request.set_raw_handle(std::string(64, '\x01'));
  request.set_byte_size(4096);
  v1::RegisterCudaSharedMemoryResponse response;
  const grpc::Status status =
      Call(&v1::PositionEncoding::Stub::RegisterCudaSharedMemory, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("--backend=cuda"), std::string::npos);
  EXPECT_EQ(client::GetErrorDetails(client::internal::FromGrpcStatus(status)).field, "raw_handle");
  request.set_raw_handle("short");
  EXPECT_EQ(
      Call(&v1::PositionEncoding::Stub::RegisterCudaSharedMemory, request, &response).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);

  v1::SharedMemoryStatusResponse all;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, {}, &all).ok());
  ASSERT_EQ(all.regions_size(), 1);
  EXPECT_EQ(all.regions(0).kind(), v1::SHARED_MEMORY_KIND_SYSTEM);
  EXPECT_EQ(all.regions(0).device_id(), -1);
  v1::SharedMemoryStatusRequest cuda_only;
  cuda_only.set_kind(v1::SHARED_MEMORY_KIND_CUDA);
  v1::SharedMemoryStatusResponse none;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, cuda_only, &none).ok());
  EXPECT_EQ(none.regions_size(), 0);
  cuda_only.set_name("r");
  EXPECT_EQ(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, cuda_only, &none).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::SharedMemoryStatusRequest bad_kind;
  bad_kind.set_kind(static_cast<v1::SharedMemoryKind>(7));
  const grpc::Status unknown =
      Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, bad_kind, &none);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(client::GetErrorDetails(client::internal::FromGrpcStatus(unknown)).field, "kind");
  v1::UnregisterSharedMemoryRequest unregister_cuda;
  unregister_cuda.set_kind(v1::SHARED_MEMORY_KIND_CUDA);
  v1::UnregisterSharedMemoryResponse done;
  ASSERT_TRUE(
      Call(&v1::PositionEncoding::Stub::UnregisterSharedMemory, unregister_cuda, &done).ok());
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, {}, &all).ok());
  EXPECT_EQ(all.regions_size(), 1);  // the system region stays
}

// Every malformed reference: the code and the field its structured details name.
TEST_F(SharedMemoryRpcTest, MalformedReferencesNameTheirField) {
  struct Row {
    std::string name;
    std::function<void(v1::ApplyRopeRequest&)> edit;
    grpc::StatusCode code;
    std::string field;
  };
  const int64_t q_bytes = 1 * 4 * 2 * 8 * 4;
  const std::vector<Row> rows = {
      {"unknown_region", [](auto& r) { r.mutable_q()->mutable_shared_memory()->set_region("x"); },
       grpc::StatusCode::NOT_FOUND, "q.shared_memory.region"},
      {"byte_size_not_the_tensors",
       [](auto& r) { r.mutable_q()->mutable_shared_memory()->set_byte_size(4); },
       grpc::StatusCode::INVALID_ARGUMENT, "q.shared_memory.byte_size"},
      {"beyond_the_region",
       [](auto& r) { r.mutable_q()->mutable_shared_memory()->set_offset(kObjectBytes - 8); },
       grpc::StatusCode::INVALID_ARGUMENT, "q.shared_memory"},
      {"offset_overflow",
       [](auto& r) { r.mutable_q()->mutable_shared_memory()->set_offset(INT64_MAX); },
       grpc::StatusCode::INVALID_ARGUMENT, "q.shared_memory"},
      {"negative_offset", [](auto& r) { r.mutable_q()->mutable_shared_memory()->set_offset(-256); },
       grpc::StatusCode::INVALID_ARGUMENT, "q.shared_memory"},
      // shm_fuzz's finding: FLOAT32 elements at an odd address (the kernels read whole floats).
      {"misaligned_offset", [](auto& r) { r.mutable_q()->mutable_shared_memory()->set_offset(2); },
       grpc::StatusCode::INVALID_ARGUMENT, "q.shared_memory.offset"},
      {"output_misaligned",
       [q_bytes](auto& r) {
         (*r.mutable_output_shared_memory())["k"] = Ref("r", 8193, q_bytes / 2);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "output_shared_memory.k.offset"},
      {"data_and_shared_memory", [](auto& r) { r.mutable_q()->set_data(std::string(256, 'x')); },
       grpc::StatusCode::INVALID_ARGUMENT, "q"},
      {"k_overlaps_q_in_place",
       [this](auto& r) {
         *r.mutable_k() = Shared(FloatTensor({1, 4, 1, 8}), object_, 0);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "q.shared_memory"},
      {"output_overlaps_input",
       [q_bytes](auto& r) { (*r.mutable_output_shared_memory())["k"] = Ref("r", 8, q_bytes / 2); },
       grpc::StatusCode::INVALID_ARGUMENT, "output_shared_memory.k"},
      {"output_unknown_name",
       [](auto& r) { (*r.mutable_output_shared_memory())["cos"] = Ref("r", 8192, 4); },
       grpc::StatusCode::INVALID_ARGUMENT, "output_shared_memory"},
      {"output_wrong_size",
       [](auto& r) { (*r.mutable_output_shared_memory())["k"] = Ref("r", 8192, 4); },
       grpc::StatusCode::INVALID_ARGUMENT, "output_shared_memory.k.byte_size"},
      {"output_unknown_region",
       [q_bytes](auto& r) {
         (*r.mutable_output_shared_memory())["k"] = Ref("nope", 8192, q_bytes / 2);
       },
       grpc::StatusCode::NOT_FOUND, "output_shared_memory.k.region"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    v1::ApplyRopeRequest request;
    *request.mutable_q() = Shared(FloatTensor({1, 4, 2, 8}), object_, 0);
    *request.mutable_k() = FloatTensor({1, 4, 1, 8});
    row.edit(request);
    v1::ApplyRopeResponse response;
    const grpc::Status status = Call(&v1::PositionEncoding::Stub::ApplyRope, request, &response);
    EXPECT_EQ(status.error_code(), row.code) << status.error_message();
    const client::ErrorDetails details =
        client::GetErrorDetails(client::internal::FromGrpcStatus(status));
    EXPECT_EQ(details.field, row.field) << status.error_message();
  }
}

TEST(SharedMemoryOffTest, ReferencesAndRegistrationsAreRefused) {
  ServerOptions options = testing::LocalServerOptions();
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  v1::ApplyRopeRequest request;
  *request.mutable_q()->mutable_shared_memory() = Ref("r", 0, 256);
  request.mutable_q()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : {1, 4, 2, 8}) request.mutable_q()->add_shape(d);
  grpc::ClientContext context;
  v1::ApplyRopeResponse response;
  const grpc::Status status = stub->ApplyRope(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("--allow_shared_memory"), std::string::npos);
  grpc::ClientContext context2;
  v1::RegisterSharedMemoryRequest reg;
  v1::RegisterSharedMemoryResponse reg_response;
  EXPECT_EQ(stub->RegisterSharedMemory(&context2, reg, &reg_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  (*server)->Shutdown(std::chrono::system_clock::now());
  (*server)->Wait();
}

}  // namespace
}  // namespace posenc::server
