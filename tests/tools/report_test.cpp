// The benchmark report: per-request records summarised into percentiles,
// throughput and SLO attainment; the effective throughput over a rate sweep;
// the ShareGPT length loader and S-LoRA's synthetic generator.
#include "tools/workload/report.hpp"
#include "tools/workload/workload.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace troupe::workload {
namespace {

request_record rec(double arrival, double ttft, double tbt, double e2e, std::uint32_t tokens,
                   std::string outcome = "length") {
  request_record r;
  r.arrival_s = arrival;
  r.ttft_s = ttft;
  r.tbt_mean_s = tbt;
  r.e2e_s = e2e;
  r.completion_tokens = tokens;
  r.outcome = std::move(outcome);
  return r;
}

TEST(report, summary_percentiles_throughput_and_attainment) {
  const std::vector<request_record> records{
    rec(0, 0.1, 0.02, 1.0, 10), rec(1, 0.2, 0.03, 2.0, 20), rec(2, 0.5, 0.05, 3.0, 30),
    rec(3, 2.0, 0.04, 5.0, 40), rec(4, -1, -1, -1, 0, "overloaded")};
  const auto s = summarize_run(records, {0.6, 0.045}, 1.0, "fcfs");
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.finished, 4u);
  EXPECT_EQ(s.failed, 1u);
  // First arrival 0, last reply at 3 + 5 = 8: 4 requests and 100 tokens in 8 s.
  EXPECT_DOUBLE_EQ(s.duration_s, 8.0);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 0.5);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 12.5);
  EXPECT_DOUBLE_EQ(s.ttft.p50, 0.2) << "nearest rank";
  EXPECT_DOUBLE_EQ(s.ttft.p99, 2.0);
  EXPECT_DOUBLE_EQ(s.e2e.mean, 2.75);
  // Within TTFT 0.6 s and TBT 0.045 s: the first two only (the third's TBT
  // and the fourth's TTFT miss); the failed one counts against it.
  EXPECT_DOUBLE_EQ(s.attainment, 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(summarize_run(records, {}, 1.0, "x").attainment, 4.0 / 5.0) << "no SLO: finished ones";
}

TEST(report, requests_of_several_priorities_are_also_summarised_per_class_highest_first) {
  std::vector<request_record> records{rec(0, 0.1, 0.02, 1.0, 10), rec(1, 0.2, 0.03, 2.0, 20),
                                      rec(2, 3.0, 0.05, 6.0, 30), rec(3, 4.0, 0.04, 8.0, 40),
                                      rec(4, -1, -1, -1, 0, "overloaded")};
  EXPECT_TRUE(summarize_run(records, {}, 2.0, "one").classes.empty()) << "one priority: no split";
  records[2].priority = records[3].priority = records[4].priority = -1;
  const auto s = summarize_run(records, {1.0, 0}, 2.0, "priority");
  EXPECT_EQ(s.requests, 5u);
  EXPECT_DOUBLE_EQ(s.attainment, 2.0 / 5.0);
  ASSERT_EQ(s.classes.size(), 2u);
  const auto& hi = s.classes[0];
  const auto& lo = s.classes[1];
  EXPECT_EQ(hi.priority, 0);
  EXPECT_EQ(hi.label, "priority 0");
  EXPECT_EQ(hi.requests, 2u);
  EXPECT_EQ(hi.finished, 2u);
  EXPECT_DOUBLE_EQ(hi.offered_rate, 0.8) << "its share of the run's offered rate";
  EXPECT_DOUBLE_EQ(hi.ttft.p99, 0.2);
  EXPECT_DOUBLE_EQ(hi.attainment, 1.0);
  EXPECT_EQ(lo.priority, -1);
  EXPECT_EQ(lo.requests, 3u);
  EXPECT_EQ(lo.finished, 2u);
  EXPECT_EQ(lo.failed, 1u);
  EXPECT_DOUBLE_EQ(lo.ttft.p50, 3.0);
  EXPECT_DOUBLE_EQ(lo.attainment, 0.0);
  EXPECT_TRUE(hi.classes.empty());
  std::ostringstream json;
  write_json(json, {s});
  EXPECT_NE(json.str().find("\"classes\":[{\"priority\":0,\"requests\":2,\"finished\":2,"), std::string::npos)
    << json.str();
  EXPECT_NE(json.str().find("{\"priority\":-1,\"requests\":3,\"finished\":2,\"failed\":1,"), std::string::npos);
}

TEST(report, the_tbt_slo_on_each_requests_p99_catches_stalls_its_mean_hides) {
  // Two requests with the same mean time between tokens; the second stalled
  // once (its own P99 gap is 0.5 s).
  auto smooth = rec(0, 0.1, 0.05, 2.0, 40);
  smooth.tbt_p99_s = 0.06;
  auto stalled = rec(1, 0.1, 0.05, 2.0, 40);
  stalled.tbt_p99_s = 0.5;
  auto one_token = rec(2, 0.1, -1, 0.1, 1); // no gap at all: within any TBT SLO
  const std::vector<request_record> records{smooth, stalled, one_token};
  slo mean{1.0, 0.1};
  EXPECT_DOUBLE_EQ(summarize_run(records, mean, 1.0, "x").attainment, 1.0);
  slo p99 = mean;
  p99.tbt_p99 = true;
  EXPECT_DOUBLE_EQ(summarize_run(records, p99, 1.0, "x").attainment, 2.0 / 3.0);
  std::ostringstream csv;
  write_records_csv(csv, "x", 1.0, records, false);
  EXPECT_NE(csv.str().find(",0.5,0\n"), std::string::npos) << csv.str();
}

