// Issue #8's hostile inputs that are not one malformed field of a valid request: tensors with
// millions of dimensions, long client strings (oversized and deeply nested config.json text:
// tests/hf/config_test.cc). Each
// gets INVALID_ARGUMENT naming the field, with the client's text abbreviated in the message.
#include <string>

#include "gtest/gtest.h"
#include "kernels/common/types.h"
#include "server/convert.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

TEST(HostileInputTest, MillionsOfDimensionsAreCappedAndNotEchoed) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::DTYPE_FLOAT32);
  for (int i = 0; i < 1 << 20; ++i) tensor.add_shape(1);
  const auto view = ToConstView(tensor, DTypeClass::kFloat, "q");
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(view.status().message().find("q.shape: expected at most 8 dimensions"),
            std::string::npos);
  EXPECT_NE(view.status().message().find("(1048560 more)"), std::string::npos);
  EXPECT_LT(view.status().message().size(), 200u);
}

TEST(HostileInputTest, LongClientStringsAreAbbreviated) {
  testing::TestContext t;
  v1::RelativeBiasRequest req;
  req.set_q_len(2);
  req.set_k_len(2);
  req.set_table_name(std::string(1 << 20, 'x'));
  v1::RelativeBiasResponse resp;
  const grpc::Status status = HandleRelativeBias(t.ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("table_name"), std::string::npos);
  EXPECT_NE(status.error_message().find("more bytes)"), std::string::npos);
  EXPECT_LT(status.error_message().size(), 300u);

  v1::RopeCacheRequest cache;
  cache.mutable_config()->set_head_dim(64);
  cache.mutable_config()->set_layer_type(std::string(100000, 'y'));
  cache.mutable_positions()->mutable_range()->set_count(1);
  v1::RopeCacheResponse cache_resp;
  const grpc::Status layer = HandleRopeCache(t.ctx, cache, &cache_resp);
  EXPECT_EQ(layer.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(layer.error_message().find("config.layer_type"), std::string::npos);
  EXPECT_LT(layer.error_message().size(), 300u);
}

TEST(HostileInputTest, AbbreviateAndShapeString) {
  EXPECT_EQ(kernels::Abbreviate("short"), "short");
  EXPECT_EQ(kernels::Abbreviate(std::string(70, 'a'), 64),
            std::string(64, 'a') + "... (6 more bytes)");
  EXPECT_EQ(kernels::ShapeString({1, 2, 3}), "[1, 2, 3]");
  const kernels::Shape many(20, 7);
  EXPECT_EQ(kernels::ShapeString(many),
            "[7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, ... (4 more)]");
}

}  // namespace
}  // namespace posenc::server
