// Tests for policies/sjf_scheduling_policy: a table of waiting requests (with
// predicted lengths, arrivals and what a preempted one already produced) ->
// admitted ids in order, covering shortest predicted first, arrival order on
// ties, aging (a long request passed only by requests predicted shorter by
// more than the rate times the gap between arrivals), the stop at the first
// request that does not fit (no backfilling past it), the running cap and
// the token budget with its lone-request exception; configure(); and a
// stream of short requests that a long one outwaits with aging and never
// outwaits without.
#include "policies/sjf_scheduling_policy.hpp"
#include "tests/support/policy_views.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe::policies {
namespace {

static_assert(std::is_final_v<sjf_scheduling_policy>);

using ids = std::vector<std::uint64_t>;

/// A waiting request: `prompt` tokens, predicted to produce `predicted`
/// (max_new_tokens 1,000), arrived at `arrival`, `generated` produced before
/// a preemption.
waiting_view w(std::uint64_t id, std::uint32_t prompt, std::uint32_t predicted, double arrival,
               std::uint32_t generated = 0) {
  auto v = testing::waiting(id, prompt, 1000, arrival);
  v.predicted_tokens = predicted;
  v.generated = generated;
  // Pages as they come (on-demand reservation): the prompt and the next token.
  v.reserve_tokens = prompt + generated + 1;
  return v;
}

struct sjf_case {
  std::string name;
  std::vector<waiting_view> waiting; ///< arrival order
  double aging = 1;
  std::uint64_t free_pages = 1000;
  std::uint32_t max_running = 64;
  std::uint32_t token_budget = 100000;
  std::size_t running = 0; ///< requests already in the batch
  ids expected;            ///< admitted, in admission order
};

TEST(sjf_scheduling_policy, admits_by_predicted_remaining_output_with_aging) {
  const std::vector<sjf_case> table{
    {"shortest predicted first, whatever the arrival order",
     {w(1, 15, 300, 0), w(2, 15, 20, 0), w(3, 15, 100, 0)}, 1, 1000, 64, 100000, 0, {2, 3, 1}},
    {"equal predictions keep arrival order",
     {w(1, 15, 50, 0), w(2, 15, 50, 0), w(3, 15, 10, 0), w(4, 15, 50, 0)}, 1, 1000, 64, 100000, 0, {3, 1, 2, 4}},
    {"a preempted request ranks by what it has left to produce",
     {w(1, 15, 100, 0), w(2, 15, 300, 0, 250)}, 1, 1000, 64, 100000, 0, {2, 1}},
    {"one that outran its prediction ranks as one token left",
     {w(1, 15, 2, 0), w(2, 15, 40, 0, 90)}, 1, 1000, 64, 100000, 0, {2, 1}},
    // 500 tokens at 0 s against 10 tokens at 400 s: the gap is worth 400
    // tokens at 1 token/s, the difference in length 490: the short one first.
    {"a younger request shorter by more than the gap's worth passes",
     {w(1, 15, 500, 0), w(2, 15, 10, 400)}, 1, 1000, 64, 100000, 0, {2, 1}},
    {"one shorter by less than the gap's worth does not",
     {w(1, 15, 500, 0), w(2, 15, 10, 495)}, 1, 1000, 64, 100000, 0, {1, 2}},
    {"a faster rate lets the old request go first sooner",
     {w(1, 15, 500, 0), w(2, 15, 10, 400)}, 2, 1000, 64, 100000, 0, {1, 2}},
    {"without aging the shortest always goes first",
     {w(1, 15, 500, 0), w(2, 15, 10, 1e6)}, 0, 1000, 64, 100000, 0, {2, 1}},
    // 15 prompt tokens + 1 = one page; request 2's 100 take 7.
    {"stops at the first request that does not fit, even if a later one would",
     {w(1, 15, 10, 0), w(2, 100, 20, 0), w(3, 15, 30, 0)}, 1, 5, 64, 100000, 0, {1}},
    {"the running cap", {w(1, 15, 30, 0), w(2, 15, 20, 0), w(3, 15, 10, 0)}, 1, 1000, 4, 100000, 2, {3, 2}},
    // Two running requests decode 2 tokens: 2 + 15 + 15 = 32 fits 40, a
    // third prompt does not.
    {"the token budget", {w(1, 15, 30, 0), w(2, 15, 20, 0), w(3, 15, 10, 0)}, 1, 1000, 64, 40, 2, {3, 2}},
    {"a lone request may exceed the token budget", {w(1, 500, 30, 0), w(2, 15, 40, 0)}, 1, 1000, 64, 100, 0, {1}},
    {"nothing waiting", {}, 1, 1000, 64, 100000, 0, {}},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.name);
    sjf_scheduling_policy p;
    ASSERT_EQ(p.configure({{"aging_tokens_per_s", c.aging}}), "");
    std::vector<running_view> running(c.running);
    for (std::size_t i = 0; i < running.size(); ++i)
      running[i].request_id = 100 + i;
    auto in = testing::schedule_at(1000, c.waiting, running, c.free_pages);
    in.limits.max_running = c.max_running;
    in.limits.token_budget = c.token_budget;
    const auto d = p.schedule(in);
    EXPECT_EQ(d.admit, c.expected);
    EXPECT_TRUE(d.abort.empty());
    EXPECT_TRUE(d.squash.empty());
  }
}

