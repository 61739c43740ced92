// The pure split functions of client/split.h (docs/splitting.md), without a server: piece counts,
// every position kind's rebasing (each piece's positions, resolved by the kernels, equal the whole
// request's at the same tokens), THD cu_seqlens clamping, masks, M-RoPE ids, GQA, BHSD, batch
// rows, the seq_len pin, every piece within the budget, and the joins (a fake server that flips
// every byte: the joined result must be the flipped request, padding tokens excepted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/convert.h"
#include "client/split.h"
#include "posenc/client.h"
#include "posenc/errors.h"

namespace posenc::client::internal {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kKiB = int64_t{1} << 10;

// A tensor of `shape` whose bytes are distinct-ish (their values do not matter here).
Tensor Bytes(std::vector<int64_t> shape, DType dtype = DType::kFloat32) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(t.NumElements() * DTypeSize(dtype)));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<char>(i * 31 % 251);
  return t;
}

std::string Joined(const std::vector<v1::BorrowedSlices::Part>& parts) {
  std::string out;
  for (const v1::BorrowedSlices::Part& part : parts) out.append(part.data, part.size);
  return out;
}

// Piece `i` of `split` with its bytes: its boxes of the caller's tensors (BoxParts), as sent.
ApplyRopeOptions Filled(const ApplyRopeOptions& options, const ApplyRopeSplit& split, size_t i) {
  ApplyRopeOptions piece = split.pieces[i];
  piece.q.data = Joined(BoxParts(options.q, split.places[i].q));
  if (piece.k.has_value()) piece.k->data = Joined(BoxParts(*options.k, split.places[i].k));
  return piece;
}

Tensor Flipped(Tensor t) {
  for (char& c : t.data) c = static_cast<char>(c ^ 0x5a);
  return t;
}

Positions LeftPaddedMask(int64_t batch, int64_t seq, const std::vector<int64_t>& padding) {
  std::vector<int64_t> mask(static_cast<size_t>(batch * seq), 1);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < padding[static_cast<size_t>(b)]; ++t) {
      mask[static_cast<size_t>(b * seq + t)] = 0;
    }
  }
  return Positions::AttentionMask(mask, {batch, seq});
}

std::vector<int64_t> Iota(int64_t n, int64_t start) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + (i * 7) % 5000;
  return v;
}

// The budgets the client computes (docs/splitting.md "The budget") under a message limit.
Budget BudgetOf(const RequestBytes& bytes, int64_t limit) {
  return {limit, limit - kMessageOverheadBytes - bytes.other};
}
Budget RopeBudget(const ApplyRopeOptions& options, int64_t limit) {
  return BudgetOf(ApplyRopeRequestBytes(*ToRequest(options)), limit);
}
absl::StatusOr<ApplyRopeSplit> SplitUnder(const ApplyRopeOptions& options, int64_t limit) {
  return SplitApplyRope(options, RopeBudget(options, limit));
}
Budget AddBudget(const AddPositionEncodingOptions& options, int64_t limit) {
  return BudgetOf(AddPositionEncodingRequestBytes(*ToRequest(options),
                                                  AddPositionEncodingOutput(options)->Bytes()),
                  limit);
}

struct RopeAxes {
  bool packed;
  size_t batch, seq, head;
};
RopeAxes AxesOf(const ApplyRopeOptions& options) {
  if (options.layout == TensorLayout::kTHD) return {true, 0, 0, 1};
  if (options.layout == TensorLayout::kBHSD) return {false, 0, 2, 1};
  return {false, 0, 1, 2};
}

