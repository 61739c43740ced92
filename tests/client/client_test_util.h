// Helpers shared by the client tests: one in-process posenc server on a real TCP port, clients
// connected to it, and conversions from client tensors to kernels views for the reference
// expectations.
#ifndef POSENC_TESTS_CLIENT_CLIENT_TEST_UTIL_H_
#define POSENC_TESTS_CLIENT_CLIENT_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/kernels_dtype.h"
#include "kernels/backend.h"
#include "kernels/common/types.h"
#include "posenc/client.h"
#include "server/server.h"

namespace posenc::client::testing {

// The server of the whole test binary on `backend` (reference by default; 127.0.0.1, a free
// port), started on first use and kept until the process exits.
inline server::PosencServer& SharedServer(const std::string& backend = "reference") {
  static auto* const servers = new std::map<std::string, server::PosencServer*>();
  static auto* const lock = new std::mutex();
  std::lock_guard<std::mutex> guard(*lock);
  server::PosencServer*& server = (*servers)[backend];
  if (server == nullptr) {
    server::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.backend = backend;
    auto started = server::PosencServer::Start(options);
    if (!started.ok()) {
      ADD_FAILURE() << "cannot start the server: " << started.status();
      std::abort();
    }
    server = started->release();
  }
  return *server;
}

inline std::string ServerAddress(const std::string& backend = "reference") {
  return absl::StrCat("127.0.0.1:", SharedServer(backend).port());
}

// A client over real TCP to the server listening on 127.0.0.1:`port`.
inline std::unique_ptr<Client> ConnectToPort(int port, const ClientOptions& options = {}) {
  auto client = Client::Connect(absl::StrCat("127.0.0.1:", port), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// A client over real TCP to the shared server on `backend`.
inline std::unique_ptr<Client> ConnectToSharedServer(const std::string& backend = "reference") {
  return ConnectToPort(SharedServer(backend).port());
}

// The same dtype, shape and bytes (a split call against the same call made whole).
inline void ExpectSameTensor(const Tensor& actual, const Tensor& expected,
                             const std::string& what) {
  EXPECT_EQ(actual.dtype, expected.dtype) << what;
  EXPECT_EQ(actual.shape, expected.shape) << what;
  EXPECT_TRUE(actual.data == expected.data) << what << ": the bytes differ";
}

// A tensor of `shape` with values uniform in [-2, 2] (the same for the same seed), in `dtype`.
inline Tensor RandomTensor(std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  std::vector<double> values(static_cast<size_t>(n));
  for (double& v : values) v = uniform(rng);
  absl::StatusOr<Tensor> t = Tensor::FromDoubles(values, std::move(shape), dtype);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

// A borrowed kernels view of a client tensor (the tensor must outlive it).
inline kernels::ConstTensorView View(const Tensor& t) {
  kernels::ConstTensorView view;
  view.dtype = ToKernelsDType(t.dtype);
  view.shape.assign(t.shape.begin(), t.shape.end());
  view.data = t.data.data();
  return view;
}

// The largest error a value of `dtype` may show against the float64 truth `expected`: the
// rounding of the output (1 ulp for FLOAT16/BFLOAT16, README "Accuracy") plus the backend's 1e-6
// promise for FLOAT32/FLOAT64.
inline double Tolerance(DType dtype, double expected) {
  const double magnitude = std::max(1.0, std::fabs(expected));
  switch (dtype) {
    case DType::kFloat16:
      return std::max(std::ldexp(std::fabs(expected), -10), std::ldexp(1.0, -24));
    case DType::kBFloat16: return std::ldexp(std::fabs(expected), -7) + std::ldexp(1.0, -133);
    case DType::kFloat32: return 1e-6 * magnitude;
    default: return 1e-9 * magnitude;
  }
}

// Element-wise comparison of a server result with the float64 reference values.
inline void ExpectNear(const Tensor& actual, const std::vector<int64_t>& expected_shape,
                       const std::vector<double>& expected, const std::string& what) {
  ASSERT_TRUE(actual.Validate().ok()) << what << ": " << actual.Validate();
  ASSERT_EQ(actual.shape, expected_shape) << what;
  const std::vector<double> values = actual.ToDoubles();
  ASSERT_EQ(values.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double e = expected[i];
    const double a = values[i];
    const bool same_special = (std::isnan(e) && std::isnan(a)) || (std::isinf(e) && a == e);
    if (same_special) continue;
    if (!(std::fabs(a - e) <= Tolerance(actual.dtype, e))) {
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << e;
      if (++reported >= 5) return;
    }
  }
}

}  // namespace posenc::client::testing

#endif  // POSENC_TESTS_CLIENT_CLIENT_TEST_UTIL_H_
