#include "client/split.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/convert.h"
#include "client/kernels_dtype.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"
#include "posenc/errors.h"
#include "proto/posenc/v1/byte_buffer.h"

namespace posenc::client::internal {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

using Range = std::pair<int64_t, int64_t>;  // {begin, count}

// a * b, saturating at kMax (both >= 0).
int64_t SatMul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kMax : out;
}
int64_t SatAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kMax : out;
}

int64_t Product(const std::vector<int64_t>& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n = SatMul(n, shape[i]);
  return n;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Calls `run(boxed, bytes)` for each contiguous run of the box [begin, begin + count) of a
// tensor of `shape` (`item` bytes an element), in the box's row-major order; `boxed` is the
// run's byte offset in the tensor. One run per index of the leading cut axes.
template <typename Run>
void ForEachRun(const std::vector<int64_t>& shape, const std::vector<int64_t>& begin,
                const std::vector<int64_t>& count, size_t item, Run run) {
  const size_t rank = shape.size();
  if (rank == 0) {
    run(size_t{0}, item);
    return;
  }
  for (int64_t c : count) {
    if (c == 0) return;
  }
  // Axes past `inner` are whole: the box's rows along `inner` are one contiguous run.
  size_t inner = rank - 1;
  while (inner > 0 && begin[inner] == 0 && count[inner] == shape[inner]) --inner;
  std::vector<size_t> stride(rank, item);
  for (size_t a = rank - 1; a > 0; --a) stride[a - 1] = stride[a] * static_cast<size_t>(shape[a]);
  const size_t bytes = static_cast<size_t>(count[inner]) * stride[inner];
  std::vector<int64_t> index(inner, 0);
  for (;;) {
    size_t boxed = static_cast<size_t>(begin[inner]) * stride[inner];
    for (size_t a = 0; a < inner; ++a) {
      boxed += static_cast<size_t>(begin[a] + index[a]) * stride[a];
    }
    run(boxed, bytes);
    size_t a = inner;
    while (a > 0 && ++index[a - 1] == count[a - 1]) index[--a] = 0;
    if (a == 0) return;
  }
}

// Copies between the box [begin, begin + count) of a tensor of `shape` and a dense tensor of
// shape `count`: from the box (`from_box`) or into it.
void CopyBox(const std::vector<int64_t>& shape, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& count, size_t item, const char* from, char* to,
             bool from_box) {
  size_t dense = 0;
  ForEachRun(shape, begin, count, item, [&](size_t boxed, size_t bytes) {
    std::memcpy(to + (from_box ? dense : boxed), from + (from_box ? boxed : dense), bytes);
    dense += bytes;
  });
}

// RESOURCE_EXHAUSTED before anything is sent: `smallest` (the smallest piece) takes `need`
// bytes, over the budget. Its details say LIMIT_EXCEEDED of max_message_bytes, as the server's.
absl::Status CannotCut(absl::string_view op, absl::string_view smallest, int64_t need,
                       const Budget& budget) {
  const std::string message =
      absl::StrCat(op, ": cannot be split to fit one message: ", smallest, " alone takes ", need,
                   " bytes, over the ", std::max<int64_t>(budget.bytes, 0),
                   " bytes a piece may carry (the message limit of ", budget.limit,
                   " bytes, the smaller of the client's max_message_bytes and the server's "
                   "--max_message_bytes, less 64 KiB and the request's other fields); raise both");
  google::rpc::ErrorInfo info;
  info.set_reason("LIMIT_EXCEEDED");
  info.set_domain("posenc.v1");
  (*info.mutable_metadata())["limit"] = "max_message_bytes";
  google::rpc::Status details;
  details.set_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
  details.set_message(message);
  details.add_details()->PackFrom(info);
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(std::string(kStatusDetailsTypeUrl), absl::Cord(details.SerializeAsString()));
  return status;
}

// ---------------------------------------------------------------------------------------------
// Positions of a [batch, seq] or packed [tokens] grid, cut into boxes of rows x tokens.
// ---------------------------------------------------------------------------------------------
struct Grid {
  bool packed = false;  // THD: batch 1, seq T
  int64_t batch = 1;
  int64_t seq = 1;
};

// The length of the first "mrope_section": [...] array in a config.json's text (the key the
// server's normalizer reads), 0 when there is none or it is not a list of numbers.
int SectionsInJson(const std::string& json) {
  const size_t key = json.find("\"mrope_section\"");
  if (key == std::string::npos) return 0;
  size_t i = json.find_first_not_of(" \t\r\n:", key + 15);
  if (i == std::string::npos || json[i] != '[') return 0;
  int count = 0;
  bool in_number = false;
  for (++i; i < json.size() && json[i] != ']'; ++i) {
    const char c = json[i];
    const bool digit = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
    if (!digit && c != ',' && c != ' ' && c != '\t' && c != '\r' && c != '\n') return 0;
    if (digit && !in_number) ++count;
    in_number = digit;
  }
  return i < json.size() ? count : 0;
}

// The number of position axes the config reads (ids [A, ...] when A > 1), as the kernels'
// RopePositionAxes: frequency_axes (the largest + 1), the VISION layouts or layer_type "vision"
// of a config.json (2: every vision tower posenc knows is 2-D), mrope_section (its length), or a
// config.json's mrope_section (the length of its first one: HunYuan's 4, Qwen's 3; the client
// does not normalize config.json, so a file with several differing sections may be guessed
// wrong: the server's INVALID_ARGUMENT, never a wrong result).
int PositionAxes(const RopeConfig& config) {
  if (!config.frequency_axes.empty()) {
    const int64_t most =
        *std::max_element(config.frequency_axes.begin(), config.frequency_axes.end());
    return static_cast<int>(std::clamp<int64_t>(most + 1, 1, 4));
  }
  if (config.mrope_layout == MropeLayout::kVision2d ||
      config.mrope_layout == MropeLayout::kVision2dEvenOdd ||
      (!config.hf_config_json.empty() && config.layer_type == "vision")) {
    return 2;
  }
  if (!config.mrope_section.empty()) return static_cast<int>(config.mrope_section.size());
  const int sections = SectionsInJson(config.hf_config_json);
  return sections > 1 ? std::min(sections, 4) : 1;
}

int64_t LargestId(const Tensor& ids) {
  int64_t most = -1;
  for (int64_t id : ids.ToInt64s()) most = std::max(most, id);
  return most;
}

// The caller's positions, cut into the piece of rows [b0, b0+m) and tokens [t0, t0+n).
class PositionCut {
 public:
  // nullopt when ids have a shape the grid does not take (the request goes whole: the server's
  // error). `mask_as_ids`: an attention mask becomes INT64 ids (ApplyRope), else its rows are
  // sliced (AddPositionEncoding, tokens never cut).
  static std::optional<PositionCut> Make(const Positions& positions, Grid grid, int axes,
                                         bool mask_as_ids) {
    PositionCut cut(positions, grid, axes, mask_as_ids);
    if (positions.kind != Positions::Kind::kIds) return cut;
    const Tensor& ids = positions.tensor;
    const auto& s = ids.shape;
    if (!ids.Validate().ok() || (ids.dtype != DType::kInt32 && ids.dtype != DType::kInt64) ||
        s.empty() || s.back() != grid.seq) {
      return std::nullopt;
    }
    const bool leading = axes > 1 && s[0] == axes;  // ids [A, ...]
    if (s.size() == 1 && axes == 1) {
      cut.ids_ = IdsLayout::kTokens;
    } else if (s.size() == 2 && leading) {
      cut.ids_ = IdsLayout::kMropeTokens;
    } else if (s.size() == 2 && axes == 1 && !grid.packed && s[0] == grid.batch) {
      cut.ids_ = IdsLayout::kRows;
    } else if (s.size() == 3 && leading && !grid.packed && s[1] == grid.batch) {
      cut.ids_ = IdsLayout::kMropeRows;
    } else {
      return std::nullopt;
    }
    return cut;
  }

  // The piece's positions. `resolved`: the whole request's, for a mask cut as ids.
  Positions Piece(std::pair<int64_t, int64_t> rows, std::pair<int64_t, int64_t> tokens,
                  const kernels::ResolvedPositions* resolved) const {
    using Kind = Positions::Kind;
    const Positions& p = *positions_;
    const auto [b0, m] = rows;
    const auto [t0, n] = tokens;
    const bool all_tokens = t0 == 0 && n == grid_.seq;
    switch (p.kind) {
      case Kind::kDefault: return all_tokens ? p : Positions::Range(t0, n);
      case Kind::kRange: return all_tokens ? p : Positions::Range(p.start + t0, n);
      case Kind::kOffsets: {
        std::vector<int64_t> offsets(p.offsets.begin() + b0, p.offsets.begin() + b0 + m);
        for (int64_t& o : offsets) o += t0;
        return Positions::Offsets(std::move(offsets));
      }
      case Kind::kIds: {
        switch (ids_) {
          case IdsLayout::kTokens: return Positions::Ids(SliceBox(p.tensor, {t0}, {n}));
          case IdsLayout::kMropeTokens:
            return Positions::Ids(SliceBox(p.tensor, {0, t0}, {axes_, n}));
          case IdsLayout::kRows: return Positions::Ids(SliceBox(p.tensor, {b0, t0}, {m, n}));
          case IdsLayout::kMropeRows:
            return Positions::Ids(SliceBox(p.tensor, {0, b0, t0}, {axes_, m, n}));
        }
        return p;
      }
      case Kind::kCuSeqlens: {
        // cu'_i = clamp(cu_i - t0, 0, n); o'_i = o_i + max(0, t0 - cu_i).
        std::vector<int64_t> cu;
        std::vector<int64_t> offsets;
        for (size_t i = 0; i < p.cu_seqlens.size(); ++i) {
          const int64_t c = p.cu_seqlens[i];
          cu.push_back(std::clamp<int64_t>(c - t0, 0, n));
          if (i + 1 < p.cu_seqlens.size()) {
            offsets.push_back((p.offsets.empty() ? 0 : p.offsets[i]) +
                              std::max<int64_t>(0, t0 - c));
          }
        }
        return Positions::CuSeqlens(std::move(cu), std::move(offsets));
      }
      case Kind::kAttentionMask: {
        if (!mask_as_ids_) {
          Positions rows_of_mask = p;
          rows_of_mask.tensor = SliceBox(p.tensor, {b0, 0}, {m, grid_.seq});
          return rows_of_mask;
        }
        // A real token's position as resolved over its whole row; padding 0 (copied through).
        std::vector<int64_t> ids;
        ids.reserve(static_cast<size_t>(axes_ * m * n));
        for (int64_t c = 0; c < axes_; ++c) {
          for (int64_t b = b0; b < b0 + m; ++b) {
            for (int64_t t = t0; t < t0 + n; ++t) ids.push_back(resolved->At(b * grid_.seq + t));
          }
        }
        std::vector<int64_t> shape = {m, n};
        if (axes_ > 1) shape.insert(shape.begin(), axes_);
        return Positions::Ids(ids, std::move(shape));
      }
    }
    return p;
  }

 private:
  enum class IdsLayout { kTokens, kMropeTokens, kRows, kMropeRows };  // [S], [A,S], [B,S], [A,B,S]
  PositionCut(const Positions& positions, Grid grid, int axes, bool mask_as_ids)
      : positions_(&positions), grid_(grid), axes_(axes), mask_as_ids_(mask_as_ids) {}

  const Positions* positions_;
  Grid grid_;
  int64_t axes_;  // position axes the config reads (1: none)
  bool mask_as_ids_;
  IdsLayout ids_ = IdsLayout::kTokens;
};

// ---------------------------------------------------------------------------------------------
// ApplyRope geometry.
// ---------------------------------------------------------------------------------------------
struct RopeGeometry {
  Grid grid;
  int64_t q_heads = 0, k_heads = 0;
  int64_t head_bytes = 0;  // one head of one token
  // Axes of q's (and k's) shape; batch_axis is unused for THD.
  size_t batch_axis = 0, seq_axis = 0, head_axis = 0;
};

// nullopt when the request is too malformed to cut.
std::optional<RopeGeometry> Geometry(const ApplyRopeOptions& options) {
  const Tensor& q = options.q;
  RopeGeometry g;
  g.grid.packed = options.layout == TensorLayout::kTHD;
  const size_t rank = g.grid.packed ? 3 : 4;
  if (q.shape.size() != rank || !q.Validate().ok() || !IsFloatDType(q.dtype)) return std::nullopt;
  for (int64_t d : q.shape) {
    if (d <= 0) return std::nullopt;
  }
  if (g.grid.packed) {
    g.seq_axis = 0;
    g.head_axis = 1;
  } else {
    g.batch_axis = 0;
    g.seq_axis = options.layout == TensorLayout::kBHSD ? 2 : 1;
    g.head_axis = options.layout == TensorLayout::kBHSD ? 1 : 2;
    g.grid.batch = q.shape[0];
  }
  g.grid.seq = q.shape[g.seq_axis];
  g.q_heads = q.shape[g.head_axis];
  g.head_bytes = q.shape.back() * DTypeSize(q.dtype);
  if (options.k.has_value()) {
    const Tensor& k = *options.k;
    if (k.shape.size() != rank || k.dtype != q.dtype || !k.Validate().ok()) return std::nullopt;
    for (size_t a = 0; a < rank; ++a) {
      if (a != g.head_axis && k.shape[a] != q.shape[a]) return std::nullopt;
    }
    g.k_heads = k.shape[g.head_axis];
    if (g.k_heads <= 0) return std::nullopt;
  }
  return g;
}

// The box of heads [h0, h0+hn), rows [b0, b0+m) and tokens [t0, t0+n) in a q or k of `shape`.
Box HeadBox(const RopeGeometry& g, const std::vector<int64_t>& shape,
            std::pair<int64_t, int64_t> heads, std::pair<int64_t, int64_t> rows,
            std::pair<int64_t, int64_t> tokens) {
  Box box{std::vector<int64_t>(shape.size(), 0), shape};
  if (!g.grid.packed) {
    box.begin[g.batch_axis] = rows.first;
    box.count[g.batch_axis] = rows.second;
  }
  box.begin[g.seq_axis] = tokens.first;
  box.count[g.seq_axis] = tokens.second;
  box.begin[g.head_axis] = heads.first;
  box.count[g.head_axis] = heads.second;
  return box;
}

// Padding tokens pass through ApplyRope unchanged: copies every head of each token whose
// `padding` entry is set (one per token of the [B, S] grid) from `input` into `result`.
void CopyPadding(const RopeGeometry& g, const std::vector<uint8_t>& padding, const Tensor& input,
                 Tensor* result) {
  const std::vector<int64_t>& shape = input.shape;
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t a = shape.size() - 1; a > 0; --a) stride[a - 1] = stride[a] * shape[a];
  const int64_t item = DTypeSize(input.dtype);
  for (size_t t = 0; t < padding.size(); ++t) {
    if (padding[t] == 0) continue;
    const int64_t b = static_cast<int64_t>(t) / g.grid.seq;
    const int64_t s = static_cast<int64_t>(t) % g.grid.seq;
    for (int64_t h = 0; h < shape[g.head_axis]; ++h) {
      const int64_t at =
          (b * stride[g.batch_axis] + s * stride[g.seq_axis] + h * stride[g.head_axis]) * item;
      std::memcpy(result->data.data() + at, input.data.data() + at,
                  static_cast<size_t>(g.head_bytes));
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Ranges, slices and joins.
// ---------------------------------------------------------------------------------------------

std::vector<std::pair<int64_t, int64_t>> EvenRanges(int64_t n, int64_t pieces) {
  std::vector<std::pair<int64_t, int64_t>> out;
  pieces = std::max<int64_t>(1, pieces);
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t begin = n * i / pieces;
    out.emplace_back(begin, n * (i + 1) / pieces - begin);
  }
  return out;
}

int64_t FewestPieces(int64_t n, int64_t item_bytes, int64_t budget) {
  const int64_t per_piece = item_bytes > 0 ? budget / item_bytes : n;
  if (per_piece < 1) return 0;
  return std::max<int64_t>(1, CeilDiv(n, per_piece));
}

Tensor SliceBox(const Tensor& tensor, const std::vector<int64_t>& begin,
                const std::vector<int64_t>& count) {
  Tensor out;
  out.dtype = tensor.dtype;
  out.shape = count;
  const auto item = static_cast<size_t>(DTypeSize(tensor.dtype));
  v1::ResizeUninitialized(&out.data, static_cast<size_t>(Product(count, 0, count.size())) * item);
  CopyBox(tensor.shape, begin, count, item, tensor.data.data(), out.data.data(),
          /*from_box=*/true);
  return out;
}

absl::Status PasteBox(const Tensor& part, const std::vector<int64_t>& begin, Tensor* whole) {
  bool fits = part.dtype == whole->dtype && part.shape.size() == whole->shape.size() &&
              begin.size() == whole->shape.size() && part.Validate().ok();
  for (size_t a = 0; fits && a < begin.size(); ++a) {
    fits = begin[a] >= 0 && part.shape[a] >= 0 && begin[a] + part.shape[a] <= whole->shape[a];
  }
  if (!fits) {
    return absl::InternalError(absl::StrCat(
        "split: the server answered a piece with ", std::string(DTypeName(part.dtype)), " of rank ",
        part.shape.size(), ", which does not fit the joined ", std::string(DTypeName(whole->dtype)),
        " result of rank ", whole->shape.size()));
  }
  CopyBox(whole->shape, begin, part.shape, static_cast<size_t>(DTypeSize(part.dtype)),
          part.data.data(), whole->data.data(), /*from_box=*/false);
  return absl::OkStatus();
}

std::vector<v1::BorrowedSlices::Part> BoxParts(const Tensor& tensor, const Box& box) {
  std::vector<v1::BorrowedSlices::Part> parts;
  ForEachRun(tensor.shape, box.begin, box.count, static_cast<size_t>(DTypeSize(tensor.dtype)),
             [&](size_t boxed, size_t bytes) {
               parts.push_back({tensor.data.data() + boxed, bytes});
             });
  return parts;
}

Tensor SliceAxis(const Tensor& tensor, size_t axis, int64_t begin, int64_t count) {
  std::vector<int64_t> begins(tensor.shape.size(), 0);
  std::vector<int64_t> counts = tensor.shape;
  begins[axis] = begin;
  counts[axis] = count;
  return SliceBox(tensor, begins, counts);
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
  // The parts cover `out` along `axis` (checked above): no byte is left unwritten.
  v1::ResizeUninitialized(&out.data, static_cast<size_t>(out.NumElements() * DTypeSize(out.dtype)));
  std::vector<int64_t> begin(out.shape.size(), 0);
  for (const Tensor& part : parts) {
    POSENC_RETURN_IF_ERROR(PasteBox(part, begin, &out));
    begin[axis] += part.shape[axis];
  }
  return out;
}

absl::StatusOr<kernels::ResolvedPositions> ResolveOnGrid(const Positions& positions, bool packed,
                                                         int64_t batch, int64_t seq,
                                                         int64_t components) {
  using Kind = Positions::Kind;
  using SpecKind = kernels::PositionSpec::Kind;
  kernels::PositionSpec spec;
  switch (positions.kind) {
    case Kind::kDefault: spec.kind = SpecKind::kDefault; break;
    case Kind::kRange: spec.kind = SpecKind::kRange; break;
    case Kind::kOffsets: spec.kind = SpecKind::kOffsets; break;
    case Kind::kIds: spec.kind = SpecKind::kIds; break;
    case Kind::kCuSeqlens: spec.kind = SpecKind::kCuSeqlens; break;
    case Kind::kAttentionMask: spec.kind = SpecKind::kAttentionMask; break;
  }
  spec.start = positions.start;
  spec.count = positions.count;
  spec.offsets = positions.offsets;
  spec.cu_seqlens = positions.cu_seqlens;
  if (positions.kind == Kind::kIds || positions.kind == Kind::kAttentionMask) {
    if (!positions.tensor.Validate().ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          positions.kind == Kind::kIds ? "positions.ids: " : "positions.attention_mask: ",
          positions.tensor.Validate().message()));
    }
    kernels::ConstTensorView view;
    view.dtype = ToKernelsDType(positions.tensor.dtype);
    view.shape.assign(positions.tensor.shape.begin(), positions.tensor.shape.end());
    view.data = positions.tensor.data.data();
    (positions.kind == Kind::kIds ? spec.ids : spec.mask) = view;
  }
  kernels::TokenGrid grid;
  grid.kind = packed ? kernels::TokenGrid::Kind::kPacked : kernels::TokenGrid::Kind::kBatchSeq;
  grid.batch = batch;
  grid.seq = seq;
  grid.tokens = batch * seq;
  grid.components = components;
  POSENC_ASSIGN_OR_RETURN(const kernels::PositionPlan plan,
                          kernels::PlanPositions(std::move(spec), grid));
  return kernels::ResolvePositions(plan);
}

