#include "server/handlers.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/cancellation.h"
#include "kernels/common/positions.h"
#include "kernels/ops.h"
#include "kernels/rope/frequency_cache.h"
#include "server/admission.h"
#include "server/call_tensors.h"
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
      return absl::InvalidArgumentError(absl::StrCat(
          name_field, ": no table named \"", kernels::Abbreviate(name), "\" (loaded: none)"));
    }
    return ctx.tables->Find(name, name_field);
  }
  // The oneof holding the two: "table" ("learned.table" in AddPositionEncoding).
  const absl::string_view prefix = inline_field.substr(0, inline_field.rfind('.') + 1);
  return absl::InvalidArgumentError(absl::StrCat(
      prefix, "table: a table is required (", inline_field, " or ", name_field, "), got neither"));
}

// The table of a RelativeBias / RelativeEmbedding request: table_inline or table_name.
template <typename Request>
absl::StatusOr<kernels::ConstTensorView> ResolveRequestTable(const HandlerContext& ctx,
                                                             const Request& req) {
  return ResolveTable(ctx, req.has_table_inline(), req.table_inline(),
                      req.table_case() == Request::kTableName, req.table_name(), "table_inline",
                      "table_name");
}

// The query/key extent every bias and relative-embedding request has.
template <typename Request, typename Params>
void CopyQueryKeyExtent(const Request& req, Params& params) {
  params.q_len = req.q_len();
  params.k_len = req.k_len();
  if (req.has_query_offset()) params.query_offset = req.query_offset();
}

// Puts `in`'s bytes (planned as `spec`) where the output goes and returns a view onto them:
// ApplyRope rotates there in place. An input in shared memory stays there (the response names its
// range); an output the request places in shared memory gets the input's bytes copied there
// (unless it is the input's own range). Otherwise, with ctx.consume_requests, the request's bytes
// move into the response (no copy: the request is not read again); without, they are copied.
absl::StatusOr<kernels::TensorView> MoveToResponse(const HandlerContext& ctx, const v1::Tensor& in,
                                                   const kernels::OutputSpec& spec,
                                                   v1::Tensor* out) {
  out->set_dtype(in.dtype());
  *out->mutable_shape() = in.shape();
  CallTensors* tensors = CallTensors::Current();
  const SharedBytes shared_input =
      tensors != nullptr ? tensors->InputData(spec.name) : SharedBytes{};
  if (tensors != nullptr && tensors->HasPlacement(spec.name)) {
    const auto bytes =
        static_cast<int64_t>(
            kernels::ConstTensorView{spec.dtype, spec.shape, nullptr}.NumElements()) *
        kernels::DTypeSize(spec.dtype);
    POSENC_ASSIGN_OR_RETURN(
        const SharedBytes placed,
        tensors->Output(spec.name, bytes, out, kernels::DTypeSize(spec.dtype), Reach::kDevice));
    const char* source = shared_input.data != nullptr ? shared_input.data : in.data().data();
    if (source != placed.data) {
      // Moving the input to its placed range is a host copy: the server copies no device memory.
      if (placed.on_device || shared_input.on_device) {
        return absl::FailedPreconditionError(absl::StrCat(
            "output_shared_memory.", spec.name, ": ", spec.name,
            " is rotated in place; with a CUDA region its output range must be the input's own "
            "range (or leave ",
            spec.name, " out of output_shared_memory)"));
      }
      std::memcpy(placed.data, source, static_cast<size_t>(bytes));
    }
    return kernels::TensorView{spec.dtype, spec.shape, placed.data, placed.on_device};
  }
  if (shared_input.data != nullptr) {
    POSENC_RETURN_IF_ERROR(tensors->WriteInPlace(spec.name));
    *out->mutable_shared_memory() = in.shared_memory();
    return kernels::TensorView{spec.dtype, spec.shape, shared_input.data, shared_input.on_device};
  }
  if (ctx.consume_requests) {
    // The service owns the request object for the duration of the call and hands it over.
    const_cast<v1::Tensor&>(in).mutable_data()->swap(*out->mutable_data());
  } else {
    *out->mutable_data() = in.data();
  }
  return kernels::TensorView{spec.dtype, spec.shape, out->mutable_data()->data()};
}

// The handlers with one output: plans `args`, checks the output `spec` of the plan against the
// limits and runs the plan into `out`.
template <typename Args, typename Plan>
absl::Status PlanAndRun(const HandlerContext& ctx, Args args, absl::StatusOr<Plan> (*plan_fn)(Args),
                        absl::Status (*run_fn)(const kernels::Backend&, const Plan&,
                                               const kernels::TensorView&),
                        kernels::OutputSpec Plan::*spec, v1::Tensor* out) {
  POSENC_ASSIGN_OR_RETURN(Plan plan, plan_fn(std::move(args)));
  POSENC_ASSIGN_OR_RETURN(const kernels::Backend* backend, AdmitOutputs(ctx, {plan.*spec}));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView view,
                          AllocateOutput(plan.*spec, out, Reach::kDevice));
  return run_fn(*backend, plan, view);
}

void CountCacheLookup(const HandlerContext& ctx, const kernels::RopeRunInfo& info) {
  if (ctx.rope_cache != nullptr && ctx.metrics != nullptr)
    ctx.metrics->OnCacheLookup(info.cache_hit);
}

