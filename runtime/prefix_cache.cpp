#include "runtime/prefix_cache.hpp"

#include "gpu/random.hpp"

#include <algorithm>

namespace troupe {

std::uint64_t prefix_cache::key_of(std::uint64_t parent, std::uint64_t space,
                                   std::span<const std::int32_t> tokens) noexcept {
  // The adapter in the high half, LongRoPE's factor set (bit 32) in the low.
  auto h = gpu::splitmix64(parent ^ (space << 32) ^ (space >> 32));
  for (const auto t : tokens)
    h = gpu::splitmix64(h ^ static_cast<std::uint32_t>(t));
  return h == 0 ? 1 : h; // 0 names no page
}

const prefix_cache::entry* prefix_cache::find(std::uint64_t key, std::uint64_t parent, std::uint64_t space,
                                              std::span<const std::int32_t> tokens) const {
  const auto i = entries_.find(key);
  if (i == entries_.end())
    return nullptr;
  const auto& e = i->second;
  // A hash collision must not hand out another history's K and V.
  if (e.parent != parent || e.space != space || !std::ranges::equal(e.tokens, tokens))
    return nullptr;
  return &e;
}

prefix_cache::match prefix_cache::lookup(std::uint64_t space, std::span<const std::int32_t> tokens,
                                         std::size_t max_pages) const {
  return lookup(space, tokens, keys_of(space, tokens, max_pages));
}

prefix_cache::match prefix_cache::lookup(std::uint64_t space, std::span<const std::int32_t> tokens,
                                         std::span<const std::uint64_t> keys) const {
  match out;
  std::uint64_t parent = 0;
  for (std::size_t p = 0; p < keys.size() && (p + 1) * page_tokens_ <= tokens.size(); ++p) {
    const auto* e = find(keys[p], parent, space, tokens.subspan(p * page_tokens_, page_tokens_));
    if (e == nullptr)
      break;
    out.keys.push_back(keys[p]);
    out.pages.push_back(e->page);
    parent = keys[p];
  }
  return out;
}

std::vector<std::uint64_t> prefix_cache::keys_of(std::uint64_t space, std::span<const std::int32_t> tokens,
                                                 std::size_t max_pages) const {
  std::vector<std::uint64_t> out;
  const auto pages = std::min<std::size_t>(max_pages, page_tokens_ == 0 ? 0 : tokens.size() / page_tokens_);
  std::uint64_t parent = 0;
  for (std::size_t p = 0; p < pages; ++p) {
    parent = key_of(parent, space, tokens.subspan(p * page_tokens_, page_tokens_));
    out.push_back(parent);
  }
  return out;
}

void prefix_cache::unlist(std::uint64_t key, const entry& e) {
  if (idle(e))
    idle_.erase({e.last_use_s, key});
}

void prefix_cache::list(std::uint64_t key, const entry& e) {
  if (idle(e))
    idle_.insert({e.last_use_s, key});
}

void prefix_cache::use(std::span<const std::uint64_t> keys, double now_s) {
  for (const auto key : keys) {
    auto& e = entries_.at(key);
    unlist(key, e);
    if (e.users++ == 0)
      --idle_count_;
    e.last_use_s = std::max(e.last_use_s, now_s);
  }
}

void prefix_cache::unuse(std::span<const std::uint64_t> keys, double now_s) {
  // Deepest first: a page used last by this request goes before the pages
  // it extends, whatever the clock's resolution.
  for (auto k = keys.rbegin(); k != keys.rend(); ++k) {
    auto& e = entries_.at(*k);
    if (--e.users == 0)
      ++idle_count_;
    e.last_use_s = std::max(e.last_use_s, now_s);
    list(*k, e);
  }
}

std::uint64_t prefix_cache::insert(std::uint64_t parent, std::uint64_t space, std::span<const std::int32_t> tokens,
                                   std::uint32_t page, double now_s) {
  if (tokens.size() != page_tokens_ || (parent != 0 && !entries_.contains(parent)))
    return 0;
  const auto key = key_of(parent, space, tokens);
  if (entries_.contains(key))
    return 0; // cached already (or a collision: this page stays uncached)
  if (parent != 0) {
    auto& up = entries_.at(parent);
    unlist(parent, up);
    ++up.children;
  }
  entry e;
  e.parent = parent;
  e.space = space;
  e.page = page;
  e.users = 1;
  e.last_use_s = now_s;
  e.tokens.assign(tokens.begin(), tokens.end());
  entries_.emplace(key, std::move(e));
  return key;
}

void prefix_cache::admit_after(std::uint32_t offers, std::size_t memory) {
  admit_offers_ = std::max<std::uint32_t>(offers, 1);
  offer_memory_ = admit_offers_ > 1 ? std::max<std::size_t>(memory, 1) : 0;
  offers_.clear();
  offer_order_.clear();
}

void prefix_cache::offer(std::span<const std::uint64_t> keys) {
  if (admit_offers_ <= 1)
    return;
  for (const auto key : keys) {
    auto& o = offers_[key];
    if (o.count < admit_offers_)
      ++o.count;
    o.last = ++offer_seq_;
    offer_order_.emplace_back(o.last, key);
    while (offer_order_.size() > offer_memory_) {
      const auto [seq, old] = offer_order_.front();
      offer_order_.pop_front();
      if (const auto it = offers_.find(old); it != offers_.end() && it->second.last == seq)
        offers_.erase(it); // not offered since
    }
  }
}

bool prefix_cache::admits(std::uint64_t key) const {
  if (admit_offers_ <= 1 || entries_.contains(key))
    return true;
  const auto it = offers_.find(key);
  return it != offers_.end() && it->second.count >= admit_offers_;
}

std::vector<std::uint32_t> prefix_cache::evict(std::uint64_t n) {
  std::vector<std::uint32_t> out;
  while (out.size() < n && !idle_.empty()) {
    const auto key = idle_.begin()->second;
    idle_.erase(idle_.begin());
    --idle_count_;
    const auto i = entries_.find(key);
    out.push_back(i->second.page);
    const auto parent = i->second.parent;
    entries_.erase(i);
    ++evictions_;
    if (parent != 0) {
      // The page it extended may now be idle in its turn.
      auto& up = entries_.at(parent);
      --up.children;
      list(parent, up);
    }
  }
  return out;
}

} // namespace troupe
