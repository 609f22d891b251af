#include "policies/session_eviction.hpp"

#include <tuple>

namespace troupe::policies {

std::optional<session_eviction> session_eviction_named(const std::string& name) {
  if (name == "lru")
    return session_eviction::lru;
  if (name == "largest")
    return session_eviction::largest;
  return std::nullopt;
}

const std::vector<std::string>& session_eviction_names() {
  static const std::vector<std::string> names{"lru", "largest"};
  return names;
}

std::size_t pick_session_victim(session_eviction how, std::span<const session_view> c) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < c.size(); ++i) {
    const bool better =
      how == session_eviction::largest
        ? std::make_tuple(-static_cast<double>(c[i].pages), c[i].last_use_s, c[i].session)
            < std::make_tuple(-static_cast<double>(c[best].pages), c[best].last_use_s, c[best].session)
        : std::make_tuple(c[i].last_use_s, c[i].session) < std::make_tuple(c[best].last_use_s, c[best].session);
    if (better)
      best = i;
  }
  return best;
}

} // namespace troupe::policies