absl::Status Sinusoidal(const HandlerContext& ctx, const v1::SinusoidalRequest& req,
                        v1::SinusoidalResponse* resp) {
  kernels::SinusoidalArgs args;
  POSENC_ASSIGN_OR_RETURN(args.params, ToSinusoidalParams(req.params(), "params"));
  POSENC_ASSIGN_OR_RETURN(args.output_dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_RETURN_IF_ERROR(ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()),
                                        "positions", &args.positions));
  return PlanAndRun(ctx, std::move(args), &kernels::PlanSinusoidal, &kernels::RunSinusoidal,
                    &kernels::SinusoidalPlan::table, resp->mutable_table());
}

absl::Status AddPositionEncoding(const HandlerContext& ctx,
                                 const v1::AddPositionEncodingRequest& req,
                                 v1::AddPositionEncodingResponse* resp) {
  kernels::AddPositionEncodingArgs args;
  POSENC_ASSIGN_OR_RETURN(args.x, ToConstView(req.x(), DTypeClass::kFloat, "x", Reach::kDevice));
  POSENC_RETURN_IF_ERROR(ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()),
                                        "positions", &args.positions));
  kernels::AddPositionEncodingParams& params = args.params;
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
      break;  // the plan names the missing source
  }
  return PlanAndRun(ctx, std::move(args), &kernels::PlanAddPositionEncoding,
                    &kernels::RunAddPositionEncoding, &kernels::AddPositionEncodingPlan::y,
                    resp->mutable_y());
}

absl::Status RopeCache(const HandlerContext& ctx, const v1::RopeCacheRequest& req,
                       v1::RopeCacheResponse* resp) {
  kernels::RopeCacheArgs args;
  RopeConfigNotes notes;
  POSENC_ASSIGN_OR_RETURN(args.config, ToRopeConfig(req.config(), &notes));
  POSENC_ASSIGN_OR_RETURN(args.output_dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_ASSIGN_OR_RETURN(args.layout, ToRopeCacheLayout(req.layout(), "layout"));
  POSENC_RETURN_IF_ERROR(ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()),
                                        "positions", &args.positions));
  POSENC_ASSIGN_OR_RETURN(kernels::RopeCachePlan plan, kernels::PlanRopeCache(std::move(args)));
  // The one-table layouts: one output, and the COMPACT chunks it is built from (scratch).
  POSENC_ASSIGN_OR_RETURN(const kernels::Backend* backend,
                          plan.fused()
                              ? AdmitOutputs(ctx, {plan.cos, plan.inv_freq}, plan.ScratchBytes())
                              : AdmitOutputs(ctx, {plan.cos, plan.sin, plan.inv_freq}));
  v1::Tensor* cos_out =
      plan.layout == kernels::RopeCacheLayout::kFusedCosSin ? resp->mutable_cos_sin()
      : plan.layout == kernels::RopeCacheLayout::kComplex   ? resp->mutable_freqs_cis()
                                                            : resp->mutable_cos();
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView cos,
                          AllocateOutput(plan.cos, cos_out, Reach::kDevice));
  kernels::TensorView sin;
  if (!plan.fused()) {
    POSENC_ASSIGN_OR_RETURN(sin, AllocateOutput(plan.sin, resp->mutable_sin(), Reach::kDevice));
  }
  POSENC_ASSIGN_OR_RETURN(kernels::RopeRunInfo info,
                          kernels::RunRopeCache(*backend, plan, ctx.rope_cache, cos, sin));
  CountCacheLookup(ctx, info);
  FillRopeDerived(plan.config, *info.frequencies, resp->mutable_derived(), &notes);
  return absl::OkStatus();
}

