// The metrics actor: counts steps, tokens and finished requests, keeps recent
// latencies for percentiles, logs throughput now and then, answers `stats`.
// Spawned by runtime/deployment.cpp; fed by the scheduler.
#pragma once

#include "messages/interfaces.hpp"
#include "runtime/options.hpp"

#include <caf/fwd.hpp>

namespace troupe {

metrics_actor spawn_metrics(caf::actor_system& sys, metrics_options opts);

} // namespace troupe
