// End to end: cancel, client disconnect, duplicate ids and graceful drain
// free every resource and keep the one-terminal-reply rule.
#include "tests/support/deployment_fixture.hpp"

#include <gtest/gtest.h>

#include <future>

namespace troupe::testing {
namespace {

/// Waits for the first streamed token of `id`; returns false on timeout.
bool await_first_token(client_connection& c, const std::string& id) {
  for (;;) {
    auto got = c.receive(std::chrono::seconds(10));
    if (!got)
      return false;
    auto* r = std::get_if<wire::reply>(&*got);
    if (r && std::holds_alternative<wire::token_reply>(*r) && reply_id(*r) == id)
      return true;
  }
}

wire::generate_request long_request(const std::string& id) {
  wire::generate_request g;
  g.id = id;
  g.prompt = "tell me a long story";
  g.max_tokens = 3000; // ~20 s of simulated decode in real time
  g.stream = true;
  return g;
}

TEST(lifecycle, cancel_ends_a_running_request_with_one_done_and_frees_its_pages) {
  auto dep = start_from_file("tests/e2e/configs/sim-realtime.toml");
  ASSERT_NE(dep, nullptr);
  client_connection c{dep->endpoint()};
  ASSERT_TRUE(c.send(long_request("long")));
  ASSERT_TRUE(await_first_token(c, "long"));
  ASSERT_TRUE(c.send(wire::cancel_request{"long"}));
  std::map<std::string, reply_log> logs;
  ASSERT_TRUE(collect(c, {"long"}, logs));
  const auto* done = logs["long"].done();
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(done->finish_reason, "cancelled");
  EXPECT_LT(done->completion_tokens, 3000u);
  EXPECT_EQ(logs["long"].terminal, 1u);
  // A second cancel of the finished id is an error, not a second done.
  ASSERT_TRUE(c.send(wire::cancel_request{"long"}));
  logs.clear();
  ASSERT_TRUE(collect(c, {"long"}, logs));
  ASSERT_NE(logs["long"].error(), nullptr);
  EXPECT_EQ(logs["long"].error()->code, wire::error_code::unknown_request);
  auto v = stats_of(c, "s");
  EXPECT_EQ(v["pool_pages_kv"], 0);
  EXPECT_EQ(v["intake_in_flight"], 0);
  EXPECT_EQ(v["finished_cancelled"], 1);
  EXPECT_EQ(dep->stop(), 0u);
}

TEST(lifecycle, a_client_that_disconnects_has_its_requests_freed) {
  auto dep = start_from_file("tests/e2e/configs/sim-realtime.toml");
  ASSERT_NE(dep, nullptr);
  {
    client_connection gone{dep->endpoint()};
    ASSERT_TRUE(gone.send(long_request("orphan")));
    ASSERT_TRUE(await_first_token(gone, "orphan"));
  } // the socket closes here
  client_connection watcher{dep->endpoint()};
  std::map<std::string, double> v;
  // The next token send to the vanished peer fails and cancels its request.
  for (int i = 0; i < 5000; ++i) {
    v = stats_of(watcher, "w" + std::to_string(i));
    if (v["intake_in_flight"] == 0 && v["requests_running"] == 0)
      break;
  }
  EXPECT_EQ(v["intake_in_flight"], 0);
  EXPECT_EQ(v["requests_running"], 0);
  EXPECT_EQ(v["pool_pages_kv"], 0);
  EXPECT_EQ(v["finished_cancelled"], 1);
  EXPECT_EQ(dep->stop(), 0u);
}

TEST(lifecycle, a_duplicate_id_in_flight_is_refused_and_the_first_request_completes) {
  auto dep = start_from_file("tests/e2e/configs/sim-realtime.toml");
  ASSERT_NE(dep, nullptr);
  client_connection c{dep->endpoint()};
  auto g = long_request("dup");
  g.max_tokens = 40;
  ASSERT_TRUE(c.send(g));
  ASSERT_TRUE(await_first_token(c, "dup"));
  ASSERT_TRUE(c.send(g));
  std::map<std::string, reply_log> logs;
  ASSERT_TRUE(collect(c, {"dup"}, logs));
  ASSERT_NE(logs["dup"].error(), nullptr);
  EXPECT_EQ(logs["dup"].error()->code, wire::error_code::duplicate_id);
  logs.clear();
  ASSERT_TRUE(collect(c, {"dup"}, logs));
  ASSERT_NE(logs["dup"].done(), nullptr);
  EXPECT_EQ(logs["dup"].done()->finish_reason, "length");
  EXPECT_EQ(dep->stop(), 0u);
}

TEST(lifecycle, drain_refuses_new_work_and_finishes_what_is_in_flight) {
  auto dep = start_from_file("tests/e2e/configs/sim-realtime.toml");
  ASSERT_NE(dep, nullptr);
  client_connection c{dep->endpoint()};
  auto g = long_request("inflight");
  g.max_tokens = 150;
  ASSERT_TRUE(c.send(g));
  ASSERT_TRUE(await_first_token(c, "inflight"));
  // Clients act while the test thread drains (stop() must run on the thread
  // that started the deployment).
  auto clients = std::async(std::launch::async, [&] {
    client_connection late{dep->endpoint()};
    std::map<std::string, reply_log> logs;
    // Draining is visible through health before new work is refused.
    for (int i = 0; i < 5000; ++i) {
      const auto id = "h" + std::to_string(i);
      EXPECT_TRUE(late.send(wire::health_request{id}));
      EXPECT_TRUE(collect(late, {id}, logs));
      auto* h = std::get_if<wire::health_reply>(&logs[id].replies.back());
      if (h == nullptr || h->status == "draining")
        break;
    }
    wire::generate_request n;
    n.id = "too-late";
    n.prompt = "x";
    EXPECT_TRUE(late.send(n));
    EXPECT_TRUE(collect(late, {"too-late"}, logs));
    EXPECT_NE(logs["too-late"].error(), nullptr);
    if (logs["too-late"].error()) {
      EXPECT_EQ(logs["too-late"].error()->code, wire::error_code::shutting_down);
    }
    std::map<std::string, reply_log> mine;
    EXPECT_TRUE(collect(c, {"inflight"}, mine));
    EXPECT_NE(mine["inflight"].done(), nullptr);
    if (mine["inflight"].done()) {
      EXPECT_EQ(mine["inflight"].done()->completion_tokens, 150u);
    }
  });
  EXPECT_EQ(dep->stop(), 0u);
  clients.get();
}

} // namespace
} // namespace troupe::testing
