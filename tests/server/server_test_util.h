// Helpers shared by the server tests: wire tensors, a handler context on the reference backend,
// the options of a server started for one test.
#ifndef POSENC_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define POSENC_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
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

// grpc.health.v1.Health/Check for the whole server (or `service`): "\x08\x01" is SERVING,
// "\x08\x02" NOT_SERVING. Returns the call's status; *serving_status gets the enum (0 when
// absent).
inline grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel, int* serving_status,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                const std::string& service = "") {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  // HealthCheckRequest{service = 1}: a length-delimited field 1 when `service` is not empty.
  std::string body;
  if (!service.empty()) body = std::string("\x0a") + static_cast<char>(service.size()) + service;
  grpc::Slice slice(body);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (status.ok() && reply.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  *serving_status = bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;
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
