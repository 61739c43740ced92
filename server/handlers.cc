#include "server/handlers.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/cancellation.h"
#include "kernels/ops.h"
#include "kernels/common/positions.h"
#include "server/convert.h"
#include "server/status.h"

#ifndef POSENC_VERSION
#define POSENC_VERSION "unknown"
#endif
#ifndef POSENC_BUILD_INFO
#define POSENC_BUILD_INFO "unknown"
#endif

namespace posenc::server {
namespace {

const v1::Positions* PositionsOrNull(bool has, const v1::Positions& positions) {
  return has ? &positions : nullptr;
}

// A table given inline (any float dtype) or by name.
absl::StatusOr<kernels::ConstTensorView> ResolveTable(const HandlerContext& ctx, bool has_inline,
                                                      const v1::Tensor& table_inline, bool has_name,
                                                      const std::string& name,
                                                      absl::string_view inline_field,
                                                      absl::string_view name_field) {
  if (has_inline) return ToConstView(table_inline, DTypeClass::kFloat, inline_field);
  if (has_name) {
    if (ctx.tables == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_field, ": no table named \"", name, "\" (loaded: none)"));
    }
    return ctx.tables->Find(name, name_field);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(inline_field, " / ", name_field, ": a table is required, got neither"));
}

// Puts `in`'s bytes (validated as `view`) into `out` and returns a view onto them: ApplyRope
// rotates there in place. With ctx.consume_requests the bytes move (no copy: the request is not
// read again); otherwise they are copied.
kernels::TensorView TakeToOutput(const HandlerContext& ctx, const v1::Tensor& in,
                                 const kernels::ConstTensorView& view, v1::Tensor* out) {
  out->set_dtype(in.dtype());
  *out->mutable_shape() = in.shape();
  if (ctx.consume_requests) {
    // The service owns the request object for the duration of the call and hands it over.
    const_cast<v1::Tensor&>(in).mutable_data()->swap(*out->mutable_data());
  } else {
    *out->mutable_data() = in.data();
  }
  return kernels::TensorView{view.dtype, view.shape, out->mutable_data()->data()};
}

// The frequencies of `config`, through the server's bounded cache when it has one.
absl::StatusOr<std::shared_ptr<const kernels::RopeFrequencies>> Frequencies(
    const HandlerContext& ctx, const kernels::RopeConfig& config, int64_t max_position) {
  if (ctx.rope_cache == nullptr) {
    POSENC_ASSIGN_OR_RETURN(kernels::RopeFrequencies f,
                            kernels::ComputeRopeFrequencies(config, max_position));
    return std::make_shared<const kernels::RopeFrequencies>(std::move(f));
  }
  bool hit = false;
  auto freqs = ctx.rope_cache->Get(config, max_position, &hit);
  if (freqs.ok() && ctx.metrics != nullptr) ctx.metrics->OnCacheLookup(hit);
  return freqs;
}

absl::Status Sinusoidal(const HandlerContext& ctx, const v1::SinusoidalRequest& req,
                        v1::SinusoidalResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(kernels::SinusoidalParams params,
                          ToSinusoidalParams(req.params(), "params"));
  POSENC_ASSIGN_OR_RETURN(kernels::DType dtype, OutputDType(req.output_dtype(), "output_dtype"));
  kernels::PositionSpec spec;
  POSENC_RETURN_IF_ERROR(
      ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()), "positions", &spec));
  kernels::GridRequest grid;
  POSENC_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::PlanSinusoidal(params, spec, &grid));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {{"table", dtype, &shape}}));
  POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions positions,
                          kernels::ResolvePositions(spec, grid));
  kernels::TensorView out = AllocateOutput(dtype, shape, resp->mutable_table());
  return ctx.backend->Sinusoidal(params, positions, out);
}

