#include "actors/classifier_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/delegated.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>

namespace troupe {

namespace {

struct classifier_state {
  static inline const char* name = "classifier";
  std::unique_ptr<policies::classifier_policy> policy;
  scheduler_actor scheduler;
};

using self_ptr = classifier_actor::stateful_pointer<classifier_state>;

classifier_actor::behavior_type
classifier_impl(self_ptr self, std::unique_ptr<policies::classifier_policy> policy,
                scheduler_actor scheduler) {
  self->state.policy = std::move(policy);
  self->state.scheduler = std::move(scheduler);
  return {
    [self](classify_atom, request_spec& spec) -> caf::delegated<std::uint8_t> {
      policies::classify_input in;
      in.prompt_tokens = static_cast<std::uint32_t>(spec.prompt.size());
      in.max_new_tokens = spec.max_new_tokens;
      in.adapter_id = spec.adapter_id;
      in.adapter_rank = spec.adapter_rank;
      in.priority = spec.priority;
      const auto c = self->state.policy->classify(in);
      spec.queue = c.queue;
      spec.predicted_tokens = std::min(c.predicted_tokens, spec.max_new_tokens);
      return self->delegate(self->state.scheduler, submit_atom_v, std::move(spec));
    },
  };
}

} // namespace

classifier_actor spawn_classifier(caf::actor_system& sys,
                                  std::unique_ptr<policies::classifier_policy> policy,
                                  scheduler_actor scheduler) {
  return sys.spawn(classifier_impl, std::move(policy), std::move(scheduler));
}

} // namespace troupe
