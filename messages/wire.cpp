// JSON wire protocol: request parsing and validation, reply serialization and
// parsing. nlohmann/json stays inside this file; see docs/protocol.md.
#include "messages/wire.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <type_traits>

namespace troupe::wire {

namespace {

// ordered_json keeps keys in insertion order: replies read "type", "id" first
// and stats keep the order the server gave them.
using json = nlohmann::ordered_json;

/// Thrown by the validators below and caught in parse_request / parse_reply,
/// which turn it into a parse_error. Never leaves this file.
struct rejection {
  std::string message;
};

[[noreturn]] void reject(std::string message) {
  throw rejection{std::move(message)};
}

// -- describing values in messages ---------------------------------------

constexpr std::size_t max_quoted_bytes = 48;

/// Serializes `j` compactly; invalid UTF-8 becomes U+FFFD instead of throwing.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string quote(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 2);
  out += '"';
  out += name;
  out += '"';
  return out;
}

/// A short description of a client-supplied value for an error message.
/// Never recurses into arrays or objects (they may be nested very deeply) and
/// never echoes more than `max_quoted_bytes` of a string.
std::string describe(const json& j) {
  switch (j.type()) {
    case json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (s.size() <= max_quoted_bytes)
        return dump(j);
      return "a string of " + std::to_string(s.size()) + " bytes starting with "
             + dump(json(s.substr(0, max_quoted_bytes)));
    }
    case json::value_t::array:
      if (j.empty())
        return "an empty array";
      if (j.size() == 1)
        return "an array of 1 element";
      return "an array of " + std::to_string(j.size()) + " elements";
    case json::value_t::object:
      return "an object";
    case json::value_t::null:
    case json::value_t::boolean:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return dump(j);
    case json::value_t::binary:
    case json::value_t::discarded:
      break;
  }
  return "a value of an unexpected kind";
}

[[noreturn]] void reject_field(std::string_view field, std::string_view expected,
                               const json& got) {
  reject("field " + quote(field) + " must be " + std::string{expected} + ", got "
         + describe(got));
}

// -- reading numbers -------------------------------------------------------

/// The value of `j` as an `Int` when `j` is a JSON number without a fractional
/// part (1, 16.0, 1e3) that `Int` can hold; nullopt otherwise.
template <class Int>
std::optional<Int> integer_of(const json& j) {
  static_assert(std::is_integral_v<Int>);
  if (j.is_number_unsigned()) {
    auto v = j.get<std::uint64_t>();
    if (std::in_range<Int>(v))
      return static_cast<Int>(v);
    return std::nullopt;
  }
  if (j.is_number_integer()) {
    auto v = j.get<std::int64_t>();
    if (std::in_range<Int>(v))
      return static_cast<Int>(v);
    return std::nullopt;
  }
  if (j.is_number_float()) {
    auto d = j.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d)
      return std::nullopt;
    // Bounds are powers of two, so they are exact doubles.
    const double hi = std::ldexp(1.0, std::numeric_limits<Int>::digits);
    const double lo = std::is_signed_v<Int> ? -hi : 0.0;
    if (d < lo || d >= hi)
      return std::nullopt;
    return static_cast<Int>(d);
  }
  return std::nullopt;
}

// -- request parsing -------------------------------------------------------

constexpr std::string_view valid_types =
  R"("generate", "cancel", "health", "stats", "list_adapters", "load_adapter", "unload_adapter", "advise", )"
  R"("tokenize", "detokenize")";

constexpr std::array<std::string_view, 2> id_only_fields{"type", "id"};
constexpr std::array<std::string_view, 5> load_adapter_fields{"type", "id", "name", "path", "rank"};
constexpr std::array<std::string_view, 3> unload_adapter_fields{"type", "id", "name"};
constexpr std::array<std::string_view, 5> advise_fields{"type", "id", "session", "in_s", "priority"};
constexpr std::array<std::string_view, 3> tokenize_fields{"type", "id", "prompt"};
constexpr std::array<std::string_view, 3> detokenize_fields{"type", "id", "tokens"};

constexpr std::array<std::string_view, 40> generate_fields{
  "type",     "id",       "prompt",           "prompt_tokens",     "adapter",   "max_tokens", "fit_context", "temperature",
  "top_p",    "top_k",    "seed",             "stop",              "stream",    "session",    "priority",
  "logprobs", "prompt_logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "min_p",
  "repetition_penalty", "stop_token_ids", "ignore_eos", "min_tokens", "response_format", "json_schema",
  "json_trigger", "json_trigger_first", "reasoning_close", "reasoning_open", "skip_special_tokens", "choice", "regex",
  "grammar", "json_trigger_head", "truncate_prompt_tokens", "bad_words", "allowed_token_ids", "json_answer"};

/// The member `key` of `obj`, or nullptr when it is absent or null (a null
/// field counts as not given).
const json* find(const json& obj, std::string_view key) {
  auto i = obj.find(std::string{key});
  if (i == obj.end() || i->is_null())
    return nullptr;
  return &*i;
}

std::string id_expectation(const parse_limits& limits) {
  return "a non-empty string of at most " + std::to_string(limits.max_id_chars) + " bytes";
}

/// The request id when it is present and valid, "" otherwise.
std::string peek_id(const json& obj, const parse_limits& limits) {
  auto i = obj.find("id");
  if (i == obj.end() || !i->is_string())
    return {};
  const auto& s = i->get_ref<const std::string&>();
  if (s.empty() || s.size() > limits.max_id_chars)
    return {};
  return s;
}

std::string read_id(const json& obj, const parse_limits& limits) {
  auto i = obj.find("id");
  if (i == obj.end())
    reject("missing field \"id\": every request needs one, "
           + id_expectation(limits));
  if (!i->is_string())
    reject_field("id", id_expectation(limits), *i);
  const auto& s = i->get_ref<const std::string&>();
  if (s.empty())
    reject_field("id", id_expectation(limits), *i);
  if (s.size() > limits.max_id_chars)
    reject("field \"id\" must be " + id_expectation(limits) + ", got one of "
           + std::to_string(s.size()) + " bytes");
  return s;
}

template <std::size_t N>
void reject_unknown_fields(const json& obj, std::string_view type,
                           const std::array<std::string_view, N>& allowed) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (auto name : allowed)
      known = known || key == name;
    if (known)
      continue;
    std::string list;
    for (auto name : allowed)
      list += (list.empty() ? "" : ", ") + quote(name);
    reject("unknown field " + dump(json(key)) + " in a " + std::string{type}
           + " request; allowed fields: " + list);
  }
}

