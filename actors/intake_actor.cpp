#include "actors/intake_actor.hpp"

#include "actors/stats_gather.hpp"
#include "runtime/clock.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace troupe {

namespace {

struct intake_state {
  static inline const char* name = "intake";
  std::unique_ptr<intake_core> core;
  intake_config cfg;
};

using self_ptr = intake_actor::stateful_pointer<intake_state>;

/// Asks the scheduler to cancel; the request's `done` (or nothing, if it
/// already finished) is the answer, so the bool reply is not needed.
void cancel(self_ptr self, std::uint64_t id) {
  if (self->state.cfg.router)
    self->request(self->state.cfg.router, caf::infinite, cancel_atom_v, id)
      .then([](bool) {}, [](const caf::error&) {});
  else
    self->request(self->state.cfg.scheduler, caf::infinite, cancel_atom_v, id)
      .then([](bool) {}, [](const caf::error&) {});
}

void emit(self_ptr self, std::vector<outbound_frame> frames) {
  if (!frames.empty())
    self->state.cfg.send(std::move(frames));
}

void submit(self_ptr self, request_spec spec) {
  const auto id = spec.request_id;
  if (self->state.cfg.prefetcher && spec.adapter_id != 0)
    self->send(self->state.cfg.prefetcher, arrival_atom_v, spec.adapter_id);
  auto ok = [self, id](std::uint8_t r) {
    emit(self, self->state.core->on_submit_result(
                 id, static_cast<scheduler_core::submit_result>(r)));
    for (const auto due : self->state.core->take_due_cancels())
      cancel(self, due);
  };
  auto fail = [self, id](const caf::error& e) {
    emit(self, self->state.core->on_submit_failed(id, self->system().render(e)));
  };
  if (self->state.cfg.router)
    self->request(self->state.cfg.router, caf::infinite, submit_atom_v, std::move(spec)).then(ok, fail);
  else if (self->state.cfg.classifier)
    self->request(self->state.cfg.classifier, caf::infinite, classify_atom_v, std::move(spec))
      .then(ok, fail);
  else
    self->request(self->state.cfg.scheduler, caf::infinite, submit_atom_v, std::move(spec))
      .then(ok, fail);
}

/// Collects stats from every actor that keeps any (through the router in a
/// multi-node deployment), then replies.
void answer_stats(self_ptr self, std::string peer, std::string id) {
  auto values = std::make_shared<stat_values>();
  auto& core = *self->state.core;
  values->push_back(stat_gauge("intake_in_flight", static_cast<double>(core.in_flight())));
  values->push_back(stat_counter("intake_accepted", static_cast<double>(core.accepted())));
  values->push_back(stat_counter("intake_rejected", static_cast<double>(core.rejected())));
  const auto& cfg = self->state.cfg;
  auto sources = std::make_shared<const std::vector<stats_source>>(
    cfg.router ? stats_sources(cfg.router)
               : stats_sources(cfg.scheduler, cfg.pool, cfg.adapter_cache, cfg.copy_engine, cfg.tuner,
                               cfg.metrics, cfg.executor));
  gather_stats(
    self, sources, values,
    [self, peer, id](const stat_values& all) { emit(self, {{peer, wire::to_json(wire::stats_reply{id, all})}}); },
    [self, peer, id](const caf::error& e) {
      emit(self, {{peer, wire::to_json(wire::error_reply{
                           id, wire::error_code::internal,
                           "could not collect stats: " + self->system().render(e)})}});
    });
}

void answer_adapters(self_ptr self, std::string peer, std::string id) {
  self->request(self->state.cfg.adapter_cache, caf::infinite, list_atom_v)
    .then(
      [self, peer, id](const std::vector<adapter_status>& list) {
        wire::adapters_reply r;
        r.id = id;
        r.max_context = self->state.core->max_context();
        for (const auto& a : list)
          r.adapters.push_back({a.name, a.rank, a.resident});
        emit(self, {{peer, wire::to_json(r)}});
      },
      [self, peer, id](const caf::error& e) {
        emit(self, {{peer, wire::to_json(wire::error_reply{
                             id, wire::error_code::internal,
                             "could not list adapters: " + self->system().render(e)})}});
      });
}

void register_adapter(self_ptr self, std::string peer, std::string id, adapter_spec spec) {
  self->request(self->state.cfg.adapter_cache, caf::infinite, register_atom_v, std::move(spec))
    .then(
      [self, peer, id](const register_result& r) {
        std::variant<adapter_entry, std::string> v;
        if (r.error.empty())
          v = r.entry;
        else
          v = r.error;
        emit(self, self->state.core->on_registered(peer, id, v));
      },
      [self, peer, id](const caf::error& e) {
        emit(self, self->state.core->on_registered(
                     peer, id, std::string{"could not register: " + self->system().render(e)}));
      });
}

void unregister_adapter(self_ptr self, std::string peer, std::string id, adapter_entry entry) {
  self->request(self->state.cfg.adapter_cache, caf::infinite, unregister_atom_v, entry.id)
    .then(
      [self, peer, id, entry](const std::string& error) {
        emit(self, self->state.core->on_unregistered(peer, id, entry, error));
      },
      [self, peer, id, entry](const caf::error& e) {
        emit(self, self->state.core->on_unregistered(
                     peer, id, entry, "could not unregister: " + self->system().render(e)));
      });
}

intake_actor::behavior_type intake_impl(self_ptr self, intake_config cfg) {
  auto& st = self->state;
  st.core = std::make_unique<intake_core>(cfg.limits, cfg.catalog, cfg.backend);
  st.cfg = std::move(cfg);
  return {
    [self](frame_atom, const std::string& peer, const std::string& payload) {
      auto act = self->state.core->on_frame(peer, payload, monotonic_seconds());
      emit(self, std::move(act.replies));
      if (act.submit)
        submit(self, std::move(*act.submit));
      if (act.cancel)
        cancel(self, *act.cancel);
      if (act.register_adapter)
        register_adapter(self, peer, act.query_id, std::move(*act.register_adapter));
      if (act.unregister_adapter)
        unregister_adapter(self, peer, act.query_id, std::move(*act.unregister_adapter));
      if (act.advise) {
        auto peer_copy = peer;
        auto id = act.query_id;
        auto name = act.advise->name;
        auto answer = [self, peer_copy, id, name](std::uint8_t a) {
          static constexpr const char* names[] = {"none", "on_gpu", "fetching", "in_host", "scheduled"};
          emit(self, {{peer_copy, wire::to_json(wire::advise_reply{id, name, a < 5 ? names[a] : "none"})}});
        };
        auto failed = [self, peer_copy, id](const caf::error& e) {
          emit(self, {{peer_copy, wire::to_json(wire::error_reply{
                                    id, wire::error_code::internal,
                                    "could not pass the advisory on: " + self->system().render(e)})}});
        };
        if (self->state.cfg.router)
          self->request(self->state.cfg.router, caf::infinite, advise_atom_v, act.advise->session, act.advise->in_s)
            .then(answer, failed);
        else
          self->request(self->state.cfg.scheduler, caf::infinite, advise_atom_v, act.advise->session,
                        act.advise->in_s)
            .then(answer, failed);
      }
      switch (act.ask) {
        case intake_actions::query::none:
          break;
        case intake_actions::query::stats:
          answer_stats(self, peer, act.query_id);
          break;
        case intake_actions::query::adapters:
          answer_adapters(self, peer, act.query_id);
          break;
      }
    },
    [self](const progress_batch& batch) {
      emit(self, self->state.core->on_progress(batch));
    },
    [self](gone_atom, const std::string& peer) {
      for (auto id : self->state.core->on_peer_gone(peer))
        cancel(self, id);
    },
    [self](drain_atom) {
      self->state.core->start_drain();
      return static_cast<std::uint64_t>(self->state.core->in_flight());
    },
  };
}

} // namespace

intake_actor spawn_intake(caf::actor_system& sys, intake_config cfg) {
  return sys.spawn(intake_impl, std::move(cfg));
}

} // namespace troupe
