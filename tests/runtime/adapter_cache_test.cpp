// Tests for runtime/adapter_cache: the cache core (acquire outcomes, loads, pins, failed loads, eviction by the policy and
// by max_resident, counters), with a recording mock eviction policy and a
// table of per-step cache states.
#include "runtime/adapter_cache.hpp"
#include "runtime/adapter_registry.hpp"
#include "runtime/memory_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
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
      cache_ = std::make_unique<adapter_cache>(std::move(p), max_resident_);
    }
    return *cache_;
  }

  /// acquire + loaded + release: resident, unpinned, last used at `t`.
  void make_resident(std::uint32_t id, double t) {
    ASSERT_EQ(acq(id, t), outcome::load);
    cache().loaded(id);
    ASSERT_TRUE(cache().release(id, t));
  }

  /// acquire() with the catalog's size of `id`.
  outcome acq(std::uint32_t id, double t) {
    const auto* e = catalog_.by_id(id);
    return cache().acquire(id, e ? e->pages : 0, e ? e->rank : 0, t);
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
  EXPECT_EQ(acq(1, 1.0), outcome::load);
  EXPECT_FALSE(c.resident(1)); // loading is not resident
  EXPECT_EQ(c.resident_count(), 0u);
  EXPECT_EQ(c.pins(1), 1u);
  EXPECT_EQ(acq(1, 2.0), outcome::wait);
  EXPECT_EQ(acq(1, 3.0), outcome::wait);
  EXPECT_EQ(c.pins(1), 3u);
  c.loaded(1);
  EXPECT_TRUE(c.resident(1));
  EXPECT_EQ(c.resident_count(), 1u);
  EXPECT_EQ(c.pins(1), 3u); // pins taken while loading hold
  EXPECT_EQ(acq(1, 4.0), outcome::hit);
  EXPECT_EQ(c.pins(1), 4u);
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(c.misses(), 1u);
  EXPECT_EQ(c.evictions(), 0u);
}

TEST_F(adapter_cache_test, release_unpins_once_per_pin) {
  auto& c = cache();
  EXPECT_FALSE(c.release(1, 0.0)); // never acquired
  ASSERT_EQ(acq(1, 1.0), outcome::load);
  c.loaded(1);
  ASSERT_EQ(acq(1, 2.0), outcome::hit);
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
  ASSERT_EQ(acq(2, 1.0), outcome::load);
  ASSERT_EQ(acq(2, 1.5), outcome::wait);
  c.load_failed(2);
  EXPECT_FALSE(c.resident(2));
  EXPECT_EQ(c.pins(2), 0u);
  EXPECT_FALSE(c.release(2, 2.0)); // the pins are gone with it
  // A later acquire starts a fresh load.
  EXPECT_EQ(acq(2, 3.0), outcome::load);
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
  ASSERT_EQ(acq(2, 4.0), outcome::hit); // 2 pinned
  ASSERT_EQ(acq(4, 5.0), outcome::load); // 4 loading
  calls_.clear();
  const auto victims = cache().evict_for(9, 6.0);
  ASSERT_EQ(calls_.size(), 1u);
  EXPECT_EQ(calls_[0].pages_needed, 9u);
  EXPECT_EQ(calls_[0].now_s, 6.0);
  // The policy sees the evictable adapters (idle and resident: pinned and
  // loading ones excluded) with pages, rank, uses, window uses and last use.
  auto seen = calls_[0].resident;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].adapter_id, 1u);
  EXPECT_EQ(seen[0].pages, 2u);
  EXPECT_EQ(seen[0].rank, 8u);
  EXPECT_EQ(seen[0].pins, 0u);
  EXPECT_EQ(seen[0].uses, 1u);
  EXPECT_EQ(seen[0].window_uses, 1.0);
  EXPECT_EQ(seen[0].last_used_s, 1.0);
  EXPECT_EQ(seen[0].queued, 0u);
  EXPECT_EQ(seen[1].adapter_id, 3u);
  EXPECT_EQ(seen[1].pages, 8u);
  EXPECT_EQ(seen[1].rank, 32u);
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
  ASSERT_EQ(acq(1, 3.0), outcome::hit); // 1 pinned
  ASSERT_EQ(acq(3, 4.0), outcome::load); // 3 loading
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
  EXPECT_EQ(acq(1, 3.0), outcome::load);
  EXPECT_EQ(cache().misses(), 2u);
  EXPECT_EQ(cache().hits(), 0u);
}

