// The node actor: one node of a multi-node deployment as the router sees it,
// published over CAF's middleman (runtime/deployment.cpp). A thin shell: it
// passes submissions, cancels and advisories to the node's scheduler (through
// its classifier when it has one), gives its session caches to other nodes
// and pulls theirs, and answers stats for the whole node.
#pragma once

#include "messages/interfaces.hpp"

#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include <chrono>

namespace troupe {

struct node_config {
  classifier_actor classifier; ///< may be null: submissions go to the scheduler
  scheduler_actor scheduler;
  memory_pool_actor pool;
  adapter_cache_actor adapter_cache;
  copy_engine_actor copy_engine;
  queue_tuner_actor tuner;     ///< may be null
  metrics_actor metrics;       ///< may be null
  executor_actor executor;     ///< may be null: stats only (the backend's figures)
  /// How long another node may take to export a session's KV
  /// (cluster.node_timeout_s).
  caf::timespan node_timeout = std::chrono::seconds{30};
};

node_actor spawn_node(caf::actor_system& sys, node_config cfg);

} // namespace troupe
