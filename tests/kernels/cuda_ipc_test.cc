// CUDA IPC regions on a device (kernels/cuda/ipc.h; ARCHITECTURE.md "GPU callers"): a second
// process (cuda_ipc_exporter) exports a device buffer as a Triton client would; this process
// opens it, computes in it with the cuda backend (ApplyRope in place, outputs written into it)
// and compares every result byte for byte with the same call on host tensors (the backend's
// staging path); the exporter then hashes its own buffer and must find exactly the bytes this
// process expects. Malformed registrations are rows. Built only with CUDA; without a device every
// test skips with the reason (CI), as cuda_parity_test does.
//
// The exporter is started with posix_spawn (no fork of a process that has initialized CUDA);
// POSENC_IPC_EXPORTER overrides its path (the GPU machine's bundle).
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/ipc.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"
#include "tests/kernels/cuda_ipc_protocol.h"

extern char** environ;

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;
using ::posenc::testing::ExporterPattern;
using ::posenc::testing::Fnv1a;
using ::posenc::testing::RandomBuffer;
using ::testing::HasSubstr;

constexpr int64_t kRegionBytes = int64_t{8} << 20;
constexpr int64_t kRegionOffset = 256;  // the registered range starts this far into the allocation

// The exporting process and a line protocol with it (see cuda_ipc_exporter.cc).
class Exporter {
 public:
  static std::unique_ptr<Exporter> Start(int64_t bytes, std::string* error) {
    const char* env = std::getenv("POSENC_IPC_EXPORTER");
    const std::string path = env != nullptr ? env : POSENC_IPC_EXPORTER_PATH;
    std::signal(SIGPIPE, SIG_IGN);  // an exporter that failed must not take this process along
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0) {
      *error = "pipe failed";
      return nullptr;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from[1], 1);
    posix_spawn_file_actions_addclose(&actions, to[1]);
    posix_spawn_file_actions_addclose(&actions, from[0]);
    const std::string size = std::to_string(bytes);
    char* argv[] = {const_cast<char*>(path.c_str()), const_cast<char*>(size.c_str()), nullptr};
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to[0]);
    close(from[1]);
    if (rc != 0) {
      *error = absl::StrCat("posix_spawn ", path, ": ", std::strerror(rc));
      close(to[1]);
      close(from[0]);
      return nullptr;
    }
    auto e = std::unique_ptr<Exporter>(new Exporter(pid, fdopen(to[1], "w"), fdopen(from[0], "r")));
    const std::string first = e->ReadLine();
    char hex[129] = {};
    unsigned long long got = 0;
    if (std::sscanf(first.c_str(), "handle %128s %llu", hex, &got) != 2 ||
        static_cast<int64_t>(got) != bytes) {
      *error = absl::StrCat("exporter said '", first, "' (see its stderr)");
      return nullptr;
    }
    for (int i = 0; i < 64; ++i) {
      unsigned int b = 0;
      std::sscanf(hex + 2 * i, "%2x", &b);
      e->handle_.push_back(static_cast<char>(b));
    }
    return e;
  }
  ~Exporter() {
    std::fputs("quit\n", in_);
    std::fclose(in_);
    std::fclose(out_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  const std::string& handle() const { return handle_; }
  std::string Command(const std::string& line) {
    std::fputs((line + "\n").c_str(), in_);
    std::fflush(in_);
    return ReadLine();
  }

 private:
  Exporter(pid_t pid, FILE* in, FILE* out) : pid_(pid), in_(in), out_(out) {}
  std::string ReadLine() {
    char line[512];
    if (std::fgets(line, sizeof(line), out_) == nullptr) return "<exporter closed its output>";
    std::string s(line);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

  pid_t pid_;
  FILE* in_;
  FILE* out_;
  std::string handle_;
};

std::shared_ptr<const Backend> Host() {
  static const auto* host = new std::shared_ptr<const Backend>(*MakeCpuBackend({2, ""}));
  return *host;
}

class CudaIpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The exporter starts before this process touches CUDA.
    std::string error;
    exporter_ = Exporter::Start(kRegionBytes, &error).release();
    if (exporter_ == nullptr) {
      skip_ = absl::StrCat("no exporter: ", error);
      return;
    }
    if (ListCudaDevices().empty()) {
      skip_ = "no CUDA device";
      return;
    }
    auto cuda = MakeCudaBackend({}, Host());
    if (!cuda.ok()) {
      skip_ = absl::StrCat("no CUDA backend: ", cuda.status().message());
      return;
    }
    cuda_ = cuda->release();
  }
  static void TearDownTestSuite() {
    delete exporter_;
    exporter_ = nullptr;
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(exporter_->Command("fill"), "filled");
    auto region =
        OpenCudaIpcRegion(exporter_->handle(), 0, kRegionOffset, kRegionBytes - kRegionOffset);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
    mirror_.resize(static_cast<size_t>(kRegionBytes));
    for (size_t i = 0; i < mirror_.size(); ++i) mirror_[i] = ExporterPattern(i);
  }
  void TearDown() override {
    if (!skip_.empty()) return;
    // Every write of the test landed in the exporter's memory, and nothing else changed there.
    EXPECT_EQ(exporter_->Command(absl::StrFormat("hash %016x", Fnv1a(mirror_))), "match");
    region_.reset();
  }

  // A device view of `like`'s dtype and shape at byte `at` of the registered range.
  TensorView At(const TensorView& like, int64_t at) const {
    return TensorView{like.dtype, like.shape, static_cast<unsigned char*>(region_->data()) + at,
                      true};
  }
  static size_t Bytes(const TensorView& t) {
    return static_cast<size_t>(t.NumElements() * DTypeSize(t.dtype));
  }
  // Copies host bytes into the range at `at` (and the mirror).
  void Put(const TensorView& host, int64_t at) {
    const size_t n = Bytes(host);
    ASSERT_EQ(cudaMemcpy(static_cast<unsigned char*>(region_->data()) + at, host.data, n,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    std::memcpy(mirror_.data() + kRegionOffset + at, host.data, n);
  }
  // The bytes of the range at `at`, as many as `like` has.
  std::vector<unsigned char> Get(const TensorView& like, int64_t at) const {
    std::vector<unsigned char> out(Bytes(like));
    EXPECT_EQ(cudaMemcpy(out.data(), static_cast<unsigned char*>(region_->data()) + at, out.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }
  // The expected result (computed inline) at `at`: checks the range and records it in the mirror.
  void ExpectAt(const Buffer& expected, int64_t at, const std::string& what) {
    const std::vector<unsigned char> got = Get(expected.view, at);
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != expected.bytes[i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++differ;
      }
    }
    EXPECT_EQ(differ, 0) << what << ": the device range differs from the inline call in " << differ
                         << " of " << got.size() << " bytes, first at byte " << first;
    std::memcpy(mirror_.data() + kRegionOffset + at, expected.bytes.data(), expected.bytes.size());
  }

  static inline Exporter* exporter_ = nullptr;
  static inline const Backend* cuda_ = nullptr;
  static inline std::string skip_;
  std::unique_ptr<CudaIpcRegion> region_;
  std::vector<unsigned char> mirror_;  // what the exporter's allocation must hold
};

TEST_F(CudaIpcTest, OpensTheExportersBytes) {
  EXPECT_EQ(region_->byte_size(), kRegionBytes - kRegionOffset);
  EXPECT_GE(region_->allocation_bytes(), kRegionBytes);
  EXPECT_EQ(region_->device(), 0);
  Buffer like(DType::kFloat32, {(kRegionBytes - kRegionOffset) / 4});
  const std::vector<unsigned char> got = Get(like.view, 0);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], ExporterPattern(i + kRegionOffset)) << "byte " << i;
  }
}

