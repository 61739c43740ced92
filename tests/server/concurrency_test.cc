// Concurrency: 16 client threads call every RPC with varied parameters at once over TCP, and
// every response must equal, byte for byte, the response of the same request made serially
// beforehand. Bounded: 200 calls per thread or 10 s in all, whichever comes first.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::FloatTensor;
using testing::Int64Tensor;
using Stub = v1::PositionEncoding::Stub;

// One request: calls the stub and returns the status and the serialized response.
struct Case {
  std::string name;
  std::function<grpc::Status(Stub*, std::string*)> call;
};

template <typename Request, typename Response>
Case MakeCase(std::string name, Request request,
              grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*)) {
  return Case{std::move(name),
              [request = std::move(request), method](Stub* stub, std::string* bytes) {
                grpc::ClientContext context;
                context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
                Response response;
                grpc::Status status = (stub->*method)(&context, request, &response);
                // No map fields: the serialization is deterministic.
                *bytes = response.SerializeAsString();
                return status;
              }};
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  // Sinusoidal: ranges, ids, layouts, dtypes.
  for (v1::DType dtype :
       {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT64}) {
    v1::SinusoidalRequest req;
    req.mutable_positions()->mutable_range()->set_start(3);
    req.mutable_positions()->mutable_range()->set_count(37);
    req.mutable_params()->set_dim(dtype == v1::DTYPE_FLOAT64 ? 24 : 64);
    req.mutable_params()->set_layout(dtype == v1::DTYPE_FLOAT16
                                         ? v1::SINUSOIDAL_LAYOUT_CONCAT
                                         : v1::SINUSOIDAL_LAYOUT_INTERLEAVED);
    req.set_output_dtype(dtype);
    cases.push_back(MakeCase("Sinusoidal/" + std::to_string(dtype), req, &Stub::Sinusoidal));
  }
  {
    v1::SinusoidalRequest req;
    *req.mutable_positions()->mutable_ids() = Int64Tensor({2, 3}, {0, 5, 9, 1, 1, 400});
    req.mutable_params()->set_dim(32);
    req.mutable_params()->set_base(500);
    cases.push_back(MakeCase("Sinusoidal/ids", req, &Stub::Sinusoidal));
  }
  // AddPositionEncoding: sinusoidal ADD, learned CONCAT.
  {
    v1::AddPositionEncodingRequest req;
    *req.mutable_x() = FloatTensor({2, 5, 16});
    req.mutable_sinusoidal()->set_dim(16);
    req.set_scale(4.0);
    cases.push_back(MakeCase("AddPositionEncoding/sinusoidal", req, &Stub::AddPositionEncoding));
  }
  {
    v1::AddPositionEncodingRequest req;
    *req.mutable_x() = FloatTensor({1, 6, 8}, -0.5f);
    *req.mutable_learned()->mutable_table_inline() = FloatTensor({10, 4}, 0.125f);
    req.set_combine(v1::COMBINE_CONCAT);
    cases.push_back(MakeCase("AddPositionEncoding/learned", req, &Stub::AddPositionEncoding));
  }
  // RopeCache: default and YaRN, compact and NEOX layouts.
  for (bool yarn : {false, true}) {
    v1::RopeCacheRequest req;
    req.mutable_positions()->mutable_range()->set_count(yarn ? 33 : 129);
    req.mutable_config()->set_head_dim(64);
    if (yarn) {
      req.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_YARN);
      req.mutable_config()->mutable_scaling()->set_factor(4);
      req.mutable_config()->mutable_scaling()->set_original_max_position_embeddings(2048);
      req.set_layout(v1::ROPE_CACHE_LAYOUT_NEOX);
      req.set_output_dtype(v1::DTYPE_BFLOAT16);
    }
    cases.push_back(
        MakeCase(std::string("RopeCache/") + (yarn ? "yarn" : "default"), req, &Stub::RopeCache));
  }
  // ApplyRope: NEOX with k, GPTJ partial rotary with offsets.
  {
    v1::ApplyRopeRequest req;
    *req.mutable_q() = FloatTensor({1, 6, 2, 32});
    *req.mutable_k() = FloatTensor({1, 6, 1, 32}, -0.75f);
    req.mutable_config()->set_head_dim(32);
    cases.push_back(MakeCase("ApplyRope/neox", req, &Stub::ApplyRope));
  }
  {
    v1::ApplyRopeRequest req;
    *req.mutable_q() = FloatTensor({2, 5, 3, 16});
    req.mutable_positions()->mutable_offsets()->add_offsets(3);
    req.mutable_positions()->mutable_offsets()->add_offsets(7);
    req.mutable_config()->set_head_dim(16);
    req.mutable_config()->set_rotary_dim(8);
    req.mutable_config()->set_base(500000);
    req.mutable_config()->set_style(v1::ROPE_STYLE_GPTJ);
    cases.push_back(MakeCase("ApplyRope/gptj", req, &Stub::ApplyRope));
  }
  // AlibiSlopes and AlibiBias.
  for (int64_t heads : {8, 12}) {
    v1::AlibiSlopesRequest req;
    req.set_num_heads(heads);
    cases.push_back(MakeCase("AlibiSlopes/" + std::to_string(heads), req, &Stub::AlibiSlopes));
  }
  for (v1::AlibiMode mode : {v1::ALIBI_MODE_CAUSAL, v1::ALIBI_MODE_SYMMETRIC}) {
    v1::AlibiBiasRequest req;
    req.set_num_heads(4);
    req.set_q_len(5);
    req.set_k_len(9);
    req.set_mode(mode);
    if (mode == v1::ALIBI_MODE_SYMMETRIC) req.set_form(v1::BIAS_FORM_COMPACT);
    cases.push_back(MakeCase("AlibiBias/" + std::to_string(mode), req, &Stub::AlibiBias));
  }
  // RelativeBias: bidirectional full, unidirectional, buckets.
  for (int variant = 0; variant < 3; ++variant) {
    v1::RelativeBiasRequest req;
    req.set_q_len(6);
    req.set_k_len(10);
    if (variant == 1) req.set_bidirectional(false);
    if (variant == 2) {
      req.set_form(v1::BIAS_FORM_BUCKETS);
    } else {
      *req.mutable_table_inline() = FloatTensor({32, 4}, 0.5f + static_cast<float>(variant));
    }
    cases.push_back(MakeCase("RelativeBias/" + std::to_string(variant), req, &Stub::RelativeBias));
  }
  // RelativeEmbedding.
  {
    v1::RelativeEmbeddingRequest req;
    req.set_q_len(4);
    req.set_k_len(5);
    req.set_max_relative(3);
    *req.mutable_table_inline() = FloatTensor({7, 8});
    cases.push_back(MakeCase("RelativeEmbedding", req, &Stub::RelativeEmbedding));
  }
  cases.push_back(MakeCase("GetServerInfo", v1::GetServerInfoRequest(), &Stub::GetServerInfo));
  return cases;
}

