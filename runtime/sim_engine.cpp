#include "runtime/sim_engine.hpp"

#include "gpu/random.hpp"
#include "runtime/calibration.hpp"
#include "runtime/tuner_params.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace troupe {

namespace {

constexpr page_owner adapter_owner(std::uint32_t id) { return {page_owner_kind::adapter, id}; }
constexpr page_owner request_owner(std::uint64_t id) { return {page_owner_kind::request, id}; }

/// The start-up measurement of the sim backend for `limits`' pools, as a
/// live deployment measures its backend (prompts up to the context).
calibration_setup calibration_of(const scheduler_limits& limits, std::uint32_t max_context) {
  calibration_setup cs;
  cs.max_tokens = max_context;
  cs.pool_pages = limits.total_pages;
  cs.page_tokens = limits.page_tokens;
  cs.page_bytes = limits.page_bytes;
  cs.host_pages = limits.host_pages;
  cs.hidden_page_tokens = limits.hidden_page_tokens;
  cs.repeats = 1; // modelled times do not vary
  return cs;
}

/// Hands a cost-predicting policy the sim backend's figures, measured the
/// way a live deployment measures its backend at start-up.
std::unique_ptr<policies::scheduling_policy> calibrated(std::unique_ptr<policies::scheduling_policy> p,
                                                        gpu::sim_backend& backend,
                                                        const scheduler_limits& limits,
                                                        std::uint32_t max_context) {
  if (p && p->wants_calibration())
    p->on_calibration(calibrate_backend(backend, calibration_of(limits, max_context)));
  return p;
}

/// The limits, with the disk tier's read-or-recompute model fitted on the
/// backend when asked for.
scheduler_limits with_disk_fetch(scheduler_limits limits, gpu::sim_backend& backend, bool by_cost,
                                 std::uint32_t max_context) {
  if (!by_cost || limits.disk_pages == 0)
    return limits;
  limits.disk_fetch = policies::disk_fetch_model::from(calibrate_backend(backend, calibration_of(limits, max_context)),
                                                       backend.cost_model().constants().disk_bytes_per_s);
  return limits;
}

} // namespace

sim_engine::sim_engine(sim_engine_config cfg, std::shared_ptr<gpu::sim_backend> backend,
                       adapter_catalog catalog, std::uint64_t pool_pages)
  : cfg_(std::move(cfg)),
    backend_(std::move(backend)),
    catalog_(std::move(catalog)),
    core_(with_disk_fetch(cfg_.limits, *backend_, cfg_.disk_fetch_by_cost, cfg_.max_context),
          calibrated(std::move(cfg_.scheduling), *backend_, cfg_.limits, cfg_.max_context), &backend_->vocab()),
    pool_(pool_pages),
    host_(cfg_.limits.host_pages),
    adapter_partition_(cfg_.adapter_partition_pages),
    cache_(std::move(cfg_.eviction), cfg_.cache.max_resident, cfg_.cache.window_s),
    transfers_(std::max<std::uint32_t>(cfg_.copy_inflight, 1)),
    pool_pages_(pool_pages) {
  if (!cfg_.classifier)
    cfg_.classifier = std::make_unique<policies::single_queue_classifier_policy>();
  next_tune_s_ = cfg_.tuner.period_s;
}

void sim_engine::tune_if_due() {
  if (!cfg_.tuner.enabled)
    return;
  while (now_ >= next_tune_s_) {
    const double from = next_tune_s_ - cfg_.tuner.window_s;
    std::erase_if(samples_, [from](const auto& s) { return s.arrival_s < from; });
    if (!samples_.empty()) {
      const auto t = policies::tune_queues(samples_, tuner_params_of(cfg_.tuner, pool_pages_ * cfg_.limits.page_tokens));
      cfg_.classifier->on_tuning(t);
      core_.on_tuning(t);
      ++totals_.tunings;
      totals_.queues = t.queues();
    }
    next_tune_s_ += cfg_.tuner.period_s;
  }
}

void sim_engine::schedule(double at, event_kind kind, std::uint64_t arg) {
  events_.push({at, seq_++, kind, arg});
}

std::vector<std::size_t> sent_at_arrival(const std::vector<sim_request>& requests,
                                         std::unordered_map<std::uint64_t, std::deque<std::size_t>>& later) {
  std::vector<std::size_t> now;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto s = requests[i].session;
    if (s != 0 && later.contains(s)) {
      later[s].push_back(i);
      continue;
    }
    if (s != 0)
      later[s]; // the first turn: later ones queue behind it
    now.push_back(i);
  }
  return now;
}

