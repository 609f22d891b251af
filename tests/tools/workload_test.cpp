// Tests for tools/workload: the Azure trace reader (good rows, CRLF, every
// malformed case named by file and line), Gamma arrivals (mean and CV),
// shaping (window, rate, context clamp), and the adapter popularity
// samplers against their formulas.
#include "tools/workload/workload.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <unistd.h>

namespace troupe::workload {
namespace {

namespace fs = std::filesystem;

class trace_file : public ::testing::Test {
protected:
  std::string write(const std::string& text) {
    path_ = (fs::temp_directory_path() / ("troupe-trace-" + std::to_string(::getpid()) + ".csv")).string();
    std::ofstream{path_, std::ios::binary} << text;
    return path_;
  }
  void TearDown() override { fs::remove(path_); }
  std::string path_;
};

const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

TEST_F(trace_file, reads_rows_relative_to_the_first) {
  auto got = load_azure_trace(write(header + "2023-11-16 18:15:46.6805900,374,44\r\n"
                                             "2023-11-16 18:15:50.9951690,396,109\n"
                                             "2023-11-16 18:16:00,5,1\n"));
  ASSERT_TRUE(std::holds_alternative<std::vector<request>>(got)) << std::get<std::string>(got);
  const auto& r = std::get<std::vector<request>>(got);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0].arrival_s, 0);
  EXPECT_NEAR(r[1].arrival_s, 4.314579, 1e-6);
  EXPECT_NEAR(r[2].arrival_s, 13.31941, 1e-6);
  EXPECT_EQ(r[1].prompt_tokens, 396u);
  EXPECT_EQ(r[1].output_tokens, 109u);
  EXPECT_EQ(r[0].adapter, none_adapter);
}

TEST_F(trace_file, malformed_files_name_the_line_and_field) {
  struct row {
    std::string text, mentions;
  };
  const std::vector<row> table{
    {"", "empty file"},
    {"time,in,out\n", ":1: expected the header"},
    {header + "2023-11-16 18:15:46,1\n", ":2: expected 3 comma-separated fields"},
    {header + "2023-11-16 18:15:46,1,2,3\n", ":2: expected 3"},
    {header + "yesterday,1,2\n", ":2: TIMESTAMP \"yesterday\""},
    {header + "2023-13-16 18:15:46,1,2\n", "TIMESTAMP"},
    {header + "2023-11-16 18:15:46.,1,2\n", "TIMESTAMP"},
    {header + "2023-11-16 18:15:46,x,2\n", ":2: ContextTokens \"x\""},
    {header + "2023-11-16 18:15:46,0,2\n", "ContextTokens \"0\""},
    {header + "2023-11-16 18:15:46,5,-2\n", "GeneratedTokens \"-2\""},
    {header + "2023-11-16 18:15:46,5,2\n2023-11-16 18:15:45,5,2\n", ":3: TIMESTAMP goes back"},
    {header, "no requests"},
  };
  for (const auto& r : table) {
    auto got = load_azure_trace(write(r.text));
    ASSERT_TRUE(std::holds_alternative<std::string>(got)) << r.text;
    EXPECT_NE(std::get<std::string>(got).find(r.mentions), std::string::npos) << std::get<std::string>(got);
    EXPECT_NE(std::get<std::string>(got).find(path_), std::string::npos);
  }
  auto missing = load_azure_trace("/nonexistent/trace.csv");
  EXPECT_NE(std::get<std::string>(missing).find("cannot open"), std::string::npos);
}

TEST(workload, reads_the_head_of_the_real_conversation_trace) {
  // The first 200 rows of AzureLLMInferenceTrace_conv.csv, kept in the repo.
  auto got = load_azure_trace("tests/tools/data/azure_conv_head200.csv");
  ASSERT_TRUE(std::holds_alternative<std::vector<request>>(got)) << std::get<std::string>(got);
  const auto& r = std::get<std::vector<request>>(got);
  ASSERT_EQ(r.size(), 200u);
  // 2023-11-16 18:15:46.6805900,374,44 then 18:15:50.9951690,396,109.
  EXPECT_EQ(r[0].prompt_tokens, 374u);
  EXPECT_EQ(r[0].output_tokens, 44u);
  EXPECT_NEAR(r[1].arrival_s, 4.314579, 1e-6);
  EXPECT_EQ(r[1].output_tokens, 109u);
  for (std::size_t i = 1; i < r.size(); ++i)
    EXPECT_GE(r[i].arrival_s, r[i - 1].arrival_s);
}

