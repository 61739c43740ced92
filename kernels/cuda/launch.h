// The CUDA kernels' launch functions: plain structs of device pointers and integers, no Abseil,
// no CUDA headers (vLLM's split): defined in the ops' *.cu files (nvcc), called by the backend's
// host launchers (the families' cuda.cc, g++). Every pointer here is a device pointer. `stream`
// is a cudaStream_t; each function returns the cudaError_t of its launch (0 = cudaSuccess).
//
// dtype codes are kernels::DType's values: 0 FLOAT32, 1 FLOAT16, 2 BFLOAT16, 3 FLOAT64, 4 INT32.
#ifndef POSENC_KERNELS_CUDA_LAUNCH_H_
#define POSENC_KERNELS_CUDA_LAUNCH_H_

#include <cstdint>

namespace posenc::kernels::cuda {

// RoPE angles: omega_j = w_hi[j] + w_lo[j] (double-double); positions[c * tokens + t] of token t
// and component c (int32: positions are < 2^31), -1 for a padding token; component[j] the
// M-RoPE component of frequency j, or null (every frequency uses component 0). ApplyRope may
// take starts instead of positions (positions null): token t of sequence b (t / seq of the
// launch) at starts[b] + t % seq, the same on every component.
struct RopeAngles {
  const double* w_hi = nullptr;
  const double* w_lo = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* starts = nullptr;
  const int8_t* component = nullptr;
  int64_t tokens = 0, half = 0;
  double scale = 1, sign = 1;  // m and +1; 1/m and -1 inverse
};

// The largest half (rotary_dim / 2) ApplyRope's DEEPSEEK style handles on the device (the whole
// rotary part of a head is staged in shared memory); also its cos/sin chunk. LaunchApplyRope
// also needs (q_heads + k_heads) * 2 * kRopeChunk < 2^31 (32-bit indexing within a token).
inline constexpr int64_t kRopeChunk = 512;

struct ApplyRopeLaunch {
  RopeAngles angles;
  void* q = nullptr;
  void* k = nullptr;  // null: q only
  int dtype = 0;
  int style = 0;  // 0 NEOX, 1 GPTJ, 2 DEEPSEEK
  bool inverse = false;
  int64_t seq = 1;
  int64_t q_heads = 0, k_heads = 0;
  int64_t q_batch = 0, q_seq = 0, q_head = 0;  // element strides
  int64_t k_batch = 0, k_seq = 0, k_head = 0;
  int vector = 1;  // elements per 16-byte access (1: scalar); the host checks the alignment
};
int LaunchApplyRope(const ApplyRopeLaunch& a, void* stream);

struct RopeCacheLaunch {
  RopeAngles angles;
  void* cos = nullptr;
  void* sin = nullptr;
  int dtype = 0;
  int layout = 0;  // 0 COMPACT, 1 NEOX, 2 GPTJ
  int64_t width = 0;
};
int LaunchRopeCache(const RopeCacheLaunch& a, void* stream);

struct SinusoidalLaunch {
  const double* w_hi = nullptr;
  const double* w_lo = nullptr;
  const int32_t* positions = nullptr;  // [tokens], -1 padding (a zero row)
  void* out = nullptr;
  int dtype = 0;
  int layout = 0;  // 0 INTERLEAVED, 1 CONCAT
  int64_t tokens = 0, dim = 0, nfreq = 0;
};
int LaunchSinusoidal(const SinusoidalLaunch& a, void* stream);

// AddPositionEncoding: y[t, c] = x[t, c] * scale + PE[t, c] (ADD, out_dim == dim) or
// y[t] = [x[t] * scale ; PE[t]] (CONCAT). PE: sinusoidal (w_hi/w_lo, nfreq, layout, at position
// + shift) or rows position + table_offset of a learned table (table_dtype); zero for padding.
struct AddPositionEncodingLaunch {
  const void* x = nullptr;
  void* y = nullptr;
  int dtype = 0;                       // of x and y
  const int32_t* positions = nullptr;  // [tokens], -1 padding
  int64_t tokens = 0, dim = 0, pe_dim = 0, out_dim = 0;
  double scale = 1;
  bool concat = false;
  // sinusoidal when w_hi is set
  const double* w_hi = nullptr;
  const double* w_lo = nullptr;
  int64_t nfreq = 0, shift = 0;
  int layout = 0;
  // learned otherwise
  const void* table = nullptr;
  int table_dtype = 0;
  int64_t table_offset = 0;
};
int LaunchAddPositionEncoding(const AddPositionEncodingLaunch& a, void* stream);

// out[h, i, j] = gen[h, j - i + q_len - 1] for elements of `esize` bytes (2, 4 or 8).
struct ToeplitzLaunch {
  const void* gen = nullptr;
  void* out = nullptr;
  int64_t heads = 0, q_len = 0, k_len = 0;
  int esize = 4;
};
int LaunchToeplitzExpand(const ToeplitzLaunch& a, void* stream);

// ALiBi, both kernels. LaunchAlibiGenerators (CAUSAL/SYMMETRIC): generator rows out[h, t],
// t < q_len + k_len - 1, in dtype (kpos, compact and batch unused). LaunchAlibiBloom: kpos[b, j]
// key positions; compact: out[b, h, j] = m_h * kpos; full: out[b, h, i, j] with the future rule
// (mode unused).
struct AlibiLaunch {
  const double* slopes = nullptr;
  const double* kpos = nullptr;
  void* out = nullptr;
  int dtype = 0;
  int mode = 0, future = 0;
  bool compact = false;
  int64_t batch = 1, heads = 0, q_len = 0, k_len = 0, query_offset = 0;
};
int LaunchAlibiGenerators(const AlibiLaunch& a, void* stream);
int LaunchAlibiBloom(const AlibiLaunch& a, void* stream);

// T5 generators out[h, t] = table[buckets[t] * heads + h] (table as double) in dtype.
struct T5GeneratorLaunch {
  const int32_t* buckets = nullptr;
  const double* table = nullptr;
  void* out = nullptr;
  int dtype = 0;
  int64_t heads = 0, gen_len = 0;
};
int LaunchT5Generators(const T5GeneratorLaunch& a, void* stream);

// Shaw: out[i, j, :] = table[clip(kpos - qpos, -K, K) + K, :] (table as double) in dtype.
struct RelativeEmbeddingLaunch {
  const double* table = nullptr;
  void* out = nullptr;
  int dtype = 0;
  int64_t q_len = 0, k_len = 0, dim = 0, query_offset = 0, key_offset = 0, max_relative = 0;
};
int LaunchRelativeEmbedding(const RelativeEmbeddingLaunch& a, void* stream);

}  // namespace posenc::kernels::cuda

#endif  // POSENC_KERNELS_CUDA_LAUNCH_H_
