// The virtual-time engine: the scheduler core, the page pool, the adapter
// cache core and the copy engine's transfer queue composed synchronously on a
// virtual clock, with the sim backend pricing steps and transfers. The same
// decision code as the actors in a live deployment, without CAF; an hour of
// trace runs in seconds. Used by troupe-sim and its tests.
#pragma once

#include "gpu/sim_backend.hpp"
#include "policies/classifier_policy.hpp"
#include "policies/eviction_policy.hpp"
#include "policies/prefetch_policy.hpp"
#include "policies/queue_tuner.hpp"
#include "policies/scheduling_policy.hpp"
#include "runtime/adapter_cache.hpp"
#include "runtime/adapter_registry.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/options.hpp"
#include "runtime/scheduler_core.hpp"
#include "runtime/transfer_queue.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <map>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace troupe {

struct sim_engine_config {
  scheduler_limits limits;
  std::unique_ptr<policies::scheduling_policy> scheduling;
  std::unique_ptr<policies::eviction_policy> eviction;
  /// Queue and predicted length per request; single_queue with max_tokens
  /// when null.
  std::unique_ptr<policies::classifier_policy> classifier;
  adapter_cache_options cache;
  /// The queue tuner, run every period_s of virtual time when enabled.
  queue_tuner_options tuner;
  std::uint32_t copy_inflight = 4;
  /// With a disk tier: fit limits.disk_fetch on the backend (its prefill
  /// times, its copy rate, the cost model's disk rate), as the live server
  /// does, so a turn reads its cache from disk only when that is predicted
  /// no slower than recomputing it. False: always read.
  bool disk_fetch_by_cost = false;
  /// > 0: adapters live in a static region of this many pages, apart from
  /// the KV pages (S-LoRA's "no unified paging" ablation); 0: one unified
  /// pool for both.
  std::uint64_t adapter_partition_pages = 0;
  /// A conversation whose history would pass this many tokens (with the
  /// turn's prompt and reply) starts a fresh context window.
  std::uint32_t max_context = 4096;
  /// Layer-wise streaming (Symphony): a request whose cache comes back from
  /// the host pool starts its step once the first of `layers` layers is on
  /// the GPU, and each layer's compute waits only for that layer's copy
  /// (modelled). Off: the whole copy, then the step.
  bool layer_streaming = false;
  std::uint32_t layers = 32;
  /// Advisories (Symphony): this many seconds before each later turn of a
  /// conversation arrives, the scheduler is told it is coming (< 0: never).
  double advise_lead_s = -1;
  /// Predictive adapter prefetch (Chameleon's optional one; the prefetcher
  /// actor's policy): told of every arrival, asked every
  /// cache.predictor_interval_s for up to `prefetch_per_round` adapters to
  /// load. Null: off.
  std::unique_ptr<policies::prefetch_policy> prefetcher;
  std::size_t prefetch_per_round = 16;
  /// Prompts' content, for prefix caching (limits.prefix_caching): request
  /// i's prompt begins with the first `shared_prefix_tokens` tokens of
  /// system prompt i mod `prefix_groups`, and the rest is its own (no two
  /// requests share more). With both 0 and prefix caching off, tokens are
  /// whatever (only lengths matter to the sim backend).
  std::uint32_t shared_prefix_tokens = 0;
  std::uint32_t prefix_groups = 1;
};

/// One request of a simulated workload.
struct sim_request {
  double arrival_s = 0;
  std::uint32_t prompt_tokens = 1;
  std::uint32_t output_tokens = 1;
  std::uint32_t adapter_id = 0; ///< 0: the base model
  /// A turn of a multi-turn conversation (0: none). A later turn of the same
  /// session arrives `think_s` after the previous turn's reply ends (its
  /// arrival_s is ignored) and its prompt is the conversation so far (every
  /// earlier prompt and reply) followed by its own `prompt_tokens`.
  std::uint64_t session = 0;
  double think_s = 0;
  /// Higher is more urgent (the wire's); the `priority` policy reads it.
  std::int32_t priority = 0;
};