// ---------------------------------------------------------------------------------------------
// Output shapes.
// ---------------------------------------------------------------------------------------------

int64_t OutputShape::Bytes() const {
  return SatMul(Product(shape, 0, shape.size()), DTypeSize(dtype));
}

namespace {
// The columns of an inline or named [rows, columns] table; nullopt when neither is known.
std::optional<int64_t> TableColumns(const std::optional<Tensor>& inline_table,
                                    const std::vector<int64_t>& named_table) {
  const std::vector<int64_t>& shape = inline_table.has_value() ? inline_table->shape : named_table;
  if (shape.size() != 2 || shape[1] <= 0) return std::nullopt;
  return shape[1];
}
}  // namespace

std::optional<OutputShape> AddPositionEncodingOutput(const AddPositionEncodingOptions& options,
                                                     const std::vector<int64_t>& named_table) {
  // y: x's shape with the last axis D (ADD) or D + the encoding's width (CONCAT), x's dtype.
  OutputShape y{options.x.dtype, options.x.shape};
  if (y.shape.empty()) return y;
  const int64_t width = y.shape.back();
  int64_t pe_width = width;
  if (options.sinusoidal.has_value()) {
    if (options.sinusoidal->dim > 0) pe_width = options.sinusoidal->dim;
  } else if (options.learned.has_value()) {
    const std::optional<int64_t> columns = TableColumns(options.learned->table_inline, named_table);
    if (!columns.has_value()) return std::nullopt;
    pe_width = *columns;
  }
  if (options.combine == Combine::kConcat) y.shape.back() = SatAdd(width, pe_width);
  return y;
}

