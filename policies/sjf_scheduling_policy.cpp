#include "policies/sjf_scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>

namespace troupe::policies {

std::string sjf_scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"sjf\""}.number("aging_tokens_per_s", aging_).apply(params);
}

double sjf_scheduling_policy::key(const waiting_view& w, double aging_tokens_per_s) noexcept {
  const std::uint32_t predicted = std::max(w.predicted_tokens, 1u);
  const std::uint32_t remaining = predicted > w.generated ? predicted - w.generated : 1u;
  return static_cast<double>(remaining) + aging_tokens_per_s * w.arrival_s;
}

schedule_decision sjf_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  batch_admission batch{in};
  const auto cap = static_cast<std::uint64_t>(in.limits.max_running);
  if (in.waiting.empty() || batch.running() >= cap)
    return out;
  // At most `room` requests can join, so only the `room` smallest keys are
  // ever looked at: a partial sort keeps a long queue at about one pass, not
  // a full sort. Equal keys go in arrival order (the index breaks ties).
  order_.clear();
  order_.reserve(in.waiting.size());
  for (std::size_t i = 0; i < in.waiting.size(); ++i)
    order_.emplace_back(key(in.waiting[i], aging_), i);
  const auto room = std::min<std::uint64_t>(cap - batch.running(), order_.size());
  const auto looked_at = order_.begin() + static_cast<std::ptrdiff_t>(room);
  std::partial_sort(order_.begin(), looked_at, order_.end());
  for (auto it = order_.begin(); it != looked_at; ++it)
    if (!batch.admit(in.waiting[it->second], out))
      break;
  return out;
}

} // namespace troupe::policies
