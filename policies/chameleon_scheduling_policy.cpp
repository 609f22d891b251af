#include "policies/chameleon_scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::policies {

std::string chameleon_scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"chameleon\""}
    .flag("bypass", bypass_)
    .whole("bypass_lookahead", lookahead_, 1)
    .flag("pool_all_spare", pool_all_spare_)
    .number("max_wait_s", max_wait_s_)
    .apply(params);
}

std::vector<std::pair<std::string, double>> chameleon_scheduling_policy::counters() const {
  return {{"chameleon_bypassed", static_cast<double>(bypassed_)},
          {"chameleon_squashed", static_cast<double>(squashed_)},
          {"chameleon_overdue_admitted", static_cast<double>(overdue_)},
          {"chameleon_held_for_overdue", static_cast<double>(held_)}};
}

std::vector<std::pair<std::string, double>> chameleon_scheduling_policy::gauges() const {
  return {{"chameleon_queues", static_cast<double>(tuning_.queues())}};
}

schedule_decision chameleon_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  const std::size_t k = std::max<std::size_t>(tuning_.queues(), 1);
  const std::uint64_t pool_tokens = std::numeric_limits<std::uint64_t>::max() / 4;

  // Bypassers that overran their prediction are squashed; the rest charge
  // their queue's quota.
  std::vector<std::uint64_t> charged(k, 0);
  std::vector<std::uint32_t> running_in(k, 0);
  for (const auto& r : in.running) {
    if (auto b = bypassers_.find(r.request_id); b != bypassers_.end() && r.generated > b->second) {
      out.squash.push_back(r.request_id);
      bypassers_.erase(b);
      ++squashed_;
      continue;
    }
    const auto q = std::min<std::size_t>(r.queue, k - 1);
    charged[q] += cost(r.prompt_tokens, r.predicted_tokens, r.adapter_pages, lim.page_tokens);
    ++running_in[q];
  }
  // Forget bypassers that finished.
  if (!bypassers_.empty()) {
    std::unordered_map<std::uint64_t, std::uint32_t> alive;
    for (const auto& r : in.running)
      if (auto b = bypassers_.find(r.request_id); b != bypassers_.end())
        alive.insert(*b);
    bypassers_ = std::move(alive);
  }
  std::vector<std::uint64_t> avail(k);
  for (std::size_t q = 0; q < k; ++q) {
    const std::uint64_t quota = q < tuning_.quotas.size() ? tuning_.quotas[q] : pool_tokens;
    avail[q] = quota > charged[q] ? quota - charged[q] : 0;
  }

  // Waiting requests per queue, in arrival order.
  std::vector<std::vector<const waiting_view*>> queues(k);
  for (const auto& w : in.waiting)
    queues[std::min<std::size_t>(w.queue, k - 1)].push_back(&w);

  batch_admission batch{in, out.squash.size()};
  const auto& pages = batch.pages();
  std::vector<std::size_t> next(k, 0); // first not-yet-admitted index per queue
  std::unordered_map<std::uint64_t, char> taken;

  auto admit = [&](const waiting_view& w) {
    batch.admit(w, out);
    taken[w.request_id] = 1;
  };
  auto cost_of = [&](const waiting_view& w) {
    return cost(w.prompt_tokens, w.predicted_tokens, w.adapter_pages, lim.page_tokens);
  };
  // An admitted request charges its queue's quota.
  auto charge = [&](const waiting_view& w) {
    const auto q = std::min<std::size_t>(w.queue, k - 1);
    const auto c = cost_of(w);
    avail[q] = avail[q] > c ? avail[q] - c : 0;
    ++running_in[q];
  };
  // Lets `y` pass a blocked request that can start in `wait` iterations:
  // admitted if it fits now and what it has left of its prediction ends
  // before then; with `squash`, squashed if it overruns. A request that
  // already ran past its prediction (squashed before, its output kept) has
  // nothing left to go by and never passes: admitted again as a bypasser,
  // it would be squashed at once, over and over.
  auto pass = [&](const waiting_view& y, double wait, bool squash) {
    const std::uint32_t left = y.predicted_tokens > y.generated ? y.predicted_tokens - y.generated : 0;
    if (left == 0 || taken.contains(y.request_id) || !batch.fits(y) || static_cast<double>(left) + 1 > wait)
      return false;
    admit(y);
    if (squash)
      bypassers_[y.request_id] = y.predicted_tokens;
    ++bypassed_;
    return true;
  };
  // Iterations until enough running requests end to free `deficit` pages,
  // by their predicted remaining output; "never" when they cannot.
  auto head_wait = [&](std::uint64_t deficit) {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> ends; // remaining iterations, pages
    for (const auto& r : in.running) {
      const auto predicted = std::max(r.predicted_tokens, r.generated + 1);
      ends.emplace_back(predicted - r.generated, r.pages + r.adapter_pages);
    }
    std::sort(ends.begin(), ends.end());
    std::uint64_t freed = 0;
    for (const auto& [iters, p] : ends) {
      freed += p;
      if (freed >= deficit)
        return static_cast<double>(iters);
    }
    return std::numeric_limits<double>::infinity();
  };

  // Phase 0: requests that have waited max_wait_s or more go first, oldest
  // first, whatever their queue's quota. When the oldest of them does not
  // fit, the only others let in are those predicted to end before it could
  // start (backfilling), so the pages running requests free go to it and no
  // request waits for ever behind smaller ones. A backfilled request that
  // overruns its prediction runs on (squashing it would throw away its work
  // to win the overdue one a few iterations; measured worse in tight pools,
  // docs/benchmarks.md).
  bool held = false;
  if (max_wait_s_ > 0) {
    for (const auto& w : in.waiting) {
      if (in.now_s - w.arrival_s < max_wait_s_)
        continue;
      if (!batch.fits(w)) {
        held = true;
        ++held_;
        // Others may start now if they are predicted to end (and give their
        // pages back) before the running requests have freed enough for it.
        const auto need = pages.need(w, lim.page_tokens);
        const double wait = need > pages.left() ? head_wait(need - pages.left()) : 0.0;
        for (const auto& y : in.waiting)
          pass(y, wait, false);
        break;
      }
      admit(w);
      charge(w);
      ++overdue_;
    }
  }
  if (held)
    return out;

  // Phase 1: each queue within its own quota.
  for (std::size_t q = 0; q < k; ++q) {
    auto& list = queues[q];
    while (next[q] < list.size()) {
      const auto& w = *list[next[q]];
      if (taken.contains(w.request_id)) { // admitted in phase 0
        ++next[q];
        continue;
      }
      const auto c = cost_of(w);
      // A queue with nothing running may start its head whatever its quota.
      const bool quota_ok = c <= avail[q] || (running_in[q] == 0 && next[q] == 0);
      if (!quota_ok)
        break;
      if (batch.fits(w)) {
        admit(w);
        charge(w);
        ++next[q];
        continue;
      }
      // Blocked. On adapter memory (its KV alone would fit)? Then a younger
      // request of this queue that fits now may pass if it is predicted to
      // finish before the head could start.
      const auto need = pages.need(w, lim.page_tokens);
      const auto kv_only = page_budget::cache_pages(w, lim.page_tokens);
      if (bypass_ && w.adapter_id != 0 && need > pages.left() && kv_only <= pages.left()) {
        const double wait = head_wait(need - pages.left());
        for (std::size_t j = next[q] + 1; j < list.size() && j <= next[q] + lookahead_; ++j) {
          const auto& y = *list[j];
          if (cost_of(y) <= avail[q] && pass(y, wait, true))
            charge(y);
        }
      }
      break;
    }
  }

  // Phase 2: the quota of queues with nothing left waiting, from the small
  // queue down; a queue whose head does not fit gets nothing more.
  std::uint64_t spare = 0;
  for (std::size_t q = 0; q < k; ++q) {
    bool empty = true;
    for (std::size_t j = next[q]; j < queues[q].size() && empty; ++j)
      empty = taken.contains(queues[q][j]->request_id);
    if (empty || pool_all_spare_)
      spare += avail[q];
  }
  for (std::size_t q = 0; q < k && spare > 0; ++q) {
    auto& list = queues[q];
    while (next[q] < list.size()) {
      const auto& w = *list[next[q]];
      if (taken.contains(w.request_id)) {
        ++next[q];
        continue;
      }
      const auto c = cost_of(w);
      if (c > spare || !batch.fits(w))
        break;
      admit(w);
      spare -= c;
      ++next[q];
    }
  }
  return out;
}

} // namespace troupe::policies
