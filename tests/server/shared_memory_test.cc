// server/shared_memory.h: registration, bounds, status, and a region truncated under a call.
#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace posenc::server {
namespace {

// A POSIX shared-memory object of `bytes` bytes, unlinked at the end of the test.
class ShmObject {
 public:
  explicit ShmObject(int64_t bytes)
      : key_(absl::StrCat("/posenc_test_", getpid(), "_", counter_++)) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  void Truncate(int64_t bytes) { ASSERT_EQ(ftruncate(fd_, bytes), 0); }

 private:
  static inline int counter_ = 0;
  std::string key_;
  int fd_ = -1;
};

SharedMemoryOptions Allowed() { return {.allowed = true, .max_regions = 4, .max_bytes = 1 << 20}; }

TEST(SharedMemoryTest, OffByDefault) {
  SharedMemoryRegistry registry({});
  ShmObject object(4096);
  const absl::Status s = registry.Register("r", object.key(), 0, 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--allow_shared_memory"), std::string::npos);
}

TEST(SharedMemoryTest, RegisterResolveStatusUnregister) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(3 * 4096);
  ASSERT_TRUE(registry.Register("r", object.key(), 100, 8000).ok());
  EXPECT_EQ(registry.registered_bytes(), 8000);
  auto status = registry.Status("");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].key, object.key());
  EXPECT_EQ((*status)[0].offset, 100);

  auto span = registry.Resolve("r", 16, 64, "q.shared_memory");
  ASSERT_TRUE(span.ok()) << span.status();
  std::memset(span->data, 7, 64);  // writes land in the object
  {
    const int fd = shm_open(object.key().c_str(), O_RDONLY, 0);
    char byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, 100 + 16), 1);
    EXPECT_EQ(byte, 7);
    close(fd);
  }
  EXPECT_EQ(registry.Status("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Unregister("r").ok());
  EXPECT_EQ(registry.Unregister("r").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.registered_bytes(), 0);
  // The span still holds its region: its mapping outlives the unregistration.
  span->data[0] = 1;
}

TEST(SharedMemoryTest, BadRegistrationsNameTheField) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(4096);
  struct Case {
    std::string name, key;
    int64_t offset, size;
    absl::StatusCode code;
    std::string field;
  };
  const Case cases[] = {
      {"", object.key(), 0, 16, absl::StatusCode::kInvalidArgument, "name"},
      {"r", "no-slash", 0, 16, absl::StatusCode::kInvalidArgument, "key"},
      {"r", "/a/b", 0, 16, absl::StatusCode::kInvalidArgument, "key"},
      {"r", "/posenc_no_such_object", 0, 16, absl::StatusCode::kNotFound, "key"},
      {"r", object.key(), -1, 16, absl::StatusCode::kInvalidArgument, "offset"},
      {"r", object.key(), 0, 0, absl::StatusCode::kInvalidArgument, "byte_size"},
      {"r", object.key(), 4000, 200, absl::StatusCode::kInvalidArgument, "byte_size"},
      {"r", object.key(), 0, int64_t{1} << 40, absl::StatusCode::kInvalidArgument, "byte_size"},
      {"r", object.key(), INT64_MAX, INT64_MAX, absl::StatusCode::kInvalidArgument, "byte_size"},
  };
  for (const Case& c : cases) {
    const absl::Status s = registry.Register(c.name, c.key, c.offset, c.size);
    EXPECT_EQ(s.code(), c.code) << c.name << " " << c.key << " " << c.offset << " " << s;
    EXPECT_EQ(s.message().substr(0, c.field.size() + 1), c.field + ":") << s;
  }
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 16).ok());
  EXPECT_EQ(registry.Register("r", object.key(), 0, 16).code(), absl::StatusCode::kAlreadyExists);
}

