// Tests for policies/disk_fetch: a cache on disk is read back when that is
// predicted no slower than recomputing it, the disk's queue counted, the
// batch a recompute would hold up weighing for the read, and never past the
// wait bound; a model that cannot tell always reads.
#include "policies/disk_fetch.hpp"

#include <gtest/gtest.h>

namespace troupe::policies {
namespace {

/// Prefill of n tokens takes n × 0.1 ms (fitted from three points); the disk
/// moves 1 GB/s, the copy up 10 GB/s.
disk_fetch_model model() {
  cost_calibration c;
  c.h2d_bytes_per_s = 10e9;
  c.prefill_points = {{1000, 0.1}, {2000, 0.2}, {4000, 0.4}};
  return disk_fetch_model::from(c, 1e9);
}

TEST(disk_fetch, the_read_time_counts_the_queue_its_own_read_and_the_copy_up) {
  const auto m = model();
  EXPECT_TRUE(m.fitted);
  EXPECT_NEAR(m.read_seconds(100'000'000, 0), 0.1 + 0.01, 1e-12);
  EXPECT_NEAR(m.read_seconds(100'000'000, 400'000'000), 0.5 + 0.01, 1e-12);
  EXPECT_NEAR(m.recompute.seconds(3000), 0.3, 1e-6);
}

struct fetch_case {
  const char* name;
  std::uint64_t bytes;
  std::uint32_t tokens;
  std::uint64_t queued;
  std::size_t running;
  bool read;
};

class disk_fetch_table : public ::testing::TestWithParam<fetch_case> {};

TEST_P(disk_fetch_table, reads_or_recomputes) {
  const auto& c = GetParam();
  EXPECT_EQ(model().read(c.bytes, c.tokens, c.queued, c.running), c.read) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
  cases, disk_fetch_table,
  ::testing::Values(
    // 0.11 s to read against 0.2 s to recompute: read.
    fetch_case{"small_cache_idle_disk", 100'000'000, 2000, 0, 0, true},
    // 0.55 s against 0.2 s, nothing running: recompute.
    fetch_case{"large_cache_idle_gpu", 500'000'000, 2000, 0, 0, false},
    // The same with 3 running (0.2 s × 4 = 0.8 s of the batch's time): read.
    fetch_case{"large_cache_busy_gpu", 500'000'000, 2000, 0, 3, true},
    // A queue of 0.6 s ahead: 1.15 s is past the 1 s bound whatever runs.
    fetch_case{"queued_disk_past_the_bound", 500'000'000, 2000, 600'000'000, 50, false},
    fetch_case{"queued_disk_within_the_bound", 500'000'000, 2000, 400'000'000, 50, true}),
  [](const auto& info) { return std::string{info.param.name}; });

TEST(disk_fetch, writes_on_demand_by_the_same_measure) {
  const auto m = model();
  EXPECT_TRUE(m.write(100'000'000, 2000, 0)) << "0.1 s against 0.2 s";
  EXPECT_FALSE(m.write(500'000'000, 2000, 0)) << "0.5 s against 0.2 s: drop it instead";
  EXPECT_TRUE(m.write(500'000'000, 2000, 0, 3)) << "four requests' worth of recompute";
  EXPECT_FALSE(m.write(500'000'000, 2000, 600'000'000, 50)) << "past the bound on waiting";
}

TEST(disk_fetch, a_model_that_cannot_tell_always_reads_and_writes) {
  cost_calibration two_points;
  two_points.prefill_points = {{1000, 0.1}, {2000, 0.2}};
  const auto unfitted = disk_fetch_model::from(two_points, 1e9);
  EXPECT_FALSE(unfitted.fitted);
  EXPECT_TRUE(unfitted.read(10'000'000'000, 10, 10'000'000'000));
  EXPECT_TRUE(unfitted.write(10'000'000'000, 10, 10'000'000'000));
  auto no_rate = model();
  no_rate.disk_bytes_per_s = 0;
  EXPECT_TRUE(no_rate.read(10'000'000'000, 10, 0));
}

} // namespace
} // namespace troupe::policies