absl::Status AddPositionEncoding(const HandlerContext& ctx,
                                 const v1::AddPositionEncodingRequest& req,
                                 v1::AddPositionEncodingResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(kernels::ConstTensorView x,
                          ToConstView(req.x(), DTypeClass::kFloat, "x"));
  kernels::PositionSpec spec;
  POSENC_RETURN_IF_ERROR(
      ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()), "positions", &spec));
  kernels::AddPositionEncodingParams params;
  POSENC_ASSIGN_OR_RETURN(params.combine, ToCombine(req.combine(), "combine"));
  if (req.has_scale()) {
    POSENC_RETURN_IF_ERROR(CheckFinite(req.scale(), "scale"));
    params.scale = req.scale();
  }
  if (req.has_padding_idx()) params.padding_idx = req.padding_idx();
  switch (req.source_case()) {
    case v1::AddPositionEncodingRequest::kLearned: {
      const v1::LearnedTable& learned = req.learned();
      POSENC_ASSIGN_OR_RETURN(
          params.learned,
          ResolveTable(ctx, learned.has_table_inline(), learned.table_inline(),
                       learned.table_case() == v1::LearnedTable::kTableName, learned.table_name(),
                       "learned.table_inline", "learned.table_name"));
      params.table_offset = learned.table_offset();
      break;
    }
    case v1::AddPositionEncodingRequest::kSinusoidal: {
      POSENC_ASSIGN_OR_RETURN(params.sinusoidal,
                              ToSinusoidalParams(req.sinusoidal(), "sinusoidal"));
      break;
    }
    case v1::AddPositionEncodingRequest::SOURCE_NOT_SET:
      break;  // PlanAddPositionEncoding names the missing source
  }
  kernels::GridRequest grid;
  POSENC_ASSIGN_OR_RETURN(kernels::Shape shape,
                          kernels::PlanAddPositionEncoding(params, x.shape, spec, &grid));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {{"y", x.dtype, &shape}}));
  POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions positions,
                          kernels::ResolvePositions(spec, grid));
  kernels::TensorView y = AllocateOutput(x.dtype, shape, resp->mutable_y());
  return ctx.backend->AddPositionEncoding(params, x, positions, y);
}

absl::Status RopeCache(const HandlerContext& ctx, const v1::RopeCacheRequest& req,
                       v1::RopeCacheResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(kernels::RopeConfig config, ToRopeConfig(req.config()));
  POSENC_ASSIGN_OR_RETURN(kernels::DType dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_ASSIGN_OR_RETURN(kernels::RopeCacheLayout layout,
                          ToRopeCacheLayout(req.layout(), "layout"));
  kernels::PositionSpec spec;
  POSENC_RETURN_IF_ERROR(
      ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()), "positions", &spec));
  kernels::GridRequest grid;
  POSENC_ASSIGN_OR_RETURN(kernels::Shape shape,
                          kernels::PlanRopeCache(config, layout, spec, &grid));
  POSENC_RETURN_IF_ERROR(
      CheckOutputLimits(ctx.limits, {{"cos", dtype, &shape}, {"sin", dtype, &shape}}));
  POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions positions,
                          kernels::ResolvePositions(spec, grid));
  POSENC_ASSIGN_OR_RETURN(std::shared_ptr<const kernels::RopeFrequencies> freqs,
                          Frequencies(ctx, config, positions.max_position));
  kernels::TensorView cos = AllocateOutput(dtype, shape, resp->mutable_cos());
  kernels::TensorView sin = AllocateOutput(dtype, shape, resp->mutable_sin());
  POSENC_RETURN_IF_ERROR(ctx.backend->RopeCache(config, *freqs, layout, positions, cos, sin));
  FillRopeDerived(config, *freqs, resp->mutable_derived());
  return absl::OkStatus();
}

