// data_path_bench: the C++ half of the data-path benchmark (issue #20 item 7). Against a running
// posenc-server (--target), side by side in one process run:
//   kernel      ApplyRope [1,4096,32,128] FLOAT32 q+k rotated in place by the CPU backend in this
//               process (as posenc_bench's BM_ApplyRope), --threads threads
//   kernel_shm  the same kernel on the shared-memory mapping the calls below use (a diagnostic:
//               the memory, not the path)
//   shm         the same ApplyRope end to end through the client, q and k in a registered
//               SharedMemoryRegion (rotated in place by the server)
//   wire        ApplyRope with q and k in the message (inline), q+k of each --sizes_mib size
//   stream      one stream socket of the target's kind (TCP on loopback, or a Unix socket for a
//               unix: target) moving the same bytes each way (send N, read N back)
//   echo        a bare gRPC echo (callback generic service in this process, default settings
//               but the message-size limits) of the same bytes, over the same kind of socket
//   tiny        ApplyRope of q and k [1,1,8,128] FLOAT32: latency p50/p99, inline and in shared
//               memory (tiny_shm)
// Paths compared with each other are timed interleaved (round r runs each once, the order
// rotating), each round a batch of calls after an untimed warm-up call; the figure is the median
// over --runs rounds of the seconds per call. Bytes: ApplyRope counts q+k read and written (as
// posenc_bench: 8 bytes per FLOAT32 element) for kernel/shm; the wire paths count the bytes each
// way (q+k, the echoed payload).
//
//   data_path_bench --target ADDRESS [--threads 1] [--runs 7] [--sizes_mib 2,8,32,128,256]
//                   [--tiny_calls 400] [--parts kernel,wire,tiny] [--retain_free_bytes N]
// --retain_free_bytes: the client process keeps up to N bytes of freed memory for reuse
// (posenc::client::RetainFreedMemory, as wire_bench; default 1 GiB, 0 = the allocator's defaults).
//
// One JSON object per line on stdout (tests/bench/data_path.py reads them).
#include <fcntl.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/backend.h"
#include "kernels/common/positions.h"
#include "kernels/ops.h"
#include "posenc/client.h"
#include "posenc/shared_memory.h"
#include "tests/bench/grpc_echo.h"

namespace posenc::bench {
namespace {

using Clock = std::chrono::steady_clock;
using client::DType;

constexpr int64_t kMiB = int64_t{1} << 20;
const std::vector<int64_t> kRopeShape = {1, 4096, 32, 128};  // q and k each: 64 MiB FLOAT32

struct Flags {
  std::string target;
  int threads = 1;
  int runs = 7;
  std::vector<int64_t> sizes_mib = {2, 8, 32, 128, 256};
  int tiny_calls = 400;
  std::string parts = "kernel,wire,tiny";
  int64_t retain_free_bytes = int64_t{1} << 30;
};

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const auto i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

void Fail(const std::string& what) {
  std::fprintf(stderr, "data_path_bench: %s\n", what.c_str());
  std::exit(1);
}

// One JSON line: the path, its size and counted bytes, the median seconds per call.
void Emit(const std::string& path, int threads, int64_t size, double counted, double seconds,
          int runs) {
  std::printf(
      "{\"path\": \"%s\", \"lang\": \"c++\", \"threads\": %d, \"size\": %lld, "
      "\"counted_bytes\": %.0f, \"median_s\": %.6g, \"gbps\": %.4g, \"runs\": %d}\n",
      path.c_str(), threads, static_cast<long long>(size), counted, seconds,
      counted / seconds / 1e9, runs);
  std::fflush(stdout);
}

// A path to time: one call (false on failure).
struct Path {
  std::string name;
  std::function<bool()> call;
};

// Every path once untimed, then `runs` interleaved rounds of a batch each (sized to ~0.25 s from
// the warm-up call); the median seconds per call of each path.
std::vector<double> Interleaved(const std::vector<Path>& paths, int runs) {
  std::vector<int> batch;
  for (const Path& p : paths) {
    const auto start = Clock::now();
    if (!p.call()) Fail(p.name + ": the warm-up call failed");
    batch.push_back(std::clamp(static_cast<int>(0.25 / std::max(Seconds(start), 1e-6)), 2, 200));
  }
  std::vector<std::vector<double>> per_call(paths.size());
  for (int r = 0; r < runs; ++r) {
    for (size_t j = 0; j < paths.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(r)) % paths.size();
      const auto start = Clock::now();
      for (int n = 0; n < batch[i]; ++n) {
        if (!paths[i].call()) Fail(paths[i].name + ": a call failed");
      }
      per_call[i].push_back(Seconds(start) / batch[i]);
    }
  }
  std::vector<double> out;
  for (auto& v : per_call) out.push_back(Median(v));
  return out;
}

// ---- in process ---------------------------------------------------------------------------

// The CPU backend's ApplyRope on q and k at `q`, `k` (FLOAT32 kRopeShape), planned once.
class Kernel {
 public:
  Kernel(int threads, void* q, void* k) {
    auto backend = kernels::MakeCpuBackend({threads, ""});
    if (!backend.ok()) Fail(backend.status().ToString());
    backend_ = *std::move(backend);
    const kernels::Shape shape(kRopeShape.begin(), kRopeShape.end());
    q_ = {kernels::DType::kFloat32, shape, q};
    k_ = {kernels::DType::kFloat32, shape, k};
    auto plan = kernels::PlanApplyRope(
        {.config = {}, .layout = kernels::TensorLayout::kBSHD, .q = q_, .k = k_, .positions = {}});
    if (!plan.ok()) Fail(plan.status().ToString());
    plan_.emplace(*std::move(plan));
    auto in = kernels::PrepareRopeRun(plan_->positions, plan_->config, /*cache=*/nullptr);
    if (!in.ok()) Fail(in.status().ToString());
    in_.emplace(*std::move(in));
  }
  bool Run() const {
    return backend_->ApplyRope(*plan_, *in_->info.frequencies, in_->positions, q_, k_).ok();
  }

