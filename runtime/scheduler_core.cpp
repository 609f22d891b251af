#include "runtime/scheduler_core.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace troupe {

namespace {

/// The entry of `cache` (oldest first, at most 16) under `key`, made by
/// `make` when there is none.
template <class T, class Make>
std::shared_ptr<const T> cached(std::vector<std::pair<std::string, std::shared_ptr<const T>>>& cache, std::string key,
                                Make&& make) {
  const auto it = std::find_if(cache.begin(), cache.end(), [&](const auto& e) { return e.first == key; });
  if (it != cache.end())
    return it->second;
  constexpr std::size_t kept = 16;
  if (cache.size() == kept)
    cache.erase(cache.begin());
  std::shared_ptr<const T> made = make();
  cache.emplace_back(std::move(key), made);
  return made;
}

} // namespace

// -- scheduler_effects --------------------------------------------------------

bool scheduler_effects::empty() const noexcept {
  return shares.empty() && release_cached.empty() && adopts.empty() && reserves.empty() && grows.empty()
         && acquires.empty() && release_pages.empty() && release_adapters.empty() && swap_outs.empty()
         && swap_ins.empty() && session_outs.empty() && session_ins.empty() && disk_outs.empty() && disk_ins.empty() && disk_deletes.empty()
         && stream_ins.empty() && end_streams.empty()
         && release_host_pages.empty() && trim_pages == 0 && tokens.empty()
         && finished.empty() && queued.empty();
}

void scheduler_effects::merge(scheduler_effects&& other) {
  auto append = [](auto& to, auto& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()),
              std::make_move_iterator(from.end()));
  };
  append(shares, other.shares);
  append(release_cached, other.release_cached);
  append(adopts, other.adopts);
  append(reserves, other.reserves);
  append(grows, other.grows);
  append(acquires, other.acquires);
  append(release_pages, other.release_pages);
  append(release_adapters, other.release_adapters);
  append(swap_outs, other.swap_outs);
  append(swap_ins, other.swap_ins);
  append(session_outs, other.session_outs);
  append(session_ins, other.session_ins);
  append(disk_outs, other.disk_outs);
  append(disk_ins, other.disk_ins);
  append(disk_deletes, other.disk_deletes);
  append(stream_ins, other.stream_ins);
  append(end_streams, other.end_streams);
  append(release_host_pages, other.release_host_pages);
  trim_pages += other.trim_pages;
  for (auto& [k, lp] : other.logprobs)
    logprobs.emplace_back(tokens.size() + k, std::move(lp));
  for (auto& [k, lp] : other.prompt_logprobs)
    prompt_logprobs.emplace_back(tokens.size() + k, std::move(lp));
  append(tokens, other.tokens);
  append(finished, other.finished);
  append(queued, other.queued);
}

// -- scheduler_core: construction ---------------------------------------------

scheduler_core::scheduler_core(scheduler_limits limits,
                               std::unique_ptr<policies::scheduling_policy> policy,
                               const gpu::tokenizer* vocab)
  : limits_(limits), policy_(std::move(policy)), vocab_(vocab) {
  if (vocab_) {
    ends_ = vocab_->end_tokens();
    std::sort(ends_.begin(), ends_.end());
    ends_.erase(std::unique(ends_.begin(), ends_.end()), ends_.end());
  }
  if (limits_.prefix_caching && limits_.page_tokens > 0) {
    prefix_.emplace(limits_.page_tokens);
    prefix_->admit_after(limits_.prefix_admit_offers,
                         static_cast<std::size_t>(std::max<std::uint64_t>(16 * limits_.total_pages, 4096)));
  }
}

request_state scheduler_core::state_of(std::uint64_t request_id) const {
  auto i = records_.find(request_id);
  return i == records_.end() ? request_state::finished : i->second.state;
}

bool scheduler_core::has_work() const noexcept {
  if (step_in_flight_)
    return false;
  return !batch_.empty() || (waiting() > 0 && !memory_blocked_);
}

void scheduler_core::transition(record& r, request_state to) {
  // The only place a state changes; keeps the counters in step with it.
  // Admitting, ready, running and swapping-in requests pin their adapter.
  auto pins = [](request_state s) {
    return s == request_state::admitting || s == request_state::ready
           || s == request_state::running || s == request_state::swapping_in;
  };
  const bool held = pins(r.state);
  const bool holds = pins(to);
  if (r.spec.adapter_id != 0 && held != holds) {
    auto& use = adapter_use_[r.spec.adapter_id];
    if (holds) {
      if (use++ == 0)
        adapter_pages_in_use_ += r.spec.adapter_pages;
    } else if (--use == 0) {
      adapter_pages_in_use_ -= r.spec.adapter_pages;
      adapter_use_.erase(r.spec.adapter_id);
    }
  }
  if (r.state == request_state::admitting)
    --admitting_;
  if (to == request_state::admitting) {
    ++admitting_;
    r.stepped = false; // (re)admitted: no step yet
    r.grow_blocked = false;
  }
  auto runs = [](request_state s) { return s == request_state::ready || s == request_state::running; };
  if (runs(to) && !runs(r.state))
    batch_.push_back(r.spec.request_id);
  r.state = to;
}

// -- submission and admission ---------------------------------------------------

scheduler_core::submit_result scheduler_core::submit(request_spec spec) {
  if (records_.contains(spec.request_id))
    return submit_result::duplicate;
  if (waiting() >= limits_.max_waiting)
    return submit_result::queue_full;
  auto pages = policies::pages_for(static_cast<std::uint32_t>(spec.prompt.size()), spec.max_new_tokens,
                                   limits_.page_tokens);
  if (spec.fit_context && pages + spec.adapter_pages > limits_.total_pages
      && limits_.total_pages > spec.adapter_pages) {
    // The output cut to what the pool holds after the prompt and adapter.
    const auto room = (limits_.total_pages - spec.adapter_pages) * limits_.page_tokens;
    if (room > spec.prompt.size()) {
      spec.max_new_tokens = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(spec.max_new_tokens, room - spec.prompt.size()));
      spec.min_tokens = std::min(spec.min_tokens, spec.max_new_tokens);
      spec.predicted_tokens = std::min(spec.predicted_tokens, spec.max_new_tokens);
      pages = policies::pages_for(static_cast<std::uint32_t>(spec.prompt.size()), spec.max_new_tokens,
                                  limits_.page_tokens);
    }
  }
  if (pages + spec.adapter_pages > limits_.total_pages)
    return submit_result::too_large;
  record r;
  r.times.arrival_s = spec.arrival_s;
  r.pages = pages;
  if ((spec.json_object || !spec.json_schema.empty()) && vocab_ != nullptr) {
    // (get throws for a schema the intake would refuse; a headed
    // trigger's is its heads', compiled apart)
    auto schema = spec.json_schema.empty()             ? json_schema::any_object()
                  : !spec.json_trigger_head.empty() ? nullptr
                                                      : schemas_.get(spec.json_schema);
    if (!json_vocab_)
      json_vocab_ = std::make_unique<json_vocab>(*vocab_);
    if (!spec.reasoning_close.empty()) {
      r.gate = gate_for(spec, std::move(schema));
      r.gate_at = r.gate->begin();
    } else if (spec.json_trigger.empty()) {
      r.json.emplace(std::move(schema));
    } else {
      r.trigger = trigger_for(spec, std::move(schema));
      r.trigger_at = r.trigger->begin(spec.json_trigger_first);
    }
  }
  if ((!spec.choice.empty() || !spec.regex.empty() || !spec.grammar.empty()) && vocab_ != nullptr) {
    if (!json_vocab_)
      json_vocab_ = std::make_unique<json_vocab>(*vocab_);
    auto held = [&]() -> held_machine {
      if (!spec.regex.empty()) // (throws for an expression the intake would refuse)
        return regex_machine(
          cached(regexes_, spec.regex, [&] { return std::make_shared<const held_regex>(spec.regex); }));
      if (!spec.grammar.empty()) // (likewise)
        return grammar_machine(
          cached(grammars_, spec.grammar, [&] { return std::make_shared<const held_grammar>(spec.grammar); }));
      auto sorted = spec.choice;
      std::sort(sorted.begin(), sorted.end());
      return choice_machine(std::make_shared<const std::vector<std::string>>(std::move(sorted)));
    }();
    if (!spec.reasoning_close.empty()) {
      r.gate = gate_for(spec, std::move(held));
      r.gate_at = r.gate->begin();
    } else {
      r.held.emplace(std::move(held));
    }
  }
  if (!spec.allowed_token_ids.empty() && vocab_ != nullptr) {
    // (in token order, each once, all in the vocabulary: the wire's)
    auto allowed = spec.allowed_token_ids.begin();
    for (std::int32_t t = 0; t < vocab_->vocab_size(); ++t) {
      if (allowed != spec.allowed_token_ids.end() && *allowed == t)
        ++allowed;
      else
        r.not_allowed.push_back(t);
    }
  }
  r.adjust = spec.logit_bias;
  if (spec.repetition_penalty != 1.0f) {
    // The prompt's distinct tokens marked, the bias merged in token order.
    std::vector<std::int32_t> seen = spec.prompt;
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    std::vector<gpu::logit_adjustment> merged;
    merged.reserve(seen.size() + r.adjust.size());
    auto bias = r.adjust.begin();
    for (const auto t : seen) {
      for (; bias != r.adjust.end() && bias->token < t; ++bias)
        merged.push_back(*bias);
      gpu::logit_adjustment a{t, 0.0f, true};
      if (bias != r.adjust.end() && bias->token == t)
        a.delta = (bias++)->delta;
      merged.push_back(a);
    }
    merged.insert(merged.end(), bias, r.adjust.end());
    r.adjust = std::move(merged);
  }
  r.spec = std::move(spec);
  auto [i, added] = records_.emplace(r.spec.request_id, std::move(r));
  enqueue_waiting(i->second);
  return submit_result::accepted;
}

void scheduler_core::count_waiting(std::uint32_t adapter_id, bool up) {
  if (adapter_id == 0)
    return;
  auto& n = waiting_per_adapter_[adapter_id];
  n = up ? n + 1 : (n > 0 ? n - 1 : 0);
  queued_dirty_.push_back(adapter_id);
}

void scheduler_core::flush_queued(scheduler_effects& fx) {
  if (queued_dirty_.empty())
    return;
  std::sort(queued_dirty_.begin(), queued_dirty_.end());
  queued_dirty_.erase(std::unique(queued_dirty_.begin(), queued_dirty_.end()), queued_dirty_.end());
  for (auto id : queued_dirty_) {
    auto i = waiting_per_adapter_.find(id);
    const std::uint32_t n = i == waiting_per_adapter_.end() ? 0 : i->second;
    if (n == 0 && i != waiting_per_adapter_.end())
      waiting_per_adapter_.erase(i);
    fx.queued.emplace_back(id, n);
  }
  queued_dirty_.clear();
}

void scheduler_core::enqueue_waiting(const record& r) {
  count_waiting(r.spec.adapter_id, true);
  policies::waiting_view v;
  v.request_id = r.spec.request_id;
  v.prompt_tokens = static_cast<std::uint32_t>(r.spec.prompt.size());
  v.max_new_tokens = r.spec.max_new_tokens;
  v.predicted_tokens = r.spec.predicted_tokens;
  v.adapter_id = r.spec.adapter_id;
  v.adapter_rank = r.spec.adapter_rank;
  v.adapter_pages = r.spec.adapter_pages;
  v.queue = r.spec.queue;
  v.priority = r.spec.priority;
  v.arrival_s = r.spec.arrival_s;
  v.generated = r.generated;
  v.swapped = r.swapped;
  v.pages = r.swapped ? swap_in_pages(r) : 0;
  v.reserve_tokens = reserve_tokens(r);
  v.last_token_s = r.last_token_s;
  // Keep arrival order; a request sent back by a denied reservation goes back
  // to its place, which is near the head.
  auto before = [](const policies::waiting_view& a, const policies::waiting_view& b) {
    return a.arrival_s < b.arrival_s
           || (a.arrival_s == b.arrival_s && a.request_id < b.request_id);
  };
  if (waiting_.size() == head_ || !before(v, waiting_.back())) {
    waiting_.push_back(v);
    return;
  }
  auto first = waiting_.begin() + static_cast<std::ptrdiff_t>(head_);
  auto pos = std::upper_bound(first, waiting_.end(), v, before);
  if (pos == first && head_ > 0) {
    waiting_[--head_] = v;
    return;
  }
  waiting_.insert(pos, v);
}