/// What happened to one request.
struct sim_outcome {
  double arrival_s = 0;
  double ttft_s = -1; ///< arrival to first token; -1 when it never came
  double queue_s = -1; ///< arrival to its first scheduled step; -1 when never scheduled
  double e2e_s = -1;
  finish_reason reason = finish_reason::error;
  std::uint32_t completion_tokens = 0;
  /// Its own 99th-percentile time between tokens (nearest rank over the
  /// gaps after the first token); -1 with fewer than 2 tokens.
  double tbt_p99_s = -1;
};

/// Totals of a run.
struct sim_totals {
  std::uint64_t steps = 0;
  double end_s = 0;
  std::uint64_t adapter_hits = 0;
  std::uint64_t adapter_misses = 0;
  std::uint64_t adapter_evictions = 0;
  std::uint64_t prefetches = 0;
  std::uint64_t prefetch_hits = 0;
  std::uint64_t pcie_bytes = 0;   ///< host-to-device adapter bytes
  std::uint64_t disk_bytes = 0;   ///< adapter bytes read from disk (host-tier misses)
  double pcie_seconds = 0;
  double disk_seconds = 0;
  std::uint64_t pool_low_water = 0;
  /// Pages still held when the run ended: adapters kept resident only (every
  /// request's pages must be back).
  std::uint64_t pool_request_pages_at_end = 0;
  std::uint64_t pool_adapter_pages_at_end = 0;
  std::uint64_t cache_pages_at_end = 0;
  std::uint64_t squashed = 0;
  std::uint64_t aborted = 0;
  std::uint64_t swapped_out = 0;
  std::uint64_t swapped_in = 0;
  std::uint64_t swap_bytes = 0; ///< KV bytes moved by swaps, both ways
  std::uint64_t growths_denied = 0;
  std::uint64_t host_pages_at_end = 0;
  /// The disk tier of session caches (scheduler_limits::disk_pages): caches
  /// written to disk and read back, their bytes both ways, and the modelled
  /// seconds of those copies (disk plus host copy).
  std::uint64_t session_disk_writes = 0;
  std::uint64_t session_disk_reads = 0;
  std::uint64_t session_disk_bytes = 0;
  /// Turns whose cache was on disk that recomputed it (disk_fetch_by_cost).
  std::uint64_t session_disk_skips = 0;
  double session_disk_seconds = 0;
  /// Pages of session caches on disk when the run ended.
  std::uint64_t disk_pages_at_end = 0;
  /// Prompt tokens computed by prefills; of them, the ones computed before
  /// (a conversation's history again, or a preempted request's recompute);
  /// history tokens reused from a session cache instead; output tokens.
  std::uint64_t prefill_tokens = 0;
  std::uint64_t recomputed_tokens = 0;
  std::uint64_t reused_tokens = 0;
  std::uint64_t decode_tokens = 0;
  /// Prefix caching: admissions that read cached pages, and the pages
  /// cached when the run ended (held in the pool, read by no request).
  std::uint64_t prefix_hits = 0;
  std::uint64_t prefix_pages_at_end = 0;
  /// Moves of the cache's pages the pool refused (a page its owner did not
  /// hold): a bookkeeping fault, 0 when all is well.
  std::uint64_t refused_page_moves = 0;
  std::uint64_t tunings = 0;
  std::size_t queues = 1; ///< after the last tuning
};

/// The requests sent at their own arrival times, in input order: every
/// request outside a conversation and each conversation's first turn.
/// `later` gets each conversation's other turns, in order: each is sent once
/// the one before it is answered.
std::vector<std::size_t> sent_at_arrival(const std::vector<sim_request>& requests,
                                         std::unordered_map<std::uint64_t, std::deque<std::size_t>>& later);
/// Takes the session's next turn off `later` (none: it has no more).
std::optional<std::size_t> take_next_turn(std::unordered_map<std::uint64_t, std::deque<std::size_t>>& later,
                                          std::uint64_t session);

/// Runs a workload to completion on a virtual clock. One thread.
class sim_engine {
public:
  /// `backend` prices steps and transfers; `catalog` holds the adapters.
  sim_engine(sim_engine_config cfg, std::shared_ptr<gpu::sim_backend> backend,
             adapter_catalog catalog, std::uint64_t pool_pages);