TEST(workload, conversations_become_turns_with_rounds_and_lengths_capped) {
  // The first 60 rows of the ShareGPT conversations trace, kept in the repo.
  auto got = load_conversations("tests/tools/data/sharegpt_conversations_head60.csv");
  ASSERT_TRUE(std::holds_alternative<std::vector<conversation>>(got)) << std::get<std::string>(got);
  auto convs = std::get<std::vector<conversation>>(got);
  // Og9h3C1: 19 rounds, 2,250 prompt and 6,167 reply tokens (estimates).
  ASSERT_EQ(convs[0].rounds, 19u);
  auto all = multi_turn(convs, 1.0, 10.0, 5);
  cap_rounds(convs, 6);
  EXPECT_EQ(convs[0].rounds, 6u);
  EXPECT_EQ(convs[0].prompt_tokens, 2250u * 6 / 19) << "each turn as long as before";
  EXPECT_EQ(convs[0].response_tokens, 6167u * 6 / 19);
  auto capped = multi_turn(convs, 1.0, 10.0, 5);
  cap_lengths(capped, 100, 200);
  EXPECT_LT(capped.size(), all.size());
  std::size_t first = 0;
  for (const auto& r : capped) {
    EXPECT_LE(r.prompt_tokens, 100u);
    EXPECT_LE(r.output_tokens, 200u);
    first += r.session == 1 ? 1 : 0;
  }
  EXPECT_EQ(first, 6u) << "the first conversation's turns";
  EXPECT_EQ(capped.front().output_tokens, 200u) << "6,167 / 19 = 324 reply tokens a turn, capped";
}

TEST(workload, gamma_arrivals_have_the_asked_rate_and_cv) {
  for (double cv : {0.5, 1.0, 4.0}) {
    const auto t = gamma_arrivals(100000, 8.0, cv, 11);
    std::vector<double> gaps;
    double prev = 0;
    for (double x : t) {
      gaps.push_back(x - prev);
      prev = x;
    }
    const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
    double var = 0;
    for (double g : gaps)
      var += (g - mean) * (g - mean);
    var /= gaps.size();
    EXPECT_NEAR(mean, 1.0 / 8, 0.03 / 8) << "cv " << cv;
    EXPECT_NEAR(std::sqrt(var) / mean, cv, 0.05 * cv + 0.02) << "cv " << cv;
    EXPECT_EQ(gamma_arrivals(10, 8.0, cv, 11), gamma_arrivals(10, 8.0, cv, 11)) << "deterministic";
  }
}

TEST(workload, shaping) {
  std::vector<request> r{{0, 10, 5, 0}, {1, 10, 5, 0}, {2, 3000, 3000, 0}, {3, 10, 9000, 0}};
  auto w = window(r, 1, 2);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ(w[1].arrival_s, 1);
  auto q = r;
  set_rate(q, 2.0); // 4 requests over 3 s: 1 req/s -> 2 req/s
  EXPECT_DOUBLE_EQ(q.back().arrival_s, 1.5);
  scale_time(q, 2);
  EXPECT_DOUBLE_EQ(q.back().arrival_s, 3);
  EXPECT_EQ(clamp_context(r, 4096), 2u);
  EXPECT_EQ(r[2].prompt_tokens + r[2].output_tokens, 4096u);
  EXPECT_EQ(r[2].output_tokens, 3000u);
  EXPECT_EQ(r[3].output_tokens, 4095u);
  EXPECT_EQ(r[3].prompt_tokens, 1u);
  EXPECT_EQ(r[0].prompt_tokens, 10u);
}

/// Shares of each adapter over many draws.
std::vector<double> shares(const adapter_set& set, std::size_t draws, double base = 0) {
  std::vector<request> r(draws);
  assign_adapters(r, set, base, 5);
  std::vector<double> n(set.ranks.size(), 0);
  for (const auto& x : r)
    if (x.adapter != none_adapter)
      n[x.adapter] += 1.0 / static_cast<double>(draws);
  return n;
}

