// ApplyRope: the plan (every check of the op, the strides of each layout) and the run.
#include "kernels/rope/apply_rope.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

const char* LayoutName(TensorLayout layout) {
  switch (layout) {
    case TensorLayout::kBSHD: return "BSHD [batch, seq, heads, head_dim]";
    case TensorLayout::kBHSD: return "BHSD [batch, heads, seq, head_dim]";
    case TensorLayout::kTHD: return "THD [tokens, heads, head_dim]";
  }
  return "";
}

absl::Status CheckTensor(absl::string_view name, const ConstTensorView& t, TensorLayout layout) {
  const size_t rank = layout == TensorLayout::kTHD ? 3 : 4;
  if (!IsFloatDType(t.dtype)) {
    return Invalid(name, absl::StrCat("expected dtype FLOAT32, FLOAT16, BFLOAT16 or FLOAT64, got ",
                                      DTypeName(t.dtype)));
  }
  if (t.shape.size() != rank) {
    return Invalid(name, absl::StrCat("expected rank ", rank, " for layout ", LayoutName(layout),
                                      ", got shape ", ShapeString(t.shape)));
  }
  for (int64_t v : t.shape) {
    if (v <= 0) {
      return Invalid(
          name, absl::StrCat("expected every dimension > 0, got shape ", ShapeString(t.shape)));
    }
  }
  return absl::OkStatus();
}

// A q or k tensor's (batch, seq, heads, head_dim) and strides in `layout`.
struct TensorDims {
  std::array<int64_t, 3> batch_seq_dim;  // batch, seq (tokens for THD), head_dim
  int64_t heads = 0;
  HeadStrides strides;
};

TensorDims Dims(const Shape& s, TensorLayout layout) {
  TensorDims d;
  switch (layout) {
    case TensorLayout::kBSHD:  // [B, S, H, D]
      d.batch_seq_dim = {s[0], s[1], s[3]};
      d.heads = s[2];
      d.strides = {s[1] * s[2] * s[3], s[2] * s[3], s[3]};
      break;
    case TensorLayout::kBHSD:  // [B, H, S, D]
      d.batch_seq_dim = {s[0], s[2], s[3]};
      d.heads = s[1];
      d.strides = {s[1] * s[2] * s[3], s[3], s[2] * s[3]};
      break;
    case TensorLayout::kTHD:  // [T, H, D]
      d.batch_seq_dim = {1, s[0], s[2]};
      d.heads = s[1];
      d.strides = {0, s[1] * s[2], s[2]};
      break;
  }
  return d;
}

}  // namespace

absl::StatusOr<ApplyRopePlan> PlanApplyRope(ApplyRopeArgs args) {
  POSENC_RETURN_IF_ERROR(CheckTensor(args.q_field, args.q, args.layout));
  ApplyRopePlan plan;
  const TensorDims qd = Dims(args.q.shape, args.layout);
  plan.dtype = args.q.dtype;
  plan.batch = qd.batch_seq_dim[0];
  plan.seq = qd.batch_seq_dim[1];
  plan.head_dim = qd.batch_seq_dim[2];
  plan.q_heads = qd.heads;
  plan.q_strides = qd.strides;
  plan.q = {args.q_field, args.q.dtype, args.q.shape};
  // Validated shapes fit a message, so these products do not overflow; the element count of q
  // is what NumElements checked on the wire.
  if (!CheckedMul(plan.batch, plan.seq, &plan.tokens)) {
    return Invalid(args.q_field, "batch * seq overflows");
  }
  if (args.k.data != nullptr) {
    POSENC_RETURN_IF_ERROR(CheckTensor("k", args.k, args.layout));
    if (args.k.dtype != args.q.dtype) {
      return Invalid("k", absl::StrCat("expected q's dtype ", DTypeName(args.q.dtype), ", got ",
                                       DTypeName(args.k.dtype)));
    }
    const TensorDims kd = Dims(args.k.shape, args.layout);
    if (kd.batch_seq_dim != qd.batch_seq_dim) {
      return Invalid("k", absl::StrCat("expected the batch, sequence and head_dim of q ",
                                       ShapeString(args.q.shape), " (heads may differ), got ",
                                       ShapeString(args.k.shape)));
    }
    plan.k_heads = kd.heads;
    plan.k_strides = kd.strides;
    plan.k = {"k", args.k.dtype, args.k.shape};
  }
  RopeConfig& config = args.config;
  if (config.head_dim == 0) {
    config.head_dim = plan.head_dim;
  } else if (config.head_dim != plan.head_dim) {
    return Invalid("config.head_dim", absl::StrCat("expected ", args.q_field, "'s last dimension ",
                                                   plan.head_dim, ", got ", config.head_dim));
  }
  POSENC_RETURN_IF_ERROR(ValidateRopeConfig(config));
  plan.rotary_dim = config.rotary_dim.value_or(config.head_dim);
  plan.inv_freq = {"derived.inv_freq", DType::kFloat64, {plan.rotary_dim / 2}};
  TokenGrid grid;
  grid.components = RopePositionAxes(config);
  if (args.layout == TensorLayout::kTHD) {
    grid.kind = TokenGrid::Kind::kPacked;
    grid.tokens = plan.seq;
  } else {
    grid.kind = TokenGrid::Kind::kBatchSeq;
    grid.batch = plan.batch;
    grid.seq = plan.seq;
  }
  POSENC_ASSIGN_OR_RETURN(plan.positions, PlanPositions(std::move(args.positions), grid));
  NormalizePositionAxes(&config);
  plan.config = std::move(config);
  return plan;
}

absl::StatusOr<RopeRunInfo> RunApplyRope(const Backend& backend, const ApplyRopePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& q,
                                         const TensorView& k) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"q", q}, {"k", k}}));
  return RunWithFrequencies(plan.positions, plan.config, cache,
                            [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) {
                              // A NoPE layer: q and k pass through untouched.
                              if (plan.config.nope) return absl::OkStatus();
                              return backend.ApplyRope(plan, freqs, positions, q, k);
                            });
}

}  // namespace posenc::kernels
