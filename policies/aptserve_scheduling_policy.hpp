// Apt-Serve's admission (registered as "aptserve"): every iteration the
// waiting requests are valued by their pending time (p = now − arrival;
// requests already past the first-token SLO are demoted) and chosen by the
// greedy of policies/aptserve_greedy within the free pages: a request may
// join with a hidden cache (about half the pages, K and V recomputed each
// step at a cost of ρ seconds per page to everyone) where the backend keeps
// hidden caches, or with a KV cache. This is the prefill side of Apt-Serve
// under worst-case admission; the decode-side selection (which running
// requests keep running, preempting the rest) is not built yet.
#pragma once

#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

class aptserve_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "aptserve"; }
  /// Keys: "ttft_slo_s" (1), "rho" (seconds a hidden page adds to a step,
  /// 0.0005), "fallback" (1: Algorithm 1's single-request alternative),
  /// "violated_decay" (0: demote late requests to a near-zero value; 0.4:
  /// Apt-Serve's Scheduling*, which keeps 40% of their value).
  std::string configure(const std::map<std::string, double>& params) override;
  bool wants_calibration() const noexcept override { return true; }
  /// ρ measured on the backend, unless "rho" was configured.
  void on_calibration(const cost_calibration& c) override;
  double rho() const noexcept { return rho_; }
  std::vector<std::pair<std::string, double>> counters() const override;

private:
  double ttft_slo_s_ = 1.0;
  double rho_ = 0.0005;
  bool rho_configured_ = false;
  bool fallback_ = true;
  double decay_ = 0;
  std::uint64_t hidden_admitted_ = 0;
  std::uint64_t kv_admitted_ = 0;
  std::uint64_t fallbacks_ = 0;
};

} // namespace troupe::policies
