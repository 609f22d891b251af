// Chameleon's non-preemptive multi-queue scheduler (§4.4-4.6; registered as
// "chameleon"). Requests sit in up to 4 queues by weighted request size (the
// classifier assigns waiting_view::queue). Each queue has a token quota
// covering input, predicted output and adapter memory (from a queue tuner;
// one queue holding the whole pool until the first tuning). Every iteration:
//   phase 1  each queue admits in arrival order within its own quota, and a
//            queue with nothing running may always start its head (a large
//            request can never be starved by a small quota);
//   phase 2  the quota left by queues that emptied is pooled and handed out
//            from the small-request queue down, skipping a queue whose head
//            does not fit.
// With "max_wait_s" set, a phase 0 comes first: requests that have waited
// that long are admitted oldest first whatever their queue's quota; when the
// oldest does not fit, only requests predicted to end before the running
// ones free its pages start (and run on if they overrun), so it waits about
// that long and no longer (a bound on starvation that Chameleon lacks).
// Memory, the running cap and the token budget bound every admission. A head
// blocked on adapter memory may be bypassed by a younger request of its queue
// that fits now and is predicted to finish before the head could start; a
// bypasser that overruns its prediction is squashed (re-queued), counted.
#pragma once

#include "policies/scheduling_policy.hpp"

#include <unordered_map>

namespace troupe::policies {

class chameleon_scheduling_policy final : public scheduling_policy {
public:
  schedule_decision schedule(const schedule_input& in) override;
  std::string_view name() const noexcept override { return "chameleon"; }
  /// Keys: "bypass" (1: on, 0: off), "bypass_lookahead" (requests searched
  /// behind a blocked head, 64), "pool_all_spare" (0: phase 2 pools only the
  /// quota of queues left empty, as the paper's example; 1: every queue's
  /// unused quota), "max_wait_s" (seconds after which a waiting request
  /// goes first; 0, the default: never).
  std::string configure(const std::map<std::string, double>& params) override;
  void on_tuning(const queue_tuning& t) override { tuning_ = t; }
  std::vector<std::pair<std::string, double>> counters() const override;
  std::vector<std::pair<std::string, double>> gauges() const override;

  /// Token cost of a request against its queue's quota: input + predicted
  /// output + its adapter's memory in tokens.
  static std::uint64_t cost(std::uint32_t prompt, std::uint32_t predicted, std::uint64_t adapter_pages,
                            std::uint32_t page_tokens) noexcept {
    return std::uint64_t{prompt} + predicted + adapter_pages * page_tokens;
  }

  const queue_tuning& tuning() const noexcept { return tuning_; }
  std::uint64_t bypassed() const noexcept { return bypassed_; }
  std::uint64_t squashed() const noexcept { return squashed_; }

private:
  queue_tuning tuning_;
  bool bypass_ = true;
  bool pool_all_spare_ = false;
  std::size_t lookahead_ = 64;
  /// Running bypassers: id -> generated tokens by which they must finish.
  std::unordered_map<std::uint64_t, std::uint32_t> bypassers_;
  std::uint64_t bypassed_ = 0;
  std::uint64_t squashed_ = 0;
  double max_wait_s_ = 0;
  std::uint64_t overdue_ = 0;
  std::uint64_t held_ = 0;
};

} // namespace troupe::policies
