// GPU benchmarks of the CUDA backend (Google Benchmark; built with POSENC_BUILD_BENCHMARKS and
// CUDA; tests/bench/run_cuda.sh runs it). Two kinds of figures:
//
//  * Kernel (BM_Kernel*): the kernels of kernels/cuda/launch.h on device buffers, timed with
//    CUDA events around the launch alone (no host copies, no allocation). Each benchmark also
//    times, in the same run, a device-to-device cudaMemcpy moving the same number of bytes
//    (memcpy_GBps) and reports the ratio (of_memcpy = kernel GB/s / memcpy GB/s).
//    Bytes moved: ApplyRope reads and writes q and k (2 x their bytes, in place); RopeCache writes
//    cos and sin; biases write the output matrix. A cudaMemcpy of N bytes moves 2N (read +
//    write), so the reference copy is of half the kernel's bytes.
//  * End to end (BM_EndToEnd*): the cuda Backend method with host tensors (upload through the
//    pinned staging buffers, kernel, download), wall time. BM_SmallCallApplyRope times small
//    calls on the cpu and the cuda backend side by side, for --cuda_small_call_bytes.
//  * GPU callers (BM_GpuCallerApplyRope): q and k in this process's device memory, registered as
//    CUDA shared memory with a posenc-server --backend=cuda (a child process: POSENC_SERVER_PATH,
//    default the build's) and rotated in place by ApplyRope calls of the C++ client over
//    loopback TCP: wall time per call, bytes counted as BM_KernelApplyRope counts them, so the
//    two rows of one shape give the caller's fraction of the kernel.
//
// Without a device every benchmark is skipped with the reason.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/ops.h"
#include "posenc/client.h"
#include "tests/common/position_specs.h"
#include "tests/server/server_process.h"

namespace posenc::kernels {
namespace {

// The cpu backend on every core (the server's one host backend) and the cuda backend beside it,
// or why there is none.
std::shared_ptr<const Backend> CpuHost() {
  static const auto* cpu = new std::shared_ptr<const Backend>(*MakeCpuBackend({}));
  return *cpu;
}
const absl::StatusOr<std::unique_ptr<Backend>>& Cuda() {
  static const auto* made =
      new absl::StatusOr<std::unique_ptr<Backend>>(MakeCudaBackend({}, CpuHost()));
  return *made;
}
const Backend* CudaBackendOrNull() { return Cuda().ok() ? Cuda()->get() : nullptr; }

bool HaveDevice(benchmark::State& state) {
  if (!ListCudaDevices().empty()) return true;
  state.SkipWithError(absl::StrCat("no CUDA device: ", Cuda().status().ToString()).c_str());
  return false;
}

struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&p, std::max<size_t>(n, 256)) != cudaSuccess) p = nullptr;
    if (p) cudaMemset(p, 0, n);
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

