// libFuzzer target: one RPC's request bytes -> parse -> conversion and validation -> plan -> run,
// through the server's handlers (server/handlers.h) on the CPU backend, with no network. An
// ApplyRope input is also parsed as from a socket (CheckWireParse below).
//
// Input: byte 0 picks the RPC (modulo 16, in the order of the service in posenc.proto; the three
// shared-memory RPCs are skipped: they would map the fuzzer's files), the rest is that RPC's
// serialized request; bytes that do not parse are skipped. The limits are small
// so that a run stays fast: an output the limits should have refused shows up as an allocation
// over -malloc_limit_mb, which is a finding. On success every response tensor must hold exactly
// prod(shape) * sizeof(dtype) bytes, and the tensors together at most max_message_bytes.
#include <grpcpp/support/byte_buffer.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "proto/posenc/v1/wire_dtype.h"
#include "server/handlers.h"
#include "server/tables.h"
#include "tests/fuzz/handler_fixture.h"

namespace posenc::server {
namespace {

// Tables the seeds refer to by name: a learned table, a T5 bias table and a Shaw table.
void AddTable(TableRegistry* tables, const char* name, int64_t rows, int64_t cols) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.01f * static_cast<float>(i);
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  if (!tables->Add(name, kernels::DType::kFloat32, kernels::Shape{rows, cols}, std::move(bytes))
           .ok()) {
    std::abort();
  }
}

struct Fixture : HandlerFixture {
  Fixture() {
    AddTable(&tables, "wpe", 16, 8);
    AddTable(&tables, "t5", 32, 4);
    AddTable(&tables, "shaw", 9, 4);
    ctx.tables = &tables;
  }
  TableRegistry tables;
};

// Every tensor field of a response, wherever it sits.
void CollectTensors(const google::protobuf::Message& message, std::vector<const v1::Tensor*>* out) {
  if (const auto* tensor = dynamic_cast<const v1::Tensor*>(&message)) {
    out->push_back(tensor);
    return;
  }
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        field->is_repeated()) {
      continue;
    }
    CollectTensors(reflection->GetMessage(message, field), out);
  }
}

void CheckResponse(const HandlerContext& ctx, const google::protobuf::Message& response) {
  std::vector<const v1::Tensor*> tensors;
  CollectTensors(response, &tensors);
  int64_t total = 0;
  for (const v1::Tensor* tensor : tensors) {
    const std::optional<kernels::DType> dtype = v1::FromWireDType(tensor->dtype());
    if (!dtype.has_value()) std::abort();  // a response tensor without a valid dtype
    int64_t elements = 1;
    for (int64_t d : tensor->shape()) {
      if (d < 0 || __builtin_mul_overflow(elements, d, &elements)) std::abort();
    }
    int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, int64_t{kernels::DTypeSize(*dtype)}, &bytes) ||
        bytes != static_cast<int64_t>(tensor->data().size())) {
      std::abort();  // data does not match the shape
    }
    total += static_cast<int64_t>(tensor->data().size());
  }
  if (total > ctx.limits.max_message_bytes) std::abort();
}

template <typename Request, typename Response>
void Run(grpc::Status (*handle)(const HandlerContext&, const Request&, Response*),
         const HandlerContext& ctx, const uint8_t* data, size_t size) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  Response response;
  if (CheckHandlerStatus(Request::descriptor()->name(), handle(ctx, request, &response))) {
    CheckResponse(ctx, response);
  }
}

void AppendVarint(uint64_t value, std::string* out) {
  for (; value >= 0x80; value >>= 7) out->push_back(static_cast<char>((value & 0x7f) | 0x80));
  out->push_back(static_cast<char>(value));
}

