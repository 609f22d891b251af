#include "policies/fcfs_scheduling_policy.hpp"

namespace troupe::policies {

schedule_decision fcfs_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  const auto& lim = in.limits;
  std::uint64_t running = in.running.size();
  // Every running request decodes one token this step.
  std::uint64_t tokens = running;
  std::uint64_t pages = lim.free_pages;
  for (const auto& w : in.waiting) {
    if (running >= lim.max_running)
      break;
    const auto need = pages_for(w.prompt_tokens, w.max_new_tokens, lim.page_tokens);
    if (need > pages)
      break;
    const bool alone = running == 0;
    if (!alone && tokens + w.prompt_tokens > lim.token_budget)
      break;
    out.admit.push_back(w.request_id);
    ++running;
    tokens += w.prompt_tokens;
    pages -= need;
  }
  return out;
}

} // namespace troupe::policies
