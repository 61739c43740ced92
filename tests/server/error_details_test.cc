// server/error_details.h: the field and limit read off a message, and the details attached.
#include "server/error_details.h"

#include "client/errors_internal.h"
#include "gtest/gtest.h"
#include "posenc/errors.h"

namespace posenc::server {
namespace {

TEST(ErrorDetailsTest, FieldIsTheMessagesLeadingPath) {
  EXPECT_EQ(FieldOfMessage("config.scaling.factor: expected > 0, got -1"), "config.scaling.factor");
  EXPECT_EQ(FieldOfMessage("q.shape[1]: expected a size >= 1, got 0"), "q.shape[1]");
  EXPECT_EQ(FieldOfMessage("config.scaling.long_factor[2]: expected finite"),
            "config.scaling.long_factor[2]");
  EXPECT_EQ(FieldOfMessage("positions: token 3 has position 9"), "positions");
  EXPECT_EQ(FieldOfMessage("response of 3e9 bytes is over --max_message_bytes=1"), "");
  EXPECT_EQ(FieldOfMessage("q and k: differ"), "");
  EXPECT_EQ(FieldOfMessage("q.shape[]: x"), "");
  EXPECT_EQ(FieldOfMessage("Q: upper case is no field"), "");
  EXPECT_EQ(FieldOfMessage(""), "");
}

TEST(ErrorDetailsTest, LimitIsTheFlagNamed) {
  EXPECT_EQ(LimitOfMessage("bias has 7e13 elements, over --max_output_elements=67108864"),
            "max_output_elements");
  EXPECT_EQ(LimitOfMessage("no flag here"), "");
}

TEST(ErrorDetailsTest, CodesOutsideTheContractAreUnchanged) {
  const grpc::Status status(grpc::StatusCode::UNAVAILABLE, "draining");
  EXPECT_TRUE(WithErrorDetails(status, {}).error_details().empty());
  EXPECT_TRUE(WithErrorDetails(grpc::Status::OK, {}).ok());
}

TEST(ErrorDetailsTest, ClientReadsEveryDetail) {
  const grpc::Status limit = WithErrorDetails(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "x is over --max_message_bytes=9"), {});
  client::ErrorDetails d = client::GetErrorDetails(client::internal::FromGrpcStatus(limit));
  EXPECT_EQ(d.reason, "LIMIT_EXCEEDED");
  EXPECT_EQ(d.domain, "posenc.v1");
  EXPECT_EQ(d.metadata["limit"], "max_message_bytes");
  EXPECT_EQ(d.field, "");
  EXPECT_FALSE(d.retry_delay.has_value());

  const grpc::Status busy =
      WithErrorDetails(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy"),
                       {.overloaded = true, .retry_after = std::chrono::milliseconds(1500)});
  d = client::GetErrorDetails(client::internal::FromGrpcStatus(busy));
  EXPECT_EQ(d.reason, "OVERLOADED");
  EXPECT_EQ(d.retry_delay, std::chrono::milliseconds(1500));

  const grpc::Status junk = WithErrorDetails(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: 5 bytes that do not parse"),
      {.unparseable = true});
  d = client::GetErrorDetails(client::internal::FromGrpcStatus(junk));
  EXPECT_EQ(d.reason, "UNPARSEABLE_REQUEST");
  EXPECT_EQ(d.field, "");

  const grpc::Status field = WithErrorDetails(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "config.base: expected > 0, got 0"), {});
  d = client::GetErrorDetails(client::internal::FromGrpcStatus(field));
  EXPECT_EQ(d.reason, "INVALID_FIELD");
  EXPECT_EQ(d.field, "config.base");
  EXPECT_EQ(d.description, "expected > 0, got 0");

  // A status without details (a local check) reads as empty.
  EXPECT_EQ(client::GetErrorDetails(absl::InvalidArgumentError("local")).reason, "");
}

}  // namespace
}  // namespace posenc::server