std::optional<std::size_t> take_next_turn(std::unordered_map<std::uint64_t, std::deque<std::size_t>>& later,
                                          std::uint64_t session) {
  auto i = later.find(session);
  if (i == later.end() || i->second.empty())
    return std::nullopt;
  const auto next = i->second.front();
  i->second.pop_front();
  return next;
}

std::vector<sim_outcome> sim_engine::run(const std::vector<sim_request>& requests) {
  begin(requests, nullptr, nullptr);
  for (const auto i : sent_at_arrival(requests, next_turns_))
    submit(i, requests[i].arrival_s, requests[i].arrival_s);
  if (!events_.empty())
    arm_predictor(events_.top().at);
  while (!events_.empty())
    step();
  return end();
}

void sim_engine::begin(const std::vector<sim_request>& requests, end_hook on_end,
                       std::shared_ptr<std::unordered_map<std::uint64_t, std::vector<std::int32_t>>> histories) {
  outcomes_.assign(requests.size(), {});
  request_meta_.assign(requests.size(), {});
  history_len_.assign(requests.size(), 0);
  sent_s_.assign(requests.size(), 0.0);
  gaps_.assign(requests.size(), {});
  for (std::size_t i = 0; i < requests.size(); ++i)
    outcomes_[i].arrival_s = requests[i].arrival_s;
  requests_ = &requests;
  on_end_ = std::move(on_end);
  histories_ = histories ? std::move(histories)
                         : std::make_shared<std::unordered_map<std::uint64_t, std::vector<std::int32_t>>>();
}

void sim_engine::submit(std::size_t index, double now_s, double arrival_s) {
  sent_s_[index] = arrival_s;
  schedule(now_s, event_kind::arrival, index);
  if (on_end_)
    arm_predictor(now_s);
}

void sim_engine::arm_predictor(double from_s) {
  // Predictor rounds (a period of at least 1 ms, so a bad interval cannot
  // stall the clock), while anything else is still to happen.
  if (!cfg_.prefetcher || predict_pending_ || events_.empty())
    return;
  predict_pending_ = true;
  schedule(from_s + std::max(cfg_.cache.predictor_interval_s, 1e-3), event_kind::predict, 0);
}

double sim_engine::next_event_s() const noexcept {
  return events_.empty() ? std::numeric_limits<double>::infinity() : events_.top().at;
}

void sim_engine::ended(std::size_t index, finish_reason reason) {
  if (on_end_)
    on_end_(index, reason, now_);
  else if ((*requests_)[index].session != 0)
    next_turn((*requests_)[index].session);
}