// Splits `options` under `limit` and checks every piece against the whole request; returns the
// split (pieces.size() for the count).
ApplyRopeSplit ExpectRopeSplit(const ApplyRopeOptions& options, int64_t limit, bool cut_tokens) {
  const Budget budget = RopeBudget(options, limit);
  const absl::StatusOr<ApplyRopeSplit> split = SplitApplyRope(options, budget);
  EXPECT_TRUE(split.ok()) << split.status();
  if (!split.ok()) return {};
  EXPECT_FALSE(split->whole);
  const RopeAxes axes = AxesOf(options);
  const int64_t batch = axes.packed ? 1 : options.q.shape[axes.batch];
  const int64_t seq = options.q.shape[axes.seq];
  const int64_t components = options.config.mrope_section.empty() ? 1 : 3;
  const auto whole = ResolveOnGrid(options.positions, axes.packed, batch, seq, components);
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (!whole.ok()) return *split;

  int64_t covered = 0;
  for (size_t i = 0; i < split->pieces.size(); ++i) {
    const ApplyRopeOptions piece = Filled(options, *split, i);
    const ApplyRopeSplit::Place& place = split->places[i];
    const std::string what = absl::StrCat("piece ", i);
    // Its cut tensors within the budget; the whole message within the limit, with room.
    EXPECT_LE(ApplyRopeRequestBytes(*ToRequest(piece)).tensors, budget.bytes) << what;
    EXPECT_LE(static_cast<int64_t>(ToRequest(piece)->ByteSizeLong()), limit - 60 * kKiB) << what;
    const Box& box = place.q;
    covered += piece.q.NumElements() + (piece.k.has_value() ? piece.k->NumElements() : 0);
    const int64_t b0 = axes.packed ? 0 : box.begin[axes.batch];
    const int64_t m = axes.packed ? 1 : box.count[axes.batch];
    const int64_t t0 = box.begin[axes.seq];
    const int64_t n = box.count[axes.seq];
    if (!cut_tokens) {
      EXPECT_EQ(piece.config.seq_len, options.config.seq_len) << what;
      EXPECT_EQ(piece.positions.kind, options.positions.kind) << what;
      EXPECT_EQ(n, seq) << what;
      continue;
    }
    EXPECT_EQ(piece.config.seq_len,
              options.config.seq_len.value_or(std::max<int64_t>(whole->max_position + 1, 1)))
        << what;
    const auto resolved = ResolveOnGrid(piece.positions, axes.packed, m, n, components);
    EXPECT_TRUE(resolved.ok()) << what << ": " << resolved.status();
    if (!resolved.ok()) continue;
    int reported = 0;
    for (int64_t c = 0; c < components; ++c) {
      for (int64_t b = 0; b < m; ++b) {
        for (int64_t t = 0; t < n; ++t) {
          const int64_t token = (b0 + b) * seq + t0 + t;
          if (!whole->IsValid(token)) {
            EXPECT_EQ(split->padding.at(static_cast<size_t>(token)), 1) << what;
            continue;
          }
          const int64_t expected = whole->At(token, c);
          const int64_t got = resolved->At(b * n + t, c);
          if (got != expected && reported++ < 3) {
            ADD_FAILURE() << what << ": token (" << b0 + b << ", " << t0 + t << ") component " << c
                          << " at " << got << ", expected " << expected;
          }
        }
      }
    }
  }
  EXPECT_EQ(covered,
            options.q.NumElements() + (options.k.has_value() ? options.k->NumElements() : 0));
  // The pieces carry no bytes: their requests send the caller's (BoxParts), which are the boxes'
  // bytes in order, framed as a piece with them would be.
  for (size_t i = 0; i < split->pieces.size(); ++i) {
    const ApplyRopeOptions& piece = split->pieces[i];
    const ApplyRopeSplit::Place& place = split->places[i];
    EXPECT_TRUE(piece.q.data.empty());
    EXPECT_EQ(Filled(options, *split, i).q.data,
              SliceBox(options.q, place.q.begin, place.q.count).data);
    if (piece.k.has_value()) {
      EXPECT_EQ(Filled(options, *split, i).k->data,
                SliceBox(*options.k, place.k.begin, place.k.count).data);
    }
    EXPECT_EQ(ToRequestWithoutBytes(piece, /*shapes_only=*/true)->SerializeAsString(),
              ToRequestWithoutBytes(Filled(options, *split, i))->SerializeAsString());
  }
  return *split;
}

