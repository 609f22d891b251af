// The scheduler actor: a thin shell around runtime/scheduler_core. It turns
// the core's effects into messages (reserve pages, pin adapters, run steps)
// and the answers back into core calls. Spawned by runtime/deployment.cpp.
#pragma once

#include "messages/interfaces.hpp"
#include "runtime/scheduler_core.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct scheduler_config {
  scheduler_limits limits;
  std::unique_ptr<policies::scheduling_policy> policy;
  /// Tokenizer for EOS and stop strings; must outlive the actor.
  std::shared_ptr<const gpu::executor_backend> backend;
  memory_pool_actor pool;
  adapter_cache_actor adapter_cache;
  executor_actor executor;
  /// Moves swapped KV between the device and host pools.
  copy_engine_actor copy_engine;
  /// Receives step figures and progress; may be null.
  metrics_actor metrics;
  /// Where disk-tier session caches go (limits.disk_pages > 0), one file each.
  std::string disk_dir;
};

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_config cfg);

} // namespace troupe
