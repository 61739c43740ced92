#include "posenc/client.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/convert.h"
#include "client/errors_internal.h"
#include "client/split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kernels/common/status.h"
#include "posenc/errors.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "proto/posenc/v1/freed_memory.h"

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

absl::Status ToAbsl(const grpc::Status& status) { return internal::FromGrpcStatus(status); }

int ClampToInt(int64_t v) {
  return static_cast<int>(std::clamp<int64_t>(v, 0, std::numeric_limits<int>::max()));
}

// The gRPC service config: load balancing and retries of UNAVAILABLE and of RESOURCE_EXHAUSTED
// (every posenc RPC is idempotent, so a retry is always safe). The server marks which
// RESOURCE_EXHAUSTED is worth a retry: a busy server's (admission) carries a retry pushback,
// a request over a hard limit the pushback -1, which stops gRPC from retrying it.
std::string ServiceConfigJson(const ClientOptions& options) {
  std::string config = "{";
  if (!options.load_balancing_policy.empty()) {
    absl::StrAppend(&config, R"("loadBalancingConfig": [{")", options.load_balancing_policy,
                    R"(": {}}])");
    // The server's overall status ("" service): NOT_SERVING from the start of a drain.
    if (options.health_check) {
      absl::StrAppend(&config, R"(, "healthCheckConfig": {"serviceName": ""})");
    }
  }
  if (options.max_attempts > 1) {
    if (config.size() > 1) config += ", ";
    // gRPC caps maxAttempts at 5.
    absl::StrAppend(&config,
                    R"("methodConfig": [{"name": [{"service": "posenc.v1.PositionEncoding"}, )",
                    R"({"service": "grpc.health.v1.Health"}], "retryPolicy": {"maxAttempts": )",
                    std::min(options.max_attempts, 5),
                    R"(, "initialBackoff": "0.1s", "maxBackoff": "2s", "backoffMultiplier": 2, )",
                    R"("retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}])");
  }
  return config + "}";
}

// A unary method of the generated stub, e.g. &v1::PositionEncoding::Stub::RopeCache, and its
// callback form, e.g. &v1::PositionEncoding::Stub::async::RopeCache.
template <typename Request, typename Response>
using Method = grpc::Status (v1::PositionEncoding::Stub::*)(grpc::ClientContext*, const Request&,
                                                            Response*);
template <typename Request, typename Response>
using AsyncMethod = void (v1::PositionEncoding::Stub::async::*)(grpc::ClientContext*,
                                                                const Request*, Response*,
                                                                std::function<void(grpc::Status)>);

// Moves a tensor out of a response; `field` names it in the error for an inconsistent one.
absl::StatusOr<Tensor> Take(v1::Tensor* tensor, absl::string_view field) {
  return internal::FromProto(std::move(*tensor), field);
}

// Response -> result: the one tensor `tensor` returns, or internal::FromProto of the whole.
template <typename Response>
constexpr auto TensorOf(v1::Tensor* (Response::*tensor)(), absl::string_view field) {
  return [tensor, field](Response&& response) { return Take((response.*tensor)(), field); };
}
constexpr auto kWhole = [](auto&& response) {
  return internal::FromProto(std::forward<decltype(response)>(response));
};
// The single-tensor responses, for their synchronous and asynchronous calls alike.
constexpr auto kSinusoidalTable = TensorOf(&v1::SinusoidalResponse::mutable_table, "table");
constexpr auto kAddPositionEncodingY = TensorOf(&v1::AddPositionEncodingResponse::mutable_y, "y");
constexpr auto kAlibiSlopes = TensorOf(&v1::AlibiSlopesResponse::mutable_slopes, "slopes");
constexpr auto kRelativeBias = TensorOf(&v1::RelativeBiasResponse::mutable_bias, "bias");
constexpr auto kRelativeEmbeddings =
    TensorOf(&v1::RelativeEmbeddingResponse::mutable_embeddings, "embeddings");

bool IsReference(const Tensor& tensor) { return tensor.shared_memory.has_value(); }
bool IsReference(const std::optional<Tensor>& tensor) {
  return tensor.has_value() && tensor->shared_memory.has_value();
}

// Whether a request uses shared memory: an output placed there, or an input tensor (positions
// included) referring to it. Such a request is sent whole: it is a small message, and its
// outputs go where the caller put them.
template <typename Options>
bool UsesSharedMemory(const Options& options) {
  bool uses = !options.output_shared_memory.empty();
  if constexpr (requires { options.positions; }) uses |= IsReference(options.positions.tensor);
  if constexpr (requires { options.q; }) uses |= IsReference(options.q) || IsReference(options.k);
  if constexpr (requires { options.x; }) {
    uses |= IsReference(options.x) ||
            (options.learned.has_value() && IsReference(options.learned->table_inline));
  }
  if constexpr (requires { options.table_inline; }) uses |= IsReference(options.table_inline);
  if constexpr (requires { options.attention_mask; }) uses |= IsReference(options.attention_mask);
  return uses;
}

// The request of a bias call that is fetched in its compact form and expanded here (posenc.proto,
// BiasForm): an unspecified form, with compact_biases on and more than one query, in no shared
// memory. nullopt otherwise.
template <typename Options>
std::optional<Options> CompactRequest(const Options& options, const ClientOptions& client) {
  if (options.form != BiasForm::kUnspecified || !client.compact_biases || options.q_len <= 1 ||
      UsesSharedMemory(options)) {
    return std::nullopt;
  }
  Options compact = options;
  compact.form = BiasForm::kCompact;
  return compact;
}

