#include "actors/copy_engine_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <deque>
#include <unordered_map>

namespace troupe {

namespace {

struct transfer {
  std::uint64_t bytes = 0;
  caf::typed_response_promise<double> promise;
};

struct copy_engine_state {
  static inline const char* name = "copy_engine";
  copy_engine_config cfg;
  std::uint64_t next_id = 1;
  std::uint32_t inflight = 0;
  std::deque<std::pair<std::uint64_t, transfer>> queued;
  std::unordered_map<std::uint64_t, transfer> running;
};

using self_ptr = copy_engine_actor::stateful_pointer<copy_engine_state>;

void start_next(self_ptr self) {
  auto& st = self->state;
  while (st.inflight < st.cfg.max_inflight && !st.queued.empty()) {
    auto [id, t] = std::move(st.queued.front());
    st.queued.pop_front();
    const double secs = st.cfg.transfer_seconds(t.bytes);
    const double wall = secs * st.cfg.time_scale;
    ++st.inflight;
    if (wall <= 0) {
      t.promise.deliver(secs);
      --st.inflight;
      continue;
    }
    st.running.emplace(id, std::move(t));
    self->delayed_send(self, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(wall)), tick_atom_v, id);
  }
}

copy_engine_actor::behavior_type copy_engine_impl(self_ptr self, copy_engine_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.max_inflight == 0)
    self->state.cfg.max_inflight = 1;
  return {
    [self](load_atom, std::uint32_t, std::uint64_t bytes) {
      auto rp = self->make_response_promise<double>();
      self->state.queued.emplace_back(self->state.next_id++, transfer{bytes, rp});
      start_next(self);
      return rp;
    },
    [self](tick_atom, std::uint64_t id) {
      auto& st = self->state;
      auto i = st.running.find(id);
      if (i == st.running.end())
        return;
      i->second.promise.deliver(st.cfg.transfer_seconds(i->second.bytes));
      st.running.erase(i);
      --st.inflight;
      start_next(self);
    },
  };
}

} // namespace

copy_engine_actor spawn_copy_engine(caf::actor_system& sys, copy_engine_config cfg) {
  return sys.spawn(copy_engine_impl, std::move(cfg));
}

} // namespace troupe