TEST_F(adapter_cache_test, evict_idle_is_a_no_op_without_max_resident) {
  for (std::uint32_t id = 1; id <= 4; ++id)
    make_resident(id, id);
  calls_.clear();
  EXPECT_TRUE(cache().evict_idle(10.0).empty());
  EXPECT_TRUE(calls_.empty());
  EXPECT_EQ(cache().resident_count(), 4u);
}

class adapter_cache_two_slots : public adapter_cache_test {
protected:
  adapter_cache_two_slots() : adapter_cache_test(2) {}
};

TEST_F(adapter_cache_two_slots, evict_idle_keeps_at_most_max_resident) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  // Within the limit: nothing to do.
  EXPECT_TRUE(cache().evict_idle(3.0).empty());
  // A third one starts loading (the shell calls evict_idle after acquire).
  ASSERT_EQ(acq(3, 4.0), outcome::load);
  EXPECT_EQ(cache().evict_idle(4.0), (std::vector<std::uint32_t>{1}));
  cache().loaded(3);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(cache().evictions(), 1u);
}

TEST_F(adapter_cache_two_slots, evict_idle_spares_pinned_and_loading_adapters) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  ASSERT_EQ(acq(1, 3.0), outcome::hit);
  ASSERT_EQ(acq(2, 3.0), outcome::hit);
  ASSERT_EQ(acq(3, 4.0), outcome::load);
  // Everything resident is pinned and 3 is loading: over the limit, but
  // nothing may go.
  EXPECT_TRUE(cache().evict_idle(4.0).empty());
  EXPECT_EQ(cache().pins(3), 1u);
  cache().loaded(3);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{1, 2, 3}));
  // Once 3 and 2 are unpinned, the next slot request evicts the least
  // recently used of them: 3 (released at 4.5) before 2 (released at 5.0).
  ASSERT_TRUE(cache().release(3, 4.5));
  ASSERT_TRUE(cache().release(2, 5.0));
  EXPECT_EQ(cache().evict_idle(6.0), (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{1, 2}));
}

TEST_F(adapter_cache_two_slots, evict_idle_frees_several_when_far_over) {
  make_resident(1, 1.0);
  make_resident(2, 2.0);
  ASSERT_EQ(acq(3, 3.0), outcome::load);
  ASSERT_EQ(acq(4, 3.5), outcome::load);
  EXPECT_EQ(cache().evict_idle(4.0), (std::vector<std::uint32_t>{1, 2}));
  cache().loaded(3);
  cache().loaded(4);
  EXPECT_EQ(resident_ids(), (std::vector<std::uint32_t>{3, 4}));
  EXPECT_EQ(cache().evictions(), 2u);
}

// -- per-step table ----------------------------------------------------------------

