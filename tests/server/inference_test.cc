// The Open Inference Protocol front end (server/inference_*.h): the model table against the
// posenc messages, the translation of ModelInfer to and from the posenc messages, every model
// through a real server compared byte for byte with its posenc RPC, the probes (also while
// draining), the system shared-memory flow on the registry posenc.v1 shares, and every malformed
// ModelInfer a row naming its input, output or parameter.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/errors_internal.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "posenc/errors.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/inference_convert.h"
#include "server/inference_models.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shm_object.h"

namespace posenc::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using testing::FloatTensor, testing::Int64Tensor, testing::MakeTensor, testing::Parse;

constexpr int64_t kObjectBytes = 1 << 20;

// ----- helpers -------------------------------------------------------------------------------

// Adds input `name` with `tensor`'s datatype, shape and bytes (as a raw_input_contents entry).
void AddRaw(ModelInferRequest* request, const std::string& name, const v1::Tensor& tensor) {
  ModelInferRequest::InferInputTensor* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(std::string(DatatypeOfDType(tensor.dtype())));
  input->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  request->add_raw_input_contents(tensor.data());
}

// Adds input `name`, INT64, with typed contents.
void AddInt64(ModelInferRequest* request, const std::string& name,
              const std::vector<int64_t>& shape, const std::vector<int64_t>& values) {
  ModelInferRequest::InferInputTensor* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype("INT64");
  input->mutable_shape()->Assign(shape.begin(), shape.end());
  input->mutable_contents()->mutable_int64_contents()->Assign(values.begin(), values.end());
}

inference::InferParameter& Param(ModelInferRequest* request, const std::string& name) {
  return (*request->mutable_parameters())[name];
}

void SetSharedMemory(google::protobuf::Map<std::string, inference::InferParameter>* params,
                     const std::string& region, int64_t offset, int64_t bytes) {
  (*params)["shared_memory_region"].set_string_param(region);
  (*params)["shared_memory_offset"].set_int64_param(offset);
  (*params)["shared_memory_byte_size"].set_int64_param(bytes);
}

// Every Tensor field of `type`, by path ("positions.ids"), below `prefix`.
void TensorPaths(const Descriptor* type, const std::string& prefix, std::set<std::string>* out) {
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    if (field->type() != FieldDescriptor::TYPE_MESSAGE || field->is_repeated()) continue;
    const std::string path = prefix + field->name();
    if (field->message_type() == v1::Tensor::descriptor()) {
      out->insert(path);
    } else {
      TensorPaths(field->message_type(), path + ".", out);
    }
  }
}

std::set<std::string> Names(const std::vector<InferenceTensor>& tensors) {
  std::set<std::string> names;
  for (const InferenceTensor& tensor : tensors) names.emplace(tensor.name);
  return names;
}

const google::protobuf::MethodDescriptor* PosencMethod(absl::string_view rpc) {
  return v1::SinusoidalRequest::descriptor()
      ->file()
      ->FindServiceByName("PositionEncoding")
      ->FindMethodByName(std::string(rpc));
}

client::ErrorDetails Details(const grpc::Status& status) {
  return client::GetErrorDetails(client::internal::FromGrpcStatus(status));
}

// ----- the model table -----------------------------------------------------------------------

TEST(InferenceModelsTest, EachModelIsAPosencRpcWithEveryTensorOfItsMessages) {
  ASSERT_EQ(InferenceModels().size(), 8u);
  for (const InferenceModel& model : InferenceModels()) {
    SCOPED_TRACE(std::string(model.name));
    const google::protobuf::MethodDescriptor* method = PosencMethod(model.rpc);
    ASSERT_NE(method, nullptr);
    std::set<std::string> inputs, outputs;
    TensorPaths(method->input_type(), "", &inputs);
    TensorPaths(method->output_type(), "", &outputs);
    EXPECT_EQ(Names(model.inputs), inputs);
    EXPECT_EQ(Names(model.outputs), outputs);
    EXPECT_NE(model.infer, nullptr);
    EXPECT_EQ(FindInferenceModel(model.name), &model);
  }
  EXPECT_EQ(FindInferenceModel("ApplyRope"), nullptr);
}

TEST(InferenceModelsTest, DatatypesAreKServesSpelling) {
  for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16,
                          v1::DTYPE_FLOAT64, v1::DTYPE_INT32, v1::DTYPE_INT64}) {
    EXPECT_EQ(DTypeOfDatatype(DatatypeOfDType(dtype)), dtype);
  }
  EXPECT_EQ(DatatypeOfDType(v1::DTYPE_BFLOAT16), "BF16");
  EXPECT_EQ(DTypeOfDatatype("INT8"), std::nullopt);
  EXPECT_EQ(DTypeOfDatatype("fp32"), std::nullopt);  // the protocol's names are upper case
}

// ----- the translation -----------------------------------------------------------------------