// ApplyRope: q and k are rotated in place where they are (MoveToResponse). Their data left in
// gRPC's received slices (WireTensors: large tensors from a peer on a socket) is rotated there
// and sent back from there, when every tensor of the call is there, no output goes to shared
// memory and a host backend computes; otherwise it is copied into the request first.
absl::Status ApplyRope(const HandlerContext& ctx, const v1::ApplyRopeRequest& req,
                       v1::ApplyRopeResponse* resp) {
  WireTensors* wire = WireTensors::Current();
  v1::WireBytes* q_wire = wire != nullptr ? wire->Find("q") : nullptr;
  v1::WireBytes* k_wire = wire != nullptr ? wire->Find("k") : nullptr;
  // The service owns the request for the call (ctx.consume_requests), as MoveToResponse.
  auto& q_in = const_cast<v1::Tensor&>(req.q());
  auto& k_in = const_cast<v1::Tensor&>(req.k());
  const auto take_whole = [&] {
    if (q_wire != nullptr) wire->TakeInto("q", &q_in);
    if (k_wire != nullptr) wire->TakeInto("k", &k_in);
    q_wire = k_wire = nullptr;
  };
  const CallTensors* tensors = CallTensors::Current();
  if (q_wire == nullptr || (k_wire == nullptr && req.has_k()) ||
      (tensors != nullptr && (tensors->HasPlacement("q") || tensors->HasPlacement("k")))) {
    take_whole();
  }
  kernels::ApplyRopeArgs args;
  POSENC_ASSIGN_OR_RETURN(args.q,
                          ToConstView(req.q(), DTypeClass::kFloat, "q", Reach::kDevice, q_wire));
  if (req.has_k()) {
    POSENC_ASSIGN_OR_RETURN(args.k,
                            ToConstView(req.k(), DTypeClass::kFloat, "k", Reach::kDevice, k_wire));
  }
  RopeConfigNotes notes;
  POSENC_ASSIGN_OR_RETURN(args.config, ToRopeConfig(req.config(), &notes));
  POSENC_ASSIGN_OR_RETURN(args.layout, ToTensorLayout(req.layout(), "layout"));
  POSENC_RETURN_IF_ERROR(ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()),
                                        "positions", &args.positions));
  POSENC_ASSIGN_OR_RETURN(kernels::ApplyRopePlan plan, kernels::PlanApplyRope(std::move(args)));
  POSENC_ASSIGN_OR_RETURN(const kernels::Backend* backend,
                          plan.has_k() ? AdmitOutputs(ctx, {plan.q, plan.k, plan.inv_freq})
                                       : AdmitOutputs(ctx, {plan.q, plan.inv_freq}));
  if (backend->reads_device_memory()) take_whole();
  kernels::RopeRunInfo info;
  if (q_wire != nullptr) {
    const google::protobuf::Descriptor* type = v1::ApplyRopeResponse::descriptor();
    resp->mutable_q()->set_dtype(req.q().dtype());
    *resp->mutable_q()->mutable_shape() = req.q().shape();
    if (plan.has_k()) {
      resp->mutable_k()->set_dtype(req.k().dtype());
      *resp->mutable_k()->mutable_shape() = req.k().shape();
    }
    POSENC_ASSIGN_OR_RETURN(
        info, kernels::RunApplyRopeInPieces(
                  *backend, plan, ctx.rope_cache, q_wire->pieces,
                  k_wire != nullptr ? kernels::BytePieces(k_wire->pieces) : kernels::BytePieces()));
    wire->SendBack("q", type->FindFieldByNumber(v1::ApplyRopeResponse::kQFieldNumber));
    if (plan.has_k()) {
      wire->SendBack("k", type->FindFieldByNumber(v1::ApplyRopeResponse::kKFieldNumber));
    }
  } else {
    POSENC_ASSIGN_OR_RETURN(const kernels::TensorView q,
                            MoveToResponse(ctx, req.q(), plan.q, resp->mutable_q()));
    kernels::TensorView k;
    if (plan.has_k()) {
      POSENC_ASSIGN_OR_RETURN(k, MoveToResponse(ctx, req.k(), plan.k, resp->mutable_k()));
    }
    POSENC_ASSIGN_OR_RETURN(info, kernels::RunApplyRope(*backend, plan, ctx.rope_cache, q, k));
  }
  CountCacheLookup(ctx, info);
  FillRopeDerived(plan.config, *info.frequencies, resp->mutable_derived(), &notes);
  return absl::OkStatus();
}

absl::Status RerotateKeys(const HandlerContext& ctx, const v1::RerotateKeysRequest& req,
                          v1::RerotateKeysResponse* resp) {
  kernels::RerotateKeysArgs args;
  POSENC_ASSIGN_OR_RETURN(args.k, ToConstView(req.k(), DTypeClass::kFloat, "k", Reach::kDevice));
  if (req.has_delta()) {
    POSENC_ASSIGN_OR_RETURN(args.delta, ToConstView(req.delta(), DTypeClass::kInt, "delta"));
  }
  RopeConfigNotes notes;
  POSENC_ASSIGN_OR_RETURN(args.config, ToRopeConfig(req.config(), &notes));
  POSENC_ASSIGN_OR_RETURN(args.layout, ToTensorLayout(req.layout(), "layout"));
  POSENC_RETURN_IF_ERROR(ToPositionSpec(PositionsOrNull(req.has_positions(), req.positions()),
                                        "positions", &args.positions));
  POSENC_ASSIGN_OR_RETURN(kernels::RerotateKeysPlan plan,
                          kernels::PlanRerotateKeys(std::move(args)));
  POSENC_ASSIGN_OR_RETURN(const kernels::Backend* backend,
                          AdmitOutputs(ctx, {plan.k, plan.rope.inv_freq}));
  POSENC_ASSIGN_OR_RETURN(kernels::TensorView k,
                          MoveToResponse(ctx, req.k(), plan.k, resp->mutable_k()));
  POSENC_ASSIGN_OR_RETURN(kernels::RopeRunInfo info,
                          kernels::RunRerotateKeys(*backend, plan, ctx.rope_cache, k));
  CountCacheLookup(ctx, info);
  FillRopeDerived(plan.rope.config, *info.frequencies, resp->mutable_derived(), &notes);
  return absl::OkStatus();
}

absl::Status MultimodalDecode(const HandlerContext& ctx, const v1::MultimodalPositionsRequest& req,
                              v1::MultimodalPositionsResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(const std::optional<kernels::MultimodalFamily> family,
                          ToDecodeFamily(req));
  POSENC_ASSIGN_OR_RETURN(const kernels::MultimodalDecodeArgs args,
                          ToMultimodalDecodeArgs(req.decode()));
  POSENC_ASSIGN_OR_RETURN(const kernels::MultimodalDecodePlan plan,
                          kernels::PlanMultimodalDecode(args));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {plan.position_ids}));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView ids,
                          AllocateOutput(plan.position_ids, resp->mutable_position_ids()));
  if (family) {
    resp->set_family(v1::WireFromKernel<v1::MultimodalFamily>(*family));
    resp->set_source(std::string(kernels::MultimodalRuleOf(*family).source));
  }
  return kernels::RunMultimodalDecode(plan, ids);
}

