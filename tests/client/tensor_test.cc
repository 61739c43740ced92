// Unit tests of the client's plain-C++ types: dtype conversions, Positions factories and the
// local expansion of compact biases (and the kernels' Toeplitz expander it calls), and .npy files
// of tensors (posenc/npy.h).
#include "posenc/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/common/toeplitz.h"
#include "kernels/common/types.h"
#include "posenc/client.h"
#include "posenc/npy.h"

namespace posenc::client {
namespace {

uint16_t Bits16(const Tensor& t, size_t i = 0) {
  uint16_t v;
  std::memcpy(&v, t.data.data() + 2 * i, 2);
  return v;
}

TEST(TensorTest, Float16RoundsToNearestEven) {
  const std::vector<double> values = {1.0,
                                      -2.0,
                                      65504.0,
                                      65519.99,
                                      65520.0,
                                      0.1,
                                      std::ldexp(1.0, -24),
                                      std::ldexp(1.0, -25),
                                      std::ldexp(3.0, -26),
                                      1.0 + std::ldexp(1.0, -11),
                                      1.0 + std::ldexp(3.0, -11),
                                      -0.0};
  const std::vector<uint16_t> expected = {0x3C00, 0xC000, 0x7BFF, 0x7BFF, 0x7C00, 0x2E66,
                                          0x0001, 0x0000, 0x0001, 0x3C00, 0x3C02, 0x8000};
  absl::StatusOr<Tensor> t =
      Tensor::FromDoubles(values, {static_cast<int64_t>(values.size())}, DType::kFloat16);
  ASSERT_TRUE(t.ok()) << t.status();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(Bits16(*t, i), expected[i]) << "value " << values[i];
  }
}

TEST(TensorTest, Float16AndBFloat16AgreeWithTheKernelsOnRandomValues) {
  std::mt19937_64 rng(7);
  std::vector<double> values;
  for (int i = 0; i < 20000; ++i) {
    const double mantissa = std::uniform_real_distribution<double>(-2.0, 2.0)(rng);
    const int exponent = std::uniform_int_distribution<int>(-140, 130)(rng);
    values.push_back(std::ldexp(mantissa, exponent));
  }
  values.push_back(std::numeric_limits<double>::infinity());
  values.push_back(-std::numeric_limits<double>::infinity());
  const int64_t n = static_cast<int64_t>(values.size());
  absl::StatusOr<Tensor> half = Tensor::FromDoubles(values, {n}, DType::kFloat16);
  absl::StatusOr<Tensor> bf16 = Tensor::FromDoubles(values, {n}, DType::kBFloat16);
  ASSERT_TRUE(half.ok() && bf16.ok());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(Bits16(*half, i), kernels::DoubleToHalf(values[i])) << values[i];
    ASSERT_EQ(Bits16(*bf16, i), kernels::DoubleToBFloat16(values[i])) << values[i];
  }
  // Widening back is exact.
  const std::vector<double> half_back = half->ToDoubles();
  const std::vector<double> bf16_back = bf16->ToDoubles();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(half_back[i], kernels::HalfToFloat(Bits16(*half, i)));
    ASSERT_EQ(bf16_back[i], kernels::BFloat16ToFloat(Bits16(*bf16, i)));
  }
}

TEST(TensorTest, NanSurvivesEveryFloatDType) {
  const std::vector<double> values = {std::numeric_limits<double>::quiet_NaN()};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    absl::StatusOr<Tensor> t = Tensor::FromDoubles(values, {1}, dtype);
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(std::isnan(t->At(0))) << DTypeName(dtype);
  }
}

TEST(TensorTest, FactoriesCheckTheShape) {
  EXPECT_EQ(Tensor::FromFloats(std::vector<float>{1, 2, 3}, {2, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::FromInt64s(std::vector<int64_t>{int64_t{1} << 40}, {1}, DType::kInt32)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Tensor> t = Tensor::FromInt64s(std::vector<int64_t>{-3, 5}, {2}, DType::kInt32);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ToInt64s(), (std::vector<int64_t>{-3, 5}));
  EXPECT_EQ(t->NumElements(), 2);
  Tensor bad = *t;
  bad.data.push_back('\0');
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  Tensor scalar = *Tensor::FromDoubles(std::vector<double>{2.5}, {});
  EXPECT_TRUE(scalar.Validate().ok());
  EXPECT_EQ(scalar.ToFloats(), std::vector<float>{2.5f});
}

TEST(TensorTest, DTypeNamesParse) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64,
                      DType::kInt32, DType::kInt64}) {
    EXPECT_EQ(ParseDType(DTypeName(dtype)), dtype);
  }
  EXPECT_EQ(ParseDType("bf16"), DType::kBFloat16);
  EXPECT_EQ(ParseDType("DTYPE_FLOAT64"), DType::kFloat64);
  EXPECT_EQ(ParseDType("complex64"), std::nullopt);
}

TEST(TensorTest, ConvertTensorRoundsOnce) {
  Tensor f64 = *Tensor::FromDoubles(
      std::vector<double>{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)}, {1});
  // Directly to FLOAT16 this rounds up; through float it would round to even (down).
  absl::StatusOr<Tensor> half = ConvertTensor(f64, DType::kFloat16);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(Bits16(*half), 0x3C01);
}

