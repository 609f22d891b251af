// End to end on the cpu backend with the demo model (tools/make-demo-model.sh):
// adapters load lazily through the copy engine; load_adapter / unload_adapter
// at run time; unloading an adapter in use is refused; a request for an
// unloaded adapter gets unknown_adapter; a corrupt adapter file fails only
// the requests for that adapter while the others are served, and the server
// log names the file.
#include "tests/support/deployment_fixture.hpp"
#include "tests/support/temp_model.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <unistd.h>

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;
using troupe::testing::temp_model;

const fs::path demo_adapters = "models/demo/adapters";

/// A scratch directory with a config serving the demo model with a good
/// adapter ("good", lora-0) and a corrupt one ("broken": lora-1 with its
/// weights file cut in half), plus a spare copy of lora-2 to load later.
class adapters_e2e : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(demo_adapters / "lora-2" / "adapter_config.json"))
      GTEST_FAIL() << "models/demo is missing: the e2e.make_demo_model test makes it";
    dir_ = fs::temp_directory_path() / ("troupe-adapters-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(demo_adapters / "lora-1", dir_ / "broken");
    const auto weights = dir_ / "broken" / "adapter_model.safetensors";
    fs::resize_file(weights, fs::file_size(weights) / 2);
    fs::copy(demo_adapters / "lora-2", dir_ / "spare");
    std::ofstream cfg{dir_ / "deploy.toml"};
    cfg << "[server]\nendpoint = \"tcp://127.0.0.1:*\"\ndrain_timeout_s = 5.0\n"
        << "[logging]\nlevel = \"warn\"\nfile = \"" << (dir_ / "server.log").string() << "\"\n"
        << "[caf]\nscheduler_threads = 2\n"
        << "[model]\npath = \"models/demo\"\n[backend]\nkind = \"cpu\"\n"
        << "[scheduler]\nmax_running = 8\ntoken_budget = 1024\n[metrics]\nlog_interval_s = 0.0\n"
        << "[[adapters]]\nname = \"good\"\npath = \"" << (demo_adapters / "lora-0").string() << "\"\n"
        << "[[adapters]]\nname = \"broken\"\npath = \"" << (dir_ / "broken").string() << "\"\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static wire::generate_request gen(std::string id, std::string adapter, std::uint32_t max_tokens = 4) {
    wire::generate_request g;
    g.id = std::move(id);
    g.prompt = "once upon a time";
    g.adapter = std::move(adapter);
    g.max_tokens = max_tokens;
    g.sampling.temperature = 0;
    return g;
  }

  fs::path dir_;
};

TEST_F(adapters_e2e, corrupt_adapter_fails_only_its_requests) {
  auto d = start_from_file((dir_ / "deploy.toml").string());
  ASSERT_NE(d, nullptr);
  client_connection c{d->endpoint()};
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    for (const char* a : {"good", "broken", ""}) {
      auto g = gen(std::string(a[0] ? a : "base") + std::to_string(i), a);
      ASSERT_TRUE(c.send(g));
      ids.push_back(g.id);
    }
  }
  std::map<std::string, reply_log> logs;
  ASSERT_TRUE(collect(c, ids, logs));
  for (int i = 0; i < 3; ++i) {
    for (const char* name : {"good", "base"}) {
      const auto& log = logs[std::string(name) + std::to_string(i)];
      EXPECT_EQ(log.terminal, 1u);
      ASSERT_NE(log.done(), nullptr) << name << i << ": " << (log.error() ? log.error()->message : "");
      EXPECT_EQ(log.done()->completion_tokens, 4u);
    }
    const auto& bad = logs["broken" + std::to_string(i)];
    EXPECT_EQ(bad.terminal, 1u);
    ASSERT_NE(bad.error(), nullptr);
    EXPECT_EQ(bad.error()->code, wire::error_code::bad_adapter);
    EXPECT_NE(bad.error()->message.find("broken"), std::string::npos) << bad.error()->message;
  }
  // Still serving, and the failures are counted.
  auto stats = stats_of(c, "s");
  EXPECT_GE(stats["adapter_load_failures"], 1.0);
  EXPECT_GE(stats["copy_failures"], 1.0);
  EXPECT_GE(stats["copy_demand_load_transfers"] + stats["copy_prefetch_transfers"], 1.0);
  EXPECT_EQ(stats["pool_empty_releases"], 0.0) << "no page released twice";
  d->stop();
  // The reply says the server log names the file: it does.
  std::ifstream in{dir_ / "server.log"};
  const std::string log{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_NE(log.find("loading adapter"), std::string::npos) << log;
  EXPECT_NE(log.find((dir_ / "broken").string()), std::string::npos) << log;
  EXPECT_NE(log.find("adapter_model.safetensors"), std::string::npos) << log;
}

