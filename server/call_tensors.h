// Where one call's tensors live: the request's bytes, ranges of registered shared memory
// (server/shared_memory.h), or gRPC's received slices (WireTensors, below: ApplyRope's). Every
// handler runs inside a ScopedCallTensors (handlers.cc's Handle<Method>), so the conversions
// (convert.h: ToConstView, AllocateOutput, and ApplyRope's in-place MoveToResponse) find a tensor's
// bytes wherever the caller put them, and no handler spells shared memory out:
//  - an input Tensor with `shared_memory` set reads from that range (its `data` must be empty);
//  - an output named in the request's `output_shared_memory` is written into that range, and the
//    response's tensor carries the reference instead of bytes;
//  - an ApplyRope input in shared memory is rotated in place there.
// Every range is resolved (bounds, the region intact) when used; a written range may overlap no
// other range of the call (but the one input it rotates in place). After the compute, Finish()
// fails the call when a region was truncated under it or a named output does not exist.
// A range in a CUDA region is a device address: only tensors the device backend computes on
// (Reach::kDevice: q, k, x and the outputs the backend writes) may be there; every other tensor
// is read or written on the host and is refused there (FAILED_PRECONDITION naming the field).
//
// Thread-safety: one per call, used by the call's handler thread.
#ifndef POSENC_SERVER_CALL_TENSORS_H_
#define POSENC_SERVER_CALL_TENSORS_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/map.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/byte_buffer.h"
#include "server/shared_memory.h"

namespace posenc::server {

using OutputPlacements = google::protobuf::Map<std::string, v1::SharedMemoryRef>;

// Where a tensor may live: host memory only (host code reads or writes it), or also device
// memory of a CUDA region (a tensor the device backend computes on: Backend::For keeps the call
// there, and the kernels' CheckBackendReaches refuses a host backend).
enum class Reach { kHost, kDevice };

// A tensor's bytes in shared memory: a device address when on_device.
struct SharedBytes {
  char* data = nullptr;
  bool on_device = false;
};

class CallTensors {
 public:
  // `registry` may be null (no shared memory: a reference is FAILED_PRECONDITION); `placements`
  // may be null (a request without outputs).
  CallTensors(const SharedMemoryRegistry* registry, const OutputPlacements* placements);

  // The calling thread's CallTensors, or null outside a handler.
  static CallTensors* Current();

  // An input's bytes in shared memory: `ref` must hold exactly `bytes` bytes, starting at an
  // address aligned to its `element_bytes` (the kernels read whole elements), in a CUDA region
  // only where `reach` allows it. `field` is the tensor's wire path ("q"); errors name
  // "<field>.shared_memory...".
  absl::StatusOr<SharedBytes> Input(const v1::SharedMemoryRef& ref, int64_t bytes,
                                    absl::string_view field, int64_t element_bytes, Reach reach);
  // Output `name`'s range when the request places it in shared memory (null data when it does
  // not): exactly `bytes` bytes, aligned to `element_bytes`, overlapping nothing else of the
  // call, in a CUDA region only where `reach` allows it. Sets `out`'s reference.
  absl::StatusOr<SharedBytes> Output(absl::string_view name, int64_t bytes, v1::Tensor* out,
                                     int64_t element_bytes, Reach reach);
  // Whether the request places output `name` in shared memory.
  bool HasPlacement(absl::string_view name) const;
  // Whether output `name` lives in shared memory: placed there, or an input of that name read
  // from there (ApplyRope's q and k, rotated in place). Its bytes are not in the response.
  bool InSharedMemory(absl::string_view name) const;
  // The shared-memory range of input `field` resolved by Input() (null data when it came
  // inline).
  SharedBytes InputData(absl::string_view field) const;
  // Whether a tensor of the call lives in device memory: an input resolved in a CUDA region, or
  // an output the request places in one (asked before the outputs are resolved: the call must
  // then run on the device backend whatever its size).
  bool OnDevice() const;
  // Input `field` (in shared memory) is about to be written in place: it may overlap no other
  // range of the call.
  absl::Status WriteInPlace(absl::string_view field);

  // After the compute: a region truncated under the call, or an output_shared_memory entry that
  // names no output of the op, fails the call.
  absl::Status Finish() const;

 private:
  struct Use {
    SharedMemorySpan span;
    std::string field;
    bool written = false;
  };
  absl::StatusOr<SharedMemorySpan> Resolve(const v1::SharedMemoryRef& ref, int64_t bytes,
                                           int64_t element_bytes, const std::string& field,
                                           Reach reach) const;
  // OVERLAP check of a range about to be written against every other range of the call.
  absl::Status CheckNoOverlap(const SharedMemorySpan& span, const std::string& field,
                              absl::string_view allowed_field) const;

  const SharedMemoryRegistry* registry_;
  const OutputPlacements* placements_;
  std::vector<Use> uses_;
  std::set<std::string, std::less<>> placed_;
};

// Installs a CallTensors as the calling thread's current one for the scope.
class ScopedCallTensors {
 public:
  explicit ScopedCallTensors(CallTensors* tensors);
  ~ScopedCallTensors();
  ScopedCallTensors(const ScopedCallTensors&) = delete;
  ScopedCallTensors& operator=(const ScopedCallTensors&) = delete;

 private:
  CallTensors* previous_;
};

// The tensor data of a call's request that the runner left in gRPC's received slices
// (CallRunner::Method::leave_tensor_data: ApplyRope's q and k; only from a peer on a socket, whose
// bytes are in memory the transport read them into, which the handler may then write), and what
// of it the response sends back from there. One per call, the handler's through Current().
class WireTensors {
 public:
  // Filled by the runner's parse.
  v1::WireTensors* left() { return &left_; }
  // The calling thread's, or null outside a handler.
  static WireTensors* Current();

  // Request field `field`'s data left in the slices, or null (its data is in the message).
  v1::WireBytes* Find(absl::string_view field);
  // Request field `field`'s data (left in the slices) put into `tensor`'s data (a copy), and no
  // longer in the slices: for the paths that need the tensor whole.
  void TakeInto(absl::string_view field, v1::Tensor* tensor);
  // The response's Tensor field `response_field` (whose data the handler leaves empty) is sent
  // with request field `field`'s data, from the slices (the runner: v1::SerializeWithWireData).
  void SendBack(absl::string_view field, const google::protobuf::FieldDescriptor* response_field);
  const std::vector<std::pair<const google::protobuf::FieldDescriptor*, const v1::WireBytes*>>&
  sent_back() const {
    return sent_back_;
  }

 private:
  v1::WireTensors left_;
  std::vector<std::pair<const google::protobuf::FieldDescriptor*, const v1::WireBytes*>> sent_back_;
};

// Installs a WireTensors as the calling thread's current one for the scope.
class ScopedWireTensors {
 public:
  explicit ScopedWireTensors(WireTensors* tensors);
  ~ScopedWireTensors();
  ScopedWireTensors(const ScopedWireTensors&) = delete;
  ScopedWireTensors& operator=(const ScopedWireTensors&) = delete;

 private:
  WireTensors* previous_;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_CALL_TENSORS_H_
