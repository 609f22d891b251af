#include "messages/beam_search.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace troupe::openai {
namespace {

using tokens = std::vector<std::int32_t>;
/// A model: the log-probabilities of each next token after a sequence.
using model = std::function<std::vector<double>(const tokens&)>;

/// A fixed pseudo-random distribution over `vocab` tokens for each prefix.
model toy(std::int32_t vocab) {
  return [vocab](const tokens& t) {
    std::uint64_t h = 1469598103934665603ull;
    for (auto x : t)
      h = (h ^ static_cast<std::uint64_t>(x + 7)) * 1099511628211ull;
    std::vector<double> w(static_cast<std::size_t>(vocab));
    double sum = 0;
    for (auto& x : w) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      x = 0.05 + static_cast<double>(h >> 40) / static_cast<double>(1ull << 24);
      sum += x;
    }
    for (auto& x : w)
      x = std::log(x / sum);
    return w;
  };
}

/// The top alternatives a generate lists, most likely first.
std::vector<wire::token_logprob> top_of(const std::vector<double>& lp) {
  std::vector<wire::token_logprob> out;
  for (std::size_t i = 0; i < lp.size(); ++i)
    out.push_back({static_cast<std::int32_t>(i), "t" + std::to_string(i), static_cast<float>(lp[i])});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.logprob > b.logprob; });
  return out;
}

std::vector<beam_search::beam> run(const model& m, const tokens& prompt, const tokens& ends, beam_settings s) {
  beam_search bs(prompt, ends, s);
  for (auto live = bs.step(); !live.empty(); live = bs.step()) {
    for (std::size_t k = 0; k < live.size(); ++k)
      bs.extend(k, top_of(m(live[k])));
    if (!bs.advance())
      break;
  }
  return bs.best();
}

/// Every sequence of at most `max` tokens (ending at the first end token),
/// with its summed log-probability as float alternatives give it.
void every(const model& m, const tokens& prompt, const tokens& ends, std::uint32_t max, tokens so_far, double lp,
           std::vector<std::pair<tokens, double>>& out) {
  if (so_far.size() == max) {
    out.emplace_back(so_far, lp);
    return;
  }
  auto whole = prompt;
  whole.insert(whole.end(), so_far.begin(), so_far.end());
  const auto next = m(whole);
  for (std::size_t i = 0; i < next.size(); ++i) {
    auto t = so_far;
    t.push_back(static_cast<std::int32_t>(i));
    const double l = lp + static_cast<double>(static_cast<float>(next[i]));
    if (std::find(ends.begin(), ends.end(), static_cast<std::int32_t>(i)) != ends.end())
      out.emplace_back(t, l);
    else
      every(m, prompt, ends, max, t, l, out);
  }
}

TEST(beam_search, wide_enough_it_finds_the_best_sequences_there_are) {
  // Three tokens, token 2 the end; beams wide enough to keep every
  // sequence: the answer is the exhaustive search's best, in order.
  const auto m = toy(3);
  const tokens prompt{5, 9};
  for (const double penalty : {0.0, 1.0, 2.0}) {
    beam_settings s;
    s.width = 27;
    s.max_tokens = 3;
    s.length_penalty = penalty;
    const auto got = run(m, prompt, {2}, s);
    std::vector<std::pair<tokens, double>> all;
    every(m, prompt, {2}, 3, {}, 0, all);
    const auto score = [&](const std::pair<tokens, double>& x) {
      const bool ended = x.first.back() == 2;
      const auto len = std::max<std::size_t>(x.first.size() - (ended ? 1 : 0), 1);
      return x.second / std::pow(static_cast<double>(len), penalty);
    };
    std::stable_sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return score(a) > score(b); });
    ASSERT_EQ(got.size(), std::min<std::size_t>(27, all.size())) << penalty;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i].logprob, all[i].second, 1e-9) << penalty << " " << i;
      EXPECT_NEAR(beam_search({}, {2}, s).score(got[i]), score(all[i]), 1e-9) << penalty << " " << i;
      EXPECT_EQ(got[i].ended, got[i].tokens.back() == 2);
    }
    EXPECT_EQ(got[0].tokens, all[0].first) << penalty;
  }
}

TEST(beam_search, one_beam_is_greedy) {
  const auto m = toy(6);
  beam_settings s;
  s.width = 1;
  s.max_tokens = 8;
  const auto got = run(m, {1}, {}, s);
  ASSERT_EQ(got.size(), 1u);
  tokens greedy;
  tokens whole{1};
  for (int i = 0; i < 8; ++i) {
    const auto lp = m(whole);
    const auto t = static_cast<std::int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    greedy.push_back(t);
    whole.push_back(t);
  }
  EXPECT_EQ(got[0].tokens, greedy);
  EXPECT_FALSE(got[0].ended);
}

