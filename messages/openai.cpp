#include "messages/openai.hpp"

#include "messages/jinja.hpp"
#include "messages/lark_grammar.hpp"
#include "messages/tool_calls.hpp"
#include "messages/version.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace troupe::openai {

using json = nlohmann::json;

api_error bad_request(std::string message, std::string param) {
  api_error e;
  e.status = 400;
  e.code = "bad_request";
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

namespace {

api_error bad(std::string message, std::string param = {}) {
  return bad_request(std::move(message), std::move(param));
}

/// The fields both endpoints take, those only one takes, and those refused
/// unless they hold the value that means "off".
constexpr std::array<std::string_view, 37> taken_by_both{
  "model",          "max_tokens", "temperature", "top_p", "top_k",            "seed",
  "stop",           "stream",     "stream_options", "user", "session",        "n",
  "safety_identifier", "prompt_cache_key", "metadata",
  "presence_penalty", "frequency_penalty", "logit_bias", "stop_token_ids", "ignore_eos", "min_tokens", "priority",
  "response_format", "min_p", "repetition_penalty", "include_stop_str_in_output", "skip_special_tokens",
  "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_whitespace_pattern",
  "guided_decoding_backend", "structured_outputs", "truncate_prompt_tokens", "bad_words", "allowed_token_ids"};
constexpr std::array<std::string_view, 6> taken_by_completions{"prompt", "logprobs", "echo", "best_of",
                                                                 "use_beam_search", "length_penalty"};
constexpr std::array<std::string_view, 14> taken_by_chat{
  "messages", "max_completion_tokens", "parallel_tool_calls", "logprobs", "top_logprobs", "tools", "tool_choice",
  "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "chat_template", "reasoning_effort",
  "use_beam_search", "length_penalty"};
constexpr std::array<std::string_view, 1> off_in_completions{"suffix"};
constexpr std::array<std::string_view, 0> off_in_chat{};

/// Fields of vLLM's and OpenAI's Troupe does not serve, taken at the
/// values that leave them out (as clients may send them), and what Troupe
/// does instead.
struct neutral_field {
  std::string_view key;
  const char* neutral; ///< JSON text
  const char* also;    ///< JSON text of another such value, or null
  const char* serves;
};
constexpr std::array<neutral_field, 3> neutral_fields{{
  {"store", "false", nullptr, "stores no completions"},
  {"service_tier", "\"auto\"", "\"default\"", "has one tier; the field \"priority\" orders requests"},
  {"modalities", "[\"text\"]", nullptr, "answers in text"},
}};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view key) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

/// Whether `v` is the value that turns off one of OpenAI's fields Troupe
/// does not serve (suffix: null), so that clients sending the default
/// explicitly are served.
bool is_off(const json& v) {
  return v.is_null();
}

/// The body as a JSON object; the error otherwise.
std::variant<json, api_error> read_object(std::string_view body) {
  json doc;
  try {
    doc = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    // A syntax error, or a number too large for a double (out_of_range).
    return bad("the body is not valid JSON: " + wire::parser_message(e));
  }
  if (!doc.is_object())
    return bad("the body must be a JSON object, got " + std::string(doc.type_name()));
  return doc;
}

/// The body as a JSON object whose fields all are ones the endpoint takes
/// (or hold their "off" value); the error otherwise.
/// `ordered`: the body read already, in order (an object), which is taken
/// instead of reading it again.
template <std::size_t T, std::size_t O>
std::variant<json, api_error> read_body(std::string_view body, const std::array<std::string_view, T>& own,
                                        const std::array<std::string_view, O>& off, const char* what,
                                        const char* refused_features,
                                        const nlohmann::ordered_json* ordered = nullptr) {
  auto read = ordered != nullptr ? std::variant<json, api_error>(json(*ordered)) : read_object(body);
  if (std::holds_alternative<api_error>(read))
    return read;
  auto& doc = std::get<json>(read);
  for (const auto& [key, value] : doc.items()) {
    if (in(taken_by_both, key) || in(own, key))
      continue;
    const std::string_view name = key; // (a lambda may not name a structured binding before C++20's fix)
    if (const auto n = std::find_if(neutral_fields.begin(), neutral_fields.end(),
                                    [name](const neutral_field& f) { return f.key == name; });
        n != neutral_fields.end()) {
      if (!value.is_null() && value != json::parse(n->neutral) && (n->also == nullptr || value != json::parse(n->also)))
        return bad("field \"" + key + "\" is served only as " + n->neutral
                     + (n->also != nullptr ? std::string(" or ") + n->also : std::string()) + " (Troupe " + n->serves
                     + "), got " + value.dump(),
                   key);
      continue;
    }
    if (in(off, key)) {
      if (!is_off(value))
        return bad("field \"" + key + "\" is not supported with the value " + value.dump() + " (Troupe returns "
                     + refused_features + "); leave it out",
                   key);
      continue;
    }
    return bad("unknown field \"" + key + "\" in " + what, key);
  }
  return read;
}

/// vLLM's include_stop_str_in_output (null or absent: false).
std::variant<bool, api_error> include_stop(const json& doc) {
  const auto v = doc.find("include_stop_str_in_output");
  if (v == doc.end() || v->is_null())
    return false;
  if (!v->is_boolean())
    return bad("field \"include_stop_str_in_output\" must be true or false, got " + v->dump(),
               "include_stop_str_in_output");
  return v->get<bool>();
}

/// The stop strings of a request's "stop" as given (the wire parser checks
/// the value: what is not a string is left to it).
std::vector<std::string> stop_strings(const json& doc) {
  std::vector<std::string> out;
  const auto s = doc.find("stop");
  if (s == doc.end())
    return out;
  if (s->is_string())
    out.push_back(s->get<std::string>());
  else if (s->is_array())
    for (const auto& x : *s)
      if (x.is_string())
        out.push_back(x.get<std::string>());
  return out;
}

/// A JSON Schema given as an object or as its JSON text (vLLM takes both);
/// none when it is neither.
std::optional<json> schema_of(const json& v) {
  if (v.is_object())
    return v;
  if (!v.is_string())
    return std::nullopt;
  auto parsed = json::parse(v.get<std::string>(), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object())
    return std::nullopt;
  return parsed;
}

/// vLLM's guided decoding, into the wire's json_schema, response_format,
/// choice, regex or grammar: guided_json (a schema), guided_choice (texts),
/// guided_regex (an expression), guided_grammar (a GBNF grammar), and
/// structured_outputs {"json": a schema}, {"json_object": true},
/// {"choice": texts}, {"regex": an expression} or {"grammar": a grammar}
/// (its newer form). One way to hold the output at most,
/// response_format's among them. guided_decoding_backend names how
/// vLLM enforces it, which is Troupe's own here: read past.
std::optional<api_error> take_guided(const json& doc, json& gen, completion_request& out) {
  const auto given = [&](const char* key) {
    const auto v = doc.find(key);
    return v != doc.end() && !v->is_null() ? &*v : nullptr;
  };
  const auto held = [&] {
    return gen.contains("json_schema") || gen.contains("response_format") || gen.contains("choice")
           || gen.contains("regex") || gen.contains("grammar");
  };
  const auto held_already = [&](const char* key) -> std::optional<api_error> {
    if (held())
      return bad(std::string("field \"") + key + "\" cannot go with another way to hold the output "
                   + "(response_format, guided_json, structured_outputs): give one",
                 key);
    return std::nullopt;
  };
  if (given("guided_whitespace_pattern"))
    return bad("field \"guided_whitespace_pattern\" is not served (JSON output takes JSON's blanks, at most 32 in a "
               "row); leave it out",
               "guided_whitespace_pattern");
  if (const auto* b = given("guided_decoding_backend"); b && !b->is_string())
    return bad("field \"guided_decoding_backend\" must be a string, got " + b->dump(), "guided_decoding_backend");
  if (const auto* g = given("guided_json")) {
    if (auto e = held_already("guided_json"))
      return e;
    const auto schema = schema_of(*g);
    if (!schema)
      return bad("field \"guided_json\" must be a JSON Schema: an object, or a string holding one, got "
                   + g->dump().substr(0, 80),
                 "guided_json");
    gen["json_schema"] = *schema;
    out.schema_field = "guided_json";
  }
  if (const auto* c = given("guided_choice")) {
    if (auto e = held_already("guided_choice"))
      return e;
    gen["choice"] = *c; // the wire checks it
    out.schema_field = "guided_choice";
  }
  if (const auto* r = given("guided_regex")) {
    if (auto e = held_already("guided_regex"))
      return e;
    gen["regex"] = *r; // the wire and the intake check it
    out.schema_field = "guided_regex";
  }
  // A grammar: GBNF as it is, a Lark grammar as the GBNF it stands for.
  const auto grammar_of = [](const json& g, const char* field) -> std::variant<json, api_error> {
    if (!g.is_string() || !is_lark(g.get_ref<const std::string&>()))
      return g; // the wire and the intake check it
    auto gbnf = lark_to_gbnf(g.get_ref<const std::string&>());
    if (auto* e = std::get_if<1>(&gbnf))
      return bad(std::string("field \"") + field + "\" is a Lark grammar Troupe cannot read: " + *e, field);
    return json(std::get<0>(std::move(gbnf)));
  };
  if (const auto* g = given("guided_grammar")) {
    if (auto e = held_already("guided_grammar"))
      return e;
    auto grammar = grammar_of(*g, "guided_grammar");
    if (auto* e = std::get_if<api_error>(&grammar))
      return std::move(*e);
    gen["grammar"] = std::get<json>(std::move(grammar));
    out.schema_field = "guided_grammar";
  }
  if (const auto* s = given("structured_outputs")) {
    if (auto e = held_already("structured_outputs"))
      return e;
    if (!s->is_object())
      return bad("field \"structured_outputs\" must be an object, got " + s->dump().substr(0, 80),
                 "structured_outputs");
    for (const auto& [key, value] : s->items()) {
      if (value.is_null() || (key == "json_object" && value == false))
        continue;
      const bool taken = held();
      if (key == "json" && !taken) {
        const auto schema = schema_of(value);
        if (!schema)
          return bad("field \"structured_outputs.json\" must be a JSON Schema: an object, or a string holding "
                       "one, got " + value.dump().substr(0, 80),
                     "structured_outputs");
        gen["json_schema"] = *schema;
        out.schema_field = "structured_outputs";
      } else if (key == "json_object" && value == true && !taken) {
        gen["response_format"] = "json_object";
      } else if (key == "grammar" && !taken) {
        auto grammar = grammar_of(value, "structured_outputs");
        if (auto* e = std::get_if<api_error>(&grammar))
          return std::move(*e);
        gen[key] = std::get<json>(std::move(grammar));
        out.schema_field = "structured_outputs";
      } else if ((key == "choice" || key == "regex") && !taken) {
        gen[key] = value; // the wire checks it
        out.schema_field = "structured_outputs";
      } else if (key == "json" || key == "json_object" || key == "choice" || key == "regex" || key == "grammar") {
        return bad("field \"structured_outputs\" gives more than one of json, json_object, choice, regex and grammar: "
                   "give one",
                   "structured_outputs");
      } else {
        return bad("field \"structured_outputs." + key + "\" is not served (Troupe holds output to JSON, "
                     + "structured_outputs.json or json_object, to a list of texts, choice, to a regular "
                     + "expression, regex, or to a GBNF grammar, grammar); leave it out",
                   "structured_outputs");
      }
    }
  }
  return std::nullopt;
}

/// The fields both endpoints share, into `gen` (the wire generate, its
/// prompt and id set for each choice later) and `out`; `defaults` where the
/// request leaves temperature, top_p or top_k out (or null).
std::optional<api_error> take_common(const json& doc, std::string_view base_model, json& gen,
                                     completion_request& out, const sampling_defaults& defaults) {
  const auto model = doc.find("model");
  if (model == doc.end() || !model->is_string() || model->get<std::string>().empty())
    return bad("field \"model\" must name the base model (\"" + std::string(base_model)
                 + "\") or an adapter (GET /v1/models lists them)",
               "model");
  out.model = model->get<std::string>();
  if (out.model != base_model)
    gen["adapter"] = out.model;

  // Passed on as given: the wire parser checks them and names the field.
  // session (Troupe's): a conversation's id, whose KV the next turn reuses.
  // stop_token_ids, ignore_eos, min_tokens, priority, min_p,
  // repetition_penalty, skip_special_tokens, truncate_prompt_tokens,
  // bad_words and allowed_token_ids: vLLM's, as the wire's.
  for (const char* key : {"max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "session", "presence_penalty",
                          "frequency_penalty", "logit_bias", "stop_token_ids", "ignore_eos", "min_tokens", "priority",
                          "min_p", "repetition_penalty", "skip_special_tokens", "truncate_prompt_tokens", "bad_words",
                          "allowed_token_ids"})
    if (auto v = doc.find(key); v != doc.end() && !v->is_null())
      gen[key] = *v;
  // vLLM's -1 for no top-k cut is the wire's 0.
  if (const auto k = gen.find("top_k"); k != gen.end() && k->is_number_integer() && k->get<std::int64_t>() == -1)
    *k = 0;
  if (defaults.temperature && !gen.contains("temperature"))
    gen["temperature"] = *defaults.temperature;
  if (defaults.top_p && !gen.contains("top_p"))
    gen["top_p"] = *defaults.top_p;
  if (defaults.top_k && !gen.contains("top_k"))
    gen["top_k"] = *defaults.top_k;
  if (defaults.min_p && !gen.contains("min_p"))
    gen["min_p"] = *defaults.min_p;
  if (defaults.repetition_penalty && !gen.contains("repetition_penalty"))
    gen["repetition_penalty"] = *defaults.repetition_penalty;

  if (auto s = doc.find("stream"); s != doc.end() && !s->is_null()) {
    if (!s->is_boolean())
      return bad("field \"stream\" must be true or false, got " + s->dump(), "stream");
    out.stream = s->get<bool>();
  }
  gen["stream"] = out.stream;
  if (auto so = doc.find("stream_options"); so != doc.end() && !so->is_null()) {
    if (!out.stream)
      return bad("field \"stream_options\" is only allowed with \"stream\": true", "stream_options");
    if (!so->is_object())
      return bad("field \"stream_options\" must be an object, got " + std::string(so->type_name()), "stream_options");
    bool continuous = false;
    for (const auto& [key, value] : so->items()) {
      // include_obfuscation (OpenAI's): Troupe pads no chunk, either way.
      if (key != "include_usage" && key != "include_obfuscation" && key != "continuous_usage_stats")
        return bad("unknown field \"" + key + "\" in \"stream_options\"", "stream_options");
      if (!value.is_boolean())
        return bad("field \"stream_options." + key + "\" must be true or false, got " + value.dump(),
                   "stream_options");
      if (key == "include_usage")
        out.include_usage = value.get<bool>();
      if (key == "continuous_usage_stats")
        continuous = value.get<bool>();
    }
    // vLLM's: every chunk with its choice's usage so far, where the usage is asked for.
    out.continuous_usage = continuous && out.include_usage;
  }
  // Who asks, and OpenAI's cache key (Troupe's prefix caching goes by the
  // prompt itself): strings, read past.
  for (const char* key : {"user", "safety_identifier", "prompt_cache_key"})
    if (auto u = doc.find(key); u != doc.end() && !u->is_null() && !u->is_string())
      return bad("field \"" + std::string(key) + "\" must be a string, got " + std::string(u->type_name()), key);
  // OpenAI's tags of a stored completion: at most 16 strings, read past
  // (Troupe stores none).
  if (auto m = doc.find("metadata"); m != doc.end() && !m->is_null()) {
    if (!m->is_object() || m->size() > 16
        || std::any_of(m->begin(), m->end(), [](const json& v) { return !v.is_string() || v.get_ref<const std::string&>().size() > 512; }))
      return bad("field \"metadata\" must be an object of at most 16 strings (of at most 512 characters)", "metadata");
    for (const auto& [key, value] : m->items())
      if (key.size() > 64)
        return bad("field \"metadata\" has a key longer than 64 characters", "metadata");
  }
  // response_format (OpenAI's; vLLM takes it in completions too):
  // {"type": "json_object"} keeps the output to one JSON object;
  // {"type": "json_schema", "json_schema": {"name", "schema", ...}} to a
  // value of the schema (the wire's json_schema, checked by the intake).
  if (auto f = doc.find("response_format"); f != doc.end() && !f->is_null()) {
    const auto type = f->is_object() ? f->find("type") : f->end();
    if (!f->is_object() || type == f->end() || !type->is_string())
      return bad("field \"response_format\" must be an object with a \"type\", got " + f->dump(),
                 "response_format");
    if (*type != "text" && *type != "json_object" && *type != "json_schema")
      return bad("field \"response_format.type\" must be \"text\", \"json_object\" or \"json_schema\", got "
                   + type->dump(),
                 "response_format");
    for (const auto& [key, value] : f->items())
      if (key != "type" && !(key == "json_schema" && *type == "json_schema"))
        return bad("unknown field \"" + key + "\" in \"response_format\"", "response_format");
    if (*type == "json_object")
      gen["response_format"] = "json_object";
    if (*type == "json_schema") {
      const auto js = f->find("json_schema");
      if (js == f->end() || !js->is_object())
        return bad("field \"response_format.json_schema\" must be an object with a \"name\" and a \"schema\"",
                   "response_format");
      // OpenAI's fields, each with what it must be.
      struct field {
        std::string_view name;
        bool (*ok)(const json&);
        const char* must_be;
      };
      static constexpr field fields[] = {
        {"name", [](const json& v) { return v.is_string() && !v.get<std::string>().empty(); }, "a non-empty string"},
        {"schema", [](const json& v) { return v.is_object(); }, "a JSON Schema (an object)"},
        {"strict", [](const json& v) { return v.is_boolean() || v.is_null(); }, "true or false"},
        {"description", [](const json& v) { return v.is_string() || v.is_null(); }, "a string"},
      };
      for (const auto& [key, value] : js->items()) {
        const std::string_view name = key; // (a structured binding, which a lambda may not capture before C++20's clang)
        const auto f = std::find_if(std::begin(fields), std::end(fields), [name](const field& x) { return x.name == name; });
        if (f == std::end(fields))
          return bad("unknown field \"" + key + "\" in \"response_format.json_schema\"", "response_format");
        if (!f->ok(value))
          return bad("field \"response_format.json_schema." + key + "\" must be " + f->must_be + ", got " + value.dump(),
                     "response_format");
      }
      if (!js->contains("name") || !js->contains("schema"))
        return bad(std::string("field \"response_format.json_schema\" needs a \"")
                     + (js->contains("name") ? "schema" : "name") + "\"",
                   "response_format");
      // Enforced whether or not "strict" is set.
      gen["json_schema"] = (*js)["schema"];
    }
  }
  return take_guided(doc, gen, out);
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// A log-probabilities count as the answer formats it: `v` when it is an
/// integer in [0, max_logprobs], else -1 (the wire parser refuses it and
/// names the field).
std::int32_t logprobs_count(const json& v) {
  return v.is_number_unsigned() && v.get<std::uint64_t>() <= max_logprobs ? static_cast<std::int32_t>(v.get<std::uint64_t>())
                                                                          : -1;
}

/// The request's count `field` (`n`, `best_of`; 1 when absent); the error
/// for anything but an integer in [1, max_choices].
std::variant<std::uint32_t, api_error> choices_per_prompt(const json& doc, const std::string& field = "n") {
  const auto n = doc.find(field);
  if (n == doc.end() || n->is_null())
    return 1u;
  if (!n->is_number_unsigned() || n->get<std::uint64_t>() < 1 || n->get<std::uint64_t>() > max_choices)
    return bad("field \"" + field + "\" must be an integer in [1, " + std::to_string(max_choices) + "], got "
                 + n->dump(),
               field);
  return static_cast<std::uint32_t>(n->get<std::uint64_t>());
}

/// `gen` (a wire generate without its prompt) once for each of `prompts`'
/// `n` choices into `out`: the prompt, the choice's wire id and, with an
/// integer seed, seed + K for a prompt's K-th choice. `n` counts the
/// candidates generated (`best_of` where it is given), set as out.best_of.
std::optional<api_error> expand(const std::vector<json>& prompts, std::uint32_t n, const json& gen,
                                std::string_view wire_id, completion_request& out, const char* field = "n") {
  const auto total = prompts.size() * n;
  if (total > max_choices)
    return bad(std::to_string(prompts.size()) + " prompts of " + std::to_string(n) + " choices each are "
                 + std::to_string(total) + " choices; at most " + std::to_string(max_choices)
                 + " in one request",
               prompts.size() > 1 ? "prompt" : field);
  out.best_of = n;
  for (const auto& prompt : prompts)
    for (std::uint32_t k = 0; k < n; ++k) {
      json one = gen;
      one[prompt.is_string() ? "prompt" : "prompt_tokens"] = prompt;
      const auto id = total == 1 ? std::string(wire_id) : std::string(wire_id) + "." + std::to_string(out.ids.size());
      one["id"] = id;
      if (auto seed = one.find("seed"); seed != one.end() && seed->is_number_unsigned())
        *seed = seed->get<std::uint64_t>() + k;
      out.ids.push_back(id);
      out.frames.push_back(dump(one));
    }
  return std::nullopt;
}

/// vLLM's use_beam_search: the front searches beams of one-token generates
/// (messages/beam_search.hpp); `best_of` (else `n`; a chat's `n`) beams,
/// of which the `n` best are the choices. Only the fields that search
/// serves may be given (`doc` as the client sent it).
std::optional<api_error> take_beam(const json& doc, const json& gen, completion_request& out, bool chat = false) {
  const auto on = doc.find("use_beam_search");
  if (on != doc.end() && !on->is_null() && !on->is_boolean())
    return bad("field \"use_beam_search\" must be true or false, got " + on->dump().substr(0, 40), "use_beam_search");
  const auto penalty = doc.find("length_penalty");
  if (penalty != doc.end() && !penalty->is_null() && (!penalty->is_number() || !std::isfinite(penalty->get<double>())))
    return bad("field \"length_penalty\" must be a number, got " + penalty->dump().substr(0, 40), "length_penalty");
  if (on == doc.end() || *on != json(true)) {
    if (penalty != doc.end() && !penalty->is_null() && penalty->get<double>() != 1.0)
      return bad("field \"length_penalty\" weighs beams: it needs \"use_beam_search\": true", "length_penalty");
    return std::nullopt;
  }
  // The fields a beam search reads (the rest would change what a step
  // samples, which the search does not: it reads each step's likeliest).
  static constexpr std::array<std::string_view, 17> served{
    "model", "prompt", "max_tokens", "n", "best_of", "use_beam_search", "length_penalty", "ignore_eos", "logprobs",
    "user", "safety_identifier", "prompt_cache_key", "metadata", "priority", "store", "service_tier", "modalities"};
  // A chat's messages and template settings, and its names for the same.
  static constexpr std::array<std::string_view, 8> served_in_chat{
    "messages", "max_completion_tokens", "top_logprobs", "chat_template_kwargs", "add_generation_prompt",
    "continue_final_message", "chat_template", "reasoning_effort"};
  if (chat && !(doc.contains("max_tokens") && !doc["max_tokens"].is_null())
      && !(doc.contains("max_completion_tokens") && !doc["max_completion_tokens"].is_null()))
    return bad("field \"use_beam_search\" needs \"max_completion_tokens\" (or \"max_tokens\"): a search runs that "
               "many steps",
               "max_completion_tokens");
  for (const auto& [key, value] : doc.items()) {
    if (value.is_null() || in(served, key) || (chat && in(served_in_chat, key)) || (key == "stream" && value == json(false))
        || (key == "temperature" && value.is_number() && value.get<double>() == 0) || (key == "echo" && value == json(false)))
      continue;
    return bad("field \"" + key + "\" is not served with \"use_beam_search\": a beam search takes model, "
                 + (chat ? "messages and the template's settings, max_completion_tokens, n, length_penalty, ignore_eos, "
                           "logprobs, top_logprobs"
                         : "prompt, max_tokens, n, best_of, length_penalty, ignore_eos, logprobs")
                 + " and priority (temperature only 0, stream only false)",
               key);
  }
  constexpr std::uint32_t widest = 10; // 2 × width alternatives a step, at most the wire's 20
  if (out.best_of > widest)
    return bad("a beam search keeps at most " + std::to_string(widest) + " beams (\"best_of\", else \"n\"), got "
                 + std::to_string(out.best_of),
               doc.contains("best_of") && !doc["best_of"].is_null() ? "best_of" : "n");
  beam_settings b;
  b.width = out.best_of;
  b.max_tokens = gen.value("max_tokens", 16U);
  b.length_penalty = penalty != doc.end() && !penalty->is_null() ? penalty->get<double>() : 1.0;
  b.ignore_eos = doc.value("ignore_eos", json(false)) == json(true);
  b.logprobs = out.logprobs;
  out.beam = b;
  return std::nullopt;
}

} // namespace

std::string to_json(const api_error& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", e.code}};
  if (!e.param.empty())
    err["param"] = e.param;
  return dump(json{{"error", err}});
}

std::variant<completion_request, api_error> parse_completion(std::string_view body, std::string_view base_model,
                                                             std::string_view wire_id,
                                                             const sampling_defaults& defaults) {
  auto read = read_body(body, taken_by_completions, off_in_completions, "a completion request",
                        "no suffix");
  if (auto* e = std::get_if<api_error>(&read))
    return std::move(*e);
  const auto& doc = std::get<json>(read);

  completion_request out;
  const auto prompt = doc.find("prompt");
  if (prompt == doc.end() || prompt->is_null())
    return bad("missing field \"prompt\": a string, an array of token ids, or an array of either", "prompt");
  // One prompt (text or token ids), or an array of them.
  std::vector<json> prompts;
  auto token_ids = [](const json& a) {
    return std::all_of(a.begin(), a.end(), [](const json& t) { return t.is_number(); });
  };
  if (prompt->is_string()) {
    prompts.push_back(*prompt);
  } else if (prompt->is_array() && !prompt->empty() && token_ids(*prompt)) {
    prompts.push_back(*prompt);
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const auto& p : *prompt) {
      if (!p.is_string() && !(p.is_array() && !p.empty() && token_ids(p)))
        return bad("field \"prompt\" must be a string, an array of token ids, or an array of those (one per "
                   "prompt); it holds " + p.dump().substr(0, 80),
                   "prompt");
      prompts.push_back(p);
    }
  } else {
    return bad("field \"prompt\" must be a non-empty string or array (token ids, or several prompts), got "
                 + prompt->dump().substr(0, 80),
               "prompt");
  }
  const auto n = choices_per_prompt(doc);
  if (auto* e = std::get_if<api_error>(&n))
    return std::move(*e);
  // best_of: candidates generated per prompt, of which the n most likely
  // per token are returned; not streamed (which ones win is known only at
  // the end).
  const auto best_of = choices_per_prompt(doc, "best_of");
  if (auto* e = std::get_if<api_error>(&best_of))
    return std::move(*e);
  out.n = std::get<std::uint32_t>(n);
  const auto candidates = std::max(out.n, std::get<std::uint32_t>(best_of));
  if (doc.contains("best_of") && !doc["best_of"].is_null() && std::get<std::uint32_t>(best_of) < out.n)
    return bad("field \"best_of\" (" + doc["best_of"].dump() + ") must be at least \"n\" (" + std::to_string(out.n)
                 + "): it counts the candidates the n choices are picked from",
               "best_of");
  json gen = {{"type", "generate"}};
  if (auto e = take_common(doc, base_model, gen, out, defaults))
    return std::move(*e);
  if (candidates > out.n && out.stream)
    return bad("field \"best_of\" above \"n\" cannot be streamed: the best choices are known only when all "
               "candidates have ended",
               "best_of");
  // logprobs: a count, passed on (the wire parser checks it); false as none.
  if (auto lp = doc.find("logprobs"); lp != doc.end() && !lp->is_null() && *lp != json(false)) {
    gen["logprobs"] = *lp;
    out.logprobs = logprobs_count(*lp);
  }
  // echo: a text prompt is echoed as sent; token ids, or a prompt whose
  // log-probabilities are asked for, from the wire's prompt_logprobs.
  if (auto echo = doc.find("echo"); echo != doc.end() && !echo->is_null()) {
    if (!echo->is_boolean())
      return bad("field \"echo\" must be true or false, got " + echo->dump(), "echo");
    out.echo = echo->get<bool>();
  }
  const bool all_text = std::all_of(prompts.begin(), prompts.end(), [](const json& p) { return p.is_string(); });
  if (out.echo && (gen.contains("logprobs") || !all_text))
    gen["prompt_logprobs"] = gen.contains("logprobs") ? gen["logprobs"] : json(0);
  if (auto m = gen.find("max_tokens"); out.echo && m != gen.end() && *m == json(0)) {
    *m = 1; // the wire's least; the answer leaves that token out
    out.prompt_only = true;
  }
  // Candidates are ranked by their tokens' log-probabilities: the wire
  // computes them even where the answer shows none.
  if (candidates > out.n && !gen.contains("logprobs"))
    gen["logprobs"] = 0;
  out.stop = stop_strings(doc);
  const auto kept = include_stop(doc);
  if (auto* e = std::get_if<api_error>(&kept))
    return std::move(*e);
  out.stops_kept = std::get<bool>(kept) ? out.stop.size() : 0;
  if (auto e = expand(prompts, candidates, gen, wire_id, out, candidates > out.n ? "best_of" : "n"))
    return std::move(*e);
  if (out.echo && !gen.contains("prompt_logprobs"))
    for (const auto& p : prompts)
      for (std::uint32_t k = 0; k < out.best_of; ++k)
        out.echo_text.push_back(p.get<std::string>());
  if (auto e = take_beam(doc, gen, out))
    return std::move(*e);
  return out;
}

