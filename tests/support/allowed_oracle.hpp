// The oracle of the token-mask tests: in each state a machine reaches
// reading a text, json_vocab allows exactly the tokens a copy of the
// machine takes whole (brute force over the vocabulary).
#pragma once

#include "runtime/json_constraint.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace troupe::testing {

/// Checks json_vocab's answer in every state `m` reaches reading `text`;
/// returns the bytes of `text` read (all, unless the machine refuses one).
template <class Machine>
std::size_t expect_allowed_as_fed(json_vocab& v, Machine m, const std::string& text) {
  for (std::size_t k = 0;; ++k) {
    std::vector<std::int32_t> want;
    for (std::int32_t tok = 0; tok < v.size(); ++tok) {
      auto copy = m;
      if (!v.bytes(tok).empty() && copy.feed(v.bytes(tok)))
        want.push_back(tok);
    }
    EXPECT_EQ(*v.allowed(m), want) << text.substr(0, k);
    if (k == text.size() || !m.step(static_cast<unsigned char>(text[k])))
      return k;
  }
}

/// Checks json_vocab's answer in every state of `walks` random walks of up
/// to `steps` tokens from `fresh()`, each token drawn from those allowed.
template <class Fresh>
void expect_allowed_on_random_walks(json_vocab& v, Fresh fresh, int walks, int steps, unsigned seed) {
  std::mt19937 rng(seed);
  for (int walk = 0; walk < walks; ++walk) {
    std::string text;
    auto m = fresh();
    for (int step = 0; step < steps; ++step) {
      std::vector<std::int32_t> want;
      for (std::int32_t tok = 1; tok < v.size(); ++tok) {
        auto copy = m;
        if (copy.feed(v.bytes(tok)))
          want.push_back(tok);
      }
      ASSERT_EQ(*v.allowed(m), want) << text;
      if (want.empty())
        break;
      const auto tok = want[rng() % want.size()];
      ASSERT_TRUE(m.feed(v.bytes(tok)));
      text += v.bytes(tok);
    }
  }
}

} // namespace troupe::testing
