// The adapter_cache actor: owns the adapter registry, keeps adapters in idle
// GPU pages (Chameleon), pins them for running requests, evicts by its policy,
// prefetches the adapters of queued requests and those a predictor names, and
// orders loads from the copy engine. A thin shell around runtime/adapter_cache
// and runtime/adapter_registry. Spawned by runtime/deployment.cpp; used by the
// scheduler (acquire, release, trim, demand) and the intake (register,
// unregister, list).
#pragma once

#include "messages/interfaces.hpp"
#include "policies/eviction_policy.hpp"
#include "runtime/adapter_cache.hpp"
#include "runtime/adapter_registry.hpp"
#include "runtime/options.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct adapter_cache_config {
  adapter_catalog catalog;
  std::unique_ptr<policies::eviction_policy> policy;
  adapter_cache_options options;
  /// Pages in the device pool (for the prefetch watermark).
  std::uint64_t pool_pages = 0;
  /// The backend reads adapter files (cpu, cuda): registrations need a path.
  bool needs_files = false;
  memory_pool_actor pool;
  copy_engine_actor copy_engine;
};

adapter_cache_actor spawn_adapter_cache(caf::actor_system& sys, adapter_cache_config cfg);

} // namespace troupe
