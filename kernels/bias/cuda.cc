// The CUDA host side of AlibiBias, RelativeBias and RelativeEmbedding (see cuda/cuda.h): bias
// generators on the device, expanded there into Toeplitz matrices; the kernels are bias/cuda.cu.
#include "kernels/cuda/cuda.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/common/status.h"
#include "kernels/cuda/launch.h"

namespace posenc::kernels::cuda {
namespace {

// A table of any float dtype as double (the kernels read float64 tables).
std::vector<double> TableAsDouble(const ConstTensorView& t) {
  std::vector<double> out(static_cast<size_t>(t.NumElements()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = LoadAsDouble(t.data, t.dtype, static_cast<int64_t>(i));
  }
  return out;
}

// The bias output from its generator rows (heads rows of q_len + k_len - 1 values, element size
// esize): in the compact form the generators are the output; in the full form each row expands into
// its q_len x k_len Toeplitz matrix. Then the output goes back to the host.
absl::Status ExpandBiasAndDownload(Request& r, bool compact, int gen, int out, int64_t heads,
                                   int64_t q_len, int64_t k_len, int64_t esize) {
  if (!compact) {
    POSENC_RETURN_IF_ERROR(CheckCancelled());
    ToeplitzLaunch t{r.Device(gen), r.Device(out), heads, q_len, k_len, static_cast<int>(esize)};
    POSENC_RETURN_IF_ERROR(r.Check(LaunchToeplitzExpand(t, r.stream()), "Toeplitz kernel"));
  }
  return r.Download();
}

}  // namespace

absl::Status AlibiBias(const CudaContext& ctx, const AlibiBiasPlan& plan,
                       absl::Span<const double> slopes, const TensorView& bias) {
  const AlibiBiasParams& p = plan.params;
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  const std::vector<double> slope_vec(slopes.begin(), slopes.end());
  const int slopes_i = r->Input(slope_vec);
  const int64_t esize = DTypeSize(bias.dtype);
  const int out = r->Output(bias);
  const bool bloom = p.mode == AlibiMode::kBloom;
  const bool compact = p.form == BiasForm::kCompact;
  std::vector<double> kpos;  // BLOOM: each batch row's key positions
  int kpos_i = -1, gen = out;
  if (bloom) {
    kpos.resize(static_cast<size_t>(plan.batch * p.k_len));
    for (int64_t b = 0; b < plan.batch; ++b) plan.KeyPositions(b, kpos.data() + b * p.k_len);
    kpos_i = r->Input(kpos);
  } else if (!compact) {
    gen = r->Scratch(static_cast<size_t>(p.num_heads * (p.q_len + p.k_len - 1) * esize));
  }
  POSENC_RETURN_IF_ERROR(r->Upload());
  AlibiLaunch l;
  l.slopes = r->DeviceAs<double>(slopes_i);
  l.kpos = bloom ? r->DeviceAs<double>(kpos_i) : nullptr;
  l.out = r->Device(gen);
  l.dtype = static_cast<int>(bias.dtype);
  l.mode = static_cast<int>(p.mode);
  l.future = static_cast<int>(p.future);
  l.compact = compact;
  l.batch = plan.batch;
  l.heads = p.num_heads;
  l.q_len = p.q_len;
  l.k_len = p.k_len;
  l.query_offset = plan.query_offset;
  if (bloom) {
    POSENC_RETURN_IF_ERROR(r->Check(LaunchAlibiBloom(l, r->stream()), "AlibiBias kernel"));
    return r->Download();
  }
  POSENC_RETURN_IF_ERROR(
      r->Check(LaunchAlibiGenerators(l, r->stream()), "AlibiBias generator kernel"));
  return ExpandBiasAndDownload(*r, compact, gen, out, p.num_heads, p.q_len, p.k_len, esize);
}

absl::Status RelativeBias(const CudaContext& ctx, const RelativeBiasPlan& plan,
                          const TensorView& bias) {
  const RelativeBiasParams& p = plan.params;
  const int64_t gen_len = p.q_len + p.k_len - 1;
  // The bucket of each distance, on the host by the reference's T5Bucket (bias/bias_math.h).
  std::vector<int32_t> buckets(static_cast<size_t>(gen_len));
  for (int64_t t = 0; t < gen_len; ++t) {
    buckets[t] = static_cast<int32_t>(plan.Bucket(0, t - (p.q_len - 1)));
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  const int buckets_i = r->Input(buckets);
  const int64_t esize = DTypeSize(bias.dtype);
  const int out = r->Output(bias);
  if (p.form == BiasForm::kBuckets) {
    POSENC_RETURN_IF_ERROR(r->Upload());
    return ExpandBiasAndDownload(*r, /*compact=*/false, buckets_i, out, /*heads=*/1, p.q_len,
                                 p.k_len, /*esize=*/4);
  }
  const std::vector<double> table = TableAsDouble(p.table);
  const int table_i = r->Input(table);
  const bool compact = p.form == BiasForm::kCompact;
  const int gen = compact ? out : r->Scratch(static_cast<size_t>(plan.heads * gen_len * esize));
  POSENC_RETURN_IF_ERROR(r->Upload());
  T5GeneratorLaunch g;
  g.buckets = r->DeviceAs<int32_t>(buckets_i);
  g.table = r->DeviceAs<double>(table_i);
  g.out = r->Device(gen);
  g.dtype = static_cast<int>(bias.dtype);
  g.heads = plan.heads;
  g.gen_len = gen_len;
  POSENC_RETURN_IF_ERROR(
      r->Check(LaunchT5Generators(g, r->stream()), "RelativeBias generator kernel"));
  return ExpandBiasAndDownload(*r, compact, gen, out, plan.heads, p.q_len, p.k_len, esize);
}

absl::Status RelativeEmbedding(const CudaContext& ctx, const RelativeEmbeddingPlan& plan,
                               const TensorView& embeddings) {
  const RelativeEmbeddingParams& p = plan.params;
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, ctx.Begin());
  const std::vector<double> table = TableAsDouble(p.table);
  const int table_i = r->Input(table);
  const int out = r->Output(embeddings);
  POSENC_RETURN_IF_ERROR(r->Upload());
  RelativeEmbeddingLaunch l;
  l.table = r->DeviceAs<double>(table_i);
  l.out = r->Device(out);
  l.dtype = static_cast<int>(embeddings.dtype);
  l.q_len = p.q_len;
  l.k_len = p.k_len;
  l.dim = plan.dim;
  l.query_offset = plan.query_offset;
  l.key_offset = p.key_offset;
  l.max_relative = p.max_relative;
  POSENC_RETURN_IF_ERROR(
      r->Check(LaunchRelativeEmbedding(l, r->stream()), "RelativeEmbedding kernel"));
  return r->Download();
}

}  // namespace posenc::kernels::cuda
