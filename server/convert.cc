#include "server/convert.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "kernels/hf/config.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "proto/posenc/v1/wire_dtype.h"
#include "server/call_tensors.h"
#include "server/status.h"

namespace posenc::server {
namespace {

using kernels::DType;

// The kernels' enums list the wire enums' specified values in the wire's order (kernel = wire - 1,
// proto/posenc/v1/vocabulary.h): the last values agree, and tests/server/vocabulary_test.cc walks
// every value through the conversions.
static_assert(static_cast<int>(kernels::SinusoidalLayout::kConcat) + 1 ==
              v1::SINUSOIDAL_LAYOUT_CONCAT);
static_assert(static_cast<int>(kernels::FreqScheme::kT2t) + 1 == v1::FREQ_SCHEME_T2T);
static_assert(static_cast<int>(kernels::Combine::kConcat) + 1 == v1::COMBINE_CONCAT);
static_assert(static_cast<int>(kernels::RopeStyle::kDeepseek) + 1 == v1::ROPE_STYLE_DEEPSEEK);
static_assert(static_cast<int>(kernels::RopeScalingType::kProportional) + 1 ==
              v1::ROPE_SCALING_PROPORTIONAL);
static_assert(static_cast<int>(kernels::MropeLayout::kVision2dEvenOdd) + 1 ==
              v1::MROPE_LAYOUT_VISION_2D_EVEN_ODD);
static_assert(static_cast<int>(kernels::RopeCacheLayout::kComplex) + 1 ==
              v1::ROPE_CACHE_LAYOUT_COMPLEX);
static_assert(static_cast<int>(kernels::TensorLayout::kTHD) + 1 == v1::TENSOR_LAYOUT_THD);
static_assert(static_cast<int>(kernels::AlibiMode::kBloom) + 1 == v1::ALIBI_MODE_BLOOM);
static_assert(static_cast<int>(kernels::FutureMode::kLinear) + 1 == v1::FUTURE_MODE_LINEAR);
static_assert(static_cast<int>(kernels::BiasForm::kBuckets) + 1 == v1::BIAS_FORM_BUCKETS);
static_assert(static_cast<int>(kernels::MultimodalFamily::kErnie45Vl) + 1 ==
              v1::MULTIMODAL_FAMILY_ERNIE4_5_VL);
static_assert(static_cast<int>(kernels::VisionTower::kLlama4) + 1 == v1::VISION_TOWER_LLAMA4);

absl::string_view AllowedNames(DTypeClass allowed) {
  switch (allowed) {
    case DTypeClass::kFloat: return "DTYPE_FLOAT32, DTYPE_FLOAT16, DTYPE_BFLOAT16 or DTYPE_FLOAT64";
    case DTypeClass::kInt: return "DTYPE_INT32 or DTYPE_INT64";
    case DTypeClass::kAny: break;
  }
  return "a known dtype";
}

bool InClass(DType dtype, DTypeClass allowed) {
  switch (allowed) {
    case DTypeClass::kFloat: return kernels::IsFloatDType(dtype);
    case DTypeClass::kInt: return kernels::IsIntDType(dtype);
    case DTypeClass::kAny: break;
  }
  return true;
}

}  // namespace

// ----- dtypes ---------------------------------------------------------------------------------

absl::StatusOr<DType> FromProtoDType(int dtype, DTypeClass allowed, absl::string_view field) {
  const std::optional<DType> kernel = v1::FromWireDType(dtype);
  if (!kernel.has_value() || !InClass(*kernel, allowed)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected ", AllowedNames(allowed), ", got ",
                     v1::DType_IsValid(dtype) ? v1::DType_Name(static_cast<v1::DType>(dtype))
                                              : absl::StrCat(dtype)));
  }
  return *kernel;
}

absl::StatusOr<DType> OutputDType(int dtype, absl::string_view field) {
  if (dtype == v1::DTYPE_UNSPECIFIED) return DType::kFloat32;
  return FromProtoDType(dtype, DTypeClass::kFloat, field);
}

v1::DType ToProtoDType(DType dtype) { return v1::ToWireDType(dtype); }

// ----- tensors --------------------------------------------------------------------------------

