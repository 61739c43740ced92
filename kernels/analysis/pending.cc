// Properties 4-6 (DECAY, EXTRAPOLATION, SIMILARITY) until their implementations land
// (kernels/analysis/decay.cc, extrapolation.cc, similarity.cc replace this file).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/analysis/analysis.h"

namespace posenc::kernels {
namespace {

absl::Status Pending(absl::string_view property) {
  return absl::UnimplementedError(
      absl::StrCat("properties: ", property, " is not implemented yet in this build"));
}

}  // namespace

absl::StatusOr<DecayResult> AnalyzeDecay(const Backend&, const AnalysisPlan&) {
  return Pending("DECAY");
}
absl::StatusOr<ExtrapolationResult> AnalyzeExtrapolation(const Backend&, const AnalysisPlan&) {
  return Pending("EXTRAPOLATION");
}
absl::StatusOr<SimilarityResult> AnalyzeSimilarity(const Backend&, const AnalysisPlan&) {
  return Pending("SIMILARITY");
}

}  // namespace posenc::kernels
