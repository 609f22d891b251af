// The classifier actor: puts each new request in a queue and predicts its
// output length (by a classifier policy and its output predictor), then hands
// it to the scheduler; tells the queue tuner (if any) each request's weighted
// size; learns output lengths from finished requests; takes new cut-offs
// from the tuner. Spawned by runtime/deployment.cpp; used by the intake.
#pragma once

#include "messages/interfaces.hpp"
#include "policies/classifier_policy.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct classifier_config {
  std::unique_ptr<policies::classifier_policy> policy;
  scheduler_actor scheduler;
  queue_tuner_actor tuner; ///< may be null
  /// Tokens one pool page holds (for a request's adapter cost in tokens).
  std::uint32_t page_tokens = 16;
};

classifier_actor spawn_classifier(caf::actor_system& sys, classifier_config cfg);

} // namespace troupe
