// Table tests for Apt-Serve's greedy selection (Algorithm 1): KV-only items
// by value per page, hidden steps and upgrades, demoted SLO-violated
// requests, and a case where the single-request fallback wins.
#include "policies/aptserve_greedy.hpp"
#include "policies/aptserve_scheduling_policy.hpp"
#include "tests/support/policy_views.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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

TEST(apt_greedy, scheduling_star_keeps_part_of_a_late_requests_value) {
  apt_params p;
  p.rho = 1;
  p.affected = 100; // KV only
  // 1 is late (p 10, demoted); 2 is on time (p 3). Both 1 page.
  const std::vector<apt_candidate> c{cand(1, 10, 1, true), cand(2, 3, 1)};
  EXPECT_EQ(apt_greedy(c, 1, p).chosen[0].request_id, 2u) << "near-zero: the late one waits";
  p.violated_decay = 0.4; // 0.4 · 10 = 4 > 3
  EXPECT_EQ(apt_greedy(c, 1, p).chosen[0].request_id, 1u) << "Scheduling*: 40% of its value still wins";
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

// -- the aptserve scheduling policy --------------------------------------------------

waiting_view wv(std::uint64_t id, std::uint32_t prompt, std::uint32_t max_new, double arrival) {
  return testing::waiting(id, prompt, max_new, arrival);
}

schedule_input apt_input(const std::vector<waiting_view>& w, std::uint64_t free_pages, std::uint32_t hidden_pt) {
  static const std::vector<running_view> none;
  static const std::vector<std::uint32_t> no_adapters;
  return testing::schedule_at(10, w, none, free_pages, no_adapters, hidden_pt);
}

TEST(aptserve_scheduling_policy, hidden_caches_when_memory_is_tight_kv_when_not) {
  // Four requests of 48 + 16 tokens: 4 KV pages, 2 as hidden caches (32 per page).
  const std::vector<waiting_view> w{wv(1, 48, 16, 1), wv(2, 48, 16, 2), wv(3, 48, 16, 3), wv(4, 48, 16, 4)};
  struct row {
    std::string what;
    std::uint64_t free;
    std::uint32_t hidden_pt;
    std::vector<std::uint64_t> admit, hidden;
  };
  const std::vector<row> table{
    {"ample memory: all as KV", 100, 32, {1, 2, 3, 4}, {}},
    {"8 pages: four hidden caches fit where two KV caches would", 8, 32, {1, 2, 3, 4}, {1, 2, 3, 4}},
    {"12 pages: two upgraded to KV, two hidden", 12, 32, {1, 2, 3, 4}, {3, 4}},
    {"no hidden caches on this backend: KV only", 8, 0, {1, 2}, {}},
  };
  for (const auto& r : table) {
    aptserve_scheduling_policy p;
    ASSERT_EQ(p.configure({{"rho", 0}, {"ttft_slo_s", 0}}), "");
    const auto d = p.schedule(apt_input(w, r.free, r.hidden_pt));
    auto admitted = d.admit;
    std::sort(admitted.begin(), admitted.end());
    auto hidden = d.hidden;
    std::sort(hidden.begin(), hidden.end());
    EXPECT_EQ(admitted, r.admit) << r.what;
    EXPECT_EQ(hidden, r.hidden) << r.what;
  }
  aptserve_scheduling_policy p;
  EXPECT_NE(p.configure({{"fallback", 3}}), "");
  EXPECT_NE(p.configure({{"beta", 1}}), "");
}

TEST(aptserve_scheduling_policy, a_turn_taking_its_cache_over_keeps_it_as_kv_on_the_pages_left) {
  // Hidden caches of 32 tokens a page. Turn 1 (200 + 56 tokens: 16 KV
  // pages, 8 hidden) takes 4 pages of its session's K and V over, so needs
  // 12 more as KV; request 2 needs 4 as KV, 2 hidden. As a hidden cache
  // turn 1 would compute its history again: it stays KV, with 2 hidden
  // beside it in 14 pages, alone in 13.
  std::vector<waiting_view> w{wv(1, 200, 56, 1), wv(2, 48, 16, 2)};
  w[0].adoptable_pages = 4;
  for (const std::uint64_t free : {14, 13}) {
    SCOPED_TRACE(::testing::Message() << free << " pages");
    aptserve_scheduling_policy p;
    ASSERT_EQ(p.configure({{"rho", 0}, {"ttft_slo_s", 0}}), "");
    const auto d = p.schedule(apt_input(w, free, 32));
    auto admitted = d.admit;
    std::sort(admitted.begin(), admitted.end());
    const std::vector<std::uint64_t> want_admitted = free == 14 ? std::vector<std::uint64_t>{1, 2}
                                                                : std::vector<std::uint64_t>{1};
    const std::vector<std::uint64_t> want_hidden = free == 14 ? std::vector<std::uint64_t>{2}
                                                              : std::vector<std::uint64_t>{};
    EXPECT_EQ(admitted, want_admitted);
    EXPECT_EQ(d.hidden, want_hidden);
  }
}

running_view started(std::uint64_t id, std::uint32_t context, std::uint64_t pages, double last_token,
                     bool hidden = false) {
  running_view v;
  v.request_id = id;
  v.context_tokens = context;
  v.pages = pages;
  v.last_token_s = last_token;
  v.started = true;
  v.hidden = hidden;
  return v;
}

TEST(aptserve_scheduling_policy, the_running_requests_turn_when_they_are_more_urgent) {
  // now 10. Waiting: 1 arrived at 9.5 (p 0.5). Running: 8 and 9, tokens last
  // at 7 and 8 (p 3 and 2), 48 tokens each: 4 KV pages with the next token.
  const std::vector<waiting_view> w{wv(1, 48, 16, 9.5)};
  const std::vector<running_view> r{started(8, 48, 4, 7), started(9, 48, 4, 8)};
  aptserve_scheduling_policy p;
  ASSERT_EQ(p.configure({{"rho", 0}, {"ttft_slo_s", 0}, {"tbt_slo_s", 0}}), "");
  auto d = p.schedule(testing::schedule_at(10, w, r, 100));
  EXPECT_TRUE(d.admit.empty()) << "Σp running 5 > Σp waiting 0.5: a decode round";
  EXPECT_TRUE(d.squash.empty()) << "the whole pool holds both";
  // A long-waiting request tips it: Σp waiting 6 > 5.
  const std::vector<waiting_view> late{wv(1, 48, 16, 4)};
  d = p.schedule(testing::schedule_at(10, late, r, 100));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{1}));
  // Nothing waiting fits: the running requests' turn even when less urgent.
  d = p.schedule(testing::schedule_at(10, late, r, 3));
  EXPECT_TRUE(d.admit.empty());
  // Grown to 64 tokens (5 pages with the next) in 4 pages each, nothing
  // free: the decode greedy keeps the more urgent (8) only. 9 keeps running
  // on the pages it holds, unless preempt_unselected (the paper's rule).
  const std::vector<running_view> grown{started(8, 64, 4, 7), started(9, 64, 4, 8)};
  d = p.schedule(testing::schedule_at(10, w, grown, 0));
  EXPECT_TRUE(d.squash.empty());
  ASSERT_EQ(p.configure({{"rho", 0}, {"ttft_slo_s", 0}, {"tbt_slo_s", 0}, {"preempt_unselected", 1}}), "");
  d = p.schedule(testing::schedule_at(10, w, grown, 0));
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{9}));
  // Admissions only: the waiting request goes in, no one is preempted.
  ASSERT_EQ(p.configure({{"rho", 0}, {"ttft_slo_s", 0}, {"tbt_slo_s", 0}, {"decode_side", 0}}), "");
  d = p.schedule(testing::schedule_at(10, w, r, 100));
  EXPECT_EQ(d.admit, (std::vector<std::uint64_t>{1}));
  EXPECT_TRUE(d.squash.empty());
}

