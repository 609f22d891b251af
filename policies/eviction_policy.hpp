// The adapter eviction policy interface: which resident, unpinned adapters to
// drop from GPU memory when pages are needed. Called by the adapter cache core
// (runtime/adapter_cache.cpp); "lru" is the baseline.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace troupe::policies {

/// A resident adapter as the eviction policy sees it.
struct resident_adapter_view {
  std::uint32_t adapter_id = 0;
  std::uint64_t pages = 0;
  std::uint32_t pins = 0;       ///< running requests using it; > 0: not evictable
  std::uint64_t uses = 0;       ///< acquisitions since it became resident
  double last_used_s = 0;
};

/// Chooses victims. Called from one thread at a time.
class eviction_policy {
public:
  virtual ~eviction_policy() = default;
  /// Returns unpinned adapters whose pages add up to at least `pages_needed`
  /// (or every unpinned adapter when that is not enough), in eviction order.
  virtual std::vector<std::uint32_t>
  choose_victims(std::span<const resident_adapter_view> resident,
                 std::uint64_t pages_needed, double now_s) = 0;
  /// Registry name of this policy.
  virtual std::string_view name() const noexcept = 0;
};

/// Least recently used first.
class lru_eviction_policy final : public eviction_policy {
public:
  std::vector<std::uint32_t>
  choose_victims(std::span<const resident_adapter_view> resident,
                 std::uint64_t pages_needed, double now_s) override;
  std::string_view name() const noexcept override { return "lru"; }
};

} // namespace troupe::policies