void sim_engine::step() {
  const auto& requests = *requests_;
  const auto ev = events_.top();
  events_.pop();
  now_ = ev.at;
  tune_if_due();
  switch (ev.kind) {
    case event_kind::arrival: {
      const auto& r = requests[ev.arg];
      request_spec spec;
      spec.request_id = ev.arg + 1;
      // Token ids do not matter to the sim backend; lengths do. A
      // conversation's turn carries its history first.
      if (r.session != 0) {
        auto& h = (*histories_)[r.session];
        if (h.size() + r.prompt_tokens + r.output_tokens > cfg_.max_context)
          h.clear(); // the context window is full: a fresh one
        spec.prompt = h;
        history_len_[ev.arg] = static_cast<std::uint32_t>(h.size());
        spec.session = r.session;
      }
      const auto own = std::max<std::uint32_t>(r.prompt_tokens, 1);
      if (cfg_.limits.prefix_caching || cfg_.shared_prefix_tokens > 0) {
        // A system prompt of its group, then tokens of its own.
        const auto shared = std::min(own, cfg_.shared_prefix_tokens);
        const auto group = static_cast<std::int32_t>(ev.arg % std::max<std::uint32_t>(cfg_.prefix_groups, 1));
        for (std::uint32_t t = 0; t < shared; ++t)
          spec.prompt.push_back(1 + static_cast<std::int32_t>(gpu::splitmix64(static_cast<std::uint64_t>(group) * 65536 + t) % 30000));
        for (std::uint32_t t = shared; t < own; ++t)
          spec.prompt.push_back(1 + static_cast<std::int32_t>(gpu::splitmix64((ev.arg + 1) * 0x9e3779b97f4a7c15ull + t) % 30000));
      } else {
        spec.prompt.insert(spec.prompt.end(), own, static_cast<std::int32_t>(1 + ev.arg % 1000));
      }
      outcomes_[ev.arg].arrival_s = sent_s_[ev.arg];
      new_prompt_tokens_ += std::max<std::uint32_t>(r.prompt_tokens, 1);
      spec.max_new_tokens = std::max<std::uint32_t>(r.output_tokens, 1);
      spec.predicted_tokens = spec.max_new_tokens;
      if (const auto* e = catalog_.by_id(r.adapter_id)) {
        spec.adapter_id = e->id;
        spec.adapter_rank = e->rank;
        // In a static partition adapters take no KV pages.
        spec.adapter_pages = cfg_.adapter_partition_pages > 0 ? 0 : e->pages;
      }
      spec.seed = ev.arg;
      spec.priority = r.priority;
      spec.arrival_s = sent_s_[ev.arg];
      if (cfg_.prefetcher && spec.adapter_id != 0)
        cfg_.prefetcher->on_request(spec.adapter_id, now_);
      const auto ci = classify_input_of(spec);
      const auto c = cfg_.classifier->classify(ci);
      spec.queue = c.queue;
      spec.predicted_tokens = std::max<std::uint32_t>(c.predicted_tokens, 1);
      request_meta_[ev.arg] = {spec.adapter_id, ci.prompt_tokens};
      if (cfg_.tuner.enabled)
        samples_.push_back({now_, c.wrs, quota_cost_of(spec, cfg_.limits.page_tokens),
                            (spec.predicted_tokens + 1) * cfg_.tuner.iteration_s});
      if (core_.submit(std::move(spec)) != scheduler_core::submit_result::accepted) {
        outcomes_[ev.arg].reason = finish_reason::error; // refused: counted as lost
        ended(ev.arg, finish_reason::error);
      }
      break;
    }
    case event_kind::step_done: {
      auto batch = std::move(in_flight_);
      auto tokens = std::move(in_flight_tokens_);
      ++totals_.steps;
      apply(core_.on_step_done(batch, tokens, now_));
      break;
    }
    case event_kind::advise:
      advise_core(ev.arg, std::max(0.0, turn_due_s_[ev.arg] - now_));
      break;
    case event_kind::fetch:
      advise_core(ev.arg, 0);
      break;
    case event_kind::predict:
      // As the prefetcher actor: a round of predictions every interval,
      // while anything else is still to happen.
      for (const auto id : cfg_.prefetcher->predict(now_, cfg_.prefetch_per_round))
        prefetch(id);
      predict_pending_ = false;
      arm_predictor(now_);
      break;
    case event_kind::first_layer_in:
      // The rest of its layers stream in under its step (pump gates it).
      apply(core_.on_swapped_in(ev.arg, true, now_));
      break;
    case event_kind::transfer_done: {
      auto i = running_transfers_.find(ev.arg);
      if (i == running_transfers_.end())
        break;
      const auto t = i->second;
      running_transfers_.erase(i);
      if (t.session_file) {
        disk_transfers_.finished(ev.arg & ~disk_transfer_bit, now_, true);
        const auto key = std::make_pair(t.request_id, t.cls);
        auto s = std::move(disk_copies_.at(key));
        disk_copies_.erase(key);
        totals_.session_disk_bytes += t.bytes;
        totals_.session_disk_seconds += t.disk_s + t.copy_s;
        if (t.cls == transfer_class::swap_out)
          apply(core_.on_disk_out(t.request_id, true, now_));
        else
          apply(core_.on_disk_in(t.request_id, true, now_, std::move(s.host_pages)));
        start_transfers();
        break;
      }
      transfers_.finished(ev.arg, now_, true);
      if (t.cls == transfer_class::swap_out || t.cls == transfer_class::swap_in) {
        totals_.swap_bytes += t.bytes;
        const auto key = std::make_pair(t.request_id, t.cls);
        auto s = std::move(swaps_.at(key));
        swaps_.erase(key);
        if (t.cls == transfer_class::swap_out && session_outs_.erase(t.request_id) > 0)
          apply(core_.on_session_out(t.request_id, true, now_, std::move(s.host_pages)));
        else if (t.cls == transfer_class::swap_out)
          apply(core_.on_swapped_out(t.request_id, true, now_, std::move(s.host_pages)));
        else if (session_ins_.erase(t.request_id) > 0)
          apply(core_.on_session_in(t.request_id, true, now_, std::move(s.device_pages)));
        else if (!cfg_.layer_streaming)
          apply(core_.on_swapped_in(t.request_id, true, now_));
        // (streamed: the request took its pages over at its first layer)
        start_transfers();
        break;
      }
      totals_.pcie_bytes += t.bytes;
      totals_.pcie_seconds += t.copy_s;
      if (t.disk) {
        totals_.disk_bytes += t.bytes;
        totals_.disk_seconds += t.disk_s;
      }
      settle(t.adapter_id, scheduler_core::adapter_grant::granted);
      // An admission blocked on adapter room while loads were in flight (a
      // prefetch among them), with nothing running to give pages back,
      // tries again: the loaded adapter can be evicted now. (The live
      // scheduler keeps retrying through its trims until the load ends;
      // this pump stops after a few rounds.)
      if (core_.memory_blocked() && core_.running() == 0 && core_.admitting() == 0)
        core_.on_memory_changed();
      start_transfers();
      break;
    }
  }
  pump();
}

