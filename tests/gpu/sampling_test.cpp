// Tests for sample_token: greedy and its ties, min-p, top-k and top-p cuts,
// determinism per (seed, output index), and empirical frequencies against
// the softmax over many fixed-seed draws; apply_logit_adjust's repetition
// penalty and deltas; logprobs_of against a log-softmax written out, its
// order, and logits that are not numbers.
#include "gpu/sampling.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <random>
#include <span>
#include <string>
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

TEST(sampling, min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_top_one) {
  // Probabilities 0.4, 0.2, 0.15, 0.1, 0.08, 0.05, 0.02 (ids shuffled).
  const std::vector<double> probs{0.1, 0.4, 0.02, 0.15, 0.08, 0.2, 0.05};
  std::vector<float> l;
  for (const double q : probs)
    l.push_back(static_cast<float>(std::log(q)));
  // 0.3 * 0.4 = 0.12: 0.4, 0.2 and 0.15 stay (ids 1, 5, 3), renormalized.
  std::vector<int> counts(l.size());
  constexpr int draws = 60000;
  for (int i = 0; i < draws; ++i)
    ++counts[static_cast<std::size_t>(sample_token(l, {.min_p = 0.3f}, 17, static_cast<std::uint32_t>(i)))];
  EXPECT_EQ(counts[0] + counts[2] + counts[4] + counts[6], 0);
  for (const std::size_t id : {1u, 5u, 3u}) {
    const double want = probs[id] / 0.75;
    EXPECT_NEAR(counts[id] / static_cast<double>(draws), want, 5 * std::sqrt(want * (1 - want) / draws)) << id;
  }
  for (std::uint32_t i = 0; i < 500; ++i) {
    // The cut comes first, top-k and top-p renormalize what it keeps:
    // min_p 0.45 keeps 0.4 and 0.2; top-p 0.6 of those needs 0.4/0.6 alone
    // (top-p first would keep both: 0.4 + 0.2 of the whole reaches 0.6).
    EXPECT_EQ(sample_token(l, {.top_p = 0.6f, .min_p = 0.45f}, 3, i), 1);
    const auto k5 = sample_token(l, {.top_k = 5, .min_p = 0.45f}, 4, i);
    EXPECT_TRUE(k5 == 1 || k5 == 5) << k5;
    EXPECT_EQ(sample_token(l, {.min_p = 1.0f}, 4, i), 1) << "1: the most likely only";
    // 0 (or NaN) cuts nothing: the same draws as no cut.
    EXPECT_EQ(sample_token(l, {.min_p = 0.0f}, 5, i), sample_token(l, {}, 5, i));
    EXPECT_EQ(sample_token(l, {.min_p = std::numeric_limits<float>::quiet_NaN()}, 5, i), sample_token(l, {}, 5, i));
  }
  // Equal logits stay or go together; at temperature 0 the cut is moot.
  const std::vector<float> tied{1.0f, 3.0f, 3.0f, 2.0f};
  std::vector<int> tied_counts(4);
  for (std::uint32_t i = 0; i < 400; ++i)
    ++tied_counts[static_cast<std::size_t>(sample_token(tied, {.min_p = 0.9f}, 8, i))];
  EXPECT_EQ(tied_counts[0] + tied_counts[3], 0);
  EXPECT_GT(tied_counts[1], 0);
  EXPECT_GT(tied_counts[2], 0);
  EXPECT_EQ(sample_token(tied, {.temperature = 0.0f, .min_p = 0.9f}, 8, 0), 1);
}

