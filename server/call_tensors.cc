#include "server/call_tensors.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/status.h"

namespace posenc::server {
namespace {

thread_local CallTensors* current_tensors = nullptr;
thread_local WireTensors* current_wire_tensors = nullptr;

bool Overlap(const SharedMemorySpan& a, const SharedMemorySpan& b) {
  if (a.byte_size == 0 || b.byte_size == 0 || a.on_device() != b.on_device()) return false;
  if (a.on_device()) {
    // Device ranges of this process (every CUDA region is opened here): compare the addresses.
    const auto a0 = reinterpret_cast<uintptr_t>(a.data);
    const auto b0 = reinterpret_cast<uintptr_t>(b.data);
    return a0 < b0 + static_cast<uintptr_t>(b.byte_size) &&
           b0 < a0 + static_cast<uintptr_t>(a.byte_size);
  }
  // Two spans of different regions may map the same object: compare the objects' bytes.
  const SharedMemoryRegionInfo& ra = a.region->info();
  const SharedMemoryRegionInfo& rb = b.region->info();
  if (ra.key != rb.key) return false;
  const int64_t a0 = ra.offset + (a.data - a.region->data());
  const int64_t b0 = rb.offset + (b.data - b.region->data());
  return a0 < b0 + b.byte_size && b0 < a0 + a.byte_size;
}

}  // namespace

CallTensors::CallTensors(const SharedMemoryRegistry* registry, const OutputPlacements* placements)
    : registry_(registry), placements_(placements) {}

CallTensors* CallTensors::Current() { return current_tensors; }

absl::StatusOr<SharedMemorySpan> CallTensors::Resolve(const v1::SharedMemoryRef& ref, int64_t bytes,
                                                      int64_t element_bytes,
                                                      const std::string& field, Reach reach) const {
  if (registry_ == nullptr || !registry_->options().allowed) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": shared memory is off on this server (start it with --allow_shared_memory)"));
  }
  if (ref.byte_size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".byte_size: expected ", bytes,
                                                   " (the tensor's bytes), got ", ref.byte_size()));
  }
  POSENC_ASSIGN_OR_RETURN(SharedMemorySpan span,
                          registry_->Resolve(ref.region(), ref.offset(), ref.byte_size(), field));
  if (span.on_device() && reach == Reach::kHost) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ".region: \"", ref.region(),
        "\" is a CUDA region, and this tensor is read or written on the host (only q, k, x and "
        "the outputs the device computes can live in device memory); pass it inline or in a "
        "system region"));
  }
  if (element_bytes > 1 && reinterpret_cast<uintptr_t>(span.data) % element_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".offset: the tensor's ", element_bytes, "-byte elements would start at an address ",
        "not a multiple of ", element_bytes, " (offset ", ref.offset(), " into region \"",
        ref.region(), "\"; the region's own offset counts too): align the offset"));
  }
  return span;
}