TEST(workload, a_conversations_turns_keep_the_adapter_of_its_first) {
  const auto set = std::get<adapter_set>(make_adapter_set(50, {8, 16}, "uniform"));
  std::vector<request> r(300);
  for (std::size_t i = 0; i < r.size(); ++i)
    r[i].session = i % 3 == 0 ? 0 : 1 + i % 7; // seven sessions, interleaved, and single requests
  assign_adapters(r, set, 0.2, 11);
  std::map<std::uint64_t, std::uint32_t> first;
  std::set<std::uint32_t> singles;
  for (const auto& x : r) {
    if (x.session == 0) {
      singles.insert(x.adapter);
      continue;
    }
    const auto at = first.emplace(x.session, x.adapter).first;
    EXPECT_EQ(x.adapter, at->second) << "session " << x.session;
  }
  EXPECT_EQ(first.size(), 7u);
  EXPECT_GT(singles.size(), 20u) << "requests outside sessions still draw their own";
}

TEST(workload, popularity_samplers_follow_their_formulas) {
  const std::vector<std::uint32_t> ranks{8, 16, 32, 64, 128};
  auto uniform = std::get<adapter_set>(make_adapter_set(10, ranks, "uniform"));
  EXPECT_EQ(uniform.ranks, (std::vector<std::uint32_t>{8, 8, 16, 16, 32, 32, 64, 64, 128, 128}));
  for (double s : shares(uniform, 200000))
    EXPECT_NEAR(s, 0.1, 0.005);
  auto power = std::get<adapter_set>(make_adapter_set(10, ranks, "power:0.3"));
  auto p = shares(power, 200000);
  for (int i = 0; i < 10; ++i)
    EXPECT_NEAR(p[i], std::pow((i + 1) / 10.0, 0.3) - std::pow(i / 10.0, 0.3), 0.005) << i;
  auto zipf = std::get<adapter_set>(make_adapter_set(10, ranks, "zipf:1"));
  auto z = shares(zipf, 200000);
  double h = 0;
  for (int i = 1; i <= 10; ++i)
    h += 1.0 / i;
  for (int i = 0; i < 10; ++i)
    EXPECT_NEAR(z[i], 1.0 / (i + 1) / h, 0.005) << i;
  auto cham = std::get<adapter_set>(make_adapter_set(10, ranks, "chameleon:1"));
  auto c = shares(cham, 200000);
  double hc = 0;
  for (int k = 1; k <= 5; ++k)
    hc += 1.0 / k;
  for (int i = 0; i < 10; ++i)
    EXPECT_NEAR(c[i], 1.0 / (i / 2 + 1) / hc / 2, 0.005) << i << ": class share split over its 2 adapters";
  // Ranks dealt in turn: the same class shares, now over adapters i % 5.
  auto cycled = std::get<adapter_set>(make_adapter_set(10, ranks, "chameleon:1", true));
  EXPECT_EQ(cycled.ranks, (std::vector<std::uint32_t>{8, 16, 32, 64, 128, 8, 16, 32, 64, 128}));
  auto cc = shares(cycled, 200000);
  for (int i = 0; i < 10; ++i)
    EXPECT_NEAR(cc[i], 1.0 / (i % 5 + 1) / hc / 2, 0.005) << i;
  auto half = shares(uniform, 100000, 0.5);
  EXPECT_NEAR(std::accumulate(half.begin(), half.end(), 0.0), 0.5, 0.01);
  for (const char* bad : {"gauss", "zipf:x", "power:-1", "power:0", "zipf:"})
    EXPECT_TRUE(std::holds_alternative<std::string>(make_adapter_set(10, ranks, bad))) << bad;
  EXPECT_TRUE(std::holds_alternative<std::string>(make_adapter_set(0, ranks, "uniform")));
}

TEST(workload, a_priority_mix_is_read_normalised_and_bad_entries_named) {
  const auto mix = std::get<std::vector<priority_share>>(parse_priority_mix("0:7,-1:3"));
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].priority, 0);
  EXPECT_DOUBLE_EQ(mix[0].share, 0.7);
  EXPECT_EQ(mix[1].priority, -1);
  EXPECT_DOUBLE_EQ(mix[1].share, 0.3);
  EXPECT_EQ(std::get<std::vector<priority_share>>(parse_priority_mix("5:1")).front().share, 1.0);
  const std::pair<const char*, const char*> bad[] = {
    {"", "expected PRIORITY:SHARE"},          {"0", "expected PRIORITY:SHARE"},
    {"0:0.5,", "expected PRIORITY:SHARE"},    {"x:1", "\"x\" is not a 32-bit integer"},
    {"3000000000:1", "is not a 32-bit integer"}, {"1:0", "\"0\" is not a share > 0"},
    {"1:-2", "is not a share > 0"},           {"1:abc", "is not a share > 0"},
    {"1:0.5,1:0.5", "priority 1 is given twice"}};
  for (const auto& [text, why] : bad) {
    const auto got = parse_priority_mix(text);
    ASSERT_TRUE(std::holds_alternative<std::string>(got)) << text;
    EXPECT_NE(std::get<std::string>(got).find(why), std::string::npos) << text << ": " << std::get<std::string>(got);
  }
}