  /// Submits every request at its arrival time and runs until all finished.
  /// Outcomes come back in input order.
  std::vector<sim_outcome> run(const std::vector<sim_request>& requests);

  // Stepwise use, for a cluster of engines on one virtual clock
  // (runtime/sim_cluster): begin(), then submit() requests, step() while
  // next_event_s() is the earliest event of all, and end(). The cluster
  // places each request and chains a conversation's turns; the engine runs
  // what it is given. Calls that take `now_s` are made at the cluster's
  // time, never before this engine's last event.

  /// A request's end (finished, refused or aborted), at the engine's time.
  using end_hook = std::function<void(std::size_t index, finish_reason reason, double now_s)>;
  /// Takes `requests` (kept by reference until end()); schedules nothing.
  /// `histories`: the conversations' tokens so far, shared by every engine
  /// of a cluster (null: this engine's own).
  void begin(const std::vector<sim_request>& requests, end_hook on_end,
             std::shared_ptr<std::unordered_map<std::uint64_t, std::vector<std::int32_t>>> histories);
  /// Request `index` reaches this engine at `now_s`; it was sent at
  /// `arrival_s` (its latency counts from then).
  void submit(std::size_t index, double now_s, double arrival_s);
  /// The time of this engine's next event (infinity: none).
  double next_event_s() const noexcept;
  /// Runs the next event and what follows from it at the same instant.
  void step();
  /// Fills totals() and hands back the outcomes (only the submitted
  /// requests' are meaningful).
  std::vector<sim_outcome> end();

  /// A session cache read out for another node (Symphony's KV migration).
  struct kv_export {
    std::uint64_t pages = 0;
    std::uint64_t bytes = 0;
    std::vector<std::int32_t> tokens;
    std::uint32_t adapter_id = 0;
    double read_s = 0; ///< a cache on the GPU: its copy to the host first
  };
  /// Takes the session's cache out of service for export (none: no cache
  /// here, or one moving between tiers: see session_moving).
  std::optional<kv_export> begin_export(std::uint64_t session, double now_s);
  bool session_moving(std::uint64_t session) const { return core_.session_moving(session); }
  /// The export ended: its pages here are freed.
  void end_export(std::uint64_t session, double now_s);
  /// A session cache arriving from another node, into host pages here;
  /// false when there is no room (the turn recomputes).
  bool import_session(std::uint64_t session, std::uint64_t pages, std::vector<std::int32_t> tokens,
                      std::uint32_t adapter_id, double now_s);
  /// An advisory for the session's next turn, now.
  /// An advisory for `session`, its turn expected in `in_s`.
  void advise(std::uint64_t session, double now_s, double in_s);

