// `posenc check`: how far a user's own RoPE values are from posenc's exact ones.
//
// Two inputs (NumPy .npy files, float16/32/64; a bfloat16 tensor saved widened to float32 is
// exact, give --dtype bfloat16 for its tolerance):
//   - a cos/sin cache: --cos FILE and/or --sin FILE, last axis W = d/2 (compact, as
//     `rope-cache` writes by default) or W = d (full width: NEOX halves [c, c] or GPT-J pairs
//     [c0, c0, c1, c1, ...], the `rope-cache --layout neox|gptj` files; --cache-layout picks one,
//     default the rotation style of the config), where d is the rotary dim. The leading axes are
//     read row by row as the tokens: [T, W], [1, T, W] and [B, T, W] (with ids [B, T]) all work.
//     Positions default to 0 .. T-1 for T rows.
//   - a rotated tensor: --rotated FILE (the user's rotation of q or k) and --input FILE (the
//     tensor before it, same shape), in --layout bshd (default), bhsd or thd.
// The configuration and positions come from the flags of rope-cache / apply-rope. posenc then
// computes its exact values in FLOAT64 (RopeCache, or ApplyRope on the input widened to FLOAT64)
// and the comparison runs in double on the client: the largest absolute error overall, where it
// is (position and element), and per position band. Bands double: [0, 1024), [1024, 2048),
// [2048, 4096), ... (errors of the usual float32 code grow in proportion to the position, so each
// band shows the next step up); only bands holding positions are listed. Padding tokens of an
// attention mask are not compared; M-RoPE tokens are placed by their first (temporal) position.
//
// Exit status: 0 when the largest error is within --tolerance, 1 when it is not (or on an error:
// unreadable file, shape mismatch; the message on stderr says which), 2 for usage errors.
// Default tolerance by the precision of the values (--dtype, else the file's dtype): FLOAT64
// 1e-9, FLOAT32 1e-6 (posenc's own promise), FLOAT16 2^-10 and BFLOAT16 2^-7 (one unit in the
// last place at 1.0, twice what correct rounding may lose), times the largest |exact value| when
// that is above 1 (attention factors, large inputs). --png FILE plots the largest error of each
// position (log scale) with the tolerance and the band edges.
//
// Thread-safety: commands run one at a time; the functions hold no state.
#ifndef POSENC_CLIENT_CLI_CHECK_H_
#define POSENC_CLIENT_CLI_CHECK_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "client/cli/flags.h"
#include "client/cli/output.h"
#include "posenc/client.h"

namespace posenc::cli {

inline constexpr std::string_view kCheckSummary =
    "compare your own RoPE cos/sin cache or rotated tensor with posenc's exact values";

inline constexpr std::string_view kCheckDetails =
    "example: posenc check --cos cos.npy --sin sin.npy --head-dim 128 --base 500000 \\\n"
    "           --scaling llama3 --factor 8 --original-max-pos 8192 --png err.png\n"
    "         posenc check --rotated q_rot.npy --input q.npy --positions 4096:8192 "
    "--head-dim 64 --dtype bfloat16\n"
    "A cache is [T, d/2] (compact) or [T, d] (neox halves / gptj pairs, --cache-layout), rows\n"
    "at --positions (default 0..T-1); a rotated tensor has the shape of --input (--layout).\n"
    "Reports the largest absolute error (float64 comparison) overall, where it sits and per\n"
    "position band [0,1024), [1024,2048), [2048,4096), ...; exit status 0 within --tolerance,\n"
    "1 over it. Default tolerance: FLOAT64 1e-9, FLOAT32 1e-6, FLOAT16 2^-10, BFLOAT16 2^-7,\n"
    "times the largest |exact value| above 1. --png FILE plots the error per position.";

// The flags of `check` besides the position and RoPE configuration groups.
const FlagGroup& CheckFlags();

// Runs the check; `positions` and `config` come from the shared position and configuration flags
// (Positions::Default() when no position flag was given).
absl::StatusOr<CommandOutput> RunCheck(const ParsedFlags& flags, const client::Client& client,
                                       client::Positions positions, client::RopeConfig config);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_CHECK_H_
