#include "policies/placement.hpp"

#include <tuple>

namespace troupe::policies {

std::int32_t least_loaded(std::span<const node_load> nodes) {
  std::int32_t best = -1;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    if (!n.alive)
      continue;
    if (best < 0) {
      best = static_cast<std::int32_t>(i);
      continue;
    }
    const auto& b = nodes[static_cast<std::size_t>(best)];
    if (std::make_tuple(n.in_flight + n.expected, n.tokens, n.placed)
        < std::make_tuple(b.in_flight + b.expected, b.tokens, b.placed))
      best = static_cast<std::int32_t>(i);
  }
  return best;
}

placement place(std::span<const node_load> nodes, std::int32_t holder, std::uint32_t imbalance) {
  const auto best = least_loaded(nodes);
  if (best < 0)
    return {};
  const bool held = holder >= 0 && static_cast<std::size_t>(holder) < nodes.size()
                    && nodes[static_cast<std::size_t>(holder)].alive;
  if (!held)
    return {best, false};
  const auto& h = nodes[static_cast<std::size_t>(holder)];
  const auto& b = nodes[static_cast<std::size_t>(best)];
  if (h.in_flight + h.expected <= b.in_flight + b.expected + imbalance)
    return {holder, false};
  return {best, true};
}

} // namespace troupe::policies
