// The queue_tuner actor: the worked example of a policy actor. It collects
// the weighted request sizes the classifier computes, and every `period_s`
// re-runs K-means, cut-offs and quotas (policies/queue_tuner) over the last
// `window_s` seconds and pushes the result to the scheduler (each queue's
// quota) and to the classifier that subscribed (which queue a request joins).
// See docs/policies.md.
#pragma once

#include "messages/interfaces.hpp"
#include "runtime/options.hpp"

#include <caf/fwd.hpp>

namespace troupe {

struct queue_tuner_config {
  queue_tuner_options options;
  /// Tokens the pool holds: the sum of the quotas.
  std::uint64_t total_tokens = 0;
  scheduler_actor scheduler;
};

queue_tuner_actor spawn_queue_tuner(caf::actor_system& sys, queue_tuner_config cfg);

} // namespace troupe
