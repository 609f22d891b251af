#include "policies/priority_scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>

namespace troupe::policies {

namespace {

/// Which running request gives way first: the lowest priority, then the
/// latest arrival (ties: the larger id).
bool gives_way_before(const running_view* a, const running_view* b) noexcept {
  if (a->priority != b->priority)
    return a->priority < b->priority;
  return a->arrival_s != b->arrival_s ? a->arrival_s > b->arrival_s : a->request_id > b->request_id;
}

/// Which running request ends first on its own: the fewest tokens left.
bool ends_before(const running_view* a, const running_view* b) noexcept {
  return a->remaining_tokens != b->remaining_tokens ? a->remaining_tokens < b->remaining_tokens
                                                    : a->request_id < b->request_id;
}

} // namespace

std::string priority_scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"priority\""}
    .flag("preempt", preempt_)
    .whole("patience_steps", patience_steps_, 0, 1 << 20)
    .flag("swap", swap_)
    .apply(params);
}

void priority_scheduling_policy::on_calibration(const cost_calibration& c) {
  swap_model_ = {c.d2h_bytes_per_s, c.h2d_bytes_per_s};
  recompute_model_ = recompute_model::fit(c.prefill_points);
}

schedule_decision priority_scheduling_policy::schedule(const schedule_input& in) {
  order_.resize(in.waiting.size());
  for (std::size_t i = 0; i < order_.size(); ++i)
    order_[i] = i;
  // (Stable: arrival order within a priority.)
  std::stable_sort(order_.begin(), order_.end(),
                   [&](std::size_t a, std::size_t b) { return in.waiting[a].priority > in.waiting[b].priority; });
  // Admits in order until one does not fit; its place in order_ (or the end).
  const auto admit_until_blocked = [&](batch_admission& batch, schedule_decision& d) {
    std::size_t k = 0;
    while (k < order_.size() && batch.admit(in.waiting[order_[k]], d))
      ++k;
    return k;
  };
  schedule_decision out;
  batch_admission batch{in};
  const auto blocked = admit_until_blocked(batch, out);
  if (!preempt_ || blocked == order_.size())
    return out;
  // Whether the blocked request (with those before it) fits once `room`'s
  // requests leave the batch.
  const auto fits_after = [&](const schedule_input& room, std::uint64_t leaving) {
    schedule_decision d;
    batch_admission freed{room, leaving};
    return admit_until_blocked(freed, d) > blocked;
  };
  // Requests chosen before and still leaving: where their pages and places
  // let it in, it waits for them (no second victim for the same room).
  auto room = in;
  std::uint64_t leaving = 0;
  for (const auto& r : in.running)
    if (r.leaving) {
      room.limits.free_pages += r.pages;
      ++leaving;
    }
  if (leaving > 0 && fits_after(room, leaving))
    return out;
  // Where the running requests' own ends make the room within
  // patience_steps steps, it waits for them: a preemption throws away its
  // victim's work, and under sustained load repeated ones cost more than
  // the wait they save.
  if (patience_steps_ > 0) {
    std::vector<const running_view*> ending;
    for (const auto& r : in.running)
      if (!r.leaving)
        ending.push_back(&r);
    std::sort(ending.begin(), ending.end(), ends_before);
    auto natural = room;
    for (std::size_t n = 0; n < ending.size() && ending[n]->remaining_tokens <= patience_steps_; ++n) {
      natural.limits.free_pages += ending[n]->pages;
      if (fits_after(natural, leaving + n + 1))
        return out;
    }
  }
  // Running requests of a lower priority than the blocked one, in the order
  // they give way; the fewest of them that let it in are preempted now, and
  // it is admitted once they have left (a later decision).
  const auto& first = in.waiting[order_[blocked]];
  std::vector<const running_view*> victims;
  for (const auto& r : in.running)
    if (r.started && !r.leaving && r.priority < first.priority)
      victims.push_back(&r);
  std::sort(victims.begin(), victims.end(), gives_way_before);
  for (std::size_t n = 1; n <= victims.size(); ++n) {
    room.limits.free_pages += victims[n - 1]->pages;
    if (!fits_after(room, leaving + n))
      continue;
    auto host_free = swap_ ? in.limits.host_free_pages : 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& v = *victims[i];
      if (swap_beats_recompute(v.pages, v.pages * in.limits.page_bytes, v.context_tokens, host_free, swap_model_,
                               recompute_model_)) {
        out.swap.push_back(v.request_id);
        host_free -= v.pages;
      } else {
        out.squash.push_back(v.request_id);
      }
    }
    break;
  }
  return out; // (where no preemption lets it in, it waits, as under fcfs)
}

void priority_scheduling_policy::preempt_for_growth(const schedule_input& in, schedule_decision& d) {
  // The host pool less what this decision's swaps take already.
  auto host_free = swap_ ? in.limits.host_free_pages : 0;
  for (const auto& r : in.running)
    if (std::find(d.swap.begin(), d.swap.end(), r.request_id) != d.swap.end())
      host_free -= std::min(host_free, r.pages);
  squash_for_growth(in, d, gives_way_before, [&](const running_view& v) {
    if (!swap_beats_recompute(v.pages, v.pages * in.limits.page_bytes, v.context_tokens, host_free, swap_model_,
                              recompute_model_))
      return false;
    host_free -= v.pages;
    return true;
  });
}

} // namespace troupe::policies
