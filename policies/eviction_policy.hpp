// Adapter eviction policies: which idle adapters to drop from GPU memory when
// pages are needed. Called by the adapter cache core (runtime/adapter_cache),
// which never offers an adapter in use. Built-ins, by registry name:
//   lru        least recently used first
//   lfu        fewest uses within the cache's window first
//   slora      lru order, and adapters are dropped as soon as they go idle
//              (keep_idle() is false): S-LoRA's behaviour
//   chameleon  lowest F·frequency + R·recency + S·size first over normalised
//              terms (Chameleon §4.1; F, R, S = 0.45, 0.10, 0.45)
//   fairshare  the same score with equal weights (Chameleon's Ch-FairShare)
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::policies {

/// A resident adapter as the eviction policy sees it.
struct resident_adapter_view {
  std::uint32_t adapter_id = 0;
  std::uint64_t pages = 0;
  std::uint32_t rank = 0;
  std::uint32_t pins = 0;       ///< running requests using it; > 0: not evictable
  std::uint64_t uses = 0;       ///< acquisitions since the cache first saw it
  double window_uses = 0;       ///< acquisitions within the cache's frequency window
  double last_used_s = 0;
  std::uint32_t queued = 0;     ///< waiting requests that want it
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
  /// False: the cache frees an adapter as soon as no request uses it.
  virtual bool keep_idle() const noexcept { return true; }
  /// Applies parameters from the config; "" when accepted, otherwise what
  /// was wrong. The default takes none.
  virtual std::string configure(const std::map<std::string, double>& params);
};

/// Least recently used first.
class lru_eviction_policy final : public eviction_policy {
public:
  std::vector<std::uint32_t>
  choose_victims(std::span<const resident_adapter_view> resident,
                 std::uint64_t pages_needed, double now_s) override;
  std::string_view name() const noexcept override { return "lru"; }
};

/// Fewest uses within the window first; ties least recently used first.
class lfu_eviction_policy final : public eviction_policy {
public:
  std::vector<std::uint32_t>
  choose_victims(std::span<const resident_adapter_view> resident,
                 std::uint64_t pages_needed, double now_s) override;
  std::string_view name() const noexcept override { return "lfu"; }
};

/// S-LoRA: nothing is cached; an idle adapter is freed at once (lru order
/// when asked for pages).
class slora_eviction_policy final : public eviction_policy {
public:
  std::vector<std::uint32_t>
  choose_victims(std::span<const resident_adapter_view> resident,
                 std::uint64_t pages_needed, double now_s) override;
  std::string_view name() const noexcept override { return "slora"; }
  bool keep_idle() const noexcept override { return false; }
};

/// Weights of the score; each >= 0, not all 0.
struct score_weights {
  double frequency = 0.45;
  double recency = 0.10;
  double size = 0.45;
};

/// Lowest frequency·F + recency·R + size·S first, each term normalised to
/// [0, 1] over the candidates: frequency = window_uses / max, recency =
/// 1 - (now - last_used) / (now - oldest last_used), size = pages / max.
/// Small, cold, rarely used adapters go first; ties least recently used.
class score_eviction_policy final : public eviction_policy {
public:
  score_eviction_policy(std::string name, score_weights w) : name_(std::move(name)), w_(w) {}
  std::vector<std::uint32_t>
  choose_victims(std::span<const resident_adapter_view> resident,
                 std::uint64_t pages_needed, double now_s) override;
  std::string_view name() const noexcept override { return name_; }
  /// Keys "frequency", "recency", "size".
  std::string configure(const std::map<std::string, double>& params) override;
  const score_weights& weights() const noexcept { return w_; }
  /// The score of each candidate, in input order (for tests and tools).
  std::vector<double> scores(std::span<const resident_adapter_view> candidates, double now_s) const;

private:
  std::string name_;
  score_weights w_;
};

} // namespace troupe::policies