std::vector<sim_outcome> sim_engine::end() {
  totals_.end_s = now_;
  totals_.adapter_hits = cache_.hits();
  totals_.adapter_misses = cache_.misses();
  totals_.adapter_evictions = cache_.evictions();
  totals_.prefetches = cache_.prefetches();
  totals_.prefetch_hits = cache_.prefetch_hits();
  totals_.pool_low_water = pool_.low_water();
  totals_.pool_request_pages_at_end = pool_.used_pages(page_owner_kind::request);
  totals_.pool_adapter_pages_at_end = adapter_pages().used_pages(page_owner_kind::adapter);
  totals_.cache_pages_at_end = cache_.resident_pages();
  totals_.squashed = core_.squashed();
  totals_.swapped_out = core_.swapped_out();
  totals_.prefill_tokens = core_.prefilled_tokens();
  totals_.reused_tokens = core_.reused_tokens();
  totals_.prefix_hits = core_.prefix_hits();
  totals_.prefix_pages_at_end = core_.prefix_cached_pages();
  // Prompt tokens read from the prefix cache were new, and not computed.
  const auto fresh = new_prompt_tokens_ - std::min(new_prompt_tokens_, core_.prefix_reused_tokens());
  totals_.recomputed_tokens = totals_.prefill_tokens > fresh ? totals_.prefill_tokens - fresh : 0;
  for (const auto& o : outcomes_)
    totals_.decode_tokens += o.completion_tokens;
  totals_.swapped_in = core_.swapped_in();
  totals_.growths_denied = core_.growths_denied();
  totals_.host_pages_at_end = host_.used_pages(page_owner_kind::request);
  totals_.session_disk_writes = core_.session_disk_writes();
  totals_.session_disk_reads = core_.session_disk_reads();
  totals_.session_disk_skips = core_.session_disk_skips();
  totals_.disk_pages_at_end = core_.session_disk_pages();
  totals_.aborted = core_.aborted();
  return std::move(outcomes_);
}

void sim_engine::pump() {
  // As the scheduler actor's pump: a round that freed pages without
  // starting anything is followed by another; and the pool answers growths
  // at once, so a refusal must reach the policy now.
  std::vector<gpu::step_entry> batch;
  for (int round = 0; round < 4; ++round) {
    const auto denied = core_.growths_denied();
    const auto trimmed = trimmed_pages_;
    auto fx = core_.admit(now_);
    const bool released = !fx.release_pages.empty();
    const bool grew = !fx.grows.empty();
    apply(std::move(fx));
    // Pages freed count whether the round released them or a refused grant
    // trimmed the adapter cache inside it (the live pump hears of that from
    // the cache's answer; here it happened within apply).
    const bool freed = released || trimmed_pages_ > trimmed;
    if (core_.step_in_flight())
      return;
    batch = core_.next_step(now_);
    if (!batch.empty())
      break;
    if (!freed && !(grew && core_.growths_denied() > denied))
      return;
  }
  if (batch.empty())
    return;
  auto result = backend_->run_step(batch);
  double done = now_ + result.device_seconds;
  if (!streams_.empty()) {
    // Layer l computes once layer l-1 has and layer l's copy is in:
    // t(l) = max(t(l-1), copy_start + (l+1) c / L) + s / L.
    const double layers = std::max<std::uint32_t>(cfg_.layers, 1);
    for (const auto& e : batch) {
      auto st = streams_.find(e.request_id);
      if (st == streams_.end())
        continue;
      const auto [start, copy] = st->second;
      double t = now_;
      for (std::uint32_t l = 0; l < cfg_.layers; ++l)
        t = std::max(t, start + (l + 1) * copy / layers) + result.device_seconds / layers;
      done = std::max(done, t);
      streams_.erase(st);
    }
  }
  in_flight_ = std::move(batch);
  in_flight_tokens_ = std::move(result.tokens);
  schedule(done, event_kind::step_done, 0);
}

