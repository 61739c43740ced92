#include "kernels/rope/frequency_cache.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/strings/string_view.h"

namespace posenc::kernels {
namespace {

void Put(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }

// One field's bytes in the key: scalars and enums as they are, optionals with a presence byte,
// lists with their length.
template <typename T>
void PutField(std::string& key, const T& v) {
  static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
  Put(key, &v, sizeof v);
}
template <typename T>
void PutField(std::string& key, const std::optional<T>& v) {
  key.push_back(v.has_value() ? 1 : 0);
  if (v) PutField(key, *v);
}
template <typename T>
void PutField(std::string& key, const std::vector<T>& v) {
  PutField(key, static_cast<int64_t>(v.size()));
  for (const T& x : v) PutField(key, x);
}

}  // namespace

std::string RopeFrequencyCache::Key(const RopeConfig& c, int64_t max_position) {
  std::string key;
  key.reserve(160);
  ForEachRopeField(c, [&key](absl::string_view name, const auto& field) {
    if (name != "seq_len") PutField(key, field);
  });
  // Only dynamic (without alpha) and longrope read seq_len; for the others it must not split
  // the cache. Where it is read, its default (the largest position + 1) counts.
  const RopeScaling& s = c.scaling;
  const bool reads_seq_len =
      (s.type == RopeScalingType::kDynamic && !s.alpha) || s.type == RopeScalingType::kLongrope;
  PutField(key, reads_seq_len ? c.seq_len.value_or(std::max<int64_t>(max_position + 1, 1)) : 0);
  return key;
}

size_t RopeFrequencyCache::EntryBytes(const std::string& key, const RopeFrequencies& value) {
  // The list node, the index node and the shared control block: a few hundred bytes.
  constexpr size_t kBookkeeping = 256;
  return kBookkeeping + 2 * key.capacity() + sizeof(RopeFrequencies) +
         value.inv_freq.capacity() * sizeof(long double);
}

size_t RopeFrequencyCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t RopeFrequencyCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

std::shared_ptr<const RopeFrequencies> RopeFrequencyCache::Find(const std::string& key) {
  if (max_entries_ > 0 && max_bytes_ > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      hits_.fetch_add(1, std::memory_order_relaxed);
      return it->second->value;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void RopeFrequencyCache::Insert(std::string key, std::shared_ptr<const RopeFrequencies> value) {
  const size_t bytes = EntryBytes(key, *value);
  if (max_entries_ == 0 || bytes > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.contains(key)) return;  // another call stored it meanwhile
  lru_.push_front(Entry{key, std::move(value), bytes});
  index_.emplace(std::move(key), lru_.begin());
  bytes_ += bytes;
  while (lru_.size() > max_entries_ || bytes_ > max_bytes_) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

absl::StatusOr<std::shared_ptr<const RopeFrequencies>> RopeFrequencyCache::Get(
    const RopeConfig& config, int64_t max_position, bool* hit) {
  std::string key = Key(config, max_position);
  std::shared_ptr<const RopeFrequencies> found = Find(key);
  if (hit != nullptr) *hit = found != nullptr;
  if (found != nullptr) return found;
  absl::StatusOr<RopeFrequencies> computed = ComputeRopeFrequencies(config, max_position);
  if (!computed.ok()) return computed.status();
  auto value = std::make_shared<const RopeFrequencies>(std::move(*computed));
  Insert(std::move(key), value);
  return value;
}

}  // namespace posenc::kernels