// -- chat -------------------------------------------------------------------

namespace {

constexpr std::string_view content_slot = "{content}";
constexpr std::string_view tools_slot = "{tools}";
constexpr std::string_view call_slot = "{call}";
constexpr std::string_view calls_slot = "{calls}";
constexpr std::string_view name_slot = "{name}";
constexpr std::string_view arguments_slot = "{arguments}";

/// Where a chat_tool_call format's slot is: "{call}", one call's JSON;
/// "{calls}", the calls as one JSON array (Mistral's); or "{name}" and,
/// after it, "{arguments}" (Mistral's later form: the name, a head mark,
/// the arguments object).
struct call_slot_at {
  std::size_t at = std::string::npos;
  std::size_t size = 0;
  bool array = false;
  bool named = false;                           ///< "{name}" at `at`
  std::size_t arguments_at = std::string::npos; ///< named: where "{arguments}" is after it (npos: nowhere)

  /// Where the text after the slot (the closing marker) begins.
  std::size_t end() const noexcept {
    return named && arguments_at != std::string::npos ? arguments_at + arguments_slot.size() : at + size;
  }
  /// Named: the head mark between the name and the arguments.
  std::string_view head(std::string_view tool_call) const {
    return named && arguments_at != std::string::npos ? tool_call.substr(at + size, arguments_at - at - size)
                                                      : std::string_view();
  }
};

call_slot_at find_call_slot(std::string_view tool_call) {
  if (const auto at = tool_call.find(calls_slot); at != std::string::npos)
    return {at, calls_slot.size(), true};
  if (const auto at = tool_call.find(call_slot); at != std::string::npos)
    return {at, call_slot.size(), false};
  if (const auto at = tool_call.find(name_slot); at != std::string::npos) {
    const auto args = tool_call.find(arguments_slot, at + name_slot.size());
    return {at, name_slot.size(), false, true, args};
  }
  return {};
}

/// How a Jinja template's text writes calls, where it shows: Hermes' tags
/// (Qwen-style templates), or Mistral's marker, before an array or (with
/// "[ARGS]", its later form) before each call's name; "" where not.
std::string tool_call_of(std::string_view text, std::string_view tool_use_text = {}) {
  const auto holds = [&](std::string_view s) {
    return text.find(s) != std::string_view::npos || tool_use_text.find(s) != std::string_view::npos;
  };
  if (holds("<tool_call>"))
    return "<tool_call>\n{call}\n</tool_call>";
  if (holds("[TOOL_CALLS]"))
    return holds("[ARGS]") ? "[TOOL_CALLS]{name}[ARGS]{arguments}" : "[TOOL_CALLS] {calls}";
  return {};
}

/// Most functions one request may offer: a forced call follows each as an
/// alternative of its schema, and the schema machine follows at most 64.
constexpr std::size_t max_tools = 64;

std::string filled(std::string_view format, std::string_view content, std::string_view slot = content_slot) {
  std::string out(format);
  if (const auto at = out.find(slot); at != std::string::npos)
    out.replace(at, slot.size(), content);
  return out;
}

bool space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

/// `s` after the JSON blanks it begins with.
std::string_view after_blanks(std::string_view s) {
  return s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && space(s.back()))
    s.remove_suffix(1);
  return s;
}

