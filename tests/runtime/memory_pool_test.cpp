// Tests for runtime/memory_pool (page_pool): all-or-nothing allocation,
// release counts and idempotence, no page shared between owners, per-kind
// usage and pages_of; then a table of per-step pool states.
#include "runtime/memory_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe {
namespace {

static_assert(std::is_trivially_copyable_v<page_owner>);
static_assert(std::is_nothrow_move_constructible_v<page_pool>);
static_assert(std::is_nothrow_move_assignable_v<page_pool>);

constexpr page_owner req(std::uint64_t id) { return {page_owner_kind::request, id}; }
constexpr page_owner ad(std::uint64_t id) { return {page_owner_kind::adapter, id}; }

std::vector<std::uint32_t> ids(std::span<const std::uint32_t> s) { return {s.begin(), s.end()}; }

TEST(page_pool, starts_all_free) {
  page_pool pool{10};
  EXPECT_EQ(pool.total_pages(), 10u);
  EXPECT_EQ(pool.free_pages(), 10u);
  EXPECT_EQ(pool.used_pages(page_owner_kind::request), 0u);
  EXPECT_EQ(pool.used_pages(page_owner_kind::adapter), 0u);
  EXPECT_EQ(pool.owners(), 0u);
  EXPECT_TRUE(pool.pages_of(req(1)).empty());
}

TEST(page_pool, allocation_is_all_or_nothing) {
  page_pool pool{10};
  ASSERT_TRUE(pool.allocate(req(1), 7));
  EXPECT_FALSE(pool.allocate(req(2), 4));
  EXPECT_EQ(pool.free_pages(), 3u);
  EXPECT_TRUE(pool.pages_of(req(2)).empty());
  EXPECT_EQ(pool.owners(), 1u);
  // A failed top-up leaves the owner's pages as they were.
  EXPECT_FALSE(pool.allocate(req(1), 4));
  EXPECT_EQ(pool.pages_of(req(1)).size(), 7u);
  EXPECT_TRUE(pool.allocate(req(2), 3));
  EXPECT_EQ(pool.free_pages(), 0u);
  EXPECT_FALSE(pool.allocate(ad(1), 1));
  EXPECT_TRUE(pool.allocate(ad(1), 0)); // nothing asked, nothing needed
  EXPECT_TRUE(pool.pages_of(ad(1)).empty());
}

TEST(page_pool, release_returns_the_count_once) {
  page_pool pool{10};
  ASSERT_TRUE(pool.allocate(req(1), 3));
  ASSERT_TRUE(pool.allocate(req(1), 2)); // top-up: 5 in all
  ASSERT_TRUE(pool.allocate(ad(1), 4));
  EXPECT_EQ(pool.release(req(1)), 5u);
  EXPECT_EQ(pool.release(req(1)), 0u);
  EXPECT_EQ(pool.free_pages(), 6u);
  EXPECT_EQ(pool.release(req(99)), 0u);
  // Same id, other kind: a different owner.
  EXPECT_EQ(pool.release(req(1)), 0u);
  EXPECT_EQ(pool.pages_of(ad(1)).size(), 4u);
  EXPECT_EQ(pool.release(ad(1)), 4u);
  EXPECT_EQ(pool.release(ad(1)), 0u);
  EXPECT_EQ(pool.free_pages(), 10u);
  EXPECT_EQ(pool.owners(), 0u);
}

TEST(page_pool, transfer_hands_every_page_to_the_new_owner_in_order) {
  page_pool pool{8};
  const page_owner a{page_owner_kind::request, 1}, b{page_owner_kind::request, 2};
  ASSERT_TRUE(pool.allocate(a, 3));
  const std::vector<std::uint32_t> first{pool.pages_of(a).begin(), pool.pages_of(a).end()};
  EXPECT_EQ(pool.transfer(a, b), 3u);
  EXPECT_TRUE(pool.pages_of(a).empty());
  ASSERT_TRUE(pool.allocate(b, 2));
  const auto held = pool.pages_of(b);
  ASSERT_EQ(held.size(), 5u);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), held.begin())) << "adopted pages first, in order";
  EXPECT_EQ(pool.used_pages(page_owner_kind::request), 5u);
  EXPECT_EQ(pool.transfer(a, b), 0u) << "a holds nothing now";
  EXPECT_EQ(pool.release(b), 5u);
  EXPECT_EQ(pool.release(a), 0u);
  EXPECT_EQ(pool.free_pages(), 8u);
}