std::vector<std::int32_t> read_prompt_tokens(const json& j, const parse_limits& limits,
                                             const std::string& field = "prompt_tokens") {
  const std::string expected = "a non-empty array of integers in [0, "
                               + std::to_string(limits.vocab_size) + ")";
  if (!j.is_array() || j.empty())
    reject_field(field, expected, j);
  std::vector<std::int32_t> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    auto v = integer_of<std::int32_t>(j[i]);
    if (!v || *v < 0 || *v >= limits.vocab_size)
      reject("field \"" + field + "\" must be " + expected + ", but element "
             + std::to_string(i) + " is " + describe(j[i]));
    out.push_back(*v);
  }
  return out;
}

/// logit_bias: an object of token ids (decimal strings, as OpenAI's) to
/// biases in [-100, 100], in token order.
std::vector<std::pair<std::int32_t, float>> read_logit_bias(const json& j, const parse_limits& limits) {
  const std::string expected = "an object of at most " + std::to_string(limits.max_logit_bias)
                               + " token ids in [0, " + std::to_string(limits.vocab_size)
                               + ") (as strings) to biases in [-100, 100]";
  if (!j.is_object() || j.size() > limits.max_logit_bias)
    reject_field("logit_bias", expected, j);
  std::vector<std::pair<std::int32_t, float>> out;
  for (const auto& [key, value] : j.items()) {
    std::int32_t id = -1;
    const auto* end = key.data() + key.size();
    const auto [at, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || ec != std::errc{} || at != end || id < 0 || id >= limits.vocab_size)
      reject("field \"logit_bias\" must be " + expected + ", but it has the key " + describe(json(key)));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || std::fabs(value.get<double>()) > 100)
      reject("field \"logit_bias\" must be " + expected + ", but token " + key + " has " + describe(value));
    out.emplace_back(id, static_cast<float>(value.get<double>()));
  }
  std::sort(out.begin(), out.end());
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first)
      reject("field \"logit_bias\" names token " + std::to_string(out[i].first) + " twice");
  return out;
}

/// Field `field`'s token ids: `least` to `most` of them, each in the
/// vocabulary; returned in token order, each once.
std::vector<std::int32_t> read_token_ids(const json& j, const char* field, std::size_t least, std::size_t most,
                                         const parse_limits& limits) {
  const std::string expected = (least > 0 ? "a non-empty array of" : "an array of at most " + std::to_string(most))
                               + std::string(" token ids in [0, ") + std::to_string(limits.vocab_size) + ")";
  if (!j.is_array() || j.size() < least || j.size() > most)
    reject_field(field, expected, j);
  std::vector<std::int32_t> out;
  out.reserve(j.size());
  for (const auto& t : j) {
    const auto v = integer_of<std::int32_t>(t);
    if (!v || *v < 0 || *v >= limits.vocab_size)
      reject("field \"" + std::string(field) + "\" must be " + expected + ", but it holds " + describe(t));
    out.push_back(*v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// bad_words: at most max_bad_words strings of 1 to max_bad_word_bytes.
std::vector<std::string> read_bad_words(const json& j) {
  const std::string expected = "an array of at most " + std::to_string(max_bad_words) + " strings of 1 to "
                               + std::to_string(max_bad_word_bytes) + " bytes";
  if (!j.is_array() || j.size() > max_bad_words)
    reject_field("bad_words", expected, j);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string() || j[i].get_ref<const std::string&>().empty()
        || j[i].get_ref<const std::string&>().size() > max_bad_word_bytes)
      reject("field \"bad_words\" must be " + expected + ", but element " + std::to_string(i) + " is "
             + describe(j[i]));
    out.push_back(j[i].get<std::string>());
  }
  return out;
}

std::vector<std::string> read_stop(const json& j, const parse_limits& limits) {
  const std::string expected = "a non-empty string or an array of at most "
                               + std::to_string(limits.max_stop) + " non-empty strings";
  if (j.is_string()) {
    if (j.get_ref<const std::string&>().empty())
      reject_field("stop", expected, j);
    if (limits.max_stop == 0)
      reject_field("stop", expected, j);
    return {j.get<std::string>()};
  }
  if (!j.is_array() || j.size() > limits.max_stop)
    reject_field("stop", expected, j);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string() || j[i].get_ref<const std::string&>().empty())
      reject("field \"stop\" must be " + expected + ", but element " + std::to_string(i)
             + " is " + describe(j[i]));
    out.push_back(j[i].get<std::string>());
  }
  return out;
}

/// A number in [lo, hi] (or (lo, hi] when `open_lo`, where it must stay
/// above lo as a float too), as a float.
float read_real(const json& j, std::string_view field, double lo, double hi, bool open_lo,
                std::string_view expected) {
  if (!j.is_number())
    reject_field(field, expected, j);
  auto d = j.get<double>();
  const auto f = static_cast<float>(d);
  if (!std::isfinite(d) || d > hi || d < lo || (open_lo && (d == lo || f <= lo)))
    reject_field(field, expected, j);
  return f;
}

