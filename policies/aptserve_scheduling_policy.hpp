// Apt-Serve's scheduler (registered as "aptserve"), aptserve.md §4. Each
// iteration every request is valued by its pending time p (since its last
// token, or since arrival before its first; requests past their SLO, TTFT
// before the first token and TBT after, are demoted). The greedy of
// policies/aptserve_greedy chooses among the waiting requests within the
// free pages, each with a hidden cache (about half the pages; K and V
// recomputed every step at ρ seconds per page to everyone) where the backend
// keeps hidden caches, or with a KV cache. The iteration's type (§4.4): when
// the running requests' summed pending time exceeds the waiting ones', or
// nothing waiting fits, it is the running requests' turn: nothing is
// admitted, and the decode greedy over the whole pool chooses each running
// request's cache type (a request kept with the other type is discarded and
// prefilled again; one left out is preempted only with preempt_unselected).
// Under on-demand reservation, when requests cannot grow, the running
// requests the greedy values least per page are preempted until the
// shortfall is covered. ρ is measured on the backend at start-up unless
// configured.
#pragma once

#include "policies/aptserve_greedy.hpp"
#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

class aptserve_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "aptserve"; }
  /// Keys: "ttft_slo_s" (1), "tbt_slo_s" (1), "rho" (seconds a hidden page
  /// adds to a step; measured when absent), "fallback" (1: Algorithm 1's
  /// single-request alternative), "violated_decay" (0: demote late requests
  /// to a near-zero value; 0.4: Apt-Serve's Scheduling*, which keeps 40% of
  /// their value), "decode_side" (1: the iteration-type choice and the decode
  /// greedy; 0: admissions only), "retype" (1: a running request the decode
  /// greedy keeps with the other cache type is prefilled again with it),
  /// "preempt_unselected" (0: a running request the decode greedy leaves out
  /// keeps running on the pages it holds; 1: preempted, as in the paper,
  /// which in this mixed prefill/decode engine costs far more recomputes
  /// than it saves: docs/benchmarks.md).
  std::string configure(const std::map<std::string, double>& params) override;
  bool wants_calibration() const noexcept override { return true; }
  /// ρ measured on the backend, unless "rho" was configured.
  void on_calibration(const cost_calibration& c) override;
  /// The decode greedy over the whole pool chooses the survivors.
  void preempt_for_growth(const schedule_input& in, schedule_decision& d) override;
  double rho() const noexcept { return rho_; }
  std::vector<std::pair<std::string, double>> counters() const override;

private:
  apt_params params_for(const schedule_input& in, std::size_t violated) const;
  std::vector<apt_candidate> running_candidates(const schedule_input& in) const;
  void decode_select(const schedule_input& in, std::span<const apt_candidate> running, const apt_params& p,
                     schedule_decision& d);

  double ttft_slo_s_ = 1.0;
  double tbt_slo_s_ = 1.0;
  double rho_ = 0.0005;
  bool rho_configured_ = false;
  bool fallback_ = true;
  bool decode_side_ = true;
  bool retype_ = true;
  bool preempt_unselected_ = false;
  double decay_ = 0;
  std::uint64_t hidden_admitted_ = 0;
  std::uint64_t kv_admitted_ = 0;
  std::uint64_t fallbacks_ = 0;
  std::uint64_t decode_rounds_ = 0;
  std::uint64_t decode_preempted_ = 0;
  // Per-iteration buffers, kept so that a long queue allocates nothing.
  std::vector<apt_candidate> candidates_;
  apt_workspace workspace_;
  apt_selection selection_;
};

} // namespace troupe::policies