// The join of a fake server that flips every byte of q and k: the flipped request, with the
// padding tokens (BSHD) as they were.
void ExpectFlippedJoin(const ApplyRopeOptions& options, const ApplyRopeSplit& split) {
  ApplyRopeJoin whole_answers(options, split);
  for (size_t i = 0; i < split.pieces.size(); ++i) {
    const ApplyRopeOptions piece = Filled(options, split, i);
    const Tensor q = Flipped(piece.q);
    ASSERT_TRUE(whole_answers.Paste(i, false, q.dtype, q.shape, {q.data}).ok()) << "piece " << i;
    if (piece.k.has_value()) {
      const Tensor k = Flipped(*piece.k);
      ASSERT_TRUE(whole_answers.Paste(i, true, k.dtype, k.shape, {k.data}).ok()) << "piece " << i;
    }
  }
  RopeDerived derived;
  derived.seq_len = 42;
  const absl::StatusOr<ApplyRopeResult> joined = whole_answers.Finish(derived);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->derived.seq_len, 42);
  auto expected = [&](const Tensor& input) {
    Tensor out = Flipped(input);
    if (split.padding.empty()) return out;
    // BSHD: token (b, s) is one contiguous run of H * D elements.
    const int64_t token_bytes = input.shape[2] * input.shape[3] * DTypeSize(input.dtype);
    for (size_t t = 0; t < split.padding.size(); ++t) {
      if (split.padding[t] == 0) continue;
      const size_t at = t * static_cast<size_t>(token_bytes);
      out.data.replace(at, static_cast<size_t>(token_bytes), input.data, at,
                       static_cast<size_t>(token_bytes));
    }
    return out;
  };
  EXPECT_EQ(joined->q.shape, options.q.shape);
  EXPECT_TRUE(joined->q.data == expected(options.q).data) << "q differs";
  ASSERT_EQ(joined->k.has_value(), options.k.has_value());
  if (options.k.has_value()) {
    EXPECT_TRUE(joined->k->data == expected(*options.k).data) << "k differs";
  }

  // The same answers as Client::ApplyRope pastes them: from the responses, their bytes left in
  // received slices (v1::WireTensors) of odd sizes, the pieces in reverse order.
  ApplyRopeJoin join(options, split);
  std::vector<std::string> flipped;          // the answers' bytes, which the slices' pieces view
  flipped.reserve(2 * split.pieces.size());  // never moved: a short string's bytes would move
  for (size_t i = split.pieces.size(); i-- > 0;) {
    v1::ApplyRopeResponse response;
    v1::WireTensors left;
    const ApplyRopeOptions filled = Filled(options, split, i);
    for (const bool is_k : {false, true}) {
      const std::optional<Tensor>& piece = is_k ? filled.k : std::optional<Tensor>(filled.q);
      if (!piece.has_value()) continue;
      v1::Tensor* tensor = is_k ? response.mutable_k() : response.mutable_q();
      tensor->set_dtype(ToProto(piece->dtype));
      tensor->mutable_shape()->Assign(piece->shape.begin(), piece->shape.end());
      std::string& bytes = flipped.emplace_back(Flipped(*piece).data);
      v1::WireBytes& wire = left[is_k ? "k" : "q"];
      for (size_t at = 0, n = 3; at < bytes.size(); at += n, n = n * 5 % 1999 + 1) {
        n = std::min(n, bytes.size() - at);
        wire.pieces.emplace_back(bytes.data() + at, n);
        wire.size += n;
      }
    }
    ASSERT_TRUE(join.Paste(i, response, left).ok()) << "piece " << i;
  }
  const absl::StatusOr<ApplyRopeResult> pasted = join.Finish(RopeDerived{});
  ASSERT_TRUE(pasted.ok()) << pasted.status();
  EXPECT_TRUE(pasted->q.data == joined->q.data) << "q pasted from slices differs";
  if (options.k.has_value()) {
    EXPECT_TRUE(pasted->k->data == joined->k->data) << "k pasted from slices differs";
  }
}

TEST(SplitRangesTest, EvenRangesDifferByAtMostOneAndTheLastIsALargest) {
  for (int64_t n : {0, 1, 2, 5, 7, 100, 32768}) {
    for (int64_t p : {1, 2, 3, 4, 17, 18}) {
      const auto ranges = EvenRanges(n, p);
      ASSERT_EQ(ranges.size(), static_cast<size_t>(p));
      int64_t next = 0;
      int64_t largest = 0;
      for (const auto& [begin, count] : ranges) {
        EXPECT_EQ(begin, next);
        next += count;
        largest = std::max(largest, count);
      }
      EXPECT_EQ(next, n);
      EXPECT_EQ(ranges.back().second, largest);
      EXPECT_EQ(largest, (n + p - 1) / p);
    }
  }
}

