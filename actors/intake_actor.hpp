// The intake actor: a thin shell around runtime/intake_core. Client frames
// come in from the ZeroMQ bridge; replies leave through `send`, which posts
// them back to the bridge's io_context. Spawned by runtime/deployment.cpp.
#pragma once

#include "messages/interfaces.hpp"
#include "runtime/intake_core.hpp"

#include <caf/fwd.hpp>

#include <functional>
#include <memory>
#include <vector>

namespace troupe {

struct intake_config {
  intake_limits limits;
  /// The adapters registered at start (a snapshot; later changes go through
  /// the intake itself).
  adapter_catalog catalog;
  std::shared_ptr<const gpu::executor_backend> backend;
  /// Where submissions go: the classifier when enabled, else the scheduler.
  classifier_actor classifier;
  scheduler_actor scheduler;
  /// A multi-node deployment's router: submissions, cancels, advisories and
  /// stats go there instead (may be null).
  front_actor router;
  memory_pool_actor pool;
  adapter_cache_actor adapter_cache;
  copy_engine_actor copy_engine;
  queue_tuner_actor tuner; ///< may be null
  metrics_actor metrics; ///< may be null
  executor_actor executor; ///< may be null: stats only (the backend's figures)
  prefetcher_actor prefetcher; ///< may be null: told of each accepted request's adapter
  /// Hands frames to the transport; thread-safe, never blocks. // local only
  std::function<void(std::vector<outbound_frame>)> send;
};

intake_actor spawn_intake(caf::actor_system& sys, intake_config cfg);

} // namespace troupe
