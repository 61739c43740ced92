#include "posenc/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_join.h"
#include "kernels/common/status.h"

namespace posenc::client {
namespace {

constexpr int64_t kAlignment = 64;

std::string Errno(int error) { return std::strerror(error); }

// A fresh object name: the pid, a counter and a random part (a stale object of an earlier process
// with the same pid does not collide).
std::string FreshKey() {
  static std::atomic<uint64_t> counter{0};
  static const uint32_t salt = std::random_device{}();
  return absl::StrCat("/posenc_", getpid(), "_", counter.fetch_add(1), "_", absl::Hex(salt));
}

// prod(shape) * DTypeSize(dtype), or INVALID_ARGUMENT for a negative or overflowing shape.
absl::StatusOr<int64_t> TensorBytes(DType dtype, const std::vector<int64_t>& shape) {
  int64_t bytes = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && bytes > std::numeric_limits<int64_t>::max() / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape: expected dimensions >= 0 of at most 2^63 bytes, got [",
                       absl::StrJoin(shape, ", "), "]"));
    }
    bytes *= d;
  }
  return bytes;
}

}  // namespace

struct SharedMemoryRegion::State {
  const Client* client = nullptr;
  CallOptions call;
  std::string name;
  std::string key;
  int fd = -1;
  std::byte* base = nullptr;
  int64_t size = 0;
  bool registered = false;
  std::atomic<int64_t> next{0};  // Allocate's cursor

  ~State() { Release(); }

  // Unmaps, closes and unlinks what is held.
  void Release() {
    if (base != nullptr) munmap(base, static_cast<size_t>(size));
    if (fd >= 0) close(fd);
    if (!key.empty() && fd >= 0) shm_unlink(key.c_str());
    base = nullptr;
    fd = -1;
    size = 0;
  }

  // The object created (O_EXCL), sized and mapped.
  absl::Status Map(int64_t byte_size, const Options& options) {
    fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC,
                  static_cast<mode_t>(options.mode));
    if (fd < 0) {
      const int error = errno;
      if (error == EEXIST) {
        return absl::AlreadyExistsError(
            absl::StrCat("key: a shared-memory object \"", key, "\" exists already"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("key: cannot create \"", key, "\": ", Errno(error)));
    }
    // fchmod: the mode given to shm_open is masked by the umask.
    if (fchmod(fd, static_cast<mode_t>(options.mode)) != 0 || ftruncate(fd, byte_size) != 0) {
      const int error = errno;
      shm_unlink(key.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat("byte_size: cannot size \"", key, "\" to ", byte_size, ": ", Errno(error)));
    }
    const int flags = MAP_SHARED | (options.populate ? MAP_POPULATE : 0);
    void* mapped =
        mmap(nullptr, static_cast<size_t>(byte_size), PROT_READ | PROT_WRITE, flags, fd, 0);
    if (mapped == MAP_FAILED) {
      const int error = errno;
      shm_unlink(key.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat("byte_size: cannot map ", byte_size, " bytes: ", Errno(error)));
    }
    base = static_cast<std::byte*>(mapped);
    size = byte_size;
    return absl::OkStatus();
  }

  absl::Status CheckRange(int64_t offset, int64_t bytes) const {
    if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
      return absl::InvalidArgumentError(absl::StrCat("bytes [", offset, ", ", offset, " + ", bytes,
                                                     ") are outside region \"", name, "\" of ",
                                                     size, " bytes"));
    }
    return absl::OkStatus();
  }
};

SharedMemoryRegion::SharedMemoryRegion(std::unique_ptr<State> state) : state_(std::move(state)) {}
SharedMemoryRegion::SharedMemoryRegion(SharedMemoryRegion&& other) noexcept = default;
SharedMemoryRegion& SharedMemoryRegion::operator=(SharedMemoryRegion&& other) noexcept {
  if (this != &other) {
    (void)Close();
    state_ = std::move(other.state_);
  }
  return *this;
}
SharedMemoryRegion::~SharedMemoryRegion() { (void)Close(); }

absl::StatusOr<SharedMemoryRegion> SharedMemoryRegion::Create(const Client& client,
                                                              int64_t byte_size,
                                                              const Options& options) {
  if (byte_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size: expected a positive size, got ", byte_size));
  }
  auto state = std::make_unique<State>();
  state->client = &client;
  state->call = options.call;
  state->key = options.key.empty() ? FreshKey() : options.key;
  if (state->key.size() < 2 || state->key[0] != '/' ||
      state->key.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: expected a POSIX shared-memory name (\"/name\", no other '/'), got \"",
                     options.key, "\""));
  }
  state->name = options.name.empty() ? state->key.substr(1) : options.name;
  POSENC_RETURN_IF_ERROR(state->Map(byte_size, options));
  POSENC_RETURN_IF_ERROR(
      client.RegisterSharedMemory({state->name, state->key, 0, byte_size}, state->call));
  state->registered = true;
  return SharedMemoryRegion(std::move(state));
}