generate_request read_generate(const json& obj, std::string id, const parse_limits& limits) {
  generate_request g;
  g.id = std::move(id);
  const json* prompt = find(obj, "prompt");
  const json* prompt_tokens = find(obj, "prompt_tokens");
  if (prompt && prompt_tokens)
    reject(R"(give exactly one of "prompt" and "prompt_tokens", not both)");
  if (!prompt && !prompt_tokens)
    reject(R"(missing field "prompt" or "prompt_tokens": a generate request needs exactly one)");
  if (prompt) {
    if (!prompt->is_string() || prompt->get_ref<const std::string&>().empty())
      reject_field("prompt", "a non-empty string", *prompt);
    g.prompt = prompt->get<std::string>();
  } else {
    g.prompt_tokens = read_prompt_tokens(*prompt_tokens, limits);
  }
  if (auto j = find(obj, "adapter")) {
    if (!j->is_string())
      reject_field("adapter", "a string (\"\" or null for the base model)", *j);
    g.adapter = j->get<std::string>();
  }
  if (auto j = find(obj, "fit_context")) {
    if (!j->is_boolean())
      reject_field("fit_context", "true or false", *j);
    g.fit_context = j->get<bool>();
  }
  if (auto j = find(obj, "max_tokens")) {
    // With fit_context, one past the server's limit is cut to it.
    const std::int64_t most = g.fit_context ? std::numeric_limits<std::uint32_t>::max() : limits.max_tokens;
    auto v = integer_of<std::int64_t>(*j);
    if (!v || *v < 1 || *v > most)
      reject_field("max_tokens", "an integer between 1 and " + std::to_string(most), *j);
    g.max_tokens = static_cast<std::uint32_t>(std::min<std::int64_t>(*v, limits.max_tokens));
  } else if (g.fit_context) {
    g.max_tokens = limits.max_tokens;
  }
  if (auto j = find(obj, "temperature"))
    g.sampling.temperature = read_real(*j, "temperature", 0, 100, false,
                                       "a number between 0 and 100");
  if (auto j = find(obj, "top_p"))
    g.sampling.top_p = read_real(*j, "top_p", 0, 1, true,
                                 "a number greater than 0 and at most 1");
  if (auto j = find(obj, "top_k")) {
    auto v = integer_of<std::int32_t>(*j);
    if (!v || *v < 0)
      reject_field("top_k", "an integer between 0 and 2147483647 (0 = no top-k cut)", *j);
    g.sampling.top_k = *v;
  }
  if (auto j = find(obj, "seed")) {
    auto v = integer_of<std::uint64_t>(*j);
    if (!v)
      reject_field("seed", "an integer between 0 and 18446744073709551615", *j);
    g.sampling.seed = *v;
  }
  if (auto j = find(obj, "presence_penalty"))
    g.sampling.presence_penalty = read_real(*j, "presence_penalty", -2, 2, false, "a number between -2 and 2");
  if (auto j = find(obj, "frequency_penalty"))
    g.sampling.frequency_penalty = read_real(*j, "frequency_penalty", -2, 2, false, "a number between -2 and 2");
  if (auto j = find(obj, "logit_bias"))
    g.sampling.logit_bias = read_logit_bias(*j, limits);
  if (auto j = find(obj, "min_p"))
    g.sampling.min_p = read_real(*j, "min_p", 0, 1, false, "a number between 0 and 1 (0 = no min-p cut)");
  if (auto j = find(obj, "repetition_penalty"))
    g.sampling.repetition_penalty =
      read_real(*j, "repetition_penalty", 0, 100, true, "a number above 0 and at most 100 (1 = none)");
  if (auto j = find(obj, "stop"))
    g.stop = read_stop(*j, limits);
  if (auto j = find(obj, "stop_token_ids"))
    g.stop_token_ids = read_token_ids(*j, "stop_token_ids", 0, limits.max_stop, limits);
  if (auto j = find(obj, "truncate_prompt_tokens")) {
    const auto v = integer_of<std::int64_t>(*j);
    if (!v || (*v < 1 && *v != -1) || *v > std::numeric_limits<std::int32_t>::max())
      reject_field("truncate_prompt_tokens",
                   "an integer of at least 1 (the prompt's last tokens read), or -1 (as many as leave room for "
                   "max_tokens)",
                   *j);
    g.truncate_prompt_tokens = static_cast<std::int32_t>(*v);
  }
  if (auto j = find(obj, "bad_words"))
    g.bad_words = read_bad_words(*j);
  if (auto j = find(obj, "allowed_token_ids"))
    g.allowed_token_ids =
      read_token_ids(*j, "allowed_token_ids", 1, static_cast<std::size_t>(std::max(limits.vocab_size, 1)), limits);
  if (auto j = find(obj, "ignore_eos")) {
    if (!j->is_boolean())
      reject_field("ignore_eos", "true or false", *j);
    g.ignore_eos = j->get<bool>();
  }
  if (auto j = find(obj, "skip_special_tokens")) {
    if (!j->is_boolean())
      reject_field("skip_special_tokens", "true or false", *j);
    g.skip_special_tokens = j->get<bool>();
  }
  if (auto j = find(obj, "min_tokens")) {
    auto v = integer_of<std::int64_t>(*j);
    if (!v || *v < 0 || *v > static_cast<std::int64_t>(g.max_tokens))
      reject_field("min_tokens", "an integer between 0 and max_tokens (" + std::to_string(g.max_tokens) + ")", *j);
    g.min_tokens = static_cast<std::uint32_t>(*v);
  }
  if (auto j = find(obj, "response_format")) {
    if (!j->is_string() || (*j != "text" && *j != "json_object"))
      reject_field("response_format", "\"text\" or \"json_object\"", *j);
    g.json_object = *j == "json_object";
  }
  if (auto j = find(obj, "json_schema")) {
    if (!j->is_object())
      reject_field("json_schema", "a JSON Schema (an object)", *j);
    if (g.json_object)
      reject_field("json_schema", "absent beside \"response_format\": \"json_object\" (the schema says the shape)", *j);
    g.json_schema = j->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (auto j = find(obj, "json_trigger")) {
    if (!j->is_string() || j->get_ref<const std::string&>().empty()
        || j->get_ref<const std::string&>().size() > max_json_trigger_bytes)
      reject_field("json_trigger", "a string of 1 to " + std::to_string(max_json_trigger_bytes) + " bytes", *j);
    if (!g.json_object && g.json_schema.empty())
      reject_field("json_trigger", "given with \"response_format\": \"json_object\" or \"json_schema\" (which hold the "
                                   "value after it)",
                   *j);
    g.json_trigger = j->get<std::string>();
  }
  if (auto j = find(obj, "json_trigger_first")) {
    if (!j->is_boolean())
      reject_field("json_trigger_first", "true or false", *j);
    if (*j == true && g.json_trigger.empty())
      reject_field("json_trigger_first", "given with \"json_trigger\" (what the output begins with)", *j);
    g.json_trigger_first = j->get<bool>();
  }
  if (auto j = find(obj, "json_trigger_head")) {
    if (!j->is_string() || j->get_ref<const std::string&>().empty()
        || j->get_ref<const std::string&>().size() > max_json_trigger_bytes)
      reject_field("json_trigger_head", "a string of 1 to " + std::to_string(max_json_trigger_bytes) + " bytes", *j);
    if (g.json_trigger.empty() || g.json_schema.empty())
      reject_field("json_trigger_head", "given with \"json_trigger\" and \"json_schema\" (whose properties are the "
                                        "names before it, and their values' schemas)",
                   *j);
    g.json_trigger_head = j->get<std::string>();
  }
  if (auto j = find(obj, "json_answer")) {
    if (!j->is_object())
      reject_field("json_answer", "a JSON Schema (an object)", *j);
    if (g.json_trigger.empty() || g.json_trigger_first)
      reject_field("json_answer", "given with \"json_trigger\" and without \"json_trigger_first\" (the output "
                                  "begins with the trigger or is the answer)",
                   *j);
    g.json_answer = j->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (auto j = find(obj, "reasoning_close")) {
    if (!j->is_string() || j->get_ref<const std::string&>().empty()
        || j->get_ref<const std::string&>().size() > max_json_trigger_bytes)
      reject_field("reasoning_close", "a string of 1 to " + std::to_string(max_json_trigger_bytes) + " bytes", *j);
    g.reasoning_close = j->get<std::string>();
  }
  if (auto j = find(obj, "reasoning_open")) {
    if (!j->is_string() || j->get_ref<const std::string&>().size() > max_json_trigger_bytes)
      reject_field("reasoning_open", "a string of at most " + std::to_string(max_json_trigger_bytes) + " bytes", *j);
    if (g.reasoning_close.empty())
      reject_field("reasoning_open", "given with \"reasoning_close\" (where the thinking ends)", *j);
    g.reasoning_open = j->get<std::string>();
  }
  if (auto j = find(obj, "choice")) {
    const auto what = "an array of 1 to " + std::to_string(max_choices) + " distinct strings of 1 to "
                      + std::to_string(max_choice_bytes) + " bytes";
    if (!j->is_array() || j->empty() || j->size() > max_choices)
      reject_field("choice", what, *j);
    for (const auto& c : *j) {
      if (!c.is_string() || c.get_ref<const std::string&>().empty()
          || c.get_ref<const std::string&>().size() > max_choice_bytes)
        reject_field("choice", what, *j);
      if (std::find(g.choice.begin(), g.choice.end(), c.get_ref<const std::string&>()) != g.choice.end())
        reject_field("choice", what + " (\"" + c.get<std::string>() + "\" is given twice)", *j);
      g.choice.push_back(c.get<std::string>());
    }
    if (g.json_object || !g.json_schema.empty() || !g.json_trigger.empty())
      reject_field("choice", "absent beside \"response_format\": \"json_object\", \"json_schema\" and \"json_trigger\" "
                             "(one way to hold the output)",
                   *j);
  }
  if (auto j = find(obj, "regex")) {
    if (!j->is_string() || j->get_ref<const std::string&>().empty()
        || j->get_ref<const std::string&>().size() > max_regex_bytes)
      reject_field("regex", "a string of 1 to " + std::to_string(max_regex_bytes) + " bytes", *j);
    if (g.json_object || !g.json_schema.empty() || !g.json_trigger.empty() || !g.choice.empty())
      reject_field("regex", "absent beside \"response_format\": \"json_object\", \"json_schema\", \"json_trigger\" "
                            "and \"choice\" (one way to hold the output)",
                   *j);
    g.regex = j->get<std::string>();
  }
  if (auto j = find(obj, "grammar")) {
    if (!j->is_string() || j->get_ref<const std::string&>().empty()
        || j->get_ref<const std::string&>().size() > max_grammar_bytes)
      reject_field("grammar", "a string of 1 to " + std::to_string(max_grammar_bytes) + " bytes", *j);
    if (g.json_object || !g.json_schema.empty() || !g.json_trigger.empty() || !g.choice.empty() || !g.regex.empty())
      reject_field("grammar", "absent beside \"response_format\": \"json_object\", \"json_schema\", \"json_trigger\", "
                              "\"choice\" and \"regex\" (one way to hold the output)",
                   *j);
    g.grammar = j->get<std::string>();
  }
  if (auto j = find(obj, "stream")) {
    if (!j->is_boolean())
      reject_field("stream", "true or false", *j);
    g.stream = j->get<bool>();
  }
  if (auto j = find(obj, "session")) {
    if (!j->is_string())
      reject_field("session", "a string", *j);
    g.session = j->get<std::string>();
  }
  if (auto j = find(obj, "priority")) {
    auto v = integer_of<std::int32_t>(*j);
    if (!v)
      reject_field("priority", "an integer between -2147483648 and 2147483647", *j);
    g.priority = *v;
  }
  // A count of alternatives to the log-probabilities of `whose`.
  auto logprobs_count = [&](std::string_view key, std::string_view whose, std::int32_t& out) {
    if (auto j = find(obj, key)) {
      auto v = integer_of<std::int32_t>(*j);
      if (!v || *v < 0 || static_cast<std::uint32_t>(*v) > limits.max_logprobs)
        reject_field(key,
                     "an integer between 0 and " + std::to_string(limits.max_logprobs) + " (" + std::string(whose)
                       + " log-probability and that many alternatives')",
                     *j);
      out = *v;
    }
  };
  logprobs_count("logprobs", "the sampled token's", g.logprobs);
  logprobs_count("prompt_logprobs", "each prompt token's", g.prompt_logprobs);
  return g;
}

request read_request(const json& obj, const parse_limits& limits) {
  auto t = obj.find("type");
  if (t == obj.end())
    reject("missing field \"type\": must be one of " + std::string{valid_types});
  const std::string expected = "one of " + std::string{valid_types};
  if (!t->is_string())
    reject_field("type", expected, *t);
  const auto& type = t->get_ref<const std::string&>();
  if (type == "generate") {
    auto id = read_id(obj, limits);
    reject_unknown_fields(obj, type, generate_fields);
    return read_generate(obj, std::move(id), limits);
  }
  if (type == "load_adapter" || type == "unload_adapter") {
    auto id = read_id(obj, limits);
    const bool load = type == "load_adapter";
    if (load)
      reject_unknown_fields(obj, type, load_adapter_fields);
    else
      reject_unknown_fields(obj, type, unload_adapter_fields);
    const json* name = find(obj, "name");
    if (name == nullptr)
      reject("missing field \"name\": the adapter's name");
    if (!name->is_string() || name->get_ref<const std::string&>().empty()
        || name->get_ref<const std::string&>().size() > limits.max_id_chars)
      reject_field("name", "a non-empty string of at most " + std::to_string(limits.max_id_chars)
                             + " bytes", *name);
    if (!load)
      return unload_adapter_request{std::move(id), name->get<std::string>()};
    load_adapter_request l{std::move(id), name->get<std::string>(), "", 0};
    if (const json* path = find(obj, "path")) {
      if (!path->is_string() || path->get_ref<const std::string&>().empty())
        reject_field("path", "a non-empty string (a PEFT adapter directory on the server)", *path);
      l.path = path->get<std::string>();
    }
    if (const json* rank = find(obj, "rank")) {
      auto v = integer_of<std::uint32_t>(*rank);
      if (!v || *v == 0 || *v > 4096)
        reject_field("rank", "an integer in [1, 4096]", *rank);
      l.rank = *v;
    }
    if (l.path.empty() && l.rank == 0)
      reject("a load_adapter request needs \"path\" (a PEFT directory) or \"rank\" (sim backend)");
    return l;
  }
  if (type == "advise") {
    auto id = read_id(obj, limits);
    reject_unknown_fields(obj, type, advise_fields);
    const json* session = find(obj, "session");
    if (session == nullptr)
      reject("missing field \"session\": the session the advisory is about");
    if (!session->is_string() || session->get_ref<const std::string&>().empty()
        || session->get_ref<const std::string&>().size() > limits.max_id_chars)
      reject_field("session", "a non-empty string of at most " + std::to_string(limits.max_id_chars) + " bytes",
                   *session);
    advise_request a{std::move(id), session->get<std::string>(), 0, 0};
    if (const json* in = find(obj, "in_s"))
      a.in_s = read_real(*in, "in_s", 0, 86400, false, "seconds in [0, 86400]");
    if (const json* p = find(obj, "priority")) {
      auto v = integer_of<std::int32_t>(*p);
      if (!v)
        reject_field("priority", "an integer between -2147483648 and 2147483647", *p);
      a.priority = *v;
    }
    return a;
  }
  if (type == "tokenize") {
    auto id = read_id(obj, limits);
    reject_unknown_fields(obj, type, tokenize_fields);
    const json* prompt = find(obj, "prompt");
    if (prompt == nullptr)
      reject("missing field \"prompt\": the text to tokenize");
    if (!prompt->is_string())
      reject_field("prompt", "a string", *prompt);
    return tokenize_request{std::move(id), prompt->get<std::string>()};
  }
  if (type == "detokenize") {
    auto id = read_id(obj, limits);
    reject_unknown_fields(obj, type, detokenize_fields);
    const json* tokens = find(obj, "tokens");
    if (tokens == nullptr)
      reject("missing field \"tokens\": the token ids to turn into text");
    return detokenize_request{std::move(id), read_prompt_tokens(*tokens, limits, "tokens")};
  }
  if (type != "cancel" && type != "health" && type != "stats" && type != "list_adapters")
    reject_field("type", expected, *t);
  auto id = read_id(obj, limits);
  reject_unknown_fields(obj, type, id_only_fields);
  if (type == "cancel")
    return cancel_request{std::move(id)};
  if (type == "health")
    return health_request{std::move(id)};
  if (type == "stats")
    return stats_request{std::move(id)};
  return list_adapters_request{std::move(id)};
}

// -- reply parsing ----------------------------------------------------------

/// Typed access to the members of one reply object; `path` prefixes field
/// names in messages ("usage.prompt_tokens"). Unknown members are ignored so
/// that clients keep working when the server adds fields.
class reply_reader {
public:
  reply_reader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
  }

  bool has(std::string_view key) const {
    auto i = obj_.find(std::string{key});
    return i != obj_.end() && !i->is_null();
  }

  const json& at(std::string_view key) const {
    auto i = obj_.find(std::string{key});
    if (i == obj_.end())
      reject("missing field " + quote(name(key)));
    return *i;
  }

  std::string string(std::string_view key) const {
    const auto& j = at(key);
    if (!j.is_string())
      reject_field(name(key), "a string", j);
    return j.get<std::string>();
  }

  bool boolean(std::string_view key) const {
    const auto& j = at(key);
    if (!j.is_boolean())
      reject_field(name(key), "true or false", j);
    return j.get<bool>();
  }

  std::uint32_t count(std::string_view key) const {
    const auto& j = at(key);
    auto v = integer_of<std::uint32_t>(j);
    if (!v)
      reject_field(name(key), "an integer between 0 and 4294967295", j);
    return *v;
  }

  /// A number; null (how a non-finite value is sent) reads as NaN.
  double number(std::string_view key) const {
    return number_of(at(key), name(key));
  }

  std::vector<std::int32_t> tokens(std::string_view key) const {
    const auto& j = at(key);
    if (!j.is_array())
      reject_field(name(key), "an array of token ids", j);
    std::vector<std::int32_t> out;
    out.reserve(j.size());
    for (const auto& e : j) {
      auto v = integer_of<std::int32_t>(e);
      if (!v)
        reject_field(name(key), "an array of 32-bit integers", e);
      out.push_back(*v);
    }
    return out;
  }

  /// A log-probability: a number a float holds, or null for -infinity.
  float logprob(std::string_view key) const {
    const auto& j = at(key);
    if (j.is_null())
      return -std::numeric_limits<float>::infinity();
    const double d = number_of(j, name(key));
    if (!(std::fabs(d) <= static_cast<double>(std::numeric_limits<float>::max())))
      reject_field(name(key), "a number a 32-bit float holds, or null", j);
    return static_cast<float>(d);
  }

  /// A token_logprob object: token, text (or its bytes), logprob (NaN
  /// when `first`, a prompt's first token, which has none).
  token_logprob token_logprob_of(bool first = false) const {
    token_logprob x;
    const auto& t = at("token");
    auto v = integer_of<std::int32_t>(t);
    if (!v)
      reject_field(name("token"), "a 32-bit integer", t);
    x.token = *v;
    if (has("bytes")) {
      const auto& b = at("bytes");
      if (!b.is_array())
        reject_field(name("bytes"), "an array of bytes (integers in [0, 255])", b);
      for (const auto& e : b) {
        auto byte = integer_of<std::uint8_t>(e);
        if (!byte)
          reject_field(name("bytes"), "an array of bytes (integers in [0, 255])", e);
        x.text += static_cast<char>(*byte);
      }
    } else {
      x.text = string("text");
    }
    if (first && has("logprob"))
      reject_field(name("logprob"), "absent: nothing precedes a prompt's first token", at("logprob"));
    x.logprob = first ? std::numeric_limits<float>::quiet_NaN() : logprob("logprob");
    return x;
  }

  /// An array of token_logprobs objects; for a prompt's (`prompt`), the
  /// first has no log-probability and no alternatives.
  std::vector<token_logprobs> logprobs(std::string_view key, bool prompt = false) const {
    const auto& j = at(key);
    if (!j.is_array())
      reject_field(name(key), "an array of log-probability objects", j);
    std::vector<token_logprobs> out;
    for (std::size_t i = 0; i < j.size(); ++i) {
      const auto path = name(key) + "[" + std::to_string(i) + "]";
      if (!j[i].is_object())
        reject_field(path, "an object", j[i]);
      reply_reader e{j[i], path};
      token_logprobs x;
      const bool first = prompt && i == 0;
      x.sampled = e.token_logprob_of(first);
      const auto& top = e.at("top");
      if (!top.is_array() || (first && !top.empty()))
        reject_field(path + ".top", first ? "an empty array: nothing precedes a prompt's first token"
                                          : "an array of log-probability objects",
                     top);
      for (std::size_t k = 0; k < top.size(); ++k) {
        const auto top_path = path + ".top[" + std::to_string(k) + "]";
        if (!top[k].is_object())
          reject_field(top_path, "an object", top[k]);
        x.top.push_back(reply_reader{top[k], top_path}.token_logprob_of());
      }
      out.push_back(std::move(x));
    }
    return out;
  }

  reply_reader object(std::string_view key) const {
    const auto& j = at(key);
    if (!j.is_object())
      reject_field(name(key), "an object", j);
    return reply_reader{j, name(key)};
  }

  static double number_of(const json& j, const std::string& name) {
    if (j.is_null())
      return std::numeric_limits<double>::quiet_NaN();
    if (!j.is_number())
      reject_field(name, "a number", j);
    return j.get<double>();
  }

  const json& raw() const noexcept {
    return obj_;
  }

private:
  std::string name(std::string_view key) const {
    return path_.empty() ? std::string{key} : path_ + "." + std::string{key};
  }

  const json& obj_;
  std::string path_;
};

std::optional<error_code> error_code_from(std::string_view name) {
  for (auto c = 0; c <= static_cast<int>(error_code::internal); ++c) {
    auto x = static_cast<error_code>(c);
    if (to_string(x) == name)
      return x;
  }
  return std::nullopt;
}

reply read_reply(const json& obj) {
  reply_reader r{obj, ""};
  auto type = r.string("type");
  auto id = r.string("id");
  if (type == "accepted")
    return accepted_reply{std::move(id), r.count("prompt_tokens")};
  if (type == "token") {
    token_reply x{std::move(id), r.count("index"), r.tokens("tokens"), r.string("text"), {}, {}};
    if (r.has("logprobs"))
      x.logprobs = r.logprobs("logprobs");
    if (r.has("prompt_logprobs"))
      x.prompt_logprobs = r.logprobs("prompt_logprobs", true);
    return x;
  }
  if (type == "done") {
    done_reply x;
    x.id = std::move(id);
    x.finish_reason = r.string("finish_reason");
    auto usage = r.object("usage");
    x.prompt_tokens = usage.count("prompt_tokens");
    x.completion_tokens = usage.count("completion_tokens");
    if (usage.has("cached_tokens"))
      x.cached_tokens = usage.count("cached_tokens");
    if (usage.has("reasoning_tokens"))
      x.reasoning_tokens = usage.count("reasoning_tokens");
    auto t = r.object("timings");
    x.time = timings{t.number("queue_ms"), t.number("ttft_ms"), t.number("e2e_ms")};
    if (r.has("tokens"))
      x.tokens = r.tokens("tokens");
    if (r.has("text"))
      x.text = r.string("text");
    if (r.has("logprobs"))
      x.logprobs = r.logprobs("logprobs");
    if (r.has("prompt_logprobs"))
      x.prompt_logprobs = r.logprobs("prompt_logprobs", true);
    return x;
  }
  if (type == "error") {
    auto name = r.string("code");
    auto code = error_code_from(name);
    if (!code)
      reject("field \"code\" is not a known error code, got " + dump(json(name)));
    return error_reply{std::move(id), *code, r.string("message")};
  }
  if (type == "health")
    return health_reply{std::move(id), r.string("status")};
  if (type == "stats") {
    auto s = r.object("stats");
    // Names the reply types: absent from both lists, a gauge.
    std::map<std::string, stat_kind, std::less<>> kinds;
    for (const auto kind : {stat_kind::counter, stat_kind::level}) {
      const auto field = std::string(to_string(kind)) + "s";
      if (!r.has(field))
        continue;
      const auto& list = r.at(field);
      if (!list.is_array())
        reject_field(field, "an array of stat names", list);
      for (const auto& name : list) {
        if (!name.is_string())
          reject_field(field, "an array of stat names", list);
        kinds[name.get<std::string>()] = kind;
      }
    }
    stats_reply x{std::move(id), {}};
    for (const auto& [key, value] : s.raw().items()) {
      const auto k = kinds.find(key);
      x.values.emplace_back(key, reply_reader::number_of(value, "stats." + key),
                            k == kinds.end() ? stat_kind::gauge : k->second);
    }
    return x;
  }
  if (type == "adapters") {
    const auto& list = r.at("adapters");
    if (!list.is_array())
      reject_field("adapters", "an array of objects", list);
    adapters_reply x{std::move(id), {}, 0};
    if (r.has("max_context"))
      x.max_context = r.count("max_context");
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_object())
        reject_field("adapters", "an array of objects", list[i]);
      reply_reader a{list[i], "adapters[" + std::to_string(i) + "]"};
      x.adapters.push_back(adapter_info{a.string("name"), a.count("rank"), a.boolean("resident")});
    }
    return x;
  }
  if (type == "adapter")
    return adapter_reply{std::move(id), r.string("name"), r.count("rank"), r.string("status")};
  if (type == "advise")
    return advise_reply{std::move(id), r.string("session"), r.string("status")};
  if (type == "tokenize")
    return tokenize_reply{std::move(id), r.tokens("tokens"), r.count("max_context"),
                          r.has("end_tokens") ? r.tokens("end_tokens") : std::vector<std::int32_t>{}};
  if (type == "detokenize")
    return detokenize_reply{std::move(id), r.string("text")};
  reject("field \"type\" must be one of \"accepted\", \"token\", \"done\", \"error\", "
         "\"health\", \"stats\", \"adapters\", \"adapter\", \"advise\", \"tokenize\", \"detokenize\", got "
         + dump(json(type)));
}

