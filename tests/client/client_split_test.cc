// The client's transparent splitting, compact biases, asynchronous calls and per-call deadlines
// (client/split.h, posenc/client.h), against two in-process servers on TCP: one with a 1 MiB
// message limit (the client learns it from GetServerInfo and splits) and the shared one with the
// default 256 MiB (one call: the result every split result must equal byte for byte).
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client_test_util.h"
#include "posenc/client.h"
#include "posenc/errors.h"
#include "posenc/v1/posenc.pb.h"
#include "server/error_details.h"
#include "server/server.h"

namespace posenc::client {
namespace {

using testing::ConnectToPort;
using testing::ExpectSameTensor;

constexpr int64_t kSmallLimit = int64_t{1} << 20;

// A cpu-backend server with a 1 MiB message limit, for the whole binary.
server::PosencServer& SmallServer() {
  static server::PosencServer* const server = [] {
    server::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.backend = "cpu";
    options.threads = 1;
    options.max_message_bytes = kSmallLimit;
    auto started = server::PosencServer::Start(options);
    if (!started.ok()) std::abort();
    return started->release();
  }();
  return *server;
}

// A FLOAT32 tensor of `shape` with distinct values.
Tensor Ramp(std::vector<int64_t> shape, float scale = 1e-3f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = scale * static_cast<float>(i % 9973);
  return *Tensor::FromFloats(values, std::move(shape));
}

class SplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    split_ = ConnectToPort(SmallServer().port());
    ClientOptions unsplit_options;
    unsplit_options.split_requests = false;
    small_unsplit_ = ConnectToPort(SmallServer().port(), unsplit_options);
    // The reference server: the cpu backend too, so the bytes must agree exactly.
    static server::PosencServer* const big = [] {
      server::ServerOptions options;
      options.listen_address = "127.0.0.1:0";
      options.backend = "cpu";
      options.threads = 1;
      auto started = server::PosencServer::Start(options);
      if (!started.ok()) std::abort();
      return started->release();
    }();
    whole_ = ConnectToPort(big->port());
    ASSERT_NE(split_, nullptr);
    ASSERT_NE(whole_, nullptr);
  }

  // Calls `method` with `reference_options` on whole_ and with `options` on `tested`, asserts
  // that both succeed and hands the two results (tested's first) to `expect`.
  template <typename Options, typename Result, typename Expect>
  void CompareWithWhole(absl::StatusOr<Result> (Client::*method)(const Options&, const CallOptions&)
                            const,
                        const Client& tested, const Options& options,
                        const Options& reference_options, Expect expect) {
    const absl::StatusOr<Result> reference = (*whole_.*method)(reference_options, CallOptions{});
    const absl::StatusOr<Result> result = (tested.*method)(options, CallOptions{});
    ASSERT_TRUE(reference.ok() && result.ok()) << result.status();
    expect(*result, *reference);
  }
  // The same with one request for both.
  template <typename Options, typename Result, typename Expect>
  void CompareWithWhole(absl::StatusOr<Result> (Client::*method)(const Options&, const CallOptions&)
                            const,
                        const Client& tested, const Options& options, Expect expect) {
    CompareWithWhole(method, tested, options, options, expect);
  }

  std::unique_ptr<Client> split_;          // 1 MiB server, splitting on
  std::unique_ptr<Client> small_unsplit_;  // 1 MiB server, splitting off
  std::unique_ptr<Client> whole_;          // 256 MiB server: one call
};

// An `expect` for CompareWithWhole of calls that return one Tensor.
auto SameTensor(std::string what) {
  return
      [what = std::move(what)](const Tensor& a, const Tensor& b) { ExpectSameTensor(a, b, what); };
}

