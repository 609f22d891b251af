// The responses the HTTP front keeps for OpenAI's previous_response_id and
// GET /v1/responses/ID: each turn's input items and response body, by
// id, the least recently used dropped past a bound on their bytes. A
// conversation is the chain of turns its last names through `previous`.
// Held by one front, in memory: gone at restart, and not shared between
// the fronts of a multi-node deployment.
#pragma once

#include "messages/kept_lru.hpp"

#include <cstddef>
#include <string>
#include <string_view>
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
  explicit response_store(std::size_t capacity) : kept_(capacity) {}

  /// Keeps `e` under `id` as the most recently used, dropping the least
  /// recently used past the capacity; false (nothing kept) where `e` alone
  /// is larger than it.
  bool put(std::string id, entry e) {
    const auto b = bytes_of(id, e);
    return kept_.put(std::move(id), std::move(e), b);
  }
  /// The entry under `id` (now the most recently used), or null.
  const entry* find(std::string_view id) { return kept_.find(id); }
  /// Drops `id`; false where it was not kept.
  bool erase(std::string_view id) { return kept_.erase(id); }
  /// The turns of the conversation `id` ends, oldest first; or the id of
  /// the first of them no longer kept.
  std::variant<std::vector<const entry*>, std::string> chain(std::string_view id);

  std::size_t bytes() const noexcept { return kept_.bytes(); }
  std::size_t size() const noexcept { return kept_.size(); }
  std::size_t capacity() const noexcept { return kept_.capacity(); }

private:
  static std::size_t bytes_of(const std::string& id, const entry& e) noexcept {
    return id.size() + e.previous.size() + e.input_items.size() + e.body.size() + e.session.size()
           + e.events.size() + 64; // with the bookkeeping's
  }
  kept_lru<entry> kept_;
};

} // namespace troupe::openai
