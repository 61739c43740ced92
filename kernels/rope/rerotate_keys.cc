// RerotateKeys: the plan (the delta's shape against the token grid) and the run: two ApplyRope
// passes, the positive deltas forward and the negative ones inverse (rerotate_keys.h).
#include "kernels/rope/rerotate_keys.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

// The delta shapes the grid takes, after the leading [A]: "[], [B] or [B, S]".
std::string AcceptedShapes(const ApplyRopePlan& rope, bool per_sequence_packed, int64_t axes) {
  const std::string lead = axes > 1 ? absl::StrCat(axes, ", ") : "";
  const std::string scalar = axes > 1 ? absl::StrCat("[", axes, "]") : "[]";
  if (rope.positions.grid.kind == TokenGrid::Kind::kPacked) {
    return absl::StrCat(scalar, ", [", lead, rope.tokens, "]",
                        per_sequence_packed
                            ? absl::StrCat(" or [", lead, rope.positions.spec.cu_seqlens.size() - 1,
                                           "] (one per sequence)")
                            : "");
  }
  return absl::StrCat(scalar, ", [", lead, rope.batch, "] or [", lead, rope.batch, ", ", rope.seq,
                      "]");
}

absl::Status PlanDelta(RerotateKeysPlan* plan) {
  const ConstTensorView& d = plan->delta;
  if (d.data == nullptr) return Invalid("delta", "required (INT32/INT64 position shifts)");
  if (!IsIntDType(d.dtype)) {
    return Invalid("delta",
                   absl::StrCat("expected dtype INT32 or INT64, got ", DTypeName(d.dtype)));
  }
  const ApplyRopePlan& rope = plan->rope;
  const bool packed = rope.positions.grid.kind == TokenGrid::Kind::kPacked;
  const bool cu = packed && rope.positions.spec.kind == PositionSpec::Kind::kCuSeqlens;
  Shape s = d.shape;
  if (plan->axes > 1) {
    if (s.empty() || s[0] != plan->axes) {
      return Invalid("delta",
                     absl::StrCat("the config reads ", plan->axes,
                                  " position axes: expected a leading axis of ", plan->axes,
                                  " (a delta per axis), got shape ", ShapeString(d.shape)));
    }
    s.erase(s.begin());
  }
  if (s.empty()) {
    plan->per = RerotateKeysPlan::Per::kCall;
  } else if (!packed && s.size() == 2 && s[0] == rope.batch && s[1] == rope.seq) {
    plan->per = RerotateKeysPlan::Per::kToken;
  } else if (!packed && s.size() == 1 && s[0] == rope.batch) {
    plan->per = RerotateKeysPlan::Per::kSequence;
  } else if (packed && s.size() == 1 && s[0] == rope.tokens) {
    plan->per = RerotateKeysPlan::Per::kToken;
  } else if (cu && s.size() == 1 &&
             s[0] == static_cast<int64_t>(rope.positions.spec.cu_seqlens.size()) - 1) {
    plan->per = RerotateKeysPlan::Per::kSequence;
    plan->cu_seqlens = rope.positions.spec.cu_seqlens;
  } else {
    return Invalid("delta", absl::StrCat("expected shape ", AcceptedShapes(rope, cu, plan->axes),
                                         ", got ", ShapeString(d.shape)));
  }
  return absl::OkStatus();
}

// Token t's delta on `axis`.
int64_t DeltaAt(const RerotateKeysPlan& plan, int64_t t, int64_t axis) {
  int64_t per_axis = 1;
  int64_t i = 0;
  switch (plan.per) {
    case RerotateKeysPlan::Per::kCall: break;
    case RerotateKeysPlan::Per::kToken:
      per_axis = plan.rope.tokens;
      i = t;
      break;
    case RerotateKeysPlan::Per::kSequence:
      if (plan.cu_seqlens.empty()) {
        per_axis = plan.rope.batch;
        i = t / plan.rope.seq;
      } else {
        per_axis = static_cast<int64_t>(plan.cu_seqlens.size()) - 1;
        i = std::upper_bound(plan.cu_seqlens.begin(), plan.cu_seqlens.end(), t) -
            plan.cu_seqlens.begin() - 1;
      }
      break;
  }
  return LoadAsInt64(plan.delta.data, plan.delta.dtype, axis * per_axis + i);
}

