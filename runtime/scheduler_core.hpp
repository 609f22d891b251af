// The scheduler core: continuous (iteration-level) batching around a
// scheduling policy. It owns every request's state machine and returns the
// effects the shell must carry out (reserve pages, pin adapters, release
// them, send tokens and terminal replies). Wrapped by the scheduler actor;
// driven directly, with a virtual clock, by tests and the simulator.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/step.hpp"
#include "policies/disk_fetch.hpp"
#include "policies/scheduling_policy.hpp"
#include "policies/session_eviction.hpp"
#include "runtime/held_machine.hpp"
#include "runtime/json_constraint.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/json_trigger.hpp"
#include "runtime/reasoning_gate.hpp"
#include "runtime/prefix_cache.hpp"
#include "runtime/request_state.hpp"

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <optional>
#include <variant>
#include <vector>

namespace troupe {

struct scheduler_limits {
  std::uint32_t max_running = 256;
  std::uint32_t token_budget = 8192;
  std::uint32_t max_waiting = 65536;
  /// Pages in the unified pool and tokens per page.
  std::uint64_t total_pages = 0;
  std::uint32_t page_tokens = 16;
  /// A request whose adapter fails to load this many times ends with an error.
  std::uint32_t max_adapter_failures = 3;
  /// Tokens a page holds as a hidden cache; 0: the backend keeps none.
  std::uint32_t hidden_page_tokens = 0;
  /// LongRoPE's pretrained context (executor_backend::rope_long_after; 0:
  /// none). A pass that leaves a sequence longer than this turns by other
  /// frequencies, so a request that grows past it is recomputed (as
  /// Hugging Face's generate() does), a turn whose prompt passes it does
  /// not reuse a session cache that did not, and the prefix cache keeps
  /// the pages of prompts past it apart from the others'.
  std::uint32_t rope_long_after = 0;
  /// Pages of the host pool for swapped-out caches (0: no swapping) and the
  /// bytes of a page (what a swap moves per page).
  std::uint64_t host_pages = 0;
  std::uint64_t page_bytes = 0;
  /// Reserve pages as requests grow (vLLM's way: more requests fit, and a
  /// request that cannot grow makes the policy preempt) instead of each
  /// request's whole life at admission (S-LoRA's memory-safe way: never
  /// preempts for memory).
  bool on_demand = false;
  /// On demand: pages kept free from admissions for growth (vLLM's 1%).
  std::uint64_t growth_watermark = 0;
  /// Most pages finished turns may keep for their sessions (0: sessions
  /// keep nothing); least recently used sessions go first, and whenever an
  /// admission needs the pages.
  std::uint64_t session_pages = 0;
  /// Pages of session caches that may wait in files on disk, the tier
  /// below the host pool (0: none): a host-tier cache pushed out goes there.
  std::uint64_t disk_pages = 0;
  /// Write-back (with disk_pages): while less than this share of the host
  /// pool is free or clean (its cache already copied to disk), the next
  /// host cache to go down is copied ahead of need (0: never).
  double disk_write_back = 0;
  /// Set: a turn whose cache is on disk reads it back only when the model
  /// predicts that no slower than recomputing it (policies/disk_fetch.hpp);
  /// unset: it always reads.
  std::optional<policies::disk_fetch_model> disk_fetch;
  /// Layer-wise streaming (Symphony; the backend must stream_in): a turn
  /// whose session cache comes from the host pool runs at once, its first
  /// step computing each layer as that layer's pages land.
  bool layer_streaming = false;
  /// Which session cache leaves a tier first when it needs room.
  policies::session_eviction session_eviction = policies::session_eviction::lru;
  /// An advisory for a turn expected later than this fetches its cache
  /// only this long before the turn (Symphony's expected arrival), so that
  /// the cache does not take GPU pages, or push other caches down, early.
  double advise_fetch_lead_s = 1.0;
  /// Automatic prefix caching: whole prompt pages stay in the pool after
  /// their prefill, named by their tokens and adapter, and a later request
  /// whose prompt begins with the same tokens reads them instead of
  /// computing them again (runtime/prefix_cache.hpp). Pages no request reads
  /// count as free and go, least recently used first, when memory is wanted.
  /// Requests with a session (their own cache), a hidden cache or prompt
  /// log-probabilities neither read nor add pages.
  bool prefix_caching = false;
  /// Most cached prompt pages no request reads that the cache keeps (the
  /// least recently used beyond go at the next admission round), so that
  /// idle memory is left for the adapter cache too.
  std::uint64_t prefix_idle_pages = std::numeric_limits<std::uint64_t>::max();
  /// A prompt page is cached once this many requests' prompts have held it
  /// (2: a prompt seen once takes no idle memory; 1: every prompt's pages).
  /// A page's count is remembered until 16 offers per pool page have come
  /// since its last.
  std::uint32_t prefix_admit_offers = 1;
};

/// The memory pool's owner (page_owner_kind::request) of the prefix cache's
/// pages: apart from request ids and imported caches' owners.
inline constexpr std::uint64_t prefix_cache_owner = std::uint64_t{1} << 61;

/// Work the shell must do after a call into the core, in field order.
struct scheduler_effects {
  struct reserve { std::uint64_t request_id; std::uint64_t pages; };
  /// `pages` more for a running request (on-demand reservation); answered
  /// by on_grown with all of its pages.
  /// `ticket` tells a stale answer (for a growth the request no longer
  /// waits for) from the current one.
  struct grow { std::uint64_t request_id; std::uint64_t pages; std::uint64_t ticket; };
  struct acquire { std::uint64_t request_id; std::uint32_t adapter_id; };
  /// The pages of (finished) request `from`, a session's cached KV, become
  /// `to`'s; carried out before `to`'s reservation, which adds the rest.
  struct adopt { std::uint64_t from; std::uint64_t to; };
  struct release_adapter { std::uint64_t request_id; std::uint32_t adapter_id; };
  /// A KV swap: out copies `device_pages` into `host` pages the shell
  /// reserves (then answers on_swapped_out); in copies `host_pages` into
  /// `device_pages` (then answers on_swapped_in).
  struct swap {
    std::uint64_t request_id;
    std::vector<std::uint32_t> device_pages;
    std::vector<std::uint32_t> host_pages; ///< empty on a swap-out: the shell reserves them
    std::uint64_t bytes;
  };
  struct token { std::uint64_t request_id; std::uint32_t index; std::int32_t token; };
  struct finish {
    std::uint64_t request_id;
    finish_reason reason;
    std::uint32_t prompt_tokens;
    std::uint32_t completion_tokens;
    request_times times;
    /// Prompt tokens its (last) prefill read from a cache instead of
    /// computing them: a session's history or cached prompt pages.
    std::uint32_t cached_tokens;
  };

