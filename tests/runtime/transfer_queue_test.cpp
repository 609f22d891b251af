// Tests for runtime/transfer_queue: priority order across classes, FIFO
// within a class, the in-flight limit, joining a transfer of the same key,
// raising a queued prefetch to a demand load, cancel, per-class accounting,
// and randomised invariants (each transfer starts and finishes once, the
// limit holds, bytes add up).
#include "runtime/transfer_queue.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

namespace troupe {
namespace {

using tc = transfer_class;

std::vector<std::uint64_t> keys(const std::vector<transfer_queue::started>& s) {
  std::vector<std::uint64_t> out;
  for (const auto& x : s)
    out.push_back(x.key);
  return out;
}

TEST(transfer_queue, starts_by_class_then_arrival_within_the_limit) {
  transfer_queue q{2};
  q.enqueue(tc::swap_out, 1, 10, 0);
  q.enqueue(tc::prefetch, 2, 10, 0);
  q.enqueue(tc::demand_load, 3, 10, 0);
  q.enqueue(tc::swap_in, 4, 10, 0);
  q.enqueue(tc::demand_load, 5, 10, 0);
  auto s = q.start_ready(1);
  EXPECT_EQ(keys(s), (std::vector<std::uint64_t>{3, 5})) << "demand loads first, in order";
  EXPECT_EQ(q.inflight(), 2u);
  EXPECT_EQ(q.queued(), 3u);
  EXPECT_TRUE(q.start_ready(1).empty()) << "the limit holds";
  EXPECT_TRUE(q.finished(s[0].id, 2, true));
  EXPECT_EQ(keys(q.start_ready(2)), (std::vector<std::uint64_t>{4})) << "then the swap-in";
  EXPECT_TRUE(q.finished(s[1].id, 3, true));
  auto p = q.start_ready(3);
  EXPECT_EQ(keys(p), (std::vector<std::uint64_t>{2})) << "then the prefetch";
  EXPECT_FALSE(q.finished(12345, 3, true)) << "unknown ids are refused";
}

TEST(transfer_queue, joins_a_transfer_of_the_same_key_and_raises_a_prefetch) {
  transfer_queue q{1};
  const auto busy = q.enqueue(tc::demand_load, 9, 10, 0);
  q.start_ready(0); // 9 runs; everything else queues
  const auto pf = q.enqueue(tc::prefetch, 1, 100, 0);
  const auto other = q.enqueue(tc::prefetch, 2, 100, 0);
  EXPECT_EQ(q.enqueue(tc::prefetch, 1, 100, 1), pf) << "a second prefetch joins";
  EXPECT_EQ(q.enqueue(tc::demand_load, 1, 100, 1), pf) << "a demand joins and raises it";
  EXPECT_EQ(q.enqueue(tc::demand_load, 9, 10, 1), busy) << "joins a running one too";
  EXPECT_NE(q.enqueue(tc::swap_out, 1, 100, 1), pf) << "other direction: its own transfer";
  EXPECT_EQ(q.queued(), 3u);
  q.finished(busy, 2, true);
  auto s = q.start_ready(2);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, pf);
  EXPECT_EQ(s[0].cls, tc::demand_load);
  q.finished(pf, 4, true);
  EXPECT_EQ(q.stats(tc::demand_load).transfers, 2u);
  EXPECT_EQ(q.stats(tc::demand_load).bytes, 110u);
  EXPECT_EQ(q.stats(tc::prefetch).transfers, 0u);
  EXPECT_DOUBLE_EQ(q.stats(tc::demand_load).busy_seconds, 2.0 + 2.0);
  EXPECT_DOUBLE_EQ(q.stats(tc::demand_load).queue_seconds, 0.0 + 2.0);
  EXPECT_TRUE(q.cancel(other));
  EXPECT_FALSE(q.cancel(other));
  auto rest = q.start_ready(5);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].cls, tc::swap_out);
  EXPECT_FALSE(q.cancel(rest[0].id)) << "running ones cannot be cancelled";
  q.finished(rest[0].id, 6, false);
  EXPECT_EQ(q.stats(tc::swap_out).failures, 1u);
  EXPECT_EQ(q.stats(tc::swap_out).bytes, 0u);
  EXPECT_EQ(q.inflight() + q.queued(), 0u);
}

TEST(transfer_queue, keys_of_any_size_stay_apart) {
  // Imported session caches are owned from 2^62 up: 2^62 + 7 and request 7
  // are different keys in every family (a key folded into 64 bits with its
  // family once made them one transfer, and one of them never moved).
  transfer_queue q{8};
  const std::uint64_t imported = (std::uint64_t{1} << 62) + 7;
  for (auto c : {tc::swap_out, tc::swap_in, tc::demand_load}) {
    const auto a = q.enqueue(c, 7, 10, 0);
    const auto b = q.enqueue(c, imported, 10, 0);
    EXPECT_NE(a, b) << to_string(c);
    EXPECT_EQ(q.enqueue(c, imported, 10, 0), b) << "the same key still joins";
  }
  EXPECT_EQ(q.queued(), 6u);
  const auto s = q.start_ready(1);
  ASSERT_EQ(s.size(), 6u);
  for (const auto& x : s)
    EXPECT_TRUE(q.finished(x.id, 2, true));
  EXPECT_EQ(q.inflight(), 0u);
}

TEST(transfer_queue, randomised_invariants) {
  for (unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 rng{seed};
    transfer_queue q{3};
    std::set<std::uint64_t> started, done;
    std::map<std::uint64_t, std::uint64_t> bytes_of;
    std::vector<std::uint64_t> running;
    std::uint64_t bytes_done = 0;
    double now = 0;
    for (int op = 0; op < 5000; ++op) {
      now += 1;
      const auto r = rng() % 10;
      if (r < 5) {
        const auto c = static_cast<tc>(rng() % 4);
        const std::uint64_t key = rng() % 20;
        const std::uint64_t b = 1 + rng() % 1000;
        const auto id = q.enqueue(c, key, b, now);
        bytes_of.emplace(id, b); // a joined transfer keeps its first size
      } else if (r < 8) {
        for (const auto& s : q.start_ready(now)) {
          EXPECT_TRUE(started.insert(s.id).second) << "started twice";
          running.push_back(s.id);
        }
      } else if (!running.empty()) {
        const auto k = rng() % running.size();
        const auto id = running[k];
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
        const bool ok = rng() % 5 != 0;
        ASSERT_TRUE(q.finished(id, now, ok));
        EXPECT_TRUE(done.insert(id).second) << "finished twice";
        EXPECT_FALSE(q.finished(id, now, ok));
        if (ok)
          bytes_done += bytes_of.at(id);
      }
      ASSERT_LE(q.inflight(), 3u);
      ASSERT_EQ(q.inflight(), running.size());
    }
    std::uint64_t accounted = 0;
    for (auto c : {tc::demand_load, tc::swap_in, tc::prefetch, tc::swap_out})
      accounted += q.stats(c).bytes;
    EXPECT_EQ(accounted, bytes_done);
  }
}

} // namespace
} // namespace troupe