absl::StatusOr<kernels::ConstTensorView> ToConstView(const v1::Tensor& tensor, DTypeClass allowed,
                                                     absl::string_view field, Reach reach,
                                                     const v1::WireBytes* wire) {
  const size_t data_bytes = wire != nullptr ? wire->size : tensor.data().size();
  kernels::ConstTensorView view;
  POSENC_ASSIGN_OR_RETURN(view.dtype,
                          FromProtoDType(tensor.dtype(), allowed, absl::StrCat(field, ".dtype")));
  if (tensor.shape_size() > kMaxTensorRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: expected at most ", kMaxTensorRank, " dimensions, got ",
                     tensor.shape_size(), ": ", kernels::ShapeString(tensor.shape())));
  }
  int64_t elements = 1;
  for (int i = 0; i < tensor.shape_size(); ++i) {
    const int64_t dim = tensor.shape(i);
    if (dim < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "]: expected a size >= 1, got ", dim, " (shape ",
                       kernels::ShapeString(tensor.shape()), ")"));
    }
    if (!kernels::CheckedMul(elements, dim, &elements)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape: ", kernels::ShapeString(tensor.shape()), " has too many elements"));
    }
  }
  int64_t bytes = 0;
  if (!kernels::CheckedMul(elements, kernels::DTypeSize(view.dtype), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: ", kernels::ShapeString(tensor.shape()), " has too many bytes"));
  }
  view.shape.assign(tensor.shape().begin(), tensor.shape().end());
  if (tensor.has_shared_memory()) {
    if (data_bytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": data has ", data_bytes,
                       " bytes and shared_memory is set; give the bytes one way"));
    }
    CallTensors* tensors = CallTensors::Current();
    if (tensors == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ".shared_memory: no shared memory in this context"));
    }
    POSENC_ASSIGN_OR_RETURN(const SharedBytes shared,
                            tensors->Input(tensor.shared_memory(), bytes, field,
                                           kernels::DTypeSize(view.dtype), reach));
    view.data = shared.data;
    view.on_device = shared.on_device;
    return view;
  }
  if (static_cast<int64_t>(data_bytes) != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": data has ", data_bytes, " bytes, expected ", bytes, " (",
        kernels::DTypeName(view.dtype), " ", kernels::ShapeString(tensor.shape()), ")"));
  }
  view.data = wire == nullptr        ? tensor.data().data()
              : wire->pieces.empty() ? nullptr
                                     : wire->pieces.front().data();
  return view;
}

absl::StatusOr<kernels::TensorView> AllocateOutput(const kernels::OutputSpec& spec, v1::Tensor* out,
                                                   Reach reach) {
  const DType dtype = spec.dtype;
  const kernels::Shape& shape = spec.shape;
  out->set_dtype(ToProtoDType(dtype));
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;  // checked against the limits by the caller
  const int64_t bytes = elements * kernels::DTypeSize(dtype);
  if (CallTensors* tensors = CallTensors::Current();
      tensors != nullptr && tensors->HasPlacement(spec.name)) {
    POSENC_ASSIGN_OR_RETURN(
        const SharedBytes shared,
        tensors->Output(spec.name, bytes, out, kernels::DTypeSize(dtype), reach));
    return kernels::TensorView{dtype, shape, shared.data, shared.on_device};
  }
  std::string* data = out->mutable_data();
  v1::ResizeUninitialized(data, static_cast<size_t>(bytes));
  return kernels::TensorView{dtype, shape, data->data()};
}

// ----- scalars and enums ----------------------------------------------------------------------

absl::Status UnknownEnumError(int value, const google::protobuf::EnumDescriptor* descriptor,
                              absl::string_view field) {
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(descriptor->value_count()));
  for (int i = 0; i < descriptor->value_count(); ++i) {
    names.push_back(descriptor->value(i)->name());
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown ", descriptor->name(), " value ",
                                                 value, " (expected one of ",
                                                 absl::StrJoin(names, ", "), ")"));
}

absl::Status CheckFinite(double value, absl::string_view field) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": expected a finite number, got ", value));
}

// ----- messages -------------------------------------------------------------------------------

