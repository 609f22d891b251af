// Bookkeeping of the unified GPU page pool (S-LoRA unified paging): KV-cache
// pages of requests and weight pages of adapters come from one free list.
// Owned by the memory_pool actor; CPU-testable, no device allocation here.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace troupe {

/// What holds a page: a request's KV cache, a request's hidden-state cache
/// (Apt-Serve), or an adapter's weights.
enum class page_owner_kind : std::uint8_t { request, adapter, hidden };
inline constexpr std::size_t page_owner_kinds = 3;

/// Which pool: the device's unified pool or the host pool for swapped KV.
enum class pool_tier : std::uint8_t { device, host };

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
  /// allocate(), but only when at least `keep_free` pages stay free after it
  /// (a watermark for optional work such as prefetch).
  bool allocate_keeping(page_owner owner, std::uint64_t n, std::uint64_t keep_free);

  /// Hands every page of `from` to `to` (appended after any `to` holds, in
  /// order): a session's cached KV becomes the next turn's. Returns how
  /// many moved (0 if `from` held none).
  std::uint64_t transfer(page_owner from, page_owner to);

  /// Hands the listed pages of `from` to `to` (appended in the listed
  /// order); the rest of `from`'s keep their order: a request's prompt pages
  /// become the prefix cache's. All or nothing: false (no change) unless
  /// `from` holds every one of them, once.
  bool transfer_pages(page_owner from, page_owner to, std::span<const std::uint32_t> pages);

  /// Frees every page of `owner`; returns how many (0 if it held none, so a
  /// second release is harmless).
  std::uint64_t release(page_owner owner);
  /// Frees the listed pages of `owner` (pages the prefix cache evicts). All
  /// or nothing: false (no change) unless it holds every one of them, once.
  bool release_pages(page_owner owner, std::span<const std::uint32_t> pages);

  // -- observers --------------------------------------------------------------

  std::uint64_t total_pages() const noexcept { return total_; }
  std::uint64_t free_pages() const noexcept { return free_.size(); }
  /// Pages held by all owners of `kind`.
  std::uint64_t used_pages(page_owner_kind kind) const noexcept;
  /// The page ids `owner` holds, in allocation order (empty if none).
  std::span<const std::uint32_t> pages_of(page_owner owner) const;
  /// Owners holding pages.
  std::size_t owners() const noexcept { return held_.size(); }
  /// The fewest free pages there have been (the low-water mark).
  std::uint64_t low_water() const noexcept { return low_water_; }
  /// Allocations refused for want of pages.
  std::uint64_t denied() const noexcept { return denied_; }
  /// release() calls for owners holding nothing (a second release included).
  std::uint64_t empty_releases() const noexcept { return empty_releases_; }

private:
  /// Takes `pages` out of `owner`'s list (all or nothing, as above).
  bool take(page_owner owner, std::span<const std::uint32_t> pages);

  struct owner_hash {
    std::size_t operator()(const page_owner& o) const noexcept {
      return std::hash<std::uint64_t>{}(o.id * 4 + static_cast<std::uint64_t>(o.kind));
    }
  };

  std::uint64_t total_;
  std::vector<std::uint32_t> free_;
  std::unordered_map<page_owner, std::vector<std::uint32_t>, owner_hash> held_;
  std::uint64_t used_[page_owner_kinds] = {};
  std::uint64_t low_water_ = 0;
  std::uint64_t denied_ = 0;
  std::uint64_t empty_releases_ = 0;
};

} // namespace troupe