  /// Whole prompt pages of request `request_id` (just prefilled) that
  /// become the prefix cache's: moved in the pool to prefix_cache_owner.
  /// Carried out before anything else.
  struct share { std::uint64_t request_id; std::vector<std::uint32_t> pages; };

  std::vector<share> shares;
  /// Pages of the prefix cache (owner prefix_cache_owner) to free; carried
  /// out with release_pages, before the reservations that count on them.
  std::vector<std::uint32_t> release_cached;
  std::vector<adopt> adopts;
  std::vector<reserve> reserves;
  std::vector<grow> grows;
  std::vector<acquire> acquires;
  std::vector<std::uint64_t> release_pages; ///< request ids whose pages to free
  std::vector<release_adapter> release_adapters;
  std::vector<swap> swap_outs;
  std::vector<swap> swap_ins;
  /// A session cache moving to the host pool: as a swap-out, for the
  /// finished request (`request_id`) whose pages hold it; answered by
  /// on_session_out.
  std::vector<swap> session_outs;
  /// A session cache coming back from the host pool ahead of its turn (an
  /// advisory): the shell reserves `host_pages.size()` device pages for
  /// `request_id` (the turn that left it), copies, then answers on_session_in.
  std::vector<swap> session_ins;
  /// As swap_ins, copied layer by layer (executor_backend::stream_in under
  /// the request's id) while the request's first step may already run;
  /// answered by on_swapped_in.
  std::vector<swap> stream_ins;
  /// Streams no step will use (their request ended first): forget them.
  std::vector<std::uint64_t> end_streams;
  /// A host-tier session cache moving to a file (`request_id`: its owner;
  /// `host_pages`: where it is); answered by on_disk_out. The host pages are
  /// released by the core after.
  std::vector<swap> disk_outs;
  /// A session cache coming back from its file: the shell reserves
  /// `bytes / page_bytes` host pages for the owner (`request_id`), reads the
  /// file into them, removes it and answers on_disk_in.
  std::vector<swap> disk_ins;
  /// Owners whose files to remove (caches dropped from the disk tier).
  std::vector<std::uint64_t> disk_deletes;
  std::vector<std::uint64_t> release_host_pages; ///< request ids whose host pages to free
  /// Pages to ask the adapter cache to free from idle adapters (0: none).
  std::uint64_t trim_pages = 0;
  std::vector<token> tokens;
  /// The log-probabilities of tokens[first] for the requests that asked
  /// (request_spec::logprobs >= 0).
  std::vector<std::pair<std::size_t, gpu::token_logprobs>> logprobs;
  /// The prompt log-probabilities of the requests that asked
  /// (request_spec::prompt_logprobs >= 0), with their first token
  /// (tokens[first]): one per prompt token after the first.
  std::vector<std::pair<std::size_t, std::vector<gpu::token_logprobs>>> prompt_logprobs;
  std::vector<finish> finished;
  /// Adapters whose count of waiting requests changed: (adapter id, waiting
  /// now), for the adapter cache's prefetch and eviction tiers.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> queued;

  bool empty() const noexcept;
  /// Appends `other` to this.
  void merge(scheduler_effects&& other);
};

/// Continuous batching. One step is in flight at a time. Not thread-safe:
/// one owner (the scheduler actor or the simulator) calls it.
class scheduler_core {
public:
  enum class submit_result : std::uint8_t {
    accepted,
    queue_full, ///< max_waiting requests already wait
    duplicate,  ///< the id is in the system already
    too_large,  ///< prompt + max_new_tokens need more pages than the pool has
  };

  /// `vocab` (may be null) gives the EOS id and decodes tokens for stop
  /// strings; it must outlive the core.
  scheduler_core(scheduler_limits limits,
                 std::unique_ptr<policies::scheduling_policy> policy,
                 const gpu::tokenizer* vocab);

  // -- mutators ---------------------------------------------------------------

  /// Queues a new request. Throws std::invalid_argument for a json_schema
  /// json_schema::compile refuses (the intake refuses such a request first).
  submit_result submit(request_spec spec);

  /// Runs the policy and starts admitting what it chose.
  scheduler_effects admit(double now_s);

  /// The memory pool answered a reservation; `pages` are the page ids granted.
  scheduler_effects on_pages(std::uint64_t request_id, bool granted, double now_s,
                             std::vector<std::uint32_t> pages = {});

  /// How the adapter cache answered an acquisition.
  enum class adapter_grant : std::uint8_t {
    granted, ///< resident and pinned
    retry,   ///< no room now: back to the queue (at most max_adapter_failures times)
    failed,  ///< its files cannot be loaded: the request ends with adapter_error
  };

  /// The adapter cache answered an acquisition.
  scheduler_effects on_adapter(std::uint64_t request_id, adapter_grant grant, double now_s);
  /// Shorthand: true is granted, false is retry.
  scheduler_effects on_adapter(std::uint64_t request_id, bool granted, double now_s) {
    return on_adapter(request_id, granted ? adapter_grant::granted : adapter_grant::retry, now_s);
  }

  /// The memory pool answered a growth; `pages` are all the request's page
  /// ids. On refusal the request stalls until pages come free (the policy
  /// is asked to preempt).
  scheduler_effects on_grown(std::uint64_t request_id, std::uint64_t ticket, bool granted,
                             std::vector<std::uint32_t> pages = {});

