#include "server/shared_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"

namespace posenc::server {
namespace {

// ----- the SIGBUS guard -------------------------------------------------------------------------
// The handler reads these slots only through atomics (no locks, no allocation: it runs in signal
// context). A slot is taken at registration and cleared before its mapping is unmapped.

constexpr int kGuardSlots = 1024;  // >= the largest --max_shared_memory_regions

struct GuardSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<SharedMemoryRegion*> region{nullptr};
};

std::array<GuardSlot, kGuardSlots>& Slots() {
  static auto* slots = new std::array<GuardSlot, kGuardSlots>();
  return *slots;
}

std::mutex& SlotsMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

struct sigaction g_previous_sigbus;
std::atomic<bool> g_guard_installed{false};
long g_page_size = 4096;

}  // namespace

// Friend of SharedMemoryRegion: async-signal-safe (one atomic store).
void MarkBrokenFromSignal(SharedMemoryRegion* region) {
  region->broken_.store(true, std::memory_order_release);
}

namespace {

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& slot : Slots()) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= slot.end.load(std::memory_order_acquire)) continue;
    SharedMemoryRegion* region = slot.region.load(std::memory_order_acquire);
    // The page holding the address, by pointer arithmetic (no integer-to-pointer cast).
    char* const page =
        static_cast<char*>(info->si_addr) - (addr & static_cast<uintptr_t>(g_page_size - 1));
    // The caller shrank the object under the mapping: a private zero page takes the place of the
    // vanished one, so the faulting access completes; the call sees the region broken after its
    // compute and fails.
    void* replaced = mmap(page, static_cast<size_t>(g_page_size), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (replaced != MAP_FAILED && region != nullptr) {
      MarkBrokenFromSignal(region);
      return;
    }
    break;
  }
  // Not a registered region: whatever handled SIGBUS before handles it (by default the process
  // dies with a core, as it would have without the guard).
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN &&
      g_previous_sigbus.sa_handler != nullptr) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // the faulting instruction runs again and takes the default action
}

int TakeGuardSlot(SharedMemoryRegion* region, const char* begin, size_t bytes) {
  std::lock_guard<std::mutex> lock(SlotsMutex());
  for (int i = 0; i < kGuardSlots; ++i) {
    GuardSlot& slot = Slots()[static_cast<size_t>(i)];
    if (slot.begin.load(std::memory_order_relaxed) != 0) continue;
    slot.region.store(region, std::memory_order_release);
    slot.end.store(reinterpret_cast<uintptr_t>(begin) + bytes, std::memory_order_release);
    slot.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
    return i;
  }
  return -1;
}

void ReleaseGuardSlot(int index) {
  if (index < 0) return;
  std::lock_guard<std::mutex> lock(SlotsMutex());
  GuardSlot& slot = Slots()[static_cast<size_t>(index)];
  slot.begin.store(0, std::memory_order_release);
  slot.end.store(0, std::memory_order_release);
  slot.region.store(nullptr, std::memory_order_release);
}

// ----- checks -------------------------------------------------------------------------------

constexpr size_t kMaxNameChars = 256;

absl::Status CheckName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameChars) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: expected 1 .. ", kMaxNameChars, " characters, got ", name.size()));
  }
  for (char c : name) {
    if (std::isprint(static_cast<unsigned char>(c)) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("name: expected printable ASCII, got \"", kernels::Abbreviate(name), "\""));
    }
  }
  return absl::OkStatus();
}

// POSIX shm names: "/" then 1 .. NAME_MAX characters without another "/".
absl::Status CheckKey(const std::string& key) {
  const bool ok = key.size() >= 2 && key.size() <= 255 && key[0] == '/' &&
                  key.find('/', 1) == std::string::npos && key.find('\0') == std::string::npos;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("key: expected a POSIX shared-memory name (\"/name\", no other '/', at most "
                   "255 characters), got \"",
                   kernels::Abbreviate(key), "\""));
}

std::string Errno(int error) { return std::strerror(error); }

}  // namespace

void InstallSharedMemoryGuard() {
  if (g_guard_installed.exchange(true)) return;
  g_page_size = sysconf(_SC_PAGESIZE);
  struct sigaction action {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous_sigbus);
}

SharedMemoryRegion::~SharedMemoryRegion() {
  ReleaseGuardSlot(guard_slot_);
  if (base_ != nullptr) munmap(base_, map_bytes_);
  if (fd_ >= 0) close(fd_);
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryOptions options) : options_(options) {
  if (options_.allowed) InstallSharedMemoryGuard();
}