TEST(ConcurrencyTest, SixteenThreadsEveryRpcMatchSerialResponsesByteForByte) {
  ServerOptions options = testing::LocalServerOptions("cpu");
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::PositionEncoding::NewStub(channel);

  const std::vector<Case> cases = AllCases();
  std::vector<std::string> expected(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const grpc::Status status = cases[i].call(stub.get(), &expected[i]);
    ASSERT_TRUE(status.ok()) << cases[i].name << ": " << status.error_message();
    ASSERT_FALSE(expected[i].empty()) << cases[i].name;
  }

  constexpr int kThreads = 16;
  constexpr int kCallsPerThread = 200;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> errors{0};
  std::mutex mu;
  std::vector<std::string> failures;  // the first few, for the message
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread its own channel (separate connections) half of the time.
      auto own = t % 2 == 0 ? channel
                            : grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                                  grpc::InsecureChannelCredentials());
      auto thread_stub = v1::PositionEncoding::NewStub(own);
      for (int j = 0; j < kCallsPerThread && std::chrono::steady_clock::now() < end; ++j) {
        const size_t i = static_cast<size_t>(t * 7 + j * 3) % cases.size();
        std::string bytes;
        const grpc::Status status = cases[i].call(thread_stub.get(), &bytes);
        calls.fetch_add(1);
        if (!status.ok() || bytes != expected[i]) {
          errors.fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          if (failures.size() < 5) {
            failures.push_back(
                cases[i].name + ": " +
                (status.ok() ? "response differs from the serial one" : status.error_message()));
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%lld concurrent calls over %zu cases in %.2f s, %lld errors\n",
              static_cast<long long>(calls.load()), cases.size(), seconds,
              static_cast<long long>(errors.load()));
  EXPECT_EQ(errors.load(), 0) << (failures.empty() ? "" : failures.front());
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GE(calls.load(), kThreads);
}

}  // namespace
}  // namespace posenc::server
