// How a deployment's nodes' stats add up (merge_node_stats).
#include "messages/stat.hpp"

#include <gtest/gtest.h>

namespace troupe {
namespace {

double value_of(const stat_values& v, const std::string& name) {
  for (const auto& s : v)
    if (s.name == name)
      return s.value;
  ADD_FAILURE() << "no stat " << name;
  return -1;
}

const stat_value* find(const stat_values& v, const std::string& name) {
  for (const auto& s : v)
    if (s.name == name)
      return &s;
  return nullptr;
}

TEST(stat, counters_and_gauges_add_up_over_nodes) {
  const auto out = merge_node_stats({
    {stat_counter("intake_accepted", 10), stat_gauge("requests_running", 3)},
    {stat_counter("intake_accepted", 5), stat_gauge("requests_running", 1)},
  });
  ASSERT_EQ(out.size(), 2u) << "no per-node copies of what adds up";
  EXPECT_EQ(out[0], stat_counter("intake_accepted", 15));
  EXPECT_EQ(out[1], stat_gauge("requests_running", 4));
}

TEST(stat, a_level_is_the_largest_and_each_nodes_is_kept) {
  const auto out = merge_node_stats({
    {stat_level("ttft_ms_p99", 120), stat_level("uptime_s", 60)},
    {},  // node 1 gave none (lost)
    {stat_level("ttft_ms_p99", 450), stat_level("uptime_s", 30)},
  });
  EXPECT_EQ(value_of(out, "ttft_ms_p99"), 450) << "not the sum 570";
  EXPECT_EQ(value_of(out, "uptime_s"), 60);
  EXPECT_EQ(value_of(out, "node0_ttft_ms_p99"), 120);
  EXPECT_EQ(value_of(out, "node2_ttft_ms_p99"), 450);
  EXPECT_EQ(value_of(out, "node2_uptime_s"), 30);
  EXPECT_EQ(find(out, "node1_ttft_ms_p99"), nullptr);
  for (const auto& s : out)
    EXPECT_EQ(s.kind, stat_kind::level) << s.name;
}

TEST(stat, the_adapter_hit_rate_comes_from_the_summed_hits_and_misses) {
  const auto out = merge_node_stats({
    {stat_counter("adapter_cache_hits", 9), stat_counter("adapter_cache_misses", 1),
     stat_level("adapter_cache_hit_rate", 0.9)},
    {stat_counter("adapter_cache_hits", 1), stat_counter("adapter_cache_misses", 9),
     stat_level("adapter_cache_hit_rate", 0.1)},
  });
  EXPECT_DOUBLE_EQ(value_of(out, "adapter_cache_hit_rate"), 0.5) << "10 hits in 20 lookups, not the best node's";
  EXPECT_DOUBLE_EQ(value_of(out, "node1_adapter_cache_hit_rate"), 0.1);
  const auto none = merge_node_stats({{stat_counter("adapter_cache_hits", 0), stat_counter("adapter_cache_misses", 0),
                                       stat_level("adapter_cache_hit_rate", 0)}});
  EXPECT_EQ(value_of(none, "adapter_cache_hit_rate"), 0);
}

TEST(stat, names_keep_the_order_they_first_appear_in) {
  const auto out = merge_node_stats({{stat_gauge("b", 1)}, {stat_gauge("a", 1), stat_gauge("b", 1)}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "b");
  EXPECT_EQ(out[1].name, "a");
  EXPECT_TRUE(merge_node_stats({}).empty());
}

} // namespace
} // namespace troupe
