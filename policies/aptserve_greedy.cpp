#include "policies/aptserve_greedy.hpp"

#include <algorithm>

namespace troupe::policies {

void apt_greedy(std::span<const apt_candidate> candidates, std::uint64_t budget_pages, const apt_params& p,
                apt_workspace& ws, apt_selection& greedy) {
  const double n_rho = static_cast<double>(p.affected) * p.rho;
  auto& items = ws.items;
  items.clear();
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
  // (candidate, order) is unique: a strict total order, so the result is the
  // one order there is (a merge sort: the queue changes little between
  // iterations, and nearly sorted input is its best case).
  std::stable_sort(items.begin(), items.end(), [&](const apt_item& a, const apt_item& b) {
    if (a.theta != b.theta)
      return a.theta > b.theta;
    if (a.candidate != b.candidate)
      return a.candidate < b.candidate;
    return a.order < b.order;
  });

  greedy.chosen.clear();
  greedy.value = 0;
  greedy.fallback = false;
  auto& taken = ws.taken;
  taken.assign(candidates.size(), -1);
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
    if (auto& t = taken[it.candidate]; t >= 0) {
      auto& ch = greedy.chosen[static_cast<std::size_t>(t)];
      ch.hidden = false; // the upgrade to KV
      ch.pages += it.pages;
    } else {
      t = static_cast<std::int64_t>(greedy.chosen.size());
      greedy.chosen.push_back({c.request_id, it.hidden_step, it.pages, it.candidate});
    }
  }
  if (p.fallback && breaking_value > greedy.value) {
    const auto& c = candidates[breaking];
    const auto m = std::max<std::uint64_t>(c.kv_pages, 1);
    if (m <= budget_pages) {
      greedy.chosen.assign(1, {c.request_id, false, m, breaking});
      greedy.value = breaking_value;
      greedy.fallback = true;
    }
  }
}

apt_selection apt_greedy(std::span<const apt_candidate> candidates, std::uint64_t budget_pages,
                         const apt_params& p) {
  apt_workspace ws;
  apt_selection out;
  apt_greedy(candidates, budget_pages, p, ws, out);
  return out;
}

} // namespace troupe::policies