// -- serialization helpers ---------------------------------------------------

json header(std::string_view type, const std::string& id) {
  json j = json::object();
  j["type"] = type;
  j["id"] = id;
  return j;
}

/// Parses `frame` as one JSON object, reads its id with `peek` (so errors can
/// echo it) and the rest with `read`; every failure becomes a parse_error.
/// `what` ("request" or "reply") appears in the messages.
template <class Result, class Peek, class Read>
std::variant<Result, parse_error> read_object(std::string_view frame, const char* what,
                                              Peek peek, Read read) {
  std::string id;
  try {
    json doc;
    try {
      doc = json::parse(frame.begin(), frame.end());
    } catch (const json::exception& e) {
      // A syntax error, or a number too large for a double (out_of_range).
      return parse_error{error_code::bad_request, {},
                         "frame is not valid JSON: " + parser_message(e)};
    }
    if (!doc.is_object())
      return parse_error{error_code::bad_request, {},
                         std::string{"a "} + what + " must be a JSON object, got " + describe(doc)};
    // Echo the id in the error reply whenever it is readable, even when an
    // earlier check (such as "type") fails.
    id = peek(doc);
    return read(doc);
  } catch (rejection& r) {
    return parse_error{error_code::bad_request, std::move(id), std::move(r.message)};
  } catch (const std::exception& e) {
    return parse_error{error_code::internal, std::move(id),
                       std::string{"internal error while parsing the "} + what + ": " + e.what()};
  } catch (...) {
    return parse_error{error_code::internal, std::move(id),
                       std::string{"internal error while parsing the "} + what};
  }
}

} // namespace