TEST(InferenceConvertTest, ParametersAndRawInputsBecomeThePosencRequest) {
  ModelInferRequest request;
  request.set_model_name("apply_rope");
  AddRaw(&request, "q", FloatTensor({1, 4, 2, 8}));
  AddInt64(&request, "positions.ids", {4}, {7, 8, 9, 10});
  Param(&request, "base").set_string_param("500000.5");  // KServe has no double_param
  Param(&request, "scaling.type").set_string_param("yarn");
  Param(&request, "config.scaling.factor").set_int64_param(4);
  Param(&request, "mrope_section").set_string_param("[1, 1, 2]");
  Param(&request, "layout").set_string_param("BSHD");
  Param(&request, "config.apply_attention_factor").set_bool_param(false);
  const std::string q_bytes = request.raw_input_contents(0);

  v1::ApplyRopeRequest posenc;
  ASSERT_TRUE(ToPosencRequest(*FindInferenceModel("apply_rope"), &request, &posenc).ok());
  EXPECT_EQ(posenc.q().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(std::vector<int64_t>(posenc.q().shape().begin(), posenc.q().shape().end()),
            (std::vector<int64_t>{1, 4, 2, 8}));
  EXPECT_EQ(posenc.q().data(), q_bytes);
  EXPECT_TRUE(request.raw_input_contents(0).empty());  // moved, not copied
  EXPECT_EQ(posenc.positions().ids().data(), testing::Bytes<int64_t>({7, 8, 9, 10}));
  EXPECT_EQ(posenc.config().base(), 500000.5);
  EXPECT_EQ(posenc.config().scaling().type(), v1::ROPE_SCALING_YARN);
  EXPECT_TRUE(posenc.config().scaling().has_factor());
  EXPECT_EQ(posenc.config().scaling().factor(), 4.0);
  EXPECT_EQ(std::vector<int64_t>(posenc.config().mrope_section().begin(),
                                 posenc.config().mrope_section().end()),
            (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(posenc.layout(), v1::TENSOR_LAYOUT_BSHD);
  EXPECT_TRUE(posenc.config().has_apply_attention_factor());
  EXPECT_FALSE(posenc.config().apply_attention_factor());
  EXPECT_FALSE(posenc.has_k());
}

TEST(InferenceConvertTest, SharedMemoryParametersBecomeReferencesAndPlacements) {
  ModelInferRequest request;
  ModelInferRequest::InferInputTensor* x = request.add_inputs();
  x->set_name("x");
  x->set_datatype("FP16");
  x->add_shape(2);
  x->add_shape(8);
  SetSharedMemory(x->mutable_parameters(), "r", 64, 32);
  ModelInferRequest::InferRequestedOutputTensor* y = request.add_outputs();
  y->set_name("y");
  SetSharedMemory(y->mutable_parameters(), "r", 128, 32);

  v1::AddPositionEncodingRequest posenc;
  ASSERT_TRUE(
      ToPosencRequest(*FindInferenceModel("add_position_encoding"), &request, &posenc).ok());
  EXPECT_EQ(posenc.x().dtype(), v1::DTYPE_FLOAT16);
  EXPECT_TRUE(posenc.x().data().empty());
  EXPECT_EQ(posenc.x().shared_memory().region(), "r");
  EXPECT_EQ(posenc.x().shared_memory().offset(), 64);
  EXPECT_EQ(posenc.x().shared_memory().byte_size(), 32);
  ASSERT_EQ(posenc.output_shared_memory().count("y"), 1u);
  EXPECT_EQ(posenc.output_shared_memory().at("y").offset(), 128);
}

TEST(InferenceConvertTest, ThePosencResponseMovesIntoRawOutputsWithItsDerivedValues) {
  ModelInferRequest request;
  request.set_id("call-7");
  request.add_outputs()->set_name("sin");
  v1::RopeCacheResponse posenc;
  *posenc.mutable_cos() = FloatTensor({2, 4});
  *posenc.mutable_sin() = FloatTensor({2, 4}, 0.5f);
  const std::string sin_bytes = posenc.sin().data();
  posenc.mutable_derived()->set_effective_base(10000);
  posenc.mutable_derived()->add_inv_freq(1.0);
  posenc.mutable_derived()->add_inv_freq(0.5);
  posenc.mutable_derived()->set_style(v1::ROPE_STYLE_GPTJ);
  ModelInferResponse response;
  ASSERT_TRUE(
      FromPosencResponse(*FindInferenceModel("rope_cache"), request, &posenc, &response).ok());
  EXPECT_EQ(response.model_name(), "rope_cache");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(response.id(), "call-7");
  ASSERT_EQ(response.outputs_size(), 1);  // only the requested one
  EXPECT_EQ(response.outputs(0).name(), "sin");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), sin_bytes);
  EXPECT_TRUE(posenc.sin().data().empty());  // moved
  EXPECT_EQ(response.parameters().at("derived.effective_base").double_param(), 10000.0);
  EXPECT_EQ(response.parameters().at("derived.inv_freq").string_param(), "[1.0,0.5]");
  EXPECT_EQ(response.parameters().at("derived.style").string_param(), "GPTJ");
}

// ----- a server ------------------------------------------------------------------------------

class InferenceServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = testing::LocalServerOptions();
    options.allow_shared_memory = true;
    options.drain_grace = std::chrono::milliseconds(1500);
    auto server = PosencServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = inference::GRPCInferenceService::NewStub(server_->InProcessChannel());
    posenc_ = v1::PositionEncoding::NewStub(server_->InProcessChannel());
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  template <typename Stub, typename Request, typename Response>
  grpc::Status Call(Stub* stub,
                    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return (stub->*method)(&context, request, response);
  }
  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    return Call(stub_.get(), &inference::GRPCInferenceService::Stub::ModelInfer, request, response);
  }
  bool Ready() {
    inference::ServerReadyResponse response;
    EXPECT_TRUE(
        Call(stub_.get(), &inference::GRPCInferenceService::Stub::ServerReady, {}, &response).ok());
    return response.ready();
  }
  void RegisterRegion(const std::string& name, const testing::ShmObject& object) {
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_key(object.key());
    request.set_byte_size(static_cast<uint64_t>(object.bytes()));
    inference::SystemSharedMemoryRegisterResponse response;
    ASSERT_TRUE(Call(stub_.get(),
                     &inference::GRPCInferenceService::Stub::SystemSharedMemoryRegister, request,
                     &response)
                    .ok());
  }

  std::unique_ptr<PosencServer> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<v1::PositionEncoding::Stub> posenc_;
};