TEST(page_pool, kinds_with_the_same_id_are_separate_owners) {
  page_pool pool{10};
  ASSERT_TRUE(pool.allocate(req(7), 2));
  ASSERT_TRUE(pool.allocate(ad(7), 3));
  EXPECT_EQ(pool.owners(), 2u);
  EXPECT_EQ(pool.used_pages(page_owner_kind::request), 2u);
  EXPECT_EQ(pool.used_pages(page_owner_kind::adapter), 3u);
  EXPECT_EQ(pool.release(ad(7)), 3u);
  EXPECT_EQ(pool.pages_of(req(7)).size(), 2u);
  EXPECT_EQ(pool.used_pages(page_owner_kind::adapter), 0u);
  EXPECT_EQ(pool.used_pages(page_owner_kind::request), 2u);
}

TEST(page_pool, pages_of_lists_page_ids_in_allocation_order) {
  page_pool pool{6};
  ASSERT_TRUE(pool.allocate(req(1), 2));
  ASSERT_TRUE(pool.allocate(ad(1), 1));
  ASSERT_TRUE(pool.allocate(req(1), 1));
  // Low ids first from a fresh pool.
  EXPECT_EQ(ids(pool.pages_of(req(1))), (std::vector<std::uint32_t>{0, 1, 3}));
  EXPECT_EQ(ids(pool.pages_of(ad(1))), (std::vector<std::uint32_t>{2}));
  EXPECT_TRUE(pool.pages_of(req(2)).empty());
}

/// One step of a pool scenario and the state after it.
struct pool_step {
  std::string what;
  bool alloc; ///< true: allocate(owner, n); false: release(owner)
  page_owner owner;
  std::uint64_t n;
  std::uint64_t result; ///< allocate: 1/0 for true/false; release: count
  std::uint64_t free_after;
  std::uint64_t req_used_after;
  std::uint64_t ad_used_after;
};

TEST(page_pool, table_of_steps) {
  page_pool pool{8};
  const std::vector<pool_step> steps{
    {"r1 takes 3", true, req(1), 3, 1, 5, 3, 0},
    {"a1 takes 2", true, ad(1), 2, 1, 3, 3, 2},
    {"r2 wants 4: refused", true, req(2), 4, 0, 3, 3, 2},
    {"r2 takes 3", true, req(2), 3, 1, 0, 6, 2},
    {"a2 wants 1: refused", true, ad(2), 1, 0, 0, 6, 2},
    {"a1 released", false, ad(1), 0, 2, 2, 6, 0},
    {"a2 takes 2", true, ad(2), 2, 1, 0, 6, 2},
    {"r1 released", false, req(1), 0, 3, 3, 3, 2},
    {"r1 released again", false, req(1), 0, 0, 3, 3, 2},
    {"r2 released", false, req(2), 0, 3, 6, 0, 2},
    {"a2 released", false, ad(2), 0, 2, 8, 0, 0},
  };
  for (const auto& s : steps) {
    const auto got = s.alloc ? std::uint64_t{pool.allocate(s.owner, s.n)} : pool.release(s.owner);
    EXPECT_EQ(got, s.result) << s.what;
    EXPECT_EQ(pool.free_pages(), s.free_after) << s.what;
    EXPECT_EQ(pool.used_pages(page_owner_kind::request), s.req_used_after) << s.what;
    EXPECT_EQ(pool.used_pages(page_owner_kind::adapter), s.ad_used_after) << s.what;
    EXPECT_EQ(pool.free_pages() + s.req_used_after + s.ad_used_after, pool.total_pages()) << s.what;
  }
}

