// Tests for policies/priority_scheduling_policy: a table of waiting and
// running requests (priorities, arrivals, pages) -> the requests admitted,
// in order, and those preempted: higher priority first, arrival order within
// one, the stop at the first that does not fit; the fewest running requests
// of a lower priority (the lowest first, then the latest) preempted so that
// it fits once they leave, none of the same or a higher priority, none that
// has not run a step, no second victim while the first ones' room is on its
// way, none where requests ending within patience_steps make the room; with
// preemption off, admission order alone; one priority throughout
// is fcfs's decision; growth on demand takes the lowest priority first;
// victims swapped out where the start-up measurements say a swap is quicker;
// configure().
#include "policies/fcfs_scheduling_policy.hpp"
#include "policies/priority_scheduling_policy.hpp"
#include "policies/registry.hpp"
#include "tests/support/policy_views.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe::policies {
namespace {

static_assert(std::is_final_v<priority_scheduling_policy>);

using ids = std::vector<std::uint64_t>;

/// A waiting request of `prompt` tokens (max_new_tokens 16: with the prompt,
/// whole pages of 16 tokens), of `priority`, arrived at `arrival`.
waiting_view w(std::uint64_t id, std::uint32_t prompt, std::int32_t priority, double arrival = 0) {
  auto v = testing::waiting(id, prompt, 16, arrival);
  v.priority = priority;
  return v;
}

/// A running request holding `pages`, of `priority`, arrived at `arrival`,
/// that has run a step unless `started` is false; `leaving`: chosen for
/// preemption by an earlier decision; `remaining` tokens to go.
running_view r(std::uint64_t id, std::uint64_t pages, std::int32_t priority, double arrival = 0, bool started = true,
               bool leaving = false, std::uint32_t remaining = 1000) {
  running_view v;
  v.leaving = leaving;
  v.remaining_tokens = remaining;
  v.request_id = id;
  v.pages = pages;
  v.priority = priority;
  v.arrival_s = arrival;
  v.started = started;
  return v;
}

struct priority_case {
  std::string name;
  std::vector<waiting_view> waiting; ///< arrival order
  std::vector<running_view> running;
  std::uint64_t free_pages;
  std::uint32_t max_running;
  ids admitted; ///< in admission order
  ids squashed; ///< in the order they give way
  bool preempt = true;
  std::uint32_t patience = 8;
};

TEST(priority_scheduling_policy, admits_by_priority_and_preempts_the_least_urgent) {
  // Each waiting request of 16 prompt tokens takes 2 pages (16 + 16 output).
  const std::vector<priority_case> table{
    {"higher priority first, arrival order within one",
     {w(1, 16, 0, 0), w(2, 16, 5, 1), w(3, 16, 0, 2), w(4, 16, 5, 3)}, {}, 100, 64, {2, 4, 1, 3}, {}},
    {"negative priorities after the default",
     {w(1, 16, -1, 0), w(2, 16, 0, 1)}, {}, 100, 64, {2, 1}, {}},
    {"stops at the first that does not fit, no backfilling past it",
     {w(1, 16, 5, 0), w(2, 48, 3, 1), w(3, 16, 0, 2)}, {}, 3, 64, {1}, {}},
    // A blocked request is admitted by a later decision, once its victims have left.
    {"a blocked request preempts the lowest priority running, the latest arrival first among equals",
     {w(1, 16, 5)}, {r(10, 2, 0, 1), r(11, 2, -1, 2), r(12, 2, 0, 3)}, 0, 64, {}, {11}},
    {"as many as it takes, in order",
     {w(1, 48, 5)}, {r(10, 2, 0, 1), r(11, 2, -1, 2), r(12, 2, 0, 3)}, 0, 64, {}, {11, 12}},
    {"the running cap: one leaving makes room",
     {w(1, 16, 1)}, {r(10, 1, 0, 1), r(11, 1, 0, 2)}, 100, 2, {}, {11}},
    {"victims still leaving that make room: it waits for them, no second victim",
     {w(1, 16, 5)}, {r(10, 2, 0, 1, false, true), r(11, 2, 0, 2)}, 0, 64, {}, {}},
    {"victims still leaving that do not make room: more are chosen",
     {w(1, 48, 5)}, {r(10, 2, 0, 1, false, true), r(11, 2, 0, 2)}, 0, 64, {}, {11}},
    {"never one of the same or a higher priority",
     {w(1, 16, 0)}, {r(10, 2, 0, 1), r(11, 2, 3, 2)}, 0, 64, {}, {}},
    {"never one that has not run a step since its admission",
     {w(1, 16, 5)}, {r(10, 2, 0, 1, false)}, 0, 64, {}, {}},
    {"nothing preempted where all the lower ones would not make room",
     {w(1, 80, 5)}, {r(10, 2, 0, 1), r(11, 2, 0, 2)}, 0, 64, {}, {}},
    {"those before the blocked one are admitted at once, those after it wait",
     {w(1, 16, 5, 0), w(2, 16, 4, 1), w(3, 16, 0, 2)}, {r(10, 2, 0, 0), r(11, 2, 1, 1)}, 2, 64, {1}, {10}},
    {"preemption off: admission order alone",
     {w(1, 16, 5)}, {r(10, 2, 0, 1)}, 0, 64, {}, {}, false},
    {"one ending within patience_steps on its own makes the room: it waits for it",
     {w(1, 16, 5)}, {r(10, 2, 0, 1), r(11, 2, 0, 2, true, false, 8)}, 0, 64, {}, {}},
    {"so does one of the same priority, or one not started",
     {w(1, 16, 5)}, {r(10, 2, 0, 1), r(11, 2, 5, 2, false, false, 3)}, 0, 64, {}, {}},
    {"one ending a step later does not: the least urgent is preempted",
     {w(1, 16, 5)}, {r(10, 2, 0, 1), r(11, 2, 0, 0, true, false, 9)}, 0, 64, {}, {10}},
    {"those ending within patience_steps that do not make room together: preempted as before",
     {w(1, 48, 5)}, {r(10, 2, 0, 1), r(11, 2, 0, 2, true, false, 2)}, 0, 64, {}, {11, 10}},
    {"the running cap: one ending soon makes room",
     {w(1, 16, 1)}, {r(10, 1, 0, 1), r(11, 1, 0, 2, true, false, 1)}, 100, 2, {}, {}},
    {"patience_steps 0: preempted at once (vLLM's)",
     {w(1, 16, 5)}, {r(10, 2, 0, 1), r(11, 2, 0, 2, true, false, 1)}, 0, 64, {}, {11}, true, 0},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.name);
    priority_scheduling_policy p;
    ASSERT_EQ(p.configure({{"preempt", c.preempt ? 1.0 : 0.0}, {"patience_steps", c.patience}}), "");
    auto in = testing::schedule_at(10, c.waiting, c.running, c.free_pages);
    in.limits.max_running = c.max_running;
    const auto d = p.schedule(in);
    EXPECT_EQ(d.admit, c.admitted);
    EXPECT_EQ(d.squash, c.squashed);
    EXPECT_TRUE(d.swap.empty());
    EXPECT_TRUE(d.abort.empty());
  }
}

