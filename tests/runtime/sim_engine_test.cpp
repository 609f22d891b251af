// Tests for runtime/sim_engine: the cores composed on a virtual clock finish
// every request with its tokens under adapter and memory pressure, give every
// request page back, keep the pool's adapter pages equal to the cache's, and
// order the policies as expected (S-LoRA's discard-when-idle hits least).
#include "runtime/sim_engine.hpp"

#include "gpu/model_shape.hpp"
#include "policies/prefetch_policy.hpp"
#include "policies/registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace troupe {
namespace {

struct run_result {
  sim_totals totals;
  std::vector<sim_outcome> out;
};

run_result run(const std::string& policy, std::uint64_t pool_pages, bool prefetch,
               const std::string& scheduling = "fcfs", bool on_demand = false, std::uint64_t host_pages = 0,
               bool burst = false, bool prefix = false) {
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token();
  std::vector<adapter_spec> specs;
  const std::uint32_t ranks[] = {8, 16, 32, 64, 128};
  for (std::uint32_t i = 0; i < 40; ++i)
    specs.push_back({"a" + std::to_string(i), ranks[i % 5], ""});
  adapter_catalog catalog{specs, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
  sim_engine_config cfg;
  cfg.limits.max_running = 32;
  cfg.limits.total_pages = pool_pages;
  cfg.limits.page_tokens = 16;
  cfg.limits.page_bytes = page_bytes;
  cfg.limits.on_demand = on_demand;
  cfg.limits.host_pages = host_pages;
  cfg.limits.hidden_page_tokens = 32; // llama-2-7b is multi-head
  cfg.scheduling = policies::make_scheduling_policy(scheduling);
  cfg.eviction = policies::make_eviction_policy(policy);
  cfg.cache.prefetch = prefetch;
  // Prompts begin with one of three system prompts of 256 tokens.
  cfg.limits.prefix_caching = prefix;
  cfg.limits.prefix_idle_pages = pool_pages / 4;
  cfg.shared_prefix_tokens = prefix ? 256 : 0;
  cfg.prefix_groups = 3;
  auto backend = std::make_shared<gpu::sim_backend>(shape, gpu, 1);
  sim_engine engine{std::move(cfg), backend, std::move(catalog), pool_pages};
  std::vector<sim_request> reqs;
  std::uint64_t x = 7;
  for (std::uint32_t i = 0; i < 400; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto r = static_cast<std::uint32_t>(x >> 33);
    // Skewed: half the requests use adapters 1-4; some use none.
    const std::uint32_t adapter = r % 10 == 0 ? 0 : (r % 2 == 0 ? 1 + r % 4 : 1 + r % 40);
    if (burst) // AdaptiveLLM's setting: all at once, long prompts, 64 new tokens
      reqs.push_back({0.0, 300 + r % 700, 64, 0});
    else
      reqs.push_back({i * 0.05, 64 + r % 512, 1 + r % 64, adapter});
  }
  auto out = engine.run(reqs);
  return {engine.totals(), std::move(out)};
}

TEST(sim_engine, every_request_finishes_and_every_page_comes_back) {
  for (const char* policy : {"lru", "lfu", "fairshare", "slora", "chameleon"}) {
    for (bool prefetch : {false, true}) {
      SCOPED_TRACE(std::string{policy} + (prefetch ? " prefetch" : ""));
      // 600 pages of 16 tokens: a few requests' worst case plus a few adapters.
      const auto r = run(policy, 600, prefetch);
      for (std::size_t i = 0; i < r.out.size(); ++i) {
        const auto& o = r.out[i];
        ASSERT_EQ(o.reason, finish_reason::length) << "request " << i;
        ASSERT_GE(o.ttft_s, 0.0);
        ASSERT_GE(o.e2e_s, o.ttft_s);
        if (o.completion_tokens < 2) {
          EXPECT_EQ(o.tbt_p99_s, -1.0) << "request " << i;
          continue;
        }
        // At most 63 gaps: the P99 is the longest, at least the mean and at
        // most all of them together.
        const double gaps = o.e2e_s - o.ttft_s;
        EXPECT_GE(o.tbt_p99_s, gaps / (o.completion_tokens - 1) * (1 - 1e-6)) << "request " << i;
        EXPECT_LE(o.tbt_p99_s, gaps * (1 + 1e-6)) << "request " << i;
      }
      EXPECT_EQ(r.totals.pool_request_pages_at_end, 0u);
      EXPECT_EQ(r.totals.pool_adapter_pages_at_end, r.totals.cache_pages_at_end);
      EXPECT_GT(r.totals.adapter_evictions, 0u) << "the pool is meant to be tight";
      EXPECT_GT(r.totals.pcie_bytes, 0u);
    }
  }
}

TEST(sim_engine, a_longrope_model_recomputes_each_request_as_it_grows_past_the_pretrained_context) {
  // Phi-3.5 mini's kind, its pretrained context cut to 512 tokens.
  auto shape = *gpu::find_model_preset("llama-2-7b");
  shape.rope_long_after = 512;
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token(), pool_pages = 4000;
  adapter_catalog catalog{{}, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
  auto backend = std::make_shared<gpu::sim_backend>(shape, gpu, 1);
  sim_engine_config cfg;
  cfg.limits.total_pages = pool_pages;
  cfg.limits.page_tokens = 16;
  cfg.limits.page_bytes = page_bytes;
  cfg.limits.rope_long_after = backend->rope_long_after();
  ASSERT_EQ(cfg.limits.rope_long_after, 512u);
  cfg.scheduling = policies::make_scheduling_policy("fcfs");
  cfg.eviction = policies::make_eviction_policy("lru");
  sim_engine engine{std::move(cfg), backend, std::move(catalog), pool_pages};
  std::vector<sim_request> reqs;
  std::uint64_t crossing = 0;
  for (std::uint32_t i = 0; i < 200; ++i) {
    const std::uint32_t prompt = 400 + (i * 37) % 200, output = 1 + (i * 53) % 120;
    reqs.push_back({i * 0.02, prompt, output, 0});
    // A pass leaves prompt + k tokens (k = 0 .. output - 1); the one that
    // leaves exactly 512 with more to come starts the recompute.
    crossing += prompt <= 512 && prompt + output - 2 >= 512;
  }
  ASSERT_GT(crossing, 10u);
  const auto out = engine.run(reqs);
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].reason, finish_reason::length) << "request " << i;
    EXPECT_EQ(out[i].completion_tokens, reqs[i].output_tokens) << "request " << i;
  }
  EXPECT_EQ(engine.totals().squashed, crossing);
}

