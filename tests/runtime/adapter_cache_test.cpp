// Tests for runtime/adapter_cache: the cache core (acquire outcomes, loads, pins, failed loads, eviction by the policy and
// by max_resident, counters), with a recording mock eviction policy and a
// table of per-step cache states.
#include "runtime/adapter_cache.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe {
namespace {

static_assert(!std::is_copy_constructible_v<adapter_cache>); // owns its policy
static_assert(std::is_trivially_copyable_v<adapter_cache::outcome>);

using outcome = adapter_cache::outcome;

/// 1000 bytes per rank unit: rank 8 -> 8000 bytes.
std::uint64_t bytes_of(std::uint32_t rank) { return std::uint64_t{rank} * 1000; }

// -- cache -------------------------------------------------------------------------

/// Records what the cache shows the policy and returns a scripted answer
/// (or, without one, defers to LRU).
class mock_eviction_policy final : public policies::eviction_policy {
public:
  struct call {
    std::vector<policies::resident_adapter_view> resident;
    std::uint64_t pages_needed;
    double now_s;
  };

  explicit mock_eviction_policy(std::vector<call>* calls) : calls_(calls) {}

  std::vector<std::uint32_t> choose_victims(std::span<const policies::resident_adapter_view> r,
                                            std::uint64_t pages_needed, double now_s) override {
    calls_->push_back({{r.begin(), r.end()}, pages_needed, now_s});
    if (script_ != nullptr && !script_->empty()) {
      auto out = script_->front();
      script_->erase(script_->begin());
      return out;
    }
    return lru_.choose_victims(r, pages_needed, now_s);
  }
  std::string_view name() const noexcept override { return "mock"; }

  void script(std::vector<std::vector<std::uint32_t>>* s) { script_ = s; }

private:
  std::vector<call>* calls_;
  std::vector<std::vector<std::uint32_t>>* script_ = nullptr;
  policies::lru_eviction_policy lru_;
};

/// Four adapters of 2, 4, 8 and 16 pages (ranks 8..64, 1000 bytes per rank
/// unit, 4000-byte pages).
adapter_catalog four_adapters() {
  return adapter_catalog{{{"a", 8, ""}, {"b", 16, ""}, {"c", 32, ""}, {"d", 64, ""}},
                         {},
                         bytes_of,
                         4000};
}

class adapter_cache_test : public ::testing::Test {
protected:
  explicit adapter_cache_test(std::uint32_t max_resident = 0) : max_resident_(max_resident) {}

  adapter_cache& cache() {
    if (!cache_) {
      auto p = std::make_unique<mock_eviction_policy>(&calls_);
      policy_ = p.get();
      cache_ = std::make_unique<adapter_cache>(catalog_, std::move(p), max_resident_);
    }
    return *cache_;
  }

  /// acquire + loaded + release: resident, unpinned, last used at `t`.
  void make_resident(std::uint32_t id, double t) {
    ASSERT_EQ(cache().acquire(id, t), outcome::load);
    cache().loaded(id);
    ASSERT_TRUE(cache().release(id, t));
  }

  std::vector<std::uint32_t> resident_ids() {
    std::vector<std::uint32_t> out;
    for (std::uint32_t id = 1; id <= 4; ++id)
      if (cache().resident(id))
        out.push_back(id);
    return out;
  }

