// Shared memory for co-located callers, with the semantics of Triton's system shared-memory
// extension: a caller creates a POSIX shared-memory object (shm_open), registers a byte range of
// it under a name (RegisterSharedMemory: name, key, offset, byte_size), and then passes tensors
// as references {region, offset, byte_size} into that range instead of bytes; outputs are written
// straight into the caller's range and ApplyRope rotates in place there.
//
// Safety (the registry is reached by any caller that can reach the server, so every use is
// checked):
// - Opt-in: without --allow_shared_memory every registration is FAILED_PRECONDITION.
// - Bounds: the range is checked against the object's size at registration, and every reference
//   against the range (offset + byte_size, overflow-safe) and the object's current size at every
//   use; the registry is bounded in regions and bytes (RESOURCE_EXHAUSTED naming the flag).
// - Truncation: an object the caller shrinks while a call reads or writes it would make those
//   pages raise SIGBUS. A process-wide SIGBUS handler recognizes faults inside registered
//   mappings, maps a private zero page over the faulting page (the access then completes on that
//   page) and marks the region broken; the call then fails with FAILED_PRECONDITION naming the
//   tensor, and the region refuses every later use until it is unregistered. Faults anywhere else
//   go to the previous handler (a real bug still crashes). Unlinking the object is harmless: the
//   mapping keeps it alive until unregistered.
// - Lifetime: a call holds its regions (shared ownership) until it ends, so unregistering during
//   a call unmaps after the call; everything is unmapped on unregister and at exit.
// - Mappings are populated at registration (MAP_POPULATE): a call on a registered region does
//   not page-fault its way through the caller's memory.
//
// CUDA regions (Triton's CUDA shared-memory semantics; ARCHITECTURE.md "GPU callers"): device
// memory another process exported (cudaIpcGetMemHandle), opened with kernels/cuda/ipc.h and
// registered in the same registry, under the same bounds and names; only on a server whose
// backend computes on that device. Their spans are device addresses (SharedMemorySpan::on_device):
// only the cuda backend reads them. The exporter keeps the allocation alive while registered (as
// in Triton, CUDA has no guard like the SIGBUS one); the handle is closed after the last call
// using the region.
//
// Thread-safety: thread-safe.
#ifndef POSENC_SERVER_SHARED_MEMORY_H_
#define POSENC_SERVER_SHARED_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/ipc.h"

namespace posenc::server {

struct SharedMemoryOptions {
  bool allowed = false;                   // --allow_shared_memory
  int64_t max_regions = 64;               // --max_shared_memory_regions
  int64_t max_bytes = int64_t{64} << 30;  // --max_shared_memory_bytes: the sum of byte_size
};

enum class RegionKind { kSystem, kCuda };

// What a registration says, as SharedMemoryStatus reports it.
struct SharedMemoryRegionInfo {
  std::string name;
  std::string key;  // system regions: the shm_open name; "" for CUDA regions
  int64_t offset = 0;
  int64_t byte_size = 0;
  bool broken = false;  // truncated while in use: unregister it
  RegionKind kind = RegionKind::kSystem;
  int device = -1;  // CUDA regions: the device
};

// One registered mapping. Shared by the registry and the calls using it.
class SharedMemoryRegion {
 public:
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const SharedMemoryRegionInfo& info() const { return info_; }
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // The registered range's first byte: a device address for a CUDA region.
  char* data() const {
    return cuda_ != nullptr ? static_cast<char*>(cuda_->data())
                            : base_ + (info_.offset - map_offset_);
  }
  bool on_device() const { return cuda_ != nullptr; }

 private:
  friend class SharedMemoryRegistry;
  friend void MarkBrokenFromSignal(SharedMemoryRegion* region);
  SharedMemoryRegion() = default;

