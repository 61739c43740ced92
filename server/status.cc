#include "server/status.h"

namespace posenc::server {
namespace {

#define POSENC_SAME_CODE_(absl_code, grpc_code)                    \
  static_assert(static_cast<int>(absl::StatusCode::absl_code) ==   \
                    static_cast<int>(grpc::StatusCode::grpc_code), \
                "absl::StatusCode::" #absl_code " != grpc::" #grpc_code)

POSENC_SAME_CODE_(kOk, OK);
POSENC_SAME_CODE_(kCancelled, CANCELLED);
POSENC_SAME_CODE_(kUnknown, UNKNOWN);
POSENC_SAME_CODE_(kInvalidArgument, INVALID_ARGUMENT);
POSENC_SAME_CODE_(kDeadlineExceeded, DEADLINE_EXCEEDED);
POSENC_SAME_CODE_(kNotFound, NOT_FOUND);
POSENC_SAME_CODE_(kAlreadyExists, ALREADY_EXISTS);
POSENC_SAME_CODE_(kPermissionDenied, PERMISSION_DENIED);
POSENC_SAME_CODE_(kResourceExhausted, RESOURCE_EXHAUSTED);
POSENC_SAME_CODE_(kFailedPrecondition, FAILED_PRECONDITION);
POSENC_SAME_CODE_(kAborted, ABORTED);
POSENC_SAME_CODE_(kOutOfRange, OUT_OF_RANGE);
POSENC_SAME_CODE_(kUnimplemented, UNIMPLEMENTED);
POSENC_SAME_CODE_(kInternal, INTERNAL);
POSENC_SAME_CODE_(kUnavailable, UNAVAILABLE);
POSENC_SAME_CODE_(kDataLoss, DATA_LOSS);
POSENC_SAME_CODE_(kUnauthenticated, UNAUTHENTICATED);

#undef POSENC_SAME_CODE_

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  // absl reserves no codes above 16 today; anything unexpected is reported as UNKNOWN.
  if (code < 0 || code > static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)) {
    return grpc::Status(grpc::StatusCode::UNKNOWN, std::string(status.message()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::string(status.message()));
}

}  // namespace posenc::server
