// Which session cache leaves a tier first when the tier needs room (the GPU
// share for sessions, the host pool, the disk). A pure choice over the
// caches in that tier; the scheduler core moves the one chosen down a tier.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::policies {

/// One session cache a tier could give up.
struct session_view {
  std::uint64_t session = 0;
  double last_use_s = 0; ///< its last turn's end, or its last advisory
  std::uint64_t pages = 0;
};

enum class session_eviction : std::uint8_t {
  lru,     ///< least recently used first (the default)
  largest, ///< most pages first (frees the most per move), then least recently used
};

/// "lru", "largest".
std::optional<session_eviction> session_eviction_named(const std::string& name);
const std::vector<std::string>& session_eviction_names();

/// Index of the cache to move first; candidates must not be empty.
std::size_t pick_session_victim(session_eviction how, std::span<const session_view> candidates);

} // namespace troupe::policies
