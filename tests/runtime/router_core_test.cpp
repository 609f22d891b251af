// The router's bookkeeping: placement by load and KV locality, migrations,
// and a node's loss: its requests placed again, the client's stream neither
// repeated nor cut.
#include "runtime/router_core.hpp"

#include <gtest/gtest.h>

namespace troupe {
namespace {

request_spec spec(std::uint64_t id, std::uint64_t session = 0, double arrival = 0) {
  request_spec s;
  s.request_id = id;
  s.session = session;
  s.prompt = {1, 2, 3};
  s.max_new_tokens = 4;
  s.arrival_s = arrival;
  return s;
}

/// Tokens [from, to) of request `id`, each with its log-probabilities when
/// `logprobs` (-index as its own), and token 0 with its prompt's.
progress_batch tokens(std::uint64_t id, std::uint32_t from, std::uint32_t to, bool logprobs = false) {
  progress_batch b;
  for (auto i = from; i < to; ++i) {
    b.tokens.push_back({id, i, static_cast<std::int32_t>(100 + i)});
    if (logprobs)
      b.logprobs.push_back({id, i, {-static_cast<float>(i), {}}});
    if (logprobs && i == 0)
      b.prompt_logprobs.push_back({id, {{-0.5f, {}}}});
  }
  return b;
}

progress_batch finish(std::uint64_t id) {
  progress_batch b;
  b.finished.push_back({id, static_cast<std::uint8_t>(finish_reason::length), 3, 4, 0, 0, 0});
  return b;
}

TEST(placement, least_loaded_breaks_ties_by_tokens_then_placements_and_skips_dead_nodes) {
  std::vector<policies::node_load> n(3);
  n[0].in_flight = 1;
  n[1].placed = 2;
  n[2].placed = 1;
  EXPECT_EQ(policies::least_loaded(n), 2);
  n[2].tokens = 10;
  EXPECT_EQ(policies::least_loaded(n), 1);
  n[1].alive = false;
  EXPECT_EQ(policies::least_loaded(n), 2);
  for (auto& x : n)
    x.alive = false;
  EXPECT_EQ(policies::least_loaded(n), -1);
  EXPECT_EQ(policies::place(n, 0, 2).node, -1);
}

TEST(placement, a_session_stays_with_its_kv_until_its_node_is_too_busy) {
  std::vector<policies::node_load> n(2);
  n[0].in_flight = 2;
  auto p = policies::place(n, 0, 2);
  EXPECT_EQ(p.node, 0);
  EXPECT_FALSE(p.migrate);
  n[0].in_flight = 3;
  p = policies::place(n, 0, 2);
  EXPECT_EQ(p.node, 1);
  EXPECT_TRUE(p.migrate);
  n[0].alive = false;
  p = policies::place(n, 0, 2);
  EXPECT_EQ(p.node, 1);
  EXPECT_FALSE(p.migrate) << "nothing to pull from a dead node";
}

TEST(router_core, requests_spread_over_idle_nodes_and_sessions_follow_their_kv) {
  router_core r{3, 1};
  for (std::uint64_t id = 1; id <= 3; ++id) {
    const auto route = r.place(spec(id, 10 + id));
    EXPECT_EQ(route.node, static_cast<std::int32_t>(id - 1));
    EXPECT_EQ(route.pull_from, -1);
    r.assign(spec(id, 10 + id), static_cast<std::uint32_t>(route.node));
  }
  for (std::uint64_t id = 1; id <= 3; ++id)
    r.on_progress(finish(id));
  EXPECT_EQ(r.in_flight(), 0u);
  // Session 12's next turn goes back to node 1, where its KV is.
  EXPECT_EQ(r.place(spec(4, 12)).node, 1);
  r.assign(spec(4, 12), 1);
  r.assign(spec(5), 1);
  r.assign(spec(6), 1);
  // Node 1 now carries three, the others none: session 12 moves, KV and all.
  const auto route = r.place(spec(7, 12));
  EXPECT_EQ(route.pull_from, 1);
  EXPECT_NE(route.node, 1);
  EXPECT_EQ(r.migrations(), 1u);
}

TEST(router_core, an_advisory_chooses_the_node_and_the_turn_goes_there) {
  router_core r{2, 0};
  r.assign(spec(1, 7), 0);
  r.on_progress(finish(1));
  r.assign(spec(2), 0); // node 0 busier than node 1 by one: imbalance 0
  const auto a = r.advise(7);
  EXPECT_EQ(a.node, 1);
  EXPECT_EQ(a.pull_from, 0) << "its KV is pulled at advisory time";
  r.assign(spec(3), 1);
  r.assign(spec(4), 1); // node 1 is now the busier one, but the turn was advised there
  const auto t = r.place(spec(5, 7));
  EXPECT_EQ(t.node, 1);
  EXPECT_EQ(t.pull_from, -1) << "already moved";
  EXPECT_EQ(r.migrations(), 1u);
}

TEST(router_core, announced_turns_count_as_load_and_spread_sessions_held_on_one_node) {
  router_core r{2, 0};
  for (std::uint64_t id = 1; id <= 2; ++id) {
    r.assign(spec(id, 20 + id), 0);
    r.on_progress(finish(id));
  }
  // Both sessions' KV is on node 0; both announce their next turn.
  const auto a = r.advise(21);
  EXPECT_EQ(a.node, 0);
  EXPECT_EQ(r.loads()[0].expected, 1u);
  const auto b = r.advise(22);
  EXPECT_EQ(b.node, 1) << "node 0 has a turn coming already";
  EXPECT_EQ(b.pull_from, 0);
  EXPECT_EQ(r.advise(22).node, 1) << "advised again: counted once";
  EXPECT_EQ(r.loads()[1].expected, 1u);
  EXPECT_EQ(r.place(spec(3, 21)).node, 0);
  EXPECT_EQ(r.place(spec(4, 22)).node, 1);
  EXPECT_EQ(r.loads()[0].expected + r.loads()[1].expected, 0u) << "arrived";
}

TEST(router_core, an_advisory_far_ahead_is_placed_by_the_load_near_its_turn) {
  router_core r{2, 0, false, 1.0};
  r.assign(spec(1, 7), 0);
  r.on_progress(finish(1));
  r.assign(spec(2), 0); // node 0 is the busier now
  EXPECT_FALSE(r.defer_advise(7, 1.0)) << "no further ahead than the lead: placed at once";
  EXPECT_FALSE(r.defer_advise(0, 10)) << "no session, nothing to place";
  const auto d = r.defer_advise(7, 10);
  ASSERT_TRUE(d);
  EXPECT_DOUBLE_EQ(d->delay_s, 9.0);
  EXPECT_TRUE(d->held) << "node 0 holds its KV";
  EXPECT_FALSE(r.defer_advise(8, 10)->held) << "a session no node holds";
  EXPECT_EQ(r.loads()[0].expected + r.loads()[1].expected, 0u) << "not counted before it is placed";
  EXPECT_EQ(r.migrations(), 0u);
  // By the time it is due, node 0 has emptied and node 1 filled: the turn
  // stays with its KV, where a placement at the advisory would have moved it.
  r.on_progress(finish(2));
  r.assign(spec(3), 1);
  EXPECT_FALSE(r.advise_due(7, d->token + 100)) << "not its token";
  ASSERT_TRUE(r.advise_due(7, d->token));
  EXPECT_FALSE(r.advise_due(7, d->token)) << "due once";
  const auto a = r.advise(7);
  EXPECT_EQ(a.node, 0);
  EXPECT_EQ(a.pull_from, -1);
  EXPECT_EQ(r.advisories_deferred(), 2u);
  EXPECT_EQ(r.advisories_placed_late(), 1u);
}

TEST(router_core, a_deferred_advisory_is_dropped_when_its_turn_comes_first_or_another_replaces_it) {
  router_core r{2, 0, false, 1.0};
  r.assign(spec(1, 7), 0);
  r.on_progress(finish(1));
  const auto early = r.defer_advise(7, 10);
  const auto later = r.defer_advise(7, 5);
  EXPECT_FALSE(r.advise_due(7, early->token)) << "replaced by the later advisory";
  r.place(spec(2, 7)); // the turn itself, before its advisory was due
  EXPECT_FALSE(r.advise_due(7, later->token)) << "its turn was placed already";
  // An advisory acted on at once also replaces a deferred one.
  const auto third = r.defer_advise(7, 10);
  r.advise(7);
  EXPECT_FALSE(r.advise_due(7, third->token));
  EXPECT_EQ(r.advisories_placed_late(), 0u);
  EXPECT_FALSE(router_core(2, 0).defer_advise(7, 1e6)) << "no lead: always at once";
}

request_spec with_adapter(std::uint64_t id, std::uint32_t adapter) {
  auto s = spec(id);
  s.adapter_id = adapter;
  return s;
}

TEST(router_core, adapter_affinity_sends_an_adapters_requests_where_its_last_one_went) {
  router_core r{2, 1, true};
  const auto place = [&](std::uint64_t id, std::uint32_t adapter) {
    const auto route = r.place(with_adapter(id, adapter));
    EXPECT_EQ(route.pull_from, -1) << "nothing moves for an adapter";
    r.assign(with_adapter(id, adapter), static_cast<std::uint32_t>(route.node));
    return route.node;
  };
  EXPECT_EQ(place(1, 7), 0);
  EXPECT_EQ(place(2, 9), 1) << "a new adapter: the least loaded";
  EXPECT_EQ(place(3, 7), 0) << "adapter 7 again: where its last one went";
  EXPECT_EQ(place(4, 7), 0) << "still within the imbalance of 1";
  EXPECT_EQ(place(5, 7), 1) << "node 0 carries 2 more than node 1: past the imbalance";
  EXPECT_EQ(place(6, 7), 1) << "and adapter 7 follows its last request";
  const auto least = policies::least_loaded(r.loads());
  EXPECT_EQ(place(7, 0), least) << "no adapter: by load alone";
  // Without affinity the same sequence spreads by load.
  router_core plain{2, 1};
  plain.assign(with_adapter(1, 7), 0);
  plain.assign(with_adapter(2, 9), 1);
  EXPECT_EQ(plain.place(with_adapter(3, 7)).node, 0) << "by load (the tie: fewer tokens, then placed, then index)";
  plain.assign(with_adapter(3, 7), 0);
  EXPECT_EQ(plain.place(with_adapter(4, 7)).node, 1);
  // A lost node forgets the adapters it held: adapter 7 goes by load.
  EXPECT_FALSE(r.on_node_down(1).empty());
  EXPECT_EQ(place(8, 7), 0);
}

TEST(router_core, prefix_affinity_sends_prompts_that_begin_alike_where_the_last_such_went) {
  // Prompts of 4 tokens or more follow the last prompt with the same first
  // 4 tokens and adapter; shorter ones go by load.
  router_core r{2, 1, false, -1, 4};
  const auto prompted = [](std::uint64_t id, std::vector<std::int32_t> prompt, std::uint32_t adapter = 0) {
    auto s = spec(id);
    s.prompt = std::move(prompt);
    s.adapter_id = adapter;
    return s;
  };
  const auto place = [&](const request_spec& s) {
    const auto route = r.place(s);
    EXPECT_EQ(route.pull_from, -1) << "nothing moves for a prefix";
    r.assign(s, static_cast<std::uint32_t>(route.node));
    return route.node;
  };
  EXPECT_EQ(place(prompted(1, {5, 6, 7, 8, 1})), 0);
  EXPECT_EQ(place(prompted(2, {9, 9, 9, 9, 1})), 1) << "another beginning: the least loaded";
  EXPECT_EQ(place(prompted(3, {5, 6, 7, 8, 2, 3})), 0) << "the same first 4 tokens: where request 1 went";
  EXPECT_EQ(place(prompted(4, {5, 6, 7, 8, 4}, 3)), 1) << "another adapter: another cache, by load";
  EXPECT_EQ(place(prompted(5, {5, 6, 7})), 1) << "too short to follow: by load";
  EXPECT_EQ(place(prompted(6, {5, 6, 7, 8})), 0);
  EXPECT_EQ(place(prompted(7, {5, 6, 7, 8})), 0) << "3 and 3 in flight";
  EXPECT_EQ(place(prompted(8, {5, 6, 7, 8})), 0) << "4 against 3: within the imbalance of 1";
  EXPECT_EQ(place(prompted(10, {5, 6, 7, 8})), 1) << "5 against 3: past it";
  EXPECT_EQ(place(prompted(11, {5, 6, 7, 8})), 1) << "and the prefix follows its last request";
  // A session's turn goes by its session's rules, whatever its prompt.
  auto turn = prompted(12, {9, 9, 9, 9});
  turn.session = 5;
  EXPECT_EQ(r.place(turn).node, policies::least_loaded(r.loads()));
}

TEST(router_core, a_lost_node_s_requests_are_placed_again_and_the_stream_neither_repeats_nor_stops) {
  router_core r{2, 4};
  r.assign(spec(1, 0, 1.0), 0);
  r.assign(spec(2, 9, 0.5), 0);
  r.assign(spec(3, 0, 0.7), 1);
  auto out = r.on_progress(tokens(1, 0, 3, true));
  EXPECT_EQ(out.tokens.size(), 3u);
  ASSERT_EQ(out.prompt_logprobs.size(), 1u) << "the prompt's with its first token";
  EXPECT_EQ(out.prompt_logprobs[0].request_id, 1u);
  auto again = r.on_node_down(0);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].request_id, 2u) << "in arrival order";
  EXPECT_EQ(again[1].request_id, 1u);
  EXPECT_TRUE(r.on_node_down(0).empty()) << "once";
  EXPECT_EQ(r.resubmitted(), 2u);
  EXPECT_EQ(r.alive(), 1u);
  for (const auto& s : again) {
    const auto route = r.place(s);
    EXPECT_EQ(route.node, 1);
    r.assign(s, 1);
  }
  EXPECT_EQ(r.loads()[1].in_flight, 3u);
  // Node 1 recomputes request 1 from its first token: the client gets
  // tokens 3 and on only, once each.
  // Their log-probabilities go with them, and only theirs.
  out = r.on_progress(tokens(1, 0, 5, true));
  ASSERT_EQ(out.tokens.size(), 2u);
  EXPECT_EQ(out.tokens[0].index, 3u);
  ASSERT_EQ(out.logprobs.size(), 2u);
  EXPECT_EQ(out.logprobs[0].index, 3u);
  EXPECT_EQ(out.logprobs[1].index, 4u);
  EXPECT_EQ(out.logprobs[1].logprobs.logprob, -4.0f);
  EXPECT_TRUE(out.prompt_logprobs.empty()) << "the prompt's went with token 0, the first time";
  const auto repeated = r.on_progress(tokens(1, 4, 5, true));
  EXPECT_TRUE(repeated.tokens.empty());
  EXPECT_TRUE(repeated.logprobs.empty());
  EXPECT_EQ(r.on_progress(finish(1)).finished.size(), 1u);
  EXPECT_TRUE(r.on_progress(finish(1)).finished.empty()) << "one end per request";
  EXPECT_TRUE(r.on_progress(tokens(1, 5, 6)).tokens.empty()) << "nothing after the end";
  // Session 9's KV was on node 0: gone, so nothing to pull.
  r.on_progress(finish(2));
  EXPECT_EQ(r.place(spec(8, 9)).pull_from, -1);
  r.forget(3);
  EXPECT_EQ(r.loads()[1].in_flight, 0u);
}

} // namespace
} // namespace troupe
