// The prefetcher actor: a policy actor around a policies::prefetch_policy
// (e.g. `histogram`). The intake tells it which adapter each accepted request
// uses; every `interval_s` it asks the policy which adapters will be wanted
// soon and hands that list to the adapter cache, which loads them while idle
// memory allows. Off unless adapter_cache.predictor names a policy; spawned
// by runtime/deployment.cpp.
#pragma once

#include "messages/interfaces.hpp"
#include "policies/prefetch_policy.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct prefetcher_config {
  std::unique_ptr<policies::prefetch_policy> policy;
  adapter_cache_actor adapter_cache;
  double interval_s = 1.0;
  /// Most adapters named per round.
  std::size_t max_per_round = 16;
};

prefetcher_actor spawn_prefetcher(caf::actor_system& sys, prefetcher_config cfg);

} // namespace troupe
