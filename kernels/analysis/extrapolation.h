// Extrapolation (issue 22, property 5; AnalyzeExtrapolation in analysis.h): what each RoPE
// scaling (linear, NTK, dynamic, YaRN, llama3, LongRoPE, ...) does past the trained length L0
// (RopeOriginalContext: scaling.original_max_position_embeddings, else max_position_embeddings),
// side by side with the unscaled config.
//
// The scalings compared: `scalings` (each replaces the config's scaling), or, when empty, the
// config's own and "default" (UnscaledRopeConfig). For each, one series of curves:
//   "mean |q.k|", "RoFormer bound"  DECAY's curves over the plan's distances (decay.h), with that
//                                   scaling's attention factor and, for dynamic NTK and
//                                   LongRoPE, its frequencies for a sequence as long as the
//                                   range's end (unless config.seq_len is set)
//   "wavelength"                    2 pi / theta_j per frequency slot j (x = j), to set against
//                                   L0 (a slot whose wavelength exceeds L0 never completed a
//                                   period in training)
// and in the note, per scaling: the slots whose angles at the range's last distance R exceed
// the largest angle training saw, L0 * theta_j of the unscaled config, among the slots that did
// not complete a period in training (out of distribution: YaRN's argument).
//
// Thread-safety: pure functions of their arguments; thread-safe.
#ifndef POSENC_KERNELS_ANALYSIS_EXTRAPOLATION_H_
#define POSENC_KERNELS_ANALYSIS_EXTRAPOLATION_H_

#include "kernels/analysis/analysis.h"
#include "kernels/rope/config.h"

namespace posenc::kernels {

// The config without its scaling: no scaling type or keys, no freq_factors, no seq_len; the same
// head_dim, rotary_dim, base, style, position axes and max_position_embeddings.
RopeConfig UnscaledRopeConfig(const RopeConfig& config);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ANALYSIS_EXTRAPOLATION_H_
