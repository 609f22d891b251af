// Tests for the slora and chameleon scheduling policies: per-iteration tables
// (input views -> admitted, aborted, squashed), configure(), and a starvation
// check: under an endless stream of small requests a large one is admitted
// within a bounded number of iterations by chameleon.
#include "policies/chameleon_scheduling_policy.hpp"
#include "policies/slora_scheduling_policy.hpp"
#include "tests/support/policy_views.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <vector>

namespace troupe::policies {
namespace {

using ids = std::vector<std::uint64_t>;

waiting_view w(std::uint64_t id, std::uint32_t prompt, std::uint32_t max_new, std::uint32_t adapter = 0,
               std::uint64_t adapter_pages = 0, double arrival = 0, std::uint32_t queue = 0,
               std::uint32_t predicted = 0) {
  auto v = testing::waiting(id, prompt, max_new, arrival);
  v.predicted_tokens = predicted ? predicted : max_new;
  v.adapter_id = adapter;
  v.adapter_rank = adapter ? 8 : 0;
  v.adapter_pages = adapter_pages;
  v.queue = queue;
  return v;
}

running_view r(std::uint64_t id, std::uint32_t queue, std::uint32_t prompt, std::uint32_t predicted,
               std::uint32_t generated, std::uint64_t pages, std::uint32_t adapter = 0) {
  running_view v;
  v.request_id = id;
  v.queue = queue;
  v.prompt_tokens = prompt;
  v.predicted_tokens = predicted;
  v.generated = generated;
  v.context_tokens = prompt + generated;
  v.remaining_tokens = predicted > generated ? predicted - generated : 1;
  v.pages = pages;
  v.adapter_id = adapter;
  return v;
}

schedule_input input(const std::vector<waiting_view>& waiting, const std::vector<running_view>& running,
                     std::uint64_t free_pages, const std::vector<std::uint32_t>& in_use = {},
                     double now = 10) {
  return testing::schedule_at(now, waiting, running, free_pages, in_use);
}

// -- slora --------------------------------------------------------------------------

TEST(slora_scheduling_policy, memory_safe_admission_in_arrival_order) {
  slora_scheduling_policy p;
  // Each request: 16 + 16 tokens = 2 pages; adapter 7 adds 3 pages once.
  const std::vector<waiting_view> q{w(1, 16, 16), w(2, 16, 16, 7, 3), w(3, 16, 16, 7, 3), w(4, 16, 16)};
  struct row {
    std::string what;
    std::uint64_t free;
    ids admit;
  };
  for (const auto& c : std::vector<row>{{"all fit", 100, {1, 2, 3, 4}},
                                        {"adapter pages counted once", 9, {1, 2, 3}},
                                        {"stops at the first that does not fit", 6, {1}},
                                        {"nothing fits", 1, {}}}) {
    auto d = p.schedule(input(q, {}, c.free));
    EXPECT_EQ(d.admit, c.admit) << c.what;
    EXPECT_TRUE(d.abort.empty());
    EXPECT_TRUE(d.squash.empty());
  }
}

TEST(slora_scheduling_policy, clustering_prefers_adapters_already_in_the_batch) {
  slora_scheduling_policy p;
  ASSERT_EQ(p.configure({{"cluster", 2}}), "");
  const std::vector<waiting_view> q{w(1, 16, 16, 3, 1), w(2, 16, 16, 1, 1), w(3, 16, 16, 2, 1), w(4, 16, 16, 4, 1)};
  // The batch holds adapters 1 and 2: their requests go first; then arrival order.
  EXPECT_EQ(p.schedule(input(q, {}, 100, {1, 2})).admit, (ids{2, 3, 1, 4}));
  // Memory for two requests only: the batch's adapters win.
  EXPECT_EQ(p.schedule(input(q, {}, 4, {1, 2})).admit, (ids{2, 3}));
  // Fewer adapters in the batch than the limit: plain arrival order.
  EXPECT_EQ(p.schedule(input(q, {}, 4, {1})).admit, (ids{1}));
}

TEST(slora_scheduling_policy, early_abort_of_requests_that_cannot_meet_the_slo) {
  slora_scheduling_policy p;
  ASSERT_EQ(p.configure({{"slo_s", 6}}), "");
  // now = 10: waited 6.0, 5.5, 5.4 and 1 s; the margin is 0.5 s.
  const std::vector<waiting_view> q{w(1, 16, 16, 0, 0, 4.0), w(2, 16, 16, 0, 0, 4.5), w(3, 16, 16, 0, 0, 4.6),
                                    w(4, 16, 16, 0, 0, 9.0)};
  auto d = p.schedule(input(q, {}, 100));
  EXPECT_EQ(d.abort, (ids{1, 2}));
  // Two arrivals since the last round against an estimated batch of 1:
  // overloaded, so newest first.
  EXPECT_EQ(d.admit, (ids{4, 3}));
  const auto c = p.counters();
  EXPECT_EQ(c[0].second, 2.0);
}

TEST(slora_scheduling_policy, configure_names_bad_keys) {
  slora_scheduling_policy p;
  EXPECT_NE(p.configure({{"clusters", 2}}).find("\"clusters\""), std::string::npos);
  EXPECT_NE(p.configure({{"cluster", 1.5}}).find("whole number"), std::string::npos);
  EXPECT_NE(p.configure({{"slo_s", -1}}).find("slo_s"), std::string::npos);
  EXPECT_EQ(p.cluster(), 0u);
}

// -- chameleon ----------------------------------------------------------------------

/// Two queues: small (WRS < 0.5, quota 100 tokens) and large (quota 400).
queue_tuning two_queues() { return {{0.5}, {100, 400}}; }

TEST(chameleon_scheduling_policy, phase_one_within_quotas_then_phase_two_spare) {
  chameleon_scheduling_policy p;
  p.on_tuning(two_queues());
  // Small: 20 in + 20 predicted = 40 tokens each. Large: 100 + 200 = 300.
  const std::vector<waiting_view> q{w(1, 20, 20), w(2, 20, 20), w(3, 20, 20), w(4, 20, 20),
                                    w(5, 100, 200, 0, 0, 0, 1), w(6, 20, 20)};
  auto d = p.schedule(input(q, {}, 1000));
  // Phase 1: small admits 1, 2 (80 of 100); large admits 5 (300 of 400).
  // Phase 2: large is empty, its 100 spare tokens go to the small queue: 3, 4.
  EXPECT_EQ(d.admit, (ids{1, 2, 5, 3, 4}));
  // Running requests charge their queues: 2 small (80) and 1 large (300).
  const std::vector<running_view> running{r(1, 0, 20, 20, 5, 3), r(2, 0, 20, 20, 5, 3), r(5, 1, 100, 200, 5, 19)};
  const std::vector<waiting_view> more{w(7, 20, 20), w(8, 100, 50, 0, 0, 0, 1), w(9, 20, 20)};
  d = p.schedule(input(more, running, 1000));
  // Small: 20 left, 7 needs 40: blocked. Large: 100 left, 8 needs 150: blocked.
  // No queue emptied: no spare.
  EXPECT_TRUE(d.admit.empty());
  // Pooling every queue's leftover instead: 20 + 100 spare admit 7 (40),
  // then 9 (40); 8 (150) does not fit what is left.
  ASSERT_EQ(p.configure({{"pool_all_spare", 1}}), "");
  EXPECT_EQ(p.schedule(input(more, running, 1000)).admit, (ids{7, 9}));
  EXPECT_NE(p.configure({{"pool_all_spare", 2}}), "");
}

TEST(chameleon_scheduling_policy, a_queue_with_nothing_running_may_start_a_head_over_its_quota) {
  chameleon_scheduling_policy p;
  p.on_tuning(two_queues());
  const std::vector<waiting_view> q{w(1, 400, 400, 0, 0, 0, 1), w(2, 400, 400, 0, 0, 0, 1)};
  EXPECT_EQ(p.schedule(input(q, {}, 1000)).admit, (ids{1})) << "only the head";
  const std::vector<running_view> running{r(1, 1, 400, 400, 1, 50)};
  EXPECT_TRUE(p.schedule(input({w(2, 400, 400, 0, 0, 0, 1)}, running, 1000)).admit.empty());
}

TEST(chameleon_scheduling_policy, memory_bounds_every_admission) {
  chameleon_scheduling_policy p; // untuned: one queue, no quota limit
  const std::vector<waiting_view> q{w(1, 16, 16), w(2, 16, 16), w(3, 16, 16)};
  EXPECT_EQ(p.schedule(input(q, {}, 5)).admit, (ids{1, 2})) << "2 pages each";
}

TEST(chameleon_scheduling_policy, bypass_of_a_head_blocked_on_adapter_memory_then_squash) {
  chameleon_scheduling_policy p;
  // Head 1: KV 2 pages + adapter 6 pages; 4 pages free: blocked on its
  // adapter, 4 pages short. Running request 9 (4 pages) ends in 5 predicted
  // iterations; request 10 (10 pages) in 50.
  const std::vector<running_view> running{r(9, 0, 16, 10, 5, 4), r(10, 0, 16, 60, 10, 10)};
  const std::vector<waiting_view> q{w(1, 16, 16, 7, 6), w(2, 16, 16, 0, 0, 0, 0, 3),
                                    w(3, 16, 16, 0, 0, 0, 0, 30), w(4, 16, 16, 0, 0, 0, 0, 4)};
  auto d = p.schedule(input(q, running, 4));
  // The head waits 5 iterations (request 9 frees the 4 pages): 2 (3 + 1
  // iterations) passes, 3 (31) does not, 4 (4 + 1) does.
  EXPECT_EQ(d.admit, (ids{2, 4}));
  EXPECT_EQ(p.bypassed(), 2u);
  // The bypasser overruns its prediction of 3 tokens: squashed.
  const std::vector<running_view> later{r(9, 0, 16, 10, 7, 4), r(2, 0, 16, 3, 4, 2), r(4, 0, 16, 4, 4, 2)};
  d = p.schedule(input({w(1, 16, 16, 7, 6)}, later, 1));
  EXPECT_EQ(d.squash, (ids{2}));
  EXPECT_EQ(p.squashed(), 1u);
  // Within its prediction it stays.
  chameleon_scheduling_policy fresh;
  fresh.schedule(input(q, running, 4));
  const std::vector<running_view> on_time{r(2, 0, 16, 3, 3, 2)};
  EXPECT_TRUE(fresh.schedule(input({}, on_time, 0)).squash.empty());
}

TEST(chameleon_scheduling_policy, a_request_squashed_for_overrunning_never_passes_again) {
  // As above: the head (1) is blocked on its adapter for 5 iterations.
  const std::vector<running_view> running{r(9, 0, 16, 10, 5, 4), r(10, 0, 16, 60, 10, 10)};
  // 2 was squashed after 4 tokens against a prediction of 3: nothing of its
  // prediction is left, so it waits like any other. 3 predicted 20 and has
  // made 17: its 3 left (+ 1) end in time, and it is squashed only past 20.
  auto squashed = w(2, 16, 16, 0, 0, 0, 0, 3);
  squashed.generated = 4;
  auto resumed = w(3, 16, 32, 0, 0, 0, 0, 20);
  resumed.generated = 17;
  const std::vector<waiting_view> q{w(1, 16, 16, 7, 6), squashed, resumed};
  chameleon_scheduling_policy p;
  EXPECT_EQ(p.schedule(input(q, running, 4)).admit, (ids{3}));
  const std::vector<running_view> on_time{r(3, 0, 16, 20, 20, 2)}, late{r(3, 0, 16, 20, 21, 2)};
  EXPECT_TRUE(p.schedule(input({}, on_time, 0)).squash.empty());
  EXPECT_EQ(p.schedule(input({}, late, 0)).squash, (ids{3}));
}

TEST(chameleon_scheduling_policy, no_bypass_when_switched_off_or_blocked_by_kv) {
  chameleon_scheduling_policy off;
  ASSERT_EQ(off.configure({{"bypass", 0}}), "");
  const std::vector<running_view> running{r(9, 0, 16, 10, 5, 3)};
  const std::vector<waiting_view> q{w(1, 16, 16, 7, 6), w(2, 16, 16, 0, 0, 0, 0, 1)};
  EXPECT_TRUE(off.schedule(input(q, running, 4)).admit.empty());
  chameleon_scheduling_policy on;
  // The head's KV alone (2 pages) does not fit in 1 page: not adapter-blocked.
  EXPECT_TRUE(on.schedule(input(q, running, 1)).admit.empty());
  EXPECT_NE(on.configure({{"bypass", 2}}), "");
  EXPECT_NE(on.configure({{"lookahead", 2}}), "");
}

// max_wait_s: a request that has waited that long goes first, oldest first,
// whatever its queue's quota (off by default).
TEST(chameleon_scheduling_policy, requests_waiting_max_wait_s_go_first_oldest_first_whatever_their_quota) {
  // The small queue's quota (100 tokens) is spent by two running requests.
  const std::vector<running_view> running{r(20, 0, 20, 30, 1, 4), r(21, 0, 20, 30, 1, 4)};
  // 1 (small, arrived at 30) and 2 (large, arrived at 10) are overdue at
  // now = 100 with max_wait_s 60; 3 (small) and 4 (large, 300 tokens: over
  // what 2 leaves of the large quota) are not.
  const std::vector<waiting_view> q{w(1, 20, 20, 0, 0, 30, 0), w(2, 100, 200, 0, 0, 10, 1),
                                    w(3, 20, 20, 0, 0, 90, 0), w(4, 100, 200, 0, 0, 95, 1)};
  chameleon_scheduling_policy off;
  off.on_tuning(two_queues());
  EXPECT_EQ(off.schedule(input(q, running, 1000, {}, 100)).admit, (ids{2})) << "small quota spent";
  chameleon_scheduling_policy p;
  p.on_tuning(two_queues());
  ASSERT_EQ(p.configure({{"max_wait_s", 60}}), "");
  // In arrival order (the views' order): 1, then 2; 3 and 4 still wait for quota.
  EXPECT_EQ(p.schedule(input(q, running, 1000, {}, 100)).admit, (ids{1, 2}));
  const auto counters = p.counters();
  EXPECT_NE(std::find(counters.begin(), counters.end(), std::pair<std::string, double>{"chameleon_overdue_admitted", 2}),
            counters.end());
  EXPECT_NE(p.configure({{"max_wait_s", -1}}), "");
}

TEST(chameleon_scheduling_policy, an_overdue_request_that_does_not_fit_lets_in_only_requests_ending_before_it_can_start) {
  chameleon_scheduling_policy p;
  ASSERT_EQ(p.configure({{"max_wait_s", 60}}), "");
  // Overdue 1 needs 6 pages (96 tokens), 4 are free: 2 short. Running 9 (4
  // pages) ends in 5 predicted iterations, 10 (10 pages) in 50.
  const std::vector<running_view> running{r(9, 0, 16, 10, 5, 4), r(10, 0, 16, 60, 10, 10)};
  const std::vector<waiting_view> q{w(1, 48, 48, 0, 0, 0), w(2, 16, 16, 0, 0, 50, 0, 3),
                                    w(3, 16, 16, 0, 0, 50, 0, 30), w(4, 16, 16, 0, 0, 50, 0, 4),
                                    w(5, 16, 16, 0, 0, 50, 0, 2)};
  const auto d = p.schedule(input(q, running, 4, {}, 100));
  // 2 (3 + 1 iterations) and 4 (4 + 1) end in time; 3 (31) would not; 5
  // would, but 2 and 4 took the 4 pages.
  EXPECT_EQ(d.admit, (ids{2, 4}));
  EXPECT_EQ(p.bypassed(), 2u);
  EXPECT_EQ(p.counters().back(), (std::pair<std::string, double>{"chameleon_held_for_overdue", 1}));
  // A backfilled request that overruns its prediction (2: 3 predicted, 4
  // made) runs on.
  const std::vector<running_view> later{r(2, 0, 16, 3, 4, 2), r(4, 0, 16, 4, 2, 2)};
  EXPECT_TRUE(p.schedule(input({w(1, 48, 48, 0, 0, 0)}, later, 0, {}, 101)).squash.empty());
  // Without the bound, the head (not blocked on an adapter) holds its queue.
  chameleon_scheduling_policy off;
  EXPECT_TRUE(off.schedule(input(q, running, 4, {}, 100)).admit.empty());
}

/// An engine loop: every iteration three small requests arrive in queue 0
/// and keep the pool nearly full; at iteration 10 a large request arrives in
/// queue 1. Running requests produce one token per iteration and end at their
/// predicted length.
TEST(chameleon_scheduling_policy, a_large_request_is_not_starved_by_endless_small_ones) {
  struct job {
    waiting_view v;
    std::uint32_t generated = 0;
  };
  chameleon_scheduling_policy p;
  // The small queue may hold 600 tokens (9 requests); the large queue 1,200.
  p.on_tuning({{0.5}, {600, 1200}});
  std::vector<waiting_view> waiting; // arrival order
  std::vector<job> running;
  std::uint64_t next_id = 2;
  const std::uint64_t pool = 120;
  std::size_t admitted_at = 0, small_admitted_while_waiting = 0;
  for (std::size_t it = 1; it <= 500 && admitted_at == 0; ++it) {
    if (it == 10)
      waiting.push_back(w(1, 600, 400, 0, 0, static_cast<double>(it), 1)); // 63 pages
    for (int k = 0; k < 3; ++k) // 32 + 32 tokens = 4 pages
      waiting.push_back(w(next_id++, 32, 32, 0, 0, static_cast<double>(it), 0, 32));
    std::vector<running_view> rv;
    std::uint64_t used = 0;
    for (const auto& j : running) {
      const auto pages = pages_for(j.v.prompt_tokens, j.v.max_new_tokens, 16);
      used += pages;
      rv.push_back(r(j.v.request_id, j.v.queue, j.v.prompt_tokens, j.v.predicted_tokens, j.generated, pages));
    }
    auto in = input(waiting, rv, pool - used);
    in.limits.max_running = 1000;
    const auto d = p.schedule(in);
    for (auto id : d.admit) {
      if (id == 1)
        admitted_at = it;
      else if (it >= 10)
        ++small_admitted_while_waiting;
      auto i = std::find_if(waiting.begin(), waiting.end(), [&](const auto& x) { return x.request_id == id; });
      running.push_back({*i, 0});
      waiting.erase(i);
    }
    ASSERT_TRUE(d.squash.empty());
    for (auto& j : running)
      ++j.generated;
    std::erase_if(running, [](const job& j) { return j.generated >= j.v.predicted_tokens; });
  }
  ASSERT_GT(admitted_at, 0u) << "the large request was never admitted";
  EXPECT_LE(admitted_at, 10u + 40u) << "admitted only at iteration " << admitted_at;
  EXPECT_GT(small_admitted_while_waiting, 0u) << "the small queue kept being served";
}

} // namespace
} // namespace troupe::policies
