// posenc::client::ErrorDetails: what a failed call says beyond its code and message.
//
// Every INVALID_ARGUMENT, OUT_OF_RANGE and RESOURCE_EXHAUSTED the server returns carries a
// google.rpc.Status (the grpc-status-details-bin trailer; the contract is in posenc.proto's
// header comment). The client keeps it on the absl::Status it returns, as a payload under
// kStatusDetailsTypeUrl; GetErrorDetails reads it:
//
//   absl::StatusOr<posenc::client::ApplyRopeResult> r = client->ApplyRope(options);
//   if (!r.ok()) {
//     posenc::client::ErrorDetails e = posenc::client::GetErrorDetails(r.status());
//     if (e.reason == "INVALID_FIELD") std::cerr << e.field << ": " << e.description << "\n";
//     if (e.retry_delay) retry_after(*e.retry_delay);
//   }
//
// Thread-safety: pure functions.
#ifndef POSENC_CLIENT_ERRORS_H_
#define POSENC_CLIENT_ERRORS_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace posenc::client {

// The payload type URL under which a returned absl::Status keeps the server's google.rpc.Status
// (serialized), as gRPC's own C++ API names it.
inline constexpr std::string_view kStatusDetailsTypeUrl = "type.googleapis.com/google.rpc.Status";

struct ErrorDetails {
  // google.rpc.ErrorInfo: "INVALID_FIELD", "UNPARSEABLE_REQUEST", "INVALID_REQUEST",
  // "POSITION_OUT_OF_RANGE", "LIMIT_EXCEEDED", "OVERLOADED"; "" when the status carries none
  // (an OK status, a local check of the client, a failure to reach the server).
  std::string reason;
  std::string domain;                           // "posenc.v1"
  std::map<std::string, std::string> metadata;  // "limit": the server flag over its limit
  // google.rpc.BadRequest's first field violation: the request field ("config.scaling.factor",
  // "q.shape[1]") and what is wrong with it; "" when the error names no field.
  std::string field;
  std::string description;
  // google.rpc.RetryInfo: wait at least this long before a retry (OVERLOADED).
  std::optional<std::chrono::milliseconds> retry_delay;
};

// The details of `status` (all empty when it carries none or they do not parse).
ErrorDetails GetErrorDetails(const absl::Status& status);

}  // namespace posenc::client

#endif  // POSENC_CLIENT_ERRORS_H_
