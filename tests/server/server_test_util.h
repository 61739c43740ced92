// Helpers shared by the server tests: wire tensors, a handler context on the reference backend,
// the options of a server started for one test.
#ifndef POSENC_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define POSENC_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/common/types.h"
#include "posenc/v1/posenc.pb.h"
#include "server/handlers.h"
#include "server/server.h"
#include "server/tables.h"

namespace posenc::server::testing {

// A message from its text format (`Parse<v1::AlibiBiasRequest>("num_heads: 6 q_len: 4")`).
template <typename Message>
Message Parse(const std::string& text) {
  Message message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::vector<T> Values(const v1::Tensor& t) {
  std::vector<T> out(t.data().size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), t.data().data(), out.size() * sizeof(T));
  return out;
}

template <typename T>
v1::Tensor MakeTensor(v1::DType dtype, const std::vector<int64_t>& shape,
                      const std::vector<T>& values) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(Bytes(values));
  return t;
}

inline int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A FLOAT32 tensor filled with a deterministic, non-trivial pattern.
inline v1::Tensor FloatTensor(const std::vector<int64_t>& shape, float seed = 0.25f) {
  std::vector<float> values(static_cast<size_t>(Product(shape)));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = seed + 0.01f * static_cast<float>(i % 97) - 0.3f * static_cast<float>(i % 7);
  }
  return MakeTensor(v1::DTYPE_FLOAT32, shape, values);
}

inline v1::Tensor Int64Tensor(const std::vector<int64_t>& shape,
                              const std::vector<int64_t>& values) {
  return MakeTensor(v1::DTYPE_INT64, shape, values);
}

// A handler context on the reference backend with default limits and a table registry.
struct TestContext {
  std::unique_ptr<kernels::Backend> backend = kernels::MakeReferenceBackend();
  TableRegistry tables;
  HandlerContext ctx{backend.get(), Limits{}, &tables};
};

// grpc.health.v1.Health/Check for the whole server (or `service`), through the generated stub's
// callback API (as the hand-encoded GenericStub call it replaced: the drain tests' late calls
// rely on the callback machinery's poller reading the server's GOAWAY as soon as it comes).
// Returns the call's status; *serving_status gets the HealthCheckResponse.ServingStatus number
// (1 SERVING, 2 NOT_SERVING; 0 when the call failed).
inline grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel, int* serving_status,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                const std::string& service = "") {
  const std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  std::promise<grpc::Status> done;
  stub->async()->Check(&context, &request, &response,
                       [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  *serving_status = status.ok() ? static_cast<int>(response.status()) : 0;
  return status;
}

// The options of a server for one test: an ephemeral port on 127.0.0.1 and `backend` (empty:
// the default backend).
inline ServerOptions LocalServerOptions(const std::string& backend = "") {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  if (!backend.empty()) options.backend = backend;
  return options;
}

}  // namespace posenc::server::testing

#endif  // POSENC_TESTS_SERVER_SERVER_TEST_UTIL_H_
