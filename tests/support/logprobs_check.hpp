// What every backend that computes log-probabilities must give (the cpu
// and cuda backends' tests): one per entry when any asks; an entry that did
// not ask, or failed, gets none; an entry's are the same within a batch as
// alone (within `tol`: batched kernels may round differently); the most
// likely first, none above 0, as many as asked; a greedy entry's token is
// the first listed.
#pragma once

#include "gpu/backend.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

namespace troupe::testing {

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
    ASSERT_EQ(alone.logprobs[0].top.size(), got.top.size());
    for (std::size_t k = 0; k < got.top.size(); ++k) {
      // Near-ties may swap places; each token keeps its log-probability.
      bool found = false;
      for (const auto& x : alone.logprobs[0].top)
        if (x.token == got.top[k].token) {
          found = true;
          EXPECT_NEAR(x.logprob, got.top[k].logprob, tol) << "token " << x.token;
        }
      if (!found) {
        EXPECT_LT(std::fabs(got.top[k].logprob - alone.logprobs[0].top.back().logprob), 2 * tol)
          << "token " << got.top[k].token << " missing alone, and not at the edge of the list";
      }
    }
  }
}

} // namespace troupe::testing
