// Priority scheduling (vLLM's --scheduling-policy priority; registered as
// "priority"): waiting requests are admitted by their `priority` (the
// wire's, higher first: docs/protocol.md), then in arrival order, stopping
// at the first that does not fit, as fcfs does. Where that request does not
// fit and running requests of a lower priority have run a step, the fewest
// of them that make room for it are preempted (recomputed later): the
// lowest priority first, the latest arrival first among equals; it is
// admitted by a later decision, once they have left, and while requests
// chosen before are still leaving with room enough, no other is chosen. A
// request never waits for long behind less urgent ones.
// Requests of one priority are served exactly as fcfs serves them. Running
// requests short of pages (on-demand reservation) give way the same way:
// the lowest priority first.
#pragma once

#include "policies/scheduling_policy.hpp"

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace troupe::policies {

class priority_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "priority"; }
  /// Keys: "preempt" (1, the default: running requests of a lower priority
  /// make room for a waiting one; 0: admission order alone).
  std::string configure(const std::map<std::string, double>& params) override;
  void preempt_for_growth(const schedule_input& in, schedule_decision& d) override;

private:
  bool preempt_ = true;
  /// Reused across calls: waiting indices in admission order.
  std::vector<std::size_t> order_;
};

} // namespace troupe::policies