absl::Status MultimodalPositions(const HandlerContext& ctx,
                                 const v1::MultimodalPositionsRequest& req,
                                 v1::MultimodalPositionsResponse* resp) {
  if (req.has_decode()) {
    if (req.has_input_ids() || req.sequences_size() > 0) {
      return absl::InvalidArgumentError(
          "decode: a request holds a prompt (input_ids or sequences) or decode steps, not both");
    }
    return MultimodalDecode(ctx, req, resp);
  }
  POSENC_ASSIGN_OR_RETURN(kernels::MultimodalPositionsArgs args, ToMultimodalPositionsArgs(req));
  POSENC_ASSIGN_OR_RETURN(const kernels::MultimodalPositionsPlan plan,
                          kernels::PlanMultimodalPositions(std::move(args)));
  POSENC_RETURN_IF_ERROR(
      CheckOutputLimits(ctx.limits, {plan.position_ids, plan.mrope_position_deltas}));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView ids,
                          AllocateOutput(plan.position_ids, resp->mutable_position_ids()));
  POSENC_ASSIGN_OR_RETURN(
      const kernels::TensorView deltas,
      AllocateOutput(plan.mrope_position_deltas, resp->mutable_mrope_position_deltas()));
  resp->set_family(v1::WireFromKernel<v1::MultimodalFamily>(plan.rule->family));
  resp->set_source(std::string(plan.rule->source));
  return kernels::RunMultimodalPositions(plan, ids, deltas);
}

absl::Status VisionPositions(const HandlerContext& ctx, const v1::VisionPositionsRequest& req,
                             v1::VisionPositionsResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(const kernels::VisionPositionsArgs args, ToVisionPositionsArgs(req));
  POSENC_ASSIGN_OR_RETURN(const kernels::VisionPositionsPlan plan,
                          kernels::PlanVisionPositions(args));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(
      ctx.limits, {plan.position_ids, plan.flat_ids, plan.window_index, plan.cu_window_seqlens}));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView ids,
                          AllocateOutput(plan.position_ids, resp->mutable_position_ids()));
  kernels::TensorView flat, window, cu;
  if (plan.has_flat_ids()) {
    POSENC_ASSIGN_OR_RETURN(flat, AllocateOutput(plan.flat_ids, resp->mutable_flat_ids()));
  }
  if (plan.has_windows()) {
    POSENC_ASSIGN_OR_RETURN(window,
                            AllocateOutput(plan.window_index, resp->mutable_window_index()));
    POSENC_ASSIGN_OR_RETURN(
        cu, AllocateOutput(plan.cu_window_seqlens, resp->mutable_cu_window_seqlens()));
  }
  resp->set_tower(v1::WireFromKernel<v1::VisionTower>(plan.tower));
  return kernels::RunVisionPositions(plan, ids, flat, window, cu);
}

// max_bias, default 8; the plans check its range.
absl::StatusOr<double> MaxBias(bool has, double value) {
  if (!has) return 8.0;
  POSENC_RETURN_IF_ERROR(CheckFinite(value, "max_bias"));
  return value;
}

absl::Status AlibiSlopes(const HandlerContext& ctx, const v1::AlibiSlopesRequest& req,
                         v1::AlibiSlopesResponse* resp) {
  kernels::AlibiSlopesArgs args;
  args.num_heads = req.num_heads();
  POSENC_ASSIGN_OR_RETURN(args.max_bias, MaxBias(req.has_max_bias(), req.max_bias()));
  POSENC_ASSIGN_OR_RETURN(args.output_dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_ASSIGN_OR_RETURN(kernels::AlibiSlopesPlan plan, kernels::PlanAlibiSlopes(args));
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {plan.slopes}));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView slopes,
                          AllocateOutput(plan.slopes, resp->mutable_slopes()));
  return kernels::RunAlibiSlopes(plan, slopes);
}

absl::Status AlibiBias(const HandlerContext& ctx, const v1::AlibiBiasRequest& req,
                       v1::AlibiBiasResponse* resp) {
  kernels::AlibiBiasArgs args;
  kernels::AlibiBiasParams& params = args.params;
  params.num_heads = req.num_heads();
  CopyQueryKeyExtent(req, params);
  POSENC_ASSIGN_OR_RETURN(params.mode, ToAlibiMode(req.mode(), "mode"));
  POSENC_ASSIGN_OR_RETURN(params.future, ToFutureMode(req.future(), "future"));
  POSENC_ASSIGN_OR_RETURN(params.max_bias, MaxBias(req.has_max_bias(), req.max_bias()));
  POSENC_ASSIGN_OR_RETURN(params.form, ToBiasForm(req.form(), "form"));
  if (req.has_attention_mask()) {
    POSENC_ASSIGN_OR_RETURN(params.attention_mask,
                            ToConstView(req.attention_mask(), DTypeClass::kInt, "attention_mask"));
  }
  POSENC_ASSIGN_OR_RETURN(args.output_dtype, OutputDType(req.output_dtype(), "output_dtype"));
  POSENC_ASSIGN_OR_RETURN(kernels::AlibiBiasPlan plan, kernels::PlanAlibiBias(std::move(args)));
  POSENC_ASSIGN_OR_RETURN(const kernels::Backend* backend,
                          AdmitOutputs(ctx, {plan.bias, plan.slopes}));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView bias,
                          AllocateOutput(plan.bias, resp->mutable_bias(), Reach::kDevice));
  POSENC_ASSIGN_OR_RETURN(const kernels::TensorView slopes,
                          AllocateOutput(plan.slopes, resp->mutable_slopes()));
  return kernels::RunAlibiBias(*backend, plan, bias, slopes);
}

