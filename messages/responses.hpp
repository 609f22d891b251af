// OpenAI's Responses API (POST /v1/responses) as a form of the chat
// completion: a request's `input` items (messages, function calls and
// their outputs, reasoning) and settings become a chat body that
// parse_chat_completion checks and translates, and the chat answer's
// message (reasoning, text, calls) becomes the response's output items,
// whole or as the Responses API's typed events. previous_response_id
// goes on from the turns a response_store keeps (the HTTP front's). See
// docs/protocol.md, "POST /v1/responses".
#pragma once

#include "messages/openai.hpp"
#include "messages/response_store.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <utility>
#include <vector>

namespace troupe::openai {

/// A Responses request as the chat completion it asks for.
struct response_request {
  completion_request chat; ///< one choice; a stream asks for its usage
  /// The settings the response object repeats (instructions, tools,
  /// tool_choice, text, reasoning, ...), as a JSON object's text.
  std::string echo;
  /// messages[k] of the chat came from input[input_of[k]] (-1: from
  /// `instructions`; -2: from an earlier response's turns), so a chat
  /// error names the request's own item.
  std::vector<std::int64_t> input_of;
  bool store = true;          ///< kept for previous_response_id (OpenAI's default)
  /// Answered at once, `queued`, and run while the client is away; read
  /// with GET /v1/responses/ID (needs `store`). With `chat.stream` its
  /// events stream as they come, and are kept, so that a client that lost
  /// the stream reads them again (GET /v1/responses/ID?stream=true).
  bool background = false;
  std::string previous_id;    ///< the response this one goes on from ("" for none)
  /// The conversation (OpenAI's Conversations API) it goes on from, and
  /// that its input and output items join once it ends ("" for none).
  std::string conversation;
  /// truncation "auto": where the prompt would not fit the context, the
  /// earliest of the earlier items (a conversation's, or the turns
  /// previous_response_id names) are dropped, as few as let it fit (the
  /// front tries the cuts, tokenizing each prompt). `cuts`: how many of
  /// them each possible cut drops, ascending (each leaves them beginning
  /// with a user's message, or none); `dropped`: those dropped here.
  bool truncate = false;
  std::vector<std::size_t> cuts;
  std::size_t dropped = 0;
  /// Tokens the context must leave after the prompt: max_output_tokens,
  /// else 1.
  std::uint64_t output_room = 1;
  std::string input_items;    ///< this turn's input as items (a JSON array), as a store keeps it
  /// The Troupe session its turns share (kept K and V), where it is kept:
  /// the request's own `session`, the conversation's it goes on from, or
  /// the one parse_response_request was given for a new conversation.
  std::string session;
};

/// A conversation kept: its items (a JSON array), each turn's input then
/// its response's output, oldest first; and its session (its first turn's).
struct conversation {
  std::string items;
  std::string session;
};
conversation conversation_of(const std::vector<const response_store::entry*>& turns);

/// The conversation an earlier response ends (or a kept conversation has),
/// or why it cannot be given.
using earlier_turns = std::function<std::variant<conversation, api_error>(const std::string& id)>;

/// Translates a POST /v1/responses body, as parse_chat_completion does a
/// chat's (same template, schema check and defaults); errors name the
/// Responses request's own fields (`input[2]`, `text.format`, ...).
/// `earlier` gives what a previous_response_id names (none: the server
/// stores no responses, and the field, or `store: true`, is refused). A
/// kept response's turn runs in a Troupe session, so that the next turn
/// reuses its K and V: its conversation's, or `new_session` for a new one.
/// `conversations` gives what a `conversation` names (a kept conversation's
/// items and session; none: the field is refused): the response goes on
/// from its items, in its session, kept or not. With truncation "auto",
/// `drop_earlier` (one of the request's `cuts`) of the earliest earlier
/// items are left out.
std::variant<response_request, api_error>
parse_response_request(std::string_view body, std::string_view base_model, std::string_view wire_id,
                       const chat_template& tpl, const std::function<bool(const std::string&)>& enforceable = {},
                       const sampling_defaults& defaults = {}, const earlier_turns& earlier = {},
                       std::string_view new_session = {}, const earlier_turns& conversations = {},
                       std::size_t drop_earlier = 0);

/// The wire's tokenize frame of the prompt a response request runs.
std::string tokenize_frame(const response_request& r, std::string_view wire_id);

/// Its answer: {"object": "response.input_tokens", "input_tokens"}.
std::string input_tokens_json(const wire::tokenize_reply& r);

/// A chat error as the Responses request names it: its param and the
/// messages it quotes mapped back (`response_format` is `text.format`,
/// `messages[3]` the input item it came from).
api_error as_response_error(api_error e, const response_request& request);

/// Builds a response from the chat answer's wire replies: the response
/// object (whole), or its events ("event: TYPE\ndata: {...}\n\n", each
/// with its sequence_number): response.created, then each output item
/// added, its text or arguments in deltas and done, then
/// response.completed (or response.incomplete, cut by max_output_tokens).
class response_answer {
public:
  response_answer(std::string id, std::int64_t created, const response_request& request);
  ~response_answer();
  response_answer(response_answer&&) noexcept;
  response_answer& operator=(response_answer&&) noexcept;