void sim_engine::apply(scheduler_effects fx) {
  for (const auto& s : fx.shares)
    if (!pool_.transfer_pages(request_owner(s.request_id), request_owner(prefix_cache_owner), s.pages))
      ++totals_.refused_page_moves;
  if (!pool_.release_pages(request_owner(prefix_cache_owner), fx.release_cached))
    ++totals_.refused_page_moves;
  for (const auto& a : fx.adopts)
    pool_.transfer(request_owner(a.from), request_owner(a.to));
  for (auto id : fx.release_pages)
    pool_.release(request_owner(id));
  // The pool grants or refuses reservations at once, in order; the core
  // hears the answers once the rest of these effects are carried out, as
  // the live scheduler hears the pool's replies after it has sent its other
  // messages. (Heard at once, a refusal's trim could evict the idle adapter
  // that this same admission is about to acquire: the load, then the
  // refusal again, would repeat forever.)
  std::vector<std::pair<std::uint64_t, bool>> page_answers;
  for (const auto& r : fx.reserves)
    page_answers.emplace_back(r.request_id, pool_.allocate(request_owner(r.request_id), r.pages));
  for (const auto& g : fx.grows) {
    // The pool answers at once, so no growth is ever stale here.
    const bool ok = pool_.allocate(request_owner(g.request_id), g.pages);
    const auto pages = pool_.pages_of(request_owner(g.request_id));
    apply(core_.on_grown(g.request_id, g.ticket, ok, {pages.begin(), pages.end()}));
  }
  for (const auto& a : fx.acquires)
    acquire(a.request_id, a.adapter_id);
  for (auto id : fx.release_host_pages)
    host_.release(request_owner(id));
  for (const auto& s : fx.swap_outs)
    swap_out(s, false);
  for (const auto& s : fx.session_outs)
    swap_out(s, true);
  for (const auto& s : fx.session_ins) {
    // Device pages at once (the pool answers synchronously), then the copy.
    const auto owner = request_owner(s.request_id);
    if (!pool_.allocate(owner, s.host_pages.size())) {
      apply(core_.on_session_in(s.request_id, false, now_));
      continue;
    }
    auto in = s;
    const auto held = pool_.pages_of(owner);
    in.device_pages.assign(held.begin(), held.end());
    transfers_.enqueue(transfer_class::swap_in, s.request_id, s.bytes, now_);
    session_ins_.insert(s.request_id);
    swaps_[{s.request_id, transfer_class::swap_in}] = std::move(in);
  }
  for (auto& s : fx.swap_ins) {
    transfers_.enqueue(transfer_class::swap_in, s.request_id, s.bytes, now_);
    swaps_[{s.request_id, transfer_class::swap_in}] = std::move(s);
  }
  // Files of caches dropped from the disk tier: nothing to remove here (the
  // core counts the tier's pages).
  for (const auto& s : fx.disk_outs)
    disk_out(s);
  for (const auto& s : fx.disk_ins)
    disk_in(s);
  if (!fx.swap_outs.empty() || !fx.swap_ins.empty() || !fx.session_outs.empty() || !fx.session_ins.empty()
      || !fx.disk_outs.empty() || !fx.disk_ins.empty())
    start_transfers();
  for (const auto& a : fx.release_adapters) {
    cache_.release(a.adapter_id, now_);
    drop(cache_.evict_idle(now_));
  }
  if (fx.trim_pages > 0) {
    const auto before = pool_.free_pages() + adapter_partition_.free_pages();
    drop(cache_.evict_for(fx.trim_pages, now_));
    const auto after = pool_.free_pages() + adapter_partition_.free_pages();
    trimmed_pages_ += after > before ? after - before : 0;
    if (after > before
        || (core_.running() == 0 && core_.admitting() == 0))
      core_.on_memory_changed();
  }
  for (const auto& [adapter, waiting] : fx.queued) {
    cache_.set_queued(adapter, waiting);
    if (cfg_.cache.prefetch && waiting > 0)
      prefetch(adapter);
  }
  for (const auto& t : fx.tokens) {
    if (requests_ != nullptr && (*requests_)[t.request_id - 1].session != 0)
      outputs_[t.request_id].push_back(t.token);
    auto& g = gaps_[t.request_id - 1];
    if (t.index != g.seen)
      continue; // (not a new token)
    if (g.seen++ > 0)
      g.gaps.push_back(static_cast<float>(now_ - g.last_s));
    g.last_s = now_;
  }
  for (const auto& f : fx.finished) {
    const auto index = f.request_id - 1;
    if (requests_ != nullptr && (*requests_)[index].session != 0) {
      // The conversation so far: this turn's prompt (history included) and
      // reply; its next turn arrives after the think time.
      const auto& r = (*requests_)[index];
      auto& h = (*histories_)[r.session];
      h.insert(h.end(), std::max<std::uint32_t>(r.prompt_tokens, 1), static_cast<std::int32_t>(1 + index % 1000));
      auto& out = outputs_[f.request_id];
      h.insert(h.end(), out.begin(), out.end());
      outputs_.erase(f.request_id);
    }
    auto& o = outcomes_[f.request_id - 1];
    o.reason = f.reason;
    o.completion_tokens = f.completion_tokens;
    if (auto& v = gaps_[f.request_id - 1].gaps; !v.empty()) {
      // Nearest rank: the ceil(0.99 n)-th smallest.
      const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(v.size())));
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank - 1), v.end());
      o.tbt_p99_s = v[rank - 1];
      std::vector<float>{}.swap(v); // done with them
    }
    if (f.times.first_token_s >= 0)
      o.ttft_s = f.times.first_token_s - f.times.arrival_s;
    o.e2e_s = f.times.finished_s - f.times.arrival_s;
    if (f.times.first_scheduled_s >= 0)
      o.queue_s = f.times.first_scheduled_s - f.times.arrival_s;
    if (f.reason == finish_reason::length || f.reason == finish_reason::eos) {
      const auto& [adapter, prompt] = request_meta_[f.request_id - 1];
      cfg_.classifier->observe(adapter, prompt, f.completion_tokens);
    }
    ended(f.request_id - 1, f.reason);
  }
  for (const auto& [id, ok] : page_answers) {
    const auto pages = pool_.pages_of(request_owner(id));
    apply(core_.on_pages(id, ok, now_,
                         ok ? std::vector<std::uint32_t>(pages.begin(), pages.end()) : std::vector<std::uint32_t>{}));
  }
}

