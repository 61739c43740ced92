// RopeFrequencyCache: a bounded LRU cache of RoPE frequencies keyed by the full configuration.
//
// ComputeRopeFrequencies evaluates d/2 extended-precision exponentials and the scaling's ramps;
// serving many small requests (a decode step: one token) repeats that work for the same model
// config on every call. The cache keys on every field of the RopeConfig (exact bit patterns of
// the doubles) plus the seq_len actually used when the scaling reads it (dynamic, longrope), so
// a hit returns exactly what ComputeRopeFrequencies would. Bounded in entries and in bytes
// (--cache_entries, --cache_bytes); filled only by calls that completed; errors are not cached.
//
// Thread-safety: Get may be called concurrently from any number of threads.
#ifndef POSENC_KERNELS_ROPE_FREQUENCY_CACHE_H_
#define POSENC_KERNELS_ROPE_FREQUENCY_CACHE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/rope/config.h"

namespace posenc::kernels {

class RopeFrequencyCache {
 public:
  // Holds at most `max_entries` configurations taking at most `max_bytes` together (EntryBytes);
  // either 0 disables caching (every lookup misses, nothing is stored).
  RopeFrequencyCache(size_t max_entries, size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The frequencies cached under `key` (Key(config, max_position)), or null; counts a hit or a
  // miss.
  std::shared_ptr<const RopeFrequencies> Find(const std::string& key);
  // Stores what a call that completed computed (the ops' runs call this only after the backend
  // succeeded, so a cancelled or failed call leaves nothing behind). Evicts least recently used
  // entries until both bounds hold; an entry larger than max_bytes is not stored.
  void Insert(std::string key, std::shared_ptr<const RopeFrequencies> value);

  // Find, or validate + compute + Insert (for callers outside an op's run). `hit` (optional)
  // tells whether it came from the cache. Errors are not cached.
  absl::StatusOr<std::shared_ptr<const RopeFrequencies>> Get(const RopeConfig& config,
                                                             int64_t max_position,
                                                             bool* hit = nullptr);

  size_t max_entries() const { return max_entries_; }
  size_t max_bytes() const { return max_bytes_; }
  size_t size() const;
  size_t bytes() const;  // EntryBytes summed over the entries
  int64_t hits() const { return hits_.load(); }
  int64_t misses() const { return misses_.load(); }

  // The cache key of a config (every field, doubles by bit pattern, and the seq_len used when
  // the scaling type reads one).
  static std::string Key(const RopeConfig& config, int64_t max_position);
  // What an entry costs: its key, its frequencies and the bookkeeping around them.
  static size_t EntryBytes(const std::string& key, const RopeFrequencies& value);

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const RopeFrequencies> value;
    size_t bytes;
  };
  const size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
  std::atomic<int64_t> hits_{0}, misses_{0};
};

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ROPE_FREQUENCY_CACHE_H_