// The path of the RPC that takes `Request` ("/posenc.v1.PositionEncoding/ApplyRope"): each
// request message belongs to one RPC of the service.
template <typename Request>
const std::string& MethodPath() {
  static const std::string path = [] {
    const google::protobuf::ServiceDescriptor* service =
        Request::descriptor()->file()->FindServiceByName("PositionEncoding");
    for (int i = 0; service != nullptr && i < service->method_count(); ++i) {
      if (service->method(i)->input_type() == Request::descriptor()) {
        return absl::StrCat("/", service->full_name(), "/", service->method(i)->name());
      }
    }
    return std::string();
  }();
  return path;
}

// INTERNAL for a response whose bytes do not parse as `type`, naming what fails.
absl::Status Unparsed(const grpc::ByteBuffer& bytes, const google::protobuf::Descriptor* type) {
  const std::string why = v1::DescribeParseFailure(bytes, type);
  return absl::InternalError(absl::StrCat("the server's response (", bytes.Length(),
                                          " bytes) does not parse as ", type->full_name(),
                                          why.empty() ? "" : ": ", why));
}

// The response of a call parsed from its bytes; INTERNAL, naming what fails, when they do not
// parse.
template <typename Response>
absl::Status ParseResponse(const grpc::ByteBuffer& bytes, Response* response) {
  if (v1::ParseFromByteBuffer(bytes, response)) return absl::OkStatus();
  return Unparsed(bytes, Response::descriptor());
}

// A response whose large tensors' bytes stay where gRPC received them, for a caller that copies
// them once to where they go (a split piece's answer into the joined result).
template <typename Message>
struct WireResponse {
  Message message;
  v1::WireTensors left;
};
template <typename Message>
absl::Status ParseResponse(const grpc::ByteBuffer& bytes, WireResponse<Message>* response) {
  if (v1::ParseLeavingTensorData(bytes, &response->message, &response->left)) {
    return absl::OkStatus();
  }
  return Unparsed(bytes, Message::descriptor());
}

// internal::ApplyRopeRequestBytes of the request `without_bytes` (ToRequestWithoutBytes) once
// q's and k's bytes are added.
internal::RequestBytes ApplyRopeBytes(const ApplyRopeOptions& options,
                                      const v1::ApplyRopeRequest& without_bytes) {
  const size_t k = options.k.has_value() ? options.k->data.size() : 0;
  return {static_cast<int64_t>(options.q.data.size() + k),
          static_cast<int64_t>(without_bytes.ByteSizeLong())};
}

// At most this many pieces of a split request are in flight at once.
constexpr size_t kMaxPiecesInFlight = 8;

// A split ApplyRope's pieces send the runs of their boxes from this size on from the caller's
// tensors (BSHD cut along heads: one run per token), and copy the smaller ones.
constexpr size_t kLendRunsFrom = size_t{4} << 10;

}  // namespace

struct Client::Impl {
  // Adds to a serialized request before it is sent (v1::BorrowedBytes::Append).
  using Extend = std::function<void(grpc::ByteBuffer*)>;

  std::shared_ptr<grpc::Channel> channel;
  // posenc's calls go through the generic stub on byte buffers (Invoke); the generated stub
  // types name the RPCs.
  mutable grpc::GenericStub generic_stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub;
  ClientOptions options;
  // The server's message limit: 0 until known (GetServerInfo, once it answers), -1 when the
  // server reports none (then only the client's own limit applies).
  mutable std::atomic<int64_t> server_limit{0};
  // The server's --max_heavy_calls (0: unknown or unbounded): how many split pieces to keep in
  // flight, so that they do not refuse one another.
  mutable std::atomic<int64_t> server_heavy_calls{0};
  // The server's tables by name (GetServerInfo), for the output sizes of requests naming one.
  mutable std::mutex tables_mu;
  mutable std::map<std::string, std::vector<int64_t>> server_tables;

  Impl(std::shared_ptr<grpc::Channel> c, ClientOptions o)
      : channel(std::move(c)),
        generic_stub(channel),
        health_stub(grpc::health::v1::Health::NewStub(channel)),
        options(std::move(o)) {}

  void PrepareContext(grpc::ClientContext* context, const CallOptions& call) const {
    context->set_deadline(std::chrono::system_clock::now() +
                          call.timeout.value_or(options.timeout));
  }

