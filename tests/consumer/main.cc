// A program outside posenc linking the installed client library: `consumer HOST:PORT` checks the
// server's health, asks it for the ALiBi slopes of 8 heads (max_bias 8: 2^-1 .. 2^-8, exact in
// FLOAT32), and expands a compact ALiBi bias locally (posenc::client::ExpandToeplitz, code of the
// installed kernels archive) to compare it with the full form. Exit status 0 when all is right.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "posenc/client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]);
    return 2;
  }
  auto client = posenc::client::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const auto health = (*client)->Health();
  if (!health.ok() || *health != posenc::client::HealthStatus::kServing) {
    std::fprintf(stderr, "health: %s\n",
                 health.ok() ? std::string(posenc::client::HealthStatusName(*health)).c_str()
                             : health.status().ToString().c_str());
    return 1;
  }

  posenc::client::AlibiSlopesOptions options;
  options.num_heads = 8;
  const auto slopes = (*client)->AlibiSlopes(options);
  if (!slopes.ok()) {
    std::fprintf(stderr, "AlibiSlopes: %s\n", slopes.status().ToString().c_str());
    return 1;
  }
  const std::vector<double> values = slopes->ToDoubles();
  if (slopes->dtype != posenc::client::DType::kFloat32 ||
      slopes->shape != std::vector<int64_t>{8} || values.size() != 8) {
    std::fprintf(stderr, "AlibiSlopes: unexpected %s tensor of %zu values\n",
                 std::string(posenc::client::DTypeName(slopes->dtype)).c_str(), values.size());
    return 1;
  }
  for (int h = 0; h < 8; ++h) {
    if (values[h] != std::ldexp(1.0, -(h + 1))) {
      std::fprintf(stderr, "AlibiSlopes: slope %d is %.17g, expected 2^-%d\n", h, values[h], h + 1);
      return 1;
    }
  }

  posenc::client::AlibiBiasOptions bias;
  bias.num_heads = 2;
  bias.q_len = 3;
  bias.k_len = 5;
  bias.mode = posenc::client::AlibiMode::kSymmetric;
  const auto full = (*client)->AlibiBias(bias);
  bias.form = posenc::client::BiasForm::kCompact;
  const auto compact = (*client)->AlibiBias(bias);
  if (!full.ok() || !compact.ok()) {
    std::fprintf(stderr, "AlibiBias: %s\n",
                 (full.ok() ? compact.status() : full.status()).ToString().c_str());
    return 1;
  }
  const auto expanded = posenc::client::ExpandToeplitz(compact->bias, 3, 5);
  if (!expanded.ok() || expanded->shape != full->bias.shape || expanded->data != full->bias.data) {
    std::fprintf(
        stderr, "ExpandToeplitz: %s\n",
        expanded.ok() ? "differs from the full bias" : expanded.status().ToString().c_str());
    return 1;
  }

  const auto info = (*client)->GetServerInfo();
  if (!info.ok()) {
    std::fprintf(stderr, "GetServerInfo: %s\n", info.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "consumer: health SERVING, ALiBi slopes 2^-1 .. 2^-8, compact bias expanded locally; "
      "posenc-server %s\n",
      info->version.c_str());
  return 0;
}
