// The .npy codec (kernels/common/npy.h) against files put together byte by byte
// (tests/common/npy.h): every dtype code in both byte orders, bool masks, format versions 1.0 to
// 3.0, refused files (Fortran order, unknown codes, truncation, shapes too large to size), the
// writer's layout and round trips through memory and files.
#include "kernels/common/npy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/file.h"
#include "kernels/common/types.h"
#include "tests/common/npy.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::NpyDict;
using ::posenc::testing::NpyFileBytes;
using ::testing::HasSubstr;

// The bytes of `values` in the host's (little-endian) order, or reversed per element.
template <typename T>
std::string RawBytes(const std::vector<T>& values, bool big_endian = false) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  if (big_endian) {
    for (size_t i = 0; i < bytes.size(); i += sizeof(T)) {
      std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                   bytes.begin() + static_cast<std::ptrdiff_t>(i + sizeof(T)));
    }
  }
  return bytes;
}

absl::StatusOr<NpyArray> Parse(const std::string& descr, const std::string& shape,
                               const std::string& data, int major = 1) {
  return ParseNpy(NpyFileBytes(NpyDict(descr, shape), data, major));
}

TEST(NpyTest, FloatAndIntCodesInBothByteOrders) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3e-8f, 65504.0f, -0.0f, 7.0f};
  const std::vector<double> f64 = {0.1, -1e300, 2.0, 5e-324, -3.5, 1.0 / 3.0};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x3555};
  const std::vector<int32_t> i32 = {-1, 0, 2147483647, -2147483647 - 1, 42, 7};
  const std::vector<int64_t> i64 = {-1, int64_t{1} << 62, -(int64_t{1} << 40), 0, 9, 10};
  struct Case {
    std::string code;
    std::string little;
    std::string big;
    DType dtype;
  };
  const Case cases[] = {
      {"f4", RawBytes(f32), RawBytes(f32, true), DType::kFloat32},
      {"f8", RawBytes(f64), RawBytes(f64, true), DType::kFloat64},
      {"f2", RawBytes(f16), RawBytes(f16, true), DType::kFloat16},
      {"i4", RawBytes(i32), RawBytes(i32, true), DType::kInt32},
      {"i8", RawBytes(i64), RawBytes(i64, true), DType::kInt64},
  };
  for (const Case& c : cases) {
    for (const char* order : {"<", "=", ">"}) {
      const std::string descr = order + c.code;
      SCOPED_TRACE(descr);
      const std::string& data = descr[0] == '>' ? c.big : c.little;
      absl::StatusOr<NpyArray> array = Parse(descr, "(2, 3)", data);
      ASSERT_TRUE(array.ok()) << array.status();
      EXPECT_EQ(array->dtype, c.dtype);
      EXPECT_EQ(array->shape, (Shape{2, 3}));
      EXPECT_EQ(array->descr, descr);
      EXPECT_EQ(array->bytes, c.little);  // always little-endian
    }
  }
}

TEST(NpyTest, BoolAndNarrowIntegersWidenExactly) {
  struct Case {
    std::string descr;
    std::string data;
    DType dtype;
    std::vector<int64_t> values;
  };
  const Case cases[] = {
      // numpy bool masks: any nonzero byte is True.
      {"|b1", std::string("\x00\x01\x01\x00\x02\xff", 6), DType::kInt32, {0, 1, 1, 0, 1, 1}},
      {"|u1",
       std::string("\x00\x01\x7f\x80\xfe\xff", 6),
       DType::kInt32,
       {0, 1, 127, 128, 254, 255}},
      {"|i1", std::string("\x00\x01\x7f\x80\xfe\xff", 6), DType::kInt32, {0, 1, 127, -128, -2, -1}},
      {"<i2",
       RawBytes<int16_t>({0, -1, 32767, -32768, 300, -300}),
       DType::kInt32,
       {0, -1, 32767, -32768, 300, -300}},
      {">i2",
       RawBytes<int16_t>({0, -1, 32767, -32768, 300, -300}, true),
       DType::kInt32,
       {0, -1, 32767, -32768, 300, -300}},
      {"<u2",
       RawBytes<uint16_t>({0, 1, 65535, 32768, 2, 3}),
       DType::kInt32,
       {0, 1, 65535, 32768, 2, 3}},
      {">u4",
       RawBytes<uint32_t>({0, 1, 4294967295u, 2147483648u, 5, 6}, true),
       DType::kInt64,
       {0, 1, 4294967295, 2147483648, 5, 6}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.descr);
    absl::StatusOr<NpyArray> array = Parse(c.descr, "(6,)", c.data);
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->dtype, c.dtype);
    EXPECT_EQ(array->shape, (Shape{6}));
    ASSERT_EQ(array->bytes.size(), 6 * static_cast<size_t>(DTypeSize(c.dtype)));
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(LoadAsInt64(array->bytes.data(), array->dtype, i), c.values[i]) << i;
    }
  }
}