TEST(logit_adjust, the_repetition_penalty_scales_the_models_logit_once_then_deltas_add) {
  const std::vector<float> l{2.0f, -1.5f, 0.0f, 3.0f, -0.25f, 1.0f};
  std::vector<float> out;
  const std::vector<logit_adjustment> adjust{
    {0, 0.0f, true}, {1, 0.0f, true}, {2, 0.0f, true}, {3, 1.0f, true}, {3, 0.0f, true},
    {4, -1.0f},      {5, 0.5f, true}, {5, 0.25f},      {-1, 9.0f, true}, {6, 9.0f, true}};
  apply_logit_adjust(l, adjust, 2.0f, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -3.0f, 0.0f, 2.5f, -1.25f, 1.25f}))
    << "positive halved, negative doubled, 0 stays; a token named twice is penalized once and gets both deltas; "
       "one not marked only its delta; ids outside ignored";
  apply_logit_adjust(l, adjust, 1.0f, out);
  EXPECT_EQ(out, (std::vector<float>{2.0f, -1.5f, 0.0f, 4.0f, -1.25f, 1.75f})) << "1: no penalty";
  apply_logit_adjust(l, {}, 2.0f, out);
  EXPECT_EQ(out, l) << "nothing marked: nothing scaled";
  // Below 1 it favours what was seen, as Hugging Face's does.
  apply_logit_adjust(l, adjust, 0.5f, out);
  EXPECT_EQ(out[0], 4.0f);
  EXPECT_EQ(out[1], -0.75f);
  // Greedy steers away from the seen top token once it is penalized.
  EXPECT_EQ(sample_token(l, {.temperature = 0.0f}, 1, 0), 3);
  apply_logit_adjust(l, std::vector<logit_adjustment>{{3, 0.0f, true}}, 2.0f, out);
  EXPECT_EQ(sample_token(out, {.temperature = 0.0f}, 1, 0), 0);
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

TEST(logprobs, are_the_log_softmax_of_the_raw_logits_whatever_the_sampling) {
  const auto l = random_logits(300, 21, 3.0f);
  double z = 0;
  for (float x : l)
    z += std::exp(static_cast<double>(x));
  for (std::int32_t t : {0, 17, 299, argmax(l)}) {
    const auto r = logprobs_of(l, t, 0);
    EXPECT_NEAR(r.logprob, static_cast<double>(l[t]) - std::log(z), 1e-5) << "token " << t;
    EXPECT_TRUE(r.top.empty());
  }
  // Every token listed: probabilities sum to one, most likely first.
  const auto all = logprobs_of(l, 5, 300);
  ASSERT_EQ(all.top.size(), 300u);
  double mass = 0;
  for (std::size_t i = 0; i < all.top.size(); ++i) {
    mass += std::exp(static_cast<double>(all.top[i].logprob));
    EXPECT_FLOAT_EQ(all.top[i].logprob, logprobs_of(l, all.top[i].token, 0).logprob);
    if (i > 0) {
      EXPECT_GE(all.top[i - 1].logprob, all.top[i].logprob);
    }
  }
  EXPECT_NEAR(mass, 1.0, 1e-5);
  EXPECT_EQ(all.top[0].token, argmax(l));
  // A short list is the long one's head; more than the vocabulary is all.
  const auto five = logprobs_of(l, 5, 5);
  ASSERT_EQ(five.top.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_EQ(five.top[i].token, all.top[i].token);
  EXPECT_EQ(logprobs_of(l, 5, 1000).top.size(), 300u);
}

TEST(logprobs, ties_list_the_lower_id_first_and_no_logit_overflows) {
  const std::vector<float> l{1.0f, 3.0f, 3.0f, -2.0f, 3.0f};
  const auto r = logprobs_of(l, 4, 4);
  ASSERT_EQ(r.top.size(), 4u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_EQ(r.top[2].token, 4);
  EXPECT_EQ(r.top[3].token, 0);
  EXPECT_FLOAT_EQ(r.logprob, r.top[0].logprob);
  // Logits far past exp's range still give finite log-probabilities.
  const std::vector<float> big{1e30f, 1e30f - 1e24f, -1e30f};
  const auto b = logprobs_of(big, 0, 3);
  EXPECT_TRUE(std::isfinite(b.logprob));
  EXPECT_NEAR(b.logprob, 0.0, 1e-6);
  EXPECT_EQ(b.top.size(), 3u);
}

TEST(logprobs, logits_that_are_not_numbers_are_never_listed) {
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> l{0.0f, nan, 0.0f, -inf};
  const auto r = logprobs_of(l, 1, 4);
  EXPECT_EQ(r.logprob, -inf); // NaN counts as -infinity
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_NEAR(r.top[0].logprob, -std::log(2.0), 1e-6);
  EXPECT_EQ(logprobs_of(l, 3, 0).logprob, -inf);
  EXPECT_EQ(logprobs_of(l, 4, 0).logprob, -inf); // out of range
  EXPECT_EQ(logprobs_of(l, -1, 0).logprob, -inf);
  // +infinity takes all the mass, shared.
  const std::vector<float> sure{inf, 5.0f, inf};
  const auto s = logprobs_of(sure, 2, 3);
  EXPECT_NEAR(s.logprob, -std::log(2.0), 1e-6);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0].token, 0);
  EXPECT_EQ(logprobs_of(sure, 1, 0).logprob, -inf);
  // Nothing possible: nothing listed.
  const std::vector<float> none{nan, -inf};
  EXPECT_EQ(logprobs_of(none, 0, 2).logprob, -inf);
  EXPECT_TRUE(logprobs_of(none, 0, 2).top.empty());
  EXPECT_TRUE(logprobs_of(std::vector<float>{}, 0, 2).top.empty());
}

