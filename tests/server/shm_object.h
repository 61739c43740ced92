// A POSIX shared-memory object as a co-located client holds it (shm_open, sized, mapped here),
// for the shared-memory tests of both front ends; unlinked and unmapped when destroyed.
#ifndef POSENC_TESTS_SERVER_SHM_OBJECT_H_
#define POSENC_TESTS_SERVER_SHM_OBJECT_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace posenc::server::testing {

class ShmObject {
 public:
  // `bytes` bytes under a key of this process ("/posenc_test_<pid>_<n>").
  explicit ShmObject(int64_t bytes)
      : key_(absl::StrCat("/posenc_test_", getpid(), "_", Counter()++)), bytes_(bytes) {
    shm_unlink(key_.c_str());
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, bytes_), 0);
    void* base =
        mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(base, MAP_FAILED);
    base_ = static_cast<char*>(base);
  }
  ~ShmObject() {
    munmap(base_, static_cast<size_t>(bytes_));
    close(fd_);
    shm_unlink(key_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& key() const { return key_; }
  int64_t bytes() const { return bytes_; }
  char* at(int64_t offset) const { return base_ + offset; }

 private:
  static std::atomic<int>& Counter() {
    static std::atomic<int> counter{0};
    return counter;
  }

  std::string key_;
  int64_t bytes_;
  int fd_ = -1;
  char* base_ = nullptr;
};

}  // namespace posenc::server::testing

#endif  // POSENC_TESTS_SERVER_SHM_OBJECT_H_