void sim_engine::swap_out(const scheduler_effects::swap& s, bool session_cache) {
  // Host pages first; without them the request is recomputed instead (a
  // session's cache dropped).
  const auto owner = request_owner(s.request_id);
  if (!host_.allocate(owner, s.device_pages.size())) {
    apply(session_cache ? core_.on_session_out(s.request_id, false, now_)
                        : core_.on_swapped_out(s.request_id, false, now_));
    return;
  }
  if (session_cache)
    session_outs_.insert(s.request_id);
  auto copy = s;
  const auto held = host_.pages_of(owner);
  copy.host_pages.assign(held.begin(), held.end());
  transfers_.enqueue(transfer_class::swap_out, s.request_id, s.bytes, now_);
  swaps_[{s.request_id, transfer_class::swap_out}] = std::move(copy);
}

void sim_engine::disk_out(const scheduler_effects::swap& s) {
  // As the live copy engine: on the swap-out class, keyed by the owner, in
  // the disk's own queue.
  disk_transfers_.enqueue(transfer_class::swap_out, s.request_id, s.bytes, now_);
  disk_copies_[{s.request_id, transfer_class::swap_out}] = s;
}

void sim_engine::disk_in(const scheduler_effects::swap& s) {
  // Host pages first, as the live scheduler reserves them; none: the turn
  // (or advisory) goes without the cache.
  const auto owner = request_owner(s.request_id);
  const auto pages = cfg_.limits.page_bytes > 0 ? s.bytes / cfg_.limits.page_bytes : 0;
  if (pages == 0 || !host_.allocate(owner, pages)) {
    apply(core_.on_disk_in(s.request_id, false, now_));
    return;
  }
  auto copy = s;
  const auto held = host_.pages_of(owner);
  copy.host_pages.assign(held.end() - static_cast<std::ptrdiff_t>(pages), held.end());
  disk_transfers_.enqueue(transfer_class::swap_in, s.request_id, s.bytes, now_);
  disk_copies_[{s.request_id, transfer_class::swap_in}] = std::move(copy);
}