absl::Status RelativeBias(const HandlerContext& ctx, const v1::RelativeBiasRequest& req,
                          v1::RelativeBiasResponse* resp) {
  kernels::RelativeBiasArgs args;
  kernels::RelativeBiasParams& params = args.params;
  CopyQueryKeyExtent(req, params);
  if (req.has_key_offset()) params.key_offset = req.key_offset();
  if (req.has_bidirectional()) params.bidirectional = req.bidirectional();
  if (req.has_num_buckets()) params.num_buckets = req.num_buckets();
  if (req.has_max_distance()) params.max_distance = req.max_distance();
  POSENC_ASSIGN_OR_RETURN(params.form, ToBiasForm(req.form(), "form"));
  if (req.output_dtype() != v1::DTYPE_UNSPECIFIED) {
    POSENC_ASSIGN_OR_RETURN(args.output_dtype,
                            FromProtoDType(req.output_dtype(), DTypeClass::kAny, "output_dtype"));
  }
  // A table is optional for BUCKETS (the plan requires it for the other forms).
  if (params.form != kernels::BiasForm::kBuckets ||
      req.table_case() != v1::RelativeBiasRequest::TABLE_NOT_SET) {
    POSENC_ASSIGN_OR_RETURN(params.table, ResolveRequestTable(ctx, req));
  }
  return PlanAndRun(ctx, std::move(args), &kernels::PlanRelativeBias, &kernels::RunRelativeBias,
                    &kernels::RelativeBiasPlan::bias, resp->mutable_bias());
}

absl::Status RelativeEmbedding(const HandlerContext& ctx, const v1::RelativeEmbeddingRequest& req,
                               v1::RelativeEmbeddingResponse* resp) {
  kernels::RelativeEmbeddingArgs args;
  kernels::RelativeEmbeddingParams& params = args.params;
  CopyQueryKeyExtent(req, params);
  params.max_relative = req.max_relative();
  if (req.has_key_offset()) params.key_offset = req.key_offset();
  POSENC_ASSIGN_OR_RETURN(params.table, ResolveRequestTable(ctx, req));
  POSENC_ASSIGN_OR_RETURN(args.output_dtype, OutputDType(req.output_dtype(), "output_dtype"));
  return PlanAndRun(ctx, std::move(args), &kernels::PlanRelativeEmbedding,
                    &kernels::RunRelativeEmbedding, &kernels::RelativeEmbeddingPlan::embeddings,
                    resp->mutable_embeddings());
}

}  // namespace

namespace {

// CheckOutputLimits without the admission: the planned outputs' total bytes.
absl::StatusOr<int64_t> CheckOutputBytes(const Limits& limits,
                                         std::initializer_list<PlannedOutput> outputs) {
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
    // An output in the caller's shared memory is neither in the response nor allocated here.
    const CallTensors* tensors = CallTensors::Current();
    if (tensors != nullptr && tensors->InSharedMemory(out.name)) continue;
    total_bytes += elements * static_cast<double>(kernels::DTypeSize(out.dtype));
    absl::StrAppend(&parts, parts.empty() ? "" : " + ", out.name, " ",
                    kernels::DTypeName(out.dtype), " ", kernels::ShapeString(*out.shape));
  }
  if (total_bytes > static_cast<double>(limits.max_message_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("response of %.4g bytes (%s) is over --max_message_bytes=%d", total_bytes,
                        parts, limits.max_message_bytes));
  }
  return static_cast<int64_t>(total_bytes);
}

}  // namespace

absl::Status CheckOutputLimits(const Limits& limits, std::initializer_list<PlannedOutput> outputs) {
  POSENC_ASSIGN_OR_RETURN(const int64_t bytes, CheckOutputBytes(limits, outputs));
  // Within the limits: the call's admission (bytes in flight, heavy-call slots) comes last.
  return AdmitCurrentCall(bytes);
}

absl::StatusOr<const kernels::Backend*> AdmitOutputs(const HandlerContext& ctx,
                                                     std::initializer_list<PlannedOutput> outputs,
                                                     int64_t scratch_bytes) {
  POSENC_ASSIGN_OR_RETURN(const int64_t bytes, CheckOutputBytes(ctx.limits, outputs));
  // A call with tensors in device memory (CUDA regions) stays on the device backend.
  const CallTensors* tensors = CallTensors::Current();
  const kernels::Backend& backend =
      ctx.backend->For(bytes, tensors != nullptr && tensors->OnDevice());
  if (&backend != ctx.backend && ctx.on_backend_unusable) {
    if (absl::Status usable = ctx.backend->Usable(); !usable.ok()) ctx.on_backend_unusable(usable);
  }
  POSENC_RETURN_IF_ERROR(AdmitCurrentCall(bytes, backend.HostStagingBytes(bytes) + scratch_bytes));
  NoteCurrentCallBackend(backend.name());
  if (ctx.metrics != nullptr) ctx.metrics->OnBackendCall(backend.name());
  return &backend;
}