  adapter_catalog catalog_ = four_adapters();
  std::uint32_t max_resident_;
  std::vector<mock_eviction_policy::call> calls_;
  mock_eviction_policy* policy_ = nullptr;
  std::unique_ptr<adapter_cache> cache_;
};

TEST_F(adapter_cache_test, catalog_pages_of_the_fixture) {
  ASSERT_EQ(catalog_.all().size(), 4u);
  EXPECT_EQ(catalog_.by_id(1)->pages, 2u);
  EXPECT_EQ(catalog_.by_id(2)->pages, 4u);
  EXPECT_EQ(catalog_.by_id(3)->pages, 8u);
  EXPECT_EQ(catalog_.by_id(4)->pages, 16u);
}

TEST_F(adapter_cache_test, acquire_outcomes_load_wait_hit) {
  auto& c = cache();
  EXPECT_FALSE(c.resident(1));
  EXPECT_EQ(c.acquire(1, 1.0), outcome::load);
  EXPECT_FALSE(c.resident(1)); // loading is not resident
  EXPECT_EQ(c.resident_count(), 0u);
  EXPECT_EQ(c.pins(1), 1u);
  EXPECT_EQ(c.acquire(1, 2.0), outcome::wait);
  EXPECT_EQ(c.acquire(1, 3.0), outcome::wait);
  EXPECT_EQ(c.pins(1), 3u);
  c.loaded(1);
  EXPECT_TRUE(c.resident(1));
  EXPECT_EQ(c.resident_count(), 1u);
  EXPECT_EQ(c.pins(1), 3u); // pins taken while loading hold
  EXPECT_EQ(c.acquire(1, 4.0), outcome::hit);
  EXPECT_EQ(c.pins(1), 4u);
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(c.misses(), 1u);
  EXPECT_EQ(c.evictions(), 0u);
}

TEST_F(adapter_cache_test, release_unpins_once_per_pin) {
  auto& c = cache();
  EXPECT_FALSE(c.release(1, 0.0)); // never acquired
  ASSERT_EQ(c.acquire(1, 1.0), outcome::load);
  c.loaded(1);
  ASSERT_EQ(c.acquire(1, 2.0), outcome::hit);
  EXPECT_TRUE(c.release(1, 3.0));
  EXPECT_EQ(c.pins(1), 1u);
  EXPECT_TRUE(c.release(1, 4.0));
  EXPECT_EQ(c.pins(1), 0u);
  EXPECT_FALSE(c.release(1, 5.0)); // no pin left
  EXPECT_TRUE(c.resident(1));      // unpinned adapters stay until evicted
  EXPECT_EQ(c.pins(1), 0u);
}

TEST_F(adapter_cache_test, load_failed_drops_the_entry_and_every_pin) {
  auto& c = cache();
  ASSERT_EQ(c.acquire(2, 1.0), outcome::load);
  ASSERT_EQ(c.acquire(2, 1.5), outcome::wait);
  c.load_failed(2);
  EXPECT_FALSE(c.resident(2));
  EXPECT_EQ(c.pins(2), 0u);
  EXPECT_FALSE(c.release(2, 2.0)); // the pins are gone with it
  // A later acquire starts a fresh load.
  EXPECT_EQ(c.acquire(2, 3.0), outcome::load);
  EXPECT_EQ(c.pins(2), 1u);
  EXPECT_EQ(c.misses(), 2u);
  c.load_failed(99); // unknown: harmless
  c.loaded(99);
  EXPECT_FALSE(c.resident(99));
}

TEST_F(adapter_cache_test, evict_for_follows_the_policy_and_shows_it_the_resident_set) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  make_resident(3, 3.0);
  ASSERT_EQ(cache().acquire(2, 4.0), outcome::hit); // 2 pinned
  ASSERT_EQ(cache().acquire(4, 5.0), outcome::load); // 4 loading
  calls_.clear();
  const auto victims = cache().evict_for(9, 6.0);
  ASSERT_EQ(calls_.size(), 1u);
  EXPECT_EQ(calls_[0].pages_needed, 9u);
  EXPECT_EQ(calls_[0].now_s, 6.0);
  // The policy sees resident adapters (loading ones excluded) with pages,
  // pins, uses and last use.
  auto seen = calls_[0].resident;
  std::sort(seen.begin(), seen.end(),
            [](const auto& a, const auto& b) { return a.adapter_id < b.adapter_id; });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].adapter_id, 1u);
  EXPECT_EQ(seen[0].pages, 2u);
  EXPECT_EQ(seen[0].pins, 0u);
  EXPECT_EQ(seen[0].uses, 1u);
  EXPECT_EQ(seen[0].last_used_s, 1.0);
  EXPECT_EQ(seen[1].adapter_id, 2u);
  EXPECT_EQ(seen[1].pages, 4u);
  EXPECT_EQ(seen[1].pins, 1u);
  EXPECT_EQ(seen[1].uses, 2u);
  EXPECT_EQ(seen[1].last_used_s, 4.0);
  EXPECT_EQ(seen[2].adapter_id, 3u);
  EXPECT_EQ(seen[2].pages, 8u);
  // LRU over unpinned 1 (2 pages) and 3 (8 pages).
  EXPECT_EQ(victims, (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(cache().evictions(), 2u);
  EXPECT_EQ(cache().pins(4), 1u); // the loading one is untouched
  cache().loaded(4);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{2, 4}));
}

