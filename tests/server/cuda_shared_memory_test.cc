// CUDA shared memory through a real server on a device (RegisterCudaSharedMemory, Triton's
// CudaSharedMemory* RPCs; ARCHITECTURE.md "GPU callers"): this process plays the GPU caller. It
// allocates device memory, exports it (cudaIpcGetMemHandle) and starts posenc-server --backend=cuda
// as a second process (CUDA refuses a process's own handles), which registers the handle and
// computes in that memory: ApplyRope rotates q and k in place, outputs are written into it. Every
// result is compared byte for byte with the same call on inline tensors (the server runs with
// --cuda_small_call_bytes=0, so those run on the device too); every refusal is a row naming its
// field. Built only with CUDA; without a device every test skips with the reason (CI), as
// cuda_parity_test does. POSENC_SERVER_PATH overrides the server binary (the GPU machine's bundle).
#include <cuda_runtime_api.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/errors_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kernels/common/half_codec.h"
#include "posenc/client.h"
#include "posenc/errors.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "tests/server/server_process.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::FloatTensor;
using ::testing::HasSubstr;
using testing::ServerProcess;

constexpr int64_t kAllocationBytes = int64_t{4} << 20;

v1::SharedMemoryRef Ref(const std::string& region, int64_t offset, int64_t bytes) {
  v1::SharedMemoryRef ref;
  ref.set_region(region);
  ref.set_offset(offset);
  ref.set_byte_size(bytes);
  return ref;
}

std::string Field(const grpc::Status& status) {
  return client::GetErrorDetails(client::internal::FromGrpcStatus(status)).field;
}

class CudaSharedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      skip_ = "no CUDA device";
      return;
    }
    if (cudaMalloc(&device_, kAllocationBytes) != cudaSuccess) {
      skip_ = "cudaMalloc failed";
      return;
    }
    cudaIpcMemHandle_t handle;
    if (cudaIpcGetMemHandle(&handle, device_) != cudaSuccess) {
      skip_ = "cudaIpcGetMemHandle failed";
      return;
    }
    handle_ = new std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
    server_ =
        new ServerProcess({"--listen=127.0.0.1:0", "--backend=cuda", "--cuda_device=0",
                           "--cuda_small_call_bytes=0", "--allow_shared_memory", "--threads=2"});
    port_ = server_->WaitForPort(std::chrono::seconds(60));
    if (port_ == 0) skip_ = absl::StrCat("the server did not start: ", server_->output());
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete handle_;
    handle_ = nullptr;
    if (device_ != nullptr) cudaFree(device_);
    device_ = nullptr;
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
    stub_ = v1::PositionEncoding::NewStub(channel);
    inference_ = inference::GRPCInferenceService::NewStub(channel);
    ASSERT_EQ(cudaMemset(device_, 0x5a, kAllocationBytes), cudaSuccess);
    ASSERT_TRUE(Register("gpu", *handle_, 0, kAllocationBytes).ok());
  }
  void TearDown() override {
    if (!skip_.empty()) return;
    v1::UnregisterSharedMemoryRequest request;  // every region, of both kinds
    v1::UnregisterSharedMemoryResponse response;
    EXPECT_TRUE(Call(&v1::PositionEncoding::Stub::UnregisterSharedMemory, request, &response).ok());
  }

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::PositionEncoding::Stub::*method)(grpc::ClientContext*,
                                                                       const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (stub_.get()->*method)(&context, request, response);
  }
  template <typename Request, typename Response>
  grpc::Status Infer(grpc::Status (inference::GRPCInferenceService::Stub::*method)(
                         grpc::ClientContext*, const Request&, Response*),
                     const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (inference_.get()->*method)(&context, request, response);
  }
  grpc::Status Register(const std::string& name, const std::string& handle, int64_t device,
                        int64_t bytes) {
    v1::RegisterCudaSharedMemoryRequest request;
    request.set_name(name);
    request.set_raw_handle(handle);
    request.set_device_id(device);
    request.set_byte_size(bytes);
    v1::RegisterCudaSharedMemoryResponse response;
    return Call(&v1::PositionEncoding::Stub::RegisterCudaSharedMemory, request, &response);
  }

  // `tensor`'s bytes copied to the device at `offset`; the tensor then refers to them.
  v1::Tensor OnDevice(v1::Tensor tensor, int64_t offset) {
    EXPECT_EQ(cudaMemcpy(static_cast<char*>(device_) + offset, tensor.data().data(),
                         tensor.data().size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    *tensor.mutable_shared_memory() =
        Ref("gpu", offset, static_cast<int64_t>(tensor.data().size()));
    tensor.clear_data();
    return tensor;
  }
  std::string Read(int64_t offset, size_t bytes) {
    std::string out(bytes, '\0');
    EXPECT_EQ(
        cudaMemcpy(out.data(), static_cast<char*>(device_) + offset, bytes, cudaMemcpyDeviceToHost),
        cudaSuccess);
    return out;
  }

  static inline std::string skip_;
  static inline void* device_ = nullptr;
  static inline std::string* handle_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
  static inline int port_ = 0;
  std::unique_ptr<v1::PositionEncoding::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> inference_;
};

TEST_F(CudaSharedMemoryTest, StatusListsTheRegionOfEachKind) {
  v1::SharedMemoryStatusResponse all;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, {}, &all).ok());
  ASSERT_EQ(all.regions_size(), 1);
  EXPECT_EQ(all.regions(0).kind(), v1::SHARED_MEMORY_KIND_CUDA);
  EXPECT_EQ(all.regions(0).device_id(), 0);
  EXPECT_EQ(all.regions(0).byte_size(), kAllocationBytes);
  EXPECT_EQ(all.regions(0).key(), "");

  inference::CudaSharedMemoryStatusResponse cuda;
  ASSERT_TRUE(
      Infer(&inference::GRPCInferenceService::Stub::CudaSharedMemoryStatus, {}, &cuda).ok());
  ASSERT_EQ(cuda.regions().count("gpu"), 1u);
  EXPECT_EQ(cuda.regions().at("gpu").byte_size(), static_cast<uint64_t>(kAllocationBytes));
  inference::SystemSharedMemoryStatusResponse system;
  ASSERT_TRUE(
      Infer(&inference::GRPCInferenceService::Stub::SystemSharedMemoryStatus, {}, &system).ok());
  EXPECT_TRUE(system.regions().empty());
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(Infer(&inference::GRPCInferenceService::Stub::ServerMetadata, {}, &metadata).ok());
  EXPECT_THAT(std::vector<std::string>(metadata.extensions().begin(), metadata.extensions().end()),
              ::testing::Contains("cuda_shared_memory"));
}

TEST_F(CudaSharedMemoryTest, ApplyRopeRotatesInPlaceInDeviceMemory) {
  for (const v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT16}) {
    SCOPED_TRACE(v1::DType_Name(dtype));
    v1::Tensor q = FloatTensor({2, 16, 4, 64}, 0.3f);
    v1::Tensor k = FloatTensor({2, 16, 2, 64}, -0.2f);
    if (dtype != v1::DTYPE_FLOAT32) {
      const auto half = [dtype](const v1::Tensor& t) {
        std::vector<uint16_t> bits(t.data().size() / 4);
        for (size_t i = 0; i < bits.size(); ++i) {
          float f = 0;
          std::memcpy(&f, t.data().data() + 4 * i, 4);
          bits[i] = dtype == v1::DTYPE_FLOAT16 ? kernels::hd::FloatToHalfBits(f)
                                               : kernels::hd::FloatToBFloat16Bits(f);
        }
        return testing::MakeTensor(dtype, {t.shape().begin(), t.shape().end()}, bits);
      };
      q = half(q);
      k = half(k);
    }
    v1::ApplyRopeRequest inline_request;
    *inline_request.mutable_q() = q;
    *inline_request.mutable_k() = k;
    inline_request.mutable_config()->set_base(10000);
    inline_request.mutable_positions()->mutable_range()->set_start(7);
    inline_request.mutable_positions()->mutable_range()->set_count(16);
    v1::ApplyRopeResponse expected;
    ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::ApplyRope, inline_request, &expected).ok());

    v1::ApplyRopeRequest request = inline_request;
    const int64_t k_at = 1 << 20;
    *request.mutable_q() = OnDevice(q, 256);
    *request.mutable_k() = OnDevice(k, k_at);
    v1::ApplyRopeResponse response;
    const grpc::Status status = Call(&v1::PositionEncoding::Stub::ApplyRope, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.q().data().empty());
    EXPECT_EQ(response.q().shared_memory().offset(), 256);
    EXPECT_EQ(Read(256, expected.q().data().size()), expected.q().data());
    EXPECT_EQ(Read(k_at, expected.k().data().size()), expected.k().data());
  }
}