void scheduler_core::compact_waiting() {
  if (head_ > 1024 && head_ * 2 > waiting_.size()) {
    waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

std::uint32_t scheduler_core::tokens_per_page(const record& r) const noexcept {
  return r.hidden ? limits_.hidden_page_tokens : limits_.page_tokens;
}

bool scheduler_core::cache_between_tiers(const record& r, const policies::schedule_decision& d) const {
  if (r.spec.session == 0 || r.swapped || r.generated != 0)
    return false;
  const auto sit = sessions_.find(r.spec.session);
  if (sit == sessions_.end()
      || (sit->second.where != session_tier::moving_in && sit->second.where != session_tier::moving_out))
    return false;
  if (limits_.hidden_page_tokens > 0
      && std::find(d.hidden.begin(), d.hidden.end(), r.spec.request_id) != d.hidden.end())
    return false; // held as a hidden cache: it prefills its whole prompt anyway
  const auto& cached = sit->second.tokens;
  const auto& p = r.spec.prompt;
  return cached.size() < p.size() && std::equal(cached.begin(), cached.end(), p.begin());
}

std::uint64_t scheduler_core::head_pages() const {
  if (waiting() == 0)
    return 0;
  const auto& head = waiting_[head_];
  auto need = policies::page_budget::cache_pages(head, limits_.page_tokens);
  if (head.adapter_id != 0 && !adapter_use_.contains(head.adapter_id))
    need += head.adapter_pages;
  return need;
}

std::uint32_t scheduler_core::reserve_tokens(const record& r) const noexcept {
  const auto prompt = static_cast<std::uint32_t>(r.spec.prompt.size());
  const auto life = prompt + r.spec.max_new_tokens;
  // On demand: the prefill (prompt + output so far) and the next token.
  return limits_.on_demand ? std::min(life, prompt + r.generated + 1) : life;
}

std::uint64_t scheduler_core::swap_in_pages(const record& r) const noexcept {
  return std::max<std::uint64_t>(r.host_page_ids.size(),
                                 policies::pages_for(reserve_tokens(r), 0, tokens_per_page(r)));
}

void scheduler_core::request_growth(scheduler_effects& fx) {
  pages_short_ = 0;
  const bool retry = std::exchange(growth_retry_, false);
  for (auto id : batch_) {
    auto& r = records_.at(id);
    if (r.state != request_state::running || r.grow_pending)
      continue;
    const auto per = tokens_per_page(r);
    const auto prompt = static_cast<std::uint32_t>(r.spec.prompt.size());
    // Room for the next step (it writes position prompt + generated - 1)
    // and the one after, so a granted growth rarely stalls a step.
    const auto life = policies::pages_for(prompt, r.spec.max_new_tokens, per);
    const auto want = std::min(life, policies::pages_for(prompt + r.generated + 1, 0, per));
    const auto held = held_pages(r);
    if (want <= held)
      continue;
    const auto next = policies::pages_for(prompt + r.generated, 0, per);
    if (r.grow_blocked && !retry) {
      if (next > held)
        pages_short_ += next - held;
      continue;
    }
    r.grow_pending = true;
    r.grow_pages = want - held;
    evict_cached(r.grow_pages, fx);
    r.grow_ticket = next_ticket_++;
    reserved_pages_ += r.grow_pages;
    fx.grows.push_back({id, r.grow_pages, r.grow_ticket});
  }
}

scheduler_effects scheduler_core::on_grown(std::uint64_t request_id, std::uint64_t ticket,
                                           bool granted, std::vector<std::uint32_t> pages) {
  scheduler_effects fx;
  auto i = records_.find(request_id);
  if (i == records_.end() || !i->second.grow_pending || i->second.grow_ticket != ticket)
    return fx; // ended or preempted meanwhile: its release (sent after) freed these pages too
  auto& r = i->second;
  r.grow_pending = false;
  if (granted && pages.size() == r.pages + r.grow_pages) {
    r.pages += r.grow_pages;
    r.page_ids = with_prefix(r, std::move(pages));
    r.grow_blocked = false;
  } else {
    reserved_pages_ -= r.grow_pages;
    r.grow_blocked = true;
    ++growths_denied_;
    fx.trim_pages += r.grow_pages; // idle adapters may give pages back
  }
  r.grow_pages = 0;
  if (r.swap_requested && !r.in_step)
    swap_out(r, fx);
  return fx;
}

scheduler_effects scheduler_core::admit(double now_s) {
  scheduler_effects fx;
  flush_queued(fx);
  if (!host_claims_.empty())
    serve_host_claims(now_s, fx); // host pages may have come free since
  clean_host(fx);
  if (idle_cached() > limits_.prefix_idle_pages)
    evict_idle(idle_cached() - limits_.prefix_idle_pages, fx); // over its share of the pool
  if (limits_.on_demand)
    request_growth(fx);
  // Blocked by a refused grant, the pages to come back from the requests
  // that ended, and those kept them for their sessions: nothing else will.
  if (memory_blocked_ && only_waiting() && caches_give_way(fx))
    memory_blocked_ = false;
  if ((memory_blocked_ || waiting() == 0) && pages_short_ == 0)
    return fx;
  // Turns count what they would take over of their caches on the GPU, as
  // the caches stand now; room made for the head may evict others' caches:
  // counted again after, when it did.
  if (waiting() > 0 && (!sessions_.empty() || adoptable_waiting_))
    refresh_adoptable();
  if (!sessions_.empty() && waiting() > 0 && room_for_head(fx))
    refresh_adoptable();
  running_views_.clear();
  // Pages already on their way back: swap-outs in flight, and requests
  // chosen for preemption that wait for their step to end.
  std::uint64_t freeing = swapping_out_pages_;
  for (auto id : batch_) {
    const auto& r = records_.at(id);
    if (r.squash_requested || r.swap_requested)
      freeing += r.pages;
    policies::running_view v;
    v.request_id = id;
    v.prompt_tokens = static_cast<std::uint32_t>(r.spec.prompt.size());
    v.generated = r.generated;
    v.context_tokens = v.prompt_tokens + r.generated;
    v.remaining_tokens = r.spec.max_new_tokens - r.generated;
    v.adapter_id = r.spec.adapter_id;
    v.predicted_tokens = r.spec.predicted_tokens;
    v.queue = r.spec.queue;
    v.pages = r.pages;
    v.adapter_pages = r.spec.adapter_pages;
    v.arrival_s = r.spec.arrival_s;
    v.priority = r.spec.priority;
    v.leaving = r.squash_requested || r.swap_requested;
    // One already chosen for preemption (waiting for its step) is not
    // offered again.
    v.started = r.stepped && !r.squash_requested && !r.swap_requested;
    v.hidden = r.hidden;
    v.last_token_s = r.last_token_s;
    running_views_.push_back(v);
  }
  adapters_in_use_.clear();
  for (const auto& [id, n] : adapter_use_)
    adapters_in_use_.push_back(id);
  policies::schedule_input in;
  in.waiting = std::span{waiting_}.subspan(head_);
  in.running = running_views_;
  in.adapters_in_use = adapters_in_use_;
  in.limits.max_running = limits_.max_running > admitting_
                            ? limits_.max_running - static_cast<std::uint32_t>(admitting_)
                            : 0;
  in.limits.token_budget = limits_.token_budget;
  // On demand, admissions leave the watermark and what running requests
  // are short of.
  // Cached prefix pages no request reads count as free (they go when wanted).
  const auto taken = reserved_pages_ - idle_cached() + adapter_pages_in_use_
                     + (limits_.on_demand ? limits_.growth_watermark + pages_short_ : 0);
  in.limits.free_pages = limits_.total_pages > taken ? limits_.total_pages - taken : 0;
  in.limits.on_demand = limits_.on_demand;
  // Preempt only for what those will not cover (else a second victim goes
  // for pages the first is already giving back).
  in.pages_short = pages_short_ > freeing ? pages_short_ - freeing : 0;
  in.limits.page_tokens = limits_.page_tokens;
  in.limits.hidden_page_tokens = limits_.hidden_page_tokens;
  in.limits.host_free_pages = host_free();
  in.limits.page_bytes = limits_.page_bytes;
  in.now_s = now_s;
  auto decision = memory_blocked_ || waiting() == 0 ? policies::schedule_decision{} : policy_->schedule(in);
  if (in.pages_short > 0)
    policy_->preempt_for_growth(in, decision);
  for (auto id : decision.squash) {
    auto i = records_.find(id);
    if (i == records_.end() || (i->second.state != request_state::ready
                                && i->second.state != request_state::running))
      continue; // only admitted requests can be squashed
    squash(i->second, fx);
  }
  for (auto id : decision.swap) {
    auto i = records_.find(id);
    if (i == records_.end() || (i->second.state != request_state::ready
                                && i->second.state != request_state::running))
      continue;
    swap_out(i->second, fx);
  }
  for (auto id : decision.abort) {
    auto i = records_.find(id);
    if (i == records_.end() || i->second.state != request_state::waiting)
      continue; // only waiting requests can be aborted
    ++aborted_;
    finish(i->second, finish_reason::aborted, now_s, fx);
  }
  flush_finished();
  // Preemptions just freed pages: short requests ask again at once (no
  // later answer is coming that would make the shell call back).
  if (limits_.on_demand && growth_retry_)
    request_growth(fx);
  if (decision.admit.empty()) {
    // Nothing admitted, and nothing else in the system to give pages back:
    // were session caches on the GPU holding what the policy's choice
    // needs, no event would ever come to admit it. They give way (a cache
    // only saves work).
    if (only_waiting())
      caches_give_way(fx);
    flush_queued(fx);
    return fx;
  }
  // Take the admitted requests out of the waiting queue. The common case
  // (FCFS) admits a prefix, which only moves head_.
  std::size_t prefix = 0;
  while (prefix < decision.admit.size() && head_ + prefix < waiting_.size()
         && waiting_[head_ + prefix].request_id == decision.admit[prefix])
    ++prefix;
  if (prefix == decision.admit.size()) {
    head_ += prefix;
  } else {
    std::unordered_map<std::uint64_t, bool> chosen;
    for (auto id : decision.admit)
      chosen[id] = true;
    auto first = waiting_.begin() + static_cast<std::ptrdiff_t>(head_);
    waiting_.erase(std::remove_if(first, waiting_.end(),
                                  [&](const auto& v) { return chosen.contains(v.request_id); }),
                   waiting_.end());
  }
  compact_waiting();
  for (auto id : decision.admit) {
    auto i = records_.find(id);
    if (i == records_.end() || i->second.state != request_state::waiting)
      continue; // a policy naming an unknown id is ignored
    auto& r = i->second;
    if (cache_between_tiers(r, decision)) {
      // Its session's cache is being copied between the GPU and the host
      // pool: the turn stays in its place in the queue until the copy ends,
      // then takes the cache over, rather than compute its history again.
      ++turns_held_for_cache_;
      count_waiting(r.spec.adapter_id, false);
      enqueue_waiting(r);
      continue;
    }
    if (prefix_being_computed(r, decision)) {
      ++prefix_holds_;
      count_waiting(r.spec.adapter_id, false);
      enqueue_waiting(r);
      continue;
    }
    count_waiting(r.spec.adapter_id, false);
    transition(r, request_state::admitting);
    // The cache type is chosen at each admission (a change of type is a
    // discard and a re-prefill, which a preemption already is); a swapped
    // request comes back with the cache it had.
    if (!r.swapped) {
      r.hidden = limits_.hidden_page_tokens > 0
                 && std::find(decision.hidden.begin(), decision.hidden.end(), id) != decision.hidden.end();
      r.pages = policies::pages_for(reserve_tokens(r), 0, tokens_per_page(r));
    } else {
      r.pages = swap_in_pages(r);
    }
    std::uint64_t adopted = 0;
    if (auto sit = sessions_.find(r.spec.session);
        r.spec.session != 0 && !r.swapped && !r.hidden && r.generated == 0 && sit != sessions_.end()) {
      // The turn's prompt begins with the cached tokens, or with at least
      // half of them (a client's re-tokenized history may part from the
      // tokens generated): K and V of the tokens shared are reused, those
      // after are overwritten by the prefill. At least one prompt token is
      // left to prefill. K and V depend on the adapter: only a cache of the
      // turn's own adapter serves it.
      auto& e = sit->second;
      const auto shared = reusable_prefix(e, r, limits_.rope_long_after);
      const bool extends = shared > 0;
      const bool partial = shared < e.tokens.size();
      if (extends && e.where == session_tier::awaiting_host)
        keep_on_device(e); // still on the GPU: its turn takes it there
      if (extends && e.where == session_tier::host) {
        // In the host pool: fresh pages now, the cache copied into the
        // first of them once granted (swapping_in), then the rest prefilled.
        r.pages = std::max(r.pages, e.pages);
        r.cached_tokens = static_cast<std::uint32_t>(shared);
        r.session_owner = e.owner;
        r.session_host_pages = e.host_page_ids;
        ++session_host_hits_;
        forget_disk_copy(e, fx);
        sessions_.erase(sit);
      } else if (extends
                 && ((e.where == session_tier::disk && read_from_disk(e) && fetch_from_disk(r.spec.session, id, fx))
                     || (e.where == session_tier::to_disk && e.waiter == 0)
                     || (e.where == session_tier::from_disk && e.waiter == 0))) {
        // On disk: read back into host pages while the turn gets its pages
        // (or already being read, for an advisory: the turn takes the read
        // over). On its way there: its host pages still hold it, and the
        // turn takes them once the write has read them (on_disk_out; the
        // file goes). Either way then copied into the turn's first pages, as
        // from the host pool.
        r.pages = std::max(r.pages, e.pages);
        r.cached_tokens = static_cast<std::uint32_t>(shared);
        r.session_owner = e.owner;
        r.session_host_pages.clear();
        if (e.where == session_tier::to_disk)
          ++session_host_hits_;
        e.waiter = id;
      } else if (extends && e.where == session_tier::device) {
        adopted = e.pages;
        r.pages = std::max(r.pages, adopted);
        r.cached_tokens = static_cast<std::uint32_t>(shared);
        r.adopted = true;
        fx.adopts.push_back({e.owner, id});
        session_pages_held_ -= e.pages;
        ++session_hits_;
        sessions_.erase(sit); // its pages are this request's now (still counted in reserved_pages_)
      }
      if (r.cached_tokens > 0 && partial)
        ++session_partial_hits_;
    }
    read_prefix(r, now_s);
    note_computing(r);
    evict_cached(r.pages - adopted, fx);
    reserved_pages_ += r.pages - adopted;
    r.pages_pending = true;
    fx.reserves.push_back({id, r.pages - adopted});
    if (r.spec.adapter_id != 0) {
      r.adapter_pending = true;
      fx.acquires.push_back({id, r.spec.adapter_id});
    }
  }
  flush_queued(fx);
  return fx;
}

scheduler_effects scheduler_core::on_pages(std::uint64_t request_id, bool granted,
                                           double now_s, std::vector<std::uint32_t> pages) {
  scheduler_effects fx;
  auto i = records_.find(request_id);
  if (i == records_.end() || !i->second.pages_pending)
    return fx;
  auto& r = i->second;
  r.pages_pending = false;
  r.pages_granted = granted;
  r.pages_failed = !granted;
  r.page_ids = granted ? with_prefix(r, std::move(pages)) : std::move(pages);
  if (!granted) {
    reserved_pages_ -= r.pages;
    memory_blocked_ = true;
    drop_prefix(r, now_s); // looked up again at its next admission
    fx.trim_pages += r.pages;
    if (r.adopted) {
      // The adopted pages are this request's in the pool: free them (its
      // prompt will be prefilled whole).
      fx.release_pages.push_back(request_id);
      r.adopted = false;
      r.cached_tokens = 0;
    }
  }
  settle_admission(r, now_s, fx);
  flush_finished();
  return fx;
}

scheduler_effects scheduler_core::on_adapter(std::uint64_t request_id, adapter_grant grant,
                                             double now_s) {
  scheduler_effects fx;
  auto i = records_.find(request_id);
  if (i == records_.end() || !i->second.adapter_pending)
    return fx;
  auto& r = i->second;
  const bool granted = grant == adapter_grant::granted;
  r.adapter_pending = false;
  r.adapter_granted = granted;
  r.adapter_failed = !granted;
  r.adapter_broken = grant == adapter_grant::failed;
  if (grant == adapter_grant::retry) {
    // No room in the pool for the adapter. Cached prompt pages nobody reads
    // give way first (the adapter cache cannot free them); else idle
    // adapters, and admission waits for memory.
    const auto idle = idle_cached();
    evict_cached(r.spec.adapter_pages, fx);
    if (idle_cached() == idle) {
      memory_blocked_ = true;
      fx.trim_pages += r.spec.adapter_pages;
    }
    ++r.adapter_failures;
  }
  settle_admission(r, now_s, fx);
  flush_finished();
  return fx;
}

void scheduler_core::settle_admission(record& r, double now_s, scheduler_effects& fx) {
  if (r.pages_pending || r.adapter_pending)
    return; // wait for the other answer
  if (r.cancel_requested) {
    finish(r, finish_reason::cancelled, now_s, fx);
    return;
  }
  if (r.adapter_broken) {
    finish(r, finish_reason::adapter_error, now_s, fx);
    return;
  }
  if (r.adapter_failed && r.adapter_failures >= limits_.max_adapter_failures) {
    // The adapter cannot be loaded: end the request rather than retry forever
    // at the head of the queue.
    finish(r, finish_reason::error, now_s, fx);
    return;
  }
  if (r.pages_failed || r.adapter_failed) {
    // Give back what was granted and queue again at the request's old place.
    if (r.pages_granted) {
      fx.release_pages.push_back(r.spec.request_id);
      reserved_pages_ -= r.pages;
    }
    if (r.adapter_granted)
      fx.release_adapters.push_back({r.spec.request_id, r.spec.adapter_id});
    r.page_ids.clear();
    r.pages_granted = r.adapter_granted = false;
    r.pages_failed = r.adapter_failed = false;
    if (!r.swapped)
      drop_prefix(r, now_s); // (a swapped request's cache goes on reading it)
    transition(r, request_state::waiting);
    enqueue_waiting(r);
    return;
  }
  if (r.session_owner != 0) {
    // Its session's cache comes back from the host pool into its first
    // pages (once read from disk, if it is on its way from there).
    transition(r, request_state::swapping_in);
    if (!r.session_host_pages.empty())
      copy_session_in(r, fx);
    return;
  }
  if (r.swapped) {
    // Its cache comes back from the host pool; it decodes on from there.
    transition(r, request_state::swapping_in);
    // Into its first pages; the rest are room for its next step.
    const auto cached = r.host_page_ids.size();
    fx.swap_ins.push_back({r.spec.request_id,
                           {r.page_ids.begin(), r.page_ids.begin() + static_cast<std::ptrdiff_t>(cached)},
                           r.host_page_ids, cached * limits_.page_bytes});
    return;
  }
  transition(r, request_state::ready);
  if (r.squash_requested)
    squash(r, fx);
}

// -- steps --------------------------------------------------------------------

std::vector<gpu::step_entry> scheduler_core::next_step(double now_s) {
  std::vector<gpu::step_entry> out;
  if (step_in_flight_ || batch_.empty())
    return out;
  std::uint64_t tokens = 0;
  for (auto id : batch_) {
    auto& r = records_.at(id);
    if (r.stream_pending && (r.cancel_requested || r.squash_requested || r.swap_requested))
      continue; // settled when its copy answers
    gpu::step_entry e;
    e.request_id = id;
    e.adapter_id = r.spec.adapter_id;
    e.adapter_rank = r.spec.adapter_rank;
    e.seed = r.spec.seed;
    e.temperature = r.spec.temperature;
    e.top_p = r.spec.top_p;
    e.top_k = r.spec.top_k;
    e.min_p = r.spec.min_p;
    e.repetition_penalty = r.spec.repetition_penalty;
    e.logprobs = r.spec.logprobs;
    e.logit_adjust = logit_adjust(r, ends_);
    if (r.json || r.trigger || r.gate || r.held)
      constrain_json(r, e.logit_adjust);
    const auto prompt = static_cast<std::uint32_t>(r.spec.prompt.size());
    if (r.state == request_state::ready) {
      // A prefill joins only while the budget allows, unless the step would
      // otherwise be empty. A squashed request's prefill recomputes its
      // output so far too.
      const auto cached = r.cached_tokens;
      const auto prefill = prompt + r.generated - cached;
      if (!out.empty() && tokens + prefill > limits_.token_budget)
        continue;
      e.new_tokens = prefill;
      e.context_tokens = cached;
      e.output_index = r.generated;
      if (r.generated == 0 && cached == 0)
        e.prompt_logprobs = r.spec.prompt_logprobs; // (it adopts no cache)
      e.tokens.assign(r.spec.prompt.begin() + cached, r.spec.prompt.end());
      e.tokens.insert(e.tokens.end(), r.output.begin(), r.output.end());
    } else {
      if (limits_.on_demand
          && policies::pages_for(prompt + r.generated, 0, tokens_per_page(r)) > held_pages(r))
        continue; // stalled: waits for pages (a growth or a preemption)
      e.new_tokens = 1;
      e.context_tokens = prompt + r.generated - 1;
      e.output_index = r.generated;
      e.tokens.assign(1, r.last_token);
    }
    tokens += e.new_tokens;
    if (r.times.first_scheduled_s < 0)
      r.times.first_scheduled_s = now_s;
    e.pages = r.page_ids;
    e.hidden = r.hidden;
    if (r.stream_first) {
      e.stream = id;
      r.stream_first = false;
    }
    r.in_step = true;
    out.push_back(e);
  }
  step_in_flight_ = !out.empty();
  return out;
}

namespace {

/// `token`'s entry in `adjust` (in token order), made (no delta, not
/// repeated) where it has none.
gpu::logit_adjustment& adjustment_of(std::vector<gpu::logit_adjustment>& adjust, std::int32_t token) {
  auto at = std::lower_bound(adjust.begin(), adjust.end(), token,
                             [](const gpu::logit_adjustment& a, std::int32_t t) { return a.token < t; });
  if (at == adjust.end() || at->token != token)
    at = adjust.insert(at, {token, 0.0f, false});
  return *at;
}

/// `adjust` (in token order) with every token of `banned` (in token order)
/// banned: a delta no logit outweighs (exp() of it is 0 at any
/// temperature), in its place; a banned token's own adjustment gives way
/// to the ban.
void merge_bans(std::vector<gpu::logit_adjustment>& adjust, std::span<const std::int32_t> banned) {
  if (banned.empty())
    return;
  constexpr float ban = -1e30f;
  std::vector<gpu::logit_adjustment> out;
  out.reserve(banned.size() + adjust.size());
  auto b = banned.begin();
  for (const auto& a : adjust) {
    for (; b != banned.end() && *b < a.token; ++b)
      out.push_back({*b, ban});
    if (b != banned.end() && *b == a.token)
      continue; // pushed with the ban below
    out.push_back(a);
  }
  for (; b != banned.end(); ++b)
    out.push_back({*b, ban});
  adjust = std::move(out);
}

} // namespace

std::vector<gpu::logit_adjustment> scheduler_core::logit_adjust(const record& r,
                                                                std::span<const std::int32_t> ends) {
  std::vector<gpu::logit_adjustment> out = r.adjust;
  const bool short_of_min = r.generated < r.spec.min_tokens;
  if (!short_of_min && r.spec.bad_words.empty() && r.not_allowed.empty())
    return out;
  std::vector<std::int32_t> banned;
  if (short_of_min) {
    // Before min_tokens nothing may end the output: the tokens that would
    // are banned.
    if (!r.spec.ignore_eos)
      banned.assign(ends.begin(), ends.end());
    banned.insert(banned.end(), r.spec.stop_token_ids.begin(), r.spec.stop_token_ids.end());
  }
  // A bad word's last token where the output ends with the ones before it.
  for (const auto& word : r.spec.bad_words) {
    const auto before = word.size() - 1;
    if (before <= r.output.size() && std::equal(word.begin(), word.end() - 1, r.output.end() - static_cast<std::ptrdiff_t>(before)))
      banned.push_back(word.back());
  }
  std::sort(banned.begin(), banned.end());
  banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
  if (!r.not_allowed.empty()) {
    std::vector<std::int32_t> all;
    all.reserve(banned.size() + r.not_allowed.size());
    std::set_union(banned.begin(), banned.end(), r.not_allowed.begin(), r.not_allowed.end(), std::back_inserter(all));
    banned = std::move(all);
  }
  merge_bans(out, banned);
  return out;
}

void scheduler_core::note_output(record& r, std::int32_t token) {
  const bool penalties = r.spec.presence_penalty != 0 || r.spec.frequency_penalty != 0;
  const bool repeats = r.spec.repetition_penalty != 1.0f;
  if (!penalties && !repeats)
    return;
  auto& a = adjustment_of(r.adjust, token);
  a.repeated = a.repeated || repeats;
  if (!penalties)
    return;
  // OpenAI's: logit - count·frequency - (count > 0)·presence + bias.
  const auto count = ++r.output_counts[token];
  a.delta = -static_cast<float>(count) * r.spec.frequency_penalty - r.spec.presence_penalty;
  const auto& bias = r.spec.logit_bias;
  const auto b = std::lower_bound(bias.begin(), bias.end(), token,
                                  [](const gpu::logit_adjustment& x, std::int32_t t) { return x.token < t; });
  if (b != bias.end() && b->token == token)
    a.delta += b->delta;
}

void scheduler_core::constrain_json(record& r, std::vector<gpu::logit_adjustment>& adjust) {
  if (!r.json_allowed)
    r.json_allowed = r.gate      ? r.gate->split(r.gate_at)
                     : r.trigger ? r.trigger->split(r.trigger_at)
                     : r.held    ? std::visit([&](const auto& m) { return json_vocab_->split(m); }, *r.held)
                                 : json_vocab_->split(*r.json);
  const bool may_end = r.held ? std::visit([](const auto& m) { return m.complete(); }, *r.held)
                              : r.gate && r.gate->ends_here(r.gate_at);
  std::vector<std::int32_t> ends_open;
  if (may_end) {
    // A whole choice, or a match, that the output may go on from: the end
    // tokens may end it here.
    std::set_difference(r.json_allowed->banned.begin(), r.json_allowed->banned.end(), ends_.begin(), ends_.end(),
                        std::back_inserter(ends_open));
  }
  merge_bans(adjust, may_end ? ends_open : r.json_allowed->banned);
}


std::shared_ptr<const json_trigger> scheduler_core::trigger_for(const request_spec& spec,
                                                                std::shared_ptr<const json_schema> schema) {
  auto key = spec.json_trigger + '\0' + spec.json_trigger_head + '\0' + spec.json_answer + '\0' + spec.json_schema;
  return cached(triggers_, std::move(key), [&] {
    // (get throws for an answer the intake would refuse)
    auto answer = spec.json_answer.empty() ? nullptr : schemas_.get(spec.json_answer);
    if (spec.json_trigger_head.empty())
      return std::make_shared<const json_trigger>(*json_vocab_, spec.json_trigger, std::move(schema),
                                                  std::move(answer));
    return std::make_shared<const json_trigger>(*json_vocab_, spec.json_trigger, spec.json_trigger_head,
                                                trigger_heads(spec.json_schema, spec.json_trigger_head, schemas_),
                                                std::move(answer));
  });
}

std::shared_ptr<const reasoning_gate> scheduler_core::gate_for(const request_spec& spec,
                                                               std::shared_ptr<const json_schema> schema) {
  auto key = spec.reasoning_open + '\0' + spec.reasoning_close + '\0' + spec.json_trigger + '\0'
             + spec.json_trigger_head + '\0' + spec.json_answer + '\0' + (spec.json_trigger_first ? "1" : "0")
             + spec.json_schema;
  return cached(gates_, std::move(key), [&] {
    if (spec.json_trigger.empty())
      return std::make_shared<const reasoning_gate>(*json_vocab_, spec.reasoning_open, spec.reasoning_close,
                                                    std::move(schema));
    return std::make_shared<const reasoning_gate>(*json_vocab_, spec.reasoning_open, spec.reasoning_close,
                                                  trigger_for(spec, schema),
                                                  spec.json_trigger_first);
  });
}

std::shared_ptr<const reasoning_gate> scheduler_core::gate_for(const request_spec& spec, held_machine held) {
  // The machine's key first (its first byte no mark's: they are UTF-8):
  // its choices, or its expression's or grammar's id.
  auto key = std::visit([](const auto& m) { return m.key(); }, held) + '\0' + spec.reasoning_open + '\0'
             + spec.reasoning_close;
  return cached(gates_, std::move(key), [&] {
    return std::make_shared<const reasoning_gate>(*json_vocab_, spec.reasoning_open, spec.reasoning_close,
                                                  std::move(held));
  });
}

std::optional<finish_reason> scheduler_core::json_after(record& r, std::int32_t token) {
  r.json_allowed.reset();
  if (r.held) {
    return std::visit(
      [&](auto& m) -> std::optional<finish_reason> {
        if (!m.feed(json_vocab_->bytes(token)))
          return finish_reason::error; // a backend that samples from no logits
        if (m.complete() && !m.extendable())
          return finish_reason::stop;
        r.json_allowed = json_vocab_->split(m);
        if (r.json_allowed->allowed.empty() && !m.complete())
          return finish_reason::error; // no token of the vocabulary goes on from here
        return std::nullopt;
      },
      *r.held);
  }
  if (r.gate) {
    if (!r.gate->advance(r.gate_at, token))
      return finish_reason::error; // a backend that samples from no logits
    if (r.gate_at.complete)
      return finish_reason::stop;
    r.json_allowed = r.gate->split(r.gate_at);
    if (r.json_allowed->allowed.empty() && !r.gate->ends_here(r.gate_at))
      return finish_reason::error;
    return std::nullopt;
  }
  if (r.trigger) {
    if (!r.trigger->advance(r.trigger_at, token))
      return finish_reason::error; // a backend that samples from no logits
    if (r.trigger_at.done)
      return finish_reason::stop; // the answer closed
    r.json_allowed = r.trigger->split(r.trigger_at);
    if (r.json_allowed->allowed.empty())
      return finish_reason::error;
    return std::nullopt;
  }
  if (!r.json->feed(json_vocab_->bytes(token)))
    return finish_reason::error; // a backend that samples from no logits
  if (r.json->complete())
    return finish_reason::stop;
  r.json_allowed = json_vocab_->split(*r.json);
  if (r.json_allowed->allowed.empty())
    return finish_reason::error; // no token of the vocabulary goes on from here
  return std::nullopt;
}

std::size_t scheduler_core::reusable_prefix(const session_entry& e, const record& r,
                                           std::uint32_t long_after) noexcept {
  // A turn that asks for its prompt's log-probabilities computes all of it.
  if (e.adapter_id != r.spec.adapter_id || r.spec.prompt_logprobs >= 0)
    return 0;
  // The cache's last pass left its sequence e.tokens long; the turn's
  // prefill leaves its prompt.
  if (long_after != 0 && (e.tokens.size() > long_after) != (r.spec.prompt.size() > long_after))
    return 0;
  const auto shared = shared_prefix(e.tokens, r.spec.prompt);
  return shared == e.tokens.size() || 2 * shared >= e.tokens.size() ? shared : 0;
}

std::size_t scheduler_core::shared_prefix(const std::vector<std::int32_t>& cached,
                                         const std::vector<std::int32_t>& prompt) noexcept {
  const auto limit = std::min(cached.size(), prompt.empty() ? 0 : prompt.size() - 1);
  return static_cast<std::size_t>(std::mismatch(cached.begin(), cached.begin() + static_cast<std::ptrdiff_t>(limit),
                                                prompt.begin()).first
                                  - cached.begin());
}

bool scheduler_core::hits_stop(record& r, std::int32_t token) {
  if (r.spec.stop.empty() || vocab_ == nullptr)
    return false;
  const auto before = r.text.size();
  r.text += vocab_->shown(token, !r.spec.skip_special_tokens);
  for (const auto& s : r.spec.stop) {
    // Only look where the new text could complete a match.
    const auto from = before >= s.size() ? before - s.size() + 1 : 0;
    if (r.text.find(s, from) != std::string::npos)
      return true;
  }
  return false;
}

scheduler_effects scheduler_core::on_step_done(std::span<const gpu::step_entry> batch,
                                               std::span<const std::int32_t> tokens,
                                               double now_s,
                                               std::span<const gpu::token_logprobs> logprobs,
                                               std::span<const std::vector<gpu::token_logprobs>> prompt_logprobs) {
  scheduler_effects fx;
  step_in_flight_ = false;
  for (std::size_t k = 0; k < batch.size(); ++k) {
    auto i = records_.find(batch[k].request_id);
    if (i == records_.end())
      continue;
    auto& r = i->second;
    r.in_step = false;
    if (r.cancel_requested) {
      finish(r, finish_reason::cancelled, now_s, fx);
      continue;
    }
    if (r.squash_requested) {
      // Squashed while its step ran: this step's token is dropped and
      // recomputed when it runs again.
      squash(r, fx);
      continue;
    }
    if (k >= tokens.size()) {
      finish(r, finish_reason::error, now_s, fx);
      continue;
    }
    const auto tok = tokens[k];
    if (tok < 0) {
      // The backend could not run this entry (see executor_backend).
      finish(r, finish_reason::error, now_s, fx);
      continue;
    }
    if (r.state == request_state::ready) {
      transition(r, request_state::running);
      prefilled_tokens_ += batch[k].new_tokens;
      reused_tokens_ += r.cached_tokens;
      r.read_tokens = r.cached_tokens;
      if (!r.prefix_keys.empty())
        prefix_reused_tokens_ += r.cached_tokens;
      r.cached_tokens = 0; // its cache is whole now
      share_prompt(r, now_s, fx);
    }
    r.stepped = true;
    if (r.times.first_token_s < 0)
      r.times.first_token_s = now_s;
    fx.tokens.push_back({r.spec.request_id, r.generated, tok});
    if (r.spec.logprobs >= 0 && k < logprobs.size())
      fx.logprobs.emplace_back(fx.tokens.size() - 1, logprobs[k]);
    if (batch[k].prompt_logprobs >= 0 && r.generated == 0 && k < prompt_logprobs.size())
      fx.prompt_logprobs.emplace_back(fx.tokens.size() - 1, prompt_logprobs[k]);
    r.output.push_back(tok);
    note_output(r, tok);
    ++r.generated;
    r.last_token = tok;
    r.last_token_s = now_s;
    // Neither the end-of-sequence token nor a stop token ends the output
    // within its first min_tokens (a backend that samples from no logits
    // may still draw one); stop strings always do.
    const bool may_end = r.generated > r.spec.min_tokens;
    const auto json_end =
      (r.json || r.trigger || r.gate || r.held) && json_vocab_ ? json_after(r, tok) : std::nullopt;
    if (may_end && !r.spec.ignore_eos && std::binary_search(ends_.begin(), ends_.end(), tok))
      finish(r, finish_reason::eos, now_s, fx);
    else if (hits_stop(r, tok)
             || (may_end && std::binary_search(r.spec.stop_token_ids.begin(), r.spec.stop_token_ids.end(), tok)))
      finish(r, finish_reason::stop, now_s, fx);
    else if (json_end)
      finish(r, *json_end, now_s, fx);
    else if (std::binary_search(r.not_allowed.begin(), r.not_allowed.end(), tok))
      finish(r, finish_reason::error, now_s, fx); // every token was banned (none allowed could follow)
    else if (r.generated >= r.spec.max_new_tokens)
      finish(r, finish_reason::length, now_s, fx);
    else if (limits_.rope_long_after != 0 && r.spec.prompt.size() + r.generated - 1 == limits_.rope_long_after) {
      // LongRoPE: this pass left the sequence at the pretrained context and
      // the next passes it, turning by the long factors: its cache, turned
      // by the short ones, is recomputed by them (Hugging Face's generate()
      // recomputes it there too). Its tokens so far are kept.
      ++rope_recomputed_;
      r.swap_requested = false;
      r.page_keys.clear(); // its prompt's pages are named by the long factors now
      squash(r, fx);
    } else if (r.swap_requested)
      swap_out(r, fx); // chosen while this step ran; its token is kept
  }
  flush_finished();
  return fx;
}

scheduler_effects scheduler_core::on_step_failed(std::span<const gpu::step_entry> batch,
                                                 double now_s) {
  scheduler_effects fx;
  step_in_flight_ = false;
  for (const auto& e : batch) {
    auto i = records_.find(e.request_id);
    if (i == records_.end())
      continue;
    i->second.in_step = false;
    finish(i->second, i->second.cancel_requested ? finish_reason::cancelled
                                                 : finish_reason::error,
           now_s, fx);
  }
  flush_finished();
  return fx;
}

// -- ending a request -------------------------------------------------------------

void scheduler_core::flush_finished() {
  for (auto id : to_erase_)
    records_.erase(id);
  to_erase_.clear();
}

void scheduler_core::finish(record& r, finish_reason why, double now_s,
                            scheduler_effects& fx) {
  const auto id = r.spec.request_id;
  switch (r.state) {
    case request_state::waiting: {
      count_waiting(r.spec.adapter_id, false);
      auto first = waiting_.begin() + static_cast<std::ptrdiff_t>(head_);
      waiting_.erase(std::remove_if(first, waiting_.end(),
                                    [id](const auto& v) { return v.request_id == id; }),
                     waiting_.end());
      break;
    }
    case request_state::running:
      if ((why == finish_reason::length || why == finish_reason::eos || why == finish_reason::stop)
          && keep_for_session(r, fx, now_s))
        break;
      give_back(r, fx);
      break;
    case request_state::admitting:
    case request_state::ready:
    case request_state::swapping_in:
      give_back(r, fx);
      break;
    case request_state::swapping_out:
      break; // ended by on_swapped_out, which released its device pages
    case request_state::finished:
      return;
  }
  release_host(r, fx);
  release_session_host(r, fx);
  drop_prefix(r, now_s);
  r.times.finished_s = now_s;
  fx.finished.push_back({id, why, static_cast<std::uint32_t>(r.spec.prompt.size()),
                         r.generated, r.times, r.read_tokens});
  transition(r, request_state::finished);
  to_erase_.push_back(id);
}

void scheduler_core::give_back(record& r, scheduler_effects& fx) {
  const auto id = r.spec.request_id;
  if (r.pages_granted) {
    fx.release_pages.push_back(id);
    reserved_pages_ -= r.pages;
    // Freed pages may let a blocked admission or growth through.
    memory_blocked_ = false;
    growth_retry_ = true;
  }
  if (r.grow_pending) {
    reserved_pages_ -= r.grow_pages; // the release frees them when granted
    r.grow_pending = false;
    r.grow_pages = 0;
    // Asked for in this same batch of effects: not sent yet, so never send
    // it (shells send releases before growths).
    std::erase_if(fx.grows, [id](const auto& g) { return g.request_id == id; });
  }
  r.grow_blocked = false;
  if (r.adapter_granted)
    fx.release_adapters.push_back({id, r.spec.adapter_id});
  batch_.erase(std::remove(batch_.begin(), batch_.end(), id), batch_.end());
}

void scheduler_core::squash(record& r, scheduler_effects& fx) {
  if (r.in_step || r.pages_pending || r.adapter_pending || r.state == request_state::swapping_in
      || r.stream_pending) {
    r.squash_requested = true; // when the step, the grants or the copy come back
    return;
  }
  r.squash_requested = false;
  give_back(r, fx);
  // Recomputed: looked up again at its next admission. (No clock here: the
  // pages it read keep the time of their last use.)
  drop_prefix(r, 0);
  r.page_ids.clear();
  r.pages_granted = r.adapter_granted = false;
  ++r.squashes;
  ++squashed_;
  transition(r, request_state::waiting);
  enqueue_waiting(r);
}

bool scheduler_core::keep_for_session(record& r, scheduler_effects& fx, double now_s) {
  if (r.spec.session == 0 || limits_.session_pages == 0 || r.hidden || !r.pages_granted || r.grow_pending
      || r.pages > limits_.session_pages || r.generated == 0)
    return false;
  // The pages hold K and V of the prompt and every output token but the
  // last (which no step has fed yet).
  session_entry e;
  e.owner = r.spec.request_id;
  e.page_ids = r.page_ids;
  e.pages = r.pages;
  e.tokens = r.spec.prompt;
  e.tokens.insert(e.tokens.end(), r.output.begin(), r.output.end() - 1);
  e.adapter_id = r.spec.adapter_id;
  e.last_use_s = now_s;
  // This turn's cache supersedes the session's older one (one on its way
  // between tiers keeps its place, and this one is not kept).
  if (!drop_older_cache(r.spec.session, fx))
    return false;
  // Give back the adapter and leave the batch; the pages stay reserved.
  if (r.adapter_granted)
    fx.release_adapters.push_back({r.spec.request_id, r.spec.adapter_id});
  r.adapter_granted = false;
  r.pages_granted = false;
  batch_.erase(std::remove(batch_.begin(), batch_.end(), r.spec.request_id), batch_.end());
  session_pages_held_ += e.pages;
  sessions_.emplace(r.spec.session, std::move(e));
  make_room(0, r.spec.session, fx);
  return true;
}

void scheduler_core::evict_session(std::uint64_t session, scheduler_effects& fx) {
  auto i = sessions_.find(session);
  if (i == sessions_.end())
    return;
  auto& e = i->second;
  if (e.where == session_tier::to_disk && e.keep_host) {
    // A write-back under way: its host pages go once it is written.
    e.keep_host = false;
    to_disk_pages_ += e.pages;
    cleaning_ = false;
    return;
  }
  if (e.where != session_tier::device && e.where != session_tier::host && e.where != session_tier::disk)
    return; // the answer to the move under way decides
  if (e.where == session_tier::disk) {
    fx.disk_deletes.push_back(e.owner);
    disk_held_ -= e.pages;
    ++session_evictions_;
    sessions_.erase(i);
    return;
  }
  if (e.where == session_tier::host && e.on_disk) {
    // Already written (clean_host): down a tier at once.
    fx.release_host_pages.push_back(e.owner);
    host_reserved_ -= e.pages;
    clean_pages_ -= e.pages;
    e.on_disk = false;
    e.host_page_ids.clear();
    e.where = session_tier::disk;
    return;
  }
  if (e.where == session_tier::host && limits_.disk_pages >= e.pages && limits_.page_bytes > 0
      && (!limits_.disk_fetch
          || limits_.disk_fetch->write(e.pages * limits_.page_bytes, static_cast<std::uint32_t>(e.tokens.size()),
                                       disk_queued_bytes_, running()))
      && disk_room(e.pages, fx)) {
    // Down to disk: written to a file, its host pages freed after.
    write_to_disk(sessions_.find(session)->second, false, fx);
    return;
  }
  if (e.where == session_tier::host) {
    fx.release_host_pages.push_back(e.owner);
    host_reserved_ -= e.pages;
    ++session_evictions_;
    sessions_.erase(i);
    return;
  }
  session_pages_held_ -= e.pages;
  const auto room = host_room(e.pages, session, fx);
  i = sessions_.find(session); // the map changed
  auto& entry = i->second;
  if (room == host_room_result::soon) {
    // Host pages come free as caches pushed to disk are written: it stays
    // on the GPU until then, its pages counted as leaving.
    entry.where = session_tier::awaiting_host;
    moving_out_pages_ += entry.pages;
    claim_host(entry);
    return;
  }
  if (room == host_room_result::now) {
    moving_out_pages_ += entry.pages;
    move_out(entry, fx);
    return;
  }
  drop_device_cache(i, fx);
}

void scheduler_core::move_out(session_entry& e, scheduler_effects& fx) {
  // Down a tier: copied to the host pool, its device pages freed after.
  e.where = session_tier::moving_out;
  host_pending_ += e.pages;
  landing_pages_ += e.pages;
  ++session_offloads_;
  fx.session_outs.push_back({e.owner, e.page_ids, {}, e.pages * limits_.page_bytes});
}

void scheduler_core::drop_device_cache(std::unordered_map<std::uint64_t, session_entry>::iterator i,
                                       scheduler_effects& fx) {
  fx.release_pages.push_back(i->second.owner);
  reserved_pages_ -= i->second.pages;
  ++session_evictions_;
  sessions_.erase(i);
  memory_blocked_ = false;
  growth_retry_ = true;
}

bool scheduler_core::drop_older_cache(std::uint64_t session, scheduler_effects& fx) {
  auto old = sessions_.find(session);
  if (old == sessions_.end())
    return true;
  auto& e = old->second;
  switch (e.where) {
    case session_tier::disk:
      fx.disk_deletes.push_back(e.owner);
      disk_held_ -= e.pages;
      break;
    case session_tier::host:
      fx.release_host_pages.push_back(e.owner);
      host_reserved_ -= e.pages;
      forget_disk_copy(e, fx);
      break;
    case session_tier::awaiting_host:
      keep_on_device(e);
      [[fallthrough]];
    case session_tier::device:
      fx.release_pages.push_back(e.owner);
      reserved_pages_ -= e.pages;
      session_pages_held_ -= e.pages;
      break;
    default:
      return false;
  }
  sessions_.erase(old);
  return true;
}

scheduler_core::host_room_result scheduler_core::host_room(std::uint64_t pages, std::uint64_t keep,
                                                            scheduler_effects& fx) {
  // The pages of caches being written to disk (still held, so among
  // host_reserved_) come free later.
  const auto taken = [&] { return host_reserved_ + host_pending_ + host_claimed_; };
  auto free_soon = [&] {
    const auto total = limits_.host_pages + to_disk_pages_;
    return total > taken() ? total - taken() : 0;
  };
  if (limits_.page_bytes == 0 || limits_.host_pages < pages)
    return host_room_result::none;
  // Host-tier caches give way, in the session policy's order, until the
  // pages free now and those the writes to disk under way give back cover
  // the room: a cache pushed to disk frees its host pages only once
  // written, and pushing more meanwhile would empty the tier for nothing.
  while (host_free() < pages) {
    if (free_soon() >= pages)
      return host_room_result::soon;
    auto victim = session_victim(session_tier::host, keep);
    if (victim == sessions_.end()) {
      // A write-back under way frees its pages when written, if asked.
      victim = std::find_if(sessions_.begin(), sessions_.end(), [keep](const auto& kv) {
        return kv.first != keep && kv.second.where == session_tier::to_disk && kv.second.keep_host;
      });
      if (victim == sessions_.end()) {
        // Caches still landing in the pool can be pushed out once there
        // (a claim's retry does it): wait for them rather than give up.
        const auto total = limits_.host_pages + to_disk_pages_ + landing_pages_;
        return total >= taken() + pages ? host_room_result::soon : host_room_result::none;
      }
    }
    evict_session(victim->first, fx);
  }
  return host_room_result::now;
}

std::uint64_t scheduler_core::host_free_now() const noexcept {
  const auto taken = host_reserved_ + host_pending_;
  return limits_.host_pages > taken ? limits_.host_pages - taken : 0;
}

std::uint64_t scheduler_core::host_free() const noexcept {
  const auto free = host_free_now();
  return free > host_claimed_ ? free - host_claimed_ : 0;
}

void scheduler_core::claim_host(session_entry& e) {
  e.claimed = true;
  host_claimed_ += e.pages;
  host_claims_.push_back(e.owner);
}

void scheduler_core::keep_on_device(session_entry& e) {
  e.where = session_tier::device;
  e.claimed = false; // its place in host_claims_ is skipped
  host_claimed_ -= e.pages;
  moving_out_pages_ -= e.pages;
  session_pages_held_ += e.pages;
}

void scheduler_core::serve_host_claims(double now_s, scheduler_effects& fx) {
  while (!host_claims_.empty()) {
    const auto owner = host_claims_.front();
    auto i = std::find_if(sessions_.begin(), sessions_.end(), [owner](const auto& kv) {
      return kv.second.owner == owner && kv.second.claimed;
    });
    if (i == sessions_.end()) {
      host_claims_.pop_front(); // withdrawn
      continue;
    }
    auto& e = i->second;
    bool fits = host_free_now() >= e.pages;
    if (!fits && to_disk_pages_ > 0)
      return; // in order: the head waits for the writes under way
    if (!fits) {
      // The pages it waited for went elsewhere (a turn took a cache on its
      // way to disk): push more host caches down, as for a new claim.
      host_claimed_ -= e.pages; // not counted against itself
      const auto session = i->first;
      const auto room = host_room(e.pages, session, fx);
      host_claimed_ += e.pages;
      if (room == host_room_result::soon)
        return;
      fits = room == host_room_result::now; // (erasing others keeps i and e valid)
    }
    host_claims_.pop_front();
    host_claimed_ -= e.pages;
    e.claimed = false;
    if (e.where == session_tier::awaiting_host) {
      if (fits) {
        move_out(e, fx); // its pages already count as leaving
      } else {
        // Nothing left to wait for: the cache is dropped after all.
        moving_out_pages_ -= e.pages;
        drop_device_cache(i, fx);
      }
      continue;
    }
    // A read from disk (from_disk).
    if (fits) {
      read_into_host(e, fx);
      continue;
    }
    fx.disk_deletes.push_back(e.owner); // never read: its file goes
    settle_disk_read(i, false, {}, now_s, fx);
  }
}

std::optional<scheduler_core::session_export> scheduler_core::begin_export(std::uint64_t session) {
  auto i = sessions_.find(session);
  if (session == 0 || i == sessions_.end())
    return std::nullopt;
  auto& e = i->second;
  if (e.where == session_tier::awaiting_host)
    keep_on_device(e); // read out from the GPU instead
  if (e.where != session_tier::device && e.where != session_tier::host)
    return std::nullopt;
  session_export out;
  out.owner = e.owner;
  out.host = e.where == session_tier::host;
  out.pages = out.host ? e.host_page_ids : e.page_ids;
  out.tokens = e.tokens;
  out.adapter_id = e.adapter_id;
  out.bytes = e.pages * limits_.page_bytes;
  e.where = session_tier::leaving;
  if (!out.host)
    session_pages_held_ -= e.pages; // no longer a cache the limit counts; its pages still held
  return out;
}

bool scheduler_core::session_moving(std::uint64_t session) const {
  auto i = sessions_.find(session);
  if (i == sessions_.end())
    return false;
  const auto w = i->second.where;
  return w == session_tier::moving_out || w == session_tier::moving_in || w == session_tier::arriving
         || w == session_tier::to_disk || w == session_tier::from_disk;
}

scheduler_effects scheduler_core::on_exported(std::uint64_t session) {
  scheduler_effects fx;
  auto i = sessions_.find(session);
  if (i == sessions_.end() || i->second.where != session_tier::leaving)
    return fx;
  auto& e = i->second;
  forget_disk_copy(e, fx);
  if (!e.host_page_ids.empty()) {
    fx.release_host_pages.push_back(e.owner);
    host_reserved_ -= e.pages;
  } else {
    fx.release_pages.push_back(e.owner);
    reserved_pages_ -= e.pages;
    memory_blocked_ = false;
    growth_retry_ = true;
  }
  ++sessions_exported_;
  sessions_.erase(i);
  return fx;
}

std::uint64_t scheduler_core::begin_import(std::uint64_t session, std::uint64_t pages,
                                           std::vector<std::int32_t> tokens, std::uint32_t adapter_id,
                                           scheduler_effects& fx) {
  // The cache coming is the session's latest: an older one here goes.
  if (session == 0 || pages == 0 || !drop_older_cache(session, fx)
      || host_room(pages, session, fx) != host_room_result::now)
    return 0;
  session_entry e;
  e.where = session_tier::arriving;
  e.owner = next_import_owner_++;
  e.pages = pages;
  e.tokens = std::move(tokens);
  e.adapter_id = adapter_id;
  host_pending_ += pages;
  const auto owner = e.owner;
  sessions_.emplace(session, std::move(e));
  return owner;
}

scheduler_effects scheduler_core::on_imported(std::uint64_t session, bool ok, double now_s,
                                              std::vector<std::uint32_t> host_pages) {
  scheduler_effects fx;
  auto i = sessions_.find(session);
  if (i == sessions_.end() || i->second.where != session_tier::arriving)
    return fx;
  auto& e = i->second;
  host_pending_ -= e.pages;
  if (ok && host_pages.size() == e.pages) {
    e.where = session_tier::host;
    e.host_page_ids = std::move(host_pages);
    e.last_use_s = now_s;
    host_reserved_ += e.pages;
    ++sessions_imported_;
    return fx;
  }
  if (!host_pages.empty())
    fx.release_host_pages.push_back(e.owner);
  sessions_.erase(i);
  return fx;
}

scheduler_core::advice scheduler_core::advise(std::uint64_t session, double now_s,
                                              scheduler_effects& fx, double in_s) {
  ++advisories_;
  auto i = sessions_.find(session);
  if (session == 0 || i == sessions_.end())
    return advice::none;
  auto& e = i->second;
  e.last_use_s = now_s; // wanted soon: the last to be pushed off the GPU
  switch (e.where) {
    case session_tier::device:
      return advice::on_gpu;
    case session_tier::moving_in:
    case session_tier::from_disk:
      return advice::fetching;
    case session_tier::leaving:
      return advice::none;
    default:
      break;
  }
  if (advise_fetch_delay(in_s) > 0)
    return advice::scheduled; // too early to fetch: marked only
  switch (e.where) {
    case session_tier::awaiting_host:
      keep_on_device(e); // wanted soon: it stays
      return advice::on_gpu;
    case session_tier::arriving:
    case session_tier::to_disk:
      return advice::in_host;
    case session_tier::disk:
      // Up a tier now; a later advisory (or the turn) takes it on to the GPU.
      // Only while the disk has nothing else to do: a read ahead is a guess,
      // never ahead of a read or write something waits for (its turn reads
      // the cache itself if it is still there).
      if (disk_queued_bytes_ > 0)
        return advice::none;
      return fetch_from_disk(session, 0, fx) ? advice::fetching : advice::none;
    case session_tier::moving_out:
      e.advised = true; // fetched back once it lands (on_session_out)
      return advice::in_host;
    default:
      break; // in the host pool
  }
  if (prefetch_session(e, fx))
    return advice::fetching;
  // Older caches on the GPU give way: fetched once one of them has landed.
  e.advised = true;
  make_room(e.pages + limits_.growth_watermark, session, fx);
  return advice::in_host;
}

bool scheduler_core::prefetch_session(session_entry& e, scheduler_effects& fx) {
  // Room on the GPU without displacing anything admitted, nor what the head
  // of the queue needs.
  const auto taken = reserved_pages_ - idle_cached() + adapter_pages_in_use_ + limits_.growth_watermark;
  const auto free = limits_.total_pages > taken ? limits_.total_pages - taken : 0;
  if (free < e.pages + head_pages() || limits_.page_bytes == 0)
    return false;
  evict_cached(e.pages, fx);
  forget_disk_copy(e, fx);
  e.where = session_tier::moving_in;
  reserved_pages_ += e.pages;
  session_pages_held_ += e.pages;
  ++session_prefetches_;
  fx.session_ins.push_back({e.owner, {}, e.host_page_ids, e.pages * limits_.page_bytes});
  return true;
}

scheduler_effects scheduler_core::on_session_in(std::uint64_t owner, bool ok, double now_s,
                                                std::vector<std::uint32_t> device_pages) {
  scheduler_effects fx;
  auto i = session_of_owner(owner, session_tier::moving_in);
  if (i == sessions_.end())
    return fx;
  auto& e = i->second;
  fx.release_host_pages.push_back(owner);
  host_reserved_ -= e.pages;
  e.host_page_ids.clear();
  if (ok && device_pages.size() == e.pages) {
    e.where = session_tier::device;
    e.page_ids = std::move(device_pages);
    e.last_use_s = now_s;
    make_room(0, i->first, fx);
    return fx;
  }
  // No room after all, or a failed copy: the cache is gone.
  if (!device_pages.empty())
    fx.release_pages.push_back(owner);
  reserved_pages_ -= e.pages;
  session_pages_held_ -= e.pages;
  ++session_evictions_;
  sessions_.erase(i);
  memory_blocked_ = false;
  return fx;
}

void scheduler_core::copy_session_in(record& r, scheduler_effects& fx) {
  const auto n = r.session_host_pages.size();
  scheduler_effects::swap s{r.spec.request_id,
                            {r.page_ids.begin(), r.page_ids.begin() + static_cast<std::ptrdiff_t>(n)},
                            r.session_host_pages, n * limits_.page_bytes};
  if (!limits_.layer_streaming || r.hidden) {
    fx.swap_ins.push_back(std::move(s));
    return;
  }
  // Runs now; its first step waits per layer for the copy.
  fx.stream_ins.push_back(std::move(s));
  ++streamed_ins_;
  r.stream_pending = true;
  r.stream_first = true;
  transition(r, request_state::ready);
}

bool scheduler_core::disk_room(std::uint64_t pages, scheduler_effects& fx, bool drop_clean_copies) {
  while (disk_held_ + pages > limits_.disk_pages) {
    const auto victim = session_victim(session_tier::disk, 0);
    if (victim != sessions_.end()) {
      evict_session(victim->first, fx);
      continue;
    }
    // Then the copies of caches still in the host pool.
    if (!drop_clean_copies)
      return false;
    auto clean = std::find_if(sessions_.begin(), sessions_.end(), [](const auto& kv) {
      return kv.second.where == session_tier::host && kv.second.on_disk;
    });
    if (clean == sessions_.end())
      return false;
    forget_disk_copy(clean->second, fx);
  }
  return true;
}

void scheduler_core::forget_disk_copy(session_entry& e, scheduler_effects& fx) {
  if (!e.on_disk)
    return;
  fx.disk_deletes.push_back(e.owner);
  disk_held_ -= e.pages;
  clean_pages_ -= e.pages;
  e.on_disk = false;
}

void scheduler_core::clean_host(scheduler_effects& fx) {
  // In the background only: never ahead of a read or write something waits for.
  if (limits_.disk_pages == 0 || limits_.page_bytes == 0 || limits_.disk_write_back <= 0 || cleaning_
      || disk_queued_bytes_ > 0)
    return;
  if (static_cast<double>(host_free() + clean_pages_)
      >= limits_.disk_write_back * static_cast<double>(limits_.host_pages))
    return;
  const auto victim = session_victim(session_tier::host, 0, true);
  if (victim == sessions_.end() || limits_.disk_pages < victim->second.pages)
    return;
  const auto session = victim->first;
  // Not at the cost of another host cache's copy: that trades one clean
  // cache for another, and the next round would trade it back, for ever.
  if (!disk_room(victim->second.pages, fx, false))
    return;
  write_to_disk(sessions_.find(session)->second, true, fx);
}

void scheduler_core::write_to_disk(session_entry& e, bool keep_host, scheduler_effects& fx) {
  e.where = session_tier::to_disk;
  e.keep_host = keep_host;
  if (keep_host)
    cleaning_ = true;
  else
    to_disk_pages_ += e.pages; // freed when written
  disk_held_ += e.pages;
  ++session_disk_writes_;
  disk_queued_bytes_ += e.pages * limits_.page_bytes;
  fx.disk_outs.push_back({e.owner, {}, e.host_page_ids, e.pages * limits_.page_bytes});
}

void scheduler_core::read_into_host(session_entry& e, scheduler_effects& fx) {
  host_pending_ += e.pages;
  ++session_disk_reads_;
  disk_queued_bytes_ += e.pages * limits_.page_bytes;
  fx.disk_ins.push_back({e.owner, {}, {}, e.pages * limits_.page_bytes});
}

std::unordered_map<std::uint64_t, scheduler_core::session_entry>::iterator
scheduler_core::session_of_owner(std::uint64_t owner, session_tier tier) {
  return std::find_if(sessions_.begin(), sessions_.end(), [owner, tier](const auto& kv) {
    return kv.second.owner == owner && kv.second.where == tier;
  });
}

std::unordered_map<std::uint64_t, scheduler_core::session_entry>::iterator
scheduler_core::session_victim(session_tier tier, std::uint64_t keep, bool without_disk_copy) {
  std::vector<policies::session_view> views;
  std::vector<std::unordered_map<std::uint64_t, session_entry>::iterator> at;
  for (auto i = sessions_.begin(); i != sessions_.end(); ++i)
    if (i->first != keep && i->second.where == tier && !(without_disk_copy && i->second.on_disk)) {
      views.push_back({i->first, i->second.last_use_s, i->second.pages});
      at.push_back(i);
    }
  if (views.empty())
    return sessions_.end();
  return at[policies::pick_session_victim(limits_.session_eviction, views)];
}

bool scheduler_core::read_from_disk(const session_entry& e) {
  if (!limits_.disk_fetch
      || limits_.disk_fetch->read(e.pages * limits_.page_bytes, static_cast<std::uint32_t>(e.tokens.size()),
                                  disk_queued_bytes_, running()))
    return true;
  ++session_disk_skips_; // computed again instead; the file goes when the turn's cache replaces it
  return false;
}

bool scheduler_core::fetch_from_disk(std::uint64_t session, std::uint64_t waiter, scheduler_effects& fx) {
  auto i = sessions_.find(session);
  if (i == sessions_.end() || i->second.where != session_tier::disk)
    return false;
  // Marked first, so that making host room (which may push older caches to
  // disk, and the oldest there out) leaves this one be.
  i->second.where = session_tier::from_disk;
  const auto room = host_room(i->second.pages, session, fx);
  if (room == host_room_result::none) {
    sessions_.find(session)->second.where = session_tier::disk;
    return false;
  }
  auto& e = sessions_.find(session)->second;
  e.waiter = waiter;
  if (room == host_room_result::soon) {
    claim_host(e); // read once the writes under way free host pages
    return true;
  }
  read_into_host(e, fx);
  return true;
}

scheduler_effects scheduler_core::on_disk_out(std::uint64_t owner, bool ok, double now_s) {
  scheduler_effects fx;
  auto i = session_of_owner(owner, session_tier::to_disk);
  if (i == sessions_.end())
    return fx;
  auto& e = i->second;
  disk_queued_bytes_ -= e.pages * limits_.page_bytes;
  if (e.keep_host && e.waiter == 0) {
    // A write-back: the cache stays in its host pages, now with a copy on
    // disk (a failed write leaves it without one; the shell removed the file).
    cleaning_ = false;
    e.keep_host = false;
    e.where = session_tier::host;
    if (ok) {
      e.on_disk = true;
      clean_pages_ += e.pages;
    } else {
      disk_held_ -= e.pages;
    }
    serve_host_claims(now_s, fx);
    clean_host(fx);
    return fx;
  }
  if (e.keep_host)
    cleaning_ = false; // its turn takes it below
  else
    to_disk_pages_ -= e.pages;
  host_reserved_ -= e.pages;
  if (e.waiter != 0) {
    // Its turn came while it was written: the turn takes the host pages,
    // and the file is not needed.
    if (ok)
      fx.disk_deletes.push_back(owner);
    disk_held_ -= e.pages;
    const auto waiter = e.waiter;
    auto pages = std::move(e.host_page_ids);
    sessions_.erase(i);
    give_to_waiter(waiter, owner, true, std::move(pages), now_s, fx);
    serve_host_claims(now_s, fx);
    return fx;
  }
  fx.release_host_pages.push_back(owner);
  e.host_page_ids.clear();
  if (ok) {
    e.where = session_tier::disk;
  } else {
    disk_held_ -= e.pages;
    ++session_evictions_;
    sessions_.erase(i);
  }
  // Its host pages are free either way: the caches waiting for them go.
  serve_host_claims(now_s, fx);
  return fx;
}

scheduler_effects scheduler_core::on_disk_in(std::uint64_t owner, bool ok, double now_s,
                                             std::vector<std::uint32_t> host_pages) {
  scheduler_effects fx;
  auto i = session_of_owner(owner, session_tier::from_disk);
  if (i == sessions_.end())
    return fx;
  auto& e = i->second;
  disk_queued_bytes_ -= e.pages * limits_.page_bytes;
  host_pending_ -= e.pages;
  ok = ok && host_pages.size() == e.pages;
  settle_disk_read(i, ok, std::move(host_pages), now_s, fx);
  return fx;
}

void scheduler_core::settle_disk_read(std::unordered_map<std::uint64_t, session_entry>::iterator i, bool ok,
                                      std::vector<std::uint32_t> host_pages, double now_s, scheduler_effects& fx) {
  auto& e = i->second;
  const auto owner = e.owner;
  disk_held_ -= e.pages;
  if (e.waiter == 0) {
    // An advisory's fetch: the cache waits in the host pool.
    if (ok) {
      e.where = session_tier::host;
      e.host_page_ids = std::move(host_pages);
      e.last_use_s = now_s;
      host_reserved_ += e.pages;
      return;
    }
    if (!host_pages.empty())
      fx.release_host_pages.push_back(owner);
    ++session_evictions_;
    sessions_.erase(i);
    return;
  }
  const auto waiter = e.waiter;
  sessions_.erase(i);
  give_to_waiter(waiter, owner, ok, std::move(host_pages), now_s, fx);
}

void scheduler_core::give_to_waiter(std::uint64_t waiter, std::uint64_t owner, bool ok,
                                    std::vector<std::uint32_t> host_pages, double now_s, scheduler_effects& fx) {
  auto r = records_.find(waiter);
  const bool waiting = r != records_.end() && r->second.session_owner == owner
                       && r->second.state != request_state::finished;
  if (!ok || !waiting) {
    if (!host_pages.empty())
      fx.release_host_pages.push_back(owner);
    if (!waiting)
      return;
    auto& rec = r->second;
    // No cache after all: the turn prefills its whole prompt.
    rec.session_owner = 0;
    rec.cached_tokens = 0;
    if (rec.state == request_state::swapping_in) {
      if (rec.cancel_requested) {
        finish(rec, finish_reason::cancelled, now_s, fx);
        flush_finished();
      } else {
        transition(rec, request_state::ready);
      }
    }
    return;
  }
  auto& rec = r->second;
  host_reserved_ += host_pages.size();
  rec.session_host_pages = std::move(host_pages);
  if (rec.state == request_state::swapping_in)
    copy_session_in(rec, fx); // its pages came first
}

void scheduler_core::release_session_host(record& r, scheduler_effects& fx) {
  if (r.session_owner == 0)
    return;
  if (r.session_host_pages.empty()) {
    r.session_owner = 0; // still on its way from disk: on_disk_in frees it
    return;
  }
  fx.release_host_pages.push_back(r.session_owner);
  host_reserved_ -= r.session_host_pages.size();
  r.session_owner = 0;
  r.session_host_pages.clear();
}

scheduler_effects scheduler_core::on_session_out(std::uint64_t owner, bool ok, double now_s,
                                                 std::vector<std::uint32_t> host_pages) {
  (void)now_s;
  scheduler_effects fx;
  auto i = session_of_owner(owner, session_tier::moving_out);
  if (i == sessions_.end())
    return fx;
  auto& e = i->second;
  host_pending_ -= e.pages;
  landing_pages_ -= e.pages;
  moving_out_pages_ -= e.pages;
  fx.release_pages.push_back(owner);
  reserved_pages_ -= e.pages;
  memory_blocked_ = false;
  growth_retry_ = true;
  if (ok && host_pages.size() == e.pages) {
    e.where = session_tier::host;
    e.host_page_ids = std::move(host_pages);
    host_reserved_ += e.pages;
    e.page_ids.clear();
    if (std::exchange(e.advised, false))
      prefetch_session(e, fx); // its turn is coming: back up, room permitting
    // Advised caches waiting in the host pool for the room this one left.
    for (auto& [id, other] : sessions_)
      if (other.where == session_tier::host && other.advised && prefetch_session(other, fx))
        other.advised = false;
    return fx;
  }
  if (!host_pages.empty())
    fx.release_host_pages.push_back(owner);
  ++session_evictions_;
  sessions_.erase(i);
  return fx;
}

// -- prefix caching -----------------------------------------------------------------

std::vector<std::uint32_t> scheduler_core::with_prefix(const record& r, std::vector<std::uint32_t> own) {
  if (r.prefix_page_ids.empty())
    return own;
  std::vector<std::uint32_t> all = r.prefix_page_ids;
  all.insert(all.end(), own.begin(), own.end());
  return all;
}

void scheduler_core::read_prefix(record& r, double now_s) {
  // A session's turn has its own cache; a hidden cache is no K and V; a
  // prompt's log-probabilities need every position computed.
  if (!prefix_ || r.swapped || r.hidden || r.spec.session != 0 || r.spec.prompt_logprobs >= 0
      || !r.prefix_keys.empty() || r.spec.prompt.empty())
    return;
  // At least one prompt token is left to prefill (its logits sample the
  // first output token).
  const auto keys = prompt_keys(r);
  const auto max_pages = std::min(keys.size(), (r.spec.prompt.size() - 1) / limits_.page_tokens);
  auto m = prefix_->lookup(prefix_space(r), r.spec.prompt, keys.first(max_pages));
  if (m.keys.empty())
    return;
  prefix_->use(m.keys, now_s);
  const auto n = m.keys.size();
  r.prefix_keys = std::move(m.keys);
  r.prefix_page_ids = std::move(m.pages);
  r.cached_tokens = static_cast<std::uint32_t>(n * limits_.page_tokens);
  r.pages = r.pages > n ? r.pages - n : 0;
  ++prefix_hits_;
}

std::span<const std::uint64_t> scheduler_core::prompt_keys(record& r) {
  if (r.page_keys.empty()) {
    r.page_keys = prefix_->keys_of(prefix_space(r), r.spec.prompt, r.spec.prompt.size() / limits_.page_tokens);
    prefix_->offer(r.page_keys); // once a request (and once more where LongRoPE renames its pages)
  }
  return r.page_keys;
}

bool scheduler_core::prefix_being_computed(record& r, const policies::schedule_decision& d) {
  if (!prefix_ || computing_.empty() || r.swapped || r.spec.session != 0 || r.spec.prompt_logprobs >= 0
      || r.spec.prompt.empty())
    return false;
  if (limits_.hidden_page_tokens > 0
      && std::find(d.hidden.begin(), d.hidden.end(), r.spec.request_id) != d.hidden.end())
    return false; // held as a hidden cache: it reads no pages
  // The first page it would compute (past those it can read now).
  const auto keys = prompt_keys(r);
  const auto readable = std::min(keys.size(), (r.spec.prompt.size() - 1) / limits_.page_tokens);
  const auto cached = prefix_->lookup(prefix_space(r), r.spec.prompt, keys.first(readable)).keys.size();
  // Held only for a page that will be cached (admitted), which it then is.
  if (cached >= readable || !computing_.contains(keys[cached]) || !prefix_->admits(keys[cached]))
    return false;
  awaited_.insert(keys[cached]);
  return true;
}

void scheduler_core::note_computing(record& r) {
  if (!prefix_ || r.swapped || r.hidden || r.spec.session != 0 || !r.computing_keys.empty())
    return;
  // A request that would read these pages may wait for them (where they
  // are to be cached), rather than compute them too.
  const auto keys = prompt_keys(r);
  r.computing_keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), r.prefix_keys.size())),
                          keys.end());
  for (const auto k : r.computing_keys)
    ++computing_[k];
}

