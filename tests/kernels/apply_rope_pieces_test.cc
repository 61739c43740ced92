// RunApplyRopeInPieces (kernels/rope/apply_rope.h): q and k whose bytes come in pieces (as off
// the wire, cut anywhere, rows included; every case spans several of its 256 KiB blocks) rotate
// in place exactly as RunApplyRope does on the whole tensors, for every layout, GQA, padding,
// partial rotary and dtype; pieces that do not hold the planned bytes are refused.
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/rope/apply_rope.h"

namespace posenc::kernels {
namespace {

// `bytes` cut into pieces of 1 .. max_piece bytes (an empty piece now and then).
std::vector<absl::Span<char>> Cut(std::string& bytes, int64_t max_piece, std::mt19937* rng) {
  std::vector<absl::Span<char>> pieces;
  std::uniform_int_distribution<int64_t> size(0, max_piece);
  for (size_t at = 0; at < bytes.size();) {
    const auto n = std::min<size_t>(static_cast<size_t>(size(*rng)), bytes.size() - at);
    pieces.emplace_back(bytes.data() + at, n);
    at += n;
  }
  return pieces;
}

std::string RandomBytes(DType dtype, int64_t elements, std::mt19937* rng) {
  std::uniform_real_distribution<float> value(-2.0F, 2.0F);
  std::string out(static_cast<size_t>(elements * DTypeSize(dtype)), '\0');
  for (int64_t i = 0; i < elements; ++i) {
    const float v = value(*rng);
    switch (dtype) {
      case DType::kFloat64: {
        const double d = v;
        std::memcpy(out.data() + i * 8, &d, 8);
        break;
      }
      case DType::kFloat16:  // any bits of a finite half: 0x3xxx is in [0.125, 2)
      case DType::kBFloat16: {
        const auto h =
            static_cast<uint16_t>(0x3000 | std::uniform_int_distribution<int>(0, 0xfff)(*rng));
        std::memcpy(out.data() + i * 2, &h, 2);
        break;
      }
      default: std::memcpy(out.data() + i * 4, &v, 4);
    }
  }
  return out;
}

struct Case {
  std::string name;
  TensorLayout layout;
  Shape q_shape, k_shape;  // k_shape empty: q only
  DType dtype = DType::kFloat32;
  std::vector<uint8_t> mask;  // [B*S] attention mask (empty: none)
  std::optional<int64_t> rotary_dim;
};

class ApplyRopePiecesTest : public ::testing::TestWithParam<Case> {};

TEST_P(ApplyRopePiecesTest, MatchesRunApplyRopeOnTheWholeTensors) {
  const Case& c = GetParam();
  auto cpu = MakeCpuBackend({});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937 rng(7);
  auto elements = [](const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  };
  const std::string q_in = RandomBytes(c.dtype, elements(c.q_shape), &rng);
  const std::string k_in = c.k_shape.empty() ? "" : RandomBytes(c.dtype, elements(c.k_shape), &rng);
  std::vector<int32_t> mask(c.mask.begin(), c.mask.end());

  ApplyRopeArgs args;
  args.config.rotary_dim = c.rotary_dim;
  args.layout = c.layout;
  args.q = {c.dtype, c.q_shape, q_in.data()};
  if (!c.k_shape.empty()) args.k = {c.dtype, c.k_shape, k_in.data()};
  if (!mask.empty()) {
    args.positions.kind = PositionSpec::Kind::kAttentionMask;
    args.positions.mask = {DType::kInt32,
                           {c.q_shape[0], static_cast<int64_t>(mask.size()) / c.q_shape[0]},
                           mask.data()};
  }
  auto plan = PlanApplyRope(args);
  ASSERT_TRUE(plan.ok()) << plan.status();

  // Expected: the bytes copied, then rotated in place.
  std::string q_want = q_in, k_want = k_in;
  TensorView kw;
  if (plan->has_k()) kw = {c.dtype, c.k_shape, k_want.data()};
  ASSERT_TRUE(
      RunApplyRope(**cpu, *plan, nullptr, TensorView{c.dtype, c.q_shape, q_want.data()}, kw).ok());

  for (const int64_t max_piece : {int64_t{1} << 20, int64_t{16384}, int64_t{777}, int64_t{3}}) {
    std::string q_got = q_in, k_got = k_in;
    const auto q_pieces = Cut(q_got, max_piece, &rng);
    const auto k_pieces = Cut(k_got, max_piece, &rng);
    auto info = RunApplyRopeInPieces(**cpu, *plan, nullptr, q_pieces, k_pieces);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_NE(info->frequencies, nullptr);
    EXPECT_TRUE(q_got == q_want) << c.name << ": q differs, pieces of at most " << max_piece;
    EXPECT_TRUE(k_got == k_want) << c.name << ": k differs, pieces of at most " << max_piece;
  }
  // The reference backend takes the same path, and agrees with itself.
  const auto ref = MakeReferenceBackend();
  std::string q_ref_want = q_in, k_ref_want = k_in;
  TensorView krw;
  if (plan->has_k()) krw = {c.dtype, c.k_shape, k_ref_want.data()};
  ASSERT_TRUE(
      RunApplyRope(*ref, *plan, nullptr, TensorView{c.dtype, c.q_shape, q_ref_want.data()}, krw)
          .ok());
  std::string q_ref = q_in, k_ref = k_in;
  const auto q_pieces = Cut(q_ref, 1000, &rng);
  const auto k_pieces = Cut(k_ref, 1000, &rng);
  ASSERT_TRUE(RunApplyRopeInPieces(*ref, *plan, nullptr, q_pieces, k_pieces).ok());
  EXPECT_TRUE(q_ref == q_ref_want) << c.name << ": reference q differs";
  EXPECT_TRUE(k_ref == k_ref_want) << c.name << ": reference k differs";
}

std::vector<uint8_t> Mask(int64_t batch, int64_t seq) {
  std::vector<uint8_t> m(static_cast<size_t>(batch * seq), 1);
  for (int64_t s = 0; s < seq / 3; ++s) m[static_cast<size_t>(s)] = 0;  // left padding, row 0
  m[static_cast<size_t>(batch * seq - 1)] = 0;                          // right padding, last row
  return m;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ApplyRopePiecesTest,
    ::testing::Values(
        Case{"bshd_f32", TensorLayout::kBSHD, {2, 40, 8, 64}, {2, 40, 2, 64}},
        Case{"bshd_large_tokens", TensorLayout::kBSHD, {1, 9, 64, 128}, {1, 9, 64, 128}},
        Case{"bhsd_f32", TensorLayout::kBHSD, {2, 8, 400, 64}, {2, 2, 400, 64}},
        Case{"thd_f32_q_only", TensorLayout::kTHD, {3000, 4, 64}, {}},
        Case{"bshd_bf16_mask",
             TensorLayout::kBSHD,
             {2, 500, 4, 64},
             {2, 500, 4, 64},
             DType::kBFloat16,
             Mask(2, 500)},
        Case{"bhsd_f16_mask_partial",
             TensorLayout::kBHSD,
             {2, 4, 500, 64},
             {2, 1, 500, 64},
             DType::kFloat16,
             Mask(2, 500),
             32},
        Case{"bshd_f64", TensorLayout::kBSHD, {1, 300, 4, 32}, {1, 300, 4, 32}, DType::kFloat64}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(ApplyRopePiecesErrors, PiecesMustHoldThePlannedBytes) {
  auto cpu = MakeCpuBackend({});
  ASSERT_TRUE(cpu.ok());
  std::string q(2 * 4 * 8 * 4, '\0'), k(q.size(), '\0');
  ApplyRopeArgs args;
  args.q = {DType::kFloat32, {1, 2, 4, 8}, q.data()};
  args.k = {DType::kFloat32, {1, 2, 4, 8}, k.data()};
  auto plan = PlanApplyRope(args);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<absl::Span<char>> short_q = {absl::Span<char>(q.data(), 100)};
  const std::vector<absl::Span<char>> whole_q = {absl::Span<char>(q)};
  const std::vector<absl::Span<char>> whole_k = {absl::Span<char>(k)};
  auto st = RunApplyRopeInPieces(**cpu, *plan, nullptr, short_q, whole_k);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("q: data has 100 bytes, expected 256"), std::string::npos)
      << st.status();
  st = RunApplyRopeInPieces(**cpu, *plan, nullptr, whole_q, {});
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("k: data has 0 bytes, expected 256"), std::string::npos)
      << st.status();
}

}  // namespace
}  // namespace posenc::kernels