TEST(SplitRangesTest, SliceBoxAndPasteBoxAreInverse) {
  const Tensor t = Bytes({3, 5, 4, 6}, DType::kFloat16);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes = {
      {{0, 0, 0, 0}, {3, 5, 4, 6}}, {{1, 2, 0, 0}, {2, 3, 4, 6}}, {{0, 1, 1, 0}, {3, 1, 2, 6}},
      {{2, 4, 3, 5}, {1, 1, 1, 1}}, {{0, 0, 2, 0}, {3, 5, 2, 6}}, {{1, 0, 0, 2}, {1, 5, 4, 3}}};
  for (const auto& [begin, count] : boxes) {
    const Tensor part = SliceBox(t, begin, count);
    EXPECT_EQ(part.shape, count);
    ASSERT_TRUE(part.Validate().ok());
    Tensor whole = t;
    for (char& c : whole.data) c = 0;
    ASSERT_TRUE(PasteBox(part, begin, &whole).ok());
    // The pasted box reads back as the part; the rest stays zero.
    EXPECT_TRUE(SliceBox(whole, begin, count).data == part.data);
    int64_t nonzero_bound = part.NumElements() * 2;
    int64_t zeros = 0;
    for (char c : whole.data) zeros += c == 0;
    EXPECT_GE(zeros, static_cast<int64_t>(whole.data.size()) - nonzero_bound);
  }
  Tensor whole = t;
  EXPECT_FALSE(PasteBox(Bytes({2, 5, 4, 6}, DType::kFloat16), {2, 0, 0, 0}, &whole).ok());
  EXPECT_FALSE(PasteBox(Bytes({1, 5, 4, 6}), {0, 0, 0, 0}, &whole).ok());             // dtype
  EXPECT_FALSE(PasteBox(Bytes({5, 4, 6}, DType::kFloat16), {0, 0, 0}, &whole).ok());  // rank
  const auto joined = ConcatAxis({SliceAxis(t, 1, 0, 2), SliceAxis(t, 1, 2, 3)}, 1);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->data == t.data);
  EXPECT_FALSE(ConcatAxis({Bytes({2, 3}), Bytes({2, 4})}, 0).ok());
}

