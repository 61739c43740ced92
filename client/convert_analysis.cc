// AnalyzeEncoding's response to the client's result (plain C++ types).
#include "client/convert.h"

namespace posenc::client::internal {
namespace {

std::vector<double> Doubles(const google::protobuf::RepeatedField<double>& in) {
  return {in.begin(), in.end()};
}

AnalysisSummary FromProto(const v1::AnalysisSummary& in) {
  return {in.min(), in.max(), in.mean(), in.argmin(), in.argmax()};
}

UniquenessAnalysis FromProto(const v1::UniquenessAnalysis& in) {
  UniquenessAnalysis out{.exact = in.exact(),
                         .method = in.method(),
                         .min_distance = in.min_distance(),
                         .min_p = in.min_p(),
                         .min_q = in.min_q(),
                         .collision_searched = in.collision_searched()};
  if (absl::StatusOr<DType> d = internal::FromProto(in.collision_dtype(), "collision_dtype");
      d.ok()) {
    out.collision_dtype = *d;
  }
  out.collision_found = in.collision_found();
  out.collision_p = in.collision_p();
  out.collision_q = in.collision_q();
  return out;
}

RelativeAnalysis FromProto(const v1::RelativeAnalysis& in) {
  RelativeAnalysis out{.applicable = in.applicable(), .note = in.note(), .pairs = in.pairs()};
  for (const v1::RotationFit& f : in.rotations()) {
    out.rotations.push_back(
        {f.distance(), f.residual(), f.worst_pair_residual(), f.worst_pair(), f.max_angle_error()});
  }
  if (in.has_bias()) {
    const v1::BiasStructure& b = in.bias();
    out.bias = BiasStructure{b.max_shift_deviation(),
                             b.max_shift_deviation_row_centered(),
                             b.depends_on_distance_only(),
                             b.window(),
                             std::vector<int64_t>(b.bucket_edges().begin(), b.bucket_edges().end()),
                             b.note()};
  }
  return out;
}

std::vector<AnalysisCurve> FromProto(
    const google::protobuf::RepeatedPtrField<v1::AnalysisCurve>& in) {
  std::vector<AnalysisCurve> out;
  for (const v1::AnalysisCurve& c : in) out.push_back({c.label(), Doubles(c.x()), Doubles(c.y())});
  return out;
}

DecayAnalysis FromProto(const v1::DecayAnalysis& in) {
  return {in.method(), FromProto(in.curves()), in.decay_stops_at(), in.samples(), in.seed(),
          in.note()};
}

ExtrapolationAnalysis FromProto(const v1::ExtrapolationAnalysis& in) {
  ExtrapolationAnalysis out{.original_context = in.original_context(), .note = in.note()};
  for (const v1::ExtrapolationSeries& s : in.series()) {
    out.series.push_back({s.scaling(), FromProto(s.curves())});
  }
  return out;
}

SimilarityAnalysis FromProto(const v1::SimilarityAnalysis& in) {
  return {in.window_start(),
          in.window(),
          in.rows(),
          in.cols(),
          in.cell(),
          Doubles(in.matrix()),
          in.add_norm_change(),
          in.add_angle_degrees(),
          in.concat_norm_change(),
          in.concat_angle_degrees(),
          in.random_embeddings(),
          in.note()};
}

}  // namespace

AnalyzeEncodingResult FromProto(const v1::AnalyzeEncodingResponse& r) {
  AnalyzeEncodingResult out{.family = r.family(), .width = r.width()};
  if (r.has_uniqueness()) out.uniqueness = FromProto(r.uniqueness());
  if (r.has_bounds()) {
    out.bounds = BoundsAnalysis{FromProto(r.bounds().values()), FromProto(r.bounds().norms())};
  }
  if (r.has_relative()) out.relative = FromProto(r.relative());
  if (r.has_decay()) out.decay = FromProto(r.decay());
  if (r.has_extrapolation()) out.extrapolation = FromProto(r.extrapolation());
  if (r.has_similarity()) out.similarity = FromProto(r.similarity());
  return out;
}

}  // namespace posenc::client::internal
