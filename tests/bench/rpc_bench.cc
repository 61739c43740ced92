// rpc_bench: posenc over gRPC against a bare gRPC echo of the same bytes, side by side.
//
// Starts, in this process, posenc's server (on 127.0.0.1, cpu backend) and a bare echo server
// (a callback generic service that returns the request bytes), and drives both from the same
// client code over loopback TCP: the same generic stub, the same pre-serialized request bytes.
// Rounds alternate between the two (interleaved), and each figure is the median of the rounds.
//   - large: ApplyRope with q and k of 8 MiB each (FLOAT32 [1, 1024, 16, 128]), MB/s of q+k;
//   - tiny:  ApplyRope of one token with 8 heads of 128 (4 KiB), p50 round-trip latency.
// Usage: rpc_bench [--rounds N] [--large_iters N] [--tiny_iters N] [--quiet 1]
// (--quiet 1 turns the server's per-RPC access log off, to show what logging costs.)
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "posenc/v1/posenc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/bench/grpc_echo.h"

namespace {

using Clock = std::chrono::steady_clock;
using posenc::bench::EchoService;

grpc::ByteBuffer Serialize(const google::protobuf::Message& m) {
  std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One unary call through the generic stub; returns seconds, or -1 on error.
double Call(grpc::GenericStub& stub, const std::string& method, const grpc::ByteBuffer& request) {
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  const auto start = Clock::now();
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", method.c_str(), status.error_message().c_str());
    return -1;
  }
  return seconds;
}

posenc::v1::Tensor RandomTensor(std::vector<int64_t> shape, uint32_t seed) {
  posenc::v1::Tensor t;
  t.set_dtype(posenc::v1::DTYPE_FLOAT32);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (auto& x : v) x = dist(gen);
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int64_t Arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = static_cast<int>(Arg(argc, argv, "--rounds", 7));
  const int large_iters = static_cast<int>(Arg(argc, argv, "--large_iters", 8));
  const int tiny_iters = static_cast<int>(Arg(argc, argv, "--tiny_iters", 400));
  const bool quiet = Arg(argc, argv, "--quiet", 0) != 0;
  if (quiet) spdlog::set_level(spdlog::level::warn);

  posenc::server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_message_bytes = (int64_t{1} << 31) - 1;
  options.max_output_elements = int64_t{1} << 30;
  auto server = posenc::server::PosencServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "posenc server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  EchoService echo;
  int echo_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  builder.SetMaxReceiveMessageSize(INT32_MAX);
  builder.SetMaxSendMessageSize(INT32_MAX);
  builder.RegisterCallbackGenericService(&echo);
  std::unique_ptr<grpc::Server> echo_server = builder.BuildAndStart();

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT32_MAX);
  args.SetMaxSendMessageSize(INT32_MAX);
  auto posenc_channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                                  grpc::InsecureChannelCredentials(), args);
  auto echo_channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(echo_port),
                                                grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub posenc_stub(posenc_channel), echo_stub(echo_channel);
  const std::string apply = "/posenc.v1.PositionEncoding/ApplyRope";
  const std::string echo_method = "/bench.Echo/Echo";

  posenc::v1::ApplyRopeRequest large;
  *large.mutable_q() = RandomTensor({1, 1024, 16, 128}, 1);
  *large.mutable_k() = RandomTensor({1, 1024, 16, 128}, 2);
  large.mutable_positions()->mutable_range()->set_start(1000);
  posenc::v1::ApplyRopeRequest tiny;
  *tiny.mutable_q() = RandomTensor({1, 1, 8, 128}, 3);
  tiny.mutable_positions()->mutable_offsets()->add_offsets(4242);
  const grpc::ByteBuffer large_bytes = Serialize(large), tiny_bytes = Serialize(tiny);
  const double payload = static_cast<double>(large.q().data().size() + large.k().data().size());

  // Warm up both paths (connections, allocations).
  for (int i = 0; i < 3; ++i) {
    if (Call(posenc_stub, apply, large_bytes) < 0 ||
        Call(echo_stub, echo_method, large_bytes) < 0 || Call(posenc_stub, apply, tiny_bytes) < 0 ||
        Call(echo_stub, echo_method, tiny_bytes) < 0) {
      return 1;
    }
  }
  std::vector<double> posenc_mbs, echo_mbs, posenc_p50, echo_p50;
  for (int r = 0; r < rounds; ++r) {
    for (int which = 0; which < 2; ++which) {
      // Alternate which side goes first in a round.
      const bool posenc_side = (which + r) % 2 == 0;
      double total = 0;
      for (int i = 0; i < large_iters; ++i) {
        const double s = posenc_side ? Call(posenc_stub, apply, large_bytes)
                                     : Call(echo_stub, echo_method, large_bytes);
        if (s < 0) return 1;
        total += s;
      }
      (posenc_side ? posenc_mbs : echo_mbs).push_back(payload * large_iters / total / 1e6);
      std::vector<double> lat;
      for (int i = 0; i < tiny_iters; ++i) {
        const double s = posenc_side ? Call(posenc_stub, apply, tiny_bytes)
                                     : Call(echo_stub, echo_method, tiny_bytes);
        if (s < 0) return 1;
        lat.push_back(s * 1e6);
      }
      (posenc_side ? posenc_p50 : echo_p50).push_back(Median(lat));
    }
  }
  const double pm = Median(posenc_mbs), em = Median(echo_mbs);
  const double pl = Median(posenc_p50), el = Median(echo_p50);
  std::printf("backend: %s, access log %s\n", (*server)->backend_description().c_str(),
              quiet ? "off" : "on (stdout)");
  std::printf("large ApplyRope q+k 16 MiB: posenc %.0f MB/s, bare echo %.0f MB/s, ratio %.2f\n", pm,
              em, pm / em);
  std::printf(
      "tiny ApplyRope 1x8x128 (4 KiB): posenc p50 %.1f us, bare echo p50 %.1f us, "
      "ratio %.2f\n",
      pl, el, pl / el);
  std::printf("(%d interleaved rounds; %d large and %d tiny calls per side per round)\n", rounds,
              large_iters, tiny_iters);
  (*server)->Shutdown(std::chrono::system_clock::now());
  (*server)->Wait();
  echo_server->Shutdown();
  return 0;
}
