// The reference backend: binds the reference implementation of each op (reference.h).
#include "kernels/backend.h"

#include <limits>
#include <memory>
#include <string>

#include "kernels/reference/reference.h"

namespace posenc::kernels {
namespace {

static_assert(std::numeric_limits<long double>::digits >= 64,
              "the reference backend needs an extended-precision long double (x86-64)");

class ReferenceBackend final : public Backend {
 public:
  absl::string_view name() const override { return "reference"; }
  std::string detail() const override {
    return "scalar float64 oracle, phases in 80-bit extended precision";
  }
  absl::Status Sinusoidal(const SinusoidalPlan& plan, const ResolvedPositions& positions,
                          const TensorView& table) const override {
    return reference::Sinusoidal(plan, positions, table);
  }
  absl::Status AddPositionEncoding(const AddPositionEncodingPlan& plan,
                                   const ResolvedPositions& positions,
                                   const TensorView& y) const override {
    return reference::AddPositionEncoding(plan, positions, y);
  }
  absl::Status RopeCache(const RopeCachePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& cos,
                         const TensorView& sin) const override {
    return reference::RopeCache(plan, freqs, positions, cos, sin);
  }
  absl::Status ApplyRope(const ApplyRopePlan& plan, const RopeFrequencies& freqs,
                         const ResolvedPositions& positions, const TensorView& q,
                         const TensorView& k) const override {
    return reference::ApplyRope(plan, freqs, positions, q, k);
  }
  absl::Status AlibiBias(const AlibiBiasPlan& plan, absl::Span<const double> slopes,
                         const TensorView& bias) const override {
    return reference::AlibiBias(plan, slopes, bias);
  }
  absl::Status RelativeBias(const RelativeBiasPlan& plan, const TensorView& bias) const override {
    return reference::RelativeBias(plan, bias);
  }
  absl::Status RelativeEmbedding(const RelativeEmbeddingPlan& plan,
                                 const TensorView& embeddings) const override {
    return reference::RelativeEmbedding(plan, embeddings);
  }
};

}  // namespace

std::unique_ptr<Backend> MakeReferenceBackend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace posenc::kernels
