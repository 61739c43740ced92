// Logging (--log_format, --log_level) and the access line: spdlog's default logger replaced by
// one writing to a string, a server called in process, and every line parsed as JSON.
#include "server/logging.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "server/summary.h"
#include "server_test_util.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

// Sends spdlog's default logger to `out` for the fixture's lifetime.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_, /*force_flush=*/true);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("posenc-test", sink));
  }
  void TearDown() override {
    spdlog::set_default_logger(saved_);
    ConfigureLogging(LogFormat::kText, spdlog::level::info);
  }

  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  // Two calls through a reference-backend server: ApplyRope (OK, x-request-id "req-42\"x") and
  // AlibiSlopes with no heads (INVALID_ARGUMENT).
  void MakeCalls() {
    ServerOptions options = testing::LocalServerOptions("reference");
    auto server = PosencServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
    {
      v1::ApplyRopeRequest request;
      *request.mutable_q() = testing::FloatTensor({1, 4, 2, 8});
      request.mutable_config()->set_head_dim(8);
      request.mutable_positions()->mutable_range()->set_start(3);
      v1::ApplyRopeResponse response;
      grpc::ClientContext context;
      context.AddMetadata("x-request-id", "req-42\"x");
      grpc::Status status = stub->ApplyRope(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    {
      v1::AlibiSlopesRequest request;
      v1::AlibiSlopesResponse response;
      grpc::ClientContext context;
      EXPECT_EQ(stub->AlibiSlopes(&context, request, &response).error_code(),
                grpc::StatusCode::INVALID_ARGUMENT);
    }
    (*server)->Shutdown(std::chrono::system_clock::now());
    (*server)->Wait();
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> saved_;
};

TEST_F(LoggingTest, JsonAccessLinesCarryEveryField) {
  ConfigureLogging(LogFormat::kJson, spdlog::level::info);
  spdlog::info("plain \"quoted\"\tline\x01 \\ end");
  MakeCalls();

  std::vector<nlohmann::json> lines;
  for (const std::string& line : Lines()) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_TRUE(j.contains("time") && j["time"].is_string()) << line;
    EXPECT_TRUE(j.contains("level") && j["level"].is_string()) << line;
    lines.push_back(std::move(j));
  }
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0]["msg"], "plain \"quoted\"\tline\x01 \\ end");
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_EQ(lines[0]["time"].get<std::string>().size(),
            std::string("2024-01-01T00:00:00.000000Z").size());

  const nlohmann::json* rope = nullptr;
  const nlohmann::json* slopes = nullptr;
  for (const nlohmann::json& j : lines) {
    if (j.value("rpc", "") == "ApplyRope") rope = &j;
    if (j.value("rpc", "") == "AlibiSlopes") slopes = &j;
  }
  ASSERT_NE(rope, nullptr) << out_.str();
  EXPECT_EQ((*rope)["level"], "info");
  EXPECT_EQ((*rope)["request_id"], "req-42\"x");
  EXPECT_EQ((*rope)["status"], "OK");
  EXPECT_EQ((*rope)["backend"], "reference");
  EXPECT_TRUE((*rope)["latency_ms"].is_number());
  EXPECT_GE((*rope)["latency_ms"].get<double>(), 0.0);
  EXPECT_EQ((*rope)["input"], "q=FLOAT32[1,4,2,8] positions=range[3,+0) config.head_dim=8");
  EXPECT_EQ((*rope)["output"], "q=FLOAT32[1,4,2,8]");
  EXPECT_GT((*rope)["request_bytes"].get<int64_t>(), 4 * 64);
  EXPECT_GT((*rope)["response_bytes"].get<int64_t>(), 4 * 64);
  EXPECT_FALSE(rope->contains("error"));

  ASSERT_NE(slopes, nullptr) << out_.str();
  EXPECT_EQ((*slopes)["status"], "INVALID_ARGUMENT");
  EXPECT_EQ((*slopes)["request_id"], "-");
  EXPECT_EQ((*slopes)["input"], "");  // num_heads 0 is not on the wire (proto3)
  EXPECT_EQ((*slopes)["output"], "");
  EXPECT_EQ((*slopes)["response_bytes"], 0);
  EXPECT_NE((*slopes)["error"].get<std::string>().find("num_heads"), std::string::npos)
      << (*slopes)["error"];
}

