// The adapter cache core (Chameleon §4.1): which adapters are resident in GPU
// memory, who pins them, what queued requests want, and which idle ones to
// evict (by an eviction policy). The cache has no capacity of its own: it
// holds what the pool's idle pages allow and gives pages back when running
// work needs them. Wrapped by the adapter_cache actor and composed directly
// by the virtual-time engine (runtime/sim_engine); CPU-testable.
#pragma once

#include "policies/eviction_policy.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace troupe {

/// Residency, pins and usage of adapters in GPU memory. One owner thread.
class adapter_cache {
public:
  enum class outcome : std::uint8_t {
    hit,  ///< resident: pinned for the caller now
    load, ///< absent: the caller must allocate its pages and load it
    wait, ///< being loaded already: the caller waits for loaded()
  };

  enum class forget_result : std::uint8_t {
    absent,    ///< not held
    forgotten, ///< dropped: the caller frees its pages
    in_use,    ///< pinned or loading: not dropped
  };

  /// `max_resident` 0: bounded by pool pages only; `window_s`: the history
  /// behind an adapter's use frequency.
  adapter_cache(std::unique_ptr<policies::eviction_policy> policy, std::uint32_t max_resident,
                double window_s = 300.0);

  // -- mutators ---------------------------------------------------------------

  /// Pins adapter `id` (of `pages` pages, rank `rank`) for one user. On
  /// `load` and `wait` the pin is taken now and holds once the load ends.
  outcome acquire(std::uint32_t id, std::uint64_t pages, std::uint32_t rank, double now_s);

  /// Like acquire() without a pin or a counted use: hit if resident, wait if
  /// loading, load if absent (then an unpinned entry is loading).
  outcome prefetch(std::uint32_t id, std::uint64_t pages, std::uint32_t rank, double now_s);

  /// The load of `id` finished: it is resident from now on.
  void loaded(std::uint32_t id);

  /// The load failed: drops the entry and every pin taken on it.
  void load_failed(std::uint32_t id);

  /// Unpins one use. False if the adapter held no pin (a bug upstream).
  bool release(std::uint32_t id, double now_s);

  /// How many waiting requests want `id` (0 clears it).
  void set_queued(std::uint32_t id, std::uint32_t waiting);

  /// Picks idle resident adapters (by the policy) freeing at least
  /// `pages_needed` pages and forgets them; the caller frees their pages.
  /// Never one that is pinned or loading; adapters queued requests want
  /// only when the others do not free enough.
  std::vector<std::uint32_t> evict_for(std::uint64_t pages_needed, double now_s);

  /// Victims to drop now without any memory need: every idle, unqueued
  /// adapter when the policy keeps none (slora), and, with max_resident,
  /// idle ones (by the policy) until at most max_resident entries are held.
  std::vector<std::uint32_t> evict_idle(double now_s);

  /// Drops `id` (unregistered) unless pinned or loading; its usage too.
  forget_result forget(std::uint32_t id);

  // -- observers --------------------------------------------------------------

  bool resident(std::uint32_t id) const;
  bool loading(std::uint32_t id) const;
  std::uint32_t pins(std::uint32_t id) const;
  std::uint32_t queued(std::uint32_t id) const;
  std::size_t resident_count() const noexcept;
  /// Pages of resident and loading entries: what the cache holds in the pool.
  std::uint64_t resident_pages() const noexcept { return held_pages_; }
  std::vector<std::uint32_t> resident_ids() const;
  /// Uses of `id` within the window ending at `now_s`.
  double window_uses(std::uint32_t id, double now_s) const;
  std::uint64_t hits() const noexcept { return hits_; }
  std::uint64_t misses() const noexcept { return misses_; }
  std::uint64_t evictions() const noexcept { return evictions_; }
  /// Prefetches that completed (loaded before any request pinned them).
  std::uint64_t prefetches() const noexcept { return prefetches_; }
  /// Acquisitions that found an adapter a prefetch brought in, unused since.
  std::uint64_t prefetch_hits() const noexcept { return prefetch_hits_; }
  const policies::eviction_policy& policy() const noexcept { return *policy_; }

private:
  static constexpr std::size_t buckets = 16;

  struct slot {
    bool loading = true;
    bool prefetched = false; ///< brought in by prefetch, not yet used
    std::uint32_t pins = 0;
    std::uint64_t pages = 0;
    std::uint32_t rank = 0;
  };

  /// Use history of an adapter; survives eviction.
  struct usage {
    std::uint64_t uses = 0;
    double last_used_s = 0;
    std::array<std::uint32_t, buckets> counts{};
    std::array<std::int64_t, buckets> epochs{};
  };

  void touch(std::uint32_t id, double now_s);
  std::int64_t epoch_of(double t) const;
  policies::resident_adapter_view view_of(std::uint32_t id, const slot& s, double now_s) const;
  std::vector<std::uint32_t> choose(bool queued_tier, std::uint64_t pages_needed, double now_s);
  std::vector<std::uint32_t> evict(const std::vector<std::uint32_t>& victims);

  std::unique_ptr<policies::eviction_policy> policy_;
  std::uint32_t max_resident_;
  double bucket_s_;
  std::unordered_map<std::uint32_t, slot> slots_;
  std::unordered_map<std::uint32_t, usage> usage_;
  std::unordered_map<std::uint32_t, std::uint32_t> queued_;
  std::uint64_t held_pages_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t evictions_ = 0;
  std::uint64_t prefetches_ = 0;
  std::uint64_t prefetch_hits_ = 0;
};

} // namespace troupe
