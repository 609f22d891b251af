// Tests for runtime/config: the shipped files and the embedded default load,
// absent keys keep the options.hpp defaults, and every kind of bad value gives
// one message naming the file and the key path. Runs from the repository root.
#include "runtime/config.hpp"

#include "policies/registry.hpp"
#include "runtime/tuner_params.hpp"

#include <gtest/gtest.h>

#include <map>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <type_traits>
#include <variant>

namespace troupe {
namespace {

static_assert(std::is_nothrow_move_constructible_v<deployment_options>);
static_assert(std::is_nothrow_move_constructible_v<config_error>);

const config_catalog catalog{
  .backends = {"cpu", "sim"},
  .gpus = {"A100-80GB", "H100-80GB", "H200"},
  .model_presets = {"llama-2-7b", "llama-2-13b"},
  .scheduling_policies = {"fcfs"},
  .classifier_policies = {"single_queue"},
  .eviction_policies = {"lru"},
  .prefetch_policies = {"none", "histogram"},
  .output_predictors = {"history", "max_tokens", "oracle"},
};

/// Parses `text` as "bad.toml" and returns the options, failing the test on an error.
deployment_options parse_ok(const std::string& text, const config_catalog& cat = catalog) {
  auto result = parse_config(text, "bad.toml", cat);
  if (const auto* error = std::get_if<config_error>(&result)) {
    ADD_FAILURE() << "unexpected error: " << error->message;
    return {};
  }
  return std::get<deployment_options>(std::move(result));
}

/// Parses `text` as "bad.toml" and returns the error message ("" if it parsed).
std::string parse_error_message(const std::string& text, const config_catalog& cat = catalog) {
  auto result = parse_config(text, "bad.toml", cat);
  if (const auto* error = std::get_if<config_error>(&result))
    return error->message;
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// -- shipped files -------------------------------------------------------------

TEST(config, default_file_loads) {
  auto result = load_config_file("config/default.toml", catalog);
  ASSERT_TRUE(std::holds_alternative<deployment_options>(result)) << std::get<config_error>(result).message;
  const auto& o = std::get<deployment_options>(result);
  EXPECT_EQ(o.source, "config/default.toml");
  EXPECT_EQ(o.backend.kind, "cpu");
  EXPECT_EQ(o.model.path, "models/demo");
  EXPECT_EQ(o.server.endpoint, "tcp://127.0.0.1:5555");
  EXPECT_EQ(o.scheduler.policy, "fcfs");
  EXPECT_EQ(o.classifier.policy, "single_queue");
  EXPECT_EQ(o.adapter_cache.policy, "lru");
  EXPECT_EQ(o.adapter_generate.count, 0u);
  ASSERT_EQ(o.adapters.size(), 3u);
  EXPECT_EQ(o.adapters[0].path, "models/demo/adapters/lora-0");
}

TEST(config, sim_h100_llama7b_file_loads) {
  auto result = load_config_file("config/sim-h100-llama7b.toml", catalog);
  ASSERT_TRUE(std::holds_alternative<deployment_options>(result)) << std::get<config_error>(result).message;
  const auto& o = std::get<deployment_options>(result);
  EXPECT_EQ(o.adapter_generate.count, 100u);
  EXPECT_EQ(o.adapter_generate.ranks, (std::vector<std::uint32_t>{8, 16, 32, 64}));
  EXPECT_GE(o.adapters.size(), 3u);
  const auto all = expand_adapters(o);
  EXPECT_EQ(all.size(), o.adapters.size() + 100);
  std::set<std::string> names;
  for (const auto& a : all)
    names.insert(a.name);
  EXPECT_EQ(names.size(), all.size());
}

TEST(config, embedded_default_parses_and_matches_the_file) {
  auto result = parse_config(embedded_default_config(), "<embedded default>", catalog);
  ASSERT_TRUE(std::holds_alternative<deployment_options>(result)) << std::get<config_error>(result).message;
  EXPECT_EQ(std::get<deployment_options>(result).source, "<embedded default>");
  EXPECT_EQ(embedded_default_config(), read_file("config/default.toml"));
}

// -- defaults ------------------------------------------------------------------

/// The parts in which `a` and `b` differ, comma-separated ("" when equal).
std::string differing_parts(const deployment_options& a, const deployment_options& b) {
  std::string out;
  const auto part = [&](bool same, const char* name) {
    if (!same)
      out += (out.empty() ? "" : ", ") + std::string(name);
  };
  part(a.source == b.source, "source");
  part(a.server == b.server, "server");
  part(a.logging == b.logging, "logging");
  part(a.caf == b.caf, "caf");
  part(a.model == b.model, "model");
  part(a.backend == b.backend, "backend");
  part(a.memory_pool == b.memory_pool, "memory_pool");
  part(a.scheduler == b.scheduler, "scheduler");
  part(a.classifier == b.classifier, "classifier");
  part(a.queue_tuner == b.queue_tuner, "queue_tuner");
  part(a.adapter_cache == b.adapter_cache, "adapter_cache");
  part(a.copy_engine == b.copy_engine, "copy_engine");
  part(a.metrics == b.metrics, "metrics");
  part(a.cluster == b.cluster, "cluster");
  part(a.http == b.http, "http");
  part(a.adapters == b.adapters, "adapters");
  part(a.adapter_generate == b.adapter_generate, "adapters_generate");
  return out;
}

TEST(config, empty_file_gives_the_options_defaults) {
  const auto o = parse_ok("");
  deployment_options d;
  d.source = "bad.toml";
  EXPECT_EQ(differing_parts(o, d), "");
  EXPECT_TRUE(o == d);
  d.scheduler.max_running += 1; // the comparison sees a field
  EXPECT_EQ(differing_parts(o, d), "scheduler");
}

// -- the reference (docs/configuration.md) ----------------------------------------

/// docs/configuration.md's key tables: section ("adapters" for the
/// [[adapters]] array) to key to its default as written there (the Default
/// column's first `code` span; "" where it has none).
std::map<std::string, std::map<std::string, std::string>> documented_keys() {
  std::ifstream in("docs/configuration.md");
  std::map<std::string, std::map<std::string, std::string>> keys;
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.rfind("## [", 0) == 0) {
      section = line.substr(3);
      std::erase(section, '[');
      std::erase(section, ']');
    } else if (line.rfind("| `", 0) == 0 && !section.empty()) {
      std::vector<std::string> cells;
      std::size_t at = 1;
      for (std::size_t bar; (bar = line.find('|', at)) != std::string::npos; at = bar + 1)
        cells.push_back(line.substr(at, bar - at));
      if (cells.size() < 3)
        continue;
      const auto code = [](const std::string& cell) {
        const auto open = cell.find('`');
        const auto close = open == std::string::npos ? open : cell.find('`', open + 1);
        return close == std::string::npos ? std::string{} : cell.substr(open + 1, close - open - 1);
      };
      keys[section][code(cells[0])] = code(cells[2]);
    }
  }
  return keys;
}

TEST(config, every_documented_key_is_read_and_its_documented_default_is_the_default) {
  const auto keys = documented_keys();
  ASSERT_EQ(keys.size(), 16u) << "sections in docs/configuration.md";
  const std::string adapter = "[[adapters]]\nname = \"a\"\n";
  const auto defaults = parse_ok(adapter);
  for (const auto& [section, entries] : keys) {
    std::string text = section == "adapters" ? adapter : "[" + section + "]\n";
    for (const auto& [key, value] : entries) {
      if (section == "adapters" && key == "name")
        continue; // required: no default
      EXPECT_FALSE(value.empty()) << section << "." << key << ": no default documented";
      if (!value.empty())
        text += key + " = " + value + "\n";
    }
    if (section != "adapters")
      text += adapter;
    // A key the parser does not know, or a default it refuses, fails here.
    const auto o = parse_ok(text);
    EXPECT_EQ(differing_parts(o, defaults), "") << "the documented defaults of [" << section << "]:\n" << text;
  }
}

TEST(config, every_key_the_shipped_files_set_is_documented) {
  const auto keys = documented_keys();
  for (const char* file : {"config/default.toml", "config/sim-h100-llama7b.toml"}) {
    std::ifstream in(file);
    ASSERT_TRUE(in) << file;
    std::string line, section;
    int lines = 0;
    for (int n = 1; std::getline(in, line); ++n) {
      const auto first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#')
        continue;
      if (line[first] == '[') { // [section], [section.table] or [[adapters]]
        section = line.substr(first, line.find(']', first) - first);
        std::erase(section, '[');
        continue;
      }
      const auto eq = line.find('=');
      if (eq == std::string::npos || section.find('.') != std::string::npos)
        continue; // an array's later lines, or a table of numbers' own keys
      std::string key = line.substr(first, eq - first);
      key.erase(key.find_last_not_of(" \t") + 1);
      ++lines;
      const auto s = keys.find(section);
      EXPECT_TRUE(s != keys.end() && s->second.contains(key))
          << file << ":" << n << ": " << section << "." << key << " is not in docs/configuration.md";
    }
    EXPECT_GT(lines, 5) << file;
  }
}

/// The line of `file` that starts with `prefix` after the heading that
/// starts with `heading`; "" when there is none.
std::string doc_line(const char* file, const std::string& heading, const std::string& prefix) {
  std::ifstream in(file);
  std::string line;
  bool under = false;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0)
      under = line.rfind(heading, 0) == 0;
    else if (under && line.rfind(prefix, 0) == 0)
      return line;
  }
  return {};
}

