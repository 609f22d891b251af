// Tests for policies/prefetch_policy: the histogram predictor's windows from
// idle-time percentiles, its fixed keep-alive fallback, expiry, ordering and
// max_count, configure(), the registry, and its accuracy on a synthetic
// periodic workload.
#include "policies/prefetch_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace troupe::policies {
namespace {

bool contains(const std::vector<std::uint32_t>& v, std::uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(histogram_prefetch_policy, a_periodic_adapter_is_wanted_around_its_next_arrival) {
  histogram_prefetch_policy p;
  // Every 10 s: gaps all fall in bin [10, 11).
  for (double t = 0; t <= 50; t += 10)
    p.on_request(7, t);
  const auto [from, until] = p.window(7);
  EXPECT_DOUBLE_EQ(from, 50 + 10) << "pre-warm: the low percentile's bin start";
  EXPECT_DOUBLE_EQ(until, 50 + 11) << "keep-alive: the high percentile's bin end";
  struct row {
    double at;
    bool wanted;
  };
  for (auto r : {row{55, false}, row{59.9, false}, row{60, true}, row{60.5, true}, row{61, true}})
    EXPECT_EQ(contains(p.predict(r.at, 10), 7), r.wanted) << "at " << r.at;
  EXPECT_FALSE(contains(p.predict(61.5, 10), 7)) << "the window passed";
  EXPECT_FALSE(contains(p.predict(60.5, 10), 7)) << "and stays gone until the next arrival";
}

TEST(histogram_prefetch_policy, few_or_scattered_samples_use_the_fixed_keep_alive) {
  histogram_prefetch_policy p;
  p.on_request(1, 0);
  p.on_request(1, 10); // one gap: below min_samples
  auto [from, until] = p.window(1);
  EXPECT_DOUBLE_EQ(from, 10);
  EXPECT_DOUBLE_EQ(until, 10 + 60);
  EXPECT_TRUE(contains(p.predict(10, 5), 1));
  EXPECT_TRUE(contains(p.predict(69, 5), 1));
  EXPECT_FALSE(contains(p.predict(71, 5), 1));
  // Gaps beyond the histogram's range (600 s) are out of range: fallback.
  for (double t = 0; t <= 5000; t += 1000)
    p.on_request(2, t);
  std::tie(from, until) = p.window(2);
  EXPECT_DOUBLE_EQ(from, 5000);
  EXPECT_DOUBLE_EQ(until, 5060);
}

TEST(histogram_prefetch_policy, orders_by_window_start_then_busier_and_caps_the_count) {
  histogram_prefetch_policy p;
  // Fallback windows start at the last arrival.
  p.on_request(3, 5);
  p.on_request(1, 2);
  p.on_request(2, 2);
  p.on_request(2, 2); // 2 arrived twice at t=2
  EXPECT_EQ(p.predict(6, 10), (std::vector<std::uint32_t>{2, 1, 3}));
  EXPECT_EQ(p.predict(6, 2), (std::vector<std::uint32_t>{2, 1}));
  EXPECT_TRUE(p.predict(1, 10).empty()) << "nothing has started yet";
  EXPECT_TRUE(none_prefetch_policy{}.predict(6, 10).empty());
}

TEST(histogram_prefetch_policy, configure_and_registry) {
  histogram_prefetch_policy p;
  EXPECT_EQ(p.configure({{"bin_seconds", 0.5}, {"fallback_keepalive_s", 5}}), "");
  p.on_request(1, 0);
  EXPECT_DOUBLE_EQ(p.window(1).second, 5);
  EXPECT_NE(p.configure({{"bogus", 1}}).find("\"bogus\""), std::string::npos);
  EXPECT_NE(p.configure({{"bins", -1}}).find("bins"), std::string::npos);
  EXPECT_NE(p.configure({{"prewarm_percentile", 99}, {"keepalive_percentile", 5}}), "");
  EXPECT_NE(none_prefetch_policy{}.configure({{"x", 1}}), "");
  EXPECT_EQ(make_prefetch_policy("histogram")->name(), "histogram");
  EXPECT_EQ(make_prefetch_policy("none")->name(), "none");
  EXPECT_EQ(make_prefetch_policy("nope"), nullptr);
  EXPECT_EQ(prefetch_policy_names(), (std::vector<std::string>{"histogram", "none"}));
}

/// 50 adapters, each requested with its own period (5..54 s) and ±10%
/// jitter for an hour. An arrival counts as predicted when its adapter is in
/// predict() just before it arrives. Jitter of ±10% keeps most gaps inside
/// the [5th, 99th] percentile window, so at least 80% must be predicted; a
/// predictor with no memory (the fallback alone, 60 s keep-alive) also
/// catches the short periods, so the histogram must beat a 10 s keep-alive.
TEST(histogram_prefetch_policy, predicts_most_arrivals_of_a_periodic_workload) {
  struct arrival {
    double t;
    std::uint32_t adapter;
  };
  std::vector<arrival> arrivals;
  std::mt19937 rng{42};
  std::uniform_real_distribution<double> jitter{-0.1, 0.1};
  for (std::uint32_t a = 0; a < 50; ++a) {
    const double period = 5.0 + a;
    for (double t = period * (1 + jitter(rng)); t < 3600; t += period * (1 + jitter(rng)))
      arrivals.push_back({t, a});
  }
  std::sort(arrivals.begin(), arrivals.end(), [](auto& x, auto& y) { return x.t < y.t; });
  auto accuracy = [&](histogram_prefetch_policy& p) {
    std::size_t predicted = 0, counted = 0;
    for (const auto& x : arrivals) {
      if (x.t > 600) { // after a warm-up
        ++counted;
        predicted += contains(p.predict(x.t - 1e-9, 1000), x.adapter) ? 1 : 0;
      }
      p.on_request(x.adapter, x.t);
    }
    return static_cast<double>(predicted) / static_cast<double>(counted);
  };
  histogram_prefetch_policy hist;
  histogram_prefetch_policy fixed;
  ASSERT_EQ(fixed.configure({{"min_samples", 1e9}, {"fallback_keepalive_s", 10}}), "");
  const double h = accuracy(hist);
  const double f = accuracy(fixed);
  EXPECT_GE(h, 0.8) << "histogram accuracy";
  EXPECT_GT(h, f) << "fixed 10 s keep-alive accuracy " << f;
}

} // namespace
} // namespace troupe::policies
