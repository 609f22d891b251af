// Speculative shortest-job-first (µ-Serve's SSJF, the SJF baseline of
// Chameleon's evaluation; registered as "sjf"). Waiting requests are admitted
// in order of predicted remaining output (the classifier's prediction less
// what a preempted request already produced), shortest first, stopping at
// the first that does not fit; memory, batching and preemption are the
// engine's as under fcfs. Aging keeps a long request from waiting for ever
// behind a stream of short ones: every second of waiting takes
// `aging_tokens_per_s` off its predicted length, so a request is passed only
// by later arrivals predicted shorter by more than that rate times the time
// between the two arrivals.
#pragma once

#include "policies/scheduling_policy.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace troupe::policies {

class sjf_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "sjf"; }
  /// Keys: "aging_tokens_per_s" (predicted tokens a second of waiting is
  /// worth; default 1, 0: pure SJF, no aging).
  std::string configure(const std::map<std::string, double>& params) override;

  /// The order key of `w` (lower goes first): predicted remaining output
  /// less aging over its wait, which at a common clock reduces to remaining
  /// + aging * arrival.
  static double key(const waiting_view& w, double aging_tokens_per_s) noexcept;

private:
  double aging_ = 1.0;
  /// Reused across calls: (key, index in arrival order).
  std::vector<std::pair<double, std::size_t>> order_;
};

} // namespace troupe::policies