TEST_F(CudaIpcTest, ApplyRopeRotatesInPlaceInTheCallersBuffer) {
  int seed = 1;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj, RopeStyle::kDeepseek}) {
      // 16-byte aligned (vector accesses) and one element off it (scalar accesses).
      for (int64_t misalign : {int64_t{0}, DTypeSize(dtype)}) {
        const std::string what = absl::StrCat(DTypeName(dtype), " style ", static_cast<int>(style),
                                              " misalign ", misalign);
        RopeConfig config;
        config.style = style;
        config.base = 500000;
        PositionSpec positions;
        positions.kind = PositionSpec::Kind::kRange;
        positions.start = 1000;
        const Buffer q = RandomBuffer(dtype, {2, 16, 4, 64}, seed++, -2, 2);
        const Buffer k = RandomBuffer(dtype, {2, 16, 2, 64}, seed++, -2, 2);
        auto plan =
            PlanApplyRope({.config = config, .q = q.view, .k = k.view, .positions = positions});
        ASSERT_TRUE(plan.ok()) << plan.status();
        Buffer qi = q, ki = k;  // the inline call: host tensors through the same backend
        ASSERT_TRUE(RunApplyRope(*cuda_, *plan, nullptr, qi.view, ki.view).ok()) << what;
        ASSERT_FALSE(qi.bytes == q.bytes) << what;
        const int64_t at_q = 4096 + misalign;
        const int64_t at_k = at_q + static_cast<int64_t>(Bytes(q.view)) + 4096;
        Put(q.view, at_q);
        Put(k.view, at_k);
        auto run = RunApplyRope(*cuda_, *plan, nullptr, At(q.view, at_q), At(k.view, at_k));
        ASSERT_TRUE(run.ok()) << what << ": " << run.status();
        ExpectAt(qi, at_q, what + " q");
        ExpectAt(ki, at_k, what + " k");
      }
    }
  }
}

