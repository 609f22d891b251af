// Tests for AdaptiveLLM's decisions: the fairness priority and set priority,
// victims lowest priority first until enough pages, swap only with host room
// and when predicted cheaper, the predictors (a quadratic fit recovers its
// coefficients; MAPE).
#include "policies/adaptive_preemption.hpp"
#include "policies/adaptive_scheduling_policy.hpp"
#include "tests/support/policy_views.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace troupe::policies {
namespace {

TEST(adaptive_priority, waiting_time_over_length) {
  EXPECT_DOUBLE_EQ(adaptive_priority(10, 2, 4), 2.0);
  EXPECT_DOUBLE_EQ(adaptive_priority(10, 2, 0), 8.0) << "length at least 1";
  // A short request's priority rises faster than a long one's.
  EXPECT_GT(adaptive_priority(5, 0, 10), adaptive_priority(5, 0, 1000));
  const std::vector<double> set{1, 2, 6};
  EXPECT_DOUBLE_EQ(mean_priority(set), 3.0);
  EXPECT_EQ(mean_priority({}), -std::numeric_limits<double>::infinity());
}

TEST(adaptive_preemption, victims_lowest_priority_first_swap_or_recompute_by_cost) {
  swap_model swap{1e9, 2e9};             // 1.5 ns per byte there and back
  recompute_model recompute{0, 1e-3, 0}; // 1 ms per token
  // kv_bytes 1e6 -> swap 1.5 ms; recompute 1 ms per token of seq_len.
  const std::vector<preempt_candidate> running{
    {1, 5.0, 10, 1, 1'000'000},   // short: recompute (1 ms) beats swap (1.5 ms)
    {2, 0.1, 10, 100, 1'000'000}, // lowest priority, long: swap (1.5 ms) beats 100 ms
    {3, 2.0, 10, 100, 1'000'000},
  };
  struct row {
    std::string what;
    std::uint64_t short_pages, host_free;
    std::vector<std::pair<std::uint64_t, preempt_mode>> expected;
  };
  using m = preempt_mode;
  const std::vector<row> table{
    {"nothing short: nobody", 0, 100, {}},
    {"one victim: the lowest priority, swapped", 5, 100, {{2, m::swap}}},
    {"two victims in priority order", 15, 100, {{2, m::swap}, {3, m::swap}}},
    {"all three: the short one recomputes", 25, 100, {{2, m::swap}, {3, m::swap}, {1, m::recompute}}},
    {"host pool full: recompute whatever the cost", 5, 5, {{2, m::recompute}}},
    {"host room for one swap only", 15, 10, {{2, m::swap}, {3, m::recompute}}},
    {"more than everything: all of them", 1000, 100, {{2, m::swap}, {3, m::swap}, {1, m::recompute}}},
  };
  for (const auto& r : table) {
    const auto got = choose_preemptions(running, r.short_pages, r.host_free, swap, recompute);
    ASSERT_EQ(got.size(), r.expected.size()) << r.what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].request_id, r.expected[i].first) << r.what;
      EXPECT_EQ(got[i].mode, r.expected[i].second) << r.what;
    }
  }
  // A tie between swap and recompute goes to recompute.
  const std::vector<preempt_candidate> tie{{7, 1, 1, 3, 1'000'000}};
  EXPECT_EQ(choose_preemptions(tie, 1, 10, swap_model{1e9, 1e9}, recompute_model{0, 1e-3 * 2 / 3, 0})[0].mode,
            preempt_mode::recompute);
}

