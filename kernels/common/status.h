// Early-return macros for absl::Status / absl::StatusOr, the one status idiom of the whole tree
// (kernels, server, client and tests), and the one INVALID_ARGUMENT-naming-a-field constructor.
//
//   POSENC_RETURN_IF_ERROR(ValidateRopeConfig(config));
//   POSENC_ASSIGN_OR_RETURN(ApplyRopePlan plan, PlanApplyRope(args));
#ifndef POSENC_KERNELS_COMMON_STATUS_H_
#define POSENC_KERNELS_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace posenc::kernels {

// INVALID_ARGUMENT naming the request field: "config.rotary_dim: expected ..., got ...".
inline absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace posenc::kernels

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

#endif  // POSENC_KERNELS_COMMON_STATUS_H_