/// A function the request offers.
struct tool {
  std::string name;
  std::string line; ///< as the prompt shows it: {"type": "function", "function": {...}}
  json parameters;  ///< its JSON Schema; null: it takes none
};

/// An assistant's call in a chat's history.
struct past_call {
  std::string name;
  std::string arguments; ///< its arguments object, as compact JSON
  /// As the prompt shows it: {"name": ..., "arguments": {...}}.
  std::string text() const { return "{\"name\": " + dump(json(name)) + ", \"arguments\": " + arguments + "}"; }
};

struct chat_message {
  std::string role; ///< "system" (also for "developer"), "user", "assistant" or "tool"
  std::string content;
  std::vector<past_call> calls; ///< an assistant's tool calls
  bool results = false;           ///< a user message made of tool messages' texts
  std::size_t at = 0;             ///< where it is in the request's messages (its first, for results)
};

/// A message's text: a string, or text parts joined by newlines; the error
/// names the message (`at`).
std::variant<std::string, api_error> text_of(const json& content, const std::string& at) {
  if (content.is_string())
    return content.get<std::string>();
  if (!content.is_array())
    return bad("\"" + at + ".content\" must be a string or an array of text parts, got "
                 + std::string(content.type_name()),
               "messages");
  std::string out;
  for (std::size_t k = 0; k < content.size(); ++k) {
    const auto& part = content[k];
    const auto where = at + ".content[" + std::to_string(k) + "]";
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      return bad("\"" + where + "\" must be {\"type\": \"text\", \"text\": \"...\"} (Troupe serves text only)",
                 "messages");
    if (k > 0)
      out += '\n';
    out += part["text"].get<std::string>();
  }
  return out;
}

/// An assistant message's `tool_calls`, with their ids; the error names
/// the call at fault.
std::variant<std::vector<past_call>, api_error> read_calls_of(const json& calls, const std::string& at,
                                                              std::vector<std::string>& ids) {
  const auto where = at + ".tool_calls";
  if (!calls.is_array() || calls.empty())
    return bad("\"" + where + "\" must be a non-empty array of {\"id\", \"type\": \"function\", \"function\"}",
               "messages");
  std::vector<past_call> out;
  for (std::size_t j = 0; j < calls.size(); ++j) {
    const auto& call = calls[j];
    const auto one = where + "[" + std::to_string(j) + "]";
    const auto shape = "\"" + one + "\" must be {\"id\": \"...\", \"type\": \"function\", \"function\": {\"name\": \"...\", "
                       "\"arguments\": \"{...}\"}}";
    if (!call.is_object())
      return bad(shape, "messages");
    for (const auto& [key, value] : call.items())
      if (key != "id" && key != "type" && key != "function")
        return bad("unknown field \"" + one + "." + key + "\"", "messages");
    const auto id = call.find("id");
    const auto fn = call.find("function");
    if (id == call.end() || !id->is_string() || id->get<std::string>().empty() || call.value("type", json()) != "function"
        || fn == call.end() || !fn->is_object())
      return bad(shape, "messages");
    for (const auto& [key, value] : fn->items())
      if (key != "name" && key != "arguments")
        return bad("unknown field \"" + one + ".function." + key + "\"", "messages");
    const auto name = fn->find("name");
    const auto args = fn->find("arguments");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty() || args == fn->end()
        || !args->is_string())
      return bad(shape, "messages");
    json parsed;
    try {
      parsed = json::parse(args->get<std::string>());
    } catch (const json::exception&) {
      parsed = json();
    }
    if (!parsed.is_object())
      return bad("\"" + one + ".function.arguments\" must be a JSON object written as a string, got "
                   + args->dump().substr(0, 80),
                 "messages");
    ids.push_back(id->get<std::string>());
    out.push_back({name->get<std::string>(), dump(parsed)});
  }
  return out;
}

/// The messages of a chat request, each checked; the error names the one at
/// fault ("messages[2].content").
std::variant<std::vector<chat_message>, api_error> read_messages(const json& doc) {
  const auto m = doc.find("messages");
  if (m == doc.end() || m->is_null())
    return bad("missing field \"messages\": an array of {\"role\", \"content\"}", "messages");
  if (!m->is_array() || m->empty())
    return bad("field \"messages\" must be a non-empty array of {\"role\", \"content\"}", "messages");
  std::vector<chat_message> out;
  std::vector<std::string> call_ids; // the last assistant message's calls, which tool messages answer
  for (std::size_t i = 0; i < m->size(); ++i) {
    const auto& msg = (*m)[i];
    const auto at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object())
      return bad("\"" + at + "\" must be an object, got " + std::string(msg.type_name()), "messages");
    const auto role = msg.find("role");
    if (role == msg.end() || !role->is_string())
      return bad("\"" + at + ".role\" must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"", "messages");
    chat_message one;
    one.at = i;
    one.role = role->get<std::string>();
    if (one.role == "developer")
      one.role = "system";
    if (one.role != "system" && one.role != "user" && one.role != "assistant" && one.role != "tool")
      return bad("\"" + at + ".role\" is \"" + one.role
                   + "\": Troupe serves \"system\", \"developer\", \"user\", \"assistant\" and \"tool\" messages",
                 "messages");
    for (const auto& [key, value] : msg.items()) {
      if (key == "role" || key == "content" || (one.role == "assistant" && key == "tool_calls")
          || (one.role == "tool" && key == "tool_call_id"))
        continue;
      // A participant's name, and an assistant's earlier reasoning, sent
      // back as the answer gave it (vLLM's `reasoning` too): the Hugging
      // Face templates are given them.
      if (key == "name" || (one.role == "assistant" && (key == "reasoning_content" || key == "reasoning"))) {
        if (!value.is_string() && !(key != "name" && value.is_null()))
          return bad("\"" + at + "." + key + "\" must be a string, got " + std::string(value.type_name()), "messages");
        continue;
      }
      // What OpenAI's SDK writes back of an answer's message, none of it
      // said: read past.
      if (one.role == "assistant" && (key == "refusal" || key == "function_call" || key == "audio")) {
        if (!value.is_null())
          return bad("\"" + at + "." + key + "\" is taken only as null (Troupe serves no " + key
                       + (key == "refusal" ? "; send the text as content)" : ")"),
                     "messages");
        continue;
      }
      return bad("field \"" + at + "." + key + "\" is not supported (Troupe serves \"role\", \"content\" and \"name\", "
                   "an assistant's \"tool_calls\" and \"reasoning_content\", a tool's \"tool_call_id\")",
                 "messages");
    }
    if (msg.contains("reasoning_content") && msg.contains("reasoning") && msg["reasoning"] != msg["reasoning_content"])
      return bad("\"" + at + ".reasoning\" and \"" + at + ".reasoning_content\" differ: give one", "messages");
    if (const auto calls = msg.find("tool_calls"); calls != msg.end() && !calls->is_null()) {
      call_ids.clear();
      auto read = read_calls_of(*calls, at, call_ids);
      if (auto* e = std::get_if<api_error>(&read))
        return std::move(*e);
      one.calls = std::get<std::vector<past_call>>(std::move(read));
    }
    if (one.role == "tool") {
      const auto id = msg.find("tool_call_id");
      if (id == msg.end() || !id->is_string())
        return bad("\"" + at + ".tool_call_id\" must name the call it answers (a string)", "messages");
      if (std::find(call_ids.begin(), call_ids.end(), id->get<std::string>()) == call_ids.end())
        return bad("\"" + at + ".tool_call_id\" is " + id->dump() + ", which names no call of the last assistant "
                     "message with tool_calls before it",
                   "messages");
    }
    const auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      // None beside calls, or beside thinking (an answer cut short in it).
      const auto thought = [&](const char* key) { return msg.contains(key) && msg[key].is_string(); };
      if (one.calls.empty() && !thought("reasoning_content") && !thought("reasoning"))
        return bad("\"" + at + ".content\" is missing", "messages");
    } else {
      auto text = text_of(*content, at);
      if (auto* e = std::get_if<api_error>(&text))
        return std::move(*e);
      one.content = std::get<std::string>(std::move(text));
    }
    out.push_back(std::move(one));
  }
  return out;
}

/// `messages` with tools written in by the template's tool formats: `shown`
/// into the system message, an assistant's calls after its text, and each
/// run of tool messages as one user message. What is left has the roles
/// render takes.
std::variant<std::vector<chat_message>, api_error> with_tools(const chat_template& tpl, std::vector<chat_message> messages,
                                                              const std::vector<tool>& shown) {
  const bool any = !shown.empty() || std::any_of(messages.begin(), messages.end(), [](const chat_message& m) {
                     return m.role == "tool" || !m.calls.empty();
                   });
  if (!any)
    return messages;
  if (tpl.tool_call.empty())
    return bad("the " + tpl.name + " chat template has no tool formats, so it cannot show tools, tool calls or tool "
                 "messages (with chat_template = \"custom\", give chat_tools, chat_tool_call and chat_tool_result)",
               shown.empty() ? "messages" : "tools");
  // Where a call goes in the call format: one to a slot (or its name and
  // arguments to theirs), or all of a message's as one array.
  const auto slot = find_call_slot(tpl.tool_call);
  const std::string_view format = tpl.tool_call;
  const auto shown_call = [&](const std::string& call) {
    return std::string(format.substr(0, slot.at)) + call + std::string(format.substr(slot.end()));
  };
  std::vector<chat_message> out;
  if (!shown.empty()) {
    std::string lines;
    for (const auto& t : shown)
      lines += (lines.empty() ? "" : "\n") + t.line;
    const auto text = filled(tpl.tools, lines, tools_slot);
    if (messages.front().role == "system")
      messages.front().content += text;
    else
      out.push_back({"system", std::string(after_blanks(text)), {}, false, 0});
  }
  for (auto& m : messages) {
    if (m.role == "tool") {
      auto result = filled(tpl.tool_result, m.content);
      if (!out.empty() && out.back().results)
        out.back().content += "\n" + result;
      else
        out.push_back({"user", std::move(result), {}, true, m.at});
      continue;
    }
    std::vector<std::string> shown_calls;
    for (const auto& c : m.calls)
      shown_calls.push_back(slot.named ? shown_call(c.name + std::string(slot.head(format)) + c.arguments)
                                         : c.text());
    if (slot.array && !shown_calls.empty()) {
      std::string list;
      for (const auto& c : shown_calls)
        list += (list.empty() ? "[" : ", ") + c;
      shown_calls = {list + "]"};
    }
    for (const auto& c : shown_calls)
      m.content += (m.content.empty() ? "" : "\n") + (slot.named ? c : shown_call(c));
    m.calls.clear();
    out.push_back(std::move(m));
  }
  return out;
}

/// The prompt of `messages` under `tpl`; the error says which order or role
/// the template cannot take.
std::variant<std::string, api_error> render(const chat_template& tpl, const std::vector<chat_message>& messages) {
  std::string out;
  if (tpl.llama2) {
    std::size_t i = 0;
    std::string system;
    if (messages[0].role == "system") {
      system = filled(tpl.system, trimmed(messages[0].content));
      i = 1;
    }
    if (i == messages.size())
      return bad("the chat has no user message", "messages");
    for (std::size_t k = i; k < messages.size(); ++k) {
      const bool user_turn = (k - i) % 2 == 0;
      const auto& m = messages[k];
      if (m.role != (user_turn ? "user" : "assistant"))
        return bad("with the " + tpl.name + " chat template, after an optional first system message, messages "
                     "must alternate user, assistant, user, ... (tool messages in a row count as one user's; messages["
                     + std::to_string(m.at) + "] is \"" + (m.results ? "tool" : m.role) + "\")",
                   "messages");
      if (user_turn)
        out += filled(tpl.user, (k == i ? system : std::string()) + std::string(trimmed(m.content)));
      else
        out += filled(tpl.assistant, trimmed(m.content));
    }
    if (messages.back().role != "user")
      return bad("with the " + tpl.name + " chat template the last message must be the user's (or a tool's)",
                 "messages");
    return out + tpl.generation;
  }
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    const std::string& format = m.role == "system" ? tpl.system : m.role == "user" ? tpl.user : tpl.assistant;
    if (format.empty())
      return bad("the " + tpl.name + " chat template has no system messages (messages[" + std::to_string(m.at) + "])",
                 "messages");
    out += filled(format, tpl.trim ? std::string(trimmed(m.content)) : m.content);
  }
  return out + tpl.generation;
}

/// vLLM's fields that shape the rendering, checked: chat_template_kwargs
/// (an object of further template variables, not the ones the request
/// gives itself), add_generation_prompt and continue_final_message
/// (booleans, not both on; the latter after an assistant message). Only a
/// Hugging Face template takes them other than as their defaults.
std::optional<api_error> template_fields_refused(const json& doc, const chat_template& tpl,
                                                 const std::vector<chat_message>& messages) {
  static constexpr std::array<std::string_view, 6> given{"messages", "tools",     "documents",
                                                         "add_generation_prompt", "bos_token", "eos_token"};
  const auto needs_jinja = [&](const char* field) {
    return bad("field \"" + std::string(field) + "\" needs the server's chat template to be a Hugging Face one "
               "(chat_template = \"model\" or \"jinja\"); this one is \"" + tpl.name + "\"",
               field);
  };
  if (const auto kw = doc.find("chat_template_kwargs"); kw != doc.end() && !kw->is_null()) {
    if (!kw->is_object())
      return bad("field \"chat_template_kwargs\" must be an object of template variables, got " + kw->dump().substr(0, 80),
                 "chat_template_kwargs");
    for (const auto& [key, value] : kw->items())
      if (in(given, key))
        return bad("field \"chat_template_kwargs." + key + "\" is a variable the request itself gives the template",
                   "chat_template_kwargs");
    if (!kw->empty() && !tpl.program)
      return needs_jinja("chat_template_kwargs");
  }
  // OpenAI's reasoning_effort: a variable of the template (GPT-OSS's reads
  // it), as vLLM gives it.
  if (const auto effort = doc.find("reasoning_effort"); effort != doc.end() && !effort->is_null()) {
    static constexpr std::array<std::string_view, 5> efforts{"none", "minimal", "low", "medium", "high"};
    if (!effort->is_string() || !in(efforts, effort->get_ref<const std::string&>()))
      return bad("field \"reasoning_effort\" must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\", got "
                   + effort->dump().substr(0, 80),
                 "reasoning_effort");
    if (!tpl.program)
      return needs_jinja("reasoning_effort");
    if (const auto kw = doc.find("chat_template_kwargs");
        kw != doc.end() && kw->is_object() && kw->contains("reasoning_effort") && (*kw)["reasoning_effort"] != *effort)
      return bad("field \"reasoning_effort\" and \"chat_template_kwargs.reasoning_effort\" differ: give one",
                 "reasoning_effort");
  }
  bool add = true, cont = false;
  for (const auto& [field, into, dflt] : {std::tuple{"add_generation_prompt", &add, true},
                                          std::tuple{"continue_final_message", &cont, false}}) {
    const auto f = doc.find(field);
    if (f == doc.end() || f->is_null())
      continue;
    if (!f->is_boolean())
      return bad("field \"" + std::string(field) + "\" must be true or false, got " + f->dump().substr(0, 80), field);
    *into = f->get<bool>();
    if (*into != dflt && !tpl.program)
      return needs_jinja(field);
  }
  if (cont && add && doc.contains("add_generation_prompt") && !doc["add_generation_prompt"].is_null())
    return bad("fields \"add_generation_prompt\" and \"continue_final_message\" cannot both be true",
               "continue_final_message");
  if (cont && messages.back().role != "assistant")
    return bad("field \"continue_final_message\" continues the final message, which must be the assistant's",
               "continue_final_message");
  return std::nullopt;
}

