// PosencServer: the gRPC server of posenc (PositionEncoding service, health, reflection).
//
// Used by posenc-server's main() and, in process, by the tests. Start() returns a running
// server; Shutdown() stops accepting calls and waits (up to the deadline) for in-flight ones.
//
// Thread-safety: Start/Shutdown/Wait may be called from any thread; the server is safe to use
// from many client threads at once.
#ifndef POSENC_SERVER_SERVER_H_
#define POSENC_SERVER_SERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Channel;
}

namespace posenc::server {

struct ServerOptions {
  // host:port; port 0 picks a free port (see PosencServer::port()).
  std::string listen_address = "0.0.0.0:50051";
  // Largest request or response message, bytes (gRPC's receive/send limits). At most 2 GiB - 1.
  int64_t max_message_bytes = int64_t{256} << 20;
  // Largest number of output elements a request may ask for (checked before allocating).
  int64_t max_output_elements = int64_t{1} << 26;
  // "cpu" (the optimized CPU backend, the default), "reference" (the float64 oracle) or
  // "auto" (the best available: CUDA comes in a later version, so today cpu).
  std::string backend = "cpu";
  // Threads one large request may use (cpu backend); 0 = one per core.
  int threads = 0;
};

class PosencServer {
 public:
  static absl::StatusOr<std::unique_ptr<PosencServer>> Start(const ServerOptions& options);
  virtual ~PosencServer() = default;

  // The bound port (useful with port 0).
  virtual int port() const = 0;
  // "cpu (avx512, 2 threads)", "reference (...)": the backend serving requests.
  virtual std::string backend_description() const = 0;
  // Health goes NOT_SERVING, new calls are refused, in-flight calls get until `deadline`.
  virtual void Shutdown(std::chrono::system_clock::time_point deadline) = 0;
  // Blocks until the server has shut down.
  virtual void Wait() = 0;
  // A channel to this server that bypasses the network (for tests and benchmarks).
  virtual std::shared_ptr<grpc::Channel> InProcessChannel() = 0;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_SERVER_H_
