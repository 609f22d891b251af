// Priority scheduling (vLLM's --scheduling-policy priority; registered as
// "priority"): waiting requests are admitted by their `priority` (the
// wire's, higher first: docs/protocol.md), then in arrival order, stopping
// at the first that does not fit, as fcfs does. Where that request does not
// fit and running requests of a lower priority have run a step, the fewest
// of them that make room for it are preempted: the lowest priority first,
// the latest arrival first among equals, each swapped out where the host
// pool has room and the start-up measurements predict the swap quicker than
// the recompute (AdaptiveLLM's rule), else recomputed later. It is admitted
// by a later decision, once they have left, and while requests chosen
// before are still leaving with room enough, no other is chosen. A request
// never waits for long behind less urgent ones. But where running requests
// that end within `patience_steps` steps on their own make the room, it
// waits for them instead: a recompute throws its victim's work away, and
// under sustained load vLLM's way (preempting at once) starves the less
// urgent class and costs throughput (docs/benchmarks.md).
// Requests of one priority are served exactly as fcfs serves them. Running
// requests short of pages (on-demand reservation) give way the same way:
// the lowest priority first, swapped out by the same rule.
#pragma once

#include "policies/adaptive_preemption.hpp"
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
  /// make room for a waiting one; 0: admission order alone);
  /// "patience_steps" (8: no preemption where running requests ending
  /// within that many steps, by their tokens left, make the room; 0: none
  /// waited for, as vLLM does); "swap" (1: a victim whose swap out and
  /// back is predicted quicker than its recompute, where the host pool has
  /// room, is swapped out and resumes where it was; 0: every victim is
  /// recomputed).
  std::string configure(const std::map<std::string, double>& params) override;
  void preempt_for_growth(const schedule_input& in, schedule_decision& d) override;
  /// With "swap" (the default), the start-up measurements decide whether a
  /// victim is swapped out or recomputed (AdaptiveLLM's rule).
  bool wants_calibration() const noexcept override { return swap_; }
  void on_calibration(const cost_calibration& c) override;

private:
  bool preempt_ = true;
  std::uint32_t patience_steps_ = 8;
  bool swap_ = true;
  swap_model swap_model_;
  recompute_model recompute_model_;
  /// Reused across calls: waiting indices in admission order.
  std::vector<std::size_t> order_;
};

} // namespace troupe::policies
