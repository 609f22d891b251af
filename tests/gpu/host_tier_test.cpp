// Tests for gpu/host_tier (the LRU host tier of adapters bounded in bytes)
// and the sim backend's modelled adapter loads through it.
#include "gpu/host_tier.hpp"
#include "gpu/sim_backend.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace troupe::gpu {
namespace {

TEST(host_tier, drops_least_recently_used_beyond_the_budget) {
  host_tier t{100};
  EXPECT_TRUE(t.insert(1, 40).empty());
  EXPECT_TRUE(t.insert(2, 40).empty());
  EXPECT_TRUE(t.touch(1)); // 2 is now the least recently used
  EXPECT_EQ(t.insert(3, 40), (std::vector<std::uint32_t>{2}));
  EXPECT_TRUE(t.contains(1));
  EXPECT_FALSE(t.contains(2));
  EXPECT_EQ(t.bytes(), 80u);
  EXPECT_FALSE(t.touch(2));
  // One item over the whole budget stays (its load needs it), alone.
  EXPECT_EQ(t.insert(4, 500), (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.bytes(), 500u);
  EXPECT_TRUE(t.erase(4));
  EXPECT_FALSE(t.erase(4));
  EXPECT_EQ(t.bytes(), 0u);
}

TEST(host_tier, reinserting_replaces_the_size_and_zero_means_unbounded) {
  host_tier t{0};
  for (std::uint32_t i = 0; i < 100; ++i)
    EXPECT_TRUE(t.insert(i, 1000).empty());
  EXPECT_EQ(t.insert(5, 10).size(), 0u);
  EXPECT_EQ(t.bytes(), 99u * 1000 + 10);
  EXPECT_EQ(t.capacity(), 0u);
}

TEST(sim_backend_adapters, first_load_reads_disk_then_the_host_tier_hits) {
  const auto shape = *find_model_preset("llama-2-7b");
  const auto gpu = *find_gpu_spec("A100-80GB");
  const auto bytes = shape.lora_adapter_bytes(16);
  sim_backend b{shape, gpu, 1, cost_constants{}, bytes * 2}; // room for two adapters
  auto first = b.load_adapter(1, "", bytes, {});
  EXPECT_TRUE(first.error.empty());
  EXPECT_FALSE(first.host_hit);
  EXPECT_DOUBLE_EQ(first.disk_seconds, b.cost_model().disk_seconds(bytes));
  EXPECT_DOUBLE_EQ(first.copy_seconds, b.transfer_seconds(bytes));
  EXPECT_GT(first.disk_seconds, 0.0);
  auto again = b.load_adapter(1, "", bytes, {});
  EXPECT_TRUE(again.host_hit);
  EXPECT_EQ(again.disk_seconds, 0.0);
  EXPECT_DOUBLE_EQ(again.copy_seconds, first.copy_seconds);
  b.load_adapter(2, "", bytes, {});
  b.load_adapter(3, "", bytes, {}); // pushes 1 out of the host tier
  EXPECT_FALSE(b.load_adapter(1, "", bytes, {}).host_hit);
  b.forget_adapter(3);
  EXPECT_FALSE(b.load_adapter(3, "", bytes, {}).host_hit);
}

} // namespace
} // namespace troupe::gpu
