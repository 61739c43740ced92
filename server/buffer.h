// Output buffers without a zero-fill: response tensors are written in full by the kernels, so
// clearing them first would only cost a pass over memory.
#ifndef POSENC_SERVER_BUFFER_H_
#define POSENC_SERVER_BUFFER_H_

#include <cstddef>
#include <string>

namespace posenc::server {

// Resizes `s` to `n` bytes; new bytes are left uninitialized (the caller overwrites all of them).
void ResizeUninitialized(std::string* s, size_t n);

}  // namespace posenc::server

#endif  // POSENC_SERVER_BUFFER_H_