  // One unary call of `request`, e.g. Call(&Stub::RopeCache, std::move(request), &response):
  // `method` names the RPC by its types (the path comes from the request's type, MethodPath).
  // The request is serialized by v1::SerializeToByteBuffer (its tensors sent from its own
  // memory, which the call keeps alive) and the response parsed by v1::ParseFromByteBuffer.
  // `extend`, when set, adds to the serialized request (v1::BorrowedBytes).
  //
  // The calling thread waits on a completion queue of its own, as gRPC's synchronous stubs do,
  // and so receives the response itself: through the callback API the response was received
  // on gRPC's thread, which then had to wake this one (a thread hand-off per call).
  template <typename Request, typename Response>
  absl::Status Call(Method<Request, Response> /*method*/, Request request, Response* response,
                    const CallOptions& call, const Extend& extend = {}) const {
    POSENC_ASSIGN_OR_RETURN(const grpc::ByteBuffer request_bytes,
                            Serialize(std::move(request), extend));
    grpc::ClientContext context;
    PrepareContext(&context, call);
    grpc::CompletionQueue cq;
    grpc::ByteBuffer response_bytes;
    grpc::Status status;
    void* tag = nullptr;
    bool ok = false;
    {
      const std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> rpc =
          generic_stub.PrepareUnaryCall(&context, MethodPath<Request>(), request_bytes, &cq);
      rpc->StartCall();
      rpc->Finish(&response_bytes, &status, &status);
      while (cq.Next(&tag, &ok) && tag != &status) {
      }
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    if (!status.ok()) return ToAbsl(status);
    return ParseResponse(response_bytes, response);
  }

  // The bytes of `request` as sent: v1::SerializeToByteBuffer (its tensors sent from its own
  // memory, which the bytes' slices keep alive), then `extend`.
  template <typename Request>
  static absl::StatusOr<grpc::ByteBuffer> Serialize(Request request, const Extend& extend = {}) {
    grpc::ByteBuffer bytes;
    const grpc::Status serialized =
        v1::SerializeToByteBuffer(std::make_shared<const Request>(std::move(request)), &bytes);
    if (!serialized.ok()) return ToAbsl(serialized);
    if (extend) extend(&bytes);
    return bytes;
  }

  // Starts the call of the serialized request to the RPC `path` (a copy of a grpc::ByteBuffer
  // shares its slices: sending the same bytes twice copies none); `done` runs on gRPC's thread
  // with the status once `response` holds the parsed response (or the error), after the call's
  // ClientContext is gone.
  //
  // That order matters: a ClientContext holds a reference to the channel. Destroyed after `done`
  // (with the callback, on gRPC's thread), it can outlive the Client, which its caller may destroy
  // as soon as `done` has run; its reference is then the channel's last. gRPC 1.51 then shuts its
  // callback queue down from that queue's own thread, which deletes the queue and goes on reading
  // it: a double free in grpc_cq_internal_unref, and under ASan a `posenc` that crashed or hung
  // at exit (its leak check against the error report). Released before `done`, the context's
  // reference never is the last: the Client holds one until `done` has run.
  template <typename Response>
  void InvokeBytes(const std::string& path, const grpc::ByteBuffer& request_bytes,
                   Response* response, const CallOptions& call,
                   std::function<void(absl::Status)> done) const {
    struct State {
      grpc::ClientContext context;
      grpc::ByteBuffer request_bytes;
      grpc::ByteBuffer response_bytes;
    };
    auto state = std::make_shared<State>();
    state->request_bytes = request_bytes;
    PrepareContext(&state->context, call);
    generic_stub.UnaryCall(
        &state->context, path, grpc::StubOptions(), &state->request_bytes, &state->response_bytes,
        [state, response, done = std::move(done)](const grpc::Status& status) mutable {
          absl::Status result =
              status.ok() ? ParseResponse(state->response_bytes, response) : ToAbsl(status);
          state.reset();  // the ClientContext first (above)
          done(std::move(result));
        });
  }

  // The request of `options` (internal::ToRequest) sent with Send.
  template <typename Options, typename Request, typename Response, typename Convert>
  auto Unary(Method<Request, Response> method, const Options& options, const CallOptions& call,
             Convert convert) const -> decltype(convert(std::declval<Response&&>())) {
    POSENC_ASSIGN_OR_RETURN(Request request, internal::ToRequest(options));
    return Send(method, std::move(request), call, convert);
  }

  // A converted request sent with Call; the response converted.
  template <typename Request, typename Response, typename Convert>
  auto Send(Method<Request, Response> method, Request request, const CallOptions& call,
            Convert convert, const Extend& extend = {}) const
      -> decltype(convert(std::declval<Response&&>())) {
    Response response;
    POSENC_RETURN_IF_ERROR(Call(method, std::move(request), &response, call, extend));
    return convert(std::move(response));
  }

  // The same call through the callback API: the future is set on gRPC's thread when the call
  // ends, with the converted response.
  template <typename Options, typename Request, typename Response, typename Convert>
  auto Start(AsyncMethod<Request, Response> method, const Options& options, const CallOptions& call,
             Convert convert) const -> std::future<decltype(convert(std::declval<Response&&>()))> {
    return StartRequest(method, internal::ToRequest(options), call, convert);
  }

  // Start of a converted request (or of the error converting it).
  template <typename Request, typename Response, typename Convert>
  auto StartRequest(AsyncMethod<Request, Response> method, absl::StatusOr<Request> request,
                    const CallOptions& call, Convert convert) const
      -> std::future<decltype(convert(std::declval<Response&&>()))> {
    absl::StatusOr<grpc::ByteBuffer> bytes =
        request.ok() ? Serialize(*std::move(request)) : request.status();
    return StartBytes(method, bytes, call, convert);
  }

  // Start of a serialized request (or of the error serializing it).
  template <typename Request, typename Response, typename Convert>
  auto StartBytes(AsyncMethod<Request, Response> /*method*/,
                  const absl::StatusOr<grpc::ByteBuffer>& bytes, const CallOptions& call,
                  Convert convert) const
      -> std::future<decltype(convert(std::declval<Response&&>()))> {
    return StartPath<Response>(MethodPath<Request>(), bytes, call, convert);
  }

  // StartBytes of the RPC at `path`, its response a `Response` (a message, or a WireResponse).
  template <typename Response, typename Convert>
  auto StartPath(const std::string& path, const absl::StatusOr<grpc::ByteBuffer>& bytes,
                 const CallOptions& call, Convert convert) const
      -> std::future<decltype(convert(std::declval<Response&&>()))> {
    using Result = decltype(convert(std::declval<Response&&>()));
    auto promise = std::make_shared<std::promise<Result>>();
    std::future<Result> future = promise->get_future();
    if (!bytes.ok()) {
      promise->set_value(bytes.status());
      return future;
    }
    auto response = std::make_shared<Response>();
    InvokeBytes(path, *bytes, response.get(), call,
                [promise, response, convert](absl::Status status) {
                  if (status.ok()) {
                    promise->set_value(convert(std::move(*response)));
                  } else {
                    promise->set_value(std::move(status));
                  }
                });
    return future;
  }

  // Every piece sent (each moved into its request), the results in order, or the first error
  // (GatherBytes).
  template <typename Options, typename Request, typename Response, typename Convert>
  auto Gather(AsyncMethod<Request, Response> /*method*/, std::vector<Options> pieces,
              const CallOptions& call, Convert convert, bool overlap) const
      -> absl::StatusOr<
          std::vector<typename decltype(convert(std::declval<Response&&>()))::value_type>> {
    return GatherBytes<Response>(
        MethodPath<Request>(), pieces.size(),
        [&](size_t i) -> absl::StatusOr<grpc::ByteBuffer> {
          POSENC_ASSIGN_OR_RETURN(Request request, internal::ToRequest(std::move(pieces[i])));
          return Serialize(std::move(request));
        },
        call,
        [convert](size_t /*piece*/, Response&& response) { return convert(std::move(response)); },
        overlap);
  }

  // The `count` pieces of a split request to the RPC at `path` sent (`bytes_of(i)`: piece i's
  // request, made when it is sent), their results (`convert(i, response)`, on gRPC's thread) in
  // order, or the first error. In flight at once: at most kMaxPiecesInFlight, and each piece
  // being a heavy call on the server, no more than it computes at once (--max_heavy_calls, so
  // that they do not refuse one another); plus one when `overlap` (the pieces' requests carry
  // their tensors: that piece's request travels while the others compute; docs/splitting.md
  // "Pieces in flight"). That one may find no free slot in time (OVERLOADED): it is sent again,
  // once, from the same bytes, after every other piece in flight is done, so that no piece of
  // this call holds a slot then. Returns once every piece started has ended (its ClientContext
  // gone).
  template <typename Response, typename BytesOf, typename Convert>
  auto GatherBytes(const std::string& path, size_t count, BytesOf bytes_of, const CallOptions& call,
                   Convert convert, bool overlap) const
      -> absl::StatusOr<std::vector<
          typename decltype(convert(size_t{0}, std::declval<Response&&>()))::value_type>> {
    using Result = decltype(convert(size_t{0}, std::declval<Response&&>()));
    struct Sent {
      std::future<Result> result;
      std::optional<Result> got;               // taken before its turn (see the resend)
      std::optional<grpc::ByteBuffer> resend;  // the request of the piece over the heavy slots
      void Wait() {
        if (!got.has_value()) got = result.get();
      }
    };
    const int64_t heavy = server_heavy_calls.load(std::memory_order_relaxed);
    const size_t computing =
        heavy > 0 ? std::min<size_t>(kMaxPiecesInFlight, heavy) : kMaxPiecesInFlight;
    const size_t most =
        heavy > 0 && overlap ? std::min(kMaxPiecesInFlight, computing + 1) : computing;
    std::vector<Sent> in_flight;
    std::vector<typename Result::value_type> out;
    absl::Status first_error;
    const auto start = [&](size_t i, const absl::StatusOr<grpc::ByteBuffer>& bytes) {
      return StartPath<Response>(path, bytes, call, [convert, i](Response&& response) {
        return convert(i, std::move(response));
      });
    };
    // After an error no more pieces are started; those in flight are waited for.
    for (size_t next = 0, done = 0; done < next || (next < count && first_error.ok()); ++done) {
      for (; next < count && next - done < most && first_error.ok(); ++next) {
        const absl::StatusOr<grpc::ByteBuffer> bytes = bytes_of(next);
        Sent& sent = in_flight.emplace_back();
        if (next - done >= computing && bytes.ok()) sent.resend = *bytes;
        sent.result = start(next, bytes);
      }
      in_flight[done].Wait();
      Result result = *std::move(in_flight[done].got);
      if (!result.ok() && in_flight[done].resend.has_value() &&
          GetErrorDetails(result.status()).reason == "OVERLOADED") {
        // The pieces started after it may hold the slots now (a slow server computes one for
        // longer than it keeps a request waiting): sent again once they are done.
        for (size_t later = done + 1; later < next; ++later) in_flight[later].Wait();
        result = start(done, *in_flight[done].resend).get();
      }
      in_flight[done].resend.reset();
      if (!result.ok() && first_error.ok()) first_error = result.status();
      if (result.ok() && first_error.ok()) out.push_back(*std::move(result));
    }
    if (!first_error.ok()) return first_error;
    return out;
  }

  // A split ApplyRope: each piece's request sends
  // its boxes of q and k from the caller's tensors (BoxParts, lent), each answer is written into
  // the joined result where gRPC received it (WireResponse, ApplyRopeJoin) on gRPC's thread as it
  // comes: one copy of the tensors on this side, the one out of the received bytes.
  absl::StatusOr<ApplyRopeResult> ApplyRopeInPieces(const ApplyRopeOptions& options,
                                                    const internal::ApplyRopeSplit& split,
                                                    const CallOptions& call) const {
    internal::ApplyRopeJoin join(options, split);
    v1::BorrowedBytes borrowed;
    auto bytes_of = [&](size_t i) -> absl::StatusOr<grpc::ByteBuffer> {
      POSENC_ASSIGN_OR_RETURN(
          v1::ApplyRopeRequest request,
          internal::ToRequestWithoutBytes(split.pieces[i], /*shapes_only=*/true));
      return Serialize(std::move(request), [&](grpc::ByteBuffer* bytes) {
        const internal::ApplyRopeSplit::Place& place = split.places[i];
        borrowed.Append(1, internal::BoxParts(options.q, place.q), bytes, kLendRunsFrom);
        if (!place.k.count.empty()) {
          borrowed.Append(2, internal::BoxParts(*options.k, place.k), bytes, kLendRunsFrom);
        }
      });
    };
    auto paste =
        [&join](size_t i,
                WireResponse<v1::ApplyRopeResponse>&& response) -> absl::StatusOr<RopeDerived> {
      POSENC_RETURN_IF_ERROR(join.Paste(i, response.message, response.left));
      return internal::FromProto(response.message.derived());
    };
    absl::StatusOr<std::vector<RopeDerived>> derived =
        GatherBytes<WireResponse<v1::ApplyRopeResponse>>(MethodPath<v1::ApplyRopeRequest>(),
                                                         split.pieces.size(), bytes_of, call, paste,
                                                         /*overlap=*/true);
    borrowed.Wait();  // every piece has ended: gRPC lets go of the caller's bytes
    if (!derived.ok()) return derived.status();
    return join.Finish(std::move(derived->front()));
  }

  // The budget of a request of `bytes` (docs/splitting.md "The budget"); nullopt when it goes
  // as one call: splitting is off, or it fits (the server's limit is asked only past 64 KiB).
  std::optional<internal::Budget> SplitBudget(internal::RequestBytes bytes,
                                              const CallOptions& call) const {
    if (!options.split_requests || bytes.tensors + bytes.other <= internal::kMessageOverheadBytes) {
      return std::nullopt;
    }
    int64_t limit = options.max_message_bytes;
    if (const int64_t server = ServerLimit(call); server > 0) limit = std::min(limit, server);
    const internal::Budget budget{limit, limit - internal::kMessageOverheadBytes - bytes.other};
    if (bytes.tensors <= budget.bytes) return std::nullopt;
    return budget;
  }

  // The shape of the server's table `name` (from GetServerInfo, asked once); empty when the
  // name is empty or the server does not report it.
  std::vector<int64_t> TableShape(const std::string& name, const CallOptions& call) const {
    if (name.empty()) return {};
    ServerLimit(call);
    const std::lock_guard<std::mutex> lock(tables_mu);
    const auto it = server_tables.find(name);
    return it == server_tables.end() ? std::vector<int64_t>() : it->second;
  }

  // AddPositionEncoding's y, a named table's width from the server; nullopt when unknown.
  std::optional<internal::OutputShape> AddPositionEncodingOutput(
      const AddPositionEncodingOptions& options, const CallOptions& call) const {
    return internal::AddPositionEncodingOutput(
        options, options.learned.has_value() ? TableShape(options.learned->table_name, call)
                                             : std::vector<int64_t>());
  }

  int64_t ServerLimit(const CallOptions& call) const {
    int64_t known = server_limit.load(std::memory_order_acquire);
    if (known != 0) return known;
    v1::GetServerInfoResponse info;
    const absl::Status status =
        Call(&v1::PositionEncoding::Stub::GetServerInfo, v1::GetServerInfoRequest(), &info, call);
    // A failed call (unreachable, deadline) is asked again next time; an answer is kept.
    if (!status.ok()) return -1;
    known = info.limits().max_message_bytes() > 0 ? info.limits().max_message_bytes() : -1;
    server_heavy_calls.store(info.limits().max_heavy_calls(), std::memory_order_relaxed);
    {
      const std::lock_guard<std::mutex> lock(tables_mu);
      for (const v1::TableInfo& table : info.tables()) {
        server_tables[table.name()].assign(table.shape().begin(), table.shape().end());
      }
    }
    server_limit.store(known, std::memory_order_release);
    return known;
  }

  // A bias-like request split along query rows when its output (`output`, cut along them and
  // joined along the axis `rank_from_end` from the end of its shape) needs it; one call when
  // the output is unknown (a request the server refuses).
  template <typename Options, typename Request, typename Response, typename Convert>
  auto ByQueryRows(const char* what, Method<Request, Response> method,
                   AsyncMethod<Request, Response> async_method, const Options& options,
                   const std::optional<internal::OutputShape>& output, const CallOptions& call,
                   Convert convert, size_t rank_from_end) const
      -> decltype(convert(std::declval<Response&&>())) {
    POSENC_ASSIGN_OR_RETURN(Request request, internal::ToRequest(options));
    if (!output.has_value() || options.q_len <= 0 || output->Bytes() <= 0 ||
        UsesSharedMemory(options)) {
      return Send(method, std::move(request), call, convert);
    }
    const int64_t row_bytes = output->Bytes() / options.q_len;
    const std::optional<internal::Budget> budget =
        SplitBudget(internal::QueryRowRequestBytes(request, options.q_len, row_bytes), call);
    if (!budget.has_value()) return Send(method, std::move(request), call, convert);
    POSENC_ASSIGN_OR_RETURN(const int64_t pieces,
                            internal::QueryRowPieces(what, options.q_len, row_bytes, *budget));
    POSENC_ASSIGN_OR_RETURN(
        auto parts, Gather(async_method, internal::SplitQueryRows(options, pieces), call, convert,
                           /*overlap=*/false));
    return JoinRows(std::move(parts), rank_from_end);
  }

  static absl::StatusOr<Tensor> JoinRows(std::vector<Tensor> parts, size_t rank_from_end) {
    if (parts.empty() || parts[0].shape.size() < rank_from_end) {
      return absl::InternalError("split: a piece's result has too few dimensions");
    }
    return internal::ConcatAxis(parts, parts[0].shape.size() - rank_from_end);
  }
  static absl::StatusOr<AlibiBiasResult> JoinRows(std::vector<AlibiBiasResult> parts,
                                                  size_t rank_from_end) {
    std::vector<Tensor> biases;
    biases.reserve(parts.size());
    for (AlibiBiasResult& part : parts) biases.push_back(std::move(part.bias));
    AlibiBiasResult out;
    POSENC_ASSIGN_OR_RETURN(out.bias, JoinRows(std::move(biases), rank_from_end));
    out.slopes = std::move(parts[0].slopes);
    return out;
  }
};

std::string_view HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kUnknown: return "UNKNOWN";
    case HealthStatus::kServing: return "SERVING";
    case HealthStatus::kNotServing: return "NOT_SERVING";
    case HealthStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
  }
  return "UNKNOWN";
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