std::vector<OutputShape> AlibiBiasOutputs(const AlibiBiasOptions& options) {
  // FULL [H, q, k] ([B, H, q, k] with a mask); COMPACT [H, q + k - 1], BLOOM [(B,) H, k].
  OutputShape bias{options.output_dtype.value_or(DType::kFloat32), {}};
  if (options.attention_mask.has_value()) {
    bias.shape.push_back(options.attention_mask->shape.empty() ? 1
                                                               : options.attention_mask->shape[0]);
  }
  bias.shape.push_back(options.num_heads);
  if (options.form == BiasForm::kCompact) {
    bias.shape.push_back(options.mode == AlibiMode::kBloom ? options.k_len
                                                           : options.q_len + options.k_len - 1);
  } else {
    bias.shape.push_back(options.q_len);
    bias.shape.push_back(options.k_len);
  }
  return {bias, OutputShape{DType::kFloat64, {options.num_heads}}};
}

std::optional<OutputShape> RelativeBiasOutput(const RelativeBiasOptions& options,
                                              const std::vector<int64_t>& named_table) {
  // BUCKETS INT32 [q, k]; FULL [H, q, k]; COMPACT [H, q + k - 1]; H = the table's columns.
  if (options.form == BiasForm::kBuckets) {
    return OutputShape{DType::kInt32, {options.q_len, options.k_len}};
  }
  const std::optional<int64_t> heads = TableColumns(options.table_inline, named_table);
  if (!heads.has_value()) return std::nullopt;
  const DType dtype = options.output_dtype.value_or(DType::kFloat32);
  if (options.form == BiasForm::kCompact) {
    return OutputShape{dtype, {*heads, options.q_len + options.k_len - 1}};
  }
  return OutputShape{dtype, {*heads, options.q_len, options.k_len}};
}