  std::string body(const std::vector<wire::done_reply>& done) const;
  std::string stream_start();
  std::string chunk(std::size_t k, const wire::token_reply& t);
  std::string choice_end(std::size_t k, const wire::done_reply& done);
  std::string stream_end();
  std::string stream_error(const api_error& e);
  /// An `error` event alone: how a background response's stream ends when
  /// it is cancelled (the response then is as snapshot("cancelled") gives).
  std::string error_event(const api_error& e);
  /// Once the stream ended (completed or incomplete): the response object,
  /// as the whole answer gives it; none before, or after a failure.
  std::optional<std::string> finished() const;
  /// The response object in `status` with no output yet: a background
  /// response's "queued", "in_progress" or "cancelled", or "failed" with
  /// `error`'s code and message.
  std::string snapshot(std::string_view status, const api_error* error = nullptr) const;

private:
  struct state;
  std::unique_ptr<state> s_;
};

/// A streamed background response's events as they were sent, each under
/// its sequence_number (the first is 0): what GET
/// /v1/responses/ID?stream=true&starting_after=N sends again.
class event_log {
public:
  event_log() = default;
  /// The log of text() `all` (as a response_store entry keeps it).
  explicit event_log(std::string all);
  /// Appends whole events ("event: TYPE\ndata: {...}\n\n", one or more).
  void add(std::string_view events);
  std::size_t size() const noexcept { return starts_.size(); }
  /// The events from sequence number `first` on, as sent (empty past the end).
  std::string_view from(std::size_t first) const noexcept;
  const std::string& text() const noexcept { return text_; }

private:
  std::string text_;
  std::vector<std::size_t> starts_; ///< where each event begins in text_
};

/// What GET /v1/responses/ID's query asks (OpenAI's retrieve): the
/// response's events again rather than the object, from after a sequence
/// number. `include` and `include_obfuscation` are read past (no
/// obfuscation is added); any other key is refused.
struct retrieve_query {
  bool stream = false;
  std::optional<std::uint64_t> starting_after;
  /// The first event to send.
  std::size_t first() const noexcept { return starting_after ? static_cast<std::size_t>(*starting_after) + 1 : 0; }
};
std::variant<retrieve_query, api_error> parse_retrieve_query(std::string_view query);

/// A path's rest after an API's root ("/ID/items") split at '/', each
/// part percent-decoded ("" and "/" have none; a last '/' leaves an empty
/// part).
std::vector<std::string> path_parts(std::string_view rest);
/// path_parts of a rest that names something ("/A" or "/A/B", no part
/// empty); none for another ("" included).
std::optional<std::vector<std::string>> named_parts(std::string_view rest);
/// A URL query's key=value pairs, percent-decoded, in order.
std::vector<std::pair<std::string, std::string>> query_pairs(std::string_view query);

/// GET /v1/responses/ID/input_items (OpenAI's): a page of the input items
/// of kept response `response_id` (`input_items`, as a response_store
/// entry keeps them), each as OpenAI lists it: messages typed, their text
/// content as parts (`input_text`; an assistant's `output_text`), and an
/// id (the item's own, else made from the response's and the item's place,
/// the same at every read). The query: `limit` (1 to 100, default 20),
/// `order` (`desc`, the default: the last item first; or `asc`), `after`
/// (an item id: those after it in that order); `include` read past.
std::variant<std::string, api_error> input_items_page(std::string_view response_id, std::string_view input_items,
                                                      std::string_view query);

/// Checks `items` (a JSON array's text) as a response's input items are
/// checked (each a message, function call, call output or reasoning item
/// Troupe serves, or an item_reference to one before it, in `prior` or in
/// `items`), errors naming `field[k]`; the items, references resolved.
std::variant<std::string, api_error> resolve_input_items(std::string_view prior, std::string_view items,
                                                         const std::string& field);
/// `items` (a JSON array's text) as OpenAI lists them: messages typed,
/// their text content as parts (`input_text`; an assistant's
/// `output_text`), and each an id: its own, else its type's prefix, "_",
/// `tail` and its place (`msg_` + tail + "3").
std::string listed_items(std::string_view items, std::string_view tail);
/// A page of listed items (OpenAI's list): the query's `limit` (1 to 100,
/// default 20), `order` (`desc`, the default, or `asc`) and `after` (an
/// item id); `include` read past. `what` names the list in errors
/// ("response resp_..."), `path` the endpoint.
std::variant<std::string, api_error> items_page(std::string_view listed, std::string_view query,
                                                std::string_view what, std::string_view path);

/// What a kept response object says of itself: its `status` ("" where the
/// body is not a response) and whether it ran in the background.
struct response_state {
  std::string status;
  bool background = false;
  std::string conversation; ///< the conversation it is a turn of ("" for none)
  /// Still running: "queued" or "in_progress".
  bool running() const noexcept { return status == "queued" || status == "in_progress"; }
  /// Ended with an answer: "completed", or "incomplete" (cut short).
  bool answered() const noexcept { return status == "completed" || status == "incomplete"; }
};
response_state response_state_of(std::string_view body);
/// A kept response object `body` as failed with `error` (its code and
/// message), its output as it was: how a response that was running when
/// the server went down is read back.
std::string failed_snapshot(std::string_view body, const api_error& error);

} // namespace troupe::openai
