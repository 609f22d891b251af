// The adapter cache actor with the memory pool and copy engine actors, on
// CAF's deterministic scheduler, over a backend whose copies each take a
// modelled second: an absent adapter is copied in once for everyone asking
// and granted when the copy is done; a failed load fails its waiters and
// gives its pages back; room for a new adapter comes from idle adapters,
// never pinned ones; an adapter requests wait for stays registered, and one
// unregistered while prefetching is forgotten once its load settles. Every
// page is given back once (the pool counts releases of pages no one held).
#include "actors/adapter_cache_actor.hpp"
#include "actors/copy_engine_actor.hpp"
#include "actors/memory_pool_actor.hpp"

#include "policies/registry.hpp"
#include "runtime/scheduler_core.hpp"
#include "tests/support/actor_fixture.hpp"
#include "tests/support/scripted_backend.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::scripted_backend;
using grant = scheduler_core::adapter_grant;

class adapter_cache_actor_test : public testing::actor_fixture {
protected:
  adapter_cache_actor_test() { backend->copy_seconds = 1.0; }

  /// A cache over a pool of `pages` pages; an adapter of rank r takes r / 8
  /// pages of 1000 bytes. The adapters get ids 1, 2, ... in order.
  void start(std::uint64_t pages, const std::vector<adapter_spec>& adapters) {
    pool = spawn_memory_pool(sys(), pages);
    adapter_cache_config c;
    c.catalog = adapter_catalog(adapters, adapter_generate_options{}, [](std::uint32_t r) { return r * 125ull; },
                                1000);
    c.policy = policies::make_eviction_policy("lru");
    c.options.prefetch = false;
    c.pool_pages = pages;
    c.pool = pool;
    c.copy_engine = spawn_copy_engine(sys(), {backend, 1.0, false, 4});
    cache = spawn_adapter_cache(sys(), std::move(c));
  }
  void acquire(std::uint32_t id) { self->send(cache, acquire_atom_v, id); }
  void release(std::uint32_t id) { self->send(cache, release_atom_v, id); }
  /// The grants waiting for `self`.
  std::vector<grant> grants() {
    std::vector<grant> out;
    while (auto g = receive_now<std::uint8_t>())
      out.push_back(static_cast<grant>(*g));
    return out;
  }
  double pool_stat(const std::string& name) { return stat(pool, name); }

  std::shared_ptr<scripted_backend> backend = std::make_shared<scripted_backend>();
  memory_pool_actor pool;
  adapter_cache_actor cache;
};

TEST_F(adapter_cache_actor_test, an_absent_adapter_is_copied_once_for_all_who_ask_and_granted_when_it_is_in) {
  start(8, {{"a", 16, ""}});
  acquire(1);
  acquire(1);
  run();
  EXPECT_EQ(backend->calls, std::vector<std::string>{"load 1"});
  EXPECT_TRUE(grants().empty());
  EXPECT_EQ(pool_stat("pool_pages_adapters"), 2);
  advance(1s);
  EXPECT_EQ(grants(), (std::vector<grant>{grant::granted, grant::granted}));
  acquire(1); // resident now: a hit, at once
  run();
  EXPECT_EQ(grants(), std::vector<grant>{grant::granted});
  EXPECT_EQ(stat(cache, "adapter_cache_hits"), 1);
  EXPECT_EQ(backend->calls, std::vector<std::string>{"load 1"});
}

TEST_F(adapter_cache_actor_test, a_failed_load_fails_everyone_waiting_and_gives_its_pages_back) {
  backend->failing = {1};
  start(8, {{"a", 16, ""}});
  acquire(1);
  acquire(1);
  run();
  EXPECT_EQ(grants(), (std::vector<grant>{grant::failed, grant::failed}));
  EXPECT_EQ(stat(cache, "adapter_load_failures"), 1);
  EXPECT_EQ(pool_stat("pool_pages_free"), 8);
  EXPECT_EQ(pool_stat("pool_empty_releases"), 0);
}

TEST_F(adapter_cache_actor_test, room_for_a_new_adapter_comes_from_idle_adapters_never_from_pinned_ones) {
  start(3, {{"a", 16, ""}, {"b", 16, ""}}); // room for one of them
  acquire(1);
  run();
  advance(1s);
  EXPECT_EQ(grants(), std::vector<grant>{grant::granted});
  acquire(2); // a is pinned: b must wait its turn
  run();
  EXPECT_EQ(grants(), std::vector<grant>{grant::retry});
  EXPECT_EQ(backend->calls, std::vector<std::string>{"load 1"});
  release(1); // a idles, still resident
  acquire(2);
  run();
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"load 1", "drop 1", "load 2"}));
  advance(1s);
  EXPECT_EQ(grants(), std::vector<grant>{grant::granted});
  EXPECT_EQ(pool_stat("pool_pages_adapters"), 2);
  EXPECT_EQ(pool_stat("pool_empty_releases"), 0);
  EXPECT_EQ(stat(cache, "adapter_evictions"), 1);
}

TEST_F(adapter_cache_actor_test, an_adapter_requests_wait_for_stays_registered) {
  start(8, {{"a", 16, ""}});
  acquire(1);
  run();
  self->send(cache, unregister_atom_v, std::uint32_t{1});
  run();
  const auto why = receive_now<std::string>();
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("pinned by running requests"), std::string::npos) << *why;
  advance(1s);
  EXPECT_EQ(grants(), std::vector<grant>{grant::granted});
  EXPECT_EQ(stat(cache, "adapters_known"), 1);
}

TEST_F(adapter_cache_actor_test, an_adapter_unregistered_while_prefetching_is_forgotten_once_its_load_settles) {
  start(8, {{"a", 16, ""}});
  self->send(cache, prefetch_atom_v, std::vector<std::uint32_t>{1});
  run();
  EXPECT_EQ(backend->calls, std::vector<std::string>{"load 1"});
  self->send(cache, unregister_atom_v, std::uint32_t{1});
  run();
  EXPECT_EQ(receive_now<std::string>(), std::optional<std::string>{""});
  EXPECT_EQ(backend->calls, std::vector<std::string>{"load 1"}); // not forgotten mid-copy
  EXPECT_EQ(stat(cache, "adapters_known"), 0);
  advance(1s);
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"load 1", "forget 1"}));
  EXPECT_EQ(pool_stat("pool_pages_free"), 8);
  EXPECT_EQ(pool_stat("pool_empty_releases"), 0);
}

} // namespace
} // namespace troupe
