// AnalyzeEncoding: the properties an encoding is chosen by, measured over a position range.
//
// The encoding of position p ("its row") is what the family's own op computes, on the backend
// given (the optimized CPU backend in the server), in chunks of positions so that memory stays
// bounded whatever the range (kAnalysisChunkBytes per chunk):
//   SINUSOIDAL  the Sinusoidal table row [D] (either layout and scheme).
//   LEARNED     row p of the caller's table [rows, D] (the range must lie inside it).
//   ROPE        the COMPLEX RopeCache row [d/2, 2] = (m cos p*omega_j, m sin p*omega_j) pairs (any
//               config: scaling, layer, M-RoPE with the one position on every axis). seq_len,
//               when the config leaves it unset, is the range's end (so a dynamic or LongRoPE
//               config is the same for every chunk).
//   ALIBI       the bias of a key p tokens before the query, one value per head [H]
//               (CAUSAL/SYMMETRIC: -m_h*p; BLOOM: +m_h*p, the bias of key position p).
//   T5          the bias of relative position -p (a key p tokens back) per head [H], from the
//               caller's table [num_buckets, H]; without a table the bucket id [1]. DECAY also
//               draws the keys p tokens after the query (+p) where the buckets are bidirectional.
// Properties (each optional, AnalysisProperty):
//   1 UNIQUENESS   smallest distance ||PE(p) - PE(q)|| over p != q in the range: exact over all
//                  pairs when count <= kExactUniquenessPositions, else the minimum over offsets
//                  q - p = 1 .. K (`uniqueness_offsets`, default 64) for every p (the result says
//                  which). First collision at a precision: the smallest q whose row, computed in
//                  FLOAT16/BFLOAT16 by the op itself, equals bit for bit an earlier row p.
//   2 BOUNDS       min/max/mean of every value and of the per-position L2 norms.
//   3 RELATIVE     SINUSOIDAL/ROPE: per distance k, the best rotation of every frequency pair
//                  taking PE(p) to PE(p+k) over all p, p+k in the range (angle
//                  atan2(sum x cross y, sum x.y), then its residual sqrt(sum|y - R x|^2 / sum|y|^2)
//                  in a second pass); exact rotations give ~1e-16. ALIBI/T5: whether the bias of
//                  (query i, key j) depends on j - i only, over a window of the range.
//   4 DECAY, 5 EXTRAPOLATION, 6 SIMILARITY: see their result structs.
//
// Thread-safety: pure functions; the backend is shared (immutable).
#ifndef POSENC_KERNELS_ANALYSIS_ANALYSIS_H_
#define POSENC_KERNELS_ANALYSIS_ANALYSIS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/bias/alibi.h"
#include "kernels/bias/relative.h"
#include "kernels/common/types.h"
#include "kernels/rope/config.h"

namespace posenc::kernels {

class Backend;

// Limits (the server's own limits may be lower).
inline constexpr int64_t kMaxAnalysisPositions = int64_t{1} << 24;  // range count
inline constexpr int64_t kExactUniquenessPositions = 4096;          // all pairs up to this
inline constexpr int64_t kMaxUniquenessOffsets = 4096;              // K beyond it
inline constexpr int64_t kMaxAnalysisDistances = 64;                // entries of distances
inline constexpr int64_t kAnalysisChunkBytes = int64_t{8} << 20;    // float64 rows per chunk
inline constexpr int64_t kMaxBiasWindow = 1024;                     // RELATIVE window, biases

enum class AnalysisFamily { kSinusoidal, kLearned, kRope, kAlibi, kT5 };
enum class AnalysisProperty {
  kUniqueness,
  kBounds,
  kRelative,
  kDecay,
  kExtrapolation,
  kSimilarity
};
inline constexpr int kNumAnalysisProperties = 6;

struct T5AnalysisParams {
  bool bidirectional = true;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  ConstTensorView table;  // [num_buckets, H], float dtype; empty: bucket ids
};

// The RelativeBias arguments of these parameters: the table's values in `dtype`, or bucket ids
// without a table. The caller sets the lengths and offsets.
RelativeBiasArgs T5BiasArgs(const T5AnalysisParams& t, DType dtype);

// The encoding: `family` says which of the members is read.
struct AnalysisEncoding {
  AnalysisFamily family = AnalysisFamily::kSinusoidal;
  SinusoidalParams sinusoidal;
  ConstTensorView learned;  // [rows, D], float dtype
  RopeConfig rope;
  // ALiBi: num_heads, mode (CAUSAL, SYMMETRIC or BLOOM) and max_bias are read.
  AlibiBiasParams alibi;
  T5AnalysisParams t5;
};

struct AnalysisArgs {
  AnalysisEncoding encoding;
  int64_t start = 0;  // positions start .. start+count-1 (biases: distances)
  int64_t count = 0;
  std::vector<AnalysisProperty> properties;  // empty: all six
  // UNIQUENESS
  std::optional<DType> collision_dtype;  // FLOAT16 or BFLOAT16; unset: no collision search
  int64_t uniqueness_offsets = 64;       // K beyond kExactUniquenessPositions
  // RELATIVE (and DECAY's distances): each 1 .. count-1; empty: 1, 2, 4, .. up to count-1
  // (at most 16 of them).
  std::vector<int64_t> distances;
  // DECAY / EXTRAPOLATION / SIMILARITY (properties 4-6)
  int64_t samples = 256;    // random q/k pairs (or token embeddings) per distance
  uint64_t seed = 0;        // of every random draw
  int64_t window = 256;     // SIMILARITY: positions start .. start+window-1
  int64_t max_cells = 256;  // SIMILARITY: the matrix is averaged down to at most this per axis
  // Optional token embeddings [n, D] (float dtype): DECAY's q/k rows (RoPE: D = head_dim) and
  // SIMILARITY's add/concat tokens; empty: random ones from `seed`.
  ConstTensorView embeddings;
  // DECAY: key rows [n, head_dim] paired row by row with `embeddings` (the query rows, same
  // shape); empty: k = q.
  ConstTensorView keys;
  // EXTRAPOLATION: the scalings compared (each replaces rope.scaling); empty: the config's own
  // and default (unscaled).
  std::vector<RopeScaling> scalings;
};

struct AnalysisPlan {
  AnalysisArgs args;
  int64_t width = 0;               // values per row
  int64_t chunk_rows = 0;          // rows computed at once
  std::vector<int64_t> distances;  // RELATIVE's, resolved
  bool wants[kNumAnalysisProperties] = {};
  // Memory the run allocates at most (chunks, the collision search's 16 bytes per position,
  // the bias window, the similarity matrix): what the server admits.
  int64_t working_bytes = 0;

