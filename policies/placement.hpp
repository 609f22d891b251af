// Placement of requests on the nodes of a multi-node deployment (Symphony's
// load-aware scheduling with KV locality): a session's turn goes where its
// KV is unless that node is markedly busier than the least loaded one, in
// which case it goes there and its KV follows.
#pragma once

#include <cstdint>
#include <span>

namespace troupe::policies {

/// What the router knows of one node.
struct node_load {
  bool alive = true;
  std::uint32_t in_flight = 0; ///< requests placed there and not finished
  /// Turns announced by advisories and placed there, not yet arrived:
  /// load that is coming (counted with in_flight).
  std::uint32_t expected = 0;
  std::uint64_t tokens = 0;    ///< their prompt and output budgets, summed
  std::uint64_t placed = 0;    ///< requests ever placed there
};

/// Where one request (or a session's next turn) goes.
struct placement {
  std::int32_t node = -1;      ///< -1: no node is alive
  bool migrate = false;        ///< the session's KV moves from `holder` to `node`
};

/// The least loaded live node: fewest requests in flight or announced, then fewest
/// tokens, then fewest ever placed (round robin when idle), then lowest index.
std::int32_t least_loaded(std::span<const node_load> nodes);

/// `holder`: the node holding the session's KV (-1: none, or no session).
/// The session stays there while it carries at most `imbalance` more
/// requests (in flight or announced) than the least loaded node.
placement place(std::span<const node_load> nodes, std::int32_t holder, std::uint32_t imbalance);

} // namespace troupe::policies
