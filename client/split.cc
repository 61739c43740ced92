#include "client/split.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/kernels_dtype.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"

namespace posenc::client::internal {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

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

// The largest n in [0, most] with bytes(n) <= budget, for a non-decreasing `bytes`.
int64_t MostThatFit(int64_t most, int64_t budget, const std::function<int64_t(int64_t)>& bytes) {
  int64_t lo = 0;  // bytes(lo) fits, or lo == 0
  int64_t hi = most;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (bytes(mid) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Copies between the box [begin, begin + count) of a tensor of `shape` and a dense tensor of
// shape `count`: from the box (`from_box`) or into it. One contiguous run per index of the
// leading cut axes.
void CopyBox(const std::vector<int64_t>& shape, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& count, size_t item, const char* from, char* to,
             bool from_box) {
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(to, from, item);
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
  const size_t run = static_cast<size_t>(count[inner]) * stride[inner];
  std::vector<int64_t> index(inner, 0);
  for (size_t dense = 0;; dense += run) {
    size_t boxed = static_cast<size_t>(begin[inner]) * stride[inner];
    for (size_t a = 0; a < inner; ++a) {
      boxed += static_cast<size_t>(begin[a] + index[a]) * stride[a];
    }
    std::memcpy(to + (from_box ? dense : boxed), from + (from_box ? boxed : dense), run);
    size_t a = inner;
    while (a > 0 && ++index[a - 1] == count[a - 1]) index[--a] = 0;
    if (a == 0) return;
  }
}

absl::Status CannotCut(absl::string_view op, absl::string_view smallest, int64_t need,
                       int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat(op, ": the request cannot be cut to fit the message limit of ", limit,
                   " bytes (the smaller of the server's --max_message_bytes and ClientOptions::"
                   "max_message_bytes): ",
                   smallest, " takes ", need, " bytes, over the ", limit - kMessageOverheadBytes,
                   " bytes a piece may carry (the limit less ", kMessageOverheadBytes,
                   " for framing); raise both limits"));
}

// ---------------------------------------------------------------------------------------------
// Positions of a [batch, seq] or packed [tokens] grid, cut into boxes of rows x tokens.
// ---------------------------------------------------------------------------------------------
struct Grid {
  bool packed = false;  // THD: batch 1, seq T
  int64_t batch = 1;
  int64_t seq = 1;
};

// M-RoPE (ids [3, ...]): an explicit mrope_section, or a config.json that names one (the
// client does not normalize config.json; a wrong guess is the server's INVALID_ARGUMENT).
bool IsMrope(const RopeConfig& config) {
  return !config.mrope_section.empty() ||
         config.hf_config_json.find("\"mrope_section\"") != std::string::npos;
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
  static std::optional<PositionCut> Make(const Positions& positions, Grid grid, bool mrope,
                                         bool mask_as_ids) {
    PositionCut cut(positions, grid, mrope, mask_as_ids);
    if (positions.kind != Positions::Kind::kIds) return cut;
    const Tensor& ids = positions.tensor;
    const auto& s = ids.shape;
    if (!ids.Validate().ok() || (ids.dtype != DType::kInt32 && ids.dtype != DType::kInt64) ||
        s.empty() || s.back() != grid.seq) {
      return std::nullopt;
    }
    if (s.size() == 1 && !mrope) {
      cut.ids_ = IdsLayout::kTokens;
    } else if (s.size() == 2 && mrope && s[0] == 3) {
      cut.ids_ = IdsLayout::kMropeTokens;
    } else if (s.size() == 2 && !mrope && !grid.packed && s[0] == grid.batch) {
      cut.ids_ = IdsLayout::kRows;
    } else if (s.size() == 3 && mrope && !grid.packed && s[0] == 3 && s[1] == grid.batch) {
      cut.ids_ = IdsLayout::kMropeRows;
    } else {
      return std::nullopt;
    }
    return cut;
  }

  // What the piece of `rows` x `tokens` sends (PositionBytes of Piece()).
  int64_t Bytes(int64_t rows, int64_t tokens) const {
    using Kind = Positions::Kind;
    const Positions& p = *positions_;
    switch (p.kind) {
      case Kind::kDefault:
      case Kind::kRange: return 0;
      case Kind::kOffsets: return 8 * rows;
      case Kind::kIds: {
        const int64_t item = DTypeSize(p.tensor.dtype);
        switch (ids_) {
          case IdsLayout::kTokens: return item * tokens;
          case IdsLayout::kMropeTokens: return 3 * item * tokens;
          case IdsLayout::kRows: return item * rows * tokens;
          case IdsLayout::kMropeRows: return 3 * item * rows * tokens;
        }
        return 0;
      }
      case Kind::kCuSeqlens: return 8 * (2 * static_cast<int64_t>(p.cu_seqlens.size()) - 1);
      case Kind::kAttentionMask:
        return (mask_as_ids_ ? int64_t{8} * (mrope_ ? 3 : 1) : DTypeSize(p.tensor.dtype)) * rows *
               tokens;
    }
    return 0;
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
          case IdsLayout::kMropeTokens: return Positions::Ids(SliceBox(p.tensor, {0, t0}, {3, n}));
          case IdsLayout::kRows: return Positions::Ids(SliceBox(p.tensor, {b0, t0}, {m, n}));
          case IdsLayout::kMropeRows:
            return Positions::Ids(SliceBox(p.tensor, {0, b0, t0}, {3, m, n}));
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
        const int64_t components = mrope_ ? 3 : 1;
        std::vector<int64_t> ids;
        ids.reserve(static_cast<size_t>(components * m * n));
        for (int64_t c = 0; c < components; ++c) {
          for (int64_t b = b0; b < b0 + m; ++b) {
            for (int64_t t = t0; t < t0 + n; ++t) ids.push_back(resolved->At(b * grid_.seq + t));
          }
        }
        std::vector<int64_t> shape = {m, n};
        if (mrope_) shape.insert(shape.begin(), 3);
        return Positions::Ids(std::move(ids), std::move(shape));
      }
    }
    return p;
  }

