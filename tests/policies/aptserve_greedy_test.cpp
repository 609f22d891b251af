// Table tests for Apt-Serve's greedy selection (Algorithm 1): KV-only items
// by value per page, hidden steps and upgrades, demoted SLO-violated
// requests, and a case where the single-request fallback wins.
#include "policies/aptserve_greedy.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace troupe::policies {
namespace {

struct row {
  std::string what;
  std::vector<apt_candidate> candidates;
  std::uint64_t budget;
  apt_params params;
  std::vector<apt_choice> expected;
  bool fallback;
};

apt_candidate cand(std::uint64_t id, double p, std::uint64_t m, bool violated = false, bool hidden = true) {
  return {id, p, m, violated, hidden};
}

TEST(apt_greedy, table) {
  apt_params kv_only; // ρ = 0 and N = 0: a hidden step never beats KV... unless allowed
  kv_only.rho = 1.0;
  kv_only.affected = 100; // hidden costs 100 s per page: never worth it
  apt_params cheap_hidden;
  cheap_hidden.rho = 0.1;
  cheap_hidden.affected = 2; // hidden costs 0.2 s per page
  const std::vector<row> table{
    {"everything fits as KV, by value per page",
     {cand(1, 1, 2), cand(2, 4, 2), cand(3, 3, 3)}, 100, kv_only,
     {{2, false, 2}, {3, false, 3}, {1, false, 2}}, false},
    {"stops at the first item that does not fit",
     {cand(1, 1, 2), cand(2, 4, 2), cand(3, 3, 3)}, 5, kv_only,
     {{2, false, 2}, {3, false, 3}}, false},
    {"tight memory: both as hidden caches (half the pages each)",
     {cand(1, 8, 4), cand(2, 8, 4)}, 4, cheap_hidden,
     {{1, true, 2}, {2, true, 2}}, false},
    {"a little more memory: the first is upgraded to KV",
     {cand(1, 8, 4), cand(2, 8, 4)}, 6, cheap_hidden,
     {{1, false, 4}, {2, true, 2}}, false},
    {"hidden not worth it when p < 2·N·ρ·m: KV only",
     {cand(1, 1.5, 4)}, 100, cheap_hidden,
     {{1, false, 4}}, false},
    {"a model that cannot hold hidden caches: KV only",
     {cand(1, 8, 4, false, false)}, 100, cheap_hidden,
     {{1, false, 4}}, false},
    {"SLO-violated requests are demoted behind everyone",
     {cand(1, 100, 1, true), cand(2, 0.5, 1)}, 100, kv_only,
     {{2, false, 1}, {1, false, 1}}, false},
    {"the single-request fallback wins: one large valuable request",
     // Greedy takes 2 (1.1 per page, 1 page); 1 (1 per page, 10 pages)
     // no longer fits, and its 10 beats the greedy 1.1.
     {cand(1, 10, 10), cand(2, 1.1, 1)}, 10, kv_only,
     {{1, false, 10}}, true},
  };
  for (const auto& r : table) {
    const auto s = apt_greedy(r.candidates, r.budget, r.params);
    EXPECT_EQ(s.chosen, r.expected) << r.what;
    EXPECT_EQ(s.fallback, r.fallback) << r.what;
  }
}

TEST(apt_greedy, the_fallback_can_be_switched_off_and_must_fit) {
  apt_params p;
  p.rho = 1;
  p.affected = 100;
  p.fallback = false;
  const std::vector<apt_candidate> c{cand(1, 10, 10), cand(2, 1.1, 1)};
  auto s = apt_greedy(c, 10, p);
  ASSERT_EQ(s.chosen.size(), 1u);
  EXPECT_EQ(s.chosen[0].request_id, 2u);
  EXPECT_FALSE(s.fallback);
  // A breaking request larger than the whole budget cannot be the fallback;
  // and as in Algorithm 1 the greedy stops at it, so nothing is chosen.
  p.fallback = true;
  const std::vector<apt_candidate> big{cand(1, 100, 50), cand(2, 1.1, 1)};
  s = apt_greedy(big, 10, p);
  EXPECT_TRUE(s.chosen.empty());
  EXPECT_FALSE(s.fallback);
}

} // namespace
} // namespace troupe::policies
