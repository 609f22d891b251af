// What every backend that computes log-probabilities must give (the cpu
// and cuda backends' tests): one per entry when any asks; an entry that did
// not ask, or failed, gets none; an entry's are the same within a batch as
// alone (within `tol`: batched kernels may round differently); the most
// likely first, none above 0, as many as asked; a greedy entry's token is
// the first listed. And the prompt log-probabilities, against each prefix
// run alone.
#pragma once

#include "gpu/backend.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

namespace troupe::testing {

/// Two lists of the most likely tokens agree: the same length, each token
/// of `got` with its log-probability in `want`, within `tol` (near-ties may
/// swap places, and one at the edge of the list may be missing).
inline void expect_same_top(const std::vector<gpu::token_logprob>& got, const std::vector<gpu::token_logprob>& want,
                            float tol) {
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    bool found = false;
    for (const auto& x : want)
      if (x.token == got[k].token) {
        found = true;
        EXPECT_NEAR(x.logprob, got[k].logprob, tol) << "token " << x.token;
      }
    if (!found) {
      EXPECT_LT(std::fabs(got[k].logprob - want.back().logprob), 2 * tol)
        << "token " << got[k].token << " missing alone, and not at the edge of the list";
    }
  }
}

/// Runs `batch` (prefill entries: rerunning one alone writes the same
/// cache) and each entry that asks for log-probabilities alone, and checks
/// the above.
inline void expect_logprobs_follow_each_entry(gpu::executor_backend& b, const std::vector<gpu::step_entry>& batch,
                                              float tol) {
  ASSERT_TRUE(b.computes_logprobs());
  const auto r = b.run_step(batch);
  ASSERT_EQ(r.tokens.size(), batch.size());
  ASSERT_EQ(r.logprobs.size(), batch.size()) << "one per entry when any asks";
  for (std::size_t i = 0; i < batch.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "entry " << i << " (logprobs " << batch[i].logprobs << ")");
    const auto& got = r.logprobs[i];
    if (batch[i].logprobs < 0 || r.tokens[i] < 0) {
      EXPECT_EQ(got.logprob, 0.0f);
      EXPECT_TRUE(got.top.empty());
      continue;
    }
    EXPECT_LE(got.logprob, 0.0f);
    ASSERT_EQ(got.top.size(), static_cast<std::size_t>(batch[i].logprobs));
    for (std::size_t k = 0; k < got.top.size(); ++k) {
      EXPECT_LE(got.top[k].logprob, 0.0f);
      if (k > 0) {
        EXPECT_GE(got.top[k - 1].logprob, got.top[k].logprob);
      }
      if (got.top[k].token == r.tokens[i]) {
        EXPECT_EQ(got.top[k].logprob, got.logprob) << "the sampled token listed with its own log-probability";
      }
    }
    if (batch[i].temperature <= 0 && !got.top.empty()) {
      EXPECT_EQ(got.top[0].token, r.tokens[i]) << "greedy samples the most likely";
      EXPECT_EQ(got.top[0].logprob, got.logprob);
    }
    const auto alone = b.run_step(std::span{&batch[i], 1});
    ASSERT_EQ(alone.logprobs.size(), 1u);
    ASSERT_EQ(alone.tokens.at(0), r.tokens[i]);
    EXPECT_NEAR(alone.logprobs[0].logprob, got.logprob, tol);
    expect_same_top(got.top, alone.logprobs[0].top, tol);
  }
}

