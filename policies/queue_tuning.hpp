// Queue cut-offs and per-queue token quotas (Chameleon §4.7-4.8): made by the
// queue tuner, read by the classifier (which queue a request's weighted size
// falls in) and by the multi-queue scheduling policy (how many tokens each
// queue may hold). Plain data.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::policies {

struct queue_tuning {
  /// Ascending WRS boundaries: queue j takes cutoffs[j-1] <= WRS < cutoffs[j];
  /// K queues have K - 1 cut-offs.
  std::vector<double> cutoffs;
  /// Tokens (input + predicted output + adapter) each queue's admitted
  /// requests may hold at once; one per queue.
  std::vector<std::uint64_t> quotas;

  std::size_t queues() const noexcept { return cutoffs.size() + 1; }
};

/// The queue `wrs` falls in under `t`.
inline std::uint32_t queue_of(const queue_tuning& t, double wrs) noexcept {
  std::uint32_t q = 0;
  while (q < t.cutoffs.size() && wrs >= t.cutoffs[q])
    ++q;
  return q;
}

} // namespace troupe::policies
