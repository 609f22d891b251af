// Tests for policies/eviction_policy (lru): least recently used unpinned
// adapters first until enough pages, never a pinned one, every unpinned one
// when that is not enough; then a tiny cache loop with per-step expectations.
#include "policies/eviction_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe::policies {
namespace {

static_assert(std::is_trivially_copyable_v<resident_adapter_view>);
static_assert(std::is_final_v<lru_eviction_policy>);
static_assert(!std::is_abstract_v<lru_eviction_policy>);
static_assert(std::has_virtual_destructor_v<eviction_policy>);

/// id, pages, pins, last_used_s
resident_adapter_view a(std::uint32_t id, std::uint64_t pages, std::uint32_t pins, double last) {
  return {id, pages, pins, 1, last};
}

struct lru_case {
  std::string name;
  std::vector<resident_adapter_view> resident;
  std::uint64_t pages_needed;
  std::vector<std::uint32_t> expected;
};

TEST(lru_eviction_policy, chooses_the_table_of_victims) {
  const std::vector<lru_case> table{
    {"nothing resident", {}, 10, {}},
    {"nothing needed", {a(1, 4, 0, 1)}, 0, {}},
    {"oldest first", {a(1, 4, 0, 3), a(2, 4, 0, 1), a(3, 4, 0, 2)}, 1, {2}},
    {"stops once enough pages", {a(1, 4, 0, 3), a(2, 4, 0, 1), a(3, 4, 0, 2)}, 5, {2, 3}},
    {"exact fit stops", {a(1, 4, 0, 3), a(2, 4, 0, 1), a(3, 4, 0, 2)}, 8, {2, 3}},
    {"one page more takes the next", {a(1, 4, 0, 3), a(2, 4, 0, 1), a(3, 4, 0, 2)}, 9, {2, 3, 1}},
    {"pinned ones are skipped", {a(1, 4, 0, 3), a(2, 4, 2, 1), a(3, 4, 0, 2)}, 4, {3}},
    {"pinned ones never chosen even when short", {a(1, 4, 1, 3), a(2, 4, 1, 1), a(3, 4, 0, 2)}, 100, {3}},
    {"not enough: every unpinned one, oldest first", {a(1, 2, 0, 3), a(2, 2, 0, 1), a(3, 2, 0, 2)}, 100, {2, 3, 1}},
    {"all pinned", {a(1, 2, 1, 3), a(2, 2, 1, 1)}, 1, {}},
    {"big old one covers it", {a(1, 1, 0, 2), a(2, 10, 0, 1)}, 5, {2}},
    {"ties broken by id", {a(5, 1, 0, 1), a(3, 1, 0, 1), a(4, 1, 0, 1)}, 2, {3, 4}},
    {"zero-page adapters do not count towards the need", {a(1, 0, 0, 1), a(2, 3, 0, 2)}, 1, {1, 2}},
  };
  lru_eviction_policy lru;
  for (const auto& c : table)
    EXPECT_EQ(lru.choose_victims(c.resident, c.pages_needed, 10.0), c.expected) << c.name;
}

TEST(lru_eviction_policy, ignores_use_counts_and_now) {
  lru_eviction_policy lru;
  std::vector<resident_adapter_view> r{{1, 4, 0, 1000, 2.0}, {2, 4, 0, 1, 1.0}};
  EXPECT_EQ(lru.choose_victims(r, 1, 0.0), std::vector<std::uint32_t>{2});
  EXPECT_EQ(lru.choose_victims(r, 1, 1e9), std::vector<std::uint32_t>{2});
  EXPECT_EQ(lru.name(), "lru");
}

/// Per-step expectation of a small cache loop.
struct expected_step {
  std::string what;
  std::vector<std::uint32_t> victims;
  std::vector<std::uint32_t> resident_after; ///< sorted
};

TEST(lru_eviction_policy, cache_loop_evicts_least_recently_used) {
  // A 3-adapter view that the loop updates: "use" touches an adapter at the
  // step's time; "pin"/"unpin" change pins; "need n" evicts for n pages.
  std::vector<resident_adapter_view> res{a(1, 2, 0, 0), a(2, 2, 0, 1), a(3, 2, 0, 2)};
  lru_eviction_policy lru;
  double now = 10;
  auto find = [&](std::uint32_t id) {
    return std::find_if(res.begin(), res.end(), [&](const auto& r) { return r.adapter_id == id; });
  };
  auto ids = [&] {
    std::vector<std::uint32_t> out;
    for (const auto& r : res)
      out.push_back(r.adapter_id);
    std::sort(out.begin(), out.end());
    return out;
  };
  struct op {
    char kind; // u: use, p: pin, q: unpin, n: need pages, l: load a new one
    std::uint64_t arg;
  };
  const std::vector<std::pair<op, expected_step>> steps{
    {{'u', 1}, {"use 1", {}, {1, 2, 3}}},
    {{'n', 2}, {"need 2: 2 is oldest", {2}, {1, 3}}},
    {{'l', 4}, {"load 4", {}, {1, 3, 4}}},
    {{'p', 3}, {"pin 3", {}, {1, 3, 4}}},
    {{'n', 2}, {"need 2: 3 pinned, 1 next", {1}, {3, 4}}},
    {{'n', 4}, {"need 4: only 4 is unpinned", {4}, {3}}},
    {{'n', 1}, {"need 1: all pinned", {}, {3}}},
    {{'q', 3}, {"unpin 3", {}, {3}}},
    {{'n', 1}, {"need 1: 3 now free", {3}, {}}},
  };
  for (const auto& [o, exp] : steps) {
    now += 1;
    std::vector<std::uint32_t> victims;
    switch (o.kind) {
      case 'u':
        find(static_cast<std::uint32_t>(o.arg))->last_used_s = now;
        break;
      case 'p':
        ++find(static_cast<std::uint32_t>(o.arg))->pins;
        break;
      case 'q':
        --find(static_cast<std::uint32_t>(o.arg))->pins;
        break;
      case 'l':
        res.push_back(a(static_cast<std::uint32_t>(o.arg), 2, 0, now));
        break;
      case 'n':
        victims = lru.choose_victims(res, o.arg, now);
        for (auto v : victims) {
          auto it = find(v);
          ASSERT_NE(it, res.end()) << exp.what;
          EXPECT_EQ(it->pins, 0u) << exp.what;
          res.erase(it);
        }
        break;
    }
    EXPECT_EQ(victims, exp.victims) << exp.what;
    EXPECT_EQ(ids(), exp.resident_after) << exp.what;
  }
}

} // namespace
} // namespace troupe::policies
