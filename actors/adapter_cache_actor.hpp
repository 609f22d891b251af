// The adapter_cache actor: keeps adapters in idle GPU pages (Chameleon), pins
// them for running requests, evicts by its policy and orders loads from the
// copy engine. Spawned by runtime/deployment.cpp; used by the scheduler.
#pragma once

#include "messages/interfaces.hpp"
#include "policies/eviction_policy.hpp"
#include "runtime/adapter_cache.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct adapter_cache_config {
  std::shared_ptr<const adapter_catalog> catalog;
  std::unique_ptr<policies::eviction_policy> policy;
  std::uint32_t max_resident = 0;
  memory_pool_actor pool;
  copy_engine_actor copy_engine;
};

adapter_cache_actor spawn_adapter_cache(caf::actor_system& sys, adapter_cache_config cfg);

} // namespace troupe