template <typename T>
std::unique_ptr<DeviceBuffer> Upload(const std::vector<T>& v) {
  auto d = std::make_unique<DeviceBuffer>(v.size() * sizeof(T));
  cudaMemcpy(d->p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

// Milliseconds of launch() on the default stream, by CUDA events.
template <typename F>
float TimeMs(F launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, nullptr);
  launch();
  cudaEventRecord(b, nullptr);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

// Times the kernel for the state's iterations, then the same-bytes device-to-device copy, and
// sets the counters. `moved`: bytes the kernel reads + writes per launch.
template <typename F>
void RunKernel(benchmark::State& state, int64_t moved, F launch) {
  launch();  // warm-up
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    state.SkipWithError(cudaGetErrorName(e));
    return;
  }
  double total_ms = 0;
  for (auto _ : state) {
    const float ms = TimeMs(launch);
    total_ms += ms;
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(state.iterations() * moved);
  const size_t copy = static_cast<size_t>(moved / 2);
  DeviceBuffer src(copy), dst(copy);
  if (src.p == nullptr || dst.p == nullptr) return;
  std::vector<float> copies;
  for (int i = 0; i < 10; ++i) {
    copies.push_back(
        TimeMs([&] { cudaMemcpyAsync(dst.p, src.p, copy, cudaMemcpyDeviceToDevice); }));
  }
  std::sort(copies.begin(), copies.end());
  const double kernel_gbps = moved / (total_ms / state.iterations() / 1e3) / 1e9;
  const double copy_gbps = moved / (copies[copies.size() / 2] / 1e3) / 1e9;
  state.counters["kernel_GBps"] = kernel_gbps;
  state.counters["memcpy_GBps"] = copy_gbps;
  state.counters["of_memcpy"] = kernel_gbps / copy_gbps;
}

// The launch structs' frequency and position inputs for positions 0 .. tokens-1 (per sequence).
struct AngleData {
  std::unique_ptr<DeviceBuffer> hi, lo, pos;
  AngleData(const RopeFrequencies& f, int64_t tokens, int64_t seq) {
    const cpu::SplitFrequencies w(f.inv_freq);
    std::vector<int32_t> p(tokens);
    for (int64_t t = 0; t < tokens; ++t) p[t] = static_cast<int32_t>(t % seq);
    hi = Upload(w.hi);
    lo = Upload(w.lo);
    pos = Upload(p);
  }
  cuda::RopeAngles Angles(int64_t tokens, int64_t half) const {
    cuda::RopeAngles a;
    a.w_hi = hi->as<double>();
    a.w_lo = lo->as<double>();
    a.positions = pos->as<int32_t>();
    a.tokens = tokens;
    a.half = half;
    return a;
  }
};

void BM_KernelApplyRope(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const int64_t b = state.range(0), s = state.range(1), h = state.range(2), d = state.range(3);
  const bool gptj = state.range(4) != 0;
  const auto dtype = static_cast<DType>(state.range(5));
  RopeConfig config;
  config.head_dim = d;
  const RopeFrequencies f = ComputeValidRopeFrequencies(config, s - 1);
  AngleData angles(f, b * s, s);
  const int64_t esize = DTypeSize(dtype);
  const int64_t elems = b * s * h * d;
  DeviceBuffer q(elems * esize), k(elems * esize);
  cuda::ApplyRopeLaunch l;
  l.angles = angles.Angles(b * s, d / 2);
  l.q = q.p;
  l.k = k.p;
  l.dtype = static_cast<int>(dtype);
  l.style = gptj ? 1 : 0;
  l.seq = s;
  l.q_heads = l.k_heads = h;
  l.q_batch = l.k_batch = s * h * d;
  l.q_seq = l.k_seq = h * d;
  l.q_head = l.k_head = d;
  l.vector = static_cast<int>(16 / esize);
  RunKernel(state, 2 * 2 * elems * esize, [&] { cuda::LaunchApplyRope(l, nullptr); });
}
BENCHMARK(BM_KernelApplyRope)
    ->ArgNames({"b", "s", "h", "d", "gptj", "dtype"})
    ->Args({1, 4096, 32, 128, 0, 0})
    ->Args({1, 4096, 32, 128, 1, 0})
    ->Args({8, 2048, 32, 128, 0, 0})
    ->Args({1, 4096, 32, 128, 0, 1})
    ->Args({1, 4096, 32, 128, 0, 2})
    ->Args({64, 1, 32, 128, 0, 0})
    ->Args({16, 4096, 32, 128, 0, 2})
    ->Args({16, 4096, 32, 128, 0, 0})
    ->UseManualTime();

void BM_KernelRopeCache(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const int64_t n = state.range(0), d = state.range(1);
  const auto dtype = static_cast<DType>(state.range(2));
  RopeConfig config;
  config.head_dim = d;
  const RopeFrequencies f = ComputeValidRopeFrequencies(config, n - 1);
  AngleData angles(f, n, n);
  const int64_t esize = DTypeSize(dtype);
  DeviceBuffer cos(n * d * esize), sin(n * d * esize);
  cuda::RopeCacheLaunch l;
  l.angles = angles.Angles(n, d / 2);
  l.cos = cos.p;
  l.sin = sin.p;
  l.dtype = static_cast<int>(dtype);
  l.layout = 1;  // NEOX
  l.width = d;
  RunKernel(state, 2 * n * d * esize, [&] { cuda::LaunchRopeCache(l, nullptr); });
}
BENCHMARK(BM_KernelRopeCache)
    ->ArgNames({"n", "d", "dtype"})
    ->ArgsProduct({{4096, 32768, 131072, 1048576}, {128}, {0, 2}})
    ->UseManualTime();

// Sinusoidal tables (posenc_bench.cc's 8192 x 1024 and longer), FLOAT32 and BFLOAT16, both
// layouts: one exact angle per element today, so the figure says how far from a store the
// kernel is (BENCHMARKS.md, #19).
void BM_KernelSinusoidal(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const int64_t n = state.range(0), d = state.range(1);
  const auto dtype = static_cast<DType>(state.range(2));
  SinusoidalParams params;
  params.dim = d;
  params.layout = state.range(3) != 0 ? SinusoidalLayout::kConcat : SinusoidalLayout::kInterleaved;
  const std::vector<long double> exact = SinusoidalFrequencies(params);
  const cpu::SplitFrequencies w(exact);
  std::vector<int32_t> p(n);
  for (int64_t t = 0; t < n; ++t) p[t] = static_cast<int32_t>(t);
  auto hi = Upload(w.hi), lo = Upload(w.lo), pos = Upload(p);
  const int64_t esize = DTypeSize(dtype);
  DeviceBuffer out(n * d * esize);
  cuda::SinusoidalLaunch l;
  l.w_hi = hi->as<double>();
  l.w_lo = lo->as<double>();
  l.positions = pos->as<int32_t>();
  l.out = out.p;
  l.dtype = static_cast<int>(dtype);
  l.layout = static_cast<int>(params.layout);
  l.tokens = n;
  l.dim = d;
  l.nfreq = static_cast<int64_t>(exact.size());
  RunKernel(state, n * d * esize, [&] { cuda::LaunchSinusoidal(l, nullptr); });
}
BENCHMARK(BM_KernelSinusoidal)
    ->ArgNames({"n", "d", "dtype", "concat"})
    ->ArgsProduct({{8192, 131072}, {1024}, {0, 2}, {0, 1}})
    ->UseManualTime();

// A bias generator kernel (one row of q + k - 1 values per head, written into gen) and the
// Toeplitz expansion of those rows into the h x q x k output, timed together.
template <typename Generate>
void RunBiasKernels(benchmark::State& state, const DeviceBuffer& gen, const DeviceBuffer& out,
                    int64_t h, int64_t q, int64_t k, int64_t esize, Generate generate) {
  const cuda::ToeplitzLaunch t{gen.p, out.p, h, q, k, static_cast<int>(esize)};
  RunKernel(state, h * q * k * esize, [&] {
    generate();
    cuda::LaunchToeplitzExpand(t, nullptr);
  });
}

// The bias shapes: posenc_bench.cc's (32 heads, 2048 x 2048) and 4x longer, FLOAT32 and BFLOAT16.
void BiasShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"h", "q", "k", "dtype"});
  for (int64_t n : {2048, 8192}) {
    for (int64_t dtype : {0, 2}) b->Args({32, n, n, dtype});
  }
  b->UseManualTime();
}

