// A bare gRPC echo service for the benchmarks (rpc_bench, data_path_bench): a callback generic
// service that answers every call with its request's bytes, the baseline posenc's calls are set
// against (no protobuf, no handler).
//
// Thread-safety: gRPC runs the reactors; a service serves any number of calls at once.
#ifndef POSENC_TESTS_BENCH_GRPC_ECHO_H_
#define POSENC_TESTS_BENCH_GRPC_ECHO_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

namespace posenc::bench {

class EchoReactor final : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&buffer_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buffer_;
};

class EchoService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new EchoReactor();
  }
};

}  // namespace posenc::bench

#endif  // POSENC_TESTS_BENCH_GRPC_ECHO_H_
