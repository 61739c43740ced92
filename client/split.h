// Transparent splitting: a request whose tensors or outputs would not fit in one gRPC message is
// cut into pieces that each fit, sent as several calls, and the results joined back, so that the
// caller never meets the server's message limit. Private to the client library.
//
//   ApplyRope          along heads (q and k each cut into the same number of head ranges): every
//                      piece keeps every token, so positions, seq_len and the dynamic/LongRoPE
//                      choices are those of the whole request, and the result is byte-identical.
//   AddPositionEncoding
//                      along tokens: x [B, T, D] by batch rows (positions: default, range,
//                      offsets, ids [T] or [B, T], attention mask [B, T], sliced to match), x
//                      [T, D] by token ranges (positions: default, range, ids [T]); other
//                      position kinds are sent whole.
//   AlibiBias, RelativeBias, RelativeEmbedding
//                      along query rows: piece r holds rows [b, b + n) with q_len = n and
//                      query_offset = (the request's query offset) + b; keys are untouched.
//
// Thread-safety: pure functions.
#ifndef POSENC_CLIENT_SPLIT_H_
#define POSENC_CLIENT_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "posenc/client.h"

namespace posenc::client::internal {

// Bytes a response may carry besides its tensors (derived values, framing): the budget a piece's
// tensors get is the message limit less this and less what the request carries besides tensors.
inline constexpr int64_t kMessageOverheadBytes = int64_t{64} << 10;

// The number of pieces for `bytes` of tensors under `budget` bytes per message (1: no split).
int64_t PiecesFor(int64_t bytes, int64_t budget);
// The fewest pieces of EvenRanges(rows, pieces) in which no piece holds more than `budget`
// bytes at `row_bytes` a row; rows + 1 when a single row is over the budget.
int64_t PiecesForRows(int64_t rows, int64_t row_bytes, int64_t budget);
// `n` items in `pieces` consecutive ranges {begin, count} as equal as can be; a range may be
// empty when pieces > n.
std::vector<std::pair<int64_t, int64_t>> EvenRanges(int64_t n, int64_t pieces);

// Rows [begin, begin + count) of `tensor` along `axis` (a copy).
Tensor SliceAxis(const Tensor& tensor, size_t axis, int64_t begin, int64_t count);
// `parts` joined along `axis`; every other dimension and the dtype must agree (INTERNAL if not:
// the server answered with shapes the pieces did not ask for).
absl::StatusOr<Tensor> ConcatAxis(const std::vector<Tensor>& parts, size_t axis);

// ApplyRope: the bytes of q and k (what the request and the response each carry), the head
// axis of q's layout, and the pieces and their join.
int64_t ApplyRopeTensorBytes(const ApplyRopeOptions& options);
size_t HeadAxis(const ApplyRopeOptions& options);
// The fewest head pieces in which q's and k's heads together fit `budget`; 0 when one head of
// each does not.
int64_t ApplyRopePieces(const ApplyRopeOptions& options, int64_t budget);
std::vector<ApplyRopeOptions> SplitApplyRope(const ApplyRopeOptions& options, int64_t pieces);
absl::StatusOr<ApplyRopeResult> JoinApplyRope(const ApplyRopeOptions& options,
                                              std::vector<ApplyRopeResult> parts);

// AddPositionEncoding: the pieces of `options` (each with at most `budget` bytes of x and y
// together, `y_row_bytes` per row of the split axis), or nullopt when its positions cannot be
// sliced along that axis (or a single row is over the budget).
std::optional<std::vector<AddPositionEncodingOptions>> SplitAddPositionEncoding(
    const AddPositionEncodingOptions& options, int64_t y_row_bytes, int64_t budget);

// Query-row pieces of a bias or relative-embedding request (q_len and query_offset set).
template <typename Options>
std::vector<Options> SplitQueryRows(const Options& options, int64_t pieces) {
  const int64_t offset = options.query_offset.value_or(options.k_len - options.q_len);
  std::vector<Options> out;
  for (const auto& [begin, count] : EvenRanges(options.q_len, pieces)) {
    if (count == 0) continue;
    Options piece = options;
    piece.q_len = count;
    piece.query_offset = offset + begin;
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace posenc::client::internal

#endif  // POSENC_CLIENT_SPLIT_H_
