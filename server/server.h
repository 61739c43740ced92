// PosencServer: the gRPC server of posenc: posenc.v1.PositionEncoding and, on the same port, the
// Open Inference Protocol (inference.GRPCInferenceService, server/inference_service.h); health
// (both services by name, and the whole server) and reflection.
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
#include "kernels/backend.h"
#include "proto/posenc/v1/freed_memory.h"

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
  // Admission (admission.h): bytes of requests and responses in flight (-1: a quarter of the
  // process's memory, DefaultMaxInflightBytes; 0: unbounded), and calls with outputs over
  // kHeavyCallBytes computing at once (-1: one less than the cores, at least 1; 0: unbounded).
  int64_t max_inflight_bytes = -1;
  int64_t max_heavy_calls = -1;
  // "cpu" (the optimized CPU backend, the default), "reference" (the float64 oracle), "cuda"
  // (a CUDA device: UNIMPLEMENTED when not built in, UNAVAILABLE without a device) or "auto"
  // (cuda when the build has it and a device is present, else cpu).
  std::string backend = "cpu";
  // Threads one large request may use (cpu backend); 0 = one per core.
  int threads = 0;
  // cuda: the device index, and the output bytes under which a call runs on the cpu backend
  // instead (copying a small result over PCIe costs more than computing it on the host).
  int cuda_device = 0;
  int64_t cuda_small_call_bytes = kernels::kDefaultCudaSmallCallBytes;
  // Entries of the bounded RoPE frequency cache (keyed by the full config); 0 disables it.
  int64_t cache_entries = 1024;
  // Bytes the cache may hold (RopeFrequencyCache::EntryBytes summed); 0 disables it.
  int64_t cache_bytes = int64_t{64} << 20;
  // TLS (server/tls.h): PEM files of the server's certificate chain and private key (both or
  // neither; neither = plaintext), and of the CA(s) that client certificates must chain to
  // (set = mutual TLS: a client without a valid certificate is refused).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // host:port of the Prometheus /metrics HTTP endpoint (server/metrics.h); empty = off; port 0
  // picks a free port (see PosencServer::metrics_port()).
  std::string metrics_address;
  // Directory of *.npy / *.safetensors tables loaded before serving (server/table_loader.h);
  // empty = no tables. A missing directory or a bad file makes Start fail.
  std::string tables_dir;
  // Shared memory (server/shared_memory.h): registrations accepted at all, and their bounds.
  bool allow_shared_memory = false;
  int64_t max_shared_memory_regions = 64;
  int64_t max_shared_memory_bytes = int64_t{64} << 30;
  // Shutdown: how long health reports NOT_SERVING (and new calls get UNAVAILABLE) before the
  // listener closes, so load balancers notice; cut short by Shutdown's deadline.
  std::chrono::milliseconds drain_grace{0};
  // Free memory the allocator keeps for the next calls' large buffers instead of handing it back
  // to the system (proto/posenc/v1/freed_memory.h: no fresh pages to zero per call); posenc-server
  // sets the process's allocator so before the server starts. 0 = glibc's defaults. Whatever is
  // kept goes back once no call has run for kReleaseFreeMemoryAfter.
  int64_t retain_free_memory_bytes = v1::kDefaultRetainFreeBytes;
};

// The quiet spell after which a server hands its free memory back (ReleaseFreedMemory).
inline constexpr std::chrono::seconds kReleaseFreeMemoryAfter{10};

class PosencServer {
 public:
  static absl::StatusOr<std::unique_ptr<PosencServer>> Start(const ServerOptions& options);
  virtual ~PosencServer() = default;

  // The bound port (useful with port 0).
  virtual int port() const = 0;
  // The bound port of the /metrics endpoint; 0 when metrics_address is empty.
  virtual int metrics_port() const = 0;
  // "cpu (avx512, 2 threads)", "reference (...)": the backend serving requests.
  virtual std::string backend_description() const = 0;
  // Health goes NOT_SERVING and new calls are refused (UNAVAILABLE); after
  // options.drain_grace (at most until `deadline`) in-flight calls get until `deadline` to
  // finish, then are cancelled (the kernels stop at their next cancellation check), and the
  // listener closes: until it does, every new call gets UNAVAILABLE.
  virtual void Shutdown(std::chrono::system_clock::time_point deadline) = 0;
  // Blocks until the server has shut down.
  virtual void Wait() = 0;
  // A channel to this server that bypasses the network (for tests and benchmarks).
  virtual std::shared_ptr<grpc::Channel> InProcessChannel() = 0;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_SERVER_H_