// Issue #8: a client's invalid UTF-8 (here a Latin-1 table name) made an invalid JSON line;
// gRPC's own lines bypassed the JSON format.
TEST_F(LoggingTest, JsonLinesStayJsonWithInvalidUtf8AndGrpcLines) {
  ConfigureLogging(LogFormat::kJson, spdlog::level::info);
  spdlog::info("table \"caf\xe9\" loaded");
  LogAccess(AccessRecord{.method = "RelativeBias",
                         .request_id = "r\xff",
                         .code = grpc::StatusCode::INVALID_ARGUMENT,
                         .input = "table=\"caf\xe9\"",
                         .error = "table_name: no table named \"caf\xe9\""});
  grpc_init();  // as in a server: gRPC initialized after logging was configured
  gpr_log(GPR_ERROR, "%s", "a gRPC core error");
  grpc_shutdown();
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  for (const std::string& line : lines) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    EXPECT_TRUE(j.contains("time") && j.contains("level")) << line;
  }
  EXPECT_EQ(nlohmann::json::parse(lines[0])["msg"], "table \"caf\xef\xbf\xbd\" loaded");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["rpc"], "RelativeBias");
  const nlohmann::json grpc_line = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(grpc_line["level"], "error");
  EXPECT_NE(grpc_line["msg"].get<std::string>().find("a gRPC core error"), std::string::npos);
}

// Issue #20: protobuf wrote a plain-text ERROR line to stderr for each request with invalid UTF-8
// in a string field; its lines now go through spdlog (JSON here), as warnings, at most 10 a
// second.
TEST_F(LoggingTest, ProtobufLinesAreJsonAndRateLimited) {
  ConfigureLogging(LogFormat::kJson, spdlog::level::info);
  v1::ApplyRopeRequest request;
  request.mutable_config()->set_hf_config_json("\xc3\x28");
  std::string bytes;
  ASSERT_TRUE(request.SerializePartialToString(&bytes));
  out_.str("");  // serializing logged too
  for (int i = 0; i < 50; ++i) {
    v1::ApplyRopeRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes));
  }
  const std::vector<std::string> lines = Lines();
  ASSERT_FALSE(lines.empty());
  // 50 lines within a second or two: at most 10 a second, and the seconds are few.
  EXPECT_LE(lines.size(), 30u) << out_.str();
  for (const std::string& line : lines) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    EXPECT_EQ(j["level"], "warning") << line;
    EXPECT_NE(j["msg"].get<std::string>().find("protobuf"), std::string::npos) << line;
    EXPECT_NE(j["msg"].get<std::string>().find("invalid UTF-8"), std::string::npos) << line;
  }
}

TEST(LogRateLimitTest, AdmitsAtMostPerSecondAndCountsTheRest) {
  using std::chrono::steady_clock;
  const auto second = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(steady_clock::now().time_since_epoch())
        .count();
  };
  // Ten tries within one second of the steady clock (tried again when they straddle one).
  for (int attempt = 0;; ++attempt) {
    LogRateLimit limit(3);
    const int64_t first = second();
    int admitted = 0;
    int64_t dropped = -1;
    for (int i = 0; i < 10; ++i) admitted += limit.Admit(&dropped) ? 1 : 0;
    if (second() != first && attempt < 3) continue;
    EXPECT_EQ(admitted, 3);
    EXPECT_EQ(dropped, 0);  // set by the last line admitted: none refused before it
    // The next second: admitted again, and told how many were refused.
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    ASSERT_TRUE(limit.Admit(&dropped));
    EXPECT_EQ(dropped, 7);
    break;
  }
}