  SharedMemoryRegionInfo info_;
  int fd_ = -1;
  char* base_ = nullptr;    // the mapping (page-aligned)
  int64_t map_offset_ = 0;  // the file offset the mapping starts at (info_.offset rounded down)
  size_t map_bytes_ = 0;
  int guard_slot_ = -1;
  std::atomic<bool> broken_{false};
  std::unique_ptr<kernels::CudaIpcRegion> cuda_;  // a CUDA region: the opened handle
};

// A tensor's bytes in a region, held for the call: the region stays mapped while this lives.
struct SharedMemorySpan {
  std::shared_ptr<SharedMemoryRegion> region;
  char* data = nullptr;
  int64_t byte_size = 0;
  bool on_device() const { return region != nullptr && region->on_device(); }
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(SharedMemoryOptions options);
  ~SharedMemoryRegistry();  // unmaps every region (calls still holding one keep it until done)
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  // Opens POSIX shared-memory object `key` ("/name", as shm_open takes it), checks that
  // [offset, offset + byte_size) lies inside it, maps that range read-write and registers it as
  // `name`. FAILED_PRECONDITION when not allowed; ALREADY_EXISTS for a taken name; NOT_FOUND for
  // a missing object; INVALID_ARGUMENT for a bad name/key/range; RESOURCE_EXHAUSTED over the
  // bounds. Errors name the field (name, key, offset, byte_size).
  absl::Status Register(const std::string& name, const std::string& key, int64_t offset,
                        int64_t byte_size);
  // Opens CUDA IPC handle `raw_handle` on `device_id` ([0, byte_size) of the exporter's
  // allocation) and registers it as `name`. `compute_device` is the device the server's backend
  // computes on (-1: not a device backend). Errors as Register's, and: INVALID_ARGUMENT naming
  // raw_handle / device_id / byte_size for malformed arguments or a handle CUDA refuses;
  // FAILED_PRECONDITION when the server computes on no device or on another one.
  absl::Status RegisterCuda(const std::string& name, absl::string_view raw_handle,
                            int64_t device_id, int64_t byte_size, int compute_device);
  // Unregisters `name` ("" = every region), of `kind` only when given. NOT_FOUND for an unknown
  // name (or one of another kind).
  absl::Status Unregister(const std::string& name, std::optional<RegionKind> kind = std::nullopt);
  // `name`'s registration ("" = all, sorted by name), of `kind` only when given. NOT_FOUND for
  // an unknown name (or one of another kind).
  absl::StatusOr<std::vector<SharedMemoryRegionInfo>> Status(
      const std::string& name, std::optional<RegionKind> kind = std::nullopt) const;
  // The kind of region `name`, or nullopt when none is registered under it.
  std::optional<RegionKind> KindOf(const std::string& name) const;

  // [offset, offset + byte_size) of region `name` for a tensor of the call. `field` is the wire
  // path of the reference ("q.shared_memory"). NOT_FOUND for an unknown region;
  // INVALID_ARGUMENT for a range outside it; FAILED_PRECONDITION for a region that is broken or
  // whose object has shrunk below the range.
  absl::StatusOr<SharedMemorySpan> Resolve(const std::string& name, int64_t offset,
                                           int64_t byte_size, absl::string_view field) const;

  int64_t registered_bytes() const;
  int64_t region_count() const;
  const SharedMemoryOptions& options() const { return options_; }

 private:
  // Register's checks: shared memory allowed, the name, byte_size, and the registry's bounds
  // (before anything is opened).
  absl::Status CheckRegistration(const std::string& name, int64_t byte_size) const;
  // Adds an opened region under its name, checking the name and the bounds again (another
  // registration may have raced this one while it was opened).
  absl::Status Insert(std::shared_ptr<SharedMemoryRegion> region);
  // The object `key` opened and [offset, offset + byte_size) of it mapped and guarded.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> MapRegion(const std::string& name,
                                                                       const std::string& key,
                                                                       int64_t offset,
                                                                       int64_t byte_size);

  SharedMemoryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<SharedMemoryRegion>> regions_;
  int64_t bytes_ = 0;
};

// After a call's compute: FAILED_PRECONDITION naming `field` when `span`'s region broke (was
// truncated) during the call, whose result is then garbage; OK otherwise.
absl::Status CheckIntact(const SharedMemorySpan& span, absl::string_view field);

// Installs the process-wide SIGBUS guard (idempotent; the registry does it at construction).
void InstallSharedMemoryGuard();

}  // namespace posenc::server

#endif  // POSENC_SERVER_SHARED_MEMORY_H_