absl::Status ToPositionSpec(const v1::Positions* positions, absl::string_view field,
                            kernels::PositionSpec* out) {
  using Kind = kernels::PositionSpec::Kind;
  kernels::PositionSpec& spec = *out;
  spec.kind = Kind::kDefault;
  if (positions == nullptr) return absl::OkStatus();
  switch (positions->kind_case()) {
    case v1::Positions::KIND_NOT_SET: break;
    case v1::Positions::kRange: {
      const v1::PositionRange& range = positions->range();
      if (range.start() < 0 || range.start() > kernels::kMaxPosition) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".range.start: expected a position in [0, 2^31), got ", range.start()));
      }
      if (range.count() < 0 || range.count() - 1 > kernels::kMaxPosition - range.start()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".range.count: expected 0 .. ",
                         kernels::kMaxPosition - range.start() + 1, " (positions start at ",
                         range.start(), " and must stay below 2^31), got ", range.count()));
      }
      spec.kind = Kind::kRange;
      spec.start = range.start();
      spec.count = range.count();
      break;
    }
    case v1::Positions::kOffsets:
      spec.kind = Kind::kOffsets;
      spec.offsets.assign(positions->offsets().offsets().begin(),
                          positions->offsets().offsets().end());
      break;
    case v1::Positions::kIds: {
      spec.kind = Kind::kIds;
      POSENC_ASSIGN_OR_RETURN(
          spec.ids, ToConstView(positions->ids(), DTypeClass::kInt, absl::StrCat(field, ".ids")));
      break;
    }
    case v1::Positions::kCuSeqlens:
      spec.kind = Kind::kCuSeqlens;
      spec.cu_seqlens.assign(positions->cu_seqlens().cu_seqlens().begin(),
                             positions->cu_seqlens().cu_seqlens().end());
      spec.offsets.assign(positions->cu_seqlens().offsets().begin(),
                          positions->cu_seqlens().offsets().end());
      break;
    case v1::Positions::kAttentionMask: {
      spec.kind = Kind::kAttentionMask;
      POSENC_ASSIGN_OR_RETURN(spec.mask, ToConstView(positions->attention_mask(), DTypeClass::kInt,
                                                     absl::StrCat(field, ".attention_mask")));
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::SinusoidalParams> ToSinusoidalParams(const v1::SinusoidalParams& params,
                                                             absl::string_view field) {
  kernels::SinusoidalParams out;
  out.dim = params.dim();
  if (params.has_base()) {
    POSENC_RETURN_IF_ERROR(CheckFinite(params.base(), absl::StrCat(field, ".base")));
    out.base = params.base();
  }
  POSENC_ASSIGN_OR_RETURN(out.layout,
                          ToSinusoidalLayout(params.layout(), absl::StrCat(field, ".layout")));
  POSENC_ASSIGN_OR_RETURN(out.scheme,
                          ToFreqScheme(params.freq_scheme(), absl::StrCat(field, ".freq_scheme")));
  return out;
}

namespace {

// The fields that hf_config_json replaces must be unset.
absl::Status CheckNoHfConflicts(const v1::RopeConfig& config) {
  auto conflict = [](absl::string_view field, const std::string& value) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.", field,
                     ": must be unset when config.hf_config_json is given (the JSON "
                     "supplies it), got ",
                     value));
  };
  if (config.head_dim() != 0) return conflict("head_dim", absl::StrCat(config.head_dim()));
  if (config.has_rotary_dim()) return conflict("rotary_dim", absl::StrCat(config.rotary_dim()));
  if (config.has_base()) return conflict("base", absl::StrCat(config.base()));
  if (config.has_scaling()) return conflict("scaling", "a RopeScaling message");
  if (config.has_max_position_embeddings()) {
    return conflict("max_position_embeddings", absl::StrCat(config.max_position_embeddings()));
  }
  if (config.mrope_section_size() > 0) {
    return conflict("mrope_section", kernels::ShapeString(config.mrope_section()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ToRopeScaling(const v1::RopeScaling& scaling, kernels::RopeScaling* out) {
  POSENC_ASSIGN_OR_RETURN(out->type, ToRopeScalingType(scaling.type(), "config.scaling.type"));
  // Every double must be finite; the kernels check ranges and which fields the type reads.
  auto take = [](bool has, double value, absl::string_view name,
                 std::optional<double>* dst) -> absl::Status {
    if (!has) return absl::OkStatus();
    POSENC_RETURN_IF_ERROR(CheckFinite(value, absl::StrCat("config.scaling.", name)));
    *dst = value;
    return absl::OkStatus();
  };
  POSENC_RETURN_IF_ERROR(take(scaling.has_factor(), scaling.factor(), "factor", &out->factor));
  POSENC_RETURN_IF_ERROR(
      take(scaling.has_beta_fast(), scaling.beta_fast(), "beta_fast", &out->beta_fast));
  POSENC_RETURN_IF_ERROR(
      take(scaling.has_beta_slow(), scaling.beta_slow(), "beta_slow", &out->beta_slow));
  POSENC_RETURN_IF_ERROR(take(scaling.has_mscale(), scaling.mscale(), "mscale", &out->mscale));
  POSENC_RETURN_IF_ERROR(take(scaling.has_mscale_all_dim(), scaling.mscale_all_dim(),
                              "mscale_all_dim", &out->mscale_all_dim));
  POSENC_RETURN_IF_ERROR(take(scaling.has_attention_factor(), scaling.attention_factor(),
                              "attention_factor", &out->attention_factor));
  POSENC_RETURN_IF_ERROR(take(scaling.has_low_freq_factor(), scaling.low_freq_factor(),
                              "low_freq_factor", &out->low_freq_factor));
  POSENC_RETURN_IF_ERROR(take(scaling.has_high_freq_factor(), scaling.high_freq_factor(),
                              "high_freq_factor", &out->high_freq_factor));
  POSENC_RETURN_IF_ERROR(take(scaling.has_partial_rotary_factor(), scaling.partial_rotary_factor(),
                              "partial_rotary_factor", &out->partial_rotary_factor));
  POSENC_RETURN_IF_ERROR(take(scaling.has_alpha(), scaling.alpha(), "alpha", &out->alpha));
  if (scaling.has_original_max_position_embeddings()) {
    out->original_max_position_embeddings = scaling.original_max_position_embeddings();
  }
  if (scaling.has_truncate()) out->truncate = scaling.truncate();
  for (int i = 0; i < scaling.long_factor_size(); ++i) {
    POSENC_RETURN_IF_ERROR(
        CheckFinite(scaling.long_factor(i), absl::StrCat("config.scaling.long_factor[", i, "]")));
  }
  for (int i = 0; i < scaling.short_factor_size(); ++i) {
    POSENC_RETURN_IF_ERROR(
        CheckFinite(scaling.short_factor(i), absl::StrCat("config.scaling.short_factor[", i, "]")));
  }
  out->long_factor.assign(scaling.long_factor().begin(), scaling.long_factor().end());
  out->short_factor.assign(scaling.short_factor().begin(), scaling.short_factor().end());
  return absl::OkStatus();
}

namespace {

// INVALID_ARGUMENT "config.<selector>: <why>, got \"X\"<tail>" for the first of layer_type and
// submodule that is set.
absl::Status RefuseSelectors(const v1::RopeConfig& config, absl::string_view why,
                             absl::string_view tail) {
  for (auto [field, value] :
       {std::pair<absl::string_view, const std::string*>{"layer_type", &config.layer_type()},
        {"submodule", &config.submodule()}}) {
    if (!value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("config.", field, ": ", why, ", got \"",
                                                     kernels::Abbreviate(*value), "\"", tail));
    }
  }
  return absl::OkStatus();
}

// A config.json's RoPE with the request's choices on top: a style given in the request overrides
// the architecture's (a caller with permuted weights); the file's M-RoPE layout, where it has
// one, the request's.
void OverrideHfRope(const v1::RopeConfig& config, kernels::RopeStyle style,
                    kernels::MropeLayout mrope_layout,
                    std::optional<kernels::MropeLayout> file_mrope_layout,
                    kernels::RopeConfig* out) {
  if (config.style() != v1::ROPE_STYLE_UNSPECIFIED) out->style = style;
  out->mrope_layout = file_mrope_layout.value_or(mrope_layout);
}

// The request's fields that apply to a RoPE config from any source.
void SetRequestRopeFields(const v1::RopeConfig& config, kernels::RopeConfig* out) {
  out->inverse = config.inverse();
  out->apply_attention_factor =
      config.has_apply_attention_factor() ? config.apply_attention_factor() : true;
  if (config.has_seq_len()) out->seq_len = config.seq_len();
  // Checked by the plan (d/2 finite entries > 0); bounded by the request's size.
  out->freq_factors.assign(config.freq_factors().begin(), config.freq_factors().end());
  // An explicit axis map overrides the sections (a config.json's too).
  if (config.frequency_axes_size() > 0) {
    out->frequency_axes.assign(config.frequency_axes().begin(), config.frequency_axes().end());
    out->mrope_section.clear();
  }
  // The op's plan validates the config once; a config the JSON made invalid (a missing llama3
  // key, say) is reported against the JSON.
  out->from_hf_config_json = !config.hf_config_json().empty() && out->head_dim > 0;
}

}  // namespace

absl::StatusOr<kernels::RopeConfig> ToRopeConfig(const v1::RopeConfig& config,
                                                 RopeConfigNotes* notes) {
  kernels::RopeConfig out;
  POSENC_ASSIGN_OR_RETURN(out.style, ToRopeStyle(config.style(), "config.style"));
  POSENC_ASSIGN_OR_RETURN(out.mrope_layout,
                          ToMropeLayout(config.mrope_layout(), "config.mrope_layout"));

  if (!config.hf_config_json().empty()) {
    POSENC_RETURN_IF_ERROR(CheckNoHfConflicts(config));
    POSENC_ASSIGN_OR_RETURN(
        hf::ModelRope hf,
        hf::ParseModelRope(config.hf_config_json(),
                           {.layer_type = config.layer_type(), .submodule = config.submodule()}));
    const kernels::RopeStyle style = out.style;
    const kernels::MropeLayout mrope_layout = out.mrope_layout;
    out = std::move(hf.config);
    OverrideHfRope(config, style, mrope_layout, hf.mrope_layout, &out);
    if (notes != nullptr) {
      notes->warnings = std::move(hf.warnings);
      notes->layer_type = std::move(hf.layer_type);
      notes->model_type = std::move(hf.model_type);
      notes->submodule = std::move(hf.submodule);
    }
  } else {
    POSENC_RETURN_IF_ERROR(
        RefuseSelectors(config, "only used with config.hf_config_json", " without it"));
    if (config.head_dim() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.head_dim: expected >= 0 (0: from the input or the config), got ",
                       config.head_dim()));
    }
    out.head_dim = config.head_dim();
    if (config.has_rotary_dim()) out.rotary_dim = config.rotary_dim();
    if (config.has_base()) {
      POSENC_RETURN_IF_ERROR(CheckFinite(config.base(), "config.base"));
      out.base = config.base();
    }
    POSENC_RETURN_IF_ERROR(ToRopeScaling(config.scaling(), &out.scaling));
    if (config.has_max_position_embeddings()) {
      out.max_position_embeddings = config.max_position_embeddings();
    }
    out.mrope_section.assign(config.mrope_section().begin(), config.mrope_section().end());
  }
  SetRequestRopeFields(config, &out);
  return out;
}

