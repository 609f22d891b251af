#include "messages/stat.hpp"

#include <algorithm>
#include <map>

namespace troupe {

stat_values merge_node_stats(const std::vector<stat_values>& per_node) {
  std::map<std::string, stat_value, std::less<>> total;
  std::vector<std::string> order;
  stat_values levels;
  for (std::size_t i = 0; i < per_node.size(); ++i)
    for (const auto& v : per_node[i]) {
      auto [at, fresh] = total.try_emplace(v.name, v);
      if (fresh)
        order.push_back(v.name);
      else if (v.kind == stat_kind::level)
        at->second.value = std::max(at->second.value, v.value);
      else
        at->second.value += v.value;
      if (v.kind == stat_kind::level)
        levels.push_back(stat_level("node" + std::to_string(i) + "_" + v.name, v.value));
    }
  auto find = [&](std::string_view name) { return total.find(name); };
  if (const auto rate = find("adapter_cache_hit_rate"); rate != total.end()) {
    const auto hits = find("adapter_cache_hits");
    const auto misses = find("adapter_cache_misses");
    if (hits != total.end() && misses != total.end()) {
      const double lookups = hits->second.value + misses->second.value;
      rate->second.value = lookups > 0 ? hits->second.value / lookups : 0.0;
    }
  }
  stat_values out;
  out.reserve(order.size() + levels.size());
  for (const auto& name : order)
    out.push_back(total.find(name)->second);
  out.insert(out.end(), levels.begin(), levels.end());
  return out;
}

} // namespace troupe