TEST_F(adapters_e2e, load_use_unload_at_run_time) {
  auto d = start_from_file((dir_ / "deploy.toml").string());
  ASSERT_NE(d, nullptr);
  client_connection c{d->endpoint()};
  std::map<std::string, reply_log> logs;

  // Unknown before it is loaded.
  ASSERT_TRUE(c.send(gen("before", "spare")));
  ASSERT_TRUE(collect(c, {"before"}, logs));
  ASSERT_NE(logs["before"].error(), nullptr);
  EXPECT_EQ(logs["before"].error()->code, wire::error_code::unknown_adapter);

  // Load it: the rank comes from its adapter_config.json.
  ASSERT_TRUE(c.send(wire::load_adapter_request{"load", "spare", (dir_ / "spare").string(), 0}));
  ASSERT_TRUE(collect(c, {"load"}, logs));
  auto* loaded = std::get_if<wire::adapter_reply>(&logs["load"].replies.back());
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->status, "loaded");
  EXPECT_EQ(loaded->rank, 16u);

  // Loading the same name again is refused; so is a directory without files.
  ASSERT_TRUE(c.send(wire::load_adapter_request{"again", "spare", (dir_ / "spare").string(), 0}));
  ASSERT_TRUE(c.send(wire::load_adapter_request{"nofiles", "ghost", (dir_ / "nowhere").string(), 0}));
  ASSERT_TRUE(collect(c, {"again", "nofiles"}, logs));
  ASSERT_NE(logs["again"].error(), nullptr);
  EXPECT_EQ(logs["again"].error()->code, wire::error_code::adapter_exists);
  ASSERT_NE(logs["nofiles"].error(), nullptr);
  EXPECT_EQ(logs["nofiles"].error()->code, wire::error_code::bad_adapter);
  EXPECT_NE(logs["nofiles"].error()->message.find("nowhere"), std::string::npos);

  // In use: a long request is in flight when the unload arrives (the intake
  // handles frames in order), so the unload is refused.
  ASSERT_TRUE(c.send(gen("long", "spare", 48)));
  ASSERT_TRUE(c.send(wire::unload_adapter_request{"busy", "spare"}));
  ASSERT_TRUE(collect(c, {"long", "busy"}, logs));
  ASSERT_NE(logs["busy"].error(), nullptr);
  EXPECT_EQ(logs["busy"].error()->code, wire::error_code::adapter_in_use);
  ASSERT_NE(logs["long"].done(), nullptr);
  EXPECT_EQ(logs["long"].done()->completion_tokens, 48u);

  // Idle now: unloaded, and then unknown again; the other adapters serve on.
  ASSERT_TRUE(c.send(wire::unload_adapter_request{"unload", "spare"}));
  ASSERT_TRUE(collect(c, {"unload"}, logs));
  auto* unloaded = std::get_if<wire::adapter_reply>(&logs["unload"].replies.back());
  ASSERT_NE(unloaded, nullptr) << (logs["unload"].error() ? logs["unload"].error()->message : "");
  EXPECT_EQ(unloaded->status, "unloaded");
  ASSERT_TRUE(c.send(gen("after", "spare")));
  ASSERT_TRUE(c.send(gen("other", "good")));
  ASSERT_TRUE(c.send(wire::list_adapters_request{"list"}));
  ASSERT_TRUE(collect(c, {"after", "other", "list"}, logs));
  ASSERT_NE(logs["after"].error(), nullptr);
  EXPECT_EQ(logs["after"].error()->code, wire::error_code::unknown_adapter);
  ASSERT_NE(logs["other"].done(), nullptr);
  auto* list = std::get_if<wire::adapters_reply>(&logs["list"].replies.back());
  ASSERT_NE(list, nullptr);
  std::vector<std::string> names;
  for (const auto& a : list->adapters)
    names.push_back(a.name);
  EXPECT_EQ(names, (std::vector<std::string>{"good", "broken"}));
  d->stop();
}

/// A server on a free local port, quiet, on two scheduler threads.
std::string server_config() {
  return "[server]\nendpoint = \"tcp://127.0.0.1:*\"\ndrain_timeout_s = 5.0\n"
         "[logging]\nlevel = \"error\"\n[caf]\nscheduler_threads = 2\n";
}

/// server_config() serving the model in `model_dir` on the cpu backend.
std::string cpu_server_config(const std::string& model_dir) {
  return server_config() + "[model]\npath = \"" + model_dir + "\"\n[backend]\nkind = \"cpu\"\n"
         + "[metrics]\nlog_interval_s = 0.0\n";
}

/// A sim deployment written to a scratch file with `adapter_cache` keys.
std::string sim_config(const std::string& adapter_cache) {
  const auto path = fs::temp_directory_path() / ("troupe-sim-" + std::to_string(::getpid()) + ".toml");
  std::ofstream{path} << server_config()
                      << "[backend]\nkind = \"sim\"\ntime_scale = 0.0\n[metrics]\nlog_interval_s = 0.0\n"
                      << "[adapters_generate]\ncount = 4\nranks = [8, 16]\n"
                      << "[adapter_cache]\n" << adapter_cache;
  return path.string();
}