/// The prompt a Hugging Face template renders from a chat body `doc` (read
/// in order) whose
/// messages and tools are checked already: the messages as transformers
/// takes them (roles, text, an assistant's tool_calls with their arguments
/// as objects, a tool's tool_call_id), the tools offered as the request
/// gives them (in its key order; none: None), add_generation_prompt,
/// bos_token and eos_token. A leading bos_token is dropped (the tokenizer adds BOS).
std::variant<std::string, api_error> render_jinja(const chat_template& tpl, const nlohmann::ordered_json& doc,
                                                  const std::vector<tool>& offered) {
  using ojson = nlohmann::ordered_json;
  const bool continued = doc.value("continue_final_message", ojson(false)) == ojson(true);
  ojson messages = ojson::array();
  for (const auto& m : doc.at("messages")) {
    ojson one = ojson::object();
    const auto role = m.at("role").get<std::string>();
    one["role"] = role == "developer" ? "system" : role;
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // None beside calls, as transformers gives it; beside thinking
      // alone, the empty text the model wrote after it.
      one["content"] = m.contains("tool_calls") && !m["tool_calls"].is_null() ? ojson() : ojson("");
    } else if (content->is_string()) {
      one["content"] = *content;
    } else {
      std::string text; // text parts, joined as text_of joins them
      for (std::size_t k = 0; k < content->size(); ++k)
        text += (k > 0 ? "\n" : "") + (*content)[k].at("text").get<std::string>();
      one["content"] = std::move(text);
    }
    if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      ojson list = ojson::array();
      for (const auto& c : *calls)
        list.push_back({{"id", c.at("id")},
                        {"type", "function"},
                        {"function", {{"name", c.at("function").at("name")},
                                      {"arguments", ojson::parse(c.at("function").at("arguments").get<std::string>())}}}});
      one["tool_calls"] = std::move(list);
    }
    if (const auto id = m.find("tool_call_id"); id != m.end())
      one["tool_call_id"] = *id;
    if (const auto name = m.find("name"); name != m.end())
      one["name"] = *name;
    // The reasoning as Qwen 3's and DeepSeek's templates read it.
    for (const char* key : {"reasoning_content", "reasoning"})
      if (const auto r = m.find(key); r != m.end() && r->is_string()) {
        one["reasoning_content"] = *r;
        break;
      }
    messages.push_back(std::move(one));
  }
  const std::string final_text =
    messages.back()["content"].is_string() ? messages.back()["content"].get<std::string>() : std::string();
  // As transformers renders: tools and documents None when not given; the
  // request's chat_template_kwargs (vLLM's) beside them.
  ojson vars = ojson::object();
  vars["messages"] = std::move(messages); // moved, not copied as an initializer list would
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = !continued && doc.value("add_generation_prompt", ojson(true)) != ojson(false);
  vars["bos_token"] = tpl.bos_token;
  vars["eos_token"] = tpl.eos_token;
  if (const auto effort = doc.find("reasoning_effort"); effort != doc.end() && !effort->is_null())
    vars["reasoning_effort"] = *effort;
  // The tools and further variables as the request writes them, keys in
  // its order (a template shows them with tojson).
  if (const auto kw = doc.find("chat_template_kwargs"); kw != doc.end() && kw->is_object())
    for (const auto& [key, value] : kw->items())
      vars[key] = value;
  if (!offered.empty()) {
    ojson tools = ojson::array();
    for (const auto& t : doc.at("tools"))
      if (std::any_of(offered.begin(), offered.end(),
                      [&](const tool& o) { return o.name == t.at("function").at("name").get<std::string>(); }))
        tools.push_back(t);
    vars["tools"] = std::move(tools);
  }
  std::string text;
  try {
    text = (!offered.empty() && tpl.tool_use_program ? *tpl.tool_use_program : *tpl.program).render(vars);
  } catch (const jinja::error& e) {
    return bad(std::string("the chat template cannot render this chat: ") + e.what(), "messages");
  }
  if (!tpl.bos_token.empty() && text.starts_with(tpl.bos_token))
    text.erase(0, tpl.bos_token.size());
  if (continued) {
    // The prompt ends where the final (assistant) message's text ends, so
    // the model goes on with it: what the template closes it with is cut.
    const auto at = final_text.empty() ? std::string::npos : text.rfind(final_text);
    if (at == std::string::npos)
      return bad("field \"continue_final_message\": the chat template does not show the final message's text as it "
                 "is written, so the prompt cannot end with it",
                 "continue_final_message");
    text.erase(at + final_text.size());
  }
  return text;
}

/// Whether `name` is a function name OpenAI takes: 1 to 64 of a-z, A-Z,
/// 0-9, '_' and '-'.
bool function_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
  });
}

/// The request's `tools`, each checked; the error names the one at fault.
std::variant<std::vector<tool>, api_error> read_tools(const json& doc) {
  std::vector<tool> out;
  const auto t = doc.find("tools");
  if (t == doc.end() || t->is_null())
    return out;
  if (!t->is_array())
    return bad("field \"tools\" must be an array of {\"type\": \"function\", \"function\": {...}}", "tools");
  if (t->size() > max_tools)
    return bad("field \"tools\" holds " + std::to_string(t->size()) + " functions; at most "
                 + std::to_string(max_tools) + " in one request",
               "tools");
  for (std::size_t i = 0; i < t->size(); ++i) {
    const auto& entry = (*t)[i];
    const auto at = "tools[" + std::to_string(i) + "]";
    if (!entry.is_object() || entry.value("type", json()) != "function" || !entry.contains("function")
        || !entry["function"].is_object())
      return bad("\"" + at + "\" must be {\"type\": \"function\", \"function\": {\"name\", ...}}", "tools");
    for (const auto& [key, value] : entry.items())
      if (key != "type" && key != "function")
        return bad("unknown field \"" + at + "." + key + "\"", "tools");
    const auto& fn = entry["function"];
    tool one;
    nlohmann::ordered_json shown = nlohmann::ordered_json::object();
    const auto name = fn.find("name");
    if (name == fn.end() || !name->is_string() || !function_name(name->get<std::string>()))
      return bad("\"" + at + ".function.name\" must be 1 to 64 letters, digits, '_' or '-', got "
                   + (name == fn.end() ? std::string("none") : name->dump().substr(0, 80)),
                 "tools");
    one.name = name->get<std::string>();
    if (std::any_of(out.begin(), out.end(), [&](const tool& x) { return x.name == one.name; }))
      return bad("\"" + at + ".function.name\" \"" + one.name + "\" names an earlier tool too", "tools");
    shown["name"] = one.name;
    for (const auto& [key, value] : fn.items()) {
      if (key == "name" || value.is_null())
        continue;
      if (key == "description" && value.is_string())
        shown["description"] = value.get<std::string>();
      else if (key == "parameters" && value.is_object()) {
        // A call's arguments are an object: a schema of another type
        // could never be called.
        if (const auto type = value.find("type"); type != value.end() && *type != "object")
          return bad("\"" + at + ".function.parameters\" must describe the arguments' object (\"type\": \"object\"), "
                       "got \"type\": " + type->dump().substr(0, 80),
                     "tools");
        one.parameters = value;
      }
      else if (key == "strict" && value.is_boolean())
        continue; // calls are held to the parameters whatever it says
      else if (key == "description" || key == "parameters" || key == "strict")
        return bad("\"" + at + ".function." + key + "\" must be "
                     + (key == "description" ? "a string" : key == "parameters" ? "a JSON Schema (an object)" : "true or false")
                     + ", got " + value.dump().substr(0, 80),
                   "tools");
      else
        return bad("unknown field \"" + at + ".function." + key + "\"", "tools");
    }
    if (!one.parameters.is_null())
      shown["parameters"] = nlohmann::ordered_json::parse(dump(one.parameters));
    one.line = nlohmann::ordered_json{{"type", "function"}, {"function", std::move(shown)}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    out.push_back(std::move(one));
  }
  return out;
}

/// `schema` with each reference into itself ("#/...") turned into one into
/// the document it is put in at `at` (a JSON pointer).
void rebase_refs(json& schema, const std::string& at) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string() && value.get<std::string>().starts_with("#"))
        value = "#" + at + value.get<std::string>().substr(1);
      else
        rebase_refs(value, at);
    }
  } else if (schema.is_array()) {
    for (auto& v : schema)
      rebase_refs(v, at);
  }
}

/// The JSON Schema of one call of `tools`: {"name": one of theirs,
/// "arguments": its parameters}, each function's parameters kept in $defs
/// under its name (so the intake's refusal names it). Parameters that
/// `enforceable` refuses become any object.
/// The JSON Schema of `t`'s arguments: its parameters (none: an empty
/// object), or any object where `enforceable` refuses them.
json arguments_schema(const tool& t, const std::function<bool(const std::string&)>& enforceable = {}) {
  json params = t.parameters.is_null()
                  ? json{{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}}
                  : t.parameters;
  if (enforceable && !enforceable(dump(params)))
    params = {{"type", "object"}};
  return params;
}

/// Where a call's schema keeps response_format's, beside the calls' (no
/// function's name: those are letters, digits, '_' and '-').
constexpr std::string_view answer_def = "$answer";

json call_schema(const std::vector<tool>& tools, const std::string& arguments_key,
                 const std::function<bool(const std::string&)>& enforceable = {}) {
  json defs = json::object();
  json any = json::array();
  for (const auto& t : tools) {
    auto params = arguments_schema(t, enforceable);
    rebase_refs(params, "/$defs/" + t.name);
    defs[t.name] = std::move(params);
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", t.name}}}, {arguments_key, {{"$ref", "#/$defs/" + t.name}}}}},
                   {"required", {"name", arguments_key}},
                   {"additionalProperties", false}});
  }
  return {{"anyOf", std::move(any)}, {"$defs", std::move(defs)}};
}

/// What the wire's json_trigger_head takes for calls named before their
/// arguments: each tool's arguments' schema under its name (each compiled
/// on its own, its references its own).
json named_schema(const std::vector<tool>& tools, const std::function<bool(const std::string&)>& enforceable = {}) {
  json properties = json::object();
  for (const auto& t : tools)
    properties[t.name] = arguments_schema(t, enforceable);
  return {{"type", "object"}, {"properties", std::move(properties)}};
}

/// The schema of the calls' array (Mistral's) whose items are `one`, a
/// call's schema: at least one call, and one at most where `single`.
json calls_schema(json one, bool single) {
  json defs = std::move(one["$defs"]);
  one.erase("$defs");
  json out = {{"type", "array"}, {"items", std::move(one)}, {"minItems", 1}, {"$defs", std::move(defs)}};
  if (single)
    out["maxItems"] = 1;
  return out;
}

/// The tools a chat offers as `tool_choice` asks: none ("none", the
/// default without tools), all of them ("auto", the default with tools;
/// "required"), or the one it names; `forced` when the answer must be a
/// call.
struct tool_choice {
  std::vector<tool> offered;
  bool forced = false;
  bool named = false; ///< forced to the one function named
};

std::variant<tool_choice, api_error> read_tool_choice(const json& doc, std::vector<tool> tools) {
  tool_choice out;
  const auto c = doc.find("tool_choice");
  if (c == doc.end() || c->is_null() || (*c == "auto" && !tools.empty())) {
    out.offered = std::move(tools);
    return out;
  }
  if (*c == "none")
    return out;
  const auto shape = "field \"tool_choice\" must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                     "\"function\": {\"name\": \"...\"}}, got "
                     + c->dump().substr(0, 80);
  if (*c == "required" || *c == "auto") {
    out.offered = std::move(tools);
  } else {
    const json* fn = c->is_object() && c->size() == 2 && c->value("type", json()) == "function" && c->contains("function")
                       ? &(*c)["function"]
                       : nullptr;
    if (fn == nullptr || !fn->is_object() || fn->size() != 1 || !fn->contains("name") || !(*fn)["name"].is_string())
      return bad(shape, "tool_choice");
    const auto name = (*fn)["name"].get<std::string>();
    const auto it = std::find_if(tools.begin(), tools.end(), [&](const tool& t) { return t.name == name; });
    if (it == tools.end())
      return bad("field \"tool_choice\" names the function \"" + name + "\", which \"tools\" does not hold",
                 "tool_choice");
    out.offered.push_back(std::move(*it));
    out.named = true;
  }
  if (out.offered.empty())
    return bad("field \"tool_choice\" " + c->dump().substr(0, 80) + " needs \"tools\"", "tool_choice");
  out.forced = true;
  return out;
}

} // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names{"llama2", "llama3", "chatml"};
  return names;
}

const std::vector<std::string>& reasoning_parser_names() {
  static const std::vector<std::string> names{"deepseek_r1", "qwen3"};
  return names;
}

std::optional<reasoning_format> reasoning_parser(std::string_view name) {
  if (name == "deepseek_r1")
    return reasoning_format{.opened_by_prompt = true};
  if (name == "qwen3")
    return reasoning_format{};
  return std::nullopt;
}

std::optional<chat_template_error> custom_formats_refused(std::string_view name, const chat_formats& custom) {
  if (name == "custom")
    return std::nullopt;
  const std::pair<const char*, bool> given[]{{"chat_system", !custom.system.empty()},
                                             {"chat_user", !custom.user.empty()},
                                             {"chat_assistant", !custom.assistant.empty()},
                                             {"chat_generation", !custom.generation.empty()},
                                             {"chat_stop", !custom.stop.empty()},
                                             {"chat_tools", !custom.tools.empty()},
                                             {"chat_tool_call", !custom.tool_call.empty()},
                                             {"chat_tool_result", !custom.tool_result.empty()},
                                             {"chat_tool_arguments", !custom.tool_arguments.empty()}};
  for (const auto& [key, is_given] : given)
    if (is_given)
      return chat_template_error{key, "is for chat_template = \"custom\" (chat_template is \"" + std::string(name)
                                        + "\"" + (name.empty() ? ": no chat completions)" : ")")};
  return std::nullopt;
}

namespace {

/// The tool formats the built-in templates share: the functions in a
/// system message's <tools> block, each call in <tool_call> tags (the form
/// Hermes- and Qwen-style models are trained on), results in
/// <tool_response> tags.
void default_tool_formats(chat_formats& f) {
  f.tools = "\n\n# Tools\n\nYou may call functions to help with the user's request. Each one is described by a "
            "JSON object on its own line within <tools></tools>:\n<tools>\n{tools}\n</tools>\n\nTo call one, "
            "write a JSON object with its name and arguments within <tool_call></tool_call> tags, one per call:\n"
            "<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n</tool_call>";
  f.tool_call = "<tool_call>\n{call}\n</tool_call>";
  f.tool_result = "<tool_response>\n{content}\n</tool_response>";
}

/// Why `tool_call` cannot say how calls are written: it must hold "{call}"
/// (or "{calls}", the calls' array, with nothing after it; or "{name}", a
/// head mark and "{arguments}") after a marker that opens a call.
std::optional<chat_template_error> tool_call_refused(const std::string& tool_call, bool markerless = false) {
  const auto slot = find_call_slot(tool_call);
  const auto found = slot.at != std::string::npos;
  const auto marker = found ? trimmed(std::string_view(tool_call).substr(0, slot.at)) : std::string_view();
  const auto after = found ? trimmed(std::string_view(tool_call).substr(slot.end())) : std::string_view();
  if (slot.array && !after.empty())
    return chat_template_error{"chat_tool_call", "holds text after \"{calls}\"; the array's \"]\" ends the calls"};
  if (slot.named && slot.arguments_at == std::string::npos)
    return chat_template_error{"chat_tool_call", "holds \"{name}\" but no \"{arguments}\" after it (a call is its "
                                                 "marker, the function's name, a mark, then its arguments object)"};
  if (const auto head = slot.head(tool_call); slot.named && (head.empty() || head.size() > wire::max_json_trigger_bytes))
    return chat_template_error{"chat_tool_call", "must hold a mark of 1 to " + std::to_string(wire::max_json_trigger_bytes)
                                                   + " bytes between \"{name}\" and \"{arguments}\" (such as "
                                                     "\"[ARGS]\"), by which the name is known to end"};
  if (markerless && found && marker.empty() && !slot.named) {
    if (!after.empty())
      return chat_template_error{"chat_tool_call", "is \"{call}\" alone (calls found at the output's start) or "
                                                   "holds text that opens a call before \"{call}\""};
    return std::nullopt;
  }
  if (marker.empty() || marker.size() > wire::max_json_trigger_bytes)
    return chat_template_error{"chat_tool_call", "must hold \"{call}\" (one call's JSON), \"{calls}\" (the calls "
                                                 "as one JSON array) or \"{name}\" and \"{arguments}\" after text "
                                                 "that opens a call (such as "
                                                 "\"<tool_call>\" or \"[TOOL_CALLS]\"; at most "
                                                   + std::to_string(wire::max_json_trigger_bytes)
                                                   + " bytes, blanks aside), by which calls are found in the output"};
  return std::nullopt;
}

/// A Hugging Face template: its program, the special texts, and how calls
/// are written.
std::variant<chat_template, chat_template_error> make_jinja_template(chat_template t, chat_formats custom,
                                                                     const jinja_source* jinja) {
  const std::pair<const char*, bool> formats[]{{"chat_system", !custom.system.empty()},
                                               {"chat_user", !custom.user.empty()},
                                               {"chat_assistant", !custom.assistant.empty()},
                                               {"chat_generation", !custom.generation.empty()},
                                               {"chat_tools", !custom.tools.empty()},
                                               {"chat_tool_result", !custom.tool_result.empty()}};
  for (const auto& [key, is_given] : formats)
    if (is_given)
      return chat_template_error{key, "is for chat_template = \"custom\"; a Jinja template (chat_template = \"" + t.name
                                        + "\") renders the messages and tools itself (it takes chat_tool_call and chat_stop)"};
  for (const auto& s : custom.stop)
    if (s.empty())
      return chat_template_error{"chat_stop", "must not hold an empty string"};
  t.stop = std::move(custom.stop);
  if (!custom.tool_call.empty()) {
    if (auto e = tool_call_refused(custom.tool_call, true))
      return std::move(*e);
    t.tool_call = std::move(custom.tool_call);
  }
  if (!custom.tool_arguments.empty() && custom.tool_arguments != "arguments" && custom.tool_arguments != "parameters")
    return chat_template_error{"chat_tool_arguments", "must be \"arguments\" or \"parameters\", got \"" +
                                                        custom.tool_arguments + "\""};
  t.tool_arguments = std::move(custom.tool_arguments);
  if (jinja == nullptr)
    return t;
  try {
    t.program = std::make_shared<const jinja::program>(jinja->text);
  } catch (const jinja::error& e) {
    return chat_template_error{"chat_template", e.what()};
  }
  if (!jinja->tool_use_text.empty()) {
    try {
      t.tool_use_program = std::make_shared<const jinja::program>(jinja->tool_use_text);
    } catch (const jinja::error& e) {
      return chat_template_error{"chat_template", std::string("the template named \"tool_use\": ") + e.what()};
    }
  }
  t.bos_token = jinja->bos_token;
  t.eos_token = jinja->eos_token;
  if (t.tool_call.empty())
    t.tool_call = tool_call_of(jinja->text, jinja->tool_use_text);
  return t;
}

} // namespace

