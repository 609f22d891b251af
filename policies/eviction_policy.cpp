#include "policies/eviction_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::policies {

namespace {

/// Unpinned candidates, ordered by `before`, taken until `pages_needed`.
template <class Less>
std::vector<std::uint32_t> take_in_order(std::span<const resident_adapter_view> resident,
                                         std::uint64_t pages_needed, Less before) {
  std::vector<const resident_adapter_view*> candidates;
  for (const auto& r : resident)
    if (r.pins == 0)
      candidates.push_back(&r);
  std::sort(candidates.begin(), candidates.end(), before);
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

bool lru_before(const resident_adapter_view* a, const resident_adapter_view* b) {
  if (a->last_used_s != b->last_used_s)
    return a->last_used_s < b->last_used_s;
  return a->adapter_id < b->adapter_id;
}

} // namespace

std::string eviction_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"" + std::string{name()} + "\""}.apply(params);
}

std::vector<std::uint32_t>
lru_eviction_policy::choose_victims(std::span<const resident_adapter_view> resident,
                                    std::uint64_t pages_needed, double) {
  return take_in_order(resident, pages_needed, lru_before);
}

std::vector<std::uint32_t>
lfu_eviction_policy::choose_victims(std::span<const resident_adapter_view> resident,
                                    std::uint64_t pages_needed, double) {
  return take_in_order(resident, pages_needed, [](auto* a, auto* b) {
    if (a->window_uses != b->window_uses)
      return a->window_uses < b->window_uses;
    return lru_before(a, b);
  });
}

std::vector<std::uint32_t>
slora_eviction_policy::choose_victims(std::span<const resident_adapter_view> resident,
                                      std::uint64_t pages_needed, double) {
  return take_in_order(resident, pages_needed, lru_before);
}

std::vector<double> score_eviction_policy::scores(std::span<const resident_adapter_view> c,
                                                  double now_s) const {
  double max_uses = 0, max_pages = 0, oldest = now_s;
  for (const auto& r : c) {
    max_uses = std::max(max_uses, r.window_uses);
    max_pages = std::max(max_pages, static_cast<double>(r.pages));
    oldest = std::min(oldest, r.last_used_s);
  }
  const double span = now_s - oldest;
  std::vector<double> out;
  out.reserve(c.size());
  for (const auto& r : c) {
    const double frequency = max_uses > 0 ? r.window_uses / max_uses : 0.0;
    const double recency = span > 0 ? 1.0 - (now_s - r.last_used_s) / span : 1.0;
    const double size = max_pages > 0 ? static_cast<double>(r.pages) / max_pages : 0.0;
    out.push_back(w_.frequency * frequency + w_.recency * recency + w_.size * size);
  }
  return out;
}

std::vector<std::uint32_t>
score_eviction_policy::choose_victims(std::span<const resident_adapter_view> resident,
                                      std::uint64_t pages_needed, double now_s) {
  // Normalise over the evictable candidates only.
  std::vector<resident_adapter_view> candidates;
  for (const auto& r : resident)
    if (r.pins == 0)
      candidates.push_back(r);
  const auto s = scores(candidates, now_s);
  std::vector<std::size_t> order(candidates.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (s[a] != s[b])
      return s[a] < s[b];
    return lru_before(&candidates[a], &candidates[b]);
  });
  std::vector<std::uint32_t> out;
  std::uint64_t freed = 0;
  for (auto i : order) {
    if (freed >= pages_needed)
      break;
    out.push_back(candidates[i].adapter_id);
    freed += candidates[i].pages;
  }
  return out;
}

std::string score_eviction_policy::configure(const std::map<std::string, double>& params) {
  score_weights w = w_;
  if (auto err = param_spec{"policy \"" + name_ + "\""}
                   .number("frequency", w.frequency)
                   .number("recency", w.recency)
                   .number("size", w.size)
                   .apply(params);
      !err.empty())
    return err;
  if (w.frequency + w.recency + w.size <= 0)
    return "at least one of the weights \"frequency\", \"recency\", \"size\" must be positive";
  w_ = w;
  return {};
}

} // namespace troupe::policies
