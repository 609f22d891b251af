#include "runtime/router_core.hpp"

#include "gpu/random.hpp"
#include "runtime/request_state.hpp"

#include <algorithm>
#include <set>

namespace troupe {

router_core::router_core(std::size_t nodes, std::uint32_t imbalance, bool adapter_affinity,
                         double advise_place_lead_s, std::uint32_t prefix_affinity_tokens)
  : loads_(nodes), imbalance_(imbalance), advise_place_lead_s_(advise_place_lead_s),
    adapter_affinity_(adapter_affinity), prefix_tokens_(prefix_affinity_tokens) {
}

std::int32_t router_core::holder_of(std::uint64_t session) const {
  if (session == 0)
    return -1;
  auto i = sessions_.find(session);
  return i == sessions_.end() ? -1 : static_cast<std::int32_t>(i->second);
}

router_core::route router_core::decide(std::uint64_t session) {
  const auto holder = holder_of(session);
  const auto p = policies::place(loads_, holder, imbalance_);
  route r;
  r.node = p.node;
  if (p.migrate) {
    r.pull_from = holder;
    sessions_[session] = static_cast<std::uint32_t>(p.node); // its KV moves there
    ++migrations_;
  }
  return r;
}

std::optional<router_core::deferral> router_core::defer_advise(std::uint64_t session, double in_s) {
  if (session == 0 || advise_place_lead_s_ < 0 || !(in_s > advise_place_lead_s_))
    return std::nullopt;
  const auto token = ++next_token_;
  deferred_[session] = token; // a later advisory replaces an earlier one
  ++advisories_deferred_;
  return deferral{token, in_s - advise_place_lead_s_, holder_of(session) >= 0};
}

bool router_core::advise_due(std::uint64_t session, std::uint64_t token) {
  auto i = deferred_.find(session);
  if (i == deferred_.end() || i->second != token)
    return false;
  deferred_.erase(i);
  ++advisories_placed_late_;
  return true;
}

router_core::route router_core::advise(std::uint64_t session) {
  if (session == 0)
    return decide(session);
  deferred_.erase(session);
  if (auto old = advised_.find(session); old != advised_.end()) {
    // Advised again before its turn came: counted once, where it goes now.
    auto& l = loads_[old->second];
    l.expected -= std::min<std::uint32_t>(l.expected, 1);
    advised_.erase(old);
  }
  auto r = decide(session);
  if (r.node >= 0) {
    advised_[session] = static_cast<std::uint32_t>(r.node);
    ++loads_[static_cast<std::size_t>(r.node)].expected;
  }
  return r;
}

router_core::route router_core::place(const request_spec& spec) {
  if (spec.session != 0)
    deferred_.erase(spec.session); // its turn came before its advisory's placement
  if (auto a = advised_.find(spec.session); spec.session != 0 && a != advised_.end()) {
    const auto node = a->second;
    advised_.erase(a);
    loads_[node].expected -= std::min<std::uint32_t>(loads_[node].expected, 1);
    if (loads_[node].alive) {
      route r;
      r.node = static_cast<std::int32_t>(node);
      // The advisory came before the session's last turn ended elsewhere:
      // its KV follows now.
      if (const auto h = holder_of(spec.session); h >= 0 && h != r.node) {
        r.pull_from = h;
        sessions_[spec.session] = node;
        ++migrations_;
      }
      return r;
    }
  }
  if (spec.session == 0 && prefix_tokens_ > 0 && spec.prompt.size() >= prefix_tokens_) {
    // Prefix locality: the node the last prompt beginning so went to.
    const auto p = prefixes_.find(prefix_key(spec));
    const auto holder = p == prefixes_.end() ? -1 : static_cast<std::int32_t>(p->second);
    route r;
    r.node = policies::place(loads_, holder, imbalance_).node;
    return r;
  }
  if (spec.session == 0 && adapter_affinity_ && spec.adapter_id != 0) {
    // Adapter locality: the node its last request went to, unless that one
    // is markedly busier (nothing moves: the adapter loads where it goes).
    const auto a = adapters_.find(spec.adapter_id);
    const auto holder = a == adapters_.end() ? -1 : static_cast<std::int32_t>(a->second);
    route r;
    r.node = policies::place(loads_, holder, imbalance_).node;
    return r;
  }
  return decide(spec.session);
}

void router_core::assign(const request_spec& spec, std::uint32_t node) {
  auto& e = requests_[spec.request_id];
  if (e.tokens > 0 || e.spec.request_id != 0) {
    auto& old = loads_[e.node];
    old.in_flight -= std::min<std::uint32_t>(old.in_flight, 1);
    old.tokens -= std::min(old.tokens, e.tokens);
  }
  e.spec = spec;
  e.node = node;
  e.tokens = spec.prompt.size() + spec.max_new_tokens;
  auto& l = loads_[node];
  ++l.in_flight;
  l.tokens += e.tokens;
  ++l.placed;
  if (adapter_affinity_ && spec.adapter_id != 0)
    adapters_[spec.adapter_id] = node;
  if (spec.session == 0 && prefix_tokens_ > 0 && spec.prompt.size() >= prefix_tokens_) {
    if (prefixes_.size() >= max_prefixes)
      prefixes_.clear();
    prefixes_[prefix_key(spec)] = node;
  }
}

std::uint64_t router_core::prefix_key(const request_spec& spec) const {
  auto h = gpu::splitmix64(spec.adapter_id);
  for (std::size_t i = 0; i < prefix_tokens_ && i < spec.prompt.size(); ++i)
    h = gpu::splitmix64(h ^ static_cast<std::uint32_t>(spec.prompt[i]));
  return h;
}

void router_core::forget(std::uint64_t request_id) {
  auto i = requests_.find(request_id);
  if (i == requests_.end())
    return;
  auto& l = loads_[i->second.node];
  l.in_flight -= std::min<std::uint32_t>(l.in_flight, 1);
  l.tokens -= std::min(l.tokens, i->second.tokens);
  requests_.erase(i);
}

progress_batch router_core::on_progress(const progress_batch& batch) {
  progress_batch out;
  for (const auto& t : batch.tokens) {
    auto i = requests_.find(t.request_id);
    if (i == requests_.end() || t.index != i->second.delivered)
      continue; // already seen (a resubmitted request catching up), or ended
    ++i->second.delivered;
    out.tokens.push_back(t);
  }
  // A token's log-probabilities go where the token went; a prompt's go
  // with its first token.
  if (!batch.logprobs.empty() || !batch.prompt_logprobs.empty()) {
    std::set<std::pair<std::uint64_t, std::uint32_t>> sent;
    for (const auto& t : out.tokens)
      sent.emplace(t.request_id, t.index);
    for (const auto& lp : batch.logprobs)
      if (sent.contains({lp.request_id, lp.index}))
        out.logprobs.push_back(lp);
    for (const auto& lp : batch.prompt_logprobs)
      if (sent.contains({lp.request_id, 0}))
        out.prompt_logprobs.push_back(lp);
  }
  for (const auto& f : batch.finished) {
    auto i = requests_.find(f.request_id);
    if (i == requests_.end())
      continue;
    const auto node = i->second.node;
    const auto session = i->second.spec.session;
    const auto reason = static_cast<finish_reason>(f.reason);
    if (session != 0 && (reason == finish_reason::length || reason == finish_reason::eos
                         || reason == finish_reason::stop))
      sessions_[session] = node;
    forget(f.request_id);
    out.finished.push_back(f);
  }
  return out;
}

std::vector<request_spec> router_core::on_node_down(std::uint32_t node) {
  std::vector<request_spec> out;
  if (node >= loads_.size() || !loads_[node].alive)
    return out;
  loads_[node].alive = false;
  for (auto i = requests_.begin(); i != requests_.end();) {
    if (i->second.node != node) {
      ++i;
      continue;
    }
    out.push_back(i->second.spec);
    ++resubmitted_;
    // Stays known (its delivered count matters); re-assigned by the caller.
    ++i;
  }
  loads_[node].in_flight = 0;
  loads_[node].tokens = 0;
  loads_[node].expected = 0;
  for (auto i = sessions_.begin(); i != sessions_.end();)
    i = i->second == node ? sessions_.erase(i) : std::next(i);
  for (auto i = advised_.begin(); i != advised_.end();)
    i = i->second == node ? advised_.erase(i) : std::next(i);
  for (auto i = adapters_.begin(); i != adapters_.end();)
    i = i->second == node ? adapters_.erase(i) : std::next(i);
  std::sort(out.begin(), out.end(), [](const request_spec& a, const request_spec& b) {
    return a.arrival_s < b.arrival_s || (a.arrival_s == b.arrival_s && a.request_id < b.request_id);
  });
  return out;
}

std::optional<std::uint32_t> router_core::node_of(std::uint64_t request_id) const {
  auto i = requests_.find(request_id);
  if (i == requests_.end())
    return std::nullopt;
  return i->second.node;
}

std::size_t router_core::alive() const noexcept {
  return static_cast<std::size_t>(
    std::count_if(loads_.begin(), loads_.end(), [](const auto& l) { return l.alive; }));
}

} // namespace troupe
