#include "runtime/adapter_cache.hpp"

#include <algorithm>
#include <cmath>

namespace troupe {

adapter_cache::adapter_cache(std::unique_ptr<policies::eviction_policy> policy,
                             std::uint32_t max_resident, double window_s)
  : policy_(std::move(policy)),
    max_resident_(max_resident),
    bucket_s_(std::max(window_s, 1e-6) / static_cast<double>(buckets)) {}

std::int64_t adapter_cache::epoch_of(double t) const {
  return static_cast<std::int64_t>(std::floor(t / bucket_s_));
}

void adapter_cache::touch(std::uint32_t id, double now_s) {
  auto& u = usage_[id];
  ++u.uses;
  u.last_used_s = now_s;
  const auto e = epoch_of(now_s);
  const auto b = static_cast<std::size_t>(((e % std::int64_t{buckets}) + buckets) % buckets);
  if (u.epochs[b] != e) {
    u.epochs[b] = e;
    u.counts[b] = 0;
  }
  ++u.counts[b];
}

double adapter_cache::window_uses(std::uint32_t id, double now_s) const {
  auto i = usage_.find(id);
  if (i == usage_.end())
    return 0;
  const auto now = epoch_of(now_s);
  double n = 0;
  for (std::size_t b = 0; b < buckets; ++b)
    if (i->second.epochs[b] > now - static_cast<std::int64_t>(buckets) && i->second.epochs[b] <= now)
      n += i->second.counts[b];
  return n;
}

adapter_cache::outcome adapter_cache::acquire(std::uint32_t id, std::uint64_t pages,
                                              std::uint32_t rank, double now_s) {
  touch(id, now_s);
  auto [i, added] = slots_.try_emplace(id);
  auto& s = i->second;
  ++s.pins;
  if (added) {
    s.pages = pages;
    s.rank = rank;
    held_pages_ += pages;
    ++misses_;
    return outcome::load;
  }
  if (s.loading) {
    s.prefetched = false; // a late prefetch: the demand takes it over
    return outcome::wait;
  }
  ++hits_;
  if (s.prefetched) {
    s.prefetched = false;
    ++prefetch_hits_;
  }
  return outcome::hit;
}

adapter_cache::outcome adapter_cache::prefetch(std::uint32_t id, std::uint64_t pages,
                                               std::uint32_t rank, double) {
  auto [i, added] = slots_.try_emplace(id);
  auto& s = i->second;
  if (added) {
    s.pages = pages;
    s.rank = rank;
    s.prefetched = true;
    held_pages_ += pages;
    return outcome::load;
  }
  return s.loading ? outcome::wait : outcome::hit;
}

void adapter_cache::loaded(std::uint32_t id) {
  auto i = slots_.find(id);
  if (i == slots_.end())
    return;
  i->second.loading = false;
  if (i->second.prefetched)
    ++prefetches_;
}

void adapter_cache::load_failed(std::uint32_t id) {
  auto i = slots_.find(id);
  if (i == slots_.end())
    return;
  held_pages_ -= i->second.pages;
  slots_.erase(i);
}

bool adapter_cache::release(std::uint32_t id, double now_s) {
  auto i = slots_.find(id);
  if (i == slots_.end() || i->second.pins == 0)
    return false;
  --i->second.pins;
  usage_[id].last_used_s = now_s;
  return true;
}

void adapter_cache::set_queued(std::uint32_t id, std::uint32_t waiting) {
  if (waiting == 0)
    queued_.erase(id);
  else
    queued_[id] = waiting;
}

std::uint32_t adapter_cache::queued(std::uint32_t id) const {
  auto i = queued_.find(id);
  return i == queued_.end() ? 0 : i->second;
}

policies::resident_adapter_view adapter_cache::view_of(std::uint32_t id, const slot& s,
                                                       double now_s) const {
  policies::resident_adapter_view v;
  v.adapter_id = id;
  v.pages = s.pages;
  v.rank = s.rank;
  v.pins = s.pins;
  if (auto u = usage_.find(id); u != usage_.end()) {
    v.uses = u->second.uses;
    v.last_used_s = u->second.last_used_s;
  }
  v.window_uses = window_uses(id, now_s);
  v.queued = queued(id);
  return v;
}

std::vector<std::uint32_t> adapter_cache::choose(bool queued_tier, std::uint64_t pages_needed,
                                                 double now_s) {
  std::vector<policies::resident_adapter_view> views;
  for (const auto& [id, s] : slots_) {
    if (s.loading || s.pins > 0 || (queued(id) > 0) != queued_tier)
      continue;
    views.push_back(view_of(id, s, now_s));
  }
  // Deterministic input order, whatever the hash map's.
  std::sort(views.begin(), views.end(),
            [](const auto& a, const auto& b) { return a.adapter_id < b.adapter_id; });
  return policy_->choose_victims(views, pages_needed, now_s);
}

std::vector<std::uint32_t> adapter_cache::evict(const std::vector<std::uint32_t>& victims) {
  std::vector<std::uint32_t> out;
  for (auto id : victims) {
    auto i = slots_.find(id);
    // A policy may only name idle, resident adapters; anything else is ignored.
    if (i == slots_.end() || i->second.pins > 0 || i->second.loading)
      continue;
    held_pages_ -= i->second.pages;
    slots_.erase(i);
    ++evictions_;
    out.push_back(id);
  }
  return out;
}

std::vector<std::uint32_t> adapter_cache::evict_for(std::uint64_t pages_needed, double now_s) {
  if (pages_needed == 0)
    return {};
  const auto before = held_pages_;
  auto out = evict(choose(false, pages_needed, now_s));
  const auto freed = before - held_pages_;
  if (freed < pages_needed) {
    // Still short: the adapters queued requests wait for go too.
    auto more = evict(choose(true, pages_needed - freed, now_s));
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::vector<std::uint32_t> adapter_cache::evict_idle(double now_s) {
  std::vector<std::uint32_t> out;
  if (!policy_->keep_idle()) {
    std::vector<std::uint32_t> idle;
    for (const auto& [id, s] : slots_)
      if (!s.loading && s.pins == 0 && queued(id) == 0)
        idle.push_back(id);
    std::sort(idle.begin(), idle.end());
    out = evict(idle);
  }
  while (max_resident_ > 0 && slots_.size() > max_resident_) {
    auto v = evict(choose(false, 1, now_s));
    if (v.empty())
      v = evict(choose(true, 1, now_s));
    if (v.empty())
      break;
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

adapter_cache::forget_result adapter_cache::forget(std::uint32_t id) {
  auto i = slots_.find(id);
  if (i != slots_.end() && (i->second.pins > 0 || i->second.loading))
    return forget_result::in_use;
  usage_.erase(id);
  queued_.erase(id);
  if (i == slots_.end())
    return forget_result::absent;
  held_pages_ -= i->second.pages;
  slots_.erase(i);
  return forget_result::forgotten;
}

bool adapter_cache::resident(std::uint32_t id) const {
  auto i = slots_.find(id);
  return i != slots_.end() && !i->second.loading;
}

bool adapter_cache::loading(std::uint32_t id) const {
  auto i = slots_.find(id);
  return i != slots_.end() && i->second.loading;
}

std::uint32_t adapter_cache::pins(std::uint32_t id) const {
  auto i = slots_.find(id);
  return i == slots_.end() ? 0 : i->second.pins;
}

std::size_t adapter_cache::resident_count() const noexcept {
  std::size_t n = 0;
  for (const auto& [id, s] : slots_)
    n += s.loading ? 0 : 1;
  return n;
}

std::vector<std::uint32_t> adapter_cache::resident_ids() const {
  std::vector<std::uint32_t> out;
  for (const auto& [id, s] : slots_)
    if (!s.loading)
      out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace troupe
