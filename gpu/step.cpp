#include "gpu/step.hpp"

#include <algorithm>
#include <string_view>

namespace troupe::gpu {

bool fail_if_stream_lost(step_result& out, const step_entry& e, const lost_streams& lost) {
  if (e.stream == 0)
    return false;
  auto l = std::find_if(lost.begin(), lost.end(), [&](const auto& p) { return p.first == e.stream; });
  if (l == lost.end())
    return false;
  out.failures.push_back({e.request_id, "its cache did not come in from the host pool: " + l->second});
  return true;
}

std::string describe(std::span<const step_failure> failures, std::size_t max_ids) {
  // Reasons in order of first appearance; a step has few, so a linear scan.
  std::vector<std::string_view> reasons;
  std::vector<std::vector<std::uint64_t>> ids;
  for (const auto& f : failures) {
    std::size_t k = 0;
    while (k < reasons.size() && reasons[k] != f.reason)
      ++k;
    if (k == reasons.size()) {
      reasons.push_back(f.reason);
      ids.emplace_back();
    }
    ids[k].push_back(f.request_id);
  }
  std::string out;
  for (std::size_t k = 0; k < reasons.size(); ++k) {
    if (k > 0)
      out += "; ";
    out += ids[k].size() == 1 ? "request " : "requests ";
    for (std::size_t i = 0; i < ids[k].size() && i < max_ids; ++i) {
      if (i > 0)
        out += ", ";
      out += std::to_string(ids[k][i]);
    }
    if (ids[k].size() > max_ids)
      out += " and " + std::to_string(ids[k].size() - max_ids) + " more";
    out += ": ";
    out += reasons[k];
  }
  return out;
}

} // namespace troupe::gpu
