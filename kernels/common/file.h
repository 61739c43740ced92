// Whole-file reads and writes: the one place that turns a path into bytes and back, for every
// file format of the tree (.npy, .safetensors, PEM, JSON).
//
// Errors start with the path and say what failed, with the system's reason:
//   "/tables/wpe.npy: cannot open: No such file or directory"   NOT_FOUND
//   "/tables/sub.npy: not a regular file"                        INVALID_ARGUMENT
//   "/out/q.npy: cannot open for writing: Permission denied"     PERMISSION_DENIED
// (NOT_FOUND when the file or a directory on its path is missing, PERMISSION_DENIED when access
// is refused, INVALID_ARGUMENT for anything else).
//
// Thread-safety: thread-safe (concurrent calls on distinct files; the file system decides what
// concurrent calls on one file see).
#ifndef POSENC_KERNELS_COMMON_FILE_H_
#define POSENC_KERNELS_COMMON_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace posenc::kernels {

// The whole contents of the regular file at `path`. Reads what is there: a file that shrinks
// while it is read gives the shorter contents.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Creates or truncates the file at `path` (mode 0644 before the umask) and writes `bytes`.
absl::Status WriteStringToFile(const std::string& path, absl::string_view bytes);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_FILE_H_
