#include "actors/adapter_cache_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/memory_pool.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <unordered_map>
#include <vector>

namespace troupe {

namespace {

constexpr auto adapter_owner = static_cast<std::uint8_t>(page_owner_kind::adapter);

struct adapter_cache_state {
  static inline const char* name = "adapter_cache";
  std::shared_ptr<const adapter_catalog> catalog;
  std::unique_ptr<adapter_cache> cache;
  memory_pool_actor pool;
  copy_engine_actor copy_engine;
  std::unordered_map<std::uint32_t, std::vector<caf::typed_response_promise<bool>>> waiters;
  std::uint64_t load_failures = 0;
};

using self_ptr = adapter_cache_actor::stateful_pointer<adapter_cache_state>;

/// Frees the pages of evicted adapters; returns how many pages that is.
std::uint64_t drop(self_ptr self, const std::vector<std::uint32_t>& victims) {
  std::uint64_t pages = 0;
  for (auto id : victims) {
    self->send(self->state.pool, release_atom_v, adapter_owner, std::uint64_t{id});
    if (const auto* e = self->state.catalog->by_id(id))
      pages += e->pages;
  }
  return pages;
}

void settle(self_ptr self, std::uint32_t id, bool ok) {
  auto& st = self->state;
  if (ok) {
    st.cache->loaded(id);
  } else {
    ++st.load_failures;
    st.cache->load_failed(id);
    // Pages may have been granted before the failure.
    self->send(st.pool, release_atom_v, adapter_owner, std::uint64_t{id});
  }
  auto i = st.waiters.find(id);
  if (i == st.waiters.end())
    return;
  for (auto& rp : i->second)
    rp.deliver(ok);
  st.waiters.erase(i);
}

void copy_in(self_ptr self, std::uint32_t id) {
  const auto* e = self->state.catalog->by_id(id);
  self->request(self->state.copy_engine, caf::infinite, load_atom_v, id, e->bytes)
    .then([self, id](double) { settle(self, id, true); },
          [self, id](const caf::error&) { settle(self, id, false); });
}

void load(self_ptr self, std::uint32_t id, bool retried) {
  const auto* e = self->state.catalog->by_id(id);
  self->request(self->state.pool, caf::infinite, reserve_atom_v, adapter_owner,
                std::uint64_t{id}, e->pages)
    .then(
      [self, id, retried, pages = e->pages](const std::vector<std::uint32_t>& got) {
        if (pages == 0 || !got.empty()) {
          copy_in(self, id);
          return;
        }
        if (retried) {
          settle(self, id, false);
          return;
        }
        // Make room from idle adapters, then try once more.
        drop(self, self->state.cache->evict_for(pages, monotonic_seconds()));
        load(self, id, true);
      },
      [self, id](const caf::error&) { settle(self, id, false); });
}

adapter_cache_actor::behavior_type adapter_cache_impl(self_ptr self, adapter_cache_config cfg) {
  auto& st = self->state;
  st.catalog = cfg.catalog;
  st.cache = std::make_unique<adapter_cache>(*st.catalog, std::move(cfg.policy), cfg.max_resident);
  st.pool = cfg.pool;
  st.copy_engine = cfg.copy_engine;
  return {
    [self](acquire_atom, std::uint32_t id) -> caf::result<bool> {
      auto& st = self->state;
      if (st.catalog->by_id(id) == nullptr)
        return false;
      const auto now = monotonic_seconds();
      switch (st.cache->acquire(id, now)) {
        case adapter_cache::outcome::hit:
          return true;
        case adapter_cache::outcome::wait: {
          auto rp = self->make_response_promise<bool>();
          st.waiters[id].push_back(rp);
          return rp;
        }
        case adapter_cache::outcome::load: {
          auto rp = self->make_response_promise<bool>();
          st.waiters[id].push_back(rp);
          drop(self, st.cache->evict_for_slot(now));
          load(self, id, false);
          return rp;
        }
      }
      return false;
    },
    [self](release_atom, std::uint32_t id) {
      const auto now = monotonic_seconds();
      self->state.cache->release(id, now);
      // Adapters over max_resident that were pinned when loaded go now.
      drop(self, self->state.cache->evict_for_slot(now));
    },
    [self](trim_atom, std::uint64_t pages) {
      return drop(self, self->state.cache->evict_for(pages, monotonic_seconds()));
    },
    [self](list_atom) {
      std::vector<adapter_status> out;
      for (const auto& e : self->state.catalog->all())
        out.push_back({e.name, e.rank, self->state.cache->resident(e.id)});
      return out;
    },
    [self](stats_atom) {
      const auto& c = *self->state.cache;
      return stat_values{
        {"adapters_known", static_cast<double>(self->state.catalog->all().size())},
        {"adapters_resident", static_cast<double>(c.resident_count())},
        {"adapter_cache_hits", static_cast<double>(c.hits())},
        {"adapter_cache_misses", static_cast<double>(c.misses())},
        {"adapter_evictions", static_cast<double>(c.evictions())},
        {"adapter_load_failures", static_cast<double>(self->state.load_failures)},
      };
    },
  };
}

} // namespace

adapter_cache_actor spawn_adapter_cache(caf::actor_system& sys, adapter_cache_config cfg) {
  return sys.spawn(adapter_cache_impl, std::move(cfg));
}

} // namespace troupe
