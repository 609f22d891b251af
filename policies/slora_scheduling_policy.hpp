// S-LoRA's admission (registered as "slora"): memory-safe first-come-first-
// served admission (a request's worst-case KV plus its adapter's pages, once
// per adapter, must fit), with two options from S-LoRA §6.2-6.3:
//   cluster = k   once the batch holds k distinct adapters, admit first the
//                 requests for those adapters, then fall back to arrival order
//   slo_s = t     early abort: a waiting request that can no longer return
//                 its first token within t seconds (waited + 0.5 s >= t) is
//                 ended; under overload (estimated arrivals per iteration at
//                 least the estimated admitted batch) admit newest first
#pragma once

#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

class slora_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "slora"; }
  /// Keys: "cluster" (0: off), "slo_s" (0: off), "abort_margin_s" (0.5).
  std::string configure(const std::map<std::string, double>& params) override;
  std::vector<std::pair<std::string, double>> counters() const override;

  std::uint32_t cluster() const noexcept { return cluster_; }
  double slo_s() const noexcept { return slo_s_; }

private:
  std::uint32_t cluster_ = 0;
  double slo_s_ = 0;
  double margin_s_ = 0.5;
  // Moving estimates for the abort mode's scan order.
  double rate_est_ = 0;
  double bs_est_ = 1;
  double last_now_ = -1;
  std::uint64_t aborted_ = 0;
  std::uint64_t newest_first_rounds_ = 0;
};

} // namespace troupe::policies