void scheduler_core::stop_computing(record& r) {
  for (const auto k : r.computing_keys)
    if (auto i = computing_.find(k); i != computing_.end() && --i->second == 0) {
      computing_.erase(i);
      awaited_.erase(k);
    }
  r.computing_keys.clear();
}

void scheduler_core::share_prompt(record& r, double now_s, scheduler_effects& fx) {
  const bool shares = prefix_ && !r.hidden && r.spec.session == 0 && r.pages_granted;
  const auto per = limits_.page_tokens;
  // The pages it caches: those admitted, and those another request waits
  // for (admitted when it began to wait, whatever admission forgot since).
  std::size_t run = r.prefix_keys.size();
  if (shares) {
    const auto keys = prompt_keys(r);
    const auto whole = std::min({r.spec.prompt.size() / per, r.page_ids.size(), keys.size()});
    while (run < whole && (prefix_->admits(keys[run]) || awaited_.contains(keys[run])))
      ++run;
  }
  stop_computing(r);
  if (!shares)
    return;
  const std::span<const std::int32_t> prompt{r.spec.prompt};
  std::vector<std::uint32_t> moved;
  for (auto p = r.prefix_keys.size(); p < run; ++p) {
    const auto parent = r.prefix_keys.empty() ? 0 : r.prefix_keys.back();
    const auto key = prefix_->insert(parent, prefix_space(r), prompt.subspan(p * per, per), r.page_ids[p], now_s);
    if (key == 0)
      break; // cached already by another request: this one keeps its copy from here on
    r.prefix_keys.push_back(key);
    r.prefix_page_ids.push_back(r.page_ids[p]);
    moved.push_back(r.page_ids[p]);
  }
  if (moved.empty())
    return;
  // The pages stay reserved, now as the cache's.
  r.pages -= moved.size();
  fx.shares.push_back({r.spec.request_id, std::move(moved)});
}