bool RetainFreedMemory(int64_t retain_bytes) { return v1::RetainFreedMemory(retain_bytes); }

void ReleaseFreedMemory() { v1::ReleaseFreedMemory(); }

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("target: must not be empty");
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout: must be positive, got ", options.timeout.count(), "ms"));
  }
  if (options.keepalive_time.count() < 0 || options.keepalive_timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keepalive_time: must be >= 0 (0 = off) and keepalive_timeout positive, got ",
        options.keepalive_time.count(), "ms and ", options.keepalive_timeout.count(), "ms"));
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: must be positive, got ", options.max_message_bytes));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(ClampToInt(options.max_message_bytes));
  args.SetMaxSendMessageSize(ClampToInt(options.max_message_bytes));
  args.SetServiceConfigJSON(ServiceConfigJson(options));
  // Reconnect quickly after a replica restarts (gRPC's default first backoff is 1 s; with
  // retries of UNAVAILABLE spanning ~1.5 s, a call would fail while the channel still waits).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  if (options.keepalive_time.count() > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ClampToInt(options.keepalive_time.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ClampToInt(options.keepalive_timeout.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
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
  return std::unique_ptr<Client>(new Client(std::make_unique<Impl>(std::move(channel), options)));
}

std::shared_ptr<grpc::Channel> Client::channel() const { return impl_->channel; }