std::variant<chat_template, chat_template_error> make_chat_template(std::string_view name, chat_formats custom,
                                                                    const jinja_source* jinja) {
  chat_template t;
  t.name = std::string(name);
  if (name == "model" || name == "jinja" || name == "auto")
    return make_jinja_template(std::move(t), std::move(custom), jinja);
  if (name == "custom") {
    const auto holds = [](const std::string& s, std::string_view slot) { return s.find(slot) != std::string::npos; };
    if (!holds(custom.user, content_slot))
      return chat_template_error{"chat_user", "must hold \"{content}\" (where a user message's text goes)"};
    if (!holds(custom.assistant, content_slot))
      return chat_template_error{"chat_assistant", "must hold \"{content}\" (where an assistant message's text goes)"};
    if (!custom.system.empty() && !holds(custom.system, content_slot))
      return chat_template_error{"chat_system", "must hold \"{content}\", or be empty (no system messages)"};
    for (const auto& s : custom.stop)
      if (s.empty())
        return chat_template_error{"chat_stop", "must not hold an empty string"};
    if (!custom.tool_arguments.empty())
      return chat_template_error{"chat_tool_arguments", "is for chat_template = \"model\" or \"jinja\" (a custom "
                                                        "template writes calls with \"arguments\")"};
    const bool any_tools = !custom.tools.empty() || !custom.tool_call.empty() || !custom.tool_result.empty();
    if (any_tools) {
      if (!holds(custom.tools, tools_slot))
        return chat_template_error{"chat_tools", "must hold \"{tools}\" (where the functions go, one to a line); the "
                                                 "tool formats go together"};
      if (auto e = tool_call_refused(custom.tool_call))
        return std::move(*e);
      if (!holds(custom.tool_result, content_slot))
        return chat_template_error{"chat_tool_result", "must hold \"{content}\" (where a tool message's text goes)"};
      if (custom.system.empty())
        return chat_template_error{"chat_system", "must be given with the tool formats: the functions go in a "
                                                  "system message"};
    }
    static_cast<chat_formats&>(t) = std::move(custom);
    return t;
  }
  if (auto e = custom_formats_refused(name, custom))
    return std::move(*e);
  if (name == "llama2") {
    // Meta's format: BOS (the tokenizer's) [INST] <<SYS>> ... the reply ends
    // with the end-of-sequence token, so no stop string.
    t.llama2 = true;
    t.system = "<<SYS>>\n{content}\n<</SYS>>\n\n";
    t.user = "[INST] {content} [/INST]";
    t.assistant = " {content} </s><s>";
    default_tool_formats(t);
    return t;
  }
  if (name == "llama3") {
    // Meta's Llama 3 format: BOS (the tokenizer's), then each message under
    // a role header, closed by <|eot_id|>, which the model's end tokens
    // (generation_config.json) include, so no stop string.
    t.trim = true;
    t.system = "<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>";
    t.user = "<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>";
    t.assistant = "<|start_header_id|>assistant<|end_header_id|>\n\n{content}<|eot_id|>";
    t.generation = "<|start_header_id|>assistant<|end_header_id|>\n\n";
    default_tool_formats(t);
    return t;
  }
  if (name == "chatml") {
    t.system = "<|im_start|>system\n{content}<|im_end|>\n";
    t.user = "<|im_start|>user\n{content}<|im_end|>\n";
    t.assistant = "<|im_start|>assistant\n{content}<|im_end|>\n";
    t.generation = "<|im_start|>assistant\n";
    t.stop = {"<|im_end|>"};
    default_tool_formats(t);
    return t;
  }
  return chat_template_error{"chat_template", "unknown chat template \"" + t.name
                                                + "\" (valid: llama2, llama3, chatml, custom, model, jinja)"};
}

namespace {

/// A chat's own `chat_template` (vLLM's request field) in place of the
/// server's `served`, where the server takes them: its program, with
/// what `served` says of the rest (calls, stop strings, reasoning, the
/// special texts); none when the chat brings none.
std::variant<std::optional<chat_template>, api_error> request_template(const json& doc, const chat_template& served) {
  const auto t = doc.find("chat_template");
  if (t == doc.end() || t->is_null())
    return std::nullopt;
  if (!served.request_templates)
    return bad("field \"chat_template\": this server renders chats with its own template; [http] "
               "request_chat_template = true lets a request bring one",
               "chat_template");
  if (!t->is_string() || t->get_ref<const std::string&>().empty())
    return bad("field \"chat_template\" must be a Jinja template (a non-empty string), got " + t->dump(),
               "chat_template");
  const auto& text = t->get_ref<const std::string&>();
  chat_template own = served;
  own.name = "request";
  try {
    own.program = std::make_shared<const jinja::program>(text);
  } catch (const jinja::error& e) {
    return bad(std::string("field \"chat_template\": ") + e.what(), "chat_template");
  }
  own.tool_use_program.reset();
  if (auto format = tool_call_of(text); !served.program && !format.empty())
    own.tool_call = std::move(format); // as make_chat_template reads a template's text
  return std::optional<chat_template>(std::move(own));
}

} // namespace

/// The chat completion of a body in the current form (no legacy functions).
std::variant<completion_request, api_error>
parse_chat_completion_of(std::string_view body, std::string_view base_model, std::string_view wire_id,
                         const chat_template& served, const std::function<bool(const std::string&)>& enforceable,
                         const sampling_defaults& defaults);

namespace {

/// OpenAI's legacy function calling as tools: `functions` as tools,
/// `function_call` as tool_choice (one call: parallel_tool_calls false),
/// an assistant's `function_call` as its one tool call, a `function`
/// message as the tool message answering it. None where the body uses none
/// of them (or is no object: the chat's checks say so).
struct legacy_body {
  std::string body; ///< in the current form
  bool asked;       ///< functions or function_call given (not only a history of calls)
};
std::optional<std::variant<legacy_body, api_error>> legacy_functions(std::string_view body) {
  using ojson = nlohmann::ordered_json;
  // (A function message answers a function_call: one of these is there.
  // Tools' "type": "function" alone is no reason to read the body twice.)
  if (body.find("\"functions\"") == std::string_view::npos && body.find("\"function_call\"") == std::string_view::npos)
    return std::nullopt;
  auto doc = ojson::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return std::nullopt;
  const auto given = [&](const char* key) { return doc.contains(key) && !doc[key].is_null(); };
  const bool asked = given("functions") || given("function_call");
  bool history = false;
  if (const auto m = doc.find("messages"); m != doc.end() && m->is_array())
    for (const auto& one : *m)
      history = history || (one.is_object() && (one.value("role", ojson()) == "function"
                                                || (one.contains("function_call") && !one["function_call"].is_null())));
  if (!asked && !history && !doc.contains("functions") && !doc.contains("function_call"))
    return std::nullopt; // (both null: read past below)
  using result = std::variant<legacy_body, api_error>;
  if (const auto f = doc.find("functions"); f != doc.end() && !f->is_null()) {
    if (doc.contains("tools"))
      return result(bad("fields \"functions\" and \"tools\" cannot go together: give tools (functions is their legacy form)",
                        "functions"));
    if (!f->is_array())
      return result(bad("field \"functions\" must be an array of {\"name\", \"description\", \"parameters\"}", "functions"));
    ojson tools = ojson::array();
    for (const auto& fn : *f)
      tools.push_back({{"type", "function"}, {"function", fn}});
    doc["tools"] = std::move(tools);
  }
  if (const auto c = doc.find("function_call"); c != doc.end() && !c->is_null()) {
    if (doc.contains("tool_choice"))
      return result(bad("fields \"function_call\" and \"tool_choice\" cannot go together: give tool_choice", "function_call"));
    const auto call = *c; // (copied: doc's operator[] below may move its members)
    if (call == "auto" || call == "none")
      doc["tool_choice"] = call;
    else if (call.is_object() && call.size() == 1 && call.contains("name"))
      doc["tool_choice"] = {{"type", "function"}, {"function", {{"name", call["name"]}}}};
    else
      return result(bad("field \"function_call\" must be \"auto\", \"none\" or {\"name\"}, got " + c->dump().substr(0, 80),
                        "function_call"));
  }
  doc.erase("functions");
  doc.erase("function_call");
  if (asked && !doc.contains("parallel_tool_calls"))
    doc["parallel_tool_calls"] = false; // a legacy answer holds one call
  std::string last; // the id given to the last assistant function_call
  auto& messages = doc["messages"];
  for (std::size_t i = 0; messages.is_array() && i < messages.size(); ++i) {
    auto& m = messages[i];
    if (!m.is_object())
      continue;
    const auto at = "messages[" + std::to_string(i) + "]";
    if (const auto fc = m.find("function_call"); fc != m.end() && !fc->is_null() && m.value("role", ojson()) == "assistant") {
      if (m.contains("tool_calls") && !m["tool_calls"].is_null())
        return result(bad("\"" + at + "\" has both function_call and tool_calls: give tool_calls", "messages"));
      last = "call_fn" + std::to_string(i);
      const auto called = *fc;
      m["tool_calls"] = ojson::array({{{"id", last}, {"type", "function"}, {"function", called}}});
      m.erase("function_call");
    } else if (m.value("role", ojson()) == "function") {
      if (last.empty())
        return result(bad("\"" + at + "\" (a function's result) answers no assistant function_call before it", "messages"));
      m["role"] = "tool";
      m["tool_call_id"] = last;
    }
  }
  return result(legacy_body{doc.dump(), asked});
}

} // namespace

std::variant<completion_request, api_error>
parse_chat_completion(std::string_view body, std::string_view base_model, std::string_view wire_id,
                      const chat_template& served, const std::function<bool(const std::string&)>& enforceable,
                      const sampling_defaults& defaults) {
  if (auto legacy = legacy_functions(body)) {
    if (auto* e = std::get_if<api_error>(&*legacy))
      return std::move(*e);
    const auto& [converted, asked] = std::get<legacy_body>(*legacy);
    auto r = parse_chat_completion_of(converted, base_model, wire_id, served, enforceable, defaults);
    if (auto* e = std::get_if<api_error>(&r)) {
      // Named as the request named them.
      if (asked && e->param == "tools")
        e->param = "functions";
      else if (asked && e->param == "tool_choice")
        e->param = "function_call";
      return r;
    }
    auto& c = std::get<completion_request>(r);
    c.legacy_functions = asked && c.tools.has_value();
    return r;
  }
  return parse_chat_completion_of(body, base_model, wire_id, served, enforceable, defaults);
}