 private:
  std::unique_ptr<kernels::Backend> backend_;
  kernels::TensorView q_, k_;
  std::optional<kernels::ApplyRopePlan> plan_;
  std::optional<kernels::RopeRunInputs> in_;
};

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void FillRandom(float* data, int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t i = 0; i < n; ++i) data[i] = dist(gen);
}

client::Tensor RandomTensor(std::vector<int64_t> shape, uint32_t seed) {
  client::Tensor t{.dtype = DType::kFloat32, .shape = std::move(shape)};
  t.data.resize(static_cast<size_t>(Elements(t.shape)) * sizeof(float));
  FillRandom(reinterpret_cast<float*>(t.data.data()), Elements(t.shape), seed);
  return t;
}

// ---- kernel vs shared memory ----------------------------------------------------------------

void KernelAndSharedMemory(const Flags& flags, const client::Client& client) {
  const int64_t n = Elements(kRopeShape);
  const int64_t bytes = n * 4;
  std::vector<float> q(static_cast<size_t>(n)), k(static_cast<size_t>(n));
  FillRandom(q.data(), n, 1);
  FillRandom(k.data(), n, 2);
  const Kernel in_process(flags.threads, q.data(), k.data());

  auto region = client::SharedMemoryRegion::Create(client, 2 * bytes);
  if (!region.ok()) Fail(absl::StrCat("SharedMemoryRegion::Create: ", region.status().ToString()));
  client::ApplyRopeOptions options;
  options.q = *region->Allocate(DType::kFloat32, kRopeShape);
  options.k = *region->Allocate(DType::kFloat32, kRopeShape);
  std::span<float> q_shm = *region->Span<float>(options.q),
                   k_shm = *region->Span<float>(*options.k);
  std::copy(q.begin(), q.end(), q_shm.begin());
  std::copy(k.begin(), k.end(), k_shm.begin());
  const Kernel on_mapping(flags.threads, q_shm.data(), k_shm.data());

  const std::vector<Path> paths = {
      {"kernel", [&] { return in_process.Run(); }},
      {"kernel_shm", [&] { return on_mapping.Run(); }},
      {"shm",
       [&] {
         absl::StatusOr<client::ApplyRopeResult> r = client.ApplyRope(options);
         if (!r.ok()) std::fprintf(stderr, "shm ApplyRope: %s\n", r.status().ToString().c_str());
         return r.ok() && r->q.is_reference();
       }},
  };
  const std::vector<double> seconds = Interleaved(paths, flags.runs);
  for (size_t i = 0; i < paths.size(); ++i) {
    Emit(paths[i].name, flags.threads, 2 * bytes, 4.0 * static_cast<double>(bytes), seconds[i],
         flags.runs);
  }
}

// ---- the wire ----------------------------------------------------------------------------