TEST(adapters_sim, the_histogram_predictor_prefetches_an_idle_adapter_back) {
  // slora frees the adapter as soon as its request ends; the predictor, told
  // of the arrival, names it again on its next round and it is loaded back.
  const auto path = sim_config("policy = \"slora\"\npredictor = \"histogram\"\npredictor_interval_s = 0.02\n");
  auto d = start_from_file(path);
  ASSERT_NE(d, nullptr);
  client_connection c{d->endpoint()};
  wire::generate_request g;
  g.id = "g";
  g.prompt = "hi";
  g.adapter = "lora-1";
  g.max_tokens = 2;
  std::map<std::string, reply_log> logs;
  ASSERT_TRUE(c.send(g));
  ASSERT_TRUE(collect(c, {"g"}, logs));
  ASSERT_NE(logs["g"].done(), nullptr);
  double prefetched = 0;
  for (int i = 0; i < 500 && prefetched < 1; ++i) {
    prefetched = stats_of(c, "s" + std::to_string(i))["adapter_prefetches"];
    if (prefetched < 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(prefetched, 1.0) << "no prefetch within 5 s";
  d->stop();
  fs::remove(path);
}

TEST(adapters_sim, a_policy_refusing_its_params_stops_the_start_and_says_why) {
  const auto path = sim_config("policy = \"lru\"\nparams = { size = 1.0 }\n");
  auto loaded = load_config_file(path, default_catalog());
  ASSERT_TRUE(std::holds_alternative<deployment_options>(loaded));
  auto started = deployment::start(std::get<deployment_options>(loaded));
  ASSERT_TRUE(std::holds_alternative<std::string>(started));
  const auto& err = std::get<std::string>(started);
  EXPECT_NE(err.find("adapter_cache.params"), std::string::npos) << err;
  EXPECT_NE(err.find("takes no parameters"), std::string::npos) << err;
  fs::remove(path);
}

/// Runs `requests` on the demo model with `scheduler` settings; returns each
/// request's output tokens and the stats afterwards.
std::pair<std::map<std::string, std::vector<std::int32_t>>, std::map<std::string, double>>
run_demo(const std::string& name, const std::string& extra, const std::vector<wire::generate_request>& requests,
         const std::string& model_dir = "models/demo") {
  const auto path = fs::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()) + ".toml");
  std::ofstream{path} << cpu_server_config(model_dir)
                      << "[[adapters]]\nname = \"demo-r4\"\npath = \"" << model_dir << "/adapters/lora-0\"\n" << extra;
  std::map<std::string, std::vector<std::int32_t>> out;
  std::map<std::string, double> stats;
  auto d = start_from_file(path.string());
  if (d == nullptr)
    return {out, stats};
  client_connection c{d->endpoint()};
  std::vector<std::string> ids;
  for (const auto& g : requests) {
    EXPECT_TRUE(c.send(g));
    ids.push_back(g.id);
  }
  std::map<std::string, reply_log> logs;
  EXPECT_TRUE(collect(c, ids, logs, std::chrono::seconds(60)));
  for (const auto& id : ids) {
    const auto* done = logs[id].done();
    EXPECT_NE(done, nullptr) << name << " " << id << ": " << (logs[id].error() ? logs[id].error()->message : "");
    if (done != nullptr && done->tokens)
      out[id] = *done->tokens;
  }
  stats = stats_of(c, "stats");
  d->stop();
  fs::remove(path);
  return {out, stats};
}

