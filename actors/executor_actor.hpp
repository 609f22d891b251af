// The executor actor: owns one backend and runs the scheduler's steps on it,
// replying after the step's device time (scaled by time_scale for the sim).
// Spawned by runtime/deployment.cpp; used by the scheduler.
#pragma once

#include "gpu/backend.hpp"
#include "messages/interfaces.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct executor_config {
  std::shared_ptr<gpu::executor_backend> backend;
  /// Wall seconds per device second the backend reports (0: reply at once).
  /// 1 for backends that really compute.
  double time_scale = 1.0;
  /// Run on a dedicated thread: for backends whose steps compute on the CPU.
  bool own_thread = false;
};

executor_actor spawn_executor(caf::actor_system& sys, executor_config cfg);

} // namespace troupe
