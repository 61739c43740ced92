// Metrics: the server's Prometheus metrics, and (optionally) their HTTP endpoint.
//
// The service calls OnStart() when a call begins and OnFinish() when it ends. Serve() exposes
// the registry as text at http://ADDRESS/metrics (--metrics_address); without it the metrics
// are still kept (Text() renders them).
//
//   posenc_requests_total{method,code}           counter: finished calls by status code name
//   posenc_request_duration_seconds{method}      histogram: handler latency
//   posenc_request_bytes_total{method}           counter: serialized request bytes
//   posenc_response_bytes_total{method}          counter: serialized response bytes (OK calls)
//   posenc_in_flight_requests                    gauge: calls running now
//   posenc_unparseable_requests_total{method}    counter: request bytes that did not parse
//   posenc_backend_calls_total{backend}          counter: calls computed, by backend
//   posenc_cache_hits_total, posenc_cache_misses_total
//                                                counters: the RoPE frequency cache
//   posenc_build_info{version,build,backend}     gauge, always 1
//   process_*                                    CPU, memory, descriptors, start time
//                                                (process_metrics.h)
//
// Thread-safety: OnStart/OnFinish/Text may be called from any thread at once; Serve once,
// before calls arrive.
#ifndef POSENC_SERVER_METRICS_H_
#define POSENC_SERVER_METRICS_H_

#include <grpcpp/support/status.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace prometheus {
class Collectable;
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace posenc::server {

class Metrics {
 public:
  // Registers every metric (one series per method of posenc.v1.PositionEncoding and of
  // inference.GRPCInferenceService) and serves
  // nothing yet. `backend` labels posenc_build_info ("cpu (avx512, 2 threads)").
  explicit Metrics(const std::string& backend = "");
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves GET /metrics on `address` (host:port; port 0 picks a free port, see port()).
  // INVALID_ARGUMENT for an address without a port, UNAVAILABLE when it cannot listen; both name
  // --metrics_address.
  absl::Status Serve(const std::string& address);
  // The bound HTTP port, 0 when not serving.
  int port() const { return port_; }

  void OnStart();
  // A call computed on `backend` ("cpu", "cuda" or "reference").
  void OnBackendCall(absl::string_view backend);
  // One lookup of the RoPE frequency cache (kernels/rope/frequency_cache.h).
  void OnCacheLookup(bool hit);
  // A request of `method` whose bytes did not parse (it is also counted by OnFinish).
  void OnUnparseable(absl::string_view method);
  void OnFinish(absl::string_view method, grpc::StatusCode code, double seconds,
                size_t request_bytes, size_t response_bytes);

  // The Prometheus text exposition of every metric (what GET /metrics returns).
  std::string Text() const;

 private:
  static constexpr int kCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED
  struct PerMethod {
    std::string name;
    prometheus::Histogram* duration = nullptr;
    prometheus::Counter* request_bytes = nullptr;
    prometheus::Counter* response_bytes = nullptr;
    prometheus::Counter* unparseable = nullptr;
    std::array<std::atomic<prometheus::Counter*>, kCodes> requests{};  // added on first use
  };
  PerMethod& ForMethod(absl::string_view method);
  PerMethod* AddMethod(const std::string& name);

  std::shared_ptr<prometheus::Registry> registry_;
  struct Families;
  std::unique_ptr<Families> families_;
  std::shared_ptr<prometheus::Collectable> process_;  // process_* (process_metrics.h)
  prometheus::Gauge* in_flight_ = nullptr;
  prometheus::Counter* cache_hits_ = nullptr;
  prometheus::Counter* cache_misses_ = nullptr;
  static constexpr std::array<absl::string_view, 3> kBackendNames = {"cpu", "cuda", "reference"};
  std::array<prometheus::Counter*, kBackendNames.size()> backend_calls_{};
  // Filled in the constructor and read-only afterwards; "other" catches unknown methods.
  std::map<std::string, std::unique_ptr<PerMethod>, std::less<>> methods_;
  PerMethod* other_ = nullptr;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_METRICS_H_
