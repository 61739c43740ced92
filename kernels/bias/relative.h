// Relative-position biases and embeddings: T5's bucketed bias and Shaw et al.'s clipped
// relative embeddings.
//
// T5 (rp = key_pos - query_pos, qpos = query_offset + i, kpos = key_offset + j):
//   bidirectional: nb = num_buckets/2, bucket += nb if rp > 0, rp = |rp|;
//   unidirectional: nb = num_buckets, rp = max(-rp, 0).
//   e = nb/2; bucket += rp if rp < e else min(e + floor(ln(rp/e)/ln(max_distance/e)*(nb-e)), nb-1)
//   bias[h,i,j] = table[bucket(i,j), h]. FULL [H,q,k]; COMPACT [H, q+k-1] (Toeplitz generators);
//   BUCKETS [q,k] INT32 bucket ids (no table needed).
// Shaw: out[i,j,:] = table[clip(kpos - qpos, -K, K) + K, :], out [q, k, D].
//
// Use: Plan* -> allocate the planned output -> Run*. Implementations: bias/reference.cc,
// bias/cpu.cc.
#ifndef POSENC_KERNELS_BIAS_RELATIVE_H_
#define POSENC_KERNELS_BIAS_RELATIVE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/bias/alibi.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

class Backend;

int64_t T5Bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                 int64_t max_distance);

struct RelativeBiasParams {
  int64_t q_len = 0, k_len = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  int64_t key_offset = 0;
  bool bidirectional = true;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  BiasForm form = BiasForm::kFull;
  ConstTensorView table;  // [num_buckets, H]; optional for kBuckets
};

struct RelativeBiasArgs {
  RelativeBiasParams params;
  // FULL/COMPACT: a float dtype (default FLOAT32). BUCKETS: INT32 (the default and the only one).
  std::optional<DType> output_dtype;
};

struct RelativeBiasPlan {
  RelativeBiasParams params;
  int64_t query_offset = 0;  // resolved
  int64_t heads = 0;         // table columns (0 for BUCKETS)
  OutputSpec bias;

  // The bucket of query row i and key column j.
  int64_t Bucket(int64_t i, int64_t j) const {
    return T5Bucket((params.key_offset + j) - (query_offset + i), params.bidirectional,
                    params.num_buckets, params.max_distance);
  }
};

absl::StatusOr<RelativeBiasPlan> PlanRelativeBias(RelativeBiasArgs args);
absl::Status RunRelativeBias(const Backend& backend, const RelativeBiasPlan& plan,
                             const TensorView& bias);

struct RelativeEmbeddingParams {
  int64_t q_len = 0, k_len = 0, max_relative = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  int64_t key_offset = 0;
  ConstTensorView table;  // [2K+1, D]
};

using RelativeEmbeddingArgs = ParamsArgs<RelativeEmbeddingParams>;

struct RelativeEmbeddingPlan {
  RelativeEmbeddingParams params;
  int64_t query_offset = 0;  // resolved
  int64_t dim = 0;           // D
  OutputSpec embeddings;     // [q, k, D]

  // The table row of query row i and key column j.
  int64_t Row(int64_t i, int64_t j) const;
};

absl::StatusOr<RelativeEmbeddingPlan> PlanRelativeEmbedding(RelativeEmbeddingArgs args);
absl::Status RunRelativeEmbedding(const Backend& backend, const RelativeEmbeddingPlan& plan,
                                  const TensorView& embeddings);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_BIAS_RELATIVE_H_
