#include "proto/posenc/v1/byte_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/stubs/common.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::v1 {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Blocks of the serialized message around its referenced fields: from 4 KiB, doubling to 1 MiB.
constexpr int kFirstBlockBytes = 4 << 10;
constexpr int kLastBlockBytes = 1 << 20;

// A protobuf output stream into gRPC slices: the message's bytes in blocks, except fields of
// kLargeFieldBytes or more, which become slices referencing the message's own memory, each
// holding a reference to `owner` until gRPC drops the slice.
class SliceOutputStream final : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  explicit SliceOutputStream(std::shared_ptr<const void> owner) : owner_(std::move(owner)) {}

  bool Next(void** data, int* size) override {
    CloseBlock();
    block_bytes_ = std::clamp(block_bytes_ * 2, kFirstBlockBytes, kLastBlockBytes);
    block_ = grpc::Slice(static_cast<size_t>(block_bytes_));
    *data = const_cast<uint8_t*>(block_.begin());
    *size = used_ = block_bytes_;
    return true;
  }
  void BackUp(int count) override { used_ -= count; }
  int64_t ByteCount() const override { return closed_bytes_ + used_; }
  bool AllowsAliasing() const override { return true; }
  bool WriteAliasedRaw(const void* data, int size) override {
    CloseBlock();
    if (static_cast<size_t>(size) < kLargeFieldBytes) {
      grpc::Slice copy(data, static_cast<size_t>(size));
      slices_.push_back(std::move(copy));
    } else {
      slices_.emplace_back(const_cast<void*>(data), static_cast<size_t>(size), &DropOwner,
                           new std::shared_ptr<const void>(owner_));
    }
    closed_bytes_ += size;
    return true;
  }
  // The slices written; call once, after the CodedOutputStream on this stream is gone.
  grpc::ByteBuffer Finish() {
    CloseBlock();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  static void DropOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }
  void CloseBlock() {
    if (used_ > 0) slices_.push_back(block_.sub(0, static_cast<size_t>(used_)));
    closed_bytes_ += used_;
    block_ = grpc::Slice();
    used_ = 0;
  }

  std::shared_ptr<const void> owner_;
  std::vector<grpc::Slice> slices_;
  grpc::Slice block_;
  int block_bytes_ = kFirstBlockBytes / 2;
  int used_ = 0;  // bytes of block_ handed out and not backed up
  int64_t closed_bytes_ = 0;
};

// A protobuf input stream over the slices of a byte buffer. Unlike grpc::ProtoBufferReader it
// backs up any number of the bytes it gave: protobuf's parser, stopping early at a top-level
// END_GROUP tag, backs up past the last chunk it was given, on which gRPC's reader asserts and
// the process aborts (a crafted request of two slices or more would stop the server).
class SliceInputStream final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SliceInputStream(const grpc::ByteBuffer& in) { (void)in.Dump(&slices_); }

  bool Next(const void** data, int* size) override {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    if (slice_ == slices_.size()) return false;
    const size_t n = std::min<size_t>(slices_[slice_].size() - offset_, INT_MAX);
    *data = slices_[slice_].begin() + offset_;
    *size = static_cast<int>(n);
    offset_ += n;
    position_ += static_cast<int64_t>(n);
    return true;
  }
  void BackUp(int count) override {
    auto left = static_cast<size_t>(std::clamp<int64_t>(count, 0, position_));
    position_ -= static_cast<int64_t>(left);
    while (left > 0) {
      if (offset_ == 0) offset_ = slices_[--slice_].size();
      const size_t step = std::min(left, offset_);
      offset_ -= step;
      left -= step;
    }
  }
  bool Skip(int count) override {
    while (count > 0) {
      const void* data = nullptr;
      int size = 0;
      if (!Next(&data, &size)) return false;
      if (size > count) {
        BackUp(size - count);
        return true;
      }
      count -= size;
    }
    return true;
  }
  int64_t ByteCount() const override { return position_; }

 private:
  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;  // in slices_[slice_]
  int64_t position_ = 0;
};

// Sequential reads of protobuf wire format across the slices of a byte buffer.
class WireReader {
 public:
  explicit WireReader(const grpc::ByteBuffer& in) {
    (void)in.Dump(&slices_);
    for (const grpc::Slice& s : slices_) size_ += s.size();
  }
  size_t position() const { return position_; }
  size_t size() const { return size_; }