void scheduler_core::drop_prefix(record& r, double now_s) {
  stop_computing(r);
  if (r.prefix_keys.empty())
    return;
  prefix_->unuse(r.prefix_keys, now_s);
  r.prefix_keys.clear();
  r.prefix_page_ids.clear();
  r.cached_tokens = 0; // (its prefill, if any is left, starts from the first token)
}

void scheduler_core::evict_cached(std::uint64_t need, scheduler_effects& fx) {
  if (!prefix_ || prefix_->idle_pages() == 0)
    return;
  // (What is taken may pass the pool: a growth granted pages a pinned
  // adapter still loading is counted for.)
  const auto taken = reserved_pages_ + adapter_pages_in_use_;
  if (taken + need > limits_.total_pages)
    evict_idle(taken + need - limits_.total_pages, fx);
}

void scheduler_core::evict_idle(std::uint64_t n, scheduler_effects& fx) {
  const auto freed = prefix_->evict(n);
  reserved_pages_ -= freed.size();
  fx.release_cached.insert(fx.release_cached.end(), freed.begin(), freed.end());
}

bool scheduler_core::only_waiting() const noexcept {
  return waiting() > 0 && records_.size() == waiting() && swapping_out_pages_ == 0 && moving_out_pages_ == 0;
}

bool scheduler_core::caches_give_way(scheduler_effects& fx) {
  bool any = idle_cached() > 0;
  if (any)
    evict_idle(idle_cached(), fx);
  for (auto v = session_victim(session_tier::device, 0); v != sessions_.end(); v = session_victim(session_tier::device, 0)) {
    evict_session(v->first, fx);
    any = true;
  }
  return any;
}

