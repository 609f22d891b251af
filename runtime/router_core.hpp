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
  /// `advise_place_lead_s` >= 0: an advisory further ahead than that
  /// chooses its node only that long before its turn (see defer_advise);
  /// < 0: always at once. `prefix_affinity_tokens` > 0: a request with no
  /// session whose prompt has at least that many tokens goes where the last
  /// request beginning with the same tokens (and adapter) went, by the same
  /// imbalance rule, so that prompts sharing a system prompt meet the
  /// prefix cache holding it (before adapter affinity).
  router_core(std::size_t nodes, std::uint32_t imbalance, bool adapter_affinity = false,
              double advise_place_lead_s = -1, std::uint32_t prefix_affinity_tokens = 0);

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
  /// An advisory whose turn is `in_s` seconds off. Further ahead than the
  /// placement lead, the node is not chosen yet: the load will have moved
  /// by the time the turn comes, and a cache pulled now would sit in the
  /// new node's memory, or push others out, for nothing until then. The
  /// caller calls advise_due(session, token) after `delay_s`, then
  /// advise(session) when it answers true. std::nullopt: advise now.
  struct deferral {
    std::uint64_t token = 0;
    double delay_s = 0;
    bool held = false; ///< a node holds the session's KV, as far as the router knows
  };
  std::optional<deferral> defer_advise(std::uint64_t session, double in_s);
  /// A deferred advisory is due: true while it still stands (no turn of
  /// its session arrived since, no later advisory replaced it).
  bool advise_due(std::uint64_t session, std::uint64_t token);
  /// Seconds before its turn that an advisory's placement happens (< 0:
  /// at once).
  double advise_place_lead_s() const noexcept { return advise_place_lead_s_; }
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
  /// Advisories whose placement was put off, and of them those placed
  /// when due (the others' turns came first, or a later advisory replaced
  /// them).
  std::uint64_t advisories_deferred() const noexcept { return advisories_deferred_; }
  std::uint64_t advisories_placed_late() const noexcept { return advisories_placed_late_; }
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
  /// Advisories whose placement waits (defer_advise): session -> token.
  std::unordered_map<std::uint64_t, std::uint64_t> deferred_;
  std::uint64_t next_token_ = 0;
  std::uint64_t advisories_deferred_ = 0;
  std::uint64_t advisories_placed_late_ = 0;
  double advise_place_lead_s_ = -1;
  /// Where each adapter's last request was placed (with adapter_affinity).
  std::unordered_map<std::uint32_t, std::uint32_t> adapters_;
  bool adapter_affinity_ = false;
  /// Where the last request of each prompt beginning went (with
  /// prefix_affinity_tokens), by a hash of the beginning and the adapter;
  /// forgotten all at once past max_prefixes.
  std::uint64_t prefix_key(const request_spec& spec) const;
  static constexpr std::size_t max_prefixes = 65536;
  std::unordered_map<std::uint64_t, std::uint32_t> prefixes_;
  std::uint32_t prefix_tokens_ = 0;
  std::uint64_t migrations_ = 0;
  std::uint64_t resubmitted_ = 0;
};

} // namespace troupe
