// Tests for policies/eviction_policy: lru (least recently used unpinned
// adapters first until enough pages, never a pinned one, every unpinned one
// when that is not enough; a tiny cache loop with per-step expectations),
// lfu, slora, and the chameleon / fairshare score with its normalisation,
// weights and configure(); every policy on shared tables of cases.
#include "policies/eviction_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
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

/// id, pages, pins, last_used_s (one use in the window)
resident_adapter_view a(std::uint32_t id, std::uint64_t pages, std::uint32_t pins, double last) {
  resident_adapter_view v;
  v.adapter_id = id;
  v.pages = pages;
  v.rank = static_cast<std::uint32_t>(pages * 8);
  v.pins = pins;
  v.uses = 1;
  v.window_uses = 1;
  v.last_used_s = last;
  return v;
}

/// id, pages, window uses, last_used_s, unpinned.
resident_adapter_view f(std::uint32_t id, std::uint64_t pages, double window_uses, double last) {
  auto v = a(id, pages, 0, last);
  v.window_uses = window_uses;
  v.uses = static_cast<std::uint64_t>(window_uses);
  return v;
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
  std::vector<resident_adapter_view> r{f(1, 4, 1000, 2.0), f(2, 4, 1, 1.0)};
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

// -- lfu, slora, chameleon, fairshare ---------------------------------------------

struct policy_case {
  std::string name;
  std::vector<resident_adapter_view> resident;
  std::uint64_t pages_needed;
  std::vector<std::uint32_t> expected;
};

void run_table(eviction_policy& p, const std::vector<policy_case>& table, double now = 10.0) {
  for (const auto& c : table)
    EXPECT_EQ(p.choose_victims(c.resident, c.pages_needed, now), c.expected) << p.name() << ": " << c.name;
}

TEST(lfu_eviction_policy, fewest_uses_in_the_window_first) {
  lfu_eviction_policy lfu;
  run_table(lfu, {
    {"rarest first", {f(1, 2, 5, 9), f(2, 2, 1, 9), f(3, 2, 3, 9)}, 1, {2}},
    {"then the next rarest", {f(1, 2, 5, 9), f(2, 2, 1, 9), f(3, 2, 3, 9)}, 3, {2, 3}},
    {"recency does not matter", {f(1, 2, 1, 9.9), f(2, 2, 7, 0.1)}, 1, {1}},
    {"ties: least recently used", {f(1, 2, 2, 5), f(2, 2, 2, 3)}, 1, {2}},
    {"never pinned", {a(1, 2, 1, 0), f(2, 2, 9, 9)}, 1, {2}},
  });
}

TEST(slora_eviction_policy, keeps_nothing_idle_and_evicts_lru) {
  slora_eviction_policy s;
  EXPECT_FALSE(s.keep_idle());
  EXPECT_TRUE(lru_eviction_policy{}.keep_idle());
  run_table(s, {{"lru order", {a(1, 4, 0, 3), a(2, 4, 0, 1)}, 1, {2}}});
}

TEST(score_eviction_policy, chameleon_keeps_big_frequent_adapters_lru_would_drop) {
  auto chameleon = score_eviction_policy{"chameleon", {}};
  lru_eviction_policy lru;
  // 1: big (16 pages), used often, but not lately. 2, 3: small, cold, rare,
  // touched more recently.
  const std::vector<resident_adapter_view> r{f(1, 16, 20, 2), f(2, 1, 1, 6), f(3, 1, 2, 5)};
  EXPECT_EQ(lru.choose_victims(r, 2, 10), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(chameleon.choose_victims(r, 2, 10), (std::vector<std::uint32_t>{2, 3}));
  // The scores, by hand: max uses 20, max pages 16, oldest use at 2 (span 8).
  const auto s = chameleon.scores(r, 10);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_NEAR(s[0], 0.45 * 1.0 + 0.10 * 0.0 + 0.45 * 1.0, 1e-12);
  EXPECT_NEAR(s[1], 0.45 * 0.05 + 0.10 * 0.5 + 0.45 * (1.0 / 16), 1e-12);
  EXPECT_NEAR(s[2], 0.45 * 0.10 + 0.10 * 0.375 + 0.45 * (1.0 / 16), 1e-12);
}

TEST(score_eviction_policy, tables_for_chameleon_and_fairshare) {
  auto chameleon = score_eviction_policy{"chameleon", {}};
  auto fairshare = score_eviction_policy{"fairshare", {1.0 / 3, 1.0 / 3, 1.0 / 3}};
  // Recency weighs more in fairshare: a recently used but small, rare
  // adapter survives there and goes first in chameleon.
  const std::vector<resident_adapter_view> r{f(1, 2, 1, 9.5), f(2, 3, 2, 1), f(3, 4, 4, 5)};
  run_table(chameleon, {
    {"small and rare first", r, 1, {1}},
    {"all equal: least recently used", {f(1, 2, 1, 5), f(2, 2, 1, 3)}, 1, {2}},
    {"pinned never", {a(1, 1, 3, 0), f(2, 8, 9, 9)}, 1, {2}},
    {"not enough: all unpinned, by score", {f(1, 2, 1, 9.5), f(2, 3, 2, 1), a(3, 4, 1, 0)}, 99, {1, 2}},
    {"nothing needed", r, 0, {}},
  });
  run_table(fairshare, {{"recency saves 1; 2 goes", r, 1, {2}}});
}

TEST(score_eviction_policy, configure_takes_weights_and_names_bad_keys) {
  auto p = score_eviction_policy{"chameleon", {}};
  EXPECT_EQ(p.configure({}), "");
  EXPECT_EQ(p.configure({{"frequency", 0.2}, {"recency", 0.3}, {"size", 0.5}}), "");
  EXPECT_DOUBLE_EQ(p.weights().recency, 0.3);
  EXPECT_NE(p.configure({{"freq", 1}}).find("\"freq\""), std::string::npos);
  EXPECT_NE(p.configure({{"size", -1}}).find("size"), std::string::npos);
  EXPECT_NE(p.configure({{"frequency", 0}, {"recency", 0}, {"size", 0}}).find("positive"), std::string::npos);
  EXPECT_DOUBLE_EQ(p.weights().recency, 0.3) << "a refused configure changes nothing";
  lru_eviction_policy lru;
  EXPECT_EQ(lru.configure({}), "");
  EXPECT_NE(lru.configure({{"size", 1}}).find("takes no parameters"), std::string::npos);
}

TEST(eviction_policies, none_ever_names_a_pinned_adapter) {
  std::vector<std::unique_ptr<eviction_policy>> all;
  all.push_back(std::make_unique<lru_eviction_policy>());
  all.push_back(std::make_unique<lfu_eviction_policy>());
  all.push_back(std::make_unique<slora_eviction_policy>());
  all.push_back(std::make_unique<score_eviction_policy>("chameleon", score_weights{}));
  all.push_back(std::make_unique<score_eviction_policy>("fairshare", score_weights{1, 1, 1}));
  std::uint64_t x = 12345;
  auto next = [&x] { x = x * 6364136223846793005ULL + 1442695040888963407ULL; return x >> 33; };
  for (int round = 0; round < 200; ++round) {
    std::vector<resident_adapter_view> r;
    const auto n = 1 + next() % 12;
    for (std::uint32_t i = 0; i < n; ++i) {
      auto v = f(i + 1, 1 + next() % 16, static_cast<double>(next() % 9), static_cast<double>(next() % 100));
      v.pins = next() % 3 == 0 ? 1 : 0;
      r.push_back(v);
    }
    const auto need = next() % 40;
    for (auto& p : all) {
      const auto victims = p->choose_victims(r, need, 100);
      std::uint64_t freed = 0, unpinned = 0;
      for (const auto& v : r)
        unpinned += v.pins == 0 ? v.pages : 0;
      for (auto id : victims) {
        const auto& v = r[id - 1];
        EXPECT_EQ(v.pins, 0u) << p->name();
        freed += v.pages;
      }
      EXPECT_GE(freed, std::min(need, unpinned)) << p->name() << ": not enough freed";
    }
  }
}

} // namespace
} // namespace troupe::policies