void sim_engine::next_turn(std::uint64_t session) {
  const auto turn = take_next_turn(next_turns_, session);
  if (!turn)
    return;
  const auto next = *turn;
  const auto think = (*requests_)[next].think_s;
  sent_s_[next] = now_ + think;
  schedule(now_ + think, event_kind::arrival, next);
  if (cfg_.advise_lead_s >= 0) {
    turn_due_s_[session] = now_ + think; // the advisory's in_s: no more than the think time
    schedule(now_ + std::max(0.0, think - cfg_.advise_lead_s), event_kind::advise, session);
  }
}

void sim_engine::drop(const std::vector<std::uint32_t>& victims) {
  for (auto id : victims)
    adapter_pages().release(adapter_owner(id));
}

void sim_engine::acquire(std::uint64_t request_id, std::uint32_t adapter_id) {
  using grant = scheduler_core::adapter_grant;
  const auto* e = catalog_.by_id(adapter_id);
  if (e == nullptr) {
    apply(core_.on_adapter(request_id, grant::failed, now_));
    return;
  }
  switch (cache_.acquire(adapter_id, e->pages, e->rank, now_)) {
    case adapter_cache::outcome::hit:
      apply(core_.on_adapter(request_id, grant::granted, now_));
      return;
    case adapter_cache::outcome::wait:
      waiters_[adapter_id].push_back(request_id);
      return;
    case adapter_cache::outcome::load:
      waiters_[adapter_id].push_back(request_id);
      drop(cache_.evict_idle(now_));
      load(adapter_id, transfer_class::demand_load, false);
      return;
  }
}

void sim_engine::prefetch(std::uint32_t adapter_id) {
  const auto* e = catalog_.by_id(adapter_id);
  if (e != nullptr && cache_.prefetch(adapter_id, e->pages, e->rank, now_) == adapter_cache::outcome::load)
    load(adapter_id, transfer_class::prefetch, false);
}

void sim_engine::load(std::uint32_t adapter_id, transfer_class kind, bool retried) {
  const auto* e = catalog_.by_id(adapter_id);
  const bool prefetch = kind == transfer_class::prefetch;
  const auto keep_free = prefetch ? static_cast<std::uint64_t>(std::ceil(
                           cfg_.cache.prefetch_free_fraction * static_cast<double>(pool_pages_)))
                                  : std::uint64_t{0};
  if (adapter_pages().allocate_keeping(adapter_owner(adapter_id), e->pages,
                                      cfg_.adapter_partition_pages > 0 ? 0 : keep_free)) {
    transfers_.enqueue(kind, adapter_id, e->bytes, now_);
    start_transfers();
    return;
  }
  if (prefetch && !waiters_.contains(adapter_id)) {
    settle(adapter_id, scheduler_core::adapter_grant::retry);
    return;
  }
  if (retried) {
    settle(adapter_id, scheduler_core::adapter_grant::retry);
    return;
  }
  drop(cache_.evict_for(e->pages, now_));
  load(adapter_id, transfer_class::demand_load, true);
}

