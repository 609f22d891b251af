// A single node's actors (memory pool, copy engine, adapter cache, executor,
// scheduler) on CAF's deterministic scheduler, over a backend whose steps
// take 10 modelled ms and whose adapter loads take 50: requests run to their
// length one token per step; a cancelled one, one whose adapter cannot be
// loaded and one the backend cannot run each end once, with their reason,
// while the rest run on; requests that outgrow the pool are swapped out and
// back in; and when all have ended every page is free again, none given
// back twice.
#include "actors/adapter_cache_actor.hpp"
#include "actors/copy_engine_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/memory_pool_actor.hpp"
#include "actors/scheduler_actor.hpp"

#include "policies/registry.hpp"
#include "runtime/request_state.hpp"
#include "tests/support/actor_fixture.hpp"
#include "tests/support/scripted_backend.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <vector>

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::scripted_backend;

/// What the scheduler told its progress sink, per request.
struct progress_log {
  std::map<std::uint64_t, std::vector<std::int32_t>> tokens;
  std::map<std::uint64_t, std::vector<finish_reason>> ends;
};

progress_sink_actor::behavior_type sink(progress_sink_actor::pointer, std::shared_ptr<progress_log> log) {
  return {
    [log](const progress_batch& b) {
      for (const auto& t : b.tokens)
        log->tokens[t.request_id].push_back(t.token);
      for (const auto& f : b.finished)
        log->ends[f.request_id].push_back(static_cast<finish_reason>(f.reason));
    },
  };
}

class scheduler_actor_test : public testing::actor_fixture {
protected:
  /// The node: `pages` device pages and `host_pages` host pages of 16
  /// tokens; pages reserved for each request's whole life, or as it grows.
  void start(std::uint64_t pages = 64, std::uint64_t host_pages = 0, bool on_demand = false,
             std::unique_ptr<policies::scheduling_policy> policy = policies::make_scheduling_policy("fcfs")) {
    backend->step_seconds = 0.010;
    backend->copy_seconds = 0.050;
    pool = spawn_memory_pool(sys(), pages, host_pages);
    auto copy = spawn_copy_engine(sys(), {backend, 1.0, false, 4});
    adapter_cache_config acc;
    acc.catalog = adapter_catalog({{"a", 16, ""}, {"b", 16, ""}}, adapter_generate_options{},
                                  [](std::uint32_t r) { return r * 125ull; }, 1000);
    acc.policy = policies::make_eviction_policy("lru");
    acc.options.prefetch = false;
    acc.pool_pages = pages;
    acc.pool = pool;
    acc.copy_engine = copy;
    auto cache = spawn_adapter_cache(sys(), std::move(acc));
    scheduler_config sc;
    sc.limits.total_pages = pages;
    sc.limits.page_tokens = 16;
    sc.limits.host_pages = host_pages;
    sc.limits.page_bytes = 1000;
    sc.limits.on_demand = on_demand;
    sc.policy = std::move(policy);
    sc.backend = backend;
    sc.pool = pool;
    sc.adapter_cache = cache;
    sc.executor = spawn_executor(sys(), {backend, 1.0, false});
    sc.copy_engine = copy;
    sched = spawn_scheduler(sys(), std::move(sc));
    self->send(sched, subscribe_atom_v, sys().spawn(sink, log));
    run();
  }

  /// Submits a request of a 20-token prompt; true if the scheduler took it.
  bool submit(std::uint64_t id, std::uint32_t max_new, std::uint32_t adapter = 0) {
    request_spec s;
    s.request_id = id;
    s.prompt = std::vector<std::int32_t>(20, 3);
    s.max_new_tokens = max_new;
    s.adapter_id = adapter;
    s.adapter_rank = adapter ? 16 : 0;
    s.adapter_pages = adapter ? 2 : 0;
    s.temperature = 0;
    self->send(sched, submit_atom_v, std::move(s));
    run();
    const auto r = receive_now<std::uint8_t>();
    return r && *r == static_cast<std::uint8_t>(scheduler_core::submit_result::accepted);
  }
  /// Lets modelled time pass, 1 ms at a time, until `n` requests have ended
  /// (at most `limit`).
  void until_ended(std::size_t n, std::chrono::milliseconds limit = 5s) {
    for (auto t = 0ms; t < limit && log->ends.size() < n; t += 1ms)
      advance(1ms);
  }
  void expect_pool_empty() {
    EXPECT_EQ(stat(pool, "pool_pages_kv"), 0);
    EXPECT_EQ(stat(pool, "pool_empty_releases"), 0);
    EXPECT_EQ(stat(pool, "host_pool_pages_kv"), 0);
    EXPECT_EQ(stat(pool, "host_pool_empty_releases"), 0);
  }

  std::shared_ptr<scripted_backend> backend = std::make_shared<scripted_backend>();
  std::shared_ptr<progress_log> log = std::make_shared<progress_log>();
  memory_pool_actor pool;
  scheduler_actor sched;
};

