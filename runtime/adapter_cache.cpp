#include "runtime/adapter_cache.hpp"

namespace troupe {

// -- adapter_cache ----------------------------------------------------------------

adapter_cache::adapter_cache(const adapter_catalog& catalog,
                             std::unique_ptr<policies::eviction_policy> policy,
                             std::uint32_t max_resident)
  : catalog_(catalog), policy_(std::move(policy)), max_resident_(max_resident) {
}

adapter_cache::outcome adapter_cache::acquire(std::uint32_t adapter_id, double now_s) {
  auto [i, added] = slots_.try_emplace(adapter_id);
  auto& s = i->second;
  ++s.pins;
  ++s.uses;
  s.last_used_s = now_s;
  if (added) {
    ++misses_;
    return outcome::load;
  }
  if (s.loading)
    return outcome::wait;
  ++hits_;
  return outcome::hit;
}

void adapter_cache::loaded(std::uint32_t adapter_id) {
  if (auto i = slots_.find(adapter_id); i != slots_.end())
    i->second.loading = false;
}

void adapter_cache::load_failed(std::uint32_t adapter_id) {
  slots_.erase(adapter_id);
}

bool adapter_cache::release(std::uint32_t adapter_id, double now_s) {
  auto i = slots_.find(adapter_id);
  if (i == slots_.end() || i->second.pins == 0)
    return false;
  --i->second.pins;
  i->second.last_used_s = now_s;
  return true;
}

std::vector<std::uint32_t> adapter_cache::evict(std::vector<std::uint32_t> victims) {
  std::vector<std::uint32_t> out;
  for (auto id : victims) {
    auto i = slots_.find(id);
    // A policy may only name unpinned, resident adapters; ignore anything else.
    if (i == slots_.end() || i->second.pins > 0 || i->second.loading)
      continue;
    slots_.erase(i);
    ++evictions_;
    out.push_back(id);
  }
  return out;
}

std::vector<std::uint32_t> adapter_cache::evict_for(std::uint64_t pages_needed,
                                                    double now_s) {
  std::vector<policies::resident_adapter_view> views;
  for (const auto& [id, s] : slots_) {
    if (s.loading)
      continue;
    const auto* e = catalog_.by_id(id);
    views.push_back({id, e ? e->pages : 0, s.pins, s.uses, s.last_used_s});
  }
  return evict(policy_->choose_victims(views, pages_needed, now_s));
}

std::vector<std::uint32_t> adapter_cache::evict_for_slot(double now_s) {
  if (max_resident_ == 0 || slots_.size() <= max_resident_)
    return {};
  // Free one page-less "slot" per adapter over the limit: ask the policy for
  // as many victims as needed, one at a time, by page count 1 each.
  std::vector<std::uint32_t> out;
  while (slots_.size() > max_resident_) {
    auto v = evict_for(1, now_s);
    if (v.empty())
      break;
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

bool adapter_cache::resident(std::uint32_t adapter_id) const {
  auto i = slots_.find(adapter_id);
  return i != slots_.end() && !i->second.loading;
}

std::uint32_t adapter_cache::pins(std::uint32_t adapter_id) const {
  auto i = slots_.find(adapter_id);
  return i == slots_.end() ? 0 : i->second.pins;
}

std::size_t adapter_cache::resident_count() const noexcept {
  std::size_t n = 0;
  for (const auto& [id, s] : slots_)
    n += s.loading ? 0 : 1;
  return n;
}

std::uint64_t adapter_cache::resident_pages() const noexcept {
  std::uint64_t n = 0;
  for (const auto& [id, s] : slots_)
    if (const auto* e = catalog_.by_id(id))
      n += e->pages;
  return n;
}

} // namespace troupe
