#include "actors/queue_tuner_actor.hpp"

#include "policies/queue_tuner.hpp"
#include "runtime/clock.hpp"
#include "runtime/tuner_params.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <deque>

namespace troupe {

namespace {

struct queue_tuner_state {
  static inline const char* name = "queue_tuner";
  queue_tuner_config cfg;
  std::deque<policies::tuner_sample> samples; // arrival order
  std::uint64_t tunings = 0;
  policies::queue_tuning last;
  classifier_actor classifier;
};

using self_ptr = queue_tuner_actor::stateful_pointer<queue_tuner_state>;

queue_tuner_actor::behavior_type queue_tuner_impl(self_ptr self, queue_tuner_config cfg) {
  self->state.cfg = std::move(cfg);
  const auto period = seconds_span(self->state.cfg.options.period_s);
  self->delayed_send(self, period, tick_atom_v);
  return {
    [self](const wrs_sample& s) {
      auto& st = self->state;
      st.samples.push_back({s.arrival_s, s.wrs, s.cost_tokens,
                            (s.predicted_tokens + 1) * st.cfg.options.iteration_s});
    },
    [self, period](tick_atom) {
      auto& st = self->state;
      const auto& o = st.cfg.options;
      const double now = monotonic_seconds();
      while (!st.samples.empty() && st.samples.front().arrival_s < now - o.window_s)
        st.samples.pop_front();
      const auto p = tuner_params_of(o, st.cfg.total_tokens);
      const std::vector<policies::tuner_sample> window(st.samples.begin(), st.samples.end());
      if (!window.empty()) {
        st.last = policies::tune_queues(window, p);
        ++st.tunings;
        if (st.classifier)
          self->send(st.classifier, st.last);
        self->send(st.cfg.scheduler, st.last);
      }
      self->delayed_send(self, period, tick_atom_v);
    },
    [self](subscribe_atom, const caf::actor& classifier) {
      self->state.classifier = caf::actor_cast<classifier_actor>(classifier);
    },
    [self](stats_atom) {
      const auto& st = self->state;
      stat_values out{stat_counter("queue_tuner_tunings", static_cast<double>(st.tunings)),
                      stat_level("queue_tuner_queues", static_cast<double>(st.last.queues())),
                      stat_gauge("queue_tuner_samples", static_cast<double>(st.samples.size()))};
      // The last tuning's quota per queue (tokens), small-request queue first.
      for (std::size_t q = 0; q < st.last.quotas.size(); ++q)
        out.push_back(stat_level("queue_tuner_quota_" + std::to_string(q), static_cast<double>(st.last.quotas[q])));
      return out;
    },
  };
}

} // namespace

queue_tuner_actor spawn_queue_tuner(caf::actor_system& sys, queue_tuner_config cfg) {
  return sys.spawn(queue_tuner_impl, std::move(cfg));
}

} // namespace troupe