TEST_F(CudaSharedMemoryTest, OutputsAreWrittenIntoDeviceMemory) {
  // RopeCache's two tables, AlibiBias's bias and a Sinusoidal table, each in its own range.
  v1::RopeCacheRequest cache;
  cache.mutable_config()->set_head_dim(64);
  cache.mutable_positions()->mutable_range()->set_count(300);
  v1::RopeCacheResponse expected_cache;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::RopeCache, cache, &expected_cache).ok());
  const auto table_bytes = static_cast<int64_t>(expected_cache.cos().data().size());
  (*cache.mutable_output_shared_memory())["cos"] = Ref("gpu", 0, table_bytes);
  (*cache.mutable_output_shared_memory())["sin"] = Ref("gpu", 1 << 20, table_bytes);
  v1::RopeCacheResponse cache_response;
  grpc::Status status = Call(&v1::PositionEncoding::Stub::RopeCache, cache, &cache_response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Read(0, static_cast<size_t>(table_bytes)), expected_cache.cos().data());
  EXPECT_EQ(Read(1 << 20, static_cast<size_t>(table_bytes)), expected_cache.sin().data());

  v1::AlibiBiasRequest alibi;
  alibi.set_num_heads(8);
  alibi.set_q_len(33);
  alibi.set_k_len(65);
  v1::AlibiBiasResponse expected_alibi;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::AlibiBias, alibi, &expected_alibi).ok());
  const auto bias_bytes = static_cast<int64_t>(expected_alibi.bias().data().size());
  (*alibi.mutable_output_shared_memory())["bias"] = Ref("gpu", 2 << 20, bias_bytes);
  v1::AlibiBiasResponse alibi_response;
  status = Call(&v1::PositionEncoding::Stub::AlibiBias, alibi, &alibi_response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Read(2 << 20, static_cast<size_t>(bias_bytes)), expected_alibi.bias().data());
  EXPECT_EQ(alibi_response.slopes().data(), expected_alibi.slopes().data());  // inline, host

  v1::SinusoidalRequest sinusoidal;
  sinusoidal.mutable_params()->set_dim(128);
  sinusoidal.mutable_positions()->mutable_range()->set_count(100);
  v1::SinusoidalResponse expected_table;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::Sinusoidal, sinusoidal, &expected_table).ok());
  const auto sin_bytes = static_cast<int64_t>(expected_table.table().data().size());
  (*sinusoidal.mutable_output_shared_memory())["table"] = Ref("gpu", 3 << 20, sin_bytes);
  v1::SinusoidalResponse table_response;
  status = Call(&v1::PositionEncoding::Stub::Sinusoidal, sinusoidal, &table_response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Read(3 << 20, static_cast<size_t>(sin_bytes)), expected_table.table().data());
}

