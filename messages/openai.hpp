// The OpenAI-compatible HTTP API Troupe serves (POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics), as
// translations to and from the wire protocol: a completion request becomes
// one wire generate frame (a chat's messages rendered into one prompt by a
// chat template), and the wire replies become OpenAI's completion object or
// its server-sent events. No I/O here; runtime/http_front does the sockets. The wire parser
// stays the one place that validates values (max_tokens, temperature, ...):
// its bad_request messages, which name the field, come back as 400s.
// See docs/protocol.md, "OpenAI-compatible HTTP".
#pragma once

#include "messages/tool_calls.hpp"
#include "messages/beam_search.hpp"
#include "messages/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::jinja {
class program;
}

namespace troupe::openai {

/// An error as OpenAI's API reports one: the HTTP status and
/// {"error": {"message", "type", "param", "code"}}.
struct api_error {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code;
  std::string message;
  std::string param; ///< the request field at fault; "" when none
};
std::string to_json(const api_error& e);
/// A 400 `bad_request` saying `message`, naming `param` ("" for none).
api_error bad_request(std::string message, std::string param = {});

/// Most choices one HTTP request may ask for (prompts × n).
inline constexpr std::size_t max_choices = 64;

/// Most alternatives `logprobs` (completions) or `top_logprobs` (chat) may
/// ask for: the wire's limit (wire::parse_limits::max_logprobs).
inline constexpr std::uint32_t max_logprobs = 20;

/// Where a reasoning model's thinking is in its output (vLLM's reasoning
/// parsers). Output that begins with `open` (after blanks) is reasoning up
/// to `close`, or to the end when `close` never comes (the output was cut
/// short); the content is what follows `close`. Otherwise the output is all
/// content, unless `opened_by_prompt`: the prompt opened the reasoning
/// (DeepSeek R1's template ends with "<think>\n"), so the output is
/// reasoning up to `close` all the same.
struct reasoning_format {
  std::string open = "<think>";
  std::string close = "</think>";
  bool opened_by_prompt = false;
};

/// The reasoning parsers by name: "deepseek_r1" (opened by the prompt) and
/// "qwen3" (the output opens its reasoning, as Qwen3 and QwQ do); none for
/// another name.
std::optional<reasoning_format> reasoning_parser(std::string_view name);
/// Their names.
const std::vector<std::string>& reasoning_parser_names();

/// Sampling values a request that leaves them out is given (the model's
/// generation_config.json, as vLLM's --generation-config auto gives them);
/// none: the wire's defaults (OpenAI's).
struct sampling_defaults {
  std::optional<double> temperature{};
  std::optional<double> top_p{};
  std::optional<std::int64_t> top_k{};
  std::optional<double> min_p{};
  std::optional<double> repetition_penalty{};
  /// A chat's max_tokens when it gives none (generation_config.json's
  /// max_new_tokens), still cut to what the context leaves.
  std::optional<std::int64_t> max_tokens{};
  bool operator==(const sampling_defaults&) const = default;
};

/// A completion request, translated.
struct completion_request {
  /// The wire generates, one per choice in OpenAI's order (each prompt's n
  /// choices in turn), and their ids: `wire_id` for a lone choice, else
  /// `wire_id.K`. With a seed, a prompt's K-th choice has seed + K.
  std::vector<std::string> frames;
  std::vector<std::string> ids;
  std::uint32_t n = 1;       ///< choices per prompt in the answer
  /// Candidates generated per prompt (frames per prompt; at least n):
  /// completions' `best_of`. Above n, each prompt's n candidates of the
  /// highest mean log-probability per generated token are the answer's
  /// choices (the wire is asked for log-probabilities to rank them).
  std::uint32_t best_of = 1;
  std::string model;         ///< as the client named it (the base model or an adapter)
  bool stream = false;
  bool include_usage = false; ///< stream_options.include_usage: a last chunk with the usage
  /// vLLM's stream_options.continuous_usage_stats (with include_usage): every
  /// chunk carries its choice's usage so far.
  bool continuous_usage = false;
  bool chat = false;          ///< a chat completion (its answer is a message)
  /// Asked with OpenAI's legacy `functions` / `function_call`: the answer's
  /// call is `message.function_call` (one), finish_reason "function_call".
  bool legacy_functions = false;
  /// The stop strings (the request's, then the chat template's): the wire
  /// keeps the one that ended the output in its text, OpenAI leaves it out.
  std::vector<std::string> stop;
  /// vLLM's include_stop_str_in_output: the first `stops_kept` of `stop`
  /// (the request's own) stay in the text when one ends it.
  std::size_t stops_kept = 0;
  /// -1: no log-probabilities; K >= 0: each token's and K alternatives'
  /// (completions' `logprobs`, chat's `top_logprobs` with `logprobs`).
  std::int32_t logprobs = -1;
  /// Completions' `echo`: each choice's text begins with its prompt. For a
  /// text prompt asked without log-probabilities that text is
  /// `echo_text[k]` (one per frame); otherwise (token ids, or logprobs) the
  /// wire is asked for the prompt's log-probabilities, with as many
  /// alternatives as `logprobs`, and the prompt's tokens give the text
  /// (echo_text empty).
  bool echo = false;
  std::vector<std::string> echo_text;
  /// echo with max_tokens 0 (scoring a text): the wire generates its least,
  /// one token, which the answer leaves out: the prompt alone, no
  /// completion tokens, finish_reason "length".
  bool prompt_only = false;
  /// A chat offered tools (tool_choice not "none"): how its output's calls
  /// are read (messages/tool_calls.hpp).
  using tool_calling = tool_format;
  /// Where the wire's json_schema, choice or regex came from when it is
  /// vLLM's guided_json, guided_choice, guided_regex or structured_outputs
  /// (a refusal of it names that field); empty otherwise.
  std::string schema_field{};
  std::optional<tool_calling> tools;
  /// A chat whose output may open with the model's reasoning (the template's
  /// reasoning_parser): the answer gives it as `reasoning_content`, apart
  /// from the content, and only the content may hold tool calls.
  std::optional<reasoning_format> reasoning;
  /// vLLM's use_beam_search (completions): the front searches `best_of`
  /// beams per prompt with one-token generates (frames[p × best_of] is
  /// prompt p's), and the `n` best are its choices.
  std::optional<beam_settings> beam{};
};

/// Translates a POST /v1/completions body. `model` names `base_model` (the
/// base model) or an adapter; `prompt` is one prompt (text or token ids) or
/// an array of them, each answered with `n` choices; `session` (Troupe's
/// own field) names a multi-turn session, as in the wire; `logprobs` (a
/// count) asks for log-probabilities; `echo` puts the prompt before the
/// output, with its tokens' log-probabilities too when `logprobs` asks (the
/// first token's null: nothing precedes it), and takes max_tokens 0 (the
/// prompt alone); `best_of` generates that many candidates per prompt and
/// answers with the n most likely (not streamed); presence_penalty,
/// frequency_penalty and logit_bias pass to the wire as they are; `suffix`
/// (insertion), which Troupe does not implement, is refused with a message
/// rather than ignored, as are fields it does not know.
std::variant<completion_request, api_error> parse_completion(std::string_view body, std::string_view base_model,
                                                             std::string_view wire_id,
                                                             const sampling_defaults& defaults = {});

/// The texts a chat template is made of (chat_template = "custom" gives
/// them in the config; the built-in templates have their own).
struct chat_formats {
  std::string system{};     ///< a system message, "{content}" its text; empty: system messages are refused
  std::string user{};       ///< a user message
  std::string assistant{};  ///< an assistant message
  std::string generation{}; ///< after the last message: the assistant's turn opens
  /// Strings that close the assistant's turn: generation stops there.
  std::vector<std::string> stop{};
  /// Tools (all three, or none: tools refused). `tools` holds "{tools}",
  /// where the functions go, one JSON object to a line; it ends the system
  /// message's text (or is the text of a system message put first).
  /// `tool_call` holds "{call}", where one call's {"name", "arguments"}
  /// goes, after text that opens a call (its marker, such as "<tool_call>");
  /// an assistant message's calls follow its text, one to a line.
  /// `tool_result` holds "{content}", where a tool message's text goes;
  /// consecutive tool messages make one user message, one to a line.
  std::string tools{};
  std::string tool_call{};
  std::string tool_result{};
  /// model and jinja only: the key of a call's arguments in the output,
  /// "arguments" (""), or "parameters" (Llama 3.1's JSON calls).
  std::string tool_arguments{};
};

/// How a chat's messages become one prompt: each message's text put into
/// its role's format where "{content}" is, in order, then `generation` (the
/// assistant's turn opening). The result is the text a Hugging Face chat
/// template renders; the model's tokenizer reads its markers as text (it
/// adds BOS in front, and has no other special tokens in text).
struct chat_template : chat_formats {
  std::string name;
  /// Llama 2's form: an optional system message first, which goes inside
  /// the first user message; then user and assistant alternate, starting
  /// and ending with user; each message's text is trimmed.
  bool llama2 = false;
  /// Each message's text trimmed of blanks at both ends (Llama 3's).
  bool trim = false;
  /// A Hugging Face chat template (chat_template = "model" or "jinja"),
  /// which renders the messages and tools itself, as transformers'
  /// apply_chat_template does (messages/jinja.hpp); the formats above are
  /// then unused but for `tool_call` (how the model writes a call) and
  /// `stop`. Null: the formats render.
  std::shared_ptr<const jinja::program> program;
  /// The model's template named "tool_use", when it has one: used instead
  /// of `program` for a chat that offers tools, as transformers chooses.
  std::shared_ptr<const jinja::program> tool_use_program;
  /// The template's bos_token and eos_token. A rendering that begins with
  /// bos_token loses it: the tokenizer puts BOS in front itself.
  std::string bos_token;
  std::string eos_token;
  /// The model's reasoning, apart from its content in the answers (none:
  /// all of the output is content).
  std::optional<reasoning_format> reasoning;
  /// A chat may bring its own Jinja template (the request's
  /// `chat_template`, vLLM's): it renders that chat in place of this one's
  /// text, with this one's calls, stop strings, reasoning and special
  /// texts. False: such a chat is refused.
  bool request_templates = false;
};

/// A Hugging Face chat template's text and the special texts it is given.
struct jinja_source {
  std::string text;
  std::string bos_token;
  std::string eos_token;
  std::string tool_use_text{}; ///< the template named "tool_use", if any
};

/// The built-in template names: "llama2" (Meta's [INST] format), "llama3"
/// (its header / <|eot_id|> format), "chatml". ("custom", "model" and
/// "jinja" are made from the config and files.)
const std::vector<std::string>& chat_template_names();

/// Why a template cannot be made: the config key at fault ("chat_user") and
/// what is wrong with it.
struct chat_template_error {
  std::string key;
  std::string what;
};

/// The first of the custom formats given (non-empty) with a template
/// `name` other than "custom" ("" too: no template), as the error.
std::optional<chat_template_error> custom_formats_refused(std::string_view name, const chat_formats& custom);

/// The template `name`: a built-in one, or "custom" from `custom` (the user
/// and assistant formats must hold "{content}", the system format too
/// unless empty; stop strings must not be empty; the tool formats are all
/// given or none, each with its slot, and `tool_call` opens a call with
/// text before "{call}"). Custom formats given with another name are an
/// error, but for "model", "jinja" and "auto" (a Hugging Face template,
/// `jinja`), which take `tool_call` and `stop`: `tool_call` says how the model writes
/// a call (default: Hermes' <tool_call> tags where the template's text
/// holds "<tool_call>"; otherwise tools are refused). Without `jinja` the
/// template's text is not read (the config check, before files are).
std::variant<chat_template, chat_template_error> make_chat_template(std::string_view name, chat_formats custom = {},
                                                                    const jinja_source* jinja = nullptr);

/// Translates a POST /v1/chat/completions body: `messages` (system or
/// developer, user, assistant with text or tool_calls, and tool; text
/// content) rendered by `tpl` into the prompt, the template's stop strings
/// added to the request's; otherwise as parse_completion
/// (max_completion_tokens is max_tokens; logprobs is a boolean and
/// top_logprobs the count; images are refused). `tools` (functions) are
/// rendered into the system message by the template's tool formats, and
/// `tool_choice` says what the answer may be: "auto" (text or calls),
/// "required" or {"type": "function", "function": {"name"}} (one call,
/// constrained), "none" (text, tools not shown).
/// `enforceable` says whether the server can hold a value to a JSON Schema
/// (its text); none: every schema is taken to be. With tool_choice "auto",
/// a call the model opens is held to the tools' names and its function's
/// parameters where they are enforceable (to a JSON object otherwise): the
/// wire's json_trigger at the template's call marker.
std::variant<completion_request, api_error>
parse_chat_completion(std::string_view body, std::string_view base_model, std::string_view wire_id,
                      const chat_template& tpl, const std::function<bool(const std::string&)>& enforceable = {},
                      const sampling_defaults& defaults = {});

/// Translates a POST /v1/advise body (Troupe's own: Symphony's advisory,
/// the next turn of `session` is coming in `in_s` seconds) into a wire
/// advise frame; the wire parser checks the values and names the field.
std::variant<std::string, api_error> parse_advise(std::string_view body, std::string_view wire_id);

/// The answer to POST /v1/advise: {"session", "status"} (where the cache is).
std::string advise_json(const wire::advise_reply& r);

/// Translates a POST /v1/load_lora_adapter body ({"lora_name", "lora_path"},
/// vLLM's names, and Troupe's own "rank" for the sim backend) into a wire
/// load_adapter frame, or a POST /v1/unload_lora_adapter body
/// ({"lora_name"}) into an unload_adapter frame; the wire parser checks the
/// values (the error names the wire's field).
std::variant<std::string, api_error> parse_adapter_update(std::string_view body, std::string_view wire_id, bool load);

/// The answer to either: {"lora_name", "rank", "status"} ("loaded" or
/// "unloaded").
std::string adapter_update_json(const wire::adapter_reply& r);

/// Translates a POST /tokenize body ({"model", "prompt"}, vLLM's) into a
/// wire tokenize frame, or a POST /detokenize body ({"model", "tokens"})
/// into a wire detokenize frame. `model` is optional: every adapter shares
/// the base model's tokenizer. The wire parser checks the values. A
/// tokenize body with "messages" (vLLM's chat form) is rendered by `tpl`
/// (none: refused) as a chat completion of `base_model` would render it.
std::variant<std::string, api_error> parse_tokenizer_request(std::string_view body, std::string_view wire_id,
                                                             bool tokenize, const chat_template* tpl = nullptr,
                                                             std::string_view base_model = {});

/// The answers, as vLLM's: {"count", "max_model_len", "tokens"} and
/// {"prompt"}.
std::string tokenize_json(const wire::tokenize_reply& r);
std::string detokenize_json(const wire::detokenize_reply& r);

/// The HTTP form of a wire error answering a load or an unload: as
/// from_wire, but files that cannot be read as an adapter (bad_adapter) are
/// the client's error, 400 naming lora_path, and an unknown name names
/// lora_name.
api_error adapter_update_error(wire::error_code code, std::string message);

/// The HTTP form of a wire error (a refusal, or a failure after acceptance).
api_error from_wire(wire::error_code code, std::string message);

/// The HTTP form of the wire's refusal of one of `request`'s frames: as
/// from_wire, but a schema the intake cannot enforce, when it is the forced
/// tool call's, names the tools, and when it is guided_json's or
/// structured_outputs', that field.
api_error refusal(const completion_request& request, wire::error_code code, std::string message);

/// OpenAI's finish_reason for the wire's: "length"; "stop" for a stop
/// string or the end-of-sequence token; "cancelled" stays (the client went
/// away, so nobody reads it).
std::string_view finish_reason(std::string_view wire_reason) noexcept;

/// Builds one completion's answer from its choices' wire replies: a text
/// completion or a chat completion, whole or streamed. Each choice's text
/// ends before the first stop string in it (OpenAI's rule; the wire keeps
/// it): a stream holds back text that may be the start of one until the
/// next chunk tells. The usage counts each prompt's tokens once.
class completion_answer {
public:
  completion_answer(std::string id, std::int64_t created, const completion_request& request);
  /// Non-streaming: the whole completion object from each frame's done
  /// (with best_of above n, each prompt's best n candidates, in the order
  /// generated; the usage counts every candidate's tokens).
  std::string body(const std::vector<wire::done_reply>& done) const;
  /// Streaming: the events that open the stream ("" for a text completion;
  /// a chat's first chunk of each choice names the assistant's role).
  std::string stream_start() const;
  /// Streaming: choice `k` was accepted, its prompt `prompt_tokens` long
  /// (what each chunk's usage counts under continuous_usage).
  void accepted(std::size_t k, std::uint32_t prompt_tokens);
  /// Streaming: the events for a chunk of choice `k`'s tokens
  /// ("data: {...}\n\n"): its text, then what it adds to the tool calls
  /// read; "" when all its text is held back or after a stop string.
  std::string chunk(std::size_t k, const wire::token_reply& t);
  /// Streaming: choice `k` ended: the text it still held, then the chunk
  /// with its finish_reason.
  std::string choice_end(std::size_t k, const wire::done_reply& done);
  /// Streaming, once every choice has ended: the usage chunk when asked
  /// for, then "data: [DONE]".
  std::string stream_end() const;
  /// Streaming: a failure after the response began (headers already sent),
  /// as an error event, then "data: [DONE]".
  std::string stream_error(const api_error& e) const;

