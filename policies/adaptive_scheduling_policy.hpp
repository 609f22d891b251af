// AdaptiveLLM's fairness scheduling (registered as "adaptive"): waiting
// requests are admitted by priority P = (now − arrival) / length, highest
// first, as many as fit; when the most urgent one does not fit, running
// requests of lower priority are preempted, lowest first, until it would:
// dropped for recompute (policies/adaptive_preemption chooses swap when a host
// pool and the copy engine's swap path are available; this policy recomputes).
// A preempted request keeps its output and continues after a prefill of
// prompt + output. `preempt_margin` m preempts a victim only when the waiting
// request's priority exceeds m times the victim's (m = 0: always).
#pragma once

#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

class adaptive_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "adaptive"; }
  /// Keys: "preempt_margin" (2), "max_preemptions" (per iteration, 4).
  std::string configure(const std::map<std::string, double>& params) override;
  std::vector<std::pair<std::string, double>> counters() const override;

private:
  double margin_ = 2.0;
  std::size_t max_preemptions_ = 4;
  std::uint64_t preempted_ = 0;
};

} // namespace troupe::policies