namespace {

absl::Status GetServerInfo(const HandlerContext& ctx, const v1::GetServerInfoRequest& /*req*/,
                           v1::GetServerInfoResponse* resp) {
  resp->set_version(POSENC_VERSION);
  resp->set_build(POSENC_BUILD_INFO);
  for (const kernels::Backend* b : {ctx.backend, ctx.backend->host()}) {
    if (b == nullptr) continue;
    v1::BackendInfo* backend = resp->add_backends();
    backend->set_name(std::string(b->name()));
    backend->set_detail(b->detail());
    backend->set_is_default(b == ctx.backend);
    backend->set_small_call_bytes(b->small_call_bytes());
  }
  resp->set_cuda_built_in(kernels::CudaBuiltIn());
  for (const kernels::CudaDeviceInfo& d : ctx.devices) {
    v1::DeviceInfo* device = resp->add_devices();
    device->set_index(d.index);
    device->set_name(d.name);
    device->set_total_memory_bytes(d.total_memory_bytes);
    device->set_compute_capability(
        absl::StrCat(d.compute_capability_major, ".", d.compute_capability_minor));
    device->set_driver_version(d.driver_version);
    device->set_runtime_version(d.runtime_version);
    device->set_in_use(d.index == ctx.cuda_device);
  }
  resp->mutable_limits()->set_max_message_bytes(ctx.limits.max_message_bytes);
  resp->mutable_limits()->set_max_output_elements(ctx.limits.max_output_elements);
  resp->mutable_limits()->set_max_inflight_bytes(ctx.limits.max_inflight_bytes);
  resp->mutable_limits()->set_max_heavy_calls(ctx.limits.max_heavy_calls);
  if (ctx.shared_memory != nullptr) {
    const SharedMemoryOptions& shm = ctx.shared_memory->options();
    resp->mutable_limits()->set_shared_memory_allowed(shm.allowed);
    resp->mutable_limits()->set_max_shared_memory_regions(shm.max_regions);
    resp->mutable_limits()->set_max_shared_memory_bytes(shm.max_bytes);
  }
  if (ctx.tables != nullptr) {
    for (const TableRegistry::Entry* entry : ctx.tables->List()) {
      v1::TableInfo* info = resp->add_tables();
      info->set_name(entry->name);
      info->set_dtype(ToProtoDType(entry->dtype));
      info->mutable_shape()->Assign(entry->shape.begin(), entry->shape.end());
    }
  }
  return absl::OkStatus();
}

absl::Status DescribeRope(const HandlerContext& ctx, const v1::DescribeRopeRequest& req,
                          v1::DescribeRopeResponse* resp) {
  RopeConfigNotes notes;
  std::vector<hf::SubmoduleRope> submodules;
  POSENC_ASSIGN_OR_RETURN(std::vector<hf::LayerRope> groups,
                          ToLayerRopeConfigs(req.config(), &notes, &submodules));
  // No tensors: d/2 frequencies per group (head_dim is capped); cancellation and admission only.
  POSENC_RETURN_IF_ERROR(CheckOutputLimits(ctx.limits, {}));
  int64_t num_layers = 0;
  for (const hf::LayerRope& group : groups) {
    POSENC_ASSIGN_OR_RETURN(kernels::RopeFrequencies freqs,
                            kernels::ComputeRopeFrequencies(group.config, /*max_position=*/-1));
    FillRopeLayerGroup(group, freqs, resp->add_groups());
    num_layers += static_cast<int64_t>(group.layers.size());
  }
  for (const hf::SubmoduleRope& sub : submodules) {
    POSENC_ASSIGN_OR_RETURN(kernels::RopeFrequencies freqs,
                            kernels::ComputeRopeFrequencies(sub.config, /*max_position=*/-1));
    FillRopeSubmodule(sub, freqs, resp->add_submodules());
  }
  resp->set_model_type(notes.model_type);
  for (const std::string& w : notes.warnings) resp->add_warnings(w);
  resp->set_num_layers(num_layers);
  return absl::OkStatus();
}

// The shared-memory registry of the server (FAILED_PRECONDITION when it has none).
absl::StatusOr<SharedMemoryRegistry*> Registry(const HandlerContext& ctx) {
  if (ctx.shared_memory == nullptr) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start it with --allow_shared_memory)");
  }
  return ctx.shared_memory;
}

absl::Status RegisterSharedMemory(const HandlerContext& ctx,
                                  const v1::RegisterSharedMemoryRequest& req,
                                  v1::RegisterSharedMemoryResponse* /*resp*/) {
  POSENC_ASSIGN_OR_RETURN(SharedMemoryRegistry * registry, Registry(ctx));
  return registry->Register(req.name(), req.key(), req.offset(), req.byte_size());
}

