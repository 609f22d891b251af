// The scheduling policy interface: which waiting requests join the running
// batch this iteration. Implemented in policies/, called by the scheduler core
// (runtime/scheduler_core.cpp) in the live server and in the simulator alike.
#pragma once

#include "policies/cost_calibration.hpp"
#include "policies/queue_tuning.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::policies {

/// A request waiting for admission, as a policy sees it.
struct waiting_view {
  std::uint64_t request_id = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_new_tokens = 0;
  /// Output length the classifier predicts (<= max_new_tokens).
  std::uint32_t predicted_tokens = 0;
  std::uint32_t adapter_id = 0; ///< 0: base model
  std::uint32_t adapter_rank = 0;
  /// Pages the adapter's weights take when it must be loaded.
  std::uint64_t adapter_pages = 0;
  std::uint32_t queue = 0;      ///< classifier's queue index
  std::int32_t priority = 0;
  double arrival_s = 0;         ///< on the scheduler's clock
  /// Output already produced (a preempted request waiting to resume).
  std::uint32_t generated = 0;
  /// Swapped out: its cache waits in host pages and resumes by a swap-in
  /// into `pages` device pages (no prefill); otherwise it needs a prefill of
  /// prompt + generated tokens.
  bool swapped = false;
  /// Device pages a swapped request takes back (its cache as it was: K and
  /// V, or a hidden cache).
  std::uint64_t pages = 0;
  /// Tokens of cache its admission reserves: prompt + max_new_tokens when
  /// the whole life is reserved up front; prompt + generated + 1 when pages
  /// come as it grows (schedule_limits::on_demand). 0: the whole life.
  std::uint32_t reserve_tokens = 0;
  /// When its last token came (a preempted request); 0: none yet.
  double last_token_s = 0;
  /// Device pages of its session's cache that its admission takes over (a
  /// turn whose prompt reuses a cache still on the GPU): already held, so
  /// not taken from free_pages. Its K and V cache only: kept as a hidden
  /// cache, it takes none over.
  std::uint64_t adoptable_pages = 0;
};

/// The tokens of cache admitting `w` reserves (see reserve_tokens).
std::uint32_t admission_tokens(const waiting_view& w) noexcept;

/// A request in the running batch (admitted: pages and adapter granted or
/// being granted).
struct running_view {
  std::uint64_t request_id = 0;
  std::uint32_t context_tokens = 0;   ///< prompt + generated so far
  std::uint32_t remaining_tokens = 0; ///< max_new_tokens - generated
  std::uint32_t adapter_id = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t generated = 0;
  std::uint32_t predicted_tokens = 0; ///< the classifier's prediction
  std::uint32_t queue = 0;
  std::uint64_t pages = 0;            ///< KV pages it holds (freed when it ends)
  std::uint64_t adapter_pages = 0;
  double arrival_s = 0;               ///< first arrival, on the scheduler's clock
  std::int32_t priority = 0;          ///< the request's own (the wire's): higher is more urgent
  /// Chosen for preemption already (squashed or swapped out when its step
  /// ends): its pages are on their way back, not yet free.
  bool leaving = false;
  /// It has run at least one step since it was (re)admitted; preempting one
  /// that has not would undo an admission before it made any progress.
  bool started = false;
  /// Its cache holds hidden states (else K and V).
  bool hidden = false;
  /// When its last token came; 0: none since it was admitted.
  double last_token_s = 0;
};

/// Capacity the policy must respect this iteration.
struct schedule_limits {
  std::uint32_t max_running = 0;
  /// Tokens one step may process: 1 per running request plus admitted prompts.
  std::uint32_t token_budget = 0;
  /// Pages free for KV reservations and adapter loads: the pool less the KV
  /// of admitted requests and the adapters they pin. Pages of idle cached
  /// adapters count as free (the cache gives them back on demand).
  std::uint64_t free_pages = 0;
  std::uint32_t page_tokens = 16;
  /// Tokens a page holds as a hidden cache; 0: the backend keeps none.
  std::uint32_t hidden_page_tokens = 0;
  /// Free pages of the host pool, for swap-outs (0: no swapping).
  std::uint64_t host_free_pages = 0;
  /// Bytes of one page (what a swap moves per page); 0 where unknown.
  std::uint64_t page_bytes = 0;
  /// Pages are reserved as requests grow rather than for their whole life
  /// up front; running requests may then run short (schedule_input::pages_short).
  bool on_demand = false;
};

struct schedule_input {
  std::span<const waiting_view> waiting; ///< in arrival order
  std::span<const running_view> running;
  /// Adapters pinned by admitted requests, sorted: their pages are already
  /// taken out of free_pages.
  std::span<const std::uint32_t> adapters_in_use;
  schedule_limits limits;
  double now_s = 0;
  /// Pages running requests need for their next steps and could not get
  /// (on-demand reservation only): the policy should preempt running
  /// requests to free at least this many (see preempt_for_growth).
  std::uint64_t pages_short = 0;
};

