// OpenAI's Conversations API (/v1/conversations): conversations the HTTP
// front keeps, each its items (messages, function calls and their outputs,
// reasoning), oldest first, its metadata, and the Troupe session its
// responses run in, so that each turn reuses the K and V of the turns
// before it. A response that names a conversation goes on from its items,
// and its input and output items join them once it ends. Kept in memory,
// the least recently used dropped past a bound on their bytes (and, where
// the front watches the store, in files: runtime/kept_files), and not
// shared between the fronts of a multi-node deployment.
// See docs/protocol.md, "Conversations".
#pragma once

#include "messages/kept_lru.hpp"
#include "messages/openai.hpp"
#include "messages/responses.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::openai {

/// Most items one call may add (OpenAI's 20), and most metadata pairs (16).
inline constexpr std::size_t max_items_added = 20;
inline constexpr std::size_t max_metadata_pairs = 16;

/// OpenAI's metadata (a conversation's, a batch's): null, or at most 16
/// pairs of strings, keys of at most 64 characters, values of at most 512.
/// Its JSON text ("{}" for null), or a 400 naming `metadata`.
std::variant<std::string, api_error> metadata_of(const nlohmann::ordered_json& m);

/// The methods a path under /v1/conversations takes (`rest`: the path after
/// it, "" or "/ID", "/ID/items" or "/ID/items/ITEM"), as an Allow header
/// lists them; "" where the path is none of those.
std::string_view conversation_methods(std::string_view rest);

class conversation_store {
public:
  struct entry {
    std::int64_t created_at = 0;
    std::string metadata = "{}"; ///< a JSON object of strings
    /// (id, the item as listed: typed, with its id), oldest first.
    std::vector<std::pair<std::string, std::string>> items;
    std::string session; ///< the Troupe session its responses run in
  };

  /// Keeps at most `capacity` bytes of conversations (0: none).
  explicit conversation_store(std::size_t capacity) : kept_(capacity) {}

  /// Makes an id no client can guess, with the given prefix ("conv", "msg").
  using id_maker = std::function<std::string(std::string_view prefix)>;

  /// One call of the API: `method` ("GET", "POST" or "DELETE", one
  /// conversation_methods(rest) lists), `rest` the path after
  /// /v1/conversations (percent-encoded), the query and the body. The
  /// answer's JSON, or the error (404 for a conversation or item not kept,
  /// 400 for a bad body or query).
  std::variant<std::string, api_error> serve(std::string_view method, std::string_view rest, std::string_view query,
                                             std::string_view body, std::int64_t now, const id_maker& fresh);

  /// What a response's `conversation` reads: the items so far (a JSON
  /// array) and the session; a 404 naming `conversation` where it is not
  /// kept.
  std::variant<conversation, api_error> turns(const std::string& id);

  /// A response in conversation `id` ended: its input items (a JSON
  /// array's text), then its output items (of the response object
  /// `response_body`), join the conversation's; nothing where it is no
  /// longer kept. The input items take ids from the response's, as GET
  /// /v1/responses/ID/input_items lists them. Where the store cannot hold
  /// the conversation with them, its oldest items give way. A turn joins
  /// once: where the conversation holds the response's first output item
  /// already (a batch line run again after a crash), nothing changes.
  void add_turn(const std::string& id, std::string_view response_id, std::string_view input_items,
                std::string_view response_body);

  /// The conversation kept under `id` (now the most recently used), or null.
  const entry* find(std::string_view id) { return kept_.find(id); }

  /// Hears each conversation made or changed (`changed`) and each that
  /// goes (`dropped`): to keep a copy elsewhere, in files. Where `added`
  /// is given, a change that only adds items at the end (a turn, POST
  /// /v1/conversations/ID/items) is told to it instead, with the index of
  /// the first new item: a copy can append them (log_record) rather than
  /// write the whole again.
  void watch(std::function<void(const std::string& id, const entry& e)> changed,
             std::function<void(const std::string& id)> dropped,
             std::function<void(const std::string& id, const entry& e, std::size_t first_new)> added = {}) {
    changed_ = std::move(changed);
    kept_.on_drop = std::move(dropped);
    added_ = std::move(added);
  }
  /// The items of `e` from `first` on as one line of a conversation's log
  /// (a JSON array of [id, item] pairs, then a newline).
  static std::string log_record(const entry& e, std::size_t first);
  /// Adds to `e` the items of a log's records, in order, but those it
  /// holds already (a log a crash left beside a conversation written whole
  /// since); a record cut short (the crash's) or not one ends the log.
  /// The items added.
  static std::size_t replay_log(entry& e, std::string_view log);
  /// Keeps `e` under `id` unheard by watch's `changed` (one read back from
  /// where `changed` wrote it); false where it alone is larger than the store.
  bool restore(std::string id, entry e) {
    const auto b = bytes_of(id, e);
    return kept_.put(std::move(id), std::move(e), b);
  }
  /// A conversation as text (a JSON object), and back; none where the
  /// text is not one.
  static std::string to_text(const entry& e);
  static std::optional<entry> from_text(std::string_view text);

  std::size_t bytes() const noexcept { return kept_.bytes(); }
  std::size_t size() const noexcept { return kept_.size(); }
  std::size_t capacity() const noexcept { return kept_.capacity(); }

private:
  static std::size_t bytes_of(std::string_view id, const entry& e) noexcept;
  /// Adds listed items (a JSON array's text, each with its id; one the
  /// conversation holds already is made unique) to `e` kept under `id`;
  /// false (none added) where they would not fit, unless `make_room`: the
  /// oldest items give way (false only where the new alone do not fit).
  /// `trimmed`: set where older items gave way.
  bool append(const std::string& id, entry& e, std::string_view listed, bool make_room, bool* trimmed = nullptr);

  /// Tells `changed_` of the conversation under `id`, where it is kept.
  void tell(const std::string& id);
  /// Tells `added_` (else `changed_`) of items added to the conversation
  /// under `id` from `first` on.
  void tell_added(const std::string& id, std::size_t first);

  kept_lru<entry> kept_;
  std::function<void(const std::string&, const entry&)> changed_;
  std::function<void(const std::string&, const entry&, std::size_t)> added_;
};

} // namespace troupe::openai