absl::Status RegisterCudaSharedMemory(const HandlerContext& ctx,
                                      const v1::RegisterCudaSharedMemoryRequest& req,
                                      v1::RegisterCudaSharedMemoryResponse* /*resp*/) {
  POSENC_ASSIGN_OR_RETURN(SharedMemoryRegistry * registry, Registry(ctx));
  const int compute_device = ctx.backend->reads_device_memory() ? ctx.cuda_device : -1;
  return registry->RegisterCuda(req.name(), req.raw_handle(), req.device_id(), req.byte_size(),
                                compute_device);
}

// A request's kind filter (UNSPECIFIED: every kind).
absl::StatusOr<std::optional<RegionKind>> ToRegionKind(v1::SharedMemoryKind kind) {
  switch (kind) {
    case v1::SHARED_MEMORY_KIND_UNSPECIFIED: return std::optional<RegionKind>();
    case v1::SHARED_MEMORY_KIND_SYSTEM: return std::optional<RegionKind>(RegionKind::kSystem);
    case v1::SHARED_MEMORY_KIND_CUDA: return std::optional<RegionKind>(RegionKind::kCuda);
    default: return UnknownEnumError(kind, v1::SharedMemoryKind_descriptor(), "kind");
  }
}

absl::Status UnregisterSharedMemory(const HandlerContext& ctx,
                                    const v1::UnregisterSharedMemoryRequest& req,
                                    v1::UnregisterSharedMemoryResponse* /*resp*/) {
  POSENC_ASSIGN_OR_RETURN(SharedMemoryRegistry * registry, Registry(ctx));
  POSENC_ASSIGN_OR_RETURN(const std::optional<RegionKind> kind, ToRegionKind(req.kind()));
  return registry->Unregister(req.name(), kind);
}

absl::Status SharedMemoryStatus(const HandlerContext& ctx, const v1::SharedMemoryStatusRequest& req,
                                v1::SharedMemoryStatusResponse* resp) {
  POSENC_ASSIGN_OR_RETURN(SharedMemoryRegistry * registry, Registry(ctx));
  POSENC_ASSIGN_OR_RETURN(const std::optional<RegionKind> kind, ToRegionKind(req.kind()));
  POSENC_ASSIGN_OR_RETURN(const std::vector<SharedMemoryRegionInfo> regions,
                          registry->Status(req.name(), kind));
  for (const SharedMemoryRegionInfo& info : regions) {
    v1::SharedMemoryRegionStatus* out = resp->add_regions();
    out->set_name(info.name);
    out->set_key(info.key);
    out->set_offset(info.offset);
    out->set_byte_size(info.byte_size);
    out->set_broken(info.broken);
    out->set_kind(info.kind == RegionKind::kCuda ? v1::SHARED_MEMORY_KIND_CUDA
                                                 : v1::SHARED_MEMORY_KIND_SYSTEM);
    out->set_device_id(info.device);
  }
  return absl::OkStatus();
}

// ---- AnalyzeEncoding ------------------------------------------------------------------------

// A learned table from its row table_offset on (position p reads row p + table_offset).
absl::Status ToAnalysisLearned(const HandlerContext& ctx, const v1::LearnedTable& learned,
                               kernels::ConstTensorView* out) {
  POSENC_ASSIGN_OR_RETURN(
      *out, ResolveTable(ctx, learned.has_table_inline(), learned.table_inline(),
                         learned.table_case() == v1::LearnedTable::kTableName, learned.table_name(),
                         "learned.table_inline", "learned.table_name"));
  const int64_t offset = learned.table_offset();
  if (out->shape.size() != 2) return absl::OkStatus();  // the plan names the shape
  if (offset < 0 || offset >= out->shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("learned.table_offset: expected 0 .. ",
                                                   out->shape[0] - 1,
                                                   " (the table's rows - 1), got ", offset));
  }
  out->data =
      static_cast<const char*>(out->data) + offset * out->shape[1] * kernels::DTypeSize(out->dtype);
  out->shape[0] -= offset;
  return absl::OkStatus();
}

absl::Status ToAnalysisAlibi(const v1::AlibiAnalysis& in, kernels::AlibiBiasParams* out) {
  out->num_heads = in.num_heads();
  if (in.has_max_bias()) {
    POSENC_RETURN_IF_ERROR(CheckFinite(in.max_bias(), "alibi.max_bias"));
    out->max_bias = in.max_bias();
  }
  POSENC_ASSIGN_OR_RETURN(out->mode, ToAlibiMode(in.mode(), "alibi.mode"));
  POSENC_ASSIGN_OR_RETURN(out->future, ToFutureMode(in.future(), "alibi.future"));
  return absl::OkStatus();
}

absl::Status ToAnalysisT5(const HandlerContext& ctx, const v1::T5Analysis& in,
                          kernels::T5AnalysisParams* out) {
  if (in.has_bidirectional()) out->bidirectional = in.bidirectional();
  if (in.has_num_buckets()) out->num_buckets = in.num_buckets();
  if (in.has_max_distance()) out->max_distance = in.max_distance();
  if (in.table_case() == v1::T5Analysis::TABLE_NOT_SET) return absl::OkStatus();
  POSENC_ASSIGN_OR_RETURN(
      out->table, ResolveTable(ctx, in.has_table_inline(), in.table_inline(),
                               in.table_case() == v1::T5Analysis::kTableName, in.table_name(),
                               "t5.table_inline", "t5.table_name"));
  return absl::OkStatus();
}

