// The reference backend's implementation of each op, one function per op, defined beside the op
// (absolute/reference.cc, rope/reference.cc, bias/reference.cc) and bound into a Backend by
// reference/backend.cc. Every op is written as directly as its formula, in double precision with
// phases formed in extended precision (x87 long double: a 64-bit significand, so p*omega_j
// carries an absolute error below 2^-33 for every p < 2^31, and sinl/cosl reduce exactly).
//
// This is the oracle every faster backend is tested against: clarity over speed.
#ifndef POSENC_KERNELS_REFERENCE_REFERENCE_H_
#define POSENC_KERNELS_REFERENCE_REFERENCE_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/ops.h"

namespace posenc::kernels::reference {

absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                        const TensorView& table);
absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                 const ResolvedPositions& positions, const TensorView& y);
absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                       const ResolvedPositions& positions, const TensorView& cos,
                       const TensorView& sin);
absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                       const ResolvedPositions& positions, const TensorView& q,
                       const TensorView& k);
absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                       const TensorView& bias);
absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias);
absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan, const TensorView& embeddings);

}  // namespace posenc::kernels::reference

#endif  // POSENC_KERNELS_REFERENCE_REFERENCE_H_
