#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/common/status.h"
#include "server/call_runner.h"
#include "server/handlers.h"
#include "server/inference_service.h"
#include "server/metrics.h"
#include "server/service.h"
#include "server/table_loader.h"
#include "server/tables.h"
#include "server/tls.h"
#include "spdlog/spdlog.h"

namespace posenc::server {
namespace {

// The backend the server runs its calls on: reference, cpu, or cuda beside the process's one cpu
// backend (Backend::For picks which of the two runs each call). --threads sizes that cpu backend's
// pool whichever backend serves.
absl::StatusOr<std::unique_ptr<kernels::Backend>> MakeBackend(const ServerOptions& options) {
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads: expected >= 0 (0 = one per core), got ", options.threads));
  }
  if (options.cuda_small_call_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_small_call_bytes: expected >= 0, got ", options.cuda_small_call_bytes));
  }
  if (options.backend == "reference") return kernels::MakeReferenceBackend();
  if (options.backend != "cpu" && options.backend != "auto" && options.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend: expected auto, cpu, reference or cuda, got \"", options.backend, "\""));
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::MakeCpuBackend(kernels::CpuBackendOptions{options.threads, ""}));
  const bool cuda = options.backend == "cuda" ||
                    (options.backend == "auto" && !kernels::ListCudaDevices().empty());
  if (!cuda) return cpu;
  absl::StatusOr<std::unique_ptr<kernels::Backend>> device = kernels::MakeCudaBackend(
      kernels::CudaBackendOptions{.device = options.cuda_device,
                                  .small_call_bytes = options.cuda_small_call_bytes},
      std::move(cpu));
  if (!device.ok()) {
    return absl::Status(device.status().code(),
                        absl::StrCat("backend: ", device.status().message()));
  }
  return device;
}

AdmissionOptions ResolveAdmission(const ServerOptions& options) {
  AdmissionOptions out;
  out.max_inflight_bytes = options.max_inflight_bytes >= 0
                               ? options.max_inflight_bytes
                               : DefaultMaxInflightBytes(options.max_message_bytes);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  out.max_heavy_calls =
      options.max_heavy_calls >= 0 ? options.max_heavy_calls : std::max(1, cores - 1);
  return out;
}

class PosencServerImpl final : public PosencServer {
 public:
  PosencServerImpl(const ServerOptions& options, std::unique_ptr<kernels::Backend> backend)
      : options_(options),
        backend_(std::move(backend)),
        metrics_(absl::StrCat(backend_->name(), " (", backend_->detail(), ")")),
        rope_cache_(static_cast<size_t>(std::max<int64_t>(0, options.cache_entries)),
                    static_cast<size_t>(std::max<int64_t>(0, options.cache_bytes))),
        admission_(ResolveAdmission(options)),
        shared_memory_(SharedMemoryOptions{options.allow_shared_memory,
                                           options.max_shared_memory_regions,
                                           options.max_shared_memory_bytes}),
        runner_(HandlerContext{
            backend_.get(),
            Limits{options.max_output_elements, options.max_message_bytes,
                   admission_.options().max_inflight_bytes, admission_.options().max_heavy_calls},
            &tables_, false, &rope_cache_, &metrics_, kernels::ListCudaDevices(),
            backend_->name() == "cuda" ? options.cuda_device : -1,
            [this](const absl::Status& why) { OnBackendUnusable(why); }, &shared_memory_}),
        service_(&runner_),
        inference_(&runner_) {}

  ~PosencServerImpl() override {
    Shutdown(std::chrono::system_clock::now());
    Wait();
  }

