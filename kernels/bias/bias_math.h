// The per-element math of the CUDA bias kernels (kernels/bias/cuda.cu) as host-device functions
// (kernels/common/host_device.h), tested on the CPU against the reference backend in every build
// (tests/kernels/cuda_math_test.cc). Formulas: bias/alibi.h and bias/relative.h.
//
// T5's bucket of a distance needs a log whose last bit could differ between the host's libm and
// the device; a different bit could move a floor() across an integer. So the bucket of each of
// the q+k-1 distances is computed on the host by T5Bucket (the reference's own function) and
// the kernels only gather and expand.
#ifndef POSENC_KERNELS_BIAS_BIAS_MATH_H_
#define POSENC_KERNELS_BIAS_BIAS_MATH_H_

#include <cstdint>

#include "kernels/common/host_device.h"

namespace posenc::kernels::hd {

// ALiBi CAUSAL (mode 0) / SYMMETRIC (mode 1) generator entry t of a head of slope m:
// the bias of key - query index difference rel = t - (q_len - 1), query position offset qoff.
// future: 0 MASK (-inf), 1 ZERO, 2 LINEAR (CAUSAL only; SYMMETRIC has no future rule).
POSENC_HOST_DEVICE double AlibiToeplitzValue(double m, int64_t qoff, int64_t q_len, int64_t t,
                                             int mode, int future) {
  const int64_t rel = t - (q_len - 1);
  const int64_t diff = qoff - rel;  // qpos - kpos
  if (diff < 0 && mode == 0) {
    if (future == 0) return BitCast<double>(uint64_t{0xfff0000000000000ull});  // -inf
    if (future == 1) return 0.0;
  }
  const double d = static_cast<double>(diff);
  return mode == 0 ? -m * d : -m * (d < 0 ? -d : d);
}

// BLOOM: the number of leading keys of query row i that keep m*kpos; the others get the future
// fill (-inf or 0). LINEAR keeps all.
POSENC_HOST_DEVICE int64_t BloomKeep(int64_t qoff, int64_t i, int64_t k_len, int future) {
  if (future == 2) return k_len;
  const int64_t keep = qoff + i + 1;
  return keep < 0 ? 0 : (keep > k_len ? k_len : keep);
}

// Toeplitz expansion (kernels/common/toeplitz.h): out[h, i, j] = gen[h, j - i + q_len - 1].
POSENC_HOST_DEVICE int64_t ToeplitzSource(int64_t q_len, int64_t gen_len, int64_t h, int64_t i,
                                          int64_t j) {
  return h * gen_len + (j - i + q_len - 1);
}

// Shaw: the table row of (i, j): clip(kpos - qpos, -K, K) + K.
POSENC_HOST_DEVICE int64_t RelativeEmbeddingRow(int64_t qoff, int64_t koff, int64_t max_relative,
                                                int64_t i, int64_t j) {
  int64_t d = (koff + j) - (qoff + i);
  d = d < -max_relative ? -max_relative : (d > max_relative ? max_relative : d);
  return d + max_relative;
}

}  // namespace posenc::kernels::hd

#endif  // POSENC_KERNELS_BIAS_BIAS_MATH_H_
