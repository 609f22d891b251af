#include "actors/node_actor.hpp"

#include "actors/stats_gather.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <spdlog/spdlog.h>

namespace troupe {

namespace {

struct node_state {
  static inline const char* name = "node";
  node_config cfg;
  std::uint64_t pulls = 0;
  std::uint64_t pulls_failed = 0;
};

using self_ptr = node_actor::stateful_pointer<node_state>;

/// Asks `from` for the session's cache and hands it to this node's scheduler.
caf::typed_response_promise<bool> pull(self_ptr self, std::uint64_t session, const caf::actor& from) {
  auto rp = self->make_response_promise<bool>();
  auto failed = [self, rp, session](const std::string& why) mutable {
    ++self->state.pulls_failed;
    spdlog::info("node: session {:#x} not pulled: {}", session, why);
    rp.deliver(false);
  };
  // Bounded: a request to a node that is gone is never answered.
  self->request(caf::actor_cast<node_actor>(from), self->state.cfg.node_timeout, export_atom_v, session)
    .then(
      [self, rp, failed](session_kv& kv) mutable {
        if (kv.pages == 0) {
          failed(kv.error.empty() ? "the other node has no cache of it to give now" : kv.error);
          return;
        }
        self->request(self->state.cfg.scheduler, caf::infinite, import_atom_v, std::move(kv))
          .then(
            [self, rp, failed](bool ok) mutable {
              if (!ok) {
                failed("not taken here (a cache of it is here already, or no host room)");
                return;
              }
              ++self->state.pulls;
              rp.deliver(true);
            },
            [self, failed](const caf::error& e) mutable { failed(self->system().render(e)); });
      },
      [self, failed](const caf::error& e) mutable { failed(self->system().render(e)); });
  return rp;
}

node_actor::behavior_type node_impl(self_ptr self, node_config cfg) {
  self->state.cfg = std::move(cfg);
  return {
    [self](submit_atom, request_spec& spec) -> caf::result<std::uint8_t> {
      const auto& c = self->state.cfg;
      if (c.classifier)
        return self->delegate(c.classifier, classify_atom_v, std::move(spec));
      return self->delegate(c.scheduler, submit_atom_v, std::move(spec));
    },
    [self](cancel_atom, std::uint64_t id) -> caf::result<bool> {
      return self->delegate(self->state.cfg.scheduler, cancel_atom_v, id);
    },
    [self](advise_atom, std::uint64_t session, double in_s) -> caf::result<std::uint8_t> {
      return self->delegate(self->state.cfg.scheduler, advise_atom_v, session, in_s);
    },
    [self](subscribe_atom, progress_sink_actor sink) {
      self->send(self->state.cfg.scheduler, subscribe_atom_v, std::move(sink));
    },
    [self](export_atom, std::uint64_t session) -> caf::result<session_kv> {
      return self->delegate(self->state.cfg.scheduler, export_atom_v, session);
    },
    [self](pull_atom, std::uint64_t session, const caf::actor& from) { return pull(self, session, from); },
    [self](stats_atom) {
      const auto& c = self->state.cfg;
      auto rp = self->make_response_promise<stat_values>();
      auto values = std::make_shared<stat_values>();
      values->push_back(stat_counter("node_pulls", static_cast<double>(self->state.pulls)));
      values->push_back(stat_counter("node_pulls_failed", static_cast<double>(self->state.pulls_failed)));
      auto sources = std::make_shared<const std::vector<stats_source>>(
        stats_sources(c.scheduler, c.pool, c.adapter_cache, c.copy_engine, c.tuner, c.metrics, c.executor));
      gather_stats(
        self, sources, values, [rp](const stat_values& all) mutable { rp.deliver(all); },
        [rp](const caf::error& e) mutable { rp.deliver(e); });
      return rp;
    },
  };
}

} // namespace

node_actor spawn_node(caf::actor_system& sys, node_config cfg) {
  return sys.spawn(node_impl, std::move(cfg));
}

} // namespace troupe
