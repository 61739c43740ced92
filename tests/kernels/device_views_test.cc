// Tensors in device memory (TensorView::on_device, a caller's CUDA IPC region) without a device:
// the host backends refuse them for every op naming the field, host-side tensors refuse device
// ranges, Backend::For keeps device calls on the device, and the CUDA IPC registration's
// arguments are checked before any CUDA call (kernels/cuda/ipc.h). The device side is
// cuda_ipc_test (skipped where no GPU is present).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/ipc.h"
#include "kernels/ops.h"
#include "tests/common/buffers.h"

namespace posenc::kernels {
namespace {

using ::posenc::testing::Buffer;
using ::testing::HasSubstr;

// A view marked as device memory over host bytes that no host backend may touch (the checks run
// before any access).
TensorView OnDevice(Buffer& b) {
  TensorView v = b.view;
  v.on_device = true;
  return v;
}

void ExpectRefused(const absl::Status& s, absl::string_view field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(field, ": ")));
  EXPECT_THAT(s.message(), HasSubstr("CUDA device memory"));
}

TEST(DeviceViewsTest, HostBackendsRefuseDeviceTensorsOfEveryOp) {
  auto cpu = MakeCpuBackend({1, ""});
  ASSERT_TRUE(cpu.ok());
  const auto reference = MakeReferenceBackend();
  for (const Backend* backend : {cpu->get(), reference.get()}) {
    SCOPED_TRACE(std::string(backend->name()));
    Buffer q(DType::kFloat32, {1, 4, 2, 64}), k(DType::kFloat32, {1, 4, 1, 64});
    auto rope = PlanApplyRope({.config = RopeConfig{}, .q = q.view, .k = k.view});
    ASSERT_TRUE(rope.ok()) << rope.status();
    ExpectRefused(RunApplyRope(*backend, *rope, nullptr, OnDevice(q), k.view).status(), "q");
    ExpectRefused(RunApplyRope(*backend, *rope, nullptr, q.view, OnDevice(k)).status(), "k");

    RopeConfig c;
    c.head_dim = 32;
    PositionSpec range;
    range.kind = PositionSpec::Kind::kRange;
    range.count = 8;
    auto cache = PlanRopeCache({.config = c, .positions = range});
    ASSERT_TRUE(cache.ok()) << cache.status();
    Buffer cos(cache->cos), sin(cache->sin);
    ExpectRefused(RunRopeCache(*backend, *cache, nullptr, cos.view, OnDevice(sin)).status(), "sin");

    SinusoidalArgs sargs;
    sargs.params.dim = 16;
    sargs.positions = range;
    auto sinusoidal = PlanSinusoidal(sargs);
    ASSERT_TRUE(sinusoidal.ok());
    Buffer table(sinusoidal->table);
    ExpectRefused(RunSinusoidal(*backend, *sinusoidal, OnDevice(table)), "table");

    AddPositionEncodingArgs aargs;
    aargs.params.sinusoidal = SinusoidalParams{};
    Buffer x(DType::kFloat32, {1, 8, 16});
    aargs.x = OnDevice(x);
    auto add = PlanAddPositionEncoding(aargs);
    ASSERT_TRUE(add.ok()) << add.status();
    Buffer y(add->y);
    ExpectRefused(RunAddPositionEncoding(*backend, *add, y.view), "x");

    AlibiBiasArgs bargs;
    bargs.params.num_heads = 2;
    bargs.params.q_len = 3;
    bargs.params.k_len = 3;
    auto alibi = PlanAlibiBias(bargs);
    ASSERT_TRUE(alibi.ok());
    Buffer bias(alibi->bias), slopes(alibi->slopes);
    ExpectRefused(RunAlibiBias(*backend, *alibi, OnDevice(bias), slopes.view), "bias");
  }
}

TEST(DeviceViewsTest, HostSideTensorsRefuseDeviceRanges) {
  Buffer slopes(DType::kFloat64, {4});
  const absl::Status s = CheckOnHost("slopes", OnDevice(slopes));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("slopes: expected host memory"));
  EXPECT_TRUE(CheckOnHost("slopes", slopes.view).ok());
  EXPECT_TRUE(CheckOnHost("slopes", TensorView{DType::kFloat64, {4}, nullptr, true}).ok());
}