  bool Wants(AnalysisProperty p) const { return wants[static_cast<int>(p)]; }
};

// Every check once (INVALID_ARGUMENT naming the wire field, expected vs received).
absl::StatusOr<AnalysisPlan> PlanAnalysis(AnalysisArgs args);

// Rows first .. first+n-1 of the plan's encoding in float64, row-major [n, plan.width]
// (`dtype` other than FLOAT64: computed in that dtype by the op, then widened), into `out`
// (resized). first .. first+n-1 need not lie in the range (the op's own limits apply).
absl::Status AnalysisRows(const Backend& backend, const AnalysisPlan& plan, int64_t first,
                          int64_t n, std::vector<double>* out, DType dtype = DType::kFloat64);

// T5: the rows of keys AFTER the query (relative position +p, p = first .. first+n-1) as
// AnalysisRows gives those before it; with unidirectional buckets they are all bucket 0.
absl::Status T5RowsAfter(const Backend& backend, const AnalysisPlan& plan, int64_t first, int64_t n,
                         std::vector<double>* out, DType dtype = DType::kFloat64);

// ---- 1 UNIQUENESS -------------------------------------------------------------------------------
struct UniquenessResult {
  bool exact = false;              // all pairs compared
  std::string method;              // "all pairs (n = 1024)" / "offsets 1 .. 64 of every position"
  double min_distance = 0.0;       // smallest ||PE(p) - PE(q)||, p != q
  int64_t min_p = -1, min_q = -1;  // one pair at it (p < q)
  // The collision search (when collision_dtype was given).
  bool collision_searched = false;
  DType collision_dtype = DType::kBFloat16;
  bool collision_found = false;
  int64_t collision_p = -1, collision_q = -1;  // the smallest q equal to an earlier p
};
absl::StatusOr<UniquenessResult> AnalyzeUniqueness(const Backend& backend,
                                                   const AnalysisPlan& plan);

// ---- 2 BOUNDS -----------------------------------------------------------------------------------
struct Summary {
  double min = 0.0, max = 0.0, mean = 0.0;
  int64_t argmin = -1, argmax = -1;  // the position (values: of its row)
};
struct BoundsResult {
  Summary values;  // every value of every row
  Summary norms;   // ||PE(p)||
};
absl::StatusOr<BoundsResult> AnalyzeBounds(const Backend& backend, const AnalysisPlan& plan);

// ---- 3 RELATIVE ---------------------------------------------------------------------------------
struct RotationFit {
  int64_t distance = 0;              // k
  double residual = 0.0;             // sqrt(sum|y - R x|^2 / sum|y|^2) over every pair and p
  double worst_pair_residual = 0.0;  // the largest of one frequency pair's residual
  int64_t worst_pair = -1;
  // max over pairs of |fitted angle - k*omega_j| wrapped to (-pi, pi]
  double max_angle_error = 0.0;
};
struct BiasStructure {
  // bias(i, j) - bias(i+1, j+1) over the window: 0 when the bias depends on j - i only.
  double max_shift_deviation = 0.0;
  // The same after removing each query row's mean (softmax cannot see a per-row constant):
  // BLOOM's m*kpos is m*(kpos - qpos) + m*qpos, so it is 0 there though the raw deviation is not.
  double max_shift_deviation_row_centered = 0.0;
  bool depends_on_distance_only = false;  // max_shift_deviation == 0
  int64_t window = 0;                     // queries and keys compared
  // T5: the first distance of each bucket met over distances 0 .. range end (past the last
  // edge every distance shares one bucket: the bias no longer tells distances apart).
  std::vector<int64_t> bucket_edges;
  std::string note;  // in words
};
struct RelativeResult {
  bool applicable = true;  // false for LEARNED (no structure to fit)
  std::string note;
  int64_t pairs = 0;                   // frequency pairs fitted (unpaired columns are left out)
  std::vector<RotationFit> rotations;  // SINUSOIDAL/ROPE, one per distance
  std::optional<BiasStructure> bias;   // ALIBI/T5
};
absl::StatusOr<RelativeResult> AnalyzeRelative(const Backend& backend, const AnalysisPlan& plan);

// ---- 4-6 (kernels/analysis/decay.cc, extrapolation.cc, similarity.cc) -------------------------
// One curve: y(x), labelled ("mean |q.k|", "RoFormer bound", "head 3", "yarn").
struct AnalysisCurve {
  std::string label;
  std::vector<double> x, y;
};

// 4 DECAY: ROPE: mean |q.k| of rotated random (or given) q/k per distance and the RoFormer
// bound's relative sum B(k) = (1/(d/2)) sum_j |S_j|, S_j = sum_{i<j} e^{i k theta_i}, per
// distance. B does not fall monotonically: it swings by ~10 % between neighbouring distances,
// and its octave means fall only until they reach the random-phase level
// F = (1/(d/2)) sum_j sqrt(pi j)/2 (the mean |S_j| of j unit vectors with random phases), at
// about k = 2048 .. 8192 for base 10000, d 128 - far below that base's wavelength limit
// 2*pi/omega_min = 54410; past it the octave means wander within ~1 % of F.
// decay_stops_at is therefore the start of the first octave [2^i, 2^(i+1)) of distances whose
// mean B lies within 5 % of F (-1: not reached in the range); the wavelength limit is a separate
// figure, given in `note` (with m, the bound's scale and F). ALIBI/T5: the bias per distance of
// a key r tokens back, one curve per head; T5 with bidirectional buckets also of a key r tokens
// after the query ("head h, after").
struct DecayResult {
  std::string method;
  std::vector<AnalysisCurve> curves;
  int64_t decay_stops_at = -1;  // -1: not reached in the range / not applicable
  int64_t samples = 0;
  uint64_t seed = 0;
  std::string note;
};

// 5 EXTRAPOLATION (ROPE): DECAY's curves for each scaling, over the range, which should reach
// past original_max_position_embeddings.
struct ExtrapolationSeries {
  std::string scaling;  // "default", "linear", "yarn", ...
  std::vector<AnalysisCurve> curves;
};
struct ExtrapolationResult {
  int64_t original_context = 0;  // RopeOriginalContext of the config
  std::vector<ExtrapolationSeries> series;
  std::string note;
};

// 6 SIMILARITY: the cosine similarity of PE(p), PE(q) over the window, averaged down to
// rows x cols cells (row-major); add vs concat: how a position part changes token embeddings.
struct SimilarityResult {
  int64_t window_start = 0, window = 0;
  int64_t rows = 0, cols = 0;
  int64_t cell = 1;  // positions averaged per cell side
  std::vector<double> matrix;
  // ADD: x + PE(p): mean relative norm change |(|x+PE| - |x|)| / |x| and mean angle (degrees)
  // between x and x + PE. CONCAT: [x ; PE]: the same against [x ; 0].
  double add_norm_change = 0.0, add_angle_degrees = 0.0;
  double concat_norm_change = 0.0, concat_angle_degrees = 0.0;
  bool random_embeddings = true;
  std::string note;
};

absl::StatusOr<DecayResult> AnalyzeDecay(const Backend& backend, const AnalysisPlan& plan);
absl::StatusOr<ExtrapolationResult> AnalyzeExtrapolation(const Backend& backend,
                                                         const AnalysisPlan& plan);
absl::StatusOr<SimilarityResult> AnalyzeSimilarity(const Backend& backend,
                                                   const AnalysisPlan& plan);

// ---- all of them ------------------------------------------------------------------------------
struct AnalysisResult {
  std::optional<UniquenessResult> uniqueness;
  std::optional<BoundsResult> bounds;
  std::optional<RelativeResult> relative;
  std::optional<DecayResult> decay;
  std::optional<ExtrapolationResult> extrapolation;
  std::optional<SimilarityResult> similarity;
};
// The plan's properties, in order; the first error stops it.
absl::StatusOr<AnalysisResult> RunAnalysis(const Backend& backend, const AnalysisPlan& plan);

absl::string_view AnalysisFamilyName(AnalysisFamily family);        // "sinusoidal", ...
absl::string_view AnalysisPropertyName(AnalysisProperty property);  // "uniqueness", ...

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ANALYSIS_ANALYSIS_H_
