// wire_bench: posenc's wire (the C++ client's ApplyRope, end to end) against one stream socket
// moving the same bytes, side by side in one run (issue #20, "the wire at the link's speed").
//
// Usage: wire_bench --target ADDR [--sizes 2,8,32,128,256] [--rounds 5] [--retain_free_bytes N]
//   ADDR: a running posenc-server, host:port or unix:///path.
//   N: posenc::client::RetainFreedMemory(N) first (default 1 GiB, as the server's default); 0:
//      the C library's allocator defaults (each response's tensors in fresh pages).
// For each size S (MiB of q + k, FLOAT32, q and k [1, T, 32, 128] each), alternating rounds of:
//   stream: one socket of the target's kind (TCP on 127.0.0.1, or a Unix socket pair) carrying
//           2 S MiB one way, from a buffer into a buffer (both touched before timing): the bytes
//           of the request and of the response;
//   wire:   Client::ApplyRope on q and k the caller keeps (as a user does), the result received.
// Prints per size the medians: stream GB/s, wire GB/s (2 S MiB over the call's time) and their
// ratio. The goal: wire >= 0.5 of the stream for 2 .. 256 MiB.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "posenc/client.h"

namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds (user + system) of this process, every thread.
double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// CPU seconds of process `pid` (/proc/PID/stat utime + stime); 0 when unknown.
double ProcessCpuSeconds(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A connected pair of stream sockets: TCP over 127.0.0.1, or AF_UNIX.
bool SocketPair(bool unix_socket, int fds[2]) {
  if (unix_socket) return socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listener);
    return false;
  }
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  const bool ok = connect(fds[0], reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                  (fds[1] = accept(listener, nullptr, nullptr)) >= 0;
  close(listener);
  return ok;
}

// Seconds to move `from` into `to` over one stream socket (writes and reads of 1 MiB at most).
double StreamSeconds(bool unix_socket, const std::string& from, std::string* to) {
  int fds[2];
  if (!SocketPair(unix_socket, fds)) return -1;
  const auto start = Clock::now();
  std::thread writer([&] {
    for (size_t done = 0; done < from.size();) {
      const ssize_t n =
          write(fds[0], from.data() + done, std::min<size_t>(1 << 20, from.size() - done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  });
  for (size_t done = 0; done < to->size();) {
    const ssize_t n = read(fds[1], to->data() + done, std::min<size_t>(1 << 20, to->size() - done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  writer.join();
  close(fds[0]);
  close(fds[1]);
  return seconds;
}

posenc::client::Tensor Random(int64_t tokens, uint32_t seed) {
  posenc::client::Tensor t;
  t.shape = {1, tokens, 32, 128};
  t.data.resize(static_cast<size_t>(tokens) * 32 * 128 * 4);
  std::vector<float> row(32 * 128);
  for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>((i * 7 + seed) % 101) / 50.f;
  for (size_t off = 0; off < t.data.size(); off += row.size() * 4) {
    std::memcpy(t.data.data() + off, row.data(), row.size() * 4);
  }
  return t;
}

// Seconds of one ApplyRope of `options`, or -1 (printed) on error.
double WireSeconds(const posenc::client::Client& client,
                   const posenc::client::ApplyRopeOptions& options) {
  const auto start = Clock::now();
  const auto result = client.ApplyRope(options);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!result.ok()) {
    std::fprintf(stderr, "ApplyRope: %s\n", result.status().ToString().c_str());
    return -1;
  }
  return seconds;
}

std::vector<int> ParseSizes(const std::string& s) {
  std::vector<int> out;
  for (size_t pos = 0; pos < s.size();) {
    out.push_back(std::atoi(s.c_str() + pos));
    pos = s.find(',', pos);
    if (pos == std::string::npos) break;
    ++pos;
  }
  return out;
}

void RunSize(const posenc::client::Client& client, bool unix_socket, int mib, int rounds,
             int server_pid) {
  const int64_t tokens = (int64_t{mib} << 20) / 2 / (32 * 128 * 4);
  posenc::client::ApplyRopeOptions options;
  options.q = Random(tokens, 1);
  options.k = Random(tokens, 2);
  const double bytes = 2.0 * static_cast<double>(options.q.data.size() + options.k->data.size());
  const std::string from(static_cast<size_t>(bytes), 'x');
  std::string to(from.size(), '\0');
  std::vector<double> stream, wire;
  WireSeconds(client, options);  // warm-up: connection, server caches
  double client_cpu = 0, server_cpu = 0;
  for (int r = 0; r < rounds; ++r) {
    stream.push_back(StreamSeconds(unix_socket, from, &to));
    const double c0 = SelfCpuSeconds(), s0 = ProcessCpuSeconds(server_pid);
    wire.push_back(WireSeconds(client, options));
    client_cpu += SelfCpuSeconds() - c0;
    server_cpu += ProcessCpuSeconds(server_pid) - s0;
  }
  const double s = bytes / Median(stream) / 1e9, w = bytes / Median(wire) / 1e9;
  std::printf("| %d MiB | %s | %.2f GB/s | %.2f GB/s | %.1f ms | %.2f | %.0f / %.0f ms |\n", mib,
              unix_socket ? "unix" : "tcp", s, w, Median(wire) * 1e3, w / s,
              client_cpu / rounds * 1e3, server_cpu / rounds * 1e3);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string target, sizes = "2,8,32,128,256";
  int rounds = 5;
  int server_pid = 0;
  int64_t retain_free_bytes = int64_t{1} << 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--target") target = argv[i + 1];
    if (flag == "--sizes") sizes = argv[i + 1];
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--server_pid") server_pid = std::atoi(argv[i + 1]);
    if (flag == "--retain_free_bytes") retain_free_bytes = std::atoll(argv[i + 1]);
  }
  if (target.empty() || rounds < 1) {
    std::fprintf(stderr, "usage: wire_bench --target ADDR [--sizes 2,8,...] [--rounds N]\n");
    return 2;
  }
  const bool retained = posenc::client::RetainFreedMemory(retain_free_bytes);
  std::printf("client: freed memory %s\n", retained ? "retained" : "returned (allocator defaults)");
  posenc::client::ClientOptions client_options;
  client_options.timeout = std::chrono::minutes(5);
  if (const char* e = std::getenv("WIRE_MAX_MSG")) client_options.max_message_bytes = std::atoll(e);
  auto client = posenc::client::Client::Connect(target, client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  const bool unix_socket = target.rfind("unix:", 0) == 0;
  std::printf(
      "| q+k | socket | one stream | C++ client ApplyRope | call p50 | wire / stream | "
      "CPU per call: client / server |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const int mib : ParseSizes(sizes)) RunSize(**client, unix_socket, mib, rounds, server_pid);
  return 0;
}