bool scheduler_core::room_for_head(scheduler_effects& fx) {
  // Cached sessions give way to the head of the queue, all but its own
  // when that serves it. The head needs its pages less those of its own
  // cache it takes over (head_pages), so keeping that cache never stands
  // in its way.
  const auto need = head_pages();
  if (session_pages_held_ <= limits_.session_pages && device_free_pages() + moving_out_pages_ >= need)
    return false;
  const auto& head = waiting_[head_];
  return make_room(need, head.adoptable_pages > 0 ? records_.at(head.request_id).spec.session : 0, fx);
}

std::uint64_t scheduler_core::adoptable_pages(record& r) {
  if (r.spec.session == 0 || r.swapped || r.generated != 0)
    return 0;
  const auto sit = sessions_.find(r.spec.session);
  if (sit == sessions_.end()
      || (sit->second.where != session_tier::device && sit->second.where != session_tier::awaiting_host))
    return 0;
  const auto& e = sit->second;
  if (r.adopt_owner != e.owner) { // a prefix compared once per cache
    r.adopt_owner = e.owner;
    r.adopt_shared = reusable_prefix(e, r, limits_.rope_long_after);
  }
  return r.adopt_shared > 0 ? e.pages : 0;
}

void scheduler_core::refresh_adoptable() {
  adoptable_waiting_ = false;
  for (auto i = head_; i < waiting_.size(); ++i) {
    auto& v = waiting_[i];
    v.adoptable_pages = adoptable_pages(records_.at(v.request_id));
    adoptable_waiting_ = adoptable_waiting_ || v.adoptable_pages > 0;
  }
}