std::optional<OutputShape> RelativeEmbeddingOutput(const RelativeEmbeddingOptions& options,
                                                   const std::vector<int64_t>& named_table) {
  // [q, k, D], D = the table's columns.
  const std::optional<int64_t> width = TableColumns(options.table_inline, named_table);
  if (!width.has_value()) return std::nullopt;
  return OutputShape{options.output_dtype.value_or(DType::kFloat32),
                     {options.q_len, options.k_len, *width}};
}

// ---------------------------------------------------------------------------------------------
// Request bytes.
// ---------------------------------------------------------------------------------------------

RequestBytes ApplyRopeRequestBytes(const v1::ApplyRopeRequest& request) {
  const auto tensors = static_cast<int64_t>(request.q().data().size() + request.k().data().size());
  return {tensors, static_cast<int64_t>(request.ByteSizeLong()) - tensors};
}

RequestBytes AddPositionEncodingRequestBytes(const v1::AddPositionEncodingRequest& request,
                                             int64_t y_bytes) {
  const auto x = static_cast<int64_t>(request.x().data().size());
  return {std::max(x, y_bytes), static_cast<int64_t>(request.ByteSizeLong()) - x};
}

RequestBytes QueryRowRequestBytes(const google::protobuf::Message& request, int64_t q_len,
                                  int64_t row_bytes) {
  return {SatMul(q_len, row_bytes), static_cast<int64_t>(request.ByteSizeLong())};
}

