// The memory_pool actor: sole owner of the unified page pool's bookkeeping.
// Spawned by runtime/deployment.cpp; used by the scheduler and adapter cache.
#pragma once

#include "messages/interfaces.hpp"

#include <caf/fwd.hpp>

namespace troupe {

/// Spawns a memory pool of `pages` device pages and `host_pages` host pages
/// (for swapped KV).
memory_pool_actor spawn_memory_pool(caf::actor_system& sys, std::uint64_t pages,
                                    std::uint64_t host_pages = 0);

} // namespace troupe