  // A varint; its bytes as they were are also appended to `raw` when not null.
  bool Varint(uint64_t* value, std::string* raw = nullptr) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ == size_) return false;
      Settle();
      const uint8_t byte = slices_[slice_].begin()[offset_++];
      ++position_;
      if (raw != nullptr) raw->push_back(static_cast<char>(byte));
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  // Moves `n` bytes ahead, appending them to `out` when not null; false past the end.
  bool Take(uint64_t n, std::string* out = nullptr) {
    if (n > size_ - position_) return false;
    position_ += n;
    while (n > 0) {
      Settle();
      const size_t step = std::min<uint64_t>(n, slices_[slice_].size() - offset_);
      if (out != nullptr) {
        out->append(reinterpret_cast<const char*>(slices_[slice_].begin()) + offset_, step);
      }
      offset_ += step;
      n -= step;
    }
    return true;
  }
  // Moves `n` bytes ahead, adding them to `out` as slices of the received ones (referenced, not
  // copied; a piece of a few bytes is a copy held inline in its grpc::Slice) and views of
  // those; false past the end.
  bool TakeLeft(uint64_t n, WireBytes* out) {
    if (n > size_ - position_) return false;
    position_ += n;
    out->size += n;
    while (n > 0) {
      Settle();
      const size_t step = std::min<uint64_t>(n, slices_[slice_].size() - offset_);
      out->slices.push_back(slices_[slice_].sub(offset_, offset_ + step));
      offset_ += step;
      n -= step;
    }
    // The views once the slices stay put: an inline piece's bytes live in its grpc::Slice.
    out->pieces.clear();
    for (const grpc::Slice& slice : out->slices) {
      out->pieces.emplace_back(reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin())),
                               slice.size());
    }
    return true;
  }

 private:
  // Moves past exhausted slices; requires bytes left.
  void Settle() {
    while (offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }

  std::vector<grpc::Slice> slices_;
  size_t size_ = 0;
  size_t slice_ = 0;
  size_t offset_ = 0;
  size_t position_ = 0;
};

// A walk over the fields of a message on the wire (headers and string fields only), following
// the message's descriptor into nested messages. With a `message`, every singular bytes or string
// field of kLargeFieldBytes or more is sized in it (ReserveLarge) before protobuf parses; with a
// `problem`, the walk checks what protobuf checks of the fields it knows (lengths, UTF-8 of
// strings) and names the first that fails.
class WireWalk {
 public:
  WireWalk(WireReader* reader, std::string* problem) : reader_(reader), problem_(problem) {}

  // The fields of a `type` message from the reader's position to byte `end`; `message` (null
  // when only walking) receives the sized fields.
  bool Walk(const Descriptor* type, Message* message, size_t end, const std::string& path,
            int depth) {
    while (reader_->position() < end) {
      uint64_t key = 0;
      if (!reader_->Varint(&key)) return Fail(path, "a malformed field key");
      const FieldDescriptor* field =
          (key >> 3) <= INT_MAX ? type->FindFieldByNumber(static_cast<int>(key >> 3)) : nullptr;
      const std::string field_path = absl::StrCat(
          path, path.empty() ? "" : ".", field != nullptr ? field->name() : absl::StrCat(key >> 3));
      if (!Value(field, message, key, end, field_path, depth)) return false;
    }
    return reader_->position() == end || Fail(path, "a field runs past the end of the message");
  }

 private:
  static constexpr int kMaxDepth = 32;

  bool Value(const FieldDescriptor* field, Message* message, uint64_t key, size_t end,
             const std::string& path, int depth) {
    uint64_t value = 0;
    switch (key & 7) {
      case 0: return reader_->Varint(&value) || Fail(path, "a malformed varint");
      case 1: return reader_->Take(8) || Fail(path, "a truncated 64-bit value");
      case 5: return reader_->Take(4) || Fail(path, "a truncated 32-bit value");
      case 3: return SkipGroup(key >> 3, path, depth);
      case 2: break;
      default: return Fail(path, absl::StrCat("wire type ", key & 7, " is not valid"));
    }
    if (!reader_->Varint(&value)) return Fail(path, "a malformed length");
    const size_t left = end > reader_->position() ? end - reader_->position() : 0;
    if (value > left) {
      return Fail(path, absl::StrCat("a length of ", value, " bytes runs past the end of its ",
                                     "message (", left, " bytes left)"));
    }
    return LengthDelimited(field, message, value, path, depth);
  }

