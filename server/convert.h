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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "kernels/analysis/analysis.h"
#include "kernels/common/positions.h"
#include "kernels/common/types.h"
#include "kernels/hf/config.h"
#include "kernels/ops.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/vocabulary.h"
#include "server/call_tensors.h"

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

// No request tensor has more dimensions (ApplyRope's BSHD has 4; M-RoPE ids 3).
inline constexpr int kMaxTensorRank = 8;

// A view onto `tensor`'s bytes after checking its dtype, that every dimension is >= 1, that
// prod(shape) does not overflow and that len(data) == prod(shape) * sizeof(dtype) exactly.
// Errors name `field`, e.g. "q: data has 100 bytes, expected 128 (FLOAT32 [2, 4, 4])". A tensor
// with `shared_memory` set views that range of the call's shared memory instead
// (server/call_tensors.h), which must hold exactly its bytes; a range in a CUDA region (a view
// with on_device set) only where `reach` is Reach::kDevice. With `wire`, the tensor's data was
// left in gRPC's received slices (ScopedWireTensors): its size is checked, and the view's data
// is the first piece only, for planning (the op reads the pieces).
absl::StatusOr<kernels::ConstTensorView> ToConstView(const v1::Tensor& tensor, DTypeClass allowed,
                                                     absl::string_view field,
                                                     Reach reach = Reach::kHost,
                                                     const v1::WireBytes* wire = nullptr);

// Sets `out`'s dtype and shape, sizes its data to the exact byte count and returns a view onto
// it. The caller has checked the element count and bytes against its limits first.
// The bytes are not zero-filled (v1::ResizeUninitialized): the backend overwrites every one of
// them. An output named in the request's output_shared_memory (server/call_tensors.h) goes into
// that range instead: `out` then carries the reference and no bytes; a CUDA region only where
// `reach` is Reach::kDevice.
absl::StatusOr<kernels::TensorView> AllocateOutput(const kernels::OutputSpec& spec, v1::Tensor* out,
                                                   Reach reach = Reach::kHost);

// --- scalars and enums ----------------------------------------------------------------------

// NaN or +-inf is INVALID_ARGUMENT naming `field`.
absl::Status CheckFinite(double value, absl::string_view field);

// "config.style: unknown RopeStyle value 9 (expected one of ROPE_STYLE_UNSPECIFIED, ...)".
absl::Status UnknownEnumError(int value, const google::protobuf::EnumDescriptor* descriptor,
                              absl::string_view field);

// A wire enum number as its kernels' mirror (kernel = wire - 1: v1::KernelFromWire,
// proto/posenc/v1/vocabulary.h). UNSPECIFIED (0) is nullopt, the op's documented default; any
// number the wire does not define is UnknownEnumError naming `field`.
template <typename Kernel, typename Wire>
absl::StatusOr<std::optional<Kernel>> OptionalFromWireEnum(int value, absl::string_view field) {
  const google::protobuf::EnumDescriptor* descriptor = v1::Descriptor<Wire>();
  if (value == 0) return std::optional<Kernel>();
  if (descriptor->FindValueByNumber(value) == nullptr) {
    return UnknownEnumError(value, descriptor, field);
  }
  return v1::KernelFromWire<Kernel>(static_cast<Wire>(value));
}

// The same where UNSPECIFIED stands for Kernel's first enumerator, the default.
template <typename Kernel, typename Wire>
absl::StatusOr<Kernel> FromWireEnum(int value, absl::string_view field) {
  absl::StatusOr<std::optional<Kernel>> kernel = OptionalFromWireEnum<Kernel, Wire>(value, field);
  if (!kernel.ok()) return kernel.status();
  return kernel->value_or(Kernel{});
}

inline constexpr auto& ToSinusoidalLayout =
    FromWireEnum<kernels::SinusoidalLayout, v1::SinusoidalLayout>;
// UNSPECIFIED: the layout's default scheme (nullopt).
inline constexpr auto& ToFreqScheme = OptionalFromWireEnum<kernels::FreqScheme, v1::FreqScheme>;
inline constexpr auto& ToCombine = FromWireEnum<kernels::Combine, v1::Combine>;
inline constexpr auto& ToRopeStyle = FromWireEnum<kernels::RopeStyle, v1::RopeStyle>;
inline constexpr auto& ToRopeScalingType =
    FromWireEnum<kernels::RopeScalingType, v1::RopeScalingType>;
inline constexpr auto& ToMropeLayout = FromWireEnum<kernels::MropeLayout, v1::MropeLayout>;
inline constexpr auto& ToRopeCacheLayout =
    FromWireEnum<kernels::RopeCacheLayout, v1::RopeCacheLayout>;
