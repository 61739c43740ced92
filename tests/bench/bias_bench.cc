// bias_bench: a [32, 2048, 2048] bias end to end through the C++ client, both ways: the full
// matrix over the wire (FULL; 512 MiB of FLOAT32, which the client splits along query rows under
// the 256 MiB message limit) against the compact form over the wire and the local expansion
// (the client's default). ALiBi CAUSAL and T5 (32 heads). Rounds alternate which way goes
// first; each figure is the median over the rounds. Server in this process (cpu backend),
// loopback TCP.
// Usage: bias_bench [--rounds N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "posenc/client.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using posenc::client::BiasForm;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of one call; exits on failure.
double Time(const std::function<absl::Status()>& call) {
  const auto start = Clock::now();
  const absl::Status status = call();
  if (!status.ok()) {
    std::fprintf(stderr, "bias_bench: %s\n", status.ToString().c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  spdlog::set_level(spdlog::level::warn);
  posenc::server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_output_elements = int64_t{1} << 28;
  auto server = posenc::server::PosencServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "bias_bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto client =
      posenc::client::Client::Connect("127.0.0.1:" + std::to_string((*server)->port()), {});
  if (!client.ok()) return 1;
  const posenc::client::Client& c = **client;

  posenc::client::AlibiBiasOptions alibi;
  alibi.num_heads = 32;
  alibi.q_len = 2048;
  alibi.k_len = 2048;
  posenc::client::RelativeBiasOptions t5;
  t5.q_len = 2048;
  t5.k_len = 2048;
  std::vector<float> table(32 * 32);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.01f * static_cast<float>(i);
  t5.table_inline = *posenc::client::Tensor::FromFloats(table, {32, 32});

  struct Way {
    const char* name;
    std::function<absl::Status()> call;
    std::vector<double> seconds;
  };
  auto alibi_full = alibi;
  alibi_full.form = BiasForm::kFull;
  auto t5_full = t5;
  t5_full.form = BiasForm::kFull;
  std::vector<Way> ways = {
      {"alibi full over the wire", [&] { return c.AlibiBias(alibi_full).status(); }, {}},
      {"alibi compact + expand", [&] { return c.AlibiBias(alibi).status(); }, {}},
      {"t5 full over the wire", [&] { return c.RelativeBias(t5_full).status(); }, {}},
      {"t5 compact + expand", [&] { return c.RelativeBias(t5).status(); }, {}},
  };
  for (Way& way : ways) Time(way.call);  // warm-up
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < ways.size(); ++i) {
      // Alternate the order of each pair from round to round.
      Way& way = ways[(i ^ static_cast<size_t>(r % 2))];
      way.seconds.push_back(Time(way.call));
    }
  }
  const double gib = 32.0 * 2048 * 2048 * 4 / (1 << 30);
  std::printf("[32, 2048, 2048] FLOAT32 bias (%.2f GiB) end to end, median of %d rounds\n", gib,
              rounds);
  for (const Way& way : ways) {
    const double s = Median(way.seconds);
    std::printf("  %-26s %8.3f s  %7.2f GiB/s of result\n", way.name, s, gib / s);
  }
  std::printf("  speed-up of compact: alibi %.1fx, t5 %.1fx\n",
              Median(ways[0].seconds) / Median(ways[1].seconds),
              Median(ways[2].seconds) / Median(ways[3].seconds));
  return 0;
}