TEST_F(InferenceServerTest, HealthKnowsTheServiceByName) {
  int serving = 0;
  ASSERT_TRUE(testing::HealthCheck(server_->InProcessChannel(), &serving, std::chrono::seconds(5),
                                   "inference.GRPCInferenceService")
                  .ok());
  EXPECT_EQ(serving, grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(InferenceServerTest, ProbesAndMetadata) {
  inference::ServerLiveResponse live;
  ASSERT_TRUE(
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::ServerLive, {}, &live).ok());
  EXPECT_TRUE(live.live());
  EXPECT_TRUE(Ready());
  inference::ServerMetadataResponse server;
  ASSERT_TRUE(
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::ServerMetadata, {}, &server).ok());
  EXPECT_EQ(server.name(), "posenc");
  EXPECT_EQ(std::vector<std::string>(server.extensions().begin(), server.extensions().end()),
            std::vector<std::string>{"system_shared_memory"});

  inference::ModelReadyRequest ready_request;
  ready_request.set_name("rope_cache");
  inference::ModelReadyResponse ready;
  ASSERT_TRUE(
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::ModelReady, ready_request, &ready)
          .ok());
  EXPECT_TRUE(ready.ready());
  ready_request.set_name("llama");
  const grpc::Status unknown =
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::ModelReady, ready_request, &ready);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Details(unknown).reason, "MODEL_NOT_FOUND");
  EXPECT_EQ(Details(unknown).field, "name");

  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("apply_rope");
  metadata_request.set_version("1");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(Call(stub_.get(), &inference::GRPCInferenceService::Stub::ModelMetadata,
                   metadata_request, &metadata)
                  .ok());
  EXPECT_EQ(metadata.versions(0), "1");
  ASSERT_EQ(metadata.inputs_size(), 4);
  EXPECT_EQ(metadata.inputs(0).name(), "q");
  EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
  EXPECT_EQ(metadata.inputs(0).shape_size(), 4);
  EXPECT_EQ(metadata.inputs(0).shape(0), -1);
  metadata_request.set_version("2");
  const grpc::Status version =
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::ModelMetadata, metadata_request,
           &metadata);
  EXPECT_EQ(version.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Details(version).field, "version");
}

TEST_F(InferenceServerTest, WhileDrainingLiveButNotReadyAndInferenceRefused) {
  ASSERT_TRUE(Ready());
  std::thread shutdown(
      [this] { server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5)); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  bool ready = true;
  while (ready && std::chrono::steady_clock::now() < give_up) ready = Ready();
  EXPECT_FALSE(ready);
  inference::ServerLiveResponse live;
  EXPECT_TRUE(
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::ServerLive, {}, &live).ok());
  EXPECT_TRUE(live.live());
  ModelInferRequest request;
  request.set_model_name("alibi_slopes");
  Param(&request, "num_heads").set_int64_param(4);
  ModelInferResponse response;
  EXPECT_EQ(Infer(request, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  shutdown.join();
  server_->Wait();
  server_.reset();
}

// ----- every model against its posenc RPC ----------------------------------------------------

// Every output of `expected` (a posenc response) is in `actual`, byte for byte, and no other.
void ExpectSameOutputs(const google::protobuf::Message& expected,
                       const ModelInferResponse& actual) {
  std::set<std::string> tensors;
  TensorPaths(expected.GetDescriptor(), "", &tensors);
  int compared = 0;
  for (int i = 0; i < actual.outputs_size(); ++i) {
    const auto& output = actual.outputs(i);
    SCOPED_TRACE(output.name());
    const FieldDescriptor* field = expected.GetDescriptor()->FindFieldByName(output.name());
    ASSERT_NE(field, nullptr);
    const auto& tensor =
        static_cast<const v1::Tensor&>(expected.GetReflection()->GetMessage(expected, field));
    EXPECT_EQ(output.datatype(), DatatypeOfDType(tensor.dtype()));
    EXPECT_EQ(std::vector<int64_t>(output.shape().begin(), output.shape().end()),
              std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()));
    EXPECT_EQ(actual.raw_output_contents(i), tensor.data());
    ++compared;
  }
  int produced = 0;
  for (const std::string& name : tensors) {
    const FieldDescriptor* field = expected.GetDescriptor()->FindFieldByName(name);
    produced += expected.GetReflection()->HasField(expected, field) ? 1 : 0;
  }
  EXPECT_EQ(compared, produced);
}

struct ParityCase {
  std::string model;
  std::function<ModelInferRequest()> infer;
  // Calls the posenc RPC of the same request; its response into *out.
  std::function<grpc::Status(v1::PositionEncoding::Stub*, google::protobuf::Message** out)> posenc;
};

void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.model; }

template <typename Request, typename Response>
std::function<grpc::Status(v1::PositionEncoding::Stub*, google::protobuf::Message**)> PosencCall(
    grpc::Status (v1::PositionEncoding::Stub::*method)(grpc::ClientContext*, const Request&,
                                                       Response*),
    std::function<Request()> build) {
  return [method, build](v1::PositionEncoding::Stub* stub, google::protobuf::Message** out) {
    auto* response = new Response;
    *out = response;
    grpc::ClientContext context;
    return (stub->*method)(&context, build(), response);
  };
}

