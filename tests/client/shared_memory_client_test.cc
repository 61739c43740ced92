// The C++ client's shared memory end to end (a server over TCP with --allow_shared_memory): the
// region type (create, register, views, allocation, unregister and unlink), every op with its
// inputs and outputs as references (results byte-identical to the inline calls'), ApplyRope in
// place, requests over the message limit sent whole, the asynchronous calls, and the malformed
// references surfacing as structured errors; `posenc bench --shm`.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "posenc/client.h"
#include "posenc/errors.h"
#include "posenc/shared_memory.h"
#include "server/server.h"
#include "tests/common/command.h"

namespace posenc::client {
namespace {

using testing::RandomTensor;

std::unique_ptr<server::PosencServer> StartServer(bool allow_shared_memory) {
  server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.threads = 2;
  options.allow_shared_memory = allow_shared_memory;
  auto server = server::PosencServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::unique_ptr<Client> ConnectTo(const server::PosencServer& server, ClientOptions options = {}) {
  auto client = Client::Connect(absl::StrCat("127.0.0.1:", server.port()), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

bool ObjectExists(const std::string& key) {
  const int fd = shm_open(key.c_str(), O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

class SharedMemoryClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = StartServer(true).release(); }
  static void TearDownTestSuite() {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    client_ = ConnectTo(*server_);
    ASSERT_NE(client_, nullptr);
    auto region = SharedMemoryRegion::Create(*client_, kRegionBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    region_.emplace(*std::move(region));
  }
  void TearDown() override {
    if (region_.has_value()) {
      EXPECT_TRUE(region_->Close().ok());
    }
  }

  // `values` copied into the region: the reference to pass instead.
  Tensor Put(const Tensor& values) {
    absl::StatusOr<Tensor> ref = region_->Put(values);
    EXPECT_TRUE(ref.ok()) << ref.status();
    return ref.ok() ? *ref : Tensor();
  }
  // A range for output `like` (dtype and shape of the inline call's result).
  SharedMemoryRef Place(const Tensor& like) {
    absl::StatusOr<Tensor> out = region_->Allocate(like.dtype, like.shape);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out->shared_memory : SharedMemoryRef();
  }
  // Expects `result` to refer to `ref` and hold the bytes of `expected`.
  void ExpectPlaced(const Tensor& result, const SharedMemoryRef& ref, const Tensor& expected,
                    const std::string& what) {
    ASSERT_TRUE(result.is_reference()) << what;
    EXPECT_EQ(*result.shared_memory, ref) << what;
    EXPECT_TRUE(result.data.empty()) << what;
    EXPECT_EQ(result.shape, expected.shape) << what;
    absl::StatusOr<Tensor> read = region_->Read(result);
    ASSERT_TRUE(read.ok()) << what << ": " << read.status();
    EXPECT_EQ(read->data, expected.data) << what;
  }

  static constexpr int64_t kRegionBytes = int64_t{16} << 20;
  static server::PosencServer* server_;
  std::unique_ptr<Client> client_;
  std::optional<SharedMemoryRegion> region_;
};

server::PosencServer* SharedMemoryClientTest::server_ = nullptr;

TEST_F(SharedMemoryClientTest, RegionIsRegisteredAndRemovedOnClose) {
  const std::string name = region_->name();
  const std::string key = region_->key();
  EXPECT_EQ(key, "/" + name);
  EXPECT_EQ(region_->byte_size(), kRegionBytes);
  EXPECT_EQ(region_->bytes().size(), static_cast<size_t>(kRegionBytes));
  EXPECT_TRUE(ObjectExists(key));
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> status = client_->SharedMemoryStatus(name);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].key, key);
  EXPECT_EQ((*status)[0].byte_size, kRegionBytes);
  EXPECT_FALSE((*status)[0].broken);
  absl::StatusOr<ServerInfo> info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->shared_memory_allowed);
  EXPECT_GT(info->max_shared_memory_bytes, 0);

  // Moving keeps one owner; Close() unregisters, unmaps and unlinks, once.
  SharedMemoryRegion moved = *std::move(region_);
  region_.reset();
  EXPECT_EQ(moved.name(), name);
  EXPECT_TRUE(moved.Close().ok());
  EXPECT_TRUE(moved.Close().ok());
  EXPECT_EQ(moved.byte_size(), 0);
  EXPECT_FALSE(ObjectExists(key));
  EXPECT_EQ(client_->SharedMemoryStatus(name).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SharedMemoryClientTest, DestructorUnregistersToo) {
  std::string name;
  {
    auto other = SharedMemoryRegion::Create(*client_, 4096, {.name = "scoped"});
    ASSERT_TRUE(other.ok()) << other.status();
    name = other->name();
    EXPECT_EQ(name, "scoped");
    EXPECT_TRUE(client_->SharedMemoryStatus(name).ok());
  }
  EXPECT_EQ(client_->SharedMemoryStatus(name).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SharedMemoryClientTest, ViewsAndAllocation) {
  absl::StatusOr<Tensor> a = region_->Allocate(DType::kFloat32, {3, 5});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shared_memory->offset, 0);
  EXPECT_EQ(a->shared_memory->byte_size, 60);
  absl::StatusOr<Tensor> b = region_->Allocate(DType::kFloat64, {2});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->shared_memory->offset, 64);  // aligned to 64 bytes
  absl::StatusOr<std::span<float>> values = region_->Span<float>(*a);
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->size(), 15u);
  std::iota(values->begin(), values->end(), 1.0f);
  absl::StatusOr<Tensor> copy = region_->Read(*a);
  ASSERT_TRUE(copy.ok());
  EXPECT_FALSE(copy->is_reference());
  EXPECT_EQ(copy->ToFloats()[14], 15.0f);

  EXPECT_EQ(region_->Span<double>(*a).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(region_->Read(copy.value()).status().code(), absl::StatusCode::kInvalidArgument);
  Tensor elsewhere = *a;
  elsewhere.shared_memory->region = "other";
  EXPECT_EQ(region_->Bytes(elsewhere).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(region_->TensorAt(kRegionBytes - 8, DType::kFloat32, {4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(region_->TensorAt(0, DType::kFloat32, {-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(region_->Allocate(DType::kFloat32, {kRegionBytes}).status().code(),
            absl::StatusCode::kResourceExhausted);
  region_->Reset();
  absl::StatusOr<Tensor> again = region_->Allocate(DType::kFloat32, {1});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->shared_memory->offset, 0);
  // A reference's bytes are not for the inline helpers.
  EXPECT_EQ(ConvertTensor(*again, DType::kFloat64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SharedMemoryClientTest, ApplyRopeRotatesInPlace) {
  ApplyRopeOptions inline_options;
  inline_options.q = RandomTensor({2, 16, 4, 64}, DType::kFloat32, 1);
  inline_options.k = RandomTensor({2, 16, 2, 64}, DType::kFloat32, 2);
  inline_options.positions = Positions::Offsets({3, 1000});
  inline_options.config.base = 500000;
  absl::StatusOr<ApplyRopeResult> expected = client_->ApplyRope(inline_options);
  ASSERT_TRUE(expected.ok()) << expected.status();

  ApplyRopeOptions options = inline_options;
  options.q = Put(inline_options.q);
  options.k = Put(*inline_options.k);
  absl::StatusOr<ApplyRopeResult> result = client_->ApplyRope(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectPlaced(result->q, *options.q.shared_memory, expected->q, "q");
  ExpectPlaced(*result->k, *options.k->shared_memory, *expected->k, "k");
  EXPECT_EQ(result->derived.inv_freq, expected->derived.inv_freq);

  // Asynchronously, with the positions by reference too: rotated once more, in place.
  options.positions = Positions::Ids(Put(*Tensor::FromInt64s(std::vector<int64_t>(16, 7), {16})));
  ApplyRopeOptions twice = inline_options;
  twice.q = expected->q;
  twice.k = expected->k;
  twice.positions = Positions::Ids(std::vector<int64_t>(16, 7));
  absl::StatusOr<ApplyRopeResult> expected_twice = client_->ApplyRope(twice);
  ASSERT_TRUE(expected_twice.ok()) << expected_twice.status();
  absl::StatusOr<ApplyRopeResult> async = client_->ApplyRopeAsync(options).get();
  ASSERT_TRUE(async.ok()) << async.status();
  ExpectPlaced(async->q, *options.q.shared_memory, expected_twice->q, "q twice");
}

TEST_F(SharedMemoryClientTest, InlineInputOutputPlaced) {
  ApplyRopeOptions options;
  options.q = RandomTensor({1, 8, 2, 32}, DType::kBFloat16, 3);
  absl::StatusOr<ApplyRopeResult> expected = client_->ApplyRope(options);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const SharedMemoryRef q_out = Place(expected->q);
  options.output_shared_memory["q"] = q_out;
  absl::StatusOr<ApplyRopeResult> result = client_->ApplyRope(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectPlaced(result->q, q_out, expected->q, "q");
}

TEST_F(SharedMemoryClientTest, EveryOpWritesItsOutputsIntoTheRegion) {
  {
    SinusoidalOptions options{.positions = Positions::Range(5, 300), .params = {.dim = 64}};
    absl::StatusOr<Tensor> expected = client_->Sinusoidal(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.output_shared_memory["table"] = Place(*expected);
    absl::StatusOr<Tensor> result = client_->SinusoidalAsync(options).get();
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(*result, options.output_shared_memory["table"], *expected, "table");
  }
  {
    AddPositionEncodingOptions options;
    options.x = RandomTensor({2, 10, 16}, DType::kFloat16, 4);
    options.learned = LearnedTable{.table_inline = RandomTensor({40, 8}, DType::kFloat32, 5)};
    options.combine = Combine::kConcat;
    absl::StatusOr<Tensor> expected = client_->AddPositionEncoding(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.x = Put(options.x);
    options.learned->table_inline = Put(*options.learned->table_inline);
    options.output_shared_memory["y"] = Place(*expected);
    absl::StatusOr<Tensor> result = client_->AddPositionEncoding(options);
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(*result, options.output_shared_memory["y"], *expected, "y");
  }
  {
    RopeCacheOptions options{.positions = Positions::Range(0, 100)};
    options.config.head_dim = 64;
    options.output_dtype = DType::kFloat64;
    absl::StatusOr<RopeCacheResult> expected = client_->RopeCache(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.output_shared_memory["cos"] = Place(expected->cos);
    options.output_shared_memory["sin"] = Place(expected->sin);
    absl::StatusOr<RopeCacheResult> result = client_->RopeCache(options);
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(result->cos, options.output_shared_memory["cos"], expected->cos, "cos");
    ExpectPlaced(result->sin, options.output_shared_memory["sin"], expected->sin, "sin");
  }
  {
    AlibiSlopesOptions options{.num_heads = 12};
    absl::StatusOr<Tensor> expected = client_->AlibiSlopes(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.output_shared_memory["slopes"] = Place(*expected);
    absl::StatusOr<Tensor> result = client_->AlibiSlopes(options);
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(*result, options.output_shared_memory["slopes"], *expected, "slopes");
  }
  {
    // The form left unspecified: the full bias is placed (no compact fetch).
    AlibiBiasOptions options{.num_heads = 4, .q_len = 33, .k_len = 50};
    options.mode = AlibiMode::kBloom;
    options.attention_mask = *Tensor::FromInt64s(std::vector<int64_t>(100, 1), {2, 50});
    absl::StatusOr<AlibiBiasResult> expected = client_->AlibiBias(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.attention_mask = Put(*options.attention_mask);
    options.output_shared_memory["bias"] = Place(expected->bias);
    absl::StatusOr<AlibiBiasResult> result = client_->AlibiBiasAsync(options).get();
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(result->bias, options.output_shared_memory["bias"], expected->bias, "bias");
    EXPECT_EQ(result->slopes.data, expected->slopes.data);  // not placed: inline
  }
  {
    RelativeBiasOptions options{.q_len = 20, .k_len = 30};
    options.table_inline = RandomTensor({32, 6}, DType::kFloat32, 6);
    absl::StatusOr<Tensor> expected = client_->RelativeBias(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.table_inline = Put(*options.table_inline);
    options.output_shared_memory["bias"] = Place(*expected);
    absl::StatusOr<Tensor> result = client_->RelativeBias(options);
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(*result, options.output_shared_memory["bias"], *expected, "relative bias");
  }
  {
    RelativeEmbeddingOptions options{.q_len = 9, .k_len = 12, .max_relative = 4};
    options.table_inline = RandomTensor({9, 16}, DType::kFloat64, 7);
    absl::StatusOr<Tensor> expected = client_->RelativeEmbedding(options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    options.table_inline = Put(*options.table_inline);
    options.output_shared_memory["embeddings"] = Place(*expected);
    absl::StatusOr<Tensor> result = client_->RelativeEmbeddingAsync(options).get();
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectPlaced(*result, options.output_shared_memory["embeddings"], *expected, "embeddings");
  }
}

// A request using shared memory is a small message: it goes whole even where its tensors are
// over the message limit (which split inline requests).
TEST_F(SharedMemoryClientTest, RequestsOverTheMessageLimitAreNotSplit) {
  std::unique_ptr<Client> small = ConnectTo(*server_, {.max_message_bytes = 256 << 10});
  ApplyRopeOptions options;
  options.q = RandomTensor({1, 64, 8, 128}, DType::kFloat32, 8);  // 256 KiB
  options.k = RandomTensor({1, 64, 8, 128}, DType::kFloat32, 9);
  absl::StatusOr<ApplyRopeResult> expected = small->ApplyRope(options);  // split, inline
  ASSERT_TRUE(expected.ok()) << expected.status();
  options.q = Put(options.q);
  options.k = Put(*options.k);
  absl::StatusOr<ApplyRopeResult> result = small->ApplyRope(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectPlaced(result->q, *options.q.shared_memory, expected->q, "q");

  RelativeBiasOptions bias{.q_len = 300, .k_len = 400, .form = BiasForm::kBuckets};
  absl::StatusOr<Tensor> buckets = small->RelativeBias(bias);  // 480 KB: split by query rows
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  bias.output_shared_memory["bias"] = Place(*buckets);
  absl::StatusOr<Tensor> placed = small->RelativeBias(bias);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectPlaced(*placed, bias.output_shared_memory["bias"], *buckets, "buckets");
}

// Every malformed reference is the server's structured error, unchanged.
TEST_F(SharedMemoryClientTest, MalformedReferencesAreStructuredErrors) {
  ApplyRopeOptions good;
  good.q = Put(RandomTensor({1, 4, 2, 8}, DType::kFloat32, 10));
  good.k = RandomTensor({1, 4, 1, 8}, DType::kFloat32, 11);
  struct Row {
    std::string name;
    std::function<void(ApplyRopeOptions&)> edit;
    absl::StatusCode code;
    std::string reason;
    std::string field;
  };
  const std::vector<Row> rows = {
      {"unknown region", [](auto& o) { o.q.shared_memory->region = "nope"; },
       absl::StatusCode::kNotFound, "SHARED_MEMORY_NOT_FOUND", "q.shared_memory.region"},
      {"wrong size", [](auto& o) { o.q.shared_memory->byte_size = 4; },
       absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "q.shared_memory.byte_size"},
      {"beyond the region", [](auto& o) { o.q.shared_memory->offset = kRegionBytes - 8; },
       absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "q.shared_memory"},
      {"output overlaps an input",
       [](auto& o) {
         o.output_shared_memory["k"] = {o.q.shared_memory->region, 64, o.k->NumBytes()};
       },
       absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "output_shared_memory.k"},
      {"output of no such name",
       [](auto& o) {
         o.output_shared_memory["cos"] = {o.q.shared_memory->region, 8192, 4};
       },
       absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "output_shared_memory"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    ApplyRopeOptions options = good;
    row.edit(options);
    absl::StatusOr<ApplyRopeResult> result = client_->ApplyRope(options);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), row.code) << result.status();
    const ErrorDetails details = GetErrorDetails(result.status());
    EXPECT_EQ(details.reason, row.reason) << result.status();
    EXPECT_EQ(details.field, row.field) << result.status();
  }

  // A taken name.
  auto twin = SharedMemoryRegion::Create(*client_, 4096, {.name = region_->name()});
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(GetErrorDetails(twin.status()).reason, "SHARED_MEMORY_EXISTS");
  // A registration beyond the object.
  const absl::Status beyond = client_->RegisterSharedMemory(
      {.name = "beyond", .key = region_->key(), .offset = 0, .byte_size = kRegionBytes + 1});
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetErrorDetails(beyond).field, "byte_size");
  EXPECT_EQ(client_->UnregisterSharedMemoryAsync("never").get().code(),
            absl::StatusCode::kNotFound);
}

// The caller truncating its object under a registration: the server refuses the calls using it
// (no crash) and reports the region broken or shrunk until it is unregistered.
TEST_F(SharedMemoryClientTest, ATruncatedRegionFailsItsCalls) {
  ApplyRopeOptions options;
  options.q = Put(RandomTensor({1, 4, 2, 8}, DType::kFloat32, 12));
  const int fd = shm_open(region_->key().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 64), 0);
  close(fd);
  absl::StatusOr<ApplyRopeResult> result = client_->ApplyRope(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_EQ(GetErrorDetails(result.status()).reason, "SHARED_MEMORY_UNAVAILABLE");
  EXPECT_EQ(GetErrorDetails(result.status()).field, "q.shared_memory.region");
}

// `posenc bench --shm`: every op with its tensors in shared memory, the same payload counted as
// inline; refused (exit code 1, the server's reason) where the server has no shared memory.
TEST_F(SharedMemoryClientTest, CliBenchWithShm) {
  const std::string bench =
      absl::StrCat(POSENC_CLI_PATH, " --server 127.0.0.1:", server_->port(),
                   " bench --tokens 8 --heads 2 --head-dim 8 --max-relative 2 --json");
  const std::string err = ::testing::TempDir() + "/posenc_bench_shm_stderr.txt";
  for (const char* op : {"mix", "apply_rope"}) {
    const auto inline_run = ::posenc::testing::RunCommand(
        absl::StrCat(bench, " --op ", op, " --count 16 --concurrency 2"), err);
    const auto shm_run = ::posenc::testing::RunCommand(
        absl::StrCat(bench, " --op ", op, " --count 16 --concurrency 2 --shm"), err);
    ASSERT_EQ(shm_run.exit_code, 0) << shm_run.out << shm_run.err;
    const nlohmann::json j = nlohmann::json::parse(shm_run.out);
    EXPECT_EQ(j["calls"], 16);
    EXPECT_EQ(j["errors"], 0);
    if (std::string(op) == "apply_rope") {
      EXPECT_EQ(j["payload_bytes"], nlohmann::json::parse(inline_run.out)["payload_bytes"]);
    }
  }
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> left = client_->SharedMemoryStatus();
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->size(), 1u);  // the fixture's own: the bench unregistered its regions

  std::unique_ptr<server::PosencServer> off = StartServer(false);
  const auto refused = ::posenc::testing::RunCommand(
      absl::StrCat(POSENC_CLI_PATH, " --server 127.0.0.1:", off->port(),
                   " bench --op alibi_slopes --count 1 --shm"),
      err);
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("--allow_shared_memory"), std::string::npos) << refused.err;
  off->Shutdown(std::chrono::system_clock::now());
  off->Wait();
}

TEST(SharedMemoryOffTest, CreateIsFailedPreconditionAndLeavesNoObject) {
  std::unique_ptr<server::PosencServer> server = StartServer(false);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = ConnectTo(*server);
  const std::string key = absl::StrCat("/posenc_off_test_", getpid());
  auto region = SharedMemoryRegion::Create(*client, 4096, {.key = key});
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetErrorDetails(region.status()).reason, "SHARED_MEMORY_UNAVAILABLE");
  EXPECT_FALSE(ObjectExists(key));
  EXPECT_EQ(SharedMemoryRegion::Create(*client, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemoryRegion::Create(*client, 64, {.key = "no_slash"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

}  // namespace
}  // namespace posenc::client