absl::Status ApplyRope(const HandlerContext& ctx, const v1::ApplyRopeRequest& req,
                       v1::ApplyRopeResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(kernels::ConstTensorView q,
                          ToConstView(req.q(), DTypeClass::kFloat, "q"));
  kernels::ConstTensorView k;
  if (req.has_k()) {
    POSENC_ASSIGN_OR_RETURN(k, ToConstView(req.k(), DTypeClass::kFloat, "k"));
  }
  POSENC_ASSIGN_OR_RETURN(kernels::RopeConfig config, ToRopeConfig(req.config()));
  POSENC_ASSIGN_OR_RETURN(kernels::TensorLayout layout, ToTensorLayout(req.layout(), "layout"));
  kernels::PositionSpec spec;
  POSENC_RETURN_IF_ERROR(
      ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()), "positions", &spec));
  kernels::GridRequest grid;
  POSENC_ASSIGN_OR_RETURN(
      kernels::ApplyRopeDims dims,
      kernels::PlanApplyRope(config, layout, q.dtype, q.shape, req.has_k() ? &k.dtype : nullptr,
                             req.has_k() ? &k.shape : nullptr, spec, &grid));
  if (req.has_k()) {
    POSENC_RETURN_IF_ERROR(
        CheckOutputLimits(ctx.limits, {{"q", q.dtype, &q.shape}, {"k", k.dtype, &k.shape}}));
  } else {
    POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {{"q", q.dtype, &q.shape}}));
  }
  POSENC_ASSIGN_OR_RETURN(kernels::ResolvedPositions positions,
                          kernels::ResolvePositions(spec, grid));
  POSENC_ASSIGN_OR_RETURN(std::shared_ptr<const kernels::RopeFrequencies> freqs,
                          Frequencies(ctx, config, positions.max_position));
  kernels::TensorView q_out = TakeToOutput(ctx, req.q(), q, resp->mutable_q());
  kernels::TensorView k_out;
  if (req.has_k()) k_out = TakeToOutput(ctx, req.k(), k, resp->mutable_k());
  POSENC_RETURN_IF_ERROR(
      ctx.backend->ApplyRope(config, *freqs, layout, dims, positions, q_out, k_out));
  FillRopeDerived(config, *freqs, resp->mutable_derived());
  return absl::OkStatus();
}

// max_bias, default 8; the kernels check its range (and num_heads').
absl::StatusOr<double> MaxBias(bool has, double value) {
  if (!has) return 8.0;
  POSENC_RETURN_IF_ERROR(CheckFinite(value, "max_bias"));
  return value;
}

// Slopes into `out` ([H] of any float dtype). The caller has checked H against the limits.
absl::Status WriteSlopes(int64_t num_heads, double max_bias, kernels::DType dtype,
                         v1::Tensor* out) {
  POSENC_ASSIGN_OR_RETURN(std::vector<double> slopes, kernels::AlibiSlopes(num_heads, max_bias));
  const kernels::Shape shape = {num_heads};
  kernels::TensorView view = AllocateOutput(dtype, shape, out);
  for (int64_t h = 0; h < num_heads; ++h) kernels::StoreFromDouble(view.data, dtype, h, slopes[h]);
  return absl::OkStatus();
}

absl::Status AlibiSlopes(const HandlerContext& ctx, const v1::AlibiSlopesRequest& req,
                         v1::AlibiSlopesResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(double max_bias, MaxBias(req.has_max_bias(), req.max_bias()));
  POSENC_ASSIGN_OR_RETURN(kernels::DType dtype, OutputDType(req.output_dtype(), "output_dtype"));
  const kernels::Shape shape = {req.num_heads()};
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {{"slopes", dtype, &shape}}));
  return WriteSlopes(req.num_heads(), max_bias, dtype, resp->mutable_slopes());
}

absl::Status AlibiBias(const HandlerContext& ctx, const v1::AlibiBiasRequest& req,
                       v1::AlibiBiasResponse* resp) {
  kernels::AlibiBiasParams params;
  params.num_heads = req.num_heads();
  params.q_len = req.q_len();
  params.k_len = req.k_len();
  if (req.has_query_offset()) params.query_offset = req.query_offset();
  POSENC_ASSIGN_OR_RETURN(params.mode, ToAlibiMode(req.mode(), "mode"));
  POSENC_ASSIGN_OR_RETURN(params.future, ToFutureMode(req.future(), "future"));
  POSENC_ASSIGN_OR_RETURN(params.max_bias, MaxBias(req.has_max_bias(), req.max_bias()));
  POSENC_ASSIGN_OR_RETURN(params.form, ToBiasForm(req.form(), "form"));
  if (req.has_attention_mask()) {
    POSENC_ASSIGN_OR_RETURN(params.attention_mask,
                            ToConstView(req.attention_mask(), DTypeClass::kInt, "attention_mask"));
  }
  POSENC_ASSIGN_OR_RETURN(kernels::DType dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::PlanAlibiBias(params));
  const kernels::Shape slopes_shape = {params.num_heads};
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(
      ctx.limits, {{"bias", dtype, &shape}, {"slopes", kernels::DType::kFloat64, &slopes_shape}}));
  POSENC_RETURN_IF_ERROR(WriteSlopes(params.num_heads, params.max_bias, kernels::DType::kFloat64,
                                     resp->mutable_slopes()));
  kernels::TensorView bias = AllocateOutput(dtype, shape, resp->mutable_bias());
  return ctx.backend->AlibiBias(params, bias);
}