// ---------------------------------------------------------------------------------------------
// ApplyRope.
// ---------------------------------------------------------------------------------------------

namespace {

// The steps of SplitApplyRope over one request of a known geometry.
class RopeSplitter {
 public:
  RopeSplitter(const ApplyRopeOptions& options, const RopeGeometry& g, const Budget& budget)
      : options_(options),
        g_(g),
        budget_(budget),
        head_(SatMul(SatMul(g.grid.batch, g.grid.seq), g.head_bytes)),
        most_heads_(std::max(g.q_heads, g.k_heads)) {}

  // Range i of q's heads with range i of k's, in p ranges, those with heads of q; nullopt when
  // one would send heads of k without q (the server refuses an empty q).
  std::optional<std::vector<std::pair<Range, Range>>> Pairs(int64_t p) const {
    const auto q_ranges = EvenRanges(g_.q_heads, p);
    const auto k_ranges = EvenRanges(g_.k_heads, p);
    std::vector<std::pair<Range, Range>> out;
    for (int64_t i = 0; i < p; ++i) {
      if (q_ranges[i].second == 0 && k_ranges[i].second > 0) return std::nullopt;
      if (q_ranges[i].second > 0) out.emplace_back(q_ranges[i], k_ranges[i]);
    }
    return out;
  }

