// Bookkeeping of the unified GPU page pool (S-LoRA unified paging): KV-cache
// pages of requests and weight pages of adapters come from one free list.
// Owned by the memory_pool actor; CPU-testable, no device allocation here.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace troupe {

/// What holds a page.
enum class page_owner_kind : std::uint8_t { request, adapter };

struct page_owner {
  page_owner_kind kind = page_owner_kind::request;
  std::uint64_t id = 0;
  friend bool operator==(const page_owner&, const page_owner&) = default;
};

/// Fixed-size page allocator. Every page has at most one owner; release()
/// frees all of an owner's pages exactly once. Used from one actor only.
class page_pool {
public:
  /// A pool of `pages` pages, all free.
  explicit page_pool(std::uint64_t pages);

  // -- mutators ---------------------------------------------------------------

  /// Gives `n` more pages to `owner`. All or nothing: false (and no change)
  /// when fewer than `n` pages are free.
  bool allocate(page_owner owner, std::uint64_t n);

  /// Frees every page of `owner`; returns how many (0 if it held none, so a
  /// second release is harmless).
  std::uint64_t release(page_owner owner);

  // -- observers --------------------------------------------------------------

  std::uint64_t total_pages() const noexcept { return total_; }
  std::uint64_t free_pages() const noexcept { return free_.size(); }
  /// Pages held by all owners of `kind`.
  std::uint64_t used_pages(page_owner_kind kind) const noexcept;
  /// The page ids `owner` holds, in allocation order (empty if none).
  std::span<const std::uint32_t> pages_of(page_owner owner) const;
  /// Owners holding pages.
  std::size_t owners() const noexcept { return held_.size(); }

private:
  struct owner_hash {
    std::size_t operator()(const page_owner& o) const noexcept {
      return std::hash<std::uint64_t>{}(o.id * 2 + static_cast<std::uint64_t>(o.kind));
    }
  };

  std::uint64_t total_;
  std::vector<std::uint32_t> free_;
  std::unordered_map<page_owner, std::vector<std::uint32_t>, owner_hash> held_;
  std::uint64_t used_[2] = {0, 0};
};

} // namespace troupe
