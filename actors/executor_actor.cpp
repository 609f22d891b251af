#include "actors/executor_actor.hpp"

#include "runtime/clock.hpp"

#include <caf/actor_system.hpp>
#include <caf/spawn_options.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <unordered_map>

namespace troupe {

namespace {

struct pending_step {
  gpu::step_result result;
  caf::typed_response_promise<gpu::step_result> promise;
};

struct executor_state {
  static inline const char* name = "executor";
  executor_config cfg;
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, pending_step> pending;
};

using self_ptr = executor_actor::stateful_pointer<executor_state>;

executor_actor::behavior_type executor_impl(self_ptr self, executor_config cfg) {
  self->state.cfg = std::move(cfg);
  return {
    [self](run_step_atom, const std::vector<gpu::step_entry>& batch)
      -> caf::result<gpu::step_result> {
      auto& st = self->state;
      auto result = st.cfg.backend->run_step(batch);
      if (auto note = st.cfg.backend->notice(); !note.empty())
        spdlog::warn("executor: {} backend: {}", st.cfg.backend->name(), note);
      const double wall = result.device_seconds * st.cfg.time_scale;
      if (wall <= 0)
        return result;
      // Hold the reply until the simulated device time has passed.
      auto rp = self->make_response_promise<gpu::step_result>();
      const auto id = st.next_id++;
      st.pending.emplace(id, pending_step{std::move(result), rp});
      self->delayed_send(self, seconds_span(wall), tick_atom_v, id);
      return rp;
    },
    [self](tick_atom, std::uint64_t id) {
      auto i = self->state.pending.find(id);
      if (i == self->state.pending.end())
        return;
      i->second.promise.deliver(std::move(i->second.result));
      self->state.pending.erase(i);
    },
    [self](stats_atom) {
      const auto& backend = *self->state.cfg.backend;
      stat_values out;
      append_stats(out, backend.counters(), stat_kind::counter);
      append_stats(out, backend.gauges(), stat_kind::gauge);
      return out;
    },
  };
}

} // namespace

executor_actor spawn_executor(caf::actor_system& sys, executor_config cfg) {
  // A backend that computes inside the handler gets a thread of its own, so
  // a long step does not hold one of CAF's scheduler threads; the sim does
  // not, and the thread hop would cost it a quarter of its throughput.
  if (cfg.own_thread)
    return sys.spawn<caf::detached>(executor_impl, std::move(cfg));
  return sys.spawn(executor_impl, std::move(cfg));
}

} // namespace troupe