TEST_F(SplitTest, ApplyRopeBshdGqaSplitsAlongHeadsByteIdentical) {
  ApplyRopeOptions options;
  options.q = Ramp({2, 256, 16, 64});  // 2 MiB
  options.k = Ramp({2, 256, 4, 64});   // 0.5 MiB
  options.positions = Positions::Offsets({3, 1000});
  options.config.scaling.type = RopeScalingType::kDynamic;
  options.config.scaling.factor = 4;
  options.config.max_position_embeddings = 512;
  const auto whole = whole_->ApplyRope(options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const auto split = split_->ApplyRope(options);
  ASSERT_TRUE(split.ok()) << split.status();
  ExpectSameTensor(split->q, whole->q, "q");
  ASSERT_TRUE(split->k.has_value());
  ExpectSameTensor(*split->k, *whole->k, "k");
  EXPECT_EQ(split->derived.seq_len, whole->derived.seq_len);
  EXPECT_EQ(split->derived.inv_freq, whole->derived.inv_freq);

  // Without splitting the same request is over the 1 MiB limit.
  const auto refused = small_unsplit_->ApplyRope(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
}

TEST_F(SplitTest, ApplyRopeBhsdAndThdSplitByteIdentical) {
  ApplyRopeOptions bhsd;
  bhsd.q = Ramp({1, 12, 512, 64});
  bhsd.layout = TensorLayout::kBHSD;
  bhsd.config.rotary_dim = 32;
  ApplyRopeOptions thd;
  thd.q = Ramp({1000, 8, 64});
  thd.k = Ramp({1000, 2, 64});
  thd.layout = TensorLayout::kTHD;
  thd.positions = Positions::CuSeqlens({0, 300, 1000});
  for (const ApplyRopeOptions& options : {bhsd, thd}) {
    const auto whole = whole_->ApplyRope(options);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const auto split = split_->ApplyRope(options);
    ASSERT_TRUE(split.ok()) << split.status();
    ExpectSameTensor(split->q, whole->q, "q");
    EXPECT_EQ(split->k.has_value(), options.k.has_value());
    if (options.k.has_value()) ExpectSameTensor(*split->k, *whole->k, "k");
  }
}

// One head over the limit is cut along tokens (positions rebased, seq_len pinned: dynamic NTK
// sees the whole request's length); one token of one head over it cannot be cut.
TEST_F(SplitTest, OneHeadOverTheLimitIsCutAlongTokens) {
  ApplyRopeOptions options;
  options.q = Ramp({1, 8192, 1, 64});  // one head of 2 MiB
  options.k = Ramp({1, 8192, 1, 64});
  options.positions = Positions::Range(17, 0);
  options.config.scaling.type = RopeScalingType::kDynamic;
  options.config.scaling.factor = 2;
  options.config.max_position_embeddings = 4096;
  const auto whole = whole_->ApplyRope(options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const auto split = split_->ApplyRope(options);
  ASSERT_TRUE(split.ok()) << split.status();
  ExpectSameTensor(split->q, whole->q, "q");
  ExpectSameTensor(*split->k, *whole->k, "k");
  EXPECT_EQ(split->derived.seq_len, 17 + 8192);
  EXPECT_EQ(split->derived.inv_freq, whole->derived.inv_freq);

  options.q = Ramp({1, 2, 1, 300000});  // one token of one head: 1.2 MB
  options.k.reset();
  const auto refused = split_->ApplyRope(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("cannot be split to fit one message"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("message limit of 1048576"), std::string::npos);
}

// An attention mask cut along tokens becomes ids with one row per position axis the config
// reads: [2, m, n] for the 2-D vision layouts (and config.json's vision tower), [3, m, n] for
// M-RoPE sections. (The client once sent [3, ...] for every layout; the server refused them.)
TEST_F(SplitTest, MaskOfEveryAxisCountIsCutAlongTokens) {
  std::vector<int64_t> mask(2 * 4096, 1);
  for (int j = 0; j < 300; ++j) mask[static_cast<size_t>(j)] = 0;  // row 0 left-padded
  ApplyRopeOptions options;
  options.q = Ramp({2, 4096, 1, 64});  // one head of 2 MiB
  options.positions = Positions::AttentionMask(mask, {2, 4096});
  std::vector<RopeConfig> configs(6);
  configs[0].mrope_layout = MropeLayout::kVision2d;
  configs[1].mrope_layout = MropeLayout::kVision2dEvenOdd;
  configs[2].mrope_section = {8, 12, 12};
  configs[3].frequency_axes.assign(32, 0);
  for (size_t j = 16; j < 32; ++j) configs[3].frequency_axes[j] = 1 + static_cast<int64_t>(j % 2);
  // A config.json's sections: four axes (HunYuan-style; before, every such file was taken as 3)
  // and three.
  const char* sections[] = {"[8, 8, 8, 8]", "[8,12,12]"};
  for (size_t j = 0; j < 2; ++j) {
    configs[4 + j].hf_config_json =
        absl::StrCat(R"({"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 1, )",
                     R"("max_position_embeddings": 8192, "rope_theta": 10000.0, )",
                     R"("rope_scaling": {"type": "mrope", "mrope_section": )", sections[j], "}}");
  }
  for (const RopeConfig& config : configs) {
    options.config = config;
    const auto whole = whole_->ApplyRope(options);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const auto split = split_->ApplyRope(options);
    ASSERT_TRUE(split.ok()) << split.status();
    ExpectSameTensor(split->q, whole->q,
                     absl::StrCat("q, layout ", config.mrope_layout, " ", config.hf_config_json));
  }
}

TEST_F(SplitTest, FullBiasesAndEmbeddingsSplitAlongQueryRowsByteIdentical) {
  AlibiBiasOptions causal;
  causal.num_heads = 16;
  causal.q_len = 200;
  causal.k_len = 300;
  causal.form = BiasForm::kFull;  // 3.8 MiB
  ASSERT_NO_FATAL_FAILURE(
      CompareWithWhole(&Client::AlibiBias, *split_, causal,
                       [](const AlibiBiasResult& split, const AlibiBiasResult& whole) {
                         ExpectSameTensor(split.bias, whole.bias, "alibi causal");
                         ExpectSameTensor(split.slopes, whole.slopes, "slopes");
                       }));

  AlibiBiasOptions bloom = causal;
  bloom.mode = AlibiMode::kBloom;
  std::vector<int64_t> mask(2 * 300, 1);
  for (int j = 0; j < 40; ++j) mask[static_cast<size_t>(j)] = 0;  // left padding in row 0
  bloom.attention_mask = *Tensor::FromInt64s(mask, {2, 300});
  ASSERT_NO_FATAL_FAILURE(
      CompareWithWhole(&Client::AlibiBias, *split_, bloom,
                       [](const AlibiBiasResult& split, const AlibiBiasResult& whole) {
                         ExpectSameTensor(split.bias, whole.bias, "alibi bloom");
                       }));

  RelativeBiasOptions t5;
  t5.q_len = 300;
  t5.k_len = 300;
  t5.table_inline = Ramp({32, 8});
  t5.form = BiasForm::kFull;  // 2.7 MiB
  ASSERT_NO_FATAL_FAILURE(
      CompareWithWhole(&Client::RelativeBias, *split_, t5, SameTensor("t5 full")));

  RelativeBiasOptions buckets;
  buckets.q_len = 700;
  buckets.k_len = 700;
  buckets.form = BiasForm::kBuckets;  // 1.9 MiB of INT32
  ASSERT_NO_FATAL_FAILURE(
      CompareWithWhole(&Client::RelativeBias, *split_, buckets, SameTensor("t5 buckets")));

  RelativeEmbeddingOptions shaw;
  shaw.q_len = 128;
  shaw.k_len = 160;
  shaw.max_relative = 16;
  shaw.table_inline = Ramp({33, 16});  // 1.3 MiB out
  CompareWithWhole(&Client::RelativeEmbedding, *split_, shaw, SameTensor("shaw"));
}

TEST_F(SplitTest, AddPositionEncodingSplitsAlongTokensByteIdentical) {
  // [B, T, D] by batch rows, with positions of every kind that slices by row.
  AddPositionEncodingOptions batch;
  batch.x = Ramp({6, 256, 128});  // 768 KiB in, 1.5 MiB out (CONCAT)
  batch.sinusoidal = SinusoidalParams{.dim = 128};
  batch.combine = Combine::kConcat;
  batch.scale = 2.0;
  std::vector<int64_t> mask(6 * 256, 1);
  for (int j = 0; j < 17; ++j) mask[static_cast<size_t>(256 + j)] = 0;  // row 1 left-padded
  std::vector<int64_t> ids(6 * 256);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i % 300);
  for (const Positions& positions :
       {Positions::Default(), Positions::Range(7, 256), Positions::Offsets({0, 5, 9, 100, 3, 1}),
        Positions::Ids(ids, {6, 256}), Positions::AttentionMask(mask, {6, 256})}) {
    AddPositionEncodingOptions options = batch;
    options.positions = positions;
    const auto whole = whole_->AddPositionEncoding(options);
    const auto split = split_->AddPositionEncoding(options);
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_TRUE(split.ok()) << split.status();
    ExpectSameTensor(*split, *whole, absl::StrCat("positions kind ", positions.kind));
  }
  // [T, D] by token ranges, a learned table inline.
  AddPositionEncodingOptions tokens;
  tokens.x = Ramp({4096, 32});  // 512 KiB in and out, beside a 525 KiB table
  tokens.positions = Positions::Range(100, 4096);
  tokens.learned = LearnedTable{.table_inline = Ramp({4200, 32}, 1e-4f)};
  const auto whole = whole_->AddPositionEncoding(tokens);
  const auto split = split_->AddPositionEncodingAsync(tokens).get();
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(split.ok()) << split.status();
  ExpectSameTensor(*split, *whole, "tokens");
}

// An unspecified form comes compact over the wire and is expanded here: the same bytes as the
// server's full form, and the 4 MiB bias fits the 1 MiB server without splitting.
TEST_F(SplitTest, CompactBiasesByDefaultEqualTheFullForm) {
  for (AlibiMode mode : {AlibiMode::kCausal, AlibiMode::kSymmetric, AlibiMode::kBloom}) {
    AlibiBiasOptions options;
    options.num_heads = 8;
    options.q_len = 300;
    options.k_len = 400;
    options.query_offset = 50;
    options.mode = mode;
    AlibiBiasOptions full = options;
    full.form = BiasForm::kFull;
    ASSERT_NO_FATAL_FAILURE(CompareWithWhole(
        &Client::AlibiBias, *small_unsplit_, options, full,
        [mode](const AlibiBiasResult& compact, const AlibiBiasResult& expected) {
          ExpectSameTensor(compact.bias, expected.bias, absl::StrCat("alibi mode ", mode));
        }));
  }
  RelativeBiasOptions t5;
  t5.q_len = 500;
  t5.k_len = 500;
  t5.table_inline = Ramp({32, 6});
  t5.bidirectional = false;
  RelativeBiasOptions full = t5;
  full.form = BiasForm::kFull;
  CompareWithWhole(&Client::RelativeBias, *small_unsplit_, t5, full, SameTensor("t5"));
}

TEST_F(SplitTest, AsyncCallsOfEveryRpc) {
  SinusoidalOptions sinusoidal;
  sinusoidal.positions = Positions::Range(0, 16);
  sinusoidal.params.dim = 32;
  AddPositionEncodingOptions add;
  add.x = Ramp({4, 32});
  add.sinusoidal = SinusoidalParams{};
  RopeCacheOptions cache;
  cache.positions = Positions::Range(0, 8);
  cache.config.head_dim = 64;
  ApplyRopeOptions rope;
  rope.q = Ramp({1, 64, 8, 64});
  AlibiSlopesOptions slopes;
  slopes.num_heads = 12;
  AlibiBiasOptions alibi;
  alibi.num_heads = 4;
  alibi.q_len = 8;
  alibi.k_len = 8;
  RelativeBiasOptions t5;
  t5.q_len = 8;
  t5.k_len = 8;
  t5.table_inline = Ramp({32, 2});
  RelativeEmbeddingOptions shaw;
  shaw.q_len = 4;
  shaw.k_len = 4;
  shaw.max_relative = 2;
  shaw.table_inline = Ramp({5, 8});

  // All in flight at once, then each compared with its synchronous twin.
  std::vector<Future<ApplyRopeResult>> ropes;
  for (int i = 0; i < 16; ++i) ropes.push_back(whole_->ApplyRopeAsync(rope));
  auto f_sin = whole_->SinusoidalAsync(sinusoidal);
  auto f_add = whole_->AddPositionEncodingAsync(add);
  auto f_cache = whole_->RopeCacheAsync(cache);
  auto f_slopes = whole_->AlibiSlopesAsync(slopes);
  auto f_alibi = whole_->AlibiBiasAsync(alibi);
  auto f_t5 = whole_->RelativeBiasAsync(t5);
  auto f_shaw = whole_->RelativeEmbeddingAsync(shaw);
  auto f_info = whole_->GetServerInfoAsync();
  auto f_split = split_->ApplyRopeAsync(ApplyRopeOptions{.q = Ramp({1, 512, 16, 64})});

  const auto rope_sync = whole_->ApplyRope(rope);
  ASSERT_TRUE(rope_sync.ok());
  for (auto& f : ropes) {
    const auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectSameTensor(r->q, rope_sync->q, "async rope");
  }
  ExpectSameTensor(*f_sin.get(), *whole_->Sinusoidal(sinusoidal), "sinusoidal");
  ExpectSameTensor(*f_add.get(), *whole_->AddPositionEncoding(add), "add");
  ExpectSameTensor(f_cache.get()->cos, whole_->RopeCache(cache)->cos, "cos");
  ExpectSameTensor(*f_slopes.get(), *whole_->AlibiSlopes(slopes), "slopes");
  ExpectSameTensor(f_alibi.get()->bias, whole_->AlibiBias(alibi)->bias, "alibi");
  ExpectSameTensor(*f_t5.get(), *whole_->RelativeBias(t5), "t5");
  ExpectSameTensor(*f_shaw.get(), *whole_->RelativeEmbedding(shaw), "shaw");
  const auto info = f_info.get();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backends.at(0).name, "cpu");
  const auto split = f_split.get();
  ASSERT_TRUE(split.ok()) << split.status();
  ExpectSameTensor(split->q, whole_->ApplyRope(ApplyRopeOptions{.q = Ramp({1, 512, 16, 64})})->q,
                   "async split");

  // A failing async call carries the server's status.
  AlibiSlopesOptions bad;
  bad.num_heads = 0;
  EXPECT_EQ(whole_->AlibiSlopesAsync(bad).get().status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SplitTest, PerCallDeadlineOverridesTheClientDefault) {
  // A server of its own: the expired calls go on computing on it after the client gave up, and
  // its destructor (Shutdown, Wait) lets them end before the process exits. On the shared
  // servers, which live until exit, the process could exit under a handler still running.
  server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "cpu";
  options.threads = 1;
  auto server = server::PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ConnectToPort((*server)->port());
  ASSERT_NE(client, nullptr);
  RelativeBiasOptions heavy;
  heavy.q_len = 2048;
  heavy.k_len = 2048;
  heavy.table_inline = Ramp({32, 16});
  heavy.form = BiasForm::kFull;
  const auto expired = client->RelativeBias(heavy, CallOptions{std::chrono::milliseconds(1)});
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kDeadlineExceeded) << expired.status();
  const auto async_expired =
      client->RelativeBiasAsync(heavy, CallOptions{std::chrono::milliseconds(1)}).get();
  EXPECT_EQ(async_expired.status().code(), absl::StatusCode::kDeadlineExceeded);
  // A call that is not split (64 MiB of output, one message) waits on its own completion
  // queue: expired there too, and the next call on the same client goes through.
  RelativeBiasOptions whole = heavy;
  whole.table_inline = Ramp({32, 4});
  const auto whole_expired = client->RelativeBias(whole, CallOptions{std::chrono::milliseconds(1)});
  EXPECT_EQ(whole_expired.status().code(), absl::StatusCode::kDeadlineExceeded)
      << whole_expired.status();
  EXPECT_TRUE(client->AlibiSlopes({.num_heads = 4}, CallOptions{std::chrono::seconds(10)}).ok());
}

// A cpu-backend server on one thread computing one heavy call at a time (--max_heavy_calls=1)
// with a `limit`-byte message limit.
absl::StatusOr<std::unique_ptr<server::PosencServer>> OneHeavyCallServer(int64_t limit) {
  server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "cpu";
  options.threads = 1;
  options.max_message_bytes = limit;
  options.max_heavy_calls = 1;
  return server::PosencServer::Start(options);
}

// A server computing one heavy call at a time: the client keeps one piece of a bias in flight
// (GetServerInfo says so), and a busy refusal would be retried (pushback).
TEST(SplitAdmissionTest, PiecesDoNotRefuseOneAnother) {
  auto server = OneHeavyCallServer(8 << 20);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ConnectToPort((*server)->port());
  AlibiBiasOptions full;
  full.num_heads = 16;
  full.q_len = 1024;
  full.k_len = 1024;
  full.form = BiasForm::kFull;  // 64 MiB: 9 pieces of about 7 MiB, each a heavy call
  const auto bias = client->AlibiBias(full);
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->bias.shape, (std::vector<int64_t>{16, 1024, 1024}));
  const auto info = client->GetServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->max_heavy_calls, 1);
  EXPECT_GT(info->max_inflight_bytes, 0);
}

