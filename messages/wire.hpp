// The client-facing JSON wire protocol (one JSON object per ZeroMQ frame):
// typed requests and replies, the parser with its validation, and the
// serializers. Used by the intake actor and troupe-client; see docs/protocol.md.
#pragma once

#include "messages/stat.hpp"

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::wire {

/// Stable error codes sent in `error` replies.
enum class error_code : std::uint8_t {
  bad_request,     ///< malformed JSON, missing or ill-typed field, bad value
  frame_too_large, ///< the frame exceeds the server's size limit
  unknown_adapter, ///< `adapter` names no adapter of this deployment
  unknown_request, ///< `cancel` of an id with no request in flight
  duplicate_id,    ///< a generate reuses the id of one still in flight
  prompt_too_long, ///< prompt + max_tokens exceed the model's context
  overloaded,      ///< too many requests pending; retry later
  shutting_down,   ///< the server is draining and takes no new work
  adapter_in_use,  ///< `unload_adapter` of an adapter requests in flight use
  adapter_exists,  ///< `load_adapter` of a name already registered
  bad_adapter,     ///< the adapter's files are missing or corrupt
  internal,        ///< a server-side failure; the request was not completed
};

/// Wire name of `x`, e.g. "bad_request".
std::string_view to_string(error_code x) noexcept;

// -- requests ------------------------------------------------------------

struct sampling_params {
  float temperature = 1.0f; ///< >= 0; 0 means greedy
  float top_p = 1.0f;       ///< in (0, 1]
  std::int32_t top_k = 0;   ///< >= 0; 0 means no top-k cut
  std::optional<std::uint64_t> seed;
  /// In [-2, 2], as OpenAI's: subtracted from the logit of every token the
  /// output holds already (presence), and that many times (frequency),
  /// before sampling.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  /// Added to those tokens' logits before sampling: (token, bias in
  /// [-100, 100]), in token order, each token once.
  std::vector<std::pair<std::int32_t, float>> logit_bias{};
  /// In [0, 1], vLLM's: tokens less likely than min_p times the most
  /// likely one are not drawn; 0 cuts nothing.
  float min_p = 0.0f;
  /// Above 0 and at most 100, vLLM's (and Hugging Face's): each token of
  /// the prompt or the output so far has its logit divided by it where
  /// positive, multiplied by it otherwise; 1 is none.
  float repetition_penalty = 1.0f;
};

struct generate_request {
  std::string id;
  /// Exactly one of `prompt` (text) and `prompt_tokens` (ids) is given.
  std::optional<std::string> prompt;
  std::optional<std::vector<std::int32_t>> prompt_tokens;
  /// Adapter name; empty for the base model.
  std::string adapter;
  std::uint32_t max_tokens = 16;
  /// max_tokens is cut to what the context (and the KV-cache pool) leaves
  /// after the prompt rather than the request refused; without max_tokens,
  /// that is all of it (up to the server's limit): OpenAI's chats that
  /// give none, as vLLM serves them.
  bool fit_context = false;
  sampling_params sampling;
  std::vector<std::string> stop;
  bool stream = false;
  std::string session;     ///< optional multi-turn session id
  std::int32_t priority = 0; ///< higher is more urgent; policies may ignore it
  /// -1: none; k >= 0: each output token's log-probability and the k most
  /// likely tokens' (token_reply::logprobs, done_reply::logprobs).
  std::int32_t logprobs = -1;
  /// -1: none; k >= 0: each prompt token's log-probability given those
  /// before it and the k most likely tokens' there (token_reply::
  /// prompt_logprobs, done_reply::prompt_logprobs). Such a request computes
  /// its whole prompt, reusing no session cache.
  std::int32_t prompt_logprobs = -1;
  /// Token ids that end the output as a stop string does (finish "stop";
  /// the token is part of the output), in token order, each once.
  std::vector<std::int32_t> stop_token_ids{};
  /// The end-of-sequence token ends nothing: it is an output token like
  /// any other (a benchmark replaying a trace's output lengths).
  bool ignore_eos = false;
  /// vLLM's: false shows special tokens in the output's text as their own
  /// text ("<|eot_id|>", "</s>"), and stop strings match it; a token that
  /// ends the output (end of sequence, stop_token_ids) is still left out.
  bool skip_special_tokens = true;
  /// Neither the end-of-sequence token nor stop_token_ids are sampled
  /// among the first min_tokens output tokens (stop strings still end the
  /// output). At most max_tokens.
  std::uint32_t min_tokens = 0;
  /// vLLM's: k >= 1: only the prompt's last k tokens are read (the ones
  /// before them are cut off, a leading BOS among them); -1: as many of
  /// its last tokens as leave room for max_tokens in the context (one at
  /// least); 0: the whole prompt.
  std::int32_t truncate_prompt_tokens = 0;
  /// vLLM's: words the output does not write, each 1 to max_bad_word_bytes
  /// (at most max_bad_words): the token sequences of each word alone and
  /// after a space are never completed (a sequence's last token is banned
  /// where the output ends with the tokens before it; a one-token word is
  /// always banned). Not on a backend that samples from no logits.
  std::vector<std::string> bad_words{};
  /// vLLM's: not empty: the output's tokens are drawn from these alone (in
  /// token order, each once; 1 to the vocabulary's size, ids in it). Not on
  /// a backend that samples from no logits.
  std::vector<std::int32_t> allowed_token_ids{};
  /// "response_format": "json_object": the output is one JSON object (each
  /// step samples only tokens that keep it valid JSON; it ends, finish
  /// "stop", when the object closes). "text" (the default): no constraint.
  bool json_object = false;
  /// "json_schema": {...}: the output is a value of this JSON Schema (whose
  /// top level is an object or an array; runtime/json_schema.hpp says which keywords
  /// are enforced), as compact JSON text; empty: none. Not with
  /// response_format "json_object".
  std::string json_schema{};
  /// "json_trigger": "<tool_call>" (1 to 64 bytes), with response_format
  /// "json_object" or json_schema: the output is free text, and each time
  /// this string appears in it one value held as those say follows, then
  /// free text again. A backend that samples from no logits leaves all of
  /// it free. Empty: the whole output is the value.
  std::string json_trigger{};
  /// "json_trigger_first": true: the output begins with json_trigger (so
  /// it holds at least one value); a backend that samples from no logits
  /// refuses it, as it does json_schema.
  bool json_trigger_first = false;
  /// "json_trigger_head": "[ARGS]" (1 to 64 bytes), with json_trigger and
  /// json_schema: after the trigger the output writes the name of one of
  /// json_schema's top-level properties, then this mark, then one value
  /// held to that property's schema (compiled on its own, the top level's
  /// "$defs" beside it): Mistral's "[TOOL_CALLS]name[ARGS]{...}". Empty:
  /// the value follows the trigger, held to json_schema itself.
  std::string json_trigger_head{};
  /// "json_answer": {...}, with json_trigger (not json_trigger_first): the
  /// output either begins with json_trigger (values follow as those say)
  /// or is one value of this JSON Schema, and ends when that closes (as
  /// compact JSON text; empty: none). What tools offered with "auto" and
  /// response_format together use. A backend that samples from no logits
  /// refuses it, as it does json_schema.
  std::string json_answer{};
  /// "reasoning_close": "</think>" (1 to 64 bytes): a reasoning model's
  /// output thinks first, free text up to this mark; with response_format
  /// "json_object", json_schema, choice, regex or grammar only what follows
  /// it (the content) is held as those and json_trigger say. Output that
  /// never writes it is all thinking. The done reply counts the thinking's
  /// tokens (usage.reasoning_tokens). Empty: none.
  std::string reasoning_close{};
  /// "reasoning_open": "<think>" (up to 64 bytes), with reasoning_close:
  /// only output that begins with it (after at most 32 blanks) thinks
  /// first; other output is all content. Empty: the prompt opened the
  /// thinking (DeepSeek R1's template), so the output begins in it.
  std::string reasoning_open{};
  /// "choice": ["yes", "no"] (vLLM's guided_choice): the output is one of
  /// these texts (1 to max_choices, each 1 to max_choice_bytes, distinct),
  /// held token by token as json_schema holds a value; it ends (finish
  /// "stop") when it is one that no other goes on from, and where one does,
  /// the end-of-sequence token may end it. Not with response_format,
  /// json_schema, json_trigger or reasoning_close; empty: none.
  std::vector<std::string> choice{};
  /// "regex": (vLLM's guided_regex, 1 to max_regex_bytes) the whole output
  /// matches this regular expression (JSON Schema's "pattern" syntax,
  /// runtime/json_pattern.hpp), held token by token as choice holds it; it
  /// ends (finish "stop") where it matches and no character may follow,
  /// and where one may, the end-of-sequence token may end it. Not with
  /// choice or what choice is not with; empty: none.
  std::string regex{};
  /// "grammar": (vLLM's guided_grammar, 1 to max_grammar_bytes) the whole
  /// output is a sentence of this context-free grammar, written in
  /// llama.cpp's GBNF (runtime/grammar_constraint.hpp; the rule root),
  /// held token by token as regex holds it. Not with regex or what regex
  /// is not with; empty: none.
  std::string grammar{};
};

/// Most bad_words, and the longest one, taken.
inline constexpr std::size_t max_bad_words = 64;
inline constexpr std::size_t max_bad_word_bytes = 256;
/// Longest json_trigger taken.
inline constexpr std::size_t max_json_trigger_bytes = 64;
/// Most choices, and the longest choice, taken.
inline constexpr std::size_t max_choices = 64;
inline constexpr std::size_t max_choice_bytes = 256;
/// Longest regex taken.
inline constexpr std::size_t max_regex_bytes = 4096;
/// Longest grammar taken.
inline constexpr std::size_t max_grammar_bytes = 16384;

struct cancel_request { std::string id; };
struct health_request { std::string id; };
struct stats_request { std::string id; };
struct list_adapters_request { std::string id; };

/// Registers an adapter at run time: `path` is a PEFT directory (its rank is
/// read from adapter_config.json); without one (sim backend) `rank` is needed.
struct load_adapter_request {
  std::string id;
  std::string name;
  std::string path;
  std::uint32_t rank = 0; ///< 0: from the files
};

/// Unregisters an adapter; refused while requests using it are in flight.
struct unload_adapter_request {
  std::string id;
  std::string name;
};

/// Advisory (Symphony): `session`'s next turn is expected in about `in_s`
/// seconds; the server brings its cached KV toward the GPU ahead of it.
struct advise_request {
  std::string id;
  std::string session;
  double in_s = 0;
  std::int32_t priority = 0;
};

/// The token ids `prompt` becomes as a generate's prompt (with the
/// tokenizer's BOS where it adds one): a client counts its context so.
struct tokenize_request {
  std::string id;
  std::string prompt;
};

/// The text `tokens` make as a generate's output.
struct detokenize_request {
  std::string id;
  std::vector<std::int32_t> tokens;
};

using request = std::variant<generate_request, cancel_request, health_request,
                             stats_request, list_adapters_request, load_adapter_request,
                             unload_adapter_request, advise_request, tokenize_request, detokenize_request>;

/// Why a frame was refused; `id` is the request's id when it could be read.
struct parse_error {
  error_code code = error_code::bad_request;
  std::string id;
  std::string message;
};

/// Bounds the parser enforces.
struct parse_limits {
  std::uint64_t max_frame_bytes = 1 << 20;
  std::uint32_t max_tokens = 1 << 20;   ///< largest accepted max_tokens
  std::uint32_t max_stop = 16;          ///< most stop strings, and most stop_token_ids
  std::uint32_t max_id_chars = 256;     ///< longest request id
  std::int32_t vocab_size = 1 << 30;    ///< prompt_tokens must lie in [0, vocab)
  std::uint32_t max_logprobs = 20;      ///< most alternatives `logprobs` or `prompt_logprobs` may ask for
  std::uint32_t max_logit_bias = 300;   ///< most tokens `logit_bias` may name
};

/// Parses and validates one frame. Never throws.
std::variant<request, parse_error> parse_request(std::string_view frame,
                                                 const parse_limits& limits);

/// A JSON parser's error as a client reads it: nlohmann's message without
/// its "[json.exception...] " tag, cut to 240 bytes (it may quote the input).
std::string parser_message(const std::exception& e);

/// `f` as the double with the same shortest decimal form, so 0.7f goes on
/// the wire as 0.7 rather than 0.699999988079071.
double wire_float(float f);

/// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
/// surrogates, nothing past U+10FFFF), as a JSON string's text must be.
bool valid_utf8(std::string_view s) noexcept;

/// The `id` of any request alternative.
const std::string& id_of(const request& r) noexcept;

// -- replies -------------------------------------------------------------

struct accepted_reply {
  std::string id;
  std::uint32_t prompt_tokens = 0;
};

/// A token with its log-probability under the model (the log-softmax of
/// the raw logits, before temperature, top-k or top-p; -infinity, sent as
/// null, for a token it cannot produce). `text` is the token's own piece:
/// when it is not valid UTF-8 alone (part of a character), the frame also
/// carries its "bytes", which the parser reads back exactly.
struct token_logprob {
  std::int32_t token = 0;
  std::string text;
  float logprob = 0;
};

/// An output token's log-probability and the most likely tokens at its
/// place, most likely first (as many as the request's `logprobs` asked).
struct token_logprobs {
  token_logprob sampled;
  std::vector<token_logprob> top;
};

struct token_reply {
  std::string id;
  std::uint32_t index = 0; ///< position of tokens[0] in the output
  std::vector<std::int32_t> tokens;
  std::string text;
  /// One per token when the request asked for log-probabilities.
  std::vector<token_logprobs> logprobs;
  /// In the reply of the first token (index 0) of a streaming request that
  /// asked for them: one per prompt token, in order, the first (which
  /// nothing precedes) with a NaN log-probability and no alternatives.
  std::vector<token_logprobs> prompt_logprobs;
};

struct timings {
  double queue_ms = 0; ///< arrival to first scheduled step
  double ttft_ms = 0;  ///< arrival to first output token
  double e2e_ms = 0;   ///< arrival to the terminal reply
};

struct done_reply {
  std::string id;
  std::string finish_reason; ///< "length", "stop", "eos", "cancelled"
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  timings time;
  /// Whole output; filled only for non-streaming requests.
  std::optional<std::vector<std::int32_t>> tokens;
  std::optional<std::string> text;
  /// One per output token; only for non-streaming requests that asked.
  std::optional<std::vector<token_logprobs>> logprobs;
  /// One per prompt token, as token_reply::prompt_logprobs; only for
  /// non-streaming requests that asked.
  std::optional<std::vector<token_logprobs>> prompt_logprobs;
  /// Of prompt_tokens, those read from a cache instead of computed (a
  /// session's history, or prompt pages cached by prefix caching); in
  /// "usage" only when not 0.
  std::uint32_t cached_tokens = 0;
  /// Of completion_tokens, the thinking's (a request with reasoning_close:
  /// up to the token that completes the mark); in "usage" only when not 0.
  std::uint32_t reasoning_tokens = 0;
};

struct error_reply {
  std::string id;
  error_code code = error_code::internal;
  std::string message;
};

struct health_reply {
  std::string id;
  std::string status; ///< "ok" or "draining"
};

/// JSON: "stats" maps each name to its value; "counters" and "levels" list
/// the names of those kinds (the rest are gauges).
struct stats_reply {
  std::string id;
  stat_values values;
};

struct adapter_info {
  std::string name;
  std::uint32_t rank = 0;
  bool resident = false;
};

struct adapters_reply {
  std::string id;
  std::vector<adapter_info> adapters;
  /// The context (prompt and max_tokens) every model is served with; 0:
  /// not said.
  std::uint64_t max_context = 0;
};

/// The answer to load_adapter / unload_adapter.
struct adapter_reply {
  std::string id;
  std::string name;
  std::uint32_t rank = 0;
  std::string status; ///< "loaded" or "unloaded"
};

std::string to_json(const accepted_reply& x);
std::string to_json(const token_reply& x);
std::string to_json(const done_reply& x);
std::string to_json(const error_reply& x);
std::string to_json(const health_reply& x);
std::string to_json(const stats_reply& x);
std::string to_json(const adapters_reply& x);
std::string to_json(const adapter_reply& x);

/// Serializes a request (used by troupe-client and tests).
std::string to_json(const request& x);

/// A reply as a client sees it after parsing; for troupe-client and tests.
/// The answer to advise: where the session's cache is ("none", "on_gpu",
/// "fetching", "in_host", "scheduled").
struct advise_reply {
  std::string id;
  std::string session;
  std::string status;
};
std::string to_json(const advise_reply& x);

/// The answer to tokenize: the prompt's token ids, and the context a
/// request's prompt and max_tokens must fit in.
struct tokenize_reply {
  std::string id;
  std::vector<std::int32_t> tokens;
  std::uint64_t max_context = 0;
  /// The model's end-of-sequence tokens (what ends a generate's output
  /// unless ignore_eos): a front's beam search ends a beam at them.
  std::vector<std::int32_t> end_tokens{};
};
std::string to_json(const tokenize_reply& x);

/// The answer to detokenize.
struct detokenize_reply {
  std::string id;
  std::string text;
};
std::string to_json(const detokenize_reply& x);

using reply = std::variant<accepted_reply, token_reply, done_reply, error_reply, health_reply, stats_reply,
                           adapters_reply, adapter_reply, advise_reply, tokenize_reply, detokenize_reply>;

/// Parses a server reply; a parse_error for anything that is not one.
std::variant<reply, parse_error> parse_reply(std::string_view frame);

} // namespace troupe::wire