std::uint64_t scheduler_core::device_free_pages() const noexcept {
  const auto taken = reserved_pages_ - idle_cached() + adapter_pages_in_use_;
  return limits_.total_pages > taken ? limits_.total_pages - taken : 0;
}

bool scheduler_core::make_room(std::uint64_t need, std::uint64_t keep, scheduler_effects& fx) {
  // Caches on their way to the host free their pages soon: counted as free.
  bool freed = false;
  while (!sessions_.empty()
         && (session_pages_held_ > limits_.session_pages || device_free_pages() + moving_out_pages_ < need)) {
    const auto victim = session_victim(session_tier::device, keep);
    if (victim == sessions_.end())
      break;
    evict_session(victim->first, fx);
    freed = true;
  }
  return freed;
}

void scheduler_core::swap_out(record& r, scheduler_effects& fx) {
  if (r.in_step || r.pages_pending || r.adapter_pending || r.grow_pending || r.stream_pending) {
    r.swap_requested = true; // when the step or the grants come back
    return;
  }
  r.swap_requested = false;
  if (r.state != request_state::running || limits_.host_pages == 0 || limits_.page_bytes == 0) {
    // Nothing computed yet, or nowhere to swap to: recompute instead.
    squash(r, fx);
    return;
  }
  // The adapter is not needed while the cache is away; the device pages are
  // released when the copy has read them (on_swapped_out).
  batch_.erase(std::remove(batch_.begin(), batch_.end(), r.spec.request_id), batch_.end());
  if (r.adapter_granted)
    fx.release_adapters.push_back({r.spec.request_id, r.spec.adapter_id});
  r.adapter_granted = false;
  transition(r, request_state::swapping_out);
  // Its whole cache goes, the cached prefix it reads too (copied, not
  // moved: read on by others), so that nothing it holds waits on the GPU;
  // it comes back as pages of its own. Its own pages come free.
  const auto held = held_pages(r);
  host_pending_ += held;
  swapping_out_pages_ += r.pages;
  fx.swap_outs.push_back({r.spec.request_id, r.page_ids, {}, held * limits_.page_bytes});
}