// Pieces whose requests carry their tensors (ApplyRope, AddPositionEncoding) keep one more in
// flight than the server computes at once: its request travels while the others compute
// (docs/splitting.md "Pieces in flight"). On a server computing one heavy call at a time every
// piece still comes back, and the joined result is the whole call's, byte for byte.
TEST(SplitAdmissionTest, ApplyRopePiecesOverlapOnAServerComputingOneAtATime) {
  auto server = OneHeavyCallServer(12 << 20);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ConnectToPort((*server)->port());
  ClientOptions unsplit;
  unsplit.split_requests = false;
  unsplit.max_message_bytes = 64 << 20;
  ApplyRopeOptions rope;
  rope.q = Ramp({1, 4096, 16, 64});  // 16 MiB
  rope.k = Ramp({1, 4096, 16, 64});  // 16 MiB: 4 pieces of 4 heads (4 MiB of q, 4 of k)
  rope.positions = Positions::Offsets({7});
  const auto split = client->ApplyRope(rope);
  ASSERT_TRUE(split.ok()) << split.status();
  auto big = OneHeavyCallServer(64 << 20);
  ASSERT_TRUE(big.ok()) << big.status();
  const auto whole = ConnectToPort((*big)->port(), unsplit)->ApplyRope(rope);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ExpectSameTensor(split->q, whole->q, "q");
  ASSERT_TRUE(split->k.has_value());
  ExpectSameTensor(*split->k, *whole->k, "k");
}

