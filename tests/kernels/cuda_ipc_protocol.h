// What cuda_ipc_exporter and cuda_ipc_test agree on: the bytes the exporter fills its buffer with
// and the hash it checks them by (FNV-1a 64). Plain C++: the exporter links no Abseil.
#ifndef POSENC_TESTS_KERNELS_CUDA_IPC_PROTOCOL_H_
#define POSENC_TESTS_KERNELS_CUDA_IPC_PROTOCOL_H_

#include <cstdint>
#include <vector>

namespace posenc::testing {

inline unsigned char ExporterPattern(uint64_t i) {
  return static_cast<unsigned char>((i * 131 + 7) & 0xff);
}

inline uint64_t Fnv1a(const std::vector<unsigned char>& bytes) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace posenc::testing

#endif  // POSENC_TESTS_KERNELS_CUDA_IPC_PROTOCOL_H_
