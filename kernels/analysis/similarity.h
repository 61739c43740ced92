// Similarity (issue 22, property 6; AnalyzeSimilarity in analysis.h).
//
// Cosine similarity of the encodings PE(p), PE(q) over the window p, q in start .. start+w-1
// (w = min(window, count)), averaged down to cells of `cell` x `cell` positions, cell =
// ceil(w / max_cells): each matrix entry is the mean over the cell's position pairs of
// cos(PE(p), PE(q)). With u_p = PE(p)/|PE(p)| that mean is exactly mean_a(u) . mean_b(u), the dot
// product of the cells' mean unit vectors, so the cost is O(w x D + cells^2 x D) and the memory
// O(cells x D) (cells are reduced further so that cells x D <= kMaxSimilarityValues). A zero row
// counts as similarity 0 (noted). The rows are the plan's (AnalysisRows): the table row
// (SINUSOIDAL, LEARNED) or RoPE's (cos, sin) pairs (the rotation of position p). ALiBi and T5
// have no encoding vector: not applicable (a note).
//
// Add vs concat (SINUSOIDAL and LEARNED: absolute encodings), over token embeddings x (the
// plan's `embeddings` [n, D = width], or `samples` random N(0, 1) ones from `seed`) and the
// window's positions (evenly spaced ones when n x w x D exceeds kAddConcatWork):
//   ADD    y = x + PE(p): with PE = a x/|x| + b (b orthogonal to x),
//          norm change ||y| - |x|| / |x|, angle(x, y) = atan2(|b|, |x| + a)
//   CONCAT y = [x ; PE(p)] against [x ; 0]:
//          norm change (|y| - |x|)/|x| = sqrt(1 + |PE|^2/|x|^2) - 1, angle atan2(|PE|, |x|)
// each the mean over tokens and positions, angles in degrees. For x orthogonal to PE(p) the two
// agree: both norms sqrt(|x|^2 + |PE|^2), both angles atan2(|PE|, |x|).
//
// Thread-safety: pure functions of their arguments; thread-safe.
#ifndef POSENC_KERNELS_ANALYSIS_SIMILARITY_H_
#define POSENC_KERNELS_ANALYSIS_SIMILARITY_H_

#include <cstdint>

#include "kernels/analysis/analysis.h"

namespace posenc::kernels {

// The most values (cells x row width) of the cells' mean unit vectors: 128 MiB of float64.
inline constexpr int64_t kMaxSimilarityValues = int64_t{1} << 24;
// The most multiply-adds (tokens x positions x width) of add vs concat.
inline constexpr int64_t kAddConcatWork = int64_t{1} << 28;

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ANALYSIS_SIMILARITY_H_
