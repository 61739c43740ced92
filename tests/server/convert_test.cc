// Wire conversions and status mapping.
#include "server/convert.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/status.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::FloatTensor;
using testing::Int64Tensor;

TEST(StatusTest, MapsCodesAndMessages) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(absl::OutOfRangeError("positions: past the table"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(s.error_message(), "positions: past the table");
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "odd")).error_code(),
            grpc::StatusCode::UNKNOWN);
}

absl::StatusOr<int> Half(int v) {
  if (v % 2 != 0) return absl::InvalidArgumentError("odd");
  return v / 2;
}

absl::Status Quarter(int v, int* out) {
  POSENC_ASSIGN_OR_RETURN(int half, Half(v));
  POSENC_ASSIGN_OR_RETURN(*out, Half(half));
  POSENC_RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusTest, Macros) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).message(), "odd");
}

TEST(ConvertTest, ToConstViewChecksEverything) {
  v1::Tensor t = FloatTensor({2, 4, 4});
  auto view = ToConstView(t, DTypeClass::kFloat, "q");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->dtype, kernels::DType::kFloat32);
  EXPECT_EQ(view->shape, (kernels::Shape{2, 4, 4}));
  EXPECT_EQ(view->data, t.data().data());

  t.mutable_data()->resize(100);
  EXPECT_EQ(ToConstView(t, DTypeClass::kFloat, "q").status().message(),
            "q: data has 100 bytes, expected 128 (FLOAT32 [2, 4, 4])");
  EXPECT_EQ(ToConstView(t, DTypeClass::kInt, "ids").status().message(),
            "ids.dtype: expected DTYPE_INT32 or DTYPE_INT64, got DTYPE_FLOAT32");

  // A scalar: empty shape, one element.
  v1::Tensor scalar = testing::MakeTensor<double>(v1::DTYPE_FLOAT64, {}, {2.5});
  auto s = ToConstView(scalar, DTypeClass::kFloat, "s");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->shape.empty());

  // Overflow of prod(shape) * sizeof without wrapping: 2^61 elements x 8 bytes.
  v1::Tensor huge;
  huge.set_dtype(v1::DTYPE_FLOAT64);
  huge.add_shape(int64_t{1} << 61);
  EXPECT_EQ(ToConstView(huge, DTypeClass::kFloat, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConvertTest, AllocateOutputSizesExactly) {
  v1::Tensor out;
  kernels::TensorView view =
      *AllocateOutput(kernels::OutputSpec{"out", kernels::DType::kBFloat16, {3, 5}}, &out);
  EXPECT_EQ(out.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(out.shape_size(), 2);
  EXPECT_EQ(out.data().size(), 30u);
  EXPECT_EQ(view.data, out.data().data());
  EXPECT_EQ(view.shape, (kernels::Shape{3, 5}));
}

TEST(ConvertTest, OutputDTypeDefaultsToFloat32) {
  EXPECT_EQ(*OutputDType(v1::DTYPE_UNSPECIFIED, "output_dtype"), kernels::DType::kFloat32);
  EXPECT_EQ(*OutputDType(v1::DTYPE_FLOAT16, "output_dtype"), kernels::DType::kFloat16);
  EXPECT_FALSE(OutputDType(v1::DTYPE_INT64, "output_dtype").ok());
  EXPECT_FALSE(OutputDType(1234, "output_dtype").ok());
}

TEST(ConvertTest, EnumsDefaultAndRejectUnknownNumbers) {
  EXPECT_EQ(*ToRopeStyle(0, "config.style"), kernels::RopeStyle::kNeox);
  EXPECT_EQ(*ToFreqScheme(0, "f"), std::nullopt);
  EXPECT_EQ(*ToFreqScheme(v1::FREQ_SCHEME_T2T, "f"), kernels::FreqScheme::kT2t);
  EXPECT_EQ(*ToBiasForm(0, "form"), kernels::BiasForm::kFull);
  EXPECT_EQ(*ToTensorLayout(0, "layout"), kernels::TensorLayout::kBSHD);
  EXPECT_EQ(*ToRopeScalingType(0, "t"), kernels::RopeScalingType::kDefault);
  EXPECT_EQ(ToAlibiMode(4, "mode").status().message(),
            "mode: unknown AlibiMode value 4 (expected one of ALIBI_MODE_UNSPECIFIED, "
            "ALIBI_MODE_CAUSAL, ALIBI_MODE_SYMMETRIC, ALIBI_MODE_BLOOM)");
}

TEST(ConvertTest, PositionSpecs) {
  kernels::PositionSpec spec;
  spec.kind = kernels::PositionSpec::Kind::kRange;
  ASSERT_TRUE(ToPositionSpec(nullptr, "positions", &spec).ok());
  EXPECT_EQ(spec.kind, kernels::PositionSpec::Kind::kDefault);

  v1::Positions p;
  p.mutable_cu_seqlens()->add_cu_seqlens(0);
  p.mutable_cu_seqlens()->add_cu_seqlens(3);
  p.mutable_cu_seqlens()->add_offsets(7);
  ASSERT_TRUE(ToPositionSpec(&p, "positions", &spec).ok());
  EXPECT_EQ(spec.kind, kernels::PositionSpec::Kind::kCuSeqlens);
  EXPECT_EQ(spec.cu_seqlens, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(spec.offsets, (std::vector<int64_t>{7}));

  *p.mutable_attention_mask() = Int64Tensor({1, 2}, {0, 1});
  ASSERT_TRUE(ToPositionSpec(&p, "positions", &spec).ok());
  EXPECT_EQ(spec.kind, kernels::PositionSpec::Kind::kAttentionMask);
  EXPECT_EQ(spec.mask.shape, (kernels::Shape{1, 2}));

  p.mutable_range()->set_start(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ToPositionSpec(&p, "positions", &spec).code(), absl::StatusCode::kInvalidArgument);
  p.mutable_range()->set_start(0);
  p.mutable_range()->set_count(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ToPositionSpec(&p, "positions", &spec).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConvertTest, RopeConfigOptionalFields) {
  v1::RopeConfig c;
  c.set_head_dim(64);
  c.set_rotary_dim(32);
  c.set_base(0.0);  // explicit zero is kept (and rejected later by validation)
  c.mutable_scaling()->set_type(v1::ROPE_SCALING_YARN);
  c.mutable_scaling()->set_factor(4);
  c.mutable_scaling()->set_truncate(false);
  c.mutable_scaling()->set_mscale(0.0);
  c.set_max_position_embeddings(4096);
  c.set_apply_attention_factor(false);
  c.set_seq_len(77);
  c.set_mrope_layout(v1::MROPE_LAYOUT_INTERLEAVED);
  auto k = ToRopeConfig(c);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->head_dim, 64);
  EXPECT_EQ(k->rotary_dim, 32);
  EXPECT_EQ(k->base, 0.0);
  EXPECT_EQ(k->scaling.type, kernels::RopeScalingType::kYarn);
  EXPECT_EQ(k->scaling.factor, 4.0);
  EXPECT_EQ(k->scaling.truncate, false);
  EXPECT_EQ(k->scaling.mscale, 0.0);
  EXPECT_FALSE(k->scaling.beta_fast.has_value());
  EXPECT_EQ(k->max_position_embeddings, 4096);
  EXPECT_FALSE(k->apply_attention_factor);
  EXPECT_EQ(k->seq_len, 77);
  EXPECT_EQ(k->mrope_layout, kernels::MropeLayout::kInterleaved);

  v1::RopeConfig defaults;
  auto d = ToRopeConfig(defaults);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->base, 10000.0);
  EXPECT_FALSE(d->rotary_dim.has_value());
  EXPECT_TRUE(d->apply_attention_factor);
  EXPECT_FALSE(d->seq_len.has_value());
}

}  // namespace
}  // namespace posenc::server