std::string parser_message(const std::exception& e) {
  std::string_view msg = e.what();
  if (!msg.empty() && msg.front() == '[') {
    if (auto end = msg.find("] "); end != std::string_view::npos)
      msg.remove_prefix(end + 2);
  }
  constexpr std::size_t max_len = 240;
  if (msg.size() > max_len)
    return std::string{msg.substr(0, max_len)} + "...";
  return std::string{msg};
}

// -- error codes --------------------------------------------------------------

std::string_view to_string(error_code x) noexcept {
  switch (x) {
    case error_code::bad_request:
      return "bad_request";
    case error_code::frame_too_large:
      return "frame_too_large";
    case error_code::unknown_adapter:
      return "unknown_adapter";
    case error_code::unknown_request:
      return "unknown_request";
    case error_code::duplicate_id:
      return "duplicate_id";
    case error_code::prompt_too_long:
      return "prompt_too_long";
    case error_code::overloaded:
      return "overloaded";
    case error_code::adapter_in_use:
      return "adapter_in_use";
    case error_code::adapter_exists:
      return "adapter_exists";
    case error_code::bad_adapter:
      return "bad_adapter";
    case error_code::shutting_down:
      return "shutting_down";
    case error_code::internal:
      return "internal";
  }
  return "internal";
}

