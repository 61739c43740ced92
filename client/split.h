// Transparent splitting (docs/splitting.md, the one algorithm both clients implement, to the
// byte counts): a request whose tensors or outputs would not fit in one gRPC message is cut into
// pieces that each fit, sent as several calls, and the results joined back, byte-identical to
// one call on a server without the limit. Private to the client library; pure functions
// (client.cc converts the request, asks for the budget and sends the pieces).
//
//   ApplyRope          along heads (q and k cut into the same number of head ranges; every piece
//                      keeps every token, positions and config unchanged); when one head of q and
//                      one of k do not fit, each head range cut along tokens, and when one token
//                      of a head range across the batch does not fit, one token per piece with
//                      the batch rows cut. Cut tokens or rows get their positions rebased (a
//                      range, offsets, sliced ids, clamped cu_seqlens; an attention mask becomes
//                      INT64 ids whose padding tokens' bytes are copied through from the input)
//                      and config.seq_len pinned to the whole request's largest position + 1, so
//                      that dynamic NTK and the LongRoPE long/short choice see what one call sees.
//   AddPositionEncoding
//                      x [B, T, D] along batch rows (positions sliced to match); when one row does
//                      not fit, each row along tokens (positions rebased); x [T, D] along tokens.
//                      Attention-mask positions are cut along batch rows only.
//   AlibiBias, RelativeBias, RelativeEmbedding
//                      along query rows: piece r holds rows [b, b + n) with q_len = n and
//                      query_offset = (the request's query offset) + b; keys are untouched.
//
// Sizes. The budget of a piece's cut tensors (q and k; x or y, the larger; a bias's rows) is
// limit - 64 KiB - the request's other bytes (its serialized size less the cut tensors' data),
// limit the smaller of the client's and the server's max_message_bytes. The output shapes come
// from the rules of the kernels' plans' OutputSpecs (tests/client/split_sizes_test.cc checks
// them against the server's answers, which the plans size). A request that cannot be cut to fit
// is RESOURCE_EXHAUSTED (reason LIMIT_EXCEEDED) naming the limit and what would have to fit; one
// too malformed to cut goes whole, for the server to answer.
//
// Thread-safety: pure functions.
#ifndef POSENC_CLIENT_SPLIT_H_
#define POSENC_CLIENT_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/positions.h"
#include "posenc/client.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/borrowed_slices.h"
#include "proto/posenc/v1/byte_buffer.h"