absl::Status CallTensors::CheckNoOverlap(const SharedMemorySpan& span, const std::string& field,
                                         absl::string_view allowed_field) const {
  for (const Use& use : uses_) {
    if (use.field == allowed_field || !Overlap(span, use.span)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the range overlaps ", use.field,
                     " (an output must not share bytes with another tensor of the call)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedBytes> CallTensors::Input(const v1::SharedMemoryRef& ref, int64_t bytes,
                                               absl::string_view field, int64_t element_bytes,
                                               Reach reach) {
  const std::string ref_field = absl::StrCat(field, ".shared_memory");
  POSENC_ASSIGN_OR_RETURN(SharedMemorySpan span,
                          Resolve(ref, bytes, element_bytes, ref_field, reach));
  for (const Use& use : uses_) {
    if (use.written && Overlap(span, use.span)) {
      return absl::InvalidArgumentError(
          absl::StrCat(ref_field, ": the range overlaps the output ", use.field));
    }
  }
  const SharedBytes result{span.data, span.on_device()};
  uses_.push_back({std::move(span), std::string(field), false});
  return result;
}

SharedBytes CallTensors::InputData(absl::string_view field) const {
  for (const Use& use : uses_) {
    if (!use.written && use.field == field) return {use.span.data, use.span.on_device()};
  }
  return {};
}

bool CallTensors::OnDevice() const {
  for (const Use& use : uses_) {
    if (use.span.on_device()) return true;
  }
  if (placements_ == nullptr || registry_ == nullptr) return false;
  for (const auto& [name, ref] : *placements_) {
    if (registry_->KindOf(ref.region()) == RegionKind::kCuda) return true;
  }
  return false;
}

bool CallTensors::HasPlacement(absl::string_view name) const {
  return placements_ != nullptr && placements_->count(std::string(name)) != 0;
}

bool CallTensors::InSharedMemory(absl::string_view name) const {
  return HasPlacement(name) || InputData(name).data != nullptr;
}

absl::Status CallTensors::WriteInPlace(absl::string_view field) {
  for (Use& use : uses_) {
    if (use.written || use.field != field) continue;
    POSENC_RETURN_IF_ERROR(CheckNoOverlap(use.span, absl::StrCat(field, ".shared_memory"), field));
    use.written = true;
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(field, ": not an input in shared memory"));
}

absl::StatusOr<SharedBytes> CallTensors::Output(absl::string_view name, int64_t bytes,
                                                v1::Tensor* out, int64_t element_bytes,
                                                Reach reach) {
  if (!HasPlacement(name)) return SharedBytes{};
  const v1::SharedMemoryRef& ref = placements_->at(std::string(name));
  const std::string field = absl::StrCat("output_shared_memory.", name);
  POSENC_ASSIGN_OR_RETURN(SharedMemorySpan span, Resolve(ref, bytes, element_bytes, field, reach));
  // An ApplyRope input may be its own output (in place): the same bytes exactly.
  const char* input = InputData(name).data;
  const bool in_place = input == span.data;
  POSENC_RETURN_IF_ERROR(CheckNoOverlap(span, field, in_place ? name : absl::string_view()));
  *out->mutable_shared_memory() = ref;
  out->clear_data();
  const SharedBytes result{span.data, span.on_device()};
  uses_.push_back({std::move(span), field, true});
  placed_.insert(std::string(name));
  return result;
}

absl::Status CallTensors::Finish() const {
  for (const Use& use : uses_) {
    POSENC_RETURN_IF_ERROR(CheckIntact(use.span, use.field));
  }
  if (placements_ != nullptr) {
    for (const auto& [name, ref] : *placements_) {
      if (placed_.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("output_shared_memory: names \"", name,
                         "\", which is no output of this call (outputs in shared memory: ",
                         placed_.empty() ? "none" : absl::StrJoin(placed_, ", "), ")"));
      }
    }
  }
  return absl::OkStatus();
}

ScopedCallTensors::ScopedCallTensors(CallTensors* tensors) : previous_(current_tensors) {
  current_tensors = tensors;
}

ScopedCallTensors::~ScopedCallTensors() { current_tensors = previous_; }

WireTensors* WireTensors::Current() { return current_wire_tensors; }

v1::WireBytes* WireTensors::Find(absl::string_view field) {
  const auto it = left_.find(field);
  return it == left_.end() ? nullptr : &it->second;
}

void WireTensors::TakeInto(absl::string_view field, v1::Tensor* tensor) {
  const auto it = left_.find(field);
  if (it == left_.end()) return;
  it->second.CopyTo(tensor->mutable_data());
  left_.erase(it);
}

void WireTensors::SendBack(absl::string_view field,
                           const google::protobuf::FieldDescriptor* response_field) {
  if (const v1::WireBytes* bytes = Find(field); bytes != nullptr) {
    sent_back_.emplace_back(response_field, bytes);
  }
}

ScopedWireTensors::ScopedWireTensors(WireTensors* tensors) : previous_(current_wire_tensors) {
  current_wire_tensors = tensors;
}

ScopedWireTensors::~ScopedWireTensors() { current_wire_tensors = previous_; }

}  // namespace posenc::server
