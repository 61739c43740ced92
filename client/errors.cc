#include "posenc/errors.h"

#include <string>

#include "absl/strings/cord.h"
#include "client/errors_internal.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace posenc::client {

ErrorDetails GetErrorDetails(const absl::Status& status) {
  ErrorDetails out;
  const auto payload = status.GetPayload(std::string(kStatusDetailsTypeUrl));
  google::rpc::Status details;
  if (!payload.has_value() || !details.ParseFromString(std::string(*payload))) return out;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::BadRequest bad;
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&info)) {
      out.reason = info.reason();
      out.domain = info.domain();
      out.metadata.insert(info.metadata().begin(), info.metadata().end());
    } else if (any.UnpackTo(&bad) && bad.field_violations_size() > 0) {
      out.field = bad.field_violations(0).field();
      out.description = bad.field_violations(0).description();
    } else if (any.UnpackTo(&retry)) {
      out.retry_delay = std::chrono::milliseconds(retry.retry_delay().seconds() * 1000 +
                                                  retry.retry_delay().nanos() / 1000000);
    }
  }
  return out;
}

namespace internal {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (!status.error_details().empty()) {
    out.SetPayload(std::string(kStatusDetailsTypeUrl), absl::Cord(status.error_details()));
  }
  return out;
}

}  // namespace internal
}  // namespace posenc::client
