#include "policies/sjf_scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>
#include <functional>

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
  // A min-heap over (key, arrival index): building it is linear and only the
  // requests looked at until the first that does not fit are popped, so a
  // long queue costs O(n + admitted log n) per iteration, not a sort. Equal
  // keys go in arrival order.
  heap_.clear();
  heap_.reserve(in.waiting.size());
  for (std::size_t i = 0; i < in.waiting.size(); ++i)
    heap_.emplace_back(key(in.waiting[i], aging_), i);
  const auto later = std::greater<>{};
  std::make_heap(heap_.begin(), heap_.end(), later);
  batch_admission batch{in};
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const auto next = heap_.back().second;
    heap_.pop_back();
    if (!batch.admit(in.waiting[next], out))
      break;
  }
  return out;
}

} // namespace troupe::policies
