// Whole-file reads and writes with POSIX calls (open, fstat, read, write), retried on EINTR.
#include "kernels/common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

// "PATH: WHAT: reason" with the status code the errno value stands for.
absl::Status FileError(const std::string& path, absl::string_view what, int error) {
  const std::string message = absl::StrCat(
      path, ": ", what, ": ", std::error_code(error, std::generic_category()).message());
  switch (error) {
    case ENOENT:
    case ENOTDIR: return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS: return absl::PermissionDeniedError(message);
    default: return absl::InvalidArgumentError(message);
  }
}

// Closes the descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }

  int get() const { return fd_; }
  // Closes now, reporting the error a deferred write may only show here.
  int Close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

// Calls `step(offset)`, a ::read or ::write of the bytes from `offset` on, until `total` bytes are
// done or a step does nothing (end of file), retrying on EINTR. The bytes done.
template <typename Step>
absl::StatusOr<size_t> Transfer(const std::string& path, absl::string_view failed, size_t total,
                                Step step) {
  size_t done = 0;
  while (done < total) {
    const ssize_t n = step(done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileError(path, failed, errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return FileError(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::string contents(static_cast<size_t>(st.st_size), '\0');
  POSENC_ASSIGN_OR_RETURN(
      const size_t done, Transfer(path, "read failed", contents.size(), [&](size_t offset) {
        return ::read(fd.get(), contents.data() + offset, contents.size() - offset);
      }));
  contents.resize(done);  // less when the file shrank while we read it
  return contents;
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view bytes) {
  FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return FileError(path, "cannot open for writing", errno);
  POSENC_ASSIGN_OR_RETURN(const size_t done,
                          Transfer(path, "write failed", bytes.size(), [&](size_t offset) {
                            return ::write(fd.get(), bytes.data() + offset, bytes.size() - offset);
                          }));
  if (done != bytes.size()) {
    return absl::DataLossError(
        absl::StrCat(path, ": wrote ", done, " of ", bytes.size(), " bytes"));
  }
  if (fd.Close() != 0) return FileError(path, "write failed", errno);
  return absl::OkStatus();
}

}  // namespace posenc::kernels