// -- requests -----------------------------------------------------------------

std::variant<request, parse_error> parse_request(std::string_view frame,
                                                 const parse_limits& limits) {
  if (frame.size() > limits.max_frame_bytes)
    return parse_error{error_code::frame_too_large, {},
                       "frame of " + std::to_string(frame.size())
                         + " bytes exceeds the limit of "
                         + std::to_string(limits.max_frame_bytes) + " bytes"};
  return read_object<request>(
    frame, "request", [&](const json& doc) { return peek_id(doc, limits); },
    [&](const json& doc) { return read_request(doc, limits); });
}

double wire_float(float f) {
  if (!std::isfinite(f))
    return f;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  if (ec != std::errc{})
    return f;
  double d = f;
  std::from_chars(buf, end, d);
  return d;
}

bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF; // the second byte's range
    if (c < 0x80)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    if (n == 0 || i + n > s.size())
      return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80)
        return false;
    }
    i += n;
  }
  return true;
}

const std::string& id_of(const request& r) noexcept {
  return std::visit([](const auto& x) -> const std::string& { return x.id; }, r);
}

std::string to_json(const request& x) {
  struct visitor {
    json operator()(const generate_request& g) const {
      auto j = header("generate", g.id);
      if (g.prompt)
        j["prompt"] = *g.prompt;
      if (g.prompt_tokens)
        j["prompt_tokens"] = *g.prompt_tokens;
      if (!g.adapter.empty())
        j["adapter"] = g.adapter;
      j["max_tokens"] = g.max_tokens;
      if (g.fit_context)
        j["fit_context"] = true;
      j["temperature"] = wire_float(g.sampling.temperature);
      j["top_p"] = wire_float(g.sampling.top_p);
      j["top_k"] = g.sampling.top_k;
      if (g.sampling.seed)
        j["seed"] = *g.sampling.seed;
      if (g.sampling.presence_penalty != 0)
        j["presence_penalty"] = wire_float(g.sampling.presence_penalty);
      if (g.sampling.frequency_penalty != 0)
        j["frequency_penalty"] = wire_float(g.sampling.frequency_penalty);
      if (g.sampling.min_p != 0)
        j["min_p"] = wire_float(g.sampling.min_p);
      if (g.sampling.repetition_penalty != 1)
        j["repetition_penalty"] = wire_float(g.sampling.repetition_penalty);
      if (!g.sampling.logit_bias.empty()) {
        json bias = json::object();
        for (const auto& [token, b] : g.sampling.logit_bias)
          bias[std::to_string(token)] = wire_float(b);
        j["logit_bias"] = std::move(bias);
      }
      if (!g.stop.empty())
        j["stop"] = g.stop;
      if (!g.stop_token_ids.empty())
        j["stop_token_ids"] = g.stop_token_ids;
      if (g.truncate_prompt_tokens != 0)
        j["truncate_prompt_tokens"] = g.truncate_prompt_tokens;
      if (!g.bad_words.empty())
        j["bad_words"] = g.bad_words;
      if (!g.allowed_token_ids.empty())
        j["allowed_token_ids"] = g.allowed_token_ids;
      if (g.ignore_eos)
        j["ignore_eos"] = true;
      if (!g.skip_special_tokens)
        j["skip_special_tokens"] = false;
      if (g.min_tokens != 0)
        j["min_tokens"] = g.min_tokens;
      if (g.json_object)
        j["response_format"] = "json_object";
      if (!g.json_schema.empty())
        j["json_schema"] = json::parse(g.json_schema, nullptr, false);
      if (!g.json_trigger.empty())
        j["json_trigger"] = g.json_trigger;
      if (!g.choice.empty())
        j["choice"] = g.choice;
      if (!g.regex.empty())
        j["regex"] = g.regex;
      if (!g.grammar.empty())
        j["grammar"] = g.grammar;
      if (g.json_trigger_first)
        j["json_trigger_first"] = true;
      if (!g.json_trigger_head.empty())
        j["json_trigger_head"] = g.json_trigger_head;
      if (!g.json_answer.empty())
        j["json_answer"] = json::parse(g.json_answer, nullptr, false);
      if (!g.reasoning_close.empty())
        j["reasoning_close"] = g.reasoning_close;
      if (!g.reasoning_open.empty())
        j["reasoning_open"] = g.reasoning_open;
      j["stream"] = g.stream;
      if (!g.session.empty())
        j["session"] = g.session;
      j["priority"] = g.priority;
      if (g.logprobs >= 0)
        j["logprobs"] = g.logprobs;
      if (g.prompt_logprobs >= 0)
        j["prompt_logprobs"] = g.prompt_logprobs;
      return j;
    }
    json operator()(const cancel_request& c) const {
      return header("cancel", c.id);
    }
    json operator()(const health_request& h) const {
      return header("health", h.id);
    }
    json operator()(const stats_request& s) const {
      return header("stats", s.id);
    }
    json operator()(const list_adapters_request& l) const {
      return header("list_adapters", l.id);
    }
    json operator()(const load_adapter_request& l) const {
      auto j = header("load_adapter", l.id);
      j["name"] = l.name;
      if (!l.path.empty())
        j["path"] = l.path;
      if (l.rank != 0)
        j["rank"] = l.rank;
      return j;
    }
    json operator()(const unload_adapter_request& u) const {
      auto j = header("unload_adapter", u.id);
      j["name"] = u.name;
      return j;
    }
    json operator()(const advise_request& a) const {
      auto j = header("advise", a.id);
      j["session"] = a.session;
      if (a.in_s != 0)
        j["in_s"] = a.in_s;
      if (a.priority != 0)
        j["priority"] = a.priority;
      return j;
    }
    json operator()(const tokenize_request& t) const {
      auto j = header("tokenize", t.id);
      j["prompt"] = t.prompt;
      return j;
    }
    json operator()(const detokenize_request& d) const {
      auto j = header("detokenize", d.id);
      j["tokens"] = d.tokens;
      return j;
    }
  };
  return dump(std::visit(visitor{}, x));
}

