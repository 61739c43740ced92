// ApplyRope: the plan (every check of the op, the strides of each layout) and the run.
#include "kernels/rope/apply_rope.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

const char* LayoutName(TensorLayout layout) {
  switch (layout) {
    case TensorLayout::kBSHD: return "BSHD [batch, seq, heads, head_dim]";
    case TensorLayout::kBHSD: return "BHSD [batch, heads, seq, head_dim]";
    case TensorLayout::kTHD: return "THD [tokens, heads, head_dim]";
  }
  return "";
}

absl::Status CheckTensor(absl::string_view name, const ConstTensorView& t, TensorLayout layout) {
  const size_t rank = layout == TensorLayout::kTHD ? 3 : 4;
  if (!IsFloatDType(t.dtype)) {
    return Invalid(name, absl::StrCat("expected dtype FLOAT32, FLOAT16, BFLOAT16 or FLOAT64, got ",
                                      DTypeName(t.dtype)));
  }
  if (t.shape.size() != rank) {
    return Invalid(name, absl::StrCat("expected rank ", rank, " for layout ", LayoutName(layout),
                                      ", got shape ", ShapeString(t.shape)));
  }
  for (int64_t v : t.shape) {
    if (v <= 0) {
      return Invalid(
          name, absl::StrCat("expected every dimension > 0, got shape ", ShapeString(t.shape)));
    }
  }
  return absl::OkStatus();
}

// A q or k tensor's (batch, seq, heads, head_dim) and strides in `layout`.
struct TensorDims {
  std::array<int64_t, 3> batch_seq_dim;  // batch, seq (tokens for THD), head_dim
  int64_t heads = 0;
  HeadStrides strides;
};

TensorDims Dims(const Shape& s, TensorLayout layout) {
  TensorDims d;
  switch (layout) {
    case TensorLayout::kBSHD:  // [B, S, H, D]
      d.batch_seq_dim = {s[0], s[1], s[3]};
      d.heads = s[2];
      d.strides = {s[1] * s[2] * s[3], s[2] * s[3], s[3]};
      break;
    case TensorLayout::kBHSD:  // [B, H, S, D]
      d.batch_seq_dim = {s[0], s[2], s[3]};
      d.heads = s[1];
      d.strides = {s[1] * s[2] * s[3], s[3], s[2] * s[3]};
      break;
    case TensorLayout::kTHD:  // [T, H, D]
      d.batch_seq_dim = {1, s[0], s[2]};
      d.heads = s[1];
      d.strides = {0, s[1] * s[2], s[2]};
      break;
  }
  return d;
}

// RunApplyRopeInPieces's blocks: about this many bytes of q and k together (whole tokens), so
// that a block gathered into scratch stays in the core's cache while it is rotated.
constexpr int64_t kPieceBlockBytes = int64_t{256} << 10;

// Byte ranges of a tensor held in pieces, read or written.
class Pieces {
 public:
  explicit Pieces(BytePieces pieces) : pieces_(pieces) {
    starts_.reserve(pieces.size());
    for (const absl::Span<char> piece : pieces) {
      starts_.push_back(size_);
      size_ += static_cast<int64_t>(piece.size());
    }
  }
  int64_t size() const { return size_; }
  BytePieces pieces() const { return pieces_; }

  // Bytes [offset, offset + n) (inside size()) to `out`, or from `in`.
  void Read(int64_t offset, int64_t n, char* out) const {
    Walk(offset, n, [&out](char* piece, int64_t step) {
      std::memcpy(out, piece, static_cast<size_t>(step));
      out += step;
    });
  }
  void Write(int64_t offset, int64_t n, const char* in) const {
    Walk(offset, n, [&in](char* piece, int64_t step) {
      std::memcpy(piece, in, static_cast<size_t>(step));
      in += step;
    });
  }