TEST(beam_search, two_beams_find_what_greedy_misses) {
  // Token 0 is likelier first (0.6), but nothing likely follows it; after
  // token 1 (0.4) token 3 is near certain. Greedy writes 0 then one of the
  // flat ones: 0.6 × 0.25; two beams keep 1 and find 1, 3: 0.4 × 0.9.
  const model m = [](const tokens& t) -> std::vector<double> {
    if (t.size() == 1)
      return {std::log(0.6), std::log(0.4), std::log(1e-6), std::log(1e-6)};
    if (t.back() == 0)
      return {std::log(0.25), std::log(0.25), std::log(0.25), std::log(0.25)};
    return {std::log(0.04), std::log(0.03), std::log(0.03), std::log(0.9)};
  };
  beam_settings s;
  s.max_tokens = 2;
  s.width = 1;
  EXPECT_EQ(run(m, {7}, {}, s)[0].tokens, (tokens{0, 0}));
  s.width = 2;
  const auto two = run(m, {7}, {}, s);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].tokens, (tokens{1, 3}));
  EXPECT_NEAR(two[0].logprob, std::log(0.4f) + std::log(0.9f), 1e-6);
  EXPECT_EQ(two[1].tokens, (tokens{0, 0})); // (the first of four equal ones)
}

TEST(beam_search, an_end_token_completes_a_beam_and_is_counted_in_its_logprob) {
  // After the prompt the end token (3) is likeliest: that beam is complete
  // at once; the others go on to max_tokens.
  const model m = [](const tokens& t) -> std::vector<double> {
    if (t.size() == 1)
      return {std::log(0.2), std::log(0.1), std::log(0.1), std::log(0.6)};
    return {std::log(0.7), std::log(0.1), std::log(0.1), std::log(0.1)};
  };
  beam_settings s;
  s.width = 2;
  s.max_tokens = 4;
  s.logprobs = 2;
  const auto got = run(m, {9}, {3}, s);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tokens, (tokens{3}));
  EXPECT_TRUE(got[0].ended);
  EXPECT_NEAR(got[0].logprob, std::log(0.6f), 1e-6);
  EXPECT_EQ(got[1].tokens, (tokens{0, 0, 0, 0}));
  EXPECT_FALSE(got[1].ended);
  // Each token's entry: the token, and the 2 likeliest at its place.
  ASSERT_EQ(got[1].logprobs.size(), 4u);
  EXPECT_EQ(got[1].logprobs[0].sampled.token, 0);
  ASSERT_EQ(got[1].logprobs[0].top.size(), 2u);
  EXPECT_EQ(got[1].logprobs[0].top[0].token, 3);
  EXPECT_EQ(got[1].logprobs[0].top[1].token, 0);
  // With ignore_eos the end token is a token like any other.
  s.ignore_eos = true;
  const auto on = run(m, {9}, {3}, s);
  EXPECT_EQ(on[0].tokens.size(), 4u);
  EXPECT_FALSE(on[0].ended);
}

TEST(beam_search, a_beam_that_cannot_go_on_completes_as_it_is) {
  beam_settings s;
  s.width = 2;
  s.max_tokens = 5;
  beam_search bs({1, 2}, {}, s);
  EXPECT_EQ(bs.alternatives(), 4u);
  ASSERT_EQ(bs.step(), (std::vector<tokens>{{1, 2}}));
  bs.extend(0, {{4, "a", -0.1f}, {5, "b", -0.5f}, {6, "c", -3.0f}});
  ASSERT_TRUE(bs.advance());
  const auto live = bs.step();
  ASSERT_EQ(live, (std::vector<tokens>{{1, 2, 4}, {1, 2, 5}}));
  bs.stop(0); // the context is full
  bs.stop(1);
  EXPECT_FALSE(bs.advance());
  EXPECT_TRUE(bs.step().empty());
  const auto got = bs.best();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tokens, (tokens{4}));
  EXPECT_EQ(got[1].tokens, (tokens{5}));
  EXPECT_TRUE(got[0].logprobs.empty()); // none asked
  // No tokens to generate: nothing to search, the empty beam the answer.
  s.max_tokens = 0;
  beam_search none({1}, {}, s);
  EXPECT_TRUE(none.step().empty());
  ASSERT_EQ(none.best().size(), 1u);
  EXPECT_TRUE(none.best()[0].tokens.empty());
  // Asked for more alternatives than 2 × width: that many.
  s.logprobs = 9;
  EXPECT_EQ(beam_search({1}, {}, s).alternatives(), 9u);
}

} // namespace
} // namespace troupe::openai