void BM_KernelAlibiBias(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const int64_t h = state.range(0), q = state.range(1), k = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  const int64_t esize = DTypeSize(dtype);
  std::vector<double> slopes = *AlibiSlopes(h);
  auto ds = Upload(slopes);
  DeviceBuffer gen(h * (q + k - 1) * esize), out(h * q * k * esize);
  cuda::AlibiLaunch g;
  g.slopes = ds->as<double>();
  g.out = gen.p;
  g.dtype = static_cast<int>(dtype);
  g.heads = h;
  g.q_len = q;
  g.k_len = k;
  g.query_offset = k - q;
  RunBiasKernels(state, gen, out, h, q, k, esize, [&] { cuda::LaunchAlibiGenerators(g, nullptr); });
}
BENCHMARK(BM_KernelAlibiBias)->Apply(BiasShapes);

void BM_KernelRelativeBias(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const int64_t h = state.range(0), q = state.range(1), k = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  const int64_t esize = DTypeSize(dtype);
  const int64_t gen_len = q + k - 1;
  std::vector<int32_t> buckets(gen_len);
  for (int64_t t = 0; t < gen_len; ++t) {
    buckets[t] = static_cast<int32_t>(T5Bucket(t - (q - 1), true, 32, 128));
  }
  std::vector<double> table(32 * h);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.01 * static_cast<double>(i);
  auto db = Upload(buckets), dt = Upload(table);
  DeviceBuffer gen(h * gen_len * esize), out(h * q * k * esize);
  cuda::T5GeneratorLaunch g;
  g.buckets = db->as<int32_t>();
  g.table = dt->as<double>();
  g.out = gen.p;
  g.dtype = static_cast<int>(dtype);
  g.heads = h;
  g.gen_len = gen_len;
  RunBiasKernels(state, gen, out, h, q, k, esize, [&] { cuda::LaunchT5Generators(g, nullptr); });
}
BENCHMARK(BM_KernelRelativeBias)->Apply(BiasShapes);