TEST(sim_engine, pages_on_demand_with_preemption_finish_every_request_under_each_policy) {
  // 400 requests at once into 128 pages (2,048 tokens: two or three
  // prompts): on demand they grow until the pool runs short and the policy
  // preempts (swap where there is host room, recompute); a round that only
  // preempts must be followed at once, or the run stalls.
  for (const char* scheduling : {"fcfs", "slora", "adaptive", "aptserve", "sjf"}) {
    for (std::uint64_t host : {0u, 64u}) {
      SCOPED_TRACE(std::string{scheduling} + (host ? " with a host pool" : ""));
      const auto r = run("lru", 128, false, scheduling, true, host, true);
      for (std::size_t i = 0; i < r.out.size(); ++i)
        ASSERT_EQ(r.out[i].reason, finish_reason::length) << "request " << i;
      EXPECT_GT(r.totals.growths_denied, 0u) << "the pool is meant to run short";
      EXPECT_EQ(r.totals.pool_request_pages_at_end, 0u);
      EXPECT_EQ(r.totals.host_pages_at_end, 0u);
      EXPECT_EQ(r.totals.swapped_in, r.totals.swapped_out);
    }
  }
}

TEST(sim_engine, prefix_caching_under_each_policy_with_preemption_gives_every_page_back) {
  // As above, with prompts over three system prompts: requests read cached
  // pages while others are preempted (swapped or recomputed) and idle
  // cached pages are evicted for admissions. At the end the pool holds only
  // the cache's pages, read by nobody.
  for (const char* scheduling : {"fcfs", "slora", "adaptive", "aptserve", "sjf"}) {
    for (std::uint64_t host : {0u, 64u}) {
      SCOPED_TRACE(std::string{scheduling} + (host ? " with a host pool" : ""));
      const auto r = run("lru", 128, false, scheduling, true, host, true, true);
      for (std::size_t i = 0; i < r.out.size(); ++i)
        ASSERT_EQ(r.out[i].reason, finish_reason::length) << "request " << i;
      EXPECT_GT(r.totals.prefix_hits, 0u);
      EXPECT_GT(r.totals.prefix_pages_at_end, 0u);
      EXPECT_EQ(r.totals.pool_request_pages_at_end, r.totals.prefix_pages_at_end);
      EXPECT_EQ(r.totals.host_pages_at_end, 0u);
      EXPECT_EQ(r.totals.swapped_in, r.totals.swapped_out);
    }
  }
}

