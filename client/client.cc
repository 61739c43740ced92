#include "posenc/client.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>

#include <algorithm>
#include <future>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/convert.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kernels/common/status.h"
#include "posenc/v1/posenc.grpc.pb.h"

namespace posenc::client {
namespace {

// absl::StatusCode values are the gRPC codes; the cast below relies on it.
static_assert(static_cast<int>(absl::StatusCode::kCancelled) == grpc::StatusCode::CANCELLED);
static_assert(static_cast<int>(absl::StatusCode::kInvalidArgument) ==
              grpc::StatusCode::INVALID_ARGUMENT);
static_assert(static_cast<int>(absl::StatusCode::kDeadlineExceeded) ==
              grpc::StatusCode::DEADLINE_EXCEEDED);
static_assert(static_cast<int>(absl::StatusCode::kOutOfRange) == grpc::StatusCode::OUT_OF_RANGE);
static_assert(static_cast<int>(absl::StatusCode::kResourceExhausted) ==
              grpc::StatusCode::RESOURCE_EXHAUSTED);
static_assert(static_cast<int>(absl::StatusCode::kUnimplemented) ==
              grpc::StatusCode::UNIMPLEMENTED);
static_assert(static_cast<int>(absl::StatusCode::kUnavailable) == grpc::StatusCode::UNAVAILABLE);
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) ==
              grpc::StatusCode::UNAUTHENTICATED);

absl::Status ToAbsl(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

int ClampToInt(int64_t v) {
  return static_cast<int>(std::clamp<int64_t>(v, 0, std::numeric_limits<int>::max()));
}

// The gRPC service config: load balancing and retries of UNAVAILABLE (every posenc RPC is
// idempotent, so a retry is always safe).
std::string ServiceConfigJson(const ClientOptions& options) {
  std::string config = "{";
  if (!options.load_balancing_policy.empty()) {
    absl::StrAppend(&config, R"("loadBalancingConfig": [{")", options.load_balancing_policy,
                    R"(": {}}])");
  }
  if (options.max_attempts > 1) {
    if (config.size() > 1) config += ", ";
    // gRPC caps maxAttempts at 5.
    absl::StrAppend(&config,
                    R"("methodConfig": [{"name": [{"service": "posenc.v1.PositionEncoding"}, )",
                    R"({"service": "grpc.health.v1.Health"}], "retryPolicy": {"maxAttempts": )",
                    std::min(options.max_attempts, 5),
                    R"(, "initialBackoff": "0.1s", "maxBackoff": "2s", "backoffMultiplier": 2, )",
                    R"("retryableStatusCodes": ["UNAVAILABLE"]}}])");
  }
  return config + "}";
}

// A unary method of the generated stub, e.g. &v1::PositionEncoding::Stub::RopeCache.
template <typename Request, typename Response>
using Method = grpc::Status (v1::PositionEncoding::Stub::*)(grpc::ClientContext*, const Request&,
                                                            Response*);

// Moves a tensor out of a response; `field` names it in the error for an inconsistent one.
absl::StatusOr<Tensor> Take(v1::Tensor* tensor, absl::string_view field) {
  return internal::FromProto(std::move(*tensor), field);
}

}  // namespace

std::string_view HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kUnknown: return "UNKNOWN";
    case HealthStatus::kServing: return "SERVING";
    case HealthStatus::kNotServing: return "NOT_SERVING";
    case HealthStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
  }
  return "UNKNOWN";
}

struct Client::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PositionEncoding::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub;
  std::chrono::milliseconds timeout;

  Impl(std::shared_ptr<grpc::Channel> c, std::chrono::milliseconds t)
      : channel(std::move(c)),
        stub(v1::PositionEncoding::NewStub(channel)),
        health_stub(grpc::health::v1::Health::NewStub(channel)),
        timeout(t) {}

  void PrepareContext(grpc::ClientContext* context) const {
    context->set_deadline(std::chrono::system_clock::now() + timeout);
  }

  // One unary call through the generated stub, e.g. Call(&Stub::RopeCache, request, &response).
  template <typename Request, typename Response>
  absl::Status Call(Method<Request, Response> method, const Request& request,
                    Response* response) const {
    grpc::ClientContext context;
    PrepareContext(&context);
    return ToAbsl((stub.get()->*method)(&context, request, response));
  }

  // The request of `options` (internal::ToRequest) sent with Call; the response.
  template <typename Options, typename Request, typename Response>
  absl::StatusOr<Response> Send(Method<Request, Response> method, const Options& options) const {
    POSENC_ASSIGN_OR_RETURN(const Request request, internal::ToRequest(options));
    Response response;
    POSENC_RETURN_IF_ERROR(Call(method, request, &response));
    return response;
  }

  // Send for an RPC whose response is several fields: the client's result (internal::FromProto).
  template <typename Options, typename Request, typename Response>
  auto SendForResult(Method<Request, Response> method, const Options& options) const
      -> decltype(internal::FromProto(std::declval<Response&&>())) {
    POSENC_ASSIGN_OR_RETURN(Response response, Send(method, options));
    return internal::FromProto(std::move(response));
  }

  // Send for an RPC whose response is one tensor: the tensor `tensor` returns, named `field`.
  template <typename Options, typename Request, typename Response>
  absl::StatusOr<Tensor> SendForTensor(Method<Request, Response> method, const Options& options,
                                       v1::Tensor* (Response::*tensor)(),
                                       absl::string_view field) const {
    POSENC_ASSIGN_OR_RETURN(Response response, Send(method, options));
    return Take((response.*tensor)(), field);
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("target: must not be empty");
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout: must be positive, got ", options.timeout.count(), "ms"));
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: must be positive, got ", options.max_message_bytes));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(ClampToInt(options.max_message_bytes));
  args.SetMaxSendMessageSize(ClampToInt(options.max_message_bytes));
  args.SetServiceConfigJSON(ServiceConfigJson(options));
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    ssl.pem_private_key = options.tls_client_key;
    ssl.pem_cert_chain = options.tls_client_cert;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  return FromChannel(grpc::CreateCustomChannel(target, credentials, args), options);
}

