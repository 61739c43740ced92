// The inner-loop table of one ISA level (simd_kernels.h), from the loops in the *_simd.cc files.
// Built once per ISA level (POSENC_SIMD_NS).
#include "kernels/cpu/simd_kernels.h"

#ifndef POSENC_SIMD_NS
#error "POSENC_SIMD_NS must name the ISA level"
#endif

namespace posenc::kernels::cpu::POSENC_SIMD_NS {
namespace {

#define POSENC_STR2(x) #x
#define POSENC_STR(x) POSENC_STR2(x)

constexpr SimdKernels kKernels = {
    .name = POSENC_STR(POSENC_SIMD_NS),
    .sincos_f32 = SinCosF32,
    .sincos_f64 = SinCosF64,
    .angle_rows = AngleRows,
    .apply_rope_f32 = ApplyRopeRotateF32,
    .apply_rope_f64 = ApplyRopeRotateF64,
    .apply_rope_f16 = ApplyRopeRotateF16,
    .apply_rope_bf16 = ApplyRopeRotateBf16,
#if defined(__AVX2__)
    .half_rotation_factors = HalfRotationFactors,
#else
    .half_rotation_factors = nullptr,
#endif
    .stream_copy = StreamCopy,
    .stream_fence = StreamFence,
    .f32_to_f16 = F32ToF16,
    .f32_to_bf16 = F32ToBf16,
    .f16_to_f32 = F16ToF32,
    .bf16_to_f32 = Bf16ToF32,
};

}  // namespace

const SimdKernels& Kernels() { return kKernels; }

}  // namespace posenc::kernels::cpu::POSENC_SIMD_NS
