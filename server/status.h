// Status plumbing of the server layer: absl::Status -> grpc::Status, and early-return macros.
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

namespace posenc::server {

// The same code and message on the wire.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace posenc::server

// Returns `expr` from the enclosing function when it is not OK. `expr` is an absl::Status.
#define POSENC_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status posenc_status_ = (expr);          \
    if (!posenc_status_.ok()) return posenc_status_; \
  } while (false)

#define POSENC_STATUS_CONCAT_INNER_(a, b) a##b
#define POSENC_STATUS_CONCAT_(a, b) POSENC_STATUS_CONCAT_INNER_(a, b)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its status from the enclosing
// function. `lhs` may be a declaration: POSENC_ASSIGN_OR_RETURN(auto shape, Plan(...));
#define POSENC_ASSIGN_OR_RETURN(lhs, rexpr) \
  POSENC_ASSIGN_OR_RETURN_IMPL_(POSENC_STATUS_CONCAT_(posenc_statusor_, __LINE__), lhs, rexpr)

// `lhs` may be a declaration, so it cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define POSENC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // POSENC_SERVER_STATUS_H_