/// What the policy decided.
struct schedule_decision {
  /// Waiting requests to admit, in the order to admit them.
  std::vector<std::uint64_t> admit;
  /// Waiting requests to end now without running (they can no longer meet
  /// their first-token target); the client gets an error.
  std::vector<std::uint64_t> abort;
  /// Running requests to stop and queue again; their KV is dropped and
  /// recomputed when they are admitted again, and their output continues
  /// where it stopped.
  std::vector<std::uint64_t> squash;
  /// Running requests to preempt by swapping their cache out to the host
  /// pool; they resume by a swap-in. One that has not started yet, or whose
  /// swap-out fails, is squashed instead.
  std::vector<std::uint64_t> swap;
  /// Admitted requests (a subset of `admit`) that keep a hidden cache
  /// instead of K and V; ignored where the backend keeps none.
  std::vector<std::uint64_t> hidden;
};

/// Pages a request needs for its whole life (prompt + every output token);
/// with `max_new_tokens` 0, the pages for `prompt_tokens` tokens.
std::uint64_t pages_for(std::uint32_t prompt_tokens, std::uint32_t max_new_tokens,
                        std::uint32_t page_tokens) noexcept;

/// Tracks the pages admissions take within one decision: KV pages plus the
/// adapter's pages the first time an adapter not yet in use is admitted.
class page_budget {
public:
  page_budget(std::uint64_t free_pages, std::span<const std::uint32_t> adapters_in_use);
  /// Pages admitting `w` would take now.
  std::uint64_t need(const waiting_view& w, std::uint32_t page_tokens) const;
  /// True (and the pages taken) if `w` fits.
  bool take(const waiting_view& w, std::uint32_t page_tokens);
  /// Pages a request needs now: a swapped one its pages as they were,
  /// another its whole life's KV less the pages of its session's cache it
  /// takes over; kept as a `hidden` cache, its whole life's.
  static std::uint64_t cache_pages(const waiting_view& w, std::uint32_t page_tokens, bool hidden = false);
  /// take() with `cache_pages` for its cache instead of its KV pages.
  bool take_with(const waiting_view& w, std::uint64_t cache_pages);
  std::uint64_t left() const noexcept { return left_; }

private:
  std::uint64_t left_;
  std::vector<std::uint32_t> in_use_; // sorted
};

/// One iteration's admissions under its limits: the running cap, the token
/// budget (one token per running request plus each admitted prompt; a lone
/// request may exceed it, else a long prompt could never start) and the free
/// pages (a page_budget). The policies that admit in some order and stop at
/// the first request that does not fit share it.
class batch_admission {
public:
  /// `leaving`: running requests this decision takes out of the batch
  /// (squashed), which neither count against the cap nor decode a token.
  explicit batch_admission(const schedule_input& in, std::uint64_t leaving = 0);
  /// True if `w` fits now.
  bool fits(const waiting_view& w) const;
  /// Admits `w` into `d` (appended to d.admit, its pages taken) if it fits;
  /// false, and nothing changed, otherwise.
  bool admit(const waiting_view& w, schedule_decision& d);
  /// Requests running once this iteration's admissions join them.
  std::uint64_t running() const noexcept { return running_; }
  const page_budget& pages() const noexcept { return pages_; }

private:
  const schedule_limits& limits_;
  std::uint64_t running_;
  std::uint64_t tokens_;
  page_budget pages_;
};

/// Decides admissions. Called once per scheduler iteration from one thread.
class scheduling_policy {
public:
  virtual ~scheduling_policy() = default;
  /// Chooses which waiting requests join the batch; must not exceed `limits`,
  /// except that a lone request may exceed the token budget when nothing else
  /// runs (otherwise a long prompt could never start).
  virtual schedule_decision schedule(const schedule_input& in) = 0;
  /// Registry name of this policy.
  virtual std::string_view name() const noexcept = 0;
  /// Applies `[scheduler] params`; "" when accepted, otherwise what was
  /// wrong. The default takes none.
  virtual std::string configure(const std::map<std::string, double>& params);
  /// True if the policy predicts costs and wants the backend measured at
  /// start-up (on_calibration() then follows before the first schedule()).
  virtual bool wants_calibration() const noexcept { return false; }
  /// The start-up measurements; ignored by default.
  virtual void on_calibration(const cost_calibration&) {}
  /// Running requests are `in.pages_short` pages short of their next steps
  /// (on-demand reservation) and `d` (from schedule()) does not free that
  /// many: add victims to d.squash or d.swap. The default is vLLM's: the
  /// latest arrivals that have run a step, recomputed, until enough is freed.
  virtual void preempt_for_growth(const schedule_input& in, schedule_decision& d);
  /// New queue cut-offs and quotas from a queue tuner; ignored by default.
  virtual void on_tuning(const queue_tuning&) {}
  /// Totals for stats that only grow (name, value); none by default.
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
  /// Levels for stats that may go down as well (name, value); none by
  /// default.
  virtual std::vector<std::pair<std::string, double>> gauges() const { return {}; }

protected:
  /// preempt_for_growth's work: running requests that have run a step
  /// (and are not in `d` already) squashed in the order `first` ranks them,
  /// until in.pages_short pages are freed; each swapped out instead where
  /// `swap` (when given) says so.
  static void squash_for_growth(const schedule_input& in, schedule_decision& d,
                                bool (*first)(const running_view* a, const running_view* b),
                                const std::function<bool(const running_view&)>& swap = {});
};

} // namespace troupe::policies