absl::Status RelativeBias(const HandlerContext& ctx, const v1::RelativeBiasRequest& req,
                          v1::RelativeBiasResponse* resp) {
  kernels::RelativeBiasParams params;
  params.q_len = req.q_len();
  params.k_len = req.k_len();
  if (req.has_query_offset()) params.query_offset = req.query_offset();
  if (req.has_key_offset()) params.key_offset = req.key_offset();
  if (req.has_bidirectional()) params.bidirectional = req.bidirectional();
  if (req.has_num_buckets()) params.num_buckets = req.num_buckets();
  if (req.has_max_distance()) params.max_distance = req.max_distance();
  POSENC_ASSIGN_OR_RETURN(params.form, ToBiasForm(req.form(), "form"));
  kernels::DType dtype = kernels::DType::kInt32;
  const bool has_table = req.table_case() != v1::RelativeBiasRequest::TABLE_NOT_SET;
  if (params.form == kernels::BiasForm::kBuckets) {
    if (req.output_dtype() != v1::DTYPE_UNSPECIFIED && req.output_dtype() != v1::DTYPE_INT32) {
      return absl::InvalidArgumentError(
          absl::StrCat("output_dtype: BIAS_FORM_BUCKETS returns DTYPE_INT32 bucket ids, got ",
                       v1::DType_IsValid(req.output_dtype()) ? v1::DType_Name(req.output_dtype())
                                                             : absl::StrCat(req.output_dtype())));
    }
  } else {
    POSENC_ASSIGN_OR_RETURN(dtype, OutputDType(req.output_dtype(), "output_dtype"));
  }
  if (params.form != kernels::BiasForm::kBuckets || has_table) {
    POSENC_ASSIGN_OR_RETURN(params.table,
                            ResolveTable(ctx, req.has_table_inline(), req.table_inline(),
                                         req.table_case() == v1::RelativeBiasRequest::kTableName,
                                         req.table_name(), "table_inline", "table_name"));
  }
  POSENC_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::PlanRelativeBias(params));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {{"bias", dtype, &shape}}));
  kernels::TensorView bias = AllocateOutput(dtype, shape, resp->mutable_bias());
  return ctx.backend->RelativeBias(params, bias);
}

absl::Status RelativeEmbedding(const HandlerContext& ctx, const v1::RelativeEmbeddingRequest& req,
                               v1::RelativeEmbeddingResponse* resp) {
  kernels::RelativeEmbeddingParams params;
  params.q_len = req.q_len();
  params.k_len = req.k_len();
  params.max_relative = req.max_relative();
  if (req.has_query_offset()) params.query_offset = req.query_offset();
  if (req.has_key_offset()) params.key_offset = req.key_offset();
  POSENC_ASSIGN_OR_RETURN(params.table,
                          ResolveTable(ctx, req.has_table_inline(), req.table_inline(),
                                       req.table_case() == v1::RelativeEmbeddingRequest::kTableName,
                                       req.table_name(), "table_inline", "table_name"));
  POSENC_ASSIGN_OR_RETURN(kernels::DType dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::PlanRelativeEmbedding(params));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {{"embeddings", dtype, &shape}}));
  kernels::TensorView out = AllocateOutput(dtype, shape, resp->mutable_embeddings());
  return ctx.backend->RelativeEmbedding(params, out);
}

}  // namespace

