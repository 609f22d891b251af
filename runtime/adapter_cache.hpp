// The adapter cache core: which adapters are resident in GPU
// memory, who pins them, and which to evict (by an eviction policy). Wrapped
// by the adapter_cache actor; CPU-testable.
#pragma once

#include "policies/eviction_policy.hpp"
#include "runtime/adapter_registry.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {

/// Residency and pins of adapters in GPU memory. Used by one actor only.
class adapter_cache {
public:
  enum class outcome : std::uint8_t {
    hit,  ///< resident: pinned for the caller now
    load, ///< absent: the caller must allocate `pages` and load it
    wait, ///< being loaded for someone else: the caller waits for loaded()
  };

  adapter_cache(const adapter_catalog& catalog,
                std::unique_ptr<policies::eviction_policy> policy,
                std::uint32_t max_resident);

  // -- mutators ---------------------------------------------------------------

  /// Pins `adapter_id` for one user. On `load` and `wait` the pin is taken
  /// now and holds once the load finishes.
  outcome acquire(std::uint32_t adapter_id, double now_s);

  /// The load of `adapter_id` finished: it is resident from now on.
  void loaded(std::uint32_t adapter_id);

  /// The load failed: drops the entry and every pin taken on it.
  void load_failed(std::uint32_t adapter_id);

  /// Unpins one use. Returns false if the adapter held no pin (a bug upstream).
  bool release(std::uint32_t adapter_id, double now_s);

  /// Picks unpinned resident adapters to free `pages_needed` pages (by the
  /// policy) and forgets them; the caller frees their pages.
  std::vector<std::uint32_t> evict_for(std::uint64_t pages_needed, double now_s);

  /// Picks unpinned victims until the adapters held (loading ones included)
  /// are at most max_resident.
  std::vector<std::uint32_t> evict_for_slot(double now_s);

  // -- observers --------------------------------------------------------------

  bool resident(std::uint32_t adapter_id) const;
  std::uint32_t pins(std::uint32_t adapter_id) const;
  std::size_t resident_count() const noexcept;
  std::uint64_t resident_pages() const noexcept;
  std::uint64_t hits() const noexcept { return hits_; }
  std::uint64_t misses() const noexcept { return misses_; }
  std::uint64_t evictions() const noexcept { return evictions_; }

private:
  struct slot {
    bool loading = true;
    std::uint32_t pins = 0;
    std::uint64_t uses = 0;
    double last_used_s = 0;
  };

  std::vector<std::uint32_t> evict(std::vector<std::uint32_t> victims);

  const adapter_catalog& catalog_;
  std::unique_ptr<policies::eviction_policy> policy_;
  std::uint32_t max_resident_;
  std::unordered_map<std::uint32_t, slot> slots_;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t evictions_ = 0;
};

} // namespace troupe
