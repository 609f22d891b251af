#include "policies/aptserve_greedy.hpp"

#include <algorithm>
#include <unordered_map>

namespace troupe::policies {

namespace {

struct item {
  double theta; ///< value per page
  std::size_t candidate;
  std::uint64_t pages;
  bool hidden_step; ///< the 0 -> m/2 step (else KV-only or the upgrade)
  int order;        ///< a request's hidden step sorts before its upgrade
};

} // namespace

apt_selection apt_greedy(std::span<const apt_candidate> candidates, std::uint64_t budget_pages,
                         const apt_params& p) {
  const double n_rho = static_cast<double>(p.affected) * p.rho;
  std::vector<item> items;
  items.reserve(candidates.size() * 2);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    const auto m = std::max<std::uint64_t>(c.kv_pages, 1);
    if (c.violated) {
      const double theta = p.violated_decay > 0 ? p.violated_decay * c.pending_s / static_cast<double>(m)
                                                : p.demoted_value;
      items.push_back({theta, i, m, false, 0});
      continue;
    }
    const double pending = c.pending_s;
    // Hidden first only when it beats going straight to KV: p >= 2·N·ρ·m.
    const bool hidden = c.hidden_capable && m >= 2 && pending >= 2.0 * n_rho * static_cast<double>(m);
    if (!hidden) {
      items.push_back({pending / static_cast<double>(m), i, m, false, 0});
      continue;
    }
    const std::uint64_t first = (m + 1) / 2, second = m / 2;
    const double h = pending - n_rho * static_cast<double>(m); // value with a hidden cache
    items.push_back({h / static_cast<double>(first), i, first, true, 0});
    items.push_back({(pending - h) / static_cast<double>(second), i, second, false, 1});
  }
  std::stable_sort(items.begin(), items.end(), [&](const item& a, const item& b) {
    if (a.theta != b.theta)
      return a.theta > b.theta;
    if (a.candidate != b.candidate)
      return a.candidate < b.candidate;
    return a.order < b.order;
  });

  apt_selection greedy;
  std::unordered_map<std::size_t, std::size_t> taken; // candidate -> index in chosen
  std::uint64_t used = 0;
  double breaking_value = -1;
  std::size_t breaking = 0;
  for (const auto& it : items) {
    if (used + it.pages > budget_pages) {
      breaking_value = it.theta * static_cast<double>(it.pages);
      breaking = it.candidate;
      break;
    }
    // An upgrade is only meaningful after its hidden step was taken; the
    // sort guarantees that order.
    used += it.pages;
    greedy.value += it.theta * static_cast<double>(it.pages);
    const auto& c = candidates[it.candidate];
    if (auto t = taken.find(it.candidate); t != taken.end()) {
      auto& ch = greedy.chosen[t->second];
      ch.hidden = false; // the upgrade to KV
      ch.pages += it.pages;
    } else {
      taken.emplace(it.candidate, greedy.chosen.size());
      greedy.chosen.push_back({c.request_id, it.hidden_step, it.pages});
    }
  }
  if (p.fallback && breaking_value > greedy.value) {
    const auto& c = candidates[breaking];
    const auto m = std::max<std::uint64_t>(c.kv_pages, 1);
    if (m <= budget_pages) {
      apt_selection alone;
      alone.chosen.push_back({c.request_id, false, m});
      alone.value = breaking_value;
      alone.fallback = true;
      return alone;
    }
  }
  return greedy;
}

} // namespace troupe::policies