const char* kLlama3 = R"({"model_type": "llama", "rope_theta": 500000.0, "hidden_size": 256,
  "num_attention_heads": 4, "max_position_embeddings": 131072, "rope_scaling": {
  "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
  "original_max_position_embeddings": 8192}})";

ModelInferRequest Request(const std::string& model) {
  ModelInferRequest request;
  request.set_model_name(model);
  return request;
}

std::vector<ParityCase> ParityCases() {
  using Stub = v1::PositionEncoding::Stub;
  std::vector<ParityCase> cases;
  cases.push_back({"sinusoidal",
                   [] {
                     ModelInferRequest r = Request("sinusoidal");
                     Param(&r, "positions.range.start").set_int64_param(3);
                     Param(&r, "positions.range.count").set_int64_param(5);
                     Param(&r, "dim").set_int64_param(16);
                     Param(&r, "base").set_int64_param(10000);
                     Param(&r, "layout").set_string_param("concat");
                     Param(&r, "output_dtype").set_string_param("FP16");
                     return r;
                   },
                   PosencCall<v1::SinusoidalRequest, v1::SinusoidalResponse>(&Stub::Sinusoidal, [] {
                     return Parse<v1::SinusoidalRequest>(
                         "positions { range { start: 3 count: 5 } } params { dim: 16 base: 10000 "
                         "layout: SINUSOIDAL_LAYOUT_CONCAT } output_dtype: DTYPE_FLOAT16");
                   })});
  cases.push_back(
      {"add_position_encoding",
       [] {
         ModelInferRequest r = Request("add_position_encoding");
         AddRaw(&r, "x", FloatTensor({2, 3, 8}));
         AddInt64(&r, "positions.ids", {2, 3}, {0, 1, 2, 5, 6, 7});
         Param(&r, "sinusoidal.base").set_double_param(10000);
         Param(&r, "scale").set_double_param(2.0);
         return r;
       },
       PosencCall<v1::AddPositionEncodingRequest, v1::AddPositionEncodingResponse>(
           &Stub::AddPositionEncoding, [] {
             v1::AddPositionEncodingRequest p;
             *p.mutable_x() = FloatTensor({2, 3, 8});
             *p.mutable_positions()->mutable_ids() = Int64Tensor({2, 3}, {0, 1, 2, 5, 6, 7});
             p.mutable_sinusoidal()->set_base(10000);
             p.set_scale(2.0);
             return p;
           })});
  cases.push_back(
      {"rope_cache",
       [] {
         ModelInferRequest r = Request("rope_cache");
         AddInt64(&r, "positions.ids", {6}, {0, 1, 2, 8191, 8192, 100000});
         Param(&r, "hf_config_json").set_string_param(kLlama3);
         Param(&r, "output_dtype").set_string_param("bfloat16");
         Param(&r, "layout").set_string_param("neox");
         return r;
       },
       PosencCall<v1::RopeCacheRequest, v1::RopeCacheResponse>(&Stub::RopeCache, [] {
         v1::RopeCacheRequest p;
         *p.mutable_positions()->mutable_ids() = Int64Tensor({6}, {0, 1, 2, 8191, 8192, 100000});
         p.mutable_config()->set_hf_config_json(kLlama3);
         p.set_output_dtype(v1::DTYPE_BFLOAT16);
         p.set_layout(v1::ROPE_CACHE_LAYOUT_NEOX);
         return p;
       })});
  cases.push_back(
      {"apply_rope",
       [] {
         ModelInferRequest r = Request("apply_rope");
         AddRaw(&r, "q", FloatTensor({1, 5, 4, 16}, 0.2f));
         AddRaw(&r, "k", FloatTensor({1, 5, 2, 16}, 0.9f));
         Param(&r, "positions.range.start").set_int64_param(100);
         Param(&r, "base").set_double_param(500000);
         Param(&r, "head_dim").set_int64_param(16);
         Param(&r, "style").set_string_param("GPTJ");
         Param(&r, "scaling.type").set_string_param("ROPE_SCALING_YARN");
         Param(&r, "scaling.factor").set_string_param("4");
         Param(&r, "scaling.original_max_position_embeddings").set_int64_param(4096);
         return r;
       },
       PosencCall<v1::ApplyRopeRequest, v1::ApplyRopeResponse>(&Stub::ApplyRope, [] {
         v1::ApplyRopeRequest p = Parse<v1::ApplyRopeRequest>(
             "positions { range { start: 100 } } config { base: 500000 head_dim: 16 style: "
             "ROPE_STYLE_GPTJ scaling { type: ROPE_SCALING_YARN factor: 4 "
             "original_max_position_embeddings: 4096 } }");
         *p.mutable_q() = FloatTensor({1, 5, 4, 16}, 0.2f);
         *p.mutable_k() = FloatTensor({1, 5, 2, 16}, 0.9f);
         return p;
       })});
  cases.push_back(
      {"alibi_slopes",
       [] {
         ModelInferRequest r = Request("alibi_slopes");
         Param(&r, "num_heads").set_int64_param(12);
         Param(&r, "max_bias").set_int64_param(8);
         Param(&r, "output_dtype").set_string_param("FP64");
         return r;
       },
       PosencCall<v1::AlibiSlopesRequest, v1::AlibiSlopesResponse>(&Stub::AlibiSlopes, [] {
         return Parse<v1::AlibiSlopesRequest>(
             "num_heads: 12 max_bias: 8 output_dtype: DTYPE_FLOAT64");
       })});
  cases.push_back(
      {"alibi_bias",
       [] {
         ModelInferRequest r = Request("alibi_bias");
         AddInt64(&r, "attention_mask", {2, 5}, {0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
         Param(&r, "num_heads").set_int64_param(4);
         Param(&r, "q_len").set_int64_param(3);
         Param(&r, "k_len").set_int64_param(5);
         Param(&r, "mode").set_string_param("bloom");
         Param(&r, "future").set_string_param("zero");
         return r;
       },
       PosencCall<v1::AlibiBiasRequest, v1::AlibiBiasResponse>(&Stub::AlibiBias, [] {
         v1::AlibiBiasRequest p = Parse<v1::AlibiBiasRequest>(
             "num_heads: 4 q_len: 3 k_len: 5 mode: ALIBI_MODE_BLOOM future: FUTURE_MODE_ZERO");
         *p.mutable_attention_mask() = Int64Tensor({2, 5}, {0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
         return p;
       })});
  cases.push_back(
      {"relative_bias",
       [] {
         ModelInferRequest r = Request("relative_bias");
         AddRaw(&r, "table_inline", FloatTensor({32, 4}));
         Param(&r, "q_len").set_int64_param(3);
         Param(&r, "k_len").set_int64_param(4);
         Param(&r, "bidirectional").set_bool_param(false);
         return r;
       },
       PosencCall<v1::RelativeBiasRequest, v1::RelativeBiasResponse>(&Stub::RelativeBias, [] {
         v1::RelativeBiasRequest p =
             Parse<v1::RelativeBiasRequest>("q_len: 3 k_len: 4 bidirectional: false");
         *p.mutable_table_inline() = FloatTensor({32, 4});
         return p;
       })});
  cases.push_back({"relative_embedding",
                   [] {
                     ModelInferRequest r = Request("relative_embedding");
                     AddRaw(&r, "table_inline", FloatTensor({5, 8}));
                     Param(&r, "q_len").set_int64_param(3);
                     Param(&r, "k_len").set_int64_param(4);
                     Param(&r, "max_relative").set_int64_param(2);
                     return r;
                   },
                   PosencCall<v1::RelativeEmbeddingRequest, v1::RelativeEmbeddingResponse>(
                       &Stub::RelativeEmbedding, [] {
                         v1::RelativeEmbeddingRequest p = Parse<v1::RelativeEmbeddingRequest>(
                             "q_len: 3 k_len: 4 max_relative: 2");
                         *p.mutable_table_inline() = FloatTensor({5, 8});
                         return p;
                       })});
  return cases;
}

class InferenceParityTest : public InferenceServerTest,
                            public ::testing::WithParamInterface<ParityCase> {};

TEST_P(InferenceParityTest, ModelInferEqualsThePosencRpcByteForByte) {
  google::protobuf::Message* expected_raw = nullptr;
  const grpc::Status posenc_status = GetParam().posenc(posenc_.get(), &expected_raw);
  const std::unique_ptr<google::protobuf::Message> expected(expected_raw);
  ASSERT_TRUE(posenc_status.ok()) << posenc_status.error_message();
  ModelInferResponse response;
  const grpc::Status status = Infer(GetParam().infer(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model_name(), GetParam().model);
  ExpectSameOutputs(*expected, response);
}

INSTANTIATE_TEST_SUITE_P(EveryModel, InferenceParityTest, ::testing::ValuesIn(ParityCases()),
                         [](const auto& info) { return info.param.model; });

// ----- system shared memory ------------------------------------------------------------------

TEST_F(InferenceServerTest, SharedMemoryFlowOnTheRegistryPosencShares) {
  testing::ShmObject object(kObjectBytes);
  RegisterRegion("io", object);
  // The posenc.v1 status lists the region the inference protocol registered.
  v1::SharedMemoryStatusResponse posenc_status;
  ASSERT_TRUE(
      Call(posenc_.get(), &v1::PositionEncoding::Stub::SharedMemoryStatus, {}, &posenc_status)
          .ok());
  ASSERT_EQ(posenc_status.regions_size(), 1);
  EXPECT_EQ(posenc_status.regions(0).name(), "io");

  const v1::Tensor q = FloatTensor({1, 8, 4, 32}, 0.3f);
  const auto q_bytes = static_cast<int64_t>(q.data().size());
  std::memcpy(object.at(0), q.data().data(), q.data().size());
  ModelInferRequest request = Request("apply_rope");
  ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name("q");
  input->set_datatype("FP32");
  input->mutable_shape()->Assign(q.shape().begin(), q.shape().end());
  SetSharedMemory(input->mutable_parameters(), "io", 0, q_bytes);
  ModelInferRequest::InferRequestedOutputTensor* output = request.add_outputs();
  output->set_name("q");
  SetSharedMemory(output->mutable_parameters(), "io", 4096 * 8, q_bytes);
  Param(&request, "base").set_double_param(10000);
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_region").string_param(), "io");
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_TRUE(response.raw_output_contents(0).empty());

  v1::ApplyRopeRequest inline_request;
  *inline_request.mutable_q() = q;
  inline_request.mutable_config()->set_base(10000);
  v1::ApplyRopeResponse expected;
  ASSERT_TRUE(
      Call(posenc_.get(), &v1::PositionEncoding::Stub::ApplyRope, inline_request, &expected).ok());
  EXPECT_EQ(std::memcmp(object.at(4096 * 8), expected.q().data().data(), q.data().size()), 0);
  EXPECT_EQ(std::memcmp(object.at(0), q.data().data(), q.data().size()), 0);  // input untouched

  inference::SystemSharedMemoryStatusResponse regions;
  ASSERT_TRUE(Call(stub_.get(), &inference::GRPCInferenceService::Stub::SystemSharedMemoryStatus,
                   {}, &regions)
                  .ok());
  ASSERT_EQ(regions.regions().count("io"), 1u);
  EXPECT_EQ(regions.regions().at("io").key(), object.key());
  EXPECT_EQ(regions.regions().at("io").byte_size(), static_cast<uint64_t>(kObjectBytes));
  inference::SystemSharedMemoryUnregisterRequest unregister;
  unregister.set_name("io");
  inference::SystemSharedMemoryUnregisterResponse unregistered;
  ASSERT_TRUE(Call(stub_.get(),
                   &inference::GRPCInferenceService::Stub::SystemSharedMemoryUnregister, unregister,
                   &unregistered)
                  .ok());
  inference::SystemSharedMemoryStatusRequest one;
  one.set_name("io");
  const grpc::Status gone = Call(
      stub_.get(), &inference::GRPCInferenceService::Stub::SystemSharedMemoryStatus, one, &regions);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Triton's CUDA shared-memory RPCs on the same registry: a host-backend server refuses the
// registration (FAILED_PRECONDITION naming raw_handle), the CUDA status and unregister see no
// system region, and the system ones no CUDA region (a device runs the rest:
// tests/server/cuda_shared_memory_test.cc).
TEST_F(InferenceServerTest, CudaSharedMemoryRpcsKeepToTheirKind) {
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name("gpu");
  request.set_raw_handle(std::string(64, '\x01'));
  request.set_device_id(0);
  request.set_byte_size(4096);
  inference::CudaSharedMemoryRegisterResponse response;
  grpc::Status status =
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::CudaSharedMemoryRegister, request,
           &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_EQ(Details(status).field, "raw_handle");
  request.set_byte_size(uint64_t{1} << 63);
  status = Call(stub_.get(), &inference::GRPCInferenceService::Stub::CudaSharedMemoryRegister,
                request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Details(status).field, "byte_size");

  testing::ShmObject object(kObjectBytes);
  RegisterRegion("io", object);
  inference::CudaSharedMemoryStatusResponse cuda;
  ASSERT_TRUE(
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::CudaSharedMemoryStatus, {}, &cuda)
          .ok());
  EXPECT_TRUE(cuda.regions().empty());
  inference::CudaSharedMemoryStatusRequest one;
  one.set_name("io");
  EXPECT_EQ(
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::CudaSharedMemoryStatus, one, &cuda)
          .error_code(),
      grpc::StatusCode::NOT_FOUND);
  inference::CudaSharedMemoryUnregisterRequest unregister_all;  // every CUDA region: none
  inference::CudaSharedMemoryUnregisterResponse unregistered;
  ASSERT_TRUE(Call(stub_.get(), &inference::GRPCInferenceService::Stub::CudaSharedMemoryUnregister,
                   unregister_all, &unregistered)
                  .ok());
  inference::SystemSharedMemoryStatusResponse system;
  ASSERT_TRUE(Call(stub_.get(), &inference::GRPCInferenceService::Stub::SystemSharedMemoryStatus,
                   {}, &system)
                  .ok());
  EXPECT_EQ(system.regions().count("io"), 1u);
}

TEST_F(InferenceServerTest, RegisterRefusesOffsetsPastInt64) {
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name("big");
  request.set_key("/nothing");
  request.set_offset(uint64_t{1} << 63);
  request.set_byte_size(8);
  inference::SystemSharedMemoryRegisterResponse response;
  const grpc::Status status =
      Call(stub_.get(), &inference::GRPCInferenceService::Stub::SystemSharedMemoryRegister, request,
           &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Details(status).field, "offset");
}

// ----- malformed ModelInfer ------------------------------------------------------------------

ModelInferRequest ValidApplyRope() {
  ModelInferRequest r = Request("apply_rope");
  AddRaw(&r, "q", FloatTensor({1, 4, 2, 8}));
  AddRaw(&r, "k", FloatTensor({1, 4, 1, 8}, 0.5f));
  Param(&r, "base").set_double_param(10000);
  return r;
}

struct BadInfer {
  std::string name;
  std::function<void(ModelInferRequest*)> mutate;
  grpc::StatusCode code;
  std::string substr;  // the message contains it
  std::string field;   // BadRequest's field ("" when none)
};

void PrintTo(const BadInfer& c, std::ostream* os) { *os << c.name; }

constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

ModelInferRequest::InferInputTensor* Input(ModelInferRequest* r, int i) {
  return r->mutable_inputs(i);
}

void QInSharedMemory(ModelInferRequest* r, int64_t offset, int64_t bytes) {
  r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
  SetSharedMemory(Input(r, 0)->mutable_parameters(), "r", offset, bytes);
}

std::vector<BadInfer> BadInfers() {
  return {
      {"UnknownModel", [](auto* r) { r->set_model_name("llama"); }, grpc::StatusCode::NOT_FOUND,
       "model_name: no model named \"llama\"", "model_name"},
      {"UnknownVersion", [](auto* r) { r->set_model_version("3"); }, grpc::StatusCode::NOT_FOUND,
       "model_version: model apply_rope has no version \"3\"", "model_version"},
      {"MissingInput",
       [](auto* r) {
         r->mutable_inputs()->DeleteSubrange(0, 1);
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
       },
       kInvalid, "q: missing: model apply_rope needs input q", "q"},
      {"ExtraInput",
       [](auto* r) {
         AddRaw(r, "v", FloatTensor({1, 4, 1, 8}));
       },
       kInvalid, "inputs[2].name: model apply_rope has no input \"v\"", "inputs[2].name"},
      {"InputTwice",
       [](auto* r) {
         AddRaw(r, "q", FloatTensor({1, 4, 2, 8}));
       },
       kInvalid, "inputs[2].name: input \"q\" is given twice", "inputs[2].name"},
      {"DatatypePosencDoesNotTake", [](auto* r) { Input(r, 0)->set_datatype("INT8"); }, kInvalid,
       "q.datatype: \"INT8\" is not a datatype posenc takes", "q.datatype"},
      {"DatatypeTheOpDoesNotTake", [](auto* r) { Input(r, 0)->set_datatype("INT32"); }, kInvalid,
       "q.dtype", "q.dtype"},
      {"ShapeBytesMismatch", [](auto* r) { Input(r, 0)->set_shape(3, 9); }, kInvalid,
       "q: data has 256 bytes, expected 288", "q"},
      {"NegativeDimension", [](auto* r) { Input(r, 0)->set_shape(1, -1); }, kInvalid, "q.shape",
       "q.shape[1]"},
      {"MoreRawContentsThanInputs", [](auto* r) { r->add_raw_input_contents("xxxx"); }, kInvalid,
       "raw_input_contents: 3 entries, but 2 inputs take raw bytes", "raw_input_contents"},
      {"FewerRawContentsThanInputs", [](auto* r) { r->mutable_raw_input_contents()->RemoveLast(); },
       kInvalid, "k: no bytes: raw_input_contents has 1 entries", "k"},
      {"ContentsOfAnotherDatatype",
       [](auto* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         Input(r, 0)->mutable_contents()->add_int64_contents(1);
       },
       kInvalid, "q.contents: a FP32 tensor takes fp32_contents, got int64_contents", "q.contents"},
      {"ContentsOfAHalfTensor",
       [](auto* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         Input(r, 0)->set_datatype("FP16");
         Input(r, 0)->mutable_contents()->add_fp32_contents(1);
       },
       kInvalid, "q.contents: FP16 tensors travel as raw bytes only", "q.contents"},
      {"TypedContentsCountMismatch",
       [](auto* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         Input(r, 0)->mutable_contents()->add_fp32_contents(1);
       },
       kInvalid, "q: data has 4 bytes, expected 256", "q"},
      {"ContentsAndSharedMemory",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         Input(r, 0)->mutable_contents()->add_fp32_contents(1);
       },
       kInvalid, "q: has both contents and shared memory", "q"},
      {"ParameterOfTheWrongType", [](auto* r) { Param(r, "base").set_bool_param(true); }, kInvalid,
       "base: expected a number", "base"},
      {"ParameterNotANumber", [](auto* r) { Param(r, "base").set_string_param("1e4x"); }, kInvalid,
       "base: expected a number, got the string \"1e4x\"", "base"},
      {"IntegerParameterAsString", [](auto* r) { Param(r, "head_dim").set_string_param("8"); },
       kInvalid, "head_dim: expected an integer (int64_param), got string_param", "head_dim"},
      {"BoolParameterAsInteger", [](auto* r) { Param(r, "inverse").set_int64_param(1); }, kInvalid,
       "inverse: expected bool_param, got int64_param", "inverse"},
      {"UnknownParameter", [](auto* r) { Param(r, "temperature").set_double_param(0.7); }, kInvalid,
       "temperature: not a parameter of model apply_rope", "temperature"},
      {"ParameterNamingATensor", [](auto* r) { Param(r, "q.dtype").set_int64_param(1); }, kInvalid,
       "q.dtype: q is a tensor: send it as an input", "q.dtype"},
      {"ParameterNamingAMessage", [](auto* r) { Param(r, "scaling").set_string_param("yarn"); },
       kInvalid, "scaling: is a message, not a value", "scaling"},
      {"UnknownEnumName", [](auto* r) { Param(r, "layout").set_string_param("NHWC"); }, kInvalid,
       "layout: unknown TensorLayout \"NHWC\" (expected one of bshd, bhsd, thd)", "layout"},
      {"MalformedList", [](auto* r) { Param(r, "mrope_section").set_string_param("2,x"); },
       kInvalid, "mrope_section[1]: expected a number, got the string \"x\"", "mrope_section[1]"},
      {"UnclosedList", [](auto* r) { Param(r, "freq_factors").set_string_param("[1, 2"); },
       kInvalid, "freq_factors: a list that opens with [ must close with ]", "freq_factors"},
      {"FractionInAnIntegerList",
       [](auto* r) { Param(r, "mrope_section").set_string_param("2.5"); }, kInvalid,
       "mrope_section[0]: expected an integer (of at most 9e15), got 2.5", "mrope_section[0]"},
      {"ParameterNameTooLong", [](auto* r) { Param(r, std::string(1000, 'a')).set_int64_param(1); },
       kInvalid, "a parameter name of 1000 bytes", ""},
      {"OneFieldTwice", [](auto* r) { Param(r, "config.base").set_double_param(2.0); }, kInvalid,
       "config.base: sets config.base, which parameter base sets too", "config.base"},
      {"TwoKindsOfPositions",
       [](auto* r) {
         Param(r, "positions.range.start").set_int64_param(3);
         AddInt64(r, "positions.ids", {4}, {0, 1, 2, 3});
       },
       kInvalid, "positions.ids: cannot be given with positions.range", "positions.ids"},
      {"UnknownOutput", [](auto* r) { r->add_outputs()->set_name("cos"); }, kInvalid,
       "outputs[0].name: model apply_rope has no output \"cos\"", "outputs[0].name"},
      {"OutputTwice",
       [](auto* r) {
         r->add_outputs()->set_name("q");
         r->add_outputs()->set_name("q");
       },
       kInvalid, "outputs[1].name: output \"q\" is requested twice", "outputs[1].name"},
      {"OutputNotProduced",
       [](auto* r) {
         r->mutable_inputs()->DeleteSubrange(1, 1);
         r->mutable_raw_input_contents()->DeleteSubrange(1, 1);
         r->add_outputs()->set_name("k");
       },
       kInvalid, "k: model apply_rope produced no output k", "k"},
      {"UnknownTensorParameter",
       [](auto* r) { (*Input(r, 0)->mutable_parameters())["binary_data_size"].set_int64_param(4); },
       kInvalid, "q.parameters.binary_data_size: unknown tensor parameter",
       "q.parameters.binary_data_size"},
      {"SharedMemoryWithoutRegion",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         Input(r, 0)->mutable_parameters()->erase("shared_memory_region");
       },
       kInvalid, "q.parameters.shared_memory_region: missing", "q.parameters.shared_memory_region"},
      {"SharedMemoryWithoutByteSize",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         Input(r, 0)->mutable_parameters()->erase("shared_memory_byte_size");
       },
       kInvalid, "q.parameters.shared_memory_byte_size: missing",
       "q.parameters.shared_memory_byte_size"},
      {"SharedMemoryRegionNotAString",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         (*Input(r, 0)->mutable_parameters())["shared_memory_region"].set_int64_param(1);
       },
       kInvalid, "q.parameters.shared_memory_region: expected string_param, got int64_param",
       "q.parameters.shared_memory_region"},
      {"SharedMemoryOffsetNotAnInteger",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         (*Input(r, 0)->mutable_parameters())["shared_memory_offset"].set_string_param("0");
       },
       kInvalid, "q.parameters.shared_memory_offset: expected an integer",
       "q.parameters.shared_memory_offset"},
      {"SharedMemoryUnknownRegion",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         (*Input(r, 0)->mutable_parameters())["shared_memory_region"].set_string_param("nope");
       },
       grpc::StatusCode::NOT_FOUND, "q.shared_memory.region: no shared-memory region named",
       "q.shared_memory.region"},
      {"SharedMemoryByteSizeOfAnotherTensor", [](auto* r) { QInSharedMemory(r, 0, 128); }, kInvalid,
       "q.shared_memory.byte_size: expected 256", "q.shared_memory.byte_size"},
      {"SharedMemoryPastTheRegion", [](auto* r) { QInSharedMemory(r, kObjectBytes - 8, 256); },
       kInvalid, "q.shared_memory", "q.shared_memory"},
      {"SharedMemoryNegativeOffset", [](auto* r) { QInSharedMemory(r, -8, 256); }, kInvalid,
       "q.shared_memory", "q.shared_memory"},
      {"OutputSharedMemoryOfAnotherSize",
       [](auto* r) {
         ModelInferRequest::InferRequestedOutputTensor* out = r->add_outputs();
         out->set_name("q");
         SetSharedMemory(out->mutable_parameters(), "r", 4096, 64);
       },
       kInvalid, "output_shared_memory.q.byte_size: expected 256",
       "output_shared_memory.q.byte_size"},
      {"OutputOverlappingAnInput",
       [](auto* r) {
         QInSharedMemory(r, 0, 256);
         ModelInferRequest::InferRequestedOutputTensor* out = r->add_outputs();
         out->set_name("k");
         SetSharedMemory(out->mutable_parameters(), "r", 128, 128);
       },
       kInvalid, "overlaps", "output_shared_memory.k"},
      {"MalformedHfConfigJson",
       [](auto* r) {
         r->mutable_parameters()->erase("base");
         Param(r, "hf_config_json").set_string_param("{");
       },
       kInvalid, "config.hf_config_json", "config.hf_config_json"},
      {"OpParameterOutOfRange", [](auto* r) { Param(r, "rotary_dim").set_int64_param(5); },
       kInvalid, "config.rotary_dim", "config.rotary_dim"},
  };
}

