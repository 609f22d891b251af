#include "actors/prefetcher_actor.hpp"

#include "runtime/clock.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>

namespace troupe {

namespace {

struct prefetcher_state {
  static inline const char* name = "prefetcher";
  prefetcher_config cfg;
};

using self_ptr = prefetcher_actor::stateful_pointer<prefetcher_state>;

prefetcher_actor::behavior_type prefetcher_impl(self_ptr self, prefetcher_config cfg) {
  self->state.cfg = std::move(cfg);
  const auto period = seconds_span(self->state.cfg.interval_s);
  self->delayed_send(self, period, tick_atom_v);
  return {
    [self](arrival_atom, std::uint32_t adapter_id) {
      self->state.cfg.policy->on_request(adapter_id, monotonic_seconds());
    },
    [self, period](tick_atom) {
      auto& cfg = self->state.cfg;
      auto wanted = cfg.policy->predict(monotonic_seconds(), cfg.max_per_round);
      if (!wanted.empty())
        self->send(cfg.adapter_cache, prefetch_atom_v, std::move(wanted));
      self->delayed_send(self, period, tick_atom_v);
    },
  };
}

} // namespace

prefetcher_actor spawn_prefetcher(caf::actor_system& sys, prefetcher_config cfg) {
  return sys.spawn(prefetcher_impl, std::move(cfg));
}

} // namespace troupe