TEST_F(scheduler_actor_test, requests_run_to_their_length_and_end_once) {
  start();
  ASSERT_TRUE(submit(1, 3));
  ASSERT_TRUE(submit(2, 5, 1)); // waits 50 ms for its adapter
  ASSERT_TRUE(submit(3, 4));
  until_ended(3);
  for (const auto& [id, n] : std::map<std::uint64_t, std::size_t>{{1, 3}, {2, 5}, {3, 4}}) {
    EXPECT_EQ(log->tokens[id], std::vector<std::int32_t>(n, 7)) << "request " << id;
    EXPECT_EQ(log->ends[id], std::vector<finish_reason>{finish_reason::length}) << "request " << id;
  }
  EXPECT_EQ(std::count(backend->calls.begin(), backend->calls.end(), "load 1"), 1);
  expect_pool_empty();
  EXPECT_EQ(stat(pool, "pool_pages_adapters"), 2); // idle, still cached
}

TEST_F(scheduler_actor_test, a_cancelled_request_ends_once_and_the_others_run_on) {
  start();
  ASSERT_TRUE(submit(1, 1000));
  ASSERT_TRUE(submit(2, 6));
  for (int i = 0; i < 35; ++i) // three steps
    advance(1ms);
  EXPECT_FALSE(log->tokens[1].empty());
  self->send(sched, cancel_atom_v, std::uint64_t{1});
  run();
  EXPECT_EQ(receive_now<bool>(), std::optional<bool>{true});
  until_ended(2);
  EXPECT_EQ(log->ends[1], std::vector<finish_reason>{finish_reason::cancelled});
  EXPECT_LT(log->tokens[1].size(), 10u);
  EXPECT_EQ(log->ends[2], std::vector<finish_reason>{finish_reason::length});
  EXPECT_EQ(log->tokens[2].size(), 6u);
  self->send(sched, cancel_atom_v, std::uint64_t{1}); // ended already
  run();
  EXPECT_EQ(receive_now<bool>(), std::optional<bool>{false});
  expect_pool_empty();
}

TEST_F(scheduler_actor_test, an_adapter_that_cannot_load_or_a_step_that_fails_ends_only_its_requests) {
  start();
  backend->failing = {2};
  backend->failing_requests = {3};
  ASSERT_TRUE(submit(1, 4, 2));
  ASSERT_TRUE(submit(2, 4, 2));
  ASSERT_TRUE(submit(3, 4));
  ASSERT_TRUE(submit(4, 4));
  until_ended(4);
  EXPECT_EQ(log->ends[1], std::vector<finish_reason>{finish_reason::adapter_error});
  EXPECT_EQ(log->ends[2], std::vector<finish_reason>{finish_reason::adapter_error});
  EXPECT_EQ(log->ends[3], std::vector<finish_reason>{finish_reason::error});
  EXPECT_TRUE(log->tokens[3].empty());
  EXPECT_EQ(log->ends[4], std::vector<finish_reason>{finish_reason::length});
  EXPECT_EQ(log->tokens[4].size(), 4u);
  expect_pool_empty();
  EXPECT_EQ(stat(pool, "pool_pages_adapters"), 0);
}

// Two requests that outgrow a pool of 6 pages as they decode: one is
// swapped out to the host pool and back in, and both still produce every
// token, once each.
TEST_F(scheduler_actor_test, a_request_swapped_out_to_make_room_resumes_and_finishes) {
  auto adaptive = policies::make_scheduling_policy("adaptive");
  ASSERT_EQ(adaptive->configure({{"mode", 2}}), ""); // swap whenever the host pool has room
  adaptive->on_calibration({1e9, 1e9, {}, 0}); // what start-up measures
  start(6, 16, true, std::move(adaptive));
  ASSERT_TRUE(submit(1, 40)); // 20 + 40 tokens: 4 pages in the end, 2 at first
  ASSERT_TRUE(submit(2, 40));
  until_ended(2);
  for (std::uint64_t id : {1, 2}) {
    EXPECT_EQ(log->tokens[id].size(), 40u) << "request " << id;
    EXPECT_EQ(log->ends[id], std::vector<finish_reason>{finish_reason::length}) << "request " << id;
  }
  const auto swaps_out = std::count_if(backend->calls.begin(), backend->calls.end(),
                                       [](const std::string& c) { return c.starts_with("swap out"); });
  const auto swaps_in = std::count_if(backend->calls.begin(), backend->calls.end(),
                                      [](const std::string& c) { return c.starts_with("swap in"); });
  // One of them makes room for the other, once: the pages of a swap-out
  // in flight count as freed, and the one swapped back in has room for its
  // next step (before, both were swapped out, came back without that room,
  // and neither could step again).
  EXPECT_EQ(swaps_out, 1);
  EXPECT_EQ(swaps_in, 1);
  EXPECT_EQ(stat(sched, "requests_swapped_out"), static_cast<double>(swaps_out));
  expect_pool_empty();
}

} // namespace
} // namespace troupe