TEST_F(adapter_cache_test, evict_for_never_evicts_pinned_or_loading_even_if_the_policy_says_so) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  ASSERT_EQ(cache().acquire(1, 3.0), outcome::hit); // 1 pinned
  ASSERT_EQ(cache().acquire(3, 4.0), outcome::load); // 3 loading
  std::vector<std::vector<std::uint32_t>> script{{1, 3, 4, 0, 2}};
  policy_->script(&script);
  const auto victims = cache().evict_for(100, 5.0);
  EXPECT_EQ(victims, (std::vector<std::uint32_t>{2}));
  EXPECT_TRUE(cache().resident(1));
  EXPECT_EQ(cache().pins(1), 1u);
  EXPECT_EQ(cache().pins(3), 1u);
  cache().loaded(3);
  EXPECT_TRUE(cache().resident(3));
  EXPECT_EQ(cache().evictions(), 1u);
}

TEST_F(adapter_cache_test, evicted_adapter_loads_again_on_next_acquire) {
  make_resident(1, 1.0);
  ASSERT_EQ(cache().evict_for(1, 2.0), (std::vector<std::uint32_t>{1}));
  EXPECT_FALSE(cache().resident(1));
  EXPECT_EQ(cache().acquire(1, 3.0), outcome::load);
  EXPECT_EQ(cache().misses(), 2u);
  EXPECT_EQ(cache().hits(), 0u);
}

TEST_F(adapter_cache_test, evict_for_slot_is_a_no_op_without_max_resident) {
  for (std::uint32_t id = 1; id <= 4; ++id)
    make_resident(id, id);
  calls_.clear();
  EXPECT_TRUE(cache().evict_for_slot(10.0).empty());
  EXPECT_TRUE(calls_.empty());
  EXPECT_EQ(cache().resident_count(), 4u);
}

class adapter_cache_two_slots : public adapter_cache_test {
protected:
  adapter_cache_two_slots() : adapter_cache_test(2) {}
};

TEST_F(adapter_cache_two_slots, evict_for_slot_keeps_at_most_max_resident) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  // Within the limit: nothing to do.
  EXPECT_TRUE(cache().evict_for_slot(3.0).empty());
  // A third one starts loading (the shell calls evict_for_slot after acquire).
  ASSERT_EQ(cache().acquire(3, 4.0), outcome::load);
  EXPECT_EQ(cache().evict_for_slot(4.0), (std::vector<std::uint32_t>{1}));
  cache().loaded(3);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(cache().evictions(), 1u);
}

TEST_F(adapter_cache_two_slots, evict_for_slot_spares_pinned_and_loading_adapters) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  ASSERT_EQ(cache().acquire(1, 3.0), outcome::hit);
  ASSERT_EQ(cache().acquire(2, 3.0), outcome::hit);
  ASSERT_EQ(cache().acquire(3, 4.0), outcome::load);
  // Everything resident is pinned and 3 is loading: over the limit, but
  // nothing may go.
  EXPECT_TRUE(cache().evict_for_slot(4.0).empty());
  EXPECT_EQ(cache().pins(3), 1u);
  cache().loaded(3);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{1, 2, 3}));
  // Once 3 and 2 are unpinned, the next slot request evicts the least
  // recently used of them: 3 (released at 4.5) before 2 (released at 5.0).
  ASSERT_TRUE(cache().release(3, 4.5));
  ASSERT_TRUE(cache().release(2, 5.0));
  EXPECT_EQ(cache().evict_for_slot(6.0), (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{1, 2}));
}

TEST_F(adapter_cache_two_slots, evict_for_slot_frees_several_when_far_over) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  ASSERT_EQ(cache().acquire(3, 3.0), outcome::load);
  ASSERT_EQ(cache().acquire(4, 3.5), outcome::load);
  EXPECT_EQ(cache().evict_for_slot(4.0), (std::vector<std::uint32_t>{1, 2}));
  cache().loaded(3);
  cache().loaded(4);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{3, 4}));
  EXPECT_EQ(cache().evictions(), 2u);
}

// -- per-step table ----------------------------------------------------------------

struct cache_step {
  std::string what;
  char op; ///< a: acquire, l: loaded, f: load_failed, r: release, e: evict_for(n), s: evict_for_slot
  std::uint32_t id;  ///< adapter (or pages for 'e')
  std::string result; ///< "load"/"wait"/"hit", "true"/"false", or victims "1,3"
  std::vector<std::uint32_t> resident_after;
  std::vector<std::uint32_t> pins_after; ///< pins of adapters 1..4
  std::uint64_t hits, misses, evictions;
};

std::string str(outcome o) {
  switch (o) {
    case outcome::load:
      return "load";
    case outcome::wait:
      return "wait";
    case outcome::hit:
      return "hit";
  }
  return "?";
}