TEST(preemption_e2e, preempted_requests_finish_with_the_tokens_they_would_have_produced) {
  if (!fs::exists("models/demo/config.json"))
    GTEST_FAIL() << "models/demo is missing: the e2e.make_demo_model test makes it";
  std::vector<wire::generate_request> requests;
  const char* prompts[] = {"once upon a time", "the quick brown fox", "in a land far away",
                           "it was a dark and stormy night", "call me", "all happy families"};
  for (int i = 0; i < 6; ++i) {
    wire::generate_request g;
    g.id = "p" + std::to_string(i);
    g.prompt = prompts[i];
    g.max_tokens = 40;
    g.sampling.temperature = 0;
    if (i % 2 == 1)
      g.adapter = "demo-r4";
    requests.push_back(g);
  }
  // Plenty of memory: nothing is preempted.
  const auto [free_run, free_stats] = run_demo("free", "[scheduler]\npolicy = \"fcfs\"\n", requests);
  ASSERT_EQ(free_run.size(), requests.size());
  EXPECT_EQ(free_stats.at("requests_squashed"), 0.0);
  // A pool of 12 pages (16 tokens each; a request needs 4, its adapter 1):
  // two or three run at once and the adaptive policy preempts whenever the
  // most urgent waiting request is blocked (margin 0).
  const auto [tight_run, tight_stats] =
    run_demo("tight", "[memory_pool]\npages = 12\n[scheduler]\npolicy = \"adaptive\"\n"
                      "params = { preempt_margin = 0 }\n", requests);
  ASSERT_EQ(tight_run.size(), requests.size());
  EXPECT_GT(tight_stats.at("requests_squashed"), 0.0) << "the pool was meant to force preemptions";
  // (A victim may finish in the step that was running when it was chosen.)
  EXPECT_LE(tight_stats.at("requests_squashed"), tight_stats.at("adaptive_preempted"));
  for (const auto& [id, tokens] : free_run) {
    EXPECT_EQ(tokens.size(), 40u) << id;
    EXPECT_EQ(tight_run.at(id), tokens) << id << ": preemption changed the output";
  }
  EXPECT_EQ(tight_stats.at("pool_empty_releases"), 0.0) << "no page released twice";
  // The same pool with a host pool: the adaptive policy, calibrated on this
  // backend at start-up, swaps victims out (a copy of a few pages costs far
  // less than re-running their prefill) and they resume by a swap-in into
  // other pages.
  const auto [swap_run, swap_stats] =
    run_demo("swap", "[memory_pool]\npages = 12\nhost_pages = 64\n[scheduler]\npolicy = \"adaptive\"\n"
                     "params = { preempt_margin = 0 }\n", requests);
  ASSERT_EQ(swap_run.size(), requests.size());
  EXPECT_GT(swap_stats.at("requests_swapped_out"), 0.0) << "the pool was meant to force swaps";
  EXPECT_EQ(swap_stats.at("requests_swapped_in"), swap_stats.at("requests_swapped_out"));
  EXPECT_LE(swap_stats.at("requests_swapped_out"), swap_stats.at("adaptive_swaps_chosen"));
  EXPECT_GT(swap_stats.at("copy_swap_out_transfers"), 0.0);
  for (const auto& [id, tokens] : free_run)
    EXPECT_EQ(swap_run.at(id), tokens) << id << ": swapping changed the output";
  EXPECT_EQ(swap_stats.at("pool_empty_releases"), 0.0) << "no page released twice";
  EXPECT_EQ(swap_stats.at("host_pool_empty_releases"), 0.0) << "no host page released twice";
  EXPECT_EQ(swap_stats.at("host_pool_pages_kv"), 0.0) << "every host page came back";
  // Pages on demand: twice as many requests start in the same pool, and
  // those that cannot grow are preempted (swapped or recomputed).
  const auto [grow_run, grow_stats] =
    run_demo("grow", "[memory_pool]\npages = 12\nhost_pages = 64\n[scheduler]\npolicy = \"adaptive\"\n"
                     "kv_reservation = \"on_demand\"\ngrowth_watermark = 0.0\n"
                     "params = { preempt_margin = 0 }\n", requests);
  ASSERT_EQ(grow_run.size(), requests.size());
  EXPECT_GT(grow_stats.at("kv_growths_denied"), 0.0) << "the pool was meant to run short";
  EXPECT_GT(grow_stats.at("requests_swapped_out") + grow_stats.at("requests_squashed"), 0.0);
  for (const auto& [id, tokens] : free_run)
    EXPECT_EQ(grow_run.at(id), tokens) << id << ": growing on demand changed the output";
  EXPECT_EQ(grow_stats.at("pool_empty_releases"), 0.0);
  EXPECT_EQ(grow_stats.at("host_pool_pages_kv"), 0.0);
  EXPECT_EQ(grow_stats.at("pool_pages_kv"), 0.0) << "every page came back";
  // Shortest predicted first (the max_tokens predictor) in the same tight
  // pool on demand: the engine's own preemption, the same tokens.
  const auto [sjf_run, sjf_stats] =
    run_demo("sjf", "[memory_pool]\npages = 12\n[scheduler]\npolicy = \"sjf\"\n"
                    "kv_reservation = \"on_demand\"\ngrowth_watermark = 0.0\n", requests);
  ASSERT_EQ(sjf_run.size(), requests.size());
  EXPECT_GT(sjf_stats.at("kv_growths_denied"), 0.0) << "the pool was meant to run short";
  for (const auto& [id, tokens] : free_run)
    EXPECT_EQ(sjf_run.at(id), tokens) << id << ": sjf changed the output";
  EXPECT_EQ(sjf_stats.at("pool_empty_releases"), 0.0);
  EXPECT_EQ(sjf_stats.at("pool_pages_kv"), 0.0) << "every page came back";
}

TEST(hidden_cache_e2e, requests_held_as_hidden_caches_produce_the_same_tokens) {
  // A multi-head model (the demo model's grouped-query attention makes a
  // hidden cache save nothing): a hidden cache holds 32 tokens per page.
  const temp_model model{"--hidden 128 --intermediate 256 --layers 2 --heads 4 --kv-heads 4 "
                         "--adapters 1 --ranks 8 --targets q_proj,v_proj --seed 11"};
  ASSERT_FALSE(model.dir().empty());
  std::vector<wire::generate_request> requests;
  for (int i = 0; i < 6; ++i) {
    wire::generate_request g;
    g.id = "h" + std::to_string(i);
    g.prompt_tokens = std::vector<std::int32_t>{};
    for (int t = 0; t < 10 + i; ++t)
      g.prompt_tokens->push_back(5 + (t * 7 + i * 13) % 200);
    g.max_tokens = 30;
    g.sampling.temperature = 0;
    if (i % 2 == 1)
      g.adapter = "demo-r4";
    requests.push_back(g);
  }
  const auto [kv_run, kv_stats] = run_demo("kv", "[scheduler]\npolicy = \"fcfs\"\n", requests, model.dir());
  ASSERT_EQ(kv_run.size(), requests.size());
  // 14 pages: KV caches would need 3 pages a request, hidden caches 2; the
  // greedy takes the hidden steps first.
  const auto [hidden_run, hidden_stats] =
    run_demo("hidden", "[memory_pool]\npages = 14\n[scheduler]\npolicy = \"aptserve\"\n"
                       "params = { rho = 0.0, ttft_slo_s = 0.0 }\n", requests, model.dir());
  ASSERT_EQ(hidden_run.size(), requests.size());
  EXPECT_GT(hidden_stats.at("aptserve_hidden_admitted"), 0.0) << "no request was held as a hidden cache";
  for (const auto& [id, tokens] : kv_run) {
    EXPECT_EQ(tokens.size(), 30u) << id;
    EXPECT_EQ(hidden_run.at(id), tokens) << id << ": the hidden cache changed the output";
  }
  // Hidden caches grown on demand in a pool too small for all: the decode
  // greedy preempts, requests come back with a cache type chosen again.
  const auto [grow_run, grow_stats] =
    run_demo("hidden-grow", "[memory_pool]\npages = 6\n[scheduler]\npolicy = \"aptserve\"\n"
                            "kv_reservation = \"on_demand\"\ngrowth_watermark = 0.0\n"
                            "params = { rho = 0.0, ttft_slo_s = 0.0, tbt_slo_s = 0.0 }\n", requests, model.dir());
  ASSERT_EQ(grow_run.size(), requests.size());
  EXPECT_GT(grow_stats.at("aptserve_hidden_admitted"), 0.0);
  EXPECT_GT(grow_stats.at("requests_squashed"), 0.0) << "the pool was meant to force preemptions";
  for (const auto& [id, tokens] : kv_run)
    EXPECT_EQ(grow_run.at(id), tokens) << id << ": growing hidden caches changed the output";
  EXPECT_EQ(grow_stats.at("pool_pages_kv"), 0.0) << "every page came back";
}