// A fake posenc server for the pieces' resend: GetServerInfo says 1 MiB messages and one heavy
// call at a time; ApplyRope answers q and k unchanged, but refuses one request, once, as a busy
// server does (OVERLOADED, retry after 100 ms): the first piece (q starting at head 0), or with
// `first` false the first request of another piece, whatever order the pieces arrive in.
class BusyOnceService final : public grpc::CallbackGenericService {
 public:
  explicit BusyOnceService(bool first) : first_(first) {}
  std::vector<std::string> apply_rope_requests() {
    const std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(BusyOnceService* service, std::string method)
        : service_(service), method_(std::move(method)) {
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      grpc::Status status;
      std::string out;
      if (method_.ends_with("/GetServerInfo")) {
        v1::GetServerInfoResponse info;
        info.mutable_limits()->set_max_message_bytes(kSmallLimit);
        info.mutable_limits()->set_max_heavy_calls(1);
        out = info.SerializeAsString();
      } else {
        std::vector<grpc::Slice> slices;
        (void)request_.Dump(&slices);
        std::string bytes;
        for (const grpc::Slice& slice : slices) {
          bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
        }
        v1::ApplyRopeRequest request;
        v1::ApplyRopeResponse response;
        if (!request.ParseFromString(bytes)) {
          status = grpc::Status(grpc::StatusCode::INTERNAL, "does not parse");
        } else if (service_->Refuse(bytes, request.q().data())) {
          server::ErrorCause cause;
          cause.overloaded = true;
          cause.retry_after = std::chrono::milliseconds(100);
          status = server::WithErrorDetails(
              grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "1 heavy calls are running, --max_heavy_calls=1; retry later"),
              cause);
        } else {
          *response.mutable_q() = request.q();
          if (request.has_k()) *response.mutable_k() = request.k();
          out = response.SerializeAsString();
        }
      }
      if (!status.ok()) return Finish(status);
      const grpc::Slice slice(out);
      response_ = grpc::ByteBuffer(&slice, 1);
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    BusyOnceService* const service_;
    const std::string method_;
    grpc::ByteBuffer request_, response_;
  };

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Reactor(this, ctx->method());
  }
  // Records an ApplyRope request; whether to refuse it (q's data `q`: Ramp's values, 0 first).
  bool Refuse(const std::string& bytes, const std::string& q) {
    const std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(bytes);
    float value = 0;
    if (q.size() >= sizeof(value)) std::memcpy(&value, q.data(), sizeof(value));
    if (refused_ || (value == 0.0f) != first_) return false;
    refused_ = true;
    return true;
  }

  const bool first_;
  bool refused_ = false;
  std::mutex mu_;
  std::vector<std::string> requests_;
};