 private:
  template <typename Step>
  void Walk(int64_t offset, int64_t n, Step step) const {
    // The last piece starting at or before `offset` (empty pieces are stepped over below).
    auto i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                                 starts_.begin() - 1);
    for (; n > 0; ++i) {
      const int64_t at = offset - starts_[i];
      const int64_t len = std::min(n, static_cast<int64_t>(pieces_[i].size()) - at);
      if (len <= 0) continue;
      step(pieces_[i].data() + at, len);
      offset += len;
      n -= len;
    }
  }

  BytePieces pieces_;
  std::vector<int64_t> starts_;  // byte offset of each piece
  int64_t size_ = 0;
};

// A run of adjacent rows of a block: its bytes at `at` in the tensor and `block_at` in the block.
struct RowRun {
  int64_t at = 0, block_at = 0, bytes = 0;
};

// The rows (heads of head_dim elements) of tokens [t0, t0 + n) of a dense tensor with strides
// `st`, in the tensor's memory order, as runs, and the strides of a block holding them densely in
// that order (token-major as BSHD and THD are, head-major as BHSD is).
std::vector<RowRun> BlockRows(const HeadStrides& st, int64_t seq, int64_t heads, int64_t head_dim,
                              int64_t esize, int64_t t0, int64_t n, HeadStrides* block) {
  const bool token_major = st.head <= st.seq;
  *block = token_major ? HeadStrides{0, heads * head_dim, head_dim}
                       : HeadStrides{0, head_dim, n * head_dim};
  std::vector<RowRun> runs;
  const int64_t row_bytes = head_dim * esize;
  const auto row = [&](int64_t u, int64_t h) {
    const int64_t at = (ApplyRopePlan::TokenBase(st, seq, t0 + u) + h * st.head) * esize;
    const int64_t block_at = (u * block->seq + h * block->head) * esize;
    if (!runs.empty() && runs.back().at + runs.back().bytes == at &&
        runs.back().block_at + runs.back().bytes == block_at) {
      runs.back().bytes += row_bytes;
    } else {
      runs.push_back({at, block_at, row_bytes});
    }
  };
  for (int64_t a = 0; a < (token_major ? n : heads); ++a) {
    for (int64_t b = 0; b < (token_major ? heads : n); ++b) {
      token_major ? row(a, b) : row(b, a);
    }
  }
  return runs;
}

// The positions of tokens token(0) .. token(n - 1) of `all`, as those of a call of n tokens.
template <typename Token>
void SelectPositions(const ResolvedPositions& all, int64_t n, Token token, ResolvedPositions* out) {
  out->grid = {n};
  out->num_tokens = n;
  out->components = all.components;
  out->max_position = all.max_position;
  out->pos.resize(static_cast<size_t>(all.components * n));
  for (int64_t c = 0; c < all.components; ++c) {
    for (int64_t i = 0; i < n; ++i) out->pos[c * n + i] = all.pos[c * all.num_tokens + token(i)];
  }
  out->valid.resize(all.valid.empty() ? 0 : static_cast<size_t>(n));
  for (size_t i = 0; i < out->valid.size(); ++i) {
    out->valid[i] = all.valid[static_cast<size_t>(token(static_cast<int64_t>(i)))];
  }
}

