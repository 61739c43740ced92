#include "server/error_details.h"

#include <cctype>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace posenc::server {
namespace {

bool IsNameChar(char c) {
  return std::islower(static_cast<unsigned char>(c)) != 0 ||
         std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// The length of a field path at the start of `s` (name{.name}, each name optionally indexed
// "[3]"), 0 when `s` does not start with one.
size_t PathLength(std::string_view s) {
  size_t i = 0;
  while (true) {
    if (i >= s.size() || !(std::islower(static_cast<unsigned char>(s[i])) != 0 || s[i] == '_')) {
      return 0;
    }
    while (i < s.size() && IsNameChar(s[i])) ++i;
    if (i < s.size() && s[i] == '[') {
      const size_t close = s.find(']', i);
      if (close == std::string_view::npos || close == i + 1) return 0;
      for (size_t j = i + 1; j < close; ++j) {
        if (std::isdigit(static_cast<unsigned char>(s[j])) == 0) return 0;
      }
      i = close + 1;
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      continue;
    }
    return i;
  }
}

std::string_view ReasonFor(const grpc::Status& status, const ErrorCause& cause,
                           std::string_view field) {
  if (!cause.reason.empty()) return cause.reason;
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      if (cause.unparseable) return "UNPARSEABLE_REQUEST";
      return field.empty() ? "INVALID_REQUEST" : "INVALID_FIELD";
    case grpc::StatusCode::OUT_OF_RANGE: return "POSITION_OUT_OF_RANGE";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return cause.overloaded ? "OVERLOADED" : "LIMIT_EXCEEDED";
    // Only shared memory answers these (server/shared_memory.h), but the inference protocol's
    // unknown models (MODEL_NOT_FOUND, given as the cause's reason).
    case grpc::StatusCode::NOT_FOUND: return "SHARED_MEMORY_NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "SHARED_MEMORY_EXISTS";
    case grpc::StatusCode::FAILED_PRECONDITION: return "SHARED_MEMORY_UNAVAILABLE";
    default: return "";
  }
}

template <typename Message>
void Pack(const Message& message, google::rpc::Status* out) {
  out->add_details()->PackFrom(message);
}

}  // namespace

std::string_view FieldOfMessage(std::string_view message) {
  const size_t n = PathLength(message);
  if (n == 0 || message.substr(n, 2) != ": ") return {};
  return message.substr(0, n);
}

std::string_view LimitOfMessage(std::string_view message) {
  const size_t at = message.find("--max_");
  if (at == std::string_view::npos) return {};
  size_t end = at + 2;
  while (end < message.size() && IsNameChar(message[end])) ++end;
  return message.substr(at + 2, end - at - 2);
}

grpc::Status WithErrorDetails(const grpc::Status& status, const ErrorCause& cause) {
  if (!status.error_details().empty()) return status;
  const std::string& message = status.error_message();
  const std::string_view field = cause.unparseable ? std::string_view() : FieldOfMessage(message);
  const std::string_view reason = ReasonFor(status, cause, field);
  if (reason.empty()) return status;

  google::rpc::Status details;
  details.set_code(static_cast<int>(status.error_code()));
  details.set_message(message);
  google::rpc::ErrorInfo info;
  info.set_reason(std::string(reason));
  info.set_domain(std::string(kErrorDomain));
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    const std::string_view limit = LimitOfMessage(message);
    if (!limit.empty()) (*info.mutable_metadata())["limit"] = std::string(limit);
  }
  Pack(info, &details);
  if (!field.empty()) {
    google::rpc::BadRequest bad;
    google::rpc::BadRequest::FieldViolation* violation = bad.add_field_violations();
    violation->set_field(std::string(field));
    violation->set_description(message.substr(field.size() + 2));
    Pack(bad, &details);
  }
  if (cause.overloaded) {
    google::rpc::RetryInfo retry;
    const auto ms = cause.retry_after.count();
    retry.mutable_retry_delay()->set_seconds(ms / 1000);
    retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>(ms % 1000 * 1000000));
    Pack(retry, &details);
  }
  return grpc::Status(status.error_code(), message, details.SerializeAsString());
}

}  // namespace posenc::server
