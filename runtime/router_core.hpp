// The router's bookkeeping in a multi-node deployment, without CAF: where
// each request and each session's KV is, what every node carries, and the
// progress the client sees. A request whose node disappears is placed again
// and recomputed from its prompt; the tokens the client already has are not
// sent twice (greedy and seeded sampling give the same tokens again), and
// each request ends once. The actor (actors/router_actor) does the messaging.
#pragma once

#include "messages/payloads.hpp"
#include "policies/placement.hpp"
#include "runtime/request_state.hpp"

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace troupe {

class router_core {
public:
  /// `imbalance`: see policies::place. `adapter_affinity`: a request with
  /// an adapter and no session goes where that adapter's last request went
  /// (its weights likely still cached there), by the same imbalance rule.
  router_core(std::size_t nodes, std::uint32_t imbalance, bool adapter_affinity = false);

  /// Where a request goes. `pull_from` >= 0: its session's KV is on that
  /// node and should be pulled to `node` before the request is submitted.
  struct route {
    std::int32_t node = -1; ///< -1: no node is alive
    std::int32_t pull_from = -1;
  };
  /// A new request (not yet recorded): a node chosen at an advisory for its
  /// session wins while alive; else placement by load and KV locality.
  route place(const request_spec& spec);
  /// An advisory: the node the session's next turn will go to, chosen now;
  /// the caller pulls its KV there when `pull_from` says so.
  route advise(std::uint64_t session);
  /// The request is being submitted to `node` (counted in its load).
  void assign(const request_spec& spec, std::uint32_t node);
  /// The node refused or never answered the submission: forgotten.
  void forget(std::uint64_t request_id);
  /// Tokens and ends from any node, filtered to what the client has not
  /// seen: each token index once, each request's end once.
  progress_batch on_progress(const progress_batch& batch);
  /// A node is gone: it takes nothing more, and its requests come back to
  /// be placed again (in arrival order; their KV there is lost).
  std::vector<request_spec> on_node_down(std::uint32_t node);

  std::optional<std::uint32_t> node_of(std::uint64_t request_id) const;
  const std::vector<policies::node_load>& loads() const noexcept { return loads_; }
  std::size_t in_flight() const noexcept { return requests_.size(); }
  std::uint64_t migrations() const noexcept { return migrations_; }
  std::uint64_t resubmitted() const noexcept { return resubmitted_; }
  std::size_t alive() const noexcept;

private:
  struct entry {
    request_spec spec;
    std::uint32_t node = 0;
    std::uint32_t delivered = 0; ///< tokens the client has
    std::uint64_t tokens = 0;    ///< counted in the node's load
  };
  std::int32_t holder_of(std::uint64_t session) const;
  route decide(std::uint64_t session);

  std::vector<policies::node_load> loads_;
  std::uint32_t imbalance_;
  std::unordered_map<std::uint64_t, entry> requests_;
  /// Where each session's KV is (its last turn's node).
  std::unordered_map<std::uint64_t, std::uint32_t> sessions_;
  /// Nodes chosen by advisories, for the sessions' next turns.
  std::unordered_map<std::uint64_t, std::uint32_t> advised_;
  /// Where each adapter's last request was placed (with adapter_affinity).
  std::unordered_map<std::uint32_t, std::uint32_t> adapters_;
  bool adapter_affinity_ = false;
  std::uint64_t migrations_ = 0;
  std::uint64_t resubmitted_ = 0;
};

} // namespace troupe