SharedMemoryRegistry::~SharedMemoryRegistry() = default;

absl::Status SharedMemoryRegistry::CheckRegistration(const std::string& name,
                                                     int64_t byte_size) const {
  if (!options_.allowed) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start it with --allow_shared_memory)");
  }
  POSENC_RETURN_IF_ERROR(CheckName(name));
  if (byte_size <= 0 || byte_size > options_.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size: expected 1 .. --max_shared_memory_bytes=", options_.max_bytes,
                     ", got ", byte_size));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("name: a region named \"", name, "\" is registered already"));
  }
  if (static_cast<int64_t>(regions_.size()) >= options_.max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "name: ", regions_.size(), " regions are registered, --max_shared_memory_regions=",
        options_.max_regions, "; unregister one first"));
  }
  if (bytes_ + byte_size > options_.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("byte_size: ", byte_size, " bytes more than the ", bytes_,
                     " registered would exceed --max_shared_memory_bytes=", options_.max_bytes));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Insert(std::shared_ptr<SharedMemoryRegion> region) {
  const std::string& name = region->info().name;
  const int64_t byte_size = region->info().byte_size;
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("name: a region named \"", name, "\" is registered already"));
  }
  if (static_cast<int64_t>(regions_.size()) >= options_.max_regions ||
      bytes_ + byte_size > options_.max_bytes) {
    return absl::ResourceExhaustedError(
        "name: the shared-memory bounds were reached while this region was opened; retry");
  }
  bytes_ += byte_size;
  regions_.emplace(name, std::move(region));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::MapRegion(
    const std::string& name, const std::string& key, int64_t offset, int64_t byte_size) {
  auto region = std::shared_ptr<SharedMemoryRegion>(new SharedMemoryRegion());
  region->info_ = {name, key, offset, byte_size, false, RegionKind::kSystem, -1};
  region->fd_ = shm_open(key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (region->fd_ < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("key: no shared-memory object \"", kernels::Abbreviate(key), "\""));
    }
    return absl::InvalidArgumentError(absl::StrCat("key: cannot open \"", kernels::Abbreviate(key),
                                                   "\" read-write: ", Errno(error)));
  }
  struct stat st {};
  if (fstat(region->fd_, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("key: cannot stat: ", Errno(errno)));
  }
  if (offset > st.st_size || byte_size > st.st_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size: [", offset, ", ", offset, " + ",
                                                   byte_size, ") is outside \"", key, "\" of ",
                                                   st.st_size, " bytes"));
  }
  region->map_offset_ = offset - offset % g_page_size;
  region->map_bytes_ = static_cast<size_t>(offset - region->map_offset_ + byte_size);
  void* base = mmap(nullptr, region->map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                    region->fd_, region->map_offset_);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("byte_size: cannot map ", byte_size,
                                                     " bytes of \"", key, "\": ", Errno(errno)));
  }
  region->base_ = static_cast<char*>(base);
  region->guard_slot_ = TakeGuardSlot(region.get(), region->base_, region->map_bytes_);
  if (region->guard_slot_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("name: every one of the ", kGuardSlots,
                                                     " shared-memory guard slots is in use"));
  }
  return region;
}

absl::Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                            int64_t offset, int64_t byte_size) {
  POSENC_RETURN_IF_ERROR(CheckRegistration(name, byte_size));
  POSENC_RETURN_IF_ERROR(CheckKey(key));
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset: expected >= 0, got ", offset));
  }
  POSENC_ASSIGN_OR_RETURN(std::shared_ptr<SharedMemoryRegion> region,
                          MapRegion(name, key, offset, byte_size));
  return Insert(std::move(region));
}

absl::Status SharedMemoryRegistry::RegisterCuda(const std::string& name,
                                                absl::string_view raw_handle, int64_t device_id,
                                                int64_t byte_size, int compute_device) {
  POSENC_RETURN_IF_ERROR(CheckRegistration(name, byte_size));
  if (device_id < 0 || device_id > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_id: expected a CUDA device index >= 0, got ", device_id));
  }
  const int device = static_cast<int>(device_id);
  POSENC_RETURN_IF_ERROR(kernels::CheckCudaIpcArgs(raw_handle, device, 0, byte_size));
  if (compute_device < 0) {
    return absl::FailedPreconditionError(
        "raw_handle: CUDA shared memory needs a server that computes on a CUDA device (start it "
        "with --backend=cuda); this one computes on the host");
  }
  if (device != compute_device) {
    return absl::FailedPreconditionError(
        absl::StrCat("device_id: this server computes on CUDA device ", compute_device, ", got ",
                     device, " (start a server on that device: --cuda_device=", device, ")"));
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<kernels::CudaIpcRegion> opened,
                          kernels::OpenCudaIpcRegion(raw_handle, device, 0, byte_size));
  auto region = std::shared_ptr<SharedMemoryRegion>(new SharedMemoryRegion());
  region->info_ = {name, "", 0, byte_size, false, RegionKind::kCuda, device};
  region->cuda_ = std::move(opened);
  return Insert(std::move(region));
}