// ApplyRope's bytes as the server parses them from a socket (v1::ParseLeavingTensorData): the
// input's request with a 64 KiB q.data put before or after it (so that the walk leaves that data
// in the slices, whatever surrounds it), cut into uneven slices. The parse must succeed exactly
// when protobuf's does and give protobuf's message once the data left is put back; data written
// in place must come back in v1::SerializeWithWireData's bytes.
void CheckWireParse(const uint8_t* data, size_t size) {
  constexpr size_t kData = size_t{64} << 10;
  std::string tensor = "\x1a";  // posenc.v1.Tensor.data
  AppendVarint(kData, &tensor);
  tensor.append(kData, '\x07');
  std::string q = "\x0a";  // ApplyRopeRequest.q
  AppendVarint(tensor.size(), &q);
  q += tensor;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const bool first = size > 0 && (data[size - 1] & 1) != 0;
  const std::string bytes = first ? q + input : input + q;
  v1::ApplyRopeRequest want;
  const bool parses = want.ParseFromString(bytes);

  std::vector<grpc::Slice> slices;
  static constexpr size_t kCuts[] = {1, 7, 4096, 65536, 3, 100000, 13};
  for (size_t at = 0, i = size; at < bytes.size(); ++i) {
    const size_t n = std::min(kCuts[i % std::size(kCuts)], bytes.size() - at);
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  const grpc::ByteBuffer buffer(slices.data(), slices.size());
  v1::ApplyRopeRequest got;
  v1::WireTensors left;
  if (v1::ParseLeavingTensorData(buffer, &got, &left) != parses) std::abort();
  if (!parses) return;
  const google::protobuf::Descriptor* type = v1::ApplyRopeRequest::descriptor();
  for (const auto& [name, wire] : left) {
    const google::protobuf::FieldDescriptor* field = type->FindFieldByName(name);
    auto* t = static_cast<v1::Tensor*>(got.GetReflection()->MutableMessage(&got, field));
    if (!t->data().empty()) std::abort();  // the data is in one place only
    wire.CopyTo(t->mutable_data());
  }
  // Field by field, a NaN equal to a NaN (a fuzzed double is often one; bytes are bytes).
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  if (!differencer.Compare(got, want)) std::abort();

  const auto it = left.find("q");
  if (it == left.end()) return;
  for (const absl::Span<char> piece : it->second.pieces) {
    for (char& c : piece) c = static_cast<char>(c ^ 0x5a);
  }
  auto response = std::make_shared<v1::ApplyRopeResponse>();
  response->mutable_q()->set_dtype(got.q().dtype());
  *response->mutable_q()->mutable_shape() = got.q().shape();
  grpc::ByteBuffer out;
  if (!v1::SerializeWithWireData(
           response, {{v1::ApplyRopeResponse::descriptor()->FindFieldByName("q"), &it->second}},
           &out)
           .ok()) {
    std::abort();
  }
  std::vector<grpc::Slice> sent;
  if (!out.Dump(&sent).ok()) std::abort();
  std::string flat;
  for (const grpc::Slice& slice : sent) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  v1::ApplyRopeResponse back;
  if (!back.ParseFromString(flat) || back.q().data().size() != want.q().data().size()) {
    std::abort();
  }
  for (size_t i = 0; i < back.q().data().size(); ++i) {
    if (back.q().data()[i] != static_cast<char>(want.q().data()[i] ^ 0x5a)) std::abort();
  }
}

}  // namespace
}  // namespace posenc::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace posenc::server;
  static Fixture* fixture = new Fixture();
  if (size == 0) return 0;
  const HandlerContext& ctx = fixture->ctx;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  switch (data[0] % 16) {
    case 0: Run(HandleSinusoidal, ctx, body, n); break;
    case 1: Run(HandleAddPositionEncoding, ctx, body, n); break;
    case 2: Run(HandleRopeCache, ctx, body, n); break;
    case 3:
      Run(HandleApplyRope, ctx, body, n);
      CheckWireParse(body, n);
      break;
    case 4: Run(HandleAlibiSlopes, ctx, body, n); break;
    case 5: Run(HandleAlibiBias, ctx, body, n); break;
    case 6: Run(HandleRelativeBias, ctx, body, n); break;
    case 7: Run(HandleRelativeEmbedding, ctx, body, n); break;
    case 8: Run(HandleGetServerInfo, ctx, body, n); break;
    case 9: Run(HandleDescribeRope, ctx, body, n); break;
    case 13: Run(HandleRerotateKeys, ctx, body, n); break;
    case 14: Run(HandleMultimodalPositions, ctx, body, n); break;
    case 15: Run(HandleVisionPositions, ctx, body, n); break;
    default: break;  // 10-12: RegisterSharedMemory, UnregisterSharedMemory, SharedMemoryStatus
  }
  return 0;
}