// CUDA regions (RegisterCuda): every argument is checked before anything is opened, and a
// server that computes on no device (or another one) refuses them; these rows need no GPU (a
// device opens handles in tests/server/cuda_shared_memory_test.cc).
TEST(SharedMemoryTest, BadCudaRegistrationsNameTheField) {
  SharedMemoryRegistry registry(Allowed());
  const std::string handle(64, '\x11');
  struct Case {
    std::string what, name, handle;
    int64_t device, size;
    int compute_device;
    absl::StatusCode code;
    std::string field;
  };
  const Case cases[] = {
      {"no name", "", handle, 0, 16, 0, absl::StatusCode::kInvalidArgument, "name"},
      {"short handle", "g", handle.substr(0, 63), 0, 16, 0, absl::StatusCode::kInvalidArgument,
       "raw_handle"},
      {"long handle", "g", handle + "x", 0, 16, 0, absl::StatusCode::kInvalidArgument,
       "raw_handle"},
      {"negative device", "g", handle, -1, 16, 0, absl::StatusCode::kInvalidArgument, "device_id"},
      {"device past int", "g", handle, int64_t{1} << 40, 16, 0, absl::StatusCode::kInvalidArgument,
       "device_id"},
      {"no bytes", "g", handle, 0, 0, 0, absl::StatusCode::kInvalidArgument, "byte_size"},
      {"over the bytes bound", "g", handle, 0, int64_t{1} << 40, 0,
       absl::StatusCode::kInvalidArgument, "byte_size"},
      {"host backend", "g", handle, 0, 16, -1, absl::StatusCode::kFailedPrecondition, "raw_handle"},
      {"another device", "g", handle, 1, 16, 0, absl::StatusCode::kFailedPrecondition, "device_id"},
  };
  for (const Case& c : cases) {
    const absl::Status s =
        registry.RegisterCuda(c.name, c.handle, c.device, c.size, c.compute_device);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_EQ(s.message().substr(0, c.field.size() + 1), c.field + ":") << c.what << ": " << s;
  }
  const absl::Status host = registry.RegisterCuda("g", handle, 0, 16, -1);
  EXPECT_NE(host.message().find("--backend=cuda"), std::string::npos) << host;
  // The right device: the handle is opened, which without CUDA in the build or a device is
  // FAILED_PRECONDITION, and on a device (this handle is no export) INVALID_ARGUMENT.
  const absl::Status opened = registry.RegisterCuda("g", handle, 0, 16, 0);
  EXPECT_TRUE(opened.code() == absl::StatusCode::kFailedPrecondition ||
              opened.code() == absl::StatusCode::kInvalidArgument)
      << opened;
  EXPECT_EQ(registry.region_count(), 0);
  SharedMemoryRegistry off({});
  EXPECT_EQ(off.RegisterCuda("g", handle, 0, 16, 0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SharedMemoryTest, KindFiltersOfStatusAndUnregister) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(4096);
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 4096).ok());
  EXPECT_EQ(registry.KindOf("r"), RegionKind::kSystem);
  EXPECT_EQ(registry.KindOf("none"), std::nullopt);
  auto cuda = registry.Status("", RegionKind::kCuda);
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->empty());
  const absl::Status wrong_kind = registry.Status("r", RegionKind::kCuda).status();
  EXPECT_EQ(wrong_kind.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(wrong_kind.message().find("no CUDA region named"), std::string::npos) << wrong_kind;
  auto system = registry.Status("r", RegionKind::kSystem);
  ASSERT_TRUE(system.ok());
  ASSERT_EQ(system->size(), 1u);
  EXPECT_EQ((*system)[0].kind, RegionKind::kSystem);
  EXPECT_EQ((*system)[0].device, -1);
  EXPECT_EQ(registry.Unregister("r", RegionKind::kCuda).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Unregister("", RegionKind::kCuda).ok());  // no CUDA region: nothing goes
  EXPECT_EQ(registry.region_count(), 1);
  EXPECT_TRUE(registry.Unregister("", RegionKind::kSystem).ok());
  EXPECT_EQ(registry.region_count(), 0);
  EXPECT_EQ(registry.registered_bytes(), 0);
}

TEST(SharedMemoryTest, BoundsOnRegionsAndBytes) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(1 << 20);
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 1 << 19).ok());
  EXPECT_EQ(registry.Register("b", object.key(), 0, (1 << 19) + 1).code(),
            absl::StatusCode::kResourceExhausted);
  for (const char* name : {"b", "c", "d"}) {
    ASSERT_TRUE(registry.Register(name, object.key(), 0, 16).ok());
  }
  const absl::Status fifth = registry.Register("e", object.key(), 0, 16);
  EXPECT_EQ(fifth.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(fifth.message().find("--max_shared_memory_regions"), std::string::npos);
  EXPECT_TRUE(registry.Unregister("").ok());
  EXPECT_EQ(registry.region_count(), 0);
}

TEST(SharedMemoryTest, ReferencesOutsideTheRegionAreRefused) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(4096);
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 1000).ok());
  EXPECT_EQ(registry.Resolve("x", 0, 4, "q.shared_memory").status().code(),
            absl::StatusCode::kNotFound);
  for (auto [offset, size] : {std::pair<int64_t, int64_t>{-1, 4},
                              {0, 1001},
                              {999, 2},
                              {1001, 0},
                              {INT64_MAX, INT64_MAX},
                              {8, -8}}) {
    const auto span = registry.Resolve("r", offset, size, "q.shared_memory");
    EXPECT_EQ(span.status().code(), absl::StatusCode::kInvalidArgument) << offset << "+" << size;
    EXPECT_EQ(span.status().message().substr(0, 16), "q.shared_memory:");
  }
  EXPECT_TRUE(registry.Resolve("r", 1000, 0, "q.shared_memory").ok());
}

// The owner shrinks the object while a call writes into it: no SIGBUS reaches the process, the
// call learns its region broke, and the region refuses every later use.
TEST(SharedMemoryTest, TruncatedUnderACallBreaksTheRegionNotTheProcess) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(4 * 4096);
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 4 * 4096).ok());
  auto span = registry.Resolve("r", 0, 4 * 4096, "k.shared_memory");
  ASSERT_TRUE(span.ok());
  EXPECT_TRUE(CheckIntact(*span, "k.shared_memory").ok());
  object.Truncate(4096);
  // Past the new end: without the guard this is SIGBUS.
  volatile char* p = span->data;
  for (int i = 0; i < 4 * 4096; i += 512) p[i] = static_cast<char>(i);
  EXPECT_EQ(p[3 * 4096], 0);  // a private zero page took the vanished page's place
  const absl::Status intact = CheckIntact(*span, "k.shared_memory");
  EXPECT_EQ(intact.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(intact.message().find("k.shared_memory.region"), std::string::npos);
  EXPECT_EQ(registry.Resolve("r", 0, 16, "q.shared_memory").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*registry.Status("r"))[0].broken);
  EXPECT_TRUE(registry.Unregister("r").ok());
}

TEST(SharedMemoryTest, ShrunkBeforeACallIsRefusedAtResolve) {
  SharedMemoryRegistry registry(Allowed());
  ShmObject object(2 * 4096);
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 2 * 4096).ok());
  object.Truncate(100);
  const auto span = registry.Resolve("r", 0, 16, "x.shared_memory");
  EXPECT_EQ(span.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(span.status().message().find("now 100 bytes"), std::string::npos);
}

}  // namespace
}  // namespace posenc::server