namespace {

std::string KindWord(std::optional<RegionKind> kind) {
  if (!kind) return "";
  return *kind == RegionKind::kCuda ? "CUDA " : "system ";
}

}  // namespace

absl::Status SharedMemoryRegistry::Unregister(const std::string& name,
                                              std::optional<RegionKind> kind) {
  std::vector<std::shared_ptr<SharedMemoryRegion>> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (name.empty()) {
      for (auto it = regions_.begin(); it != regions_.end();) {
        if (kind && it->second->info().kind != *kind) {
          ++it;
          continue;
        }
        bytes_ -= it->second->info().byte_size;
        released.push_back(std::move(it->second));
        it = regions_.erase(it);
      }
    } else {
      auto it = regions_.find(name);
      if (it == regions_.end() || (kind && it->second->info().kind != *kind)) {
        return absl::NotFoundError(absl::StrCat("name: no ", KindWord(kind), "region named \"",
                                                kernels::Abbreviate(name), "\""));
      }
      bytes_ -= it->second->info().byte_size;
      released.push_back(std::move(it->second));
      regions_.erase(it);
    }
  }
  return absl::OkStatus();  // `released` unmaps (closes) here, or when the last call using it ends
}

absl::StatusOr<std::vector<SharedMemoryRegionInfo>> SharedMemoryRegistry::Status(
    const std::string& name, std::optional<RegionKind> kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SharedMemoryRegionInfo> out;
  for (const auto& [region_name, region] : regions_) {
    if (!name.empty() && region_name != name) continue;
    if (kind && region->info().kind != *kind) continue;
    out.push_back(region->info());
    out.back().broken = region->broken();
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(absl::StrCat("name: no ", KindWord(kind), "region named \"",
                                            kernels::Abbreviate(name), "\""));
  }
  return out;
}

std::optional<RegionKind> SharedMemoryRegistry::KindOf(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) return std::nullopt;
  return it->second->info().kind;
}

absl::StatusOr<SharedMemorySpan> SharedMemoryRegistry::Resolve(const std::string& name,
                                                               int64_t offset, int64_t byte_size,
                                                               absl::string_view field) const {
  std::shared_ptr<SharedMemoryRegion> region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(name);
    if (it != regions_.end()) region = it->second;
  }
  if (region == nullptr) {
    return absl::NotFoundError(absl::StrCat(field, ".region: no shared-memory region named \"",
                                            kernels::Abbreviate(name), "\" is registered"));
  }
  const SharedMemoryRegionInfo& info = region->info();
  if (offset < 0 || byte_size < 0 || offset > info.byte_size ||
      byte_size > info.byte_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": bytes [", offset, ", ", offset, " + ",
                                                   byte_size, ") are outside region \"", info.name,
                                                   "\" of ", info.byte_size, " bytes"));
  }
  if (region->broken()) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ".region: region \"", info.name,
        "\" was truncated by its owner while in use; unregister and register it again"));
  }
  if (region->on_device()) return SharedMemorySpan{region, region->data() + offset, byte_size};
  struct stat st {};
  if (fstat(region->fd_, &st) != 0 || st.st_size < info.offset + info.byte_size) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ".region: the object \"", info.key, "\" of region \"", info.name,
                     "\" is now ", static_cast<int64_t>(st.st_size), " bytes, the region ends at ",
                     info.offset + info.byte_size, "; unregister it"));
  }
  return SharedMemorySpan{region, region->data() + offset, byte_size};
}

int64_t SharedMemoryRegistry::registered_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t SharedMemoryRegistry::region_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(regions_.size());
}

absl::Status CheckIntact(const SharedMemorySpan& span, absl::string_view field) {
  if (span.region == nullptr || !span.region->broken()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(field, ".region: region \"", span.region->info().name,
                   "\" was truncated by its owner during the call; the result is lost"));
}

}  // namespace posenc::server