TEST_F(CudaSharedMemoryTest, HostSideTensorsAreRefusedInDeviceMemory) {
  // Position ids are read on the host.
  v1::ApplyRopeRequest ids;
  *ids.mutable_q() = FloatTensor({1, 4, 2, 16});
  *ids.mutable_positions()->mutable_ids() =
      OnDevice(testing::Int64Tensor({1, 4}, {0, 1, 2, 3}), 4096);
  v1::ApplyRopeResponse response;
  grpc::Status status = Call(&v1::PositionEncoding::Stub::ApplyRope, ids, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("CUDA region"));
  EXPECT_THAT(Field(status), HasSubstr("positions.ids"));

  // An inline q cannot be moved into a device range by the server.
  v1::ApplyRopeRequest moved;
  *moved.mutable_q() = FloatTensor({1, 4, 2, 16});
  (*moved.mutable_output_shared_memory())["q"] = Ref("gpu", 0, 4 * 2 * 16 * 4);
  status = Call(&v1::PositionEncoding::Stub::ApplyRope, moved, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_EQ(Field(status), "output_shared_memory.q");

  // ALiBi slopes and the one-table RopeCache layouts are written on the host.
  v1::AlibiBiasRequest alibi;
  alibi.set_num_heads(4);
  alibi.set_q_len(4);
  alibi.set_k_len(4);
  v1::AlibiBiasResponse alibi_response;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::AlibiBias, alibi, &alibi_response).ok());
  (*alibi.mutable_output_shared_memory())["slopes"] =
      Ref("gpu", 0, static_cast<int64_t>(alibi_response.slopes().data().size()));
  status = Call(&v1::PositionEncoding::Stub::AlibiBias, alibi, &alibi_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_EQ(Field(status), "output_shared_memory.slopes.region");

  v1::RopeCacheRequest fused;
  fused.mutable_config()->set_head_dim(16);
  fused.mutable_positions()->mutable_range()->set_count(4);
  fused.set_layout(v1::ROPE_CACHE_LAYOUT_FUSED_COS_SIN);
  (*fused.mutable_output_shared_memory())["cos_sin"] = Ref("gpu", 0, 4 * 16 * 4);
  v1::RopeCacheResponse fused_response;
  status = Call(&v1::PositionEncoding::Stub::RopeCache, fused, &fused_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
}

TEST_F(CudaSharedMemoryTest, MalformedRegistrationsAreRows) {
  struct Row {
    std::string what;
    std::string handle;
    int64_t device;
    int64_t bytes;
    grpc::StatusCode code;
    std::string field;
  };
  const std::string zeros(64, '\0');
  const std::vector<Row> rows = {
      {"short handle", handle_->substr(0, 10), 0, 4096, grpc::StatusCode::INVALID_ARGUMENT,
       "raw_handle"},
      {"zero handle", zeros, 0, 4096, grpc::StatusCode::INVALID_ARGUMENT, "raw_handle"},
      {"negative device", *handle_, -1, 4096, grpc::StatusCode::INVALID_ARGUMENT, "device_id"},
      {"another device", *handle_, 1, 4096, grpc::StatusCode::FAILED_PRECONDITION, "device_id"},
      {"beyond the allocation", *handle_, 0, kAllocationBytes * 2,
       grpc::StatusCode::INVALID_ARGUMENT, "byte_size"},
      {"no bytes", *handle_, 0, 0, grpc::StatusCode::INVALID_ARGUMENT, "byte_size"},
  };
  for (const Row& row : rows) {
    const grpc::Status status = Register("bad", row.handle, row.device, row.bytes);
    EXPECT_EQ(status.error_code(), row.code) << row.what << ": " << status.error_message();
    EXPECT_EQ(Field(status), row.field) << row.what << ": " << status.error_message();
  }
  const grpc::Status taken = Register("gpu", *handle_, 0, 4096);
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  v1::SharedMemoryStatusResponse all;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::SharedMemoryStatus, {}, &all).ok());
  EXPECT_EQ(all.regions_size(), 1);  // none of the rows registered anything
}

