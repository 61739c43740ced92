// AnalyzeEncoding: the request's options to kernels::AnalysisArgs, the results to the response.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kernels/common/status.h"
#include "server/convert.h"

namespace posenc::server {
namespace {

namespace k = ::posenc::kernels;

absl::Status ToProperties(const v1::AnalyzeEncodingRequest& req, k::AnalysisArgs* args) {
  for (int i = 0; i < req.properties_size(); ++i) {
    const int p = req.properties(i);
    if (p <= 0 || p > k::kNumAnalysisProperties || !v1::AnalysisProperty_IsValid(p)) {
      return UnknownEnumError(p, v1::AnalysisProperty_descriptor(),
                              absl::StrCat("properties[", i, "]"));
    }
    args->properties.push_back(
        v1::KernelFromWire<k::AnalysisProperty>(static_cast<v1::AnalysisProperty>(p)));
  }
  return absl::OkStatus();
}

// Each scaling, its errors named "scalings[i]." instead of "config.scaling.".
absl::Status ToScalings(const v1::AnalyzeEncodingRequest& req, k::AnalysisArgs* args) {
  for (int i = 0; i < req.scalings_size(); ++i) {
    k::RopeScaling scaling;
    absl::Status s = ToRopeScaling(req.scalings(i), &scaling);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrReplaceAll(s.message(),
                                        {{"config.scaling.", absl::StrCat("scalings[", i, "].")}}));
    }
    args->scalings.push_back(std::move(scaling));
  }
  return absl::OkStatus();
}

void FillSummary(const k::Summary& in, v1::AnalysisSummary* out) {
  out->set_min(in.min);
  out->set_max(in.max);
  out->set_mean(in.mean);
  out->set_argmin(in.argmin);
  out->set_argmax(in.argmax);
}

void FillUniqueness(const k::UniquenessResult& in, v1::UniquenessAnalysis* out) {
  out->set_exact(in.exact);
  out->set_method(in.method);
  out->set_min_distance(in.min_distance);
  out->set_min_p(in.min_p);
  out->set_min_q(in.min_q);
  out->set_collision_searched(in.collision_searched);
  if (in.collision_searched) out->set_collision_dtype(ToProtoDType(in.collision_dtype));
  out->set_collision_found(in.collision_found);
  out->set_collision_p(in.collision_p);
  out->set_collision_q(in.collision_q);
}

void FillBiasStructure(const k::BiasStructure& in, v1::BiasStructure* out) {
  out->set_max_shift_deviation(in.max_shift_deviation);
  out->set_max_shift_deviation_row_centered(in.max_shift_deviation_row_centered);
  out->set_depends_on_distance_only(in.depends_on_distance_only);
  out->set_window(in.window);
  out->mutable_bucket_edges()->Assign(in.bucket_edges.begin(), in.bucket_edges.end());
  out->set_note(in.note);
}

void FillRelative(const k::RelativeResult& in, v1::RelativeAnalysis* out) {
  out->set_applicable(in.applicable);
  out->set_note(in.note);
  out->set_pairs(in.pairs);
  for (const k::RotationFit& f : in.rotations) {
    v1::RotationFit* o = out->add_rotations();
    o->set_distance(f.distance);
    o->set_residual(f.residual);
    o->set_worst_pair_residual(f.worst_pair_residual);
    o->set_worst_pair(f.worst_pair);
    o->set_max_angle_error(f.max_angle_error);
  }
  if (in.bias) FillBiasStructure(*in.bias, out->mutable_bias());
}

void FillCurves(const std::vector<k::AnalysisCurve>& in,
                google::protobuf::RepeatedPtrField<v1::AnalysisCurve>* out) {
  for (const k::AnalysisCurve& c : in) {
    v1::AnalysisCurve* o = out->Add();
    o->set_label(c.label);
    o->mutable_x()->Assign(c.x.begin(), c.x.end());
    o->mutable_y()->Assign(c.y.begin(), c.y.end());
  }
}

void FillDecay(const k::DecayResult& in, v1::DecayAnalysis* out) {
  out->set_method(in.method);
  FillCurves(in.curves, out->mutable_curves());
  out->set_decay_stops_at(in.decay_stops_at);
  out->set_samples(in.samples);
  out->set_seed(in.seed);
  out->set_note(in.note);
}

void FillExtrapolation(const k::ExtrapolationResult& in, v1::ExtrapolationAnalysis* out) {
  out->set_original_context(in.original_context);
  for (const k::ExtrapolationSeries& s : in.series) {
    v1::ExtrapolationSeries* o = out->add_series();
    o->set_scaling(s.scaling);
    FillCurves(s.curves, o->mutable_curves());
  }
  out->set_note(in.note);
}

void FillSimilarity(const k::SimilarityResult& in, v1::SimilarityAnalysis* out) {
  out->set_window_start(in.window_start);
  out->set_window(in.window);
  out->set_rows(in.rows);
  out->set_cols(in.cols);
  out->set_cell(in.cell);
  out->mutable_matrix()->Assign(in.matrix.begin(), in.matrix.end());
  out->set_add_norm_change(in.add_norm_change);
  out->set_add_angle_degrees(in.add_angle_degrees);
  out->set_concat_norm_change(in.concat_norm_change);
  out->set_concat_angle_degrees(in.concat_angle_degrees);
  out->set_random_embeddings(in.random_embeddings);
  out->set_note(in.note);
}

}  // namespace

absl::Status ToAnalysisOptions(const v1::AnalyzeEncodingRequest& req, k::AnalysisArgs* args) {
  args->start = req.start();
  args->count = req.count();
  POSENC_RETURN_IF_ERROR(ToProperties(req, args));
  if (req.collision_dtype() != v1::DTYPE_UNSPECIFIED) {
    POSENC_ASSIGN_OR_RETURN(
        args->collision_dtype,
        FromProtoDType(req.collision_dtype(), DTypeClass::kFloat, "collision_dtype"));
  }
  if (req.has_uniqueness_offsets()) args->uniqueness_offsets = req.uniqueness_offsets();
  args->distances.assign(req.distances().begin(), req.distances().end());
  if (req.has_samples()) args->samples = req.samples();
  args->seed = req.seed();
  if (req.has_window()) args->window = req.window();
  if (req.has_max_cells()) args->max_cells = req.max_cells();
  return ToScalings(req, args);
}

void FillAnalysis(const k::AnalysisPlan& plan, const k::AnalysisResult& r,
                  v1::AnalyzeEncodingResponse* resp) {
  resp->set_family(std::string(k::AnalysisFamilyName(plan.args.encoding.family)));
  resp->set_width(plan.width);
  if (r.uniqueness) FillUniqueness(*r.uniqueness, resp->mutable_uniqueness());
  if (r.bounds) {
    FillSummary(r.bounds->values, resp->mutable_bounds()->mutable_values());
    FillSummary(r.bounds->norms, resp->mutable_bounds()->mutable_norms());
  }
  if (r.relative) FillRelative(*r.relative, resp->mutable_relative());
  if (r.decay) FillDecay(*r.decay, resp->mutable_decay());
  if (r.extrapolation) FillExtrapolation(*r.extrapolation, resp->mutable_extrapolation());
  if (r.similarity) FillSimilarity(*r.similarity, resp->mutable_similarity());
}

}  // namespace posenc::server