absl::Status SharedMemoryRegion::Close() {
  if (state_ == nullptr) return absl::OkStatus();
  absl::Status status;
  if (state_->registered) {
    status = state_->client->UnregisterSharedMemory(state_->name, state_->call);
    state_->registered = false;
  }
  state_->Release();
  return status;
}

const std::string& SharedMemoryRegion::name() const {
  static const std::string* const kNone = new std::string();
  return state_ != nullptr ? state_->name : *kNone;
}

const std::string& SharedMemoryRegion::key() const {
  static const std::string* const kNone = new std::string();
  return state_ != nullptr ? state_->key : *kNone;
}

int64_t SharedMemoryRegion::byte_size() const { return state_ != nullptr ? state_->size : 0; }

std::span<std::byte> SharedMemoryRegion::bytes() const {
  if (state_ == nullptr || state_->base == nullptr) return {};
  return {state_->base, static_cast<size_t>(state_->size)};
}

absl::StatusOr<SharedMemoryRef> SharedMemoryRegion::Ref(int64_t offset, int64_t byte_size) const {
  if (state_ == nullptr || state_->base == nullptr) {
    return absl::FailedPreconditionError("shared-memory region: closed");
  }
  POSENC_RETURN_IF_ERROR(state_->CheckRange(offset, byte_size));
  return SharedMemoryRef{state_->name, offset, byte_size};
}

absl::StatusOr<Tensor> SharedMemoryRegion::TensorAt(int64_t offset, DType dtype,
                                                    std::vector<int64_t> shape) const {
  POSENC_ASSIGN_OR_RETURN(const int64_t bytes, TensorBytes(dtype, shape));
  Tensor tensor{.dtype = dtype, .shape = std::move(shape)};
  POSENC_ASSIGN_OR_RETURN(tensor.shared_memory, Ref(offset, bytes));
  return tensor;
}

absl::StatusOr<Tensor> SharedMemoryRegion::Allocate(DType dtype, std::vector<int64_t> shape) {
  if (state_ == nullptr || state_->base == nullptr) {
    return absl::FailedPreconditionError("shared-memory region: closed");
  }
  POSENC_ASSIGN_OR_RETURN(const int64_t bytes, TensorBytes(dtype, shape));
  if (bytes > state_->size) {  // (and the padding below cannot overflow)
    return Full(bytes, state_->size - state_->next.load(std::memory_order_relaxed));
  }
  const int64_t padded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  int64_t offset = state_->next.load(std::memory_order_relaxed);
  do {
    if (padded > state_->size - offset) return Full(bytes, state_->size - offset);
  } while (!state_->next.compare_exchange_weak(offset, offset + padded, std::memory_order_relaxed));
  return TensorAt(offset, dtype, std::move(shape));
}

absl::Status SharedMemoryRegion::Full(int64_t bytes, int64_t left) const {
  return absl::ResourceExhaustedError(absl::StrCat("Allocate: ", bytes, " bytes do not fit the ",
                                                   std::max<int64_t>(left, 0),
                                                   " bytes left of region \"", state_->name, "\" (",
                                                   state_->size, " bytes; Reset() frees it all)"));
}

void SharedMemoryRegion::Reset() {
  if (state_ != nullptr) state_->next.store(0, std::memory_order_relaxed);
}

absl::StatusOr<Tensor> SharedMemoryRegion::Put(const Tensor& values) {
  if (values.is_reference()) {
    return absl::InvalidArgumentError("Put: the tensor is in shared memory already");
  }
  POSENC_RETURN_IF_ERROR(values.Validate());
  POSENC_ASSIGN_OR_RETURN(Tensor tensor, Allocate(values.dtype, values.shape));
  POSENC_ASSIGN_OR_RETURN(std::span<std::byte> bytes, Bytes(tensor));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data.data(), bytes.size());
  return tensor;
}

absl::StatusOr<std::span<std::byte>> SharedMemoryRegion::Bytes(const Tensor& tensor) const {
  if (state_ == nullptr || state_->base == nullptr) {
    return absl::FailedPreconditionError("shared-memory region: closed");
  }
  if (!tensor.is_reference()) {
    return absl::InvalidArgumentError("tensor: not in shared memory (its bytes are inline)");
  }
  const SharedMemoryRef& ref = *tensor.shared_memory;
  if (ref.region != state_->name) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor: in region \"", ref.region, "\", not in \"", state_->name, "\""));
  }
  POSENC_RETURN_IF_ERROR(tensor.Validate());
  POSENC_RETURN_IF_ERROR(state_->CheckRange(ref.offset, ref.byte_size));
  return std::span<std::byte>(state_->base + ref.offset, static_cast<size_t>(ref.byte_size));
}

absl::StatusOr<Tensor> SharedMemoryRegion::Read(const Tensor& tensor) const {
  POSENC_ASSIGN_OR_RETURN(const std::span<std::byte> bytes, Bytes(tensor));
  Tensor out{.dtype = tensor.dtype, .shape = tensor.shape};
  out.data.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return out;
}

}  // namespace posenc::client
