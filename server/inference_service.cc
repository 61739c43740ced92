#include "server/inference_service.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/error_details.h"
#include "server/handlers.h"
#include "server/inference_convert.h"
#include "server/inference_models.h"
#include "server/status.h"

#ifndef POSENC_VERSION
#define POSENC_VERSION "unknown"
#endif

namespace posenc::server {
namespace {

using inference::GRPCInferenceService;

// A ModelReady / ModelMetadata / ModelInfer call's model, or its NOT_FOUND (reason
// MODEL_NOT_FOUND, not the shared-memory reason of the code).
grpc::Status ResolveModel(const std::string& name, const std::string& version, bool infer_request,
                          const InferenceModel** model) {
  absl::StatusOr<const InferenceModel*> found =
      infer_request ? ResolveInferenceModel(name, version, "model_name", "model_version")
                    : ResolveInferenceModel(name, version, "name", "version");
  if (found.ok()) {
    *model = *found;
    return grpc::Status::OK;
  }
  return WithErrorDetails(ToGrpcStatus(found.status()), ErrorCause{.reason = "MODEL_NOT_FOUND"});
}

grpc::Status DescribeServer(const HandlerContext& ctx, inference::ServerMetadataResponse* resp) {
  resp->set_name("posenc");
  resp->set_version(POSENC_VERSION);
  if (ctx.shared_memory != nullptr && ctx.shared_memory->options().allowed) {
    resp->add_extensions("system_shared_memory");
    if (ctx.backend->reads_device_memory()) resp->add_extensions("cuda_shared_memory");
  }
  return grpc::Status::OK;
}

grpc::Status RunModelInfer(const HandlerContext& ctx, inference::ModelInferRequest& req,
                           inference::ModelInferResponse* resp) {
  const InferenceModel* model = nullptr;
  if (grpc::Status s = ResolveModel(req.model_name(), req.model_version(), true, &model); !s.ok()) {
    return s;
  }
  return model->infer(ctx, *model, req, resp);
}

// Triton's unsigned offsets and sizes as posenc's int64 ones.
absl::StatusOr<int64_t> SignedBytes(uint64_t value, absl::string_view field) {
  if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(value);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected at most 2^63 - 1, got ", value));
}

grpc::Status RegisterRegion(const HandlerContext& ctx,
                            const inference::SystemSharedMemoryRegisterRequest& req) {
  v1::RegisterSharedMemoryRequest posenc;
  posenc.set_name(req.name());
  posenc.set_key(req.key());
  absl::StatusOr<int64_t> offset = SignedBytes(req.offset(), "offset");
  if (!offset.ok()) return ToGrpcStatus(offset.status());
  absl::StatusOr<int64_t> byte_size = SignedBytes(req.byte_size(), "byte_size");
  if (!byte_size.ok()) return ToGrpcStatus(byte_size.status());
  posenc.set_offset(*offset);
  posenc.set_byte_size(*byte_size);
  v1::RegisterSharedMemoryResponse unused;
  return HandleRegisterSharedMemory(ctx, posenc, &unused);
}

grpc::Status RegionStatus(const HandlerContext& ctx,
                          const inference::SystemSharedMemoryStatusRequest& req,
                          inference::SystemSharedMemoryStatusResponse* resp) {
  v1::SharedMemoryStatusRequest posenc;
  posenc.set_name(req.name());
  posenc.set_kind(v1::SHARED_MEMORY_KIND_SYSTEM);
  v1::SharedMemoryStatusResponse regions;
  if (grpc::Status s = HandleSharedMemoryStatus(ctx, posenc, &regions); !s.ok()) return s;
  for (const v1::SharedMemoryRegionStatus& region : regions.regions()) {
    auto& out = (*resp->mutable_regions())[region.name()];
    out.set_name(region.name());
    out.set_key(region.key());
    out.set_offset(static_cast<uint64_t>(region.offset()));
    out.set_byte_size(static_cast<uint64_t>(region.byte_size()));
  }
  return grpc::Status::OK;
}

grpc::Status UnregisterRegion(const HandlerContext& ctx,
                              const inference::SystemSharedMemoryUnregisterRequest& req) {
  v1::UnregisterSharedMemoryRequest posenc;
  posenc.set_name(req.name());
  posenc.set_kind(v1::SHARED_MEMORY_KIND_SYSTEM);
  v1::UnregisterSharedMemoryResponse unused;
  return HandleUnregisterSharedMemory(ctx, posenc, &unused);
}

// Triton's CUDA shared-memory RPCs: the same registry, CUDA regions only.
grpc::Status RegisterCudaRegion(const HandlerContext& ctx,
                                const inference::CudaSharedMemoryRegisterRequest& req) {
  v1::RegisterCudaSharedMemoryRequest posenc;
  posenc.set_name(req.name());
  posenc.set_raw_handle(req.raw_handle());
  posenc.set_device_id(req.device_id());
  absl::StatusOr<int64_t> byte_size = SignedBytes(req.byte_size(), "byte_size");
  if (!byte_size.ok()) return ToGrpcStatus(byte_size.status());
  posenc.set_byte_size(*byte_size);
  v1::RegisterCudaSharedMemoryResponse unused;
  return HandleRegisterCudaSharedMemory(ctx, posenc, &unused);
}

grpc::Status CudaRegionStatus(const HandlerContext& ctx,
                              const inference::CudaSharedMemoryStatusRequest& req,
                              inference::CudaSharedMemoryStatusResponse* resp) {
  v1::SharedMemoryStatusRequest posenc;
  posenc.set_name(req.name());
  posenc.set_kind(v1::SHARED_MEMORY_KIND_CUDA);
  v1::SharedMemoryStatusResponse regions;
  if (grpc::Status s = HandleSharedMemoryStatus(ctx, posenc, &regions); !s.ok()) return s;
  for (const v1::SharedMemoryRegionStatus& region : regions.regions()) {
    auto& out = (*resp->mutable_regions())[region.name()];
    out.set_name(region.name());
    out.set_device_id(static_cast<uint64_t>(region.device_id()));
    out.set_byte_size(static_cast<uint64_t>(region.byte_size()));
  }
  return grpc::Status::OK;
}

grpc::Status UnregisterCudaRegion(const HandlerContext& ctx,
                                  const inference::CudaSharedMemoryUnregisterRequest& req) {
  v1::UnregisterSharedMemoryRequest posenc;
  posenc.set_name(req.name());
  posenc.set_kind(v1::SHARED_MEMORY_KIND_CUDA);
  v1::UnregisterSharedMemoryResponse unused;
  return HandleUnregisterSharedMemory(ctx, posenc, &unused);
}

// The probes: answered while draining, logged with the default summaries.
CallRunner::Method Probe(const char* name) { return {.name = name, .serve_while_draining = true}; }

}  // namespace

InferenceService::InferenceService(CallRunner* runner) : runner_(runner) {
  RegisterProbes();
  RegisterInference();
  RegisterSharedMemory();
}

template <typename Request, typename Response, typename Handle>
void InferenceService::Register(int index, const CallRunner::Method& method, Handle handle) {
  CheckMethodIndex(GRPCInferenceService::service_full_name(), index, method.name,
                   Request::descriptor());
  MarkMethodRawCallback(index, runner_->RawHandler<Request, Response>(method, handle));
}

bool InferenceService::Ready() const {
  return !runner_->draining() && runner_->context().backend->Usable().ok();
}

void InferenceService::RegisterProbes() {
  using namespace inference;  // NOLINT(google-build-using-namespace): the message names
  Register<ServerLiveRequest, ServerLiveResponse>(
      0, Probe("ServerLive"), [](const ServerLiveRequest&, ServerLiveResponse* resp) {
        resp->set_live(true);
        return grpc::Status::OK;
      });
  Register<ServerReadyRequest, ServerReadyResponse>(
      1, Probe("ServerReady"), [this](const ServerReadyRequest&, ServerReadyResponse* resp) {
        resp->set_ready(Ready());
        return grpc::Status::OK;
      });
  Register<ModelReadyRequest, ModelReadyResponse>(
      2, Probe("ModelReady"), [this](const ModelReadyRequest& req, ModelReadyResponse* resp) {
        const InferenceModel* model = nullptr;
        grpc::Status status = ResolveModel(req.name(), req.version(), false, &model);
        resp->set_ready(status.ok() && Ready());
        return status;
      });
  Register<ServerMetadataRequest, ServerMetadataResponse>(
      3, Probe("ServerMetadata"),
      [ctx = &runner_->context()](const ServerMetadataRequest&, ServerMetadataResponse* resp) {
        return DescribeServer(*ctx, resp);
      });
}

void InferenceService::RegisterInference() {
  using namespace inference;  // NOLINT(google-build-using-namespace): the message names
  Register<ModelMetadataRequest, ModelMetadataResponse>(
      4, Probe("ModelMetadata"), [](const ModelMetadataRequest& req, ModelMetadataResponse* resp) {
        const InferenceModel* model = nullptr;
        grpc::Status status = ResolveModel(req.name(), req.version(), false, &model);
        if (status.ok()) FillModelMetadata(*model, resp);
        return status;
      });
  Register<ModelInferRequest, ModelInferResponse>(
      5,
      {.name = "ModelInfer",
       .summarize_request = &SummarizeInferRequest,
       .summarize_response = &SummarizeInferResponse,
       .summarize_request_first = true},  // its handler moves raw_input_contents out
      [ctx = &runner_->context()](ModelInferRequest& req, ModelInferResponse* resp) {
        return RunModelInfer(*ctx, req, resp);
      });
}

void InferenceService::RegisterSharedMemory() {
  using namespace inference;  // NOLINT(google-build-using-namespace): the message names
  const HandlerContext* ctx = &runner_->context();
  Register<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>(
      6, {.name = "SystemSharedMemoryStatus"},
      [ctx](const SystemSharedMemoryStatusRequest& req, SystemSharedMemoryStatusResponse* resp) {
        return RegionStatus(*ctx, req, resp);
      });
  Register<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>(
      7, {.name = "SystemSharedMemoryRegister"},
      [ctx](const SystemSharedMemoryRegisterRequest& req, SystemSharedMemoryRegisterResponse*) {
        return RegisterRegion(*ctx, req);
      });
  Register<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>(
      8, {.name = "SystemSharedMemoryUnregister"},
      [ctx](const SystemSharedMemoryUnregisterRequest& req, SystemSharedMemoryUnregisterResponse*) {
        return UnregisterRegion(*ctx, req);
      });
  Register<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>(
      9, {.name = "CudaSharedMemoryStatus"},
      [ctx](const CudaSharedMemoryStatusRequest& req, CudaSharedMemoryStatusResponse* resp) {
        return CudaRegionStatus(*ctx, req, resp);
      });
  Register<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>(
      10, {.name = "CudaSharedMemoryRegister"},
      [ctx](const CudaSharedMemoryRegisterRequest& req, CudaSharedMemoryRegisterResponse*) {
        return RegisterCudaRegion(*ctx, req);
      });
  Register<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>(
      11, {.name = "CudaSharedMemoryUnregister"},
      [ctx](const CudaSharedMemoryUnregisterRequest& req, CudaSharedMemoryUnregisterResponse*) {
        return UnregisterCudaRegion(*ctx, req);
      });
}

}  // namespace posenc::server
