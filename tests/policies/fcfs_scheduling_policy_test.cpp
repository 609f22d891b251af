// Tests for policies/fcfs_scheduling_policy, pages_for and page_budget: a
// table of (waiting, running, adapters in use, limits) -> admitted ids
// covering arrival order without overtaking, max_running, the token budget (1
// per running request), the lone request exception and free pages (KV pages
// plus the pages of each adapter not yet in use, less a turn's cache it takes
// over); then a tiny engine loop with per-step expected states.
#include "policies/fcfs_scheduling_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace troupe::policies {
namespace {

static_assert(std::is_trivially_copyable_v<waiting_view>);
static_assert(std::is_trivially_copyable_v<running_view>);
static_assert(std::is_trivially_copyable_v<schedule_limits>);
static_assert(std::is_nothrow_move_constructible_v<schedule_decision>);
static_assert(std::is_final_v<fcfs_scheduling_policy>);
static_assert(!std::is_abstract_v<fcfs_scheduling_policy>);
static_assert(noexcept(pages_for(1, 1, 16)));

// -- pages_for ------------------------------------------------------------------

struct pages_case {
  std::uint32_t prompt;
  std::uint32_t max_new;
  std::uint32_t page_tokens;
  std::uint64_t expected;
};

TEST(pages_for, rounds_prompt_plus_output_up_to_whole_pages) {
  const std::vector<pages_case> table{
    {0, 0, 16, 0},
    {1, 0, 16, 1},
    {0, 1, 16, 1},
    {15, 1, 16, 1},
    {16, 0, 16, 1},
    {16, 1, 16, 2},
    {10, 22, 16, 2},
    {10, 23, 16, 3},
    {100, 28, 16, 8},
    {100, 29, 16, 9},
    {7, 0, 1, 7},
    {5, 5, 3, 4},
    {1, 1, 0, 0}, // no page size: nothing to reserve
    // No 32-bit overflow: the sum is taken in 64 bits.
    {0xffffffffu, 0xffffffffu, 1, 0x1fffffffeull},
    {0xffffffffu, 1, 0x80000000u, 2},
  };
  for (const auto& c : table)
    EXPECT_EQ(pages_for(c.prompt, c.max_new, c.page_tokens), c.expected)
      << "prompt " << c.prompt << " max_new " << c.max_new << " page_tokens " << c.page_tokens;
}

// -- one schedule() call per case ---------------------------------------------------

/// A waiting request: id, prompt tokens, max new tokens, adapter and the
/// pages its weights take.
struct w {
  std::uint64_t id;
  std::uint32_t prompt;
  std::uint32_t max_new;
  std::uint32_t adapter = 0;
  std::uint64_t adapter_pages = 0;
};

struct fcfs_case {
  std::string name;
  std::vector<w> waiting;      ///< arrival order
  std::size_t running = 0;     ///< requests already in the batch
  std::uint32_t max_running = 0;
  std::uint32_t token_budget = 0;
  std::uint64_t free_pages = 0;
  std::uint32_t page_tokens = 16;
  std::vector<std::uint64_t> expected;
  std::vector<std::uint32_t> in_use = {}; ///< adapters pinned by admitted requests
};

std::vector<std::uint64_t> run_case(const fcfs_case& c) {
  std::vector<waiting_view> waiting;
  double t = 0;
  for (const auto& x : c.waiting) {
    waiting_view v;
    v.request_id = x.id;
    v.prompt_tokens = x.prompt;
    v.max_new_tokens = x.max_new;
    v.predicted_tokens = x.max_new;
    v.adapter_id = x.adapter;
    v.adapter_rank = x.adapter == 0 ? 0 : 8;
    v.adapter_pages = x.adapter_pages;
    v.arrival_s = t += 1;
    waiting.push_back(v);
  }
  std::vector<running_view> running;
  for (std::size_t i = 0; i < c.running; ++i)
    running.push_back({1000 + i, 50, 10, 0});
  schedule_input in;
  in.waiting = waiting;
  in.running = running;
  in.adapters_in_use = c.in_use;
  in.limits = {c.max_running, c.token_budget, c.free_pages, c.page_tokens};
  in.now_s = 100;
  fcfs_scheduling_policy fcfs;
  return fcfs.schedule(in).admit;
}

TEST(fcfs_scheduling_policy, admits_the_table_of_cases) {
  const std::vector<fcfs_case> table{
    {"nothing waits", {}, 0, 8, 1000, 100, 16, {}},
    {"everything fits: arrival order", {{3, 10, 6}, {1, 10, 6}, {2, 10, 6}}, 0, 8, 1000, 100, 16, {3, 1, 2}},
    // max_running counts the running batch.
    {"max_running caps admissions", {{1, 1, 1}, {2, 1, 1}, {3, 1, 1}}, 0, 2, 1000, 100, 16, {1, 2}},
    {"running requests use up max_running", {{1, 1, 1}, {2, 1, 1}}, 3, 4, 1000, 100, 16, {1}},
    {"batch already full", {{1, 1, 1}}, 4, 4, 1000, 100, 16, {}},
    {"max_running zero admits nothing", {{1, 1, 1}}, 0, 0, 1000, 100, 16, {}},
    // Token budget: 1 per running request plus every admitted prompt.
    {"budget fits prompts exactly", {{1, 40, 1}, {2, 60, 1}}, 0, 8, 100, 100, 16, {1, 2}},
    {"budget one short", {{1, 40, 1}, {2, 61, 1}}, 0, 8, 100, 100, 16, {1}},
    {"running requests count one token each", {{1, 97, 1}}, 3, 8, 100, 100, 16, {1}},
    {"running requests count one token each (over)", {{1, 98, 1}}, 3, 8, 100, 100, 16, {}},
    // A lone request may exceed the budget when nothing runs ...
    {"lone long prompt starts", {{1, 500, 1}, {2, 1, 1}}, 0, 8, 100, 100, 16, {1}},
    // ... but not when something runs.
    {"long prompt waits behind a running batch", {{1, 500, 1}}, 1, 8, 100, 100, 16, {}},
    // No overtaking: a misfit stops the scan even when later ones would fit.
    {"budget misfit blocks later small ones", {{1, 50, 1}, {2, 60, 1}, {3, 1, 1}}, 0, 8, 100, 100, 16, {1}},
    {"page misfit blocks later small ones", {{1, 16, 16}, {2, 64, 64}, {3, 1, 1}}, 0, 8, 1000, 8, 16, {1}},
    // Free pages: pages_for(prompt, max_new) each, summed.
    {"pages fit exactly", {{1, 16, 16}, {2, 30, 2}}, 0, 8, 1000, 4, 16, {1, 2}},
    {"pages one short", {{1, 16, 16}, {2, 30, 3}}, 0, 8, 1000, 4, 16, {1}},
    {"lone request still needs its pages", {{1, 500, 1}}, 0, 8, 100, 31, 16, {}},
    {"no free pages", {{1, 1, 1}}, 0, 8, 1000, 0, 16, {}},
    {"page size changes the count", {{1, 10, 6}, {2, 10, 6}}, 0, 8, 1000, 4, 8, {1, 2}},
    {"page size changes the count (over)", {{1, 10, 6}, {2, 10, 7}}, 0, 8, 1000, 4, 8, {1}},
    // Adapter pages: paid once by the first admission of an adapter not in use.
    {"a new adapter adds its pages", {{1, 4, 4, 7, 3}}, 0, 8, 1000, 4, 16, {1}},
    {"a new adapter adds its pages (over)", {{1, 4, 4, 7, 3}}, 0, 8, 1000, 3, 16, {}},
    {"an adapter in use costs nothing more", {{1, 4, 4, 7, 3}}, 1, 8, 1000, 1, 16, {1}, {7}},
    {"second user of a new adapter pays only KV", {{1, 4, 4, 7, 3}, {2, 4, 4, 7, 3}}, 0, 8, 1000, 5, 16, {1, 2}},
    {"second user (over)", {{1, 4, 4, 7, 3}, {2, 4, 4, 7, 3}}, 0, 8, 1000, 4, 16, {1}},
    {"different adapters each pay", {{1, 4, 4, 7, 3}, {2, 4, 4, 8, 3}}, 0, 8, 1000, 7, 16, {1}},
    {"different adapters each pay (fit)", {{1, 4, 4, 7, 3}, {2, 4, 4, 8, 3}}, 0, 8, 1000, 8, 16, {1, 2}},
    {"other adapters in use do not help", {{1, 4, 4, 7, 3}}, 1, 8, 1000, 3, 16, {}, {5, 6, 8}},
    {"base model pays no adapter pages", {{1, 4, 4, 0, 9}}, 0, 8, 1000, 1, 16, {1}},
    {"adapter misfit blocks later base requests", {{1, 4, 4, 7, 9}, {2, 1, 1}}, 0, 8, 1000, 5, 16, {}},
  };
  for (const auto& c : table)
    EXPECT_EQ(run_case(c), c.expected) << c.name;
}

// -- page_budget -------------------------------------------------------------------

waiting_view wv(std::uint32_t prompt, std::uint32_t max_new, std::uint32_t adapter,
                std::uint64_t adapter_pages) {
  waiting_view v;
  v.prompt_tokens = prompt;
  v.max_new_tokens = max_new;
  v.adapter_id = adapter;
  v.adapter_pages = adapter_pages;
  return v;
}

TEST(page_budget, takes_kv_pages_and_each_new_adapter_once) {
  const std::vector<std::uint32_t> in_use{9, 3}; // unsorted on purpose
  page_budget b{20, in_use};
  EXPECT_EQ(b.left(), 20u);
  // 16 + 16 tokens = 2 pages, plus 5 for adapter 4 which is not in use.
  EXPECT_EQ(b.need(wv(16, 16, 4, 5), 16), 7u);
  EXPECT_EQ(b.need(wv(16, 16, 3, 5), 16), 2u); // 3 is in use
  EXPECT_EQ(b.need(wv(16, 16, 9, 5), 16), 2u); // so is 9
  EXPECT_EQ(b.need(wv(16, 16, 0, 5), 16), 2u); // base model
  EXPECT_EQ(b.left(), 20u);                    // need() takes nothing
  EXPECT_TRUE(b.take(wv(16, 16, 4, 5), 16));
  EXPECT_EQ(b.left(), 13u);
  EXPECT_EQ(b.need(wv(16, 16, 4, 5), 16), 2u); // 4 is in use now
  EXPECT_TRUE(b.take(wv(16, 16, 4, 5), 16));
  EXPECT_EQ(b.left(), 11u);
  EXPECT_FALSE(b.take(wv(16, 16, 5, 10), 16)); // 12 > 11: nothing taken
  EXPECT_EQ(b.left(), 11u);
  EXPECT_EQ(b.need(wv(16, 16, 5, 10), 16), 12u); // and 5 did not become in use
  EXPECT_TRUE(b.take(wv(16, 16, 5, 9), 16));     // exactly 11
  EXPECT_EQ(b.left(), 0u);
  EXPECT_FALSE(b.take(wv(1, 0, 0, 0), 16));
  EXPECT_TRUE(b.take(wv(0, 0, 0, 0), 16)); // nothing needed, nothing taken
}

TEST(page_budget, a_turn_needs_its_pages_less_those_of_its_cache_it_takes_over) {
  page_budget b{10, {}};
  auto turn = wv(100, 60, 0, 0); // 10 pages of 16 tokens
  turn.adoptable_pages = 4;
  EXPECT_EQ(page_budget::cache_pages(turn, 16), 6u);
  EXPECT_EQ(page_budget::cache_pages(turn, 32, true), 5u) << "kept as a hidden cache it takes nothing over";
  turn.adoptable_pages = 12; // a cache longer than its need (a partial reuse)
  EXPECT_EQ(page_budget::cache_pages(turn, 16), 0u);
  turn.adoptable_pages = 4;
  turn.swapped = true;
  turn.pages = 7;
  EXPECT_EQ(page_budget::cache_pages(turn, 16), 7u) << "a swapped request takes its pages back";
  turn.swapped = false;
  EXPECT_EQ(b.need(turn, 16), 6u);
  EXPECT_TRUE(b.take(turn, 16));
  EXPECT_EQ(b.left(), 4u);
}

TEST(fcfs_scheduling_policy, name_is_fcfs) {
  EXPECT_EQ(fcfs_scheduling_policy{}.name(), "fcfs");
}

// -- a tiny engine loop ------------------------------------------------------------

/// Per-step expectation: ids admitted this step and the batch after it.
struct expected_step {
  std::vector<std::uint64_t> admitted;
  std::vector<std::uint64_t> running;
};

/// Runs FCFS once per step over `arrivals` (request i arrives at step
/// `arrive[i]`); every running request produces one token per step, admitted
/// ones start the step after, and a finished request frees its pages.
class engine {
public:
  struct req {
    std::uint64_t id;
    std::uint32_t prompt;
    std::uint32_t max_new;
    std::size_t arrive_step;
  };