  // 1. Heads: the fewest p (2 ..) whose largest ranges of q and k heads, every token, fit;
  // positions and config unchanged. nullopt when even one head of each does not fit.
  std::optional<int64_t> HeadPieces() const {
    for (int64_t p = 2; p <= most_heads_; ++p) {
      if (SatAdd(SatMul(CeilDiv(g_.q_heads, p), head_), SatMul(CeilDiv(g_.k_heads, p), head_)) <=
          budget_.bytes) {
        return p;
      }
    }
    return std::nullopt;
  }
  void SplitHeads(const std::vector<std::pair<Range, Range>>& pairs, ApplyRopeSplit* split) const {
    for (const auto& [qh, kh] : pairs) {
      AddPiece(qh, kh, {0, g_.grid.batch}, {0, g_.grid.seq}, options_.positions, options_.config,
               split);
    }
  }

  // 2. and 3. Each head range cut along tokens, or (one token of it across the batch over the
  // budget) one token per piece with the batch rows cut; positions rebased, seq_len pinned.
  absl::Status SplitTokens(const std::vector<std::pair<Range, Range>>& pairs,
                           const PositionCut& cut, const kernels::ResolvedPositions& resolved,
                           const RopeConfig& config, ApplyRopeSplit* split) const {
    const Range all_rows{0, g_.grid.batch};
    for (const auto& [qh, kh] : pairs) {
      // One token of these heads across the batch, and of one batch row.
      const int64_t token_bytes =
          SatMul(SatMul(qh.second + kh.second, g_.grid.batch), g_.head_bytes);
      const int64_t row_bytes = token_bytes / g_.grid.batch;
      if (const int64_t t = FewestPieces(g_.grid.seq, token_bytes, budget_.bytes); t > 0) {
        for (const Range& tokens : EvenRanges(g_.grid.seq, t)) {
          if (tokens.second == 0) continue;
          AddPiece(qh, kh, all_rows, tokens, cut.Piece(all_rows, tokens, &resolved), config, split);
        }
        continue;
      }
      const int64_t b = g_.grid.packed ? 0 : FewestPieces(g_.grid.batch, row_bytes, budget_.bytes);
      if (b == 0) {
        return CannotCut(
            "ApplyRope",
            g_.grid.packed ? "one token of one head" : "one token of one head of one batch row",
            row_bytes, budget_);
      }
      for (int64_t token = 0; token < g_.grid.seq; ++token) {
        for (const Range& rows : EvenRanges(g_.grid.batch, b)) {
          if (rows.second == 0) continue;
          AddPiece(qh, kh, rows, {token, 1}, cut.Piece(rows, {token, 1}, &resolved), config, split);
        }
      }
    }
    return absl::OkStatus();
  }

  int64_t most_heads() const { return most_heads_; }

 private:
  // A piece of q heads `qh`, k heads `kh`, `rows` and `tokens`, with `positions` and `config`.
  void AddPiece(Range qh, Range kh, Range rows, Range tokens, Positions positions,
                const RopeConfig& config, ApplyRopeSplit* split) const {
    ApplyRopeOptions piece;
    piece.layout = options_.layout;
    piece.positions = std::move(positions);
    piece.config = config;
    ApplyRopeSplit::Place place;
    // The box of `tensor`: its dtype and shape (its bytes stay in the caller's tensor).
    auto slice = [](const Tensor& tensor, const Box& box) {
      Tensor out;
      out.dtype = tensor.dtype;
      out.shape = box.count;
      return out;
    };
    place.q = HeadBox(g_, options_.q.shape, qh, rows, tokens);
    piece.q = slice(options_.q, place.q);
    if (kh.second > 0) {
      place.k = HeadBox(g_, options_.k->shape, kh, rows, tokens);
      piece.k = slice(*options_.k, place.k);
    }
    split->pieces.push_back(std::move(piece));
    split->places.push_back(std::move(place));
  }

  const ApplyRopeOptions& options_;
  const RopeGeometry& g_;
  const Budget budget_;
  const int64_t head_;  // one head of q or k, every token
  const int64_t most_heads_;
};

}  // namespace