std::string str(const std::vector<std::uint32_t>& v) {
  std::string s;
  for (auto x : v)
    s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

class adapter_cache_three_slots : public adapter_cache_test {
protected:
  adapter_cache_three_slots() : adapter_cache_test(3) {}
};

TEST_F(adapter_cache_three_slots, table_of_steps) {
  const std::vector<cache_step> steps{
    {"req A wants 1", 'a', 1, "load", {}, {1, 0, 0, 0}, 0, 1, 0},
    {"req B wants 1 while loading", 'a', 1, "wait", {}, {2, 0, 0, 0}, 0, 1, 0},
    {"1 loaded", 'l', 1, "", {1}, {2, 0, 0, 0}, 0, 1, 0},
    {"req C wants 1", 'a', 1, "hit", {1}, {3, 0, 0, 0}, 1, 1, 0},
    {"req D wants 2", 'a', 2, "load", {1}, {3, 1, 0, 0}, 1, 2, 0},
    {"2 fails to load", 'f', 2, "", {1}, {3, 0, 0, 0}, 1, 2, 0},
    {"D's pin went with it", 'r', 2, "false", {1}, {3, 0, 0, 0}, 1, 2, 0},
    {"A done", 'r', 1, "true", {1}, {2, 0, 0, 0}, 1, 2, 0},
    {"B done", 'r', 1, "true", {1}, {1, 0, 0, 0}, 1, 2, 0},
    {"trim 2 pages: 1 pinned by C", 'e', 2, "", {1}, {1, 0, 0, 0}, 1, 2, 0},
    {"C done", 'r', 1, "true", {1}, {0, 0, 0, 0}, 1, 2, 0},
    {"req E wants 3", 'a', 3, "load", {1}, {0, 0, 1, 0}, 1, 3, 0},
    {"3 loaded", 'l', 3, "", {1, 3}, {0, 0, 1, 0}, 1, 3, 0},
    {"req F wants 4", 'a', 4, "load", {1, 3}, {0, 0, 1, 1}, 1, 4, 0},
    {"slot: 3 slots used, within the limit", 's', 0, "", {1, 3}, {0, 0, 1, 1}, 1, 4, 0},
    {"req G wants 2", 'a', 2, "load", {1, 3}, {0, 1, 1, 1}, 1, 5, 0},
    {"slot: 1 is the only unpinned", 's', 0, "1", {3}, {0, 1, 1, 1}, 1, 5, 1},
    {"2 loaded", 'l', 2, "", {2, 3}, {0, 1, 1, 1}, 1, 5, 1},
    {"4 loaded", 'l', 4, "", {2, 3, 4}, {0, 1, 1, 1}, 1, 5, 1},
    {"E done", 'r', 3, "true", {2, 3, 4}, {0, 1, 0, 1}, 1, 5, 1},
    {"G done", 'r', 2, "true", {2, 3, 4}, {0, 0, 0, 1}, 1, 5, 1},
    {"trim 10 pages: 3 (8) then 2 (4)", 'e', 10, "3,2", {4}, {0, 0, 0, 1}, 1, 5, 3},
    {"trim 100 pages: only pinned 4 left", 'e', 100, "", {4}, {0, 0, 0, 1}, 1, 5, 3},
    {"F done", 'r', 4, "true", {4}, {0, 0, 0, 0}, 1, 5, 3},
    {"req H wants 4", 'a', 4, "hit", {4}, {0, 0, 0, 1}, 2, 5, 3},
  };
  double now = 0;
  for (const auto& s : steps) {
    now += 1;
    auto& c = cache();
    std::string got;
    switch (s.op) {
      case 'a':
        got = str(c.acquire(s.id, now));
        break;
      case 'l':
        c.loaded(s.id);
        break;
      case 'f':
        c.load_failed(s.id);
        break;
      case 'r':
        got = c.release(s.id, now) ? "true" : "false";
        break;
      case 'e':
        got = str(c.evict_for(s.id, now));
        break;
      case 's':
        got = str(c.evict_for_slot(now));
        break;
    }
    EXPECT_EQ(got, s.result) << s.what;
    EXPECT_EQ(resident_ids(), s.resident_after) << s.what;
    std::vector<std::uint32_t> pins;
    for (std::uint32_t id = 1; id <= 4; ++id)
      pins.push_back(c.pins(id));
    EXPECT_EQ(pins, s.pins_after) << s.what;
    EXPECT_EQ(c.hits(), s.hits) << s.what;
    EXPECT_EQ(c.misses(), s.misses) << s.what;
    EXPECT_EQ(c.evictions(), s.evictions) << s.what;
    EXPECT_EQ(c.resident_count(), s.resident_after.size()) << s.what;
  }
}

} // namespace
} // namespace troupe