TEST_F(CudaSharedMemoryTest, UnregisteredRegionsAreNotFoundAndTheFacadeSharesTheRegistry) {
  // The facade's flow: register under another name, rotate q in place, unregister.
  inference::CudaSharedMemoryRegisterRequest reg;
  reg.set_name("io");
  reg.set_raw_handle(*handle_);
  reg.set_device_id(0);
  reg.set_byte_size(static_cast<uint64_t>(kAllocationBytes));
  inference::CudaSharedMemoryRegisterResponse registered;
  grpc::Status status =
      Infer(&inference::GRPCInferenceService::Stub::CudaSharedMemoryRegister, reg, &registered);
  ASSERT_TRUE(status.ok()) << status.error_message();

  const v1::Tensor q = FloatTensor({1, 8, 4, 32}, 0.3f);
  const auto q_bytes = static_cast<int64_t>(q.data().size());
  OnDevice(q, 8192);
  inference::ModelInferRequest infer;
  infer.set_model_name("apply_rope");
  inference::ModelInferRequest::InferInputTensor* input = infer.add_inputs();
  input->set_name("q");
  input->set_datatype("FP32");
  input->mutable_shape()->Assign(q.shape().begin(), q.shape().end());
  (*input->mutable_parameters())["shared_memory_region"].set_string_param("io");
  (*input->mutable_parameters())["shared_memory_offset"].set_int64_param(8192);
  (*input->mutable_parameters())["shared_memory_byte_size"].set_int64_param(q_bytes);
  (*infer.mutable_parameters())["base"].set_double_param(10000);
  inference::ModelInferResponse inferred;
  status = Infer(&inference::GRPCInferenceService::Stub::ModelInfer, infer, &inferred);
  ASSERT_TRUE(status.ok()) << status.error_message();
  v1::ApplyRopeRequest inline_request;
  *inline_request.mutable_q() = q;
  inline_request.mutable_config()->set_base(10000);
  v1::ApplyRopeResponse expected;
  ASSERT_TRUE(Call(&v1::PositionEncoding::Stub::ApplyRope, inline_request, &expected).ok());
  EXPECT_EQ(Read(8192, q.data().size()), expected.q().data());

  // The system RPCs do not see or remove a CUDA region.
  inference::SystemSharedMemoryUnregisterRequest system_unregister;
  system_unregister.set_name("io");
  inference::SystemSharedMemoryUnregisterResponse unused;
  status = Infer(&inference::GRPCInferenceService::Stub::SystemSharedMemoryUnregister,
                 system_unregister, &unused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  inference::CudaSharedMemoryUnregisterRequest unregister;
  unregister.set_name("io");
  inference::CudaSharedMemoryUnregisterResponse unregistered;
  ASSERT_TRUE(Infer(&inference::GRPCInferenceService::Stub::CudaSharedMemoryUnregister, unregister,
                    &unregistered)
                  .ok());
  v1::ApplyRopeRequest late;
  *late.mutable_q() = q;
  *late.mutable_q()->mutable_shared_memory() = Ref("io", 8192, q_bytes);
  late.mutable_q()->clear_data();
  v1::ApplyRopeResponse late_response;
  status = Call(&v1::PositionEncoding::Stub::ApplyRope, late, &late_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Field(status), "q.shared_memory.region");
}

TEST_F(CudaSharedMemoryTest, TheCppClientRegistersAndLists) {
  auto c = client::Client::Connect(absl::StrCat("127.0.0.1:", port_));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->RegisterCudaSharedMemory({"client", *handle_, 0, 1 << 20}).ok());
  auto regions = (*c)->SharedMemoryStatus("client");
  ASSERT_TRUE(regions.ok()) << regions.status();
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].kind, client::SharedMemoryKind::kCuda);
  EXPECT_EQ((*regions)[0].device_id, 0);
  EXPECT_EQ((*regions)[0].byte_size, 1 << 20);
  EXPECT_TRUE((*c)->UnregisterSharedMemory("client").ok());
}

}  // namespace
}  // namespace posenc::server
