#include "runtime/sim_cluster.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

namespace troupe {

namespace {

void add(sim_totals& a, const sim_totals& b) {
  a.steps += b.steps;
  a.end_s = std::max(a.end_s, b.end_s);
  a.adapter_hits += b.adapter_hits;
  a.adapter_misses += b.adapter_misses;
  a.adapter_evictions += b.adapter_evictions;
  a.prefetches += b.prefetches;
  a.prefetch_hits += b.prefetch_hits;
  a.pcie_bytes += b.pcie_bytes;
  a.disk_bytes += b.disk_bytes;
  a.pcie_seconds += b.pcie_seconds;
  a.disk_seconds += b.disk_seconds;
  a.pool_low_water += b.pool_low_water;
  a.pool_request_pages_at_end += b.pool_request_pages_at_end;
  a.pool_adapter_pages_at_end += b.pool_adapter_pages_at_end;
  a.cache_pages_at_end += b.cache_pages_at_end;
  a.squashed += b.squashed;
  a.aborted += b.aborted;
  a.swapped_out += b.swapped_out;
  a.swapped_in += b.swapped_in;
  a.swap_bytes += b.swap_bytes;
  a.growths_denied += b.growths_denied;
  a.host_pages_at_end += b.host_pages_at_end;
  a.session_disk_writes += b.session_disk_writes;
  a.session_disk_reads += b.session_disk_reads;
  a.session_disk_skips += b.session_disk_skips;
  a.session_disk_bytes += b.session_disk_bytes;
  a.session_disk_seconds += b.session_disk_seconds;
  a.disk_pages_at_end += b.disk_pages_at_end;
  a.prefill_tokens += b.prefill_tokens;
  a.recomputed_tokens += b.recomputed_tokens;
  a.reused_tokens += b.reused_tokens;
  a.prefix_hits += b.prefix_hits;
  a.prefix_pages_at_end += b.prefix_pages_at_end;
  a.refused_page_moves += b.refused_page_moves;
  a.decode_tokens += b.decode_tokens;
  a.tunings += b.tunings;
  a.queues = std::max(a.queues, b.queues);
}

} // namespace

sim_cluster::sim_cluster(std::vector<std::unique_ptr<sim_engine>> nodes, sim_cluster_config cfg)
  : nodes_(std::move(nodes)), cfg_(cfg), router_(nodes_.size(), cfg.imbalance, cfg.adapter_affinity, cfg.advise_place_lead_s,
                                          cfg.prefix_affinity_tokens),
    deferred_(nodes_.size()) {
  if (nodes_.empty())
    throw std::invalid_argument("sim_cluster: no nodes");
  if (!(cfg_.network_bytes_per_s > 0))
    throw std::invalid_argument("sim_cluster: the network's bandwidth must be positive");
  for (const auto& [node, at] : cfg_.failures)
    if (node >= nodes_.size() || !(at >= 0))
      throw std::invalid_argument("sim_cluster: a failure names node " + std::to_string(node) + " at " +
                                  std::to_string(at) + " s; the nodes are 0 to " +
                                  std::to_string(nodes_.size() - 1) + ", times >= 0");
}

void sim_cluster::schedule(double at, event_kind kind, std::uint64_t arg) {
  events_.push({at, seq_++, kind, arg});
}

std::vector<sim_outcome> sim_cluster::run(const std::vector<sim_request>& requests) {
  if (std::exchange(ran_, true))
    throw std::logic_error("sim_cluster: run() once per cluster (its engines are spent)");
  requests_ = &requests;
  histories_ = std::make_shared<std::unordered_map<std::uint64_t, std::vector<std::int32_t>>>();
  sent_s_.assign(requests.size(), 0.0);
  node_of_.assign(requests.size(), -1);
  dead_.assign(nodes_.size(), false);
  totals_ = {};
  totals_.placed.assign(nodes_.size(), 0);
  for (auto& n : nodes_)
    n->begin(requests, [this](std::size_t index, finish_reason reason, double now_s) { ended(index, reason, now_s); },
             histories_);
  for (const auto& [node, at] : cfg_.failures)
    schedule(at, event_kind::node_down, node);
  for (const auto i : sent_at_arrival(requests, next_turns_)) {
    sent_s_[i] = requests[i].arrival_s;
    schedule(requests[i].arrival_s, event_kind::arrival, i);
  }
  // One clock: the earliest event of the router's and every node's runs
  // next (the router's first at a tie).
  for (;;) {
    // A lost node's events never run.
    const auto next_of = [&](std::size_t n) {
      return dead_[n] ? std::numeric_limits<double>::infinity() : nodes_[n]->next_event_s();
    };
    std::size_t first = 0;
    for (std::size_t n = 1; n < nodes_.size(); ++n)
      if (next_of(n) < next_of(first))
        first = n;
    const double node_at = next_of(first);
    if (!events_.empty() && events_.top().at <= node_at) {
      const auto ev = events_.top();
      events_.pop();
      now_ = ev.at;
      switch (ev.kind) {
        case event_kind::arrival: arrive(ev.arg); break;
        case event_kind::pulled: pulled(ev.arg); break;
        case event_kind::advise: advise(ev.arg, std::max(0.0, turn_due_s_[ev.arg] - now_)); break;
        case event_kind::advise_due: advise_due(ev.arg); break;
        case event_kind::node_down: node_down(static_cast<std::uint32_t>(ev.arg)); break;
      }
      continue;
    }
    if (node_at == std::numeric_limits<double>::infinity())
      break;
    now_ = node_at;
    nodes_[first]->step();
    // Exports that waited for a cache to settle between tiers there.
    if (!deferred_[first].empty()) {
      auto again = std::exchange(deferred_[first], {});
      for (const auto session : again)
        start_pull(session);
    }
  }
  std::vector<std::vector<sim_outcome>> per_node;
  for (auto& n : nodes_) {
    per_node.push_back(n->end());
    add(totals_.nodes, n->totals());
  }
  std::vector<sim_outcome> out(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i)
    if (node_of_[i] >= 0)
      out[i] = per_node[static_cast<std::size_t>(node_of_[i])][i];
  requests_ = nullptr;
  return out;
}

request_spec sim_cluster::spec_of(std::size_t index) const {
  // What the router weighs: the prompt's length (history included), the
  // output's budget, and the adapter.
  const auto& r = (*requests_)[index];
  request_spec spec;
  spec.request_id = index + 1;
  spec.session = r.session;
  std::size_t history = 0;
  if (r.session != 0)
    if (auto h = histories_->find(r.session); h != histories_->end())
      history = h->second.size();
  spec.prompt.resize(history + std::max<std::uint32_t>(r.prompt_tokens, 1));
  spec.max_new_tokens = std::max<std::uint32_t>(r.output_tokens, 1);
  spec.adapter_id = r.adapter_id;
  spec.arrival_s = sent_s_[index];
  return spec;
}

void sim_cluster::arrive(std::size_t index) {
  auto spec = spec_of(index);
  const auto route = router_.place(spec);
  if (route.node < 0)
    return; // every node lost: it ends unanswered (an error outcome)
  const auto node = static_cast<std::uint32_t>(route.node);
  router_.assign(spec, node);
  const auto session = spec.session;
  if (auto p = pulls_.find(session); session != 0 && p != pulls_.end()) {
    p->second.waiting.emplace_back(index, node); // its cache is on its way (an advisory's pull)
    return;
  }
  if (route.pull_from >= 0 && move(session, static_cast<std::uint32_t>(route.pull_from), node, {{index, node}}))
    return;
  submit(index, node);
}

bool sim_cluster::move(std::uint64_t session, std::uint32_t from, std::uint32_t to,
                       std::vector<std::pair<std::size_t, std::uint32_t>> waiting, double due_s) {
  ++totals_.moves;
  if (!cfg_.migrate) {
    ++totals_.pulls_missed; // the turns recompute where they go
    return false;
  }
  auto& p = pulls_[session];
  p.from = from;
  p.to = to;
  p.due_s = due_s;
  p.waiting = std::move(waiting);
  start_pull(session);
  return true;
}

void sim_cluster::advise(std::uint64_t session, double in_s) {
  if (const auto d = router_.defer_advise(session, in_s)) {
    deferrals_[d->token] = session;
    schedule(now_ + d->delay_s, event_kind::advise_due, d->token);
    return;
  }
  const auto route = router_.advise(session);
  if (route.node < 0)
    return;
  const auto node = static_cast<std::uint32_t>(route.node);
  if (route.pull_from >= 0 && !pulls_.contains(session)
      && move(session, static_cast<std::uint32_t>(route.pull_from), node, {}, now_ + in_s))
    return; // advised on arrival at the new node (pulled)
  nodes_[node]->advise(session, now_, in_s);
}

void sim_cluster::advise_due(std::uint64_t token) {
  const auto i = deferrals_.find(token);
  if (i == deferrals_.end())
    return;
  const auto session = i->second;
  deferrals_.erase(i);
  if (router_.advise_due(session, token))
    advise(session, router_.advise_place_lead_s());
}

void sim_cluster::start_pull(std::uint64_t session) {
  auto i = pulls_.find(session);
  if (i == pulls_.end())
    return; // dropped when its node was lost
  auto& p = i->second;
  auto& holder = *nodes_[p.from];
  if (auto kv = dead_[p.from] ? std::nullopt : holder.begin_export(session, now_)) {
    p.kv = std::move(*kv);
    p.started = true;
    const double network_s = static_cast<double>(p.kv.bytes) / cfg_.network_bytes_per_s;
    schedule(now_ + p.kv.read_s + network_s, event_kind::pulled, session);
    return;
  }
  if (!dead_[p.from] && holder.session_moving(session)) {
    deferred_[p.from].push_back(session); // tried again once the move ends
    ++totals_.pulls_deferred;
    return;
  }
  // No cache left at the holder: the turns recompute where they go.
  ++totals_.pulls_missed;
  auto waiting = std::move(p.waiting);
  pulls_.erase(session);
  for (const auto& [index, node] : waiting)
    submit(index, node);
}

void sim_cluster::pulled(std::uint64_t session) {
  auto p = std::move(pulls_.at(session));
  pulls_.erase(session);
  if (!dead_[p.from])
    nodes_[p.from]->end_export(session, now_);
  const auto bytes = p.kv.bytes;
  if (dead_[p.from] || dead_[p.to]) {
    ++totals_.pulls_missed; // lost on the way: the turns recompute (or were placed again)
  } else if (nodes_[p.to]->import_session(session, p.kv.pages, std::move(p.kv.tokens), p.kv.adapter_id, now_)) {
    ++totals_.pulls;
    totals_.pull_bytes += bytes;
  } else {
    ++totals_.pulls_missed;
  }
  if (p.waiting.empty() && !dead_[p.to]) // an advisory's pull: on toward the GPU, if there is room, when due
    nodes_[p.to]->advise(session, now_, std::max(0.0, p.due_s - now_));
  for (const auto& [index, node] : p.waiting)
    submit(index, node);
}

void sim_cluster::node_down(std::uint32_t node) {
  if (dead_[node])
    return;
  dead_[node] = true;
  ++totals_.nodes_lost;
  // Pulls to it: their turns come back from the router below. Pulls from
  // it: the cache is gone (one under way ends as missed when it was due).
  for (auto it = pulls_.begin(); it != pulls_.end();) {
    auto& p = it->second;
    if (p.to == node && !p.started) { // not begun: nothing to undo at the holder
      it = pulls_.erase(it);
      continue;
    }
    if (p.to == node)
      p.waiting.clear();
    if (p.from == node && !p.started) { // was waiting for the cache to settle there
      ++totals_.pulls_missed;
      auto waiting = std::move(p.waiting);
      it = pulls_.erase(it);
      for (const auto& [index, to] : waiting)
        submit(index, to);
      continue;
    }
    ++it;
  }
  deferred_[node].clear();
  // Its requests, in arrival order, placed again: their prompts recomputed
  // where they go.
  for (const auto& spec : router_.on_node_down(node)) {
    ++totals_.resubmitted;
    arrive(spec.request_id - 1);
  }
}

void sim_cluster::submit(std::size_t index, std::uint32_t node) {
  node_of_[index] = static_cast<std::int32_t>(node);
  ++totals_.placed[node];
  nodes_[node]->submit(index, now_, sent_s_[index]);
}

void sim_cluster::ended(std::size_t index, finish_reason reason, double now_s) {
  progress_batch b;
  finish_event f;
  f.request_id = index + 1;
  f.reason = static_cast<std::uint8_t>(reason);
  b.finished.push_back(f);
  router_.on_progress(b); // the session's KV is where this turn ran
  const auto session = (*requests_)[index].session;
  if (session == 0)
    return;
  const auto turn = take_next_turn(next_turns_, session);
  if (!turn)
    return;
  const auto next = *turn;
  const auto think = (*requests_)[next].think_s;
  // The advisory first: at a tie it must come before the turn.
  if (cfg_.advise_lead_s >= 0) {
    turn_due_s_[session] = now_s + think;
    schedule(now_s + std::max(0.0, think - cfg_.advise_lead_s), event_kind::advise, session);
  }
  sent_s_[next] = now_s + think;
  schedule(now_s + think, event_kind::arrival, next);
}

} // namespace troupe