TEST(workload, priorities_are_drawn_by_share_sessions_keep_their_first_and_adapters_stay) {
  const auto set = std::get<adapter_set>(make_adapter_set(50, {8, 16}, "zipf:1"));
  std::vector<request> r(30000);
  for (std::size_t i = 0; i < r.size(); ++i)
    r[i].session = i % 3 == 0 ? 1 + i % 11 : 0; // eleven sessions among single requests
  assign_adapters(r, set, 0.1, 4);
  auto before = r;
  assign_priorities(r, {}, 4);
  for (std::size_t i = 0; i < r.size(); ++i)
    ASSERT_EQ(r[i].priority, 0) << "an empty mix leaves every priority 0";
  assign_priorities(r, std::get<std::vector<priority_share>>(parse_priority_mix("2:0.6,0:0.3,-5:0.1")), 4);
  std::map<std::int32_t, double> share;
  std::map<std::uint64_t, std::int32_t> first;
  double singles = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    ASSERT_EQ(r[i].adapter, before[i].adapter) << "a priority draw moves no adapter draw";
    if (r[i].session != 0) {
      EXPECT_EQ(first.emplace(r[i].session, r[i].priority).first->second, r[i].priority) << i;
      continue;
    }
    share[r[i].priority] += 1;
    singles += 1;
  }
  ASSERT_EQ(share.size(), 3u);
  EXPECT_NEAR(share[2] / singles, 0.6, 0.015);
  EXPECT_NEAR(share[0] / singles, 0.3, 0.015);
  EXPECT_NEAR(share[-5] / singles, 0.1, 0.01);
  // Reproducible from the seed.
  auto again = before;
  assign_priorities(again, std::get<std::vector<priority_share>>(parse_priority_mix("2:0.6,0:0.3,-5:0.1")), 4);
  for (std::size_t i = 0; i < r.size(); ++i)
    ASSERT_EQ(again[i].priority, r[i].priority) << i;
}

TEST(workload, summary_and_percentiles) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 50), 3);
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 99), 5);
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 0), 1);
  std::vector<request> r{{0, 10, 1, 3}, {2, 30, 3, none_adapter}, {4, 20, 2, 3}};
  const auto s = summarize(r);
  EXPECT_EQ(s.requests, 3u);
  EXPECT_DOUBLE_EQ(s.duration_s, 4);
  EXPECT_DOUBLE_EQ(s.mean_rate, 0.5);
  EXPECT_DOUBLE_EQ(s.prompt_mean, 20);
  EXPECT_EQ(s.distinct_adapters, 1u);
}

TEST(workload, prompts_share_exactly_their_groups_system_prompt) {
  // Without a shared prefix, the ids the benchmark always sent.
  const auto alone = prompt_of(3, 5);
  EXPECT_EQ(alone, (std::vector<std::int32_t>{10 + 93, 10 + 100, 10 + 107, 10 + 114, 10 + 121}));
  // Requests 0 and 2 (group 0 of 2) share their first 8 tokens and part
  // right after; request 1 (group 1) parts at once.
  const auto a = prompt_of(0, 20, 8, 2);
  const auto b = prompt_of(2, 20, 8, 2);
  const auto c = prompt_of(1, 20, 8, 2);
  ASSERT_EQ(a.size(), 20u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 8, b.begin()));
  EXPECT_NE(a[8], b[8]);
  EXPECT_NE(a[0], c[0]);
  // A prompt shorter than the system prompt is its start.
  EXPECT_EQ(prompt_of(4, 5, 8, 2), std::vector<std::int32_t>(a.begin(), a.begin() + 5));
  for (const auto t : a) {
    EXPECT_GE(t, 10);
    EXPECT_LT(t, 410);
  }
}

} // namespace
} // namespace troupe::workload
