#include "actors/memory_pool_actor.hpp"

#include "runtime/memory_pool.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace troupe {

namespace {

struct memory_pool_state {
  static inline const char* name = "memory_pool";
  page_pool pool{0};
  std::uint64_t denied = 0;
};

memory_pool_actor::behavior_type
memory_pool_impl(memory_pool_actor::stateful_pointer<memory_pool_state> self,
                 std::uint64_t pages) {
  self->state.pool = page_pool{pages};
  return {
    [self](reserve_atom, std::uint8_t kind, std::uint64_t owner, std::uint64_t n) {
      const page_owner o{static_cast<page_owner_kind>(kind), owner};
      if (!self->state.pool.allocate(o, n)) {
        ++self->state.denied;
        return std::vector<std::uint32_t>{};
      }
      const auto pages = self->state.pool.pages_of(o);
      return std::vector<std::uint32_t>(pages.begin(), pages.end());
    },
    [self](release_atom, std::uint8_t kind, std::uint64_t owner) {
      self->state.pool.release({static_cast<page_owner_kind>(kind), owner});
    },
    [self](stats_atom) {
      const auto& p = self->state.pool;
      return stat_values{
        {"pool_pages_total", static_cast<double>(p.total_pages())},
        {"pool_pages_free", static_cast<double>(p.free_pages())},
        {"pool_pages_kv", static_cast<double>(p.used_pages(page_owner_kind::request))},
        {"pool_pages_adapters", static_cast<double>(p.used_pages(page_owner_kind::adapter))},
        {"pool_reservations_denied", static_cast<double>(self->state.denied)},
      };
    },
  };
}

} // namespace

memory_pool_actor spawn_memory_pool(caf::actor_system& sys, std::uint64_t pages) {
  return sys.spawn(memory_pool_impl, pages);
}

} // namespace troupe
