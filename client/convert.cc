#include "client/convert.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/kernels_dtype.h"
#include "kernels/common/status.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "proto/posenc/v1/wire_dtype.h"

namespace posenc::client::internal {
namespace {

// The public enums carry the wire numbers (kUnspecified is 0; proto/posenc/v1/vocabulary.h), so
// they convert by a cast: each one's last value is the wire enum's largest, so a value added to
// the .proto fails to compile here until the client has it.
static_assert(static_cast<int>(SinusoidalLayout::kConcat) == v1::SinusoidalLayout_MAX);
static_assert(static_cast<int>(FreqScheme::kT2t) == v1::FreqScheme_MAX);
static_assert(static_cast<int>(Combine::kConcat) == v1::Combine_MAX);
static_assert(static_cast<int>(RopeStyle::kDeepseek) == v1::RopeStyle_MAX);
static_assert(static_cast<int>(RopeScalingType::kProportional) == v1::RopeScalingType_MAX);
static_assert(static_cast<int>(MropeLayout::kVision2dEvenOdd) == v1::MropeLayout_MAX);
static_assert(static_cast<int>(RopeCacheLayout::kComplex) == v1::RopeCacheLayout_MAX);
static_assert(static_cast<int>(MultimodalFamily::kErnie45Vl) == v1::MultimodalFamily_MAX);
static_assert(static_cast<int>(VisionTower::kLlama4) == v1::VisionTower_MAX);
static_assert(static_cast<int>(TensorLayout::kTHD) == v1::TensorLayout_MAX);
static_assert(static_cast<int>(AlibiMode::kBloom) == v1::AlibiMode_MAX);
static_assert(static_cast<int>(FutureMode::kLinear) == v1::FutureMode_MAX);
static_assert(static_cast<int>(BiasForm::kBuckets) == v1::BiasForm_MAX);
// DType has no UNSPECIFIED (a tensor always has one): client = wire - 1, as the kernels'.
static_assert(static_cast<int>(DType::kInt64) + 1 == v1::DType_MAX);

void SetRef(const SharedMemoryRef& ref, v1::SharedMemoryRef* out) {
  out->set_region(ref.region);
  out->set_offset(ref.offset);
  out->set_byte_size(ref.byte_size);
}

// Sets a proto3 `optional` field only when the client value is present.
template <typename Message, typename Arg, typename T>
void SetIf(Message* message, void (Message::*setter)(Arg), const std::optional<T>& value) {
  if (value.has_value()) (message->*setter)(*value);
}

// The output_dtype field: unset (FLOAT32) unless the client gives one.
template <typename Request>
void SetOutputDType(const std::optional<DType>& dtype, Request* request) {
  if (dtype.has_value()) request->set_output_dtype(ToProto(*dtype));
}

// The request's output_shared_memory from the options'.
template <typename Options, typename Request>
void SetPlacements(const Options& options, Request* request) {
  for (const auto& [name, ref] : options.output_shared_memory) {
    SetRef(ref, &(*request->mutable_output_shared_memory())[name]);
  }
}

// The q_len x k_len grid of an AlibiBias, RelativeBias or RelativeEmbedding request and its
// offsets (key_offset: the relative requests only).
template <typename Options, typename Request>
void SetLengths(const Options& options, Request* request) {
  request->set_q_len(options.q_len);
  request->set_k_len(options.k_len);
  SetIf(request, &Request::set_query_offset, options.query_offset);
  if constexpr (requires { options.key_offset; }) {
    SetIf(request, &Request::set_key_offset, options.key_offset);
  }
}

// The table of a RelativeBias or RelativeEmbedding request: inline, by name, or neither.
template <typename Request>
absl::Status SetTable(const std::optional<Tensor>& table_inline, const std::string& table_name,
                      Request* request) {
  if (table_inline.has_value() && !table_name.empty()) {
    return absl::InvalidArgumentError("table: set either table_inline or table_name, not both");
  }
  if (table_inline.has_value()) {
    return ToProto(*table_inline, "table_inline", request->mutable_table_inline());
  }
  if (!table_name.empty()) request->set_table_name(table_name);
  return absl::OkStatus();
}

}  // namespace

v1::DType ToProto(DType dtype) { return v1::ToWireDType(ToKernelsDType(dtype)); }

absl::StatusOr<DType> FromProto(v1::DType dtype, absl::string_view field) {
  const std::optional<kernels::DType> kernel = v1::FromWireDType(dtype);
  if (!kernel.has_value()) {
    return absl::InternalError(
        absl::StrCat("server sent ", field, " with unknown dtype ", static_cast<int>(dtype)));
  }
  return FromKernelsDType(*kernel);
}

absl::Status ToProtoWithoutBytes(const Tensor& tensor, absl::string_view field, v1::Tensor* out,
                                 bool shape_only) {
  // A reference goes as it is: the server checks its size and range and names what is wrong
  // (with structured details), and a reference to a missing region is for it to tell.
  if (tensor.shared_memory.has_value()) {
    SetRef(*tensor.shared_memory, out->mutable_shared_memory());
  } else if (absl::Status s = shape_only ? absl::OkStatus() : tensor.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
  }
  out->set_dtype(ToProto(tensor.dtype));
  out->mutable_shape()->Assign(tensor.shape.begin(), tensor.shape.end());
  return absl::OkStatus();
}

namespace {

void CopyBytes(const Tensor& tensor, v1::Tensor* out) {
  std::string* data = out->mutable_data();
  v1::ReserveLarge(data, tensor.data.size());  // a large copy faults per 2 MiB, not 4 KiB
  data->assign(tensor.data);
}

}  // namespace

absl::Status ToProto(const Tensor& tensor, absl::string_view field, v1::Tensor* out) {
  POSENC_RETURN_IF_ERROR(ToProtoWithoutBytes(tensor, field, out));
  CopyBytes(tensor, out);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> FromProto(v1::Tensor&& tensor, absl::string_view field) {
  Tensor out;
  POSENC_ASSIGN_OR_RETURN(out.dtype, FromProto(tensor.dtype(), field));
  out.shape.assign(tensor.shape().begin(), tensor.shape().end());
  out.data = std::move(*tensor.mutable_data());
  if (tensor.has_shared_memory()) {
    const v1::SharedMemoryRef& ref = tensor.shared_memory();
    out.shared_memory = SharedMemoryRef{ref.region(), ref.offset(), ref.byte_size()};
  }
  if (absl::Status s = out.Validate(); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("server sent an inconsistent ", field, ": ", s.message()));
  }
  return out;
}

absl::StatusOr<Tensor> FromProto(const v1::Tensor& tensor, absl::string_view field) {
  return FromProto(v1::Tensor(tensor), field);
}

absl::Status ToProto(const Positions& positions, v1::Positions* out) {
  switch (positions.kind) {
    case Positions::Kind::kDefault: return absl::OkStatus();
    case Positions::Kind::kRange:
      out->mutable_range()->set_start(positions.start);
      out->mutable_range()->set_count(positions.count);
      return absl::OkStatus();
    case Positions::Kind::kOffsets:
      out->mutable_offsets()->mutable_offsets()->Assign(positions.offsets.begin(),
                                                        positions.offsets.end());
      return absl::OkStatus();
    case Positions::Kind::kIds:
      return ToProto(positions.tensor, "positions.ids", out->mutable_ids());
    case Positions::Kind::kCuSeqlens: {
      v1::CuSeqlens* cu = out->mutable_cu_seqlens();
      cu->mutable_cu_seqlens()->Assign(positions.cu_seqlens.begin(), positions.cu_seqlens.end());
      cu->mutable_offsets()->Assign(positions.offsets.begin(), positions.offsets.end());
      return absl::OkStatus();
    }
    case Positions::Kind::kAttentionMask:
      return ToProto(positions.tensor, "positions.attention_mask", out->mutable_attention_mask());
  }
  return absl::InvalidArgumentError("positions: unknown kind");
}

void ToProto(const SinusoidalParams& params, v1::SinusoidalParams* out) {
  out->set_dim(params.dim);
  SetIf(out, &v1::SinusoidalParams::set_base, params.base);
  out->set_layout(static_cast<v1::SinusoidalLayout>(params.layout));
  out->set_freq_scheme(static_cast<v1::FreqScheme>(params.freq_scheme));
}

void ToProto(const RopeScaling& s, v1::RopeScaling* scaling) {
  scaling->set_type(static_cast<v1::RopeScalingType>(s.type));
  SetIf(scaling, &v1::RopeScaling::set_factor, s.factor);
  SetIf(scaling, &v1::RopeScaling::set_original_max_position_embeddings,
        s.original_max_position_embeddings);
  SetIf(scaling, &v1::RopeScaling::set_beta_fast, s.beta_fast);
  SetIf(scaling, &v1::RopeScaling::set_beta_slow, s.beta_slow);
  SetIf(scaling, &v1::RopeScaling::set_truncate, s.truncate);
  SetIf(scaling, &v1::RopeScaling::set_mscale, s.mscale);
  SetIf(scaling, &v1::RopeScaling::set_mscale_all_dim, s.mscale_all_dim);
  SetIf(scaling, &v1::RopeScaling::set_attention_factor, s.attention_factor);
  SetIf(scaling, &v1::RopeScaling::set_low_freq_factor, s.low_freq_factor);
  SetIf(scaling, &v1::RopeScaling::set_high_freq_factor, s.high_freq_factor);
  scaling->mutable_long_factor()->Assign(s.long_factor.begin(), s.long_factor.end());
  scaling->mutable_short_factor()->Assign(s.short_factor.begin(), s.short_factor.end());
  SetIf(scaling, &v1::RopeScaling::set_partial_rotary_factor, s.partial_rotary_factor);
  SetIf(scaling, &v1::RopeScaling::set_alpha, s.alpha);
}

void ToProto(const RopeConfig& config, v1::RopeConfig* out) {
  out->set_head_dim(config.head_dim);
  SetIf(out, &v1::RopeConfig::set_rotary_dim, config.rotary_dim);
  SetIf(out, &v1::RopeConfig::set_base, config.base);
  out->set_style(static_cast<v1::RopeStyle>(config.style));

  v1::RopeScaling* scaling = out->mutable_scaling();
  ToProto(config.scaling, scaling);
  // An all-default scaling is the same as an absent one on the wire; keep the request minimal.
  if (scaling->ByteSizeLong() == 0) out->clear_scaling();

  SetIf(out, &v1::RopeConfig::set_max_position_embeddings, config.max_position_embeddings);
  out->mutable_mrope_section()->Assign(config.mrope_section.begin(), config.mrope_section.end());
  out->set_mrope_layout(static_cast<v1::MropeLayout>(config.mrope_layout));
  out->set_inverse(config.inverse);
  SetIf(out, &v1::RopeConfig::set_apply_attention_factor, config.apply_attention_factor);
  SetIf(out, &v1::RopeConfig::set_seq_len, config.seq_len);
  out->mutable_freq_factors()->Assign(config.freq_factors.begin(), config.freq_factors.end());
  out->mutable_frequency_axes()->Assign(config.frequency_axes.begin(), config.frequency_axes.end());
  out->set_hf_config_json(config.hf_config_json);
  out->set_layer_type(config.layer_type);
  out->set_submodule(config.submodule);
}

RopeDerived FromProto(const v1::RopeDerived& derived) {
  RopeDerived out;
  out.head_dim = derived.head_dim();
  out.rotary_dim = derived.rotary_dim();
  out.style = static_cast<RopeStyle>(derived.style());
  out.scaling_type = static_cast<RopeScalingType>(derived.scaling_type());
  out.effective_base = derived.effective_base();
  out.attention_factor = derived.attention_factor();
  out.attention_factor_applied = derived.attention_factor_applied();
  out.inv_freq.assign(derived.inv_freq().begin(), derived.inv_freq().end());
  out.seq_len = derived.seq_len();
  out.yarn_low = derived.yarn_low();
  out.yarn_high = derived.yarn_high();
  out.longrope_long_factors = derived.longrope_long_factors();
  out.factor = derived.factor();
  out.warnings.assign(derived.warnings().begin(), derived.warnings().end());
  out.nope = derived.nope();
  out.layer_type = derived.layer_type();
  out.model_type = derived.model_type();
  out.submodule = derived.submodule();
  return out;
}

absl::StatusOr<v1::SinusoidalRequest> ToRequest(const SinusoidalOptions& options) {
  v1::SinusoidalRequest request;
  POSENC_RETURN_IF_ERROR(ToProto(options.positions, request.mutable_positions()));
  ToProto(options.params, request.mutable_params());
  SetOutputDType(options.output_dtype, &request);
  SetPlacements(options, &request);
  return request;
}

absl::Status ToProto(const LearnedTable& table, v1::LearnedTable* learned) {
  if (table.table_inline.has_value() && !table.table_name.empty()) {
    return absl::InvalidArgumentError("learned: set either table_inline or table_name, not both");
  }
  if (table.table_inline.has_value()) {
    POSENC_RETURN_IF_ERROR(
        ToProto(*table.table_inline, "learned.table_inline", learned->mutable_table_inline()));
  } else {
    learned->set_table_name(table.table_name);
  }
  learned->set_table_offset(table.table_offset);
  return absl::OkStatus();
}

absl::StatusOr<v1::AddPositionEncodingRequest> ToRequest(
    const AddPositionEncodingOptions& options) {
  v1::AddPositionEncodingRequest request;
  POSENC_RETURN_IF_ERROR(ToProto(options.x, "x", request.mutable_x()));
  POSENC_RETURN_IF_ERROR(ToProto(options.positions, request.mutable_positions()));
  if (options.sinusoidal.has_value() && options.learned.has_value()) {
    return absl::InvalidArgumentError("source: set either sinusoidal or learned, not both");
  }
  if (options.sinusoidal.has_value()) {
    ToProto(*options.sinusoidal, request.mutable_sinusoidal());
  } else if (options.learned.has_value()) {
    POSENC_RETURN_IF_ERROR(ToProto(*options.learned, request.mutable_learned()));
  }
  request.set_combine(static_cast<v1::Combine>(options.combine));
  SetIf(&request, &v1::AddPositionEncodingRequest::set_scale, options.scale);
  SetIf(&request, &v1::AddPositionEncodingRequest::set_padding_idx, options.padding_idx);
  SetPlacements(options, &request);
  return request;
}

absl::StatusOr<v1::RopeCacheRequest> ToRequest(const RopeCacheOptions& options) {
  v1::RopeCacheRequest request;
  POSENC_RETURN_IF_ERROR(ToProto(options.positions, request.mutable_positions()));
  ToProto(options.config, request.mutable_config());
  request.set_layout(static_cast<v1::RopeCacheLayout>(options.layout));
  SetOutputDType(options.output_dtype, &request);
  SetPlacements(options, &request);
  return request;
}

absl::StatusOr<v1::ApplyRopeRequest> ToRequest(const ApplyRopeOptions& options) {
  POSENC_ASSIGN_OR_RETURN(v1::ApplyRopeRequest request, ToRequestWithoutBytes(options));
  CopyBytes(options.q, request.mutable_q());
  if (options.k.has_value()) CopyBytes(*options.k, request.mutable_k());
  return request;
}

absl::StatusOr<v1::ApplyRopeRequest> ToRequestWithoutBytes(const ApplyRopeOptions& options,
                                                           bool shapes_only) {
  v1::ApplyRopeRequest request;
  POSENC_RETURN_IF_ERROR(ToProtoWithoutBytes(options.q, "q", request.mutable_q(), shapes_only));
  if (options.k.has_value()) {
    POSENC_RETURN_IF_ERROR(ToProtoWithoutBytes(*options.k, "k", request.mutable_k(), shapes_only));
  }
  POSENC_RETURN_IF_ERROR(ToProto(options.positions, request.mutable_positions()));
  ToProto(options.config, request.mutable_config());
  request.set_layout(static_cast<v1::TensorLayout>(options.layout));
  SetPlacements(options, &request);
  return request;
}

absl::StatusOr<v1::AlibiSlopesRequest> ToRequest(const AlibiSlopesOptions& options) {
  v1::AlibiSlopesRequest request;
  request.set_num_heads(options.num_heads);
  SetIf(&request, &v1::AlibiSlopesRequest::set_max_bias, options.max_bias);
  SetOutputDType(options.output_dtype, &request);
  SetPlacements(options, &request);
  return request;
}

absl::StatusOr<v1::AlibiBiasRequest> ToRequest(const AlibiBiasOptions& options) {
  v1::AlibiBiasRequest request;
  request.set_num_heads(options.num_heads);
  SetLengths(options, &request);
  request.set_mode(static_cast<v1::AlibiMode>(options.mode));
  request.set_future(static_cast<v1::FutureMode>(options.future));
  SetIf(&request, &v1::AlibiBiasRequest::set_max_bias, options.max_bias);
  request.set_form(static_cast<v1::BiasForm>(options.form));
  if (options.attention_mask.has_value()) {
    POSENC_RETURN_IF_ERROR(
        ToProto(*options.attention_mask, "attention_mask", request.mutable_attention_mask()));
  }
  SetOutputDType(options.output_dtype, &request);
  SetPlacements(options, &request);
  return request;
}

absl::StatusOr<v1::RelativeBiasRequest> ToRequest(const RelativeBiasOptions& options) {
  v1::RelativeBiasRequest request;
  SetLengths(options, &request);
  SetIf(&request, &v1::RelativeBiasRequest::set_bidirectional, options.bidirectional);
  SetIf(&request, &v1::RelativeBiasRequest::set_num_buckets, options.num_buckets);
  SetIf(&request, &v1::RelativeBiasRequest::set_max_distance, options.max_distance);
  POSENC_RETURN_IF_ERROR(SetTable(options.table_inline, options.table_name, &request));
  request.set_form(static_cast<v1::BiasForm>(options.form));
  SetOutputDType(options.output_dtype, &request);
  SetPlacements(options, &request);
  return request;
}

absl::StatusOr<v1::RelativeEmbeddingRequest> ToRequest(const RelativeEmbeddingOptions& options) {
  v1::RelativeEmbeddingRequest request;
  SetLengths(options, &request);
  request.set_max_relative(options.max_relative);
  POSENC_RETURN_IF_ERROR(SetTable(options.table_inline, options.table_name, &request));
  SetOutputDType(options.output_dtype, &request);
  SetPlacements(options, &request);
  return request;
}

namespace {

// The encoding of an AnalyzeEncoding request: exactly one of its five.
absl::Status SetAnalysisEncoding(const AnalyzeEncodingOptions& o, v1::AnalyzeEncodingRequest* r) {
  const int set = o.sinusoidal.has_value() + o.learned.has_value() + o.config.has_value() +
                  o.alibi.has_value() + o.t5.has_value();
  if (set > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoding: set one of sinusoidal, learned, config, alibi and t5, got ", set));
  }
  if (o.sinusoidal.has_value()) ToProto(*o.sinusoidal, r->mutable_sinusoidal());
  if (o.learned.has_value()) POSENC_RETURN_IF_ERROR(ToProto(*o.learned, r->mutable_learned()));
  if (o.config.has_value()) ToProto(*o.config, r->mutable_config());
  if (o.alibi.has_value()) {
    v1::AlibiAnalysis* a = r->mutable_alibi();
    a->set_num_heads(o.alibi->num_heads);
    SetIf(a, &v1::AlibiAnalysis::set_max_bias, o.alibi->max_bias);
    a->set_mode(static_cast<v1::AlibiMode>(o.alibi->mode));
    a->set_future(static_cast<v1::FutureMode>(o.alibi->future));
  }
  if (o.t5.has_value()) {
    v1::T5Analysis* t = r->mutable_t5();
    SetIf(t, &v1::T5Analysis::set_bidirectional, o.t5->bidirectional);
    SetIf(t, &v1::T5Analysis::set_num_buckets, o.t5->num_buckets);
    SetIf(t, &v1::T5Analysis::set_max_distance, o.t5->max_distance);
    return SetTable(o.t5->table_inline, o.t5->table_name, t);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::AnalyzeEncodingRequest> ToRequest(const AnalyzeEncodingOptions& options) {
  v1::AnalyzeEncodingRequest request;
  POSENC_RETURN_IF_ERROR(SetAnalysisEncoding(options, &request));
  request.set_start(options.start);
  request.set_count(options.count);
  for (AnalysisProperty p : options.properties) {
    request.add_properties(static_cast<v1::AnalysisProperty>(p));
  }
  if (options.collision_dtype.has_value()) {
    request.set_collision_dtype(ToProto(*options.collision_dtype));
  }
  SetIf(&request, &v1::AnalyzeEncodingRequest::set_uniqueness_offsets, options.uniqueness_offsets);
  request.mutable_distances()->Assign(options.distances.begin(), options.distances.end());
  SetIf(&request, &v1::AnalyzeEncodingRequest::set_samples, options.samples);
  request.set_seed(options.seed);
  SetIf(&request, &v1::AnalyzeEncodingRequest::set_window, options.window);
  SetIf(&request, &v1::AnalyzeEncodingRequest::set_max_cells, options.max_cells);
  if (options.embeddings.has_value()) {
    POSENC_RETURN_IF_ERROR(
        ToProto(*options.embeddings, "embeddings", request.mutable_embeddings()));
  }
  if (options.keys.has_value()) {
    POSENC_RETURN_IF_ERROR(ToProto(*options.keys, "keys", request.mutable_keys()));
  }
  for (const RopeScaling& s : options.scalings) ToProto(s, request.add_scalings());
  return request;
}

absl::StatusOr<RopeCacheResult> FromProto(v1::RopeCacheResponse&& response) {
  RopeCacheResult result{.derived = FromProto(response.derived())};
  if (response.has_cos_sin()) {
    POSENC_ASSIGN_OR_RETURN(result.cos_sin,
                            FromProto(std::move(*response.mutable_cos_sin()), "cos_sin"));
    return result;
  }
  if (response.has_freqs_cis()) {
    POSENC_ASSIGN_OR_RETURN(result.freqs_cis,
                            FromProto(std::move(*response.mutable_freqs_cis()), "freqs_cis"));
    return result;
  }
  POSENC_ASSIGN_OR_RETURN(result.cos, FromProto(std::move(*response.mutable_cos()), "cos"));
  POSENC_ASSIGN_OR_RETURN(result.sin, FromProto(std::move(*response.mutable_sin()), "sin"));
  return result;
}

absl::StatusOr<ApplyRopeResult> FromProto(v1::ApplyRopeResponse&& response) {
  ApplyRopeResult result{.derived = FromProto(response.derived())};
  POSENC_ASSIGN_OR_RETURN(result.q, FromProto(std::move(*response.mutable_q()), "q"));
  if (response.has_k()) {
    POSENC_ASSIGN_OR_RETURN(result.k, FromProto(std::move(*response.mutable_k()), "k"));
  }
  return result;
}

absl::StatusOr<AlibiBiasResult> FromProto(v1::AlibiBiasResponse&& response) {
  AlibiBiasResult result;
  POSENC_ASSIGN_OR_RETURN(result.bias, FromProto(std::move(*response.mutable_bias()), "bias"));
  POSENC_ASSIGN_OR_RETURN(result.slopes,
                          FromProto(std::move(*response.mutable_slopes()), "slopes"));
  return result;
}

namespace {

std::vector<RopeValueSource> FromProto(
    const google::protobuf::RepeatedPtrField<v1::RopeValueSource>& sources) {
  std::vector<RopeValueSource> out;
  out.reserve(sources.size());
  for (const v1::RopeValueSource& s : sources) {
    out.push_back({s.name(), s.key(), s.origin(), s.value()});
  }
  return out;
}

}  // namespace

DescribeRopeResult FromProto(const v1::DescribeRopeResponse& response) {
  DescribeRopeResult out;
  out.model_type = response.model_type();
  for (const v1::RopeLayerGroup& g : response.groups()) {
    RopeLayerGroup& group = out.groups.emplace_back();
    group.layers.assign(g.layers().begin(), g.layers().end());
    group.layer_type = g.layer_type();
    group.derived = FromProto(g.derived());
    group.base = g.base();
    group.max_position_embeddings = g.max_position_embeddings();
    group.original_max_position_embeddings = g.original_max_position_embeddings();
    group.longrope_switch_seq_len = g.longrope_switch_seq_len();
    if (g.has_softmax_scale_multiplier()) {
      group.softmax_scale_multiplier = g.softmax_scale_multiplier();
    }
    group.mrope_section.assign(g.mrope_section().begin(), g.mrope_section().end());
    group.warnings.assign(g.warnings().begin(), g.warnings().end());
    if (g.has_attn_temperature_tuning()) {
      const v1::AttentionTemperatureTuning& t = g.attn_temperature_tuning();
      group.attn_temperature_tuning =
          AttentionTemperatureTuning{t.floor_scale(), t.attn_scale(), t.position_offset(), t.key()};
    }
    group.sources = FromProto(g.sources());
  }
  out.warnings.assign(response.warnings().begin(), response.warnings().end());
  out.num_layers = response.num_layers();
  for (const v1::RopeSubmodule& s : response.submodules()) {
    RopeSubmodule& sub = out.submodules.emplace_back();
    sub.name = s.name();
    sub.layers.assign(s.layers().begin(), s.layers().end());
    sub.derived = FromProto(s.derived());
    sub.rotary_offset = s.rotary_offset();
    sub.warnings.assign(s.warnings().begin(), s.warnings().end());
    sub.sources = FromProto(s.sources());
  }
  return out;
}

absl::StatusOr<v1::RegisterSharedMemoryRequest> ToRequest(const SharedMemoryRegistration& region) {
  v1::RegisterSharedMemoryRequest request;
  request.set_name(region.name);
  request.set_key(region.key);
  request.set_offset(region.offset);
  request.set_byte_size(region.byte_size);
  return request;
}

absl::StatusOr<v1::RegisterCudaSharedMemoryRequest> ToRequest(
    const CudaSharedMemoryRegistration& region) {
  v1::RegisterCudaSharedMemoryRequest request;
  request.set_name(region.name);
  request.set_raw_handle(region.raw_handle);
  request.set_device_id(region.device_id);
  request.set_byte_size(region.byte_size);
  return request;
}

std::vector<SharedMemoryRegionStatus> FromProto(const v1::SharedMemoryStatusResponse& response) {
  std::vector<SharedMemoryRegionStatus> out;
  for (const v1::SharedMemoryRegionStatus& r : response.regions()) {
    const SharedMemoryKind kind = r.kind() == v1::SHARED_MEMORY_KIND_CUDA
                                      ? SharedMemoryKind::kCuda
                                      : SharedMemoryKind::kSystem;
    out.push_back({r.name(), r.key(), r.offset(), r.byte_size(), r.broken(), kind,
                   kind == SharedMemoryKind::kCuda ? r.device_id() : -1});
  }
  return out;
}

absl::StatusOr<ServerInfo> FromProto(const v1::GetServerInfoResponse& response) {
  ServerInfo info;
  info.version = response.version();
  info.build = response.build();
  for (const v1::BackendInfo& b : response.backends()) {
    info.backends.push_back({b.name(), b.detail(), b.is_default(), b.small_call_bytes()});
  }
  info.cuda_built_in = response.cuda_built_in();
  for (const v1::DeviceInfo& d : response.devices()) {
    info.devices.push_back({d.index(), d.name(), d.total_memory_bytes(), d.compute_capability(),
                            d.driver_version(), d.runtime_version(), d.in_use()});
  }
  info.max_message_bytes = response.limits().max_message_bytes();
  info.max_output_elements = response.limits().max_output_elements();
  info.max_inflight_bytes = response.limits().max_inflight_bytes();
  info.max_heavy_calls = response.limits().max_heavy_calls();
  info.shared_memory_allowed = response.limits().shared_memory_allowed();
  info.max_shared_memory_regions = response.limits().max_shared_memory_regions();
  info.max_shared_memory_bytes = response.limits().max_shared_memory_bytes();
  for (const v1::TableInfo& t : response.tables()) {
    POSENC_ASSIGN_OR_RETURN(const DType dtype,
                            FromProto(t.dtype(), absl::StrCat("table ", t.name())));
    info.tables.push_back({t.name(), dtype, {t.shape().begin(), t.shape().end()}});
  }
  return info;
}

}  // namespace posenc::client::internal
