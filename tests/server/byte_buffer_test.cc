// proto/posenc/v1/byte_buffer.h: serialization that references large fields, the parse that
// sizes them once, and the field paths of bytes that do not parse (issue #20).
#include "proto/posenc/v1/byte_buffer.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
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
// Data given in parts (a box of a larger tensor, run by run): the large parts referenced, the
// small ones copied, neighbours in memory taken as one; parsed, the parts joined in order.
TEST(BorrowedBytesTest, PartsAreJoinedInOrder) {
  const std::string memory = [] {
    std::string m(300000, '\0');
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>(i * 13 % 251);
    return m;
  }();
  const std::vector<BorrowedSlices::Part> parts = {
      {memory.data() + 100, 5000}, {memory.data() + 5100, 3000},  // neighbours: one of 8000
      {memory.data() + 20000, 9},  {memory.data() + 9, 70000},    // small, then large
      {memory.data() + 200000, 0}, {memory.data() + 90000, 4096}, {memory.data() + 1, 4095}};
  std::string expected;
  for (const BorrowedSlices::Part& part : parts) expected.append(part.data, part.size);
  ApplyRopeRequest without;
  without.mutable_q()->set_dtype(DTYPE_FLOAT32);
  without.mutable_q()->add_shape(static_cast<int64_t>(expected.size() / 4));
  grpc::ByteBuffer buffer;
  {
    BorrowedBytes borrowed;
    ASSERT_TRUE(
        SerializeToByteBuffer(std::make_shared<const ApplyRopeRequest>(without), &buffer).ok());
    borrowed.Append(1, parts, &buffer, /*lend_from=*/4096);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    std::vector<const char*> lent;
    for (const grpc::Slice& s : slices) lent.push_back(reinterpret_cast<const char*>(s.begin()));
    auto lent_from = [&](const char* p) { return std::count(lent.begin(), lent.end(), p) == 1; };
    EXPECT_TRUE(lent_from(memory.data() + 100)) << "the neighbours were not lent as one";
    EXPECT_TRUE(lent_from(memory.data() + 9));
    EXPECT_TRUE(lent_from(memory.data() + 90000));
    EXPECT_FALSE(lent_from(memory.data() + 1)) << "a part under lend_from was lent";
    ApplyRopeRequest parsed;
    ASSERT_TRUE(ParseFromByteBuffer(buffer, &parsed));
    EXPECT_TRUE(parsed.q().data() == expected);
    EXPECT_EQ(parsed.q().shape(0), static_cast<int64_t>(expected.size() / 4));
    buffer.Clear();
    slices.clear();
  }
}

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

// ApplyRope's parse: large tensors' data stays in the received slices; the rest of the message
// is what protobuf parses.
TEST(ParseLeavingTensorDataTest, LeavesLargeTensorDataInTheSlices) {
  const std::shared_ptr<ApplyRopeRequest> whole = LargeRequest();  // q 1 MiB, k 100 bytes
  whole->mutable_positions()->mutable_range()->set_start(5);
  const std::string bytes = whole->SerializeAsString();
  for (const size_t pieces : {size_t{1}, size_t{7}, size_t{1000}}) {
    const grpc::ByteBuffer buffer = BufferOf(bytes, pieces);
    ApplyRopeRequest parsed;
    WireTensors left;
    ASSERT_TRUE(ParseLeavingTensorData(buffer, &parsed, &left)) << pieces;
    ASSERT_EQ(left.size(), 1U);
    ASSERT_EQ(left.count("q"), 1U);
    const WireBytes& q = left.at("q");
    EXPECT_EQ(q.size, whole->q().data().size());
    EXPECT_GE(q.pieces.size(), std::min<size_t>(pieces, 2));
    std::string joined;
    q.CopyTo(&joined);
    EXPECT_TRUE(joined == whole->q().data());
    // The message is the request without q's data; k's 100 bytes are in it.
    ApplyRopeRequest expected = *whole;
    expected.mutable_q()->clear_data();
    EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  }
}