TEST(sim_engine, prefix_caching_computes_less_and_answers_sooner_on_shared_system_prompts) {
  // The same requests, with and without caching. Cached pages are per
  // adapter (K and V depend on it): of 400 requests over 40 adapters and
  // three system prompts, those after the first of their adapter and
  // system prompt hit while the pages last (idle ones are kept to a
  // quarter of the pool, the rest left to the adapter cache).
  const auto off = run("lru", 600, false, "fcfs", false, 0, false, false);
  auto on_cfg = run("lru", 600, false, "fcfs", false, 0, false, true);
  EXPECT_EQ(off.totals.prefix_hits, 0u);
  EXPECT_GT(on_cfg.totals.prefix_hits, 150u);
  EXPECT_LT(on_cfg.totals.prefill_tokens, off.totals.prefill_tokens * 4 / 5);
  EXPECT_EQ(on_cfg.totals.recomputed_tokens, 0u);
  double ttft_off = 0, ttft_on = 0;
  for (const auto& o : off.out)
    ttft_off += o.ttft_s;
  for (const auto& o : on_cfg.out)
    ttft_on += o.ttft_s;
  EXPECT_LT(ttft_on, ttft_off);
}

/// A 2,000-page pool of 16-token pages, fcfs, and `eviction`.
sim_engine_config small_config(const std::string& eviction) {
  sim_engine_config cfg;
  cfg.limits.total_pages = 2000;
  cfg.limits.page_tokens = 16;
  cfg.scheduling = policies::make_scheduling_policy("fcfs");
  cfg.eviction = policies::make_eviction_policy(eviction);
  return cfg;
}

TEST(sim_engine, the_histogram_predictor_loads_an_adapter_before_its_periodic_requests) {
  // One adapter asked for every 20 s; the cache drops it when idle
  // (S-LoRA's policy), so without prediction every request loads it. With
  // the histogram (idle times of 20 s, pre-warmed at 0.9 x 20 = 18 s) it is
  // back before each request once five gaps are known.
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token();
  auto periodic_run = [&](bool predict) {
    adapter_catalog catalog{{{"a0", 64, ""}}, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); },
                            page_bytes};
    auto cfg = small_config("slora");
    cfg.limits.page_bytes = page_bytes;
    cfg.cache.predictor_interval_s = 0.5;
    if (predict)
      cfg.prefetcher = policies::make_prefetch_policy("histogram");
    sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1), std::move(catalog), 2000};
    std::vector<sim_request> reqs;
    for (int i = 0; i < 12; ++i)
      reqs.push_back({20.0 * i, 100, 10, 1});
    for (const auto& o : engine.run(reqs))
      EXPECT_EQ(o.reason, finish_reason::length);
    return engine.totals();
  };
  const auto plain = periodic_run(false);
  EXPECT_EQ(plain.prefetches, 0u);
  EXPECT_EQ(plain.adapter_hits, 0u) << "dropped when idle: every request loads it";
  const auto predicted = periodic_run(true);
  // Gaps 1-5 teach the histogram; requests 7-12 find the adapter loaded.
  EXPECT_GE(predicted.prefetch_hits, 5u);
  EXPECT_GE(predicted.adapter_hits, 5u);
  EXPECT_LE(predicted.prefetches, 12u) << "one load per gap, not one per round";
}

TEST(sim_engine, a_conversations_turns_follow_each_other_and_reuse_the_session_cache) {
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  auto conversation_run = [&](std::uint64_t session_pages) {
    auto cfg = small_config("lru");
    cfg.limits.session_pages = session_pages;
    adapter_catalog catalog{{}, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, 16 * shape.kv_bytes_per_token()};
    sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1), std::move(catalog), 2000};
    // Two conversations of three turns: 100 new prompt tokens and 20 reply
    // tokens a turn, 5 s of thinking between turns.
    std::vector<sim_request> reqs;
    for (std::uint64_t c = 1; c <= 2; ++c)
      for (int t = 0; t < 3; ++t)
        reqs.push_back({0.5 * static_cast<double>(c), 100, 20, 0, c, 5.0});
    const auto out = engine.run(reqs);
    for (const auto& o : out)
      EXPECT_EQ(o.reason, finish_reason::length);
    // Turn 2 starts after turn 1's reply and the think time.
    EXPECT_GE(out[1].arrival_s, out[0].arrival_s + out[0].e2e_s + 5.0 - 1e-9);
    return engine.totals();
  };
  const auto recompute = conversation_run(0);
  const auto sessions = conversation_run(1000);
  // Turn prompts: 100, 220 and 340 tokens (history + new), per conversation.
  EXPECT_EQ(recompute.prefill_tokens, 2u * (100 + 220 + 340));
  EXPECT_EQ(recompute.recomputed_tokens, 2u * (120 + 240));
  EXPECT_EQ(recompute.reused_tokens, 0u);
  // With sessions each later turn prefills its 100 new tokens and the last
  // reply token, whose K and V no step had computed.
  EXPECT_EQ(sessions.prefill_tokens, 2u * (100 + 101 + 101));
  EXPECT_EQ(sessions.reused_tokens, 2u * (119 + 239));
  EXPECT_EQ(sessions.decode_tokens, recompute.decode_tokens);
}

