#include "runtime/memory_pool.hpp"

#include <algorithm>

namespace troupe {

page_pool::page_pool(std::uint64_t pages) : total_(pages), low_water_(pages) {
  free_.reserve(pages);
  // Hand out low page ids first: pop_back() takes from the end.
  for (std::uint64_t i = pages; i > 0; --i)
    free_.push_back(static_cast<std::uint32_t>(i - 1));
}

bool page_pool::allocate_keeping(page_owner owner, std::uint64_t n, std::uint64_t keep_free) {
  if (n + keep_free > free_.size()) {
    ++denied_;
    return false;
  }
  return allocate(owner, n);
}

bool page_pool::allocate(page_owner owner, std::uint64_t n) {
  if (n > free_.size()) {
    ++denied_;
    return false;
  }
  if (n == 0)
    return true;
  auto& mine = held_[owner];
  for (std::uint64_t i = 0; i < n; ++i) {
    mine.push_back(free_.back());
    free_.pop_back();
  }
  used_[static_cast<int>(owner.kind)] += n;
  if (free_.size() < low_water_)
    low_water_ = free_.size();
  return true;
}

std::uint64_t page_pool::transfer(page_owner from, page_owner to) {
  auto i = held_.find(from);
  if (i == held_.end() || from == to)
    return 0;
  auto pages = std::move(i->second);
  held_.erase(i);
  const auto n = static_cast<std::uint64_t>(pages.size());
  used_[static_cast<int>(from.kind)] -= n;
  used_[static_cast<int>(to.kind)] += n;
  auto& mine = held_[to];
  mine.insert(mine.end(), pages.begin(), pages.end());
  return n;
}

bool page_pool::take(page_owner owner, std::span<const std::uint32_t> pages) {
  if (pages.empty())
    return true;
  auto i = held_.find(owner);
  if (i == held_.end())
    return false;
  auto& mine = i->second;
  std::vector<std::uint32_t> wanted(pages.begin(), pages.end());
  std::sort(wanted.begin(), wanted.end());
  if (std::adjacent_find(wanted.begin(), wanted.end()) != wanted.end())
    return false; // a page named twice
  std::size_t found = 0;
  for (auto p : mine)
    found += std::binary_search(wanted.begin(), wanted.end(), p) ? 1 : 0;
  if (found != wanted.size())
    return false;
  std::erase_if(mine, [&](std::uint32_t p) { return std::binary_search(wanted.begin(), wanted.end(), p); });
  if (mine.empty())
    held_.erase(i);
  used_[static_cast<int>(owner.kind)] -= wanted.size();
  return true;
}

bool page_pool::transfer_pages(page_owner from, page_owner to, std::span<const std::uint32_t> pages) {
  if (from == to || !take(from, pages))
    return from == to && pages.empty();
  auto& mine = held_[to];
  mine.insert(mine.end(), pages.begin(), pages.end());
  used_[static_cast<int>(to.kind)] += pages.size();
  return true;
}

bool page_pool::release_pages(page_owner owner, std::span<const std::uint32_t> pages) {
  if (!take(owner, pages))
    return false;
  free_.insert(free_.end(), pages.begin(), pages.end());
  return true;
}

std::uint64_t page_pool::release(page_owner owner) {
  auto i = held_.find(owner);
  if (i == held_.end()) {
    ++empty_releases_;
    return 0;
  }
  const auto n = i->second.size();
  free_.insert(free_.end(), i->second.begin(), i->second.end());
  used_[static_cast<int>(owner.kind)] -= n;
  held_.erase(i);
  return n;
}

std::uint64_t page_pool::used_pages(page_owner_kind kind) const noexcept {
  return used_[static_cast<int>(kind)];
}

std::span<const std::uint32_t> page_pool::pages_of(page_owner owner) const {
  auto i = held_.find(owner);
  if (i == held_.end())
    return {};
  return i->second;
}

} // namespace troupe
