// gRPC slices that reference memory the caller keeps (the caller's tensors), counted so that the
// caller knows when gRPC has let go of them. Header-only: the C++ client's requests
// (BorrowedBytes, byte_buffer.h) and the Python client's native transport
// (client/python/native/wirecall.cc, which links gRPC alone) both lend memory this way.
#ifndef POSENC_PROTO_POSENC_V1_BORROWED_SLICES_H_
#define POSENC_PROTO_POSENC_V1_BORROWED_SLICES_H_

#include <grpcpp/support/slice.h>

#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace posenc::v1 {

// Lend() gives a slice that references `size` bytes at `data` without copying them; Wait()
// returns once gRPC has dropped every slice lent, and must be called (and return) before those
// bytes change or go away (the destructor calls it).
// Thread-safety: Lend and Wait from one thread; gRPC drops the slices from any.
class BorrowedSlices {
 public:
  BorrowedSlices() = default;
  BorrowedSlices(const BorrowedSlices&) = delete;
  BorrowedSlices& operator=(const BorrowedSlices&) = delete;
  ~BorrowedSlices() { Wait(); }

  grpc::Slice Lend(const char* data, size_t size) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    return grpc::Slice(const_cast<char*>(data), size, &Release, this);
  }

  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    released_.wait(lock, [this] { return outstanding_ == 0; });
  }

 private:
  static void Release(void* self) {
    auto* lent = static_cast<BorrowedSlices*>(self);
    const std::lock_guard<std::mutex> lock(lent->mu_);
    if (--lent->outstanding_ == 0) lent->released_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable released_;
  int outstanding_ = 0;
};

}  // namespace posenc::v1

#endif  // POSENC_PROTO_POSENC_V1_BORROWED_SLICES_H_
