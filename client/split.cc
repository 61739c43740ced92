#include "client/split.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace posenc::client::internal {
namespace {

int64_t Product(const std::vector<int64_t>& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= shape[i];
  return n;
}

}  // namespace

int64_t PiecesFor(int64_t bytes, int64_t budget) {
  if (budget <= 0) return bytes > 0 ? bytes : 1;
  return std::max<int64_t>(1, (bytes + budget - 1) / budget);
}

int64_t PiecesForRows(int64_t rows, int64_t row_bytes, int64_t budget) {
  const int64_t per_piece = row_bytes > 0 ? budget / row_bytes : rows;
  if (per_piece <= 0) return rows + 1;
  return std::max<int64_t>(1, (rows + per_piece - 1) / per_piece);
}

std::vector<std::pair<int64_t, int64_t>> EvenRanges(int64_t n, int64_t pieces) {
  std::vector<std::pair<int64_t, int64_t>> out;
  pieces = std::max<int64_t>(1, pieces);
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t begin = n * i / pieces;
    out.emplace_back(begin, n * (i + 1) / pieces - begin);
  }
  return out;
}

Tensor SliceAxis(const Tensor& tensor, size_t axis, int64_t begin, int64_t count) {
  Tensor out;
  out.dtype = tensor.dtype;
  out.shape = tensor.shape;
  out.shape[axis] = count;
  const int64_t outer = Product(tensor.shape, 0, axis);
  const auto row = static_cast<size_t>(Product(tensor.shape, axis + 1, tensor.shape.size()) *
                                       DTypeSize(tensor.dtype));
  const auto dim = static_cast<size_t>(tensor.shape[axis]);
  const auto n = static_cast<size_t>(count);
  out.data.resize(static_cast<size_t>(outer) * n * row);
  for (size_t o = 0; o < static_cast<size_t>(outer); ++o) {
    std::memcpy(out.data.data() + o * n * row,
                tensor.data.data() + (o * dim + static_cast<size_t>(begin)) * row, n * row);
  }
  return out;
}

absl::StatusOr<Tensor> ConcatAxis(const std::vector<Tensor>& parts, size_t axis) {
  if (parts.empty()) return absl::InternalError("split: no pieces to join");
  Tensor out;
  out.dtype = parts[0].dtype;
  out.shape = parts[0].shape;
  if (axis >= out.shape.size()) return absl::InternalError("split: join axis out of range");
  out.shape[axis] = 0;
  for (const Tensor& part : parts) {
    std::vector<int64_t> expected = out.shape;
    expected[axis] = part.shape.size() == expected.size() ? part.shape[axis] : -1;
    if (part.dtype != out.dtype || part.shape != expected || !part.Validate().ok()) {
      return absl::InternalError(absl::StrCat(
          "split: the server answered a piece with ", std::string(DTypeName(part.dtype)),
          " of rank ", part.shape.size(), ", which does not join the others along axis ", axis));
    }
    out.shape[axis] += part.shape[axis];
  }
  const int64_t outer = Product(out.shape, 0, axis);
  const auto row =
      static_cast<size_t>(Product(out.shape, axis + 1, out.shape.size()) * DTypeSize(out.dtype));
  out.data.resize(static_cast<size_t>(outer * out.shape[axis]) * row);
  char* dst = out.data.data();
  for (size_t o = 0; o < static_cast<size_t>(outer); ++o) {
    for (const Tensor& part : parts) {
      const size_t block = static_cast<size_t>(part.shape[axis]) * row;
      std::memcpy(dst, part.data.data() + o * block, block);
      dst += block;
    }
  }
  return out;
}

int64_t ApplyRopeTensorBytes(const ApplyRopeOptions& options) {
  return static_cast<int64_t>(options.q.data.size() +
                              (options.k.has_value() ? options.k->data.size() : 0));
}

size_t HeadAxis(const ApplyRopeOptions& options) {
  // BSHD [B, S, H, D]; BHSD [B, H, S, D]; THD [T, H, D].
  if (options.q.shape.size() == 3 || options.layout == TensorLayout::kBHSD) return 1;
  return 2;
}

int64_t ApplyRopePieces(const ApplyRopeOptions& options, int64_t budget) {
  const size_t axis = HeadAxis(options);
  const int64_t q_heads = options.q.shape[axis];
  const int64_t k_heads = options.k.has_value() ? options.k->shape[axis] : 0;
  const int64_t q_head = q_heads > 0 ? static_cast<int64_t>(options.q.data.size()) / q_heads : 0;
  const int64_t k_head = k_heads > 0 ? static_cast<int64_t>(options.k->data.size()) / k_heads : 0;
  // EvenRanges gives each piece at most ceil(heads / pieces) heads of q and of k.
  for (int64_t pieces = 1; pieces <= std::max(q_heads, k_heads); ++pieces) {
    const int64_t most =
        (q_heads + pieces - 1) / pieces * q_head + (k_heads + pieces - 1) / pieces * k_head;
    if (most <= budget) return pieces;
  }
  return 0;
}

