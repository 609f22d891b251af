// Tests for runtime/sim_cluster: several sim_engines on one clock behind the
// live router's core. One node runs exactly as the engine alone; requests
// spread over the nodes; a turn moved off its session's node takes the cache
// along (or recomputes when migration is off); a large imbalance keeps every
// turn where its cache is; an advisory moves the cache before the turn.
#include "runtime/sim_cluster.hpp"

#include "gpu/model_shape.hpp"
#include "policies/registry.hpp"

#include <gtest/gtest.h>

#include <numeric>

namespace troupe {
namespace {

const auto shape = *gpu::find_model_preset("llama-2-7b");
const auto a100 = *gpu::find_gpu_spec("A100-80GB");
const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token();

std::unique_ptr<sim_engine> node(std::uint64_t session_pages = 1500, std::uint64_t host_pages = 4000,
                                 gpu::gpu_spec gpu = a100) {
  sim_engine_config cfg;
  cfg.limits.max_running = 32;
  cfg.limits.total_pages = 2000;
  cfg.limits.page_tokens = 16;
  cfg.limits.page_bytes = page_bytes;
  cfg.limits.host_pages = host_pages;
  cfg.limits.session_pages = session_pages;
  cfg.layers = shape.num_layers;
  cfg.scheduling = policies::make_scheduling_policy("fcfs");
  cfg.eviction = policies::make_eviction_policy("lru");
  adapter_catalog catalog{{}, {}, [](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
  return std::make_unique<sim_engine>(std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1),
                                      std::move(catalog), 2000);
}

/// A node serving 400 adapters of ranks 8-64 with room for about 60 of
/// them beside the requests' KV.
std::unique_ptr<sim_engine> adapter_node() {
  sim_engine_config cfg;
  cfg.limits.max_running = 32;
  cfg.limits.total_pages = 2000;
  cfg.limits.page_tokens = 16;
  cfg.limits.page_bytes = page_bytes;
  cfg.scheduling = policies::make_scheduling_policy("fcfs");
  cfg.eviction = policies::make_eviction_policy("lru");
  std::vector<adapter_spec> specs;
  const std::uint32_t ranks[] = {8, 16, 32, 64};
  for (std::uint32_t i = 0; i < 400; ++i)
    specs.push_back({"a" + std::to_string(i), ranks[i % 4], ""});
  adapter_catalog catalog{specs, {}, [](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
  return std::make_unique<sim_engine>(std::move(cfg), std::make_shared<gpu::sim_backend>(shape, a100, 1),
                                      std::move(catalog), 2000);
}

std::vector<std::unique_ptr<sim_engine>> nodes(std::size_t n, std::uint64_t session_pages = 1500) {
  std::vector<std::unique_ptr<sim_engine>> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(node(session_pages));
  return out;
}

/// `conversations` of `turns` turns (300 new prompt tokens, 40 reply
/// tokens, 4 s of thinking), started `gap_s` apart at irregular offsets.
std::vector<sim_request> conversations(std::uint64_t conversations, int turns, double gap_s) {
  std::vector<sim_request> reqs;
  std::uint64_t x = 11;
  for (std::uint64_t c = 1; c <= conversations; ++c) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const double jitter = static_cast<double>(x >> 40) / static_cast<double>(1ull << 24) * 0.5 * gap_s;
    for (int t = 0; t < turns; ++t)
      reqs.push_back({static_cast<double>(c) * gap_s + jitter, 300 + static_cast<std::uint32_t>(x % 97), 40, 0, c,
                      4.0 + static_cast<double>(c % 7) * 0.1});
  }
  return reqs;
}

void expect_all_finished(const std::vector<sim_outcome>& out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i].reason, finish_reason::length) << "request " << i;
    ASSERT_GE(out[i].ttft_s, 0.0) << "request " << i;
  }
}

/// After a run every live node's pages are held by its session caches only
/// (on the GPU and in the host pool), and every cache pulled was taken in
/// once.
void expect_pages_accounted(const sim_cluster& c) {
  std::uint64_t imported = 0;
  for (std::size_t n = 0; n < c.size(); ++n) {
    const auto& node = c.node(n);
    imported += node.core().sessions_imported();
    if (!c.alive(n))
      continue; // stopped where it was lost
    EXPECT_EQ(node.totals().pool_request_pages_at_end, node.core().session_pages_held()) << "node " << n;
    EXPECT_EQ(node.totals().host_pages_at_end, node.core().host_pages_held()) << "node " << n;
  }
  EXPECT_EQ(imported, c.totals().pulls);
}

TEST(sim_cluster, one_node_runs_as_the_engine_alone) {
  const auto reqs = conversations(30, 4, 0.3);
  auto alone = node();
  const auto expected = alone->run(reqs);
  sim_cluster cluster{nodes(1), {}};
  const auto out = cluster.run(reqs);
  ASSERT_EQ(out.size(), expected.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].reason, expected[i].reason) << i;
    EXPECT_DOUBLE_EQ(out[i].arrival_s, expected[i].arrival_s) << i;
    EXPECT_DOUBLE_EQ(out[i].ttft_s, expected[i].ttft_s) << i;
    EXPECT_DOUBLE_EQ(out[i].e2e_s, expected[i].e2e_s) << i;
  }
  EXPECT_EQ(cluster.totals().nodes.steps, alone->totals().steps);
  EXPECT_EQ(cluster.totals().nodes.reused_tokens, alone->totals().reused_tokens);
  EXPECT_EQ(cluster.totals().moves, 0u);
  EXPECT_EQ(cluster.totals().placed.at(0), reqs.size());
}

