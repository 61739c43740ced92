// Kernel benchmarks (Google Benchmark): the machine's limit (STREAM-style copy, triad, in-place
// update and fill)
// and posenc's CPU backend at the shapes of issue #3, side by side in one process.
//
// Conventions (BENCHMARKS.md): RoPE apply counts 8 bytes per FLOAT32 element of q and k (read +
// write), 4 per FLOAT16/BFLOAT16 element, rotated in place on buffers touched before timing (all of
// each row counted, also where partial rotary touches part of it); bias matrices count the bytes
// written into pre-faulted buffers; RopeCache/Sinusoidal count the elements of the full-width cos
// and sin tables (and 4 bytes each). Every benchmark takes the thread count as its last argument.
// Run through tests/bench/run_bench.sh, which adds the PyTorch peer and prints the tables of
// BENCHMARKS.md, each kernel as a fraction of the limit measured in the same run: ApplyRope of
// BM_StreamUpdate, biases and tables of BM_StreamFill.
//
// The timed loops call the backend's method alone: each op is planned, its positions resolved
// and its RoPE frequencies (ALiBi slopes) computed once, before the loop.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/ops.h"

namespace posenc::kernels {
namespace {

// The CPU backend on `threads` threads at the processor's best ISA level, or at the one
// POSENC_BENCH_ISA names ("avx2", "scalar": a lower level measured on a processor with a higher).
const Backend& Cpu(int threads) {
  static std::unique_ptr<Backend> backends[3];
  static const char* const isa = std::getenv("POSENC_BENCH_ISA");
  if (!backends[threads]) backends[threads] = std::move(*MakeCpuBackend({threads, isa ? isa : ""}));
  return *backends[threads];
}

// A pre-faulted buffer of `n` elements of `dtype`, every one a random value in [-1, 1) (a block of
// them repeated: drawing each would cost seconds per benchmark).
struct Buffer {
  std::vector<unsigned char> bytes;
  TensorView view;
  Buffer(DType dtype, Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const size_t esize = static_cast<size_t>(DTypeSize(dtype));
    bytes.resize(static_cast<size_t>(n) * esize);
    std::mt19937 gen(1);
    std::uniform_real_distribution<double> dist(-1, 1);
    const int64_t block = std::min<int64_t>(n, 4099);
    for (int64_t i = 0; i < block; ++i) StoreFromDouble(bytes.data(), dtype, i, dist(gen));
    for (int64_t i = block; i < n; i += block) {
      std::memcpy(bytes.data() + i * esize, bytes.data(),
                  static_cast<size_t>(std::min(block, n - i)) * esize);
    }
    view = {dtype, shape, bytes.data()};
  }
  // A planned output.
  explicit Buffer(const OutputSpec& spec) : Buffer(spec.dtype, spec.shape) {}
};

// True when `value` holds one; else the benchmark is skipped with the error (bad arguments).
template <typename T>
bool Ready(benchmark::State& state, const absl::StatusOr<T>& value) {
  if (!value.ok()) state.SkipWithError(value.status().ToString().c_str());
  return value.ok();
}

// ---- the machine's limit ------------------------------------------------------------------

constexpr int64_t kStreamN = int64_t{1} << 25;  // 32 Mi doubles = 256 MiB per array

struct StreamArrays {
  std::vector<double> a, b, c;
  StreamArrays() : a(kStreamN, 1.0), b(kStreamN, 2.0), c(kStreamN, 0.5) {}
};

StreamArrays& Stream() {
  static StreamArrays s;
  return s;
}

// Splits [0, n) over `threads` threads running fn(begin, end).
template <typename F>
void Split(int threads, int64_t n, F fn) {
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = n / threads;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(fn, t * chunk, t + 1 == threads ? n : (t + 1) * chunk);
  fn(0, chunk);
  for (auto& th : pool) th.join();
}

// Times `run` (a backend call, its status kept from being optimized away) while `state` runs.
template <typename F>
void TimeRuns(benchmark::State& state, F run) {
  for (auto _ : state) {
    auto status = run();
    benchmark::DoNotOptimize(status);
    benchmark::ClobberMemory();
  }
}

// Times fn(s, begin, end) split over state.range(0) threads; each element moves
// `bytes_per_element`.
template <typename F>
void RunStream(benchmark::State& state, int64_t bytes_per_element, F fn) {
  StreamArrays& s = Stream();
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    Split(threads, kStreamN, [&](int64_t b, int64_t e) { fn(s, b, e); });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes_per_element * kStreamN);
}

void BM_StreamCopy(benchmark::State& state) {
  RunStream(state, 2 * 8, [](StreamArrays& s, int64_t b, int64_t e) {
    std::memcpy(s.c.data() + b, s.a.data() + b, (e - b) * sizeof(double));
  });
}

void BM_StreamTriad(benchmark::State& state) {
  RunStream(state, 3 * 8, [](StreamArrays& s, int64_t b, int64_t e) {
    double* __restrict a = s.a.data();
    const double* __restrict bb = s.b.data();
    const double* __restrict c = s.c.data();
    for (int64_t i = b; i < e; ++i) a[i] = bb[i] + 3.0 * c[i];
  });
}

// The limit of an in-place op such as ApplyRope: each element read and written back once (the
// store hits a line already in cache, so nothing is read for it: 16 bytes per element move).
void BM_StreamUpdate(benchmark::State& state) {
  RunStream(state, 2 * 8, [](StreamArrays& s, int64_t b, int64_t e) {
    double* __restrict a = s.a.data();
    const double scale = 1.0000001;
    for (int64_t i = b; i < e; ++i) a[i] = scale * a[i];
  });
}

void BM_StreamFill(benchmark::State& state) {
  RunStream(state, 8, [](StreamArrays& s, int64_t b, int64_t e) {
    std::fill(s.c.data() + b, s.c.data() + e, 1.5);
  });
}

BENCHMARK(BM_StreamCopy)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_StreamUpdate)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_StreamFill)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// ---- ApplyRope ------------------------------------------------------------------------------

