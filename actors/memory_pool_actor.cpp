#include "actors/memory_pool_actor.hpp"

#include "runtime/memory_pool.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <string>

namespace troupe {

namespace {

struct memory_pool_state {
  static inline const char* name = "memory_pool";
  page_pool device{0};
  page_pool host{0};
  std::uint64_t refused_moves = 0;

  page_pool& tier(std::uint8_t t) {
    return static_cast<pool_tier>(t) == pool_tier::host ? host : device;
  }
};

void add_stats(stat_values& out, const std::string& prefix, const page_pool& p) {
  out.push_back(stat_gauge(prefix + "_pages_total", static_cast<double>(p.total_pages())));
  out.push_back(stat_gauge(prefix + "_pages_free", static_cast<double>(p.free_pages())));
  out.push_back(stat_gauge(prefix + "_pages_kv", static_cast<double>(p.used_pages(page_owner_kind::request))));
  out.push_back(stat_gauge(prefix + "_pages_hidden", static_cast<double>(p.used_pages(page_owner_kind::hidden))));
  out.push_back(stat_gauge(prefix + "_pages_adapters", static_cast<double>(p.used_pages(page_owner_kind::adapter))));
  out.push_back(stat_gauge(prefix + "_pages_low_water", static_cast<double>(p.low_water())));
  out.push_back(stat_counter(prefix + "_reservations_denied", static_cast<double>(p.denied())));
  out.push_back(stat_counter(prefix + "_empty_releases", static_cast<double>(p.empty_releases())));
}

memory_pool_actor::behavior_type
memory_pool_impl(memory_pool_actor::stateful_pointer<memory_pool_state> self,
                 std::uint64_t pages, std::uint64_t host_pages) {
  self->state.device = page_pool{pages};
  self->state.host = page_pool{host_pages};
  return {
    [self](reserve_atom, std::uint8_t tier, std::uint8_t kind, std::uint64_t owner,
           std::uint64_t n, std::uint64_t keep_free) {
      auto& pool = self->state.tier(tier);
      const page_owner o{static_cast<page_owner_kind>(kind), owner};
      if (!pool.allocate_keeping(o, n, keep_free))
        return std::vector<std::uint32_t>{};
      const auto pages = pool.pages_of(o);
      return std::vector<std::uint32_t>(pages.begin(), pages.end());
    },
    [self](release_atom, std::uint8_t tier, std::uint8_t kind, std::uint64_t owner) {
      self->state.tier(tier).release({static_cast<page_owner_kind>(kind), owner});
    },
    [self](adopt_atom, std::uint8_t tier, std::uint8_t kind, std::uint64_t from, std::uint64_t to) {
      const auto k = static_cast<page_owner_kind>(kind);
      self->state.tier(tier).transfer({k, from}, {k, to});
    },
    [self](adopt_atom, std::uint8_t tier, std::uint8_t kind, std::uint64_t from, std::uint64_t to,
           const std::vector<std::uint32_t>& pages) {
      const auto k = static_cast<page_owner_kind>(kind);
      if (!self->state.tier(tier).transfer_pages({k, from}, {k, to}, pages))
        ++self->state.refused_moves;
    },
    [self](release_atom, std::uint8_t tier, std::uint8_t kind, std::uint64_t owner,
           const std::vector<std::uint32_t>& pages) {
      if (!self->state.tier(tier).release_pages({static_cast<page_owner_kind>(kind), owner}, pages))
        ++self->state.refused_moves;
    },
    [self](stats_atom) {
      stat_values out;
      // "pool_*" is the device pool (the names clients already read).
      add_stats(out, "pool", self->state.device);
      add_stats(out, "host_pool", self->state.host);
      // Moves or frees of chosen pages naming a page their owner did not
      // hold: a bookkeeping fault (0 when all is well).
      out.push_back(stat_counter("pool_refused_page_moves", static_cast<double>(self->state.refused_moves)));
      return out;
    },
  };
}

} // namespace

memory_pool_actor spawn_memory_pool(caf::actor_system& sys, std::uint64_t pages,
                                    std::uint64_t host_pages) {
  return sys.spawn(memory_pool_impl, pages, host_pages);
}

} // namespace troupe
