// The CUDA host side of RopeCache and ApplyRope (see cuda/cuda.h): the angle inputs of one
// request, the fallbacks to the host backend, the launch structs; the kernels are rope/cuda.cu.
#include "kernels/cuda/cuda.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/common/status.h"
#include "kernels/cuda/launch.h"

namespace posenc::kernels::cuda {
namespace {

// What the angle kernels need, packed for one upload: every token's position, or with `seq` > 0
// (ApplyRope) and positions that are each sequence's first plus the token's index in it, only
// those firsts (a [16,4096] call uploads 16 integers, not 65536).
struct AngleInputs {
  cpu::SplitFrequencies w;
  std::vector<int32_t> positions, starts;
  std::vector<int8_t> component;  // empty without M-RoPE
  double scale = 1, sign = 1;
  bool exact_range = true;  // every phase below hd::kMaxExactPhase

  AngleInputs(const RopeConfig& config, const RopeFrequencies& freqs,
              const ResolvedPositions& resolved, int64_t seq = 0)
      : w(freqs.inv_freq) {
    if (resolved.ConsecutiveIn(seq)) {
      for (int64_t t = 0; t < resolved.num_tokens; t += seq) {
        starts.push_back(static_cast<int32_t>(resolved.pos[t]));  // < 2^31: resolved
      }
    } else {
      positions = DevicePositions(resolved);
    }
    const double m = freqs.CosSinScale();
    scale = config.inverse ? 1.0 / m : m;
    sign = config.inverse ? -1.0 : 1.0;
    if (!config.mrope_section.empty()) {
      for (size_t j = 0; j < w.hi.size(); ++j) {
        component.push_back(static_cast<int8_t>(MropeComponent(config, static_cast<int64_t>(j))));
      }
    }
    exact_range = ExactOnDevice(resolved.max_position, 0, w);
  }

  RopeAngles Bind(Request& r, int64_t tokens) {
    RopeAngles a;
    a.w_hi = r.DeviceAs<double>(hi_);
    a.w_lo = r.DeviceAs<double>(lo_);
    a.positions = starts.empty() ? r.DeviceAs<int32_t>(pos_) : nullptr;
    a.starts = starts.empty() ? nullptr : r.DeviceAs<int32_t>(pos_);
    a.component = component.empty() ? nullptr : r.DeviceAs<int8_t>(comp_);
    a.tokens = tokens;
    a.half = static_cast<int64_t>(w.hi.size());
    a.scale = scale;
    a.sign = sign;
    return a;
  }
  void Add(Request& r) {
    hi_ = r.Input(w.hi);
    lo_ = r.Input(w.lo);
    pos_ = r.Input(starts.empty() ? positions : starts);
    if (!component.empty()) comp_ = r.Input(component);
  }

 private:
  int hi_ = -1, lo_ = -1, pos_ = -1, comp_ = -1;
};

}  // namespace

absl::Status RopeCache(const CudaContext& ctx, const RopeCachePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& cos, const TensorView& sin) {
  AngleInputs angles(plan.config, freqs, positions);
  if (!angles.exact_range) {
    TensorView c = cos, s = sin;
    return OnHost(ctx, {&c, &s}, [&] { return ctx.host.RopeCache(plan, freqs, positions, c, s); });
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  angles.Add(*r);
  const int c = r->Output(cos), s = r->Output(sin);
  POSENC_RETURN_IF_ERROR(r->Upload());
  RopeCacheLaunch l;
  l.angles = angles.Bind(*r, positions.num_tokens);
  l.cos = r->Device(c);
  l.sin = r->Device(s);
  l.dtype = static_cast<int>(cos.dtype);
  l.layout = static_cast<int>(plan.layout);
  l.width = plan.width;
  POSENC_RETURN_IF_ERROR(r->Check(LaunchRopeCache(l, r->stream()), "RopeCache kernel"));
  return r->Download();
}

absl::Status ApplyRope(const CudaContext& ctx, const ApplyRopePlan& plan,
                       const RopeFrequencies& freqs, const ResolvedPositions& positions,
                       const TensorView& q, const TensorView& k) {
  const int64_t half = freqs.rotary_dim / 2;
  AngleInputs angles(plan.config, freqs, positions, plan.seq);
  const bool device_ok = angles.exact_range &&
                         !(plan.config.style == RopeStyle::kDeepseek && half > kRopeChunk) &&
                         (plan.q_heads + plan.k_heads) * 2 * kRopeChunk < (int64_t{1} << 31);
  if (!device_ok) {
    TensorView hq = q, hk = k;
    return OnHost(ctx, {&hq, &hk},
                  [&] { return ctx.host.ApplyRope(plan, freqs, positions, hq, hk); });
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  angles.Add(*r);
  const int qi = r->InOut(q);
  const int ki = plan.has_k() ? r->InOut(k) : -1;
  POSENC_RETURN_IF_ERROR(r->Upload());
  ApplyRopeLaunch l;
  l.angles = angles.Bind(*r, plan.tokens);
  l.q = r->Device(qi);
  l.k = ki >= 0 ? r->Device(ki) : nullptr;
  l.dtype = static_cast<int>(plan.dtype);
  l.style = static_cast<int>(plan.config.style);
  l.inverse = plan.config.inverse;
  l.seq = plan.seq;
  l.q_heads = plan.q_heads;
  l.k_heads = plan.has_k() ? plan.k_heads : 0;
  l.q_batch = plan.q_strides.batch;
  l.q_seq = plan.q_strides.seq;
  l.q_head = plan.q_strides.head;
  l.k_batch = plan.k_strides.batch;
  l.k_seq = plan.k_strides.seq;
  l.k_head = plan.k_strides.head;
  // 16-byte accesses when every head row and pair block starts on a 16-byte boundary (the
  // request's device buffers are 256-byte aligned; a caller's device range at its offset may
  // not be).
  const int64_t v = 16 / DTypeSize(plan.dtype);
  const int64_t run = plan.config.style == RopeStyle::kGptj ? 2 * half : half;
  bool vec = run % v == 0 && kRopeChunk % v == 0 && reinterpret_cast<uintptr_t>(l.q) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(l.k) % 16 == 0;
  for (int64_t s : {l.q_batch, l.q_seq, l.q_head, l.k_batch, l.k_seq, l.k_head}) {
    vec = vec && s % v == 0;
  }
  l.vector = vec ? static_cast<int>(v) : 1;
  POSENC_RETURN_IF_ERROR(r->Check(LaunchApplyRope(l, r->stream()), "ApplyRope kernel"));
  return r->Download();
}

}  // namespace posenc::kernels::cuda