TEST(sim_engine, a_cache_streamed_in_layer_by_layer_starts_the_turn_sooner) {
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const auto page_bytes = 16 * shape.kv_bytes_per_token();
  auto second_turn = [&](bool streaming, double advise_lead = -1) {
    sim_engine_config cfg;
    cfg.limits.total_pages = 2000;
    cfg.limits.page_tokens = 16;
    cfg.limits.page_bytes = page_bytes;
    cfg.limits.host_pages = 2000;
    cfg.limits.session_pages = 200; // one conversation's cache: the other's goes to the host
    cfg.layer_streaming = streaming;
    cfg.layers = shape.num_layers;
    cfg.advise_lead_s = advise_lead;
    cfg.scheduling = policies::make_scheduling_policy("fcfs");
    cfg.eviction = policies::make_eviction_policy("lru");
    adapter_catalog catalog{{}, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
    sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1), std::move(catalog), 2000};
    // Conversation 1's first turn (2,000 tokens of prompt) ends; conversation
    // 2's pushes its cache to the host; conversation 1's second turn brings
    // it back.
    std::vector<sim_request> reqs{{0.0, 2000, 8, 0, 1, 1.0}, {0.0, 2000, 8, 0, 1, 1.0}, {0.2, 2000, 8, 0, 2, 1.0}};
    const auto out = engine.run(reqs);
    for (const auto& o : out)
      EXPECT_EQ(o.reason, finish_reason::length);
    EXPECT_EQ(engine.totals().reused_tokens, 2007u) << "the second turn reused the first's cache";
    EXPECT_EQ(engine.totals().swapped_in, 0u);
    return out[1].ttft_s;
  };
  const auto whole = second_turn(false);
  const auto streamed = second_turn(true);
  // 126 pages of 0.5 MiB over PCIe: milliseconds; its prefill of 9 tokens
  // overlaps all but the first layer's share of it.
  EXPECT_LT(streamed, whole);
  const auto copy = gpu::sim_backend(shape, gpu, 1).transfer_seconds(126 * page_bytes);
  EXPECT_GT(whole - streamed, 0.5 * copy) << "most of the copy hidden";
  EXPECT_GE(streamed, copy) << "the last layer cannot compute before it arrives";
  // An advisory half a second ahead brings the cache back before the turn:
  // no copy left on its critical path at all.
  const auto advised = second_turn(false, 0.5);
  EXPECT_LT(advised, streamed);
  EXPECT_LT(advised, whole - 0.9 * copy);
}