// -- replies --------------------------------------------------------------------

std::string to_json(const accepted_reply& x) {
  auto j = header("accepted", x.id);
  j["prompt_tokens"] = x.prompt_tokens;
  return dump(j);
}

namespace {

json logprob_json(const token_logprob& x) {
  json j = {{"token", x.token}, {"text", x.text}};
  if (!std::isnan(x.logprob)) // a prompt's first token has none
    j["logprob"] = wire_float(x.logprob);
  if (!valid_utf8(x.text)) {
    std::vector<int> bytes;
    for (const char c : x.text)
      bytes.push_back(static_cast<unsigned char>(c));
    j["bytes"] = bytes;
  }
  return j;
}

json logprobs_json(const std::vector<token_logprobs>& xs) {
  json out = json::array();
  for (const auto& x : xs) {
    auto j = logprob_json(x.sampled);
    j["top"] = json::array();
    for (const auto& t : x.top)
      j["top"].push_back(logprob_json(t));
    out.push_back(std::move(j));
  }
  return out;
}

} // namespace

std::string to_json(const token_reply& x) {
  auto j = header("token", x.id);
  j["index"] = x.index;
  j["tokens"] = x.tokens;
  j["text"] = x.text;
  if (!x.logprobs.empty())
    j["logprobs"] = logprobs_json(x.logprobs);
  if (!x.prompt_logprobs.empty())
    j["prompt_logprobs"] = logprobs_json(x.prompt_logprobs);
  return dump(j);
}

