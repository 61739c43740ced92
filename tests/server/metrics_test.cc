// Prometheus metrics (--metrics_address): a server with metrics on 127.0.0.1:0, a few calls,
// then GET /metrics over a plain socket and the samples checked by name, labels and value.
#include "server/metrics.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_process.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::HttpGet;

// One sample of the text exposition: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    Sample sample;
    sample.value = std::stod(line.substr(space + 1));
    const std::string metric = line.substr(0, space);
    const size_t brace = metric.find('{');
    sample.name = metric.substr(0, brace);
    if (brace != std::string::npos) {
      // k="v",k="v"} (our label values hold no quotes; they may hold commas)
      for (size_t pos = brace + 1; pos < metric.size();) {
        const size_t eq = metric.find("=\"", pos);
        const size_t close = eq == std::string::npos ? eq : metric.find('"', eq + 2);
        if (close == std::string::npos) break;
        sample.labels[metric.substr(pos, eq - pos)] = metric.substr(eq + 2, close - eq - 2);
        pos = close + 2;  // past '"' and ',' (or '}')
      }
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::optional<double> Find(const std::vector<Sample>& samples, const std::string& name,
                           const std::map<std::string, std::string>& labels) {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

grpc::Status Call(v1::PositionEncoding::Stub* stub, const v1::AlibiSlopesRequest& request,
                  v1::AlibiSlopesResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub->AlibiSlopes(&context, request, response);
}

TEST(MetricsTest, ServesCountersAndHistogramsOverHttp) {
  ServerOptions options = testing::LocalServerOptions("reference");
  options.metrics_address = "127.0.0.1:0";
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->metrics_port();
  ASSERT_GT(port, 0);

  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  v1::AlibiSlopesRequest good;
  good.set_num_heads(8);
  v1::AlibiSlopesRequest bad;
  bad.set_num_heads(0);
  size_t request_bytes = 0;
  size_t response_bytes = 0;
  for (int i = 0; i < 2; ++i) {
    v1::AlibiSlopesResponse response;
    ASSERT_TRUE(Call(stub.get(), good, &response).ok());
    request_bytes += good.ByteSizeLong();
    response_bytes += response.ByteSizeLong();
  }
  {
    v1::AlibiSlopesResponse response;
    EXPECT_EQ(Call(stub.get(), bad, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    request_bytes += bad.ByteSizeLong();
  }
  v1::GetServerInfoResponse info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  }
  // The same RoPE config three times (one miss, two hits), then another config (a miss).
  for (int64_t head_dim : {64, 64, 64, 32}) {
    grpc::ClientContext context;
    v1::RopeCacheRequest cache_request;
    cache_request.mutable_positions()->mutable_range()->set_count(4);
    cache_request.mutable_config()->set_head_dim(head_dim);
    v1::RopeCacheResponse cache_response;
    ASSERT_TRUE(stub->RopeCache(&context, cache_request, &cache_response).ok());
  }

  const std::string http = HttpGet(port, "/metrics");
  ASSERT_EQ(http.rfind("HTTP/1.1 200", 0), 0u) << http.substr(0, 200);
  const size_t body_start = http.find("\r\n\r\n");
  ASSERT_NE(body_start, std::string::npos);
  const std::string body = http.substr(body_start + 4);
  const std::vector<Sample> samples = ParseExposition(body);

  EXPECT_EQ(Find(samples, "posenc_requests_total", {{"method", "AlibiSlopes"}, {"code", "OK"}}),
            2.0)
      << body;
  EXPECT_EQ(Find(samples, "posenc_requests_total",
                 {{"method", "AlibiSlopes"}, {"code", "INVALID_ARGUMENT"}}),
            1.0);
  EXPECT_EQ(Find(samples, "posenc_requests_total", {{"method", "GetServerInfo"}, {"code", "OK"}}),
            1.0);
  // No series for a code that never happened.
  EXPECT_EQ(Find(samples, "posenc_requests_total", {{"method", "ApplyRope"}, {"code", "OK"}}),
            std::nullopt);

  EXPECT_EQ(Find(samples, "posenc_request_duration_seconds_count", {{"method", "AlibiSlopes"}}),
            3.0);
  EXPECT_EQ(Find(samples, "posenc_request_duration_seconds_bucket",
                 {{"method", "AlibiSlopes"}, {"le", "+Inf"}}),
            3.0);
  EXPECT_EQ(Find(samples, "posenc_request_duration_seconds_bucket",
                 {{"method", "AlibiSlopes"}, {"le", "10"}}),
            3.0);
  const auto sum =
      Find(samples, "posenc_request_duration_seconds_sum", {{"method", "AlibiSlopes"}});
  ASSERT_TRUE(sum.has_value());
  EXPECT_GT(*sum, 0.0);
  EXPECT_LT(*sum, 10.0);
  // Every method has its series from the start (count 0 until called).
  EXPECT_EQ(Find(samples, "posenc_request_duration_seconds_count", {{"method", "ApplyRope"}}), 0.0);

  EXPECT_EQ(Find(samples, "posenc_request_bytes_total", {{"method", "AlibiSlopes"}}),
            static_cast<double>(request_bytes));
  EXPECT_EQ(Find(samples, "posenc_response_bytes_total", {{"method", "AlibiSlopes"}}),
            static_cast<double>(response_bytes));
  EXPECT_GT(response_bytes, 0u);
  EXPECT_EQ(Find(samples, "posenc_in_flight_requests", {}), 0.0);
  EXPECT_EQ(Find(samples, "posenc_cache_hits_total", {}), 2.0);
  EXPECT_EQ(Find(samples, "posenc_cache_misses_total", {}), 2.0);
  EXPECT_NE(body.find("# TYPE posenc_request_duration_seconds histogram"), std::string::npos);
  EXPECT_NE(body.find("# HELP posenc_cache_hits_total RoPE frequency cache hits"),
            std::string::npos);

  // posenc_build_info and the process_* metrics (Linux /proc).
  const std::string backend = (*server)->backend_description();
  EXPECT_EQ(Find(samples, "posenc_build_info",
                 {{"version", info.version()}, {"build", info.build()}, {"backend", backend}}),
            1.0)
      << body;
  const auto rss = Find(samples, "process_resident_memory_bytes", {});
  ASSERT_TRUE(rss.has_value()) << body;
  EXPECT_GT(*rss, 1 << 20);
  EXPECT_GE(Find(samples, "process_virtual_memory_bytes", {}).value_or(0), *rss);
  EXPECT_GT(Find(samples, "process_open_fds", {}).value_or(0), 2.0);
  EXPECT_GT(Find(samples, "process_max_fds", {}).value_or(0), 2.0);
  EXPECT_GE(Find(samples, "process_cpu_seconds_total", {}).value_or(-1), 0.0);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const auto start = Find(samples, "process_start_time_seconds", {});
  ASSERT_TRUE(start.has_value());
  EXPECT_LE(*start, now + 1);
  EXPECT_GT(*start, now - 24 * 3600);
  EXPECT_NE(body.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
}

// Bytes that are not a request message: INVALID_ARGUMENT naming the message type (gRPC's own
// parser answered UNIMPLEMENTED with no message), counted, and the server keeps serving.
TEST(MetricsTest, UnparseableRequestBytesAreInvalidArgumentAndCounted) {
  ServerOptions options = testing::LocalServerOptions("reference");
  options.metrics_address = "127.0.0.1:0";
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::GenericStub generic((*server)->InProcessChannel());
  // A field tag whose varint never ends (no field to name), then a length-delimited field (q)
  // longer than the message.
  const std::string not_protobuf =
      "request: 3 bytes that do not parse as posenc.v1.ApplyRopeRequest (not protobuf, or another "
      "message)";
  const std::string truncated_q =
      "q: a length of 127 bytes runs past the end of its message (1 bytes left); the request: 3 "
      "bytes that do not parse as posenc.v1.ApplyRopeRequest";
  for (const auto& [bytes, message] : {std::pair(std::string("\xff\xff\xff", 3), not_protobuf),
                                       std::pair(std::string("\x0a\x7f\x01", 3), truncated_q)}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer request(&slice, 1);
    std::promise<grpc::Status> done;
    grpc::ByteBuffer response;
    generic.UnaryCall(&context, "/posenc.v1.PositionEncoding/ApplyRope", grpc::StubOptions(),
                      &request, &response,
                      [&done](grpc::Status status) { done.set_value(status); });
    const grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(status.error_message(), message);
  }
  const std::string http = HttpGet((*server)->metrics_port(), "/metrics");
  const std::vector<Sample> samples = ParseExposition(http.substr(http.find("\r\n\r\n") + 4));
  EXPECT_EQ(Find(samples, "posenc_unparseable_requests_total", {{"method", "ApplyRope"}}), 2.0);
  EXPECT_EQ(Find(samples, "posenc_requests_total",
                 {{"method", "ApplyRope"}, {"code", "INVALID_ARGUMENT"}}),
            2.0);
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  v1::AlibiSlopesRequest good;
  good.set_num_heads(8);
  v1::AlibiSlopesResponse response;
  EXPECT_TRUE(Call(stub.get(), good, &response).ok());
}

TEST(MetricsTest, OffByDefault) {
  ServerOptions options = testing::LocalServerOptions("reference");
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);
}

TEST(MetricsTest, BadOrBusyAddressFailsStartNamingTheFlag) {
  ServerOptions options = testing::LocalServerOptions("reference");
  options.metrics_address = "127.0.0.1";
  auto no_port = PosencServer::Start(options);
  ASSERT_FALSE(no_port.ok());
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_port.status().message().find("--metrics_address"), absl::string_view::npos);

  options.metrics_address = "127.0.0.1:0";
  auto first = PosencServer::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.metrics_address = "127.0.0.1:" + std::to_string((*first)->metrics_port());
  auto busy = PosencServer::Start(options);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(busy.status().message().find("--metrics_address"), absl::string_view::npos)
      << busy.status();
}

TEST(MetricsTest, InFlightGaugeAndUnknownMethod) {
  Metrics metrics;
  metrics.OnStart();
  metrics.OnStart();
  metrics.OnFinish("NotAMethod", grpc::StatusCode::UNIMPLEMENTED, 0.001, 10, 0);
  const std::vector<Sample> samples = ParseExposition(metrics.Text());
  EXPECT_EQ(Find(samples, "posenc_in_flight_requests", {}), 1.0);
  EXPECT_EQ(
      Find(samples, "posenc_requests_total", {{"method", "other"}, {"code", "UNIMPLEMENTED"}}),
      1.0);
  EXPECT_EQ(Find(samples, "posenc_request_bytes_total", {{"method", "other"}}), 10.0);
}

}  // namespace
}  // namespace posenc::server