  /// A swap-out ended: on success the cache is in `host_pages` and the
  /// request waits to be swapped in; on failure (no host pages, a copy
  /// error) it waits to be recomputed. Its device pages are released.
  scheduler_effects on_swapped_out(std::uint64_t request_id, bool ok, double now_s,
                                   std::vector<std::uint32_t> host_pages = {});
  /// A session cache's move to the host pool ended (`owner`: the request id
  /// it was sent with). Its device pages are released either way.
  scheduler_effects on_session_out(std::uint64_t owner, bool ok, double now_s,
                                   std::vector<std::uint32_t> host_pages = {});

  /// An advisory (Symphony): the session's next turn is coming. A cache in
  /// the host pool starts back toward the GPU when there is room beyond what
  /// the head of the queue needs; without it, older caches on the GPU are
  /// pushed down to the host and it starts back once one has landed
  /// (answered in_host). One still being copied to the host starts back once
  /// it lands, room permitting. One on disk is read up to the host pool
  /// while the disk has nothing else queued.
  /// `in_s`: when the turn is expected, from now. Past advise_fetch_lead_s
  /// the cache is only marked as wanted (answered scheduled when it is off
  /// the GPU): the shell advises again, with in_s 0, that long before the
  /// turn, whatever the answer (but none), since the cache may have moved.
  enum class advice : std::uint8_t {
    none,      ///< no cache for this session
    on_gpu,    ///< already in device pages
    fetching,  ///< on its way from the host pool
    in_host,   ///< in the host pool, no room on the GPU now
    scheduled, ///< off the GPU; fetched advise_fetch_lead_s before the turn
  };
  advice advise(std::uint64_t session, double now_s, scheduler_effects& fx, double in_s = 0);
  /// Seconds from an advisory expecting its turn in `in_s` to its fetch.
  double advise_fetch_delay(double in_s) const noexcept {
    return in_s > limits_.advise_fetch_lead_s ? in_s - limits_.advise_fetch_lead_s : 0;
  }
  /// A session cache's copy back from the host ended (`device_pages`: the
  /// pages reserved for it). Its host pages are released either way.
  scheduler_effects on_session_in(std::uint64_t owner, bool ok, double now_s,
                                  std::vector<std::uint32_t> device_pages = {});

  /// A session cache leaving for another node (Symphony's KV migration):
  /// its pages in one pool, and the tokens whose K and V they hold.
  struct session_export {
    std::uint64_t owner = 0; ///< the pool owner of its pages
    bool host = false;       ///< in host pages (else device pages)
    std::vector<std::uint32_t> pages;
    std::vector<std::int32_t> tokens;
    std::uint32_t adapter_id = 0; ///< the adapter K and V were computed with
    std::uint64_t bytes = 0;
  };
  /// Takes the session's cache out of service to be read for export; none
  /// when there is no cache here that can go now (none, or one moving
  /// between tiers). Its pages stay held until on_exported.
  std::optional<session_export> begin_export(std::uint64_t session);
  /// The session's cache is moving between tiers here (an export can go
  /// once that move ends).
  bool session_moving(std::uint64_t session) const;
  /// The export's read ended: the cache leaves this node either way (after
  /// a failed read the next turn recomputes) and its pages are released.
  scheduler_effects on_exported(std::uint64_t session);
  /// A cache of `pages` pages for `tokens` arriving from another node (the
  /// session's latest: an older cache of it here is dropped): the owner to
  /// reserve host pages under, or 0 when it is not taken (the older cache is
  /// moving between tiers, or the host pool has no room even after older
  /// host-tier caches give way).
  std::uint64_t begin_import(std::uint64_t session, std::uint64_t pages, std::vector<std::int32_t> tokens,
                             std::uint32_t adapter_id, scheduler_effects& fx);
  /// The import ended: on success the cache waits in `host_pages` like one
  /// pushed down from this node's GPU; else the host pages are released.
  scheduler_effects on_imported(std::uint64_t session, bool ok, double now_s,
                                std::vector<std::uint32_t> host_pages = {});

  /// A session cache's write to its file ended; its host pages are freed
  /// either way (a failed write drops the cache).
  scheduler_effects on_disk_out(std::uint64_t owner, bool ok, double now_s);
  /// A session cache's read from its file ended: on success it is in
  /// `host_pages` (a turn waiting for it goes on to copy it to the GPU);
  /// else it is gone (the waiting turn recomputes).
  scheduler_effects on_disk_in(std::uint64_t owner, bool ok, double now_s,
                               std::vector<std::uint32_t> host_pages = {});

  /// A swap-in ended: the request decodes on (or, on failure, recomputes
  /// into the pages it was granted). Its host pages are released.
  scheduler_effects on_swapped_in(std::uint64_t request_id, bool ok, double now_s);

  /// Pages were freed elsewhere (adapter trim): admission may resume.
  void on_memory_changed() noexcept {
    memory_blocked_ = false;
    growth_retry_ = true;
  }

  /// Builds the next step from ready and running requests; empty if a step is
  /// already in flight or nothing can run. Marks the step in flight.
  std::vector<gpu::step_entry> next_step(double now_s);

  /// The in-flight step finished with one token per entry (same order); a
  /// negative token ends that request with an error. `logprobs` and
  /// `prompt_logprobs` (gpu::step_result's), one per entry or empty, go
  /// with the tokens to the entries that asked.
  scheduler_effects on_step_done(std::span<const gpu::step_entry> batch,
                                 std::span<const std::int32_t> tokens, double now_s,
                                 std::span<const gpu::token_logprobs> logprobs = {},
                                 std::span<const std::vector<gpu::token_logprobs>> prompt_logprobs = {});

  /// The in-flight step failed: every request in it finishes with an error.
  scheduler_effects on_step_failed(std::span<const gpu::step_entry> batch, double now_s);

  /// Cancels a request. False if it is unknown or already finished. A
  /// request in the in-flight step finishes when that step returns.
  std::pair<bool, scheduler_effects> cancel(std::uint64_t request_id, double now_s);

  // -- observers --------------------------------------------------------------

