// Output buffers for large tensors: response tensors are written in full by the kernels, so
// clearing them first would only cost a pass over memory; and a buffer the kernel must fault in
// page by page costs more than the copy or compute into it (huge pages, v1::ReserveLarge).
#ifndef POSENC_SERVER_BUFFER_H_
#define POSENC_SERVER_BUFFER_H_

#include <cstddef>
#include <string>

namespace posenc::server {

// Resizes `s` to `n` bytes; new bytes are left uninitialized (the caller overwrites all of them).
// A large buffer is advised for transparent huge pages (v1::ReserveLarge).
void ResizeUninitialized(std::string* s, size_t n);

}  // namespace posenc::server

#endif  // POSENC_SERVER_BUFFER_H_
