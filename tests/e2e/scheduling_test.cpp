// End to end with the sim backend: each scheduling policy serves a mixed
// workload with every request getting exactly one terminal reply; chameleon
// runs with its classifier and the queue_tuner policy actor, which re-tunes
// and pushes cut-offs and quotas while requests flow; slora's early abort
// answers `overloaded`; bad scheduler params stop the start naming the key.
#include "policies/registry.hpp"
#include "tests/support/deployment_fixture.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <unistd.h>

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

std::string write_config(const std::string& name, const std::string& body) {
  const auto path = fs::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()) + ".toml");
  std::ofstream{path} << "[server]\nendpoint = \"tcp://127.0.0.1:*\"\ndrain_timeout_s = 5.0\n"
                      << "[logging]\nlevel = \"error\"\n[caf]\nscheduler_threads = 2\n"
                      << "[backend]\nkind = \"sim\"\ntime_scale = 0.0\n[metrics]\nlog_interval_s = 0.0\n"
                      << "[adapters_generate]\ncount = 8\nranks = [8, 16, 32, 64, 128]\n" << body;
  return path.string();
}

/// Sends `n` requests of mixed sizes and adapters; returns the reply logs.
std::map<std::string, reply_log> run_mix(client_connection& c, int n, unsigned seed) {
  std::mt19937 rng{seed};
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    wire::generate_request g;
    g.id = "r" + std::to_string(i);
    g.prompt = std::string(1 + rng() % 300, 'a' + static_cast<char>(rng() % 26));
    g.max_tokens = 1 + rng() % (i % 5 == 0 ? 200 : 20);
    if (rng() % 4 != 0)
      g.adapter = "lora-" + std::to_string(rng() % 8);
    g.stream = rng() % 2 == 0;
    EXPECT_TRUE(c.send(g));
    ids.push_back(g.id);
  }
  std::map<std::string, reply_log> logs;
  EXPECT_TRUE(collect(c, ids, logs, std::chrono::seconds(30)));
  return logs;
}

TEST(scheduling_e2e, every_policy_completes_a_mixed_workload) {
  // Every registered policy, so a new one is served end to end too.
  for (const auto& policy : policies::scheduling_policy_names()) {
    SCOPED_TRACE(policy);
    const auto path = write_config(policy, std::string{"[scheduler]\npolicy = \""} + policy
                                             + "\"\nmax_running = 16\n[classifier]\npolicy = \"chameleon\"\n"
                                               "predictor = \"history\"\n");
    auto d = start_from_file(path);
    ASSERT_NE(d, nullptr);
    client_connection c{d->endpoint()};
    auto logs = run_mix(c, 200, 3);
    for (const auto& [id, log] : logs) {
      EXPECT_EQ(log.terminal, 1u) << id;
      EXPECT_NE(log.done(), nullptr) << id << ": " << (log.error() ? log.error()->message : "");
    }
    d->stop();
    fs::remove(path);
  }
}

TEST(scheduling_e2e, chameleon_with_the_queue_tuner_retunes_while_serving) {
  const auto path = write_config("tuner", "[scheduler]\npolicy = \"chameleon\"\nmax_running = 16\n"
                                          "[classifier]\npolicy = \"chameleon\"\n"
                                          "[queue_tuner]\nenabled = true\nperiod_s = 0.02\nwindow_s = 60\n");
  auto d = start_from_file(path);
  ASSERT_NE(d, nullptr);
  client_connection c{d->endpoint()};
  auto logs = run_mix(c, 150, 5);
  for (const auto& [id, log] : logs)
    EXPECT_NE(log.done(), nullptr) << id;
  double tunings = 0;
  for (int i = 0; i < 250 && tunings < 2; ++i) {
    tunings = stats_of(c, "s" + std::to_string(i))["queue_tuner_tunings"];
    if (tunings < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(tunings, 2.0);
  const auto stats = stats_of(c, "final");
  EXPECT_GE(stats.at("chameleon_queues"), 1.0);
  // Each queue's quota (tokens) is in the stats.
  double quotas = 0;
  for (std::size_t q = 0; q < static_cast<std::size_t>(stats.at("queue_tuner_queues")); ++q)
    quotas += stats.at("queue_tuner_quota_" + std::to_string(q));
  EXPECT_GT(quotas, 0.0);
  EXPECT_EQ(stats.at("requests_squashed"), stats.at("chameleon_squashed"));
  // Serving on after the re-tunings.
  auto more = run_mix(c, 50, 9);
  for (const auto& [id, log] : more)
    EXPECT_NE(log.done(), nullptr) << id;
  d->stop();
  fs::remove(path);
}

TEST(scheduling_e2e, bad_scheduler_params_stop_the_start) {
  const auto path = write_config("badparams", "[scheduler]\npolicy = \"slora\"\nparams = { clusters = 2 }\n");
  auto loaded = load_config_file(path, default_catalog());
  ASSERT_TRUE(std::holds_alternative<deployment_options>(loaded));
  auto started = deployment::start(std::get<deployment_options>(loaded));
  ASSERT_TRUE(std::holds_alternative<std::string>(started));
  EXPECT_NE(std::get<std::string>(started).find("scheduler.params"), std::string::npos);
  fs::remove(path);
}

} // namespace
} // namespace troupe::testing
