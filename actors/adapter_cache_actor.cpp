#include "actors/adapter_cache_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/scheduler_core.hpp"
#include "runtime/transfer_queue.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace troupe {

namespace {

constexpr auto adapter_owner = static_cast<std::uint8_t>(page_owner_kind::adapter);
constexpr auto device_tier = static_cast<std::uint8_t>(pool_tier::device);

using grant = scheduler_core::adapter_grant;

struct adapter_cache_state {
  static inline const char* name = "adapter_cache";
  adapter_cache_config cfg;
  std::unique_ptr<adapter_cache> cache;
  std::unordered_map<std::uint32_t, std::vector<caf::typed_response_promise<std::uint8_t>>> waiters;
  /// Unregistered while loading: forgotten once the load settles.
  std::unordered_set<std::uint32_t> forget_after_load;
  /// Adapters holding pool pages (reserved, loading or resident).
  std::unordered_set<std::uint32_t> holding;
  std::uint64_t load_failures = 0;
  std::uint64_t loaded_bytes = 0;
  std::uint64_t prefetch_denied = 0;
};

using self_ptr = adapter_cache_actor::stateful_pointer<adapter_cache_state>;

/// Gives `id`'s pool pages back, if it holds any (each page is freed once).
void release_pages(self_ptr self, std::uint32_t id) {
  if (self->state.holding.erase(id) > 0)
    self->send(self->state.cfg.pool, release_atom_v, device_tier, adapter_owner, std::uint64_t{id});
}

/// Frees the pages of evicted adapters on the pool and the device; returns
/// how many pages that is.
std::uint64_t drop(self_ptr self, const std::vector<std::uint32_t>& victims) {
  auto& st = self->state;
  std::uint64_t pages = 0;
  for (auto id : victims) {
    release_pages(self, id);
    self->send(st.cfg.copy_engine, evict_atom_v, id);
    if (const auto* e = st.cfg.catalog.by_id(id))
      pages += e->pages;
  }
  return pages;
}

/// Drops an adapter that left the registry: its pages, device and host copies.
void forget_now(self_ptr self, std::uint32_t id) {
  auto& st = self->state;
  if (st.cache->forget(id) == adapter_cache::forget_result::forgotten)
    release_pages(self, id);
  self->send(st.cfg.copy_engine, forget_atom_v, id);
}

void settle(self_ptr self, std::uint32_t id, grant g) {
  auto& st = self->state;
  if (g == grant::granted) {
    st.cache->loaded(id);
  } else {
    if (g == grant::failed)
      ++st.load_failures;
    st.cache->load_failed(id);
    // Pages may have been granted before the failure.
    release_pages(self, id);
  }
  if (auto i = st.waiters.find(id); i != st.waiters.end()) {
    for (auto& rp : i->second)
      rp.deliver(static_cast<std::uint8_t>(g));
    st.waiters.erase(i);
  }
  if (st.forget_after_load.erase(id) > 0)
    forget_now(self, id);
}

/// Copies `e` into `pages`, the pool pages reserved for it.
void copy_in(self_ptr self, const adapter_entry& e, transfer_class kind, std::vector<std::uint32_t> pages) {
  const auto id = e.id;
  const auto bytes = e.bytes;
  transfer_order order;
  order.adapter_id = id;
  order.bytes = e.bytes;
  order.path = e.path;
  order.kind = static_cast<std::uint8_t>(kind);
  order.device_pages = std::move(pages);
  self->request(self->state.cfg.copy_engine, caf::infinite, load_atom_v, std::move(order))
    .then(
      [self, id, bytes](const transfer_report& r) {
        if (!r.error.empty()) {
          // The files are missing or corrupt: this adapter's requests fail,
          // nothing else does.
          settle(self, id, grant::failed);
          return;
        }
        self->state.loaded_bytes += bytes;
        settle(self, id, grant::granted);
      },
      [self, id](const caf::error&) { settle(self, id, grant::failed); });
}

/// Reserves pages for `id` and copies it in. A prefetch keeps the watermark
/// free and gives up quietly; a demand load evicts idle adapters once and
/// retries before answering `retry`.
void load(self_ptr self, std::uint32_t id, transfer_class kind, bool retried) {
  auto& st = self->state;
  const auto* e = st.cfg.catalog.by_id(id);
  if (e == nullptr) {
    settle(self, id, grant::failed);
    return;
  }
  const bool prefetch = kind == transfer_class::prefetch;
  const auto keep_free = prefetch ? static_cast<std::uint64_t>(std::ceil(
                           st.cfg.options.prefetch_free_fraction * static_cast<double>(st.cfg.pool_pages)))
                                  : std::uint64_t{0};
  self->request(st.cfg.pool, caf::infinite, reserve_atom_v, device_tier, adapter_owner,
                std::uint64_t{id}, e->pages, keep_free)
    .then(
      [self, id, kind, retried, prefetch, pages = e->pages](const std::vector<std::uint32_t>& got) {
        auto& st = self->state;
        const auto* e = st.cfg.catalog.by_id(id);
        if (e == nullptr) { // unregistered meanwhile
          settle(self, id, grant::failed);
          return;
        }
        if (pages == 0 || !got.empty()) {
          if (!got.empty())
            st.holding.insert(id);
          copy_in(self, *e, kind, got);
          return;
        }
        const bool demanded = st.waiters.contains(id);
        if (prefetch && !demanded) {
          ++st.prefetch_denied;
          settle(self, id, grant::retry);
          return;
        }
        if (retried) {
          settle(self, id, grant::retry);
          return;
        }
        // Make room from idle adapters, then try once more as a demand load.
        drop(self, st.cache->evict_for(pages, monotonic_seconds()));
        load(self, id, transfer_class::demand_load, true);
      },
      [self, id](const caf::error&) { settle(self, id, grant::retry); });
}

void prefetch(self_ptr self, std::uint32_t id) {
  auto& st = self->state;
  const auto* e = st.cfg.catalog.by_id(id);
  if (e == nullptr)
    return;
  if (st.cache->prefetch(id, e->pages, e->rank, monotonic_seconds()) == adapter_cache::outcome::load)
    load(self, id, transfer_class::prefetch, false);
}

adapter_cache_actor::behavior_type adapter_cache_impl(self_ptr self, adapter_cache_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.cache = std::make_unique<adapter_cache>(std::move(st.cfg.policy), st.cfg.options.max_resident,
                                             st.cfg.options.window_s);
  return {
    [self](acquire_atom, std::uint32_t id) -> caf::result<std::uint8_t> {
      auto& st = self->state;
      const auto* e = st.cfg.catalog.by_id(id);
      if (e == nullptr)
        return static_cast<std::uint8_t>(grant::failed);
      const auto now = monotonic_seconds();
      switch (st.cache->acquire(id, e->pages, e->rank, now)) {
        case adapter_cache::outcome::hit:
          return static_cast<std::uint8_t>(grant::granted);
        case adapter_cache::outcome::wait: {
          auto rp = self->make_response_promise<std::uint8_t>();
          st.waiters[id].push_back(rp);
          return rp;
        }
        case adapter_cache::outcome::load: {
          auto rp = self->make_response_promise<std::uint8_t>();
          st.waiters[id].push_back(rp);
          drop(self, st.cache->evict_idle(now));
          load(self, id, transfer_class::demand_load, false);
          return rp;
        }
      }
      return static_cast<std::uint8_t>(grant::failed);
    },
    [self](release_atom, std::uint32_t id) {
      const auto now = monotonic_seconds();
      self->state.cache->release(id, now);
      // slora drops idle adapters; max_resident trims the rest.
      drop(self, self->state.cache->evict_idle(now));
    },
    [self](trim_atom, std::uint64_t pages) {
      return drop(self, self->state.cache->evict_for(pages, monotonic_seconds()));
    },
    [self](const adapter_demand& d) {
      auto& st = self->state;
      for (std::size_t i = 0; i < d.adapter_ids.size() && i < d.waiting.size(); ++i) {
        st.cache->set_queued(d.adapter_ids[i], d.waiting[i]);
        if (st.cfg.options.prefetch && d.waiting[i] > 0)
          prefetch(self, d.adapter_ids[i]);
      }
    },
    [self](prefetch_atom, const std::vector<std::uint32_t>& ids) {
      for (auto id : ids)
        prefetch(self, id);
    },
    [self](register_atom, const adapter_spec& spec) {
      auto& st = self->state;
      adapter_spec s = spec;
      if (!s.path.empty()) {
        auto described = describe_adapter(s.name, s.path);
        if (auto* err = std::get_if<std::string>(&described))
          return register_result{{}, *err};
        if (s.rank != 0 && s.rank != std::get<adapter_spec>(described).rank)
          return register_result{{}, "rank " + std::to_string(s.rank) + " was given, but "
                                       + s.path + "/adapter_config.json says r = "
                                       + std::to_string(std::get<adapter_spec>(described).rank)};
        s.rank = std::get<adapter_spec>(described).rank;
      } else if (st.cfg.needs_files) {
        return register_result{{}, "this backend loads PEFT files: give \"path\", a directory "
                                   "holding adapter_config.json and adapter_model.safetensors"};
      } else if (s.rank == 0) {
        return register_result{{}, "without a path, \"rank\" is required"};
      }
      auto added = st.cfg.catalog.add(s);
      if (auto* err = std::get_if<std::string>(&added))
        return register_result{{}, *err};
      return register_result{std::get<adapter_entry>(added), {}};
    },
    [self](unregister_atom, std::uint32_t id) -> std::string {
      auto& st = self->state;
      const auto* e = st.cfg.catalog.by_id(id);
      if (e == nullptr)
        return "no adapter with id " + std::to_string(id);
      const auto name = e->name;
      if (st.cache->pins(id) > 0)
        return "adapter \"" + name + "\" is pinned by running requests";
      switch (st.cache->forget(id)) {
        case adapter_cache::forget_result::in_use:
          st.forget_after_load.insert(id); // loading: forget once it settles
          break;
        case adapter_cache::forget_result::forgotten:
          release_pages(self, id);
          [[fallthrough]];
        case adapter_cache::forget_result::absent:
          self->send(st.cfg.copy_engine, forget_atom_v, id);
          break;
      }
      st.cfg.catalog.remove(name);
      return {};
    },
    [self](list_atom) {
      std::vector<adapter_status> out;
      for (const auto& [id, e] : self->state.cfg.catalog.all())
        out.push_back({e.name, e.rank, self->state.cache->resident(e.id)});
      return out;
    },
    [self](stats_atom) {
      const auto& st = self->state;
      const auto& c = *st.cache;
      const double lookups = static_cast<double>(c.hits() + c.misses());
      return stat_values{
        stat_level("adapters_known", static_cast<double>(st.cfg.catalog.all().size())),
        stat_gauge("adapters_resident", static_cast<double>(c.resident_count())),
        stat_gauge("adapter_pages_resident", static_cast<double>(c.resident_pages())),
        stat_counter("adapter_cache_hits", static_cast<double>(c.hits())),
        stat_counter("adapter_cache_misses", static_cast<double>(c.misses())),
        stat_level("adapter_cache_hit_rate", lookups > 0 ? static_cast<double>(c.hits()) / lookups : 0.0),
        stat_counter("adapter_evictions", static_cast<double>(c.evictions())),
        stat_counter("adapter_prefetches", static_cast<double>(c.prefetches())),
        stat_counter("adapter_prefetch_hits", static_cast<double>(c.prefetch_hits())),
        stat_counter("adapter_prefetch_denied", static_cast<double>(st.prefetch_denied)),
        stat_counter("adapter_load_failures", static_cast<double>(st.load_failures)),
        stat_counter("adapter_loaded_bytes", static_cast<double>(st.loaded_bytes)),
      };
    },
  };
}

} // namespace

adapter_cache_actor spawn_adapter_cache(caf::actor_system& sys, adapter_cache_config cfg) {
  return sys.spawn(adapter_cache_impl, std::move(cfg));
}

} // namespace troupe