void scheduler_core::release_host(record& r, scheduler_effects& fx) {
  if (!r.swapped)
    return;
  fx.release_host_pages.push_back(r.spec.request_id);
  host_reserved_ -= r.host_page_ids.size();
  r.host_page_ids.clear();
  r.swapped = false;
}

scheduler_effects scheduler_core::on_swapped_out(std::uint64_t request_id, bool ok, double now_s,
                                                 std::vector<std::uint32_t> host_pages) {
  scheduler_effects fx;
  auto i = records_.find(request_id);
  if (i == records_.end() || i->second.state != request_state::swapping_out)
    return fx;
  auto& r = i->second;
  const auto held = held_pages(r);
  host_pending_ -= held;
  swapping_out_pages_ -= r.pages;
  fx.release_pages.push_back(request_id);
  reserved_pages_ -= r.pages;
  r.pages_granted = false;
  r.page_ids.clear();
  drop_prefix(r, now_s); // copied out with the rest (or recomputed)
  memory_blocked_ = false;
  growth_retry_ = true;
  if (ok && host_pages.size() == held) {
    r.swapped = true;
    r.host_page_ids = std::move(host_pages);
    host_reserved_ += held;
    ++swapped_out_;
  } else {
    // No room in the host pool or a failed copy: the cache is dropped and
    // recomputed on readmission.
    if (!host_pages.empty())
      fx.release_host_pages.push_back(request_id);
    ++r.squashes;
    ++squashed_;
  }
  if (r.cancel_requested) {
    finish(r, finish_reason::cancelled, now_s, fx);
    flush_finished();
    return fx;
  }
  transition(r, request_state::waiting);
  enqueue_waiting(r);
  flush_queued(fx);
  return fx;
}

