// Tests for the output-length predictors, the weighted request size, 1-D
// K-means with the elbow rule, the queue tuner's cut-offs and quotas, and the
// chameleon classifier.
#include "policies/classifier_policy.hpp"
#include "policies/output_predictor.hpp"
#include "policies/queue_tuner.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

namespace troupe::policies {
namespace {

// -- predictors -----------------------------------------------------------------------

TEST(output_predictor, max_tokens_is_the_bound) {
  max_tokens_predictor p;
  EXPECT_EQ(p.predict({1, 10, 300, 0}), 300u);
  EXPECT_EQ(p.predict({1, 10, 0, 0}), 1u);
}

TEST(output_predictor, history_takes_a_quantile_per_adapter_and_prompt_bucket) {
  history_predictor p;
  ASSERT_EQ(p.configure({{"quantile", 0.5}, {"min_samples", 3}}), "");
  EXPECT_EQ(p.predict({1, 100, 500, 7}), 500u) << "no history: max_tokens";
  for (std::uint32_t out : {10, 20, 30, 40, 50})
    p.observe(7, 100, out); // bucket of 100 tokens
  EXPECT_EQ(p.predict({1, 100, 500, 7}), 30u);
  EXPECT_EQ(p.predict({1, 120, 25, 7}), 25u) << "clamped to max_tokens";
  EXPECT_EQ(p.predict({1, 100, 500, 8}), 30u) << "another adapter: everyone's history";
  EXPECT_EQ(p.predict({1, 5000, 500, 7}), 500u) << "another prompt bucket: no history";
  for (std::uint32_t out : {300, 300, 300})
    p.observe(8, 100, out);
  EXPECT_EQ(p.predict({1, 100, 500, 8}), 300u) << "its own history once it has enough";
  EXPECT_EQ(history_predictor::bucket_of(10), 0u);
  EXPECT_EQ(history_predictor::bucket_of(64), 1u);
  EXPECT_EQ(history_predictor::bucket_of(128), 2u);
  EXPECT_EQ(history_predictor::bucket_of(1u << 30), 8u);
  EXPECT_NE(p.configure({{"quantile", 2}}), "");
  EXPECT_NE(p.configure({{"keep", 2}, {"min_samples", 3}}), "");
}

TEST(output_predictor, oracle_error_is_bounded_and_deterministic) {
  oracle_predictor exact;
  EXPECT_EQ(exact.predict({9, 10, 200, 0}), 200u);
  oracle_predictor p;
  ASSERT_EQ(p.configure({{"error", 0.2}}), "");
  double lo = 1e9, hi = 0, sum = 0;
  for (std::uint64_t id = 0; id < 2000; ++id) {
    const double x = p.predict({id, 10, 1000, 0});
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  EXPECT_GE(lo, 800);
  EXPECT_LE(hi, 1200);
  EXPECT_NEAR(sum / 2000, 1000, 20);
  EXPECT_EQ(p.predict({5, 10, 1000, 0}), p.predict({5, 10, 1000, 0}));
  EXPECT_NE(p.configure({{"error", 1.5}}), "");
  EXPECT_EQ(make_output_predictor("history")->name(), "history");
  EXPECT_EQ(make_output_predictor("nope"), nullptr);
}

// -- WRS and K-means ------------------------------------------------------------------

TEST(queue_tuner, weighted_request_size_normalises_each_term) {
  EXPECT_DOUBLE_EQ(weighted_request_size(0, 0, 0), 0.0);
  EXPECT_DOUBLE_EQ(weighted_request_size(4096, 1024, 128), 1.0);
  EXPECT_DOUBLE_EQ(weighted_request_size(2048, 0, 0), 0.15);
  EXPECT_DOUBLE_EQ(weighted_request_size(0, 512, 0), 0.25);
  EXPECT_DOUBLE_EQ(weighted_request_size(0, 0, 64), 0.1);
  EXPECT_DOUBLE_EQ(weighted_request_size(100000, 0, 0), 0.3) << "clamped at 1";
}

TEST(queue_tuner, kmeans_finds_separated_groups) {
  std::vector<double> v;
  for (double base : {0.1, 0.5, 0.9})
    for (int i = 0; i < 50; ++i)
      v.push_back(base + 0.001 * i);
  auto r = kmeans_1d(v, 3);
  ASSERT_EQ(r.centroids.size(), 3u);
  EXPECT_NEAR(r.centroids[0], 0.1245, 1e-9);
  EXPECT_NEAR(r.centroids[1], 0.5245, 1e-9);
  EXPECT_NEAR(r.centroids[2], 0.9245, 1e-9);
  EXPECT_LT(r.wcss, kmeans_1d(v, 2).wcss);
  EXPECT_EQ(kmeans_1d({}, 3).centroids.size(), 0u);
  EXPECT_EQ(kmeans_1d({1.0, 1.0}, 3).centroids.size(), 1u) << "duplicates collapse";
}

TEST(queue_tuner, elbow_picks_the_number_of_queues_and_midpoint_cutoffs) {
  tuner_params p;
  p.total_tokens = 100000;
  p.window_s = 100;
  auto samples_at = [](std::vector<double> groups) {
    std::vector<tuner_sample> s;
    for (double g : groups)
      for (int i = 0; i < 40; ++i)
        s.push_back({i * 1.0, g + 0.0001 * i, static_cast<std::uint64_t>(1000 * g + 10), 2.0});
    return s;
  };
  auto two = tune_queues(samples_at({0.1, 0.7}), p);
  ASSERT_EQ(two.queues(), 2u);
  EXPECT_NEAR(two.cutoffs[0], (0.10195 + 0.70195) / 2, 1e-9);
  auto one = tune_queues(samples_at({0.3}), p);
  EXPECT_EQ(one.queues(), 1u) << "one tight group: more queues buy nothing";
  auto four = tune_queues(samples_at({0.05, 0.35, 0.65, 0.95}), p);
  EXPECT_EQ(four.queues(), 4u);
  auto six = tune_queues(samples_at({0.0, 0.2, 0.4, 0.6, 0.8, 1.0}), p);
  EXPECT_EQ(six.queues(), 3u) << "a fourth queue would remove under 5% of the spread";
  auto eager = p;
  eager.elbow = 1e-6;
  EXPECT_EQ(tune_queues(samples_at({0.0, 0.2, 0.4, 0.6, 0.8, 1.0}), eager).queues(), 4u) << "at most 4";
  auto none = tune_queues({}, p);
  EXPECT_EQ(none.queues(), 1u);
  EXPECT_EQ(none.quotas, (std::vector<std::uint64_t>{100000}));
}

/// A 10 s window with an SLO of 5 s: ten small requests (WRS 0.1, 1 s each:
/// λ 1) and five large ones (WRS 0.8, 4 s each: λ 0.5), whose costs
/// `small_cost(i)` and `large_cost(i)` give.
template <class Small, class Large>
std::vector<tuner_sample> two_queues(Small small_cost, Large large_cost) {
  std::vector<tuner_sample> s;
  for (int i = 0; i < 10; ++i)
    s.push_back({static_cast<double>(i), 0.1, small_cost(i), 1.0});
  for (int i = 0; i < 5; ++i)
    s.push_back({static_cast<double>(i), 0.8, large_cost(i), 4.0});
  return s;
}

tuner_params two_queue_params() {
  tuner_params p;
  p.total_tokens = 10000;
  p.window_s = 10;
  p.slo_s = 5;
  return p;
}

TEST(queue_tuner, quotas_cover_each_minimum_and_split_the_surplus_small_first) {
  auto p = two_queue_params();
  // Small: S 100; large: S 1000.
  const auto s = two_queues([](int) { return 100u; }, [](int) { return 1000u; });
  auto t = tune_queues(s, p);
  ASSERT_EQ(t.queues(), 2u);
  // Q_min small = 100·1·(1 + 0.2) = 120; large = 1000·4·(0.5 + 0.2) = 2800.
  // Surplus 7080 split 2:1.
  ASSERT_EQ(t.quotas.size(), 2u);
  EXPECT_EQ(t.quotas[0], 120u + 4720u);
  EXPECT_EQ(t.quotas[1], 2800u + 2360u);
  // Overloaded: the minimums shrink alike and fill the pool.
  p.total_tokens = 1460;
  t = tune_queues(s, p);
  EXPECT_EQ(t.quotas[0], 60u);
  EXPECT_EQ(t.quotas[1], 1400u);
}

TEST(queue_tuner, quota_size_takes_the_largest_or_the_mean_cost_of_each_queue) {
  auto p = two_queue_params();
  // Small queue: costs 50 and 150 alternately (largest 150, mean 100); large
  // queue: 1600, 400, 1600, 400, 1600 (largest 1600, mean 1120).
  const auto s = two_queues([](int i) { return i % 2 ? 150u : 50u; }, [](int i) { return i % 2 ? 400u : 1600u; });
  struct row {
    tuner_params::quota_size size;
    std::uint64_t total;
    std::vector<std::uint64_t> quotas;
  };
  const std::vector<row> table{
    // max: Q_min 150·1·1.2 = 180 and 1600·4·0.7 = 4480; surplus 5340 split 2:1.
    {tuner_params::quota_size::max, 10000, {180 + 3560, 4480 + 1780}},
    // mean: 100·1·1.2 = 120 and 1120·4·0.7 = 3136; surplus 6744 split 2:1.
    {tuner_params::quota_size::mean, 10000, {120 + 4496, 3136 + 2248}},
    // Overloaded (a pool of 3256 tokens = the two means' minimums): mean
    // fills it exactly, max shrinks both alike.
    {tuner_params::quota_size::mean, 3256, {120, 3136}},
    {tuner_params::quota_size::max, 3256, {125, 3130}},
  };
  for (const auto& r : table) {
    p.size = r.size;
    p.total_tokens = r.total;
    const auto t = tune_queues(s, p);
    ASSERT_EQ(t.queues(), 2u);
    EXPECT_EQ(t.quotas, r.quotas) << (r.size == tuner_params::quota_size::mean ? "mean" : "max") << " of " << r.total;
  }
}

TEST(chameleon_classifier_policy, queue_by_wrs_under_the_cutoffs) {
  chameleon_classifier_policy c;
  classify_input small{.prompt_tokens = 100, .max_new_tokens = 50, .adapter_id = 1, .adapter_rank = 8};
  classify_input large{.prompt_tokens = 4000, .max_new_tokens = 1000, .adapter_id = 2, .adapter_rank = 128};
  EXPECT_EQ(c.classify(small).queue, 0u) << "untuned: one queue";
  c.on_tuning({{0.3}, {1, 1}});
  const auto a = c.classify(small);
  const auto b = c.classify(large);
  EXPECT_EQ(a.queue, 0u);
  EXPECT_EQ(b.queue, 1u);
  EXPECT_NEAR(a.wrs, weighted_request_size(100, 50, 8), 1e-12);
  EXPECT_EQ(b.predicted_tokens, 1000u);
  // With a history predictor the prediction (and so the WRS) follows it.
  auto h = std::make_unique<history_predictor>();
  ASSERT_EQ(h->configure({{"min_samples", 1}}), "");
  c.set_predictor(std::move(h));
  c.observe(2, 4000, 10);
  EXPECT_EQ(c.classify(large).predicted_tokens, 10u);
  EXPECT_NE(c.configure({{"size", 1}}), "");
  EXPECT_EQ(c.configure({{"output", 0.7}}), "");
  EXPECT_DOUBLE_EQ(c.weights().output, 0.7);
}

} // namespace
} // namespace troupe::policies
