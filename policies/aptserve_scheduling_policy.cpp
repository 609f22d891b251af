#include "policies/aptserve_scheduling_policy.hpp"

#include "policies/aptserve_greedy.hpp"
#include "policies/params.hpp"

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
    .apply(params);
}

void aptserve_scheduling_policy::on_calibration(const cost_calibration& c) {
  if (!rho_configured_ && c.hidden_page_seconds > 0)
    rho_ = c.hidden_page_seconds;
}

std::vector<std::pair<std::string, double>> aptserve_scheduling_policy::counters() const {
  return {{"aptserve_hidden_admitted", static_cast<double>(hidden_admitted_)},
          {"aptserve_kv_admitted", static_cast<double>(kv_admitted_)},
          {"aptserve_fallbacks", static_cast<double>(fallbacks_)}};
}

schedule_decision aptserve_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  const bool hidden_ok = lim.hidden_page_tokens > lim.page_tokens;
  std::vector<apt_candidate> candidates;
  candidates.reserve(in.waiting.size());
  std::size_t violated = 0;
  std::unordered_map<std::uint64_t, const waiting_view*> by_id;
  for (const auto& w : in.waiting) {
    apt_candidate c;
    c.request_id = w.request_id;
    c.pending_s = in.now_s - w.arrival_s;
    c.kv_pages = page_budget::cache_pages(w, lim.page_tokens);
    c.violated = ttft_slo_s_ > 0 && c.pending_s > ttft_slo_s_;
    c.hidden_capable = hidden_ok;
    violated += c.violated ? 1 : 0;
    candidates.push_back(c);
    by_id.emplace(w.request_id, &w);
  }
  apt_params p;
  p.rho = rho_;
  p.affected = in.waiting.size() + in.running.size() - violated;
  p.fallback = fallback_;
  p.violated_decay = decay_;
  const auto sel = apt_greedy(candidates, lim.free_pages, p);
  fallbacks_ += sel.fallback ? 1 : 0;

  // The greedy budgets KV pages; admission checks the real pages (the hidden
  // cache's own page count, adapters once), the running cap and the tokens.
  std::uint64_t running = in.running.size();
  std::uint64_t tokens = running;
  page_budget pages{lim.free_pages, in.adapters_in_use};
  for (const auto& ch : sel.chosen) {
    const auto& w = *by_id.at(ch.request_id);
    if (running >= lim.max_running || (running > 0 && tokens + w.prompt_tokens > lim.token_budget))
      break;
    const auto cache = page_budget::cache_pages(w, ch.hidden ? lim.hidden_page_tokens : lim.page_tokens);
    if (!pages.take_with(w, cache))
      break;
    out.admit.push_back(w.request_id);
    if (ch.hidden) {
      out.hidden.push_back(w.request_id);
      ++hidden_admitted_;
    } else {
      ++kv_admitted_;
    }
    ++running;
    tokens += w.prompt_tokens;
  }
  return out;
}

} // namespace troupe::policies