  bool LengthDelimited(const FieldDescriptor* field, Message* message, uint64_t length,
                       const std::string& path, int depth) {
    if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE && depth < kMaxDepth) {
      Message* child = message != nullptr && !field->is_repeated()
                           ? message->GetReflection()->MutableMessage(message, field)
                           : nullptr;
      return Walk(field->message_type(), child, reader_->position() + length, path, depth + 1);
    }
    if (field != nullptr && field->type() == FieldDescriptor::TYPE_STRING && problem_ != nullptr) {
      std::string text;
      reader_->Take(length, &text);
      return google::protobuf::internal::IsStructurallyValidUTF8(text.data(),
                                                                 static_cast<int>(text.size())) ||
             Fail(path, "invalid UTF-8 in a string field (raw bytes belong in a bytes field)");
    }
    if (field != nullptr && message != nullptr && !field->is_repeated() &&
        field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && length >= kLargeFieldBytes) {
      std::string sized;
      ReserveLarge(&sized, length);
      message->GetReflection()->SetString(message, field, std::move(sized));
    }
    return reader_->Take(length);
  }

  // The fields of a group up to its end tag (groups are proto2's; protobuf skips unknown ones).
  bool SkipGroup(uint64_t number, const std::string& path, int depth) {
    if (depth >= kMaxDepth) return Fail(path, "groups nested too deep");
    for (;;) {
      uint64_t key = 0;
      if (!reader_->Varint(&key)) return Fail(path, "a group without its end");
      if ((key & 7) == 4) return (key >> 3) == number || Fail(path, "a mismatched group end");
      if (!Value(nullptr, nullptr, key, reader_->size(), path, depth + 1)) return false;
    }
  }

  // Records the first problem where it names a field (`path` not empty): a malformed key of the
  // message itself names none, and the caller then says the bytes are not this message.
  bool Fail(const std::string& path, const std::string& what) {
    if (problem_ != nullptr && problem_->empty() && !path.empty()) {
      *problem_ = absl::StrCat(path, ": ", what);
    }
    return false;
  }

  WireReader* reader_;
  std::string* problem_;
};

// A protobuf varint of `value` appended to `out`.
void AppendVarint(uint64_t value, std::string* out) {
  for (; value >= 0x80; value >>= 7) out->push_back(static_cast<char>((value & 0x7f) | 0x80));
  out->push_back(static_cast<char>(value));
}

constexpr uint64_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;
constexpr uint64_t kTensorData = 3;  // posenc.v1.Tensor.data

// The bytes of `field_number { <fields> data: <data_bytes bytes> }` (a posenc.v1.Tensor field)
// up to where the data goes: the field's key and length, `fields` (the tensor's other fields,
// serialized) and the data's key and length.
std::string TensorFieldHead(int field_number, std::string fields, size_t data_bytes) {
  AppendVarint(kTensorData << 3 | kLengthDelimited, &fields);
  AppendVarint(data_bytes, &fields);
  std::string head;
  AppendVarint(static_cast<uint64_t>(field_number) << 3 | kLengthDelimited, &head);
  AppendVarint(fields.size() + data_bytes, &head);
  return head + fields;
}

// The bytes left below `limit` once `used` are taken (0 past it).
size_t Room(size_t limit, size_t used) { return limit - std::min(limit, used); }

// The value of a field (its key read and copied to `out` already) copied to `out` byte for byte
// (protobuf then judges the bytes as it would have); false on a malformed value, a group (which
// the caller does not leave data in) or a value that would take `out` past `limit` bytes.
bool CopyValue(WireReader* reader, uint64_t key, size_t end, size_t limit, std::string* out) {
  uint64_t value = 0;
  switch (key & 7) {
    case kVarint: return reader->Varint(&value, out);
    case kFixed64: return reader->Take(8, out);
    case kFixed32: return reader->Take(4, out);
    case kLengthDelimited:
      if (!reader->Varint(&value, out) || value > Room(end, reader->position()) ||
          value > Room(limit, out->size())) {
        return false;
      }
      return reader->Take(value, out);
    default: return false;
  }
}

