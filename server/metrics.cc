#include "server/metrics.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "posenc/v1/posenc.pb.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace posenc::server {

struct Metrics::Families {
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  prometheus::Family<prometheus::Histogram>* duration = nullptr;
  prometheus::Family<prometheus::Counter>* request_bytes = nullptr;
  prometheus::Family<prometheus::Counter>* response_bytes = nullptr;
};

namespace {

// Handler latency buckets, seconds: 50 us .. 10 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return buckets;
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()), families_(std::make_unique<Families>()) {
  families_->requests = &prometheus::BuildCounter()
                             .Name("posenc_requests_total")
                             .Help("Finished RPCs by method and gRPC status code name")
                             .Register(*registry_);
  families_->duration = &prometheus::BuildHistogram()
                             .Name("posenc_request_duration_seconds")
                             .Help("RPC handling time in seconds (validation, compute, encoding)")
                             .Register(*registry_);
  families_->request_bytes = &prometheus::BuildCounter()
                                  .Name("posenc_request_bytes_total")
                                  .Help("Serialized request bytes received, by method")
                                  .Register(*registry_);
  families_->response_bytes = &prometheus::BuildCounter()
                                   .Name("posenc_response_bytes_total")
                                   .Help("Serialized response bytes sent (OK calls), by method")
                                   .Register(*registry_);
  in_flight_ = &prometheus::BuildGauge()
                    .Name("posenc_in_flight_requests")
                    .Help("RPCs being handled now")
                    .Register(*registry_)
                    .Add({});
  cache_hits_ = &prometheus::BuildCounter()
                     .Name("posenc_cache_hits_total")
                     .Help("RoPE frequency cache hits (RopeCache, ApplyRope)")
                     .Register(*registry_)
                     .Add({});
  cache_misses_ = &prometheus::BuildCounter()
                       .Name("posenc_cache_misses_total")
                       .Help("RoPE frequency cache misses (computed, then cached)")
                       .Register(*registry_)
                       .Add({});

  const google::protobuf::ServiceDescriptor* service =
      v1::SinusoidalRequest::descriptor()->file()->FindServiceByName("PositionEncoding");
  if (service != nullptr) {
    for (int i = 0; i < service->method_count(); ++i) AddMethod(service->method(i)->name());
  }
  other_ = AddMethod("other");
}

Metrics::~Metrics() {
  exposer_.reset();  // stop serving before the registry goes
}

Metrics::PerMethod* Metrics::AddMethod(const std::string& name) {
  auto per = std::make_unique<PerMethod>();
  per->name = name;
  per->duration = &families_->duration->Add({{"method", name}}, LatencyBuckets());
  per->request_bytes = &families_->request_bytes->Add({{"method", name}});
  per->response_bytes = &families_->response_bytes->Add({{"method", name}});
  PerMethod* raw = per.get();
  methods_[name] = std::move(per);
  return raw;
}

Metrics::PerMethod& Metrics::ForMethod(absl::string_view method) {
  auto it = methods_.find(method);
  return it == methods_.end() ? *other_ : *it->second;
}

absl::Status Metrics::Serve(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address: expected host:port (port 0 = any free port), got \"", address, "\""));
  }
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_address: could not listen on \"", address, "\": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? 0 : ports.front();
  if (port_ == 0) {
    exposer_.reset();
    return absl::UnavailableError(
        absl::StrCat("--metrics_address: could not listen on \"", address, "\""));
  }
  return absl::OkStatus();
}

void Metrics::OnCacheLookup(bool hit) { (hit ? cache_hits_ : cache_misses_)->Increment(); }

void Metrics::OnStart() { in_flight_->Increment(); }

void Metrics::OnFinish(absl::string_view method, grpc::StatusCode code, double seconds,
                       size_t request_bytes, size_t response_bytes) {
  in_flight_->Decrement();
  PerMethod& per = ForMethod(method);
  int index = static_cast<int>(code);
  if (index < 0 || index >= kCodes) index = static_cast<int>(grpc::StatusCode::UNKNOWN);
  prometheus::Counter* requests = per.requests[index].load(std::memory_order_acquire);
  if (requests == nullptr) {
    // Family::Add is thread-safe and returns the existing series for the same labels, so a race
    // here stores the same pointer twice.
    requests = &families_->requests->Add(
        {{"method", per.name},
         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(index))}});
    per.requests[index].store(requests, std::memory_order_release);
  }
  requests->Increment();
  per.duration->Observe(seconds);
  per.request_bytes->Increment(static_cast<double>(request_bytes));
  per.response_bytes->Increment(static_cast<double>(response_bytes));
}

std::string Metrics::Text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace posenc::server