TEST(sim_engine, a_disk_tier_below_a_small_host_pool_keeps_every_conversations_cache) {
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const auto page_bytes = 16 * shape.kv_bytes_per_token();
  struct outcome {
    sim_totals totals;
    std::size_t sessions = 0;
    std::uint64_t session_pages = 0;
    std::uint64_t clean_pages = 0; ///< on disk and in the host pool both
  };
  auto conversations = [&](std::uint64_t disk_pages, double write_back = 0) {
    sim_engine_config cfg;
    cfg.limits.total_pages = 2000;
    cfg.limits.page_tokens = 16;
    cfg.limits.page_bytes = page_bytes;
    cfg.limits.session_pages = 200; // about one conversation's cache on the GPU
    cfg.limits.host_pages = 600;    // three in the host pool
    cfg.limits.disk_pages = disk_pages;
    cfg.limits.disk_write_back = write_back;
    cfg.scheduling = policies::make_scheduling_policy("fcfs");
    cfg.eviction = policies::make_eviction_policy("lru");
    adapter_catalog catalog{{}, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
    sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1), std::move(catalog), 2000};
    // Eight conversations of three turns, started 0.1 s apart: 1,000 new
    // prompt tokens and 16 reply tokens a turn, 2 s of thinking. Their
    // caches (63 to 190 pages) outgrow the GPU's share and the host pool.
    std::vector<sim_request> reqs;
    for (std::uint64_t c = 1; c <= 8; ++c)
      for (int t = 0; t < 3; ++t)
        reqs.push_back({0.1 * static_cast<double>(c), 1000, 16, 0, c, 2.0});
    const auto out = engine.run(reqs);
    for (const auto& o : out)
      EXPECT_EQ(o.reason, finish_reason::length);
    return outcome{engine.totals(), engine.core().sessions_cached(), engine.core().session_pages_held(),
                   engine.core().session_clean_pages()};
  };
  const auto host_only = conversations(0);
  const auto disk = conversations(100000);
  const auto write_back = conversations(100000, 0.5);
  // The turns of the eight conversations end together and their caches
  // come down at once, some while the host pool's pages are still in
  // transit (those are dropped with or without a disk tier); the disk tier
  // keeps more of the rest.
  EXPECT_GT(host_only.totals.recomputed_tokens, 0u) << "the host pool alone drops caches";
  EXPECT_LT(disk.totals.recomputed_tokens, host_only.totals.recomputed_tokens);
  EXPECT_GT(disk.totals.reused_tokens, host_only.totals.reused_tokens);
  EXPECT_EQ(host_only.totals.session_disk_writes, 0u);
  EXPECT_GT(disk.totals.session_disk_reads, 0u);
  EXPECT_GE(disk.totals.session_disk_writes, disk.totals.session_disk_reads) << "a cache is read back once written";
  EXPECT_GT(disk.totals.session_disk_seconds, 0.0);
  EXPECT_LT(write_back.totals.recomputed_tokens, host_only.totals.recomputed_tokens);
  EXPECT_GT(write_back.totals.session_disk_writes, disk.totals.session_disk_writes) << "copies made ahead of need";
  for (const auto* r : {&host_only, &disk, &write_back}) {
    // Every page a request held is back: what is left belongs to the caches
    // kept on the GPU, in the host pool and on disk (a host cache's copy
    // on disk counted once), each a conversation's last (3 x 1,016 tokens:
    // 191 pages).
    EXPECT_EQ(r->totals.pool_request_pages_at_end, r->session_pages);
    EXPECT_EQ(r->totals.pool_request_pages_at_end + r->totals.host_pages_at_end + r->totals.disk_pages_at_end
                - r->clean_pages,
              191u * r->sessions);
    EXPECT_GT(r->sessions, 0u);
  }
}

TEST(sim_engine, the_last_request_gets_pages_that_idle_adapters_held) {
  // Ten adapters of rank 64 (16 pages each) loaded one after another stay
  // cached, idle, in a 300-page pool; then a request of 250 pages comes and
  // nothing else will: its grant is refused, the refusal trims the cache,
  // and with no further event it must still be admitted.
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token();
  std::vector<adapter_spec> specs;
  for (std::uint32_t i = 0; i < 10; ++i)
    specs.push_back({"a" + std::to_string(i), 64, ""});
  adapter_catalog catalog{specs, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
  auto cfg = small_config("lru");
  cfg.limits.total_pages = 300;
  cfg.limits.page_bytes = page_bytes;
  sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1), std::move(catalog), 300};
  std::vector<sim_request> reqs;
  for (std::uint32_t i = 0; i < 10; ++i)
    reqs.push_back({1.0 * i, 32, 4, i + 1});
  reqs.push_back({20.0, 3900, 8, 0});
  const auto out = engine.run(reqs);
  for (std::size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i].reason, finish_reason::length) << "request " << i;
  EXPECT_GT(engine.totals().adapter_evictions, 0u) << "the adapters gave their pages to it";
}

TEST(sim_engine, keeping_idle_adapters_beats_discarding_them) {
  const auto lru = run("lru", 4000, false);
  const auto slora = run("slora", 4000, false);
  const auto rate = [](const sim_totals& t) {
    return static_cast<double>(t.adapter_hits) / static_cast<double>(t.adapter_hits + t.adapter_misses);
  };
  EXPECT_GT(rate(lru.totals), rate(slora.totals));
  EXPECT_LT(lru.totals.pcie_bytes, slora.totals.pcie_bytes);
  EXPECT_EQ(slora.totals.cache_pages_at_end, 0u) << "slora keeps nothing once idle";
}