// The fields of a posenc.v1.Tensor up to byte `end` copied to `out` (at most `limit` bytes), but
// its data, which goes to `data`; false on a malformed field or a second data field.
bool LeaveTensorData(WireReader* reader, size_t end, size_t limit, std::string* out,
                     WireBytes* data, bool* has_data) {
  while (reader->position() < end) {
    uint64_t key = 0;
    std::string key_bytes;
    if (!reader->Varint(&key, &key_bytes)) return false;
    if (key == (kTensorData << 3 | kLengthDelimited)) {
      uint64_t length = 0;
      if (*has_data || !reader->Varint(&length) || length > end - reader->position() ||
          !reader->TakeLeft(length, data)) {
        return false;
      }
      *has_data = true;
      continue;
    }
    *out += key_bytes;
    if (!CopyValue(reader, key, end, limit, out)) return false;
  }
  return reader->position() == end;
}

// The message in `reader` with the data of its large top-level Tensor fields left out: the rest
// of its bytes into `rest`, the data into `left`. false where that cannot be done, or where the
// rest passes `max_rest` bytes (a request whose bulk is not tensor data: copying it here, beside
// the received bytes and the message protobuf parses it into, would hold it three times).
bool SplitTensorData(WireReader* reader, const Descriptor* type, size_t max_rest, std::string* rest,
                     WireTensors* left) {
  const Descriptor* tensor = Tensor::descriptor();
  const size_t end = reader->size();
  while (reader->position() < end) {
    uint64_t key = 0;
    if (!reader->Varint(&key, rest)) return false;
    const FieldDescriptor* field =
        (key >> 3) <= INT_MAX ? type->FindFieldByNumber(static_cast<int>(key >> 3)) : nullptr;
    if ((key & 7) != kLengthDelimited || field == nullptr || field->is_repeated() ||
        field->message_type() != tensor) {
      if (!CopyValue(reader, key, end, max_rest, rest)) return false;
      continue;
    }
    uint64_t length = 0;
    std::string length_bytes;
    if (!reader->Varint(&length, &length_bytes) || length > end - reader->position()) return false;
    if (length < kLargeFieldBytes) {
      if (length > Room(max_rest, rest->size())) return false;
      *rest += length_bytes;
      if (!reader->Take(length, rest)) return false;
      continue;
    }
    std::string fields;
    WireBytes data;
    bool has_data = false;
    if (!LeaveTensorData(reader, reader->position() + length, Room(max_rest, rest->size()), &fields,
                         &data, &has_data) ||
        left->count(field->name()) > 0) {
      return false;
    }
    if (has_data && data.size < kLargeFieldBytes) {  // small data (a large shape): kept inline
      AppendVarint(kTensorData << 3 | kLengthDelimited, &fields);
      AppendVarint(data.size, &fields);
      for (const absl::Span<char> piece : data.pieces) fields.append(piece.data(), piece.size());
    } else if (has_data) {
      left->emplace(field->name(), std::move(data));
    }
    AppendVarint(fields.size(), rest);
    *rest += fields;
    if (rest->size() > max_rest) return false;
  }
  return true;
}

}  // namespace

void WireBytes::CopyTo(std::string* out) const {
  ResizeUninitialized(out, size);
  char* at = out->data();
  for (const absl::Span<char> piece : pieces) {
    std::memcpy(at, piece.data(), piece.size());
    at += piece.size();
  }
}

bool ParseLeavingTensorData(const grpc::ByteBuffer& in, Message* message, WireTensors* left) {
  left->clear();
  if (in.Length() >= kLargeFieldBytes) {
    WireReader reader(in);
    std::string rest;
    const size_t max_rest = std::max(kMaxKeptBytes, in.Length() / 8);
    bool parsed = SplitTensorData(&reader, message->GetDescriptor(), max_rest, &rest, left) &&
                  message->ParseFromString(rest);
    // A tensor given again later with (small) data of its own: protobuf's last-one-wins would
    // keep that data; parse the whole message instead.
    const Reflection* reflection = message->GetReflection();
    for (auto it = left->begin(); parsed && it != left->end(); ++it) {
      const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(it->first);
      parsed = static_cast<const Tensor&>(reflection->GetMessage(*message, field)).data().empty();
    }
    if (parsed) return true;
    left->clear();
    message->Clear();
  }
  return ParseFromByteBuffer(in, message);
}

