// Structured errors: the google.rpc.Status details every failed posenc call carries beside its
// code and message (the contract is in posenc.proto's header comment): ErrorInfo {reason,
// domain "posenc.v1", metadata}, BadRequest field violations, RetryInfo.
//
// The details are read off what the server already says, in one place: every message that names
// a request field starts with the field's path ("config.scaling.factor: expected ..."), and every
// limit is named as its flag ("--max_output_elements=..."). tests/server/error_details_test.cc
// holds every malformed-request row to this.
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_ERROR_DETAILS_H_
#define POSENC_SERVER_ERROR_DETAILS_H_

#include <grpcpp/support/status.h>

#include <chrono>
#include <string>
#include <string_view>

namespace posenc::server {

inline constexpr std::string_view kErrorDomain = "posenc.v1";

// What the service knows about a failure that the message does not say.
struct ErrorCause {
  bool overloaded = false;   // refused by admission: OVERLOADED, RetryInfo{retry_after}
  bool unparseable = false;  // the request bytes did not parse: UNPARSEABLE_REQUEST
  std::chrono::milliseconds retry_after{0};
  // The ErrorInfo reason when the code alone does not say it (NOT_FOUND of a model:
  // MODEL_NOT_FOUND); empty: the reason of the code.
  std::string_view reason;
};

// `status` with its google.rpc.Status details, for the codes the contract covers
// (INVALID_ARGUMENT, OUT_OF_RANGE, RESOURCE_EXHAUSTED, NOT_FOUND, ALREADY_EXISTS,
// FAILED_PRECONDITION); any other status, and one that carries details already, unchanged.
grpc::Status WithErrorDetails(const grpc::Status& status, const ErrorCause& cause);

// The request field a message names: its leading path up to ": " ("config.scaling.factor",
// "q.shape[1]"); "" when the message does not start with one.
std::string_view FieldOfMessage(std::string_view message);
// The server flag a RESOURCE_EXHAUSTED message names ("max_output_elements"); "" when none.
std::string_view LimitOfMessage(std::string_view message);

}  // namespace posenc::server

#endif  // POSENC_SERVER_ERROR_DETAILS_H_
