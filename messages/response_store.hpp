// The responses the HTTP front keeps for OpenAI's previous_response_id and
// GET /v1/responses/ID: each turn's input items and response body, by
// id, the least recently used dropped past a bound on their bytes. A
// conversation is the chain of turns its last names through `previous`.
// Held by one front, in memory: gone at restart, and not shared between
// the fronts of a multi-node deployment.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace troupe::openai {

class response_store {
public:
  struct entry {
    std::string previous;    ///< the response this one went on from ("" for none)
    std::string input_items; ///< this turn's input items (a JSON array)
    std::string body;        ///< the response object
    std::string session{};   ///< the Troupe session its conversation runs in ("" for none)
    /// A streamed background response's events (event_log::text()), read
    /// again by GET ?stream=true; "" for any other.
    std::string events{};
  };

  /// Keeps at most `capacity` bytes of entries (0: none).
  explicit response_store(std::size_t capacity) : capacity_(capacity) {}
  // (The index views the list's own strings: moved, they stay; copied, they would not.)
  response_store(const response_store&) = delete;
  response_store& operator=(const response_store&) = delete;
  response_store(response_store&&) noexcept = default;
  response_store& operator=(response_store&&) noexcept = default;

  /// Keeps `e` under `id` as the most recently used, dropping the least
  /// recently used past the capacity; false (nothing kept) where `e` alone
  /// is larger than it.
  bool put(std::string id, entry e);
  /// The entry under `id` (now the most recently used), or null.
  const entry* find(std::string_view id);
  /// Drops `id`; false where it was not kept.
  bool erase(std::string_view id);
  /// The turns of the conversation `id` ends, oldest first; or the id of
  /// the first of them no longer kept.
  std::variant<std::vector<const entry*>, std::string> chain(std::string_view id);

  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return index_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }

private:
  struct kept {
    std::string id;
    entry e;
    std::size_t bytes;
  };
  static std::size_t bytes_of(const std::string& id, const entry& e) noexcept {
    return id.size() + e.previous.size() + e.input_items.size() + e.body.size() + e.session.size()
           + e.events.size() + 64; // with the bookkeeping's
  }
  std::size_t capacity_;
  std::size_t bytes_ = 0;
  std::list<kept> order_; ///< most recently used first
  std::unordered_map<std::string_view, std::list<kept>::iterator> index_;
};

} // namespace troupe::openai