// The piece over the server's heavy slots that is refused as busy is sent again, once, with the
// same bytes; a piece within the slots refused as busy is the call's error.
TEST(SplitAdmissionTest, TheExtraPieceRefusedBusyIsSentAgainOnce) {
  ApplyRopeOptions rope;
  rope.q = Ramp({1, 512, 8, 64});  // 1 MiB each: 3 pieces of 2 or 3 heads
  rope.k = Ramp({1, 512, 8, 64});
  for (const bool refuse_first : {false, true}) {
    const bool resent = !refuse_first;
    BusyOnceService service(refuse_first);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterCallbackGenericService(&service);
    const std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    ClientOptions options;
    options.max_attempts = 1;      // no gRPC retries: only the split's own resend
    options.health_check = false;  // the fake serves no health service
    const auto result = ConnectToPort(port, options)->ApplyRope(rope);
    const std::vector<std::string> sent = service.apply_rope_requests();
    if (resent) {
      ASSERT_TRUE(result.ok()) << result.status();
      ExpectSameTensor(result->q, rope.q, "q");
      ExpectSameTensor(*result->k, *rope.k, "k");
      ASSERT_EQ(sent.size(), 4u);  // 3 pieces, the second twice, the same bytes
      std::vector<std::string> distinct = sent;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      EXPECT_EQ(distinct.size(), 3u);
    } else {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
      EXPECT_EQ(GetErrorDetails(result.status()).reason, "OVERLOADED");
      EXPECT_EQ(sent.size(), 2u);  // the first piece and the one beside it; no more started
    }
    server->Shutdown();
  }
}

}  // namespace
}  // namespace posenc::client
