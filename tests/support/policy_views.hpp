// Test support: the policy views scheduling-policy tests feed in, with roomy
// limits unless a test says otherwise.
#pragma once

#include "policies/scheduling_policy.hpp"

#include <cstdint>
#include <vector>

namespace troupe::testing {

/// A waiting request of `prompt` tokens that may produce `max_new`.
inline policies::waiting_view waiting(std::uint64_t id, std::uint32_t prompt, std::uint32_t max_new,
                                      double arrival = 0) {
  policies::waiting_view v;
  v.request_id = id;
  v.prompt_tokens = prompt;
  v.max_new_tokens = max_new;
  v.predicted_tokens = max_new;
  v.arrival_s = arrival;
  return v;
}

/// One iteration's input: the views (kept by reference: they must outlive
/// the call), `free_pages` free, 64 running at most, a token budget that
/// never binds, 16-token pages.
inline policies::schedule_input schedule_at(double now, const std::vector<policies::waiting_view>& w,
                                            const std::vector<policies::running_view>& r,
                                            std::uint64_t free_pages,
                                            const std::vector<std::uint32_t>& in_use = {},
                                            std::uint32_t hidden_page_tokens = 0) {
  policies::schedule_input in;
  in.waiting = w;
  in.running = r;
  in.adapters_in_use = in_use;
  in.limits.max_running = 64;
  in.limits.token_budget = 100000;
  in.limits.free_pages = free_pages;
  in.limits.page_tokens = 16;
  in.limits.hidden_page_tokens = hidden_page_tokens;
  in.now_s = now;
  return in;
}

} // namespace troupe::testing