/// One greedy turn of 12 tokens in `session` on `c`; its output tokens.
std::vector<std::int32_t> greedy_turn(client_connection& c, const std::string& id,
                                      const std::vector<std::int32_t>& prompt, const std::string& session,
                                      const std::string& adapter = {}) {
  wire::generate_request g;
  g.id = id;
  g.adapter = adapter;
  g.prompt_tokens = prompt;
  g.max_tokens = 12;
  g.sampling.temperature = 0;
  g.session = session;
  EXPECT_TRUE(c.send(g));
  std::map<std::string, reply_log> logs;
  EXPECT_TRUE(collect(c, {id}, logs, std::chrono::seconds(30)));
  const auto* done = logs[id].done();
  EXPECT_NE(done, nullptr) << id;
  return done && done->tokens ? *done->tokens : std::vector<std::int32_t>{};
}

/// A cache's move to the host pool is a copy: waits until it has landed
/// (the host pool holds KV pages), so that the next turn finds it there.
// Until a cache has landed in the host pool: host pages taken and no copy
// to the host still under way.
void wait_host_kv(client_connection& c, const std::string& id) {
  for (int i = 0; i < 500; ++i) {
    const auto st = stats_of(c, id);
    if (st.at("host_pool_pages_kv") >= 1.0 && st.at("session_pages_moving_out") == 0.0)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(prefix_cache_e2e, prompts_reading_cached_pages_give_the_tokens_they_compute_alone) {
  if (!fs::exists("models/demo/config.json"))
    GTEST_FAIL() << "models/demo is missing: the e2e.make_demo_model test makes it";
  // Twelve prompts over two system prompts of 40 and 70 tokens (2 and 4
  // whole pages of 16), each with a suffix of its own, on the base model and
  // an adapter; greedy, so the tokens are the model's.
  std::vector<wire::generate_request> requests;
  for (int i = 0; i < 12; ++i) {
    wire::generate_request g;
    g.id = "q" + std::to_string(i);
    const int system = i % 2 == 0 ? 40 : 70;
    std::vector<std::int32_t> prompt;
    for (int t = 0; t < system; ++t)
      prompt.push_back(7 + (t * (i % 2 == 0 ? 13 : 29)) % 290);
    for (int t = 0; t < 3 + i; ++t)
      prompt.push_back(11 + (t * 7 + i * 31) % 280);
    g.prompt_tokens = prompt;
    g.max_tokens = 12;
    g.sampling.temperature = 0;
    if (i % 3 == 2)
      g.adapter = "demo-r4";
    requests.push_back(g);
  }
  const auto [alone, alone_stats] =
    run_demo("prefix-off", "[scheduler]\nmax_running = 2\nprefix_caching = false\n", requests);
  ASSERT_EQ(alone.size(), requests.size());
  EXPECT_EQ(alone_stats.at("prefix_cache_hits"), 0.0);
  // Two at a time: the later ones read what the earlier ones cached
  // (every prompt's pages cached, from the first).
  const auto [cached, cached_stats] = run_demo(
    "prefix-on", "[scheduler]\nmax_running = 2\nprefix_caching = true\nprefix_cache_admission = \"all\"\n", requests);
  ASSERT_EQ(cached.size(), requests.size());
  for (const auto& [id, tokens] : alone) {
    EXPECT_EQ(tokens.size(), 12u) << id;
    EXPECT_EQ(cached.at(id), tokens) << id << ": reading cached pages changed the output";
  }
  EXPECT_GE(cached_stats.at("prefix_cache_hits"), 6.0);
  EXPECT_GT(cached_stats.at("prompt_tokens_reused"), 0.0);
  EXPECT_LT(cached_stats.at("prompt_tokens_prefilled"), alone_stats.at("prompt_tokens_prefilled"));
  // Every page is back but the cache's, which nobody reads now.
  EXPECT_EQ(cached_stats.at("pool_pages_kv"), cached_stats.at("prefix_cache_pages"));
  EXPECT_EQ(cached_stats.at("prefix_cache_idle_pages"), cached_stats.at("prefix_cache_pages"));
  EXPECT_EQ(cached_stats.at("pool_refused_page_moves"), 0.0);
  EXPECT_EQ(cached_stats.at("pool_empty_releases"), 0.0);
  // The default: pages cached once a second prompt holds them, read from
  // then on; the same tokens.
  const auto [repeated, repeated_stats] = run_demo("prefix-default", "[scheduler]\nmax_running = 2\n", requests);
  ASSERT_EQ(repeated.size(), requests.size());
  for (const auto& [id, tokens] : alone)
    EXPECT_EQ(repeated.at(id), tokens) << id << ": reading pages cached on their second prompt changed the output";
  EXPECT_GT(repeated_stats.at("prefix_cache_hits"), 0.0);
  EXPECT_LT(repeated_stats.at("prompt_tokens_prefilled"), alone_stats.at("prompt_tokens_prefilled"));
  EXPECT_EQ(repeated_stats.at("pool_pages_kv"), repeated_stats.at("prefix_cache_pages"));
  // A pool of 12 pages with pages on demand, the adaptive policy preempting
  // freely and a host pool to swap to: cached pages are read, evicted and
  // swapped out with their readers' caches, and the tokens stay the same.
  const auto [tight, tight_stats] = run_demo(
    "prefix-tight",
    "[memory_pool]\npages = 12\nhost_pages = 16\n[scheduler]\npolicy = \"adaptive\"\nkv_reservation = \"on_demand\"\n"
    "prefix_caching = true\nprefix_cache_fraction = 0.5\nparams = { preempt_margin = 0 }\n",
    requests);
  ASSERT_EQ(tight.size(), requests.size());
  for (const auto& [id, tokens] : alone)
    EXPECT_EQ(tight.at(id), tokens) << id << ": reading cached pages under preemption changed the output";
  EXPECT_GT(tight_stats.at("prefix_cache_hits"), 0.0);
  EXPECT_EQ(tight_stats.at("pool_pages_kv"), tight_stats.at("prefix_cache_pages"));
  EXPECT_EQ(tight_stats.at("pool_refused_page_moves"), 0.0);
  EXPECT_EQ(tight_stats.at("pool_empty_releases"), 0.0);
}

TEST(session_e2e, a_turn_reuses_only_a_cache_of_its_own_adapter_and_as_much_of_it_as_its_prompt_shares) {
  if (!fs::exists("models/demo/config.json"))
    GTEST_FAIL() << "models/demo is missing: the e2e.make_demo_model test makes it";
  const auto path = fs::temp_directory_path() / ("troupe-session-mix-" + std::to_string(::getpid()) + ".toml");
  std::ofstream{path} << cpu_server_config("models/demo") << "[[adapters]]\nname = \"r8\"\npath = "
                      << "\"models/demo/adapters/lora-1\"\n";
  auto d = start_from_file(path.string());
  ASSERT_NE(d, nullptr);
  client_connection c{d->endpoint()};
  std::vector<std::int32_t> prompt1;
  for (int t = 0; t < 40; ++t)
    prompt1.push_back(7 + (t * 13) % 290);
  const auto reply1 = greedy_turn(c, "m1", prompt1, "mix", "r8");
  ASSERT_EQ(reply1.size(), 12u);
  auto prompt2 = prompt1;
  prompt2.insert(prompt2.end(), reply1.begin(), reply1.end());
  prompt2.push_back(42);
  // The next turn of the session on the base model: the cache holds the
  // adapter's K and V, so it is not reused.
  const auto base_turn = greedy_turn(c, "m2", prompt2, "mix");
  EXPECT_EQ(base_turn, greedy_turn(c, "m3", prompt2, "fresh")) << "the adapter's cache served the base model";
  auto stats = stats_of(c, "s1");
  EXPECT_EQ(stats.at("session_hits"), 0.0);
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 0.0);

  // The session's cache is now the base model's turn: 53 prompt tokens and
  // 11 of the reply. A turn that shares the prompt and 5 reply tokens, then
  // parts (as a client's re-tokenized history may), reuses those 58.
  ASSERT_EQ(base_turn.size(), 12u);
  auto prompt3 = prompt2;
  prompt3.insert(prompt3.end(), base_turn.begin(), base_turn.begin() + 5);
  prompt3.push_back(base_turn[5] == 99 ? 98 : 99);
  prompt3.push_back(17);
  const auto partial = greedy_turn(c, "m4", prompt3, "mix");
  stats = stats_of(c, "s2");
  EXPECT_EQ(stats.at("session_hits"), 1.0);
  EXPECT_EQ(stats.at("session_partial_hits"), 1.0);
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 58.0);
  EXPECT_EQ(partial, greedy_turn(c, "m5", prompt3, "fresh2")) << "reusing part of the cache changed the output";
  // One that shares less than half of it computes whole.
  std::vector<std::int32_t> prompt4(prompt3.begin(), prompt3.begin() + 20);
  prompt4.insert(prompt4.end(), {5, 6, 7});
  greedy_turn(c, "m6", prompt4, "mix");
  stats = stats_of(c, "s3");
  EXPECT_EQ(stats.at("session_hits"), 1.0);
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 58.0);
  d->stop();
}