  std::size_t waiting() const noexcept { return waiting_.size() - head_; }
  std::size_t running() const noexcept { return batch_.size(); }
  std::size_t admitting() const noexcept { return admitting_; }
  std::size_t in_system() const noexcept { return records_.size(); }
  std::uint64_t squashed() const noexcept { return squashed_; }
  /// Requests recomputed as they grew past scheduler_limits::rope_long_after
  /// (counted in squashed() too).
  std::uint64_t rope_recomputed() const noexcept { return rope_recomputed_; }
  std::uint64_t aborted() const noexcept { return aborted_; }
  /// Swap-outs that completed, and swap-ins.
  std::uint64_t swapped_out() const noexcept { return swapped_out_; }
  std::uint64_t swapped_in() const noexcept { return swapped_in_; }
  /// Host pages held by swapped-out requests.
  std::uint64_t host_pages_held() const noexcept { return host_reserved_; }
  /// Growths refused (on-demand reservation), and pages running requests
  /// are short now.
  std::uint64_t growths_denied() const noexcept { return growths_denied_; }
  std::uint64_t pages_short() const noexcept { return pages_short_; }
  /// Sessions: caches kept, turns that reused one, pages held, evictions;
  /// prompt tokens reused from a cache and prefilled (computed).
  std::size_t sessions_cached() const noexcept { return sessions_.size(); }
  std::uint64_t session_hits() const noexcept { return session_hits_; }
  /// Turns that reused a session cache in part: their prompt shared at
  /// least half of its tokens but not all (counted in the hits of its tier).
  std::uint64_t session_partial_hits() const noexcept { return session_partial_hits_; }
  std::uint64_t session_pages_held() const noexcept { return session_pages_held_; }
  std::uint64_t session_evictions() const noexcept { return session_evictions_; }
  /// Session caches moved to the host pool, and brought back from it.
  std::uint64_t session_offloads() const noexcept { return session_offloads_; }
  /// Device pages of session caches still being copied to the host pool.
  std::uint64_t session_pages_moving_out() const noexcept { return moving_out_pages_; }
  std::uint64_t session_host_hits() const noexcept { return session_host_hits_; }
  /// Advisories received, and those that brought a cache back ahead of its turn.
  std::uint64_t advisories() const noexcept { return advisories_; }
  std::uint64_t session_prefetches() const noexcept { return session_prefetches_; }
  std::uint64_t sessions_exported() const noexcept { return sessions_exported_; }
  std::uint64_t session_disk_writes() const noexcept { return session_disk_writes_; }
  std::uint64_t session_disk_reads() const noexcept { return session_disk_reads_; }
  std::uint64_t streamed_ins() const noexcept { return streamed_ins_; }
  std::uint64_t session_disk_pages() const noexcept { return disk_held_; }
  /// Turns whose cache was on disk that recomputed it instead, by the
  /// disk_fetch model's prediction.
  std::uint64_t session_disk_skips() const noexcept { return session_disk_skips_; }
  /// Turns that waited in the queue for their cache's copy between the GPU
  /// and the host pool to end.
  std::uint64_t turns_held_for_cache() const noexcept { return turns_held_for_cache_; }
  /// Of those, the copies of caches still in the host pool (write-back).
  std::uint64_t session_clean_pages() const noexcept { return clean_pages_; }
  std::uint64_t sessions_imported() const noexcept { return sessions_imported_; }
  std::uint64_t reused_tokens() const noexcept { return reused_tokens_; }
  /// Prefix caching: admissions that read cached pages; pages cached, and
  /// of those read by no request; pages evicted.
  std::uint64_t prefix_hits() const noexcept { return prefix_hits_; }
  /// Admissions put off to read pages another request was computing.
  std::uint64_t prefix_holds() const noexcept { return prefix_holds_; }
  /// Prompt tokens prefills took from the prefix cache (in reused_tokens too).
  std::uint64_t prefix_reused_tokens() const noexcept { return prefix_reused_tokens_; }
  std::uint64_t prefix_cached_pages() const noexcept { return prefix_ ? prefix_->pages() : 0; }
  std::uint64_t prefix_idle_pages() const noexcept { return prefix_ ? prefix_->idle_pages() : 0; }
  std::uint64_t prefix_evictions() const noexcept { return prefix_ ? prefix_->evictions() : 0; }
  std::uint64_t prefilled_tokens() const noexcept { return prefilled_tokens_; }
  /// The policy's own counters and gauges (for stats).
  std::vector<std::pair<std::string, double>> policy_counters() const { return policy_->counters(); }
  std::vector<std::pair<std::string, double>> policy_gauges() const { return policy_->gauges(); }
  /// Passes new queue cut-offs and quotas to the policy.
  void on_tuning(const policies::queue_tuning& t) { policy_->on_tuning(t); }
  bool step_in_flight() const noexcept { return step_in_flight_; }
  std::uint64_t reserved_pages() const noexcept { return reserved_pages_; }
  /// Pages of the distinct adapters admitted requests pin.
  std::uint64_t adapter_pages_in_use() const noexcept { return adapter_pages_in_use_; }
  bool memory_blocked() const noexcept { return memory_blocked_; }
  /// State of a request; finished for unknown ids.
  request_state state_of(std::uint64_t request_id) const;
  /// True if the core has work it could do on the next admit()/next_step().
  bool has_work() const noexcept;

private:
  struct record {
    request_spec spec;
    request_state state = request_state::waiting;
    request_times times;
    std::uint64_t pages = 0;
    std::uint32_t generated = 0;
    std::int32_t last_token = 0;
    double last_token_s = 0;
    std::vector<std::uint32_t> page_ids;
    bool pages_pending = false;
    bool pages_granted = false;
    bool adapter_pending = false;
    bool adapter_granted = false;
    bool adapter_failed = false;
    bool adapter_broken = false;
    bool pages_failed = false;
    std::uint32_t adapter_failures = 0;
    bool in_step = false;
    bool cancel_requested = false;
    /// Its session cache is streaming in (stream_ins) and not yet answered:
    /// its pages stay until on_swapped_in, whatever else happens.
    bool stream_pending = false;
    /// Its next step is the first over the streaming cache (names the stream).
    bool stream_first = false;
    bool squash_requested = false;
    bool hidden = false; ///< keeps a hidden cache (pages counted for it)
    bool swap_requested = false;
    /// Has produced a token since its last admission (only such a request
    /// is offered to the policy for preemption: each admission makes progress).
    bool stepped = false;
    bool grow_pending = false;
    bool grow_blocked = false;
    std::uint64_t grow_pages = 0; ///< asked for by the pending or refused growth
    std::uint64_t grow_ticket = 0;
    /// Prompt tokens whose KV it adopted from its session's cache: its
    /// prefill starts after them.
    std::uint32_t cached_tokens = 0;
    /// Prompt tokens its last prefill read from a cache (for its answer).
    std::uint32_t read_tokens = 0;
    bool adopted = false;
    /// The prefix cache's pages it reads (their keys and page ids): its
    /// first pages, before those it holds itself (`pages`, `page_ids` after
    /// them).
    std::vector<std::uint64_t> prefix_keys;
    std::vector<std::uint32_t> prefix_page_ids;
    /// Admitted, before its prefill: the keys of the whole prompt pages it
    /// will compute and add to the cache (counted in computing_).
    std::vector<std::uint64_t> computing_keys;
    /// With request_spec::json_object or json_schema: the output read so
    /// far, and the tokens that may come next (null: not looked up yet).
    std::optional<schema_machine> json;
    std::shared_ptr<const json_vocab::token_split> json_allowed;
    /// With request_spec::json_trigger too: free text until the trigger,
    /// each value after it held as `json` would be (json stays empty).
    std::shared_ptr<const json_trigger> trigger;
    json_trigger::state trigger_at;
    /// With request_spec::reasoning_close too: the thinking first, then
    /// the content held as `json`, `trigger` or `held` would hold the
    /// output (they stay empty).
    std::shared_ptr<const reasoning_gate> gate;
    reasoning_gate::state gate_at;
    /// With request_spec::choice or regex: the output read so far against
    /// the choices or the expression (`json_allowed` its tokens; json
    /// stays empty).
    std::optional<held_machine> held;
    /// The prefix cache's keys of its prompt's whole pages (prompt_keys:
    /// hashed once).
    std::vector<std::uint64_t> page_keys;
    /// Waiting: the session cache (its owner) whose reusable prefix
    /// `adopt_shared` was last measured against its prompt.
    std::uint64_t adopt_owner = 0;
    std::size_t adopt_shared = 0;
    /// Its session's cache waits in these host pages (of that finished
    /// request, `session_owner`): copied into its first pages before it runs.
    std::uint64_t session_owner = 0;
    std::vector<std::uint32_t> session_host_pages;
    /// Its cache waits in these host pages (swapped out).
    std::vector<std::uint32_t> host_page_ids;
    bool swapped = false;
    std::uint32_t squashes = 0;
    /// Output so far: a squashed request re-runs prompt + output as its
    /// prefill and continues at index `generated`.
    std::vector<std::int32_t> output;
    /// How often each token occurs in `output`, kept only when the request
    /// has a presence or frequency penalty.
    std::map<std::int32_t, std::uint32_t> output_counts;
    /// Its standing logit adjustments, in token order: the bias, the
    /// penalties on the output so far, and with a repetition penalty every
    /// token of the prompt and the output marked repeated. Made at submit,
    /// kept up as tokens come (note_output); each step's logit_adjust
    /// begins as a copy.
    std::vector<gpu::logit_adjustment> adjust;
    /// With allowed_token_ids: every other token of the vocabulary, in
    /// token order (banned each step).
    std::vector<std::int32_t> not_allowed;
    std::string text; // decoded output, kept only when stop strings are set
  };
  /// Pages of `r`'s cache: the prefix cache's it reads and its own.
  static std::uint64_t held_pages(const record& r) noexcept { return r.pages + r.prefix_keys.size(); }
  /// `r`'s page ids: the cached prefix's, then `own` (its own, as the pool
  /// lists them).
  static std::vector<std::uint32_t> with_prefix(const record& r, std::vector<std::uint32_t> own);
  /// Prefix caching: at admission, `r` (fresh, K and V cache) reads the
  /// cached pages its prompt begins with.
  void read_prefix(record& r, double now_s);
  /// After `r`'s prefill: its whole prompt pages after those it read join
  /// the cache (in order, while each is new).
  void share_prompt(record& r, double now_s, scheduler_effects& fx);
  /// `r` reads no cached pages any more (ended, recomputed, or re-queued),
  /// and computes none for the cache.
  void drop_prefix(record& r, double now_s);
  /// Prefix caching: `r`, about to be admitted, would compute a prompt page
  /// an admitted request is computing now: it waits for that prefill and
  /// reads the page then (the `n` choices of one prompt, a burst of prompts
  /// over one system prompt).
  bool prefix_being_computed(record& r, const policies::schedule_decision& d);
  /// The keys of `r`'s whole prompt pages (computed at the first call).
  std::span<const std::uint64_t> prompt_keys(record& r);
  /// Counts `r`'s uncached whole prompt pages as being computed.
  void note_computing(record& r);
  void stop_computing(record& r);
  /// Frees idle cached pages until `need` pages are free in the pool for a
  /// reservation, beyond what is reserved and what pinned adapters take.
  void evict_cached(std::uint64_t need, scheduler_effects& fx);
  /// Frees `n` idle cached pages (fewer if there are not so many).
  void evict_idle(std::uint64_t n, scheduler_effects& fx);
  /// Pages of the prefix cache no request reads (free for any use).
  std::uint64_t idle_cached() const noexcept { return prefix_ ? prefix_->idle_pages() : 0; }
  /// The request's logit_bias, penalties and repetition marks for its next
  /// token (gpu::step_entry::logit_adjust): r.adjust; while it has fewer
  /// than min_tokens, the end tokens `ends` (unless ignored) and its stop
  /// tokens banned; the last token of each bad word the output would
  /// complete, and the tokens outside allowed_token_ids, banned.
  static std::vector<gpu::logit_adjustment> logit_adjust(const record& r, std::span<const std::int32_t> ends);
  /// Keeps r.adjust (and r.output_counts) up with output token `token`.
  static void note_output(record& r, std::int32_t token);
  /// A JSON-object (or choice) request's `adjust` with every token its
  /// output may not go on with banned, in token order (a choice that a
  /// longer one goes on from leaves the end tokens open).
  void constrain_json(record& r, std::vector<gpu::logit_adjustment>& adjust);
  /// Takes a JSON-object (or choice) request's new token:
  /// finish_reason::stop when it closed the object (not with a trigger:
  /// free text follows; but an answer beside one) or made a choice no longer one goes on from, error when
  /// no token could follow (or the backend sampled a banned one), nothing
  /// otherwise.
  std::optional<finish_reason> json_after(record& r, std::int32_t token);
  /// The trigger of `spec`'s json_trigger and json_schema (its compiled
  /// form `schema`; or its heads', json_trigger_head), built once for the
  /// vocabulary (the last 16 kept).
  std::shared_ptr<const json_trigger> trigger_for(const request_spec& spec, std::shared_ptr<const json_schema> schema);
  /// The reasoning gate of `spec`'s marks and constraint (its compiled
  /// schema `schema`), built once for the vocabulary (the last 16 kept).
  std::shared_ptr<const reasoning_gate> gate_for(const request_spec& spec, std::shared_ptr<const json_schema> schema);
  /// The same, the content held to choices or an expression (`held`, as
  /// the content starts).
  std::shared_ptr<const reasoning_gate> gate_for(const request_spec& spec, held_machine held);