absl::StatusOr<ApplyRopeSplit> SplitApplyRope(const ApplyRopeOptions& options,
                                              const Budget& budget) {
  ApplyRopeSplit split;
  split.whole = true;  // until the pieces are made
  const std::optional<RopeGeometry> geometry = Geometry(options);
  if (!geometry.has_value()) return split;
  const RopeSplitter splitter(options, *geometry, budget);
  if (const std::optional<int64_t> p = splitter.HeadPieces(); p.has_value()) {
    const auto pairs = splitter.Pairs(*p);
    if (!pairs.has_value()) return split;
    split.whole = false;
    splitter.SplitHeads(*pairs, &split);
    return split;
  }
  const auto pairs = splitter.Pairs(splitter.most_heads());
  const Grid& grid = geometry->grid;
  const std::optional<PositionCut> cut = PositionCut::Make(
      options.positions, grid, PositionAxes(options.config), /*mask_as_ids=*/true);
  if (!pairs.has_value() || !cut.has_value()) return split;
  // The whole request's positions: checked, their largest (seq_len), a mask's.
  kernels::ResolvedPositions resolved;
  int64_t largest = -1;
  if (options.positions.kind == Positions::Kind::kIds) {
    largest = LargestId(options.positions.tensor);
  } else {
    // One component suffices: every kind but ids repeats it for M-RoPE.
    POSENC_ASSIGN_OR_RETURN(resolved,
                            ResolveOnGrid(options.positions, grid.packed, grid.batch, grid.seq));
    largest = resolved.max_position;
  }
  RopeConfig config = options.config;
  if (!config.seq_len.has_value()) config.seq_len = std::max<int64_t>(largest + 1, 1);
  if (options.positions.kind == Positions::Kind::kAttentionMask) {
    split.padding.resize(resolved.valid.size());
    for (size_t t = 0; t < resolved.valid.size(); ++t) split.padding[t] = !resolved.valid[t];
  }
  split.whole = false;
  POSENC_RETURN_IF_ERROR(splitter.SplitTokens(*pairs, *cut, resolved, config, &split));
  return split;
}

ApplyRopeJoin::ApplyRopeJoin(const ApplyRopeOptions& options, const ApplyRopeSplit& split)
    : options_(options), split_(split), pasted_(split.places.size(), 0) {
  // The pieces' boxes cover q and k (padding tokens included, overwritten in Finish), and a piece
  // of another shape is an error: the joined bytes need no zero-fill first.
  auto empty_like = [](const Tensor& t) {
    Tensor out;
    out.dtype = t.dtype;
    out.shape = t.shape;
    v1::ResizeUninitialized(&out.data, t.data.size());
    return out;
  };
  out_.q = empty_like(options.q);
  if (options.k.has_value()) out_.k = empty_like(*options.k);
}

absl::Status ApplyRopeJoin::Paste(size_t piece, bool is_k, DType dtype,
                                  const std::vector<int64_t>& shape,
                                  const std::vector<absl::string_view>& chunks) {
  if (piece >= split_.places.size() || (is_k && !out_.k.has_value())) {
    return absl::InternalError("split: an answer to no piece");
  }
  const Box& box = is_k ? split_.places[piece].k : split_.places[piece].q;
  Tensor& whole = is_k ? *out_.k : out_.q;
  size_t size = 0;
  for (absl::string_view chunk : chunks) size += chunk.size();
  const auto item = static_cast<size_t>(DTypeSize(whole.dtype));
  if (dtype != whole.dtype || shape != box.count ||
      size != static_cast<size_t>(Product(box.count, 0, box.count.size())) * item) {
    return absl::InternalError(
        absl::StrCat("split: the server answered piece ", piece, "'s ", is_k ? "k" : "q", " with ",
                     std::string(DTypeName(dtype)), " [", absl::StrJoin(shape, ", "), "] and ",
                     size, " bytes, not the ", std::string(DTypeName(whole.dtype)), " [",
                     absl::StrJoin(box.count, ", "), "] it asked for"));
  }
  // The chunks read in order, each run of the box filled from as many of them as it spans.
  size_t chunk = 0, at = 0;
  ForEachRun(whole.shape, box.begin, box.count, item, [&](size_t boxed, size_t bytes) {
    char* to = whole.data.data() + boxed;
    while (bytes > 0) {
      while (at == chunks[chunk].size()) ++chunk, at = 0;
      const size_t n = std::min(bytes, chunks[chunk].size() - at);
      std::memcpy(to, chunks[chunk].data() + at, n);
      to += n, at += n, bytes -= n;
    }
  });
  pasted_[piece] |= is_k ? 2 : 1;
  return absl::OkStatus();
}

absl::Status ApplyRopeJoin::Paste(size_t piece, const v1::ApplyRopeResponse& response,
                                  const v1::WireTensors& left) {
  for (const bool is_k : {false, true}) {
    if (piece < split_.places.size() &&
        (is_k ? split_.places[piece].k : split_.places[piece].q).count.empty()) {
      continue;
    }
    const char* field = is_k ? "k" : "q";
    if (is_k && !response.has_k()) {
      return absl::InternalError("split: a piece's k did not come back");
    }
    const v1::Tensor& tensor = is_k ? response.k() : response.q();
    POSENC_ASSIGN_OR_RETURN(const DType dtype, FromProto(tensor.dtype(), field));
    std::vector<absl::string_view> chunks;
    if (const auto it = left.find(field); it != left.end()) {
      for (const absl::Span<char> data : it->second.pieces)
        chunks.emplace_back(data.data(), data.size());
    } else {
      chunks.emplace_back(tensor.data());
    }
    POSENC_RETURN_IF_ERROR(Paste(piece, is_k, dtype,
                                 std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()),
                                 chunks));
  }
  return absl::OkStatus();
}

