// End to end: a deployment started from a config file serves many concurrent
// ZeroMQ clients; every accepted request gets exactly one terminal reply with
// the requested number of tokens, also under memory and adapter pressure.
#include "tests/support/deployment_fixture.hpp"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace troupe::testing {
namespace {

struct client_plan {
  std::vector<wire::generate_request> requests;
};

/// Builds `n` generate requests with mixed lengths, adapters and streaming.
client_plan make_plan(int client, int n, int adapters, std::uint32_t max_tokens_cap) {
  std::mt19937 rng(static_cast<unsigned>(1000 + client));
  client_plan plan;
  for (int i = 0; i < n; ++i) {
    wire::generate_request g;
    g.id = "c" + std::to_string(client) + "-r" + std::to_string(i);
    g.prompt = std::string(1 + rng() % 40, 'a' + static_cast<char>(rng() % 26));
    g.max_tokens = 1 + rng() % max_tokens_cap;
    g.stream = rng() % 2 == 0;
    if (adapters > 0 && rng() % 4 != 0)
      g.adapter = "lora-" + std::to_string(rng() % static_cast<unsigned>(adapters));
    g.sampling.seed = rng();
    plan.requests.push_back(std::move(g));
  }
  return plan;
}

/// Runs one client: sends everything, then collects; checks each reply log.
void run_client(const std::string& endpoint, const client_plan& plan, int* failures) {
  client_connection c{endpoint};
  std::vector<std::string> ids;
  for (const auto& g : plan.requests) {
    ASSERT_TRUE(c.send(g));
    ids.push_back(g.id);
  }
  std::map<std::string, reply_log> logs;
  ASSERT_TRUE(collect(c, ids, logs)) << "timed out waiting for replies";
  // A health probe on the same connection comes back after anything the
  // server still had queued for us: no reply may trail a done.
  ASSERT_TRUE(c.send(wire::health_request{"probe"}));
  ASSERT_TRUE(collect(c, {"probe"}, logs));
  for (const auto& g : plan.requests) {
    const auto& log = logs[g.id];
    EXPECT_EQ(log.terminal, 1u) << g.id;
    const auto* done = log.done();
    if (done == nullptr) {
      ADD_FAILURE() << g.id << " got no done: "
                    << (log.error() ? log.error()->message : std::string{"nothing"});
      ++*failures;
      continue;
    }
    EXPECT_EQ(done->finish_reason, "length") << g.id;
    EXPECT_EQ(done->completion_tokens, g.max_tokens) << g.id;
    ASSERT_FALSE(log.replies.empty());
    EXPECT_TRUE(std::holds_alternative<wire::accepted_reply>(log.replies.front())) << g.id;
    EXPECT_TRUE(std::holds_alternative<wire::done_reply>(log.replies.back())) << g.id;
    if (g.stream) {
      EXPECT_EQ(log.streamed_tokens, g.max_tokens) << g.id;
      EXPECT_FALSE(done->tokens.has_value());
    } else {
      ASSERT_TRUE(done->tokens.has_value()) << g.id;
      EXPECT_EQ(done->tokens->size(), g.max_tokens) << g.id;
      EXPECT_EQ(log.streamed_tokens, 0u) << g.id;
    }
    EXPECT_GE(done->time.e2e_ms, done->time.ttft_ms) << g.id;
    EXPECT_GE(done->time.ttft_ms, done->time.queue_ms) << g.id;
  }
}

void run_clients(const std::string& endpoint, int clients, int per_client, int adapters,
                 std::uint32_t max_tokens_cap) {
  std::vector<client_plan> plans;
  for (int k = 0; k < clients; ++k)
    plans.push_back(make_plan(k, per_client, adapters, max_tokens_cap));
  std::vector<int> failures(static_cast<std::size_t>(clients), 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < clients; ++k)
    threads.emplace_back([&, k] { run_client(endpoint, plans[static_cast<std::size_t>(k)], &failures[static_cast<std::size_t>(k)]); });
  for (auto& t : threads)
    t.join();
  for (auto f : failures)
    EXPECT_EQ(f, 0);
}

TEST(pipeline, thousand_requests_from_concurrent_clients_each_get_one_terminal_reply) {
  auto dep = start_from_file("tests/e2e/configs/sim-instant.toml");
  ASSERT_NE(dep, nullptr);
  run_clients(dep->endpoint(), 8, 125, 16, 48);
  EXPECT_EQ(dep->stop(), 0u);
}

TEST(pipeline, tight_memory_and_adapter_eviction_still_complete_every_request) {
  auto dep = start_from_file("tests/e2e/configs/sim-tight-memory.toml");
  ASSERT_NE(dep, nullptr);
  run_clients(dep->endpoint(), 4, 60, 8, 64);
  // Everything was released: the pool holds no KV pages but the prefix
  // cache's, which no request reads now.
  client_connection c{dep->endpoint()};
  auto v = stats_of(c, "s");
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v["pool_pages_kv"], v["prefix_cache_idle_pages"]);
  EXPECT_EQ(v["kv_pages_reserved"], v["prefix_cache_idle_pages"]);
  EXPECT_EQ(v["prefix_cache_pages"], v["prefix_cache_idle_pages"]);
  EXPECT_EQ(v["intake_in_flight"], 0);
  EXPECT_LE(v["adapters_resident"], 2);
  EXPECT_GT(v["adapter_evictions"], 0);
  EXPECT_EQ(dep->stop(), 0u);
}

TEST(pipeline, same_seed_gives_same_tokens_whatever_the_batch) {
  auto dep = start_from_file("tests/e2e/configs/sim-instant.toml");
  ASSERT_NE(dep, nullptr);
  client_connection c{dep->endpoint()};
  wire::generate_request g;
  g.prompt = "the same prompt";
  g.max_tokens = 12;
  g.sampling.seed = 99;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    g.id = "same-" + std::to_string(i);
    ASSERT_TRUE(c.send(g));
    ids.push_back(g.id);
  }
  std::map<std::string, reply_log> logs;
  ASSERT_TRUE(collect(c, ids, logs));
  const auto* first = logs["same-0"].done();
  ASSERT_NE(first, nullptr);
  for (const auto& id : ids) {
    const auto* d = logs[id].done();
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(*d->tokens, *first->tokens) << id;
  }
  EXPECT_EQ(dep->stop(), 0u);
}

} // namespace
} // namespace troupe::testing