absl::Status ToAnalysisEncoding(const HandlerContext& ctx, const v1::AnalyzeEncodingRequest& req,
                                kernels::AnalysisEncoding* e) {
  using Family = kernels::AnalysisFamily;
  switch (req.encoding_case()) {
    case v1::AnalyzeEncodingRequest::kSinusoidal: {
      e->family = Family::kSinusoidal;
      POSENC_ASSIGN_OR_RETURN(e->sinusoidal, ToSinusoidalParams(req.sinusoidal(), "sinusoidal"));
      return absl::OkStatus();
    }
    case v1::AnalyzeEncodingRequest::kLearned:
      e->family = Family::kLearned;
      return ToAnalysisLearned(ctx, req.learned(), &e->learned);
    case v1::AnalyzeEncodingRequest::kConfig: {
      e->family = Family::kRope;
      POSENC_ASSIGN_OR_RETURN(e->rope, ToRopeConfig(req.config()));
      return absl::OkStatus();
    }
    case v1::AnalyzeEncodingRequest::kAlibi:
      e->family = Family::kAlibi;
      return ToAnalysisAlibi(req.alibi(), &e->alibi);
    case v1::AnalyzeEncodingRequest::kT5:
      e->family = Family::kT5;
      return ToAnalysisT5(ctx, req.t5(), &e->t5);
    case v1::AnalyzeEncodingRequest::ENCODING_NOT_SET: break;
  }
  return absl::InvalidArgumentError(
      "encoding: expected one of sinusoidal, learned, config, alibi or t5, got none");
}

// The range against --max_output_elements (the positions one call may compute), then the
// cancellation and the admission of what the run allocates at most (plan.working_bytes).
absl::Status AdmitAnalysis(const HandlerContext& ctx, const kernels::AnalysisPlan& plan) {
  if (plan.args.count > ctx.limits.max_output_elements) {
    return absl::ResourceExhaustedError(
        absl::StrCat("count: ", plan.args.count,
                     " positions, over --max_output_elements=", ctx.limits.max_output_elements));
  }
  if (const kernels::Cancellation* cancel = kernels::CurrentCancellation(); cancel != nullptr) {
    POSENC_RETURN_IF_ERROR(cancel->Check());
  }
  return AdmitCurrentCall(plan.working_bytes);
}

absl::Status AnalyzeEncoding(const HandlerContext& ctx, const v1::AnalyzeEncodingRequest& req,
                             v1::AnalyzeEncodingResponse* resp) {
  kernels::AnalysisArgs args;
  POSENC_RETURN_IF_ERROR(ToAnalysisEncoding(ctx, req, &args.encoding));
  POSENC_RETURN_IF_ERROR(ToAnalysisOptions(req, &args));
  if (req.has_embeddings()) {
    POSENC_ASSIGN_OR_RETURN(args.embeddings,
                            ToConstView(req.embeddings(), DTypeClass::kFloat, "embeddings"));
  }
  if (req.has_keys()) {
    POSENC_ASSIGN_OR_RETURN(args.keys, ToConstView(req.keys(), DTypeClass::kFloat, "keys"));
  }
  POSENC_ASSIGN_OR_RETURN(kernels::AnalysisPlan plan, kernels::PlanAnalysis(std::move(args)));
  POSENC_RETURN_IF_ERROR(AdmitAnalysis(ctx, plan));
  // Chunks of positions, on the host backend (a device backend's chunks would be small calls).
  const kernels::Backend& backend =
      ctx.backend->host() != nullptr ? *ctx.backend->host() : *ctx.backend;
  NoteCurrentCallBackend(backend.name());
  POSENC_ASSIGN_OR_RETURN(kernels::AnalysisResult result, kernels::RunAnalysis(backend, plan));
  FillAnalysis(plan, result, resp);
  return absl::OkStatus();
}

}  // namespace

// Every handler runs with the call's tensors (server/call_tensors.h): inputs and outputs in
// shared memory, checked again after the compute.
template <typename Request, typename Response>
grpc::Status RunWithCallTensors(absl::Status (*method)(const HandlerContext&, const Request&,
                                                       Response*),
                                const HandlerContext& ctx, const Request& req, Response* resp) {
  const OutputPlacements* placements = nullptr;
  if constexpr (requires { req.output_shared_memory(); }) placements = &req.output_shared_memory();
  CallTensors tensors(ctx.shared_memory, placements);
  const ScopedCallTensors scoped(&tensors);
  absl::Status status = method(ctx, req, resp);
  if (status.ok()) status = tensors.Finish();
  return ToGrpcStatus(status);
}

#define POSENC_DEFINE_HANDLER_(Method)                                                           \
  grpc::Status Handle##Method(const HandlerContext& ctx, const v1::Method##Request& req,         \
                              v1::Method##Response* resp) {                                      \
    return RunWithCallTensors(&Method, ctx, req, resp); /* NOLINT(bugprone-macro-parentheses) */ \
  }
POSENC_FOR_EACH_RPC(POSENC_DEFINE_HANDLER_)
#undef POSENC_DEFINE_HANDLER_

}  // namespace posenc::server