std::variant<completion_request, api_error>
parse_chat_completion_of(std::string_view body, std::string_view base_model, std::string_view wire_id,
                         const chat_template& served, const std::function<bool(const std::string&)>& enforceable,
                         const sampling_defaults& defaults) {
  // For a Hugging Face template the body is read in order (the template may
  // show the client's objects with tojson), once: the checks read a copy.
  std::optional<nlohmann::ordered_json> ordered;
  if (served.program || served.request_templates) {
    auto o = nlohmann::ordered_json::parse(body, nullptr, false);
    if (!o.is_discarded() && o.is_object())
      ordered = std::move(o); // else read_body says what is wrong with it
  }
  auto read = read_body(body, taken_by_chat, off_in_chat, "a chat completion request", "", ordered ? &*ordered : nullptr);
  if (auto* e = std::get_if<api_error>(&read))
    return std::move(*e);
  auto& doc = std::get<json>(read);
  // A beam search checks the fields as the client sent them (the template's
  // stop strings join `stop` below).
  std::optional<json> as_sent;
  if (const auto b = doc.find("use_beam_search"); b != doc.end() && *b == json(true))
    as_sent = doc;
  auto own = request_template(doc, served);
  if (auto* e = std::get_if<api_error>(&own))
    return std::move(*e);
  const auto& requested = std::get<std::optional<chat_template>>(own);
  const chat_template& tpl = requested ? *requested : served;

  auto messages = read_messages(doc);
  if (auto* e = std::get_if<api_error>(&messages))
    return std::move(*e);
  auto tools = read_tools(doc);
  if (auto* e = std::get_if<api_error>(&tools))
    return std::move(*e);
  auto choice = read_tool_choice(doc, std::get<std::vector<tool>>(std::move(tools)));
  if (auto* e = std::get_if<api_error>(&choice))
    return std::move(*e);
  const auto& offered = std::get<tool_choice>(choice).offered;
  if (auto e = template_fields_refused(doc, tpl, std::get<std::vector<chat_message>>(messages)))
    return std::move(*e);
  std::variant<std::string, api_error> prompt;
  if (tpl.program) {
    if (!offered.empty() && tpl.tool_call.empty())
      return bad("the chat template's call format is not known (its text has neither <tool_call> tags nor Mistral's "
                 "[TOOL_CALLS] marker), so calls could not be read from the output; the server's http.chat_tool_call "
                 "says how the model writes one",
                 "tools");
    if (!ordered) // read_body took it, so it was read in order too
      return api_error{500, "server_error", "", "the chat body was not read in order", ""};
    prompt = render_jinja(tpl, *ordered, offered);
  } else {
    auto rendered = with_tools(tpl, std::get<std::vector<chat_message>>(std::move(messages)), offered);
    if (auto* e = std::get_if<api_error>(&rendered))
      return std::move(*e);
    prompt = render(tpl, std::get<std::vector<chat_message>>(rendered));
  }
  if (auto* e = std::get_if<api_error>(&prompt))
    return std::move(*e);

  // max_completion_tokens is the newer name of max_tokens.
  if (auto m = doc.find("max_completion_tokens"); m != doc.end() && !m->is_null()) {
    if (auto t = doc.find("max_tokens"); t != doc.end() && !t->is_null() && *t != *m)
      return bad("fields \"max_tokens\" and \"max_completion_tokens\" disagree; give one", "max_completion_tokens");
    doc["max_tokens"] = *m;
  }
  bool parallel = true;
  if (auto p = doc.find("parallel_tool_calls"); p != doc.end() && !p->is_null()) {
    if (!p->is_boolean())
      return bad("field \"parallel_tool_calls\" must be true or false, got " + p->dump(), "parallel_tool_calls");
    parallel = p->get<bool>();
  }

  // The template's stop strings go after the request's (a "stop" that is
  // neither a string nor an array the wire parser refuses, naming it);
  // only the request's stay in the text under include_stop_str_in_output.
  const auto kept = include_stop(doc);
  if (auto* e = std::get_if<api_error>(&kept))
    return std::move(*e);
  const auto own_stops = std::get<bool>(kept) ? stop_strings(doc).size() : 0;
  if (const auto s = doc.find("stop"); !tpl.stop.empty() && (s == doc.end() || s->is_null() || s->is_string() || s->is_array())) {
    json all = json::array();
    if (s != doc.end() && s->is_string())
      all.push_back(*s);
    else if (s != doc.end() && s->is_array())
      all = *s;
    for (const auto& x : tpl.stop)
      all.push_back(x);
    doc["stop"] = std::move(all);
  }
  completion_request out;
  out.chat = true;
  out.stop = stop_strings(doc);
  out.stops_kept = own_stops;
  const auto n = choices_per_prompt(doc);
  if (auto* e = std::get_if<api_error>(&n))
    return std::move(*e);
  json gen = {{"type", "generate"}};
  if (auto e = take_common(doc, base_model, gen, out, defaults))
    return std::move(*e);
  // A chat that sets no max_tokens may run to the end of the context
  // (OpenAI's; vLLM's: what the context leaves after the prompt, capped by
  // the model's max_new_tokens), not the wire's 16.
  if (const auto m = doc.find("max_tokens"); m == doc.end() || m->is_null()) {
    gen["fit_context"] = true;
    if (defaults.max_tokens)
      gen["max_tokens"] = *defaults.max_tokens;
  }
  // logprobs: whether to give them; top_logprobs: how many alternatives
  // (passed on as the wire's count, which its parser checks).
  bool logprobs = false;
  if (auto lp = doc.find("logprobs"); lp != doc.end() && !lp->is_null()) {
    if (!lp->is_boolean())
      return bad("field \"logprobs\" must be true or false, got " + lp->dump(), "logprobs");
    logprobs = lp->get<bool>();
  }
  if (auto top = doc.find("top_logprobs"); top != doc.end() && !top->is_null() && (logprobs || *top != json(0))) {
    if (!logprobs)
      return bad("field \"top_logprobs\" needs \"logprobs\": true (0 may go without)", "top_logprobs");
    gen["logprobs"] = *top;
    out.logprobs = logprobs_count(*top);
  } else if (logprobs) {
    gen["logprobs"] = 0;
    out.logprobs = 0;
  }
  std::string opening = std::get<std::string>(std::move(prompt));
  if (!offered.empty()) {
    // The answer may be a call, read from the output: not beside the other
    // things that shape it.
    if (!out.schema_field.empty())
      return bad("field \"" + out.schema_field + "\" cannot go with tools offered (tool_choice not \"none\"); a "
                   "call's arguments are held to its parameters when tool_choice forces the call",
                 out.schema_field);
    const auto forced = std::get<tool_choice>(choice).forced;
    const auto slot = find_call_slot(tpl.tool_call);
    // response_format shapes the answer when it is not a call: with "auto",
    // the output is calls or a value of it; a forced answer is a call.
    std::optional<json> answer;
    if (gen.contains("json_schema"))
      answer = std::move(gen["json_schema"]);
    else if (gen.contains("response_format"))
      answer = json{{"type", "object"}};
    gen.erase("json_schema");
    gen.erase("response_format");
    if (forced)
      answer.reset();
    completion_request::tool_calling calling;
    calling.forced = forced;
    // One call, its marker in the prompt: a named function's (with the
    // name and the head, where calls are named before their arguments), or
    // any one where no parallel calls are taken (where the name is inside
    // the call's JSON).
    calling.bare = forced && (std::get<tool_choice>(choice).named || (!parallel && !slot.named));
    for (const auto& t : offered)
      calling.names.push_back(t.name);
    calling.open = std::string(trimmed(std::string_view(tpl.tool_call).substr(0, slot.at)));
    calling.close = std::string(trimmed(std::string_view(tpl.tool_call).substr(slot.end())));
    calling.array = slot.array;
    calling.head = std::string(slot.head(tpl.tool_call));
    calling.parallel = parallel;
    calling.arguments_key = tpl.tool_arguments.empty() ? "arguments" : tpl.tool_arguments;
    // No marker: a forced answer is one call; "auto" reads the calls the
    // output begins with, unconstrained (no text opens them).
    calling.bare = calling.bare || (forced && calling.open.empty());
    // A reasoning model thinks before it calls: the marker is the output's
    // to write, after the thinking; one call is still one, the first the
    // content holds.
    if (tpl.reasoning && !calling.open.empty() && calling.bare) {
      calling.bare = false;
      calling.parallel = false;
    }
    // What a marker opens: a call, or (array) the calls' array, one call
    // at most where only one is taken.
    const auto held = [&](json one) {
      return calling.array ? calls_schema(std::move(one), calling.bare || !calling.parallel) : one;
    };
    if (calling.bare && slot.named) {
      // The assistant's turn opens with the call's marker, name and head;
      // the output is its arguments, held to its parameters.
      opening += tpl.tool_call.substr(0, slot.at) + offered.front().name + calling.head;
      gen["json_schema"] = arguments_schema(offered.front());
    } else if (calling.bare) {
      // The assistant's turn opens with a call (an array of one), whose
      // JSON is held to the tools' names and parameters and ends the output.
      opening += calling.array ? calling.open : tpl.tool_call.substr(0, slot.at);
      gen["json_schema"] = held(call_schema(offered, calling.arguments_key));
    } else if (forced) {
      // The output begins with a call; after it the model may open more.
      gen["json_schema"] = slot.named ? named_schema(offered) : held(call_schema(offered, calling.arguments_key));
      gen["json_trigger"] = calling.open;
      gen["json_trigger_first"] = true;
    } else if (!calling.open.empty()) {
      // Free text; a call the model opens is held to the tools' names and
      // (where the server can enforce them) parameters.
      gen["json_schema"] = slot.named ? named_schema(offered, enforceable)
                                      : held(call_schema(offered, calling.arguments_key, enforceable));
      gen["json_trigger"] = calling.open;
      if (answer)
        gen["json_answer"] = std::move(*answer); // (the calls or this answer)
    } else if (answer) {
      // No marker (Llama 3.1's JSON calls): the output is one JSON value, a
      // call or the answer, read as a call where it is one.
      auto both = call_schema(offered, calling.arguments_key, enforceable);
      rebase_refs(*answer, "/$defs/" + std::string(answer_def));
      both["$defs"][answer_def] = std::move(*answer);
      both["anyOf"].push_back({{"$ref", "#/$defs/" + std::string(answer_def)}});
      gen["json_schema"] = std::move(both);
    }
    if (slot.named && gen.contains("json_trigger"))
      gen["json_trigger_head"] = calling.head; // a name, the head, then its arguments
    // Mistral's markers are special tokens, which stand for no text unless
    // special tokens are shown (as vLLM's Mistral parser asks).
    if ((calling.array || slot.named) && !doc.contains("skip_special_tokens"))
      gen["skip_special_tokens"] = false;
    out.tools = std::move(calling);
  }
  out.reasoning = tpl.reasoning;
  if (tpl.reasoning) {
    // The model thinks first, freely: what it answers after is held (as
    // vLLM starts structured output where the reasoning ends), guided
    // choices and expressions as JSON; the thinking's tokens are counted
    // (usage.completion_tokens_details.reasoning_tokens).
    gen["reasoning_close"] = tpl.reasoning->close;
    if (!tpl.reasoning->opened_by_prompt)
      gen["reasoning_open"] = tpl.reasoning->open;
  }
  out.n = std::get<std::uint32_t>(n);
  if (auto e = expand({json(std::move(opening))}, out.n, gen, wire_id, out))
    return std::move(*e);
  if (auto e = take_beam(as_sent ? *as_sent : doc, gen, out, true))
    return std::move(*e);
  return out;
}

std::variant<std::string, api_error> parse_advise(std::string_view body, std::string_view wire_id) {
  auto read = read_object(body);
  if (auto* e = std::get_if<api_error>(&read))
    return std::move(*e);
  const auto& doc = std::get<json>(read);
  for (const auto& [key, value] : doc.items())
    if (key != "session" && key != "in_s")
      return bad("unknown field \"" + key + "\" in an advisory (it takes \"session\" and \"in_s\")", key);
  json frame = doc;
  frame["type"] = "advise";
  frame["id"] = wire_id;
  return dump(frame);
}

std::string advise_json(const wire::advise_reply& r) {
  return dump(json{{"session", r.session}, {"status", r.status}});
}

std::variant<std::string, api_error> parse_adapter_update(std::string_view body, std::string_view wire_id, bool load) {
  auto read = read_object(body);
  if (auto* e = std::get_if<api_error>(&read))
    return std::move(*e);
  const auto& doc = std::get<json>(read);
  json frame = {{"type", load ? "load_adapter" : "unload_adapter"}, {"id", wire_id}};
  for (const auto& [key, value] : doc.items()) {
    const char* wire_name = key == "lora_name"           ? "name"
                            : load && key == "lora_path" ? "path"
                            : load && key == "rank"      ? "rank"
                                                         : nullptr;
    if (wire_name == nullptr)
      return bad("unknown field \"" + key + "\" in " + (load ? "a load (it takes \"lora_name\", \"lora_path\" and, "
                                                                 "on the sim backend, \"rank\")"
                                                               : "an unload (it takes \"lora_name\")"),
                 key);
    if (key != "rank" && !value.is_null() && (!value.is_string() || value.get<std::string>().empty()))
      return bad("field \"" + key + "\" must be a non-empty string, got " + value.dump().substr(0, 80), key);
    if (!value.is_null())
      frame[wire_name] = value;
  }
  if (!frame.contains("name"))
    return bad("missing field \"lora_name\": the adapter's name, as requests give it in \"model\"", "lora_name");
  return dump(frame);
}

std::variant<std::string, api_error> parse_tokenizer_request(std::string_view body, std::string_view wire_id,
                                                             bool tokenize, const chat_template* tpl,
                                                             std::string_view base_model) {
  auto read = read_object(body);
  if (auto* e = std::get_if<api_error>(&read))
    return std::move(*e);
  const auto& doc = std::get<json>(read);
  json frame = {{"type", tokenize ? "tokenize" : "detokenize"}, {"id", wire_id}};
  if (tokenize && doc.contains("messages")) {
    // vLLM's chat form: the prompt the chat renders, as a chat completion
    // of it would run it (the template's BOS is the tokenizer's).
    static constexpr std::array<std::string_view, 8> chat_fields{
      "model", "messages", "tools", "add_generation_prompt", "continue_final_message", "chat_template",
      "chat_template_kwargs", "add_special_tokens"};
    for (const auto& [key, value] : doc.items())
      if (!in(chat_fields, key))
        return bad("unknown field \"" + key + "\" in a chat tokenize request (it takes \"model\", \"messages\", "
                   "\"tools\", \"add_generation_prompt\", \"continue_final_message\", \"chat_template\", "
                   "\"chat_template_kwargs\")",
                   key);
    if (const auto a = doc.find("add_special_tokens"); a != doc.end() && !a->is_null() && *a != json(false))
      return bad("field \"add_special_tokens\" is served only as false with messages (the template writes the "
                 "special tokens)",
                 "add_special_tokens");
    if (tpl == nullptr)
      return bad("field \"messages\" needs chat completions, which this server does not serve (no chat template)",
                 "messages");
    // Read again in order: a template shows the tools as the request gives them.
    auto chat = nlohmann::ordered_json::parse(body);
    chat.erase("add_special_tokens");
    if (!chat.contains("model") || chat["model"].is_null())
      chat["model"] = base_model;
    auto rendered = parse_chat_completion(chat.dump(), base_model, wire_id, *tpl);
    if (auto* e = std::get_if<api_error>(&rendered))
      return std::move(*e);
    const auto g = json::parse(std::get<completion_request>(rendered).frames.at(0));
    frame["prompt"] = g.at("prompt");
    return dump(frame);
  }
  const char* field = tokenize ? "prompt" : "tokens";
  for (const auto& [key, value] : doc.items()) {
    if (key == "model") {
      if (!value.is_null() && !value.is_string())
        return bad("field \"model\" must be a string, got " + value.dump().substr(0, 80), "model");
    } else if (key == field) {
      frame[field] = value;
    } else if (tokenize && key == "add_special_tokens") {
      if (!value.is_null() && value != json(true))
        return bad("field \"add_special_tokens\" is served only as true with a prompt (the tokenizer adds BOS, as "
                   "a completion of the prompt runs it)",
                   key);
    } else {
      return bad("unknown field \"" + key + "\" in " + (tokenize ? "a tokenize request (it takes \"model\" and \"prompt\", "
                                                                   "or \"messages\")"
                                                                 : "a detokenize request (it takes \"model\" and \"tokens\")"),
                 key);
    }
  }
  return dump(frame);
}

std::string tokenize_json(const wire::tokenize_reply& r) {
  return dump(json{{"count", r.tokens.size()}, {"max_model_len", r.max_context}, {"tokens", r.tokens}});
}

std::string detokenize_json(const wire::detokenize_reply& r) {
  return dump(json{{"prompt", r.text}});
}

std::string adapter_update_json(const wire::adapter_reply& r) {
  return dump(json{{"lora_name", r.name}, {"rank", r.rank}, {"status", r.status}});
}

