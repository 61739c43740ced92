// libFuzzer target: one RPC's request bytes -> parse -> conversion and validation -> plan -> run,
// through the server's handlers (server/handlers.h) on the CPU backend, with no network.
//
// Input: byte 0 picks the RPC (modulo 16, in the order of the service in posenc.proto; the three
// shared-memory RPCs are skipped: they would map the fuzzer's files), the rest is that RPC's
// serialized request; bytes that do not parse are skipped. The limits are small
// so that a run stays fast: an output the limits should have refused shows up as an allocation
// over -malloc_limit_mb, which is a finding. On success every response tensor must hold exactly
// prod(shape) * sizeof(dtype) bytes, and the tensors together at most max_message_bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "posenc/v1/posenc.pb.h"
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
    case 3: Run(HandleApplyRope, ctx, body, n); break;
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