TEST(adaptive_predictors, quadratic_fit_and_mape) {
  std::vector<std::pair<std::uint32_t, double>> points;
  for (std::uint32_t n : {1u, 128u, 512u, 1024u, 2048u, 4096u})
    points.emplace_back(n, 0.002 + 1e-5 * n + 3e-9 * n * static_cast<double>(n));
  const auto fit = recompute_model::fit(points);
  EXPECT_NEAR(fit.a, 0.002, 1e-9);
  EXPECT_NEAR(fit.b, 1e-5, 1e-12);
  EXPECT_NEAR(fit.c, 3e-9, 1e-15);
  EXPECT_NEAR(fit.seconds(3000), 0.002 + 0.03 + 0.027, 1e-9);
  const std::vector<double> predicted{1.1, 1.8, 3.0}, measured{1.0, 2.0, 3.0};
  EXPECT_NEAR(mape(predicted, measured), (10.0 + 10.0 + 0.0) / 3, 1e-9);
  EXPECT_EQ(mape({}, {}), 0.0);
  EXPECT_DOUBLE_EQ(swap_model({1e9, 2e9}).seconds(2'000'000'000), 3.0);
  EXPECT_TRUE(std::isinf(swap_model{}.seconds(1)));
  const std::vector<std::pair<std::uint32_t, double>> too_few{{1, 1.0}, {1, 1.0}};
  const auto degenerate = recompute_model::fit(too_few);
  EXPECT_EQ(degenerate.b, 0.0) << "a singular system gives the zero model";
}

// -- the adaptive scheduling policy ---------------------------------------------------

waiting_view wv(std::uint64_t id, std::uint32_t prompt, double arrival, std::uint32_t max_new = 16) {
  return testing::waiting(id, prompt, max_new, arrival);
}

running_view rv(std::uint64_t id, std::uint32_t context, double arrival, std::uint64_t pages) {
  running_view v;
  v.request_id = id;
  v.context_tokens = context;
  v.arrival_s = arrival;
  v.pages = pages;
  v.started = true;
  return v;
}

schedule_input at(double now, const std::vector<waiting_view>& w, const std::vector<running_view>& r,
                  std::uint64_t free_pages) {
  return testing::schedule_at(now, w, r, free_pages);
}

TEST(adaptive_scheduling_policy, admits_by_priority_and_preempts_lower_priority_runners) {
  adaptive_scheduling_policy p;
  // now 10: priorities 1: 9/16 = 0.56; 2: 2/16 = 0.125; 3: 9/144 = 0.06.
  const std::vector<waiting_view> w{wv(1, 16, 1), wv(2, 16, 8), wv(3, 144, 1)};
  // 2 pages each for 1 and 2 (16 + 16 tokens), 10 for 3.
  auto d = p.schedule(at(10, w, {}, 100));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{1, 2, 3})) << "highest priority first";
  d = p.schedule(at(10, w, {}, 3));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{1})) << "stops at the first that does not fit";
  EXPECT_TRUE(d.squash.empty()) << "nothing running to preempt";
  // Blocked with runners: request 1 (P 0.56) needs 2 pages, 0 free. Runner 8
  // (P 9/900 = 0.01, 3 pages) goes; runner 9 (P 9/10 = 0.9) outranks it.
  const std::vector<running_view> r{rv(8, 900, 1, 3), rv(9, 10, 1, 3)};
  d = p.schedule(at(10, {wv(1, 16, 1)}, r, 0));
  EXPECT_TRUE(d.admit.empty());
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{8}));
  // The margin: 0.56 must exceed 2 × the victim's priority; 0.3 does not qualify.
  const std::vector<running_view> close{rv(8, 30, 1, 3)}; // P 0.3
  EXPECT_TRUE(p.schedule(at(10, {wv(1, 16, 1)}, close, 0)).squash.empty());
  ASSERT_EQ(p.configure({{"preempt_margin", 0}}), "");
  EXPECT_EQ(p.schedule(at(10, {wv(1, 16, 1)}, close, 0)).squash, (std::vector<std::uint64_t>{8}));
  // Never one that has not run a step since its admission.
  auto fresh = rv(8, 900, 1, 3);
  fresh.started = false;
  EXPECT_TRUE(p.schedule(at(10, {wv(1, 16, 1)}, {fresh}, 0)).squash.empty());
  // Never preempt when it would not make room.
  const std::vector<running_view> tiny{rv(8, 900, 1, 1)};
  EXPECT_TRUE(p.schedule(at(10, {wv(1, 16, 1)}, tiny, 0)).squash.empty());
  // A preempted request resumes with its output counted in its length.
  auto resumed = wv(5, 16, 1);
  resumed.generated = 144; // P 9/160, below request 6's 2/16
  d = p.schedule(at(10, {resumed, wv(6, 16, 8)}, {}, 100));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{6, 5}));
  EXPECT_NE(p.configure({{"margin", 1}}), "");
}