class BadInferTest : public InferenceServerTest, public ::testing::WithParamInterface<BadInfer> {
 protected:
  void SetUp() override {
    InferenceServerTest::SetUp();
    RegisterRegion("r", object_);
  }
  testing::ShmObject object_{kObjectBytes};
};

TEST_P(BadInferTest, RefusedNamingTheInputOutputOrParameter) {
  ModelInferRequest request = ValidApplyRope();
  GetParam().mutate(&request);
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), GetParam().code) << status.error_message();
  EXPECT_NE(status.error_message().find(GetParam().substr), std::string::npos)
      << status.error_message();
  EXPECT_EQ(Details(status).field, GetParam().field) << status.error_message();
  // The server goes on serving.
  ModelInferResponse good;
  EXPECT_TRUE(Infer(ValidApplyRope(), &good).ok());
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInferTest, ::testing::ValuesIn(BadInfers()),
                         [](const auto& info) { return info.param.name; });

TEST(InferenceSummaryTest, NamesTheModelTensorsAndParameters) {
  ModelInferRequest request = ValidApplyRope();
  Param(&request, "hf_config_json").set_string_param(std::string(100, ' '));
  EXPECT_EQ(SummarizeInferRequest(request),
            "model=apply_rope q=FP32[1,4,2,8] k=FP32[1,4,1,8] base=10000 hf_config_json=100_bytes");
}

}  // namespace
}  // namespace posenc::server