/// The sampler written plainly: every token sorted, then the min-p cut, the
/// top-k cut, the top-p cut and the walk to the draw (the kept mass summed
/// in sorted order under a top-k cut, in id order otherwise, as
/// sample_token sums it).
std::int32_t sorted_sampler(const std::vector<float>& logits, const sampling_config& cfg, std::uint64_t seed,
                            std::uint32_t index) {
  const double inv_t = 1.0 / static_cast<double>(cfg.temperature);
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits)
    mx = std::max(mx, static_cast<double>(l) * inv_t);
  std::vector<double> p(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    total += p[i] = std::exp(static_cast<double>(logits[i]) * inv_t - mx);
  std::vector<bool> cut(p.size()); // by min-p: the weight (the top one's is 1) under min_p
  if (cfg.min_p > 0.0f)
    for (std::size_t i = 0; i < p.size(); ++i)
      cut[i] = p[i] < static_cast<double>(cfg.min_p);
  for (auto& x : p)
    x /= total;
  std::vector<std::int32_t> order(p.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<std::int32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::size_t keep = static_cast<std::size_t>(std::count(cut.begin(), cut.end(), false));
  double kept = 0;
  if (cfg.top_k > 0 && static_cast<std::size_t>(cfg.top_k) < keep) {
    keep = static_cast<std::size_t>(cfg.top_k);
    for (std::size_t i = 0; i < keep; ++i)
      kept += p[order[i]];
  } else {
    for (std::size_t i = 0; i < p.size(); ++i)
      kept += cut[i] ? 0.0 : p[i];
  }
  if (cfg.top_p < 1.0f) {
    const double target = static_cast<double>(cfg.top_p) * kept;
    double cum = 0;
    std::size_t i = 0;
    while (i < keep) {
      cum += p[order[i++]];
      if (cum >= target)
        break;
    }
    keep = i;
    kept = cum;
  }
  const double u = uniform01(seed, index) * kept;
  double cum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    cum += p[order[i]];
    if (u < cum)
      return order[i];
  }
  return order[keep - 1];
}

