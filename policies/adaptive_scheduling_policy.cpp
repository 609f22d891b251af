#include "policies/adaptive_scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::policies {

std::string adaptive_scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"adaptive\""}
    .number("preempt_margin", margin_)
    .whole("max_preemptions", max_preemptions_)
    .whole("mode", mode_, 0, 2)
    .apply(params);
}

void adaptive_scheduling_policy::on_calibration(const cost_calibration& c) {
  swap_ = {c.d2h_bytes_per_s, c.h2d_bytes_per_s};
  recompute_ = recompute_model::fit(c.prefill_points);
}

swap_model adaptive_scheduling_policy::swap_for_mode() const {
  // Always recompute: a swap that never finishes.
  return mode_ == 1 ? swap_model{} : swap_;
}

recompute_model adaptive_scheduling_policy::recompute_for_mode() const {
  // Always swap (when the host pool has room): a recompute that takes forever.
  return mode_ == 2 ? recompute_model{1e30, 0, 0} : recompute_;
}

std::vector<std::pair<std::string, double>> adaptive_scheduling_policy::counters() const {
  return {{"adaptive_preempted", static_cast<double>(preempted_)},
          {"adaptive_swaps_chosen", static_cast<double>(swaps_)},
          {"adaptive_swap_in_rounds", static_cast<double>(swap_in_rounds_)}};
}

namespace {

struct ranked {
  double priority;
  const waiting_view* w;
};

/// The highest-priority prefix of `set` that fits, as Algorithm 2's
/// SWAP_IN_SCHE / RECOMP_SCHE: pages (a swapped request takes its pages
/// back, a fresh one its whole life's KV), the running cap and the tokens
/// (a swap-in decodes 1 token, a prefill its prompt and output so far).
std::vector<ranked> fitting_prefix(std::span<const ranked> set, const schedule_input& in) {
  const auto& lim = in.limits;
  std::vector<ranked> out;
  std::uint64_t running = in.running.size();
  std::uint64_t tokens = running;
  page_budget pages{lim.free_pages, in.adapters_in_use};
  for (const auto& r : set) {
    const auto cost = r.w->swapped ? 1u : r.w->prompt_tokens + r.w->generated;
    if (running >= lim.max_running || (running > 0 && tokens + cost > lim.token_budget))
      break;
    if (!pages.take(*r.w, lim.page_tokens))
      break;
    out.push_back(r);
    ++running;
    tokens += cost;
  }
  return out;
}

double mean_of(std::span<const ranked> set) {
  std::vector<double> p;
  for (const auto& r : set)
    p.push_back(r.priority);
  return mean_priority(p);
}

} // namespace

void adaptive_scheduling_policy::preempt_for_growth(const schedule_input& in, schedule_decision& d) {
  std::uint64_t freed = 0;
  std::vector<preempt_candidate> victims;
  for (const auto& r : in.running) {
    const bool chosen = std::find(d.squash.begin(), d.squash.end(), r.request_id) != d.squash.end()
                        || std::find(d.swap.begin(), d.swap.end(), r.request_id) != d.swap.end();
    if (chosen)
      freed += r.pages;
    else if (r.started)
      victims.push_back({r.request_id, adaptive_priority(in.now_s, r.arrival_s, r.context_tokens), r.pages,
                         r.context_tokens, r.pages * in.limits.page_bytes});
  }
  if (freed >= in.pages_short)
    return;
  for (const auto& p : choose_preemptions(victims, in.pages_short - freed, in.limits.host_free_pages,
                                          swap_for_mode(), recompute_for_mode())) {
    (p.mode == preempt_mode::swap ? d.swap : d.squash).push_back(p.request_id);
    swaps_ += p.mode == preempt_mode::swap ? 1 : 0;
    ++preempted_;
  }
}

schedule_decision adaptive_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  // Waiting requests by priority, highest first (ties: earlier arrival), in
  // two sets: swapped out (resume by swap-in) and to prefill.
  std::vector<ranked> swapped, fresh;
  for (const auto& w : in.waiting)
    (w.swapped ? swapped : fresh)
      .push_back({adaptive_priority(in.now_s, w.arrival_s, w.prompt_tokens + w.generated), &w});
  // Ties go to the earlier arrival: the views are in arrival order, so to
  // the lower address.
  auto by_priority = [](const ranked& a, const ranked& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.w < b.w;
  };
  // No prefix can hold more than the batch has room for, and Algorithm 1
  // needs only the most urgent of each set: only that many are ordered (a
  // partial sort, about one pass over a long queue).
  const std::size_t room = in.running.size() < lim.max_running ? lim.max_running - in.running.size() : 0;
  auto order = [&](std::vector<ranked>& set) {
    const auto head = std::min(std::max<std::size_t>(room, 1), set.size());
    std::partial_sort(set.begin(), set.begin() + static_cast<std::ptrdiff_t>(head), set.end(), by_priority);
    return std::span<const ranked>{set.data(), head};
  };
  const auto swapped_head = order(swapped);
  const auto fresh_head = order(fresh);

  // Algorithm 2: the set whose admissible prefix has the higher mean
  // priority goes; swap-ins win ties.
  const auto s_sche = fitting_prefix(swapped_head, in);
  const auto w_sche = fitting_prefix(fresh_head, in);
  const bool swap_in = !s_sche.empty() && mean_of(w_sche) <= mean_of(s_sche);
  const auto& chosen = swap_in ? s_sche : w_sche;
  swap_in_rounds_ += swap_in ? 1 : 0;
  page_budget pages{lim.free_pages, in.adapters_in_use};
  for (const auto& r : chosen) {
    pages.take(*r.w, lim.page_tokens);
    out.admit.push_back(r.w->request_id);
  }

  // Algorithm 1: when the most urgent waiting request does not fit, running
  // requests of lower priority make room, lowest first, each swapped out
  // when the host pool has room and a swap is predicted cheaper than its
  // recompute, else dropped for recompute.
  const ranked* top = nullptr;
  for (const auto* set : {&swapped, &fresh})
    if (!set->empty() && (top == nullptr || set->front().priority > top->priority))
      top = &set->front();
  if (top == nullptr || !out.admit.empty() || in.running.size() >= lim.max_running)
    return out;
  const auto need = pages.need(*top->w, lim.page_tokens);
  if (need <= pages.left())
    return out; // it waits for the token budget, not for memory
  std::vector<preempt_candidate> victims;
  for (const auto& r : in.running) {
    if (!r.started)
      continue; // every admission makes progress before it can be undone
    const double pr = adaptive_priority(in.now_s, r.arrival_s, r.context_tokens);
    if (top->priority > margin_ * pr)
      victims.push_back({r.request_id, pr, r.pages, r.context_tokens, r.pages * lim.page_bytes});
  }
  auto plan = choose_preemptions(victims, need - pages.left(), lim.host_free_pages, swap_for_mode(), recompute_for_mode());
  if (plan.size() > max_preemptions_)
    return out;
  std::uint64_t freed = pages.left();
  for (const auto& p : plan)
    for (const auto& v : victims)
      if (v.request_id == p.request_id)
        freed += v.pages;
  if (freed < need)
    return out; // only preempt when it makes room
  for (const auto& p : plan) {
    if (p.mode == preempt_mode::swap) {
      out.swap.push_back(p.request_id);
      ++swaps_;
    } else {
      out.squash.push_back(p.request_id);
    }
  }
  preempted_ += plan.size();
  return out;
}

} // namespace troupe::policies