// A piece answered with another dtype, shape or byte count, a piece never answered, an answer to
// no piece: INTERNAL, never a write outside the result.
TEST(SplitApplyRopeTest, AJoinRefusesAnswersThatDoNotFitTheirPiece) {
  ApplyRopeOptions options;
  options.q = Bytes({1, 64, 4, 64});
  options.k = Bytes({1, 64, 4, 64});
  const absl::StatusOr<ApplyRopeSplit> split = SplitApplyRope(options, {kMiB, 2 * 64 * 64 * 4 * 2});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->pieces.size(), 2u);
  const std::string half(64 * 2 * 64 * 4, 'x');
  ApplyRopeJoin join(options, *split);
  EXPECT_EQ(join.Paste(0, false, DType::kFloat16, {1, 64, 2, 64}, {half}).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(join.Paste(0, false, DType::kFloat32, {1, 64, 4, 64}, {half}).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(join.Paste(0, false, DType::kFloat32, {1, 64, 2, 64}, {half, "y"}).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(join.Paste(2, false, DType::kFloat32, {1, 64, 2, 64}, {half}).code(),
            absl::StatusCode::kInternal);
  v1::ApplyRopeResponse no_k;
  no_k.mutable_q()->set_dtype(v1::DTYPE_FLOAT32);
  for (const int64_t n : {1, 64, 2, 64}) no_k.mutable_q()->add_shape(n);
  no_k.mutable_q()->set_data(half);
  EXPECT_EQ(join.Paste(1, no_k, {}).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(join.Paste(0, false, DType::kFloat32, {1, 64, 2, 64}, {half}).ok());
  EXPECT_TRUE(join.Paste(0, true, DType::kFloat32, {1, 64, 2, 64}, {"", half}).ok());
  EXPECT_EQ(join.Finish(RopeDerived{}).status().code(), absl::StatusCode::kInternal);  // piece 1
}

// The issue's headline: one long head through a 1 MiB server, cut along tokens.
TEST(SplitApplyRopeTest, OneLongHeadIsCutAlongTokens) {
  ApplyRopeOptions options;
  options.q = Bytes({1, 32768, 1, 128});  // 16 MiB
  options.positions = Positions::Range(5, 0);
  options.config.head_dim = 128;
  options.config.base = 500000.0;
  const ApplyRopeSplit split = ExpectRopeSplit(options, kMiB, /*cut_tokens=*/true);
  // (1 MiB - 64 KiB) / 512 bytes a token = 1920 tokens a piece at most: 18 pieces of 1820-1821.
  ASSERT_EQ(split.pieces.size(), 18u);
  EXPECT_EQ(split.pieces[1].positions.kind, Positions::Kind::kRange);
  EXPECT_EQ(split.pieces[1].positions.start, 5 + 1820);  // tokens [1820, 3640)
  EXPECT_EQ(split.pieces[1].positions.count, 1820);
  EXPECT_EQ(split.pieces[0].config.seq_len, 5 + 32768);
  ExpectFlippedJoin(options, split);
}

// A piece goes out with its bytes moved into the request (Gather): the same request as a copy.
TEST(SplitApplyRopeTest, HeadsFirstKeepPositionsAndConfig) {
  ApplyRopeOptions options;
  options.q = Bytes({1, 512, 16, 64});  // 128 KiB a head, 2 MiB in all
  options.positions = LeftPaddedMask(1, 512, {9});
  const ApplyRopeSplit split = ExpectRopeSplit(options, kMiB, /*cut_tokens=*/false);
  // 8 heads (1 MiB and the mask) are over 960 KiB; 6 fit.
  EXPECT_EQ(split.pieces.size(), 3u);
  EXPECT_TRUE(split.padding.empty());
  EXPECT_EQ(split.pieces[0].positions.tensor.data, options.positions.tensor.data);
  ExpectFlippedJoin(options, split);
}

// Every position kind of a [batch, seq] grid, cut along tokens: BSHD and BHSD, q and k.
TEST(SplitApplyRopeTest, EveryPositionKindIsRebased) {
  constexpr int64_t kB = 2, kS = 1024;
  std::vector<std::pair<std::string, Positions>> kinds = {
      {"default", Positions::Default()},
      {"range count 0", Positions::Range(7, 0)},
      {"range count S", Positions::Range(7, kS)},
      {"offsets", Positions::Offsets({3, 100})},
      {"ids [S] INT32", Positions::Ids(*Tensor::FromInt64s(Iota(kS, 0), {kS}, DType::kInt32))},
      {"ids [B, S]", Positions::Ids(Iota(kB * kS, 11), {kB, kS})},
      {"mask", LeftPaddedMask(kB, kS, {0, 37})},
  };
  for (TensorLayout layout : {TensorLayout::kBSHD, TensorLayout::kBHSD}) {
    for (const auto& [name, positions] : kinds) {
      SCOPED_TRACE(absl::StrCat(name, layout == TensorLayout::kBHSD ? " BHSD" : " BSHD"));
      ApplyRopeOptions options;
      options.layout = layout;
      options.q = Bytes(layout == TensorLayout::kBHSD ? std::vector<int64_t>{kB, 3, kS, 64}
                                                      : std::vector<int64_t>{kB, kS, 3, 64});
      options.k = Bytes(layout == TensorLayout::kBHSD ? std::vector<int64_t>{kB, 1, kS, 64}
                                                      : std::vector<int64_t>{kB, kS, 1, 64});
      options.positions = positions;
      // 32 KiB a piece: a head across the batch takes 512 KiB.
      const ApplyRopeSplit split =
          ExpectRopeSplit(options, kMessageOverheadBytes + 32 * kKiB, /*cut_tokens=*/true);
      EXPECT_GT(split.pieces.size(), 3u * 16u);
      EXPECT_EQ(split.padding.empty(), positions.kind != Positions::Kind::kAttentionMask);
      if (positions.kind == Positions::Kind::kAttentionMask) {
        EXPECT_EQ(split.pieces[0].positions.kind, Positions::Kind::kIds);
        EXPECT_EQ(split.pieces[0].positions.tensor.dtype, DType::kInt64);
      }
      if (layout == TensorLayout::kBSHD) ExpectFlippedJoin(options, split);
    }
  }
}

TEST(SplitApplyRopeTest, MropeIdsAreSlicedOnTheirLastAxes) {
  constexpr int64_t kB = 2, kS = 512;
  ApplyRopeOptions options;
  options.q = Bytes({kB, kS, 2, 64});
  options.config.mrope_section = {16, 8, 8};
  for (const Positions& positions :
       {Positions::Ids(Iota(3 * kS, 2), {3, kS}), Positions::Ids(Iota(3 * kB * kS, 5), {3, kB, kS}),
        LeftPaddedMask(kB, kS, {100, 0}), Positions::Range(9, 0)}) {
    SCOPED_TRACE(static_cast<int>(positions.kind));
    options.positions = positions;
    const ApplyRopeSplit split =
        ExpectRopeSplit(options, kMessageOverheadBytes + 64 * kKiB, /*cut_tokens=*/true);
    if (positions.kind != Positions::Kind::kRange) {
      EXPECT_EQ(split.pieces[0].positions.tensor.shape.front(), 3);
    }
    ExpectFlippedJoin(options, split);
  }
  // A config.json naming mrope_section counts as M-RoPE too (the client does not parse it).
  options.config = RopeConfig();
  options.config.hf_config_json = R"({"rope_scaling": {"mrope_section": [16, 8, 8]}})";
  options.positions = LeftPaddedMask(kB, kS, {3, 0});
  const auto split = SplitUnder(options, kMessageOverheadBytes + 16 * kKiB);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->pieces[0].positions.tensor.shape.size(), 3u);
}

TEST(SplitApplyRopeTest, PackedThdCuSeqlensAreClamped) {
  ApplyRopeOptions options;
  options.layout = TensorLayout::kTHD;
  options.q = Bytes({1000, 1, 64});  // 256 bytes a token
  options.positions = Positions::CuSeqlens({0, 300, 301, 1000}, {5, 0, 1000});
  // (64 KiB - 7 entries of 8 bytes) / 256 = 255 tokens a piece: 4 pieces of 250.
  const ApplyRopeSplit split =
      ExpectRopeSplit(options, kMessageOverheadBytes + 64 * kKiB, /*cut_tokens=*/true);
  ASSERT_EQ(split.pieces.size(), 4u);
  const Positions& second = split.pieces[1].positions;  // tokens [250, 500)
  EXPECT_EQ(second.cu_seqlens, (std::vector<int64_t>{0, 50, 51, 250}));
  EXPECT_EQ(second.offsets, (std::vector<int64_t>{5 + 250, 0, 1000}));
  const Positions& last = split.pieces[3].positions;  // tokens [750, 1000)
  EXPECT_EQ(last.cu_seqlens, (std::vector<int64_t>{0, 0, 0, 250}));
  EXPECT_EQ(last.offsets, (std::vector<int64_t>{5 + 750, 0 + 450, 1000 + 449}));
  EXPECT_EQ(split.pieces[0].config.seq_len, 1000 + 698 + 1);  // sequence 2's last token
  ExpectFlippedJoin(options, split);

  for (const Positions& positions :
       {Positions::CuSeqlens({0, 10, 1000}), Positions::Default(), Positions::Range(3, 1000),
        Positions::Ids(Iota(1000, 1), {1000})}) {
    SCOPED_TRACE(static_cast<int>(positions.kind));
    options.positions = positions;
    ExpectFlippedJoin(options, ExpectRopeSplit(options, kMessageOverheadBytes + 64 * kKiB, true));
  }
  options.positions = Positions::Ids(Iota(3000, 1), {3, 1000});
  options.config.mrope_section = {16, 8, 8};
  ExpectFlippedJoin(options, ExpectRopeSplit(options, kMessageOverheadBytes + 64 * kKiB, true));
}

TEST(SplitApplyRopeTest, GqaHeadRangesTravelTogether) {
  ApplyRopeOptions options;
  options.q = Bytes({1, 1024, 8, 64});  // 256 KiB a head
  options.k = Bytes({1, 1024, 2, 64});
  // 3 + 1 heads (1 MiB) are over 960 KiB; 2 + 1 fit: 4 pieces, two of them without k.
  ApplyRopeSplit split = ExpectRopeSplit(options, kMiB, /*cut_tokens=*/false);
  ASSERT_EQ(split.pieces.size(), 4u);
  EXPECT_FALSE(split.pieces[0].k.has_value());
  EXPECT_TRUE(split.pieces[1].k.has_value());
  EXPECT_FALSE(split.pieces[2].k.has_value());
  EXPECT_TRUE(split.pieces[3].k.has_value());
  ExpectFlippedJoin(options, split);

  // More k heads than q heads where a piece would hold heads of k without q: not cut (the
  // server refuses an empty q; docs/splitting.md).
  options.q = Bytes({1, 2048, 2, 64});  // 512 KiB a head
  options.k = Bytes({1, 2048, 4, 64});
  const auto whole = SplitUnder(options, kMiB);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->whole);
}

TEST(SplitApplyRopeTest, BatchRowsAreCutWhenOneTokenAcrossTheBatchDoesNotFit) {
  ApplyRopeOptions options;
  options.q = Bytes({64, 16, 1, 128});  // one token across the batch: 32 KiB
  for (const Positions& positions : {Positions::Default(), Positions::Offsets(Iota(64, 3)),
                                     Positions::Ids(Iota(1024, 0), {64, 16}),
                                     LeftPaddedMask(64, 16, std::vector<int64_t>(64, 5))}) {
    SCOPED_TRACE(static_cast<int>(positions.kind));
    options.positions = positions;
    const ApplyRopeSplit split =
        ExpectRopeSplit(options, kMessageOverheadBytes + 16 * kKiB, /*cut_tokens=*/true);
    EXPECT_GE(split.pieces.size(), 32u);
    ExpectFlippedJoin(options, split);
  }
  options.layout = TensorLayout::kBHSD;
  options.q = Bytes({64, 2, 16, 128});
  options.positions = Positions::Range(4, 16);
  // (16 KiB less the request's other bytes) / 512 bytes a row: 31 rows, 3 row ranges a token.
  EXPECT_EQ(ExpectRopeSplit(options, kMessageOverheadBytes + 16 * kKiB, true).pieces.size(),
            2u * 16u * 3u);
}

TEST(SplitApplyRopeTest, CallerSeqLenStays) {
  ApplyRopeOptions options;
  options.q = Bytes({1, 4096, 1, 64});
  options.config.seq_len = 100000;
  const ApplyRopeSplit split =
      ExpectRopeSplit(options, kMessageOverheadBytes + 64 * kKiB, /*cut_tokens=*/true);
  EXPECT_EQ(split.pieces.back().config.seq_len, 100000);
}

TEST(SplitApplyRopeTest, WhatCannotBeCut) {
  ApplyRopeOptions options;
  options.q = Bytes({1, 4, 1, 300000});  // 1.2 MB a token of a head
  auto split = SplitUnder(options, kMiB);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(split.status().message().find("message limit of 1048576"), std::string::npos)
      << split.status();
  EXPECT_EQ(GetErrorDetails(split.status()).reason, "LIMIT_EXCEEDED");
  EXPECT_EQ(GetErrorDetails(split.status()).metadata.at("limit"), "max_message_bytes");
  EXPECT_NE(split.status().message().find("one token of one head of one batch row"),
            std::string::npos)
      << split.status();

  // Positions that do not fit the grid: the kernels' error, naming the caller's field.
  options.q = Bytes({2, 4096, 1, 64});
  options.positions = Positions::Offsets({1, 2, 3});
  split = SplitUnder(options, kMessageOverheadBytes + 64 * kKiB);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(split.status().message().find("positions.offsets"), std::string::npos)
      << split.status();

  // Malformed: goes whole, for the server's error.
  options.positions = Positions::Default();
  options.layout = TensorLayout::kTHD;
  split = SplitUnder(options, kMiB);
  ASSERT_TRUE(split.ok());
  EXPECT_TRUE(split->whole);
  options.layout = TensorLayout::kBSHD;
  options.k = Bytes({2, 4095, 1, 64});
  split = SplitUnder(options, kMiB);
  ASSERT_TRUE(split.ok());
  EXPECT_TRUE(split->whole);
  options.k.reset();
  options.positions = Positions::Ids(Iota(4096, 0), {4096, 1});
  split = SplitUnder(options, kMessageOverheadBytes + 64 * kKiB);
  ASSERT_TRUE(split.ok());
  EXPECT_TRUE(split->whole);
}

// AddPositionEncoding: each piece's positions equal the whole request's at its tokens, every
// piece fits, and the join of a flipping fake server is the flipped x (ADD keeps x's shape).
void ExpectAddSplit(const AddPositionEncodingOptions& options, int64_t limit, size_t pieces) {
  const OutputShape y = *AddPositionEncodingOutput(options);
  const Budget budget = AddBudget(options, limit);
  const absl::StatusOr<AddPositionEncodingSplit> split =
      SplitAddPositionEncoding(options, y, budget);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_FALSE(split->whole);
  EXPECT_EQ(split->pieces.size(), pieces);
  const bool batched = options.x.shape.size() == 3;
  const int64_t batch = batched ? options.x.shape[0] : 1;
  const int64_t seq = options.x.shape[batched ? 1 : 0];
  const auto whole = ResolveOnGrid(options.positions, false, batch, seq);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<Tensor> parts;
  for (size_t i = 0; i < split->pieces.size(); ++i) {
    const AddPositionEncodingOptions& piece = split->pieces[i];
    EXPECT_LE(AddPositionEncodingRequestBytes(*ToRequest(piece),
                                              AddPositionEncodingOutput(piece)->Bytes())
                  .tensors,
              budget.bytes);
    const Box& box = split->y_boxes[i];
    const int64_t b0 = batched ? box.begin[0] : 0;
    const int64_t m = batched ? box.count[0] : 1;
    const int64_t t0 = box.begin[batched ? 1 : 0];
    const int64_t n = box.count[batched ? 1 : 0];
    const auto resolved = ResolveOnGrid(piece.positions, false, m, n);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    for (int64_t b = 0; b < m; ++b) {
      for (int64_t t = 0; t < n; ++t) {
        const int64_t token = (b0 + b) * seq + t0 + t;
        ASSERT_EQ(resolved->IsValid(b * n + t), whole->IsValid(token));
        ASSERT_EQ(resolved->At(b * n + t), whole->At(token)) << "piece " << i << " token " << t;
      }
    }
    parts.push_back(Flipped(piece.x));
  }
  const auto joined = JoinAddPositionEncoding(*split, std::move(parts));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->data == Flipped(options.x).data);
}

