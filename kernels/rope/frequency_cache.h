// RopeFrequencyCache: a bounded LRU cache of RoPE frequencies keyed by the full configuration.
//
// ComputeRopeFrequencies evaluates d/2 extended-precision exponentials and the scaling's ramps;
// serving many small requests (a decode step: one token) repeats that work for the same model
// config on every call. The cache keys on every field of the RopeConfig (exact bit patterns of
// the doubles) plus the seq_len actually used when the scaling reads it (dynamic, longrope), so
// a hit returns exactly what ComputeRopeFrequencies would. Errors are not cached.
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
  // Holds at most `capacity` configurations; 0 disables caching (every Get computes).
  explicit RopeFrequencyCache(size_t capacity) : capacity_(capacity) {}

  // ComputeRopeFrequencies(config, max_position), from the cache when possible. `hit` (optional)
  // tells whether it came from the cache.
  absl::StatusOr<std::shared_ptr<const RopeFrequencies>> Get(const RopeConfig& config,
                                                             int64_t max_position,
                                                             bool* hit = nullptr);

  size_t capacity() const { return capacity_; }
  size_t size() const;
  int64_t hits() const { return hits_.load(); }
  int64_t misses() const { return misses_.load(); }

  // The cache key of a config (every field, doubles by bit pattern, and the seq_len used when
  // the scaling type reads one).
  static std::string Key(const RopeConfig& config, int64_t max_position);

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const RopeFrequencies>>;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::atomic<int64_t> hits_{0}, misses_{0};
};

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_ROPE_FREQUENCY_CACHE_H_