TEST(ParseLeavingTensorDataTest, TheClientsAppendedDataToo) {
  const std::shared_ptr<ApplyRopeRequest> whole = LargeRequest();
  whole->mutable_k()->set_data(std::string(size_t{200} << 10, 'k'));
  auto without = std::make_shared<ApplyRopeRequest>(*whole);
  without->mutable_q()->clear_data();
  without->mutable_k()->clear_data();
  const std::string q = whole->q().data(), k = whole->k().data();
  grpc::ByteBuffer buffer;
  BorrowedBytes borrowed;
  ASSERT_TRUE(SerializeToByteBuffer(without, &buffer).ok());
  borrowed.Append(1, q, &buffer);
  borrowed.Append(2, k, &buffer);
  ApplyRopeRequest parsed;
  WireTensors left;
  ASSERT_TRUE(ParseLeavingTensorData(buffer, &parsed, &left));
  ASSERT_EQ(left.size(), 2U);
  std::string q_left, k_left;
  left.at("q").CopyTo(&q_left);
  left.at("k").CopyTo(&k_left);
  EXPECT_TRUE(q_left == q);
  EXPECT_TRUE(k_left == k);
  EXPECT_EQ(parsed.SerializeAsString(), without->SerializeAsString());
  left.clear();
  buffer.Clear();
}

// Where leaving the data out would change what the message means, the message is parsed whole.
TEST(ParseLeavingTensorDataTest, ParsesWholeWhereDataComesTwice) {
  const std::shared_ptr<ApplyRopeRequest> whole = LargeRequest();
  std::string bytes = whole->SerializeAsString();
  // q again, with 3 bytes of data: protobuf keeps the last data.
  ApplyRopeRequest again;
  again.mutable_q()->set_data("abc");
  bytes += again.SerializeAsString();
  ApplyRopeRequest parsed, expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  WireTensors left;
  ASSERT_TRUE(ParseLeavingTensorData(BufferOf(bytes, 3), &parsed, &left));
  EXPECT_TRUE(left.empty());
  EXPECT_EQ(parsed.q().data(), "abc");
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  // Large data twice in one tensor field, and in two occurrences of it.
  bytes = whole->SerializeAsString() + whole->SerializeAsString();
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ASSERT_TRUE(ParseLeavingTensorData(BufferOf(bytes, 5), &parsed, &left));
  EXPECT_TRUE(left.empty());
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
}

// A request whose bulk is not tensor data is parsed whole: splitting it would copy that bulk
// once more beside the received bytes and the message (3x its size for a moment, not 2x).
TEST(ParseLeavingTensorDataTest, ParsesWholeWhereTheBulkIsNotTensorData) {
  const std::shared_ptr<ApplyRopeRequest> whole = LargeRequest();  // q 1 MiB
  for (const size_t other : {kMaxKeptBytes / 2, 2 * kMaxKeptBytes}) {
    whole->mutable_config()->set_hf_config_json(std::string(other, ' ') + "{}");
    const std::string bytes = whole->SerializeAsString();
    for (const size_t pieces : {size_t{1}, size_t{9}}) {
      ApplyRopeRequest parsed;
      WireTensors left;
      ASSERT_TRUE(ParseLeavingTensorData(BufferOf(bytes, pieces), &parsed, &left));
      EXPECT_EQ(left.size(), other < kMaxKeptBytes ? 1U : 0U) << other;
      ApplyRopeRequest expected = *whole;
      if (!left.empty()) expected.mutable_q()->clear_data();
      EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString()) << other;
    }
  }
  // The bulk in the large tensor's other fields (a shape of 2 Mi dims).
  whole->mutable_config()->clear_hf_config_json();
  for (int i = 0; i < (1 << 21); ++i) whole->mutable_q()->add_shape(1);
  const std::string bytes = whole->SerializeAsString();
  ApplyRopeRequest parsed;
  WireTensors left;
  ASSERT_TRUE(ParseLeavingTensorData(BufferOf(bytes, 4), &parsed, &left));
  EXPECT_TRUE(left.empty());
  EXPECT_EQ(parsed.SerializeAsString(), whole->SerializeAsString());
}

