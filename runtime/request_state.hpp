// The life of a request inside the scheduler: its state machine and the data
// the scheduler core keeps for it. Used by runtime/scheduler_core.cpp only.
#pragma once

#include "gpu/step.hpp"
#include "policies/classifier_policy.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// Request states. Transitions happen only in scheduler_core::transition().
///
///   waiting --admit--> admitting --pages+adapter granted--> ready
///      ^                   |                                  |
///      +---denied----------+                        first step|
///                                                             v
///   finished <--length/eos/stop/cancel-- running <------------+
///                                             |  ^
///        swap (preemption): running --> swapping_out --> waiting (swapped,
///        its cache in host pages) --admit--> admitting --> swapping_in -->
///        running, decoding on where it stopped. A failed swap-out or
///        swap-in falls back to recompute (a prefill of prompt + output).
///
/// cancel is allowed from every state but finished; a request cancelled
/// while admitting is finished once its outstanding grants come back, so
/// every grant is released exactly once.
enum class request_state : std::uint8_t {
  waiting,
  admitting,
  ready,
  running,
  swapping_out, ///< its cache is being copied to the host pool
  swapping_in,  ///< its cache is being copied back to the device
  finished,
};

std::string_view to_string(request_state x) noexcept;

/// Why a request finished.
enum class finish_reason : std::uint8_t {
  length,    ///< produced max_tokens
  eos,       ///< the model emitted end-of-sequence
  stop,      ///< a stop string appeared in the output
  cancelled, ///< the client cancelled or went away
  error,     ///< the server could not complete it
  adapter_error, ///< its adapter could not be loaded (missing or corrupt files)
  aborted,   ///< the policy ended it unstarted: it could not meet its first-token target
};
/// How many finish reasons there are.
inline constexpr std::size_t finish_reasons = static_cast<std::size_t>(finish_reason::aborted) + 1;

/// Wire name ("length", "eos", ...).
std::string_view to_string(finish_reason x) noexcept;

/// What the scheduler knows about a request when it is submitted.
struct request_spec {
  std::uint64_t request_id = 0;
  std::vector<std::int32_t> prompt;
  std::uint32_t max_new_tokens = 0;
  /// max_new_tokens (and min_tokens, predicted_tokens) is cut to what the
  /// pool's pages hold after the prompt and the adapter, rather than the
  /// request refused as too large (wire::generate_request::fit_context).
  bool fit_context = false;
  std::uint32_t adapter_id = 0;
  std::uint32_t adapter_rank = 0;
  /// Pages the adapter's weights take in the pool.
  std::uint64_t adapter_pages = 0;
  std::uint64_t seed = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
  /// -1: none; k >= 0: each output token's log-probability and the k most
  /// likely tokens' (gpu::step_entry::logprobs).
  std::int32_t logprobs = -1;
  /// -1: none; k >= 0: each prompt token's log-probability given those
  /// before it, and the k most likely tokens' (gpu::step_entry::
  /// prompt_logprobs). Such a turn computes its whole prompt: it reuses no
  /// session cache.
  std::int32_t prompt_logprobs = -1;
  /// OpenAI's penalties, each in [-2, 2]: subtracted from the logit of
  /// every token the output holds (presence) and that many times
  /// (frequency); and logit_bias, in token order: each step's
  /// gpu::step_entry::logit_adjust.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<gpu::logit_adjustment> logit_bias{};
  /// vLLM's: the min-p cut (gpu::step_entry::min_p), and the repetition
  /// penalty (1: none) on every token of the prompt and of the output so
  /// far (gpu::step_entry::repetition_penalty).
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  std::int32_t priority = 0;
  /// Multi-turn session (0: none): its KV may be kept after this turn and
  /// reused by the next turn whose prompt extends it.
  std::uint64_t session = 0;
  std::vector<std::string> stop;
  /// Tokens that end the output as a stop string does, in token order.
  std::vector<std::int32_t> stop_token_ids{};
  /// Token sequences the output never completes (vLLM's bad_words, each
  /// word's tokens alone and after a space): a sequence's last token is
  /// banned where the output ends with the tokens before it (always, for
  /// one token).
  std::vector<std::vector<std::int32_t>> bad_words{};
  /// Not empty: the only tokens the output may hold (vLLM's
  /// allowed_token_ids), in token order, each once.
  std::vector<std::int32_t> allowed_token_ids{};
  /// The end-of-sequence token ends nothing (an output token like others).
  bool ignore_eos = false;
  /// false: stop strings match special tokens' own texts too
  /// (gpu::tokenizer::shown), as the client's text shows them.
  bool skip_special_tokens = true;
  /// The end-of-sequence token and stop_token_ids are banned among the
  /// first min_tokens output tokens (logit_adjust); stop strings still end
  /// the output.
  std::uint32_t min_tokens = 0;
  /// The output is one JSON object (runtime/json_constraint.hpp): every
  /// step bans the tokens that would break it, and the object's close ends
  /// the output (finish "stop").
  bool json_object = false;
  /// Not empty: the output is a value of this JSON Schema (its text, which
  /// json_schema::compile takes; the intake refuses one it does not), held
  /// to it as json_object holds the output to an object.
  std::string json_schema;
  /// Not empty, with json_object or json_schema: the output is free text,
  /// and each time this string appears in it one value held as those say
  /// follows, then free text again (runtime/json_trigger.hpp).
  std::string json_trigger;
  /// With json_trigger: the output begins with it.
  bool json_trigger_first = false;
  /// Not empty, with json_trigger and json_schema: after the trigger, one
  /// of json_schema's property names and this mark, then a value of that
  /// property's schema (runtime/json_trigger.hpp, trigger_heads).
  std::string json_trigger_head;
  /// Not empty, with json_trigger: a JSON Schema's text; the output either
  /// begins with the trigger or is one value of this schema, and ends when
  /// it closes (runtime/json_trigger.hpp).
  std::string json_answer;
  /// Not empty, with json_object or json_schema: the output thinks first,
  /// up to this mark, and only what follows is held as those say; with
  /// reasoning_open, only output that begins with that mark thinks
  /// (runtime/reasoning_gate.hpp).
  std::string reasoning_close;
  std::string reasoning_open;
  /// Not empty: the output is one of these texts (runtime/
  /// choice_constraint.hpp), held as json_schema holds a value.
  std::vector<std::string> choice;
  /// Not empty: the whole output matches this regular expression
  /// (runtime/regex_constraint.hpp), held as choice holds it.
  std::string regex;
  /// Not empty: the whole output is a sentence of this GBNF grammar
  /// (runtime/grammar_constraint.hpp), held as regex holds it.
  std::string grammar;
  std::uint32_t queue = 0;
  std::uint32_t predicted_tokens = 0;
  /// Arrival on the scheduler's clock, in seconds.
  double arrival_s = 0;
};

/// Per-request timestamps (seconds on the scheduler's clock).
struct request_times {
  double arrival_s = 0;
  double first_scheduled_s = -1;
  double first_token_s = -1;
  double finished_s = -1;
};

/// What a classifier policy sees of a request.
policies::classify_input classify_input_of(const request_spec& spec);

/// A request's cost against a queue quota, in tokens: prompt + predicted
/// output + its adapter's pages in tokens.
std::uint64_t quota_cost_of(const request_spec& spec, std::uint32_t page_tokens);

} // namespace troupe
