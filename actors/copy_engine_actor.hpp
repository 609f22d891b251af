// The copy_engine actor: adapter loads onto the device and KV swaps between
// the device and host pools (preemption), queued by priority (demand load before swap-in before prefetch
// before swap-out) in runtime/transfer_queue, at most `max_inflight` at once.
// On the sim backend a transfer takes the modelled disk + PCIe time; on the
// cpu backend the backend really reads and copies, on a worker thread so the
// actor system keeps running. Spawned by runtime/deployment.cpp; used by the
// adapter cache and the scheduler.
#pragma once

#include "gpu/backend.hpp"
#include "messages/interfaces.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace troupe {

struct copy_engine_config {
  std::shared_ptr<gpu::executor_backend> backend;
  /// Wall seconds per modelled second (0: instant); ignored when `real`.
  double time_scale = 1.0;
  /// The backend really moves data (cpu): run loads on worker threads and
  /// take the time they take.
  bool real = false;
  std::uint32_t max_inflight = 4;
};

copy_engine_actor spawn_copy_engine(caf::actor_system& sys, copy_engine_config cfg);

} // namespace troupe