void FillRopeDerived(const kernels::RopeConfig& config, const kernels::RopeFrequencies& freqs,
                     v1::RopeDerived* derived, const RopeConfigNotes* notes) {
  derived->set_head_dim(freqs.head_dim);
  derived->set_rotary_dim(freqs.rotary_dim);
  derived->set_style(v1::WireFromKernel<v1::RopeStyle>(config.style));
  derived->set_scaling_type(v1::WireFromKernel<v1::RopeScalingType>(config.scaling.type));
  derived->set_effective_base(freqs.effective_base);
  derived->set_attention_factor(freqs.attention_factor);
  derived->set_attention_factor_applied(freqs.attention_factor_applied);
  derived->mutable_inv_freq()->Reserve(static_cast<int>(freqs.inv_freq.size()));
  for (long double w : freqs.inv_freq) derived->add_inv_freq(static_cast<double>(w));
  derived->set_seq_len(freqs.seq_len);
  derived->set_yarn_low(freqs.yarn_low);
  derived->set_yarn_high(freqs.yarn_high);
  derived->set_longrope_long_factors(freqs.longrope_long_factors);
  derived->set_factor(freqs.factor);
  derived->set_nope(freqs.nope);
  if (notes != nullptr) {
    for (const std::string& w : notes->warnings) derived->add_warnings(w);
    derived->set_layer_type(notes->layer_type);
    derived->set_model_type(notes->model_type);
    derived->set_submodule(notes->submodule);
  }
}

