// Tests for AdaptiveLLM's decisions: the fairness priority and set priority,
// victims lowest priority first until enough pages, swap only with host room
// and when predicted cheaper, the predictors (a quadratic fit recovers its
// coefficients; MAPE).
#include "policies/adaptive_preemption.hpp"

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

} // namespace
} // namespace troupe::policies