// A listening socket of the target's kind and a thread echoing one connection: it reads a
// length (8 bytes) and that many bytes, and writes them back.
class StreamEcho {
 public:
  explicit StreamEcho(bool unix_socket) : unix_(unix_socket) {
    listener_ = socket(unix_ ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
    if (unix_) {
      path_ = absl::StrCat("/tmp/posenc_bench_stream_", getpid(), ".sock");
      unlink(path_.c_str());
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
      if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Fail("bind");
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Fail("bind");
      socklen_t len = sizeof(addr);
      getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
      port_ = ntohs(addr.sin_port);
    }
    listen(listener_, 1);
    server_ = std::thread([this] { Serve(); });
    client_ = Connect();
  }
  ~StreamEcho() {
    const uint64_t stop = 0;
    WriteAll(client_, &stop, sizeof(stop));
    server_.join();
    close(client_);
    close(listener_);
    if (unix_) unlink(path_.c_str());
  }
  StreamEcho(const StreamEcho&) = delete;
  StreamEcho& operator=(const StreamEcho&) = delete;

  // Sends `bytes` of `out` and reads them back into `in`.
  bool Exchange(const char* out, char* in, uint64_t bytes) const {
    return WriteAll(client_, &bytes, sizeof(bytes)) && WriteAll(client_, out, bytes) &&
           ReadAll(client_, in, bytes);
  }

 private:
  static bool WriteAll(int fd, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = write(fd, p, n);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  static bool ReadAll(int fd, void* data, size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  int Connect() const {
    const int fd = socket(unix_ ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
    int rc = -1;
    if (unix_) {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
      rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (rc != 0) Fail("connect");
    return fd;
  }
  void Serve() const {
    const int fd = accept(listener_, nullptr, nullptr);
    std::vector<char> buffer;
    for (uint64_t n = 0; ReadAll(fd, &n, sizeof(n)) && n > 0;) {
      if (buffer.size() < n) buffer.resize(n);
      if (!ReadAll(fd, buffer.data(), n) || !WriteAll(fd, buffer.data(), n)) break;
    }
    close(fd);
  }

  bool unix_;
  int listener_ = -1;
  int client_ = -1;
  int port_ = 0;
  std::string path_;
  std::thread server_;
};

// A bare gRPC echo server in this process and a generic stub to it (default settings but the
// message-size limits).
class GrpcEcho {
 public:
  explicit GrpcEcho(bool unix_socket) {
    grpc::ServerBuilder builder;
    int port = 0;
    std::string address = "127.0.0.1:0";
    if (unix_socket) {
      path_ = absl::StrCat("/tmp/posenc_bench_echo_", getpid(), ".sock");
      unlink(path_.c_str());
      address = "unix:" + path_;
    }
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) Fail("cannot start the gRPC echo server");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    const std::string target = unix_socket ? address : absl::StrCat("127.0.0.1:", port);
    stub_ = std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }
  ~GrpcEcho() {
    server_->Shutdown();
    if (!path_.empty()) unlink(path_.c_str());
  }
  GrpcEcho(const GrpcEcho&) = delete;
  GrpcEcho& operator=(const GrpcEcho&) = delete;

  bool Call(const grpc::ByteBuffer& request) const {
    grpc::ClientContext context;
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    stub_->UnaryCall(&context, "/bench.Echo/Echo", grpc::StubOptions(), &request, &response,
                     [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get().ok() && response.Length() == request.Length();
  }

 private:
  EchoService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
  std::string path_;
};

void Wire(const Flags& flags, const client::Client& client) {
  const bool unix_socket = flags.target.rfind("unix:", 0) == 0;
  const StreamEcho stream(unix_socket);
  const GrpcEcho echo(unix_socket);
  for (const int64_t mib : flags.sizes_mib) {
    const int64_t bytes = mib * kMiB;  // q + k
    const int64_t tokens = std::max<int64_t>(1, bytes / 2 / (32 * 128 * 4));
    client::ApplyRopeOptions options;
    options.q = RandomTensor({1, tokens, 32, 128}, 3);
    options.k = RandomTensor({1, tokens, 32, 128}, 4);
    std::vector<char> out(static_cast<size_t>(bytes), 1), in(static_cast<size_t>(bytes), 0);
    const grpc::Slice slice(out.data(), out.size());
    const grpc::ByteBuffer payload(&slice, 1);
    const std::vector<Path> paths = {
        {"wire",
         [&] {
           absl::StatusOr<client::ApplyRopeResult> r = client.ApplyRope(options);
           if (!r.ok()) std::fprintf(stderr, "wire ApplyRope: %s\n", r.status().ToString().c_str());
           return r.ok();
         }},
        {"stream", [&] { return stream.Exchange(out.data(), in.data(), out.size()); }},
        {"echo", [&] { return echo.Call(payload); }},
    };
    const std::vector<double> seconds = Interleaved(paths, flags.runs);
    for (size_t i = 0; i < paths.size(); ++i) {
      Emit(paths[i].name, flags.threads, bytes, static_cast<double>(bytes), seconds[i], flags.runs);
    }
  }
}

// ---- tiny calls ----------------------------------------------------------------------------

void Tiny(const Flags& flags, const client::Client& client) {
  client::ApplyRopeOptions inline_options;
  inline_options.q = RandomTensor({1, 1, 8, 128}, 5);
  inline_options.k = RandomTensor({1, 1, 8, 128}, 6);
  inline_options.positions = client::Positions::Offsets({4242});
  // In shared memory too where the server has it (else inline alone, as before #20).
  const absl::StatusOr<client::ServerInfo> info = client.GetServerInfo();
  if (!info.ok()) Fail(info.status().ToString());
  const int sides = info->shared_memory_allowed ? 2 : 1;
  std::optional<client::SharedMemoryRegion> region;
  client::ApplyRopeOptions shm_options = inline_options;
  if (sides == 2) {
    auto created = client::SharedMemoryRegion::Create(client, 1 << 20);
    if (!created.ok()) Fail(absl::StrCat("SharedMemoryRegion: ", created.status().ToString()));
    region.emplace(*std::move(created));
    shm_options.q = *region->Put(inline_options.q);
    shm_options.k = *region->Put(*inline_options.k);
  }
  std::vector<double> latencies[2];
  for (int r = 0; r < flags.runs; ++r) {
    for (int side = 0; side < sides; ++side) {
      const int which = (side + r) % sides;
      const client::ApplyRopeOptions& options = which == 0 ? inline_options : shm_options;
      for (int i = 0; i < flags.tiny_calls / flags.runs + 1; ++i) {
        const auto start = Clock::now();
        if (!client.ApplyRope(options).ok()) Fail("tiny ApplyRope failed");
        if (r > 0 || i >= 10) latencies[which].push_back(Seconds(start) * 1e6);
      }
    }
  }
  for (int which = 0; which < sides; ++which) {
    std::printf(
        "{\"path\": \"%s\", \"lang\": \"c++\", \"threads\": %d, \"calls\": %zu, "
        "\"p50_us\": %.1f, \"p99_us\": %.1f}\n",
        which == 0 ? "tiny" : "tiny_shm", flags.threads, latencies[which].size(),
        Percentile(latencies[which], 0.5), Percentile(latencies[which], 0.99));
  }
  std::fflush(stdout);
}

Flags Parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i], value = argv[i + 1];
    bool ok = true;
    if (name == "--target") {
      flags.target = value;
    } else if (name == "--threads") {
      ok = absl::SimpleAtoi(value, &flags.threads);
    } else if (name == "--runs") {
      ok = absl::SimpleAtoi(value, &flags.runs);
    } else if (name == "--tiny_calls") {
      ok = absl::SimpleAtoi(value, &flags.tiny_calls);
    } else if (name == "--parts") {
      flags.parts = value;
    } else if (name == "--retain_free_bytes") {
      ok = absl::SimpleAtoi(value, &flags.retain_free_bytes);
    } else if (name == "--sizes_mib") {
      flags.sizes_mib.clear();
      for (absl::string_view s : absl::StrSplit(value, ',')) {
        ok = ok && absl::SimpleAtoi(s, &flags.sizes_mib.emplace_back());
      }
    } else {
      ok = false;
    }
    if (!ok) Fail(absl::StrCat("bad flag ", name, " ", value));
  }
  if (flags.target.empty() || flags.runs < 1) Fail("usage: data_path_bench --target ADDRESS ...");
  return flags;
}

}  // namespace
}  // namespace posenc::bench

int main(int argc, char** argv) {
  using namespace posenc::bench;  // NOLINT(google-build-using-namespace)
  const Flags flags = Parse(argc, argv);
  (void)posenc::client::RetainFreedMemory(flags.retain_free_bytes);
  auto client = posenc::client::Client::Connect(flags.target, {.timeout = std::chrono::minutes(5)});
  if (!client.ok()) Fail(client.status().ToString());
  const auto has = [&](const char* part) { return flags.parts.find(part) != std::string::npos; };
  if (has("kernel")) KernelAndSharedMemory(flags, **client);
  if (has("wire")) Wire(flags, **client);
  if (has("tiny")) Tiny(flags, **client);
  return 0;
}