TEST(PositionsTest, FactoriesFillTheRightFields) {
  Positions range = Positions::Range(3, 5);
  EXPECT_EQ(range.kind, Positions::Kind::kRange);
  EXPECT_EQ(range.start, 3);
  EXPECT_EQ(range.count, 5);
  Positions ids = Positions::Ids({4, 5, 6});
  EXPECT_EQ(ids.tensor.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(ids.tensor.dtype, DType::kInt64);
  EXPECT_EQ(ids.tensor.ToInt64s(), (std::vector<int64_t>{4, 5, 6}));
  Positions mask = Positions::AttentionMask({0, 1, 1});
  EXPECT_EQ(mask.kind, Positions::Kind::kAttentionMask);
  EXPECT_EQ(mask.tensor.shape, (std::vector<int64_t>{1, 3}));
  Positions cu = Positions::CuSeqlens({0, 2, 5}, {7, 0});
  EXPECT_EQ(cu.cu_seqlens, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(cu.offsets, (std::vector<int64_t>{7, 0}));
  EXPECT_EQ(Positions::Default().kind, Positions::Kind::kDefault);
}

TEST(ExpandTest, ToeplitzRowsAreSlicesOfTheGenerator) {
  // H = 2, q = 2, k = 3: v[h, t], t = j - i + 1.
  Tensor compact = *Tensor::FromDoubles(std::vector<double>{0, 1, 2, 3, 10, 11, 12, 13}, {2, 4},
                                        DType::kFloat32);
  absl::StatusOr<Tensor> full = ExpandToeplitz(compact, 2, 3);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(full->ToDoubles(), (std::vector<double>{1, 2, 3, 0, 1, 2, 11, 12, 13, 10, 11, 12}));
  EXPECT_EQ(ExpandToeplitz(compact, 2, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandToeplitz(compact, 0, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpandTest, KernelsExpanderWritesExactlyTheGivenRows) {
  // The expander ExpandToeplitz calls (kernels/common/toeplitz.h), in chunks as a thread pool
  // calls it: H = 2, q = 3, k = 2, generators of q + k - 1 = 4 int16 elements.
  const std::vector<int16_t> gen = {0, 1, 2, 3, 10, 11, 12, 13};
  const std::vector<int16_t> expected = {2, 3, 1, 2, 0, 1, 12, 13, 11, 12, 10, 11};
  std::vector<int16_t> out(expected.size(), -1);
  kernels::ExpandToeplitzRows(gen.data(), 2, 3, 2, sizeof(int16_t), 1, 4, out.data());
  EXPECT_EQ(out, (std::vector<int16_t>{-1, -1, 1, 2, 0, 1, 12, 13, -1, -1, -1, -1}));
  kernels::ExpandToeplitzRows(gen.data(), 2, 3, 2, sizeof(int16_t), 0, 1, out.data());
  kernels::ExpandToeplitzRows(gen.data(), 2, 3, 2, sizeof(int16_t), 4, 9, out.data());  // clamped
  EXPECT_EQ(out, expected);
}

TEST(ExpandTest, BloomRowsApplyTheFutureRule) {
  Tensor rows = *Tensor::FromDoubles(std::vector<double>{0, 0.5, 1.0}, {1, 3}, DType::kFloat16);
  const double inf = std::numeric_limits<double>::infinity();
  // q = 2, default query_offset = k - q = 1: query 0 sees keys 0..1, query 1 sees 0..2.
  absl::StatusOr<Tensor> masked = ExpandBloomRows(rows, 2);
  ASSERT_TRUE(masked.ok()) << masked.status();
  EXPECT_EQ(masked->shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(masked->ToDoubles(), (std::vector<double>{0, 0.5, -inf, 0, 0.5, 1.0}));
  absl::StatusOr<Tensor> zero = ExpandBloomRows(rows, 2, 0, FutureMode::kZero);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->ToDoubles(), (std::vector<double>{0, 0, 0, 0, 0.5, 0}));
  absl::StatusOr<Tensor> linear = ExpandBloomRows(rows, 2, 0, FutureMode::kLinear);
  ASSERT_TRUE(linear.ok());
  EXPECT_EQ(linear->ToDoubles(), (std::vector<double>{0, 0.5, 1.0, 0, 0.5, 1.0}));
}

// A caller saves a result for NumPy and reads it back: every dtype NumPy has, byte for byte; the
// bytes in memory too; BFLOAT16 and shared-memory references refused with the path; a missing
// file NOT_FOUND.
TEST(NpyTest, TensorsRoundTripThroughFilesAndBytes) {
  const std::string path = ::testing::TempDir() + "/posenc_npy_test.npy";
  const std::vector<double> values = {0.5, -1.25, 3.0, 65504.0, -0.0, 1e-3};
  for (DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    auto t = Tensor::FromDoubles(values, {2, 3}, dtype);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(WriteNpy(path, *t).ok());
    auto back = ReadNpy(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype, dtype);
    EXPECT_EQ(back->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(back->data, t->data) << DTypeName(dtype);
    auto bytes = SerializeNpy(*t);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto parsed = ParseNpy(*bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->data, t->data);
  }
  auto bf16 = Tensor::FromDoubles(values, {6}, DType::kBFloat16);
  ASSERT_TRUE(bf16.ok());
  absl::Status refused = WriteNpy(path, *bf16);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("BFLOAT16"), std::string::npos) << refused;
  auto widened = ConvertTensor(*bf16, DType::kFloat32);
  ASSERT_TRUE(widened.ok());
  EXPECT_TRUE(WriteNpy(path, *widened).ok());
  Tensor reference;
  reference.shape = {4};
  reference.shared_memory = SharedMemoryRef{.region = "r", .offset = 0, .byte_size = 16};
  refused = WriteNpy(path, reference);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_EQ(refused.message().rfind(path, 0), 0u) << refused;
  EXPECT_NE(refused.message().find("shared memory"), std::string::npos) << refused;
  std::remove(path.c_str());
  EXPECT_EQ(ReadNpy(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseNpy("not a numpy file").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace posenc::client
