// posenc::client::SharedMemoryRegion: a POSIX shared-memory object of this process, registered
// with a posenc server, whose bytes the tensors of any call may be instead of travelling in the
// message (posenc.proto, "Shared memory"; Triton's system shared-memory semantics). For callers on
// the server's machine: a call then moves a few hundred bytes, whatever the tensors' size.
//
//   auto client = posenc::client::Client::Connect("unix:///run/posenc.sock");
//   auto region = posenc::client::SharedMemoryRegion::Create(**client, 256 << 20);
//   absl::StatusOr<Tensor> q = region->Allocate(DType::kFloat32, {1, 4096, 32, 128});
//   absl::StatusOr<std::span<float>> values = region->Span<float>(*q);  // fill q here
//   posenc::client::ApplyRopeOptions options;
//   options.q = *q;  // a reference: rotated in place in the region
//   absl::StatusOr<ApplyRopeResult> rotated = (*client)->ApplyRope(options);
//   // rotated->q.shared_memory == q->shared_memory; the values are in `values`.
//   // Outputs: options.output_shared_memory["cos"] = *region->Allocate(...)->shared_memory;
//
// Create() makes the object (shm_open with O_CREAT | O_EXCL, ftruncate, mmap MAP_SHARED) and
// registers it with the server under a name (RegisterSharedMemory: the server maps it too); the
// destructor (or Close()) unregisters it, unmaps it and unlinks the object. The server needs
// --allow_shared_memory (else Create is FAILED_PRECONDITION) and must run on this machine, as a
// user that may open the object read-write (Options::mode). Registrations are per server process:
// with a target that spreads calls over several replicas, a call may reach one where this region
// is not registered (NOT_FOUND); give a co-located server's own address.
//
// The server checks every reference at every use (bounds, the region intact); a region must
// never shrink while registered: the server survives it (no SIGBUS) but fails the calls using it
// with FAILED_PRECONDITION and marks the region broken. This class never truncates it.
//
// Thread-safety: Allocate(), the views and the const methods may be called from any thread.
// Close(), Reset() and moving need exclusive access. The bytes are shared with the server: do not
// write a range that a call in flight reads or writes, nor read one it writes, until it returns.
// The Client given to Create() must outlive the region (or its Close()).
#ifndef POSENC_CLIENT_SHARED_MEMORY_H_
#define POSENC_CLIENT_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "posenc/client.h"
#include "posenc/tensor.h"

namespace posenc::client {

class SharedMemoryRegion {
 public:
  struct Options {
    // The name references use; default: the key without its leading '/'.
    std::string name;
    // The POSIX shared-memory object ("/name", as shm_open takes it); default: a fresh
    // "/posenc_<pid>_<n>_<random>". An existing object of that name is ALREADY_EXISTS.
    std::string key;
    // The object's permissions: the server's user must be able to open it read-write.
    unsigned mode = 0600;
    // Map every page at creation (MAP_POPULATE), so that the first touch of a tensor does not
    // page-fault its way through the region.
    bool populate = true;
    // Deadline of the registration and of the unregistration (default: the client's).
    CallOptions call;
  };

  // Creates, maps and registers a region of `byte_size` bytes (> 0). The server's errors come
  // back unchanged (with their structured details, posenc/errors.h); the object is removed again
  // when the registration fails. INVALID_ARGUMENT for a bad size or key, or what shm_open,
  // ftruncate or mmap refuse.
  static absl::StatusOr<SharedMemoryRegion> Create(const Client& client, int64_t byte_size,
                                                   const Options& options);
  static absl::StatusOr<SharedMemoryRegion> Create(const Client& client, int64_t byte_size) {
    return Create(client, byte_size, Options());
  }