TEST(page_pool, pages_are_never_shared_under_random_churn) {
  constexpr std::uint64_t total = 64;
  page_pool pool{total};
  std::mt19937_64 rng{42};
  std::vector<page_owner> owners;
  for (std::uint64_t i = 0; i < 6; ++i) {
    owners.push_back(req(i));
    owners.push_back(ad(i));
  }
  for (int step = 0; step < 2000; ++step) {
    const auto& o = owners[rng() % owners.size()];
    if (rng() % 3 == 0) {
      const auto held = pool.pages_of(o).size();
      EXPECT_EQ(pool.release(o), held) << "step " << step;
    } else {
      const auto n = rng() % 12;
      const auto before_free = pool.free_pages();
      const auto before_held = pool.pages_of(o).size();
      const bool ok = pool.allocate(o, n);
      EXPECT_EQ(ok, n <= before_free) << "step " << step;
      EXPECT_EQ(pool.pages_of(o).size(), before_held + (ok ? n : 0)) << "step " << step;
    }
    // Every page is either free or held by exactly one owner.
    std::set<std::uint32_t> seen;
    std::uint64_t used[2] = {0, 0};
    for (const auto& x : owners) {
      for (auto p : pool.pages_of(x)) {
        EXPECT_LT(p, total);
        EXPECT_TRUE(seen.insert(p).second) << "page " << p << " shared, step " << step;
      }
      used[static_cast<int>(x.kind)] += pool.pages_of(x).size();
    }
    EXPECT_EQ(seen.size() + pool.free_pages(), total) << "step " << step;
    EXPECT_EQ(pool.used_pages(page_owner_kind::request), used[0]) << "step " << step;
    EXPECT_EQ(pool.used_pages(page_owner_kind::adapter), used[1]) << "step " << step;
  }
}

TEST(page_pool, transfers_and_frees_chosen_pages_all_or_nothing) {
  page_pool pool{8};
  const page_owner req{page_owner_kind::request, 1};
  const page_owner cache{page_owner_kind::request, 99};
  ASSERT_TRUE(pool.allocate(req, 5));
  const std::vector<std::uint32_t> held(pool.pages_of(req).begin(), pool.pages_of(req).end());
  // A request's first two pages become the cache's; the rest keep their order.
  ASSERT_TRUE(pool.transfer_pages(req, cache, std::vector<std::uint32_t>{held[0], held[1]}));
  EXPECT_EQ(std::vector<std::uint32_t>(pool.pages_of(cache).begin(), pool.pages_of(cache).end()),
            (std::vector<std::uint32_t>{held[0], held[1]}));
  EXPECT_EQ(std::vector<std::uint32_t>(pool.pages_of(req).begin(), pool.pages_of(req).end()),
            (std::vector<std::uint32_t>{held[2], held[3], held[4]}));
  EXPECT_EQ(pool.used_pages(page_owner_kind::request), 5u);
  // A page it does not hold, or one named twice: nothing moves.
  EXPECT_FALSE(pool.transfer_pages(req, cache, std::vector<std::uint32_t>{held[2], held[0]}));
  EXPECT_FALSE(pool.transfer_pages(req, cache, std::vector<std::uint32_t>{held[2], held[2]}));
  EXPECT_EQ(pool.pages_of(req).size(), 3u);
  EXPECT_FALSE(pool.release_pages(cache, std::vector<std::uint32_t>{held[1], held[3]}));
  EXPECT_EQ(pool.free_pages(), 3u);
  // Freed one by one: each exactly once.
  ASSERT_TRUE(pool.release_pages(cache, std::vector<std::uint32_t>{held[1]}));
  EXPECT_FALSE(pool.release_pages(cache, std::vector<std::uint32_t>{held[1]}));
  EXPECT_EQ(pool.free_pages(), 4u);
  ASSERT_TRUE(pool.release_pages(cache, std::vector<std::uint32_t>{held[0]}));
  EXPECT_EQ(pool.pages_of(cache).size(), 0u);
  EXPECT_EQ(pool.owners(), 1u);
  EXPECT_EQ(pool.release(req), 3u);
  EXPECT_EQ(pool.free_pages(), 8u);
}

} // namespace
} // namespace troupe
