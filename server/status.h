// Status plumbing of the server layer: absl::Status -> grpc::Status (the early-return macros
// are kernels/common/status.h, re-exported here).
//
// absl::StatusCode and grpc::StatusCode use the same numbers (both are the canonical RPC
// codes); status.cc guards the cast with static_asserts.
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_STATUS_H_
#define POSENC_SERVER_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/status.h"

namespace posenc::server {

// The same code and message on the wire.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace posenc::server

#endif  // POSENC_SERVER_STATUS_H_