struct cache_step {
  std::string what;
  char op; ///< a: acquire, l: loaded, f: load_failed, r: release, e: evict_for(n), s: evict_idle
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
        got = str(acq(s.id, now));
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
        got = str(c.evict_idle(now));
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

// -- tiers, idle eviction, prefetch, forget, frequency window -------------------------

/// A cache over a real policy from the catalog's four adapters.
struct real_cache {
  explicit real_cache(std::unique_ptr<policies::eviction_policy> p, std::uint32_t max_resident = 0,
                      double window_s = 300)
    : cache(std::move(p), max_resident, window_s) {}
  outcome acq(std::uint32_t id, double t) {
    const auto* e = catalog.by_id(id);
    return cache.acquire(id, e->pages, e->rank, t);
  }
  void resident(std::uint32_t id, double t) {
    ASSERT_EQ(acq(id, t), outcome::load);
    cache.loaded(id);
    ASSERT_TRUE(cache.release(id, t));
  }
  adapter_catalog catalog = four_adapters();
  adapter_cache cache;
};

TEST(adapter_cache_tiers, queued_adapters_go_only_when_the_others_do_not_free_enough) {
  real_cache r{std::make_unique<policies::lru_eviction_policy>()};
  r.resident(1, 1); // 2 pages, oldest, queued
  r.resident(2, 2); // 4 pages
  r.resident(3, 3); // 8 pages, queued
  r.cache.set_queued(1, 2);
  r.cache.set_queued(3, 1);
  EXPECT_EQ(r.cache.evict_for(4, 10), (std::vector<std::uint32_t>{2})) << "unqueued 2 covers it";
  EXPECT_EQ(r.cache.evict_for(1, 11), (std::vector<std::uint32_t>{1})) << "then queued ones, by the policy";
  r.cache.set_queued(3, 0);
  r.resident(4, 12);
  EXPECT_EQ(r.cache.evict_for(20, 13), (std::vector<std::uint32_t>{3, 4}));
  EXPECT_EQ(r.cache.resident_pages(), 0u);
  EXPECT_EQ(r.cache.evictions(), 4u);
}

TEST(adapter_cache_tiers, slora_drops_idle_unqueued_adapters_at_once) {
  real_cache r{std::make_unique<policies::slora_eviction_policy>()};
  ASSERT_EQ(r.acq(1, 1), outcome::load);
  r.cache.loaded(1);
  ASSERT_EQ(r.acq(2, 1), outcome::load);
  r.cache.loaded(2);
  EXPECT_TRUE(r.cache.evict_idle(2).empty()) << "both pinned";
  r.cache.release(1, 3);
  r.cache.release(2, 3);
  r.cache.set_queued(2, 1);
  EXPECT_EQ(r.cache.evict_idle(4), (std::vector<std::uint32_t>{1})) << "2 is wanted by the queue";
  r.cache.set_queued(2, 0);
  EXPECT_EQ(r.cache.evict_idle(5), (std::vector<std::uint32_t>{2}));
  // lru keeps idle adapters (Chameleon's cache).
  real_cache l{std::make_unique<policies::lru_eviction_policy>()};
  l.resident(1, 1);
  EXPECT_TRUE(l.cache.evict_idle(2).empty());
  EXPECT_TRUE(l.cache.resident(1));
}

TEST(adapter_cache_tiers, max_resident_trims_idle_adapters_by_the_policy) {
  real_cache r{std::make_unique<policies::lru_eviction_policy>(), 2};
  r.resident(1, 1);
  r.resident(2, 2);
  ASSERT_EQ(r.acq(3, 3), outcome::load); // three held now
  EXPECT_EQ(r.cache.evict_idle(3), (std::vector<std::uint32_t>{1}));
  r.cache.loaded(3);
  EXPECT_EQ(r.cache.resident_ids(), (std::vector<std::uint32_t>{2, 3}));
}

TEST(adapter_cache_prefetch, brings_an_adapter_in_without_a_pin_or_a_counted_use) {
  real_cache r{std::make_unique<policies::lru_eviction_policy>()};
  const auto* e = r.catalog.by_id(3);
  EXPECT_EQ(r.cache.prefetch(3, e->pages, e->rank, 1), outcome::load);
  EXPECT_EQ(r.cache.prefetch(3, e->pages, e->rank, 1), outcome::wait);
  EXPECT_EQ(r.cache.pins(3), 0u);
  EXPECT_EQ(r.cache.resident_pages(), 8u) << "loading pages are held";
  EXPECT_EQ(r.cache.evict_for(100, 2), std::vector<std::uint32_t>{}) << "loading: not evictable";
  EXPECT_EQ(r.cache.prefetches(), 0u) << "counted once loaded";
  r.cache.loaded(3);
  EXPECT_EQ(r.cache.prefetch(3, e->pages, e->rank, 2), outcome::hit);
  EXPECT_EQ(r.cache.prefetches(), 1u);
  EXPECT_EQ(r.cache.hits() + r.cache.misses(), 0u);
  EXPECT_EQ(r.acq(3, 3), outcome::hit);
  EXPECT_EQ(r.cache.prefetch_hits(), 1u);
  r.cache.release(3, 4);
  EXPECT_EQ(r.acq(3, 5), outcome::hit);
  EXPECT_EQ(r.cache.prefetch_hits(), 1u) << "only the first use counts";
  // A failed prefetch leaves nothing behind.
  EXPECT_EQ(r.cache.prefetch(4, 16, 64, 6), outcome::load);
  r.cache.load_failed(4);
  EXPECT_FALSE(r.cache.loading(4));
  EXPECT_EQ(r.cache.resident_pages(), 8u);
}

TEST(adapter_cache_forget, refuses_in_use_and_drops_usage_otherwise) {
  real_cache r{std::make_unique<policies::lfu_eviction_policy>()};
  EXPECT_EQ(r.cache.forget(1), adapter_cache::forget_result::absent);
  ASSERT_EQ(r.acq(1, 1), outcome::load);
  EXPECT_EQ(r.cache.forget(1), adapter_cache::forget_result::in_use) << "loading and pinned";
  r.cache.loaded(1);
  EXPECT_EQ(r.cache.forget(1), adapter_cache::forget_result::in_use) << "pinned";
  r.cache.release(1, 2);
  EXPECT_EQ(r.cache.window_uses(1, 2), 1.0);
  EXPECT_EQ(r.cache.forget(1), adapter_cache::forget_result::forgotten);
  EXPECT_FALSE(r.cache.resident(1));
  EXPECT_EQ(r.cache.window_uses(1, 2), 0.0);
  EXPECT_EQ(r.cache.resident_pages(), 0u);
}

TEST(adapter_cache_window, counts_uses_within_the_window_and_survives_eviction) {
  real_cache r{std::make_unique<policies::lfu_eviction_policy>(), 0, 160}; // buckets of 10 s
  for (double t : {1.0, 2.0, 50.0, 155.0}) {
    r.acq(1, t);
    r.cache.loaded(1);
    r.cache.release(1, t);
  }
  EXPECT_EQ(r.cache.window_uses(1, 155), 4.0);
  EXPECT_EQ(r.cache.window_uses(1, 165), 2.0) << "the uses at 1 and 2 s fell out";
  EXPECT_EQ(r.cache.window_uses(1, 215), 1.0);
  EXPECT_EQ(r.cache.window_uses(1, 400), 0.0);
  EXPECT_EQ(r.cache.evict_for(1, 160), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(r.cache.window_uses(1, 160), 2.0) << "history outlives residency";
}

/// Random operations against a real page pool, for every built-in policy:
/// nothing pinned or loading is evicted, pages are conserved, nothing is
/// freed twice, and pins match the driver's own count.
TEST(adapter_cache_invariants, randomised_against_a_page_pool) {
  const char* names[] = {"lru", "lfu", "slora", "chameleon", "fairshare"};
  for (const char* name : names) {
    for (unsigned seed : {1u, 2u}) {
      SCOPED_TRACE(std::string{name} + " seed " + std::to_string(seed));
      std::unique_ptr<policies::eviction_policy> p;
      if (std::string{name} == "lru")
        p = std::make_unique<policies::lru_eviction_policy>();
      else if (std::string{name} == "lfu")
        p = std::make_unique<policies::lfu_eviction_policy>();
      else if (std::string{name} == "slora")
        p = std::make_unique<policies::slora_eviction_policy>();
      else
        p = std::make_unique<policies::score_eviction_policy>(
          name, std::string{name} == "chameleon" ? policies::score_weights{}
                                                 : policies::score_weights{1, 1, 1});
      adapter_cache cache{std::move(p), seed == 2 ? 4u : 0u, 50};
      page_pool pool{120};
      std::mt19937 rng{seed};
      const std::uint32_t adapters = 12;
      auto pages_of = [](std::uint32_t id) { return std::uint64_t{1} + id % 7; };
      std::map<std::uint32_t, std::uint32_t> pins;      // driver's count
      std::map<std::uint32_t, bool> loading, resident;  // driver's view
      double now = 0;
      auto free_victims = [&](const std::vector<std::uint32_t>& victims) {
        for (auto v : victims) {
          ASSERT_EQ(pins[v], 0u) << "evicted a pinned adapter " << v;
          ASSERT_FALSE(loading[v]) << "evicted a loading adapter " << v;
          ASSERT_TRUE(resident[v]) << "evicted a non-resident adapter " << v;
          ASSERT_EQ(pool.release({page_owner_kind::adapter, v}), pages_of(v)) << "freed twice?";
          resident[v] = false;
        }
      };
      auto start_load = [&](std::uint32_t id) {
        if (pool.allocate({page_owner_kind::adapter, id}, pages_of(id))) {
          loading[id] = true;
          return;
        }
        free_victims(cache.evict_for(pages_of(id), now));
        if (pool.allocate({page_owner_kind::adapter, id}, pages_of(id))) {
          loading[id] = true;
          return;
        }
        // No room: the load fails; the pins taken on it go.
        cache.load_failed(id);
        pins[id] = 0;
      };
      for (int op = 0; op < 3000; ++op) {
        now += 0.5;
        const std::uint32_t id = 1 + rng() % adapters;
        switch (rng() % 9) {
          case 0:
          case 1: {
            const auto o = cache.acquire(id, pages_of(id), 8, now);
            ++pins[id];
            if (o == outcome::load)
              start_load(id);
            break;
          }
          case 2: {
            const auto o = cache.prefetch(id, pages_of(id), 8, now);
            if (o == outcome::load)
              start_load(id);
            break;
          }
          case 3:
            if (loading[id]) {
              cache.loaded(id);
              loading[id] = false;
              resident[id] = true;
            }
            break;
          case 4:
            if (loading[id] && rng() % 4 == 0) {
              cache.load_failed(id);
              ASSERT_EQ(pool.release({page_owner_kind::adapter, id}), pages_of(id));
              loading[id] = false;
              pins[id] = 0;
            }
            break;
          case 5:
            if (pins[id] > 0 && !loading[id]) {
              ASSERT_TRUE(cache.release(id, now));
              --pins[id];
              free_victims(cache.evict_idle(now));
            } else if (pins[id] == 0) {
              ASSERT_FALSE(cache.release(id, now)) << "released a pin it never had";
            }
            break;
          case 6:
            free_victims(cache.evict_for(1 + rng() % 20, now));
            break;
          case 7:
            cache.set_queued(id, rng() % 3);
            break;
          case 8:
            if (rng() % 8 == 0) {
              const auto r = cache.forget(id);
              if (r == adapter_cache::forget_result::forgotten) {
                ASSERT_EQ(pins[id], 0u);
                ASSERT_FALSE(loading[id]);
                ASSERT_EQ(pool.release({page_owner_kind::adapter, id}), pages_of(id));
                resident[id] = false;
              } else if (r == adapter_cache::forget_result::in_use) {
                ASSERT_TRUE(pins[id] > 0 || loading[id]);
              }
            }
            break;
        }
        // Pages are conserved and the cache's count matches the pool's.
        ASSERT_EQ(pool.free_pages() + pool.used_pages(page_owner_kind::adapter), pool.total_pages());
        ASSERT_EQ(pool.used_pages(page_owner_kind::adapter), cache.resident_pages());
        for (std::uint32_t a = 1; a <= adapters; ++a) {
          ASSERT_EQ(cache.pins(a), pins[a]) << "adapter " << a;
          ASSERT_EQ(cache.resident(a), resident[a]) << "adapter " << a;
        }
      }
      EXPECT_EQ(pool.empty_releases(), 0u) << "something was released twice";
    }
  }
}

} // namespace
} // namespace troupe
