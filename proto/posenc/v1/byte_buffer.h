// Messages to and from gRPC byte buffers without the copies of gRPC's default serialization, for
// the server's and the C++ client's large tensors (issue #20, "the wire at the link's speed").
// Built into posenc_proto.
//
// - SerializeToByteBuffer: the message's large bytes fields are not copied; the buffer's slices
//   reference them and keep the message alive until gRPC has sent them (gRPC's own serializer
//   copies every byte into 1 MiB slices first).
// - ParseFromByteBuffer: a first pass over the wire format (headers only) sizes every large bytes
//   field once, in memory advised for transparent huge pages, before protobuf copies the bytes in
//   (protobuf reserves at most 50 MB and grows a larger field by reallocating and copying, and a
//   fresh mapping of small pages costs a page fault per 4 KiB). Protobuf reads the slices through
//   a stream of this file's own: grpc::ProtoBufferReader aborts the process when protobuf backs
//   up past the chunk it last gave, as protobuf does at a stray top-level END_GROUP tag.
// - ParseLeavingTensorData: ParseFromByteBuffer, but the large tensors' bytes stay where gRPC
//   received them (WireBytes), and SerializeWithWireData sends such bytes back from there: an op
//   that works in place (ApplyRope) copies none of its tensors' bytes.
// - DescribeParseFailure: the field path of what makes bytes unparseable (invalid UTF-8 in a
//   string field, a length past the end of its message), for the error the caller gets.
//
// Thread-safety: pure functions; a message must not be modified while a buffer references it.
#ifndef POSENC_PROTO_POSENC_V1_BYTE_BUFFER_H_
#define POSENC_PROTO_POSENC_V1_BYTE_BUFFER_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/posenc/v1/borrowed_slices.h"

namespace posenc::v1 {

// Bytes and string fields from this size on are referenced, not copied, by SerializeToByteBuffer
// and sized once by ParseFromByteBuffer.
inline constexpr size_t kLargeFieldBytes = size_t{64} << 10;
// ParseLeavingTensorData's bound on the bytes it copies besides the tensor data it leaves.
inline constexpr size_t kMaxKeptBytes = size_t{1} << 20;

// `message` serialized into `out` (replacing its contents). INTERNAL when the message is over
// protobuf's 2 GiB - 1 or does not serialize.
grpc::Status SerializeToByteBuffer(std::shared_ptr<const google::protobuf::Message> message,
                                   grpc::ByteBuffer* out);

// Parses `in` into `message`, which must be empty (a fresh message). false when the bytes are
// not a valid message of its type (DescribeParseFailure says why, where it can).
bool ParseFromByteBuffer(const grpc::ByteBuffer& in, google::protobuf::Message* message);

// A bytes field's bytes left in a received buffer's slices (ParseLeavingTensorData): in order,
// in pieces, each a slice of its own (referencing the received memory, or for a piece of a few
// bytes holding a copy inline: `pieces` views them, so `slices` must not be modified, though
// the WireBytes may be moved).
// The pieces are writable where the received memory is the transport's own (read off a socket),
// never where it may be the sender's (an in-process channel).
struct WireBytes {
  std::vector<grpc::Slice> slices;
  std::vector<absl::Span<char>> pieces;
  size_t size = 0;

  // The bytes, copied into `out` (replacing its contents).
  void CopyTo(std::string* out) const;
};

// Tensor data left in received slices, by the request field holding the tensor ("q").
using WireTensors = std::map<std::string, WireBytes, std::less<>>;

// ParseFromByteBuffer, except that the data (posenc.v1.Tensor.data) of each top-level Tensor field
// of `message` holding kLargeFieldBytes or more stays in `in`'s slices: `left` gets it by the
// field's name, and the message's tensor has no data. Where the bytes do not allow it (a tensor's
// data given twice, groups, a malformed field, or more than max(kMaxKeptBytes, 1/8 of the
// request) in the other fields, which are copied once more here), the message is parsed whole,
// as ParseFromByteBuffer does, and `left` is empty. `message` must be empty; false when the bytes
// do not parse.
bool ParseLeavingTensorData(const grpc::ByteBuffer& in, google::protobuf::Message* message,
                            WireTensors* left);

// SerializeToByteBuffer of `message` whose top-level Tensor fields listed in `data` take that
// data (referenced, not copied) in place of their own, which must be empty: each such field is
// taken out of the message and written after the rest of it, whole.
grpc::Status SerializeWithWireData(
    std::shared_ptr<google::protobuf::Message> message,
    const std::vector<std::pair<const google::protobuf::FieldDescriptor*, const WireBytes*>>& data,
    grpc::ByteBuffer* out);

// Why `in` does not parse as a message of `type`: "PATH: REASON", e.g.
// "config.hf_config_json: invalid UTF-8 in a string field (use bytes for raw bytes)", or "" when
// no field can be named (e.g. a malformed tag).
std::string DescribeParseFailure(const grpc::ByteBuffer& in,
                                 const google::protobuf::Descriptor* type);

// Tensor bytes a request sends from memory it does not own (the caller's tensors), instead of
// copying them into the message first. Append adds `field_number { data: bytes }` (a
// posenc.v1.Tensor field holding only its data, field 3) to a serialized message: protobuf merges
// it into that field as serialized before (dtype, shape). The bytes may be given in parts (a box
// of a larger tensor, run by run), joined in order: parts from `lend_from` bytes on are
// referenced, not copied, the others copied (BorrowedSlices::LendJoined). Wait() returns once gRPC
// has dropped every reference, and must be called (and return) before the bytes change or go
// away.
// Thread-safety: Append from one thread; the references are dropped from any. The destructor
// waits.
class BorrowedBytes {
 public:
  void Append(int field_number, absl::string_view bytes, grpc::ByteBuffer* buffer) {
    Append(field_number, {{bytes.data(), bytes.size()}}, buffer);
  }
  void Append(int field_number, const std::vector<BorrowedSlices::Part>& parts,
              grpc::ByteBuffer* buffer, size_t lend_from = kLargeFieldBytes);
  void Wait() { lent_.Wait(); }

 private:
  std::vector<std::unique_ptr<std::string>> copied_;  // outlives lent_'s wait (declared first)
  BorrowedSlices lent_;
};

// Reserves `n` bytes in `s`; a buffer of 2 MiB or more is advised for transparent huge pages
// (where the kernel has them), so that filling it faults once per 2 MiB instead of per 4 KiB.
void ReserveLarge(std::string* s, size_t n);

// Resizes `s` to `n` bytes (reserved as ReserveLarge does); new bytes are left uninitialized, for
// buffers the caller overwrites in full (a kernel's output, a join of pieces that cover it):
// clearing them first would only cost a pass over memory.
void ResizeUninitialized(std::string* s, size_t n);

}  // namespace posenc::v1

#endif  // POSENC_PROTO_POSENC_V1_BYTE_BUFFER_H_