  /// A token's log-probabilities with where its text begins in the output:
  /// `start` in bytes, `offset` in characters (OpenAI's text_offset, which
  /// counts an echoed prompt too).
  struct placed_logprobs {
    std::size_t start = 0;
    std::size_t offset = 0;
    wire::token_logprobs lp;
  };

private:
  struct choice {
    std::string held;  ///< streamed text that may begin a stop string
    std::size_t echoed_chars = 0; ///< characters of the prompt echoed before the output
    bool cut = false;  ///< a stop string came: nothing more is sent
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    std::uint64_t cached_tokens = 0;
    std::uint64_t reasoning_tokens = 0;
    std::size_t received = 0;    ///< bytes of streamed text so far
    std::size_t token_bytes = 0; ///< bytes of the streamed tokens' own texts so far
    std::size_t token_chars = 0; ///< characters of those
    /// Streamed tokens' log-probabilities not sent yet: each goes with the
    /// text it begins in, and none that begins after a stop string.
    std::vector<placed_logprobs> pending;
    /// With tools: streamed text that may begin the call marker, and the
    /// output from the marker on (forced: all of it), read as calls as it
    /// comes; the bytes of each call's arguments sent.
    std::string marker_held;
    std::string calls;
    std::optional<call_reader> reader;
    std::vector<std::size_t> arguments_sent;
    bool calling = false;
    bool not_calling = false; ///< with no marker: the content began with text, not a call
    /// With a marker: content other than blanks was sent (blanks alone
    /// before a call are no content, as in the whole answer, so they wait).
    bool said = false;
    /// With a reasoning format: where the stream is (0 the output's start,
    /// which may open the reasoning; 1 in the reasoning; 2 past it), and
    /// streamed text that may begin the opening or the closing mark.
    std::uint8_t reasoning_phase = 0;
    std::string reasoning_held;
  };
  /// Streamed text past the stop strings, with a reasoning format: its
  /// reasoning and its content to send now (the rest held); `end` sends
  /// what was held.
  std::pair<std::string, std::string> thought(choice& c, std::string text, bool end) const;
  /// Streamed text past the stop strings, with tools: what goes out as
  /// content now (the rest is held or read as calls at the end).
  std::string routed(choice& c, std::string text) const;
  /// Choice `k`'s calls read since the last: a chunk of deltas, each call's
  /// first with its id and name ("" when nothing new was read), carrying
  /// (and taking) `logprobs` where it is sent.
  std::string call_deltas(std::size_t k, std::vector<placed_logprobs>& logprobs);
  /// The end of choice `k`'s stream with tools: the finish reason, after
  /// its held text where no call began ("tool_calls" where every call
  /// that began is whole), with the tokens' `logprobs` still pending.
  std::string calls_end(std::size_t k, const std::string& reason, std::vector<placed_logprobs>& logprobs);
  /// A chunk of choice `k`: `text` as the delta's `field` (content, or
  /// reasoning_content), its finish reason and log-probabilities.
  std::string chunk_with(std::size_t k, std::string_view text, const char* finish, bool role = false,
                         std::span<const placed_logprobs> logprobs = {}, const char* field = "content") const;
  /// Choice `k`'s prompt as echoed (echo_text, or its tokens' texts) and
  /// its tokens placed from the text's start (none without logprobs).
  std::pair<std::string, std::vector<placed_logprobs>> echoed(std::size_t k,
                                                              const std::vector<wire::token_logprobs>& prompt) const;
  std::string id_;
  std::string model_;
  std::int64_t created_;
  bool include_usage_;
  bool continuous_usage_;
  bool chat_;
  std::uint32_t n_;
  std::uint32_t per_prompt_; ///< frames per prompt: max(n, best_of)
  std::vector<std::string> stop_;
  std::size_t stops_kept_;
  std::int32_t logprobs_;
  bool echo_;
  bool prompt_only_;
  std::vector<std::string> echo_text_;
  std::optional<completion_request::tool_calling> tools_;
  std::optional<reasoning_format> reasoning_;
  bool legacy_; ///< the call as legacy function_call
  std::vector<choice> choices_;
};

/// Whether an Authorization header value ("Bearer KEY") carries one of
/// `keys`; true when `keys` is empty (no keys: no check). The key is
/// compared in time that does not depend on where it differs.
bool authorized(std::string_view authorization, const std::vector<std::string>& keys) noexcept;

/// The 401 for a missing or wrong key.
api_error unauthorized(bool key_given);

/// GET /v1/models: the base model, then every adapter (its parent the base).
std::string models_json(std::string_view base_model, const wire::adapters_reply& adapters, std::int64_t created);

/// A URL path segment with its %XX escapes decoded (others kept as sent).
std::string percent_decoded(std::string_view s);

/// GET /v1/models/NAME: that model's object, or a 404 model_not_found.
std::variant<std::string, api_error> model_json(std::string_view name, std::string_view base_model,
                                                const wire::adapters_reply& adapters, std::int64_t created);

/// GET /version: {"version"}, the build's (troupe::version()).
std::string version_json();

/// GET /metrics: the stats reply in Prometheus' text format, each name
/// prefixed "troupe_" (characters Prometheus does not allow become '_'):
/// counters typed `counter` and suffixed "_total", gauges and levels typed
/// `gauge`, NAME_bucket_le_BOUND, NAME_sum and NAME_count as one
/// histogram; values that are not finite are left out.
std::string prometheus_text(const wire::stats_reply& stats);

} // namespace troupe::openai
