// v1::ResizeUninitialized (byte_buffer.h). Built as C++23 (CMakeLists.txt) for
// std::string::resize_and_overwrite, the standard way to size a string without initializing it;
// std::string's layout is the same in every mode.
#include "proto/posenc/v1/byte_buffer.h"

namespace posenc::v1 {

void ResizeUninitialized(std::string* s, size_t n) {
  ReserveLarge(s, n);
#if defined(__cpp_lib_string_resize_and_overwrite)
  // Return `n` itself, not the size passed to the callback: libstdc++ 12 passes the grown
  // capacity there when it reallocates (e.g. 30 for n = 24 from an empty string).
  s->resize_and_overwrite(n, [n](char*, size_t) { return n; });
#else
  s->resize(n);
#endif
}

}  // namespace posenc::v1
