// `posenc bench`: a closed-loop load generator built on the public client library.
//
// --concurrency N threads each make one synchronous call after another (the client library has
// no asynchronous calls; the threads share its one channel) for --duration D or until --count N
// calls are done, after an unmeasured --warmup. One op, or `mix`: round-robin over all eight, so
// a long run touches every RPC (the soak test, tests/soak/soak.sh). The summary: calls, errors
// by status code, QPS, latency percentiles of the successful calls, and MB/s of tensor payload
// (request + response). Any error makes the exit code 1, after the summary; Ctrl-C stops the run
// early and still prints it (exit code 130 when nothing failed).
//
// Thread-safety: RunBench is called once, from the CLI's main thread; it starts and joins its
// own worker threads.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/latency_histogram.h"
#include "client/cli/rope_config.h"
#include "client/cli/wire_names.h"
#include "kernels/common/status.h"

namespace posenc::cli {
namespace {

const FlagGroup& BenchFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"op", FlagType::kChoice, "", "the RPC to call (default mix: round-robin over all)",
       "sinusoidal|add_position_encoding|rope_cache|apply_rope|alibi_slopes|alibi_bias|"
       "relative_bias|relative_embedding|mix"},
      {"concurrency", FlagType::kInt, "N", "calls in flight: N threads (default 8, at most 1024)"},
      {"duration", FlagType::kString, "D", "measure for D: 30s, 1m30s, 2h (default 10s)"},
      {"count", FlagType::kInt, "N", "measure N calls instead of a duration"},
      {"warmup", FlagType::kString, "D", "call for D first, unmeasured (default 0s)"},
      {"interval", FlagType::kString, "D",
       "also report calls, QPS and p50/p99 of every D of the measured run"},
      {"json", FlagType::kSwitch, "", "print the summary as one JSON object (as --format json)"},
      {"tokens", FlagType::kInt, "N", "positions / sequence length / keys (default 128)"},
      {"q-len", FlagType::kInt, "N",
       "queries of the bias ops (default --tokens; 1: a decode step)"},
      {"batch", FlagType::kInt, "B", "batch of add_position_encoding and apply_rope (default 1)"},
      {"heads", FlagType::kInt, "N", "heads of q and of the biases (default 8)"},
      {"kv-heads", FlagType::kInt, "N", "heads of k in apply_rope (default --heads; 0: no k)"},
      {"max-relative", FlagType::kInt, "K", "relative_embedding clip distance (default 16)"},
      FloatDTypeFlag("dtype of inputs and outputs (default float32)"),
  };
  return *kFlags;
}

constexpr char kBenchDetails[] =
    "example: posenc bench --op apply_rope --concurrency 16 --duration 30s --tokens 4096\n"
    "         posenc bench --op mix --count 10000 --warmup 2s --json\n"
    "N threads share one channel, each making one synchronous call after another (a closed\n"
    "loop). Calls that start during --warmup are not measured. Latency percentiles are of the\n"
    "successful calls (a log-scale histogram, within 2.2 %); MB/s counts the tensor bytes of\n"
    "their requests and responses. --head-dim (default 128) is also the width of the\n"
    "sinusoidal, add_position_encoding and relative_embedding tables; the RoPE flags apply to\n"
    "rope_cache and apply_rope. A live progress line goes to stderr when it is a terminal.\n"
    "Exit code 1 when any call failed (after the summary), 130 when interrupted by Ctrl-C.";

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxConcurrency = 1024;
constexpr int64_t kMaxDim = int64_t{1} << 20;
// Generated inputs are held once (as doubles while being made); the server's own message limit
// (256 MiB by default) is lower anyway.
constexpr int64_t kMaxInputElements = int64_t{1} << 26;
constexpr absl::Duration kMaxDuration = absl::Hours(24 * 7);
constexpr auto kProgressPeriod = std::chrono::milliseconds(500);
// Interval reports kept for the JSON summary (about 100 bytes each); later ones are counted.
constexpr size_t kMaxIntervalReports = 100'000;

