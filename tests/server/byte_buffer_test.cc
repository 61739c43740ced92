// proto/posenc/v1/byte_buffer.h: serialization that references large fields, the parse that
// sizes them once, and the field paths of bytes that do not parse (issue #20).
#include "proto/posenc/v1/byte_buffer.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::v1 {
namespace {

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer BufferOf(const std::string& bytes, size_t pieces = 1) {
  std::vector<grpc::Slice> slices;
  const size_t step = (bytes.size() + pieces - 1) / pieces;
  for (size_t at = 0; at < bytes.size(); at += step) {
    slices.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::shared_ptr<ApplyRopeRequest> LargeRequest() {
  auto request = std::make_shared<ApplyRopeRequest>();
  request->mutable_q()->set_dtype(DTYPE_FLOAT32);
  request->mutable_q()->add_shape(1 << 18);
  std::string q(size_t{1} << 20, '\0');
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<char>(i * 7);
  request->mutable_q()->set_data(q);
  request->mutable_k()->set_data(std::string(100, 'k'));  // small: copied
  request->mutable_config()->set_hf_config_json("{\"rope_theta\": 10000}");
  return request;
}

TEST(ByteBufferTest, SerializesAsProtobufDoesAndReferencesLargeFields) {
  const std::shared_ptr<ApplyRopeRequest> request = LargeRequest();
  const std::string expected = request->SerializeAsString();
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(SerializeToByteBuffer(request, &buffer).ok());
  EXPECT_EQ(Flat(buffer), expected);
  // The large field is a slice of the message's own bytes, and keeps the message alive.
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  bool referenced = false;
  for (const grpc::Slice& s : slices) {
    referenced |= s.begin() == reinterpret_cast<const uint8_t*>(request->q().data().data());
  }
  EXPECT_TRUE(referenced);
  std::weak_ptr<ApplyRopeRequest> alive = request;
  const std::string q = request->q().data();
  {
    std::shared_ptr<ApplyRopeRequest> dropped = request;  // the test's last own reference
  }
  EXPECT_FALSE(alive.expired());
  EXPECT_EQ(Flat(buffer), expected);
}

TEST(ByteBufferTest, SmallMessagesAreOneSlice) {
  auto request = std::make_shared<AlibiSlopesRequest>();
  request->set_num_heads(8);
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(SerializeToByteBuffer(request, &buffer).ok());
  EXPECT_EQ(Flat(buffer), request->SerializeAsString());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  EXPECT_EQ(slices.size(), 1u);
}

TEST(ByteBufferTest, ParsesAcrossSlicesAndSizesLargeFieldsOnce) {
  const std::shared_ptr<ApplyRopeRequest> request = LargeRequest();
  for (const size_t pieces : {1, 3, 1000}) {
    ApplyRopeRequest parsed;
    ASSERT_TRUE(ParseFromByteBuffer(BufferOf(request->SerializeAsString(), pieces), &parsed));
    EXPECT_EQ(parsed.SerializeAsString(), request->SerializeAsString()) << pieces;
    EXPECT_EQ(parsed.q().data().capacity(), parsed.q().data().size()) << pieces;
  }
}

TEST(ByteBufferTest, ParsesWhatProtobufParsesAndRefusesWhatItRefuses) {
  const std::string good = LargeRequest()->SerializeAsString();
  for (const std::string& bytes :
       {good, good.substr(0, good.size() - 1), std::string("\xff\xff\xff", 3), std::string()}) {
    ApplyRopeRequest mine, theirs;
    const bool expected = theirs.ParseFromString(bytes);
    EXPECT_EQ(ParseFromByteBuffer(BufferOf(bytes, 2), &mine), expected) << bytes.size();
    if (expected) {
      EXPECT_EQ(mine.SerializeAsString(), theirs.SerializeAsString());
    }
  }
}

TEST(ByteBufferTest, NamesTheFieldWithInvalidUtf8) {
  ApplyRopeRequest request;
  request.mutable_config()->set_head_dim(8);
  request.mutable_config()->set_hf_config_json("{\"x\": \"\xc3\x28\"}");  // invalid UTF-8
  std::string bytes;
  ASSERT_TRUE(request.SerializePartialToString(&bytes));  // serializing does not check
  ApplyRopeRequest parsed;
  const grpc::ByteBuffer buffer = BufferOf(bytes, 2);
  EXPECT_FALSE(ParseFromByteBuffer(buffer, &parsed));
  const std::string why = DescribeParseFailure(buffer, ApplyRopeRequest::descriptor());
  EXPECT_EQ(why.rfind("config.hf_config_json: invalid UTF-8", 0), 0u) << why;
}

TEST(ByteBufferTest, NamesMapKeysAndTruncatedFields) {
  AlibiBiasRequest request;
  (*request.mutable_output_shared_memory())["bias\xff"].set_region("r");
  std::string bytes;
  ASSERT_TRUE(request.SerializePartialToString(&bytes));
  std::string why = DescribeParseFailure(BufferOf(bytes), AlibiBiasRequest::descriptor());
  EXPECT_EQ(why.rfind("output_shared_memory.key: invalid UTF-8", 0), 0u) << why;

  const std::string large = LargeRequest()->SerializeAsString();
  why = DescribeParseFailure(BufferOf(large.substr(0, large.size() / 2)),
                             ApplyRopeRequest::descriptor());
  EXPECT_EQ(why.rfind("q: a length of ", 0), 0u) << why;
  EXPECT_NE(why.find("runs past the end"), std::string::npos) << why;
  why = DescribeParseFailure(BufferOf(std::string("\x08", 1)), ApplyRopeRequest::descriptor());
  EXPECT_EQ(why, "q: a malformed varint") << why;  // key 0x08: field 1 (q), a varint
  // A malformed key of the message itself names no field.
  EXPECT_EQ(DescribeParseFailure(BufferOf(std::string("\xff\xff\xff", 3)),
                                 ApplyRopeRequest::descriptor()),
            "");
  // Nothing wrong that the walk can name: "".
  EXPECT_EQ(DescribeParseFailure(BufferOf(large), ApplyRopeRequest::descriptor()), "");
}

TEST(ByteBufferTest, HostileLengthsReserveNoMoreThanTheBytesSent) {
  // A field claiming 1 GiB in a 10-byte message: refused, nothing sized.
  std::string bytes("\x0a\x80\x80\x80\x80\x04", 6);  // q, length 2^30
  bytes += "abcd";
  ApplyRopeRequest parsed;
  EXPECT_FALSE(ParseFromByteBuffer(BufferOf(bytes), &parsed));
  EXPECT_LT(parsed.q().data().capacity(), size_t{1} << 20);
}

TEST(ByteBufferTest, ReserveLargeReserves) {
  std::string s;
  ReserveLarge(&s, size_t{8} << 20);
  EXPECT_GE(s.capacity(), size_t{8} << 20);
  s.assign(size_t{8} << 20, 'x');  // writable everywhere
  EXPECT_EQ(s[s.size() - 1], 'x');
}

// Client::ApplyRope sends q and k from the caller's tensors: the request without their bytes,
// then each tensor's data appended; the server parses what the copying request would give.
TEST(BorrowedBytesTest, AppendedDataParsesAsTheWholeRequest) {
  const std::shared_ptr<ApplyRopeRequest> whole = LargeRequest();
  whole->mutable_k()->set_dtype(DTYPE_FLOAT32);
  whole->mutable_k()->add_shape(3);
  whole->mutable_k()->set_data(std::string(12, 'k'));  // small: copied, not referenced
  auto without = std::make_shared<ApplyRopeRequest>(*whole);
  without->mutable_q()->clear_data();
  without->mutable_k()->clear_data();
  const std::string q = whole->q().data(), k = whole->k().data();
  grpc::ByteBuffer buffer;
  {
    BorrowedBytes borrowed;
    ASSERT_TRUE(SerializeToByteBuffer(without, &buffer).ok());
    borrowed.Append(1, q, &buffer);
    borrowed.Append(2, k, &buffer);
    borrowed.Append(1, "", &buffer);  // nothing: no bytes to add
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    bool referenced = false;
    for (const grpc::Slice& s : slices) {
      referenced |= reinterpret_cast<const char*>(s.begin()) == q.data();
    }
    EXPECT_TRUE(referenced) << "q's bytes were copied";
    ApplyRopeRequest parsed;
    ASSERT_TRUE(ParseFromByteBuffer(buffer, &parsed));
    EXPECT_EQ(parsed.SerializeAsString(), whole->SerializeAsString());
    buffer.Clear();  // gRPC drops its references when the call ends; Wait() then returns
    slices.clear();
  }
}

}  // namespace
}  // namespace posenc::v1
