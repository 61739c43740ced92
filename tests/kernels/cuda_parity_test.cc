// The CUDA backend on a device against the reference backend: the whole parity suite
// (parity_suite.inc: every op x dtype x layout x style x scaling x position mode), concurrency,
// cancellation and the error paths of MakeCudaBackend. Built only with CUDA; where no device
// (or no driver) is present every device test skips with "no CUDA device: <error name>", and the
// error-path tests still run.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/cancellation.h"

#define POSENC_PARITY_SUITE CudaParityTest
#include "tests/kernels/parity_suite.inc"

namespace posenc::kernels {
namespace {

// The host backend every device backend here is made with (as the server's one cpu backend).
std::shared_ptr<const Backend> Host() {
  static const auto* host = new std::shared_ptr<const Backend>(*MakeCpuBackend({2, ""}));
  return *host;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(const CudaBackendOptions& options = {}) {
  return MakeCudaBackend(options, Host());
}

// The device backend, or why there is none.
absl::StatusOr<std::unique_ptr<Backend>> MakeDeviceBackend(CudaBackendOptions options = {}) {
  if (ListCudaDevices().empty()) {
    absl::Status s = MakeCuda(options).status();
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", s.message()));
  }
  return MakeCuda(options);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaParityTest,
                         ::testing::Values(ParityBackend{"device0",
                                                         [] { return MakeDeviceBackend(); }},
                                           ParityBackend{"device0_1stream",
                                                         [] {
                                                           CudaBackendOptions o;
                                                           o.streams = 1;
                                                           o.pinned_pool_bytes =
                                                               0;  // no caching: every path
                                                           return MakeDeviceBackend(o);
                                                         }}),
                         ParityName);

TEST(CudaBackendTest, ErrorsWithoutOrBeyondTheDevices) {
  EXPECT_TRUE(CudaBuiltIn());
  CudaBackendOptions far;
  far.device = 1000;
  auto b = MakeCuda(far);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  EXPECT_NE(b.status().message().find("cuda"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("cudaError"), std::string::npos) << b.status();
  CudaBackendOptions no_streams;
  no_streams.streams = 0;
  EXPECT_EQ(MakeCuda(no_streams).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCudaBackend({}, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  if (ListCudaDevices().empty()) {
    auto none = MakeCuda();
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable) << none.status();
    EXPECT_NE(none.status().message().find("cudaError"), std::string::npos) << none.status();
  }
}

TEST(CudaBackendTest, DevicesAreListedWithTheirProperties) {
  const auto devices = ListCudaDevices();
  if (devices.empty()) GTEST_SKIP() << "no CUDA device: " << MakeCuda().status();
  for (const auto& d : devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_memory_bytes, 0);
    EXPECT_GE(d.compute_capability_major, 7);
    EXPECT_FALSE(d.driver_version.empty());
    EXPECT_FALSE(d.runtime_version.empty());
  }
}

TEST(CudaBackendTest, ConcurrentRequestsFromManyThreadsMatchTheReference) {
  auto b = MakeDeviceBackend();
  if (!b.ok()) GTEST_SKIP() << b.status();
  const Backend& cuda = **b;
  RopeConfig config;
  config.head_dim = 128;
  Buffer q0 = Random(DType::kBFloat16, {2, 33, 8, 128}, 5);
  Buffer k0 = Random(DType::kBFloat16, {2, 33, 2, 128}, 6);
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kRange;
  spec.start = 1000;
  auto want = RunApply(Ref(), config, TensorLayout::kBSHD, spec, q0, &k0);
  ASSERT_TRUE(want.ok());
  // The kernels are deterministic: every concurrent result equals a serial one bit for bit.
  auto serial = RunApply(cuda, config, TensorLayout::kBSHD, spec, q0, &k0);
  ASSERT_TRUE(serial.ok()) << serial.status();
  ExpectParity(want->q, serial->q, Kind::kApply, want->magnitude, "serial q");
  ExpectParity(want->k, serial->k, Kind::kApply, want->magnitude, "serial k");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      for (int n = 0; n < 20; ++n) {
        auto got = RunApply(cuda, config, TensorLayout::kBSHD, spec, q0, &k0);
        if (!got.ok() || std::memcmp(got->q.view.data, serial->q.view.data, q0.size() * 2) != 0 ||
            std::memcmp(got->k.view.data, serial->k.view.data, k0.size() * 2) != 0) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// FLOAT16/BFLOAT16 rotations give the CPU backend's bits (rope_math.h's RotateHalfPairWith on
// both; the device converts with the hardware's cvt.rn): q holds every 16-bit pattern (normals,
// subnormals, zeros, infinities, NaNs), positions near 0 and far from it, NEOX / GPT-J / DEEPSEEK.
// NaN outputs compare as NaN (their sign follows each processor's NaN propagation).
TEST(CudaBackendTest, HalfRotationsGiveTheCpuBackendsBitsForEvery16BitPattern) {
  auto b = MakeDeviceBackend();
  if (!b.ok()) GTEST_SKIP() << b.status();
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const bool bf16 = dtype == DType::kBFloat16;
    Buffer q0(dtype, {2, 8, 32, 128});  // 65536 elements: every pattern once
    auto* bits = reinterpret_cast<uint16_t*>(q0.view.data);
    for (int64_t i = 0; i < q0.size(); ++i) bits[i] = static_cast<uint16_t>(i * 40503u);
    const Buffer k0 = Random(dtype, {2, 8, 4, 128}, 17, -60000, 60000);
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj, RopeStyle::kDeepseek}) {
      for (int64_t start : {int64_t{0}, int64_t{1} << 30}) {
        RopeConfig config;
        config.head_dim = 128;
        config.style = style;
        PositionSpec spec;
        spec.kind = PositionSpec::Kind::kRange;
        spec.start = start;
        auto want = RunApply(*Host(), config, TensorLayout::kBSHD, spec, q0, &k0);
        auto got = RunApply(**b, config, TensorLayout::kBSHD, spec, q0, &k0);
        ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
        for (const auto& [w, g] : {std::pair{&want->q, &got->q}, std::pair{&want->k, &got->k}}) {
          const auto* wb = reinterpret_cast<const uint16_t*>(w->view.data);
          const auto* gb = reinterpret_cast<const uint16_t*>(g->view.data);
          const auto nan = [bf16](uint16_t v) {
            return bf16 ? (v & 0x7fffu) > 0x7f80u : (v & 0x7fffu) > 0x7c00u;
          };
          int64_t differ = 0, first = -1;
          for (int64_t i = 0; i < w->size(); ++i) {
            if (wb[i] != gb[i] && !(nan(wb[i]) && nan(gb[i]))) {
              if (first < 0) first = i;
              ++differ;
            }
          }
          EXPECT_EQ(differ, 0) << DTypeName(dtype) << " style " << static_cast<int>(style)
                               << " start " << start << ": first at " << first << " (cpu 0x"
                               << std::hex << (first >= 0 ? wb[first] : 0) << ", cuda 0x"
                               << (first >= 0 ? gb[first] : 0) << std::dec << ")";
        }
      }
    }
  }
}

class Cancelled final : public Cancellation {
 public:
  absl::Status Check() const override { return absl::CancelledError("cancelled by the test"); }
};

TEST(CudaBackendTest, CancelledRequestsStopAndTheBackendKeepsWorking) {
  auto b = MakeDeviceBackend();
  if (!b.ok()) GTEST_SKIP() << b.status();
  RopeConfig config;
  config.head_dim = 64;
  Buffer q0 = Random(DType::kFloat32, {1, 16, 4, 64}, 9);
  {
    Cancelled cancelled;
    ScopedCancellation scope(&cancelled);
    auto r = RunApply(**b, config, TensorLayout::kBSHD, PositionSpec{}, q0, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  }
  auto want = RunApply(Ref(), config, TensorLayout::kBSHD, PositionSpec{}, q0, nullptr);
  auto got = RunApply(**b, config, TensorLayout::kBSHD, PositionSpec{}, q0, nullptr);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  ExpectParity(want->q, got->q, Kind::kApply, want->magnitude, "after cancel");
}

}  // namespace
}  // namespace posenc::kernels