  void transition(record& r, request_state to);
  void enqueue_waiting(const record& r);
  void settle_admission(record& r, double now_s, scheduler_effects& fx);
  void finish(record& r, finish_reason why, double now_s, scheduler_effects& fx);
  void squash(record& r, scheduler_effects& fx);
  /// Starts a swap-out of a running request (falls back to squash when it
  /// has no cache yet or no host pool is configured).
  void swap_out(record& r, scheduler_effects& fx);
  /// Frees the host pages of a swapped-out request.
  void release_host(record& r, scheduler_effects& fx);
  /// Tokens one page of `r`'s cache holds.
  std::uint32_t tokens_per_page(const record& r) const noexcept;
  /// Tokens of cache admitting `r` reserves.
  std::uint32_t reserve_tokens(const record& r) const noexcept;
  /// Device pages a swapped-out request takes back: its cache's, and room
  /// for its next step (a request swapped out while it waited to grow would
  /// otherwise come back unable to step, and, not having stepped, never be
  /// chosen to make room: a stall).
  std::uint64_t swap_in_pages(const record& r) const noexcept;
  /// On demand: asks for pages running requests need soon; totals pages_short_.
  void request_growth(scheduler_effects& fx);
  /// A finished turn's pages become its session's cache (false: not kept).
  bool keep_for_session(record& r, scheduler_effects& fx, double now_s);
  /// Moves a session cache to the host pool when it has room (or frees it).
  void evict_session(std::uint64_t session, scheduler_effects& fx);
  /// A streamed session cache's copy ended (see stream_ins).
  scheduler_effects on_streamed_in(record& r, bool ok, double now_s);
  /// Copies a turn's session cache from its host pages into its first pages.
  void copy_session_in(record& r, scheduler_effects& fx);
  /// Frees the host pages a request brought its session cache back from.
  void release_session_host(record& r, scheduler_effects& fx);
  /// Frees least recently used session caches until `need` pages are free
  /// for admission (sparing `keep`), or within the session limit; true if
  /// it freed any.
  bool make_room(std::uint64_t need, std::uint64_t keep, scheduler_effects& fx);
  /// Device pages neither reserved nor held by adapters in use (idle cached
  /// adapters count as free).
  std::uint64_t device_free_pages() const noexcept;
  /// make_room for the head of the queue: keeps the head's own cache
  /// while it would reuse it; true if a cache was freed.
  bool room_for_head(scheduler_effects& fx);
  /// Device pages of `r`'s session cache that its admission would take
  /// over (a turn whose prompt reuses a cache on the GPU); 0 otherwise.
  std::uint64_t adoptable_pages(record& r);
  /// Sets each waiting view's adoptable_pages as the caches stand now.
  void refresh_adoptable();
  /// Every request in the system waits, and no cache is on its way off the
  /// GPU: no event will give pages back.
  bool only_waiting() const noexcept;
  /// Every session cache on the GPU goes (down a tier, or dropped); true
  /// if there was one.
  bool caches_give_way(scheduler_effects& fx);
  /// Releases what an admitted request holds and takes it out of the batch.
  void give_back(record& r, scheduler_effects& fx);
  bool hits_stop(record& r, std::int32_t token);
  /// How many of `cached` begin `prompt` too, leaving its last token out
  /// (a turn prefills at least one).
  static std::size_t shared_prefix(const std::vector<std::int32_t>& cached,
                                   const std::vector<std::int32_t>& prompt) noexcept;
  void compact_waiting();
  void count_waiting(std::uint32_t adapter_id, bool up);
  void flush_queued(scheduler_effects& fx);
  void flush_finished();

