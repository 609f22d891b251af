#include "policies/adaptive_scheduling_policy.hpp"

#include "policies/adaptive_preemption.hpp"
#include "policies/params.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::policies {

std::string adaptive_scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"adaptive\""}
    .number("preempt_margin", margin_)
    .whole("max_preemptions", max_preemptions_)
    .apply(params);
}

std::vector<std::pair<std::string, double>> adaptive_scheduling_policy::counters() const {
  return {{"adaptive_preempted", static_cast<double>(preempted_)}};
}

schedule_decision adaptive_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  // Waiting requests by priority, highest first (ties: earlier arrival).
  std::vector<std::pair<double, const waiting_view*>> order;
  order.reserve(in.waiting.size());
  for (const auto& w : in.waiting)
    order.emplace_back(adaptive_priority(in.now_s, w.arrival_s, w.prompt_tokens + w.generated), &w);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });

  std::uint64_t running = in.running.size();
  std::uint64_t tokens = running;
  page_budget pages{lim.free_pages, in.adapters_in_use};
  for (const auto& [p, w] : order) {
    if (running >= lim.max_running || (running > 0 && tokens + w->prompt_tokens > lim.token_budget))
      break;
    if (pages.take(*w, lim.page_tokens)) {
      out.admit.push_back(w->request_id);
      ++running;
      tokens += w->prompt_tokens;
      continue;
    }
    // The most urgent request left does not fit: preempt running requests
    // of lower priority, lowest first, until it would.
    const auto need = pages.need(*w, lim.page_tokens);
    std::uint64_t freed = pages.left();
    std::vector<std::pair<double, const running_view*>> victims;
    for (const auto& r : in.running) {
      if (!r.started)
        continue; // every admission makes progress before it can be undone
      const double pr = adaptive_priority(in.now_s, r.arrival_s, r.context_tokens);
      if (p > margin_ * pr)
        victims.emplace_back(pr, &r);
    }
    std::sort(victims.begin(), victims.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::uint64_t> chosen;
    for (const auto& [pr, r] : victims) {
      if (freed >= need || chosen.size() >= max_preemptions_)
        break;
      chosen.push_back(r->request_id);
      freed += r->pages;
    }
    if (freed >= need) { // only preempt when it makes room
      out.squash = std::move(chosen);
      preempted_ += out.squash.size();
    }
    break;
  }
  return out;
}

} // namespace troupe::policies
