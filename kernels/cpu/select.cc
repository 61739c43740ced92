// Picks the inner-loop table of the CPU backend for the running processor.
#include <cstring>

#if defined(POSENC_HAVE_X86_SIMD)
#include <cpuid.h>
#endif

#include "kernels/cpu/simd_kernels.h"

namespace posenc::kernels::cpu {

#if defined(POSENC_HAVE_X86_SIMD)
namespace {

// F16C is CPUID leaf 1, ECX bit 29; read directly because clang before 16 has no "f16c" for
// __builtin_cpu_supports (the fuzz build uses clang 14).
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace
#endif

bool HasAvx512Bf16() {
#if defined(POSENC_HAVE_X86_SIMD)
  // CPUID leaf 7, sub-leaf 1, EAX bit 5 (and AVX-512 itself, whose state the OS saves).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

const SimdKernels* SelectKernels(const char* name) {
#if defined(POSENC_HAVE_X86_SIMD)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
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