TEST(priority_scheduling_policy, one_priority_throughout_decides_as_fcfs_does) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(round);
    std::vector<waiting_view> waiting;
    const auto n = rng() % 12;
    for (std::uint64_t i = 0; i < n; ++i)
      waiting.push_back(w(i + 1, 1 + rng() % 100, 3, static_cast<double>(i)));
    std::vector<running_view> running;
    for (std::uint64_t i = 0; i < rng() % 4; ++i)
      running.push_back(r(100 + i, 1 + rng() % 4, 3, static_cast<double>(i)));
    auto in = testing::schedule_at(10, waiting, running, rng() % 30);
    in.limits.max_running = 2 + rng() % 8;
    priority_scheduling_policy p;
    fcfs_scheduling_policy f;
    const auto mine = p.schedule(in);
    const auto theirs = f.schedule(in);
    EXPECT_EQ(mine.admit, theirs.admit);
    EXPECT_TRUE(mine.squash.empty());
  }
}

TEST(priority_scheduling_policy, growth_on_demand_takes_the_lowest_priority_first) {
  const std::vector<running_view> running{r(10, 3, 0, 1), r(11, 3, -2, 0), r(12, 3, 0, 2), r(13, 3, 1, 3),
                                          r(14, 3, -2, 5, false)};
  auto in = testing::schedule_at(10, {}, running, 0);
  in.limits.on_demand = true;
  in.pages_short = 5;
  priority_scheduling_policy p;
  schedule_decision d;
  p.preempt_for_growth(in, d);
  EXPECT_EQ(d.squash, (ids{11, 12})) << "the lowest priority, then the latest arrival; not one that has not started";
  // Calibrated, with room in the host pool for one: the first swapped out
  // (its swap the quicker), the next recomputed.
  cost_calibration c;
  c.d2h_bytes_per_s = c.h2d_bytes_per_s = 1e9;
  c.prefill_points = {{100, 0.1}, {200, 0.2}, {400, 0.4}, {800, 0.8}};
  p.on_calibration(c);
  std::vector<running_view> long_ones = running;
  for (auto& v : long_ones)
    v.context_tokens = 900;
  auto grown = testing::schedule_at(10, {}, long_ones, 0);
  grown.limits.on_demand = true;
  grown.limits.page_bytes = 1 << 20;
  grown.limits.host_free_pages = 4;
  grown.pages_short = 5;
  schedule_decision g;
  p.preempt_for_growth(grown, g);
  EXPECT_EQ(g.swap, (ids{11}));
  EXPECT_EQ(g.squash, (ids{12}));
}