using Stub = v1::PositionEncoding::Stub;

absl::StatusOr<Tensor> Client::Sinusoidal(const SinusoidalOptions& options,
                                          const CallOptions& call) const {
  return impl_->Unary(&Stub::Sinusoidal, options, call, kSinusoidalTable);
}

absl::StatusOr<Tensor> Client::AddPositionEncoding(const AddPositionEncodingOptions& options,
                                                   const CallOptions& call) const {
  POSENC_ASSIGN_OR_RETURN(v1::AddPositionEncodingRequest request, internal::ToRequest(options));
  const std::optional<internal::OutputShape> y =
      UsesSharedMemory(options) ? std::nullopt : impl_->AddPositionEncodingOutput(options, call);
  const std::optional<internal::Budget> budget =
      y.has_value()
          ? impl_->SplitBudget(internal::AddPositionEncodingRequestBytes(request, y->Bytes()), call)
          : std::nullopt;
  if (!budget.has_value()) {
    return impl_->Send(&Stub::AddPositionEncoding, std::move(request), call, kAddPositionEncodingY);
  }
  POSENC_ASSIGN_OR_RETURN(internal::AddPositionEncodingSplit split,
                          internal::SplitAddPositionEncoding(options, *y, *budget));
  if (split.whole) {
    return impl_->Send(&Stub::AddPositionEncoding, std::move(request), call, kAddPositionEncodingY);
  }
  request.Clear();  // the pieces hold the bytes now
  POSENC_ASSIGN_OR_RETURN(std::vector<Tensor> parts,
                          impl_->Gather(&Stub::async::AddPositionEncoding, std::move(split.pieces),
                                        call, kAddPositionEncodingY, /*overlap=*/true));
  return internal::JoinAddPositionEncoding(split, std::move(parts));
}

