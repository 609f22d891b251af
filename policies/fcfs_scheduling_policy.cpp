#include "policies/fcfs_scheduling_policy.hpp"

namespace troupe::policies {

schedule_decision fcfs_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  std::uint64_t running = in.running.size();
  // Every running request decodes one token this step.
  std::uint64_t tokens = running;
  page_budget pages{lim.free_pages, in.adapters_in_use};
  for (const auto& w : in.waiting) {
    if (running >= lim.max_running)
      break;
    const bool alone = running == 0;
    if (!alone && tokens + w.prompt_tokens > lim.token_budget)
      break;
    if (!pages.take(w, lim.page_tokens))
      break;
    out.admit.push_back(w.request_id);
    ++running;
    tokens += w.prompt_tokens;
  }
  return out;
}

} // namespace troupe::policies
