// AdaptiveLLM's fairness scheduling (registered as "adaptive"), from
// adaptivellm.md: priority P = (now − first arrival) / current length.
// Each iteration (Algorithm 2) the highest-priority prefix that fits is
// formed from the swapped-out requests and from the requests to prefill;
// the set with the higher mean priority is admitted (swap-ins win ties).
// When the most urgent waiting request does not fit, running requests of
// lower priority make room, lowest first (Algorithm 1): each is swapped out
// to the host pool when it has room and the predicted swap time (bandwidths
// measured at start-up) is below the predicted recompute time (a quadratic
// fitted on prefills timed at start-up), else dropped for recompute.
// `preempt_margin` m preempts a victim only when the waiting request's
// priority exceeds m times the victim's (m = 0: always); at most
// `max_preemptions` per iteration. Uncalibrated, it always recomputes.
#pragma once

#include "policies/adaptive_preemption.hpp"
#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

class adaptive_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "adaptive"; }
  /// Keys: "preempt_margin" (2), "max_preemptions" (per iteration, 4),
  /// "mode" (0: swap or recompute by predicted cost; 1: always recompute;
  /// 2: always swap when the host pool has room: the papers' baselines).
  std::string configure(const std::map<std::string, double>& params) override;
  bool wants_calibration() const noexcept override { return true; }
  /// Swap bandwidths and the recompute regression from the backend.
  void on_calibration(const cost_calibration& c) override;
  /// Algorithm 1 when running requests cannot grow: victims lowest
  /// priority first (the short requests themselves included), swap or
  /// recompute as above.
  void preempt_for_growth(const schedule_input& in, schedule_decision& d) override;
  std::vector<std::pair<std::string, double>> counters() const override;

  const swap_model& swap() const noexcept { return swap_; }
  const recompute_model& recompute() const noexcept { return recompute_; }

private:
  swap_model swap_for_mode() const;
  recompute_model recompute_for_mode() const;

  double margin_ = 2.0;
  std::size_t max_preemptions_ = 4;
  std::size_t mode_ = 0;
  swap_model swap_;
  recompute_model recompute_;
  std::uint64_t preempted_ = 0;
  std::uint64_t swaps_ = 0;
  std::uint64_t swap_in_rounds_ = 0;
};

} // namespace troupe::policies
