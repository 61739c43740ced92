// RoPE configurations the tests share.
#ifndef POSENC_TESTS_COMMON_ROPE_CONFIGS_H_
#define POSENC_TESTS_COMMON_ROPE_CONFIGS_H_

#include <cstdint>

#include "kernels/rope/config.h"

namespace posenc::testing {

// Llama 3 style RoPE: `head_dim` (default 128), base 500000, llama3 scaling by `factor` with
// low/high frequency factors and original_max_position_embeddings 8192.
inline kernels::RopeConfig Llama3Rope(double factor, double low_freq_factor,
                                      double high_freq_factor, int64_t head_dim = 128) {
  kernels::RopeConfig c;
  c.head_dim = head_dim;
  c.base = 500000;
  c.scaling.type = kernels::RopeScalingType::kLlama3;
  c.scaling.factor = factor;
  c.scaling.low_freq_factor = low_freq_factor;
  c.scaling.high_freq_factor = high_freq_factor;
  c.scaling.original_max_position_embeddings = 8192;
  return c;
}

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_ROPE_CONFIGS_H_
