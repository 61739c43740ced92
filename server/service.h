// PositionEncodingService: the gRPC service posenc.v1.PositionEncoding.
//
// Every method is registered on raw bytes (a callback handler of grpc::ByteBuffer), so the
// service itself parses each request: bytes that are not a valid request message get
// INVALID_ARGUMENT naming the message type, an access log line and the
// posenc_unparseable_requests_total metric (gRPC's own parser would answer with a bare status
// and no trace). A parsed request runs its handler (handlers.h) on the calling gRPC thread under
// the call's admission (admission.h: bytes in flight, heavy-call slots); the response is
// serialized into gRPC's buffer and the message freed at once, and the call's reactor holds the
// admission until gRPC is done with the call (OnDone). Exceptions never escape: std::bad_alloc
// becomes RESOURCE_EXHAUSTED, anything else INTERNAL (logged). One access log line per call
// (logging.h) and its metrics (metrics.h).
//
// Thread-safety: all methods may run concurrently; the service holds only the read-only
// HandlerContext and atomics.
#ifndef POSENC_SERVER_SERVICE_H_
#define POSENC_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

#include "posenc/v1/posenc.grpc.pb.h"
#include "server/admission.h"
#include "server/handlers.h"
#include "server/metrics.h"

namespace posenc::server {

class PositionEncodingService final : public v1::PositionEncoding::Service {
 public:
  // `ctx`'s backend and tables must outlive the service.
  explicit PositionEncodingService(HandlerContext ctx);

  // From now on every call is refused with UNAVAILABLE (the server is draining); calls already
  // running go on until `abort_at`, when their kernel work stops with CANCELLED.
  void StartDraining(std::chrono::system_clock::time_point abort_at);
  // Blocks until no call is in flight (every call's reactor done) or `deadline` passes; true when
  // idle. With StartDraining first, the server can close its listener only when nothing runs,
  // so that no call ever meets a half-shut server (gRPC cancels those: CANCELLED, not the
  // retryable UNAVAILABLE).
  bool WaitUntilIdle(std::chrono::system_clock::time_point deadline) const;
  int64_t calls_in_flight() const { return calls_in_flight_.load(std::memory_order_acquire); }

  // Every call reports to `metrics` (OnStart/OnFinish) from now on; null = none. Set before the
  // server starts; `metrics` must outlive the service.
  void set_metrics(Metrics* metrics) { metrics_ = metrics; }
  // Every call is admitted by `admission` from now on; null = admit all. Set before the server
  // starts; `admission` must outlive the service.
  void set_admission(AdmissionControl* admission) { admission_ = admission; }

 private:
  template <typename Request, typename Response>
  using Handler = grpc::Status (*)(const HandlerContext&, const Request&, Response*);

  // Registers method number `index` of the service (the .proto's order) on raw bytes.
  template <typename Request, typename Response>
  void Register(int index, const char* method, Handler<Request, Response> handler);
  // One call of `method`: parse, admit, handle, serialize, log, count.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Serve(const char* method, Handler<Request, Response> handler,
                                  grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request_bytes,
                                  grpc::ByteBuffer* response_bytes);

  const HandlerContext ctx_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> abort_at_ns_{std::numeric_limits<int64_t>::max()};
  std::atomic<int64_t> calls_in_flight_{0};
  Metrics* metrics_ = nullptr;
  AdmissionControl* admission_ = nullptr;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_SERVICE_H_