TEST_F(CudaIpcTest, ApplyRopeHandsOffToTheHostThroughTheDeviceRange) {
  // DEEPSEEK with a rotary part over kRopeChunk pairs runs on the host backend: the device range
  // is copied down, rotated there and copied back.
  RopeConfig config;
  config.style = RopeStyle::kDeepseek;
  PositionSpec positions;
  positions.kind = PositionSpec::Kind::kRange;
  positions.start = 7;
  const Buffer q = RandomBuffer(DType::kFloat32, {1, 3, 2, 2048}, 11, -1, 1);
  auto plan = PlanApplyRope({.config = config, .q = q.view, .positions = positions});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Buffer qi = q;
  ASSERT_TRUE(RunApplyRope(*cuda_, *plan, nullptr, qi.view, TensorView{}).ok());
  Put(q.view, 512);
  auto run = RunApplyRope(*cuda_, *plan, nullptr, At(q.view, 512), TensorView{});
  ASSERT_TRUE(run.ok()) << run.status();
  ExpectAt(qi, 512, "host hand-off");
}

TEST_F(CudaIpcTest, OutputsAreWrittenIntoTheCallersRange) {
  {  // RopeCache COMPACT, cos and sin side by side
    RopeConfig config;
    config.head_dim = 128;
    PositionSpec positions;
    positions.kind = PositionSpec::Kind::kRange;
    positions.start = 3;
    positions.count = 1000;
    auto plan =
        PlanRopeCache({.config = config, .positions = positions, .output_dtype = DType::kBFloat16});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Buffer cos(plan->cos), sin(plan->sin);
    ASSERT_TRUE(RunRopeCache(*cuda_, *plan, nullptr, cos.view, sin.view).ok());
    const int64_t at_sin = 1 << 20;
    ASSERT_TRUE(RunRopeCache(*cuda_, *plan, nullptr, At(cos.view, 0), At(sin.view, at_sin)).ok());
    ExpectAt(cos, 0, "RopeCache cos");
    ExpectAt(sin, at_sin, "RopeCache sin");
    // A one-table layout is rearranged on the host: refused for a device range.
    auto fused = PlanRopeCache(
        {.config = config, .layout = RopeCacheLayout::kFusedCosSin, .positions = positions});
    ASSERT_TRUE(fused.ok());
    Buffer one(fused->cos);
    auto refused = RunRopeCache(*cuda_, *fused, nullptr, At(one.view, 0), TensorView{});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("cos"));
  }
  {  // Sinusoidal
    SinusoidalArgs args;
    args.params.dim = 256;
    args.positions.kind = PositionSpec::Kind::kRange;
    args.positions.count = 513;
    auto plan = PlanSinusoidal(args);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Buffer table(plan->table);
    ASSERT_TRUE(RunSinusoidal(*cuda_, *plan, table.view).ok());
    ASSERT_TRUE(RunSinusoidal(*cuda_, *plan, At(table.view, 2 << 20)).ok());
    ExpectAt(table, 2 << 20, "Sinusoidal");
  }
  {  // AlibiBias, full form (slopes stay on the host)
    AlibiBiasArgs args;
    args.params.num_heads = 8;
    args.params.q_len = 64;
    args.params.k_len = 96;
    auto plan = PlanAlibiBias(args);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Buffer bias(plan->bias), slopes(plan->slopes), slopes2(plan->slopes);
    ASSERT_TRUE(RunAlibiBias(*cuda_, *plan, bias.view, slopes.view).ok());
    ASSERT_TRUE(RunAlibiBias(*cuda_, *plan, At(bias.view, 3 << 20), slopes2.view).ok());
    ExpectAt(bias, 3 << 20, "AlibiBias");
    EXPECT_TRUE(slopes.bytes == slopes2.bytes);
    auto refused = RunAlibiBias(*cuda_, *plan, bias.view, At(slopes.view, 0));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("slopes"));
  }
  {  // AddPositionEncoding in place: y is x, both in the range
    AddPositionEncodingArgs args;
    args.params.sinusoidal = SinusoidalParams{};
    const Buffer x = RandomBuffer(DType::kFloat32, {2, 50, 64}, 5, -1, 1);
    args.x = x.view;
    auto host_plan = PlanAddPositionEncoding(args);
    ASSERT_TRUE(host_plan.ok()) << host_plan.status();
    Buffer y(host_plan->y);
    ASSERT_TRUE(RunAddPositionEncoding(*cuda_, *host_plan, y.view).ok());
    const int64_t at = 4 << 20;
    Put(x.view, at);
    args.x = At(x.view, at);
    auto plan = PlanAddPositionEncoding(args);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(RunAddPositionEncoding(*cuda_, *plan, At(y.view, at)).ok());
    ExpectAt(y, at, "AddPositionEncoding in place");
  }
}

