// Positions: how a request says where each token sits, and their resolution to integers.
//
// Every op that takes positions describes the token grid it expects (TokenGrid); its plan checks
// the caller's PositionSpec against it once (PlanPositions: shapes only, nothing allocated in
// proportion to a range's count, so the server can check its output limits first), and its run
// resolves the planned positions (ResolvePositions: one int64 per token and M-RoPE component,
// every value checked to lie in [0, 2^31)).
//
// Error messages name the wire field ("positions.ids", "positions.range.count", ...).
#ifndef POSENC_KERNELS_COMMON_POSITIONS_H_
#define POSENC_KERNELS_COMMON_POSITIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

// Positions are integers in [0, kMaxPosition].
inline constexpr int64_t kMaxPosition = (int64_t{1} << 31) - 1;

struct PositionSpec {
  enum class Kind {
    kDefault,        // absent: 0 .. S-1 in every sequence (or 0 .. T-1 packed).
    kRange,          // start .. start+count-1.
    kOffsets,        // token t of sequence b at offsets[b] + t.
    kIds,            // explicit INT32/INT64 ids.
    kCuSeqlens,      // packed sequences; positions restart at offsets[i] (or 0).
    kAttentionMask,  // [B,S] 1/0: a real token's position counts the real tokens before it.
  };
  Kind kind = Kind::kDefault;
  int64_t start = 0;                // kRange
  int64_t count = 0;                // kRange; 0 means "the sequence length" where there is one.
  std::vector<int64_t> offsets;     // kOffsets; kCuSeqlens (empty: all zero)
  std::vector<int64_t> cu_seqlens;  // kCuSeqlens
  ConstTensorView ids;              // kIds
  ConstTensorView mask;             // kAttentionMask
};

// The token grid an op expects.
struct TokenGrid {
  enum class Kind {
    // Tables (Sinusoidal, RopeCache): the positions define the grid: a range or cu_seqlens gives
    // [n], ids give ids.shape (without the M-RoPE axis), a mask gives [B,S]. kOffsets and
    // kDefault are INVALID_ARGUMENT (no sequence length to apply them to).
    kTable,
    // [batch, seq] tokens (BSHD/BHSD ApplyRope, AddPositionEncoding): ids [S] (broadcast) or
    // [B,S]; range count S (or 0); offsets of length B; a mask [B,S]. cu_seqlens is invalid.
    kBatchSeq,
    // Packed [tokens] (THD ApplyRope): cu_seqlens ending at T, ids [T], range count T (or 0),
    // default. Offsets and masks are invalid.
    kPacked,
  };
  Kind kind = Kind::kTable;
  int64_t batch = 1;   // kBatchSeq
  int64_t seq = 1;     // kBatchSeq
  int64_t tokens = 1;  // kPacked
  // The position axes (RopePositionAxes: 3 for M-RoPE's t, h, w; 2 for 2-D RoPE; up to 4): ids
  // carry a leading axis of that size; every other kind repeats the one position on all axes.
  int64_t components = 1;
};

struct ResolvedPositions {
  Shape grid;              // token grid, e.g. [B,S], [T], or ids.shape.
  int64_t num_tokens = 0;  // prod(grid)
  int64_t components = 1;  // the position axes: 1, or 2 .. 4
  // Component-major: pos[c * num_tokens + t].
  std::vector<int64_t> pos;
  // Empty when every token is real; else one entry per token, 0 for padding (attention_mask).
  std::vector<uint8_t> valid;
  // Largest position over all real tokens and components; -1 when there is none.
  int64_t max_position = -1;
  // > 0 where positions count up by one within runs of this many tokens (the default, a range,
  // offsets): token t at pos[t - t % run] + t % run, every component alike, so that a device
  // backend can upload one position per run instead of `pos`. 0 for the other kinds.
  int64_t consecutive_run = 0;

  bool IsValid(int64_t token) const { return valid.empty() || valid[token] != 0; }
  // Whether the positions count up by one within each sequence of `seq` tokens.
  bool ConsecutiveIn(int64_t seq) const { return seq > 0 && consecutive_run == seq; }
  int64_t At(int64_t token, int64_t component = 0) const {
    return pos[component * num_tokens + token];
  }
};

// A PositionSpec checked against a TokenGrid.
struct PositionPlan {
  PositionSpec spec;
  TokenGrid grid;
  Shape shape;             // the token grid's shape, e.g. [B,S], [T], or ids.shape
  int64_t num_tokens = 0;  // prod(shape)
};

// Checks the spec's shapes against the grid without materializing anything.
absl::StatusOr<PositionPlan> PlanPositions(PositionSpec spec, const TokenGrid& grid);

// Materializes and range-checks planned positions (INVALID_ARGUMENT naming the field and the
// offending token when a position falls outside [0, 2^31), or a mask value is not 0/1).
absl::StatusOr<ResolvedPositions> ResolvePositions(const PositionPlan& plan);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_POSITIONS_H_
