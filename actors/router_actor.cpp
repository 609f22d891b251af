#include "actors/router_actor.hpp"

#include "actors/stats_gather.hpp"
#include "runtime/clock.hpp"
#include "runtime/router_core.hpp"
#include "runtime/scheduler_core.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>

namespace troupe {

namespace {

struct router_state {
  static inline const char* name = "router";
  router_config cfg;
  std::unique_ptr<router_core> core;
  std::vector<progress_sink_actor> sinks;
  std::uint64_t pulls = 0;
  std::uint64_t pulls_failed = 0;
};

using self_ptr = front_actor::stateful_pointer<router_state>;

void node_lost(self_ptr self, std::uint32_t node, const std::string& why);

caf::error no_node() {
  return caf::make_error(caf::sec::runtime_error, "no node of the deployment is reachable");
}

/// Pulls `session`'s KV from node `from` to node `to`, then calls next().
template <class Next>
void pull_then(self_ptr self, std::uint64_t session, std::int32_t from, std::int32_t to, Next next) {
  if (from < 0 || session == 0) {
    next();
    return;
  }
  auto& st = self->state;
  const auto holder = caf::actor_cast<caf::actor>(st.cfg.nodes[static_cast<std::size_t>(from)]);
  // Every request to a node is bounded (node_timeout): CAF never answers one
  // to a node that is gone.
  self->request(st.cfg.nodes[static_cast<std::size_t>(to)], st.cfg.node_timeout, pull_atom_v, session, holder)
    .then(
      [self, next](bool ok) mutable {
        ++(ok ? self->state.pulls : self->state.pulls_failed);
        next();
      },
      [self, next](const caf::error&) mutable {
        ++self->state.pulls_failed;
        next(); // the node's own loss shows in the submission
      });
}

/// An advisory acted on now: the node the turn will go to, the session's KV
/// pulled there when it is elsewhere, then the node told (`in_s` then less
/// the pull's time); done(what the node answered).
template <class Done>
void advise_now(self_ptr self, std::uint64_t session, double in_s, Done done) {
  using advice = scheduler_core::advice;
  const auto route = self->state.core->advise(session);
  if (route.node < 0) {
    done(advice::none);
    return;
  }
  const auto node = static_cast<std::uint32_t>(route.node);
  const auto sent = monotonic_seconds();
  pull_then(self, session, route.pull_from, route.node, [self, done, node, session, in_s, sent]() mutable {
    // The turn is that much nearer once the cache has come.
    const double left = std::max(0.0, in_s - (monotonic_seconds() - sent));
    self->request(self->state.cfg.nodes[node], self->state.cfg.node_timeout, advise_atom_v, session, left)
      .then([done](std::uint8_t a) mutable { done(static_cast<advice>(a)); },
            [done](const caf::error&) mutable { done(advice::none); });
  });
}

/// Submits `spec` on the node core.place chose (its KV pulled there first),
/// then answers `reply` with the scheduler's verdict. A node that cannot be
/// reached is taken as lost: its requests, this one included, go elsewhere.
template <class Reply>
void dispatch(self_ptr self, request_spec spec, Reply reply) {
  auto& st = self->state;
  const auto route = st.core->place(spec);
  if (route.node < 0) {
    reply(no_node());
    return;
  }
  const auto node = static_cast<std::uint32_t>(route.node);
  st.core->assign(spec, node);
  pull_then(self, spec.session, route.pull_from, route.node, [self, spec, node, reply]() mutable {
    const auto id = spec.request_id;
    self->request(self->state.cfg.nodes[node], self->state.cfg.node_timeout, submit_atom_v, std::move(spec))
      .then(
        [self, id, reply](std::uint8_t r) mutable {
          if (static_cast<scheduler_core::submit_result>(r) != scheduler_core::submit_result::accepted)
            self->state.core->forget(id);
          reply(r);
        },
        [self, id, node, reply](const caf::error& e) mutable {
          // The node is gone: this request was re-placed with the others.
          node_lost(self, node, self->system().render(e));
          if (self->state.core->node_of(id))
            reply(static_cast<std::uint8_t>(scheduler_core::submit_result::accepted));
          else
            reply(no_node());
        });
  });
}

void node_lost(self_ptr self, std::uint32_t node, const std::string& why) {
  auto& st = self->state;
  if (!st.core->loads()[node].alive)
    return; // known already
  auto again = st.core->on_node_down(node);
  spdlog::warn("router: node {} ({}) lost: {}; placing its {} requests again", node, st.cfg.names[node], why,
               again.size());
  for (auto& spec : again) {
    const auto id = spec.request_id;
    dispatch(self, std::move(spec), [self, id](auto r) {
      if constexpr (std::is_same_v<decltype(r), caf::error>) {
        // Nowhere left to run it: it ends with an error, once.
        spdlog::error("router: request {} lost with every node: {}", id, self->system().render(r));
        self->state.core->forget(id);
        progress_batch b;
        b.finished.push_back({id, static_cast<std::uint8_t>(finish_reason::error), 0, 0, 0, 0, 0});
        for (const auto& s : self->state.sinks)
          self->send(s, b);
      }
    });
  }
}

/// The nodes' figures added up (merge_node_stats), then the router's own.
stat_values router_stats(const router_state& st, const std::vector<stat_values>& per_node) {
  auto out = merge_node_stats(per_node);
  const auto& loads = st.core->loads();
  out.push_back(stat_gauge("router_nodes_alive", static_cast<double>(st.core->alive())));
  out.push_back(stat_counter("router_migrations", static_cast<double>(st.core->migrations())));
  out.push_back(stat_counter("router_kv_pulls", static_cast<double>(st.pulls)));
  out.push_back(stat_counter("router_kv_pulls_failed", static_cast<double>(st.pulls_failed)));
  out.push_back(stat_counter("router_resubmitted", static_cast<double>(st.core->resubmitted())));
  out.push_back(stat_counter("router_advisories_deferred", static_cast<double>(st.core->advisories_deferred())));
  out.push_back(stat_counter("router_advisories_placed_late", static_cast<double>(st.core->advisories_placed_late())));
  for (std::size_t i = 0; i < loads.size(); ++i) {
    const auto p = "node" + std::to_string(i) + "_";
    out.push_back(stat_gauge(p + "alive", loads[i].alive ? 1.0 : 0.0));
    out.push_back(stat_counter(p + "placed", static_cast<double>(loads[i].placed)));
    out.push_back(stat_gauge(p + "in_flight", static_cast<double>(loads[i].in_flight)));
  }
  return out;
}

front_actor::behavior_type router_impl(self_ptr self, router_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.core = std::make_unique<router_core>(st.cfg.nodes.size(), st.cfg.imbalance, st.cfg.adapter_affinity,
                                         st.cfg.advise_place_lead_s, st.cfg.prefix_affinity_tokens);
  for (const auto& n : st.cfg.nodes) {
    self->monitor(n);
    self->send(n, subscribe_atom_v, progress_sink_actor{caf::actor_cast<progress_sink_actor>(self)});
  }
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& nodes = self->state.cfg.nodes;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (caf::actor_cast<caf::actor_addr>(nodes[i]) == dm.source)
        node_lost(self, static_cast<std::uint32_t>(i), self->system().render(dm.reason));
  });
  return {
    [self](submit_atom, request_spec& spec) {
      auto rp = self->make_response_promise<std::uint8_t>();
      dispatch(self, std::move(spec), [rp](auto r) mutable { rp.deliver(r); });
      return rp;
    },
    [self](cancel_atom, std::uint64_t id) {
      auto rp = self->make_response_promise<bool>();
      const auto node = self->state.core->node_of(id);
      if (!node) {
        rp.deliver(false);
        return rp;
      }
      self->request(self->state.cfg.nodes[*node], self->state.cfg.node_timeout, cancel_atom_v, id)
        .then([rp](bool found) mutable { rp.deliver(found); },
              [rp](const caf::error&) mutable { rp.deliver(false); });
      return rp;
    },
    [self](advise_atom, std::uint64_t session, double in_s) {
      using advice = scheduler_core::advice;
      auto rp = self->make_response_promise<std::uint8_t>();
      if (const auto d = self->state.core->defer_advise(session, in_s)) {
        // The node is chosen nearer the turn, by the load then.
        self->delayed_send(self, seconds_span(d->delay_s), tick_atom_v, advise_atom_v, session, d->token);
        rp.deliver(static_cast<std::uint8_t>(d->held ? advice::scheduled : advice::none));
        return rp;
      }
      advise_now(self, session, in_s, [rp](advice a) mutable { rp.deliver(static_cast<std::uint8_t>(a)); });
      return rp;
    },
    [self](tick_atom, advise_atom, std::uint64_t session, std::uint64_t token) {
      auto& core = *self->state.core;
      if (core.advise_due(session, token))
        advise_now(self, session, core.advise_place_lead_s(), [](scheduler_core::advice) {});
    },
    [self](subscribe_atom, progress_sink_actor sink) { self->state.sinks.push_back(std::move(sink)); },
    [self](const progress_batch& batch) {
      auto out = self->state.core->on_progress(batch);
      if (out.tokens.empty() && out.finished.empty())
        return;
      for (const auto& s : self->state.sinks)
        self->send(s, out);
    },
    [self](stats_atom) {
      auto rp = self->make_response_promise<stat_values>();
      auto& st = self->state;
      auto per_node = std::make_shared<std::vector<stat_values>>(st.cfg.nodes.size());
      auto waiting = std::make_shared<std::size_t>(0);
      const auto& loads = st.core->loads();
      for (std::size_t i = 0; i < st.cfg.nodes.size(); ++i)
        if (loads[i].alive)
          ++*waiting;
      if (*waiting == 0) {
        rp.deliver(router_stats(st, {}));
        return rp;
      }
      for (std::size_t i = 0; i < st.cfg.nodes.size(); ++i) {
        if (!loads[i].alive)
          continue;
        auto one = [self, rp, per_node, waiting, i](stat_values v) mutable {
          (*per_node)[i] = std::move(v);
          if (--*waiting == 0)
            rp.deliver(router_stats(self->state, *per_node));
        };
        self->request(st.cfg.nodes[i], std::chrono::seconds(2), stats_atom_v)
          .then([one](const stat_values& v) mutable { one(v); },
                [self, one, i](const caf::error& e) mutable {
                  spdlog::warn("router: no stats from node {}: {}", i, self->system().render(e));
                  one({});
                });
      }
      return rp;
    },
  };
}

} // namespace

front_actor spawn_router(caf::actor_system& sys, router_config cfg) {
  return sys.spawn(router_impl, std::move(cfg));
}

} // namespace troupe
