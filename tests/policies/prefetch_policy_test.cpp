// Tests for policies/prefetch_policy: "none" predicts nothing; "histogram"
// opens an adapter's window at the pre-warm percentile of its idle times and
// closes it at the keep-alive percentile (tables of scripted arrivals: periodic
// adapters, percentile edges, when the histogram is trusted and when the
// fallback keep-alive is used, out-of-range idle times), orders and caps its
// predictions, drops ended windows, validates configure(); the registry builds
// both; and on a jittered periodic workload of 50 adapters it predicts most
// arrivals while wanting each adapter a fraction of the time.
#include "policies/prefetch_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe::policies {
namespace {

static_assert(std::has_virtual_destructor_v<prefetch_policy>);
static_assert(std::is_abstract_v<prefetch_policy>);
static_assert(std::is_final_v<histogram_prefetch_policy>);
static_assert(std::is_final_v<none_prefetch_policy>);
static_assert(!std::is_abstract_v<histogram_prefetch_policy>);
static_assert(!std::is_abstract_v<none_prefetch_policy>);
static_assert(std::is_trivially_copyable_v<histogram_prefetch_params>);
static_assert(std::is_trivially_copyable_v<prefetch_window>);

using params_map = std::map<std::string, double>;
constexpr std::size_t all = std::numeric_limits<std::size_t>::max();

/// A histogram policy with `params` applied (which must be accepted).
std::unique_ptr<histogram_prefetch_policy> histogram(const params_map& params = {}) {
  auto p = std::make_unique<histogram_prefetch_policy>();
  EXPECT_EQ(p->configure(params), "");
  return p;
}

/// Requests for `id` at each of `times`.
void feed(prefetch_policy& p, std::uint32_t id, const std::vector<double>& times) {
  for (double t : times)
    p.on_request(id, t);
}

/// Request times 0, g1, g1 + g2, ... for idle times `gaps`.
std::vector<double> times_of(const std::vector<double>& gaps) {
  std::vector<double> out{0};
  for (double g : gaps)
    out.push_back(out.back() + g);
  return out;
}

/// Requests of several adapters, merged in time order.
void feed_merged(prefetch_policy& p,
                 const std::vector<std::pair<std::uint32_t, std::vector<double>>>& requests) {
  std::vector<std::pair<double, std::uint32_t>> all_requests;
  for (const auto& [id, times] : requests)
    for (double t : times)
      all_requests.emplace_back(t, id);
  std::stable_sort(all_requests.begin(), all_requests.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [t, id] : all_requests)
    p.on_request(id, t);
}

bool wanted(prefetch_policy& p, std::uint32_t id, double now) {
  const auto ids = p.predict(now, all);
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// -- none --------------------------------------------------------------------------

TEST(none_prefetch_policy, predicts_nothing_and_takes_no_parameters) {
  none_prefetch_policy p;
  EXPECT_EQ(p.name(), "none");
  feed(p, 1, {0, 10, 20, 30, 40, 50, 60});
  EXPECT_TRUE(p.predict(70, all).empty());
  EXPECT_TRUE(p.predict(60, 10).empty());
  EXPECT_EQ(p.configure({}), "");
  const auto err = p.configure({{"bins", 10}});
  EXPECT_NE(err.find("'bins'"), std::string::npos) << err;
  EXPECT_NE(err.find("none"), std::string::npos) << err;
}

// -- histogram: one periodic adapter ----------------------------------------------

struct periodic_case {
  std::string name;
  params_map params;
  prefetch_window expected; ///< relative to the last request
  std::vector<std::pair<double, bool>> probes; ///< (time after the last request, wanted)
};

TEST(histogram_prefetch_policy, wants_a_periodic_adapter_around_its_next_arrival) {
  // Requests every 10 s at 0..100: ten idle times of 10 s, all in one bin.
  const std::vector<periodic_case> table{
    {"defaults: [0.9 x 10, 1.1 x 11)", {}, {9, 12.1, true},
     {{0, false}, {5, false}, {8.9, false}, {9, true}, {10, true}, {12, true}, {12.2, false}, {60, false}}},
    {"no margin: the bin [10, 11)", {{"margin", 0}}, {10, 11, true},
     {{0, false}, {9.9, false}, {10, true}, {10.9, true}, {11, false}, {1000, false}}},
    {"5 s bins: [10, 15)", {{"margin", 0}, {"bin_seconds", 5}, {"bins", 120}}, {10, 15, true},
     {{9.9, false}, {10, true}, {14.9, true}, {15, false}}},
    {"20 s bins: the bin [0, 20) opens at once", {{"margin", 0}, {"bin_seconds", 20}, {"bins", 30}},
     {0, 20, true}, {{0, true}, {10, true}, {19.9, true}, {20, false}}},
    {"60 s bins, 10 of them", {{"margin", 0.5}, {"bin_seconds", 60}, {"bins", 10}}, {0, 90, true},
     {{0, true}, {89, true}, {90, false}}},
  };
  for (const auto& c : table) {
    auto p = histogram(c.params);
    feed(*p, 1, times_of(std::vector<double>(10, 10)));
    const auto w = p->window(1);
    ASSERT_TRUE(w) << c.name;
    EXPECT_DOUBLE_EQ(w->start_s, 100 + c.expected.start_s) << c.name;
    EXPECT_DOUBLE_EQ(w->end_s, 100 + c.expected.end_s) << c.name;
    EXPECT_EQ(w->from_histogram, c.expected.from_histogram) << c.name;
    for (const auto& [after, expected] : c.probes)
      EXPECT_EQ(wanted(*p, 1, 100 + after), expected) << c.name << " at +" << after;
    EXPECT_EQ(p->pending(), 0u) << c.name << ": the ended window is dropped";
  }
}

TEST(histogram_prefetch_policy, each_request_moves_the_window) {
  auto p = histogram({{"margin", 0}});
  feed(*p, 1, times_of(std::vector<double>(6, 10))); // last at 60: [70, 71)
  EXPECT_FALSE(wanted(*p, 1, 65));
  p->on_request(1, 66); // an early arrival: idle time 6, window from the new request
  EXPECT_EQ(p->pending(), 1u);
  EXPECT_FALSE(wanted(*p, 1, 70.5)) << "the old window is gone";
  // Idle times {10 x 6, 6}: p5 is the bin [6, 7), p99 the bin [10, 11).
  EXPECT_TRUE(wanted(*p, 1, 72));
  EXPECT_TRUE(wanted(*p, 1, 76.9));
  EXPECT_FALSE(wanted(*p, 1, 77));
}

// -- histogram: percentiles --------------------------------------------------------

struct percentile_case {
  double prewarm;
  double keepalive;
  double start; ///< after the last request
  double end;
};

TEST(histogram_prefetch_policy, opens_and_closes_at_the_percentile_bins) {
  // Twenty idle times 1, 2, ..., 20 s, one per bin; nearest rank over 20.
  const std::vector<percentile_case> table{
    {0, 100, 1, 21},     // rank 1 -> bin 1 opens, rank 20 -> bin 20 closes
    {5, 99, 1, 21},      // ranks 1 and ceil(19.8) = 20
    {10, 90, 2, 19},     // ranks 2 and 18
    {12.5, 87.5, 3, 19}, // ranks ceil(2.5) = 3 and ceil(17.5) = 18
    {50, 50, 10, 11},    // rank 10 both: one bin
    {0, 0, 1, 2},        // rank 1 both
    {100, 100, 20, 21},  // rank 20 both
    {95, 100, 19, 21},   // ranks 19 and 20
  };
  std::vector<double> gaps;
  for (int g = 1; g <= 20; ++g)
    gaps.push_back(g);
  const auto times = times_of(gaps);
  for (const auto& c : table) {
    auto p = histogram({{"margin", 0}, {"prewarm_percentile", c.prewarm}, {"keepalive_percentile", c.keepalive}});
    feed(*p, 4, times);
    const auto w = p->window(4);
    ASSERT_TRUE(w);
    EXPECT_TRUE(w->from_histogram) << c.prewarm << "/" << c.keepalive;
    EXPECT_DOUBLE_EQ(w->start_s - times.back(), c.start) << c.prewarm << "/" << c.keepalive;
    EXPECT_DOUBLE_EQ(w->end_s - times.back(), c.end) << c.prewarm << "/" << c.keepalive;
  }
}

// -- histogram: when the histogram is trusted ------------------------------------

struct trust_case {
  std::string name;
  params_map params; ///< margin is 0 unless set
  std::vector<double> gaps;
  bool from_histogram;
  double start; ///< after the last request
  double end;
};

TEST(histogram_prefetch_policy, falls_back_to_the_keepalive_unless_the_histogram_is_representative) {
  const std::vector<double> ten5(5, 10);
  const std::vector<double> ten4(4, 10);
  const std::vector<double> ten3_oob3{10, 10, 10, 700, 700, 700};
  const std::vector<double> ten3_oob4{10, 10, 10, 700, 700, 700, 700};
  const std::vector<double> all_oob(8, 700);
  const std::vector<double> flat{0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5};
  const std::vector<double> two_bins{1, 2, 1, 2, 1, 2};   // 10 bins: CV exactly 2
  const std::vector<double> three_bins{1, 2, 3, 1, 2, 3}; // 10 bins: CV 1.53
  const std::vector<trust_case> table{
    {"first request: no idle time yet", {}, {}, false, 0, 60},
    {"4 idle times: below min_samples", {}, ten4, false, 0, 60},
    {"5 idle times: enough", {}, ten5, true, 10, 11},
    {"min_samples 2", {{"min_samples", 2}}, {10, 10}, true, 10, 11},
    {"min_samples 2, one idle time", {{"min_samples", 2}}, {10}, false, 0, 60},
    {"fallback keep-alive 5 s", {{"fallback_keepalive_s", 5}}, ten4, false, 0, 5},
    {"fallback keep-alive 0: not wanted", {{"fallback_keepalive_s", 0}}, ten4, false, 0, 0},
    {"all out of range", {}, all_oob, false, 0, 60},
    {"half out of range: trusted, closes at the range's end", {}, ten3_oob3, true, 10, 600},
    {"half out of range, 10% margin", {{"margin", 0.1}}, ten3_oob3, true, 9, 660},
    {"more than half out of range", {}, ten3_oob4, false, 0, 60},
    {"max_out_of_range 0: one is too many", {{"max_out_of_range", 0}}, {10, 10, 10, 10, 10, 700}, false, 0, 60},
    {"max_out_of_range 1: only in-range ones needed", {{"max_out_of_range", 1}}, {10, 700, 700, 700, 700}, true, 10, 600},
    {"max_out_of_range 1 but none in range", {{"max_out_of_range", 1}}, all_oob, false, 0, 60},
    {"wider range takes 700 s in", {{"bins", 1000}}, ten3_oob4, true, 10, 701},
    {"flat over every bin: CV 0", {{"bins", 10}}, flat, false, 0, 60},
    {"flat, min_cv 0", {{"bins", 10}, {"min_cv", 0}}, flat, true, 0, 10},
    {"two bins evenly: CV 2 passes", {{"bins", 10}}, two_bins, true, 1, 3},
    {"three bins evenly: CV 1.53 fails", {{"bins", 10}}, three_bins, false, 0, 60},
    {"three bins, min_cv 1.5", {{"bins", 10}, {"min_cv", 1.5}}, three_bins, true, 1, 4},
    {"10 bins: a 10 s idle time is out of range", {{"bins", 10}}, ten5, false, 0, 60},
    {"one bin of ten, in range", {{"bins", 10}}, {4, 4, 4, 4, 4}, true, 4, 5},
    {"same instant: idle time 0", {}, {0, 0, 0, 0, 0}, true, 0, 1},
  };
  for (const auto& c : table) {
    auto params = c.params;
    params.try_emplace("margin", 0);
    auto p = histogram(params);
    const auto times = times_of(c.gaps);
    feed(*p, 2, times);
    const auto w = p->window(2);
    ASSERT_TRUE(w) << c.name;
    EXPECT_EQ(w->from_histogram, c.from_histogram) << c.name;
    EXPECT_DOUBLE_EQ(w->start_s - times.back(), c.start) << c.name;
    EXPECT_DOUBLE_EQ(w->end_s - times.back(), c.end) << c.name;
    EXPECT_EQ(p->pending(), c.end > c.start ? 1u : 0u) << c.name;
  }
}

TEST(histogram_prefetch_policy, fallback_keeps_a_rare_adapter_for_the_keepalive) {
  auto p = histogram();
  feed(*p, 3, {0, 500, 1000}); // two idle times: not enough
  EXPECT_TRUE(wanted(*p, 3, 1000));
  EXPECT_TRUE(wanted(*p, 3, 1059.9));
  EXPECT_FALSE(wanted(*p, 3, 1060));
  EXPECT_FALSE(p->window(3)->from_histogram);
  EXPECT_FALSE(p->window(99)) << "never requested";
}

TEST(histogram_prefetch_policy, a_clock_stepping_back_counts_as_idle_time_zero) {
  auto p = histogram({{"margin", 0}, {"min_samples", 1}});
  feed(*p, 1, {10, 4}); // one idle time of 0, the last request stays at 10
  const auto w = p->window(1);
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->from_histogram);
  EXPECT_DOUBLE_EQ(w->start_s, 10);
  EXPECT_DOUBLE_EQ(w->end_s, 11);
}

TEST(histogram_prefetch_policy, ignores_non_finite_times) {
  auto p = histogram();
  p->on_request(1, std::numeric_limits<double>::quiet_NaN());
  p->on_request(1, std::numeric_limits<double>::infinity());
  EXPECT_EQ(p->tracked(), 0u);
  EXPECT_EQ(p->pending(), 0u);
}

// -- histogram: ordering, max_count, ended windows --------------------------------

struct order_case {
  double now;
  std::size_t max_count;
  std::vector<std::uint32_t> expected;
};

TEST(histogram_prefetch_policy, orders_by_window_start_then_requests_then_id) {
  // Fallback windows of 60 s: 7 opens at 0; 9, 5 and 2 at 1, and 9 has two
  // requests.
  auto p = histogram();
  p->on_request(7, 0);
  p->on_request(9, 0.5);
  p->on_request(9, 1);
  p->on_request(5, 1);
  p->on_request(2, 1);
  const std::vector<order_case> table{
    {0.5, all, {7}},
    {2, 0, {}},
    {2, 1, {7}},
    {2, 2, {7, 9}},
    {2, 3, {7, 9, 2}},
    {2, 4, {7, 9, 2, 5}},
    {2, all, {7, 9, 2, 5}},
    {60, all, {9, 2, 5}},
    {60.9, 2, {9, 2}},
    {61, all, {}},
  };
  for (const auto& c : table)
    EXPECT_EQ(p->predict(c.now, c.max_count), c.expected) << c.now << " max " << c.max_count;
}

TEST(histogram_prefetch_policy, does_not_predict_windows_not_yet_open) {
  auto p = histogram({{"margin", 0}});
  feed_merged(*p, {{1, {0, 30, 60, 90, 120, 150}},     // [180, 181)
                   {2, {50, 70, 90, 110, 130, 150}},   // [170, 171)
                   {3, {150}}});                       // fallback [150, 210)
  const std::vector<order_case> table{
    {155, all, {3}},
    {170, 1, {3}},
    {170, all, {3, 2}},
    {175, all, {3}},
    {180.5, all, {3, 1}},
    {215, all, {}},
  };
  for (const auto& c : table)
    EXPECT_EQ(p->predict(c.now, c.max_count), c.expected) << c.now << " max " << c.max_count;
}

TEST(histogram_prefetch_policy, drops_ended_windows_and_keeps_one_per_adapter) {
  auto p = histogram();
  for (std::uint32_t id = 0; id < 1000; ++id)
    p->on_request(id, id * 0.01); // fallback windows [t, t + 60)
  for (std::uint32_t id = 0; id < 1000; ++id)
    p->on_request(id, 20 + id * 0.01);
  EXPECT_EQ(p->tracked(), 1000u);
  EXPECT_EQ(p->pending(), 1000u) << "a request replaces the adapter's window";
  EXPECT_EQ(p->predict(50, all).size(), 1000u);
  EXPECT_EQ(p->predict(80.005, 3), (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(p->predict(1000, all), std::vector<std::uint32_t>{});
  EXPECT_EQ(p->pending(), 0u);
  EXPECT_EQ(p->tracked(), 1000u) << "histories stay";
  p->on_request(5, 1000);
  EXPECT_EQ(p->pending(), 1u);
  EXPECT_EQ(p->predict(1000, all), std::vector<std::uint32_t>{5});
}

// -- histogram: configure ----------------------------------------------------------

struct configure_case {
  params_map params;
  std::string error_mentions; ///< "": accepted
};

TEST(histogram_prefetch_policy, configure_accepts_valid_and_rejects_bad_values) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<configure_case> table{
    {{}, ""},
    {{{"bin_seconds", 0.25}}, ""},
    {{{"bins", 1}}, ""},
    {{{"bins", 1e6}}, ""},
    {{{"prewarm_percentile", 0}, {"keepalive_percentile", 100}}, ""},
    {{{"prewarm_percentile", 50}, {"keepalive_percentile", 50}}, ""},
    {{{"margin", 0}}, ""},
    {{{"margin", 0.99}}, ""},
    {{{"min_samples", 1}}, ""},
    {{{"max_out_of_range", 0}}, ""},
    {{{"max_out_of_range", 1}}, ""},
    {{{"min_cv", 0}}, ""},
    {{{"fallback_keepalive_s", 0}}, ""},
    {{{"fallback_keepalive_s", 3600}}, ""},
    {{{"bogus", 1}}, "'bogus'"},
    {{{"bin_seconds", 0}}, "bin_seconds"},
    {{{"bin_seconds", -1}}, "bin_seconds"},
    {{{"bin_seconds", nan}}, "bin_seconds"},
    {{{"bin_seconds", inf}}, "bin_seconds"},
    {{{"bins", 0}}, "bins"},
    {{{"bins", 1.5}}, "bins"},
    {{{"bins", 2e6}}, "bins"},
    {{{"prewarm_percentile", -1}}, "prewarm_percentile"},
    {{{"keepalive_percentile", 100.5}}, "keepalive_percentile"},
    {{{"prewarm_percentile", 60}, {"keepalive_percentile", 40}}, "prewarm_percentile"},
    {{{"prewarm_percentile", 100}}, "prewarm_percentile"}, // above the default 99
    {{{"margin", 1}}, "margin"},
    {{{"margin", -0.1}}, "margin"},
    {{{"min_samples", 0}}, "min_samples"},
    {{{"min_samples", 2.5}}, "min_samples"},
    {{{"max_out_of_range", 1.5}}, "max_out_of_range"},
    {{{"min_cv", -1}}, "min_cv"},
    {{{"min_cv", nan}}, "min_cv"},
    {{{"fallback_keepalive_s", -1}}, "fallback_keepalive_s"},
    {{{"fallback_keepalive_s", inf}}, "fallback_keepalive_s"},
    {{{"bins", 100}, {"margin", 2}}, "margin"},
  };
  for (const auto& c : table) {
    histogram_prefetch_policy p;
    const auto err = p.configure(c.params);
    const std::string what = c.params.empty() ? "{}" : c.params.begin()->first;
    if (c.error_mentions.empty()) {
      EXPECT_EQ(err, "") << what;
      continue;
    }
    EXPECT_NE(err.find(c.error_mentions), std::string::npos) << what << ": " << err;
    EXPECT_NE(err.find("histogram"), std::string::npos) << err;
    // Nothing changed, not even the keys before the bad one.
    const histogram_prefetch_params defaults;
    EXPECT_EQ(p.params().bins, defaults.bins) << what;
    EXPECT_EQ(p.params().bin_seconds, defaults.bin_seconds) << what;
    EXPECT_EQ(p.params().margin, defaults.margin) << what;
    EXPECT_EQ(p.params().prewarm_percentile, defaults.prewarm_percentile) << what;
  }
}

TEST(histogram_prefetch_policy, configure_sets_every_parameter) {
  histogram_prefetch_policy p;
  ASSERT_EQ(p.configure({{"bin_seconds", 2}, {"bins", 50}, {"prewarm_percentile", 10},
                         {"keepalive_percentile", 90}, {"margin", 0.2}, {"min_samples", 3},
                         {"max_out_of_range", 0.25}, {"min_cv", 1}, {"fallback_keepalive_s", 30}}),
            "");
  const auto& q = p.params();
  EXPECT_EQ(q.bin_seconds, 2);
  EXPECT_EQ(q.bins, 50u);
  EXPECT_EQ(q.prewarm_percentile, 10);
  EXPECT_EQ(q.keepalive_percentile, 90);
  EXPECT_EQ(q.margin, 0.2);
  EXPECT_EQ(q.min_samples, 3u);
  EXPECT_EQ(q.max_out_of_range, 0.25);
  EXPECT_EQ(q.min_cv, 1);
  EXPECT_EQ(q.fallback_keepalive_s, 30);
}

TEST(histogram_prefetch_policy, changing_the_bins_forgets_histories_other_keys_keep_them) {
  auto p = histogram({{"margin", 0}});
  feed(*p, 1, times_of(std::vector<double>(5, 10)));
  ASSERT_EQ(p->configure({{"margin", 0.5}, {"fallback_keepalive_s", 1}}), "");
  EXPECT_EQ(p->tracked(), 1u);
  p->on_request(1, 60); // sixth idle time of 10: [65, 76.5)
  EXPECT_TRUE(p->window(1)->from_histogram);
  EXPECT_DOUBLE_EQ(p->window(1)->start_s, 65);
  EXPECT_DOUBLE_EQ(p->window(1)->end_s, 76.5);
  ASSERT_EQ(p->configure({{"bins", 300}}), "");
  EXPECT_EQ(p->tracked(), 0u);
  EXPECT_EQ(p->pending(), 0u);
  p->on_request(1, 70); // a first request again: the 1 s fallback
  EXPECT_FALSE(p->window(1)->from_histogram);
  EXPECT_DOUBLE_EQ(p->window(1)->end_s, 71);
  ASSERT_EQ(p->configure({{"bins", 300}, {"bin_seconds", 1}}), "") << "same binning";
  EXPECT_EQ(p->tracked(), 1u);
}

// -- registry ----------------------------------------------------------------------

TEST(prefetch_registry, builds_each_policy_by_name) {
  EXPECT_EQ(prefetch_policy_names(), (std::vector<std::string>{"histogram", "none"}));
  for (const auto& n : prefetch_policy_names()) {
    auto a = make_prefetch_policy(n);
    auto b = make_prefetch_policy(n);
    ASSERT_NE(a, nullptr) << n;
    EXPECT_EQ(a->name(), n);
    EXPECT_NE(a.get(), b.get()) << "a new instance each time";
  }
  EXPECT_EQ(make_prefetch_policy("lru"), nullptr);
  EXPECT_EQ(make_prefetch_policy(""), nullptr);
  EXPECT_NE(dynamic_cast<histogram_prefetch_policy*>(make_prefetch_policy("histogram").get()), nullptr);
}

// -- accuracy on a periodic workload ----------------------------------------------

/// Uniform in [0, 1) from mt19937's standard-defined output (the standard's
/// distributions may differ between libraries; this does not).
double uniform(std::mt19937& rng) { return rng() / 4294967296.0; }

struct arrival {
  double t;
  std::uint32_t adapter;
};

/// 50 adapters, each with a period uniform in [5, 120) s and a random phase;
/// each idle time is the period +-10 % (uniform), for two hours.
std::vector<arrival> periodic_workload(std::uint32_t seed) {
  std::mt19937 rng{seed};
  std::vector<arrival> out;
  for (std::uint32_t a = 0; a < 50; ++a) {
    const double period = 5 + 115 * uniform(rng);
    for (double t = period * uniform(rng); t < 7200; t += period * (0.9 + 0.2 * uniform(rng)))
      out.push_back({t, a});
  }
  std::sort(out.begin(), out.end(), [](const arrival& x, const arrival& y) { return x.t < y.t; });
  return out;
}

struct accuracy {
  double hit_rate = 0;        ///< arrivals (after each adapter's first) predicted just before
  double wanted_fraction = 0; ///< mean share of the 50 adapters predicted, sampled each second
};

accuracy measure(prefetch_policy& p, const std::vector<arrival>& arrivals) {
  std::vector<bool> seen(50, false);
  std::size_t hits = 0, counted = 0, samples = 0, wanted_total = 0;
  double next_sample = 0;
  for (const auto& a : arrivals) {
    for (; next_sample < a.t; next_sample += 1, ++samples)
      wanted_total += p.predict(next_sample, all).size();
    if (seen[a.adapter]) {
      ++counted;
      const auto ids = p.predict(a.t, all);
      hits += std::find(ids.begin(), ids.end(), a.adapter) != ids.end();
    }
    seen[a.adapter] = true;
    p.on_request(a.adapter, a.t);
  }
  return {static_cast<double>(hits) / static_cast<double>(counted),
          static_cast<double>(wanted_total) / static_cast<double>(samples) / 50};
}

TEST(histogram_prefetch_policy, predicts_most_arrivals_of_a_jittered_periodic_workload) {
  // With +-10 % jitter an adapter's idle times span 0.9P..1.1P: its window,
  // [0.9 x p5, 1.1 x p99] ~ [0.82P, 1.21P], covers all of them once the
  // histogram has its 5 samples. What misses: each adapter's first arrival is
  // not counted; its next 5 arrivals fall under the 60 s fallback, which
  // misses them when the period is over ~55 s (about half the adapters, but
  // those arrive least often: ~1 % of the ~10k arrivals); then a few
  // arrivals outside the p5..p99 of the first handful of samples. So about
  // 98 % is expected (seeds 1..200 gave 0.975 to 0.99, wanted <= 0.23) and
  // 0.95 leaves room. Predicting everything would also score 100 %, so the
  // test bounds what is wanted too: from 0.82P until the arrival at ~P, about
  // 20 % of the time per adapter. The fixed keep-alive alone (the fallback for
  // every adapter) wants the fast adapters all the time and misses every
  // arrival of the slow ones.
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    const auto arrivals = periodic_workload(seed);
    ASSERT_GT(arrivals.size(), 5000u);
    auto hist = histogram();
    const auto h = measure(*hist, arrivals);
    auto keepalive = histogram({{"min_samples", 1e9}}); // the fallback only
    const auto k = measure(*keepalive, arrivals);
    std::cout << "seed " << seed << ": histogram hit rate " << h.hit_rate << ", wanted "
              << h.wanted_fraction << "; keep-alive only hit rate " << k.hit_rate << ", wanted "
              << k.wanted_fraction << "\n";
    EXPECT_GT(h.hit_rate, 0.95) << seed;
    EXPECT_LT(h.wanted_fraction, 0.3) << seed;
    EXPECT_GT(h.hit_rate, k.hit_rate) << seed;
    EXPECT_LT(h.wanted_fraction, k.wanted_fraction) << seed;
  }
}

} // namespace
} // namespace troupe::policies