// ---- end to end: the Backend method with host tensors ------------------------------------------

// ApplyRope on host tensors q and k of [b, s, h, d] through `backend`, wall time per call.
void RunApplyRopeEndToEnd(benchmark::State& state, const Backend& backend, int64_t b, int64_t s,
                          int64_t h, int64_t d, DType dtype) {
  const int64_t bytes = b * s * h * d * DTypeSize(dtype);
  std::vector<unsigned char> qh(bytes), kh(bytes);
  TensorView q{dtype, {b, s, h, d}, qh.data()}, k{dtype, {b, s, h, d}, kh.data()};
  RopeConfig config;
  auto plan = PlanApplyRope(
      {.config = config, .layout = TensorLayout::kBSHD, .q = q, .k = k, .positions = {}});
  auto in = PrepareRopeRun(plan->positions, plan->config, nullptr);
  for (auto _ : state) {
    auto st = backend.ApplyRope(*plan, *in->info.frequencies, in->positions, q, k);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * 2 * bytes);
  // The bytes the server compares with --cuda_small_call_bytes: the outputs q and k (and inv_freq).
  state.counters["call_bytes"] = static_cast<double>(2 * bytes + d / 2 * 8);
}

void BM_EndToEndApplyRope(benchmark::State& state) {
  if (!HaveDevice(state) || CudaBackendOrNull() == nullptr) return;
  RunApplyRopeEndToEnd(state, *CudaBackendOrNull(), state.range(0), state.range(1), state.range(2),
                       state.range(3), static_cast<DType>(state.range(4)));
}
BENCHMARK(BM_EndToEndApplyRope)
    ->ArgNames({"b", "s", "h", "d", "dtype"})
    ->Args({1, 4096, 32, 128, 0})
    ->Args({1, 4096, 32, 128, 2})
    ->UseRealTime();

// The small-call threshold of the server (--cuda_small_call_bytes): the same ApplyRope call
// (q and k of [1, s, 32, 128] FLOAT32, s = 1 .. 1024: 32 KiB .. 32 MiB of outputs) end to end on
// the cpu backend (every core, as the server's small-call backend) and on the cuda backend.
// tests/bench/run_cuda.sh prints the smallest call_bytes at which cuda is faster.
void BM_SmallCallApplyRope(benchmark::State& state) {
  const bool cuda = state.range(0) == 1;
  if (cuda && (!HaveDevice(state) || CudaBackendOrNull() == nullptr)) return;
  RunApplyRopeEndToEnd(state, cuda ? *CudaBackendOrNull() : *CpuHost(), 1, state.range(1), 32, 128,
                       DType::kFloat32);
}
BENCHMARK(BM_SmallCallApplyRope)
    ->ArgNames({"cuda", "s"})
    ->ArgsProduct({{0, 1}, {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024}})
    ->UseRealTime();