absl::StatusOr<ApplyRopeResult> ApplyRopeJoin::Finish(RopeDerived derived) {
  for (size_t i = 0; i < pasted_.size(); ++i) {
    const uint8_t expected = split_.places[i].k.count.empty() ? 1 : 3;
    if (pasted_[i] != expected) return absl::InternalError("split: a piece did not come back");
  }
  if (!split_.padding.empty()) {
    const std::optional<RopeGeometry> g = Geometry(options_);
    if (!g.has_value()) return absl::InternalError("split: the request changed");
    CopyPadding(*g, split_.padding, options_.q, &out_.q);
    if (options_.k.has_value()) CopyPadding(*g, split_.padding, *options_.k, &*out_.k);
  }
  out_.derived = std::move(derived);
  return std::move(out_);
}

// ---------------------------------------------------------------------------------------------
// AddPositionEncoding.
// ---------------------------------------------------------------------------------------------

absl::StatusOr<AddPositionEncodingSplit> SplitAddPositionEncoding(
    const AddPositionEncodingOptions& options, const OutputShape& y, const Budget& budget) {
  AddPositionEncodingSplit split;
  split.whole = true;  // until the pieces are made
  split.y = y;
  const Tensor& x = options.x;
  const size_t rank = x.shape.size();
  bool malformed = (rank != 2 && rank != 3) || !x.Validate().ok() || !IsFloatDType(x.dtype) ||
                   y.shape.size() != rank;
  for (size_t a = 0; !malformed && a < rank; ++a) malformed = x.shape[a] <= 0;
  if (malformed) return split;
  const Grid grid{false, rank == 3 ? x.shape[0] : 1, x.shape[rank - 2]};
  const std::optional<PositionCut> cut =
      PositionCut::Make(options.positions, grid, /*axes=*/1, /*mask_as_ids=*/false);
  if (!cut.has_value()) return split;
  // The caller's positions must fit the grid before they are sliced (the kernels' error, as the
  // server's, when not).
  POSENC_RETURN_IF_ERROR(
      ResolveOnGrid(options.positions, /*packed=*/false, grid.batch, grid.seq).status());
  split.whole = false;
  const int64_t width = x.shape.back();
  // One token of x or y, the larger.
  const int64_t token_bytes = std::max(width, y.shape.back()) * DTypeSize(x.dtype);
  // A piece of `rows` batch rows and `tokens` tokens of x and y.
  auto add_piece = [&](Range rows, Range tokens) {
    AddPositionEncodingOptions piece = options;
    std::vector<int64_t> begin = {tokens.first, 0};
    std::vector<int64_t> count = {tokens.second, width};
    if (rank == 3) {
      begin.insert(begin.begin(), rows.first);
      count.insert(count.begin(), rows.second);
    }
    piece.x = SliceBox(x, begin, count);
    piece.positions = cut->Piece(rows, tokens, nullptr);
    count.back() = y.shape.back();
    split.pieces.push_back(std::move(piece));
    split.y_boxes.push_back(Box{std::move(begin), std::move(count)});
  };
  const int64_t seq = grid.seq;
  if (const int64_t b =
          rank == 3 ? FewestPieces(grid.batch, SatMul(seq, token_bytes), budget.bytes) : 0;
      b > 0) {
    // Batch rows, every token.
    for (const Range& rows : EvenRanges(grid.batch, b)) {
      if (rows.second > 0) add_piece(rows, {0, seq});
    }
    return split;
  }
  // One batch row per piece, cut along tokens.
  const int64_t t = FewestPieces(seq, token_bytes, budget.bytes);
  if (t == 0) return CannotCut("AddPositionEncoding", "one token", token_bytes, budget);
  if (options.positions.kind == Positions::Kind::kAttentionMask) {
    return CannotCut("AddPositionEncoding",
                     "one batch row (attention-mask positions are cut along batch rows only)",
                     SatMul(seq, token_bytes), budget);
  }
  for (int64_t row = 0; row < grid.batch; ++row) {
    for (const Range& tokens : EvenRanges(seq, t)) {
      if (tokens.second > 0) add_piece({row, 1}, tokens);
    }
  }
  return split;
}

absl::StatusOr<Tensor> JoinAddPositionEncoding(const AddPositionEncodingSplit& split,
                                               std::vector<Tensor> parts) {
  if (parts.size() != split.y_boxes.size()) {
    return absl::InternalError("split: the pieces' results do not match the pieces");
  }
  Tensor y;
  y.dtype = split.y.dtype;
  y.shape = split.y.shape;
  v1::ResizeUninitialized(&y.data, static_cast<size_t>(split.y.Bytes()));  // the boxes cover y
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].shape != split.y_boxes[i].count) {
      return absl::InternalError("split: the server answered a piece with another shape");
    }
    POSENC_RETURN_IF_ERROR(PasteBox(parts[i], split.y_boxes[i].begin, &y));
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// Query rows.
// ---------------------------------------------------------------------------------------------

absl::StatusOr<int64_t> QueryRowPieces(absl::string_view op, int64_t q_len, int64_t row_bytes,
                                       const Budget& budget) {
  const int64_t p = FewestPieces(q_len, row_bytes, budget.bytes);
  if (p == 0) return CannotCut(op, "one query row", row_bytes, budget);
  return p;
}

}  // namespace posenc::client::internal