  scheduler_limits limits_;
  std::unique_ptr<policies::scheduling_policy> policy_;
  const gpu::tokenizer* vocab_;
  /// vocab_'s end_tokens(), sorted: each one ends an output (finish "eos").
  std::vector<std::int32_t> ends_;
  /// vocab_'s tokens for JSON output, built at the first request asking.
  std::unique_ptr<json_vocab> json_vocab_;
  json_schema_cache schemas_;
  /// trigger_for's, by trigger and schema text, oldest first.
  std::vector<std::pair<std::string, std::shared_ptr<const json_trigger>>> triggers_;
  /// gate_for's, by marks, trigger and schema text (or the held machine's key), oldest first.
  std::vector<std::pair<std::string, std::shared_ptr<const reasoning_gate>>> gates_;
  /// Compiled regular expressions by their text (the last 16 kept).
  std::vector<std::pair<std::string, std::shared_ptr<const held_regex>>> regexes_;
  std::vector<std::pair<std::string, std::shared_ptr<const held_grammar>>> grammars_;
  std::unordered_map<std::uint64_t, record> records_;
  std::vector<policies::waiting_view> waiting_; // arrival order from head_
  std::size_t head_ = 0;
  std::vector<std::uint64_t> batch_; // ready and running, in join order
  std::vector<policies::running_view> running_views_;
  std::size_t admitting_ = 0;
  std::uint64_t reserved_pages_ = 0;
  // Adapters pinned by admitting/ready/running requests: use counts, and the
  // pages of the distinct ones.
  std::map<std::uint32_t, std::uint32_t> adapter_use_;
  std::uint64_t adapter_pages_in_use_ = 0;
  std::vector<std::uint32_t> adapters_in_use_;
  bool step_in_flight_ = false;
  bool memory_blocked_ = false;
  std::vector<std::uint64_t> to_erase_;
  // Waiting requests per adapter, and the adapters whose count changed since
  // the last flush.
  std::unordered_map<std::uint32_t, std::uint32_t> waiting_per_adapter_;
  std::vector<std::uint32_t> queued_dirty_;
  std::uint64_t squashed_ = 0;
  std::uint64_t rope_recomputed_ = 0;
  std::uint64_t aborted_ = 0;
  std::uint64_t swapped_out_ = 0;
  std::uint64_t swapped_in_ = 0;
  std::uint64_t host_reserved_ = 0; // host pages of swapped-out requests
  std::uint64_t host_pending_ = 0;  // host pages of swap-outs in flight
  std::uint64_t swapping_out_pages_ = 0; // device pages those swap-outs free when read
  std::uint64_t growths_denied_ = 0;
  std::uint64_t pages_short_ = 0;
  bool growth_retry_ = false; // pages came free: retry refused growths
  std::uint64_t next_ticket_ = 1;
  /// Where a session cache is. `awaiting_host`: on the GPU still, chosen to
  /// move down once host pages that caches being written to disk hold come
  /// free (see host_room).
  enum class session_tier : std::uint8_t {
    device, moving_out, host, moving_in, leaving, arriving, to_disk, disk, from_disk, awaiting_host
  };
  /// host_room's answer: room now; room once the disk writes under way end
  /// (the caller claims it and waits); none.
  enum class host_room_result : std::uint8_t { now, soon, none };
  /// Starts a disk-tier cache's read back into host pages (false: no host
  /// room); `waiter`: the turn that waits for it (0: an advisory).
  bool fetch_from_disk(std::uint64_t session, std::uint64_t waiter, scheduler_effects& fx);
  /// Frees the session's cache here (superseded by a newer one); false
  /// when it is moving between tiers (then it stays).
  bool drop_older_cache(std::uint64_t session, scheduler_effects& fx);
  /// Room on disk for `pages` more, dropping the oldest disk-tier caches,
  /// then (with `drop_clean_copies`) the disk copies of host caches.
  bool disk_room(std::uint64_t pages, scheduler_effects& fx, bool drop_clean_copies = true);
  /// Host room for `pages` more, pushing older host-tier caches out (down
  /// to disk, or dropped), no more of them than the room needs. Pages of
  /// caches on their way to disk count as coming free: when they cover the
  /// rest the answer is `soon`.
  host_room_result host_room(std::uint64_t pages, std::uint64_t keep, scheduler_effects& fx);
  struct session_entry {
    session_tier where = session_tier::device;
    std::vector<std::uint32_t> host_page_ids;
    std::uint64_t owner = 0; ///< the finished request whose pages hold it
    std::vector<std::uint32_t> page_ids;
    std::vector<std::int32_t> tokens; ///< whose K and V the pages hold
    std::uint32_t adapter_id = 0;     ///< the adapter they were computed with (0: none)
    std::uint64_t pages = 0;
    std::uint64_t waiter = 0; ///< from_disk, to_disk: the turn waiting for it (0: none)
    double last_use_s = 0;
    /// An advisory came while it was moving_out (fetched back once it
    /// lands), or while it was in the host pool with no GPU room (fetched
    /// once an older cache pushed down for it has landed).
    bool advised = false;
    /// from_disk or awaiting_host: its host pages are claimed, not yet given.
    bool claimed = false;
    /// to_disk: a write-back (clean_host): the host pages stay after it.
    bool keep_host = false;
    /// host: a copy is in a file too, so it goes down a tier at once.
    bool on_disk = false;
  };
  /// The tokens of `e` that turn `r` reuses: its shared prefix when the
  /// cache is of the turn's adapter (K and V depend on it) and the prompt
  /// extends the whole cache or at least half of it; else 0.
  /// Nor where LongRoPE turns the turn's prefill by the other factors
  /// (`long_after`: scheduler_limits::rope_long_after).
  static std::size_t reusable_prefix(const session_entry& e, const record& r, std::uint32_t long_after) noexcept;
  /// LongRoPE: whether `r`'s prefill (its prompt and any output it
  /// recomputes) turns by the long factors.
  bool rope_long(const record& r) const noexcept {
    return limits_.rope_long_after != 0 && r.spec.prompt.size() + r.generated > limits_.rope_long_after;
  }
  /// What K and V of `r`'s prompt pages depend on beside their tokens (the
  /// prefix cache's space): its adapter, and LongRoPE's factor set.
  std::uint64_t prefix_space(const record& r) const noexcept {
    return std::uint64_t{r.spec.adapter_id} | (rope_long(r) ? std::uint64_t{1} << 32 : 0);
  }
  std::unordered_map<std::uint64_t, session_entry> sessions_;
  /// The cache of `tier` to move down first (the session policy's choice),
  /// sparing `keep`; end() when there is none.
  std::unordered_map<std::uint64_t, session_entry>::iterator session_victim(session_tier tier,
                                                                            std::uint64_t keep,
                                                                            bool without_disk_copy = false);
  /// Write-back: while the host pool's free and clean pages (caches with a
  /// copy on disk) are under limits_.disk_write_back of it, the next host
  /// cache to go down is copied to disk ahead of need, one at a time, and
  /// keeps its host pages; pushing it down later frees them at once, and a
  /// cache coming down from the GPU need not wait for a write.
  void clean_host(scheduler_effects& fx);
  /// A host cache's copy on disk is no longer wanted: its file goes.
  void forget_disk_copy(session_entry& e, scheduler_effects& fx);
  /// Starts `e` (in the host pool) back to the GPU when there is room
  /// without displacing anything admitted, nor the head of the queue;
  /// false when not.
  bool prefetch_session(session_entry& e, scheduler_effects& fx);
  /// `r` is a turn whose session's cache (which its prompt extends) is being
  /// copied between the GPU and the host pool, and `d` does not hold it as
  /// a hidden cache: it waits for the copy rather than be admitted now.
  bool cache_between_tiers(const record& r, const policies::schedule_decision& d) const;
  /// Pages the head of the waiting queue needs: its cache, and its adapter
  /// when that is not loaded (0 with nothing waiting).
  std::uint64_t head_pages() const;
  /// The cache held under `owner` in `tier` (a move's answer finds it so).
  std::unordered_map<std::uint64_t, session_entry>::iterator session_of_owner(std::uint64_t owner,
                                                                              session_tier tier);
  /// The disk_fetch model's choice for a turn whose cache `e` is on disk:
  /// true to read it back, false to recompute (counted).
  bool read_from_disk(const session_entry& e);
  /// Host pages free for new work: neither held, being filled nor claimed.
  std::uint64_t host_free() const noexcept;
  /// Asks the disk to write `e` (in the host pool) to its file: a
  /// write-back that keeps the host pages (`keep_host`), or a move down
  /// that frees them once written.
  void write_to_disk(session_entry& e, bool keep_host, scheduler_effects& fx);
  /// Asks the disk to read `e`'s file into host pages the shell reserves.
  void read_into_host(session_entry& e, scheduler_effects& fx);
  /// A read of `i`'s file ended (or will never start: `ok` false): the
  /// cache waits in `host_pages` for an advisory, or goes to its turn.
  void settle_disk_read(std::unordered_map<std::uint64_t, session_entry>::iterator i, bool ok,
                        std::vector<std::uint32_t> host_pages, double now_s, scheduler_effects& fx);
  /// Host pages free now for a claim: neither held nor being filled.
  std::uint64_t host_free_now() const noexcept;
  /// Queues a claim on host pages for `e` (its move from the GPU, or its
  /// read from disk), served in order as disk writes give pages back.
  void claim_host(session_entry& e);
  /// Starts the claims that fit now, in order; a claim left with no write
  /// under way to wait for is given up (the cache dropped, a waiting turn
  /// recomputes).
  void serve_host_claims(double now_s, scheduler_effects& fx);
  /// An awaiting_host cache stays on the GPU after all (its turn, an
  /// advisory or an export came first): its claim is withdrawn.
  void keep_on_device(session_entry& e);
  /// Hands a session cache in `host_pages` (already reserved when `ok`) to
  /// the turn `waiter` that waits for it under `owner`; when it no longer
  /// waits, or `ok` is false, the pages go and a waiting turn recomputes.
  void give_to_waiter(std::uint64_t waiter, std::uint64_t owner, bool ok, std::vector<std::uint32_t> host_pages,
                      double now_s, scheduler_effects& fx);
  /// Starts a GPU cache's copy down to host pages (moving_out); the caller
  /// has counted its pages in moving_out_pages_.
  void move_out(session_entry& e, scheduler_effects& fx);
  /// Drops a cache held on the GPU: its pages freed, the queue retried.
  void drop_device_cache(std::unordered_map<std::uint64_t, session_entry>::iterator i, scheduler_effects& fx);
  std::uint64_t session_pages_held_ = 0;
  /// Some waiting view counts pages it would adopt (refresh_adoptable).
  bool adoptable_waiting_ = false;
  std::uint64_t session_hits_ = 0;
  std::uint64_t session_partial_hits_ = 0;
  std::uint64_t session_evictions_ = 0;
  std::uint64_t session_offloads_ = 0;
  std::uint64_t session_host_hits_ = 0;
  std::uint64_t advisories_ = 0;
  std::uint64_t session_prefetches_ = 0;
  std::uint64_t disk_held_ = 0; // pages of caches on disk or on their way there
  std::uint64_t session_disk_writes_ = 0;
  std::uint64_t session_disk_reads_ = 0;
  std::uint64_t streamed_ins_ = 0;
  std::uint64_t sessions_exported_ = 0;
  std::uint64_t sessions_imported_ = 0;
  std::uint64_t next_import_owner_ = std::uint64_t{1} << 62; // apart from request ids
  std::uint64_t moving_out_pages_ = 0; // device pages of caches on their way to the host
  std::uint64_t to_disk_pages_ = 0;    // host pages of caches being written to disk
  std::uint64_t landing_pages_ = 0;    // host pages of caches on their way down from the GPU
  std::uint64_t host_claimed_ = 0;     // host pages claimed by caches waiting for those
  std::deque<std::uint64_t> host_claims_; // their owners, in order
  std::uint64_t clean_pages_ = 0;      // host pages of caches with a copy on disk
  std::uint64_t disk_queued_bytes_ = 0; // of writes and reads asked of the disk, not yet answered
  std::uint64_t session_disk_skips_ = 0;
  std::uint64_t turns_held_for_cache_ = 0;
  bool cleaning_ = false;              // a write-back under way
  std::uint64_t reused_tokens_ = 0;
  std::uint64_t prefilled_tokens_ = 0;
  std::optional<prefix_cache> prefix_;
  std::uint64_t prefix_hits_ = 0;
  std::uint64_t prefix_reused_tokens_ = 0;
  std::uint64_t prefix_holds_ = 0;
  /// Keys of prompt pages admitted requests are computing, and how many.
  std::unordered_map<std::uint64_t, std::uint32_t> computing_;
  /// Pages being computed that a request waits for: cached when computed.
  std::unordered_set<std::uint64_t> awaited_;
};

} // namespace troupe