grpc::Status SerializeWithWireData(
    std::shared_ptr<Message> message,
    const std::vector<std::pair<const FieldDescriptor*, const WireBytes*>>& data,
    grpc::ByteBuffer* out) {
  const std::string type = message->GetTypeName();
  const Reflection* reflection = message->GetReflection();
  std::vector<std::string> tensors;  // each field's header and its tensor without the data
  for (const auto& [field, bytes] : data) {
    const std::unique_ptr<Message> tensor(reflection->ReleaseMessage(message.get(), field));
    tensors.push_back(TensorFieldHead(
        field->number(), tensor != nullptr ? tensor->SerializeAsString() : std::string(),
        bytes->size));
  }
  if (grpc::Status s = SerializeToByteBuffer(std::move(message), out); !s.ok()) return s;
  std::vector<grpc::Slice> slices;
  (void)out->Dump(&slices);
  for (size_t i = 0; i < data.size(); ++i) {
    slices.emplace_back(tensors[i].data(), tensors[i].size());
    slices.insert(slices.end(), data[i].second->slices.begin(), data[i].second->slices.end());
  }
  size_t total = out->Length();
  for (size_t i = 0; i < data.size(); ++i) total += tensors[i].size() + data[i].second->size;
  if (total > static_cast<size_t>(INT_MAX)) {
    return grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat("a ", type, " of ", total, " bytes is over protobuf's limit of 2 GiB - 1"));
  }
  *out = grpc::ByteBuffer(slices.data(), slices.size());
  return grpc::Status::OK;
}

grpc::Status SerializeToByteBuffer(std::shared_ptr<const Message> message, grpc::ByteBuffer* out) {
  const size_t size = message->ByteSizeLong();  // also caches the sizes of nested messages
  if (size > static_cast<size_t>(INT_MAX)) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("a ", message->GetTypeName(), " of ", size,
                                     " bytes is over protobuf's limit of 2 GiB - 1"));
  }
  if (size < kLargeFieldBytes) {  // no field to reference: one slice
    grpc::Slice slice(size);
    message->SerializeWithCachedSizesToArray(const_cast<uint8_t*>(slice.begin()));
    *out = grpc::ByteBuffer(&slice, 1);
    return grpc::Status::OK;
  }
  SliceOutputStream stream(message);
  bool failed = false;
  {
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.EnableAliasing(true);
    message->SerializeWithCachedSizes(&coded);
    failed = coded.HadError();
  }
  if (failed) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("could not serialize a ", message->GetTypeName()));
  }
  *out = stream.Finish();
  return grpc::Status::OK;
}

bool ParseFromByteBuffer(const grpc::ByteBuffer& in, Message* message) {
  if (in.Length() >= kLargeFieldBytes) {
    WireReader reader(in);
    // A walk that fails leaves the rest to protobuf's parse, which then fails too.
    WireWalk(&reader, nullptr).Walk(message->GetDescriptor(), message, reader.size(), "", 0);
  }
  if (in.Length() > static_cast<size_t>(INT_MAX)) return false;
  SliceInputStream stream(in);
  return message->MergeFromBoundedZeroCopyStream(&stream, static_cast<int>(in.Length()));
}

std::string DescribeParseFailure(const grpc::ByteBuffer& in, const Descriptor* type) {
  WireReader reader(in);
  std::string problem;
  WireWalk(&reader, &problem).Walk(type, nullptr, reader.size(), "", 0);
  return problem;
}

void BorrowedBytes::Append(int field_number, const std::vector<BorrowedSlices::Part>& parts,
                           grpc::ByteBuffer* buffer, size_t lend_from) {
  size_t size = 0;
  for (const BorrowedSlices::Part& part : parts) size += part.size;
  if (size == 0) return;  // no data: the field serialized before says all
  const std::string header = TensorFieldHead(field_number, "", size);
  std::vector<grpc::Slice> slices;
  (void)buffer->Dump(&slices);
  slices.emplace_back(header.data(), header.size());
  std::string* copied = copied_.emplace_back(std::make_unique<std::string>()).get();
  for (grpc::Slice& slice : lent_.LendJoined(parts, lend_from, copied)) {
    slices.push_back(std::move(slice));
  }
  *buffer = grpc::ByteBuffer(slices.data(), slices.size());
}

void ReserveLarge(std::string* s, size_t n) {
  s->reserve(n);
#if defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  if (n < kHugePage) return;
  const auto begin = reinterpret_cast<uintptr_t>(s->data());
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = (begin + n) & ~(kHugePage - 1);
  // Advice only: where the kernel has no transparent huge pages, nothing changes.
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
}

}  // namespace posenc::v1
