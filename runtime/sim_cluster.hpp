// Several nodes of a deployment on one virtual clock: one sim_engine per
// node, and the live router's core (runtime/router_core) placing requests
// and conversations' turns by load and KV locality. When the router moves a
// session to another node, its cache is pulled there as in a live
// deployment (Symphony's KV migration): read out of the holder (over PCIe
// when it is on the GPU), sent over the network, taken into the new node's
// host pool; the turn is submitted there once it has landed. An advisory
// (Symphony) lets the router choose the node, and the pull start, before the
// turn arrives. Used by troupe-sim --nodes and its tests.
#pragma once

#include "runtime/router_core.hpp"
#include "runtime/sim_engine.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <unordered_map>
#include <vector>

namespace troupe {

struct sim_cluster_config {
  /// The router's: a turn stays on its session's node while that node
  /// carries at most this many more requests than the least loaded one.
  std::uint32_t imbalance = 2;
  /// Off: a turn placed away from its session's node recomputes its
  /// history there (load balancing blind to the KV).
  bool migrate = true;
  /// A request with an adapter and no session goes where that adapter's
  /// last request went, by the imbalance rule (the router's).
  bool adapter_affinity = false;
  std::uint32_t prefix_affinity_tokens = 0; ///< as the router's
  /// Between nodes (default 100 Gb/s).
  double network_bytes_per_s = 12.5e9;
  /// This many seconds before each later turn of a conversation arrives,
  /// the router is told it is coming (< 0: never).
  double advise_lead_s = -1;
  /// The router's: an advisory further ahead chooses the turn's node (and
  /// starts its cache's pull) only this long before the turn (< 0: at once;
  /// the server's cluster.advise_place_lead_s).
  double advise_place_lead_s = 1.0;
  /// Nodes lost during the run: (node, time). A lost node runs nothing
  /// more; its requests are placed again and recomputed from their prompts
  /// (as the live router does), and the session caches it held are gone.
  std::vector<std::pair<std::uint32_t, double>> failures;
};

struct sim_cluster_totals {
  sim_totals nodes;                  ///< summed over the nodes (end_s, queues: the largest)
  std::vector<std::uint64_t> placed; ///< requests submitted to each node
  std::uint64_t moves = 0;           ///< turns the router sent away from their session's KV
  std::uint64_t pulls = 0;           ///< caches that reached the new node
  std::uint64_t pull_bytes = 0;
  /// Moves whose cache did not follow (none left at the holder, no room at
  /// the new node, or migration off): the turn recomputed its history.
  std::uint64_t pulls_missed = 0;
  /// Pulls that waited for the cache to finish a move between tiers at the
  /// holder before it could be read out.
  std::uint64_t pulls_deferred = 0;
  std::uint64_t nodes_lost = 0;
  /// Requests a lost node held, placed again elsewhere.
  std::uint64_t resubmitted = 0;
};

class sim_cluster {
public:
  /// The engines are the nodes, each configured as one node of the
  /// deployment (its own pool, cache, policies and backend).
  sim_cluster(std::vector<std::unique_ptr<sim_engine>> nodes, sim_cluster_config cfg);

  /// Sends every request (a conversation's later turns after the previous
  /// reply and think time, as sim_engine::run) and runs until all ended.
  /// Outcomes come back in input order. Once per cluster (its engines are
  /// spent after it).
  std::vector<sim_outcome> run(const std::vector<sim_request>& requests);

  const sim_cluster_totals& totals() const noexcept { return totals_; }
  const sim_engine& node(std::size_t i) const { return *nodes_.at(i); }
  /// False once the node was lost (config failures).
  bool alive(std::size_t i) const { return !dead_.at(i); }
  std::size_t size() const noexcept { return nodes_.size(); }

private:
  enum class event_kind : std::uint8_t { arrival, pulled, advise, advise_due, node_down };
  struct event {
    double at;
    std::uint64_t seq;
    event_kind kind;
    std::uint64_t arg; ///< request index, session, or (advise_due) deferral token
    bool operator>(const event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  /// A session's cache on its way between nodes, and the turns waiting for
  /// it (request index, node).
  struct pull {
    std::uint32_t from = 0;
    std::uint32_t to = 0;
    bool started = false; ///< false: waiting for the cache to settle at `from`
    sim_engine::kv_export kv;
    std::vector<std::pair<std::size_t, std::uint32_t>> waiting;
    double due_s = 0; ///< an advisory's pull: when its turn is expected
  };

  void schedule(double at, event_kind kind, std::uint64_t arg);
  void arrive(std::size_t index);
  /// An advisory, its turn `in_s` seconds off: the router chooses the
  /// node now, or (advise_place_lead_s) an advise_due event does later.
  void advise(std::uint64_t session, double in_s);
  void advise_due(std::uint64_t token);
  /// The router moved the session from `from` to `to`: its cache follows
  /// (true; `waiting` are submitted once it lands) unless migration is off.
  /// `due_s`: when an advisory's turn is expected (its pull's waiting
  /// turns are empty).
  bool move(std::uint64_t session, std::uint32_t from, std::uint32_t to,
            std::vector<std::pair<std::size_t, std::uint32_t>> waiting, double due_s = 0);
  void start_pull(std::uint64_t session);
  void pulled(std::uint64_t session);
  void submit(std::size_t index, std::uint32_t node);
  void ended(std::size_t index, finish_reason reason, double now_s);
  void node_down(std::uint32_t node);
  request_spec spec_of(std::size_t index) const;

  std::vector<std::unique_ptr<sim_engine>> nodes_;
  sim_cluster_config cfg_;
  router_core router_;
  const std::vector<sim_request>* requests_ = nullptr;
  std::shared_ptr<std::unordered_map<std::uint64_t, std::vector<std::int32_t>>> histories_;
  std::unordered_map<std::uint64_t, std::deque<std::size_t>> next_turns_;
  std::unordered_map<std::uint64_t, pull> pulls_;
  /// When each advised session's next turn comes (the advisory's in_s).
  std::unordered_map<std::uint64_t, double> turn_due_s_;
  /// Deferred advisories' tokens (router_core::defer_advise) -> session.
  std::unordered_map<std::uint64_t, std::uint64_t> deferrals_;
  /// Per node: sessions whose export waits for a move between tiers there.
  std::vector<std::vector<std::uint64_t>> deferred_;
  std::vector<double> sent_s_;
  std::vector<std::int32_t> node_of_;
  std::vector<bool> dead_;
  std::priority_queue<event, std::vector<event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  double now_ = 0;
  bool ran_ = false;
  sim_cluster_totals totals_;
};

} // namespace troupe