/// Runs `batch` and checks each entry's prompt log-probabilities against
/// the entry's prefixes run alone (rerunning a prefill writes the same
/// cache): input k + 1's alternatives are those the prefix of k + 1 tokens
/// gives its next token (asked as logprobs), and its own log-probability
/// theirs wherever it is listed there or sampled (greedily). Entries that
/// did not ask, or failed, get none. Returns how many input tokens had
/// their own log-probability checked so.
inline std::size_t expect_prompt_logprobs_match_prefixes(gpu::executor_backend& b,
                                                         const std::vector<gpu::step_entry>& batch, float tol) {
  std::size_t checked = 0;
  EXPECT_TRUE(b.computes_prompt_logprobs());
  const auto r = b.run_step(batch);
  EXPECT_EQ(r.tokens.size(), batch.size());
  EXPECT_EQ(r.prompt_logprobs.size(), batch.size()) << "one per entry when any asks";
  if (r.prompt_logprobs.size() != batch.size() || r.tokens.size() != batch.size())
    return checked;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "entry " << i << " (prompt_logprobs " << batch[i].prompt_logprobs << ")");
    const auto& e = batch[i];
    const auto& got = r.prompt_logprobs[i];
    if (e.prompt_logprobs < 0 || r.tokens[i] < 0) {
      EXPECT_TRUE(got.empty());
      continue;
    }
    EXPECT_EQ(got.size(), e.tokens.size() - 1) << "one per input token after the first";
    for (std::size_t k = 0; k < got.size() && k + 1 < e.tokens.size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "input token " << k + 1);
      auto prefix = e;
      prefix.tokens.resize(k + 1);
      prefix.new_tokens = static_cast<std::uint32_t>(k + 1);
      prefix.prompt_logprobs = -1;
      prefix.logprobs = e.prompt_logprobs;
      prefix.temperature = 0;
      const auto alone = b.run_step(std::span{&prefix, 1});
      EXPECT_EQ(alone.logprobs.size(), 1u);
      if (alone.logprobs.size() != 1 || alone.tokens.at(0) < 0)
        continue;
      const auto& want = alone.logprobs[0];
      EXPECT_LE(got[k].logprob, 0.0f);
      expect_same_top(got[k].top, want.top, tol);
      const auto own = e.tokens[k + 1];
      if (alone.tokens[0] == own) {
        EXPECT_NEAR(got[k].logprob, want.logprob, tol) << "the next input token, sampled alone";
        ++checked;
        continue;
      }
      for (const auto& x : want.top)
        if (x.token == own) {
          EXPECT_NEAR(got[k].logprob, x.logprob, tol) << "the next input token, listed alone";
          ++checked;
        }
      for (const auto& x : got[k].top)
        if (x.token == own) {
          EXPECT_EQ(x.logprob, got[k].logprob) << "the input token listed with its own log-probability";
        }
    }
  }
  return checked;
}

/// Logit adjustments steer sampling and nothing else: `e` (a greedy
/// prefill) with +100 on a token it would not pick samples that token, and
/// -1000 on its own pick samples another; an adjustment outside the
/// vocabulary is ignored; the log-probabilities reported are the model's,
/// the same as without any.
inline void expect_logit_adjust_steers_sampling_only(gpu::executor_backend& b, gpu::step_entry e, std::int32_t vocab,
                                                     float tol) {
  e.temperature = 0;
  e.logprobs = 3;
  e.logit_adjust.clear();
  const auto plain = b.run_step(std::span{&e, 1});
  ASSERT_EQ(plain.tokens.size(), 1u);
  const auto own = plain.tokens[0];
  ASSERT_GE(own, 0);
  const std::int32_t other = own == 0 ? 1 : own - 1;
  auto steered = e;
  steered.logit_adjust = {{other, 100.0f}, {vocab + 5, 50.0f}};
  const auto up = b.run_step(std::span{&steered, 1});
  ASSERT_EQ(up.tokens.size(), 1u);
  EXPECT_EQ(up.tokens[0], other) << "+100 on a token: it is drawn";
  ASSERT_EQ(up.logprobs.size(), 1u);
  ASSERT_EQ(plain.logprobs.size(), 1u);
  expect_same_top(up.logprobs[0].top, plain.logprobs[0].top, tol);
  steered.logit_adjust = {{own, -1000.0f}};
  const auto down = b.run_step(std::span{&steered, 1});
  ASSERT_EQ(down.tokens.size(), 1u);
  EXPECT_GE(down.tokens[0], 0);
  EXPECT_NE(down.tokens[0], own) << "-1000 on the greedy pick: another is drawn";
  ASSERT_EQ(down.logprobs.size(), 1u);
  EXPECT_NEAR(down.logprobs[0].logprob, plain.logprobs[0].top.at(1).logprob, tol)
    << "the model's own log-probability of what was drawn: the runner-up's";
  // A repetition penalty of 1 leaves a marked token as it is.
  steered.logit_adjust = {{own, 0.0f, true}};
  steered.repetition_penalty = 1.0f;
  EXPECT_EQ(b.run_step(std::span{&steered, 1}).tokens.at(0), own);
}

/// min-p reaches the sampler: at temperature 1 with min_p 1 only the most
/// likely token (the greedy pick) is ever drawn, while with min_p 0 some of
/// the same seeds draw another (a random model spreads its mass).
inline void expect_min_p_one_draws_the_greedy_pick(gpu::executor_backend& b, gpu::step_entry e) {
  e.temperature = 0;
  e.logprobs = -1;
  e.logit_adjust.clear();
  const auto own = b.run_step(std::span{&e, 1}).tokens.at(0);
  e.temperature = 1.0f;
  std::size_t others = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    e.seed = seed;
    e.min_p = 1.0f;
    EXPECT_EQ(b.run_step(std::span{&e, 1}).tokens.at(0), own) << "seed " << seed;
    e.min_p = 0.0f;
    others += b.run_step(std::span{&e, 1}).tokens.at(0) != own;
  }
  EXPECT_GT(others, 0u) << "without the cut some draw is another token";
}

} // namespace troupe::testing