TEST(sim_cluster, independent_requests_spread_over_the_nodes_and_finish_sooner) {
  std::vector<sim_request> reqs;
  for (std::uint32_t i = 0; i < 400; ++i)
    reqs.push_back({0.01 * i, 200 + i % 300, 50 + i % 150, 0});
  sim_cluster four{nodes(4), {}};
  const auto out = four.run(reqs);
  expect_all_finished(out);
  const auto& placed = four.totals().placed;
  EXPECT_EQ(std::accumulate(placed.begin(), placed.end(), std::uint64_t{0}), reqs.size());
  for (const auto p : placed) {
    EXPECT_GE(p, 80u) << "least loaded placement spreads the load";
    EXPECT_LE(p, 120u);
  }
  sim_cluster one{nodes(1), {}};
  expect_all_finished(one.run(reqs));
  EXPECT_LT(four.totals().nodes.end_s, one.totals().nodes.end_s);
  EXPECT_EQ(four.totals().nodes.decode_tokens, one.totals().nodes.decode_tokens);
}

TEST(sim_cluster, a_turn_moved_to_a_less_loaded_node_takes_its_cache_along) {
  const auto reqs = conversations(60, 4, 0.15);
  auto run = [&](bool migrate) {
    sim_cluster_config cfg;
    cfg.imbalance = 0; // move whenever the session's node is not the least loaded
    cfg.migrate = migrate;
    sim_cluster c{nodes(2), cfg};
    expect_all_finished(c.run(reqs));
    expect_pages_accounted(c);
    return c.totals();
  };
  const auto pulled = run(true);
  const auto blind = run(false);
  EXPECT_GT(pulled.moves, 0u);
  EXPECT_GT(pulled.pulls, 0u);
  EXPECT_GT(pulled.pull_bytes, pulled.pulls * page_bytes);
  EXPECT_EQ(pulled.moves, pulled.pulls + pulled.pulls_missed);
  EXPECT_EQ(blind.pulls, 0u);
  EXPECT_EQ(blind.pulls_missed, blind.moves);
  EXPECT_GT(blind.moves, 0u);
  // A moved turn without its cache prefills its history again.
  EXPECT_LT(pulled.nodes.recomputed_tokens, blind.nodes.recomputed_tokens);
  EXPECT_GT(pulled.nodes.reused_tokens, blind.nodes.reused_tokens);
  EXPECT_EQ(pulled.nodes.decode_tokens, blind.nodes.decode_tokens);
}

TEST(sim_cluster, a_pull_waits_for_a_cache_moving_between_tiers_then_takes_it) {
  // PCIe at 100 MB/s: a cache pushed to the host pool (room for 40 pages of
  // sessions on the GPU) is on its way for seconds, and pulls that find it
  // so wait for it to land rather than lose it.
  auto slow = a100;
  slow.pcie_bytes_per_s = 1e8;
  std::vector<std::unique_ptr<sim_engine>> ns;
  for (int i = 0; i < 2; ++i)
    ns.push_back(node(40, 4000, slow));
  sim_cluster_config cfg;
  cfg.imbalance = 0;
  sim_cluster c{std::move(ns), cfg};
  expect_all_finished(c.run(conversations(60, 4, 0.15)));
  expect_pages_accounted(c);
  const auto& t = c.totals();
  EXPECT_GT(t.pulls_deferred, 0u);
  EXPECT_GT(t.pulls, 0u);
  EXPECT_EQ(t.moves, t.pulls + t.pulls_missed);
}

