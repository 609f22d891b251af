// The host tier of adapter weights: which adapters sit in host memory, within
// a byte budget, least recently used dropped first; whatever is not here is
// read from disk on its next load. Bookkeeping only: the cpu backend keeps the
// parsed weights beside it, the sim backend only the accounting.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace troupe::gpu {

/// LRU set of adapter ids with sizes, bounded in bytes. Not thread-safe.
class host_tier {
public:
  /// `capacity_bytes` 0 means unbounded.
  explicit host_tier(std::uint64_t capacity_bytes = 0) : capacity_(capacity_bytes) {}

  /// True (and marks it most recently used) when `id` is held.
  bool touch(std::uint32_t id);

  /// Holds `id` of `bytes`, most recently used; returns the ids dropped to
  /// stay within the budget (never `id` itself, even when it alone exceeds
  /// the budget: a load in progress needs its host copy).
  std::vector<std::uint32_t> insert(std::uint32_t id, std::uint64_t bytes);

  /// Drops `id`; false if it was not held.
  bool erase(std::uint32_t id);

  bool contains(std::uint32_t id) const { return index_.contains(id); }
  std::uint64_t bytes() const noexcept { return bytes_; }
  std::uint64_t capacity() const noexcept { return capacity_; }
  std::size_t size() const noexcept { return index_.size(); }

private:
  struct item {
    std::uint32_t id;
    std::uint64_t bytes;
  };

  std::uint64_t capacity_;
  std::uint64_t bytes_ = 0;
  std::list<item> order_; // most recently used first
  std::unordered_map<std::uint32_t, std::list<item>::iterator> index_;
};

} // namespace troupe::gpu