TEST_F(LoggingTest, TextAccessLine) {
  ConfigureLogging(LogFormat::kText, spdlog::level::info);
  MakeCalls();
  const std::string text = out_.str();
  EXPECT_NE(text.find("rpc=ApplyRope request_id=\"req-42\\\"x\" status=OK latency_ms="),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("backend=reference input=\"q=FLOAT32[1,4,2,8] positions=range[3,+0) "
                      "config.head_dim=8\" output=\"q=FLOAT32[1,4,2,8]\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rpc=AlibiSlopes request_id=\"-\" status=INVALID_ARGUMENT"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("error=\"num_heads"), std::string::npos) << text;
  // Source locations stay out of the text pattern.
  EXPECT_EQ(text.find("posenc-access"), std::string::npos) << text;
}

TEST_F(LoggingTest, LevelFiltersAccessLines) {
  ConfigureLogging(LogFormat::kJson, spdlog::level::err);
  MakeCalls();
  EXPECT_EQ(out_.str(), "");  // OK and INVALID_ARGUMENT lines are info
  ConfigureLogging(LogFormat::kJson, spdlog::level::info);
  EXPECT_TRUE(AccessLogEnabled(grpc::StatusCode::OK));
  ConfigureLogging(LogFormat::kJson, spdlog::level::off);
  EXPECT_FALSE(AccessLogEnabled(grpc::StatusCode::INTERNAL));
}

TEST(LoggingFlagsTest, ParseFormatAndLevel) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  const auto bad_format = ParseLogFormat("xml");
  ASSERT_FALSE(bad_format.ok());
  EXPECT_NE(bad_format.status().message().find("--log_format"), absl::string_view::npos);
  EXPECT_NE(bad_format.status().message().find("\"xml\""), absl::string_view::npos);

  EXPECT_EQ(*ParseLogLevel("trace"), spdlog::level::trace);
  EXPECT_EQ(*ParseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(*ParseLogLevel("info"), spdlog::level::info);
  EXPECT_EQ(*ParseLogLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(*ParseLogLevel("error"), spdlog::level::err);
  EXPECT_EQ(*ParseLogLevel("off"), spdlog::level::off);
  const auto bad_level = ParseLogLevel("verbose");
  ASSERT_FALSE(bad_level.ok());
  EXPECT_EQ(bad_level.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_level.status().message().find("--log_level"), absl::string_view::npos);
}

TEST(LoggingFlagsTest, JsonEscapeRoundTrips) {
  const std::string text = "a\"b\\c\nd\re\tf\x01g\x1f\x7fh \xc3\xa9";
  const nlohmann::json j = nlohmann::json::parse("\"" + JsonEscape(text) + "\"");
  EXPECT_EQ(j.get<std::string>(), text);
}

TEST(SummaryTest, TensorsAndSizes) {
  v1::RopeCacheRequest rope;
  *rope.mutable_positions()->mutable_ids() = testing::Int64Tensor({2, 3}, {0, 1, 2, 3, 4, 5});
  rope.mutable_config()->set_head_dim(128);
  rope.set_output_dtype(v1::DTYPE_BFLOAT16);
  EXPECT_EQ(SummarizeRequest(rope),
            "positions=ids:INT64[2,3] config.head_dim=128 output_dtype=BFLOAT16");

  v1::RopeCacheResponse cache;
  cache.mutable_cos()->set_dtype(v1::DTYPE_FLOAT32);
  cache.mutable_cos()->add_shape(6);
  cache.mutable_cos()->add_shape(64);
  *cache.mutable_sin() = cache.cos();
  EXPECT_EQ(SummarizeResponse(cache), "cos=FLOAT32[6,64] sin=FLOAT32[6,64]");

  v1::RelativeBiasRequest bias;
  bias.set_q_len(4);
  bias.set_k_len(6);
  bias.set_table_name("t5/rel");
  EXPECT_EQ(SummarizeRequest(bias), "q_len=4 k_len=6 table_name=\"t5/rel\"");
  EXPECT_EQ(SummarizeRequest(v1::GetServerInfoRequest()), "");
}

// Every field kind by reflection: enums by their wire names, nested messages dotted, long
// strings and bytes by length, repeated fields by count, explicit zeros of optional fields;
// a response's nested (derived) messages left out.
TEST(SummaryTest, EveryFieldKindByReflection) {
  v1::ApplyRopeRequest apply;
  apply.mutable_q()->set_dtype(v1::DTYPE_FLOAT16);
  apply.mutable_q()->add_shape(2);
  apply.mutable_config()->set_hf_config_json(std::string(100, ' '));
  apply.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_YARN);
  apply.mutable_config()->mutable_scaling()->set_factor(0);
  apply.mutable_config()->add_mrope_section(16);
  apply.mutable_config()->add_mrope_section(24);
  apply.set_layout(v1::TENSOR_LAYOUT_BHSD);
  EXPECT_EQ(SummarizeRequest(apply),
            "q=FLOAT16[2] config.scaling.type=YARN config.scaling.factor=0 "
            "config.mrope_section=[2] config.hf_config_json_bytes=100 layout=BHSD");

  v1::DescribeRopeResponse describe;
  describe.set_model_type("llama");
  describe.add_groups()->mutable_derived()->set_head_dim(128);
  describe.add_warnings("w");
  EXPECT_EQ(SummarizeResponse(describe), "model_type=\"llama\" groups=[1] warnings=[1]");
}

}  // namespace
}  // namespace posenc::server