absl::StatusOr<RopeCacheResult> Client::RopeCache(const RopeCacheOptions& options,
                                                  const CallOptions& call) const {
  return impl_->Unary(&Stub::RopeCache, options, call, kWhole);
}

absl::StatusOr<ApplyRopeResult> Client::ApplyRope(const ApplyRopeOptions& options,
                                                  const CallOptions& call) const {
  POSENC_ASSIGN_OR_RETURN(v1::ApplyRopeRequest request, internal::ToRequestWithoutBytes(options));
  const std::optional<internal::Budget> budget =
      UsesSharedMemory(options) ? std::nullopt
                                : impl_->SplitBudget(ApplyRopeBytes(options, request), call);
  if (budget.has_value()) {
    POSENC_ASSIGN_OR_RETURN(const internal::ApplyRopeSplit split,
                            internal::SplitApplyRope(options, *budget));
    if (!split.whole) return impl_->ApplyRopeInPieces(options, split, call);
  }
  // One call: q and k go from the caller's tensors, not copied into the request (issue #20).
  v1::BorrowedBytes borrowed;
  auto result =
      impl_->Send(&Stub::ApplyRope, std::move(request), call, kWhole, [&](grpc::ByteBuffer* bytes) {
        borrowed.Append(1, options.q.data, bytes);
        if (options.k.has_value()) borrowed.Append(2, options.k->data, bytes);
      });
  borrowed.Wait();  // gRPC holds no reference to the caller's bytes any more
  return result;
}

absl::StatusOr<Tensor> Client::AlibiSlopes(const AlibiSlopesOptions& options,
                                           const CallOptions& call) const {
  return impl_->Unary(&Stub::AlibiSlopes, options, call, kAlibiSlopes);
}

