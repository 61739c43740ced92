// AddPositionEncoding: y = x*scale + PE (ADD) or [x*scale ; PE] (CONCAT), x [B,T,D] or [T,D].
//
// PE is sinusoidal (sinusoidal.h; optionally fairseq-shifted to position p + padding_idx + 1) or
// rows of a learned table E[max_pos, D_pe] (position p reads row p + table_offset; past the end:
// OUT_OF_RANGE). Padding tokens (attention_mask 0) get a zero PE row.
//
// Use: PlanAddPositionEncoding -> allocate plan.y -> RunAddPositionEncoding.
// Implementations: absolute/reference.cc, absolute/cpu.cc.
#ifndef POSENC_KERNELS_ABSOLUTE_ADD_POSITION_ENCODING_H_
#define POSENC_KERNELS_ABSOLUTE_ADD_POSITION_ENCODING_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

class Backend;

enum class Combine { kAdd, kConcat };

struct AddPositionEncodingParams {
  Combine combine = Combine::kAdd;
  double scale = 1.0;
  std::optional<SinusoidalParams> sinusoidal;  // set: sinusoidal source (dim 0 means D)
  ConstTensorView learned;                     // else: [max_pos, D_pe], float dtype
  int64_t table_offset = 0;
  std::optional<int64_t> padding_idx;  // sinusoidal only
};

struct AddPositionEncodingArgs {
  AddPositionEncodingParams params;
  ConstTensorView x;       // [B,T,D] or [T,D], float dtype
  PositionSpec positions;  // [batch, seq] kinds: default, range, offsets, ids, attention_mask
};

struct AddPositionEncodingPlan {
  AddPositionEncodingParams params;  // sinusoidal->dim filled in
  ConstTensorView x;
  PositionPlan positions;
  int64_t dim = 0;                       // D, x's width
  int64_t pe_dim = 0;                    // the encoding's width (D for ADD)
  int64_t out_dim = 0;                   // y's width: D (ADD) or D + pe_dim (CONCAT)
  int64_t shift = 0;                     // padding_idx + 1 for fairseq's sinusoids, else 0
  std::vector<long double> frequencies;  // sinusoidal: SinusoidalFrequencies, else empty
  OutputSpec y;                          // x's shape (last dim out_dim), x's dtype
};

absl::StatusOr<AddPositionEncodingPlan> PlanAddPositionEncoding(AddPositionEncodingArgs args);
// y: plan.y's dtype and shape; may alias plan.x for ADD. OUT_OF_RANGE (nothing written) when a
// position reads past a learned table.
absl::Status RunAddPositionEncoding(const Backend& backend, const AddPositionEncodingPlan& plan,
                                    const TensorView& y);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ABSOLUTE_ADD_POSITION_ENCODING_H_