inline constexpr auto& ToTensorLayout = FromWireEnum<kernels::TensorLayout, v1::TensorLayout>;
inline constexpr auto& ToAlibiMode = FromWireEnum<kernels::AlibiMode, v1::AlibiMode>;
inline constexpr auto& ToFutureMode = FromWireEnum<kernels::FutureMode, v1::FutureMode>;
inline constexpr auto& ToBiasForm = FromWireEnum<kernels::BiasForm, v1::BiasForm>;
// UNSPECIFIED: from the request's hf_config_json (nullopt).
inline constexpr auto& ToMultimodalFamily =
    OptionalFromWireEnum<kernels::MultimodalFamily, v1::MultimodalFamily>;
inline constexpr auto& ToVisionTower = OptionalFromWireEnum<kernels::VisionTower, v1::VisionTower>;

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
// kernels/hf/config.h; the explicit fields it replaces must then be unset). Checks enums and finite
// doubles; the op's Plan*/ComputeRopeFrequencies validate the rest.
// What hf_config_json normalization reports beside the config (empty without it).
struct RopeConfigNotes {
  std::vector<std::string> warnings;
  std::string layer_type;
  std::string model_type;
  std::string submodule;
};
absl::StatusOr<kernels::RopeConfig> ToRopeConfig(const v1::RopeConfig& config,
                                                 RopeConfigNotes* notes = nullptr);

// A RopeConfig's scaling (fields named "config.scaling.*"): enums and finite doubles.
absl::Status ToRopeScaling(const v1::RopeScaling& scaling, kernels::RopeScaling* out);

// Reports what a RoPE call used (and the normalization's notes, when given).
void FillRopeDerived(const kernels::RopeConfig& config, const kernels::RopeFrequencies& freqs,
                     v1::RopeDerived* derived, const RopeConfigNotes* notes = nullptr);

// DescribeRope: every distinct RoPE of the model of config.hf_config_json (config.layer_type
// and config.submodule must be empty), the request's style, inverse, apply_attention_factor and
// seq_len applied to each; an explicit config is one group without layers. `submodules` (when
// given) gets the layers' sub-modules with the request's fields but its style (a sub-module keeps
// its own pairing). notes gets the model_type and the warnings of every group and sub-module,
// without duplicates.
absl::StatusOr<std::vector<hf::LayerRope>> ToLayerRopeConfigs(
    const v1::RopeConfig& config, RopeConfigNotes* notes,
    std::vector<hf::SubmoduleRope>* submodules = nullptr);

// Reports one group of DescribeRope: its layers, the derived values of its frequencies, and the
// config's base, context, LongRoPE switch and softmax-scale multiplier (kernels/rope/config.h).
void FillRopeLayerGroup(const hf::LayerRope& group, const kernels::RopeFrequencies& freqs,
                        v1::RopeLayerGroup* out);

// Reports one sub-module of DescribeRope: its name, layers, derived values and sources.
void FillRopeSubmodule(const hf::SubmoduleRope& sub, const kernels::RopeFrequencies& freqs,
                       v1::RopeSubmodule* out);

// --- multimodal and vision positions (convert_multimodal.cc) --------------------------------

// MultimodalPositions' prompt: the family (the request's, else hf_config_json's model_type), the
// token ids, spatial_merge_size and tokens_per_second (the request's, else the config.json's,
// else the family's), and the prompt's tensors or spans. The views borrow `req`.
absl::StatusOr<kernels::MultimodalPositionsArgs> ToMultimodalPositionsArgs(
    const v1::MultimodalPositionsRequest& req);
// The family MultimodalPositions' decode reports (the request's or the config's; may be absent).
absl::StatusOr<std::optional<kernels::MultimodalFamily>> ToDecodeFamily(
    const v1::MultimodalPositionsRequest& req);
absl::StatusOr<kernels::MultimodalDecodeArgs> ToMultimodalDecodeArgs(const v1::MultimodalDecode& d);

// VisionPositions: the tower and its geometry (the request's, else hf_config_json's
// vision_config, else the tower's defaults).
absl::StatusOr<kernels::VisionPositionsArgs> ToVisionPositionsArgs(
    const v1::VisionPositionsRequest& req);

// --- AnalyzeEncoding (convert_analysis.cc) -----------------------------------------------------

// The request's options beside the encoding and its tensors (range, properties, collision dtype,
// distances, samples, seed, window, max_cells, scalings): enums and finite doubles.
absl::Status ToAnalysisOptions(const v1::AnalyzeEncodingRequest& req, kernels::AnalysisArgs* args);
// The result sections the plan asked for.
void FillAnalysis(const kernels::AnalysisPlan& plan, const kernels::AnalysisResult& result,
                  v1::AnalyzeEncodingResponse* resp);

}  // namespace posenc::server

#endif  // POSENC_SERVER_CONVERT_H_