absl::StatusOr<AlibiBiasResult> Client::AlibiBias(const AlibiBiasOptions& options,
                                                  const CallOptions& call) const {
  if (const auto compact = CompactRequest(options, impl_->options)) {
    POSENC_ASSIGN_OR_RETURN(AlibiBiasResult result,
                            impl_->Unary(&Stub::AlibiBias, *compact, call, kWhole));
    if (options.mode == AlibiMode::kBloom) {
      POSENC_ASSIGN_OR_RETURN(result.bias, ExpandBloomRows(result.bias, options.q_len,
                                                           options.query_offset, options.future));
    } else {
      POSENC_ASSIGN_OR_RETURN(result.bias,
                              ExpandToeplitz(result.bias, options.q_len, options.k_len));
    }
    return result;
  }
  if (options.form != BiasForm::kUnspecified && options.form != BiasForm::kFull) {
    return impl_->Unary(&Stub::AlibiBias, options, call, kWhole);  // COMPACT is not cut
  }
  return impl_->ByQueryRows("AlibiBias", &Stub::AlibiBias, &Stub::async::AlibiBias, options,
                            internal::AlibiBiasOutputs(options)[0], call, kWhole, 2);
}

absl::StatusOr<Tensor> Client::RelativeBias(const RelativeBiasOptions& options,
                                            const CallOptions& call) const {
  if (const auto compact = CompactRequest(options, impl_->options)) {
    POSENC_ASSIGN_OR_RETURN(const Tensor bias,
                            impl_->Unary(&Stub::RelativeBias, *compact, call, kRelativeBias));
    return ExpandToeplitz(bias, options.q_len, options.k_len);
  }
  if (options.form == BiasForm::kCompact) {
    return impl_->Unary(&Stub::RelativeBias, options, call, kRelativeBias);
  }
  return impl_->ByQueryRows(
      "RelativeBias", &Stub::RelativeBias, &Stub::async::RelativeBias, options,
      internal::RelativeBiasOutput(options, impl_->TableShape(options.table_name, call)), call,
      kRelativeBias, 2);
}

absl::StatusOr<Tensor> Client::RelativeEmbedding(const RelativeEmbeddingOptions& options,
                                                 const CallOptions& call) const {
  return impl_->ByQueryRows(
      "RelativeEmbedding", &Stub::RelativeEmbedding, &Stub::async::RelativeEmbedding, options,
      internal::RelativeEmbeddingOutput(options, impl_->TableShape(options.table_name, call)), call,
      kRelativeEmbeddings, 3);
}

absl::StatusOr<ServerInfo> Client::GetServerInfo(const CallOptions& call) const {
  v1::GetServerInfoResponse response;
  POSENC_RETURN_IF_ERROR(
      impl_->Call(&Stub::GetServerInfo, v1::GetServerInfoRequest(), &response, call));
  return internal::FromProto(response);
}

absl::StatusOr<RerotateKeysResult> Client::RerotateKeys(const RerotateKeysOptions& options,
                                                        const CallOptions& call) const {
  return impl_->Unary(&Stub::RerotateKeys, options, call, kWhole);
}

absl::StatusOr<MultimodalPositionsResult> Client::MultimodalPositions(
    const MultimodalPositionsOptions& options, const CallOptions& call) const {
  return impl_->Unary(&Stub::MultimodalPositions, options, call, kWhole);
}

absl::StatusOr<VisionPositionsResult> Client::VisionPositions(const VisionPositionsOptions& options,
                                                              const CallOptions& call) const {
  return impl_->Unary(&Stub::VisionPositions, options, call, kWhole);
}

absl::StatusOr<AnalyzeEncodingResult> Client::AnalyzeEncoding(const AnalyzeEncodingOptions& options,
                                                              const CallOptions& call) const {
  return impl_->Unary(&Stub::AnalyzeEncoding, options, call,
                      [](v1::AnalyzeEncodingResponse&& r) -> absl::StatusOr<AnalyzeEncodingResult> {
                        return internal::FromProto(r);
                      });
}

absl::StatusOr<DescribeRopeResult> Client::DescribeRope(const RopeConfig& config,
                                                        const CallOptions& call) const {
  v1::DescribeRopeRequest request;
  internal::ToProto(config, request.mutable_config());
  v1::DescribeRopeResponse response;
  POSENC_RETURN_IF_ERROR(impl_->Call(&Stub::DescribeRope, std::move(request), &response, call));
  return internal::FromProto(response);
}

// Asynchronous calls: one callback call when nothing is to be split or expanded; otherwise the
// synchronous method on a thread of its own (its pieces are in flight together there).
// NOLINTNEXTLINE(performance-unnecessary-value-param): by value as every *Async (others move it)
Future<Tensor> Client::SinusoidalAsync(SinusoidalOptions options, const CallOptions& call) const {
  return impl_->Start(&Stub::async::Sinusoidal, options, call, kSinusoidalTable);
}

Future<Tensor> Client::AddPositionEncodingAsync(AddPositionEncodingOptions options,
                                                const CallOptions& call) const {
  absl::StatusOr<v1::AddPositionEncodingRequest> request = internal::ToRequest(options);
  const std::optional<internal::OutputShape> y =
      UsesSharedMemory(options) ? std::nullopt : impl_->AddPositionEncodingOutput(options, call);
  if (!request.ok() || !y.has_value() ||
      !impl_->SplitBudget(internal::AddPositionEncodingRequestBytes(*request, y->Bytes()), call)) {
    return impl_->StartRequest(&Stub::async::AddPositionEncoding, std::move(request), call,
                               kAddPositionEncodingY);
  }
  return std::async(std::launch::async, [this, options = std::move(options), call] {
    return AddPositionEncoding(options, call);
  });
}