scheduler_effects scheduler_core::on_swapped_in(std::uint64_t request_id, bool ok, double now_s) {
  scheduler_effects fx;
  auto i = records_.find(request_id);
  if (i != records_.end() && i->second.stream_pending)
    return on_streamed_in(i->second, ok, now_s);
  if (i == records_.end() || i->second.state != request_state::swapping_in)
    return fx;
  auto& r = i->second;
  release_host(r, fx);
  const bool session_cache = r.session_owner != 0;
  release_session_host(r, fx);
  if (r.cancel_requested) {
    finish(r, finish_reason::cancelled, now_s, fx);
    flush_finished();
    return fx;
  }
  if (session_cache) {
    // Its history is in its pages now (or, if the copy failed, prefilled
    // whole): the rest of the prompt is prefilled.
    if (!ok)
      r.cached_tokens = 0;
    transition(r, request_state::ready);
    return fx;
  }
  if (ok) {
    ++swapped_in_;
    transition(r, request_state::running);
  } else {
    // The copy failed: recompute prompt + output into the granted pages.
    ++r.squashes;
    ++squashed_;
    transition(r, request_state::ready);
  }
  if (r.squash_requested)
    squash(r, fx);
  else if (r.swap_requested)
    swap_out(r, fx);
  return fx;
}

scheduler_effects scheduler_core::on_streamed_in(record& r, bool ok, double now_s) {
  scheduler_effects fx;
  r.stream_pending = false;
  if (r.stream_first) {
    // No step used the stream: the backend forgets it; without the cache
    // the turn prefills its whole prompt.
    fx.end_streams.push_back(r.spec.request_id);
    r.stream_first = false;
    if (!ok)
      r.cached_tokens = 0;
  }
  // (A step that used it and failed ended the request with an error.)
  if (r.state == request_state::finished)
    return fx;
  release_session_host(r, fx);
  if (r.in_step)
    return fx; // its step settles what was asked meanwhile
  if (r.cancel_requested) {
    finish(r, finish_reason::cancelled, now_s, fx);
    flush_finished();
  } else if (r.squash_requested) {
    squash(r, fx);
  } else if (r.swap_requested) {
    swap_out(r, fx);
  }
  return fx;
}

std::pair<bool, scheduler_effects> scheduler_core::cancel(std::uint64_t request_id,
                                                          double now_s) {
  scheduler_effects fx;
  auto i = records_.find(request_id);
  if (i == records_.end() || i->second.state == request_state::finished
      || i->second.cancel_requested)
    return {false, std::move(fx)};
  auto& r = i->second;
  r.cancel_requested = true;
  // In the in-flight step, waiting for grants or a swap: finish when they
  // come back.
  if (r.in_step || r.pages_pending || r.adapter_pending || r.state == request_state::swapping_out
      || r.state == request_state::swapping_in || r.stream_pending)
    return {true, std::move(fx)};
  finish(r, finish_reason::cancelled, now_s, fx);
  flush_finished();
  return {true, std::move(fx)};
}

} // namespace troupe