// The two passes: |delta| of the forward (positive) and inverse (negative) rotations, each
// token valid in a pass only where one of its axes moves that way.
struct Passes {
  ResolvedPositions forward, inverse;
  int64_t max_target = -1;
};

absl::StatusOr<Passes> SplitDeltas(const RerotateKeysPlan& plan, const ResolvedPositions& p) {
  Passes out;
  for (ResolvedPositions* pass : {&out.forward, &out.inverse}) {
    pass->grid = p.grid;
    pass->num_tokens = p.num_tokens;
    pass->components = p.components;
    pass->pos.assign(p.pos.size(), 0);
    pass->valid.assign(static_cast<size_t>(p.num_tokens), 0);
  }
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    if (!p.IsValid(t)) continue;  // padding passes through
    for (int64_t a = 0; a < p.components; ++a) {
      const int64_t from = p.At(t, a);
      const int64_t delta = DeltaAt(plan, t, plan.axes > 1 ? a : 0);
      // |delta| <= 2^31 - 1 first: the sum then cannot overflow.
      const bool small = delta >= -kMaxPosition && delta <= kMaxPosition;
      const int64_t to = small ? from + delta : -1;
      if (to < 0 || to > kMaxPosition) {
        return Invalid(
            "delta",
            absl::StrCat("token ", t, p.components > 1 ? absl::StrCat(" (axis ", a, ")") : "",
                         " at position ", from, " moves by ", delta,
                         ", expected a target position in [0, 2^31)"));
      }
      out.max_target = std::max(out.max_target, to);
      if (delta == 0) continue;
      ResolvedPositions& pass = delta > 0 ? out.forward : out.inverse;
      const int64_t magnitude = delta > 0 ? delta : -delta;
      pass.pos[a * p.num_tokens + t] = magnitude;
      pass.valid[t] = 1;
      pass.max_position = std::max(pass.max_position, magnitude);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RerotateKeysPlan> PlanRerotateKeys(RerotateKeysArgs args) {
  if (args.config.inverse) {
    return Invalid("config.inverse",
                   "RerotateKeys moves rotated keys by delta (a negative delta moves them back): "
                   "expected false, got true");
  }
  RerotateKeysPlan plan;
  // The keys keep the attention factor of their first rotation; DEEPSEEK keys are NEOX-ordered.
  args.config.apply_attention_factor = false;
  if (args.config.style == RopeStyle::kDeepseek) args.config.style = RopeStyle::kNeox;
  POSENC_ASSIGN_OR_RETURN(plan.rope, PlanApplyRope({.config = std::move(args.config),
                                                    .layout = args.layout,
                                                    .q = args.k,
                                                    .positions = std::move(args.positions),
                                                    .q_field = "k"}));
  plan.k = plan.rope.q;
  plan.axes = RopePositionAxes(plan.rope.config);
  plan.delta = args.delta;
  POSENC_RETURN_IF_ERROR(PlanDelta(&plan));
  return plan;
}

absl::StatusOr<RopeRunInfo> RunRerotateKeys(const Backend& backend, const RerotateKeysPlan& plan,
                                            RopeFrequencyCache* cache, const TensorView& k) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"k", k}}));
  POSENC_ASSIGN_OR_RETURN(ResolvedPositions now, ResolvePositions(plan.rope.positions));
  POSENC_ASSIGN_OR_RETURN(Passes passes, SplitDeltas(plan, now));
  POSENC_ASSIGN_OR_RETURN(
      RopeRunInputs in,
      PrepareRopeRun(std::move(passes.forward), passes.max_target, plan.rope.config, cache));
  if (!plan.rope.config.nope) {
    const RopeFrequencies& freqs = *in.info.frequencies;
    if (in.positions.max_position > 0) {
      POSENC_RETURN_IF_ERROR(backend.ApplyRope(plan.rope, freqs, in.positions, k, TensorView{}));
    }
    if (passes.inverse.max_position > 0) {
      ApplyRopePlan inverse = plan.rope;
      inverse.config.inverse = true;
      POSENC_RETURN_IF_ERROR(backend.ApplyRope(inverse, freqs, passes.inverse, k, TensorView{}));
    }
  }
  return FinishRopeRun(std::move(in), cache);
}

}  // namespace posenc::kernels
