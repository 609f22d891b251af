// Tests for runtime/prefix_cache: pages found only under their whole
// history and adapter, whole pages only, shared readers, idle pages evicted
// least recently used first and leaves before the pages they extend.
#include "runtime/prefix_cache.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace troupe {
namespace {

std::vector<std::int32_t> iota_tokens(std::size_t n, std::int32_t from = 1) {
  std::vector<std::int32_t> t(n);
  std::iota(t.begin(), t.end(), from);
  return t;
}

/// Caches the first `pages` pages of `tokens` as page ids from `first_page`,
/// as one request's prefill would; returns their keys (the request reads them).
std::vector<std::uint64_t> cache_prompt(prefix_cache& c, std::uint32_t adapter, const std::vector<std::int32_t>& tokens,
                                        std::size_t pages, std::uint32_t first_page, double now) {
  std::vector<std::uint64_t> keys;
  std::uint64_t parent = 0;
  const std::span<const std::int32_t> all{tokens};
  for (std::size_t p = 0; p < pages; ++p) {
    const auto key = c.insert(parent, adapter, all.subspan(p * c.page_tokens(), c.page_tokens()),
                              first_page + static_cast<std::uint32_t>(p), now);
    EXPECT_NE(key, 0u) << "page " << p;
    keys.push_back(key);
    parent = key;
  }
  return keys;
}

TEST(prefix_cache, finds_whole_pages_of_the_same_history_and_adapter) {
  prefix_cache c{4};
  const auto prompt = iota_tokens(10); // two whole pages and two tokens
  const auto keys = cache_prompt(c, 7, prompt, 2, 100, 0.0);
  EXPECT_EQ(c.pages(), 2u);
  EXPECT_EQ(c.idle_pages(), 0u); // its request still reads them

  // The same first 8 tokens: both pages, in order.
  auto longer = iota_tokens(12);
  auto m = c.lookup(7, longer, 10);
  EXPECT_EQ(m.pages, (std::vector<std::uint32_t>{100, 101}));
  EXPECT_EQ(m.keys, keys);
  // The keys of pages cached or not yet: the same chain.
  EXPECT_EQ(c.keys_of(7, longer, 2), keys);
  EXPECT_EQ(c.keys_of(7, longer, 10).size(), 3u);
  EXPECT_NE(c.keys_of(0, longer, 1), std::vector<std::uint64_t>{keys[0]});
  // At most max_pages; a partial page is never matched.
  EXPECT_EQ(c.lookup(7, longer, 1).pages.size(), 1u);
  EXPECT_EQ(c.lookup(7, iota_tokens(7), 10).pages.size(), 1u);
  // Another adapter: K and V differ.
  EXPECT_TRUE(c.lookup(0, longer, 10).pages.empty());
  // A different first page: nothing, even though the second page's tokens match.
  auto other = longer;
  other[0] = 99;
  EXPECT_TRUE(c.lookup(7, other, 10).pages.empty());
  // A different second page: the first only.
  other = longer;
  other[5] = 99;
  EXPECT_EQ(c.lookup(7, other, 10).pages, (std::vector<std::uint32_t>{100}));
}

TEST(prefix_cache, a_page_cached_twice_is_refused_and_an_unknown_parent_too) {
  prefix_cache c{4};
  const auto prompt = iota_tokens(8);
  cache_prompt(c, 0, prompt, 2, 10, 0.0);
  EXPECT_EQ(c.insert(0, 0, std::span{prompt}.first(4), 50, 1.0), 0u);
  EXPECT_EQ(c.insert(12345, 0, std::span{prompt}.first(4), 50, 1.0), 0u);
  EXPECT_EQ(c.insert(0, 0, std::span{prompt}.first(3), 50, 1.0), 0u); // not a whole page
  EXPECT_EQ(c.pages(), 2u);
}

TEST(prefix_cache, idle_pages_go_least_recently_used_first_leaves_before_their_parents) {
  prefix_cache c{2};
  const auto a = iota_tokens(6, 1);
  const auto b = iota_tokens(6, 101);
  const auto ka = cache_prompt(c, 0, a, 3, 0, 1.0);  // pages 0 1 2
  const auto kb = cache_prompt(c, 0, b, 2, 10, 2.0); // pages 10 11
  EXPECT_TRUE(c.evict(5).empty()); // every page is read
  c.unuse(ka, 3.0);
  EXPECT_EQ(c.idle_pages(), 3u);
  c.unuse(kb, 4.0);
  EXPECT_EQ(c.idle_pages(), 5u);
  // A reads again: its pages are in use, B's go, the deeper first.
  c.use(c.lookup(0, a, 3).keys, 5.0);
  EXPECT_EQ(c.idle_pages(), 2u);
  EXPECT_EQ(c.evict(1), (std::vector<std::uint32_t>{11}));
  EXPECT_EQ(c.evict(4), (std::vector<std::uint32_t>{10}));
  EXPECT_EQ(c.evictions(), 2u);
  EXPECT_TRUE(c.lookup(0, b, 3).pages.empty());
  c.unuse(ka, 6.0);
  EXPECT_EQ(c.evict(10), (std::vector<std::uint32_t>{2, 1, 0}));
  EXPECT_EQ(c.pages(), 0u);
  EXPECT_EQ(c.idle_pages(), 0u);
}

TEST(prefix_cache, a_shared_first_page_stays_while_any_extension_or_reader_does) {
  prefix_cache c{2};
  const std::vector<std::int32_t> sys{1, 2};
  const std::vector<std::int32_t> a{1, 2, 3, 4};
  const std::vector<std::int32_t> b{1, 2, 5, 6};
  const auto ka = cache_prompt(c, 0, a, 2, 0, 1.0);
  // B reads A's first page and adds its own second.
  auto m = c.lookup(0, b, 1);
  ASSERT_EQ(m.pages, (std::vector<std::uint32_t>{0}));
  c.use(m.keys, 2.0);
  const auto kb = c.insert(m.keys[0], 0, std::span{b}.subspan(2, 2), 7, 2.0);
  ASSERT_NE(kb, 0u);
  c.unuse(ka, 3.0);
  // A's second page is idle; the first is read by B.
  EXPECT_EQ(c.evict(10), (std::vector<std::uint32_t>{1}));
  c.unuse(std::vector<std::uint64_t>{m.keys[0], kb}, 4.0);
  // B's own page goes before the first page it extends.
  EXPECT_EQ(c.evict(10), (std::vector<std::uint32_t>{7, 0}));
  EXPECT_EQ(c.lookup(0, sys, 1).pages.size(), 0u);
}

TEST(prefix_cache, repeated_admission_takes_a_page_once_a_second_prompt_offers_it) {
  prefix_cache c{4};
  const auto a = iota_tokens(8);
  auto b = iota_tokens(8);
  b[5] = 99; // the same first page, another second one
  const auto ka = c.keys_of(7, a, 2);
  const auto kb = c.keys_of(7, b, 2);
  ASSERT_EQ(ka[0], kb[0]);
  // By default every page is admitted.
  EXPECT_TRUE(c.admits(ka[0]));
  c.admit_after(2, 16);
  EXPECT_FALSE(c.admits(ka[0])); // never offered
  c.offer(ka);
  EXPECT_FALSE(c.admits(ka[0])); // one prompt held it
  EXPECT_FALSE(c.admits(ka[1]));
  c.offer(kb);
  EXPECT_TRUE(c.admits(ka[0])); // two prompts held the first page
  EXPECT_FALSE(c.admits(ka[1])); // the second pages differ: one each
  EXPECT_FALSE(c.admits(kb[1]));
  c.offer(ka);
  EXPECT_TRUE(c.admits(ka[1]));
  // A page cached already is admitted whatever its count.
  prefix_cache d{4};
  d.admit_after(2, 16);
  const auto kd = cache_prompt(d, 7, a, 1, 100, 0.0);
  EXPECT_TRUE(d.admits(kd[0]));
  // Only the last `memory` keys offered are remembered: the oldest count is
  // forgotten, and its page starts over.
  prefix_cache e{4};
  e.admit_after(2, 3);
  const auto k = e.keys_of(1, iota_tokens(16), 4);
  e.offer(std::span<const std::uint64_t>{k}.first(1));
  e.offer(std::span<const std::uint64_t>{k}.subspan(1)); // k[0] forgotten: 3 remembered
  e.offer(std::span<const std::uint64_t>{k}.first(1));
  EXPECT_FALSE(e.admits(k[0]));
  e.offer(std::span<const std::uint64_t>{k}.last(1));
  EXPECT_TRUE(e.admits(k[3]));
  // A key offered again is remembered from its last offer.
  prefix_cache f{4};
  f.admit_after(2, 3);
  const auto q = f.keys_of(2, iota_tokens(20), 5);
  f.offer(std::span<const std::uint64_t>{q}.first(2)); // q0, q1
  f.offer(std::span<const std::uint64_t>{q}.first(1)); // q0 again: held twice
  f.offer(std::span<const std::uint64_t>{q}.subspan(2, 2)); // q2, q3: q1 forgotten, q0 not
  EXPECT_TRUE(f.admits(q[0]));
  f.offer(std::span<const std::uint64_t>{q}.subspan(4, 1)); // three offers since q0's last
  EXPECT_FALSE(f.admits(q[0]));
  // Back to every page.
  e.admit_after(1, 0);
  EXPECT_TRUE(e.admits(k[1]));
}

} // namespace
} // namespace troupe
