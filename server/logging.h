// Logging of posenc-server: level and format (--log_level, --log_format) and the access line.
//
// Text format: spdlog's default pattern; the access line is key=value pairs:
//   [2024-05-01 12:00:00.123] [info] rpc=ApplyRope request_id=abc status=OK latency_ms=0.412
//   backend=cpu input="q=FLOAT32[1,16,8,64] k=FLOAT32[1,16,2,64] positions=range[0,+16)"
//   output="q=FLOAT32[1,16,8,64] k=FLOAT32[1,16,2,64]" request_bytes=41022 response_bytes=41004
// JSON format: every line is one JSON object with "time" (UTC, ISO 8601) and "level"; the
// access line adds rpc, request_id, status, latency_ms, backend, input, output, request_bytes,
// response_bytes (and error when not OK); any other line carries its text as "msg". Lines are
// built with nlohmann-json (invalid UTF-8 from clients becomes U+FFFD), and gRPC's own log lines
// come through spdlog too (gpr_set_log_function), so with --log_format=json every line is JSON;
// so do protobuf's (google::protobuf::SetLogHandler), at most 10 a second (LogRateLimit), as
// protobuf logs a line for each request whose bytes it rejects.
//
// Thread-safety: ConfigureLogging before serving (it swaps the default logger's formatter);
// LogAccess from any thread.
#ifndef POSENC_SERVER_LOGGING_H_
#define POSENC_SERVER_LOGGING_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spdlog/common.h"

namespace posenc::server {

enum class LogFormat { kText, kJson };

// "text" or "json"; INVALID_ARGUMENT naming --log_format otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);
// trace, debug, info, warn, error or off; INVALID_ARGUMENT naming --log_level otherwise.
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view text);

// At most `per_second` lines in each second of the steady clock. Thread-safe.
class LogRateLimit {
 public:
  explicit LogRateLimit(int64_t per_second);
  // Whether a line may be written now; when it may, `dropped` gets the number of lines refused
  // since the last one admitted (to say so in this one).
  bool Admit(int64_t* dropped);

 private:
  const int64_t per_second_;
  std::mutex mu_;
  int64_t second_ = -1;  // guarded by mu_
  int64_t written_ = 0;  // guarded by mu_
  int64_t dropped_ = 0;  // guarded by mu_
};

// Applies the format and level to spdlog's default logger (call again after replacing it), and
// routes gRPC's and protobuf's log lines to it.
void ConfigureLogging(LogFormat format, spdlog::level::level_enum level);
LogFormat CurrentLogFormat();

// `text` as the inside of a JSON string (quotes, backslashes and control characters escaped;
// valid UTF-8 as it is, invalid bytes replaced by U+FFFD).
std::string JsonEscape(absl::string_view text);

// One finished RPC.
struct AccessRecord {
  absl::string_view method;      // "ApplyRope"
  absl::string_view request_id;  // x-request-id metadata, "-" when absent
  grpc::StatusCode code = grpc::StatusCode::OK;
  double latency_ms = 0;
  absl::string_view backend;  // "cpu", "reference"
  absl::string_view input;    // request summary (summary.h)
  absl::string_view output;   // response summary, empty unless OK
  size_t request_bytes = 0;
  size_t response_bytes = 0;
  absl::string_view error;  // the status message, empty when OK
};

// The level of `code`'s access line: error for INTERNAL, UNKNOWN and DATA_LOSS, else info.
spdlog::level::level_enum AccessLevel(grpc::StatusCode code);
// Whether an access line for `code` would be written (so callers can skip building summaries).
bool AccessLogEnabled(grpc::StatusCode code);
// Writes the access line in the current format.
void LogAccess(const AccessRecord& record);

}  // namespace posenc::server

#endif  // POSENC_SERVER_LOGGING_H_
