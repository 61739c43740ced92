#include "server/logging.h"

#include <grpc/support/log.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/stubs/logging.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace posenc::server {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

// Marks access lines (their payload is already a JSON object in json mode). Line 0
// keeps the source location out of text patterns.
constexpr char kAccessMarker[] = "posenc-access";

// Member order as inserted (time, level first); invalid UTF-8 from clients replaced (U+FFFD).
using Json = nlohmann::ordered_json;

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void Append(spdlog::memory_buf_t& dest, absl::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

// One JSON object per line: {"time":"...","level":"...", <access members> | "msg":"..."}.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(since_epoch - seconds).count();
    const std::time_t t = static_cast<std::time_t>(seconds.count());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char time[64];
    std::snprintf(time, sizeof(time), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long long>(micros));
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    const absl::string_view payload(msg.payload.data(), msg.payload.size());
    Json line = {{"time", time}, {"level", std::string(level.data(), level.size())}};
    std::string text = Dump(line);
    if (msg.source.filename == kAccessMarker) {
      // The access members, already a JSON object: {"time":..,"level":.., <its members>}.
      text.pop_back();
      Append(dest, text);
      Append(dest, ",");
      Append(dest, payload.substr(1));
    } else {
      line["msg"] = std::string(payload);
      Append(dest, Dump(line));
    }
    Append(dest, "\n");
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// gRPC's own log lines (gpr_log) through spdlog, so that --log_format and --log_level apply to
// them too.
void LogFromGrpc(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  const char* file = args->file != nullptr ? args->file : "?";
  spdlog::default_logger_raw()->log(level, "grpc {}:{}: {}", file, args->line,
                                    args->message != nullptr ? args->message : "");
}

// protobuf's own log lines through spdlog, at most kProtobufLinesPerSecond a second: protobuf
// logs one line per request whose bytes it rejects (e.g. "String field '...' contains invalid
// UTF-8 data when parsing a protocol buffer"), so a caller could otherwise fill the log. Such
// lines are the caller's error (its access line says what failed), hence ERROR becomes warn.
constexpr int64_t kProtobufLinesPerSecond = 10;

void LogFromProtobuf(google::protobuf::LogLevel level, const char* filename, int line,
                     const std::string& message) {
  static LogRateLimit limit(kProtobufLinesPerSecond);
  int64_t dropped = 0;
  if (!limit.Admit(&dropped)) return;
  spdlog::level::level_enum to = spdlog::level::info;
  if (level == google::protobuf::LOGLEVEL_WARNING || level == google::protobuf::LOGLEVEL_ERROR) {
    to = spdlog::level::warn;
  }
  if (level == google::protobuf::LOGLEVEL_FATAL) to = spdlog::level::critical;
  const std::string more =
      dropped > 0 ? absl::StrCat(" (", dropped, " earlier protobuf lines not logged)") : "";
  spdlog::default_logger_raw()->log(to, "protobuf {}:{}: {}{}",
                                    filename != nullptr ? filename : "?", line, message, more);
}

}  // namespace

LogRateLimit::LogRateLimit(int64_t per_second) : per_second_(per_second) {}

bool LogRateLimit::Admit(int64_t* dropped) {
  const int64_t second = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  const std::lock_guard<std::mutex> lock(mu_);
  if (second != second_) {
    second_ = second;
    written_ = 0;
  }
  if (written_ >= per_second_) {
    ++dropped_;
    return false;
  }
  ++written_;
  *dropped = dropped_;
  dropped_ = 0;
  return true;
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format: expected text or json, got \"", text, "\""));
}

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view text) {
  if (text == "trace") return spdlog::level::trace;
  if (text == "debug") return spdlog::level::debug;
  if (text == "info") return spdlog::level::info;
  if (text == "warn") return spdlog::level::warn;
  if (text == "error") return spdlog::level::err;
  if (text == "off") return spdlog::level::off;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level: expected trace, debug, info, warn, error or off, got \"", text, "\""));
}

void ConfigureLogging(LogFormat format, spdlog::level::level_enum level) {
  g_format.store(format, std::memory_order_relaxed);
  spdlog::logger* logger = spdlog::default_logger_raw();
  logger->set_level(level);
  if (format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_formatter(std::make_unique<spdlog::pattern_formatter>());
  }
  gpr_set_log_function(&LogFromGrpc);
  google::protobuf::SetLogHandler(&LogFromProtobuf);
}

LogFormat CurrentLogFormat() { return g_format.load(std::memory_order_relaxed); }

std::string JsonEscape(absl::string_view text) {
  const std::string quoted = Dump(Json(std::string(text)));
  return quoted.substr(1, quoted.size() - 2);
}

spdlog::level::level_enum AccessLevel(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS: return spdlog::level::err;
    default: return spdlog::level::info;
  }
}

bool AccessLogEnabled(grpc::StatusCode code) {
  return spdlog::default_logger_raw()->should_log(AccessLevel(code));
}

void LogAccess(const AccessRecord& r) {
  // A client chooses the request id: bound its length in the log.
  const absl::string_view request_id = r.request_id.substr(0, 200);
  const std::string status = absl::StatusCodeToString(static_cast<absl::StatusCode>(r.code));
  std::string line;
  if (CurrentLogFormat() == LogFormat::kJson) {
    Json record = {{"rpc", std::string(r.method)},
                   {"request_id", std::string(request_id)},
                   {"status", status},
                   {"latency_ms", std::round(r.latency_ms * 1000) / 1000},
                   {"backend", std::string(r.backend)},
                   {"input", std::string(r.input)},
                   {"output", std::string(r.output)},
                   {"request_bytes", r.request_bytes},
                   {"response_bytes", r.response_bytes}};
    if (r.code != grpc::StatusCode::OK) record["error"] = std::string(r.error);
    line = Dump(record);
  } else {
    line = absl::StrFormat(
        "rpc=%s request_id=\"%s\" status=%s latency_ms=%.3f backend=%s input=\"%s\" output=\"%s\" "
        "request_bytes=%u response_bytes=%u",
        r.method, JsonEscape(request_id), status, r.latency_ms, r.backend, JsonEscape(r.input),
        JsonEscape(r.output), r.request_bytes, r.response_bytes);
    if (r.code != grpc::StatusCode::OK) {
      absl::StrAppend(&line, " error=\"", JsonEscape(r.error), "\"");
    }
  }
  spdlog::default_logger_raw()->log(spdlog::source_loc{kAccessMarker, 0, nullptr},
                                    AccessLevel(r.code), "{}", line);
}

}  // namespace posenc::server