api_error from_wire(wire::error_code code, std::string message) {
  using wire::error_code;
  api_error e;
  e.code = std::string(wire::to_string(code));
  e.message = std::move(message);
  switch (code) {
    case error_code::bad_request: e.status = 400; break;
    case error_code::prompt_too_long:
      e.status = 400;
      e.code = "context_length_exceeded";
      e.param = "prompt";
      break;
    case error_code::frame_too_large: e.status = 413; break;
    case error_code::unknown_adapter:
      e.status = 404;
      e.code = "model_not_found";
      e.param = "model";
      break;
    case error_code::overloaded:
      // Clients retry 429 with backoff.
      e.status = 429;
      e.type = "rate_limit_error";
      break;
    case error_code::shutting_down:
      e.status = 503;
      e.type = "server_error";
      break;
    case error_code::unknown_request:
    case error_code::adapter_in_use:
    case error_code::adapter_exists: e.status = 409; break;
    case error_code::duplicate_id:
    case error_code::bad_adapter:
    case error_code::internal:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

api_error refusal(const completion_request& request, wire::error_code code, std::string message) {
  constexpr std::string_view schema_field = "field \"json_schema\"";
  if (code == wire::error_code::bad_request && !request.schema_field.empty())
    for (const std::string_view held : {schema_field, std::string_view("field \"choice\""),
                                        std::string_view("field \"regex\""), std::string_view("field \"grammar\"")})
      if (message.starts_with(held)) {
        // vLLM's guided_json, guided_choice, guided_regex, guided_grammar or
        // structured_outputs gave it (never beside tools): name that.
        auto e = from_wire(code, "field \"" + request.schema_field + "\"" + message.substr(held.size()));
        e.param = request.schema_field;
        return e;
      }
  if (constexpr std::string_view answer = "field \"json_answer\"";
      code == wire::error_code::bad_request && message.starts_with(answer)) {
    // response_format's schema, the answer beside the calls.
    auto e = from_wire(code, "field \"response_format\"" + message.substr(answer.size()));
    e.param = "response_format";
    return e;
  }
  if (code != wire::error_code::bad_request || !message.starts_with(schema_field) || !request.tools)
    return from_wire(code, std::move(message));
  // The call's schema is the request's tools: say so, and name the
  // function whose parameters are at fault ($defs/NAME/... in the schema).
  std::string said = std::string(request.tools->forced ? "field \"tool_choice\" forces a call, held to the tools' parameters"
                                                       : "a call the model opens is held to the tools' parameters")
                     + message.substr(schema_field.size());
  constexpr std::string_view defs = "the schema at \"#/$defs/";
  if (const auto at = said.find(std::string(defs) + std::string(answer_def)); at != std::string::npos) {
    // response_format's schema beside the calls': name it.
    auto e = from_wire(code, "field \"response_format\": the schema at \"#"
                               + said.substr(at + defs.size() + answer_def.size()));
    e.param = "response_format";
    return e;
  }
  if (const auto at = said.find(defs); at != std::string::npos) {
    const auto name_at = at + defs.size();
    const auto name_end = said.find_first_of("/\"", name_at);
    if (name_end != std::string::npos)
      said.replace(at, name_end - at,
                   "the parameters of tool \"" + said.substr(name_at, name_end - name_at) + "\" at \"#");
  }
  const bool parameters = said.find("the parameters of tool") != std::string::npos;
  auto e = from_wire(code, std::move(said));
  e.param = parameters ? "tools" : "tool_choice";
  return e;
}

api_error adapter_update_error(wire::error_code code, std::string message) {
  auto e = from_wire(code, std::move(message));
  if (code == wire::error_code::bad_adapter) {
    e.status = 400;
    e.type = "invalid_request_error";
    e.param = "lora_path";
  } else if (code == wire::error_code::unknown_adapter) {
    e.param = "lora_name";
  }
  return e;
}

std::string_view finish_reason(std::string_view wire_reason) noexcept {
  if (wire_reason == "eos")
    return "stop";
  return wire_reason;
}

completion_answer::completion_answer(std::string id, std::int64_t created, const completion_request& request)
  : id_(std::move(id)), model_(request.model), created_(created), include_usage_(request.include_usage),
    continuous_usage_(request.continuous_usage),
    chat_(request.chat), n_(std::max<std::uint32_t>(request.n, 1)), per_prompt_(std::max(n_, request.best_of)),
    stop_(request.stop), stops_kept_(request.stops_kept),
    logprobs_(request.logprobs), echo_(request.echo), prompt_only_(request.prompt_only), echo_text_(request.echo_text),
    tools_(request.tools), reasoning_(request.reasoning), legacy_(request.legacy_functions),
    choices_(std::max<std::size_t>(request.frames.size(), 1)) {
}

namespace {

/// A request's usage: prompt tokens, completion tokens, and of the prompt
/// tokens those read from a cache.
struct usage_counts {
  std::uint64_t prompt = 0;
  std::uint64_t completion = 0;
  std::uint64_t cached = 0;
  std::uint64_t reasoning = 0; ///< of completion, the thinking's
};

/// `reasoning`: the model thinks (a reasoning parser): its thinking's
/// tokens are given, 0 too.
json usage_json(const usage_counts& u, bool reasoning) {
  json j = {{"prompt_tokens", u.prompt}, {"completion_tokens", u.completion}, {"total_tokens", u.prompt + u.completion}};
  if (u.cached > 0) // OpenAI's prompt caching field
    j["prompt_tokens_details"] = {{"cached_tokens", u.cached}};
  if (reasoning)
    j["completion_tokens_details"] = {{"reasoning_tokens", u.reasoning}};
  return j;
}

std::string event(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

/// Where the text ends at the first of `stop` it holds (npos: none): where
/// that stop string begins, or where it ends for one of the first `kept`
/// (include_stop_str_in_output); of two that begin at once, the one listed
/// first.
std::size_t stop_cut(std::string_view text, const std::vector<std::string>& stop, std::size_t kept) {
  auto at = std::string_view::npos;
  std::size_t which = 0;
  for (std::size_t i = 0; i < stop.size(); ++i)
    if (const auto f = text.find(stop[i]); f < at) {
      at = f;
      which = i;
    }
  return at != std::string_view::npos && which < kept ? at + stop[which].size() : at;
}

/// The length of the longest end of `text` that begins one of `stop` (and
/// so may turn into it with the next chunk).
std::size_t stop_prefix_at_end(std::string_view text, const std::vector<std::string>& stop) {
  std::size_t longest = 0;
  for (const auto& s : stop)
    for (std::size_t k = std::min(text.size(), s.size() - 1); k > longest; --k)
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        longest = k;
        break;
      }
  return longest;
}

/// The usage of `choices` choices, `n` to a prompt; `counts(k)` gives
/// choice k's. Each prompt counts once (its first choice's tokens); its
/// cached tokens are the fewest any of its choices read (the prompt was
/// computed once, by the choice that read least).
template <class Counts>
usage_counts tally(std::size_t choices, std::uint32_t n, Counts counts) {
  usage_counts u;
  std::uint64_t fewest = 0;
  for (std::size_t k = 0; k < choices; ++k) {
    const auto c = counts(k);
    if (k % n == 0) {
      u.prompt += c.prompt;
      u.cached += k > 0 ? fewest : 0;
      fewest = c.cached;
    }
    fewest = std::min(fewest, c.cached);
    u.completion += c.completion;
    u.reasoning += c.reasoning;
  }
  u.cached += choices > 0 ? fewest : 0;
  return u;
}

/// Characters in `s`: its bytes but UTF-8 continuation bytes.
std::size_t chars_in(std::string_view s) {
  return static_cast<std::size_t>(
    std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

/// A log-probability as OpenAI gives one: -9999 for a token the model gives
/// no chance (JSON has no infinity), null for an echoed prompt's first
/// token (nothing precedes it: NaN).
json logprob_value(float lp) {
  if (std::isnan(lp))
    return nullptr;
  return std::isfinite(lp) ? json(wire::wire_float(lp)) : json(-9999.0);
}

json bytes_of(std::string_view text) {
  json out = json::array();
  for (const char c : text)
    out.push_back(static_cast<unsigned char>(c));
  return out;
}

using placed_logprobs = completion_answer::placed_logprobs;

/// Tokens' log-probabilities as OpenAI's choice.logprobs: a chat's
/// {"content": [{token, logprob, bytes, top_logprobs}]}, a text
/// completion's {tokens, token_logprobs, top_logprobs, text_offset}, whose
/// top_logprobs map each listed token's text to its log-probability, the
/// sampled token's among them.
json logprobs_json(std::span<const placed_logprobs> lps, bool chat) {
  if (chat) {
    json content = json::array();
    for (const auto& p : lps) {
      json top = json::array();
      for (const auto& t : p.lp.top)
        top.push_back({{"token", t.text}, {"logprob", logprob_value(t.logprob)}, {"bytes", bytes_of(t.text)}});
      content.push_back({{"token", p.lp.sampled.text},
                         {"logprob", logprob_value(p.lp.sampled.logprob)},
                         {"bytes", bytes_of(p.lp.sampled.text)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const auto& p : lps) {
    tokens.push_back(p.lp.sampled.text);
    token_logprobs.push_back(logprob_value(p.lp.sampled.logprob));
    if (std::isnan(p.lp.sampled.logprob)) { // an echoed prompt's first token
      top_logprobs.push_back(nullptr);
      text_offset.push_back(p.offset);
      continue;
    }
    json top = json::object();
    for (const auto& t : p.lp.top)
      top.emplace(t.text, logprob_value(t.logprob)); // the first (most likely) of equal texts
    top.emplace(p.lp.sampled.text, logprob_value(p.lp.sampled.logprob));
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(p.offset);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

/// `lps` placed one after the other from the output's start, their
/// offsets (characters) from `chars`.
std::vector<placed_logprobs> placed(const std::vector<wire::token_logprobs>& lps, std::size_t chars = 0) {
  std::vector<placed_logprobs> out;
  std::size_t bytes = 0;
  for (const auto& lp : lps) {
    out.push_back({bytes, chars, lp});
    bytes += lp.sampled.text.size();
    chars += chars_in(lp.sampled.text);
  }
  return out;
}

} // namespace

std::pair<std::string, std::vector<placed_logprobs>>
completion_answer::echoed(std::size_t k, const std::vector<wire::token_logprobs>& prompt) const {
  std::pair<std::string, std::vector<placed_logprobs>> out;
  if (!echo_)
    return out;
  if (k < echo_text_.size()) {
    out.first = echo_text_[k];
  } else {
    for (const auto& t : prompt)
      out.first += t.sampled.text;
    if (logprobs_ >= 0)
      out.second = placed(prompt);
  }
  return out;
}

namespace {

/// A candidate's mean log-probability per generated token (OpenAI's rank
/// for best_of); 0 for none, minus infinity where the wire gave none.
double mean_logprob(const wire::done_reply& d) {
  if (!d.logprobs)
    return -std::numeric_limits<double>::infinity();
  if (d.logprobs->empty())
    return 0;
  double sum = 0;
  for (const auto& t : *d.logprobs)
    sum += t.sampled.logprob;
  return sum / static_cast<double>(d.logprobs->size());
}

/// The frames answered as choices: all of them, or with `per_prompt`
/// candidates to each prompt above `n`, each prompt's `n` of the highest
/// mean log-probability (ties to the earlier), in the order generated.
std::vector<std::size_t> chosen(const std::vector<wire::done_reply>& done, std::uint32_t n, std::uint32_t per_prompt) {
  std::vector<double> score;
  if (per_prompt > n)
    for (const auto& d : done)
      score.push_back(mean_logprob(d));
  std::vector<std::size_t> out;
  for (std::size_t first = 0; first < done.size(); first += per_prompt) {
    std::vector<std::size_t> group(std::min<std::size_t>(per_prompt, done.size() - first));
    std::iota(group.begin(), group.end(), first);
    if (group.size() > n) {
      std::stable_sort(group.begin(), group.end(), [&](std::size_t a, std::size_t b) { return score[a] > score[b]; });
      group.resize(n);
      std::sort(group.begin(), group.end());
    }
    out.insert(out.end(), group.begin(), group.end());
  }
  return out;
}

} // namespace

namespace {

/// Call `j` of choice `k`'s id: "call_", the completion's time and id,
/// the choice and the place. For Mistral's array form (`short_id`), nine
/// letters and digits drawn from those (its templates refuse other ids
/// when the calls come back in the history).
std::string call_id(std::string_view completion_id, std::int64_t created, std::size_t k, std::size_t j,
                    bool short_id) {
  auto id = "call_" + std::to_string(created) + "_" + std::string(completion_id.substr(completion_id.rfind('-') + 1))
            + "_" + std::to_string(k) + "_" + std::to_string(j);
  if (!short_id)
    return id;
  std::uint64_t h = 14695981039346656037ULL; // FNV-1a, then a final mix
  for (const char c : id)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  static constexpr std::string_view digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string out(9, '0');
  for (auto& c : out) {
    c = digits[h % digits.size()];
    h /= digits.size();
  }
  return out;
}

/// Calls written after Mistral's marker, in either of its forms, have
/// ids of nine letters and digits (its templates check them).
bool short_ids(const completion_request::tool_calling& t) {
  return t.array || t.open.find("[TOOL_CALLS]") != std::string::npos;
}

/// Choice `k`'s calls as OpenAI's tool_calls.
json tool_calls_json(const std::vector<read_call>& calls, std::string_view completion_id, std::int64_t created,
                     std::size_t k, bool short_id) {
  json out = json::array();
  for (std::size_t j = 0; j < calls.size(); ++j)
    out.push_back({{"id", call_id(completion_id, created, k, j, short_id)},
                   {"type", "function"},
                   {"function", {{"name", calls[j].name}, {"arguments", calls[j].arguments}}}});
  return out;
}

/// Where the calls begin in a chat's output `text` (npos: nowhere); with no
/// marker, only where the text begins with a JSON object (after blanks).
std::size_t calls_begin(std::string_view text, const completion_request::tool_calling& t) {
  if (t.bare)
    return 0;
  if (t.open.empty())
    return after_blanks(text).starts_with(t.array ? '[' : '{') ? 0 : std::string_view::npos;
  return text.find(t.open);
}

/// A chat's whole output as reasoning (none where it holds none) and content.
struct reasoning_parts {
  std::optional<std::string_view> reasoning;
  std::string_view content;
};

reasoning_parts split_reasoning(std::string_view text, const reasoning_format& f) {
  std::string_view rest = after_blanks(text);
  if (rest.starts_with(f.open))
    rest.remove_prefix(f.open.size());
  else if (f.opened_by_prompt)
    rest = text;
  else
    return {std::nullopt, text};
  const auto end = rest.find(f.close);
  if (end == std::string_view::npos)
    return {rest, {}};
  return {rest.substr(0, end), rest.substr(end + f.close.size())};
}

} // namespace

std::string completion_answer::body(const std::vector<wire::done_reply>& done) const {
  json choices = json::array();
  const auto frames = chosen(done, n_, per_prompt_);
  for (std::size_t index = 0; index < frames.size(); ++index) {
    const auto k = frames[index];
    const auto& d = done[k];
    std::string_view text = d.text && !prompt_only_ ? std::string_view(*d.text) : std::string_view();
    const auto cut = stop_cut(text, stop_, stops_kept_);
    text = text.substr(0, cut);
    auto [echo, lps] = echoed(k, d.prompt_logprobs.value_or(std::vector<wire::token_logprobs>{}));
    json choice = {{"index", index}, {"logprobs", nullptr},
                   {"finish_reason", prompt_only_ ? "length" : finish_reason(d.finish_reason)}};
    if (logprobs_ >= 0 && prompt_only_) {
      choice["logprobs"] = logprobs_json(lps, chat_);
    } else if (logprobs_ >= 0 && d.logprobs) {
      // The tokens whose text begins before the stop string, after the
      // prompt's when echoed.
      auto output = placed(*d.logprobs, chars_in(echo));
      std::erase_if(output, [cut](const placed_logprobs& p) { return cut != std::string_view::npos && p.start >= cut; });
      lps.insert(lps.end(), output.begin(), output.end());
      choice["logprobs"] = logprobs_json(lps, chat_);
    }
    if (chat_) {
      json message = {{"role", "assistant"}, {"content", text}};
      if (reasoning_) {
        // The reasoning apart; the content (null when none) after it.
        const auto parts = split_reasoning(text, *reasoning_);
        message["reasoning_content"] = parts.reasoning ? json(*parts.reasoning) : json();
        text = parts.content;
        message["content"] = text.empty() ? json() : json(text);
      }
      if (tools_) {
        // Text, then the calls, where a call begins after the marker; a
        // call cut short keeps the output's finish reason.
        const auto at = calls_begin(text, *tools_);
        call_reader calls(*tools_);
        if (at != std::string_view::npos)
          calls.feed(text.substr(at));
        if (!calls.calls().empty()) {
          const auto before = text.substr(0, at);
          message["content"] = trimmed(before).empty() ? json() : json(before);
          if (legacy_) {
            // The legacy form: one call, no id.
            const auto& first = calls.calls().front();
            message["function_call"] = {{"name", first.name}, {"arguments", first.arguments}};
          } else {
            message["tool_calls"] = tool_calls_json(calls.calls(), id_, created_, index, short_ids(*tools_));
          }
          if (calls.all_whole())
            choice["finish_reason"] = legacy_ ? "function_call" : "tool_calls";
        }
      }
      choice["message"] = std::move(message);
    } else
      choice["text"] = echo + std::string(text);
    choices.push_back(std::move(choice));
  }
  const auto u = tally(done.size(), per_prompt_, [&](std::size_t k) {
    return usage_counts{done[k].prompt_tokens, prompt_only_ ? 0 : done[k].completion_tokens, done[k].cached_tokens,
                        done[k].reasoning_tokens};
  });
  json j = {{"id", id_},       {"object", chat_ ? "chat.completion" : "text_completion"},
            {"created", created_}, {"model", model_},
            {"choices", std::move(choices)}, {"usage", usage_json(u, reasoning_.has_value())}};
  return dump(j);
}

std::string completion_answer::chunk_with(std::size_t k, std::string_view text, const char* finish, bool role,
                                          std::span<const placed_logprobs> logprobs, const char* field) const {
  json choice = {{"index", k}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (!logprobs.empty())
    choice["logprobs"] = logprobs_json(logprobs, chat_);
  if (finish != nullptr)
    choice["finish_reason"] = finish;
  if (!chat_)
    choice["text"] = text;
  else if (role)
    choice["delta"] = {{"role", "assistant"}, {"content", text}};
  else if (finish != nullptr && text.empty())
    choice["delta"] = json::object();
  else
    choice["delta"] = {{field, text}};
  json j = {{"id", id_}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", model_}, {"choices", json::array({choice})}};
  if (continuous_usage_) {
    const auto& c = choices_.at(k);
    j["usage"] = {{"prompt_tokens", c.prompt_tokens},
                  {"completion_tokens", c.completion_tokens},
                  {"total_tokens", c.prompt_tokens + c.completion_tokens}};
  }
  return event(j);
}

void completion_answer::accepted(std::size_t k, std::uint32_t prompt_tokens) {
  choices_.at(k).prompt_tokens = prompt_tokens;
}

std::string completion_answer::stream_start() const {
  std::string out;
  if (chat_)
    for (std::size_t k = 0; k < choices_.size(); ++k)
      out += chunk_with(k, "", nullptr, true);
  return out;
}

std::string completion_answer::chunk(std::size_t k, const wire::token_reply& t) {
  auto& c = choices_.at(k);
  if (c.cut)
    return {};
  c.completion_tokens = std::max<std::uint64_t>(c.completion_tokens, t.index + t.tokens.size());
  // Echoed, the prompt goes first, in a chunk of its own.
  std::string echo_chunk;
  if (echo_ && t.index == 0) {
    const auto [echo, lps] = echoed(k, t.prompt_logprobs);
    c.echoed_chars = chars_in(echo);
    if (!echo.empty())
      echo_chunk = chunk_with(k, echo, nullptr, false, lps);
  }
  if (prompt_only_)
    return echo_chunk; // the token generated is not the answer's
  if (logprobs_ >= 0)
    for (const auto& lp : t.logprobs) {
      c.pending.push_back({c.token_bytes, c.echoed_chars + c.token_chars, lp});
      c.token_bytes += lp.sampled.text.size();
      c.token_chars += chars_in(lp.sampled.text);
    }
  // `text` begins at output byte `from`.
  const auto from = c.received - c.held.size();
  c.received += t.text.size();
  std::string text = std::move(c.held) + t.text;
  c.held.clear();
  const auto at = stop_cut(text, stop_, 0); // where the first begins
  const auto keep = stop_prefix_at_end(text, stop_);
  if (at != std::string::npos && at <= text.size() - keep) {
    c.cut = true;
    text.resize(stop_cut(text, stop_, stops_kept_));
  } else {
    // Text that may begin a stop string waits for the next chunk to tell;
    // so does one found where a longer one may begin before it (the whole
    // answer cuts at the earliest).
    c.held = text.substr(text.size() - keep);
    text.resize(text.size() - keep);
  }
  // The tokens whose text begins in what is sent go with it; after a stop
  // string, none are left to send.
  const auto sent_to = from + text.size();
  std::string reasoning;
  if (reasoning_)
    std::tie(reasoning, text) = thought(c, std::move(text), false);
  text = routed(c, std::move(text));
  std::vector<placed_logprobs> going;
  auto split = std::find_if(c.pending.begin(), c.pending.end(), [&](const placed_logprobs& p) { return p.start >= sent_to; });
  going.assign(std::make_move_iterator(c.pending.begin()), std::make_move_iterator(split));
  c.pending.erase(c.pending.begin(), c.cut ? c.pending.end() : split);
  // The log-probabilities go with the first event; with none (all held, or
  // read as calls not yet sent), they wait for the text, or the end.
  std::string out = echo_chunk;
  if (!reasoning.empty())
    out += chunk_with(k, reasoning, nullptr, false, std::exchange(going, {}), "reasoning_content");
  if (!text.empty())
    out += chunk_with(k, text, nullptr, false, std::exchange(going, {}));
  out += call_deltas(k, going);
  c.pending.insert(c.pending.begin(), std::make_move_iterator(going.begin()), std::make_move_iterator(going.end()));
  return out;
}

std::string completion_answer::choice_end(std::size_t k, const wire::done_reply& done) {
  auto& c = choices_.at(k);
  std::string out;
  // What was held did not become a stop string: it is the output's end,
  // with the tokens still pending (those of no text too, such as the
  // end-of-sequence token's).
  auto pending = std::move(c.pending);
  c.pending.clear();
  const auto from = c.received - c.held.size(); // where the held text begins in the output
  std::string text = c.cut ? std::string() : std::move(c.held);
  c.held.clear();
  if (const auto at = stop_cut(text, stop_, stops_kept_); at != std::string::npos) {
    // A stop string that waited on a longer one: the tokens after it go
    // unlisted, as in the whole answer.
    text.resize(at);
    std::erase_if(pending, [&](const placed_logprobs& p) { return p.start >= from + at; });
  }
  if (reasoning_) {
    // The reasoning held goes out too, after a stop string as well.
    std::string reasoning;
    std::tie(reasoning, text) = thought(c, std::move(text), true);
    if (!reasoning.empty())
      out = chunk_with(k, reasoning, nullptr, false, std::exchange(pending, {}), "reasoning_content");
  }
  if (!text.empty())
    if (text = routed(c, std::move(text)); !text.empty())
      out += chunk_with(k, text, nullptr, false, std::exchange(pending, {}));
  c.prompt_tokens = done.prompt_tokens;
  c.completion_tokens = prompt_only_ ? 0 : done.completion_tokens;
  c.cached_tokens = done.cached_tokens;
  c.reasoning_tokens = done.reasoning_tokens;
  const std::string reason(prompt_only_ ? "length" : finish_reason(done.finish_reason));
  if (tools_)
    return out + calls_end(k, reason, pending);
  return out + chunk_with(k, "", reason.c_str(), false, pending);
}

std::pair<std::string, std::string> completion_answer::thought(choice& c, std::string text, bool end) const {
  const auto& f = *reasoning_;
  text = std::move(c.reasoning_held) + text;
  c.reasoning_held.clear();
  if (c.reasoning_phase == 0) {
    // The output's start: blanks, then the opening mark or not.
    const auto lead = after_blanks(text);
    if (lead.starts_with(f.open)) {
      c.reasoning_phase = 1;
      text = std::string(lead.substr(f.open.size()));
    } else if (!end && std::string_view(f.open).starts_with(lead)) {
      c.reasoning_held = std::move(text); // may still open it
      return {};
    } else {
      c.reasoning_phase = f.opened_by_prompt ? 1 : 2;
    }
  }
  if (c.reasoning_phase != 1)
    return {std::string(), std::move(text)};
  if (const auto at = text.find(f.close); at != std::string::npos) {
    c.reasoning_phase = 2;
    return {text.substr(0, at), text.substr(at + f.close.size())};
  }
  // Text that may begin the closing mark waits for the next chunk to tell.
  const auto keep = end ? 0 : stop_prefix_at_end(text, {f.close});
  c.reasoning_held = text.substr(text.size() - keep);
  text.resize(text.size() - keep);
  return {std::move(text), std::string()};
}

std::string completion_answer::routed(choice& c, std::string text) const {
  if (!tools_)
    return text;
  const auto calling = [&](std::string calls) {
    c.calling = true;
    c.reader.emplace(*tools_);
    c.reader->feed(calls);
    c.calls = std::move(calls);
  };
  if (c.calling) {
    c.reader->feed(text);
    c.calls += text;
    return {};
  }
  text = std::move(c.marker_held) + text;
  c.marker_held.clear();
  if (tools_->open.empty() && !tools_->bare) {
    // No marker: the content's start tells, once past its blanks.
    if (c.not_calling)
      return text;
    if (after_blanks(text).empty()) {
      c.marker_held = std::move(text);
      return {};
    }
    if (calls_begin(text, *tools_) == 0) {
      calling(std::move(text));
      return {};
    }
    c.not_calling = true;
    return text;
  }
  if (const auto at = calls_begin(text, *tools_); at != std::string::npos) {
    if (!c.said && after_blanks(std::string_view(text).substr(0, at)).empty()) {
      // Blanks alone before the calls are no content: they go with the
      // calls (read past), and back to the content if these are no calls.
      calling(std::move(text));
      return {};
    }
    calling(text.substr(at));
    text.resize(at);
    return text;
  }
  // Text that may begin the marker waits for the next chunk to tell, and
  // so do blanks while they are all the content: a call may follow them.
  const auto keep = stop_prefix_at_end(text, {tools_->open});
  if (!c.said && after_blanks(std::string_view(text).substr(0, text.size() - keep)).empty()) {
    c.marker_held = std::move(text);
    return {};
  }
  c.said = true;
  c.marker_held = text.substr(text.size() - keep);
  text.resize(text.size() - keep);
  return text;
}

std::string completion_answer::call_deltas(std::size_t k, std::vector<placed_logprobs>& logprobs) {
  auto& c = choices_.at(k);
  if (!c.reader)
    return {};
  const auto& calls = c.reader->calls();
  json deltas = json::array();
  for (std::size_t j = 0; j < calls.size() && (!legacy_ || j == 0); ++j) { // legacy: the first call alone
    const auto& call = calls[j];
    if (j == c.arguments_sent.size()) {
      deltas.push_back({{"index", j},
                        {"id", call_id(id_, created_, k, j, short_ids(*tools_))},
                        {"type", "function"},
                        {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      c.arguments_sent.push_back(call.arguments.size());
    } else if (auto& sent = c.arguments_sent[j]; sent < call.arguments.size()) {
      deltas.push_back({{"index", j}, {"function", {{"arguments", call.arguments.substr(sent)}}}});
      sent = call.arguments.size();
    }
  }
  if (deltas.empty())
    return {};
  json delta = {{"tool_calls", std::move(deltas)}};
  if (legacy_) // {"function_call": {"name", "arguments"}}, then {"function_call": {"arguments"}}
    delta = {{"function_call", std::move(delta["tool_calls"][0]["function"])}};
  json choice = {{"index", k}, {"logprobs", nullptr}, {"finish_reason", nullptr}, {"delta", std::move(delta)}};
  if (!logprobs.empty())
    choice["logprobs"] = logprobs_json(std::exchange(logprobs, {}), chat_);
  json j = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_},
            {"choices", json::array({std::move(choice)})}};
  return event(j);
}

std::string completion_answer::calls_end(std::size_t k, const std::string& reason,
                                         std::vector<placed_logprobs>& logprobs) {
  auto& c = choices_.at(k);
  std::string out = call_deltas(k, logprobs);
  if (!c.reader || c.reader->calls().empty()) {
    // No call began: the text held is the output's end.
    if (const auto text = std::move(c.marker_held) + std::move(c.calls); !text.empty())
      out += chunk_with(k, text, nullptr, false, std::exchange(logprobs, {}));
    return out + chunk_with(k, "", reason.c_str(), false, logprobs);
  }
  return out + chunk_with(k, "", c.reader->all_whole() ? (legacy_ ? "function_call" : "tool_calls") : reason.c_str(),
                          false, logprobs);
}

std::string completion_answer::stream_end() const {
  std::string out;
  if (include_usage_) {
    json j = {{"id", id_},      {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_}, {"model", model_}, {"choices", json::array()},
              {"usage", usage_json(tally(choices_.size(), per_prompt_, [this](std::size_t k) {
                 const auto& c = choices_[k];
                 return usage_counts{c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.reasoning_tokens};
               }), reasoning_.has_value())}};
    out += event(j);
  }
  return out + "data: [DONE]\n\n";
}

std::string completion_answer::stream_error(const api_error& e) const {
  return "data: " + to_json(e) + "\n\ndata: [DONE]\n\n";
}

bool authorized(std::string_view authorization, const std::vector<std::string>& keys) noexcept {
  if (keys.empty())
    return true;
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() < scheme.size())
    return false;
  for (std::size_t i = 0; i < scheme.size(); ++i) // the scheme is case-insensitive
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != std::tolower(static_cast<unsigned char>(scheme[i])))
      return false;
  const auto given = authorization.substr(scheme.size());
  bool any = false;
  for (const auto& key : keys) {
    // Every byte of the longer is looked at, whatever matches.
    unsigned diff = given.size() == key.size() ? 0 : 1;
    const auto n = std::max(given.size(), key.size());
    for (std::size_t i = 0; i < n; ++i)
      diff |= static_cast<unsigned char>(i < given.size() ? given[i] : 0)
              ^ static_cast<unsigned char>(i < key.size() ? key[i] : 0);
    any |= diff == 0;
  }
  return any;
}

api_error unauthorized(bool key_given) {
  api_error e;
  e.status = 401;
  e.code = "invalid_api_key";
  e.message = key_given ? "the API key is not one of the server's ([http] api_keys)"
                        : "this server needs an API key: send \"Authorization: Bearer KEY\"";
  return e;
}

namespace {

json model_list(std::string_view base_model, const wire::adapters_reply& adapters, std::int64_t created) {
  json data = json::array();
  data.push_back({{"id", base_model}, {"object", "model"}, {"created", created}, {"owned_by", "troupe"}});
  for (const auto& a : adapters.adapters)
    data.push_back({{"id", a.name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "troupe"},
                    {"parent", base_model},
                    {"rank", a.rank},
                    {"resident", a.resident}});
  // vLLM's: the context a request's prompt and max_tokens must fit in.
  if (adapters.max_context != 0)
    for (auto& m : data)
      m["max_model_len"] = adapters.max_context;
  return data;
}

} // namespace

std::string models_json(std::string_view base_model, const wire::adapters_reply& adapters, std::int64_t created) {
  return dump(json{{"object", "list"}, {"data", model_list(base_model, adapters, created)}});
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::variant<std::string, api_error> model_json(std::string_view name, std::string_view base_model,
                                                const wire::adapters_reply& adapters, std::int64_t created) {
  for (const auto& m : model_list(base_model, adapters, created))
    if (m["id"] == name)
      return dump(m);
  api_error e;
  e.status = 404;
  e.code = "model_not_found";
  e.param = "model";
  e.message = "no model \"" + std::string(name) + "\": the base model is \"" + std::string(base_model)
              + "\" (GET /v1/models lists the adapters)";
  return e;
}

std::string version_json() {
  return dump(json{{"version", version()}});
}

std::string prometheus_text(const wire::stats_reply& stats) {
  constexpr std::string_view bucket = "_bucket_le_";
  auto metric_of = [](std::string_view name) {
    std::string metric = "troupe_";
    for (const char c : name)
      metric += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
    return metric;
  };
  // Histograms: NAME_bucket_le_BOUND, then NAME_sum and NAME_count.
  std::vector<std::string> histograms;
  std::set<std::string, std::less<>> names;
  for (const auto& v : stats.values) {
    names.insert(v.name);
    if (const auto at = v.name.find(bucket); at != std::string::npos)
      histograms.push_back(v.name.substr(0, at));
  }
  auto histogram_of = [&](std::string_view name) -> std::optional<std::string> {
    for (const char* part : {"_sum", "_count"})
      if (name.ends_with(part)) {
        const auto base = name.substr(0, name.size() - std::strlen(part));
        if (std::find(histograms.begin(), histograms.end(), base) != histograms.end())
          return std::string(base);
      }
    return std::nullopt;
  };
  // A multi-node deployment's per-node figures, node<i>_NAME: NAME's
  // family labelled node="i" where the stats hold NAME (a level's nodes
  // beside the largest), else node_NAME's (the router's node<i>_alive).
  auto per_node = [&](std::string_view name) -> std::optional<std::pair<std::string, std::string>> {
    if (!name.starts_with("node"))
      return std::nullopt;
    std::size_t at = 4;
    while (at < name.size() && std::isdigit(static_cast<unsigned char>(name[at])))
      ++at;
    if (at == 4 || at + 1 >= name.size() || name[at] != '_')
      return std::nullopt;
    const auto rest = name.substr(at + 1);
    return std::pair{names.contains(rest) ? std::string(rest) : "node_" + std::string(rest),
                     "{node=\"" + std::string(name.substr(4, at - 4)) + "\"}"};
  };
  // Each family's samples stay together, families in order of first sight.
  struct family {
    std::string name;
    const char* type;
    std::string samples;
  };
  std::vector<family> families;
  auto add = [&](const std::string& name, const char* type, const std::string& sample) {
    auto f = std::find_if(families.begin(), families.end(), [&](const family& x) { return x.name == name; });
    if (f == families.end())
      f = families.insert(families.end(), family{name, type, {}});
    f->samples += sample + "\n";
  };
  for (const auto& [name, value, kind] : stats.values) {
    if (!std::isfinite(value))
      continue;
    const auto v = json(value).dump(); // shortest form that reads back the same
    if (const auto at = name.find(bucket); at != std::string::npos) {
      const auto base = metric_of(std::string_view(name).substr(0, at));
      add(base, "histogram", base + "_bucket{le=\"" + name.substr(at + bucket.size()) + "\"} " + v);
    } else if (const auto h = histogram_of(name)) {
      add(metric_of(*h), "histogram", metric_of(name) + " " + v);
    } else {
      const auto node = per_node(name);
      const bool counter = kind == stat_kind::counter;
      const auto metric = metric_of(node ? node->first : name) + (counter ? "_total" : "");
      add(metric, counter ? "counter" : "gauge", metric + (node ? node->second : "") + " " + v);
    }
  }
  std::string out;
  for (const auto& f : families)
    out += "# TYPE " + f.name + " " + f.type + "\n" + f.samples;
  return out;
}

} // namespace troupe::openai