TEST(priority_scheduling_policy, a_victim_is_swapped_out_where_the_measurements_say_that_is_quicker) {
  // Two running requests of 3 pages (context 900 tokens) of priority 0; the
  // waiting one of priority 5 needs 4 pages: both give way, the later first.
  auto v10 = r(10, 3, 0, 1), v11 = r(11, 3, 0, 2);
  v10.context_tokens = v11.context_tokens = 900;
  const std::vector<waiting_view> waiting{w(1, 48, 5)};
  const std::vector<running_view> running{v10, v11};
  auto in = testing::schedule_at(10, waiting, running, 0);
  in.limits.page_bytes = 1 << 20;
  in.limits.host_free_pages = 10;
  priority_scheduling_policy p;
  EXPECT_TRUE(p.wants_calibration());
  auto d = p.schedule(in);
  EXPECT_EQ(d.squash, (ids{11, 10})) << "unmeasured: recomputed";
  EXPECT_TRUE(d.swap.empty());
  // 3 MiB out and back at 1 GB/s: 6.3 ms; a prefill of 900 tokens at 1 ms a
  // token: 900 ms. Swapped.
  cost_calibration c;
  c.d2h_bytes_per_s = c.h2d_bytes_per_s = 1e9;
  c.prefill_points = {{100, 0.1}, {200, 0.2}, {400, 0.4}, {800, 0.8}};
  p.on_calibration(c);
  d = p.schedule(in);
  EXPECT_EQ(d.swap, (ids{11, 10}));
  EXPECT_TRUE(d.squash.empty());
  // Room in the host pool for one: the other recomputed.
  in.limits.host_free_pages = 4;
  d = p.schedule(in);
  EXPECT_EQ(d.swap, (ids{11}));
  EXPECT_EQ(d.squash, (ids{10}));
  // A slow link makes the recompute the quicker.
  in.limits.host_free_pages = 10;
  c.d2h_bytes_per_s = c.h2d_bytes_per_s = 1e6;
  p.on_calibration(c);
  EXPECT_EQ(p.schedule(in).squash, (ids{11, 10}));
  // swap 0: recomputed, and nothing measured at start-up.
  c.d2h_bytes_per_s = c.h2d_bytes_per_s = 1e9;
  p.on_calibration(c);
  ASSERT_EQ(p.configure({{"swap", 0}}), "");
  EXPECT_FALSE(p.wants_calibration());
  EXPECT_EQ(p.schedule(in).squash, (ids{11, 10}));
}

TEST(priority_scheduling_policy, is_registered_and_checks_its_keys) {
  auto made = make_scheduling_policy("priority");
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(made->name(), "priority");
  priority_scheduling_policy p;
  EXPECT_EQ(p.configure({}), "");
  EXPECT_NE(p.configure({{"preempt", 2}}).find("preempt"), std::string::npos);
  EXPECT_EQ(p.configure({{"patience_steps", 0}}), "");
  for (const double bad : {-1.0, 1.5, 2e6})
    EXPECT_NE(p.configure({{"patience_steps", bad}}).find("patience_steps"), std::string::npos) << bad;
  const auto e = p.configure({{"aging_tokens_per_s", 1}});
  EXPECT_NE(e.find("policy \"priority\""), std::string::npos) << e;
}

} // namespace
} // namespace troupe::policies
