#include "policies/aptserve_scheduling_policy.hpp"

#include "policies/aptserve_greedy.hpp"
#include "policies/params.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace troupe::policies {

std::string aptserve_scheduling_policy::configure(const std::map<std::string, double>& params) {
  rho_configured_ = params.contains("rho");
  return param_spec{"policy \"aptserve\""}
    .number("ttft_slo_s", ttft_slo_s_)
    .number("rho", rho_)
    .flag("fallback", fallback_)
    .number("violated_decay", decay_, 0, 1)
    .number("tbt_slo_s", tbt_slo_s_)
    .flag("decode_side", decode_side_)
    .flag("retype", retype_)
    .flag("preempt_unselected", preempt_unselected_)
    .apply(params);
}

void aptserve_scheduling_policy::on_calibration(const cost_calibration& c) {
  if (!rho_configured_ && c.hidden_page_seconds > 0)
    rho_ = c.hidden_page_seconds;
}

std::vector<std::pair<std::string, double>> aptserve_scheduling_policy::counters() const {
  return {{"aptserve_hidden_admitted", static_cast<double>(hidden_admitted_)},
          {"aptserve_kv_admitted", static_cast<double>(kv_admitted_)},
          {"aptserve_fallbacks", static_cast<double>(fallbacks_)},
          {"aptserve_decode_rounds", static_cast<double>(decode_rounds_)},
          {"aptserve_decode_preempted", static_cast<double>(decode_preempted_)}};
}

namespace {

/// p: since the last token, or since arrival when none came yet.
double pending_of(double now, double arrival, double last_token) {
  return now - (last_token > 0 ? last_token : arrival);
}

} // namespace

apt_params aptserve_scheduling_policy::params_for(const schedule_input& in, std::size_t violated) const {
  apt_params p;
  p.rho = rho_;
  const auto n = in.waiting.size() + in.running.size();
  p.affected = n > violated ? n - violated : 0;
  p.fallback = fallback_;
  p.violated_decay = decay_;
  return p;
}

std::vector<apt_candidate> aptserve_scheduling_policy::running_candidates(const schedule_input& in) const {
  const auto& lim = in.limits;
  std::vector<apt_candidate> out;
  for (const auto& r : in.running) {
    if (!r.started)
      continue; // not prefilled since its admission: not in Apt-Serve's R yet
    apt_candidate c;
    c.request_id = r.request_id;
    c.pending_s = pending_of(in.now_s, r.arrival_s, r.last_token_s);
    c.kv_pages = pages_for(r.context_tokens + 1, 0, lim.page_tokens);
    c.violated = tbt_slo_s_ > 0 && c.pending_s > tbt_slo_s_;
    c.hidden_capable = lim.hidden_page_tokens > lim.page_tokens;
    out.push_back(c);
  }
  return out;
}

void aptserve_scheduling_policy::decode_select(const schedule_input& in, std::span<const apt_candidate> running,
                                               const apt_params& p, schedule_decision& d) {
  // Budget: the whole pool the running requests could hold (what is free
  // plus what they hold), less what the unstarted ones hold.
  std::uint64_t budget = in.limits.free_pages;
  for (const auto& r : in.running)
    if (r.started)
      budget += r.pages;
  auto decode = p;
  decode.fallback = false; // Apt-Serve's decode greedy has no single-request fallback
  const auto sel = apt_greedy(running, budget, decode);
  std::unordered_map<std::uint64_t, bool> kept; // id -> hidden
  for (const auto& ch : sel.chosen)
    kept[ch.request_id] = ch.hidden;
  for (const auto& r : in.running) {
    if (!r.started)
      continue;
    auto k = kept.find(r.request_id);
    // Selected with the other cache type: discarded and prefilled again (the
    // prefill greedy picks its type then). Unselected: kept by default (its
    // pages are already held; a real shortage goes through
    // preempt_for_growth), preempted as in the paper with preempt_unselected.
    const bool retype = k != kept.end() && retype_ && k->second != r.hidden;
    if ((k == kept.end() && preempt_unselected_) || retype) {
      d.squash.push_back(r.request_id);
      ++decode_preempted_;
    }
  }
}

