// The inner loops of the optimized CPU backend, compiled once per instruction-set level.
//
// Every *_simd.cc file (cpu/sincos_simd.cc, cpu/convert_simd.cc, cpu/stream_simd.cc,
// rope/apply_rope_simd.cc, and cpu/table_simd.cc, which assembles the table) is built three times
// with different target flags (baseline, AVX2+FMA+F16C, AVX-512) into namespaces
// posenc::kernels::cpu::{scalar,avx2,avx512}; the CPU backend picks the best table the running
// processor supports (select.cc). Processors other than x86-64 build the portable level only.
// Most loops are plain C++ written for GCC's vectorizer; intrinsics where it does not find the
// code: ApplyRope's rows on the vector levels, fp16 conversions (F16C), streaming stores.
//
// Sin/cos with an exact phase: theta = p*omega is formed as a double-double
// (hi = p*omega_hi, lo = fma(p, omega_hi, -hi) + p*omega_lo), reduced modulo pi/2 by a three-part
// Cody-Waite reduction (exact for |theta| < 2^33), and evaluated by fdlibm's minimax
// polynomials in double. The result is within a few double ulps of the truth for every position
// below 2^31, whatever the output dtype.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_CPU_SIMD_KERNELS_H_
#define POSENC_KERNELS_CPU_SIMD_KERNELS_H_

#include <cstdint>

namespace posenc::kernels::cpu {

// Largest |p * omega| the vector reduction handles exactly; beyond it callers use libm.
inline constexpr double kMaxVectorPhase = 8589934592.0;  // 2^33

// The rows one ApplyRope call rotates in place: row r at x + r*row_stride (elements), its pairs
// read in GPT-J order (2j, 2j+1) when gptj_in, else in NEOX order (j, j+half), and written in
// gptj_out order (the orders differ for DEEPSEEK only: then every row's 2*half rotary channels are
// first copied to `scratch`, which holds rows * 2*half elements). Row r takes pair j's angles from
// table entry r*table_stride + j (table_stride 0: every row the same angles, e.g. the heads of one
// token). Each row r may stand for a group of `group` rows sharing its angles, row r's g-th at
// x + r*row_stride + g*group_stride (BHSD: a few heads of one token, whose angles are then loaded
// once for all of them). Channels past 2*half are untouched. With `prefetch` (tensors too large
// to be in the caches) each row asks for the memory a few KiB past it before it is rotated.
struct RopeRows {
  void* x = nullptr;
  int64_t rows = 0, row_stride = 0, half = 0, table_stride = 0;
  int64_t group = 1, group_stride = 0;
  bool gptj_in = false, gptj_out = false;
  bool prefetch = false;
  void* scratch = nullptr;
};

// The angles of FLOAT16/BFLOAT16 rotations (rope/rope_math.h): for each table entry the exact
// cos/sin c, s (times m and the sign) and their float factors cf, t_hi, t_lo
// (FloatRotationFactors; read by the AVX2/AVX-512 levels only).
struct HalfRopeFactors {
  const double* c = nullptr;
  const double* s = nullptr;
  const float* cf = nullptr;
  const float* t_hi = nullptr;
  const float* t_lo = nullptr;
};

// Where SimdKernels::angle_rows writes frequency j of row r: with C = c + r*row_stride and
// S = s + r*row_stride,
//   kSplit:       C[j] = cos, S[j] = sin, and also C[j + dup], S[j + dup] when dup > 0
//                 (RopeCache COMPACT; NEOX with dup = half; Sinusoidal CONCAT with c = s + half);
//   kPairs:       C[2j] = C[2j+1] = cos, S[2j] = S[2j+1] = sin (RopeCache GPT-J);
//   kInterleaved: S[2j] = sin, S[2j+1] = cos (Sinusoidal INTERLEAVED; c unused).
enum class RowForm { kSplit, kPairs, kInterleaved };
struct TableRows {
  RowForm form = RowForm::kSplit;
  float* c = nullptr;
  float* s = nullptr;
  int64_t row_stride = 0, dup = 0;
  // The rows may be written with non-temporal stores (a large table, not read again soon; the
  // AVX2 level does where whole 64-byte lines line up, the others ignore it): the caller then
  // calls stream_fence before the rows are read (cpu.h's FenceStreams).
  bool stream = false;
};

struct SimdKernels {
  const char* name;  // "avx512", "avx2", "scalar"