TEST(SplitAddPositionEncodingTest, BatchRowsThenTokens) {
  AddPositionEncodingOptions options;
  options.sinusoidal = SinusoidalParams{};
  options.x = Bytes({6, 256, 128});  // 128 KiB a row
  for (const Positions& positions :
       {Positions::Default(), Positions::Range(7, 256), Positions::Offsets({0, 5, 9, 100, 3, 1}),
        Positions::Ids(Iota(256, 3), {256}), Positions::Ids(Iota(1536, 1), {6, 256}),
        LeftPaddedMask(6, 256, {0, 17, 0, 0, 200, 1})}) {
    SCOPED_TRACE(static_cast<int>(positions.kind));
    options.positions = positions;
    ExpectAddSplit(options, kMessageOverheadBytes + 300 * kKiB, 3);  // 2 rows a piece
    if (positions.kind == Positions::Kind::kAttentionMask) {
      // A row over the budget: masks are not cut along tokens.
      const auto refused =
          SplitAddPositionEncoding(options, *AddPositionEncodingOutput(options),
                                   AddBudget(options, kMessageOverheadBytes + 100 * kKiB));
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
      continue;
    }
    // 100 KiB a piece: each row in 2 token ranges.
    ExpectAddSplit(options, kMessageOverheadBytes + 100 * kKiB, 12);
  }
  // [T, D] along tokens.
  options.x = Bytes({4096, 32});
  // 128 bytes a token: 511 a piece beside the request's other bytes, 255 beside 32 KiB of ids.
  for (const auto& [positions, pieces] :
       {std::pair{Positions::Range(100, 4096), 9}, std::pair{Positions::Offsets({12}), 9},
        std::pair{Positions::Ids(Iota(4096, 0), {1, 4096}), 17}}) {
    options.positions = positions;
    ExpectAddSplit(options, kMessageOverheadBytes + 64 * kKiB, pieces);
  }
  // CONCAT doubles y: the response decides.
  options.x = Bytes({4, 512, 64});
  options.combine = Combine::kConcat;
  options.positions = Positions::Default();
  const OutputShape y = *AddPositionEncodingOutput(options);
  EXPECT_EQ(y.shape, (std::vector<int64_t>{4, 512, 128}));
  const auto split = SplitAddPositionEncoding(
      options, y, AddBudget(options, kMessageOverheadBytes + 520 * kKiB));  // 2 rows of y
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->pieces.size(), 2u);
}

TEST(SplitQueryRowsTest, PiecesAndTheSmallestPiece) {
  // 1000 rows of 1 KiB beside 8 KiB of slopes: (960 - 8) rows a piece.
  // 960 rows of 1 KiB a piece.
  EXPECT_EQ(*QueryRowPieces("AlibiBias", 1000, kKiB, {kMiB, 960 * kKiB}), 2);
  EXPECT_EQ(*QueryRowPieces("AlibiBias", 960, kKiB, {kMiB, 960 * kKiB}), 1);
  const auto refused = QueryRowPieces("RelativeEmbedding", 10, 2 * kMiB, {kMiB, 960 * kKiB});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("one query row"), std::string::npos);
  // Other bytes over the limit (an inline table): no budget left.
  EXPECT_FALSE(QueryRowPieces("RelativeBias", 10, 1, {kMiB, -5}).ok());
}

}  // namespace
}  // namespace posenc::client::internal
