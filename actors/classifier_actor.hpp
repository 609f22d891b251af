// The classifier actor: puts each new request in a queue and predicts its
// output length (by a classifier policy), then hands it to the scheduler.
// Spawned by runtime/deployment.cpp; used by the intake.
#pragma once

#include "messages/interfaces.hpp"
#include "policies/classifier_policy.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

classifier_actor spawn_classifier(caf::actor_system& sys,
                                  std::unique_ptr<policies::classifier_policy> policy,
                                  scheduler_actor scheduler);

} // namespace troupe
