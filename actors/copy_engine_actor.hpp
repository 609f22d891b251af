// The copy_engine actor: host-to-device transfers (adapter weights today, KV
// swap later), at most `max_inflight` at once, each taking the time the
// backend predicts. Spawned by runtime/deployment.cpp; used by adapter_cache.
#pragma once

#include "messages/interfaces.hpp"

#include <caf/fwd.hpp>

#include <functional>

namespace troupe {

struct copy_engine_config {
  /// Seconds a host-to-device copy of the given bytes takes.
  std::function<double(std::uint64_t)> transfer_seconds;
  /// Wall seconds per predicted second (0: instant).
  double time_scale = 1.0;
  std::uint32_t max_inflight = 4;
};

copy_engine_actor spawn_copy_engine(caf::actor_system& sys, copy_engine_config cfg);

} // namespace troupe