TEST(sampling, sorting_only_what_the_walk_reaches_draws_what_a_full_sort_draws) {
  // Peaked and flat distributions over a large vocabulary, with ties; the
  // walk stops early, late, and in between.
  std::vector<std::vector<float>> rows{random_logits(32000, 3, 4.0f), random_logits(32000, 4, 0.3f),
                                       random_logits(5000, 5, 2.0f)};
  auto ties = random_logits(3000, 6, 1.0f);
  for (auto& x : ties)
    x = std::round(x * 4.0f) / 4.0f; // many equal logits
  rows.push_back(ties);
  const std::vector<sampling_config> configs{{1.0f, 1.0f, 0},       {0.7f, 0.9f, 0},        {1.3f, 0.99f, 0},
                                             {1.0f, 0.5f, 0},       {0.8f, 0.95f, 40},      {1.0f, 1.0f, 100},
                                             {2.0f, 0.999f, 0},     {1.0f, 1.0f, 0, 0.05f}, {0.8f, 0.95f, 40, 0.1f},
                                             {1.0f, 0.9f, 0, 0.3f}, {1.0f, 1.0f, 100, 0.01f}};
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (const auto& cfg : configs)
      for (std::uint64_t seed = 0; seed < 40; ++seed) {
        const auto want = sorted_sampler(rows[r], cfg, seed, 7);
        ASSERT_EQ(sample_token(rows[r], cfg, seed, 7), want)
          << "row " << r << ", T " << cfg.temperature << ", top-p " << cfg.top_p << ", top-k " << cfg.top_k
          << ", min-p " << cfg.min_p << ", seed " << seed;
      }
}

TEST(logprobs, a_prompts_are_the_same_whatever_rows_each_chunk_of_logits_holds) {
  constexpr std::size_t vocab = 7;
  const std::vector<std::int32_t> tokens{3, 0, 6, 6, 1, 2, 5};
  std::mt19937 rng{11};
  std::normal_distribution<float> normal{0.0f, 2.0f};
  std::vector<float> all(tokens.size() * vocab);
  for (auto& x : all)
    x = normal(rng);
  auto with_chunks = [&](std::size_t chunk) {
    std::vector<std::pair<std::size_t, std::size_t>> asked;
    auto out = prompt_logprobs_of(tokens, vocab, chunk, 2, [&](std::size_t first, std::size_t rows) {
      asked.emplace_back(first, rows);
      EXPECT_LE(rows, std::max<std::size_t>(chunk, 1));
      return std::span<const float>(all).subspan(first * vocab, rows * vocab);
    });
    std::size_t next = 0;
    for (const auto& [first, rows] : asked) {
      EXPECT_EQ(first, next) << "in order, each row once";
      next = first + rows;
    }
    EXPECT_EQ(next, tokens.size() - 1) << "the last row scores nothing: never asked for";
    return out;
  };
  const auto whole = with_chunks(100);
  ASSERT_EQ(whole.size(), tokens.size() - 1);
  for (std::size_t k = 0; k + 1 < tokens.size(); ++k) {
    const auto one = logprobs_of(std::span<const float>(all).subspan(k * vocab, vocab), tokens[k + 1], 2);
    EXPECT_EQ(whole[k].logprob, one.logprob) << "row " << k << " scores token " << k + 1;
    EXPECT_EQ(whole[k].top.size(), 2u);
  }
  for (const std::size_t chunk : {0, 1, 2, 4, 5, 6}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const auto got = with_chunks(chunk);
    ASSERT_EQ(got.size(), whole.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].logprob, whole[k].logprob);
      ASSERT_EQ(got[k].top.size(), whole[k].top.size());
      for (std::size_t t = 0; t < got[k].top.size(); ++t)
        EXPECT_EQ(got[k].top[t].token, whole[k].top[t].token);
    }
  }
  EXPECT_TRUE(prompt_logprobs_of(std::vector<std::int32_t>{4}, vocab, 3, 1, [](std::size_t, std::size_t) {
                ADD_FAILURE() << "one token: nothing to score";
                return std::span<const float>();
              }).empty());
  EXPECT_TRUE(prompt_logprobs_of(tokens, vocab, 3, 1, [](std::size_t, std::size_t) { return std::span<const float>(); })
                .empty())
    << "rows missing: none rather than garbage";
}

} // namespace
} // namespace troupe::gpu