namespace posenc::client::internal {

// Bytes of every message kept for its framing and a response's derived values: a piece's budget
// is the message limit less this and less the request's other bytes.
inline constexpr int64_t kMessageOverheadBytes = int64_t{64} << 10;

// What decides a split: the bytes of the tensors it cuts (request or response side, the larger)
// and the request's other bytes (its serialized size less the cut tensors' data).
struct RequestBytes {
  int64_t tensors = 0;
  int64_t other = 0;
};
// The budget of a split request: the message limit and the bytes of cut tensors a piece may
// carry, limit - kMessageOverheadBytes - RequestBytes::other (may be <= 0: nothing can be cut
// small enough).
struct Budget {
  int64_t limit = 0;
  int64_t bytes = 0;
};
// The fewest p for which EvenRanges(n, p) keeps every range within `budget` bytes at
// `item_bytes` an item (1 when item_bytes is 0); 0 when one item alone is over it.
int64_t FewestPieces(int64_t n, int64_t item_bytes, int64_t budget);

// ---------------------------------------------------------------------------------------------
// Ranges, slices and joins.
// ---------------------------------------------------------------------------------------------

// A box of a tensor: [begin[a], begin[a] + count[a]) along every axis a.
struct Box {
  std::vector<int64_t> begin, count;
};

// `n` items in `pieces` consecutive ranges {begin, count}: range i is [n*i/p, n*(i+1)/p), so
// counts differ by at most one and the last range is a largest one; a range may be empty when
// pieces > n.
std::vector<std::pair<int64_t, int64_t>> EvenRanges(int64_t n, int64_t pieces);

// The box [begin, begin + count) of `tensor` (one entry per axis; a copy).
Tensor SliceBox(const Tensor& tensor, const std::vector<int64_t>& begin,
                const std::vector<int64_t>& count);
// Writes `part` into `whole` at `begin`; INTERNAL when its dtype, rank or extent does not fit
// there (the server answered a piece with a shape the piece did not ask for).
absl::Status PasteBox(const Tensor& part, const std::vector<int64_t>& begin, Tensor* whole);
// The bytes of `box` in `tensor`, run by run in the box's row-major order (views of its data, in
// no shared memory): what SliceBox would copy, for a request that sends them from there.
std::vector<v1::BorrowedSlices::Part> BoxParts(const Tensor& tensor, const Box& box);
// Rows [begin, begin + count) of `tensor` along `axis` (a copy).
Tensor SliceAxis(const Tensor& tensor, size_t axis, int64_t begin, int64_t count);
// `parts` joined along `axis`; every other dimension and the dtype must agree (INTERNAL if not).
absl::StatusOr<Tensor> ConcatAxis(const std::vector<Tensor>& parts, size_t axis);

// The positions of a [batch, seq] grid (or, `packed`, of seq tokens) as the kernels resolve them,
// with `components` (3: M-RoPE) per token; the kernels' INVALID_ARGUMENT naming the positions'
// field, as the server's, when they do not fit the grid or a value is out of range.
absl::StatusOr<kernels::ResolvedPositions> ResolveOnGrid(const Positions& positions, bool packed,
                                                         int64_t batch, int64_t seq,
                                                         int64_t components = 1);

// ---------------------------------------------------------------------------------------------
// Output shapes: the kernels plans' OutputSpecs computed from a request without validating it
// (a malformed request gets some shape, and the server's error). `named_table` is the shape of
// the table the request names by table_name (the server's, from GetServerInfo); empty when the
// request has none or the server does not know it.
// ---------------------------------------------------------------------------------------------
struct OutputShape {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int64_t Bytes() const;  // saturating at INT64_MAX
};
// nullopt where the encoding's width is unknown (a learned table not of rank 2, or a name the
// server does not report): a request the server refuses, sent whole.
std::optional<OutputShape> AddPositionEncodingOutput(const AddPositionEncodingOptions& options,
                                                     const std::vector<int64_t>& named_table = {});
// bias, then slopes.
std::vector<OutputShape> AlibiBiasOutputs(const AlibiBiasOptions& options);
// nullopt where the table's width (heads, D) is unknown, as above (BUCKETS needs none).
std::optional<OutputShape> RelativeBiasOutput(const RelativeBiasOptions& options,
                                              const std::vector<int64_t>& named_table = {});
std::optional<OutputShape> RelativeEmbeddingOutput(const RelativeEmbeddingOptions& options,
                                                   const std::vector<int64_t>& named_table = {});

// ---------------------------------------------------------------------------------------------
// Request bytes (docs/splitting.md "The budget"), from the converted request.
// ---------------------------------------------------------------------------------------------
// q and k; the rest of the request.
RequestBytes ApplyRopeRequestBytes(const v1::ApplyRopeRequest& request);
// x or y (`y_bytes`), the larger; the rest of the request besides x's data.
RequestBytes AddPositionEncodingRequestBytes(const v1::AddPositionEncodingRequest& request,
                                             int64_t y_bytes);
// q_len rows of `row_bytes` of output; the whole request.
RequestBytes QueryRowRequestBytes(const google::protobuf::Message& request, int64_t q_len,
                                  int64_t row_bytes);

// ---------------------------------------------------------------------------------------------
// ApplyRope.
// ---------------------------------------------------------------------------------------------
struct ApplyRopeSplit {
  // True when the request is not cut: too malformed (ranks, q/k disagreement, empty axes,
  // positions the grid does not take), or a piece would hold heads of k without q (the server
  // refuses an empty q). It goes as one call and the server (or gRPC's limit) answers.
  bool whole = false;
  std::vector<ApplyRopeOptions> pieces;
  // Where each piece's results go: the box of its q heads in q and of its k heads in k (empty:
  // none).
  struct Place {
    Box q, k;
  };
  std::vector<Place> places;
  // Cut tokens of a masked request: one entry per token of the [B, S] grid, 1 for padding
  // (its input bytes are copied into the result); empty otherwise.
  std::vector<uint8_t> padding;
};
// The pieces of `options` within `budget`; RESOURCE_EXHAUSTED when one token of one head of one
// batch row does not fit; the caller's positions' INVALID_ARGUMENT (the kernels' message, as the
// server's) when tokens must be cut and they do not resolve. The pieces' q and k hold their dtype
// and shape but no bytes: a piece's request sends BoxParts of the caller's tensors at its places.
absl::StatusOr<ApplyRopeSplit> SplitApplyRope(const ApplyRopeOptions& options,
                                              const Budget& budget);

// The pieces' answers joined as they come: the result is sized first (left uninitialized: the
// pieces' boxes cover it), each answer is written into its piece's boxes, and padding tokens are
// copied through from the input at the end. `options` and `split` must outlive the join.
// Thread-safety: different pieces may be pasted from different threads at once (their boxes do
// not overlap); Finish once every Paste has returned.
class ApplyRopeJoin {
 public:
  ApplyRopeJoin(const ApplyRopeOptions& options, const ApplyRopeSplit& split);

