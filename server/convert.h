// Conversions between the wire types (posenc.v1) and the kernels' views and parameter structs.
//
// Wire-level validation lives here: known enum numbers, dtypes allowed for a field, positive
// shape dimensions, exact byte lengths, finite doubles. Op-level validation (ranks, shapes of
// one tensor against another, parameter ranges) is the kernels' Plan*/Validate* functions'.
// Every error is INVALID_ARGUMENT naming the wire field ("q", "config.scaling.factor", ...) with
// the expected and the received value.
//
// Views returned here borrow the request's (or response's) bytes: the message must outlive them.
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_CONVERT_H_
#define POSENC_SERVER_CONVERT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/ops.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::server {

// Which element types a tensor field accepts.
enum class DTypeClass {
  kFloat,  // FLOAT32, FLOAT16, BFLOAT16, FLOAT64
  kInt,    // INT32, INT64
  kAny,    // any known dtype (the op's plan decides)
};

// --- dtypes ---------------------------------------------------------------------------------

// An input tensor's dtype: UNSPECIFIED, unknown numbers and dtypes outside `allowed` are
// INVALID_ARGUMENT naming `field` (e.g. "q.dtype").
absl::StatusOr<kernels::DType> FromProtoDType(int dtype, DTypeClass allowed,
                                              absl::string_view field);
// An output_dtype field: UNSPECIFIED is FLOAT32; only float dtypes.
absl::StatusOr<kernels::DType> OutputDType(int dtype, absl::string_view field);
v1::DType ToProtoDType(kernels::DType dtype);

// --- tensors --------------------------------------------------------------------------------

// A view onto `tensor`'s bytes after checking its dtype, that every dimension is >= 1, that
// prod(shape) does not overflow and that len(data) == prod(shape) * sizeof(dtype) exactly.
// Errors name `field`, e.g. "q: data has 100 bytes, expected 128 (FLOAT32 [2, 4, 4])".
absl::StatusOr<kernels::ConstTensorView> ToConstView(const v1::Tensor& tensor, DTypeClass allowed,
                                                     absl::string_view field);

// Sets `out`'s dtype and shape, sizes its data to the exact byte count and returns a view onto
// it. The caller has checked the element count and bytes against its limits first.
// The bytes are not zero-filled (server/buffer.h): the backend overwrites every one of them.
kernels::TensorView AllocateOutput(const kernels::OutputSpec& spec, v1::Tensor* out);

// --- scalars and enums ----------------------------------------------------------------------

// NaN or +-inf is INVALID_ARGUMENT naming `field`.
absl::Status CheckFinite(double value, absl::string_view field);

absl::StatusOr<kernels::SinusoidalLayout> ToSinusoidalLayout(int value, absl::string_view field);
absl::StatusOr<kernels::FreqScheme> ToFreqScheme(int value, absl::string_view field);
absl::StatusOr<kernels::Combine> ToCombine(int value, absl::string_view field);
absl::StatusOr<kernels::RopeStyle> ToRopeStyle(int value, absl::string_view field);
absl::StatusOr<kernels::RopeScalingType> ToRopeScalingType(int value, absl::string_view field);
absl::StatusOr<kernels::MropeLayout> ToMropeLayout(int value, absl::string_view field);
absl::StatusOr<kernels::RopeCacheLayout> ToRopeCacheLayout(int value, absl::string_view field);
absl::StatusOr<kernels::TensorLayout> ToTensorLayout(int value, absl::string_view field);
absl::StatusOr<kernels::AlibiMode> ToAlibiMode(int value, absl::string_view field);
absl::StatusOr<kernels::FutureMode> ToFutureMode(int value, absl::string_view field);
absl::StatusOr<kernels::BiasForm> ToBiasForm(int value, absl::string_view field);

v1::RopeStyle ToProtoRopeStyle(kernels::RopeStyle style);
v1::RopeScalingType ToProtoRopeScalingType(kernels::RopeScalingType type);

// --- messages -------------------------------------------------------------------------------

// `positions` may be null (the field is absent): Kind::kDefault. `field` is the wire name of
// the Positions message ("positions"). A range is checked to lie in [0, 2^31) here, so that no
// later step sizes anything by an impossible count.
// Fills `spec` (pass a default-constructed one; it is an output parameter because moving a
// PositionSpec out of a StatusOr trips GCC 12's -Wmaybe-uninitialized on absl::InlinedVector at
// -O3).
absl::Status ToPositionSpec(const v1::Positions* positions, absl::string_view field,
                            kernels::PositionSpec* spec);

// `field` is the wire prefix ("params", "sinusoidal").
absl::StatusOr<kernels::SinusoidalParams> ToSinusoidalParams(const v1::SinusoidalParams& params,
                                                             absl::string_view field);

// The request's RopeConfig (field prefix "config."), explicit or from hf_config_json (see
// hf_config.h; the explicit fields it replaces must then be unset). Checks enums and finite
// doubles; the op's Plan*/ComputeRopeFrequencies validate the rest.
absl::StatusOr<kernels::RopeConfig> ToRopeConfig(const v1::RopeConfig& config);

// Reports what a RoPE call used.
void FillRopeDerived(const kernels::RopeConfig& config, const kernels::RopeFrequencies& freqs,
                     v1::RopeDerived* derived);

}  // namespace posenc::server

#endif  // POSENC_SERVER_CONVERT_H_