  engine(std::vector<req> reqs, schedule_limits limits)
    : reqs_(std::move(reqs)), limits_(limits), free_(limits.free_pages) {}

  expected_step step(std::size_t n) {
    // Arrivals.
    for (const auto& r : reqs_)
      if (r.arrive_step == n)
        waiting_.push_back({.request_id = r.id, .prompt_tokens = r.prompt,
                            .max_new_tokens = r.max_new, .predicted_tokens = r.max_new,
                            .arrival_s = static_cast<double>(n)});
    // Admission.
    schedule_input in;
    in.waiting = waiting_;
    in.running = running_;
    in.limits = limits_;
    in.limits.free_pages = free_;
    in.now_s = static_cast<double>(n);
    auto admitted = policy_.schedule(in).admit;
    for (auto id : admitted) {
      auto it = std::find_if(waiting_.begin(), waiting_.end(),
                             [&](const waiting_view& v) { return v.request_id == id; });
      EXPECT_NE(it, waiting_.end());
      const auto pages = pages_for(it->prompt_tokens, it->max_new_tokens, limits_.page_tokens);
      EXPECT_LE(pages, free_);
      free_ -= pages;
      running_.push_back({id, it->prompt_tokens, it->max_new_tokens, 0});
      pages_[id] = pages;
      waiting_.erase(it);
    }
    EXPECT_LE(running_.size(), limits_.max_running);
    expected_step out{admitted, {}};
    for (const auto& r : running_)
      out.running.push_back(r.request_id);
    // The step: one token each; done requests leave and free their pages.
    for (auto& r : running_) {
      ++r.context_tokens;
      --r.remaining_tokens;
    }
    std::erase_if(running_, [&](const running_view& r) {
      if (r.remaining_tokens > 0)
        return false;
      free_ += pages_[r.request_id];
      return true;
    });
    return out;
  }

private:
  std::vector<req> reqs_;
  schedule_limits limits_;
  std::uint64_t free_;
  fcfs_scheduling_policy policy_;
  std::vector<waiting_view> waiting_;
  std::vector<running_view> running_;
  std::unordered_map<std::uint64_t, std::uint64_t> pages_;
};

TEST(fcfs_scheduling_policy, engine_loop_admits_in_order_as_capacity_frees) {
  // 16 tokens per page; 6 pages; at most 2 running; budget 64 tokens.
  engine e{{
             {1, 16, 16, 0}, // 2 pages, runs steps 0..15
             {2, 40, 8, 0},  // 3 pages, runs steps 0..7
             {3, 16, 2, 0},  // 2 pages: waits for a slot (max_running)
             {4, 2, 1, 1},   // 1 page, behind 3: no overtaking
           },
           {.max_running = 2, .token_budget = 64, .free_pages = 6, .page_tokens = 16}};
  const std::vector<expected_step> expected{
    /* 0 */ {{1, 2}, {1, 2}},
    /* 1 */ {{}, {1, 2}},
    /* 2 */ {{}, {1, 2}},
    /* 3 */ {{}, {1, 2}},
    /* 4 */ {{}, {1, 2}},
    /* 5 */ {{}, {1, 2}},
    /* 6 */ {{}, {1, 2}},
    /* 7 */ {{}, {1, 2}},   // 2 produces its 8th token and leaves
    /* 8 */ {{3}, {1, 3}},  // 3 (2 pages) fits; 4 would exceed max_running
    /* 9 */ {{}, {1, 3}},   // 3 leaves after its 2nd token
    /* 10 */ {{4}, {1, 4}}, // 4 runs one step
    /* 11 */ {{}, {1}},
  };
  for (std::size_t n = 0; n < expected.size(); ++n) {
    const auto got = e.step(n);
    EXPECT_EQ(got.admitted, expected[n].admitted) << "step " << n;
    EXPECT_EQ(got.running, expected[n].running) << "step " << n;
  }
}

TEST(fcfs_scheduling_policy, engine_loop_budget_holds_back_prefills) {
  // Budget 20 tokens: a running request costs 1, each prompt its length.
  engine e{{
             {1, 30, 3, 0}, // alone: may exceed the budget
             {2, 19, 1, 0}, // 1 running + 19 = 20: fits next step
             {3, 19, 1, 0}, // 1 + 19 + 19 > 20: one step later
           },
           {.max_running = 8, .token_budget = 20, .free_pages = 100, .page_tokens = 16}};
  const std::vector<expected_step> expected{
    /* 0 */ {{1}, {1}},
    /* 1 */ {{2}, {1, 2}},
    /* 2 */ {{3}, {1, 3}}, // 2 left after one token; 1 running + 19 fits
    /* 3 */ {{}, {}},
  };
  for (std::size_t n = 0; n < expected.size(); ++n) {
    const auto got = e.step(n);
    EXPECT_EQ(got.admitted, expected[n].admitted) << "step " << n;
    EXPECT_EQ(got.running, expected[n].running) << "step " << n;
  }
}

} // namespace
} // namespace troupe::policies