void BM_EndToEndAlibiBias(benchmark::State& state) {
  if (!HaveDevice(state) || CudaBackendOrNull() == nullptr) return;
  AlibiBiasParams p{.num_heads = state.range(0), .q_len = state.range(1), .k_len = state.range(2)};
  auto plan = PlanAlibiBias({.params = p, .output_dtype = DType::kFloat32});
  std::vector<double> slopes = *AlibiSlopes(p.num_heads);
  std::vector<unsigned char> out(plan->bias.shape[0] * plan->bias.shape[1] * plan->bias.shape[2] *
                                 4);
  TensorView view{DType::kFloat32, plan->bias.shape, out.data()};
  for (auto _ : state) {
    auto st = CudaBackendOrNull()->AlibiBias(*plan, slopes, view);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(out.size()));
}
BENCHMARK(BM_EndToEndAlibiBias)->ArgNames({"h", "q", "k"})->Args({32, 2048, 2048})->UseRealTime();

// The server of the GPU-caller benchmarks, started once (null when it did not start).
struct GpuCallerServer {
  server::testing::ServerProcess process{
      {"--listen=127.0.0.1:0", "--backend=cuda", "--allow_shared_memory", "--threads=2",
       "--max_output_elements=1073741824", "--max_inflight_bytes=0"}};
  std::unique_ptr<client::Client> client;
};
GpuCallerServer* GpuServer() {
  static GpuCallerServer* server = [] {
    auto* s = new GpuCallerServer();
    const int port = s->process.WaitForPort(std::chrono::seconds(60));
    if (port == 0) {
      std::fprintf(stderr, "posenc-server did not start: %s\n", s->process.output().c_str());
      return static_cast<GpuCallerServer*>(nullptr);
    }
    auto c = client::Client::Connect(absl::StrCat("127.0.0.1:", port));
    if (!c.ok()) return static_cast<GpuCallerServer*>(nullptr);
    s->client = std::move(*c);
    return s;
  }();
  return server;
}

// A device buffer registered with the server as CUDA region `name`, as a tensor reference.
absl::StatusOr<client::Tensor> Register(const client::Client& c, const std::string& name,
                                        const DeviceBuffer& buffer, client::DType dtype,
                                        std::vector<int64_t> shape) {
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, buffer.p); e != cudaSuccess) {
    return absl::InternalError(cudaGetErrorName(e));
  }
  const auto bytes = static_cast<int64_t>(buffer.bytes);
  POSENC_RETURN_IF_ERROR(c.RegisterCudaSharedMemory(
      {name, std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)), 0, bytes}));
  client::Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.shared_memory = client::SharedMemoryRef{name, 0, bytes};
  return t;
}

void BM_GpuCallerApplyRope(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  GpuCallerServer* server = GpuServer();
  if (server == nullptr) {
    state.SkipWithError("posenc-server --backend=cuda did not start");
    return;
  }
  const int64_t b = state.range(0), s = state.range(1), h = state.range(2), d = state.range(3);
  const bool bf16 = state.range(5) == 2;
  const int64_t esize = bf16 ? 2 : 4;
  const int64_t bytes = b * s * h * d * esize;
  DeviceBuffer q(static_cast<size_t>(bytes)), k(static_cast<size_t>(bytes));
  const client::DType dtype = bf16 ? client::DType::kBFloat16 : client::DType::kFloat32;
  client::ApplyRopeOptions rope;
  auto qt = Register(*server->client, "bench_q", q, dtype, {b, s, h, d});
  auto kt = Register(*server->client, "bench_k", k, dtype, {b, s, h, d});
  if (!qt.ok() || !kt.ok()) {
    state.SkipWithError((qt.ok() ? kt.status() : qt.status()).ToString().c_str());
    (void)server->client->UnregisterSharedMemory("");
    return;
  }
  rope.q = *std::move(qt);
  rope.k = *std::move(kt);
  rope.config.base = 10000;
  const size_t log_start = server->process.output().size();
  for (auto _ : state) {
    auto r = server->client->ApplyRope(rope);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
  }
  (void)server->client->UnregisterSharedMemory("");
  state.SetBytesProcessed(state.iterations() * 2 * 2 * bytes);  // q and k, read and written
  // The server's own time per call (its access lines' latency_ms: parse to the response
  // serialized), median: the rest of the wall time is the round trip and the client.
  std::vector<double> server_ms;
  const std::string log = server->process.output().substr(log_start);
  for (size_t at = log.find("rpc=ApplyRope"); at != std::string::npos;
       at = log.find("rpc=ApplyRope", at + 1)) {
    const size_t ms = log.find("latency_ms=", at);
    if (ms != std::string::npos) server_ms.push_back(std::atof(log.c_str() + ms + 11));
  }
  if (!server_ms.empty()) {
    std::nth_element(server_ms.begin(), server_ms.begin() + server_ms.size() / 2, server_ms.end());
    state.counters["server_us"] = server_ms[server_ms.size() / 2] * 1e3;
  }
}
// The floor of a GPU caller's call: one round trip of the same client and server (Health).
void BM_GpuCallerRoundTrip(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  GpuCallerServer* server = GpuServer();
  if (server == nullptr) {
    state.SkipWithError("posenc-server --backend=cuda did not start");
    return;
  }
  for (auto _ : state) {
    auto r = server->client->Health();
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
  }
}
BENCHMARK(BM_GpuCallerRoundTrip)->UseRealTime();