std::vector<ApplyRopeOptions> SplitApplyRope(const ApplyRopeOptions& options, int64_t pieces) {
  const size_t axis = HeadAxis(options);
  const auto q_ranges = EvenRanges(options.q.shape[axis], pieces);
  const auto k_ranges = EvenRanges(options.k.has_value() ? options.k->shape[axis] : 0, pieces);
  std::vector<ApplyRopeOptions> out;
  for (size_t i = 0; i < q_ranges.size(); ++i) {
    ApplyRopeOptions piece;
    piece.positions = options.positions;
    piece.config = options.config;
    piece.layout = options.layout;
    piece.q = SliceAxis(options.q, axis, q_ranges[i].first, q_ranges[i].second);
    if (k_ranges[i].second > 0) {
      piece.k = SliceAxis(*options.k, axis, k_ranges[i].first, k_ranges[i].second);
    }
    out.push_back(std::move(piece));
  }
  return out;
}

absl::StatusOr<ApplyRopeResult> JoinApplyRope(const ApplyRopeOptions& options,
                                              std::vector<ApplyRopeResult> parts) {
  if (parts.empty()) return absl::InternalError("split: no pieces to join");
  const size_t axis = HeadAxis(options);
  std::vector<Tensor> q;
  std::vector<Tensor> k;
  for (ApplyRopeResult& part : parts) {
    q.push_back(std::move(part.q));
    if (part.k.has_value()) k.push_back(std::move(*part.k));
  }
  ApplyRopeResult out;
  out.derived = std::move(parts[0].derived);
  absl::StatusOr<Tensor> joined_q = ConcatAxis(q, axis);
  if (!joined_q.ok()) return joined_q.status();
  out.q = *std::move(joined_q);
  if (options.k.has_value()) {
    absl::StatusOr<Tensor> joined_k = ConcatAxis(k, axis);
    if (!joined_k.ok()) return joined_k.status();
    out.k = *std::move(joined_k);
  }
  return out;
}

std::optional<std::vector<AddPositionEncodingOptions>> SplitAddPositionEncoding(
    const AddPositionEncodingOptions& options, int64_t y_row_bytes, int64_t budget) {
  using Kind = Positions::Kind;
  const Tensor& x = options.x;
  const Positions& p = options.positions;
  if ((x.shape.size() != 2 && x.shape.size() != 3) || !x.Validate().ok()) return std::nullopt;
  const bool by_batch = x.shape.size() == 3;
  const int64_t rows = x.shape[0];  // B, or T for [T, D]
  // What slicing the positions along the split axis takes.
  const bool ids_per_row = p.kind == Kind::kIds && p.tensor.shape.size() == 2;
  const bool ids_shared = p.kind == Kind::kIds && p.tensor.shape.size() == 1;
  if (p.kind == Kind::kCuSeqlens || (p.kind == Kind::kIds && !ids_per_row && !ids_shared)) {
    return std::nullopt;
  }
  if (!by_batch && (p.kind == Kind::kOffsets || p.kind == Kind::kAttentionMask || ids_per_row)) {
    return std::nullopt;
  }
  if ((p.kind == Kind::kOffsets && static_cast<int64_t>(p.offsets.size()) != rows) ||
      ((ids_per_row || p.kind == Kind::kAttentionMask) &&
       (p.tensor.shape.size() != 2 || p.tensor.shape[0] != rows || !p.tensor.Validate().ok()))) {
    return std::nullopt;
  }
  const int64_t row_bytes =
      static_cast<int64_t>(x.data.size()) / std::max<int64_t>(1, rows) + y_row_bytes;
  const int64_t pieces = PiecesForRows(rows, row_bytes, budget);
  if (pieces > rows) return std::nullopt;
  std::vector<AddPositionEncodingOptions> out;
  for (const auto& [begin, count] : EvenRanges(rows, pieces)) {
    if (count == 0) continue;
    AddPositionEncodingOptions piece = options;
    piece.x = SliceAxis(x, 0, begin, count);
    if (by_batch) {
      if (p.kind == Kind::kOffsets) {
        piece.positions.offsets.assign(p.offsets.begin() + begin,
                                       p.offsets.begin() + begin + count);
      } else if (ids_per_row || p.kind == Kind::kAttentionMask) {
        piece.positions.tensor = SliceAxis(p.tensor, 0, begin, count);
      }
    } else if (ids_shared) {
      piece.positions.tensor = SliceAxis(p.tensor, 0, begin, count);
    } else {
      // [T, D]: tokens begin .. begin+count-1 of the default 0 .. T-1 or of the range.
      const int64_t start = p.kind == Kind::kRange ? p.start : 0;
      piece.positions = Positions::Range(start + begin, count);
    }
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace posenc::client::internal
