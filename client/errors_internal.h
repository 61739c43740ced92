// grpc::Status -> absl::Status for every call of the client, keeping the server's structured
// details (posenc/errors.h). Private to the client library.
//
// Thread-safety: pure functions.
#ifndef POSENC_CLIENT_ERRORS_INTERNAL_H_
#define POSENC_CLIENT_ERRORS_INTERNAL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace posenc::client::internal {

// The same code and message (absl::StatusCode values are the gRPC codes, asserted in
// client.cc), with grpc-status-details-bin as the kStatusDetailsTypeUrl payload.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace posenc::client::internal

#endif  // POSENC_CLIENT_ERRORS_INTERNAL_H_