// What the server does for a GPU caller's ApplyRope past the RPC, in process: RunApplyRope on
// the cuda backend with q and k device views (TensorView::on_device), positions resolved and the
// frequencies computed per call (no cache), as a call with device tensors runs it. ids = 1: the
// same positions 0 .. S-1 given as ids, which go up token by token (the default goes up as one
// start per sequence).
void BM_DeviceTensorsApplyRope(benchmark::State& state) {
  if (!HaveDevice(state) || CudaBackendOrNull() == nullptr) return;
  const int64_t b = state.range(0), s = state.range(1), h = state.range(2), d = state.range(3);
  const auto dtype = static_cast<DType>(state.range(5));
  const int64_t bytes = b * s * h * d * DTypeSize(dtype);
  DeviceBuffer qd(static_cast<size_t>(bytes)), kd(static_cast<size_t>(bytes));
  TensorView q{dtype, {b, s, h, d}, qd.p, true}, k{dtype, {b, s, h, d}, kd.p, true};
  std::vector<int64_t> ids(static_cast<size_t>(s));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  auto plan =
      PlanApplyRope({.config = RopeConfig{},
                     .layout = TensorLayout::kBSHD,
                     .q = q,
                     .k = k,
                     .positions = state.range(6) != 0 ? testing::IdsSpec(ids) : PositionSpec{}});
  if (!plan.ok()) {
    state.SkipWithError(plan.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto r = RunApplyRope(*CudaBackendOrNull(), *plan, nullptr, q, k);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * 2 * bytes);
}
BENCHMARK(BM_DeviceTensorsApplyRope)
    ->ArgNames({"b", "s", "h", "d", "gptj", "dtype", "ids"})
    ->Args({1, 4096, 32, 128, 0, 0, 0})
    ->Args({16, 4096, 32, 128, 0, 0, 0})
    ->Args({16, 4096, 32, 128, 0, 0, 1})
    ->Args({64, 1, 32, 128, 0, 0, 0})
    ->UseRealTime();

BENCHMARK(BM_GpuCallerApplyRope)
    ->ArgNames({"b", "s", "h", "d", "gptj", "dtype"})
    ->Args({1, 4096, 32, 128, 0, 0})
    ->Args({8, 2048, 32, 128, 0, 0})
    ->Args({16, 4096, 32, 128, 0, 0})
    ->Args({1, 4096, 32, 128, 0, 2})
    ->Args({16, 4096, 32, 128, 0, 2})
    ->Args({64, 1, 32, 128, 0, 0})
    ->UseRealTime();

}  // namespace
}  // namespace posenc::kernels

int main(int argc, char** argv) {
  for (const auto& d : posenc::kernels::ListCudaDevices()) {
    std::printf("cuda device %d: %s, %.1f GiB, sm_%d%d, driver %s, runtime %s\n", d.index,
                d.name.c_str(), static_cast<double>(d.total_memory_bytes) / (1 << 30),
                d.compute_capability_major, d.compute_capability_minor, d.driver_version.c_str(),
                d.runtime_version.c_str());
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
