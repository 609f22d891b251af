// The copy engine's queue of transfers: priority classes (a demand load
// before a swap-in before a prefetch before a swap-out), FIFO within a class,
// at most `max_inflight` running, the same key never copied twice at once,
// and bytes and time accounted per class. CAF-free: the copy_engine actor and
// the virtual-time engine (runtime/sim_engine) drive it.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe {

/// A transfer's class, highest priority first.
enum class transfer_class : std::uint8_t { demand_load, swap_in, prefetch, swap_out };
inline constexpr std::size_t transfer_classes = 4;

/// "demand_load", "swap_in", "prefetch", "swap_out".
std::string_view to_string(transfer_class c) noexcept;

/// Per-class figures.
struct transfer_stats {
  std::uint64_t transfers = 0;  ///< finished
  std::uint64_t bytes = 0;      ///< of finished transfers
  std::uint64_t failures = 0;
  double busy_seconds = 0;      ///< start to finish, summed
  double queue_seconds = 0;     ///< enqueue to start, summed
};

class transfer_queue {
public:
  struct started {
    std::uint64_t id;
    transfer_class cls;
    std::uint64_t key;
    std::uint64_t bytes;
  };

  explicit transfer_queue(std::uint32_t max_inflight);

  /// Queues a transfer of `bytes` for `key` (an adapter id, a request id).
  /// While a transfer of the same key and direction (loads and prefetches
  /// move adapters in; swap_in and swap_out are separate) is queued or
  /// running, returns its id instead; a demand_load joining a queued
  /// prefetch raises it to demand_load.
  std::uint64_t enqueue(transfer_class c, std::uint64_t key, std::uint64_t bytes, double now_s);

  /// Drops a queued transfer; false if it is unknown or already running.
  bool cancel(std::uint64_t id);

  /// Starts queued transfers, highest class first, FIFO within a class,
  /// while fewer than max_inflight run.
  std::vector<started> start_ready(double now_s);

  /// A running transfer ended; false if `id` was not running.
  bool finished(std::uint64_t id, double now_s, bool ok);

  std::size_t inflight() const noexcept { return running_.size(); }
  std::size_t queued() const noexcept;
  const transfer_stats& stats(transfer_class c) const noexcept {
    return stats_[static_cast<std::size_t>(c)];
  }

private:
  struct item {
    transfer_class cls;
    std::uint64_t key;
    std::uint64_t bytes;
    double enqueued_s;
    double started_s = 0;
  };
  /// A key within its family: loads and prefetches share one (both move an
  /// adapter in); swap-ins and swap-outs have their own. Every key of 64
  /// bits stays apart (imported session caches use owners from 2^62 up).
  struct family_key {
    std::uint8_t family;
    std::uint64_t key;
    friend bool operator==(const family_key&, const family_key&) = default;
  };
  struct family_key_hash {
    std::size_t operator()(const family_key& k) const noexcept {
      return std::hash<std::uint64_t>{}(k.key) ^ (std::size_t{k.family} * 0x9e3779b97f4a7c15ull);
    }
  };
  static family_key family_of(transfer_class c, std::uint64_t key) noexcept;

  std::uint32_t max_inflight_;
  std::uint64_t next_id_ = 1;
  std::array<std::deque<std::uint64_t>, transfer_classes> queues_;
  std::unordered_map<std::uint64_t, item> items_;   // queued and running
  std::unordered_map<family_key, std::uint64_t, family_key_hash> by_key_; // -> id
  std::unordered_map<std::uint64_t, bool> running_; // ids running
  std::array<transfer_stats, transfer_classes> stats_{};
};

} // namespace troupe