TEST(aptserve_scheduling_policy, a_running_hidden_cache_kept_as_kv_is_prefilled_again) {
  // Hidden caches hold 32 tokens a page. Running 8 keeps a hidden cache;
  // with room and a positive ρ the decode greedy upgrades it to KV.
  const std::vector<waiting_view> none;
  const std::vector<running_view> r{started(8, 48, 2, 7, true), started(9, 48, 4, 7)};
  const std::vector<std::uint32_t> no_adapters;
  aptserve_scheduling_policy p;
  ASSERT_EQ(p.configure({{"rho", 0.001}, {"ttft_slo_s", 0}, {"tbt_slo_s", 0}}), "");
  auto d = p.schedule(testing::schedule_at(10, none, r, 100, no_adapters, 32));
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{8}));
  ASSERT_EQ(p.configure({{"rho", 0.001}, {"ttft_slo_s", 0}, {"tbt_slo_s", 0}, {"retype", 0}}), "");
  d = p.schedule(testing::schedule_at(10, none, r, 100, no_adapters, 32));
  EXPECT_TRUE(d.squash.empty());
}

TEST(aptserve_scheduling_policy, short_of_pages_the_decode_greedy_picks_the_survivors) {
  // On-demand reservation: three running requests, 2 pages short. The one
  // the greedy values least per page (least pending time) goes, and only
  // it: its 4 pages cover the shortfall.
  const std::vector<waiting_view> none;
  const std::vector<running_view> r{started(7, 64, 4, 7), started(8, 64, 4, 8), started(9, 64, 4, 9)};
  aptserve_scheduling_policy p;
  ASSERT_EQ(p.configure({{"rho", 0}, {"ttft_slo_s", 0}, {"tbt_slo_s", 0}}), "");
  auto in = testing::schedule_at(10, none, r, 0);
  in.limits.on_demand = true;
  in.pages_short = 2;
  schedule_decision d;
  p.preempt_for_growth(in, d);
  EXPECT_EQ(d.squash, (std::vector<std::uint64_t>{9}));
}

} // namespace
} // namespace troupe::policies