TEST(session_e2e, the_next_turn_reuses_the_session_cache_and_gives_the_same_tokens) {
  if (!fs::exists("models/demo/config.json"))
    GTEST_FAIL() << "models/demo is missing: the e2e.make_demo_model test makes it";
  const auto path = fs::temp_directory_path() / ("troupe-session-" + std::to_string(::getpid()) + ".toml");
  std::ofstream{path} << cpu_server_config("models/demo");
  auto d = start_from_file(path.string());
  ASSERT_NE(d, nullptr);
  client_connection c{d->endpoint()};
  auto turn = [&](const std::string& id, const std::vector<std::int32_t>& prompt, const std::string& session) {
    return greedy_turn(c, id, prompt, session);
  };
  std::vector<std::int32_t> prompt1;
  for (int t = 0; t < 20; ++t)
    prompt1.push_back(5 + (t * 11) % 300);
  const auto reply1 = turn("t1", prompt1, "chat");
  ASSERT_EQ(reply1.size(), 12u);
  auto prompt2 = prompt1;
  prompt2.insert(prompt2.end(), reply1.begin(), reply1.end());
  for (int t = 0; t < 6; ++t)
    prompt2.push_back(40 + t);
  const auto with_cache = turn("t2", prompt2, "chat");
  auto stats = stats_of(c, "s1");
  EXPECT_EQ(stats.at("session_hits"), 1.0);
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 20.0 + 11.0) << "prompt 1 and reply 1 but its last token";
  // The same turn computed whole (another session: no cache to reuse).
  const auto recomputed = turn("t3", prompt2, "other");
  EXPECT_EQ(recomputed, with_cache) << "reusing the session's KV changed the output";
  stats = stats_of(c, "s2");
  EXPECT_EQ(stats.at("session_hits"), 1.0);
  EXPECT_EQ(stats.at("sessions_cached"), 2.0);
  d->stop();

  // Down a tier and back: room for one cache of 2 pages on the GPU
  // (session_fraction 3/64), a host pool behind it. Session A's first turn
  // is pushed to the host by session B's; A's second turn copies it back
  // into new pages and prefills only its new tokens.
  std::ofstream{path} << cpu_server_config("models/demo")
                      << "[memory_pool]\npages = 64\nhost_pages = 64\n[scheduler]\nsession_fraction = 0.047\n";
  d = start_from_file(path.string());
  ASSERT_NE(d, nullptr);
  client_connection c2{d->endpoint()};
  auto turn2 = [&](const std::string& id, const std::vector<std::int32_t>& prompt, const std::string& session) {
    return greedy_turn(c2, id, prompt, session);
  };
  EXPECT_EQ(turn2("a1", prompt1, "A"), reply1);
  auto other = prompt1;
  other[0] = 77;
  const auto b_reply = turn2("b1", other, "B");
  stats = stats_of(c2, "s3");
  EXPECT_EQ(stats.at("session_offloads"), 1.0) << "A's cache went to the host pool";
  wait_host_kv(c2, "w1");
  EXPECT_EQ(turn2("a2", prompt2, "A"), with_cache) << "the cache brought back from the host changed the output";
  stats = stats_of(c2, "s4");
  EXPECT_EQ(stats.at("session_host_hits"), 1.0);
  EXPECT_EQ(stats.at("session_streamed_ins"), 1.0) << "streamed in layer by layer under its step";
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 31.0);

  // An advisory brings a cache up ahead of its turn. A third session's turn
  // pushes B's cache to the host; advise B, its turn expected in 1.5 s:
  // the fetch waits until 1 s before (advise_fetch_lead_s), and the turn
  // then finds the cache on the GPU (no copy on its critical path).
  auto third = prompt1;
  third[1] = 99;
  turn2("c1", third, "C");
  EXPECT_EQ(stats_of(c2, "s5").at("session_offloads"), 2.0) << "B's cache went to the host";
  wait_host_kv(c2, "w2");
  wire::advise_request adv{"adv", "B", 1.5, 0};
  ASSERT_TRUE(c2.send(adv));
  std::string status;
  for (int i = 0; i < 50 && status.empty(); ++i) {
    auto got = c2.receive(std::chrono::milliseconds(200));
    if (!got)
      continue;
    if (auto* r = std::get_if<wire::reply>(&*got))
      if (auto* a = std::get_if<wire::advise_reply>(r))
        status = a->status;
  }
  EXPECT_EQ(status, "scheduled");
  // When B's cache is back on the GPU, C's (now the least recently used)
  // makes room for it by going to the host: the third offload.
  for (int i = 0; i < 500 && stats_of(c2, "s6").at("session_offloads") < 3.0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stats_of(c2, "s6b").at("session_offloads"), 3.0);
  auto prompt_b2 = other;
  prompt_b2.insert(prompt_b2.end(), b_reply.begin(), b_reply.end());
  prompt_b2.push_back(41);
  const auto hits_before = stats_of(c2, "s7").at("session_hits");
  const auto b2 = turn2("b2", prompt_b2, "B");
  stats = stats_of(c2, "s8");
  EXPECT_EQ(stats.at("session_prefetches"), 1.0);
  EXPECT_EQ(stats.at("session_hits"), hits_before + 1) << "taken over on the GPU";
  EXPECT_EQ(stats.at("session_host_hits"), 1.0) << "no copy at admission this time";
  EXPECT_EQ(b2, greedy_turn(c2, "b3", prompt_b2, "fresh")) << "the prefetched cache changed the output";
  d->stop();

  // Down to disk and back: room for one 2-page cache on the GPU and one in
  // the host pool, files below, written only when pushed down. A's cache goes GPU -> host (B's turn) ->
  // disk (C's turn, B's cache taking its host pages once written); A's
  // second turn reads it back through the host pool, B's going to disk to
  // make room.
  const auto disk_dir = fs::temp_directory_path() / ("troupe-session-disk-" + std::to_string(::getpid()));
  std::ofstream{path} << cpu_server_config("models/demo")
                      << "[memory_pool]\npages = 64\nhost_pages = 2\ndisk_pages = 16\ndisk_write_back = 0\ndisk_fetch = \"read\"\ndisk_dir = \""
                      << disk_dir.string() << "\"\n[scheduler]\nsession_fraction = 0.047\n"
                      << "[copy_engine]\nlayer_streaming = false\n"; // copied whole, then computed
  d = start_from_file(path.string());
  ASSERT_NE(d, nullptr);
  client_connection c3{d->endpoint()};
  auto turn3 = [&](const std::string& id, const std::vector<std::int32_t>& prompt, const std::string& session) {
    return greedy_turn(c3, id, prompt, session);
  };
  EXPECT_EQ(turn3("a1", prompt1, "A"), reply1);
  turn3("b1", other, "B");
  turn3("c1", third, "C");
  // The write is a copy: done when the host pool has let A's pages go and
  // B's cache has moved into them.
  for (int i = 0; i < 500; ++i) {
    const auto st = stats_of(c3, "d1");
    if (st.at("session_disk_pages") >= 2.0 && st.at("session_offloads") >= 2.0 && st.at("host_pool_pages_kv") == 2.0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stats = stats_of(c3, "d2");
  EXPECT_EQ(stats.at("session_disk_writes"), 1.0) << "A's cache went to disk";
  EXPECT_EQ(stats.at("session_disk_pages"), 2.0);
  EXPECT_EQ(stats.at("session_offloads"), 2.0) << "B's cache went to the host pool after it";
  EXPECT_EQ(stats.at("host_pool_pages_kv"), 2.0);
  EXPECT_EQ(stats.at("sessions_cached"), 3.0) << "none dropped";
  EXPECT_EQ(turn3("a2", prompt2, "A"), with_cache) << "the cache read back from disk changed the output";
  stats = stats_of(c3, "d3");
  EXPECT_EQ(stats.at("session_disk_reads"), 1.0);
  EXPECT_EQ(stats.at("session_disk_writes"), 2.0) << "B's cache went to disk to make room for A's";
  EXPECT_EQ(stats.at("session_streamed_ins"), 0.0);
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 31.0);
  EXPECT_EQ(stats.at("session_disk_pages"), 2.0) << "B's";
  d->stop();
  EXPECT_FALSE(fs::exists(disk_dir / ("troupe-kv-" + std::to_string(::getpid())))) << "its files outlive it";

  // Write-back (the default share, half of the host pool): A's cache, once
  // in the full host pool, is copied to disk ahead of need and keeps its
  // host pages; C's turn then pushes B down without waiting for a write,
  // and A's second turn reads its cache back from the file: by cost (the
  // default), reading two pages beats recomputing 31 tokens.
  std::ofstream{path} << cpu_server_config("models/demo")
                      << "[memory_pool]\npages = 64\nhost_pages = 2\ndisk_pages = 16\ndisk_dir = \""
                      << disk_dir.string() << "\"\n[scheduler]\nsession_fraction = 0.047\n"
                      << "[copy_engine]\nlayer_streaming = false\n";
  d = start_from_file(path.string());
  ASSERT_NE(d, nullptr);
  client_connection c4{d->endpoint()};
  auto turn4 = [&](const std::string& id, const std::vector<std::int32_t>& prompt, const std::string& session) {
    return greedy_turn(c4, id, prompt, session);
  };
  EXPECT_EQ(turn4("a1", prompt1, "A"), reply1);
  turn4("b1", other, "B");
  for (int i = 0; i < 500 && stats_of(c4, "e1").at("session_clean_pages") < 2.0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stats = stats_of(c4, "e2");
  EXPECT_EQ(stats.at("session_clean_pages"), 2.0) << "A's cache copied to disk, still in the host pool";
  EXPECT_EQ(stats.at("host_pool_pages_kv"), 2.0);
  turn4("c1", third, "C");
  EXPECT_EQ(turn4("a2", prompt2, "A"), with_cache) << "the cache written back and read from disk changed the output";
  stats = stats_of(c4, "e3");
  EXPECT_EQ(stats.at("session_disk_reads"), 1.0);
  EXPECT_EQ(stats.at("prompt_tokens_reused"), 31.0);
  EXPECT_EQ(stats.at("session_evictions"), 0.0) << "no cache dropped on the way";
  EXPECT_EQ(stats.at("session_disk_skips"), 0.0);
  d->stop();
  EXPECT_FALSE(fs::exists(disk_dir / ("troupe-kv-" + std::to_string(::getpid())))) << "its files outlive it";
  fs::remove_all(disk_dir);
  fs::remove(path);
}

} // namespace
} // namespace troupe::testing