// Rotates one token-major tensor (BSHD or THD, dense: token t's `heads` rows are bytes
// [t * token_bytes, (t + 1) * token_bytes) of `all`) in place: the tokens that lie whole in
// a piece where they are, a call per piece; the tokens cut between pieces gathered into scratch,
// some at a time, and put back. `sub` is the plan with this tensor as its q, no k.
absl::Status RotateTokensInPieces(const Backend& backend, ApplyRopePlan sub,
                                  const RopeFrequencies& freqs, const ResolvedPositions& positions,
                                  const Pieces& all, int64_t token_bytes) {
  const int64_t tokens = positions.num_tokens;
  const int64_t cut_batch = std::max<int64_t>(1, kPieceBlockBytes / token_bytes);
  // Made when a token is cut, not cleared (each use writes what it reads).
  std::unique_ptr<char[]> scratch;
  std::vector<int64_t> cut;  // tokens cut between pieces, waiting in `scratch`
  ResolvedPositions sub_positions;
  const auto rotate = [&](char* at, int64_t n, auto token) {
    sub.batch = 1;
    sub.seq = sub.tokens = n;
    SelectPositions(positions, n, token, &sub_positions);
    return backend.ApplyRope(sub, freqs, sub_positions, TensorView{sub.dtype, sub.q.shape, at},
                             TensorView{});
  };
  const auto flush_cut = [&]() -> absl::Status {
    if (cut.empty()) return absl::OkStatus();
    const auto n = static_cast<int64_t>(cut.size());
    if (scratch == nullptr) {
      scratch.reset(new char[static_cast<size_t>(cut_batch * token_bytes)]);
    }
    for (int64_t i = 0; i < n; ++i) {
      all.Read(cut[i] * token_bytes, token_bytes, scratch.get() + i * token_bytes);
    }
    POSENC_RETURN_IF_ERROR(rotate(scratch.get(), n, [&](int64_t i) { return cut[i]; }));
    for (int64_t i = 0; i < n; ++i) {
      all.Write(cut[i] * token_bytes, token_bytes, scratch.get() + i * token_bytes);
    }
    cut.clear();
    return absl::OkStatus();
  };
  int64_t start = 0;  // of the piece, in the tensor
  for (const absl::Span<char> piece : all.pieces()) {
    const int64_t end = start + static_cast<int64_t>(piece.size());
    const int64_t first = (start + token_bytes - 1) / token_bytes;  // first whole token
    const int64_t last = std::min(end / token_bytes, tokens);       // past the last whole one
    if (last > first) {
      POSENC_RETURN_IF_ERROR(rotate(piece.data() + (first * token_bytes - start), last - first,
                                    [first](int64_t i) { return first + i; }));
    }
    // The token this piece starts but does not finish.
    if (end % token_bytes != 0 && end / token_bytes < tokens &&
        (end / token_bytes) * token_bytes >= start) {
      cut.push_back(end / token_bytes);
      if (static_cast<int64_t>(cut.size()) == cut_batch) POSENC_RETURN_IF_ERROR(flush_cut());
    }
    start = end;
  }
  return flush_cut();
}