// Args: batch, seq, heads, head_dim, rotary_dim, style (0 NEOX, 1 GPTJ, 2 DEEPSEEK), layout (0
// BSHD, 1 BHSD, 2 THD: b*s packed tokens), dtype, offsets (one per sequence), threads.
void BM_ApplyRope(benchmark::State& state) {
  const int64_t b = state.range(0), s = state.range(1), h = state.range(2), d = state.range(3);
  RopeConfig config;
  config.rotary_dim = state.range(4);
  config.style = static_cast<RopeStyle>(state.range(5));
  const auto layout = static_cast<TensorLayout>(state.range(6));
  const auto dtype = static_cast<DType>(state.range(7));
  const bool offsets = state.range(8) != 0;
  const int threads = static_cast<int>(state.range(9));
  const Shape shape = layout == TensorLayout::kBSHD   ? Shape{b, s, h, d}
                      : layout == TensorLayout::kBHSD ? Shape{b, h, s, d}
                                                      : Shape{b * s, h, d};
  Buffer q(dtype, shape), k(dtype, shape);
  PositionSpec spec;
  if (offsets) {
    spec.kind = PositionSpec::Kind::kOffsets;
    for (int64_t i = 0; i < b; ++i) spec.offsets.push_back(1000 + 37 * i);
  }
  auto plan = PlanApplyRope(
      {.config = config, .layout = layout, .q = q.view, .k = k.view, .positions = spec});
  if (!Ready(state, plan)) return;
  auto in = PrepareRopeRun(plan->positions, plan->config, /*cache=*/nullptr);
  if (!Ready(state, in)) return;
  const RopeFrequencies& f = *in->info.frequencies;
  const ResolvedPositions* rp = &in->positions;
  const Backend& backend = Cpu(threads);
  TimeRuns(state, [&] { return backend.ApplyRope(*plan, f, *rp, q.view, k.view); });
  state.SetBytesProcessed(state.iterations() * 2 * (b * s * h * d) * 2 * DTypeSize(dtype));
  state.counters["tokens"] = static_cast<double>(b * s);
}

void ApplyRopeArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"b", "s", "h", "d", "rot", "style", "layout", "dtype", "offsets", "threads"});
  const int64_t f32 = static_cast<int64_t>(DType::kFloat32);
  const int64_t neox = 0, gptj = 1, deepseek = 2, bshd = 0, bhsd = 1, thd = 2;
  for (int64_t threads : {1, 2}) {
    for (auto shape :
         {std::vector<int64_t>{1, 4096, 32, 128}, std::vector<int64_t>{8, 2048, 32, 128}}) {
      for (int64_t style : {neox, gptj}) {
        for (int64_t rot : {128, 64}) {
          bm->Args({shape[0], shape[1], shape[2], shape[3], rot, style, bshd, f32, 0, threads});
        }
      }
    }
    bm->Args({1, 4096, 32, 128, 128, deepseek, bshd, f32, 0, threads});
    // FLOAT16/BFLOAT16: every style, partial rotary, and the three layouts.
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      const auto dtype = static_cast<int64_t>(dt);
      for (int64_t style : {neox, gptj, deepseek}) {
        bm->Args({1, 4096, 32, 128, 128, style, bshd, dtype, 0, threads});
      }
      bm->Args({1, 4096, 32, 128, 64, neox, bshd, dtype, 0, threads});
      bm->Args({1, 4096, 32, 128, 64, gptj, bshd, dtype, 0, threads});
      bm->Args({1, 4096, 32, 128, 128, neox, bhsd, dtype, 0, threads});
      bm->Args({1, 4096, 32, 128, 128, gptj, thd, dtype, 0, threads});
    }
    // The decode step: one new token per sequence, each at its own offset.
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      bm->Args({64, 1, 32, 128, 128, neox, bshd, static_cast<int64_t>(dt), 1, threads});
    }
  }
  bm->UseRealTime();
}
BENCHMARK(BM_ApplyRope)->Apply(ApplyRopeArgs);

// The same rotation on q and k of 16 tokens (256 KiB in FLOAT16/BFLOAT16, 512 KiB in FLOAT32):
// rotated again and again, they stay in the caches, so this is the arithmetic's own rate on this
// processor with no memory traffic, the ceiling of the large shapes above. summarize.py reports it
// beside the in-place update (one thread): where it is below a dtype's target of issue #19 the
// target cannot be met on the host without cheaper arithmetic (the AVX2 hosts: BENCHMARKS.md).
void BM_ApplyRopeInCache(benchmark::State& state) { BM_ApplyRope(state); }
void ApplyRopeInCacheArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"b", "s", "h", "d", "rot", "style", "layout", "dtype", "offsets", "threads"});
  const int64_t neox = 0, gptj = 1, bshd = 0, bhsd = 1;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const auto dtype = static_cast<int64_t>(dt);
    bm->Args({1, 16, 32, 128, 128, neox, bshd, dtype, 0, 1});
    bm->Args({1, 16, 32, 128, 128, gptj, bshd, dtype, 0, 1});
    bm->Args({1, 16, 32, 128, 128, neox, bhsd, dtype, 0, 1});
  }
  bm->UseRealTime();
}
BENCHMARK(BM_ApplyRopeInCache)->Apply(ApplyRopeInCacheArgs);