TEST(sim_cluster, adapter_affinity_keeps_each_nodes_adapters_apart_and_loads_fewer) {
  // 3,000 requests over 400 adapters, popular ones first, on four nodes.
  std::vector<sim_request> reqs;
  std::uint64_t x = 5;
  for (std::uint32_t i = 0; i < 3000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto r = static_cast<std::uint32_t>(x >> 33);
    const std::uint32_t adapter = 1 + (r % 3 == 0 ? r % 400 : r % 40);
    reqs.push_back({0.005 * i, 100 + r % 400, 20 + r % 60, adapter});
  }
  auto run = [&](bool affinity) {
    std::vector<std::unique_ptr<sim_engine>> ns;
    for (int i = 0; i < 4; ++i)
      ns.push_back(adapter_node());
    sim_cluster_config cfg;
    cfg.imbalance = 4;
    cfg.adapter_affinity = affinity;
    sim_cluster c{std::move(ns), cfg};
    expect_all_finished(c.run(reqs));
    return c.totals();
  };
  const auto spread = run(false);
  const auto kept = run(true);
  const auto misses = [](const sim_cluster_totals& t) { return t.nodes.adapter_misses; };
  EXPECT_LT(misses(kept), misses(spread));
  EXPECT_LT(kept.nodes.pcie_bytes, spread.nodes.pcie_bytes);
  for (const auto p : kept.placed)
    EXPECT_GT(p, 300u) << "the imbalance rule still spreads the load";
}

TEST(sim_cluster, a_large_imbalance_keeps_every_turn_on_its_sessions_node) {
  const auto reqs = conversations(60, 4, 0.15);
  sim_cluster_config cfg;
  cfg.imbalance = 1000;
  // Room on each node for every cache it keeps (none pushed to the host).
  sim_cluster c{nodes(2, 1999), cfg};
  expect_all_finished(c.run(reqs));
  expect_pages_accounted(c);
  EXPECT_EQ(c.totals().moves, 0u);
  // Each later turn found its cache and prefilled only its new tokens and
  // the previous reply's last token (whose K and V no step computed).
  EXPECT_EQ(c.totals().nodes.recomputed_tokens, 60u * 3);
  EXPECT_GT(c.totals().placed.at(0), 0u);
  EXPECT_GT(c.totals().placed.at(1), 0u);
}

TEST(sim_cluster, without_sessions_every_later_turn_recomputes_its_history) {
  const auto reqs = conversations(20, 3, 0.3);
  std::vector<std::unique_ptr<sim_engine>> ns;
  ns.push_back(node(0, 0));
  ns.push_back(node(0, 0));
  sim_cluster c{std::move(ns), {}};
  expect_all_finished(c.run(reqs));
  EXPECT_EQ(c.totals().nodes.reused_tokens, 0u);
  EXPECT_GT(c.totals().nodes.recomputed_tokens, 0u);
  EXPECT_EQ(c.totals().pulls, 0u);
}

TEST(sim_cluster, an_advisory_moves_the_cache_before_the_turn_arrives) {
  const auto reqs = conversations(60, 4, 0.15);
  auto later_turns_ttft = [&](double lead) {
    sim_cluster_config cfg;
    cfg.imbalance = 0;
    cfg.advise_lead_s = lead;
    sim_cluster c{nodes(2), cfg};
    const auto out = c.run(reqs);
    expect_all_finished(out);
    expect_pages_accounted(c);
    EXPECT_GT(c.totals().pulls, 0u);
    double sum = 0;
    int n = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
      if (i % 4 != 0) { // turns 2-4
        sum += out[i].ttft_s;
        ++n;
      }
    return sum / n;
  };
  EXPECT_LT(later_turns_ttft(2.0), later_turns_ttft(-1));
}

TEST(sim_cluster, an_advisory_far_ahead_acts_as_one_the_placement_lead_before_its_turn) {
  // The router puts off choosing the node (and pulling the cache) of an
  // advisory 3.5 s ahead until 1 s before the turn: every turn then runs as
  // with advisories 1 s ahead. Placed at once, it runs otherwise.
  const auto reqs = conversations(60, 4, 0.15);
  auto run = [&](double lead, double place_lead) {
    sim_cluster_config cfg;
    cfg.imbalance = 0;
    cfg.advise_lead_s = lead;
    cfg.advise_place_lead_s = place_lead;
    sim_cluster c{nodes(2), cfg};
    auto out = c.run(reqs);
    expect_all_finished(out);
    expect_pages_accounted(c);
    EXPECT_GT(c.totals().pulls, 0u);
    std::vector<double> ttft;
    for (const auto& o : out)
      ttft.push_back(o.ttft_s);
    return ttft;
  };
  const auto near = run(1.0, -1);
  EXPECT_EQ(run(3.5, 1.0), near);
  EXPECT_NE(run(3.5, -1), near);
}