TEST(report, slowdown_is_e2e_over_the_latency_alone_where_that_is_known) {
  std::vector<request_record> records{rec(0, 0.1, 0.02, 1.0, 10), rec(1, 0.2, 0.03, 6.0, 20),
                                      rec(2, 0.5, 0.05, 3.0, 30), rec(3, -1, -1, -1, 0, "overloaded")};
  // A live run knows no latency alone: no slowdown, and the CSV says -1.
  auto live = summarize_run(records, {}, 1.0, "live");
  EXPECT_EQ(live.slowdown.count, 0u);
  std::ostringstream live_csv, live_json;
  write_summary_csv(live_csv, {live});
  EXPECT_NE(live_csv.str().find(",slowdown_p50,slowdown_p99\n"), std::string::npos) << live_csv.str();
  EXPECT_NE(live_csv.str().find(",-1,-1\n"), std::string::npos) << live_csv.str();
  write_json(live_json, {live});
  EXPECT_EQ(live_json.str().find("slowdown"), std::string::npos);
  // Priced ones: 1.0 / 0.5 = 2, 6.0 / 2.0 = 3; the third is not priced, the
  // failed one does not count.
  records[0].isolated_s = 0.5;
  records[1].isolated_s = 2.0;
  records[3].isolated_s = 1.0;
  const auto sim = summarize_run(records, {}, 1.0, "sim");
  EXPECT_EQ(sim.slowdown.count, 2u);
  EXPECT_DOUBLE_EQ(sim.slowdown.mean, 2.5);
  EXPECT_DOUBLE_EQ(sim.slowdown.p50, 2.0) << "nearest rank";
  EXPECT_DOUBLE_EQ(sim.slowdown.p99, 3.0);
  std::ostringstream sim_csv, sim_json, recs_csv;
  write_summary_csv(sim_csv, {sim});
  EXPECT_NE(sim_csv.str().find(",2,3\n"), std::string::npos) << sim_csv.str();
  write_json(sim_json, {sim});
  EXPECT_NE(sim_json.str().find("\"slowdown\":{\"mean\":2.5,\"p50\":2,\"p90\":3,\"p99\":3,\"count\":2}"),
            std::string::npos) << sim_json.str();
  write_records_csv(recs_csv, "sim", 1.0, records, true);
  EXPECT_NE(recs_csv.str().find(",tokens_fnv,isolated_s,tbt_p99_s,priority\n"), std::string::npos) << recs_csv.str();
  EXPECT_NE(recs_csv.str().find(",0.5,-1,0\n"), std::string::npos) << recs_csv.str();
}

TEST(report, effective_throughput_is_the_highest_rate_meeting_the_attainment) {
  std::vector<run_summary> runs(4);
  const double rates[] = {1, 2, 3, 4}, attain[] = {1.0, 0.95, 0.85, 0.91};
  for (int i = 0; i < 4; ++i) {
    runs[i].offered_rate = rates[i];
    runs[i].attainment = attain[i];
  }
  EXPECT_DOUBLE_EQ(effective_throughput(runs, 0.9), 4.0) << "the highest, even past a dip";
  EXPECT_DOUBLE_EQ(effective_throughput(runs, 0.96), 1.0);
  EXPECT_DOUBLE_EQ(effective_throughput(runs, 1.01), 0.0);
  std::ostringstream json;
  runs[0].label = runs[1].label = runs[2].label = runs[3].label = "a\"b";
  write_json(json, runs);
  EXPECT_NE(json.str().find("\"effective_throughput\":{\"a\\\"b\":4}"), std::string::npos) << json.str();
}

std::string temp_file(const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("troupe-report-" + std::to_string(::getpid()) + ".csv");
  std::ofstream{p} << text;
  return p.string();
}

TEST(workload, sharegpt_lengths_load_and_bad_rows_are_named) {
  const auto path = temp_file("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                              "74,918,992,0.08\n290,905,1195,0.32\n");
  auto got = load_trace(path);
  ASSERT_TRUE(std::holds_alternative<std::vector<request>>(got)) << std::get<std::string>(got);
  const auto& r = std::get<std::vector<request>>(got);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].prompt_tokens, 290u);
  EXPECT_EQ(r[1].output_tokens, 905u);
  const auto bad = temp_file("num_prefill_tokens,num_decode_tokens\n74,918\n12,zero\n");
  auto err = load_sharegpt_lengths(bad);
  ASSERT_TRUE(std::holds_alternative<std::string>(err));
  EXPECT_NE(std::get<std::string>(err).find(":3: num_decode_tokens \"zero\""), std::string::npos)
    << std::get<std::string>(err);
  std::filesystem::remove(path);
}

TEST(workload, synthetic_lengths_are_uniform_in_their_ranges_and_reproducible) {
  const auto a = synthetic(2000, 4, 1, 8, 512, 8, 64, 7);
  const auto b = synthetic(2000, 4, 1, 8, 512, 8, 64, 7);
  ASSERT_EQ(a.size(), 2000u);
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    EXPECT_GE(a[i].prompt_tokens, 8u);
    EXPECT_LE(a[i].prompt_tokens, 512u);
    EXPECT_GE(a[i].output_tokens, 8u);
    EXPECT_LE(a[i].output_tokens, 64u);
    sum += a[i].prompt_tokens;
  }
  EXPECT_NEAR(sum / 2000, 260, 15) << "uniform on [8, 512]: mean 260";
}

} // namespace
} // namespace troupe::workload