// The host-side work of one ApplyRope call before any backend runs (every backend pays it, the
// cuda backend's GPU callers included): PrepareRopeRun resolves the positions of every token and
// computes the frequencies (no cache), for [b, s] tokens of the default positions.
void BM_PrepareRopeRun(benchmark::State& state) {
  const int64_t b = state.range(0), s = state.range(1);
  Buffer q(DType::kFloat32, {b, s, 1, 128});
  auto plan = PlanApplyRope({.config = RopeConfig{},
                             .layout = TensorLayout::kBSHD,
                             .q = q.view,
                             .k = {},
                             .positions = {}});
  if (!Ready(state, plan)) return;
  for (auto _ : state) {
    auto in = PrepareRopeRun(plan->positions, plan->config, /*cache=*/nullptr);
    if (!Ready(state, in)) return;
    benchmark::DoNotOptimize(in->positions.num_tokens);
  }
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(b * s), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}
BENCHMARK(BM_PrepareRopeRun)
    ->ArgNames({"b", "s"})
    ->Args({64, 1})
    ->Args({1, 4096})
    ->Args({16, 4096})
    ->UseRealTime();

// ---- tables ------------------------------------------------------------------------------------

// A FLOAT32 RopeCache plan of positions 0 .. n-1, head_dim d, default RoPE.
absl::StatusOr<RopeCachePlan> RangeTablePlan(int64_t n, int64_t d, RopeCacheLayout layout) {
  RopeConfig config;
  config.head_dim = d;
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kRange;
  spec.count = n;
  return PlanRopeCache(
      {.config = config, .layout = layout, .positions = spec, .output_dtype = DType::kFloat32});
}

void BM_RopeCache(benchmark::State& state) {
  const int64_t n = state.range(0), d = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  auto plan = RangeTablePlan(n, d, RopeCacheLayout::kNeox);
  if (!Ready(state, plan)) return;
  auto in = PrepareRopeRun(plan->positions, plan->config, /*cache=*/nullptr);
  if (!Ready(state, in)) return;
  const RopeFrequencies& f = *in->info.frequencies;
  const ResolvedPositions* rp = &in->positions;
  Buffer cos(plan->cos), sin(plan->sin);
  const Backend& backend = Cpu(threads);
  TimeRuns(state, [&] { return backend.RopeCache(*plan, f, *rp, cos.view, sin.view); });
  state.SetItemsProcessed(state.iterations() * 2 * n * d);
  state.SetBytesProcessed(state.iterations() * 2 * n * d * 4);
}
BENCHMARK(BM_RopeCache)
    ->ArgNames({"n", "d", "threads"})
    ->ArgsProduct({{4096, 32768, 131072}, {128}, {1, 2}})
    ->UseRealTime();

// The whole RopeCache op (RunRopeCache: positions, frequencies, the backend) in the COMPACT
// layout (cos and sin [n, d/2]) and in the one-table layouts built from it chunk by chunk
// (FUSED_COS_SIN [n, d], COMPLEX [n, d/2, 2]): the same n * d FLOAT32 values each, so the
// difference is the chunked assembly's cost (#21). Layout 0 COMPACT, 3 FUSED_COS_SIN, 4 COMPLEX.
void BM_RopeCacheLayout(benchmark::State& state) {
  const int64_t n = state.range(0), d = state.range(1);
  const auto layout = static_cast<RopeCacheLayout>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  auto plan = RangeTablePlan(n, d, layout);
  if (!Ready(state, plan)) return;
  Buffer cos(plan->cos), sin(plan->sin);
  const Backend& backend = Cpu(threads);
  TimeRuns(state, [&]() -> absl::Status {
    return RunRopeCache(backend, *plan, /*cache=*/nullptr, cos.view, sin.view).status();
  });
  state.SetItemsProcessed(state.iterations() * n * d);
  state.SetBytesProcessed(state.iterations() * n * d * 4);
}
BENCHMARK(BM_RopeCacheLayout)
    ->ArgNames({"n", "d", "layout", "threads"})
    ->ArgsProduct({{131072}, {128}, {0, 3, 4}, {1, 2}})
    ->UseRealTime();