TEST(sim_cluster, a_lost_nodes_requests_finish_elsewhere_and_its_caches_are_recomputed) {
  // Conversations and plain requests over three nodes; node 1 is lost in
  // the middle of the run, with requests in flight and caches held.
  auto reqs = conversations(60, 4, 0.15);
  for (std::uint32_t i = 0; i < 100; ++i)
    reqs.push_back({0.1 * i, 200 + i % 300, 50 + i % 100, 0});
  auto run = [&](std::vector<std::pair<std::uint32_t, double>> failures) {
    sim_cluster_config cfg;
    cfg.failures = std::move(failures);
    auto c = std::make_unique<sim_cluster>(nodes(3), cfg);
    const auto out = c->run(reqs);
    expect_all_finished(out); // every request once, from a live node
    expect_pages_accounted(*c);
    return c;
  };
  const auto whole = run({});
  const auto lost = run({{1, 6.0}});
  EXPECT_EQ(whole->totals().nodes_lost, 0u);
  EXPECT_EQ(lost->totals().nodes_lost, 1u);
  EXPECT_FALSE(lost->alive(1));
  EXPECT_GT(lost->totals().resubmitted, 0u) << "it held requests when it was lost";
  const auto placed = [](const sim_cluster& c) {
    return std::accumulate(c.totals().placed.begin(), c.totals().placed.end(), std::uint64_t{0});
  };
  EXPECT_EQ(placed(*whole), reqs.size());
  EXPECT_EQ(placed(*lost), reqs.size() + lost->totals().resubmitted);
  // Its conversations' later turns recompute the history it held.
  EXPECT_GT(lost->totals().nodes.recomputed_tokens, whole->totals().nodes.recomputed_tokens);
}

TEST(sim_cluster, a_node_lost_while_caches_move_and_advisories_wait_loses_no_request) {
  // Turns move at every imbalance and advisories pull ahead, so pulls to
  // and from the lost node are under way when it goes (at several times;
  // slow PCIe keeps caches moving between tiers for long).
  auto slow = a100;
  slow.pcie_bytes_per_s = 1e9;
  const auto reqs = conversations(80, 5, 0.1);
  for (const double at : {1.0, 3.0, 5.0, 8.0, 12.0}) {
    SCOPED_TRACE(at);
    std::vector<std::unique_ptr<sim_engine>> ns;
    for (int i = 0; i < 3; ++i)
      ns.push_back(node(60, 4000, slow));
    sim_cluster_config cfg;
    cfg.imbalance = 0;
    cfg.advise_lead_s = 2;
    cfg.failures = {{0, at}};
    sim_cluster c{std::move(ns), cfg};
    expect_all_finished(c.run(reqs));
    expect_pages_accounted(c);
    EXPECT_GT(c.totals().moves, 0u);
    EXPECT_EQ(c.totals().nodes_lost, 1u);
  }
}

TEST(sim_cluster, with_every_node_lost_the_rest_end_unanswered) {
  std::vector<sim_request> reqs;
  for (std::uint32_t i = 0; i < 50; ++i)
    reqs.push_back({0.1 * i, 200, 50, 0});
  sim_cluster_config cfg;
  cfg.failures = {{0, 2.0}, {1, 2.0}};
  sim_cluster c{nodes(2), cfg};
  const auto out = c.run(reqs);
  std::size_t done = 0, lost = 0;
  for (const auto& o : out)
    (o.reason == finish_reason::length ? done : lost) += 1;
  EXPECT_GT(done, 0u) << "those that ended before";
  EXPECT_GT(lost, 0u);
  EXPECT_EQ(done + lost, reqs.size());
  EXPECT_EQ(c.totals().nodes_lost, 2u);
}

TEST(sim_cluster, bad_configuration_is_refused) {
  EXPECT_THROW(sim_cluster({}, {}), std::invalid_argument);
  sim_cluster_config cfg;
  cfg.network_bytes_per_s = 0;
  EXPECT_THROW(sim_cluster(nodes(1), cfg), std::invalid_argument);
  sim_cluster_config failing;
  failing.failures = {{2, 1.0}};
  EXPECT_THROW(sim_cluster(nodes(2), failing), std::invalid_argument);
  sim_cluster once{nodes(1), {}};
  const auto reqs = conversations(2, 2, 1.0);
  expect_all_finished(once.run(reqs));
  EXPECT_THROW(once.run(reqs), std::logic_error);
}

} // namespace
} // namespace troupe