// Rotates q and k (any layout; RunApplyRopeInPieces uses it for BHSD) in place in their pieces:
// blocks of whole tokens of one sequence, every head of them, gathered into scratch (kept in
// cache), rotated by one backend call and put back.
absl::Status RotateBlocksInPieces(const Backend& backend, const ApplyRopePlan& plan,
                                  const RopeFrequencies& freqs, const ResolvedPositions& positions,
                                  const Pieces& q, const Pieces& k) {
  const int64_t esize = DTypeSize(plan.dtype);
  const int64_t token_bytes = (plan.q_heads + plan.k_heads) * plan.head_dim * esize;
  const int64_t block = std::clamp<int64_t>(kPieceBlockBytes / token_bytes, 1, plan.seq);
  // Not cleared: each block writes what it reads.
  const std::unique_ptr<char[]> scratch(new char[static_cast<size_t>(block * token_bytes)]);
  char* const q_block = scratch.get();
  char* const k_block = q_block + block * plan.q_heads * plan.head_dim * esize;
  // Each block is a call of its own tokens: its plan and positions.
  ApplyRopePlan sub = plan;
  sub.batch = 1;
  ResolvedPositions sub_positions;
  for (int64_t b = 0; b < plan.batch; ++b) {
    for (int64_t s0 = 0; s0 < plan.seq; s0 += block) {
      const int64_t n = std::min(block, plan.seq - s0), t0 = b * plan.seq + s0;
      const std::vector<RowRun> q_runs = BlockRows(plan.q_strides, plan.seq, plan.q_heads,
                                                   plan.head_dim, esize, t0, n, &sub.q_strides);
      std::vector<RowRun> k_runs;
      if (plan.has_k()) {
        k_runs = BlockRows(plan.k_strides, plan.seq, plan.k_heads, plan.head_dim, esize, t0, n,
                           &sub.k_strides);
      }
      for (const RowRun& r : q_runs) q.Read(r.at, r.bytes, q_block + r.block_at);
      for (const RowRun& r : k_runs) k.Read(r.at, r.bytes, k_block + r.block_at);
      sub.seq = sub.tokens = n;
      SelectPositions(
          positions, n, [t0](int64_t i) { return t0 + i; }, &sub_positions);
      POSENC_RETURN_IF_ERROR(backend.ApplyRope(
          sub, freqs, sub_positions, TensorView{plan.dtype, plan.q.shape, q_block},
          plan.has_k() ? TensorView{plan.dtype, plan.k.shape, k_block} : TensorView{}));
      for (const RowRun& r : q_runs) q.Write(r.at, r.bytes, q_block + r.block_at);
      for (const RowRun& r : k_runs) k.Write(r.at, r.bytes, k_block + r.block_at);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ApplyRopePlan> PlanApplyRope(ApplyRopeArgs args) {
  POSENC_RETURN_IF_ERROR(CheckTensor(args.q_field, args.q, args.layout));
  ApplyRopePlan plan;
  const TensorDims qd = Dims(args.q.shape, args.layout);
  plan.dtype = args.q.dtype;
  plan.batch = qd.batch_seq_dim[0];
  plan.seq = qd.batch_seq_dim[1];
  plan.head_dim = qd.batch_seq_dim[2];
  plan.q_heads = qd.heads;
  plan.q_strides = qd.strides;
  plan.q = {args.q_field, args.q.dtype, args.q.shape};
  // Validated shapes fit a message, so these products do not overflow; the element count of q
  // is what NumElements checked on the wire.
  if (!CheckedMul(plan.batch, plan.seq, &plan.tokens)) {
    return Invalid(args.q_field, "batch * seq overflows");
  }
  if (args.k.data != nullptr) {
    POSENC_RETURN_IF_ERROR(CheckTensor("k", args.k, args.layout));
    if (args.k.dtype != args.q.dtype) {
      return Invalid("k", absl::StrCat("expected q's dtype ", DTypeName(args.q.dtype), ", got ",
                                       DTypeName(args.k.dtype)));
    }
    const TensorDims kd = Dims(args.k.shape, args.layout);
    if (kd.batch_seq_dim != qd.batch_seq_dim) {
      return Invalid("k", absl::StrCat("expected the batch, sequence and head_dim of q ",
                                       ShapeString(args.q.shape), " (heads may differ), got ",
                                       ShapeString(args.k.shape)));
    }
    plan.k_heads = kd.heads;
    plan.k_strides = kd.strides;
    plan.k = {"k", args.k.dtype, args.k.shape};
  }
  RopeConfig& config = args.config;
  if (config.head_dim == 0) {
    config.head_dim = plan.head_dim;
  } else if (config.head_dim != plan.head_dim) {
    return Invalid("config.head_dim", absl::StrCat("expected ", args.q_field, "'s last dimension ",
                                                   plan.head_dim, ", got ", config.head_dim));
  }
  POSENC_RETURN_IF_ERROR(ValidateRopeConfig(config));
  plan.rotary_dim = config.rotary_dim.value_or(config.head_dim);
  plan.inv_freq = {"derived.inv_freq", DType::kFloat64, {plan.rotary_dim / 2}};
  TokenGrid grid;
  grid.components = RopePositionAxes(config);
  if (args.layout == TensorLayout::kTHD) {
    grid.kind = TokenGrid::Kind::kPacked;
    grid.tokens = plan.seq;
  } else {
    grid.kind = TokenGrid::Kind::kBatchSeq;
    grid.batch = plan.batch;
    grid.seq = plan.seq;
  }
  POSENC_ASSIGN_OR_RETURN(plan.positions, PlanPositions(std::move(args.positions), grid));
  NormalizePositionAxes(&config);
  plan.config = std::move(config);
  return plan;
}

absl::StatusOr<RopeRunInfo> RunApplyRope(const Backend& backend, const ApplyRopePlan& plan,
                                         RopeFrequencyCache* cache, const TensorView& q,
                                         const TensorView& k) {
  POSENC_RETURN_IF_ERROR(CheckBackendReaches(backend, {{"q", q}, {"k", k}}));
  return RunWithFrequencies(plan.positions, plan.config, cache,
                            [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) {
                              // A NoPE layer: q and k pass through untouched.
                              if (plan.config.nope) return absl::OkStatus();
                              return backend.ApplyRope(plan, freqs, positions, q, k);
                            });
}

absl::StatusOr<RopeRunInfo> RunApplyRopeInPieces(const Backend& backend, const ApplyRopePlan& plan,
                                                 RopeFrequencyCache* cache, BytePieces q,
                                                 BytePieces k) {
  if (backend.reads_device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ApplyRope on tensors in pieces runs on a host backend, not on ", backend.name()));
  }
  const Pieces q_pieces(q), k_pieces(k);
  const int64_t esize = DTypeSize(plan.dtype);
  const int64_t q_bytes = plan.tokens * plan.q_heads * plan.head_dim * esize;
  const int64_t k_bytes = plan.tokens * plan.k_heads * plan.head_dim * esize;
  if (q_pieces.size() != q_bytes) {
    return Invalid(plan.q.name,
                   absl::StrCat("data has ", q_pieces.size(), " bytes, expected ", q_bytes, " (",
                                DTypeName(plan.dtype), " ", ShapeString(plan.q.shape), ")"));
  }
  if (k_pieces.size() != k_bytes) {
    return Invalid("k", absl::StrCat("data has ", k_pieces.size(), " bytes, expected ", k_bytes,
                                     plan.has_k() ? absl::StrCat(" (", DTypeName(plan.dtype), " ",
                                                                 ShapeString(plan.k.shape), ")")
                                                  : std::string(" (no k planned)")));
  }
  // Token-major and dense (BSHD, THD): each tensor rotated where it lies in its pieces.
  const int64_t q_token = plan.q_heads * plan.head_dim, k_token = plan.k_heads * plan.head_dim;
  const auto dense_token_major = [&plan](const HeadStrides& st, int64_t token) {
    return st.head == plan.head_dim && st.seq == token &&
           (plan.batch == 1 || st.batch == plan.seq * token);
  };
  if (dense_token_major(plan.q_strides, q_token) &&
      (!plan.has_k() || dense_token_major(plan.k_strides, k_token))) {
    return RunWithFrequencies(
        plan.positions, plan.config, cache,
        [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) -> absl::Status {
          if (plan.config.nope) return absl::OkStatus();  // a NoPE layer: untouched
          ApplyRopePlan sub = plan;
          sub.k_heads = 0;
          POSENC_RETURN_IF_ERROR(
              RotateTokensInPieces(backend, sub, freqs, positions, q_pieces, q_token * esize));
          if (!plan.has_k()) return absl::OkStatus();
          sub.q_heads = plan.k_heads;
          sub.q_strides = plan.k_strides;
          sub.q = plan.k;
          return RotateTokensInPieces(backend, sub, freqs, positions, k_pieces, k_token * esize);
        });
  }
  // Head-major (BHSD): blocks of tokens of every head gathered into scratch (each token's angles
  // computed once for all its heads, as the kernel does), rotated and put back.
  return RunWithFrequencies(
      plan.positions, plan.config, cache,
      [&](const RopeFrequencies& freqs, const ResolvedPositions& positions) -> absl::Status {
        if (plan.config.nope) return absl::OkStatus();  // a NoPE layer: untouched
        return RotateBlocksInPieces(backend, plan, freqs, positions, q_pieces, k_pieces);
      });
}

}  // namespace posenc::kernels