// The INTERLEAVED layout (sin, cos of each frequency side by side); BM_SinusoidalConcat: CONCAT
// (the sines, then the cosines).
void SinusoidalTable(benchmark::State& state, SinusoidalLayout layout) {
  const int64_t n = state.range(0), d = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  SinusoidalParams params{d};
  params.layout = layout;
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::kRange;
  spec.count = n;
  auto plan =
      PlanSinusoidal({.params = params, .positions = spec, .output_dtype = DType::kFloat32});
  if (!Ready(state, plan)) return;
  auto rp = ResolvePositions(plan->positions);
  if (!Ready(state, rp)) return;
  Buffer out(plan->table);
  const Backend& backend = Cpu(threads);
  TimeRuns(state, [&] { return backend.Sinusoidal(*plan, *rp, out.view); });
  state.SetItemsProcessed(state.iterations() * n * d);
  state.SetBytesProcessed(state.iterations() * n * d * 4);
}
void BM_Sinusoidal(benchmark::State& state) {
  SinusoidalTable(state, SinusoidalLayout::kInterleaved);
}
void BM_SinusoidalConcat(benchmark::State& state) {
  SinusoidalTable(state, SinusoidalLayout::kConcat);
}
BENCHMARK(BM_Sinusoidal)
    ->ArgNames({"n", "d", "threads"})
    ->ArgsProduct({{8192}, {1024}, {1, 2}})
    ->UseRealTime();
BENCHMARK(BM_SinusoidalConcat)
    ->ArgNames({"n", "d", "threads"})
    ->ArgsProduct({{8192}, {1024}, {1, 2}})
    ->UseRealTime();

// ---- biases ------------------------------------------------------------------------------------

// Args: heads, q_len, k_len, mode (0 CAUSAL, 2 BLOOM; FULL form, FLOAT32), threads.
void BM_AlibiBias(benchmark::State& state) {
  AlibiBiasParams p;
  p.num_heads = state.range(0);
  p.q_len = state.range(1);
  p.k_len = state.range(2);
  p.mode = static_cast<AlibiMode>(state.range(3));
  const int threads = static_cast<int>(state.range(4));
  auto plan = PlanAlibiBias({.params = p, .output_dtype = DType::kFloat32});
  if (!Ready(state, plan)) return;
  auto slopes = AlibiSlopes(plan->params.num_heads, plan->params.max_bias);
  if (!Ready(state, slopes)) return;
  Buffer out(plan->bias);
  const Backend& backend = Cpu(threads);
  TimeRuns(state, [&] { return backend.AlibiBias(*plan, *slopes, out.view); });
  state.SetBytesProcessed(state.iterations() * p.num_heads * p.q_len * p.k_len * 4);
}
BENCHMARK(BM_AlibiBias)
    ->ArgNames({"h", "q", "k", "mode", "threads"})
    ->ArgsProduct({{32}, {2048}, {2048}, {0, 2}, {1, 2}})
    ->UseRealTime();

void BM_RelativeBias(benchmark::State& state) {
  std::vector<float> table(32 * state.range(0));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.01f;
  RelativeBiasParams p;
  p.q_len = state.range(1);
  p.k_len = state.range(2);
  p.table = {DType::kFloat32, {32, state.range(0)}, table.data()};
  const int threads = static_cast<int>(state.range(3));
  auto plan = PlanRelativeBias({.params = p, .output_dtype = DType::kFloat32});
  if (!Ready(state, plan)) return;
  Buffer out(plan->bias);
  const Backend& backend = Cpu(threads);
  TimeRuns(state, [&] { return backend.RelativeBias(*plan, out.view); });
  state.SetBytesProcessed(state.iterations() * state.range(0) * p.q_len * p.k_len * 4);
}
BENCHMARK(BM_RelativeBias)
    ->ArgNames({"h", "q", "k", "threads"})
    ->ArgsProduct({{32}, {2048}, {2048}, {1, 2}})
    ->UseRealTime();

}  // namespace
}  // namespace posenc::kernels

BENCHMARK_MAIN();