TEST(NpyTest, FormatVersionsOneTwoAndThree) {
  const std::string data = RawBytes<float>({1, 2, 3, 4});
  for (int major : {1, 2, 3}) {
    SCOPED_TRACE(major);
    absl::StatusOr<NpyArray> array = Parse("<f4", "(2, 2)", data, major);
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->bytes, data);
  }
  std::string minor = NpyFileBytes(NpyDict("<f4", "(2, 2)"), data);
  minor[7] = 1;
  EXPECT_THAT(ParseNpy(minor).status().message(),
              HasSubstr("unsupported .npy format version 1.1 (1.0, 2.0 and 3.0 are)"));
  EXPECT_THAT(ParseNpy(NpyFileBytes(NpyDict("<f4", "(2, 2)"), data, 4)).status().message(),
              HasSubstr("unsupported .npy format version 4.0"));
}

TEST(NpyTest, ScalarsAndEmptyArraysAreArrays) {
  absl::StatusOr<NpyArray> scalar = Parse("<f8", "()", RawBytes<double>({2.5}));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(LoadAsDouble(scalar->bytes.data(), scalar->dtype, 0), 2.5);
  absl::StatusOr<NpyArray> empty = Parse("|b1", "(0, 5)", "");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape, (Shape{0, 5}));
  EXPECT_TRUE(empty->bytes.empty());
}

TEST(NpyTest, FortranOrderIsRefusedSayingWhatTheFileHas) {
  const absl::Status status =
      ParseNpy(NpyFileBytes(NpyDict("<f4", "(2, 3)", /*fortran=*/true), std::string(24, '\0')))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fortran_order is True ('<f4' (2, 3)): expected a "
                                          "C-order array"));
}

TEST(NpyTest, UnsupportedCodesAreRefusedByName) {
  for (const char* descr : {"<c8", "<u8", "|f4", "<V2", "<b2", "f4", "<f16", "<U10", "<M8"}) {
    SCOPED_TRACE(descr);
    const absl::Status status = Parse(descr, "(2,)", std::string(16, '\0')).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("npy dtype '", descr, "' is not supported")));
    EXPECT_THAT(status.message(), HasSubstr("bfloat16 has no .npy dtype code"));
  }
  EXPECT_THAT(ParseNpy(NpyFileBytes("{'descr': [('a', '<f4')], 'fortran_order': False, "
                                    "'shape': (2,), }",
                                    std::string(8, '\0')))
                  .status()
                  .message(),
              HasSubstr("structured (record) dtypes are not supported"));
}

TEST(NpyTest, DataMustBeExactlyShapeTimesItemSize) {
  EXPECT_THAT(Parse("<f4", "(2, 3)", std::string(20, '\0')).status().message(),
              HasSubstr("data holds 20 bytes, expected 24 ('<f4' (2, 3))"));
  EXPECT_THAT(Parse(">i2", "(3,)", std::string(7, '\0')).status().message(),
              HasSubstr("data holds 7 bytes, expected 6 ('>i2' (3,))"));
}

TEST(NpyTest, EveryPrefixOfAFileIsRefused) {
  const std::string file =
      NpyFileBytes(NpyDict(">f8", "(3, 2)"), RawBytes<double>({1, 2, 3, 4, 5, 6}), 2);
  ASSERT_TRUE(ParseNpy(file).ok());
  for (size_t n = 0; n < file.size(); ++n) {
    const absl::Status status = ParseNpy(absl::string_view(file).substr(0, n)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "prefix " << n;
  }
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x01", 7)).status().message(),
              HasSubstr("truncated: 7 bytes, shorter than the .npy preamble"));
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f{", 13)).status().message(),
              HasSubstr("header length 2147483647 runs past the end of the file (1 bytes follow "
                        "the preamble)"));
  EXPECT_THAT(ParseNpy("NUMPY").status().message(), HasSubstr("bad magic"));
}