  SharedMemoryRegion(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion& operator=(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;
  ~SharedMemoryRegion();  // Close(), its status ignored

  // Unregisters the region (its status is returned: e.g. UNAVAILABLE when the server is gone),
  // unmaps it and unlinks the object; afterwards the region is empty. Idempotent.
  absl::Status Close();

  const std::string& name() const;
  const std::string& key() const;
  int64_t byte_size() const;  // 0 once closed
  // The whole mapping.
  std::span<std::byte> bytes() const;

  // A reference to [offset, offset + byte_size); INVALID_ARGUMENT outside the region.
  absl::StatusOr<SharedMemoryRef> Ref(int64_t offset, int64_t byte_size) const;
  // A Tensor of `dtype` and `shape` whose bytes are the region's at `offset` (no data).
  absl::StatusOr<Tensor> TensorAt(int64_t offset, DType dtype, std::vector<int64_t> shape) const;
  // TensorAt the next free offset (aligned to 64 bytes); RESOURCE_EXHAUSTED when the rest of the
  // region is too small. A bump allocator: Reset() makes the whole region free again.
  absl::StatusOr<Tensor> Allocate(DType dtype, std::vector<int64_t> shape);
  void Reset();
  // Allocate() for `values` (an inline tensor) with its bytes copied in.
  absl::StatusOr<Tensor> Put(const Tensor& values);

  // The bytes of `tensor`, a reference into this region (a call's input or result).
  // INVALID_ARGUMENT when it is inline, names another region, or its range or size is wrong.
  absl::StatusOr<std::span<std::byte>> Bytes(const Tensor& tensor) const;
  // The same as elements of T (float, double, int32_t, int64_t; uint16_t for FLOAT16/BFLOAT16;
  // std::byte, char or unsigned char for any dtype). INVALID_ARGUMENT when T is not the dtype's.
  template <typename T>
  absl::StatusOr<std::span<T>> Span(const Tensor& tensor) const;
  // An inline copy of `tensor` (a reference into this region).
  absl::StatusOr<Tensor> Read(const Tensor& tensor) const;

 private:
  struct State;
  explicit SharedMemoryRegion(std::unique_ptr<State> state);
  template <typename T>
  static constexpr bool Holds(DType dtype);
  absl::Status Full(int64_t bytes, int64_t left) const;
  std::unique_ptr<State> state_;
};

template <typename T>
constexpr bool SharedMemoryRegion::Holds(DType dtype) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, std::byte> || std::is_same_v<U, char> ||
                std::is_same_v<U, unsigned char>) {
    return true;
  } else if constexpr (std::is_same_v<U, float>) {
    return dtype == DType::kFloat32;
  } else if constexpr (std::is_same_v<U, double>) {
    return dtype == DType::kFloat64;
  } else if constexpr (std::is_same_v<U, int32_t>) {
    return dtype == DType::kInt32;
  } else if constexpr (std::is_same_v<U, int64_t>) {
    return dtype == DType::kInt64;
  } else if constexpr (std::is_same_v<U, uint16_t>) {
    return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  } else {
    static_assert(sizeof(U) == 0, "Span<T>: T must be an element type of a posenc dtype");
    return false;
  }
}

template <typename T>
absl::StatusOr<std::span<T>> SharedMemoryRegion::Span(const Tensor& tensor) const {
  if (!Holds<T>(tensor.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("Span: the tensor is ",
                                                   std::string(DTypeName(tensor.dtype)),
                                                   ", not elements of ", sizeof(T), " bytes"));
  }
  absl::StatusOr<std::span<std::byte>> bytes = Bytes(tensor);
  if (!bytes.ok()) return bytes.status();
  if (reinterpret_cast<uintptr_t>(bytes->data()) % alignof(T) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Span: the tensor's offset ",
                                                   tensor.shared_memory->offset,
                                                   " is not aligned to ", alignof(T), " bytes"));
  }
  return std::span<T>(reinterpret_cast<T*>(bytes->data()), bytes->size() / sizeof(T));
}

}  // namespace posenc::client

#endif  // POSENC_CLIENT_SHARED_MEMORY_H_