 private:
  enum class IdsLayout { kTokens, kMropeTokens, kRows, kMropeRows };  // [S], [3,S], [B,S], [3,B,S]
  PositionCut(const Positions& positions, Grid grid, bool mrope, bool mask_as_ids)
      : positions_(&positions), grid_(grid), mrope_(mrope), mask_as_ids_(mask_as_ids) {}

  const Positions* positions_;
  Grid grid_;
  bool mrope_;
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
  if (q.shape.size() != rank || !q.Validate().ok()) return std::nullopt;
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

Tensor SliceBox(const Tensor& tensor, const std::vector<int64_t>& begin,
                const std::vector<int64_t>& count) {
  Tensor out;
  out.dtype = tensor.dtype;
  out.shape = count;
  const auto item = static_cast<size_t>(DTypeSize(tensor.dtype));
  out.data.resize(static_cast<size_t>(Product(count, 0, count.size())) * item);
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
  out.data.resize(static_cast<size_t>(out.NumElements() * DTypeSize(out.dtype)));
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
// The columns of an inline or named [rows, columns] table; `otherwise` when neither is known.
int64_t TableColumns(const std::optional<Tensor>& inline_table,
                     const std::vector<int64_t>& named_table, int64_t otherwise) {
  if (inline_table.has_value()) {
    return inline_table->shape.size() == 2 ? inline_table->shape[1] : otherwise;
  }
  return named_table.size() == 2 ? named_table[1] : otherwise;
}
}  // namespace

OutputShape AddPositionEncodingOutput(const AddPositionEncodingOptions& options,
                                      const std::vector<int64_t>& named_table) {
  // y: x's shape with the last axis D (ADD) or D + the encoding's width (CONCAT), x's dtype.
  OutputShape y{options.x.dtype, options.x.shape};
  if (y.shape.empty()) return y;
  const int64_t width = y.shape.back();
  int64_t pe_width = width;
  if (options.sinusoidal.has_value()) {
    if (options.sinusoidal->dim > 0) pe_width = options.sinusoidal->dim;
  } else if (options.learned.has_value()) {
    pe_width = TableColumns(options.learned->table_inline, named_table, width);
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

OutputShape RelativeBiasOutput(const RelativeBiasOptions& options,
                               const std::vector<int64_t>& named_table) {
  // BUCKETS INT32 [q, k]; FULL [H, q, k]; COMPACT [H, q + k - 1]; H = the table's columns.
  if (options.form == BiasForm::kBuckets) return {DType::kInt32, {options.q_len, options.k_len}};
  const int64_t heads = TableColumns(options.table_inline, named_table, 1);
  const DType dtype = options.output_dtype.value_or(DType::kFloat32);
  if (options.form == BiasForm::kCompact) {
    return {dtype, {heads, options.q_len + options.k_len - 1}};
  }
  return {dtype, {heads, options.q_len, options.k_len}};
}

OutputShape RelativeEmbeddingOutput(const RelativeEmbeddingOptions& options,
                                    const std::vector<int64_t>& named_table) {
  // [q, k, D], D = the table's columns.
  return {options.output_dtype.value_or(DType::kFloat32),
          {options.q_len, options.k_len, TableColumns(options.table_inline, named_table, 1)}};
}

// ---------------------------------------------------------------------------------------------
// Message bytes.
// ---------------------------------------------------------------------------------------------

int64_t PositionBytes(const Positions& positions) {
  int64_t bytes = 8 * static_cast<int64_t>(positions.offsets.size() + positions.cu_seqlens.size());
  if (positions.kind == Positions::Kind::kIds ||
      positions.kind == Positions::Kind::kAttentionMask) {
    bytes += static_cast<int64_t>(positions.tensor.data.size());
  }
  return bytes;
}

int64_t RopeConfigBytes(const RopeConfig& config) {
  return static_cast<int64_t>(config.hf_config_json.size() +
                              8 * (config.scaling.long_factor.size() +
                                   config.scaling.short_factor.size() +
                                   config.freq_factors.size()));
}

int64_t MessageBytes(const ApplyRopeOptions& options) {
  // The response carries q and k back (and derived values, in the overhead): the request is
  // the larger.
  return static_cast<int64_t>(options.q.data.size() +
                              (options.k.has_value() ? options.k->data.size() : 0)) +
         PositionBytes(options.positions) + RopeConfigBytes(options.config);
}

int64_t MessageBytes(const AddPositionEncodingOptions& options, const OutputShape& y) {
  int64_t request = static_cast<int64_t>(options.x.data.size()) + PositionBytes(options.positions);
  if (options.learned.has_value() && options.learned->table_inline.has_value()) {
    request += static_cast<int64_t>(options.learned->table_inline->data.size());
  }
  return std::max(request, y.Bytes());
}

// ---------------------------------------------------------------------------------------------
// ApplyRope.
// ---------------------------------------------------------------------------------------------

namespace {

using Range = std::pair<int64_t, int64_t>;  // {begin, count}

// The steps of SplitApplyRope over one request of a known geometry.
class RopeSplitter {
 public:
  RopeSplitter(const ApplyRopeOptions& options, const RopeGeometry& g, int64_t limit)
      : options_(options),
        g_(g),
        limit_(limit),
        budget_(limit - kMessageOverheadBytes),
        config_bytes_(RopeConfigBytes(options.config)),
        most_heads_(std::max(g.q_heads, g.k_heads)) {}

  // 1. Heads: the fewest p whose every piece (its heads with every token, the positions and
  // config as they are) fits; false when even one head range per piece does not.
  bool SplitHeads(ApplyRopeSplit* split) const {
    const int64_t head = SatMul(SatMul(g_.grid.batch, g_.grid.seq), g_.head_bytes);
    const int64_t fixed = SatAdd(PositionBytes(options_.positions), config_bytes_);
    for (int64_t p = 1; p <= most_heads_; ++p) {
      const auto q_ranges = EvenRanges(g_.q_heads, p);
      const auto k_ranges = EvenRanges(g_.k_heads, p);
      bool fits = true;
      for (int64_t i = 0; fits && i < p; ++i) {
        fits = SatAdd(SatMul(q_ranges[i].second + k_ranges[i].second, head), fixed) <= budget_;
      }
      if (!fits) continue;
      for (int64_t i = 0; i < p; ++i) {
        if (q_ranges[i].second + k_ranges[i].second == 0) continue;
        AddPiece(q_ranges[i], k_ranges[i], {0, g_.grid.batch}, {0, g_.grid.seq}, options_.positions,
                 options_.config, split);
      }
      return true;
    }
    return false;
  }

  // 2. and 3. One head range per piece, cut along tokens (batch rows first when one token of
  // the range across the batch does not fit); positions rebased, seq_len pinned.
  absl::Status SplitTokens(const PositionCut& cut, const kernels::ResolvedPositions& resolved,
                           const RopeConfig& config, ApplyRopeSplit* split) const {
    const auto q_ranges = EvenRanges(g_.q_heads, most_heads_);
    const auto k_ranges = EvenRanges(g_.k_heads, most_heads_);
    for (int64_t i = 0; i < most_heads_; ++i) {
      const int64_t heads = q_ranges[i].second + k_ranges[i].second;
      if (heads == 0) continue;
      // The bytes of a piece of `rows` batch rows and `tokens` tokens of these heads.
      auto bytes = [&](int64_t rows, int64_t tokens) {
        return SatAdd(SatMul(SatMul(heads * rows, tokens), g_.head_bytes),
                      SatAdd(cut.Bytes(rows, tokens), config_bytes_));
      };
      POSENC_ASSIGN_OR_RETURN(const std::vector<Range> row_ranges, RowRanges(bytes));
      for (const Range& rows : row_ranges) {
        if (rows.second == 0) continue;
        const int64_t most_tokens = MostThatFit(
            g_.grid.seq, budget_, [&](int64_t tokens) { return bytes(rows.second, tokens); });
        for (const Range& tokens : EvenRanges(g_.grid.seq, CeilDiv(g_.grid.seq, most_tokens))) {
          if (tokens.second == 0) continue;
          AddPiece(q_ranges[i], k_ranges[i], rows, tokens, cut.Piece(rows, tokens, &resolved),
                   config, split);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  // Every batch row when one token of them fits, else the fewest even row ranges in which one
  // token fits; RESOURCE_EXHAUSTED when one token of one row does not.
  absl::StatusOr<std::vector<Range>> RowRanges(
      const std::function<int64_t(int64_t, int64_t)>& bytes) const {
    if (bytes(g_.grid.batch, 1) <= budget_) return std::vector<Range>{{0, g_.grid.batch}};
    const int64_t most_rows =
        MostThatFit(g_.grid.batch, budget_, [&](int64_t rows) { return bytes(rows, 1); });
    if (most_rows == 0) {
      return CannotCut("ApplyRope",
                       g_.grid.packed ? "one token of one head with its positions"
                                      : "one token of one head of one batch row with its positions",
                       bytes(1, 1), limit_);
    }
    return EvenRanges(g_.grid.batch, CeilDiv(g_.grid.batch, most_rows));
  }

  // A piece of q heads `qh`, k heads `kh`, `rows` and `tokens`, with `positions` and `config`.
  void AddPiece(Range qh, Range kh, Range rows, Range tokens, Positions positions,
                const RopeConfig& config, ApplyRopeSplit* split) const {
    ApplyRopeOptions piece;
    piece.layout = options_.layout;
    piece.positions = std::move(positions);
    piece.config = config;
    ApplyRopeSplit::Place place;
    const Box k_box = kh.second > 0 ? HeadBox(g_, options_.k->shape, kh, rows, tokens) : Box();
    if (qh.second > 0) {
      place.q = HeadBox(g_, options_.q.shape, qh, rows, tokens);
      piece.q = SliceBox(options_.q, place.q.begin, place.q.count);
      if (kh.second > 0) {
        piece.k = SliceBox(*options_.k, k_box.begin, k_box.count);
        place.k = k_box;
      }
    } else {
      piece.q = SliceBox(*options_.k, k_box.begin, k_box.count);
      place.k = k_box;
      place.q_carries_k = true;
    }
    split->pieces.push_back(std::move(piece));
    split->places.push_back(std::move(place));
  }

  const ApplyRopeOptions& options_;
  const RopeGeometry& g_;
  const int64_t limit_;
  const int64_t budget_;
  const int64_t config_bytes_;
  const int64_t most_heads_;
};

}  // namespace

absl::StatusOr<ApplyRopeSplit> SplitApplyRope(const ApplyRopeOptions& options, int64_t limit) {
  ApplyRopeSplit split;
  const std::optional<RopeGeometry> geometry = Geometry(options);
  if (!geometry.has_value()) {
    split.whole = true;
    return split;
  }
  const RopeSplitter splitter(options, *geometry, limit);
  if (splitter.SplitHeads(&split)) return split;
  const Grid& grid = geometry->grid;
  const std::optional<PositionCut> cut =
      PositionCut::Make(options.positions, grid, IsMrope(options.config), /*mask_as_ids=*/true);
  if (!cut.has_value()) {
    split.whole = true;
    return split;
  }
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
  POSENC_RETURN_IF_ERROR(splitter.SplitTokens(*cut, resolved, config, &split));
  return split;
}

absl::StatusOr<ApplyRopeResult> JoinApplyRope(const ApplyRopeOptions& options,
                                              const ApplyRopeSplit& split,
                                              std::vector<ApplyRopeResult> parts) {
  if (parts.empty() || parts.size() != split.places.size()) {
    return absl::InternalError("split: the pieces' results do not match the pieces");
  }
  auto empty_like = [](const Tensor& t) {
    Tensor out;
    out.dtype = t.dtype;
    out.shape = t.shape;
    out.data.resize(t.data.size());
    return out;
  };
  ApplyRopeResult out;
  out.q = empty_like(options.q);
  if (options.k.has_value()) out.k = empty_like(*options.k);
  auto paste = [](const Tensor& part, const Box& box, Tensor* whole) {
    if (part.shape != box.count) {
      return absl::InternalError("split: the server answered a piece with another shape");
    }
    return PasteBox(part, box.begin, whole);
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    const ApplyRopeSplit::Place& place = split.places[i];
    ApplyRopeResult& part = parts[i];
    if (place.q_carries_k) {
      POSENC_RETURN_IF_ERROR(paste(part.q, place.k, &*out.k));
      continue;
    }
    POSENC_RETURN_IF_ERROR(paste(part.q, place.q, &out.q));
    if (!place.k.count.empty()) {
      if (!part.k.has_value()) return absl::InternalError("split: a piece's k did not come back");
      POSENC_RETURN_IF_ERROR(paste(*part.k, place.k, &*out.k));
    }
  }
  if (!split.padding.empty()) {
    const std::optional<RopeGeometry> g = Geometry(options);
    if (!g.has_value()) return absl::InternalError("split: the request changed");
    CopyPadding(*g, split.padding, options.q, &out.q);
    if (options.k.has_value()) CopyPadding(*g, split.padding, *options.k, &*out.k);
  }
  out.derived = std::move(parts[0].derived);
  return out;
}

// ---------------------------------------------------------------------------------------------
// AddPositionEncoding.
// ---------------------------------------------------------------------------------------------

absl::StatusOr<AddPositionEncodingSplit> SplitAddPositionEncoding(
    const AddPositionEncodingOptions& options, const OutputShape& y, int64_t limit) {
  AddPositionEncodingSplit split;
  split.y = y;
  const Tensor& x = options.x;
  const size_t rank = x.shape.size();
  bool malformed = (rank != 2 && rank != 3) || !x.Validate().ok() || y.shape.size() != rank;
  for (size_t a = 0; !malformed && a < rank; ++a) malformed = x.shape[a] <= 0;
  const Grid grid{false, rank == 3 ? x.shape[0] : 1, malformed ? 1 : x.shape[rank - 2]};
  const std::optional<PositionCut> cut =
      malformed ? std::nullopt
                : PositionCut::Make(options.positions, grid, /*mrope=*/false,
                                    /*mask_as_ids=*/false);
  if (!cut.has_value()) {
    split.whole = true;
    return split;
  }
  // The caller's positions must fit the grid before they are sliced (the kernels' error, as the
  // server's, when not).
  POSENC_RETURN_IF_ERROR(
      ResolveOnGrid(options.positions, /*packed=*/false, grid.batch, grid.seq).status());
  const int64_t budget = limit - kMessageOverheadBytes;
  const int64_t width = x.shape.back();
  const int64_t item = DTypeSize(x.dtype);
  const int64_t table = options.learned.has_value() && options.learned->table_inline.has_value()
                            ? static_cast<int64_t>(options.learned->table_inline->data.size())
                            : 0;
  auto bytes = [&](int64_t rows, int64_t tokens) {
    const int64_t request =
        SatAdd(SatMul(SatMul(rows, tokens), width * item), SatAdd(cut->Bytes(rows, tokens), table));
    return std::max(request, SatMul(SatMul(rows, tokens), y.shape.back() * item));
  };
  // A piece of `rows` batch rows and `tokens` tokens of x and y.
  auto add_piece = [&](std::pair<int64_t, int64_t> rows, std::pair<int64_t, int64_t> tokens) {
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
  if (rank == 3) {
    // Batch rows, every token.
    const int64_t most_rows =
        MostThatFit(grid.batch, budget, [&](int64_t rows) { return bytes(rows, seq); });
    if (most_rows > 0) {
      for (const auto& rows : EvenRanges(grid.batch, CeilDiv(grid.batch, most_rows))) {
        if (rows.second > 0) add_piece(rows, {0, seq});
      }
      return split;
    }
  }
  // One batch row per piece, cut along tokens.
  if (options.positions.kind == Positions::Kind::kAttentionMask) {
    return CannotCut("AddPositionEncoding",
                     "one batch row (attention-mask positions are not cut along tokens: a padding "
                     "token's encoding is zero)",
                     bytes(1, seq), limit);
  }
  const int64_t most_tokens = MostThatFit(seq, budget, [&](int64_t n) { return bytes(1, n); });
  if (most_tokens == 0) {
    return CannotCut("AddPositionEncoding", "one token with its positions and table", bytes(1, 1),
                     limit);
  }
  for (int64_t b = 0; b < grid.batch; ++b) {
    for (const auto& tokens : EvenRanges(seq, CeilDiv(seq, most_tokens))) {
      if (tokens.second > 0) add_piece({b, 1}, tokens);
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
  y.data.resize(static_cast<size_t>(split.y.Bytes()));
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

absl::StatusOr<int64_t> QueryRowPieces(absl::string_view op, int64_t q_len, int64_t request_bytes,
                                       int64_t response_bytes, int64_t row_bytes, int64_t limit) {
  const int64_t budget = limit - kMessageOverheadBytes;
  auto bytes = [&](int64_t rows) {
    return std::max(request_bytes, SatAdd(response_bytes, SatMul(rows, row_bytes)));
  };
  const int64_t most = MostThatFit(q_len, budget, bytes);
  if (most == 0) return CannotCut(op, "one query row", bytes(1), limit);
  return CeilDiv(q_len, most);
}

}  // namespace posenc::client::internal