void sim_engine::start_transfers() {
  for (const auto& s : disk_transfers_.start_ready(now_)) {
    // The file's read or write at the disk's rate, and the host pages' copy
    // as the backend prices it.
    const auto& d = disk_copies_.at({s.key, s.cls});
    const bool out = s.cls == transfer_class::swap_out;
    transfer t{0, s.bytes};
    t.cls = s.cls;
    t.request_id = s.key;
    t.session_file = true;
    t.disk_s = backend_->cost_model().disk_seconds(s.bytes);
    t.copy_s = out ? backend_->read_pages(true, d.host_pages, s.bytes).seconds
                   : backend_->write_host_pages(d.host_pages, {}, s.bytes).seconds;
    t.done_s = now_ + t.disk_s + t.copy_s;
    running_transfers_.emplace(s.id | disk_transfer_bit, t);
    schedule(t.done_s, event_kind::transfer_done, s.id | disk_transfer_bit);
  }
  for (const auto& s : transfers_.start_ready(now_)) {
    if (s.cls == transfer_class::swap_out || s.cls == transfer_class::swap_in) {
      const auto& sw = swaps_.at({s.key, s.cls});
      const auto r = backend_->swap_pages(
        s.cls == transfer_class::swap_out ? gpu::swap_direction::out : gpu::swap_direction::in,
        sw.device_pages, sw.host_pages, s.bytes);
      transfer t{0, s.bytes};
      t.cls = s.cls;
      t.request_id = s.key;
      t.copy_s = r.seconds;
      t.done_s = now_ + r.seconds;
      running_transfers_.emplace(s.id, t);
      schedule(t.done_s, event_kind::transfer_done, s.id);
      if (cfg_.layer_streaming && s.cls == transfer_class::swap_in && !session_ins_.contains(s.key)) {
        streams_[s.key] = {now_, r.seconds};
        schedule(now_ + r.seconds / std::max<std::uint32_t>(cfg_.layers, 1), event_kind::first_layer_in, s.key);
      }
      continue;
    }
    const auto adapter_id = static_cast<std::uint32_t>(s.key);
    const auto* e = catalog_.by_id(adapter_id);
    const auto pages = adapter_pages().pages_of(adapter_owner(adapter_id));
    const auto r = backend_->load_adapter(adapter_id, e ? e->path : std::string{}, s.bytes, pages);
    transfer t{adapter_id, s.bytes};
    t.disk = !r.host_hit;
    t.disk_s = r.disk_seconds;
    t.copy_s = r.copy_seconds;
    t.done_s = now_ + r.disk_seconds + r.copy_seconds;
    running_transfers_.emplace(s.id, t);
    schedule(t.done_s, event_kind::transfer_done, s.id);
  }
}

void sim_engine::settle(std::uint32_t adapter_id, scheduler_core::adapter_grant g) {
  if (g == scheduler_core::adapter_grant::granted) {
    cache_.loaded(adapter_id);
  } else {
    cache_.load_failed(adapter_id);
    if (!adapter_pages().pages_of(adapter_owner(adapter_id)).empty())
      adapter_pages().release(adapter_owner(adapter_id));
  }
  auto i = waiters_.find(adapter_id);
  if (i == waiters_.end())
    return;
  auto waiting = std::move(i->second);
  waiters_.erase(i);
  for (auto request_id : waiting)
    apply(core_.on_adapter(request_id, g, now_));
}

std::optional<sim_engine::kv_export> sim_engine::begin_export(std::uint64_t session, double now_s) {
  now_ = std::max(now_, now_s);
  auto plan = core_.begin_export(session);
  if (!plan)
    return std::nullopt;
  kv_export out;
  out.pages = plan->pages.size();
  out.bytes = plan->bytes;
  out.tokens = std::move(plan->tokens);
  out.adapter_id = plan->adapter_id;
  // A cache on the GPU is read out over PCIe first; one in host memory is
  // sent from where it is.
  if (!plan->host)
    out.read_s = backend_->swap_pages(gpu::swap_direction::out, plan->pages, {}, plan->bytes).seconds;
  return out;
}

void sim_engine::end_export(std::uint64_t session, double now_s) {
  now_ = std::max(now_, now_s);
  apply(core_.on_exported(session));
  pump();
}

bool sim_engine::import_session(std::uint64_t session, std::uint64_t pages, std::vector<std::int32_t> tokens,
                                std::uint32_t adapter_id, double now_s) {
  now_ = std::max(now_, now_s);
  scheduler_effects fx;
  const auto owner = core_.begin_import(session, pages, std::move(tokens), adapter_id, fx);
  apply(std::move(fx));
  bool ok = false;
  if (owner != 0) {
    ok = host_.allocate(request_owner(owner), pages);
    const auto held = host_.pages_of(request_owner(owner));
    apply(core_.on_imported(session, ok, now_, ok ? std::vector<std::uint32_t>(held.begin(), held.end())
                                                  : std::vector<std::uint32_t>{}));
  }
  pump();
  return ok;
}

void sim_engine::advise(std::uint64_t session, double now_s, double in_s) {
  now_ = std::max(now_, now_s);
  advise_core(session, in_s);
  pump();
}

void sim_engine::advise_core(std::uint64_t session, double in_s) {
  scheduler_effects fx;
  // Put off: asked again shortly before the turn, wherever the cache is then.
  if (core_.advise(session, now_, fx, in_s) != scheduler_core::advice::none && core_.advise_fetch_delay(in_s) > 0)
    schedule(now_ + core_.advise_fetch_delay(in_s), event_kind::fetch, session);
  apply(std::move(fx));
}

} // namespace troupe
