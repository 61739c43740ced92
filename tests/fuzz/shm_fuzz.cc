// libFuzzer target: shared-memory registration and tensor references (issue #20 item 6), through
// the server's handlers (server/handlers.h) and registry (server/shared_memory.h) on the CPU
// backend, with no network.
//
// Input: a sequence of records, each [op: 1 byte][length: 2 bytes, little-endian][body]:
//   op % 8 = 0 RegisterSharedMemory (RegisterCudaSharedMemory when op >= 128: on this CPU backend
//   every CUDA registration must be refused, naming its field, and count nothing),
//   1 UnregisterSharedMemory, 2 SharedMemoryStatus (body: the serialized request, with the kind
//   filters); 3 ApplyRope, 4 RopeCache, 5 AlibiBias, 6 Sinusoidal (body: the request,
//   whose tensors and output_shared_memory may reference regions); 7 truncates object "b" to
//   body[0] * 256 bytes (0: its full size), as a client shrinking its object under a call does.
// Every input starts from the same state: objects "a" (64 KiB) and "b" (16 KiB) exist, region
// "ra" covers all of "a" and "rb" the bytes 4096.. of "b"; at its end every region is
// unregistered, "b" restored, and the registry must count no region and no byte.
//
// A registration's key is never passed to shm_open as the fuzzer wrote it (that would map other
// processes' objects): a key that is a valid POSIX name becomes "a", "b" or a missing object (by
// its length); an invalid one goes through as written (the registry must refuse it).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "posenc/v1/posenc.pb.h"
#include "server/handlers.h"
#include "server/shared_memory.h"
#include "tests/fuzz/handler_fixture.h"

namespace posenc::server {
namespace {

constexpr int64_t kBytesA = 64 << 10;
constexpr int64_t kBytesB = 16 << 10;

// A POSIX shared-memory object of this process, unlinked at exit.
struct Object {
  Object(const std::string& key, int64_t bytes) : key(key), bytes(bytes) {
    fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, bytes) != 0) std::abort();
  }
  ~Object() {
    close(fd);
    shm_unlink(key.c_str());
  }
  void Resize(int64_t n) const {
    if (ftruncate(fd, n) != 0) std::abort();
  }
  std::string key;
  int64_t bytes;
  int fd = -1;
};

struct Fixture : HandlerFixture {
  Fixture() : registry(Options()) { ctx.shared_memory = &registry; }
  static SharedMemoryOptions Options() {
    SharedMemoryOptions options;
    options.allowed = true;
    options.max_regions = 4;
    options.max_bytes = 128 << 10;
    return options;
  }
  // The key a registration opens (see the header).
  std::string SafeKey(const std::string& key) const {
    const bool valid = key.size() >= 2 && key.size() <= 255 && key[0] == '/' &&
                       key.find('/', 1) == std::string::npos && key.find('\0') == std::string::npos;
    if (!valid) return key;
    const std::string* keys[] = {&a.key, &b.key, &missing};
    return *keys[key.size() % 3];
  }
  void Reset() {
    (void)registry.Unregister("");
    b.Resize(b.bytes);
    if (!registry.Register("ra", a.key, 0, a.bytes).ok() ||
        !registry.Register("rb", b.key, 4096, b.bytes - 4096).ok()) {
      std::abort();
    }
  }

  std::string prefix = "/posenc_shm_fuzz_" + std::to_string(getpid());
  Object a{prefix + "_a", kBytesA};
  Object b{prefix + "_b", kBytesB};
  std::string missing = prefix + "_missing";
  SharedMemoryRegistry registry;
};

template <typename Request, typename Response>
void Run(grpc::Status (*handle)(const HandlerContext&, const Request&, Response*),
         const HandlerContext& ctx, const std::string& body) {
  Request request;
  if (!request.ParseFromString(body)) return;
  Response response;
  (void)CheckHandlerStatus(Request::descriptor()->name(), handle(ctx, request, &response));
}

void Register(Fixture* fixture, const std::string& body) {
  v1::RegisterSharedMemoryRequest request;
  if (!request.ParseFromString(body)) return;
  request.set_key(fixture->SafeKey(request.key()));
  v1::RegisterSharedMemoryResponse response;
  (void)CheckHandlerStatus("RegisterSharedMemory",
                           HandleRegisterSharedMemory(fixture->ctx, request, &response));
  const SharedMemoryOptions& bounds = fixture->registry.options();
  if (fixture->registry.region_count() > bounds.max_regions ||
      fixture->registry.registered_bytes() > bounds.max_bytes) {
    std::abort();  // the registry's bounds do not hold
  }
}

void Record(Fixture* fixture, uint8_t op, const std::string& body) {
  const HandlerContext& ctx = fixture->ctx;
  switch (op % 8) {
    case 0:
      if (op >= 128) {
        Run(HandleRegisterCudaSharedMemory, ctx, body);
      } else {
        Register(fixture, body);
      }
      break;
    case 1: Run(HandleUnregisterSharedMemory, ctx, body); break;
    case 2: Run(HandleSharedMemoryStatus, ctx, body); break;
    case 3: Run(HandleApplyRope, ctx, body); break;
    case 4: Run(HandleRopeCache, ctx, body); break;
    case 5: Run(HandleAlibiBias, ctx, body); break;
    case 6: Run(HandleSinusoidal, ctx, body); break;
    case 7: {
      const int64_t n = body.empty() ? 0 : int64_t{static_cast<uint8_t>(body[0])} * 256;
      fixture->b.Resize(n == 0 ? fixture->b.bytes : n);
      break;
    }
  }
}

}  // namespace
}  // namespace posenc::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace posenc::server;
  static Fixture instance;  // destroyed at exit: the regions unmapped, the objects unlinked
  Fixture* fixture = &instance;
  fixture->Reset();
  for (size_t at = 0; at + 3 <= size;) {
    const uint8_t op = data[at];
    const size_t length = std::min<size_t>(data[at + 1] | (data[at + 2] << 8), size - at - 3);
    Record(fixture, op, std::string(reinterpret_cast<const char*>(data + at + 3), length));
    at += 3 + length;
  }
  if (!fixture->registry.Unregister("").ok() && fixture->registry.region_count() != 0) {
    std::abort();
  }
  if (fixture->registry.region_count() != 0 || fixture->registry.registered_bytes() != 0) {
    std::abort();  // unregistering everything left regions or bytes counted
  }
  return 0;
}
