// The responses the HTTP front keeps for OpenAI's previous_response_id and
// GET /v1/responses/ID: each turn's input items and response body, by
// id, the least recently used dropped past a bound on their bytes. A
// conversation is the chain of turns its last names through `previous`.
// Held by one front, in memory (and, where the front watches the store, in
// files: runtime/kept_files), and not shared between the fronts of a
// multi-node deployment.
#pragma once

#include "messages/kept_lru.hpp"

#include <cstddef>
#include <functional>
#include <optional>
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
    if (!kept_.put(id, std::move(e), b))
      return false;
    if (changed_)
      changed_(id, *kept_.find(id));
    return true;
  }
  /// As put, but unheard by watch's `changed` (an entry read back from
  /// where `changed` wrote it).
  bool restore(std::string id, entry e) {
    const auto b = bytes_of(id, e);
    return kept_.put(std::move(id), std::move(e), b);
  }
  /// Hears each entry kept or changed (`changed`) and each that goes
  /// (`dropped`): to keep a copy elsewhere, in files.
  void watch(std::function<void(const std::string& id, const entry& e)> changed,
             std::function<void(const std::string& id)> dropped) {
    changed_ = std::move(changed);
    kept_.on_drop = std::move(dropped);
  }
  /// An entry as text (a JSON object), and back; none where the text is
  /// not one.
  static std::string to_text(const entry& e);
  static std::optional<entry> from_text(std::string_view text);
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
  std::function<void(const std::string&, const entry&)> changed_;
};

} // namespace troupe::openai
