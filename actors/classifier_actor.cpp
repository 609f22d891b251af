#include "actors/classifier_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/scheduler_core.hpp"

#include <caf/actor_system.hpp>
#include <caf/typed_response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <unordered_map>

namespace troupe {

namespace {

struct classifier_state {
  static inline const char* name = "classifier";
  classifier_config cfg;
  /// Requests classified and not finished: what the predictor learns from.
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> open; // id -> adapter, prompt
};

using self_ptr = classifier_actor::stateful_pointer<classifier_state>;

classifier_actor::behavior_type classifier_impl(self_ptr self, classifier_config cfg) {
  self->state.cfg = std::move(cfg);
  return {
    [self](classify_atom, request_spec& spec) -> caf::result<std::uint8_t> {
      auto& st = self->state;
      const auto in = classify_input_of(spec);
      const auto c = st.cfg.policy->classify(in);
      spec.queue = c.queue;
      spec.predicted_tokens = std::max<std::uint32_t>(c.predicted_tokens, 1);
      st.open.emplace(spec.request_id, std::pair{spec.adapter_id, in.prompt_tokens});
      if (st.cfg.tuner)
        self->send(st.cfg.tuner,
                   wrs_sample{monotonic_seconds(), c.wrs, quota_cost_of(spec, st.cfg.page_tokens),
                              spec.predicted_tokens});
      // Not delegated: a request the scheduler refuses never finishes, so
      // it leaves `open` here.
      auto rp = self->make_response_promise<std::uint8_t>();
      const auto id = spec.request_id;
      self->request(st.cfg.scheduler, caf::infinite, submit_atom_v, std::move(spec))
        .then(
          [self, rp, id](std::uint8_t r) mutable {
            if (r != static_cast<std::uint8_t>(scheduler_core::submit_result::accepted))
              self->state.open.erase(id);
            rp.deliver(r);
          },
          [self, rp, id](caf::error& e) mutable {
            self->state.open.erase(id);
            rp.deliver(std::move(e));
          });
      return rp;
    },
    [self](const policies::queue_tuning& t) { self->state.cfg.policy->on_tuning(t); },
    [self](const progress_batch& b) {
      auto& st = self->state;
      for (const auto& f : b.finished) {
        auto i = st.open.find(f.request_id);
        if (i == st.open.end())
          continue;
        // Only natural ends say how long the output really is.
        const auto why = static_cast<finish_reason>(f.reason);
        if (why == finish_reason::eos || why == finish_reason::stop || why == finish_reason::length)
          st.cfg.policy->observe(i->second.first, i->second.second, f.completion_tokens);
        st.open.erase(i);
      }
    },
  };
}

} // namespace

classifier_actor spawn_classifier(caf::actor_system& sys, classifier_config cfg) {
  return sys.spawn(classifier_impl, std::move(cfg));
}

} // namespace troupe