  absl::Status Init() {
    POSENC_ASSIGN_OR_RETURN(
        const std::shared_ptr<grpc::ServerCredentials> credentials,
        MakeServerCredentials(
            TlsFiles{options_.tls_cert_file, options_.tls_key_file, options_.tls_client_ca_file}));
    if (!options_.tables_dir.empty()) {
      if (absl::Status status = LoadTableDirectory(options_.tables_dir, &tables_); !status.ok()) {
        return absl::Status(status.code(), absl::StrCat("--tables: ", status.message()));
      }
    }
    if (!options_.metrics_address.empty()) {
      POSENC_RETURN_IF_ERROR(metrics_.Serve(options_.metrics_address));
    }
    runner_.set_metrics(&metrics_);
    runner_.set_admission(&admission_);
    if (options_.retain_free_memory_bytes > 0) {
      idle_release_.emplace([this] { return runner_.calls_started(); },
                            [this] { return runner_.calls_in_flight(); }, kReleaseFreeMemoryAfter);
    }
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.listen_address, credentials, &port_);
    const int max_bytes = static_cast<int>(options_.max_message_bytes);
    builder.SetMaxReceiveMessageSize(max_bytes);
    builder.SetMaxSendMessageSize(max_bytes);
    // A second server on a busy port must fail, not silently share it (SO_REUSEPORT).
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // gRPC's own memory (transport buffers of requests being read and responses being written)
    // under a quota as large as the in-flight budget: under pressure gRPC shrinks its buffers and
    // reads less instead of growing without bound. Our tensors are counted by admission_.
    if (const int64_t bytes = admission_.options().max_inflight_bytes; bytes > 0) {
      grpc::ResourceQuota quota("posenc");
      quota.Resize(static_cast<size_t>(std::max(bytes, 3 * options_.max_message_bytes)));
      builder.SetResourceQuota(quota);
    }
    builder.RegisterService(&service_);
    builder.RegisterService(&inference_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("listen: could not listen on \"",
                                                 options_.listen_address,
                                                 "\" (address in use, or not a valid host:port?)"));
    }
    if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
      // Probes may ask for the whole server ("") or for the service by its full name.
      health->SetServingStatus(std::string(v1::PositionEncoding::service_full_name()), true);
      health->SetServingStatus(std::string(inference::GRPCInferenceService::service_full_name()),
                               true);
      health->SetServingStatus(true);
    }
    return absl::OkStatus();
  }

  std::string backend_description() const override {
    return absl::StrCat(backend_->name(), " (", backend_->detail(), ")");
  }
  int port() const override { return port_; }
  int metrics_port() const override { return metrics_.port(); }

  void Shutdown(std::chrono::system_clock::time_point deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_ || server_ == nullptr) return;
    shut_down_ = true;
    if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
      health->SetServingStatus(false);
    }
    runner_.StartDraining(deadline);
    // The grace period: health checks still answer (NOT_SERVING) so load balancers notice.
    if (options_.drain_grace.count() > 0) {
      std::this_thread::sleep_until(
          std::min(deadline, std::chrono::system_clock::now() + options_.drain_grace));
    }
    // Then the calls still running finish (or reach the deadline) while new ones keep getting
    // UNAVAILABLE from the service; only then does the listener close. gRPC would cancel a call
    // that reaches a shutting-down server (CANCELLED, which clients do not retry).
    // Once our calls are done, what is left are other services' streams, chiefly clients'
    // grpc.health.v1 Watch streams (client-side health checking), which would otherwise hold the
    // shutdown until the deadline: they get a moment (calls refused just now finish sending
    // UNAVAILABLE), then are cancelled.
    const bool idle = runner_.WaitUntilIdle(deadline);
    server_->Shutdown(
        idle ? std::min(deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(250))
             : deadline);
  }

  void Wait() override {
    if (server_ != nullptr) server_->Wait();
  }

  std::shared_ptr<grpc::Channel> InProcessChannel() override {
    grpc::ChannelArguments args;
    const int max_bytes = static_cast<int>(options_.max_message_bytes);
    args.SetMaxReceiveMessageSize(max_bytes);
    args.SetMaxSendMessageSize(max_bytes);
    return server_->InProcessChannel(args);
  }

 private:
  // The device backend broke (a sticky CUDA error; calls now run on its host backend): logged
  // once, and health goes NOT_SERVING so that readiness probes take the server out of rotation
  // and liveness probes restart it (the CUDA context only recovers in a new process).
  void OnBackendUnusable(const absl::Status& why) {
    if (backend_unusable_.exchange(true)) return;
    spdlog::error("backend {} unusable, calls run on {} from now on; health NOT_SERVING: {}",
                  std::string(backend_->name()), std::string(backend_->host()->name()),
                  std::string(why.message()));
    if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
      health->SetServingStatus(false);
    }
  }

  const ServerOptions options_;
  std::unique_ptr<kernels::Backend> backend_;  // cuda owns (shares) its host backend
  std::atomic<bool> backend_unusable_{false};
  TableRegistry tables_;  // filled from options_.tables_dir by Init, read-only afterwards
  Metrics metrics_;       // outlives service_ and server_ (declared before them)
  kernels::RopeFrequencyCache rope_cache_;  // shared by every call
  AdmissionControl admission_;              // outlives service_ and server_
  SharedMemoryRegistry shared_memory_;      // outlives service_ and server_
  CallRunner runner_;                       // both services' calls run on it
  PositionEncodingService service_;
  InferenceService inference_;
  std::unique_ptr<grpc::Server> server_;
  // Hands the allocator's free memory back after a quiet spell (options_.retain_free_memory_bytes).
  std::optional<v1::IdleMemoryRelease> idle_release_;
  int port_ = 0;
  std::mutex mu_;
  bool shut_down_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PosencServer>> PosencServer::Start(const ServerOptions& options) {
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: expected 1 .. 2147483647 (protobuf's limit), got ",
                     options.max_message_bytes));
  }
  if (options.max_output_elements < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_output_elements: expected >= 1, got ", options.max_output_elements));
  }
  POSENC_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, MakeBackend(options));
  auto server = std::make_unique<PosencServerImpl>(options, std::move(backend));
  POSENC_RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<PosencServer>(std::move(server));
}

}  // namespace posenc::server