// Set by Ctrl-C: the workers stop after their current call and the summary is printed.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "stored from a signal handler");
void OnInterrupt(int) { g_interrupted.store(true, std::memory_order_relaxed); }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
// `v` to `digits` decimals; dividing (not multiplying by 0.1) gives the double nearest the
// decimal, which JSON then prints short.
double Round(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

// ---------------------------------------------------------------------------------------------
// Flags.
// ---------------------------------------------------------------------------------------------
struct BenchConfig {
  std::string op;  // one op name, or "mix"
  int64_t concurrency = 8;
  std::optional<int64_t> count;  // measured calls; nullopt: run for `duration`
  Clock::duration duration{};
  Clock::duration warmup{};
  Clock::duration interval{};  // zero: no per-interval reports
  bool json = false;
  bool interval_lines = false;  // print each interval as it closes (table output)
};

// The shapes and configuration of the requests.
struct BenchShape {
  int64_t tokens = 0;
  int64_t q_len = 0;
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_relative = 0;
  DType dtype = DType::kFloat32;
  client::RopeConfig rope;
};

absl::StatusOr<int64_t> IntInRange(const ParsedFlags& flags, std::string_view name,
                                   int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = flags.Int(name).value_or(fallback);
  if (v < lo || v > hi) {
    return UsageError(absl::StrCat("--", AbslView(name), " expects ", lo, " .. ", hi, ", got ", v));
  }
  return v;
}

absl::StatusOr<Clock::duration> DurationFlag(const ParsedFlags& flags, std::string_view name,
                                             absl::Duration fallback, bool allow_zero) {
  absl::Duration d = fallback;
  const std::optional<std::string> text = flags.String(name);
  const bool parsed = !text.has_value() || absl::ParseDuration(*text, &d);
  if (!parsed || d < absl::ZeroDuration() || (d == absl::ZeroDuration() && !allow_zero) ||
      d > kMaxDuration) {
    return UsageError(absl::StrCat("--", AbslView(name), " expects a duration such as 30s, 1m30s ",
                                   "or 500ms (", allow_zero ? "0" : "above 0", " .. 168h), got '",
                                   text.value_or(""), "'"));
  }
  return absl::ToChronoNanoseconds(d);
}

absl::StatusOr<BenchConfig> ConfigFromFlags(const ParsedFlags& flags) {
  BenchConfig c;
  c.op = flags.String("op").value_or("mix");
  POSENC_ASSIGN_OR_RETURN(c.concurrency, IntInRange(flags, "concurrency", 8, 1, kMaxConcurrency));
  if (flags.Has("duration") && flags.Has("count")) {
    return UsageError("give --duration or --count, not both");
  }
  if (flags.Has("count")) {
    POSENC_ASSIGN_OR_RETURN(
        c.count, IntInRange(flags, "count", 0, 1, std::numeric_limits<int64_t>::max() / 2));
  }
  POSENC_ASSIGN_OR_RETURN(c.duration, DurationFlag(flags, "duration", absl::Seconds(10), false));
  POSENC_ASSIGN_OR_RETURN(c.warmup, DurationFlag(flags, "warmup", absl::ZeroDuration(), true));
  POSENC_ASSIGN_OR_RETURN(c.interval, DurationFlag(flags, "interval", absl::ZeroDuration(), true));
  const std::string format = flags.String("format").value_or("table");
  c.json = flags.Switch("json") || format == "json";
  c.interval_lines = !c.json && format != "none" && c.interval > Clock::duration::zero();
  return c;
}

absl::StatusOr<BenchShape> ShapeFromFlags(const ParsedFlags& flags) {
  BenchShape s;
  POSENC_ASSIGN_OR_RETURN(s.tokens, IntInRange(flags, "tokens", 128, 1, kMaxDim));
  POSENC_ASSIGN_OR_RETURN(s.q_len, IntInRange(flags, "q-len", s.tokens, 1, kMaxDim));
  POSENC_ASSIGN_OR_RETURN(s.batch, IntInRange(flags, "batch", 1, 1, kMaxDim));
  POSENC_ASSIGN_OR_RETURN(s.heads, IntInRange(flags, "heads", 8, 1, kMaxDim));
  POSENC_ASSIGN_OR_RETURN(s.kv_heads, IntInRange(flags, "kv-heads", s.heads, 0, kMaxDim));
  POSENC_ASSIGN_OR_RETURN(s.head_dim, IntInRange(flags, "head-dim", 128, 1, kMaxDim));
  POSENC_ASSIGN_OR_RETURN(s.max_relative, IntInRange(flags, "max-relative", 16, 0, kMaxDim));
  // The largest generated inputs: q/k of apply_rope, [B, T, H, D] (x of add is smaller), and
  // the relative_embedding table, [2K+1, D]. In double: the product may overflow int64.
  const double q_elements = static_cast<double>(s.batch) * static_cast<double>(s.tokens) *
                            static_cast<double>(std::max(s.heads, s.kv_heads)) *
                            static_cast<double>(s.head_dim);
  const double table_elements =
      (2.0 * static_cast<double>(s.max_relative) + 1) * static_cast<double>(s.head_dim);
  if (std::max(q_elements, table_elements) > static_cast<double>(kMaxInputElements)) {
    return UsageError(absl::StrFormat(
        "inputs of %.4g (q: --batch x --tokens x --heads x --head-dim) or %.4g (table: "
        "(2 --max-relative + 1) x --head-dim) elements, over the bench's limit of %d",
        q_elements, table_elements, kMaxInputElements));
  }
  s.dtype = client::ParseDType(flags.String("dtype").value_or("float32")).value_or(DType::kFloat32);
  POSENC_ASSIGN_OR_RETURN(s.rope, ReadRopeConfigFlags(flags));
  // With a config.json the head dim comes from it (the server refuses both); --head-dim then
  // only shapes q and k.
  s.rope.head_dim = s.rope.hf_config_json.empty() ? s.head_dim : 0;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Workloads: one prepared request per op.
// ---------------------------------------------------------------------------------------------
struct Workload {
  int64_t request_bytes = 0;  // tensor bytes sent per call
  // Makes one call; the tensor bytes of the response.
  std::function<absl::StatusOr<int64_t>(const client::Client&)> call;
};

int64_t Bytes(const Tensor& t) { return static_cast<int64_t>(t.data.size()); }
int64_t Bytes(const client::RopeCacheResult& r) { return Bytes(r.cos) + Bytes(r.sin); }
int64_t Bytes(const client::ApplyRopeResult& r) {
  return Bytes(r.q) + (r.k.has_value() ? Bytes(*r.k) : 0);
}
int64_t Bytes(const client::AlibiBiasResult& r) { return Bytes(r.bias) + Bytes(r.slopes); }

// A workload that calls `method` with `o`; the tensor bytes of its result.
template <typename Options, typename Result>
Workload MakeWorkload(int64_t request_bytes, Options o,
                      absl::StatusOr<Result> (client::Client::*method)(const Options&,
                                                                       const client::CallOptions&)
                          const) {
  return Workload{request_bytes,
                  [o = std::move(o), method](const client::Client& c) -> absl::StatusOr<int64_t> {
                    POSENC_ASSIGN_OR_RETURN(Result r, (c.*method)(o, client::CallOptions{}));
                    return Bytes(r);
                  }};
}

// Uniform in [-1, 1], the same for the same seed.
absl::StatusOr<Tensor> RandomTensor(std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> values(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (double& v : values) v = uniform(rng);
  return Tensor::FromDoubles(values, std::move(shape), dtype);
}

absl::StatusOr<Workload> SinusoidalWorkload(const BenchShape& s) {
  client::SinusoidalOptions o;
  o.positions = client::Positions::Range(0, s.tokens);
  o.params.dim = s.head_dim;
  o.output_dtype = s.dtype;
  return MakeWorkload(0, std::move(o), &client::Client::Sinusoidal);
}

absl::StatusOr<Workload> AddWorkload(const BenchShape& s) {
  client::AddPositionEncodingOptions o;
  POSENC_ASSIGN_OR_RETURN(o.x, RandomTensor({s.batch, s.tokens, s.head_dim}, s.dtype, 1));
  o.sinusoidal = client::SinusoidalParams{};
  const int64_t request_bytes = Bytes(o.x);
  return MakeWorkload(request_bytes, std::move(o), &client::Client::AddPositionEncoding);
}

absl::StatusOr<Workload> RopeCacheWorkload(const BenchShape& s) {
  client::RopeCacheOptions o;
  o.positions = client::Positions::Range(0, s.tokens);
  o.config = s.rope;
  o.output_dtype = s.dtype;
  return MakeWorkload(0, std::move(o), &client::Client::RopeCache);
}

absl::StatusOr<Workload> ApplyRopeWorkload(const BenchShape& s) {
  client::ApplyRopeOptions o;
  POSENC_ASSIGN_OR_RETURN(o.q, RandomTensor({s.batch, s.tokens, s.heads, s.head_dim}, s.dtype, 2));
  if (s.kv_heads > 0) {
    POSENC_ASSIGN_OR_RETURN(o.k,
                            RandomTensor({s.batch, s.tokens, s.kv_heads, s.head_dim}, s.dtype, 3));
  }
  o.config = s.rope;
  const int64_t request_bytes = Bytes(o.q) + (o.k.has_value() ? Bytes(*o.k) : 0);
  return MakeWorkload(request_bytes, std::move(o), &client::Client::ApplyRope);
}

absl::StatusOr<Workload> AlibiSlopesWorkload(const BenchShape& s) {
  client::AlibiSlopesOptions o;
  o.num_heads = s.heads;
  o.output_dtype = s.dtype;
  return MakeWorkload(0, o, &client::Client::AlibiSlopes);
}

// Options of the [q, k] ops: q_len queries against `tokens` keys, in the output dtype.
template <typename Options>
Options BiasOptions(const BenchShape& s) {
  Options o;
  o.q_len = s.q_len;
  o.k_len = s.tokens;
  o.output_dtype = s.dtype;
  return o;
}

absl::StatusOr<Workload> AlibiBiasWorkload(const BenchShape& s) {
  auto o = BiasOptions<client::AlibiBiasOptions>(s);
  o.num_heads = s.heads;
  return MakeWorkload(0, std::move(o), &client::Client::AlibiBias);
}

absl::StatusOr<Workload> RelativeBiasWorkload(const BenchShape& s) {
  auto o = BiasOptions<client::RelativeBiasOptions>(s);
  // The default 32 buckets.
  POSENC_ASSIGN_OR_RETURN(o.table_inline, RandomTensor({32, s.heads}, DType::kFloat32, 4));
  const int64_t request_bytes = Bytes(*o.table_inline);
  return MakeWorkload(request_bytes, std::move(o), &client::Client::RelativeBias);
}

absl::StatusOr<Workload> RelativeEmbeddingWorkload(const BenchShape& s) {
  auto o = BiasOptions<client::RelativeEmbeddingOptions>(s);
  o.max_relative = s.max_relative;
  POSENC_ASSIGN_OR_RETURN(o.table_inline,
                          RandomTensor({2 * s.max_relative + 1, s.head_dim}, DType::kFloat32, 5));
  const int64_t request_bytes = Bytes(*o.table_inline);
  return MakeWorkload(request_bytes, std::move(o), &client::Client::RelativeEmbedding);
}

// The order of `mix`.
constexpr std::pair<std::string_view, absl::StatusOr<Workload> (*)(const BenchShape&)>
    kWorkloads[] = {
        {"sinusoidal", &SinusoidalWorkload},
        {"add_position_encoding", &AddWorkload},
        {"rope_cache", &RopeCacheWorkload},
        {"apply_rope", &ApplyRopeWorkload},
        {"alibi_slopes", &AlibiSlopesWorkload},
        {"alibi_bias", &AlibiBiasWorkload},
        {"relative_bias", &RelativeBiasWorkload},
        {"relative_embedding", &RelativeEmbeddingWorkload},
};

absl::StatusOr<std::vector<Workload>> MakeWorkloads(std::string_view op, const BenchShape& shape) {
  std::vector<Workload> workloads;
  for (const auto& [name, make] : kWorkloads) {
    if (op != "mix" && op != name) continue;
    POSENC_ASSIGN_OR_RETURN(Workload w, make(shape));
    workloads.push_back(std::move(w));
  }
  return workloads;
}

// ---------------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------------

// What was measured over a stretch of the run (an interval, or all of it).
struct Stats {
  LatencyHistogram latency;  // successful calls
  int64_t calls = 0;
  int64_t errors = 0;
  int64_t payload_bytes = 0;  // request + response tensor bytes of the successful calls
  std::map<std::string, int64_t> errors_by_code;
  std::string first_error;

  // `later` covers the time after this one's.
  void Merge(const Stats& later) {
    latency.Merge(later.latency);
    calls += later.calls;
    errors += later.errors;
    payload_bytes += later.payload_bytes;
    for (const auto& [code, n] : later.errors_by_code) errors_by_code[code] += n;
    if (first_error.empty()) first_error = later.first_error;
  }
};

double Ms(double nanos) { return Round(nanos / 1e6, 3); }

Json IntervalJson(const Stats& s, double start_s, double end_s) {
  const double seconds = std::max(end_s - start_s, 1e-9);
  return {{"start_s", Round(start_s, 3)},
          {"end_s", Round(end_s, 3)},
          {"calls", s.calls},
          {"errors", s.errors},
          {"qps", Round(static_cast<double>(s.calls) / seconds, 1)},
          {"p50_ms", Ms(s.latency.Quantile(0.5))},
          {"p99_ms", Ms(s.latency.Quantile(0.99))},
          {"max_ms", Ms(static_cast<double>(s.latency.max_ns()))}};
}

class LoadRun {
 public:
  LoadRun(const BenchConfig& config, const std::vector<Workload>& workloads,
          const client::Client& client)
      : config_(config),
        workloads_(workloads),
        client_(client),
        progress_(::isatty(STDERR_FILENO) == 1) {}

  // Runs until the duration or count is done, or Ctrl-C; returns the summary.
  Json Run() {
    start_ = Clock::now();
    measure_start_ = start_ + config_.warmup;
    end_ = measure_start_ + config_.duration;
    interval_start_ = measure_start_;
    last_tick_ = start_;
    running_.store(static_cast<int>(config_.concurrency));
    std::vector<std::thread> workers;
    for (int64_t i = 0; i < config_.concurrency; ++i) workers.emplace_back([this] { Worker(); });
    Monitor();
    for (std::thread& t : workers) t.join();
    CloseInterval(Clock::now());
    return Summary();
  }

 private:
  void Worker() {
    bool measured = false;
    while (NextCall(&measured)) {
      const Workload& w =
          workloads_[next_op_.fetch_add(1, std::memory_order_relaxed) % workloads_.size()];
      const Clock::time_point t0 = Clock::now();
      const absl::StatusOr<int64_t> response = w.call(client_);
      Record(w, Clock::now() - t0, response, measured);
    }
    if (running_.fetch_sub(1) == 1) done_.Notify();
  }

  // Whether to make another call; *measured: whether it counts (it starts after the warm-up).
  bool NextCall(bool* measured) {
    if (g_interrupted.load(std::memory_order_relaxed)) return false;
    const Clock::time_point now = Clock::now();
    *measured = now >= measure_start_;
    if (!*measured) return true;
    if (config_.count.has_value()) {
      return tickets_.fetch_add(1, std::memory_order_relaxed) < *config_.count;
    }
    return now < end_;
  }

  void Record(const Workload& w, Clock::duration latency, const absl::StatusOr<int64_t>& response,
              bool measured) {
    calls_.fetch_add(1, std::memory_order_relaxed);
    if (!response.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
    if (!measured) return;
    std::lock_guard<std::mutex> lock(mu_);
    ++current_.calls;
    if (response.ok()) {
      current_.latency.Record(std::chrono::nanoseconds(latency).count());
      current_.payload_bytes += w.request_bytes + *response;
      return;
    }
    ++current_.errors;
    const std::string code = absl::StatusCodeToString(response.status().code());
    ++current_.errors_by_code[code];
    if (current_.first_error.empty()) {
      current_.first_error = absl::StrCat(code, ": ", response.status().message());
    }
  }

  // The main thread until the workers are done: the progress line and the interval reports.
  void Monitor() {
    Clock::time_point next_tick = start_ + kProgressPeriod;
    Clock::time_point next_boundary = NextBoundary(measure_start_);
    while (!done_.HasBeenNotified()) {
      const Clock::time_point wake = std::min(next_tick, next_boundary);
      if (done_.WaitForNotificationWithTimeout(absl::FromChrono(wake - Clock::now()))) break;
      const Clock::time_point now = Clock::now();
      if (now >= next_boundary) {
        CloseInterval(now);
        next_boundary = NextBoundary(next_boundary);
      }
      if (now >= next_tick) {
        PrintProgress(now);
        next_tick += kProgressPeriod;
      }
    }
    if (progress_) std::cerr << "\r\33[K" << std::flush;
  }

  // The interval boundary after `t`; none when intervals are off or when it would fall at or
  // after the end of a timed run (the last interval closes when the run does).
  Clock::time_point NextBoundary(Clock::time_point t) const {
    const Clock::time_point next = t + config_.interval;
    const bool past_end = !config_.count.has_value() && next >= end_;
    if (config_.interval == Clock::duration::zero() || past_end) return Clock::time_point::max();
    return next;
  }

  void PrintProgress(Clock::time_point now) {
    const int64_t calls = calls_.load(std::memory_order_relaxed);
    const double qps = static_cast<double>(calls - last_calls_) / Seconds(now - last_tick_);
    last_calls_ = calls;
    last_tick_ = now;
    if (!progress_) return;
    std::cerr << absl::StrFormat("\r%s%.1f s  calls %d  errors %d  qps %.1f\33[K",
                                 now < measure_start_ ? "warm-up " : "", Seconds(now - start_),
                                 calls, errors_.load(std::memory_order_relaxed), qps)
              << std::flush;
  }

  // Moves the open interval's figures into the total (and its report), opening the next one.
  void CloseInterval(Clock::time_point now) {
    Stats closed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::swap(closed, current_);
    }
    measured_end_ = std::max(now, measure_start_);
    if (config_.interval > Clock::duration::zero()) {
      ReportInterval(closed, Seconds(interval_start_ - measure_start_),
                     Seconds(measured_end_ - measure_start_));
    }
    interval_start_ = measured_end_;
    total_.Merge(closed);
  }

  void ReportInterval(const Stats& s, double start_s, double end_s) {
    Json report = IntervalJson(s, start_s, end_s);
    if (config_.interval_lines) {
      if (progress_) std::cerr << "\r\33[K" << std::flush;
      std::cout << absl::StrFormat(
                       "interval %.1f-%.1f s: calls %d  errors %d  qps %.1f  p50 %.3f ms  p99 "
                       "%.3f ms  max %.3f ms\n",
                       start_s, end_s, s.calls, s.errors, report["qps"].get<double>(),
                       report["p50_ms"].get<double>(), report["p99_ms"].get<double>(),
                       report["max_ms"].get<double>())
                << std::flush;
    }
    if (intervals_.size() < kMaxIntervalReports) {
      intervals_.push_back(std::move(report));
    } else {
      ++intervals_omitted_;
    }
  }

  Json Summary() const {
    const double elapsed = Seconds(measured_end_ - measure_start_);
    const double seconds = std::max(elapsed, 1e-9);
    Json j;
    j["op"] = config_.op;
    j["concurrency"] = config_.concurrency;
    j["warmup_s"] = Round(Seconds(config_.warmup), 3);
    j["elapsed_s"] = Round(elapsed, 3);
    j["calls"] = total_.calls;
    j["errors"] = total_.errors;
    j["errors_by_code"] = Json::object();
    for (const auto& [code, n] : total_.errors_by_code) j["errors_by_code"][code] = n;
    if (!total_.first_error.empty()) j["first_error"] = total_.first_error;
    j["qps"] = Round(static_cast<double>(total_.calls) / seconds, 1);
    j["latency_ms"] = {{"p50", Ms(total_.latency.Quantile(0.5))},
                       {"p90", Ms(total_.latency.Quantile(0.9))},
                       {"p99", Ms(total_.latency.Quantile(0.99))},
                       {"max", Ms(static_cast<double>(total_.latency.max_ns()))},
                       {"mean", Ms(total_.latency.mean_ns())}};
    j["mb_per_s"] = Round(static_cast<double>(total_.payload_bytes) / seconds / 1e6, 3);
    j["payload_bytes"] = total_.payload_bytes;
    if (g_interrupted.load()) j["interrupted"] = true;
    // Table output printed the intervals as they closed.
    if (config_.json && config_.interval > Clock::duration::zero()) {
      j["intervals"] = intervals_;
      if (intervals_omitted_ > 0) j["intervals_omitted"] = intervals_omitted_;
    }
    return j;
  }

  const BenchConfig& config_;
  const std::vector<Workload>& workloads_;
  const client::Client& client_;
  const bool progress_;  // stderr is a terminal

  Clock::time_point start_;
  Clock::time_point measure_start_;  // the end of the warm-up
  Clock::time_point end_;            // timed runs: no call starts after it

  // Shared by the workers.
  std::atomic<int64_t> tickets_{0};  // --count: measured calls started
  std::atomic<uint64_t> next_op_{0};
  std::atomic<int64_t> calls_{0};   // every call, warm-up included (the progress line)
  std::atomic<int64_t> errors_{0};  // likewise
  std::atomic<int> running_{0};
  absl::Notification done_;
  std::mutex mu_;
  Stats current_;  // guarded by mu_: the open interval

  // The main thread's.
  Stats total_;
  Clock::time_point interval_start_;
  Clock::time_point measured_end_;
  Clock::time_point last_tick_;
  int64_t last_calls_ = 0;
  std::vector<Json> intervals_;
  int64_t intervals_omitted_ = 0;
};

absl::StatusOr<CommandOutput> RunBench(const ParsedFlags& flags, const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(const BenchConfig config, ConfigFromFlags(flags));
  POSENC_ASSIGN_OR_RETURN(const BenchShape shape, ShapeFromFlags(flags));
  POSENC_ASSIGN_OR_RETURN(const std::vector<Workload> workloads, MakeWorkloads(config.op, shape));
  g_interrupted.store(false);
  void (*const previous)(int) = std::signal(SIGINT, &OnInterrupt);
  LoadRun run(config, workloads, client);
  Json summary = run.Run();
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);

  CommandOutput out;
  const int64_t errors = summary["errors"].get<int64_t>();
  out.exit_code = errors > 0 ? 1 : g_interrupted.load() ? 130 : 0;
  out.extras = std::move(summary);
  if (config.json) out.format = OutputFormat::kJson;
  return out;
}

}  // namespace

Command BenchCommand() {
  return {"bench",
          "load generator: calls in flight, QPS, latency percentiles, errors, MB/s",
          kBenchDetails,
          {&BenchFlags(), &RopeConfigFlags()},
          &RunBench};
}

}  // namespace posenc::cli