waiting_view swapped_wv(std::uint64_t id, std::uint32_t prompt, std::uint32_t generated, double arrival,
                        std::uint64_t pages) {
  auto v = wv(id, prompt, arrival);
  v.generated = generated;
  v.swapped = true;
  v.pages = pages;
  return v;
}

TEST(adaptive_scheduling_policy, algorithm_2_admits_the_set_with_the_higher_mean_priority) {
  adaptive_scheduling_policy p;
  // now 10. Swapped 1: P 10/(16+4) = 0.5, takes 2 pages back; swapped 2:
  // P 10/(16+984) = 0.01. Fresh 3: P 10/32 = 0.31 (3 pages).
  const std::vector<waiting_view> w{swapped_wv(1, 16, 4, 0, 2), swapped_wv(2, 16, 984, 0, 2), wv(3, 32, 0)};
  // Everything fits: swap-in set {1, 2} (mean 0.255) against prefill set
  // {3} (0.31): the prefill goes, although swapped 1 is the most urgent.
  auto d = p.schedule(at(10, w, {}, 100));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{3}));
  // Room for only 2 pages: the swap-in set is {1} (0.5); the prefill set is
  // empty (3 needs 3 pages): swap in.
  d = p.schedule(at(10, w, {}, 2));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{1}));
  // Ties go to the swap-ins.
  const std::vector<waiting_view> tie{swapped_wv(1, 16, 0, 0, 2), wv(3, 16, 0)};
  d = p.schedule(at(10, tie, {}, 100));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{1}));
  // A swap-in costs one token of the budget, a prefill its whole prompt.
  const std::vector<waiting_view> two{swapped_wv(1, 16, 0, 0, 2), swapped_wv(2, 16, 0, 0, 2)};
  const std::vector<running_view> one{rv(9, 100, 0, 1)};
  auto in = at(10, two, one, 100);
  in.limits.token_budget = 3;
  EXPECT_EQ(p.schedule(in).admit, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(p.counters()[2].second, 3.0) << "swap-in rounds";
}

TEST(adaptive_scheduling_policy, preempts_by_swap_when_calibrated_cheaper_and_the_host_has_room) {
  adaptive_scheduling_policy p;
  const std::vector<waiting_view> w{wv(1, 16, 1)};
  // Victim 8: 900 tokens in 3 pages of 1 MB.
  const std::vector<running_view> r{rv(8, 900, 1, 3)};
  auto in = at(10, w, r, 0);
  in.limits.page_bytes = 1 << 20;
  in.limits.host_free_pages = 10;
  // Uncalibrated: no swap model, always recompute.
  auto d = p.schedule(in);
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{8}));
  EXPECT_TRUE(d.swap.empty());
  // Calibrated: 3 MB out and back at 1 GB/s each takes 6.3 ms; recomputing
  // 900 tokens at 1 ms per token takes 900 ms: swap.
  cost_calibration c;
  c.d2h_bytes_per_s = c.h2d_bytes_per_s = 1e9;
  c.prefill_points = {{100, 0.1}, {200, 0.2}, {400, 0.4}, {800, 0.8}};
  p.on_calibration(c);
  EXPECT_NEAR(p.recompute().seconds(900), 0.9, 1e-4);
  d = p.schedule(in);
  EXPECT_EQ(d.swap, (std::vector<std::uint64_t>{8}));
  EXPECT_TRUE(d.squash.empty());
  // No room in the host pool: recompute after all.
  in.limits.host_free_pages = 2;
  d = p.schedule(in);
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{8}));
  // A slow link makes the recompute cheaper.
  c.d2h_bytes_per_s = c.h2d_bytes_per_s = 1e6;
  p.on_calibration(c);
  in.limits.host_free_pages = 10;
  d = p.schedule(in);
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{8}));
  EXPECT_EQ(p.counters()[1].second, 1.0) << "swaps chosen";
}

} // namespace
} // namespace troupe::policies
