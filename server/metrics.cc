#include "server/metrics.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "inference/grpc_service.pb.h"
#include "posenc/v1/posenc.pb.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/process_metrics.h"

namespace posenc::server {

struct Metrics::Families {
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  prometheus::Family<prometheus::Histogram>* duration = nullptr;
  prometheus::Family<prometheus::Counter>* request_bytes = nullptr;
  prometheus::Family<prometheus::Counter>* response_bytes = nullptr;
  prometheus::Family<prometheus::Counter>* unparseable = nullptr;
};

namespace {

// Handler latency buckets, seconds: 50 us .. 10 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return buckets;
}

// Registers a metric family with its name and help text.
template <typename Builder>
auto& Register(Builder builder, const char* name, const char* help,
               prometheus::Registry& registry) {
  return builder.Name(name).Help(help).Register(registry);
}

}  // namespace

Metrics::Metrics(const std::string& backend)
    : registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>()),
      process_(std::make_shared<ProcessCollector>()) {
  prometheus::Registry& r = *registry_;
  families_->requests = &Register(prometheus::BuildCounter(), "posenc_requests_total",
                                  "Finished RPCs by method and gRPC status code name", r);
  families_->duration =
      &Register(prometheus::BuildHistogram(), "posenc_request_duration_seconds",
                "RPC handling time in seconds (validation, compute, encoding)", r);
  families_->request_bytes = &Register(prometheus::BuildCounter(), "posenc_request_bytes_total",
                                       "Serialized request bytes received, by method", r);
  families_->response_bytes = &Register(prometheus::BuildCounter(), "posenc_response_bytes_total",
                                        "Serialized response bytes sent (OK calls), by method", r);
  families_->unparseable =
      &Register(prometheus::BuildCounter(), "posenc_unparseable_requests_total",
                "Requests whose bytes did not parse as the method's request message", r);
  in_flight_ =
      &Register(prometheus::BuildGauge(), "posenc_in_flight_requests", "RPCs being handled now", r)
           .Add({});
  cache_hits_ = &Register(prometheus::BuildCounter(), "posenc_cache_hits_total",
                          "RoPE frequency cache hits (RopeCache, ApplyRope)", r)
                     .Add({});
  cache_misses_ = &Register(prometheus::BuildCounter(), "posenc_cache_misses_total",
                            "RoPE frequency cache misses (computed, then cached)", r)
                       .Add({});
  auto& backend_calls =
      Register(prometheus::BuildCounter(), "posenc_backend_calls_total",
               "Calls that reached a backend, by the backend that computed them (with "
               "--backend=cuda, calls under --cuda_small_call_bytes run on cpu)",
               r);
  for (size_t i = 0; i < kBackendNames.size(); ++i) {
    backend_calls_[i] = &backend_calls.Add({{"backend", std::string(kBackendNames[i])}});
  }
  Register(prometheus::BuildGauge(), "posenc_build_info",
           "Always 1; the labels say which posenc this is and what it computes on", r)
      .Add({{"version", POSENC_VERSION}, {"build", POSENC_BUILD_INFO}, {"backend", backend}})
      .Set(1);

  // posenc.v1's methods and the Open Inference Protocol's (server/inference_service.h).
  for (const google::protobuf::ServiceDescriptor* service :
       {v1::SinusoidalRequest::descriptor()->file()->FindServiceByName("PositionEncoding"),
        inference::ModelInferRequest::descriptor()->file()->FindServiceByName(
            "GRPCInferenceService")}) {
    if (service == nullptr) continue;
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
  per->unparseable = &families_->unparseable->Add({{"method", name}});
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
  exposer_->RegisterCollectable(process_);
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

void Metrics::OnBackendCall(absl::string_view backend) {
  for (size_t i = 0; i < kBackendNames.size(); ++i) {
    if (kBackendNames[i] == backend) backend_calls_[i]->Increment();
  }
}

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

void Metrics::OnUnparseable(absl::string_view method) {
  ForMethod(method).unparseable->Increment();
}

std::string Metrics::Text() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& family : process_->Collect())
    families.push_back(std::move(family));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace posenc::server