void aptserve_scheduling_policy::preempt_for_growth(const schedule_input& in, schedule_decision& d) {
  if (decode_side_ && d.squash.empty() && d.swap.empty()) {
    // The decode greedy's choice at the margin: the running requests it
    // values least per page go first, only until the shortfall is covered
    // (its break-at-the-first-misfit over the whole batch would preempt
    // every request after the misfit, far more than the growth needs).
    std::vector<std::pair<double, const running_view*>> order;
    for (const auto& r : in.running) {
      if (!r.started)
        continue;
      const double p = pending_of(in.now_s, r.arrival_s, r.last_token_s);
      const bool violated = tbt_slo_s_ > 0 && p > tbt_slo_s_;
      const double m = static_cast<double>(std::max<std::uint64_t>(pages_for(r.context_tokens + 1, 0, in.limits.page_tokens), 1));
      order.emplace_back(violated ? (decay_ > 0 ? decay_ * p / m : 0.0) : p / m, &r);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::uint64_t freed = 0;
    for (const auto& [value, r] : order) {
      if (freed >= in.pages_short)
        break;
      d.squash.push_back(r->request_id);
      freed += r->pages;
      ++decode_preempted_;
    }
  }
  scheduling_policy::preempt_for_growth(in, d); // whatever is still short
}

schedule_decision aptserve_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  const bool hidden_ok = lim.hidden_page_tokens > lim.page_tokens;
  auto& candidates = candidates_;
  candidates.clear();
  candidates.reserve(in.waiting.size());
  std::size_t violated = 0;
  double urgency_w = 0;
  for (const auto& w : in.waiting) {
    apt_candidate c;
    c.request_id = w.request_id;
    c.pending_s = pending_of(in.now_s, w.arrival_s, w.last_token_s);
    c.kv_pages = page_budget::cache_pages(w, lim.page_tokens);
    // Never prefilled: the first-token SLO; preempted: the between-token one.
    const double slo = w.generated == 0 ? ttft_slo_s_ : tbt_slo_s_;
    c.violated = slo > 0 && c.pending_s > slo;
    // A turn that takes its session's K and V over keeps them: a hidden
    // cache would compute its history again.
    c.hidden_capable = hidden_ok && !w.swapped && w.adoptable_pages == 0;
    violated += c.violated ? 1 : 0;
    urgency_w += c.pending_s;
    candidates.push_back(c);
  }
  const auto running = running_candidates(in);
  double urgency_r = 0;
  for (const auto& c : running) {
    violated += c.violated ? 1 : 0;
    urgency_r += c.pending_s;
  }
  const auto p = params_for(in, violated);
  apt_greedy(candidates, lim.free_pages, p, workspace_, selection_);
  const auto& sel = selection_;

  // The greedy budgets KV pages; admission checks the real pages (the hidden
  // cache's own page count, adapters once), the running cap and the tokens.
  std::vector<std::pair<std::uint64_t, bool>> admit;
  std::uint64_t n_running = in.running.size();
  std::uint64_t tokens = n_running;
  page_budget pages{lim.free_pages, in.adapters_in_use};
  for (const auto& ch : sel.chosen) {
    const auto& w = in.waiting[ch.candidate]; // candidates follow the waiting order
    if (n_running >= lim.max_running || (n_running > 0 && tokens + w.prompt_tokens > lim.token_budget))
      break;
    const auto cache = page_budget::cache_pages(w, ch.hidden ? lim.hidden_page_tokens : lim.page_tokens, ch.hidden);
    if (!pages.take_with(w, cache))
      break;
    admit.emplace_back(w.request_id, ch.hidden);
    ++n_running;
    tokens += w.prompt_tokens;
  }

  // The iteration's type (§4.4): the running requests' turn when they are
  // the more urgent or nothing waiting fits; then no admission, and the
  // decode greedy over the whole pool keeps or preempts each of them.
  if (decode_side_ && urgency_r > 0 && (urgency_r > urgency_w || admit.empty())) {
    ++decode_rounds_;
    decode_select(in, running, p, out);
    return out;
  }
  fallbacks_ += sel.fallback ? 1 : 0;
  for (const auto& [id, hidden] : admit) {
    out.admit.push_back(id);
    if (hidden) {
      out.hidden.push_back(id);
      ++hidden_admitted_;
    } else {
      ++kv_admitted_;
    }
  }
  return out;
}

} // namespace troupe::policies