  // c[j] = cos(p[j or 0] * w[j]) * scale, s[j] = sin(...) * sign * scale for j < n, where
  // w = w_hi + w_lo (double-double). `p_stride` is 0 (one position) or 1 (M-RoPE: one per j).
  void (*sincos_f32)(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo,
                     int64_t n, double scale, double sign, float* c, float* s);
  void (*sincos_f64)(const double* p, int64_t p_stride, const double* w_hi, const double* w_lo,
                     int64_t n, double scale, double sign, double* c, double* s);

  // The rows of a table walk (cpu.h's AngleWalker::Rows), n frequencies in double: for each row
  // r < rows, cos c[j] * c_scale and sin s[j] * s_scale rounded to float into row r of `out`,
  // then (c, s) advanced by one step of angle addition, c' = c*cw - s*sw, s' = s*cw + c*sw
  // (rope_math.h's RopeAngleStep; cw, sw: cos and sin of the step). On return c, s hold the
  // angles one step past the last row.
  void (*angle_rows)(double* c, double* s, const double* cw, const double* sw, int64_t n,
                     int64_t rows, double c_scale, double s_scale, const TableRows& out);

  // ApplyRope (RopeRows): FLOAT32 in float, FLOAT64 in double, each with tables c and s.
  // fp16/bf16 with HalfRopeFactors: a rotation can cancel (x_a*c - x_b*s far smaller than its
  // terms); the vector levels rotate in float with the arithmetic of rope_math.h's RotateHalfPair
  // (the CUDA kernel's bits), the scalar level in double; both within 1 output ulp of the exact
  // value.
  void (*apply_rope_f32)(const RopeRows& rows, const float* c, const float* s);
  void (*apply_rope_f64)(const RopeRows& rows, const double* c, const double* s);
  void (*apply_rope_f16)(const RopeRows& rows, const HalfRopeFactors& f);
  void (*apply_rope_bf16)(const RopeRows& rows, const HalfRopeFactors& f);
  // The float factors of n pairs (HalfRopeFactors); null on the scalar level, which needs none.
  void (*half_rotation_factors)(const double* c, const double* s, int64_t n, float* cf, float* t_hi,
                                float* t_lo);

  // memcpy of n bytes with non-temporal stores where the level has them (large write-only
  // outputs: no read of the destination's lines first). Not fenced: a fence per row costs more than
  // the stores save; the thread that copied calls stream_fence once its rows are done
  // (cpu.h's FenceStreams).
  void (*stream_copy)(void* dst, const void* src, int64_t n);
  // Orders the calling thread's streaming stores before its later stores (SFENCE).
  void (*stream_fence)();

  // Conversions of n values (round to nearest even; NaN stays NaN).
  void (*f32_to_f16)(const float* in, uint16_t* out, int64_t n);
  void (*f32_to_bf16)(const float* in, uint16_t* out, int64_t n);
  void (*f16_to_f32)(const uint16_t* in, float* out, int64_t n);
  void (*bf16_to_f32)(const uint16_t* in, float* out, int64_t n);
};

namespace scalar {
#include "kernels/cpu/simd_functions.inc"
}  // namespace scalar
namespace avx2 {
#include "kernels/cpu/simd_functions.inc"
}  // namespace avx2
namespace avx512 {
#include "kernels/cpu/simd_functions.inc"
}  // namespace avx512

// Whether the processor has AVX512_BF16 (VCVTNEPS2BF16), which the AVX-512 level's BFLOAT16 rows
// use where present.
bool HasAvx512Bf16();

// The best table this processor supports, or the one named ("avx512", "avx2", "scalar"); null
// if the named level is unknown or not supported here.
const SimdKernels* SelectKernels(const char* name = nullptr);

}  // namespace posenc::kernels::cpu

#endif  // POSENC_KERNELS_CPU_SIMD_KERNELS_H_