/// The keys a policy's configure() takes, from the error it gives for a key
/// it does not: `... takes "a", "b" and "c"; got "..."`.
template <class Policy>
std::vector<std::string> params_of(Policy& p) {
  const auto e = p.configure({{"config_test_no_such_key", 1}});
  std::vector<std::string> keys;
  const auto from = e.find(" takes "), to = e.find("; got");
  if (from == std::string::npos || to == std::string::npos)
    return keys;
  for (auto at = e.find('"', from); at != std::string::npos && at < to;) {
    const auto close = e.find('"', at + 1);
    keys.push_back(e.substr(at + 1, close - at - 1));
    at = e.find('"', close + 1);
  }
  return keys;
}

bool names_code(const std::string& text, const std::string& name) {
  for (auto at = text.find("`" + name); at != std::string::npos; at = text.find("`" + name, at + 1)) {
    const auto after = at + 1 + name.size();
    if (after < text.size() && (text[after] == '`' || text[after] == ' '))
      return true;
  }
  return false;
}

TEST(config, every_registered_policy_and_its_params_are_documented) {
  const auto sched_policy = doc_line("docs/configuration.md", "## [scheduler]", "| `policy` |");
  const auto sched_params = doc_line("docs/configuration.md", "## [scheduler]", "| `params` |");
  const auto evict_policy = doc_line("docs/configuration.md", "## [adapter_cache]", "| `policy` |");
  const auto evict_params = doc_line("docs/configuration.md", "## [adapter_cache]", "| `params` |");
  const auto class_policy = doc_line("docs/configuration.md", "## [classifier]", "| `policy` |");
  for (const auto* line : {&sched_policy, &sched_params, &evict_policy, &evict_params, &class_policy})
    ASSERT_FALSE(line->empty()) << "a policy row of docs/configuration.md is missing";
  for (const auto& name : policies::scheduling_policy_names()) {
    auto p = policies::make_scheduling_policy(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_TRUE(names_code(sched_policy, name)) << name << " is not listed under [scheduler] policy";
    const auto row = doc_line("docs/policies.md", "## Scheduling policies", "| `" + name + "` |");
    EXPECT_FALSE(row.empty()) << name << " has no row in docs/policies.md";
    const auto keys = params_of(*p);
    if (!keys.empty()) {
      EXPECT_TRUE(names_code(sched_params, name)) << name << "'s params are not in docs/configuration.md";
    }
    for (const auto& key : keys) {
      EXPECT_TRUE(names_code(sched_params, key)) << name << "." << key << " is not in docs/configuration.md";
      EXPECT_TRUE(names_code(row, key)) << name << "." << key << " is not in docs/policies.md";
    }
  }
  for (const auto& name : policies::eviction_policy_names()) {
    auto p = policies::make_eviction_policy(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_TRUE(names_code(evict_policy, name)) << name << " is not listed under [adapter_cache] policy";
    for (const auto& key : params_of(*p))
      EXPECT_TRUE(names_code(evict_params, key)) << name << "." << key << " is not in docs/configuration.md";
  }
  for (const auto& name : policies::classifier_policy_names())
    EXPECT_TRUE(names_code(class_policy, name)) << name << " is not listed under [classifier] policy";
}

TEST(config, the_queue_tuner_reads_its_quota_size_and_hands_the_tuner_its_params) {
  const auto defaults = parse_ok("").queue_tuner;
  EXPECT_EQ(defaults.quota_size, "max");
  EXPECT_EQ(tuner_params_of(defaults, 1000).size, policies::tuner_params::quota_size::max);
  const auto o = parse_ok("[queue_tuner]\nquota_size = \"mean\"\nmax_queues = 3\nelbow = 0.1\nslo_s = 2\n"
                          "window_s = 90\n").queue_tuner;
  EXPECT_EQ(o.quota_size, "mean");
  const auto p = tuner_params_of(o, 4096);
  EXPECT_EQ(p.size, policies::tuner_params::quota_size::mean);
  EXPECT_EQ(p.max_queues, 3u);
  EXPECT_DOUBLE_EQ(p.elbow, 0.1);
  EXPECT_DOUBLE_EQ(p.slo_s, 2.0);
  EXPECT_DOUBLE_EQ(p.window_s, 90.0);
  EXPECT_EQ(p.total_tokens, 4096u);
}

TEST(config, keys_left_out_of_a_section_keep_their_defaults) {
  const auto o = parse_ok("[scheduler]\nmax_running = 4\n[[adapters]]\nname = \"a\"\n");
  EXPECT_EQ(o.scheduler.max_running, 4u);
  EXPECT_EQ(o.scheduler.token_budget, scheduler_options{}.token_budget);
  EXPECT_EQ(o.scheduler.policy, "fcfs");
  ASSERT_EQ(o.adapters.size(), 1u);
  EXPECT_EQ(o.adapters[0].rank, adapter_spec{}.rank);
  EXPECT_EQ(o.adapters[0].path, "");
}

TEST(config, integers_are_accepted_for_float_keys) {
  const auto o = parse_ok("[backend]\ntime_scale = 2\n[memory_pool]\ngpu_memory_fraction = 1\n"
                          "[server]\ndrain_timeout_s = 0\n[metrics]\nlog_interval_s = 5\n");
  EXPECT_EQ(o.backend.time_scale, 2.0);
  EXPECT_EQ(o.memory_pool.gpu_memory_fraction, 1.0);
  EXPECT_EQ(o.server.drain_timeout_s, 0.0);
  EXPECT_EQ(o.metrics.log_interval_s, 5.0);
}

TEST(config, the_sim_cost_table_is_read_by_name) {
  const auto o = parse_ok("[backend]\nkind = \"sim\"\n"
                          "cost = { hbm_efficiency = 0.85, step_overhead_seconds = 0.0004, pcie_bytes_per_s = 2.5e10 }\n");
  EXPECT_EQ(o.backend.cost, (std::map<std::string, double>{
                              {"hbm_efficiency", 0.85}, {"step_overhead_seconds", 0.0004}, {"pcie_bytes_per_s", 2.5e10}}));
  EXPECT_TRUE(parse_ok("").backend.cost.empty());
}

TEST(config, every_key_is_read) {
  const auto o = parse_ok(R"(
[server]
endpoint = "ipc:///tmp/troupe.sock"
max_frame_bytes = 4096
max_pending = 7
drain_timeout_s = 1.5
[logging]
level = "debug"
file = "troupe.log"
[caf]
scheduler_threads = 3
[model]
preset = "llama-2-13b"
shape_file = "shape.json"
max_context = 2048
[backend]
kind = "sim"
gpu = "H200"
time_scale = 0
seed = 9
dtype = "bfloat16"
device = 3
step_graphs = 8
[memory_pool]
page_tokens = 1024
pages = 5000000000
gpu_memory_fraction = 0.5
host_pages = 77
disk_write_back = 0.25
disk_fetch = "read"
disk_bytes_per_s = 7e9
disk_max_wait_s = 0.5
[scheduler]
policy = "fcfs"
max_running = 1
token_budget = 1
max_waiting = 2
advise_fetch_lead_s = 2.5
prefix_caching = false
prefix_cache_fraction = 0.5
prefix_cache_admission = "all"
[classifier]
enabled = false
policy = "single_queue"
[adapter_cache]
policy = "lru"
params = { frequency = 0.5, size = 2 }
max_resident = 12
window_s = 60
prefetch = false
prefetch_free_fraction = 0.25
predictor = "histogram"
predictor_interval_s = 0.5
host_bytes = 1000000
directories = ["a/b", "/c"]
[copy_engine]
max_inflight = 1
[metrics]
enabled = false
log_interval_s = 0
[[adapters]]
name = "x"
rank = 1024
path = "/adapters/x"
[adapters_generate]
count = 3
prefix = "g"
ranks = [4]
)");
  EXPECT_EQ(o.server.endpoint, "ipc:///tmp/troupe.sock");
  EXPECT_EQ(o.server.max_frame_bytes, 4096u);
  EXPECT_EQ(o.server.max_pending, 7u);
  EXPECT_EQ(o.server.drain_timeout_s, 1.5);
  EXPECT_EQ(o.logging.level, "debug");
  EXPECT_EQ(o.logging.file, "troupe.log");
  EXPECT_EQ(o.caf.scheduler_threads, 3u);
  EXPECT_EQ(o.model.preset, "llama-2-13b");
  EXPECT_EQ(o.model.shape_file, "shape.json");
  EXPECT_EQ(o.model.max_context, 2048u);
  EXPECT_EQ(o.backend.gpu, "H200");
  EXPECT_EQ(o.backend.time_scale, 0.0);
  EXPECT_EQ(o.backend.seed, 9u);
  EXPECT_EQ(o.backend.dtype, "bfloat16");
  EXPECT_EQ(o.backend.device, 3u);
  EXPECT_EQ(o.backend.step_graphs, 8u);
  EXPECT_EQ(o.memory_pool.page_tokens, 1024u);
  EXPECT_EQ(o.memory_pool.pages, 5000000000u);
  EXPECT_EQ(o.memory_pool.gpu_memory_fraction, 0.5);
  EXPECT_EQ(o.scheduler.max_running, 1u);
  EXPECT_EQ(o.scheduler.token_budget, 1u);
  EXPECT_EQ(o.scheduler.max_waiting, 2u);
  EXPECT_EQ(o.scheduler.advise_fetch_lead_s, 2.5);
  EXPECT_FALSE(o.scheduler.prefix_caching);
  EXPECT_EQ(o.scheduler.prefix_cache_fraction, 0.5);
  EXPECT_EQ(o.scheduler.prefix_cache_admission, "all");
  EXPECT_FALSE(o.classifier.enabled);
  EXPECT_EQ(o.adapter_cache.max_resident, 12u);
  EXPECT_EQ(o.memory_pool.host_pages, 77u);
  EXPECT_EQ(o.memory_pool.disk_write_back, 0.25);
  EXPECT_EQ(o.memory_pool.disk_fetch, "read");
  EXPECT_EQ(o.memory_pool.disk_bytes_per_s, 7e9);
  EXPECT_EQ(o.memory_pool.disk_max_wait_s, 0.5);
  EXPECT_EQ(o.adapter_cache.params, (std::map<std::string, double>{{"frequency", 0.5}, {"size", 2.0}}));
  EXPECT_EQ(o.adapter_cache.window_s, 60.0);
  EXPECT_FALSE(o.adapter_cache.prefetch);
  EXPECT_EQ(o.adapter_cache.prefetch_free_fraction, 0.25);
  EXPECT_EQ(o.adapter_cache.predictor, "histogram");
  EXPECT_EQ(o.adapter_cache.predictor_interval_s, 0.5);
  EXPECT_EQ(o.adapter_cache.host_bytes, 1000000u);
  EXPECT_EQ(o.adapter_cache.directories, (std::vector<std::string>{"a/b", "/c"}));
  EXPECT_EQ(o.copy_engine.max_inflight, 1u);
  EXPECT_FALSE(o.metrics.enabled);
  EXPECT_EQ(o.metrics.log_interval_s, 0.0);
  ASSERT_EQ(o.adapters.size(), 1u);
  EXPECT_EQ(o.adapters[0].name, "x");
  EXPECT_EQ(o.adapters[0].rank, 1024u);
  EXPECT_EQ(o.adapters[0].path, "/adapters/x");
  EXPECT_EQ(o.adapter_generate.count, 3u);
  EXPECT_EQ(o.adapter_generate.prefix, "g");
  EXPECT_EQ(o.adapter_generate.ranks, std::vector<std::uint32_t>{4});
}

TEST(config, http_keys_are_read) {
  const auto o = parse_ok(R"(
[http]
listen = "127.0.0.1:0"
model = "my-llama"
max_connections = 8
)");
  EXPECT_TRUE(o.http.enabled());
  EXPECT_EQ(o.http.listen, "127.0.0.1:0");
  EXPECT_EQ(o.http.model, "my-llama");
  EXPECT_EQ(o.http.max_connections, 8u);
  EXPECT_FALSE(parse_ok("").http.enabled()) << "off by default";
  EXPECT_EQ(parse_ok("").http.chat_template, "auto") << "the model's own template where it has one";
  EXPECT_EQ(parse_ok("[http]\nchat_template = \"\"\n").http.chat_template, "") << "no chat completions";
  EXPECT_FALSE(parse_ok("").http.adapter_updates) << "no adapter loads over HTTP by default";
  EXPECT_TRUE(parse_ok("[http]\nadapter_updates = true\n").http.adapter_updates);
  EXPECT_NE(parse_error_message("[http]\nadapter_updates = 1\n").find("http.adapter_updates"), std::string::npos);
  EXPECT_EQ(parse_ok("").http.response_store_mb, 64u) << "responses kept, as OpenAI keeps them by default";
  EXPECT_EQ(parse_ok("[http]\nresponse_store_mb = 0\n").http.response_store_mb, 0u);
  EXPECT_EQ(parse_ok("").http.conversation_store_mb, 64u);
  EXPECT_EQ(parse_ok("").http.store_dir, "") << "kept in memory only by default";
  EXPECT_EQ(parse_ok("[http]\nstore_dir = \"/var/lib/troupe\"\n").http.store_dir, "/var/lib/troupe");
  EXPECT_EQ(parse_ok("[http]\nconversation_store_mb = 0\n").http.conversation_store_mb, 0u);
  EXPECT_NE(parse_error_message("[http]\nconversation_store_mb = -1\n").find("http.conversation_store_mb"),
            std::string::npos);
  EXPECT_NE(parse_error_message("[http]\nresponse_store_mb = -1\n").find("http.response_store_mb"), std::string::npos);
  EXPECT_EQ(parse_ok("").http.file_store_mb, 256u) << "the Files and Batch APIs served by default";
  EXPECT_EQ(parse_ok("[http]\nfile_store_mb = 0\n").http.file_store_mb, 0u);
  EXPECT_EQ(parse_ok("").http.batch_concurrency, 32u);
  EXPECT_EQ(parse_ok("[http]\nbatch_concurrency = 4\n").http.batch_concurrency, 4u);
  EXPECT_NE(parse_error_message("[http]\nbatch_concurrency = 0\n").find("http.batch_concurrency"), std::string::npos)
    << "a batch that could run no line would never end";
  EXPECT_FALSE(parse_ok("").http.store_sync) << "written without waiting for the disk by default";
  EXPECT_TRUE(parse_ok("[http]\nstore_sync = true\n").http.store_sync);
  EXPECT_EQ(parse_ok("").http.batch_priority, -1) << "below interactive requests' default";
  EXPECT_EQ(parse_ok("[http]\nbatch_priority = -20\n").http.batch_priority, -20);
  EXPECT_NE(parse_error_message("[http]\nbatch_priority = 3000000000\n").find("http.batch_priority"), std::string::npos);
  EXPECT_NE(parse_error_message("[http]\nbatch_priority = \"low\"\n").find("expected an integer"), std::string::npos);
}

TEST(config, api_keys_are_read_and_a_bad_one_is_refused_without_being_shown) {
  EXPECT_EQ(parse_ok("[http]\napi_keys = [\"k1\", \"k2\"]\n").http.api_keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_TRUE(parse_ok("").http.api_keys.empty()) << "no keys by default";
  for (const char* bad : {"[http]\napi_keys = [\"k1\", \"secret one\"]\n", "[http]\napi_keys = [\"\"]\n"}) {
    const auto message = parse_error_message(bad);
    EXPECT_NE(message.find("http.api_keys["), std::string::npos) << message;
    EXPECT_NE(message.find("must not be empty or hold spaces"), std::string::npos) << message;
    EXPECT_EQ(message.find("secret"), std::string::npos) << "the key is shown: " << message;
  }
}

TEST(config, chat_template_keys_are_read) {
  EXPECT_EQ(parse_ok("[http]\nchat_template = \"llama2\"\n").http.chat_template, "llama2");
  const auto j = parse_ok("[http]\nchat_template = \"jinja\"\nchat_jinja = \"t.jinja\"\nchat_stop = [\"<|end|>\"]\n"
                          "chat_tool_call = \"<call>{call}</call>\"\n");
  EXPECT_EQ(j.http.chat_jinja, "t.jinja");
  EXPECT_EQ(j.http.chat_stop, std::vector<std::string>{"<|end|>"});
  EXPECT_EQ(j.http.reasoning_parser, "") << "off by default";
  EXPECT_FALSE(j.http.request_chat_template) << "off by default";
  EXPECT_EQ(j.http.generation_config, "auto") << "the model's sampling defaults, as vLLM's";
  EXPECT_EQ(parse_ok("[http]\ngeneration_config = \"\"\n").http.generation_config, "");
  EXPECT_TRUE(parse_ok("[http]\nchat_template = \"chatml\"\nrequest_chat_template = true\n").http.request_chat_template);
  const auto llama31 = parse_ok("[http]\nchat_template = \"model\"\nchat_tool_call = \"{call}\"\n"
                                "chat_tool_arguments = \"parameters\"\n[model]\npath = \"models/x\"\n");
  EXPECT_EQ(llama31.http.chat_tool_call, "{call}");
  EXPECT_EQ(llama31.http.chat_tool_arguments, "parameters");
  EXPECT_EQ(parse_ok("[http]\nchat_template = \"chatml\"\nreasoning_parser = \"qwen3\"\n").http.reasoning_parser, "qwen3");
  EXPECT_EQ(parse_ok("[http]\nchat_template = \"model\"\n[model]\npath = \"models/x\"\n").http.chat_template, "model");
  const auto o = parse_ok(R"(
[http]
chat_template = "custom"
chat_system = "S: {content}\n"
chat_user = "U: {content}\n"
chat_assistant = "A: {content}\n"
chat_generation = "A:"
chat_stop = ["\nU:"]
chat_tools = "\nTools:\n{tools}"
chat_tool_call = "CALL {call}"
chat_tool_result = "RESULT {content}"
)");
  EXPECT_EQ(o.http.chat_template, "custom");
  EXPECT_EQ(o.http.chat_tools, "\nTools:\n{tools}");
  EXPECT_EQ(o.http.chat_tool_call, "CALL {call}");
  EXPECT_EQ(o.http.chat_tool_result, "RESULT {content}");
  EXPECT_EQ(o.http.chat_system, "S: {content}\n");
  EXPECT_EQ(o.http.chat_user, "U: {content}\n");
  EXPECT_EQ(o.http.chat_assistant, "A: {content}\n");
  EXPECT_EQ(o.http.chat_generation, "A:");
  EXPECT_EQ(o.http.chat_stop, std::vector<std::string>{"\nU:"});
}

TEST(config, cluster_keys_are_read) {
  const auto o = parse_ok(R"(
[cluster]
nodes = ["127.0.0.1:4001", "127.0.0.1:4002"]
node = 1
router = 1
connect_timeout_s = 12.5
node_timeout_s = 4
imbalance = 0
adapter_affinity = true
prefix_affinity_tokens = 256
advise_place_lead_s = 2.5
)");
  EXPECT_EQ(o.cluster.nodes.size(), 2u);
  EXPECT_EQ(o.cluster.node, 1u);
  EXPECT_EQ(o.cluster.router, 1u);
  EXPECT_DOUBLE_EQ(o.cluster.connect_timeout_s, 12.5);
  EXPECT_DOUBLE_EQ(o.cluster.node_timeout_s, 4.0);
  EXPECT_EQ(o.cluster.imbalance, 0u);
  EXPECT_TRUE(o.cluster.adapter_affinity);
  EXPECT_EQ(o.cluster.prefix_affinity_tokens, 256u);
  EXPECT_DOUBLE_EQ(o.cluster.advise_place_lead_s, 2.5);
  EXPECT_DOUBLE_EQ(parse_ok("[cluster]\nnodes = []\n").cluster.advise_place_lead_s, 1.0);
  EXPECT_DOUBLE_EQ(parse_ok("[cluster]\nnodes = []\n").cluster.node_timeout_s, 30.0);
  EXPECT_FALSE(parse_ok("[cluster]\nnodes = []\n").cluster.adapter_affinity);
}

TEST(config, a_shape_file_lifts_the_preset_check_only_for_the_default_preset) {
  config_catalog no_presets = catalog;
  no_presets.model_presets.clear();
  EXPECT_EQ(parse_ok("[model]\nshape_file = \"m.json\"\n", no_presets).model.shape_file, "m.json");
  EXPECT_NE(parse_error_message("", no_presets).find("model.preset"), std::string::npos);
  EXPECT_NE(parse_error_message("", no_presets).find("(the default value)"), std::string::npos);
  const auto explicit_preset = "[model]\nshape_file = \"m.json\"\npreset = \"gpt\"\n";
  EXPECT_NE(parse_error_message(explicit_preset, no_presets).find("model.preset"), std::string::npos);
}

// -- adapters ------------------------------------------------------------------

TEST(config, expand_adapters_lists_explicit_then_generated_with_cycling_ranks) {
  const auto o = parse_ok("[[adapters]]\nname = \"first\"\nrank = 4\n"
                          "[adapters_generate]\ncount = 5\nprefix = \"g-\"\nranks = [8, 16]\n");
  const auto all = expand_adapters(o);
  ASSERT_EQ(all.size(), 6u);
  const std::vector<std::pair<std::string, std::uint32_t>> expected{
    {"first", 4}, {"g-0", 8}, {"g-1", 16}, {"g-2", 8}, {"g-3", 16}, {"g-4", 8}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(all[i].name, expected[i].first) << i;
    EXPECT_EQ(all[i].rank, expected[i].second) << i;
  }
  EXPECT_EQ(generated_adapter_name("lora-", 42), "lora-42");
}

TEST(config, names_near_generated_ones_do_not_collide) {
  // Only exactly <prefix><i> with i < count collides.
  const auto o = parse_ok("[[adapters]]\nname = \"lora-8\"\n[[adapters]]\nname = \"lora-03\"\n"
                          "[[adapters]]\nname = \"lora-\"\n[[adapters]]\nname = \"lora-1x\"\n"
                          "[adapters_generate]\ncount = 8\n");
  EXPECT_EQ(o.adapters.size(), 4u);
  EXPECT_EQ(parse_ok("adapters = []\n").adapters.size(), 0u);
  EXPECT_EQ(parse_ok("[adapters_generate]\ncount = 0\nranks = []\n").adapter_generate.ranks.size(), 0u);
}

// -- errors --------------------------------------------------------------------

struct error_case {
  const char* name;
  const char* toml;
  const char* key_path; ///< must appear in the message
  const char* detail;   ///< must appear in the message too
};

const error_case error_cases[] = {
  // unknown sections and keys
  {"unknown_section", "[schedulr]\nmax_running = 1\n", "schedulr", "did you mean [scheduler]?"},
  {"unknown_far_section", "[gpus]\n", "gpus", "unknown section [gpus]"},
  {"unknown_top_level_key", "seed = 1\n", "seed", "unknown key"},
  {"unknown_key", "[scheduler]\nmax_runing = 4\n", "scheduler.max_runing", "did you mean scheduler.max_running?"},
  {"unknown_swapped_key", "[backend]\ntmie_scale = 4\n", "backend.tmie_scale", "did you mean backend.time_scale?"},
  {"unknown_far_key", "[scheduler]\nfoo_bar_baz = 1\n", "scheduler.foo_bar_baz", "unknown key"},
  {"unknown_adapter_key", "[[adapters]]\nname = \"a\"\nnmae = \"b\"\n", "adapters[0].nmae",
   "did you mean adapters[0].name?"},
  {"node_timeout_not_positive", "[cluster]\nnode_timeout_s = 0\n", "cluster.node_timeout_s", "must be positive"},
  {"http_listen_not_host_port", "[http]\nlisten = \"8000\"\n", "http.listen", "must be \"host:port\""},
  {"http_listen_bad_port", "[http]\nlisten = \"0.0.0.0:70000\"\n", "http.listen", "must be \"host:port\""},
  {"http_no_connections", "[http]\nmax_connections = 0\n", "http.max_connections", "must be at least 1, got 0"},
  {"chat_template_unknown", "[http]\nchat_template = \"chatlm\"\n", "http.chat_template",
   "unknown chat template \"chatlm\"; did you mean \"chatml\"?"},
  {"chat_custom_without_user", "[http]\nchat_template = \"custom\"\nchat_assistant = \"{content}\"\n",
   "http.chat_user", "must hold \"{content}\""},
  {"chat_custom_user_without_slot", "[http]\nchat_template = \"custom\"\nchat_user = \"U:\"\nchat_assistant = \"{content}\"\n",
   "http.chat_user", "must hold \"{content}\" (where a user message's text goes), got \"U:\""},
  {"chat_custom_empty_stop", "[http]\nchat_template = \"custom\"\nchat_user = \"{content}\"\nchat_assistant = \"{content}\"\nchat_stop = [\"\"]\n",
   "http.chat_stop", "must not hold an empty string"},
  {"chat_format_with_builtin", "[http]\nchat_template = \"chatml\"\nchat_user = \"{content}\"\n", "http.chat_user",
   "is for chat_template = \"custom\" (chat_template is \"chatml\")"},
  {"chat_format_without_template", "[http]\nchat_template = \"\"\nchat_stop = [\"x\"]\n", "http.chat_stop",
   "is for chat_template = \"custom\""},
  {"chat_format_with_auto", "[http]\nchat_user = \"{content}\"\n", "http.chat_user",
   "is for chat_template = \"custom\"; a Jinja template (chat_template = \"auto\") renders the messages"},
  {"chat_tool_format_with_builtin", "[http]\nchat_template = \"llama2\"\nchat_tools = \"{tools}\"\n", "http.chat_tools",
   "is for chat_template = \"custom\" (chat_template is \"llama2\")"},
  {"chat_tool_call_without_marker",
   "[http]\nchat_template = \"custom\"\nchat_system = \"{content}\"\nchat_user = \"{content}\"\nchat_assistant = \"{content}\"\n"
   "chat_tools = \"{tools}\"\nchat_tool_call = \"{call}\"\nchat_tool_result = \"{content}\"\n",
   "http.chat_tool_call", "must hold \"{call}\" (one call's JSON), \"{calls}\" (the calls as one JSON array) or "
   "\"{name}\" and \"{arguments}\" after text"},
  {"chat_tool_call_named_without_a_mark",
   "[http]\nchat_template = \"custom\"\nchat_system = \"{content}\"\nchat_user = \"{content}\"\nchat_assistant = \"{content}\"\n"
   "chat_tools = \"{tools}\"\nchat_tool_call = \"<f>{name}{arguments}\"\nchat_tool_result = \"{content}\"\n",
   "http.chat_tool_call", "must hold a mark of 1 to 64 bytes between \"{name}\" and \"{arguments}\""},
  {"chat_tool_formats_apart",
   "[http]\nchat_template = \"custom\"\nchat_system = \"{content}\"\nchat_user = \"{content}\"\nchat_assistant = \"{content}\"\n"
   "chat_tool_result = \"{content}\"\n",
   "http.chat_tools", "the tool formats go together"},
  {"chat_jinja_without_file", "[http]\nchat_template = \"jinja\"\n", "http.chat_jinja",
   "must name the file of the chat template"},
  {"chat_jinja_with_builtin", "[http]\nchat_template = \"chatml\"\nchat_jinja = \"t.jinja\"\n", "http.chat_jinja",
   "is for chat_template = \"jinja\" (chat_template is \"chatml\")"},
  {"chat_model_without_path", "[http]\nchat_template = \"model\"\n", "http.chat_template",
   "the chat template of the model directory (model.path), which is not set"},
  {"chat_format_with_model", "[http]\nchat_template = \"model\"\nchat_user = \"{content}\"\n[model]\npath = \"m\"\n",
   "http.chat_user", "a Jinja template (chat_template = \"model\") renders the messages and tools itself"},
  {"chat_tool_arguments_unknown",
   "[http]\nchat_template = \"model\"\nchat_tool_arguments = \"args\"\n[model]\npath = \"m\"\n",
   "http.chat_tool_arguments", "must be \"arguments\" or \"parameters\", got \"args\""},
  {"chat_tool_arguments_with_builtin", "[http]\nchat_template = \"chatml\"\nchat_tool_arguments = \"parameters\"\n",
   "http.chat_tool_arguments", "is for chat_template = \"custom\" (chat_template is \"chatml\")"},
  {"reasoning_parser_unknown", "[http]\nchat_template = \"chatml\"\nreasoning_parser = \"qwen\"\n",
   "http.reasoning_parser", "unknown reasoning parser \"qwen\"; did you mean \"qwen3\"?"},
  {"reasoning_parser_without_chats", "[http]\nchat_template = \"\"\nreasoning_parser = \"deepseek_r1\"\n", "http.reasoning_parser",
   "is for chat completions, which chat_template = \"\" does not serve"},
  {"request_chat_template_without_chats", "[http]\nchat_template = \"\"\nrequest_chat_template = true\n", "http.request_chat_template",
   "is for chat completions, which chat_template = \"\" does not serve"},
  {"generation_config_unknown", "[http]\ngeneration_config = \"vllm\"\n", "http.generation_config",
   "unknown generation config \"vllm\""},
  {"request_chat_template_not_a_bool", "[http]\nchat_template = \"chatml\"\nrequest_chat_template = \"yes\"\n",
   "http.request_chat_template", "true or false"},
  {"chat_jinja_tool_call_without_marker",
   "[http]\nchat_template = \"jinja\"\nchat_jinja = \"t.jinja\"\nchat_tool_call = \"{call}</call>\"\n",
   "http.chat_tool_call", "is \"{call}\" alone (calls found at the output's start) or holds text that opens a call"},
  {"advise_place_lead_negative", "[cluster]\nadvise_place_lead_s = -1\n", "cluster.advise_place_lead_s",
   "must not be negative"},
  // wrong types
  {"section_not_a_table", "server = 5\n", "server", "expected a table ([server]), got integer 5"},
  {"string_for_integer", "[scheduler]\nmax_running = \"many\"\n", "scheduler.max_running",
   "expected an integer, got string \"many\""},
  {"float_for_integer", "[scheduler]\nmax_running = 2.5\n", "scheduler.max_running",
   "expected an integer, got floating-point 2.5"},
  {"integer_for_string", "[backend]\nkind = 3\n", "backend.kind", "expected a string, got integer 3"},
  {"string_for_bool", "[metrics]\nenabled = \"yes\"\n", "metrics.enabled",
   "expected true or false, got string \"yes\""},
  {"string_for_float", "[backend]\ntime_scale = \"fast\"\n", "backend.time_scale", "expected a number, got string"},
  {"array_for_string", "[logging]\nfile = [1]\n", "logging.file", "expected a string, got an array"},
  {"adapters_as_table", "[adapters]\nname = \"a\"\n", "adapters", "expected an array of tables ([[adapters]])"},
  {"adapters_dot_generate", "[adapters.generate]\ncount = 3\n", "adapters", "go in [adapters_generate]"},
  {"adapters_dot_generate_after_entries", "[[adapters]]\nname = \"a\"\n[adapters.generate]\ncount = 3\n",
   "adapters[0].generate", "go in [adapters_generate]"},
  {"adapter_entry_not_table", "adapters = [1]\n", "adapters", "expected an array of tables"},
  {"ranks_not_array", "[adapters_generate]\nranks = 8\n", "adapters_generate.ranks",
   "expected an array of integers, got integer 8"},
  // out of range
  {"negative_u32", "[server]\nmax_pending = -1\n", "server.max_pending", "must be at least 1, got -1"},
  {"negative_u64", "[backend]\nseed = -5\n", "backend.seed", "must not be negative, got -5"},
  {"negative_threads", "[caf]\nscheduler_threads = -2\n", "caf.scheduler_threads", "must not be negative, got -2"},
  {"zero_max_running", "[scheduler]\nmax_running = 0\n", "scheduler.max_running", "must be at least 1, got 0"},
  {"zero_token_budget", "[scheduler]\ntoken_budget = 0\n", "scheduler.token_budget", "must be at least 1, got 0"},
  {"zero_max_waiting", "[scheduler]\nmax_waiting = 0\n", "scheduler.max_waiting", "must be at least 1, got 0"},
  {"unknown_kv_reservation", "[scheduler]\nkv_reservation = \"lazy\"\n", "scheduler.kv_reservation", "lazy"},
  {"growth_watermark_of_one", "[scheduler]\ngrowth_watermark = 1.0\n", "scheduler.growth_watermark", "must be in [0, 1)"},
  {"negative_fetch_lead", "[scheduler]\nadvise_fetch_lead_s = -1\n", "scheduler.advise_fetch_lead_s", "must be >= 0"},
  {"prefix_fraction_above_one", "[scheduler]\nprefix_cache_fraction = 1.5\n", "scheduler.prefix_cache_fraction", "must be in [0, 1]"},
  {"unknown_prefix_admission", "[scheduler]\nprefix_cache_admission = \"often\"\n", "scheduler.prefix_cache_admission",
   "often"},
  {"zero_frame_bytes", "[server]\nmax_frame_bytes = 0\n", "server.max_frame_bytes", "must be at least 1, got 0"},
  {"zero_inflight", "[copy_engine]\nmax_inflight = 0\n", "copy_engine.max_inflight", "must be at least 1, got 0"},
  {"u32_overflow", "[scheduler]\nmax_running = 5000000000\n", "scheduler.max_running",
   "does not fit in 32 bits (max 4294967295), got 5000000000"},
  {"negative_time_scale", "[backend]\ntime_scale = -0.5\n", "backend.time_scale", "must not be negative, got -0.5"},
  {"negative_drain", "[server]\ndrain_timeout_s = -1\n", "server.drain_timeout_s", "must not be negative, got -1"},
  {"negative_log_interval", "[metrics]\nlog_interval_s = -3.0\n", "metrics.log_interval_s", "must not be negative"},
  {"infinite_float", "[server]\ndrain_timeout_s = inf\n", "server.drain_timeout_s",
   "must be a finite number, got inf"},
  {"nan_float", "[backend]\ntime_scale = nan\n", "backend.time_scale", "must be a finite number, got nan"},
  {"fraction_zero", "[memory_pool]\ngpu_memory_fraction = 0\n", "memory_pool.gpu_memory_fraction",
   "must be in (0, 1], got 0"},
  {"fraction_above_one", "[memory_pool]\ngpu_memory_fraction = 1.5\n", "memory_pool.gpu_memory_fraction",
   "must be in (0, 1], got 1.5"},
  {"page_tokens_not_power_of_two", "[memory_pool]\npage_tokens = 24\n", "memory_pool.page_tokens",
   "must be a power of two, got 24"},
  {"page_tokens_too_big", "[memory_pool]\npage_tokens = 2048\n", "memory_pool.page_tokens",
   "must be at most 1024, got 2048"},
  {"page_tokens_zero", "[memory_pool]\npage_tokens = 0\n", "memory_pool.page_tokens", "must be at least 1, got 0"},
  {"adapter_rank_zero", "[[adapters]]\nname = \"a\"\nrank = 0\n", "adapters[0].rank", "must be at least 1, got 0"},
  {"adapter_rank_too_big", "[[adapters]]\nname = \"a\"\nrank = 2048\n", "adapters[0].rank",
   "must be at most 1024, got 2048"},
  {"generate_rank_zero", "[adapters_generate]\ncount = 2\nranks = [8, 0]\n", "adapters_generate.ranks[1]",
   "must be at least 1, got 0"},
  {"generate_rank_too_big", "[adapters_generate]\nranks = [4096]\n", "adapters_generate.ranks[0]",
   "must be at most 1024, got 4096"},
  {"generate_ranks_empty", "[adapters_generate]\ncount = 2\nranks = []\n", "adapters_generate.ranks",
   "must not be empty when count > 0, got []"},
  {"generate_count_too_big", "[adapters_generate]\ncount = 2000000\n", "adapters_generate.count",
   "must be at most 1048576, got 2000000"},
  // names outside the catalog
  {"unknown_backend", "[backend]\nkind = \"cuda\"\n", "backend.kind", "unknown backend \"cuda\" (valid: cpu, sim)"},
  {"unknown_dtype", "[backend]\ndtype = \"fp8\"\n", "backend.dtype",
   "unknown dtype \"fp8\" (valid: float16, bfloat16)"},
  {"step_graphs_too_many", "[backend]\nstep_graphs = 65\n", "backend.step_graphs", "must be at most 64"},
  {"cost_unknown_name", "[backend]\nkind = \"sim\"\ncost = { hbm_eficiency = 0.9 }\n", "backend.cost",
   "unknown cost constant \"hbm_eficiency\" (known: flops_efficiency, hbm_efficiency"},
  {"cost_out_of_bounds", "[backend]\nkind = \"sim\"\ncost = { flops_efficiency = 1.5 }\n", "backend.cost",
   "flops_efficiency must be in (0, 1], got 1.5"},
  {"cost_not_a_number", "[backend]\nkind = \"sim\"\ncost = { hbm_efficiency = \"high\" }\n",
   "backend.cost.hbm_efficiency", "expected a number"},
  {"cost_for_another_backend", "[backend]\nkind = \"cpu\"\ncost = { hbm_efficiency = 0.9 }\n", "backend.cost",
   "prices the sim backend's steps only; backend.kind is \"cpu\""},
  {"unknown_gpu", "[backend]\ngpu = \"V100\"\n", "backend.gpu",
   "unknown GPU preset \"V100\" (valid: A100-80GB, H100-80GB, H200)"},
  {"unknown_preset", "[model]\npreset = \"llama-3-8b\"\n", "model.preset", "valid: llama-2-7b, llama-2-13b"},
  {"unknown_scheduling_policy", "[scheduler]\npolicy = \"fcsf\"\n", "scheduler.policy", "did you mean \"fcfs\"?"},
  {"unknown_classifier_policy", "[classifier]\npolicy = \"kmeans\"\n", "classifier.policy",
   "unknown classifier policy \"kmeans\" (valid: single_queue)"},
  {"unknown_eviction_policy", "[adapter_cache]\npolicy = \"lfu\"\n", "adapter_cache.policy",
   "unknown eviction policy \"lfu\"; did you mean \"lru\"? (valid: lru)"},
  {"params_not_a_table", "[adapter_cache]\nparams = 3\n", "adapter_cache.params", "expected a table of numbers"},
  {"params_value_not_a_number", "[adapter_cache]\nparams = { size = \"big\" }\n", "adapter_cache.params.size",
   "expected a number, got string"},
  {"directories_not_array", "[adapter_cache]\ndirectories = \"x\"\n", "adapter_cache.directories",
   "expected an array of strings"},
  {"directories_item_not_string", "[adapter_cache]\ndirectories = [\"a\", 2]\n", "adapter_cache.directories[1]",
   "expected a string, got integer 2"},
  {"window_zero", "[adapter_cache]\nwindow_s = 0\n", "adapter_cache.window_s", "must be positive"},
  {"prefetch_free_one", "[adapter_cache]\nprefetch_free_fraction = 1\n", "adapter_cache.prefetch_free_fraction",
   "must be in [0, 1)"},
  {"unknown_predictor", "[adapter_cache]\npredictor = \"oracle\"\n", "adapter_cache.predictor",
   "unknown prefetch predictor \"oracle\""},
  {"negative_host_pages", "[memory_pool]\nhost_pages = -1\n", "memory_pool.host_pages", "must not be negative"},
  {"write_back_above_one", "[memory_pool]\ndisk_write_back = 1.5\n", "memory_pool.disk_write_back", "must be in [0, 1]"},
  {"disk_fetch_unknown", "[memory_pool]\ndisk_fetch = \"always\"\n", "memory_pool.disk_fetch", "valid: cost, read"},
  {"disk_rate_zero", "[memory_pool]\ndisk_bytes_per_s = 0\n", "memory_pool.disk_bytes_per_s", "must be positive"},
  {"unknown_log_level", "[logging]\nlevel = \"verbose\"\n", "logging.level",
   "valid: trace, debug, info, warn, error, critical, off"},
  {"quota_size_unknown", "[queue_tuner]\nquota_size = \"avg\"\n", "queue_tuner.quota_size",
   "unknown quota size \"avg\" (valid: max, mean)"},
  // endpoint
  {"endpoint_scheme", "[server]\nendpoint = \"http://127.0.0.1:80\"\n", "server.endpoint",
   "must be tcp://, ipc:// or inproc:// followed by an address, got \"http://127.0.0.1:80\""},
  {"endpoint_without_address", "[server]\nendpoint = \"tcp://\"\n", "server.endpoint", "got \"tcp://\""},
  // adapter names
  {"duplicate_adapter", "[[adapters]]\nname = \"a\"\n[[adapters]]\nname = \"b\"\n[[adapters]]\nname = \"a\"\n",
   "adapters[2].name", "duplicate adapter name, first used by adapters[0], got \"a\""},
  {"empty_adapter_name", "[[adapters]]\nname = \"\"\n", "adapters[0].name", "must not be empty"},
  {"adapter_name_with_space", "[[adapters]]\nname = \"my adapter\"\n", "adapters[0].name",
   "must not contain whitespace, got \"my adapter\""},
  {"adapter_name_with_tab", "[[adapters]]\nname = \"a\\tb\"\n", "adapters[0].name", "must not contain whitespace"},
  {"adapter_without_name", "[[adapters]]\nrank = 8\n", "adapters[0].name", "missing"},
  {"generate_prefix_with_space", "[adapters_generate]\nprefix = \"lora \"\n", "adapters_generate.prefix",
   "must not contain whitespace"},
  {"generated_name_collides", "[[adapters]]\nname = \"lora-3\"\n[adapters_generate]\ncount = 8\n",
   "adapters[0].name",
   "collides with a name made by adapters_generate (prefix \"lora-\", count 8, names lora-0 .. lora-7)"},
  // syntax errors name the file, line and column
  {"syntax_unclosed_header", "[server]\nmax_pending = 3\n[scheduler\n", "bad.toml:3:", "TOML syntax error"},
  {"syntax_missing_value", "[server]\nmax_pending =\n", "bad.toml:2:", "TOML syntax error"},
  {"syntax_int64_overflow", "[backend]\nseed = 99999999999999999999\n", "bad.toml:2:", "TOML syntax error"},
  {"syntax_duplicate_key", "[server]\nmax_pending = 3\nmax_pending = 4\n", "bad.toml:3:", "TOML syntax error"},
};

class config_errors : public testing::TestWithParam<error_case> {};

TEST_P(config_errors, name_the_file_and_the_key) {
  const auto& c = GetParam();
  const std::string message = parse_error_message(c.toml);
  ASSERT_FALSE(message.empty()) << "parsed without error:\n" << c.toml;
  EXPECT_EQ(message.rfind("bad.toml:", 0), 0u) << message;
  EXPECT_NE(message.find(c.key_path), std::string::npos) << message;
  EXPECT_NE(message.find(c.detail), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(table, config_errors, testing::ValuesIn(error_cases),
                         [](const testing::TestParamInfo<error_case>& info) {
                           return std::string(info.param.name);
                         });

TEST(config, errors_give_the_line_and_column_of_the_value) {
  EXPECT_EQ(parse_error_message("[scheduler]\nmax_running = 0\n"),
            "bad.toml:2:15: scheduler.max_running: must be at least 1, got 0");
  EXPECT_EQ(parse_error_message("\n[scheduler]\nmax_runing = 4\n"),
            "bad.toml:3:1: scheduler.max_runing: unknown key; did you mean scheduler.max_running?");
}

TEST(config, the_first_error_is_reported) {
  const auto message = parse_error_message("[server]\nmax_pending = 0\n[scheduler]\nmax_running = 0\n");
  EXPECT_NE(message.find("server.max_pending"), std::string::npos) << message;
  EXPECT_EQ(message.find("scheduler"), std::string::npos) << message;
}

// -- files ---------------------------------------------------------------------

TEST(config, an_unreadable_file_is_an_error_naming_the_path) {
  auto missing = load_config_file("config/no-such-file.toml", catalog);
  ASSERT_TRUE(std::holds_alternative<config_error>(missing));
  EXPECT_EQ(std::get<config_error>(missing).message.rfind("config/no-such-file.toml: ", 0), 0u);

  auto directory = load_config_file("config", catalog);
  ASSERT_TRUE(std::holds_alternative<config_error>(directory));
  EXPECT_EQ(std::get<config_error>(directory).message.rfind("config: ", 0), 0u);
}

TEST(config, errors_in_a_file_name_that_file) {
  const auto path = (std::filesystem::temp_directory_path() / "troupe_config_test_bad.toml").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "[backend]\ntime_scale = -1\n";
  }
  auto result = load_config_file(path, catalog);
  std::remove(path.c_str());
  ASSERT_TRUE(std::holds_alternative<config_error>(result));
  EXPECT_EQ(std::get<config_error>(result).message,
            path + ":2:14: backend.time_scale: must not be negative, got -1");
}

} // namespace
} // namespace troupe