// NOLINTNEXTLINE(performance-unnecessary-value-param): by value as every *Async (others move it)
Future<RopeCacheResult> Client::RopeCacheAsync(RopeCacheOptions options,
                                               const CallOptions& call) const {
  return impl_->Start(&Stub::async::RopeCache, options, call, kWhole);
}

Future<ApplyRopeResult> Client::ApplyRopeAsync(ApplyRopeOptions options,
                                               const CallOptions& call) const {
  absl::StatusOr<v1::ApplyRopeRequest> request = internal::ToRequest(options);
  if (!request.ok() || UsesSharedMemory(options) ||
      !impl_->SplitBudget(internal::ApplyRopeRequestBytes(*request), call)) {
    return impl_->StartRequest(&Stub::async::ApplyRope, std::move(request), call, kWhole);
  }
  return std::async(std::launch::async, [this, options = std::move(options), call] {
    return ApplyRope(options, call);
  });
}

// NOLINTNEXTLINE(performance-unnecessary-value-param): by value as every *Async (others move it)
Future<Tensor> Client::AlibiSlopesAsync(AlibiSlopesOptions options, const CallOptions& call) const {
  return impl_->Start(&Stub::async::AlibiSlopes, options, call, kAlibiSlopes);
}

Future<AlibiBiasResult> Client::AlibiBiasAsync(AlibiBiasOptions options,
                                               const CallOptions& call) const {
  return std::async(std::launch::async, [this, options = std::move(options), call] {
    return AlibiBias(options, call);
  });
}

Future<Tensor> Client::RelativeBiasAsync(RelativeBiasOptions options,
                                         const CallOptions& call) const {
  return std::async(std::launch::async, [this, options = std::move(options), call] {
    return RelativeBias(options, call);
  });
}

Future<Tensor> Client::RelativeEmbeddingAsync(RelativeEmbeddingOptions options,
                                              const CallOptions& call) const {
  return std::async(std::launch::async, [this, options = std::move(options), call] {
    return RelativeEmbedding(options, call);
  });
}

Future<ServerInfo> Client::GetServerInfoAsync(const CallOptions& call) const {
  return impl_->Start(&Stub::async::GetServerInfo, v1::GetServerInfoRequest(), call,
                      [](v1::GetServerInfoResponse&& response) -> absl::StatusOr<ServerInfo> {
                        return internal::FromProto(response);
                      });
}

namespace {
constexpr auto kNoFields = [](auto&&) { return absl::OkStatus(); };
constexpr auto kRegions = [](v1::SharedMemoryStatusResponse&& response)
    -> absl::StatusOr<std::vector<SharedMemoryRegionStatus>> {
  return internal::FromProto(response);
};

v1::UnregisterSharedMemoryRequest UnregisterRequest(const std::string& name) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  return request;
}

v1::SharedMemoryStatusRequest StatusRequest(const std::string& name) {
  v1::SharedMemoryStatusRequest request;
  request.set_name(name);
  return request;
}
}  // namespace

absl::Status Client::RegisterSharedMemory(const SharedMemoryRegistration& region,
                                          const CallOptions& call) const {
  return impl_->Unary(&Stub::RegisterSharedMemory, region, call, kNoFields);
}

absl::Status Client::UnregisterSharedMemory(const std::string& name,
                                            const CallOptions& call) const {
  return impl_->Unary(&Stub::UnregisterSharedMemory, UnregisterRequest(name), call, kNoFields);
}

absl::StatusOr<std::vector<SharedMemoryRegionStatus>> Client::SharedMemoryStatus(
    const std::string& name, const CallOptions& call) const {
  return impl_->Unary(&Stub::SharedMemoryStatus, StatusRequest(name), call, kRegions);
}

absl::Status Client::RegisterCudaSharedMemory(const CudaSharedMemoryRegistration& region,
                                              const CallOptions& call) const {
  return impl_->Unary(&Stub::RegisterCudaSharedMemory, region, call, kNoFields);
}

std::future<absl::Status> Client::RegisterCudaSharedMemoryAsync(
    const CudaSharedMemoryRegistration& region, const CallOptions& call) const {
  return impl_->Start(&Stub::async::RegisterCudaSharedMemory, region, call, kNoFields);
}

std::future<absl::Status> Client::RegisterSharedMemoryAsync(const SharedMemoryRegistration& region,
                                                            const CallOptions& call) const {
  return impl_->Start(&Stub::async::RegisterSharedMemory, region, call, kNoFields);
}

std::future<absl::Status> Client::UnregisterSharedMemoryAsync(const std::string& name,
                                                              const CallOptions& call) const {
  return impl_->Start(&Stub::async::UnregisterSharedMemory, UnregisterRequest(name), call,
                      kNoFields);
}

Future<std::vector<SharedMemoryRegionStatus>> Client::SharedMemoryStatusAsync(
    const std::string& name, const CallOptions& call) const {
  return impl_->Start(&Stub::async::SharedMemoryStatus, StatusRequest(name), call, kRegions);
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& service,
                                            const CallOptions& call) const {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  impl_->PrepareContext(&context, call);
  // The callback API, as the hand-encoded GenericStub call this replaced, so the client behaves
  // as before (a channel used only by blocking calls reads a draining server's GOAWAY late).
  std::promise<grpc::Status> done;
  impl_->health_stub->async()->Check(
      &context, &request, &response,
      [&done](const grpc::Status& status) { done.set_value(status); });
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