  const sim_totals& totals() const noexcept { return totals_; }
  const adapter_cache& cache() const noexcept { return cache_; }
  const scheduler_core& core() const noexcept { return core_; }

private:
  enum class event_kind : std::uint8_t { arrival, step_done, transfer_done, first_layer_in, advise, fetch, predict };
  /// Hands an advisory to the core; a fetch it puts off comes as a fetch event.
  void advise_core(std::uint64_t session, double in_s);
  struct event {
    double at;
    std::uint64_t seq;
    event_kind kind;
    std::uint64_t arg; ///< request index, or transfer id
    bool operator>(const event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct transfer {
    std::uint32_t adapter_id; ///< adapter loads
    std::uint64_t bytes;
    transfer_class cls = transfer_class::demand_load;
    std::uint64_t request_id = 0; ///< swaps
    double done_s = 0;
    bool disk = false;
    double disk_s = 0;
    double copy_s = 0;
    bool session_file = false; ///< a session cache to or from its file (disk tier)
  };

  void schedule(double at, event_kind kind, std::uint64_t arg);
  void tune_if_due();
  void pump();
  void apply(scheduler_effects fx);
  void acquire(std::uint64_t request_id, std::uint32_t adapter_id);
  void load(std::uint32_t adapter_id, transfer_class kind, bool retried);
  void start_transfers();
  void settle(std::uint32_t adapter_id, scheduler_core::adapter_grant g);
  void drop(const std::vector<std::uint32_t>& victims);
  void prefetch(std::uint32_t adapter_id);
  void swap_out(const scheduler_effects::swap& s, bool session_cache);
  /// A disk-tier copy of a session cache: out writes its host pages to a
  /// file, in reads the file into host pages reserved first.
  void disk_out(const scheduler_effects::swap& s);
  void disk_in(const scheduler_effects::swap& s);

  sim_engine_config cfg_;
  std::shared_ptr<gpu::sim_backend> backend_;
  adapter_catalog catalog_;
  scheduler_core core_;
  page_pool pool_;
  page_pool host_;
  page_pool adapter_partition_;
  /// Where adapter weights go: the unified pool, or the static partition.
  page_pool& adapter_pages() noexcept { return cfg_.adapter_partition_pages > 0 ? adapter_partition_ : pool_; }
  /// Swaps queued or running: (request id, class) -> the swap.
  std::map<std::pair<std::uint64_t, transfer_class>, scheduler_effects::swap> swaps_;
  std::unordered_set<std::uint64_t> session_outs_; // swap-outs that move a session's cache
  std::unordered_set<std::uint64_t> session_ins_;  // swap-ins that bring one back (advisories)
  /// Session caches on their way to or from the disk tier: (owner, class:
  /// swap_out writes the file, swap_in reads it) -> the copy.
  std::map<std::pair<std::uint64_t, transfer_class>, scheduler_effects::swap> disk_copies_;
  /// Streamed swap-ins: request id -> (copy start, copy seconds); the
  /// request runs from its first layer's arrival, its step gated per layer.
  std::unordered_map<std::uint64_t, std::pair<double, double>> streams_;
  adapter_cache cache_;
  transfer_queue transfers_;
  /// Session caches to and from their files: the disk's own queue, one at a
  /// time (its bandwidth is the disk's, not one per copy slot), apart from
  /// PCIe copies. Their ids carry disk_transfer_bit in events.
  transfer_queue disk_transfers_{1};
  static constexpr std::uint64_t disk_transfer_bit = std::uint64_t{1} << 63;
  std::uint64_t pool_pages_;
  double now_ = 0;
  std::uint64_t seq_ = 0;
  std::priority_queue<event, std::vector<event>, std::greater<>> events_;
  std::unordered_map<std::uint64_t, transfer> running_transfers_;
  std::unordered_map<std::uint32_t, std::vector<std::uint64_t>> waiters_; // adapter -> requests
  std::vector<gpu::step_entry> in_flight_;
  std::vector<std::int32_t> in_flight_tokens_;
  std::vector<sim_outcome> outcomes_;
  /// Per running request: when its last token came, how many came, and the
  /// gaps between them (for its P99 time between tokens).
  struct token_gaps {
    double last_s = 0;
    std::uint32_t seen = 0;
    std::vector<float> gaps;
  };
  std::vector<token_gaps> gaps_; ///< per request index
  std::vector<policies::tuner_sample> samples_;
  double next_tune_s_ = 0;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> request_meta_; // adapter, prompt
  // Conversations: the turns still to come per session (request indices, in
  // order), each session's tokens so far, each running turn's output, and
  // the history length each turn carried.
  std::unordered_map<std::uint64_t, std::deque<std::size_t>> next_turns_;
  /// When each advised session's next turn comes.
  std::unordered_map<std::uint64_t, double> turn_due_s_;
  std::shared_ptr<std::unordered_map<std::uint64_t, std::vector<std::int32_t>>> histories_;
  end_hook on_end_; ///< set: a cluster places requests and chains turns
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> outputs_;
  std::vector<std::uint32_t> history_len_;
  std::uint64_t new_prompt_tokens_ = 0;
  void next_turn(std::uint64_t session);
  const std::vector<sim_request>* requests_ = nullptr;
  std::vector<double> sent_s_; ///< per request: when it was sent (its latency's start)
  bool predict_pending_ = false;
  /// Pages the adapter cache gave back to trims, in all (see pump).
  std::uint64_t trimmed_pages_ = 0;
  /// Schedules a predictor round `from_s` plus the interval, unless one is
  /// pending or nothing else is to happen.
  void arm_predictor(double from_s);
  void ended(std::size_t index, finish_reason reason);
  sim_totals totals_;
};

} // namespace troupe
