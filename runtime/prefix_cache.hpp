// Automatic prefix caching: K and V of whole prompt pages, kept in the
// unified pool after the prefill that computed them and read by any later
// request whose prompt begins with the same tokens under the same adapter
// (vLLM's automatic prefix caching, SGLang's radix cache at page grain).
//
// A cached page is named by its content: a hash chained over the adapter
// and every token up to the page's end, so a page's K and V (which depend
// on every token before them) are found only by a prompt with that whole
// history. The chain is checked token by token, never trusted to the hash.
// Pages are shared read-only: a request reads its first pages from the
// cache and writes only its own pages after them. A page no request reads
// and no cached page extends is idle, and goes (least recently used first)
// when its memory is wanted. Bookkeeping only: the scheduler core owns it
// and the shell moves the pages in the pool.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

class prefix_cache {
public:
  /// A cache of pages of `page_tokens` tokens.
  explicit prefix_cache(std::uint32_t page_tokens) : page_tokens_(page_tokens) {}

  /// Pages of `tokens` found in the cache, in position order: the first
  /// `max_pages` at most, and only while each extends the one before.
  struct match {
    std::vector<std::uint64_t> keys;
    std::vector<std::uint32_t> pages;
  };
  /// `space` is what else K and V depend on: the adapter's id, and (bit
  /// 32) the set of rotary factors they were turned by (LongRoPE's).
  match lookup(std::uint64_t space, std::span<const std::int32_t> tokens, std::size_t max_pages) const;
  /// The same for pages whose keys (keys_of's) the caller kept.
  match lookup(std::uint64_t space, std::span<const std::int32_t> tokens,
               std::span<const std::uint64_t> keys) const;
  /// The keys the first `max_pages` whole pages of `tokens` have (or would
  /// have once cached), in order.
  std::vector<std::uint64_t> keys_of(std::uint64_t space, std::span<const std::int32_t> tokens,
                                     std::size_t max_pages) const;

  /// A request reads these pages (keys from lookup or insert) until unuse.
  void use(std::span<const std::uint64_t> keys, double now_s);
  void unuse(std::span<const std::uint64_t> keys, double now_s);

  /// Caches `page` (pool page id), holding K and V of the page of
  /// `page_tokens` tokens `tokens` after the cached page `parent` (0: the
  /// prompt's first page) under `space`; the inserting request reads
  /// it (as use). Returns its key, or 0 when such a page is cached already
  /// (the caller keeps its own copy) or `parent` is not cached.
  std::uint64_t insert(std::uint64_t parent, std::uint64_t space, std::span<const std::int32_t> tokens,
                       std::uint32_t page, double now_s);

  /// Admission: a page is cached only once `offers` prompts (requests) have
  /// held it, so that a prompt seen once costs no memory that idle adapters
  /// could use (the doorkeeper of TinyLFU; CDNs' cache on second hit). The
  /// keys of the last `memory` pages offered are remembered. `offers` of 1
  /// (the default) caches every prompt's pages.
  void admit_after(std::uint32_t offers, std::size_t memory);
  /// One request's prompt pages (keys_of's), offered once: counted.
  void offer(std::span<const std::uint64_t> keys);
  /// Whether the page `key` may be cached now: cached already, or offered
  /// by enough prompts.
  bool admits(std::uint64_t key) const;

  /// Frees up to `n` idle pages, least recently used first (a page goes
  /// only once no cached page extends it); returns their pool page ids.
  std::vector<std::uint32_t> evict(std::uint64_t n);

  /// Pages cached, and of those the idle ones: read by no request, so
  /// evict() frees them all (a reader reads every page before its own).
  std::uint64_t pages() const noexcept { return entries_.size(); }
  std::uint64_t idle_pages() const noexcept { return idle_count_; }
  std::uint64_t evictions() const noexcept { return evictions_; }
  std::uint32_t page_tokens() const noexcept { return page_tokens_; }

private:
  struct entry {
    std::uint64_t parent = 0;
    std::uint64_t space = 0;
    std::uint32_t page = 0;
    std::uint32_t users = 0;
    std::uint32_t children = 0;
    double last_use_s = 0;
    std::vector<std::int32_t> tokens;
  };
  static std::uint64_t key_of(std::uint64_t parent, std::uint64_t space,
                              std::span<const std::int32_t> tokens) noexcept;
  /// The entry `key` names if it holds exactly this page; nullptr otherwise.
  const entry* find(std::uint64_t key, std::uint64_t parent, std::uint64_t space,
                    std::span<const std::int32_t> tokens) const;
  bool idle(const entry& e) const noexcept { return e.users == 0 && e.children == 0; }
  /// Takes `e` out of (before a change) or puts it into (after) the
  /// eviction order.
  void unlist(std::uint64_t key, const entry& e);
  void list(std::uint64_t key, const entry& e);

  std::uint32_t page_tokens_;
  std::unordered_map<std::uint64_t, entry> entries_;
  /// Idle pages no cached page extends, by (last use, key): the eviction
  /// order.
  std::set<std::pair<double, std::uint64_t>> idle_;
  std::uint64_t idle_count_ = 0;
  std::uint64_t evictions_ = 0;
  /// Admission: prompts that offered each remembered key, oldest first out.
  std::uint32_t admit_offers_ = 1;
  std::size_t offer_memory_ = 0;
  struct offered {
    std::uint32_t count = 0;
    std::uint64_t last = 0; ///< the sequence number of its last offer
  };
  std::unordered_map<std::uint64_t, offered> offers_;
  /// (sequence number, key) of each offer, oldest first: a key goes when
  /// its last offer leaves the window.
  std::deque<std::pair<std::uint64_t, std::uint64_t>> offer_order_;
  std::uint64_t offer_seq_ = 0;
};

} // namespace troupe