absl::StatusOr<std::vector<hf::LayerRope>> ToLayerRopeConfigs(
    const v1::RopeConfig& config, RopeConfigNotes* notes,
    std::vector<hf::SubmoduleRope>* submodules) {
  if (config.hf_config_json().empty()) {
    hf::LayerRope one;
    POSENC_ASSIGN_OR_RETURN(one.config, ToRopeConfig(config, notes));
    std::vector<hf::LayerRope> groups;
    groups.push_back(std::move(one));
    return groups;
  }
  POSENC_RETURN_IF_ERROR(RefuseSelectors(
      config, "DescribeRope describes every layer and sub-module; leave it empty", ""));
  POSENC_ASSIGN_OR_RETURN(const kernels::RopeStyle style,
                          ToRopeStyle(config.style(), "config.style"));
  POSENC_ASSIGN_OR_RETURN(const kernels::MropeLayout mrope_layout,
                          ToMropeLayout(config.mrope_layout(), "config.mrope_layout"));
  POSENC_RETURN_IF_ERROR(CheckNoHfConflicts(config));
  POSENC_ASSIGN_OR_RETURN(hf::ModelRope hf,
                          hf::ParseModelRope(config.hf_config_json(), "", /*all_layers=*/true));
  std::vector<std::string> warnings = std::move(hf.warnings);
  for (hf::LayerRope& group : hf.layer_ropes) {
    OverrideHfRope(config, style, mrope_layout, hf.mrope_layout, &group.config);
    SetRequestRopeFields(config, &group.config);
    for (const std::string& w : group.warnings) {
      if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) warnings.push_back(w);
    }
  }
  // The request's style is the attention's: a sub-module keeps its own pairing.
  for (hf::SubmoduleRope& sub : hf.submodules) {
    SetRequestRopeFields(config, &sub.config);
    for (const std::string& w : sub.warnings) {
      if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) warnings.push_back(w);
    }
  }
  if (submodules != nullptr) *submodules = std::move(hf.submodules);
  if (notes != nullptr) {
    notes->warnings = std::move(warnings);
    notes->model_type = std::move(hf.model_type);
  }
  return std::move(hf.layer_ropes);
}