absl::Status CheckOutputLimits(const Limits& limits, std::initializer_list<PlannedOutput> outputs) {
  // Every handler calls this right before it allocates its outputs: a call whose deadline has
  // passed (or that was cancelled) stops here instead of paying for the allocation.
  if (const kernels::Cancellation* cancel = kernels::CurrentCancellation(); cancel != nullptr) {
    POSENC_RETURN_IF_ERROR(cancel->Check());
  }
  double total_bytes = 0.0;
  std::string parts;
  for (const PlannedOutput& out : outputs) {
    // Products as doubles first: a planned shape may multiply past int64.
    double elements = 1.0;
    for (int64_t d : *out.shape) elements *= static_cast<double>(d);
    if (elements > static_cast<double>(limits.max_output_elements)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s %s has %.1e elements, over --max_output_elements=%d", out.name,
                          kernels::ShapeString(*out.shape), elements, limits.max_output_elements));
    }
    total_bytes += elements * static_cast<double>(kernels::DTypeSize(out.dtype));
    absl::StrAppend(&parts, parts.empty() ? "" : " + ", out.name, " ",
                    kernels::DTypeName(out.dtype), " ", kernels::ShapeString(*out.shape));
  }
  if (total_bytes > static_cast<double>(limits.max_message_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("response of %.4g bytes (%s) is over --max_message_bytes=%d", total_bytes,
                        parts, limits.max_message_bytes));
  }
  return absl::OkStatus();
}

grpc::Status HandleSinusoidal(const HandlerContext& ctx, const v1::SinusoidalRequest& req,
                              v1::SinusoidalResponse* resp) {
  return ToGrpcStatus(Sinusoidal(ctx, req, resp));
}

grpc::Status HandleAddPositionEncoding(const HandlerContext& ctx,
                                       const v1::AddPositionEncodingRequest& req,
                                       v1::AddPositionEncodingResponse* resp) {
  return ToGrpcStatus(AddPositionEncoding(ctx, req, resp));
}

grpc::Status HandleRopeCache(const HandlerContext& ctx, const v1::RopeCacheRequest& req,
                             v1::RopeCacheResponse* resp) {
  return ToGrpcStatus(RopeCache(ctx, req, resp));
}

grpc::Status HandleApplyRope(const HandlerContext& ctx, const v1::ApplyRopeRequest& req,
                             v1::ApplyRopeResponse* resp) {
  return ToGrpcStatus(ApplyRope(ctx, req, resp));
}

grpc::Status HandleAlibiSlopes(const HandlerContext& ctx, const v1::AlibiSlopesRequest& req,
                               v1::AlibiSlopesResponse* resp) {
  return ToGrpcStatus(AlibiSlopes(ctx, req, resp));
}

grpc::Status HandleAlibiBias(const HandlerContext& ctx, const v1::AlibiBiasRequest& req,
                             v1::AlibiBiasResponse* resp) {
  return ToGrpcStatus(AlibiBias(ctx, req, resp));
}

grpc::Status HandleRelativeBias(const HandlerContext& ctx, const v1::RelativeBiasRequest& req,
                                v1::RelativeBiasResponse* resp) {
  return ToGrpcStatus(RelativeBias(ctx, req, resp));
}

grpc::Status HandleRelativeEmbedding(const HandlerContext& ctx,
                                     const v1::RelativeEmbeddingRequest& req,
                                     v1::RelativeEmbeddingResponse* resp) {
  return ToGrpcStatus(RelativeEmbedding(ctx, req, resp));
}

grpc::Status HandleGetServerInfo(const HandlerContext& ctx, const v1::GetServerInfoRequest& /*req*/,
                                 v1::GetServerInfoResponse* resp) {
  resp->set_version(POSENC_VERSION);
  resp->set_build(POSENC_BUILD_INFO);
  if (ctx.backend != nullptr) {
    v1::BackendInfo* backend = resp->add_backends();
    backend->set_name(std::string(ctx.backend->name()));
    backend->set_detail(ctx.backend->detail());
    backend->set_is_default(true);
  }
  resp->mutable_limits()->set_max_message_bytes(ctx.limits.max_message_bytes);
  resp->mutable_limits()->set_max_output_elements(ctx.limits.max_output_elements);
  if (ctx.tables != nullptr) {
    for (const TableRegistry::Entry* entry : ctx.tables->List()) {
      v1::TableInfo* info = resp->add_tables();
      info->set_name(entry->name);
      info->set_dtype(ToProtoDType(entry->dtype));
      info->mutable_shape()->Assign(entry->shape.begin(), entry->shape.end());
    }
  }
  return grpc::Status::OK;
}

}  // namespace posenc::server