std::unique_ptr<Client> Client::FromChannel(std::shared_ptr<grpc::Channel> channel,
                                            const ClientOptions& options) {
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(std::move(channel), options.timeout)));
}

std::shared_ptr<grpc::Channel> Client::channel() const { return impl_->channel; }

absl::StatusOr<Tensor> Client::Sinusoidal(const SinusoidalOptions& options) const {
  return impl_->SendForTensor(&v1::PositionEncoding::Stub::Sinusoidal, options,
                              &v1::SinusoidalResponse::mutable_table, "table");
}

absl::StatusOr<Tensor> Client::AddPositionEncoding(
    const AddPositionEncodingOptions& options) const {
  return impl_->SendForTensor(&v1::PositionEncoding::Stub::AddPositionEncoding, options,
                              &v1::AddPositionEncodingResponse::mutable_y, "y");
}

absl::StatusOr<RopeCacheResult> Client::RopeCache(const RopeCacheOptions& options) const {
  return impl_->SendForResult(&v1::PositionEncoding::Stub::RopeCache, options);
}

absl::StatusOr<ApplyRopeResult> Client::ApplyRope(const ApplyRopeOptions& options) const {
  return impl_->SendForResult(&v1::PositionEncoding::Stub::ApplyRope, options);
}

absl::StatusOr<Tensor> Client::AlibiSlopes(const AlibiSlopesOptions& options) const {
  return impl_->SendForTensor(&v1::PositionEncoding::Stub::AlibiSlopes, options,
                              &v1::AlibiSlopesResponse::mutable_slopes, "slopes");
}

absl::StatusOr<AlibiBiasResult> Client::AlibiBias(const AlibiBiasOptions& options) const {
  return impl_->SendForResult(&v1::PositionEncoding::Stub::AlibiBias, options);
}

absl::StatusOr<Tensor> Client::RelativeBias(const RelativeBiasOptions& options) const {
  return impl_->SendForTensor(&v1::PositionEncoding::Stub::RelativeBias, options,
                              &v1::RelativeBiasResponse::mutable_bias, "bias");
}

absl::StatusOr<Tensor> Client::RelativeEmbedding(const RelativeEmbeddingOptions& options) const {
  return impl_->SendForTensor(&v1::PositionEncoding::Stub::RelativeEmbedding, options,
                              &v1::RelativeEmbeddingResponse::mutable_embeddings, "embeddings");
}

absl::StatusOr<ServerInfo> Client::GetServerInfo() const {
  v1::GetServerInfoResponse response;
  POSENC_RETURN_IF_ERROR(impl_->Call(&v1::PositionEncoding::Stub::GetServerInfo,
                                     v1::GetServerInfoRequest(), &response));
  return internal::FromProto(response);
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& service) const {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  impl_->PrepareContext(&context);
  // The callback API, as the hand-encoded GenericStub call this replaced, so the client behaves
  // as before (a channel used only by blocking calls reads a draining server's GOAWAY late).
  std::promise<grpc::Status> done;
  impl_->health_stub->async()->Check(&context, &request, &response,
                                     [&done](grpc::Status status) { done.set_value(status); });
  POSENC_RETURN_IF_ERROR(ToAbsl(done.get_future().get()));
  // proto3 enums are open: a value this client does not know reads as UNKNOWN.
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING: return HealthStatus::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING: return HealthStatus::kNotServing;
    case grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN:
      return HealthStatus::kServiceUnknown;
    default: return HealthStatus::kUnknown;
  }
}

}  // namespace posenc::client
