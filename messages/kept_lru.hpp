// What the HTTP front keeps in memory under ids (responses, conversations):
// entries by id, the least recently used dropped past a bound on their
// bytes. The caller says what an entry weighs, and may hear of each entry
// that goes (to drop a copy it keeps elsewhere, a file).
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace troupe::openai {

template <class Entry>
class kept_lru {
public:
  /// Keeps at most `capacity` bytes of entries (0: none).
  explicit kept_lru(std::size_t capacity) : capacity_(capacity) {}
  // (The index views the list's own strings: moved, they stay; copied, they would not.)
  kept_lru(const kept_lru&) = delete;
  kept_lru& operator=(const kept_lru&) = delete;
  kept_lru(kept_lru&&) noexcept = default;
  kept_lru& operator=(kept_lru&&) noexcept = default;

  /// Keeps `e`, of `bytes`, under `id` as the most recently used (in place
  /// of one kept under it), dropping the least recently used past the
  /// capacity; false (nothing kept) where `e` alone is larger than it.
  bool put(std::string id, Entry e, std::size_t bytes) {
    remove(id, bytes > capacity_); // (told where it goes for good)
    if (bytes > capacity_)
      return false;
    drop_for(bytes, 0);
    order_.push_front(kept{std::move(id), std::move(e), bytes});
    index_.emplace(order_.front().id, order_.begin()); // the key views the list's own string
    bytes_ += bytes;
    return true;
  }

  /// The entry under `id` (now the most recently used), or null.
  Entry* find(std::string_view id) {
    const auto it = index_.find(id);
    if (it == index_.end())
      return nullptr;
    order_.splice(order_.begin(), order_, it->second); // iterators (and the key's string) stay valid
    return &order_.front().e;
  }

  /// The entry under `id`, changed in place, now weighs `bytes`: others
  /// give way where it grew past the room left; it is dropped itself (false)
  /// where it alone is larger than the capacity.
  bool reweigh(std::string_view id, std::size_t bytes) {
    const auto it = index_.find(id);
    if (it == index_.end())
      return false;
    if (bytes > capacity_) {
      remove(id, true);
      return false;
    }
    order_.splice(order_.begin(), order_, it->second);
    bytes_ -= order_.front().bytes;
    order_.front().bytes = 0;
    drop_for(bytes, 1); // (not itself: it is the first)
    order_.front().bytes = bytes;
    bytes_ += bytes;
    return true;
  }

  /// Drops `id`; false where it was not kept.
  bool erase(std::string_view id) { return remove(id, true); }

  /// Called with the id of each entry that goes: erased, dropped for room,
  /// or grown past the capacity (not one put again in place).
  std::function<void(const std::string& id)> on_drop;

  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return index_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }

private:
  struct kept {
    std::string id;
    Entry e;
    std::size_t bytes;
  };
  bool remove(std::string_view id, bool notify) {
    const auto it = index_.find(id);
    if (it == index_.end())
      return false;
    const auto at = it->second;
    bytes_ -= at->bytes;
    index_.erase(it);
    std::string gone = std::move(at->id);
    order_.erase(at);
    if (notify && on_drop)
      on_drop(gone);
    return true;
  }
  /// Drops the least recently used, all but the first `spared`, until
  /// `bytes` more fit.
  void drop_for(std::size_t bytes, std::size_t spared) {
    while (bytes_ + bytes > capacity_ && order_.size() > spared)
      remove(order_.back().id, true);
  }
  std::size_t capacity_;
  std::size_t bytes_ = 0;
  std::list<kept> order_; ///< most recently used first
  std::unordered_map<std::string_view, typename std::list<kept>::iterator> index_;
};

} // namespace troupe::openai
