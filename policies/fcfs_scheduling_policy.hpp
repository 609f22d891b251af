// First-come-first-served admission under a token budget, a cap on running
// requests and the free page count. The baseline every other policy is
// compared against; registered as "fcfs".
#pragma once

#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

/// Admits waiting requests strictly in arrival order and stops at the first
/// that does not fit, so no request is ever overtaken (no starvation).
class fcfs_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "fcfs"; }
};

} // namespace troupe::policies