std::string to_json(const done_reply& x) {
  auto j = header("done", x.id);
  j["finish_reason"] = x.finish_reason;
  j["usage"] = json{{"prompt_tokens", x.prompt_tokens},
                    {"completion_tokens", x.completion_tokens}};
  if (x.cached_tokens > 0)
    j["usage"]["cached_tokens"] = x.cached_tokens;
  if (x.reasoning_tokens > 0)
    j["usage"]["reasoning_tokens"] = x.reasoning_tokens;
  j["timings"] = json{{"queue_ms", x.time.queue_ms},
                      {"ttft_ms", x.time.ttft_ms},
                      {"e2e_ms", x.time.e2e_ms}};
  if (x.tokens)
    j["tokens"] = *x.tokens;
  if (x.text)
    j["text"] = *x.text;
  if (x.logprobs)
    j["logprobs"] = logprobs_json(*x.logprobs);
  if (x.prompt_logprobs)
    j["prompt_logprobs"] = logprobs_json(*x.prompt_logprobs);
  return dump(j);
}

std::string to_json(const error_reply& x) {
  auto j = header("error", x.id);
  j["code"] = to_string(x.code);
  j["message"] = x.message;
  return dump(j);
}

std::string to_json(const health_reply& x) {
  auto j = header("health", x.id);
  j["status"] = x.status;
  return dump(j);
}

std::string to_json(const stats_reply& x) {
  auto j = header("stats", x.id);
  auto values = json::object();
  auto counters = json::array();
  auto levels = json::array();
  for (const auto& v : x.values) {
    values[v.name] = v.value;
    if (v.kind == stat_kind::counter)
      counters.push_back(v.name);
    else if (v.kind == stat_kind::level)
      levels.push_back(v.name);
  }
  j["stats"] = std::move(values);
  if (!counters.empty())
    j["counters"] = std::move(counters);
  if (!levels.empty())
    j["levels"] = std::move(levels);
  return dump(j);
}

std::string to_json(const adapters_reply& x) {
  auto j = header("adapters", x.id);
  auto list = json::array();
  for (const auto& a : x.adapters)
    list.push_back(json{{"name", a.name}, {"rank", a.rank}, {"resident", a.resident}});
  j["adapters"] = std::move(list);
  if (x.max_context != 0)
    j["max_context"] = x.max_context;
  return dump(j);
}

std::string to_json(const adapter_reply& x) {
  auto j = header("adapter", x.id);
  j["name"] = x.name;
  j["rank"] = x.rank;
  j["status"] = x.status;
  return dump(j);
}

std::string to_json(const advise_reply& x) {
  auto j = header("advise", x.id);
  j["session"] = x.session;
  j["status"] = x.status;
  return dump(j);
}

std::string to_json(const tokenize_reply& x) {
  auto j = header("tokenize", x.id);
  j["tokens"] = x.tokens;
  j["count"] = x.tokens.size();
  j["max_context"] = x.max_context;
  j["end_tokens"] = x.end_tokens;
  return dump(j);
}

std::string to_json(const detokenize_reply& x) {
  auto j = header("detokenize", x.id);
  j["text"] = x.text;
  return dump(j);
}

std::variant<reply, parse_error> parse_reply(std::string_view frame) {
  return read_object<reply>(
    frame, "reply",
    [](const json& doc) {
      auto i = doc.find("id");
      return i != doc.end() && i->is_string() ? i->get<std::string>() : std::string{};
    },
    [](const json& doc) { return read_reply(doc); });
}

} // namespace troupe::wire
