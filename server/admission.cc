#include "server/admission.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace posenc::server {
namespace {

thread_local CallAdmission* current_admission = nullptr;

// The cgroup v2 memory limit of this process, or 0 when there is none.
int64_t CgroupMemoryMax() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string value;
  int64_t bytes = 0;
  if (in >> value && absl::SimpleAtoi(value, &bytes) && bytes > 0) return bytes;
  return 0;
}

int64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{4} << 30;
}

}  // namespace

int64_t DefaultMaxInflightBytes(int64_t max_message_bytes) {
  int64_t memory = PhysicalMemory();
  if (const int64_t cgroup = CgroupMemoryMax(); cgroup > 0) memory = std::min(memory, cgroup);
  return std::max(memory / 4, 3 * max_message_bytes);
}

int64_t AdmissionControl::inflight_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t AdmissionControl::heavy_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heavy_;
}

absl::Status AdmissionControl::AcquireBytes(int64_t bytes, int64_t request_bytes) {
  if (options_.max_inflight_bytes <= 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + bytes > options_.max_inflight_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this call needs %d bytes in flight (request %d, response twice), %d of "
        "--max_inflight_bytes=%d are in use by other calls; retry later or on another replica",
        bytes, request_bytes, bytes_, options_.max_inflight_bytes));
  }
  bytes_ += bytes;
  return absl::OkStatus();
}

void AdmissionControl::ReleaseBytes(int64_t bytes) {
  if (options_.max_inflight_bytes <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ -= bytes;
}

absl::Status AdmissionControl::AcquireHeavy() {
  if (options_.max_heavy_calls <= 0) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  if (!slot_freed_.wait_for(lock, kHeavyCallWait,
                            [&] { return heavy_ < options_.max_heavy_calls; })) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d heavy calls (outputs over %d bytes) are running, --max_heavy_calls=%d; retry later "
        "or on another replica",
        heavy_, kHeavyCallBytes, options_.max_heavy_calls));
  }
  ++heavy_;
  return absl::OkStatus();
}

void AdmissionControl::ReleaseHeavy() {
  if (options_.max_heavy_calls <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --heavy_;
  }
  slot_freed_.notify_one();
}

CallAdmission::~CallAdmission() {
  EndCompute();
  if (control_ != nullptr && held_bytes_ > 0) control_->ReleaseBytes(held_bytes_);
}

absl::Status CallAdmission::Admit(int64_t output_bytes, int64_t staging_bytes) {
  if (control_ == nullptr || held_bytes_ > 0) return absl::OkStatus();
  const int64_t bytes = request_bytes_ + 2 * output_bytes + staging_bytes;
  if (absl::Status s = control_->AcquireBytes(bytes, request_bytes_); !s.ok()) {
    refused_ = true;
    return s;
  }
  held_bytes_ = bytes;
  if (output_bytes > kHeavyCallBytes) {
    if (absl::Status s = control_->AcquireHeavy(); !s.ok()) {
      refused_ = true;
      return s;
    }
    heavy_ = true;
  }
  return absl::OkStatus();
}

void CallAdmission::EndCompute() {
  if (heavy_) control_->ReleaseHeavy();
  heavy_ = false;
}

absl::Status AdmitCurrentCall(int64_t output_bytes, int64_t staging_bytes) {
  if (current_admission == nullptr) return absl::OkStatus();
  return current_admission->Admit(output_bytes, staging_bytes);
}

void NoteCurrentCallBackend(absl::string_view backend) {
  if (current_admission != nullptr) current_admission->set_backend(backend);
}

ScopedCallAdmission::ScopedCallAdmission(CallAdmission* admission) : previous_(current_admission) {
  current_admission = admission;
}

ScopedCallAdmission::~ScopedCallAdmission() { current_admission = previous_; }

}  // namespace posenc::server
