// The router of a multi-node deployment (runtime/router_core does the
// bookkeeping, policies/placement the choices). It takes the intake's
// submissions, cancels and advisories, places each request on a node, has a
// session's KV pulled to the node it moves to, passes the nodes' progress on
// to its subscribers, and places a lost node's requests again.
#pragma once

#include "messages/interfaces.hpp"

#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include <chrono>

#include <string>
#include <vector>

namespace troupe {

struct router_config {
  /// Every node, in the deployment file's order (the router's own too).
  std::vector<node_actor> nodes;
  std::vector<std::string> names; ///< for logs and stats
  std::uint32_t imbalance = 2;
  bool adapter_affinity = false; ///< see router_core
  std::uint32_t prefix_affinity_tokens = 0; ///< see router_core
  /// An advisory further ahead chooses its node this long before its turn
  /// (cluster.advise_place_lead_s; router_core::defer_advise).
  double advise_place_lead_s = 1.0;
  /// How long a node may take to answer a submission, a cancel, an
  /// advisory or a KV pull (cluster.node_timeout_s).
  caf::timespan node_timeout = std::chrono::seconds{30};
};

front_actor spawn_router(caf::actor_system& sys, router_config cfg);

} // namespace troupe