TEST(DeviceViewsTest, PositionsInDeviceMemoryAreRefused) {
  // Positions are resolved on the host, whatever backend computes.
  Buffer ids(DType::kInt64, {4});
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kIds;
  spec.ids = OnDevice(ids);
  RopeConfig c;
  c.head_dim = 8;
  auto plan = PlanRopeCache({.config = c, .positions = spec});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
  EXPECT_THAT(plan.status().message(), HasSubstr("positions.ids: expected host memory"));
}

TEST(DeviceViewsTest, ViewsKeepTheirLocationWhenMadeConst) {
  Buffer b(DType::kFloat16, {2});
  const ConstTensorView c = OnDevice(b);
  EXPECT_TRUE(c.on_device);
  EXPECT_FALSE(ConstTensorView(b.view).on_device);
}

TEST(DeviceViewsTest, IpcArgumentsAreCheckedBeforeAnyDevice) {
  const std::string handle(kCudaIpcHandleBytes, '\x01');
  struct Row {
    const char* name;
    std::string handle;
    int device;
    int64_t offset, byte_size;
    const char* message;
  };
  const std::vector<Row> rows = {
      {"empty handle", "", 0, 0, 16, "raw_handle: expected 64 bytes (a cudaIpcMemHandle_t), got 0"},
      {"short handle", handle.substr(1), 0, 0, 16, "raw_handle: expected 64 bytes"},
      {"long handle", handle + "x", 0, 0, 16, "got 65"},
      {"negative device", handle, -1, 0, 16, "device_id: expected >= 0, got -1"},
      {"negative offset", handle, 0, -8, 16, "offset: expected >= 0, got -8"},
      {"zero size", handle, 0, 0, 0, "byte_size: expected > 0, got 0"},
      {"negative size", handle, 0, 0, -1, "byte_size: expected > 0, got -1"},
      {"overflow", handle, 0, INT64_MAX - 4, 8, "overflows 64 bits"},
  };
  for (const Row& row : rows) {
    const absl::Status s = CheckCudaIpcArgs(row.handle, row.device, row.offset, row.byte_size);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << row.name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(row.message)) << row.name;
    // OpenCudaIpcRegion checks them first, whatever the build and the machine.
    auto region = OpenCudaIpcRegion(row.handle, row.device, row.offset, row.byte_size);
    ASSERT_FALSE(region.ok()) << row.name;
    EXPECT_EQ(region.status(), s) << row.name;
  }
  EXPECT_TRUE(CheckCudaIpcArgs(handle, 0, 0, 16).ok());
}

TEST(DeviceViewsTest, IpcRegionsNeedCudaAndADevice) {
  // A well-formed handle nobody exported: FAILED_PRECONDITION without CUDA or without a device;
  // with one, CUDA refuses the handle (INVALID_ARGUMENT naming raw_handle).
  const std::string handle(kCudaIpcHandleBytes, '\x01');
  auto region = OpenCudaIpcRegion(handle, 0, 0, 16);
  ASSERT_FALSE(region.ok());
  if (!CudaBuiltIn() || ListCudaDevices().empty()) {
    EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition) << region.status();
    EXPECT_THAT(region.status().message(), HasSubstr("CUDA"));
  } else {
    EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument) << region.status();
    EXPECT_THAT(region.status().message(), HasSubstr("raw_handle"));
  }
}

TEST(DeviceViewsTest, CallsWithDeviceTensorsStayOnTheDevice) {
  // Backend::For without a device backend is the backend itself; with device tensors a host
  // backend is still the answer (and refuses them, above).
  auto cpu = MakeCpuBackend({1, ""});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(&(*cpu)->For(0, true), cpu->get());
  EXPECT_FALSE((*cpu)->reads_device_memory());
}

}  // namespace
}  // namespace posenc::kernels