  // Piece `piece`'s answer: the server's response, whose q's and k's bytes are in the message or
  // (v1::ParseLeavingTensorData) in `left`. INTERNAL when its tensors do not fit the piece's boxes.
  absl::Status Paste(size_t piece, const v1::ApplyRopeResponse& response,
                     const v1::WireTensors& left);
  // Piece `piece`'s q (`is_k` false) or k, its bytes given in order in `chunks`.
  absl::Status Paste(size_t piece, bool is_k, DType dtype, const std::vector<int64_t>& shape,
                     const std::vector<absl::string_view>& chunks);

  // The joined result with `derived` (every piece derives the same values); INTERNAL when a
  // piece's q or k was not pasted.
  absl::StatusOr<ApplyRopeResult> Finish(RopeDerived derived);

 private:
  const ApplyRopeOptions& options_;
  const ApplyRopeSplit& split_;
  ApplyRopeResult out_;
  std::vector<uint8_t> pasted_;  // per piece: bit 0 q, bit 1 k
};

// ---------------------------------------------------------------------------------------------
// AddPositionEncoding.
// ---------------------------------------------------------------------------------------------
struct AddPositionEncodingSplit {
  bool whole = false;  // as ApplyRopeSplit::whole
  std::vector<AddPositionEncodingOptions> pieces;
  std::vector<Box> y_boxes;  // each piece's box in y
  OutputShape y;             // the whole request's y
};
absl::StatusOr<AddPositionEncodingSplit> SplitAddPositionEncoding(
    const AddPositionEncodingOptions& options, const OutputShape& y, const Budget& budget);
absl::StatusOr<Tensor> JoinAddPositionEncoding(const AddPositionEncodingSplit& split,
                                               std::vector<Tensor> parts);

// ---------------------------------------------------------------------------------------------
// Query rows (AlibiBias, RelativeBias, RelativeEmbedding).
// ---------------------------------------------------------------------------------------------
// How many even query-row ranges a request of `q_len` rows of `row_bytes` takes within
// `budget`; RESOURCE_EXHAUSTED (naming `op`) when one row does not fit.
absl::StatusOr<int64_t> QueryRowPieces(absl::string_view op, int64_t q_len, int64_t row_bytes,
                                       const Budget& budget);

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
