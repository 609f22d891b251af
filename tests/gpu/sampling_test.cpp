// Tests for sample_token: greedy and its ties, top-k and top-p cuts,
// determinism per (seed, output index), and empirical frequencies against
// the softmax over many fixed-seed draws.
#include "gpu/sampling.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace troupe::gpu {
namespace {

static_assert(std::is_trivially_copyable_v<sampling_config>);

std::vector<float> random_logits(std::size_t n, std::uint64_t seed, float scale = 2.0f) {
  std::mt19937_64 rng{seed};
  std::normal_distribution<float> d{0.0f, scale};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

std::int32_t argmax(const std::vector<float>& v) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best])
      best = i;
  return static_cast<std::int32_t>(best);
}

TEST(sampling, greedy_is_argmax_lowest_id_on_ties) {
  for (std::uint64_t s = 0; s < 20; ++s) {
    const auto l = random_logits(500, s);
    EXPECT_EQ(sample_token(l, {.temperature = 0.0f}, s, 0), argmax(l));
  }
  const std::vector<float> ties = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f};
  EXPECT_EQ(sample_token(ties, {.temperature = 0.0f}, 9, 9), 1);
  EXPECT_EQ(sample_token(std::vector<float>{}, {}, 0, 0), -1);
}

TEST(sampling, top_k_one_and_tiny_top_p_are_argmax) {
  for (std::uint64_t s = 0; s < 20; ++s) {
    const auto l = random_logits(300, s + 50);
    for (std::uint32_t i = 0; i < 10; ++i) {
      EXPECT_EQ(sample_token(l, {.temperature = 1.5f, .top_k = 1}, s, i), argmax(l));
      EXPECT_EQ(sample_token(l, {.temperature = 1.0f, .top_p = 1e-6f}, s, i), argmax(l));
    }
  }
}

TEST(sampling, deterministic_per_seed_and_index) {
  const auto l = random_logits(100, 7, 0.5f);
  const sampling_config cfg{.temperature = 1.0f};
  bool index_matters = false, seed_matters = false;
  for (std::uint32_t i = 0; i < 50; ++i) {
    const auto t = sample_token(l, cfg, 42, i);
    EXPECT_EQ(t, sample_token(l, cfg, 42, i));
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 100);
    index_matters = index_matters || t != sample_token(l, cfg, 42, i + 1);
    seed_matters = seed_matters || t != sample_token(l, cfg, 43, i);
  }
  EXPECT_TRUE(index_matters);
  EXPECT_TRUE(seed_matters);
}

TEST(sampling, top_k_and_top_p_keep_only_the_head) {
  // Probabilities proportional to 8, 4, 2, 1, 1 (in a shuffled id order).
  const std::vector<float> l = {std::log(2.0f), std::log(8.0f), std::log(1.0f), std::log(4.0f),
                                std::log(1.0f)};
  for (std::uint32_t i = 0; i < 2000; ++i) {
    const auto k2 = sample_token(l, {.top_k = 2}, 5, i);
    EXPECT_TRUE(k2 == 1 || k2 == 3) << k2;
    // 8/16 = 0.5 < 0.6, 12/16 = 0.75 >= 0.6: keeps ids 1 and 3.
    const auto p = sample_token(l, {.top_p = 0.6f}, 6, i);
    EXPECT_TRUE(p == 1 || p == 3) << p;
    // top-p over the top-3 renormalized (8, 4, 2)/14: 0.5 needs 8/14 only.
    EXPECT_EQ(sample_token(l, {.top_p = 0.5f, .top_k = 3}, 7, i), 1);
  }
}

TEST(sampling, frequencies_match_softmax) {
  const std::vector<float> l = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f};
  for (float temp : {1.0f, 0.7f}) {
    std::vector<double> p(l.size());
    double sum = 0;
    for (std::size_t i = 0; i < l.size(); ++i)
      sum += (p[i] = std::exp(l[i] / temp));
    std::vector<int> counts(l.size());
    constexpr int draws = 200000;
    for (int i = 0; i < draws; ++i)
      ++counts[static_cast<std::size_t>(
          sample_token(l, {.temperature = temp}, 1234 + static_cast<std::uint64_t>(i / 1000),
                       static_cast<std::uint32_t>(i % 1000)))];
    for (std::size_t i = 0; i < l.size(); ++i) {
      const double want = p[i] / sum;
      const double sd = std::sqrt(want * (1 - want) / draws);
      EXPECT_NEAR(counts[i] / static_cast<double>(draws), want, 5 * sd) << "token " << i;
    }
  }
}

TEST(sampling, top_k_frequencies_renormalize) {
  const std::vector<float> l = {0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<int> counts(4);
  constexpr int draws = 100000;
  for (int i = 0; i < draws; ++i)
    ++counts[static_cast<std::size_t>(sample_token(l, {.top_k = 2}, 99, static_cast<std::uint32_t>(i)))];
  EXPECT_EQ(counts[0] + counts[1], 0);
  const double want3 = std::exp(3.0) / (std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(counts[3] / static_cast<double>(draws), want3, 5 * std::sqrt(want3 * (1 - want3) / draws));
}

} // namespace
} // namespace troupe::gpu
