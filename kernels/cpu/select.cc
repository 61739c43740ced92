// Picks the inner-loop table of the CPU backend for the running processor.
#include <cstring>

#include "kernels/cpu/simd_kernels.h"

namespace posenc::kernels::cpu {

const SimdKernels* SelectKernels(const char* name) {
#if defined(POSENC_HAVE_X86_SIMD)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (name == nullptr) {
    if (avx512) return &avx512::Kernels();
    if (avx2) return &avx2::Kernels();
    return &scalar::Kernels();
  }
  if (std::strcmp(name, "avx512") == 0) return avx512 ? &avx512::Kernels() : nullptr;
  if (std::strcmp(name, "avx2") == 0) return avx2 ? &avx2::Kernels() : nullptr;
#endif
  // Other processors (and x86 builds without the vector levels): the portable loops only.
  if (name == nullptr || std::strcmp(name, "scalar") == 0) return &scalar::Kernels();
  return nullptr;
}

}  // namespace posenc::kernels::cpu