TEST(sjf_scheduling_policy, takes_an_adapters_pages_once) {
  // Two requests of adapter 7 (4 pages of weights) and one of adapter 9:
  // 3 KV pages each for the first two plus adapter 7's 4 pages once = 10 of
  // 11, so adapter 9's request (1 + 4 pages) does not fit after them.
  auto a = w(1, 40, 10, 0);
  auto b = w(2, 40, 20, 0);
  auto c = w(3, 15, 30, 0);
  for (auto* v : {&a, &b})
    v->adapter_id = 7, v->adapter_pages = 4;
  c.adapter_id = 9;
  c.adapter_pages = 4;
  const std::vector<waiting_view> q{c, b, a};
  sjf_scheduling_policy p;
  EXPECT_EQ(p.schedule(testing::schedule_at(0, q, {}, 11)).admit, (ids{1, 2}));
  // With adapter 9 already in use its request takes only its KV page.
  const std::vector<std::uint32_t> in_use{9};
  EXPECT_EQ(p.schedule(testing::schedule_at(0, q, {}, 11, in_use)).admit, (ids{1, 2, 3}));
}

TEST(sjf_scheduling_policy, configure_checks_its_keys) {
  sjf_scheduling_policy p;
  EXPECT_EQ(p.configure({}), "");
  EXPECT_EQ(p.configure({{"aging_tokens_per_s", 0}}), "");
  EXPECT_NE(p.configure({{"aging_tokens_per_s", -1}}).find("aging_tokens_per_s"), std::string::npos);
  EXPECT_NE(p.configure({{"aging_tokens_per_s", INFINITY}}).find("finite"), std::string::npos);
  const auto e = p.configure({{"max_wait_s", 5}});
  EXPECT_NE(e.find("policy \"sjf\""), std::string::npos) << e;
  EXPECT_NE(e.find("max_wait_s"), std::string::npos) << e;
}

// A long request (500 predicted tokens) waits at t = 0 while a short one (5
// tokens) arrives every second and only one request runs at a time, each for
// one iteration of one second: the long one starts once the gap's worth in
// tokens covers the difference in length, and never without aging.
std::uint64_t iterations_until_the_long_one_starts(double aging, std::uint64_t limit) {
  sjf_scheduling_policy p;
  EXPECT_EQ(p.configure({{"aging_tokens_per_s", aging}}), "");
  std::vector<waiting_view> waiting{w(1, 15, 500, 0)};
  for (std::uint64_t t = 1; t <= limit; ++t) {
    waiting.push_back(w(1 + t, 15, 5, static_cast<double>(t)));
    auto in = testing::schedule_at(static_cast<double>(t), waiting, {}, 1000);
    in.limits.max_running = 1;
    const auto d = p.schedule(in);
    EXPECT_EQ(d.admit.size(), 1u);
    if (d.admit.front() == 1)
      return t;
    std::erase_if(waiting, [&](const waiting_view& v) { return v.request_id == d.admit.front(); });
  }
  return limit + 1;
}

TEST(sjf_scheduling_policy, aging_bounds_how_long_short_requests_keep_a_long_one_waiting) {
  // At 1 token/s the short request of second t passes only while
  // 5 + t < 500 (on a tie the older goes first); at 5 tokens/s while
  // 5 + 5t < 500.
  EXPECT_EQ(iterations_until_the_long_one_starts(1, 2000), 495u);
  EXPECT_EQ(iterations_until_the_long_one_starts(5, 2000), 99u);
  EXPECT_EQ(iterations_until_the_long_one_starts(0, 2000), 2001u);
}

} // namespace
} // namespace troupe::policies
