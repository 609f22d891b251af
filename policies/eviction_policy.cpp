#include "policies/eviction_policy.hpp"

#include <algorithm>

namespace troupe::policies {

std::vector<std::uint32_t>
lru_eviction_policy::choose_victims(std::span<const resident_adapter_view> resident,
                                    std::uint64_t pages_needed, double) {
  std::vector<const resident_adapter_view*> candidates;
  for (const auto& r : resident)
    if (r.pins == 0)
      candidates.push_back(&r);
  std::sort(candidates.begin(), candidates.end(), [](auto* a, auto* b) {
    if (a->last_used_s != b->last_used_s)
      return a->last_used_s < b->last_used_s;
    return a->adapter_id < b->adapter_id;
  });
  std::vector<std::uint32_t> out;
  std::uint64_t freed = 0;
  for (auto* c : candidates) {
    if (freed >= pages_needed)
      break;
    out.push_back(c->adapter_id);
    freed += c->pages;
  }
  return out;
}

} // namespace troupe::policies
