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
#include <string>
#include <vector>

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

  // Bytes the caller keeps, at `data`.
  struct Part {
    const char* data;
    size_t size;
  };
  // The slices of `parts` joined, in order: a part of `lend_from` bytes or more is lent, each
  // run of smaller ones between such parts is copied into `copied` (sized here, once, so that it
  // never moves: it must outlive Wait()) and lent from there. Where the parts lie back to back
  // in memory, neighbours count as one part.
  std::vector<grpc::Slice> LendJoined(const std::vector<Part>& parts, size_t lend_from,
                                      std::string* copied) {
    std::vector<Part> merged;
    merged.reserve(parts.size());
    for (const Part& part : parts) {
      if (part.size == 0) continue;
      if (!merged.empty() && merged.back().data + merged.back().size == part.data) {
        merged.back().size += part.size;
      } else {
        merged.push_back(part);
      }
    }
    size_t small_bytes = 0;
    for (const Part& part : merged) {
      if (part.size < lend_from) small_bytes += part.size;
    }
    copied->clear();
    copied->reserve(small_bytes);
    std::vector<grpc::Slice> slices;
    size_t run = 0;  // where the current run of small parts starts in `copied`
    const auto end_run = [&] {
      if (copied->size() > run) slices.push_back(Lend(copied->data() + run, copied->size() - run));
      run = copied->size();
    };
    for (const Part& part : merged) {
      if (part.size < lend_from) {
        copied->append(part.data, part.size);
      } else {
        end_run();
        slices.push_back(Lend(part.data, part.size));
      }
    }
    end_run();
    return slices;
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