TEST_F(CudaIpcTest, HostBackendsAndMisalignedTensorsAreRefused) {
  const Buffer q = RandomBuffer(DType::kFloat32, {1, 4, 2, 64}, 3, -1, 1);
  auto plan = PlanApplyRope({.config = RopeConfig{}, .q = q.view});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto on_cpu = RunApplyRope(*Host(), *plan, nullptr, At(q.view, 0), TensorView{});
  EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kFailedPrecondition) << on_cpu.status();
  EXPECT_THAT(on_cpu.status().message(), HasSubstr("q: the tensor lives in CUDA device memory"));
  auto misaligned = RunApplyRope(*cuda_, *plan, nullptr, At(q.view, 2), TensorView{});
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kInvalidArgument) << misaligned.status();
  EXPECT_THAT(misaligned.status().message(), HasSubstr("multiple of its element size"));
  // Nothing was written: the mirror still holds the pattern there.
}

TEST(CudaIpcRegistrationTest, MalformedRegistrationsAreRefused) {
  if (ListCudaDevices().empty()) GTEST_SKIP() << "no CUDA device";
  std::string error;
  std::unique_ptr<Exporter> exporter = Exporter::Start(1 << 20, &error);
  ASSERT_NE(exporter, nullptr) << error;
  const std::string& handle = exporter->handle();
  // The allocation's size as the driver reports it (cudaMalloc may round it up).
  int64_t allocated = 0;
  for (int i = 0; i < 2; ++i) {  // closing and opening again works
    auto whole = OpenCudaIpcRegion(handle, 0, 0, 1 << 20);
    ASSERT_TRUE(whole.ok()) << whole.status();
    allocated = (*whole)->allocation_bytes();
    EXPECT_GE(allocated, 1 << 20);
  }
  struct Row {
    std::string name, handle;
    int device;
    int64_t offset, byte_size;
    absl::StatusCode code;
    std::string message;
  };
  std::string garbage(64, '\0');
  std::mt19937 rng(7);
  for (char& c : garbage) c = static_cast<char>(rng());
  const int devices = static_cast<int>(ListCudaDevices().size());
  const std::vector<Row> rows = {
      {"short handle", handle.substr(0, 63), 0, 0, 16, absl::StatusCode::kInvalidArgument,
       "raw_handle: expected 64 bytes"},
      {"random handle", garbage, 0, 0, 16, absl::StatusCode::kInvalidArgument,
       "raw_handle: cudaIpcOpenMemHandle"},
      {"zero handle", std::string(64, '\0'), 0, 0, 16, absl::StatusCode::kInvalidArgument,
       "raw_handle: cudaIpcOpenMemHandle"},
      {"beyond the allocation", handle, 0, 0, allocated + 1, absl::StatusCode::kInvalidArgument,
       "beyond the allocation of"},
      {"offset past the end", handle, 0, allocated, 1, absl::StatusCode::kInvalidArgument,
       "beyond the allocation of"},
      {"no such device", handle, devices, 0, 16, absl::StatusCode::kInvalidArgument,
       "device_id: expected 0 .."},
      {"negative device", handle, -1, 0, 16, absl::StatusCode::kInvalidArgument,
       "device_id: expected >= 0"},
      {"zero size", handle, 0, 0, 0, absl::StatusCode::kInvalidArgument, "byte_size: expected > 0"},
  };
  for (const Row& row : rows) {
    auto region = OpenCudaIpcRegion(row.handle, row.device, row.offset, row.byte_size);
    ASSERT_FALSE(region.ok()) << row.name;
    EXPECT_EQ(region.status().code(), row.code) << row.name << ": " << region.status();
    EXPECT_THAT(region.status().message(), HasSubstr(row.message)) << row.name;
  }
  // This process's own handle: CUDA refuses it.
  void* own = nullptr;
  ASSERT_EQ(cudaMalloc(&own, 4096), cudaSuccess);
  cudaIpcMemHandle_t mine;
  ASSERT_EQ(cudaIpcGetMemHandle(&mine, own), cudaSuccess);
  auto self = OpenCudaIpcRegion(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), 0,
                                0, 4096);
  EXPECT_EQ(self.status().code(), absl::StatusCode::kInvalidArgument) << self.status();
  cudaFree(own);
}

}  // namespace
}  // namespace posenc::kernels