namespace {

void AddSources(const std::vector<hf::ValueSource>& sources,
                google::protobuf::RepeatedPtrField<v1::RopeValueSource>* out) {
  for (const hf::ValueSource& s : sources) {
    v1::RopeValueSource* source = out->Add();
    source->set_name(s.name);
    source->set_key(s.key);
    source->set_origin(s.origin);
    source->set_value(s.value);
  }
}

}  // namespace

void FillRopeLayerGroup(const hf::LayerRope& group, const kernels::RopeFrequencies& freqs,
                        v1::RopeLayerGroup* out) {
  const kernels::RopeConfig& config = group.config;
  out->mutable_layers()->Assign(group.layers.begin(), group.layers.end());
  out->set_layer_type(group.layer_type);
  FillRopeDerived(config, freqs, out->mutable_derived());
  out->set_base(config.base);
  out->set_max_position_embeddings(config.max_position_embeddings.value_or(0));
  const int64_t original = kernels::RopeOriginalContext(config);
  out->set_original_max_position_embeddings(original);
  if (config.scaling.type == kernels::RopeScalingType::kLongrope && !config.nope) {
    out->set_longrope_switch_seq_len(original);
  }
  if (const std::optional<double> m = kernels::RopeSoftmaxScaleMultiplier(config);
      m.has_value() && group.softmax_mscale) {
    out->set_softmax_scale_multiplier(*m);
  }
  out->mutable_mrope_section()->Assign(config.mrope_section.begin(), config.mrope_section.end());
  for (const std::string& w : group.warnings) out->add_warnings(w);
  if (const std::optional<hf::TemperatureTuning>& t = group.temperature_tuning; t.has_value()) {
    v1::AttentionTemperatureTuning* tuning = out->mutable_attn_temperature_tuning();
    tuning->set_floor_scale(t->floor_scale);
    tuning->set_attn_scale(t->attn_scale);
    tuning->set_position_offset(t->position_offset);
    tuning->set_key(t->key);
  }
  AddSources(group.sources, out->mutable_sources());
}

void FillRopeSubmodule(const hf::SubmoduleRope& sub, const kernels::RopeFrequencies& freqs,
                       v1::RopeSubmodule* out) {
  out->set_name(sub.name);
  out->mutable_layers()->Assign(sub.layers.begin(), sub.layers.end());
  FillRopeDerived(sub.config, freqs, out->mutable_derived());
  out->set_rotary_offset(sub.rotary_offset);
  for (const std::string& w : sub.warnings) out->add_warnings(w);
  AddSources(sub.sources, out->mutable_sources());
}

}  // namespace posenc::server