// ApplyRope's round trip: the data left in the slices is written in place and sent back in the
// response, whole, wherever the received slices were cut (down to a few bytes, which gRPC holds
// inline in the slice itself).
TEST(ParseLeavingTensorDataTest, DataWrittenInPlaceIsSentBack) {
  ApplyRopeRequest request;
  request.mutable_q()->set_dtype(DTYPE_FLOAT32);
  request.mutable_q()->add_shape(25600);
  std::string q(size_t{100} << 10, '\0');
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<char>(i * 13);
  request.mutable_q()->set_data(q);
  const std::string bytes = request.SerializeAsString();
  for (const size_t pieces : {size_t{3}, size_t{20000}}) {  // ~34 KiB and ~5-byte slices
    ApplyRopeRequest parsed;
    WireTensors left;
    ASSERT_TRUE(ParseLeavingTensorData(BufferOf(bytes, pieces), &parsed, &left));
    ASSERT_EQ(left.count("q"), 1U);
    for (const absl::Span<char> piece : left.at("q").pieces) {
      for (char& c : piece) c = static_cast<char>(c ^ 0x5a);
    }
    auto response = std::make_shared<ApplyRopeResponse>();
    response->mutable_q()->set_dtype(DTYPE_FLOAT32);
    response->mutable_q()->add_shape(25600);
    response->mutable_derived()->add_inv_freq(0.5);
    const google::protobuf::FieldDescriptor* field =
        ApplyRopeResponse::descriptor()->FindFieldByName("q");
    grpc::ByteBuffer out;
    ASSERT_TRUE(SerializeWithWireData(response, {{field, &left.at("q")}}, &out).ok());
    ApplyRopeResponse got;
    ASSERT_TRUE(got.ParseFromString(Flat(out)));
    std::string want = q;
    for (char& c : want) c = static_cast<char>(c ^ 0x5a);
    EXPECT_TRUE(got.q().data() == want) << pieces;
    EXPECT_EQ(got.q().shape(0), 25600);
    EXPECT_EQ(got.derived().inv_freq(0), 0.5);
  }
}

// protobuf's parse stops early at a top-level END_GROUP tag and then backs up; grpc's
// ProtoBufferReader asserted when that went past the chunk it had given (the process aborted:
// UnparseableRequestTest.AStrayEndGroupBeforeMoreSlicesIsInvalidArgument reproduces it over
// TCP). Refused over any slicing here.
TEST(ByteBufferTest, AStrayEndGroupIsRefusedWhateverTheSlices) {
  const std::string bytes = LargeRequest()->SerializeAsString();
  const std::string stray = bytes.substr(0, 8) + std::string("\x0c", 1) + bytes;
  ApplyRopeRequest probe;
  ASSERT_FALSE(probe.ParseFromString(stray));
  for (const size_t pieces : {size_t{1}, size_t{2}, size_t{3}, size_t{1000}}) {
    ApplyRopeRequest parsed;
    EXPECT_FALSE(ParseFromByteBuffer(BufferOf(stray, pieces), &parsed)) << pieces;
    ApplyRopeRequest left_parsed;
    WireTensors left;
    EXPECT_FALSE(ParseLeavingTensorData(BufferOf(stray, pieces), &left_parsed, &left)) << pieces;
  }
  // The tag at the end of a first slice shorter than protobuf's 16 bytes of slop.
  for (const size_t cut : {size_t{5}, size_t{9}, size_t{12}, size_t{20}}) {
    grpc::Slice two[] = {grpc::Slice(stray.data(), cut),
                         grpc::Slice(stray.data() + cut, stray.size() - cut)};
    ApplyRopeRequest parsed;
    EXPECT_FALSE(ParseFromByteBuffer(grpc::ByteBuffer(two, 2), &parsed)) << cut;
  }
}

TEST(ParseLeavingTensorDataTest, RefusesWhatProtobufRefuses) {
  const std::string bytes = LargeRequest()->SerializeAsString();
  ApplyRopeRequest parsed;
  WireTensors left;
  // Truncated inside q's data, and a length past the end.
  EXPECT_FALSE(
      ParseLeavingTensorData(BufferOf(bytes.substr(0, bytes.size() / 2), 3), &parsed, &left));
  EXPECT_TRUE(left.empty());
  std::string bad = bytes;
  bad += std::string("\x0a\xff\xff\xff\x0f", 5);  // q: a 4 GiB length
  parsed.Clear();
  EXPECT_FALSE(ParseLeavingTensorData(BufferOf(bad, 2), &parsed, &left));
  EXPECT_TRUE(left.empty());
  // Small requests are protobuf's whole.
  ApplyRopeRequest small;
  small.mutable_q()->set_data("0123");
  parsed.Clear();
  ASSERT_TRUE(ParseLeavingTensorData(BufferOf(small.SerializeAsString()), &parsed, &left));
  EXPECT_TRUE(left.empty());
  EXPECT_EQ(parsed.q().data(), "0123");
}

}  // namespace
}  // namespace posenc::v1