TEST(NpyTest, HugeShapesAreRefusedBeforeAnyAllocation) {
  // The file's bytes overflow int64.
  EXPECT_THAT(Parse("<f8", "(4611686018427387904, 4)", "").status().message(),
              HasSubstr("shape (4611686018427387904, 4) of '<f8': the array must be smaller than "
                        "2^63 bytes"));
  // The file's bytes fit (2^61), the widened INT32 array's (2^63) do not.
  EXPECT_THAT(Parse("|b1", "(2305843009213693952,)", "").status().message(),
              HasSubstr("must be smaller than 2^63 bytes"));
  // Sizable but far more than the file holds: refused on the data length.
  EXPECT_THAT(Parse("<f4", "(1000000000, 1000000000)", "").status().message(),
              HasSubstr("data holds 0 bytes, expected 4000000000000000000"));
  EXPECT_THAT(Parse("<f4", "(99999999999999999999, 4)", "").status().message(),
              HasSubstr("dimension too large"));
}

TEST(NpyTest, SerializeWritesFormatOneLittleEndianAlignedTo64) {
  const std::string data = RawBytes<uint16_t>({0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600});
  absl::StatusOr<std::string> file = SerializeNpy(DType::kFloat16, {2, 3}, data);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->size(), 128u + data.size());
  EXPECT_EQ(file->substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));  // header 118
  EXPECT_EQ(file->substr(10, 59), "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }");
  EXPECT_EQ(file->substr(69, 58), std::string(58, ' '));
  EXPECT_EQ((*file)[127], '\n');
  EXPECT_EQ(file->substr(128), data);
  // The hand-built file of the same array is byte for byte the same.
  EXPECT_EQ(*file, NpyFileBytes(NpyDict("<f2", "(2, 3)"), data));
}

TEST(NpyTest, SerializeThenParseRoundTripsEveryStorableDType) {
  const Shape shapes[] = {{}, {0}, {1}, {5}, {2, 3}, {2, 1, 3, 2}};
  for (DType dtype :
       {DType::kFloat16, DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ShapeString(shape)));
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::string bytes(static_cast<size_t>(n * DTypeSize(dtype)), '\0');
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 37 + 11);
      absl::StatusOr<std::string> file = SerializeNpy(dtype, shape, bytes);
      ASSERT_TRUE(file.ok()) << file.status();
      EXPECT_EQ((file->size() - bytes.size()) % 64, 0u);
      absl::StatusOr<NpyArray> array = ParseNpy(*file);
      ASSERT_TRUE(array.ok()) << array.status();
      EXPECT_EQ(array->dtype, dtype);
      EXPECT_EQ(array->shape, shape);
      EXPECT_EQ(array->bytes, bytes);
    }
  }
}

TEST(NpyTest, SerializeRefusesBFloat16AndInconsistentSizes) {
  EXPECT_THAT(SerializeNpy(DType::kBFloat16, {2}, std::string(4, '\0')).status().message(),
              HasSubstr("BFLOAT16 cannot be stored in .npy"));
  EXPECT_THAT(SerializeNpy(DType::kFloat32, {2, 3}, std::string(20, '\0')).status().message(),
              HasSubstr("FLOAT32 [2, 3] needs 24 bytes of data, got 20"));
  EXPECT_EQ(SerializeNpy(DType::kFloat32, {-1}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, FilesRoundTripAndErrorsNameThePath) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("posenc_npy_test_", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.npy").string();
  const std::string data = RawBytes<int64_t>({3, -4, 5});
  ASSERT_TRUE(WriteNpyFile(path, DType::kInt64, {3}, data).ok());
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->descr, "<i8");
  EXPECT_EQ(array->bytes, data);

  const std::string missing = (dir / "missing.npy").string();
  EXPECT_EQ(ReadNpyFile(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ReadNpyFile(missing).status().message(), HasSubstr(missing + ": cannot open"));
  ASSERT_TRUE(WriteStringToFile(path, NpyFileBytes(NpyDict("<f4", "(2,)", true), data)).ok());
  EXPECT_THAT(ReadNpyFile(path).status().message(), HasSubstr(path + ": fortran_order is True"));
  EXPECT_THAT(WriteNpyFile(path, DType::kBFloat16, {1}, "ab").message(),
              HasSubstr(path + ": BFLOAT16 cannot be stored"));
  EXPECT_THAT(ReadNpyFile(dir.string()).status().message(), HasSubstr("not a regular file"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace posenc::kernels
