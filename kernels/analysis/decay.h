// Distance decay (issue 22, property 4; AnalyzeDecay in analysis.h): how attention logits depend
// on the distance r = query position - key position, over the distances start .. start+count-1
// of the plan, in kCurvePoints log-spaced bins (each point the mean over its bin's distances).
//
// RoPE. With z_q = q_a + i q_b and z_k the complex pairs of slot j (NEOX: a = j, b = j + d/2;
// GPTJ and DEEPSEEK: a = 2j, b = 2j + 1) and h_j = z_q conj(z_k), q rotated at position n + r
// and k at n give, for any n,
//   q.k(r) = m^2 * sum_j Re(h_j e^{i r theta_j})            (m: the scaling's attention factor)
// "mean |q.k|": the mean over `samples` pairs of independent N(0, 1) q and k from `seed`, or,
// with `embeddings` [n, head_dim], over q = k = each row (a token against itself r tokens back).
// In a bin wider than kDotDistancesPerBin distances the mean |q.k| is taken over that many
// evenly spaced ones (the work stays O(points x samples x d), whatever the range).
// "RoFormer bound" (Su et al., sec. 3.4.3): with S_j(r) = sum_{l<j} e^{i r theta_l} and
// h_{d/2} = 0 (Abel summation),
//   |q.k(r)| <= m^2 * max_j |h_{j+1} - h_j| * sum_{j=1}^{d/2} |S_j(r)|,
// the curve is their relative bound B(r) = (1/(d/2)) sum_{j=1}^{d/2} |S_j(r)| (figure 2), at
// every distance. B(0) = (d/2 + 1)/2. B oscillates from one r to the next but decays on average
// (on octave bins) towards the random-phase level F = (1/(d/2)) sum_j E|S_j| of independent
// uniform phases (~ sqrt(pi j)/2; zero frequencies add a constant phasor:
// sqrt(c_j^2 + pi n_j / 4) with c_j zero and n_j rotating slots before j). decay_stops_at is the
// start of the first octave of distances [2^k, 2^(k+1)) whose mean B is within 5 % of F (single
// bins are too noisy: B swings by +-10 % between neighbouring distances). The note also gives the
// wavelength limit 2 pi / min_j theta_j: past it every frequency has wrapped at least once.
// Measured, F is reached well before that limit (base 10000, d = 128: about 4096 vs 54410), because
// the slow frequencies' terms weigh little in sum_j |S_j|. The cos/sin of every distance are the
// plan's ROPE rows (AnalysisRows: RopeCache, COMPLEX). Only the rotary channels count (pass-through
// channels add a constant per pair).
//
// ALiBi and T5: the plan's rows are the bias per head of a key r tokens back (AnalysisRows:
// AlibiBias / RelativeBias); one curve per head ("head h"; T5 without a table: "bucket"). T5 with
// bidirectional buckets also gives the keys r tokens after the query (T5RowsAfter), one more
// curve per head ("head h, after"; "bucket, after"): the buckets of the two sides differ.
// SINUSOIDAL and LEARNED: not applicable (a note).
//
// Thread-safety: pure functions of their arguments; thread-safe.
#ifndef POSENC_KERNELS_ANALYSIS_DECAY_H_
#define POSENC_KERNELS_ANALYSIS_DECAY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/analysis/analysis.h"

namespace posenc::kernels {

class Backend;

// The most distances of one bin the mean |q.k| is computed at.
inline constexpr int64_t kDotDistancesPerBin = 64;

// RoPE's decay of a plan whose encoding is ROPE, in detail (AnalyzeDecay and
// AnalyzeExtrapolation turn it into curves).
struct RopeDecay {
  AnalysisCurve mean_abs_dot;       // "mean |q.k|"
  AnalysisCurve bound;              // "RoFormer bound"
  double attention_factor = 1;      // m
  double bound_scale = 0;           // m^2 max over pairs of max_j |h_{j+1} - h_j|
  double wavelength_limit = 0;      // 2 pi / smallest non-zero theta; +inf when all are 0
  double random_phase_level = 0;    // F
  int64_t decay_stops_at = -1;      // first octave with mean B <= 1.05 F; -1 if none
  std::vector<double> frequencies;  // theta_j per slot (as the rows rotate them)
};

absl::StatusOr<RopeDecay> ComputeRopeDecay(const Backend& backend, const AnalysisPlan& plan);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ANALYSIS_DECAY_H_