TEST(sim_engine, the_same_input_gives_the_same_run) {
  const auto a = run("chameleon", 600, true);
  const auto b = run("chameleon", 600, true);
  EXPECT_EQ(a.totals.steps, b.totals.steps);
  EXPECT_EQ(a.totals.pcie_bytes, b.totals.pcie_bytes);
  ASSERT_EQ(a.out.size(), b.out.size());
  for (std::size_t i = 0; i < a.out.size(); ++i)
    EXPECT_EQ(a.out[i].e2e_s, b.out[i].e2e_s);
}

// Interactive requests (priority 0) and batch ones (-1) arriving together
// past what 8 running slots serve: `priority` lets the interactive ones
// preempt, fcfs serves both alike. Returns each class's median TTFT.
std::pair<double, double> class_ttft(const std::string& scheduling, sim_totals& totals,
                                     std::uint64_t host_pages = 0) {
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  const auto gpu = *gpu::find_gpu_spec("A100-80GB");
  const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token(), pool_pages = 4000;
  adapter_catalog catalog{{}, {}, [&](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};
  sim_engine_config cfg;
  cfg.limits.max_running = 8;
  cfg.limits.host_pages = host_pages;
  cfg.limits.total_pages = pool_pages;
  cfg.limits.page_tokens = 16;
  cfg.limits.page_bytes = page_bytes;
  cfg.scheduling = policies::make_scheduling_policy(scheduling);
  cfg.eviction = policies::make_eviction_policy("lru");
  sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu, 1), std::move(catalog),
                    pool_pages};
  std::vector<sim_request> reqs;
  for (std::uint32_t i = 0; i < 300; ++i) {
    sim_request r{i * 0.1, 256 + (i * 37) % 512, 32 + (i * 53) % 64, 0};
    r.priority = i % 3 == 0 ? 0 : -1;
    reqs.push_back(r);
  }
  const auto out = engine.run(reqs);
  totals = engine.totals();
  std::vector<double> hi, lo;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].reason, finish_reason::length) << scheduling << " request " << i;
    EXPECT_EQ(out[i].completion_tokens, reqs[i].output_tokens) << scheduling << " request " << i;
    (reqs[i].priority == 0 ? hi : lo).push_back(out[i].ttft_s);
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(hi), median(lo)};
}

TEST(sim_engine, the_priority_policy_serves_the_urgent_class_first_and_still_finishes_the_rest) {
  sim_totals fcfs_totals, prio_totals;
  const auto [fcfs_hi, fcfs_lo] = class_ttft("fcfs", fcfs_totals);
  const auto [prio_hi, prio_lo] = class_ttft("priority", prio_totals);
  EXPECT_EQ(fcfs_totals.squashed, 0u) << "fcfs preempts nobody with room for every request's pages";
  EXPECT_GT(prio_totals.squashed, 0u) << "priority preempts batch requests for interactive ones";
  for (const auto* t : {&fcfs_totals, &prio_totals})
    EXPECT_EQ(t->pool_request_pages_at_end, 0u);
  // fcfs: the classes wait alike (within a fifth); priority: the interactive
  // class waits a fraction of what it waited under fcfs, the batch more.
  EXPECT_LT(std::abs(fcfs_hi - fcfs_lo), 0.2 * fcfs_lo) << fcfs_hi << " vs " << fcfs_lo;
  EXPECT_LT(prio_hi * 4, fcfs_hi) << prio_hi << " vs " << fcfs_hi;
  EXPECT_GT(prio_lo, fcfs_lo) << prio_lo << " vs " << fcfs_lo;
  // With a host pool, victims whose swap is quicker than their recompute
  // are swapped out (the policy is calibrated on the sim backend's costs)
  // and resume where they were: every token still comes, once.
  sim_totals swapped;
  const auto [swap_hi, swap_lo] = class_ttft("priority", swapped, 4000);
  EXPECT_GT(swapped.swapped_out, 0u);
  EXPECT_LT(swapped.squashed, swapped.swapped_out);
  EXPECT_EQ(swapped.pool_request_pages_at_end, 0u);
  EXPECT_LT(swap_hi * 4, fcfs_hi) << swap_hi << " vs " << fcfs_hi;
  EXPECT_LT(swap_lo, prio_lo) << "a swap keeps the victim's work: " << swap_lo << " vs " << prio_lo;
}

} // namespace
} // namespace troupe
