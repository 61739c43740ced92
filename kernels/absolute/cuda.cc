// The CUDA host side of Sinusoidal and AddPositionEncoding (see cuda/cuda.h); the kernels are
// absolute/cuda.cu.
#include "kernels/cuda/cuda.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/common/status.h"
#include "kernels/cuda/launch.h"

namespace posenc::kernels::cuda {

absl::Status Sinusoidal(const CudaContext& ctx, const SinusoidalPlan& plan,
                        const ResolvedPositions& positions, const TensorView& table) {
  const std::vector<long double>& exact = plan.frequencies;
  const cpu::SplitFrequencies w(exact);
  if (!ExactOnDevice(positions.max_position, 0, w)) {
    TensorView out = table;
    return OnHost(ctx, {&out}, [&] { return ctx.host.Sinusoidal(plan, positions, out); });
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  const std::vector<int32_t> pos = DevicePositions(positions);
  // At least one frequency entry, so that the device pointers are never dangling.
  std::vector<double> hi = w.hi, lo = w.lo;
  hi.push_back(0);
  lo.push_back(0);
  const int hi_i = r->Input(hi), lo_i = r->Input(lo), pos_i = r->Input(pos);
  const int out = r->Output(table);
  POSENC_RETURN_IF_ERROR(r->Upload());
  SinusoidalLaunch l;
  l.w_hi = r->DeviceAs<double>(hi_i);
  l.w_lo = r->DeviceAs<double>(lo_i);
  l.positions = r->DeviceAs<int32_t>(pos_i);
  l.out = r->Device(out);
  l.dtype = static_cast<int>(table.dtype);
  l.layout = static_cast<int>(plan.params.layout);
  l.tokens = positions.num_tokens;
  l.dim = plan.params.dim;
  l.nfreq = static_cast<int64_t>(exact.size());
  POSENC_RETURN_IF_ERROR(r->Check(LaunchSinusoidal(l, r->stream()), "Sinusoidal kernel"));
  return r->Download();
}

absl::Status AddPositionEncoding(const CudaContext& ctx, const AddPositionEncodingPlan& plan,
                                 const ResolvedPositions& positions, const TensorView& y) {
  const AddPositionEncodingParams& params = plan.params;
  const cpu::SplitFrequencies w(plan.frequencies);
  const bool sinusoidal = params.sinusoidal.has_value();
  if (sinusoidal && !ExactOnDevice(positions.max_position, plan.shift, w)) {
    // x before y: where y aliases x, y's result is the one copied up last.
    AddPositionEncodingPlan on_host = plan;
    TensorView x{plan.x.dtype, plan.x.shape, const_cast<void*>(plan.x.data), plan.x.on_device};
    TensorView out = y;
    return OnHost(ctx, {&x, &out}, [&] {
      on_host.x = x;
      return ctx.host.AddPositionEncoding(on_host, positions, out);
    });
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  const std::vector<int32_t> pos = DevicePositions(positions);
  const int pos_i = r->Input(pos);
  const int x_i = r->Input(plan.x);
  const int y_i = r->Output(y);
  AddPositionEncodingLaunch l;
  std::vector<double> hi = w.hi, lo = w.lo;
  hi.push_back(0);  // never empty
  lo.push_back(0);
  int hi_i = -1, lo_i = -1, table_i = -1;
  int64_t first_row = 0;
  if (sinusoidal) {
    hi_i = r->Input(hi);
    lo_i = r->Input(lo);
    l.nfreq = static_cast<int64_t>(plan.frequencies.size());
    l.shift = plan.shift;
    l.layout = static_cast<int>(params.sinusoidal->layout);
  } else {
    // Only the learned rows the request reads (RunAddPositionEncoding checked them all).
    int64_t last_row = -1;
    first_row = INT64_MAX;
    for (int64_t t = 0; t < positions.num_tokens; ++t) {
      if (!positions.IsValid(t)) continue;
      first_row = std::min(first_row, positions.At(t) + params.table_offset);
      last_row = std::max(last_row, positions.At(t) + params.table_offset);
    }
    if (last_row < 0) first_row = last_row = 0;  // every token is padding
    const int64_t row_bytes = plan.pe_dim * DTypeSize(params.learned.dtype);
    table_i =
        r->Input(static_cast<const unsigned char*>(params.learned.data) + first_row * row_bytes,
                 static_cast<size_t>((last_row - first_row + 1) * row_bytes));
    l.table_dtype = static_cast<int>(params.learned.dtype);
    l.table_offset = params.table_offset - first_row;
  }
  POSENC_RETURN_IF_ERROR(r->Upload());
  l.x = r->Device(x_i);
  l.y = r->Device(y_i);
  l.dtype = static_cast<int>(plan.x.dtype);
  l.positions = r->DeviceAs<int32_t>(pos_i);
  l.tokens = positions.num_tokens;
  l.dim = plan.dim;
  l.pe_dim = plan.pe_dim;
  l.out_dim = plan.out_dim;
  l.scale = params.scale;
  l.concat = params.combine == Combine::kConcat;
  if (sinusoidal) {
    l.w_hi = r->DeviceAs<double>(hi_i);
    l.w_lo = r->DeviceAs<double>(lo_i);
  } else {
    l.table = r->Device(table_i);
  }
  POSENC_RETURN_IF_ERROR(
      r->Check(LaunchAddPositionEncoding(l, r->stream()), "AddPositionEncoding kernel"));
  return r->Download();
}

}  // namespace posenc::kernels::cuda
