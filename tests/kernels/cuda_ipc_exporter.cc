// The other process of the CUDA IPC tests (cuda_ipc_test): CUDA refuses to open a process's own
// IPC handles, so this program exports a device buffer as a Triton client would.
//
//   cuda_ipc_exporter BYTES [DEVICE]
//
// It allocates BYTES of device memory (cudaMalloc), fills byte i with ExporterPattern(i), prints
// "handle <128 hex digits> <BYTES>" and then answers one command per line on stdin:
//   hash <16 hex digits>  -> "match" when the FNV-1a 64 hash of its buffer (copied down) is that,
//                            else "mismatch <its hash>": the importer's writes landed here
//   fill                  -> refills the pattern, "filled"
//   quit (or end of input) -> frees the buffer and exits 0
// Errors go to stderr with exit status 1. No fork, no threads: a plain CUDA client.
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/kernels/cuda_ipc_protocol.h"

namespace {

using ::posenc::testing::ExporterPattern;
using ::posenc::testing::Fnv1a;

int Fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "cuda_ipc_exporter: %s: %s (%s)\n", what, cudaGetErrorName(e),
               cudaGetErrorString(e));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: cuda_ipc_exporter BYTES [DEVICE]\n");
    return 2;
  }
  const uint64_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int device = argc == 3 ? std::atoi(argv[2]) : 0;
  if (bytes == 0) {
    std::fprintf(stderr, "cuda_ipc_exporter: BYTES must be > 0\n");
    return 2;
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return Fail("cudaSetDevice", e);
  void* buffer = nullptr;
  if (cudaError_t e = cudaMalloc(&buffer, bytes); e != cudaSuccess) return Fail("cudaMalloc", e);
  std::vector<unsigned char> host(bytes);
  auto fill = [&]() {
    for (uint64_t i = 0; i < bytes; ++i) host[i] = ExporterPattern(i);
    return cudaMemcpy(buffer, host.data(), bytes, cudaMemcpyHostToDevice);
  };
  if (cudaError_t e = fill(); e != cudaSuccess) return Fail("fill", e);
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, buffer); e != cudaSuccess) {
    return Fail("cudaIpcGetMemHandle", e);
  }
  std::string hex;
  const auto* raw = reinterpret_cast<const unsigned char*>(&handle);
  for (size_t i = 0; i < sizeof(handle); ++i) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", raw[i]);
    hex += two;
  }
  std::printf("handle %s %" PRIu64 "\n", hex.c_str(), bytes);
  std::fflush(stdout);
  char line[256];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    if (std::strncmp(line, "hash ", 5) == 0) {
      const uint64_t want = std::strtoull(line + 5, nullptr, 16);
      if (cudaError_t e = cudaMemcpy(host.data(), buffer, bytes, cudaMemcpyDeviceToHost);
          e != cudaSuccess) {
        return Fail("read back", e);
      }
      const uint64_t have = Fnv1a(host);
      if (have == want) {
        std::printf("match\n");
      } else {
        std::printf("mismatch %016" PRIx64 "\n", have);
      }
    } else if (std::strncmp(line, "fill", 4) == 0) {
      if (cudaError_t e = fill(); e != cudaSuccess) return Fail("fill", e);
      std::printf("filled\n");
    } else if (std::strncmp(line, "quit", 4) == 0) {
      break;
    } else {
      std::printf("unknown command\n");
    }
    std::fflush(stdout);
  }
  cudaFree(buffer);
  return 0;
}
