#include "tests/fuzz/targets.hpp"

#include "gpu/bpe_tokenizer.hpp"
#include "gpu/gpu_spec.hpp"
#include "gpu/llama_config.hpp"
#include "gpu/lora.hpp"
#include "gpu/model_shape.hpp"
#include "gpu/safetensors.hpp"
#include "gpu/sim_backend.hpp"
#include "gpu/unicode_norm.hpp"
#include "messages/batches.hpp"
#include "messages/conversations.hpp"
#include "messages/jinja.hpp"
#include "messages/lark_grammar.hpp"
#include "messages/openai.hpp"
#include "messages/responses.hpp"
#include "messages/wire.hpp"
#include "policies/prefetch_policy.hpp"
#include "policies/registry.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/config.hpp"
#include "runtime/grammar_constraint.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/reasoning_gate.hpp"
#include "runtime/sim_engine.hpp"
#include "tests/messages/chat_templates.hpp"
#include "tests/support/list_tokenizer.hpp"
#include "tests/support/temp_dir.hpp"
#include "tools/workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

namespace troupe::fuzz {
namespace {

std::string_view text_of(std::span<const std::uint8_t> in) {
  return {reinterpret_cast<const char*>(in.data()), in.size()};
}

void require(bool ok, std::string_view what) {
  if (!ok)
    throw invariant_broken(std::string(what));
}

/// Serializing must not throw (nlohmann throws on invalid UTF-8): a server
/// that answers with text it cannot serialize loses the reply.
template <class F>
std::string serialized(F&& f, std::string_view what) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw invariant_broken(std::string(what) + " does not serialize: " + e.what());
  }
}

// -- wire ----------------------------------------------------------------------

bool wire_request(std::span<const std::uint8_t> in) {
  wire::parse_limits limits;
  limits.max_frame_bytes = 1 << 16;
  limits.max_tokens = 4096;
  limits.max_stop = 4;
  limits.max_id_chars = 64;
  limits.vocab_size = 32000;
  auto parsed = wire::parse_request(text_of(in), limits);
  if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
    require(!err->message.empty(), "a refusal without a message");
    // Whatever a client sends, the fault is its own: never "internal".
    require(err->code != wire::error_code::internal, "a frame refused as an internal error: " + err->message);
    serialized([&] { return wire::to_json(wire::error_reply{err->id, err->code, err->message}); },
               "the refusal's error reply");
    return false;
  }
  const auto& req = std::get<wire::request>(parsed);
  const auto once = serialized([&] { return wire::to_json(req); }, "an accepted request");
  auto again = wire::parse_request(once, limits);
  require(std::holds_alternative<wire::request>(again), "an accepted request, serialized, is refused: " + once);
  require(wire::to_json(std::get<wire::request>(again)) == once, "a request changes on a round trip: " + once);
  require(wire::id_of(req) == wire::id_of(std::get<wire::request>(again)), "the id changes on a round trip");
  return true;
}

bool wire_reply(std::span<const std::uint8_t> in) {
  auto parsed = wire::parse_reply(text_of(in));
  if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
    require(!err->message.empty(), "a refusal without a message");
    return false;
  }
  const auto& rep = std::get<wire::reply>(parsed);
  const auto once = serialized([&] { return std::visit([](const auto& r) { return wire::to_json(r); }, rep); },
                               "an accepted reply");
  auto again = wire::parse_reply(once);
  require(std::holds_alternative<wire::reply>(again), "an accepted reply, serialized, is refused: " + once);
  const auto twice = std::visit([](const auto& r) { return wire::to_json(r); }, std::get<wire::reply>(again));
  require(twice == once, "a reply changes on a round trip: " + once + " -> " + twice);
  return true;
}

// -- the OpenAI-compatible front ---------------------------------------------------

/// What the HTTP front does with a translated body: every frame goes to
/// the wire parser, and every refusal becomes an OpenAI error body. True
/// when the body was translated and the wire takes every frame.
bool check_translation(const std::variant<openai::completion_request, openai::api_error>& r) {
  if (auto* err = std::get_if<openai::api_error>(&r)) {
    require(!err->message.empty(), "an API error without a message");
    require(err->status >= 400 && err->status < 500, "a body refused with status " + std::to_string(err->status));
    serialized([&] { return openai::to_json(*err); }, "an API error");
    return false;
  }
  const auto& c = std::get<openai::completion_request>(r);
  require(!c.frames.empty(), "a translation without a frame");
  require(c.frames.size() == c.ids.size(), "frames and ids differ in number");
  require(c.frames.size() <= openai::max_choices, "more frames than max_choices");
  require(c.best_of >= c.n && c.frames.size() % c.best_of == 0, "frames not best_of to a prompt, or best_of below n");
  require(c.best_of == c.n || !c.stream, "a streamed best_of above n");
  wire::parse_limits limits; // the server's defaults
  bool all_taken = true;
  for (std::size_t k = 0; k < c.frames.size(); ++k) {
    const auto& f = c.frames[k];
    auto parsed = wire::parse_request(f, limits);
    if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
      // Values the wire checks itself (a temperature out of range) are
      // refused there, by name; the frame must still be a generate of its id.
      require(err->code == wire::error_code::bad_request, "a frame refused other than as a bad request: " + f);
      require(err->id == c.ids[k], "a refused frame without its id: " + f);
      all_taken = false;
      continue;
    }
    const auto* g = std::get_if<wire::generate_request>(&std::get<wire::request>(parsed));
    require(g != nullptr, "a frame that is not a generate: " + f);
    require(g->id == c.ids[k], "a frame's id is not its choice's: " + f);
  }
  return all_taken;
}

const openai::chat_template& template_for(std::uint8_t selector) {
  static const std::array<openai::chat_template, 4> tpls = [] {
    auto make = [](std::string_view name, openai::chat_formats custom = {}) {
      return std::get<openai::chat_template>(openai::make_chat_template(name, std::move(custom)));
    };
    auto chatml = make("chatml");
    chatml.request_templates = true; // a chat's own template, under a built-in one
    return std::array<openai::chat_template, 4>{
      make("llama2"), std::move(chatml),
      make("custom", {.user = "<u>{content}</u>", .assistant = "<a>{content}</a>", .generation = "<a>",
                      .stop = {"</a>"}}),
      make("llama3")};
  }();
  return tpls[selector % tpls.size()];
}

/// A Hugging Face (Jinja) template in Qwen's shape: tools in <tools> tags,
/// calls in <tool_call> tags, results grouped, a namespace walked backwards;
/// a chat may bring its own.
const openai::chat_template& jinja_template() {
  static const openai::chat_template tpl = [] {
    const openai::jinja_source src{std::string(test_templates::chatml_tools), "", "<|im_end|>"};
    auto t = std::get<openai::chat_template>(openai::make_chat_template("model", {}, &src));
    t.request_templates = true; // and a chat's own
    return t;
  }();
  return tpl;
}

bool openai_bodies(std::span<const std::uint8_t> in) {
  if (in.empty())
    return false;
  const auto body = text_of(in.subspan(1));
  switch (in[0] % 6) {
  case 0:
    return check_translation(openai::parse_completion(body, "base", "w1"));
  case 1:
  case 2:
  case 3:
    // A first byte of 7 to 9 (mod 12): the chat through the Jinja template.
    return check_translation(openai::parse_chat_completion(
      body, "base", "w1", (in[0] / 6) % 2 == 1 ? jinja_template() : template_for(in[0] % 6 - 1)));
  case 4: {
    // The same body as an adapter load and unload (POST
    // /v1/load_lora_adapter, /v1/unload_lora_adapter); taken when either
    // or the advisory is.
    bool taken = false;
    for (const bool load : {true, false}) {
      auto u = openai::parse_adapter_update(body, "w1", load);
      if (auto* err = std::get_if<openai::api_error>(&u)) {
        serialized([&] { return openai::to_json(*err); }, "an adapter update's error");
        continue;
      }
      const auto& frame = std::get<std::string>(u);
      auto parsed = wire::parse_request(frame, {});
      if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
        require(err->code == wire::error_code::bad_request && err->id == "w1",
                "an adapter update refused other than as a bad request of its id: " + frame);
        continue;
      }
      const auto& req = std::get<wire::request>(parsed);
      require(load ? std::holds_alternative<wire::load_adapter_request>(req)
                   : std::holds_alternative<wire::unload_adapter_request>(req),
              "an adapter update that is not one: " + frame);
      taken = true;
    }
    // And as a tokenize request, its prompt or its chat's (vLLM's /tokenize).
    if (auto t = openai::parse_tokenizer_request(body, "w1", true, &template_for(1), "base");
        auto* err = std::get_if<openai::api_error>(&t)) {
      require(err->status == 400 && !err->message.empty(), "a tokenize body refused without a 400 and a message");
      serialized([&] { return openai::to_json(*err); }, "a tokenize error");
    } else {
      auto parsed = wire::parse_request(std::get<std::string>(t), {});
      if (auto* perr = std::get_if<wire::parse_error>(&parsed))
        require(perr->code == wire::error_code::bad_request && perr->id == "w1",
                "a tokenize frame refused other than as a bad request of its id");
      else
        require(std::holds_alternative<wire::tokenize_request>(std::get<wire::request>(parsed)),
                "a tokenize frame that is not a tokenize");
    }
    auto r = openai::parse_advise(body, "w1");
    if (auto* err = std::get_if<openai::api_error>(&r)) {
      serialized([&] { return openai::to_json(*err); }, "an advise error");
      return taken;
    }
    const auto& frame = std::get<std::string>(r);
    auto parsed = wire::parse_request(frame, {});
    if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
      require(err->code == wire::error_code::bad_request && err->id == "w1",
              "an advise frame refused other than as a bad request of its id: " + frame);
      return taken;
    }
    require(std::holds_alternative<wire::advise_request>(std::get<wire::request>(parsed)),
            "an advise frame that is not an advise: " + frame);
    return true;
  }
  default: {
    // A path segment and an Authorization header, as the front reads them.
    const auto name = openai::percent_decoded(body);
    auto m = openai::model_json(name, "base", wire::adapters_reply{"w1", {{"sql", 8, true}}}, 0);
    if (auto* err = std::get_if<openai::api_error>(&m))
      serialized([&] { return openai::to_json(*err); }, "a model lookup's error");
    const std::vector<std::string> keys{"k1", "a-longer-key"};
    const bool key_taken = openai::authorized(body, keys);
    if (key_taken) {
      const auto key = body.substr(7); // the scheme's case is free
      require(key == "k1" || key == "a-longer-key", "a wrong key authorized: " + std::string(body));
    }
    return key_taken || std::holds_alternative<std::string>(m);
  }
  }
}

/// The text of an answer's choice 0: a completion's "text", a chat's
/// message or delta "content".
std::string choice_text(const nlohmann::json& choice) {
  for (const char* key : {"text", "message", "delta"}) {
    if (!choice.contains(key))
      continue;
    const auto& v = choice.at(key);
    if (v.is_string())
      return v.get<std::string>();
    if (v.is_object() && v.contains("content"))
      return v.at("content").get<std::string>();
  }
  return {};
}

/// A streamed answer against the whole one: the same text, cut before the
/// first stop string, and with log-probabilities asked for, the same
/// tokens' (those whose text begins before it); echoed, the prompt's first.
/// Input: stop strings split by 0x02, then 0x01, then the output's chunks
/// (a token each) split by 0x01; the first byte's low bit picks chat, its
/// next asks for them, the third echoes a prompt of two tokens (completions).
bool openai_stream(std::span<const std::uint8_t> in) {
  if (in.empty())
    return false;
  const bool chat = (in[0] & 1) != 0;
  const bool logprobs = (in[0] & 2) != 0;
  const bool echo = !chat && (in[0] & 4) != 0;
  const bool keep_first_stop = (in[0] & 8) != 0; // include_stop_str_in_output for the first listed
  // The echoed prompt "Pq\xc3\xa9": its first token has no log-probability.
  const std::vector<wire::token_logprobs> prompt_lps{
    {{7, "P", std::numeric_limits<float>::quiet_NaN()}, {}}, {{8, "q\xc3\xa9", -0.5f}, {{8, "q\xc3\xa9", -0.5f}}}};
  const std::string echoed = echo ? "Pq\xc3\xa9" : "";
  const std::size_t echoed_chars = echo ? 3 : 0;
  const auto rest = text_of(in.subspan(1));
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const auto end = rest.find('\x01', at);
    parts.push_back(rest.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos)
      break;
    at = end + 1;
  }
  openai::completion_request req;
  req.frames = {"{}"};
  req.ids = {"w1"};
  req.model = "base";
  req.stream = true;
  req.chat = chat;
  req.logprobs = logprobs ? 1 : -1;
  req.echo = echo;
  req.stops_kept = keep_first_stop ? 1 : 0;
  if (echo && parts.size() < 2)
    return false; // a request gets its first token, or an error
  for (std::size_t at = 0; at <= parts[0].size() && req.stop.size() < 4;) {
    const auto end = std::min(parts[0].find('\x02', at), parts[0].size());
    if (end > at)
      req.stop.emplace_back(parts[0].substr(at, end - at));
    at = end + 1;
  }
  std::string whole;
  for (std::size_t k = 1; k < parts.size(); ++k)
    whole += parts[k];
  for (const auto& s : req.stop)
    if (!wire::valid_utf8(s))
      return false; // the wire takes stop strings from JSON: always UTF-8
  for (std::size_t k = 1; k < parts.size(); ++k)
    if (!wire::valid_utf8(parts[k]))
      return false;
  // The output ends where the earliest stop string begins (of two at once,
  // the first listed), or where it ends if it is kept.
  std::size_t cut = whole.size(), begin = std::string::npos, which = 0;
  for (std::size_t i = 0; i < req.stop.size(); ++i)
    if (const auto f = whole.find(req.stop[i]); f < begin) {
      begin = f;
      which = i;
    }
  if (begin != std::string::npos)
    cut = which < req.stops_kept ? begin + req.stop[which].size() : begin;
  const auto expected = echoed + whole.substr(0, cut);

  // Token k (chunk k) has log-probability -k; its text is the chunk's.
  std::vector<wire::token_logprobs> lps;
  for (std::size_t k = 1; k < parts.size(); ++k)
    lps.push_back({{static_cast<std::int32_t>(k), std::string(parts[k]), -static_cast<float>(k)},
                   {{static_cast<std::int32_t>(k), std::string(parts[k]), -static_cast<float>(k)}}});
  wire::done_reply done{"w1", "stop", 3, static_cast<std::uint32_t>(parts.size() - 1), {}, std::nullopt, whole, lps,
                        echo ? std::optional{prompt_lps} : std::nullopt};
  openai::completion_answer one("cmpl-1", 0, req);
  const auto body = nlohmann::json::parse(one.body({done}));
  require(choice_text(body.at("choices").at(0)) == expected,
          "the whole answer is not the output cut before the first stop string");
  // The tokens listed, as (log-probability, text offset or -1): a chat
  // gives no offsets; an echoed prompt's first token, none (null: 1 here).
  using listed = std::vector<std::pair<double, std::int64_t>>;
  auto tokens_in = [chat](const nlohmann::json& choice, listed& out) {
    const auto& lp = choice.at("logprobs");
    if (lp.is_null())
      return;
    if (chat) {
      for (const auto& c : lp.at("content"))
        out.emplace_back(c.at("logprob").get<double>(), -1);
    } else {
      const auto& offsets = lp.at("text_offset");
      for (std::size_t i = 0; i < lp.at("token_logprobs").size(); ++i) {
        const auto& x = lp["token_logprobs"][i];
        out.emplace_back(x.is_null() ? 1.0 : x.get<double>(), offsets.at(i).get<std::int64_t>());
      }
    }
  };
  listed whole_tokens;
  tokens_in(body.at("choices").at(0), whole_tokens);
  if (echo && logprobs) {
    require(whole_tokens.size() >= 2 && whole_tokens[0] == std::pair<double, std::int64_t>{1.0, 0}
              && whole_tokens[1] == std::pair<double, std::int64_t>{-0.5, 1},
            "the whole answer does not list the echoed prompt's tokens first");
    whole_tokens.erase(whole_tokens.begin(), whole_tokens.begin() + 2);
  }
  {
    // Those whose text begins before the stop string (all without one), in order.
    const bool stopped = cut < whole.size() || std::any_of(req.stop.begin(), req.stop.end(), [&](const std::string& s) {
                           return whole.find(s) != std::string::npos;
                         });
    std::size_t begins = 0, chars = echoed_chars, n = 0;
    for (std::size_t k = 1; k < parts.size() && (!stopped || begins < cut); ++k, ++n) {
      if (logprobs)
        require(n < whole_tokens.size() && whole_tokens[n].first == -static_cast<double>(k)
                  && (chat || whole_tokens[n].second == static_cast<std::int64_t>(chars)),
                "the whole answer lists another token, or at another offset, than token " + std::to_string(k));
      begins += parts[k].size();
      for (const char c : parts[k])
        chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }
    require(whole_tokens.size() == (logprobs ? n : 0), "the whole answer lists tokens past the stop string");
  }

  done.text.reset();
  openai::completion_answer streamed("cmpl-1", 0, req);
  std::string events = streamed.stream_start();
  for (std::size_t k = 1; k < parts.size(); ++k)
    events += streamed.chunk(0, wire::token_reply{"w1", static_cast<std::uint32_t>(k - 1), {1}, std::string(parts[k]),
                                                  {lps[k - 1]}, k == 1 && echo ? prompt_lps : std::vector<wire::token_logprobs>{}});
  events += streamed.choice_end(0, done);
  events += streamed.stream_end();
  std::string text;
  listed streamed_tokens;
  bool finish_seen = false;
  bool done_seen = false;
  for (std::size_t at = 0; at < events.size();) {
    require(events.compare(at, 6, "data: ") == 0, "an event that does not start with \"data: \"");
    const auto end = events.find("\n\n", at);
    require(end != std::string::npos, "an event without its blank line");
    const auto data = events.substr(at + 6, end - at - 6);
    at = end + 2;
    if (data == "[DONE]") {
      require(at == events.size(), "events after [DONE]");
      done_seen = true;
      break;
    }
    require(!finish_seen, "a chunk after the one with the finish reason");
    const auto j = nlohmann::json::parse(data);
    const auto& choice = j.at("choices").at(0);
    text += choice_text(choice);
    tokens_in(choice, streamed_tokens);
    finish_seen = !choice.at("finish_reason").is_null();
  }
  require(finish_seen && done_seen, "a stream that does not end with a finish reason and [DONE]");
  require(text == expected, "the streamed text differs from the whole answer's");
  if (echo && logprobs) {
    require(streamed_tokens.size() >= 2, "the stream does not list the echoed prompt's tokens");
    streamed_tokens.erase(streamed_tokens.begin(), streamed_tokens.begin() + 2);
  }
  require(streamed_tokens == whole_tokens, "the streamed tokens' log-probabilities differ from the whole answer's");
  return true;
}

/// A chat answer with tools offered, streamed against whole: the same
/// content, the same calls and the same finish reason; calls are of the
/// tools given, their arguments JSON objects where every call is whole
/// (finish reason "tool_calls"), and a streamed call's arguments only
/// grow. Input: the first byte picks
/// tool_choice ("auto", "auto" without parallel calls, "required", a named
/// function) and the call format, the rest is the output's chunks (a token
/// each) split by 0x01.
bool openai_tools(std::span<const std::uint8_t> in) {
  if (in.empty())
    return false;
  static const char* const choices[] = {R"("auto")", R"("auto","parallel_tool_calls":false)", R"("required")",
                                        R"({"type":"function","function":{"name":"get_time"}})"};
  // in[0] % 4: the tool choice; its bit 8: Mistral's later calls (each
  // named before its arguments), else its bit 4: Mistral's calls (one
  // array after the marker), both under a custom template; else Hermes'
  // under chatml. Bit 16: response_format json_object beside the tools
  // (the answer is calls or an object: read as without it). Bit 32:
  // logprobs, each part a token of its own log-probability: the stream
  // gives each token's once, in the whole answer's order. Bit 64: OpenAI's
  // legacy functions and function_call where the choice has a legacy form
  // (not "required"): the call comes back as message.function_call.
  const auto custom = [](const char* tool_call) {
    return std::get<openai::chat_template>(openai::make_chat_template(
      "custom", {.system = "S: {content}\n", .user = "U: {content}\n", .assistant = "A: {content}\n",
                 .tools = "T: {tools}", .tool_call = tool_call, .tool_result = "R: {content}"}));
  };
  static const auto mistral = custom("[TOOL_CALLS] {calls}");
  static const auto mistral_named = custom("[TOOL_CALLS]{name}[ARGS]{arguments}");
  const bool named = (in[0] & 8) != 0, array = !named && (in[0] & 4) != 0;
  const auto& tpl = named ? mistral_named : array ? mistral : template_for(1); // chatml
  const std::string marker = named || array ? "[TOOL_CALLS]" : "<tool_call>";
  static const char* const legacy_choices[] = {R"("auto")", R"("auto")", nullptr, R"({"name":"get_time"})"};
  const bool legacy = (in[0] & 64) != 0 && legacy_choices[in[0] % 4] != nullptr;
  const std::string functions = R"({"name":"get_weather","parameters":{"type":"object"}},{"name":"get_time"})";
  const auto body =
    std::string(R"({"model":"base","messages":[{"role":"user","content":"q"}],)")
    + (legacy ? R"("functions":[)" + functions + R"(],"function_call":)" + legacy_choices[in[0] % 4]
              : std::string(R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},)"
                            R"({"type":"function","function":{"name":"get_time"}}],"tool_choice":)")
                  + choices[in[0] % 4])
    + R"(,"stream":true)" + (in[0] & 16 ? R"(,"response_format":{"type":"json_object"})" : "")
    + (in[0] & 32 ? R"(,"logprobs":true)" : "") + "}";
  auto parsed = openai::parse_chat_completion(body, "base", "w1", tpl);
  require(std::holds_alternative<openai::completion_request>(parsed), "the tool request is refused");
  const auto& req = std::get<openai::completion_request>(parsed);
  const auto rest = text_of(in.subspan(1));
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const auto end = rest.find('\x01', at);
    parts.emplace_back(rest.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (!wire::valid_utf8(parts.back()))
      return false; // the wire's texts are UTF-8
    if (end == std::string_view::npos)
      break;
    at = end + 1;
  }
  std::string whole_text;
  for (const auto& p : parts)
    whole_text += p;
  wire::done_reply done{"w1", "stop", 3, static_cast<std::uint32_t>(parts.size()), {}, std::nullopt, whole_text,
                        std::nullopt, std::nullopt};
  const auto logprob_of = [&](std::size_t k) {
    return wire::token_logprobs{{static_cast<std::int32_t>(k), parts[k], -1.0f - static_cast<float>(k)}, {}};
  };
  if (req.logprobs >= 0) {
    done.logprobs.emplace();
    for (std::size_t k = 0; k < parts.size(); ++k)
      done.logprobs->push_back(logprob_of(k));
  }
  const auto whole = nlohmann::json::parse(openai::completion_answer("chatcmpl-1", 0, req).body({done}));
  const auto& choice = whole.at("choices").at(0);
  const auto& message = choice.at("message");
  auto calls = message.value("tool_calls", nlohmann::json::array());
  if (legacy) {
    // One call, as function_call, and never tool_calls.
    require(!message.contains("tool_calls"), "a legacy answer with tool_calls");
    if (message.contains("function_call"))
      calls.push_back({{"function", message["function_call"]}});
  }
  const bool all_whole = choice.at("finish_reason") == (legacy ? "function_call" : "tool_calls");
  require(!all_whole || !calls.empty(), "finish_reason tool_calls without calls");
  for (const auto& c : calls) {
    const auto& f = c.at("function");
    require(f.at("name") == "get_weather" || f.at("name") == "get_time", "a call of no tool given");
    const auto arguments = f.at("arguments").get<std::string>();
    require(arguments.starts_with("{"), "arguments that do not begin an object");
    require(!all_whole || nlohmann::json::parse(arguments).is_object(), "arguments not an object");
  }
  require(calls.size() <= 1 || (!legacy && (in[0] % 4 == 0 || in[0] % 4 == 2)), "more than one call where there is one");
  const std::string content = message.at("content").is_null() ? "" : message.at("content").get<std::string>();
  // (chatml's <|im_end|> is a stop string; the custom template has none)
  require(calls.empty() ? content == whole_text.substr(0, named || array ? std::string::npos : whole_text.find("<|im_end|>"))
                        : whole_text.starts_with(content)
                            && (in[0] % 4 < 2 || content.empty() || !whole_text.starts_with(marker)),
          "the content is not the output's text (before its calls; none when forced and it begins with one)");

  done.text.reset();
  openai::completion_answer streamed("chatcmpl-1", 0, req);
  std::string events = streamed.stream_start();
  for (std::size_t k = 0; k < parts.size(); ++k) {
    wire::token_reply t{"w1", static_cast<std::uint32_t>(k), {1}, parts[k], {}, {}};
    if (req.logprobs >= 0)
      t.logprobs.push_back(logprob_of(k));
    events += streamed.chunk(0, t);
  }
  events += streamed.choice_end(0, done) + streamed.stream_end();
  const auto listed = [](const nlohmann::json& lps, nlohmann::json& out) {
    if (!lps.is_null())
      for (const auto& t : lps.at("content"))
        out.push_back(t.at("logprob"));
  };
  nlohmann::json whole_lps = nlohmann::json::array(), streamed_lps = nlohmann::json::array();
  listed(choice.at("logprobs"), whole_lps);
  require(whole_lps.size() <= (req.logprobs >= 0 ? parts.size() : 0), "the whole answer lists tokens not generated");
  for (std::size_t k = 0; k < whole_lps.size(); ++k)
    require(whole_lps[k] == -1.0 - static_cast<double>(k), "the whole answer's tokens out of order");
  std::string text;
  nlohmann::json streamed_calls = nlohmann::json::array();
  nlohmann::json finish;
  for (std::size_t at = 0; at < events.size();) {
    const auto end = events.find("\n\n", at);
    require(events.compare(at, 6, "data: ") == 0 && end != std::string::npos, "a malformed event");
    const auto data = events.substr(at + 6, end - at - 6);
    at = end + 2;
    if (data == "[DONE]")
      break;
    const auto event = nlohmann::json::parse(data);
    const auto& ch = event.at("choices").at(0);
    if (!ch.at("finish_reason").is_null())
      finish = ch.at("finish_reason");
    listed(ch.at("logprobs"), streamed_lps);
    const auto& delta = ch.at("delta");
    if (delta.contains("content") && delta["content"].is_string())
      text += delta["content"].get<std::string>();
    if (legacy) {
      require(!delta.contains("tool_calls"), "a legacy stream with tool_calls");
      if (const auto f = delta.find("function_call"); f != delta.end()) {
        if (streamed_calls.empty()) {
          require(f->contains("name"), "a legacy call's first delta without its name");
          streamed_calls.push_back({{"function", {{"name", (*f)["name"]}, {"arguments", f->value("arguments", "")}}}});
        } else {
          require(f->size() == 1 && f->contains("arguments"), "more of a legacy call that is not its arguments");
          auto& arguments = streamed_calls[0]["function"]["arguments"];
          arguments = arguments.get<std::string>() + (*f)["arguments"].get<std::string>();
        }
      }
    }
    for (auto c : delta.value("tool_calls", nlohmann::json::array())) {
      // A call's first delta has its id and name; the next ones, more of
      // its arguments.
      const auto index = c.at("index").get<std::size_t>();
      c.erase("index");
      if (index == streamed_calls.size()) {
        require(c.contains("id") && c.at("function").contains("name"), "a call's first delta without its id or name");
        streamed_calls.push_back(std::move(c));
        continue;
      }
      require(index + 1 == streamed_calls.size() && c.size() == 1 && c.at("function").size() == 1,
              "more of a call that is not the last, or more than its arguments");
      auto& arguments = streamed_calls[index]["function"]["arguments"];
      arguments = arguments.get<std::string>() + c.at("function").at("arguments").get<std::string>();
    }
  }
  require(finish == choice.at("finish_reason"), "the streamed finish reason differs from the whole answer's");
  require(text == content, "the streamed content differs from the whole answer's");
  require(streamed_calls == calls, "the streamed calls differ from the whole answer's");
  require(streamed_lps == whole_lps, "the streamed log-probabilities differ from the whole answer's");
  return true;
}

/// The Conversations API over a small store: each '\x01'-separated
/// operation (its first byte picks the call and the conversation) answers
/// JSON or a named error; the store stays within its bytes, and every kept
/// conversation's items read as a response's prior input, each with an id.
bool conversations(std::span<const std::uint8_t> in) {
  const auto all = text_of(in);
  if (!wire::valid_utf8(all))
    return false;
  openai::conversation_store store(6000);
  int next = 0;
  const openai::conversation_store::id_maker fresh = [&](std::string_view prefix) {
    return std::string(prefix) + "_" + std::to_string(++next);
  };
  std::vector<std::string> made;
  const openai::earlier_turns kept = [&](const std::string& id) { return store.turns(id); };
  // As the front keeps them in files: whole, then additions in a log.
  std::map<std::string, std::string> files, logs;
  store.watch(
    [&](const std::string& id, const openai::conversation_store::entry& e) {
      files[id] = openai::conversation_store::to_text(e);
      logs.erase(id);
    },
    [&](const std::string& id) {
      files.erase(id);
      logs.erase(id);
    },
    [&](const std::string& id, const openai::conversation_store::entry& e, std::size_t first) {
      require(first <= e.items.size(), "an addition past the items");
      logs[id] += openai::conversation_store::log_record(e, first);
    });
  for (std::size_t at = 0; at < all.size();) {
    const auto end = all.find('\x01', at);
    const auto op = all.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? all.size() : end + 1;
    if (op.empty())
      continue;
    const auto pick = static_cast<unsigned char>(op[0]);
    const auto arg = op.substr(1);
    const std::string id = made.empty() ? "conv_0" : made[(pick >> 3) % made.size()];
    std::variant<std::string, openai::api_error> answer = std::string("{}");
    switch (pick & 7) {
      case 0:
        answer = store.serve("POST", "", "", arg, 0, fresh);
        if (auto* ok = std::get_if<std::string>(&answer))
          made.push_back(nlohmann::json::parse(*ok).at("id").get<std::string>());
        break;
      case 1: answer = store.serve((pick & 64) ? "DELETE" : "GET", "/" + id, arg, "", 0, fresh); break;
      case 2: answer = store.serve("POST", "/" + id, "", arg, 0, fresh); break;
      case 3: answer = store.serve("POST", "/" + id + "/items", "", arg, 0, fresh); break;
      case 4: answer = store.serve("GET", "/" + id + "/items", arg, "", 0, fresh); break;
      case 5:
        answer = store.serve((pick & 64) ? "DELETE" : "GET", "/" + id + "/items/" + openai::percent_decoded(arg), "",
                             "", 0, fresh);
        break;
      default: {
        // A response in the conversation (truncated or not), its turn added
        // as the front adds it.
        auto ask = nlohmann::json{{"model", "base"}, {"input", arg}, {"conversation", id}};
        if (pick & 32)
          ask["truncation"] = "auto";
        const auto parse = [&](std::size_t drop) {
          return openai::parse_response_request(ask.dump(), "base", "w1", template_for(1), {}, {}, {}, {}, kept, drop);
        };
        auto r = parse(0);
        if (auto* err = std::get_if<openai::api_error>(&r)) {
          require(err->status == 404 || err->status == 400, "a response refused with another status");
          break;
        }
        const auto& rr = std::get<openai::response_request>(r);
        const auto prompt_size = [](const openai::response_request& q) {
          return nlohmann::json::parse(q.chat.frames.at(0)).at("prompt").get<std::string>().size();
        };
        for (const auto cut : rr.cuts) {
          auto shorter = parse(cut);
          if (const auto* q = std::get_if<openai::response_request>(&shorter))
            require(q->dropped == cut && prompt_size(*q) <= prompt_size(rr), "a cut that did not shorten the prompt");
        }
        require(rr.conversation == id && rr.session == store.find(id)->session, "the conversation's session not used");
        const auto before = store.find(id)->items.size();
        // Output item ids made from the response's, as the front makes them.
        const auto resp = std::to_string(++next);
        const auto body = nlohmann::json{{"id", "resp_" + resp},
                                         {"status", "completed"},
                                         {"output", nlohmann::json::array({{{"id", "msg_" + resp + "_0"},
                                                                            {"type", "message"},
                                                                            {"role", "assistant"},
                                                                            {"content", nlohmann::json::array({{
                                                                              {"type", "output_text"},
                                                                              {"text", arg}}})}}})}};
        store.add_turn(id, body["id"].get<std::string>(), rr.input_items, body.dump());
        if (const auto* e = store.find(id))
          require(e->items.size() == before + 2, "a turn that added other than its input and output");
        if (pick & 16) { // the same turn again (a batch line run again after a crash): added once
          store.add_turn(id, body["id"].get<std::string>(), rr.input_items, body.dump());
          if (const auto* e = store.find(id))
            require(e->items.size() == before + 2, "a turn added twice");
        }
      }
    }
    if (auto* ok = std::get_if<std::string>(&answer))
      require(nlohmann::json::parse(*ok).is_object(), "an answer that is not a JSON object");
    else {
      const auto& e = std::get<openai::api_error>(answer);
      require((e.status == 400 || e.status == 404) && !e.message.empty(), "an error without a 400 or 404 and a message");
    }
    require(store.bytes() <= store.capacity(), "a store past its bytes");
    for (const auto& c : made)
      if (auto t = store.turns(c); auto* conv = std::get_if<openai::conversation>(&t)) {
        const auto items = nlohmann::json::parse(conv->items);
        for (const auto& item : items)
          require(item.contains("id") && item["id"].is_string(), "an item without an id");
        const auto* e = store.find(c);
        const auto back = openai::conversation_store::from_text(openai::conversation_store::to_text(*e));
        require(back && back->items == e->items && back->metadata == e->metadata && back->session == e->session
                  && back->created_at == e->created_at,
                "a conversation whose text form reads back otherwise");
        require(files.contains(c), "a kept conversation never written");
        auto from_files = openai::conversation_store::from_text(files.at(c));
        require(from_files.has_value(), "a conversation's file that does not read back");
        openai::conversation_store::replay_log(*from_files, logs[c]);
        require(from_files->items == e->items && from_files->metadata == e->metadata,
                "a conversation's file and log that read back otherwise");
        require(std::holds_alternative<std::string>(openai::resolve_input_items("[]", conv->items, "items")),
                "kept items a response would refuse");
      }
  }
  return true;
}

/// OpenAI's Responses API. The first byte's low bit: 0, the rest is a
/// body (bit 2: under the Jinja template; bit 4: with a store keeping
/// resp_1), translated as the front does
/// (an error a 4xx with a message; the chat's frames for the wire); 1, the
/// rest is an output's chunks (a token each) split by 0x01, answered for a
/// request with tools (bit 2), a reasoning parser (bit 4) and the logprobs
/// include (bit 8): the stream's events are numbered in order, each item
/// added before its deltas and done after them, the deltas join to its
/// text or arguments, and the last event's response is the whole answer.
bool openai_responses(std::span<const std::uint8_t> in) {
  if (in.empty())
    return false;
  const auto rest = text_of(in.subspan(1));
  if ((in[0] & 1) == 0) {
    // A store that keeps one conversation, resp_1.
    const openai::earlier_turns kept = [](const std::string& id) -> std::variant<openai::conversation, openai::api_error> {
      if (id == "resp_1")
        return openai::conversation{R"([{"role":"user","content":"Hi"},{"type":"message","role":"assistant",)"
                                    R"("status":"completed","content":[{"type":"output_text","text":"Hello",)"
                                    R"("annotations":[]}]}])",
                                    "resp_1"};
      return openai::bad_request("no stored response " + id, "previous_response_id");
    };
    auto r = openai::parse_response_request(rest, "base", "w1", (in[0] & 2) ? jinja_template() : template_for(1), {}, {},
                                            (in[0] & 4) ? kept : openai::earlier_turns{}, "resp_2");
    if (auto* err = std::get_if<openai::api_error>(&r))
      return check_translation(std::move(*err));
    const auto& rr = std::get<openai::response_request>(r);
    require(rr.chat.frames.size() == 1 && rr.chat.n == 1, "a response of more than one choice");
    require(nlohmann::json::parse(rr.echo).is_object(), "a response's settings that are no object");
    return check_translation(rr.chat);
  }
  static const auto thinking = [] {
    auto t = template_for(1); // chatml
    t.reasoning = openai::reasoning_parser("qwen3");
    return t;
  }();
  std::string body = R"({"model":"base","input":"q","stream":true)";
  if (in[0] & 2)
    body += R"(,"tools":[{"type":"function","name":"get_time"},{"type":"function","name":"get_weather","parameters":)"
            R"({"type":"object","properties":{"city":{"type":"string"}}}}])";
  if (in[0] & 8)
    body += R"(,"include":["message.output_text.logprobs"])";
  auto parsed = openai::parse_response_request(body + "}", "base", "w1", (in[0] & 4) ? thinking : template_for(1));
  require(std::holds_alternative<openai::response_request>(parsed), "the response request is refused");
  const auto& req = std::get<openai::response_request>(parsed);
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const auto end = rest.find('\x01', at);
    parts.emplace_back(rest.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (!wire::valid_utf8(parts.back()))
      return false;
    if (end == std::string_view::npos)
      break;
    at = end + 1;
  }
  std::string whole_text;
  std::vector<wire::token_logprobs> lps;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    whole_text += parts[k];
    lps.push_back({{static_cast<std::int32_t>(k), parts[k], -1.0f - static_cast<float>(k)}, {}});
  }
  const bool cut = (in[0] & 16) != 0;
  wire::done_reply done{"w1", cut ? "length" : "stop", 3, static_cast<std::uint32_t>(parts.size()), {}, std::nullopt,
                        whole_text, std::nullopt, std::nullopt};
  if (req.chat.logprobs >= 0)
    done.logprobs = lps;
  const auto whole = nlohmann::json::parse(openai::response_answer("resp_1", 0, req).body({done}));
  // Cut by the limit, it is incomplete unless the calls read were whole
  // (the chat's "tool_calls").
  require(cut || whole.at("status") == "completed", "a response not cut that is not completed");
  openai::response_answer streamed("resp_1", 0, req);
  // (A background response's log takes the events as they come.)
  openai::event_log log;
  std::string events;
  const auto sent = [&](std::string more) {
    log.add(more);
    events += more;
  };
  sent(streamed.stream_start());
  for (std::size_t k = 0; k < parts.size(); ++k) {
    wire::token_reply t{"w1", static_cast<std::uint32_t>(k), {1}, parts[k], {}, {}};
    if (req.chat.logprobs >= 0)
      t.logprobs.push_back(lps[k]);
    sent(streamed.chunk(0, t));
  }
  sent(streamed.choice_end(0, done));
  sent(streamed.stream_end());
  require(log.text() == events, "the log's text is not the events sent");
  std::uint64_t seq = 0;
  std::map<std::size_t, std::string> joined;
  std::set<std::size_t> added, finished;
  nlohmann::json last;
  for (std::size_t at = 0; at < events.size();) {
    const auto end = events.find("\n\n", at);
    require(end != std::string::npos && events.compare(at, 7, "event: ") == 0, "a malformed event");
    const auto nl = events.find('\n', at);
    require(events.compare(nl + 1, 6, "data: ") == 0, "an event without its data");
    const auto type = events.substr(at + 7, nl - at - 7);
    last = nlohmann::json::parse(events.substr(nl + 7, end - nl - 7));
    require(log.from(seq) == std::string_view(events).substr(at), "the log's event is not the one sent under its number");
    at = end + 2;
    require(last.at("type") == type && last.at("sequence_number") == seq++, "an event misnamed or out of order");
    if (!last.contains("output_index"))
      continue;
    const auto k = last["output_index"].get<std::size_t>();
    if (type == "response.output_item.added")
      require(added.insert(k).second && k + 1 == added.size(), "an item added twice or out of order");
    else if (type == "response.output_item.done")
      require(added.contains(k) && finished.insert(k).second, "an item done before it was added, or twice");
    else if (type.ends_with(".delta")) {
      require(added.contains(k) && !finished.contains(k), "a delta outside its item");
      joined[k] += last.at("delta").get<std::string>();
    }
  }
  require(log.size() == seq && log.from(seq).empty(), "the log holds other events than those sent");
  require(last.at("type") == "response." + whole.at("status").get<std::string>(), "a stream not ended by its response");
  require(last.at("response") == whole, "the streamed response differs from the whole one");
  const auto& output = whole.at("output");
  require(finished == added && added.size() == output.size(), "items added and done differ from the output's");
  for (std::size_t k = 0; k < output.size(); ++k) {
    const auto& item = output[k];
    require(joined[k] == (item.at("type") == "function_call" ? item.at("arguments") : item.at("content").at(0).at("text")),
            "an item's deltas do not make its text");
  }
  return true;
}

// -- files -------------------------------------------------------------------------

/// A scratch directory of this process (removed at exit); each input
/// overwrites the files of the last.
const std::filesystem::path& scratch() {
  static const testing::temp_dir dir("troupe-fuzz");
  require(!dir.dir().empty(), "cannot make a scratch directory");
  return dir.dir();
}

void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  require(static_cast<bool>(f), "cannot write the scratch file " + p.string());
}

bool config(std::span<const std::uint8_t> in) {
  static const auto catalog = default_catalog();
  auto r = parse_config(text_of(in), "fuzz.toml", catalog);
  if (auto* err = std::get_if<config_error>(&r)) {
    require(err->message.starts_with("fuzz.toml"), "a config error that does not name the file: " + err->message);
    return false;
  }
  return true;
}

bool llama_config(std::span<const std::uint8_t> in) {
  auto r = gpu::parse_llama_config(text_of(in), "config.json");
  if (auto* err = std::get_if<std::string>(&r)) {
    require(err->find("config.json") != std::string::npos, "a config.json error that does not name it: " + *err);
    return false;
  }
  const auto& c = std::get<gpu::llama_config>(r);
  const auto once = serialized([&] { return gpu::to_config_json(c); }, "an accepted config.json");
  auto again = gpu::parse_llama_config(once, "again.json");
  require(std::holds_alternative<gpu::llama_config>(again), "an accepted config.json, written, is refused: " + once);
  require(gpu::to_config_json(std::get<gpu::llama_config>(again)) == once, "config.json changes on a round trip");
  return true;
}

/// The concatenated decodes of `ids`.
std::string decoded(const gpu::tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::string out;
  for (const auto id : ids) {
    require(id >= 0 && id < t.vocab_size(), "id " + std::to_string(id) + " outside the vocabulary");
    out += t.decode(id);
  }
  return out;
}

bool tokenizer_json(std::span<const std::uint8_t> in) {
  const auto text = text_of(in);
  auto r = gpu::bpe_tokenizer::parse(text, "tokenizer.json", -1);
  if (auto* err = std::get_if<std::string>(&r)) {
    require(err->starts_with("tokenizer.json: "), "a tokenizer.json error that does not name it: " + *err);
    return false;
  }
  const auto& t = *std::get<std::unique_ptr<gpu::bpe_tokenizer>>(r);
  // Without added tokens or a normalizer every byte comes back; otherwise
  // ids stay valid.
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  const bool plain = (!doc.contains("added_tokens") || doc["added_tokens"].empty()) &&
                     (!doc.contains("normalizer") || doc["normalizer"].is_null() ||
                      doc["normalizer"] == nlohmann::json{{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}});
  for (const std::string sample : {"", "The quick <|x|> 123 \xC3\xBCn\xC3\xAF \xF0\x9F\x99\x82 \xFF\xFE  \n\n x"}) {
    const auto ids = t.encode(sample);
    const auto back = decoded(t, ids);
    require(ids.size() >= t.prefix().size() + t.suffix().size(), "encode dropped the template's ids");
    if (plain && t.prefix().empty() && t.suffix().empty())
      require(back == sample, "a text does not come back: " + back);
  }
  return true;
}

/// A chat template read and rendered over a chat with tools: it is refused
/// (jinja::error, saying where) or renders, the same each time, within the
/// limits; no other failure.
bool jinja_template(std::span<const std::uint8_t> in) {
  static const auto vars = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi \u00e9 \ud83d\ude42"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": {"city": "Paris", "n": [1, 2.5, true, null]}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18C"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  jinja::limits lim;
  lim.max_output_bytes = 1 << 16;
  lim.max_steps = 20'000;
  std::optional<jinja::program> p;
  try {
    p.emplace(text_of(in));
  } catch (const jinja::error& e) {
    require(std::string_view(e.what()).starts_with("chat template"), std::string("an error without its place: ") + e.what());
    return false;
  }
  std::string first;
  try {
    first = p->render(vars, lim, 1.7e9);
  } catch (const jinja::error& e) {
    require(std::string_view(e.what()).starts_with("chat template"), std::string("an error without its place: ") + e.what());
    return true;
  }
  require(first.size() <= lim.max_output_bytes, "a rendering past max_output_bytes");
  require(p->render(vars, lim, 1.7e9) == first, "two renderings differ");
  return true;
}

bool bpe_encode(std::span<const std::uint8_t> in) {
  static const std::vector<std::string> specials{"<|a|>", "<|ab|>", "<|eot_id|>"};
  static const auto tok = [] {
    gpu::bpe_training o;
    o.vocab_size = 420;
    o.special_tokens = specials;
    o.bos_token = "<|a|>";
    std::string corpus;
    for (int k = 0; k < 20; ++k)
      corpus += "The river runs deep; it's 1234 km long.\n\tUn fleuve tr\xC3\xA8s long \xE4\xB8\xAD\xE6\x96\x87 ";
    auto r = gpu::bpe_tokenizer::parse(gpu::train_bpe_json(corpus, o).json, "trained", -1);
    return std::move(std::get<std::unique_ptr<gpu::bpe_tokenizer>>(r));
  }();
  const auto text = text_of(in);
  const auto ids = tok->encode(std::string{text});
  require(!ids.empty() && ids.front() == tok->prefix().front(), "BOS is not first");
  // The text comes back with its special tokens (longest first) taken out.
  std::string want;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = 0;
    for (const auto& s : specials)
      if (text.substr(i, s.size()) == s)
        len = std::max(len, s.size());
    if (len == 0)
      want += text[i++];
    i += len;
  }
  const auto back = decoded(*tok, ids);
  require(back == want, "the text does not come back: " + back);
  return true;
}

/// Any bytes in the four normalization forms: each form is idempotent, the
/// composed forms are those of the decomposed ones, well-formed UTF-8 stays
/// well-formed, and ASCII is left as it is.
bool unicode_norm(std::span<const std::uint8_t> in) {
  using gpu::unicode_form;
  const auto text = text_of(in);
  const auto n = [](std::string_view s, unicode_form f) { return gpu::unicode_normalize(s, f); };
  const std::string nfc = n(text, unicode_form::nfc), nfd = n(text, unicode_form::nfd);
  const std::string nfkc = n(text, unicode_form::nfkc), nfkd = n(text, unicode_form::nfkd);
  require(n(nfc, unicode_form::nfc) == nfc && n(nfd, unicode_form::nfd) == nfd, "NFC or NFD is not idempotent");
  require(n(nfkc, unicode_form::nfkc) == nfkc && n(nfkd, unicode_form::nfkd) == nfkd, "NFKC or NFKD is not idempotent");
  require(n(nfd, unicode_form::nfc) == nfc, "NFC is not NFC of NFD");
  require(n(nfc, unicode_form::nfd) == nfd, "NFD is not NFD of NFC");
  require(n(nfkd, unicode_form::nfc) == nfkc, "NFKC is not NFC of NFKD");
  const bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii)
    require(nfc == text && nfkd == text, "ASCII changed");
  const bool valid = nlohmann::json(std::string{text}).dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore) ==
                     nlohmann::json(std::string{text}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (valid)
    for (const std::string* s : {&nfc, &nfd, &nfkc, &nfkd})
      require(nlohmann::json(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore) ==
                nlohmann::json(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
              "well-formed UTF-8 normalized into ill-formed bytes");
  return true;
}

bool safetensors(std::span<const std::uint8_t> in) {
  const auto path = scratch() / "fuzz.safetensors";
  write_file(path, text_of(in));
  auto r = gpu::safetensors_archive::open(path.string());
  if (auto* err = std::get_if<std::string>(&r)) {
    require(err->find(path.string()) != std::string::npos, "a safetensors error that does not name the file: " + *err);
    return false;
  }
  const auto& archive = std::get<gpu::safetensors_archive>(r);
  for (const auto& name : archive.names()) {
    const auto* t = archive.find(name);
    require(t != nullptr, "a listed tensor is not found: " + name);
    std::uint64_t elements = 1;
    for (auto d : t->shape)
      elements *= d;
    // Reading every value must stay inside the mapping (ASan and the
    // page guard catch a read past it).
    const auto values = gpu::to_f32(*t);
    require(values.size() == elements, "a tensor reads a different number of values than its shape: " + name);
    auto again = archive.read_f32(name, t->shape);
    require(std::holds_alternative<std::vector<float>>(again), "a listed tensor cannot be read by its own shape");
  }
  return true;
}

bool peft_config(std::span<const std::uint8_t> in) {
  const auto dir = scratch() / "adapter";
  std::filesystem::create_directories(dir);
  write_file(dir / "adapter_config.json", text_of(in));
  auto r = gpu::read_peft_config(dir.string());
  if (auto* err = std::get_if<std::string>(&r)) {
    require(err->find("adapter_config.json") != std::string::npos,
            "an adapter error that does not name its file: " + *err);
    return false;
  }
  const auto& a = std::get<gpu::lora_adapter>(r);
  require(a.rank > 0, "an adapter of rank 0 accepted");
  require(std::isfinite(a.scale), "an adapter with a scale that is not finite accepted");
  return true;
}

/// A trace file as troupe-sim and troupe-bench read it (either kind of
/// request trace, or conversations): refused naming the file, or every
/// request and conversation usable.
bool trace(std::span<const std::uint8_t> in) {
  const auto path = scratch() / "trace.csv";
  write_file(path, text_of(in));
  bool any = false;
  auto requests = workload::load_trace(path.string());
  if (auto* err = std::get_if<std::string>(&requests)) {
    require(err->starts_with(path.string()), "a trace error that does not name the file: " + *err);
  } else {
    any = true;
    const auto& r = std::get<std::vector<workload::request>>(requests);
    require(!r.empty(), "a trace read as no requests");
    for (const auto& x : r) {
      require(std::isfinite(x.arrival_s) && x.arrival_s >= 0, "a request arriving at " + std::to_string(x.arrival_s));
      require(x.prompt_tokens > 0 && x.output_tokens > 0, "a request of no prompt or no output");
    }
  }
  auto conversations = workload::load_conversations(path.string());
  if (auto* err = std::get_if<std::string>(&conversations)) {
    require(err->starts_with(path.string()), "a conversations error that does not name the file: " + *err);
  } else {
    any = true;
    for (const auto& c : std::get<std::vector<workload::conversation>>(conversations))
      require(c.rounds > 0 && c.prompt_tokens >= c.rounds && c.response_tokens >= c.rounds,
              "a conversation with fewer tokens than turns");
  }
  return any;
}

/// Reads the fuzz input as a stream of choices; 0 once it runs out.
class choices {
public:
  explicit choices(std::span<const std::uint8_t> in) : in_(in) {}
  std::uint32_t next(std::uint32_t below) {
    std::uint32_t v = 0;
    for (int k = 0; k < 2; ++k)
      v = v << 8 | (at_ < in_.size() ? in_[at_++] : 0);
    return below == 0 ? 0 : v % below;
  }
  bool more() const noexcept { return at_ < in_.size(); }

private:
  std::span<const std::uint8_t> in_;
  std::size_t at_ = 0;
};

/// A small deployment and workload on the virtual clock, every policy and
/// memory mode the input picks (with `tiers`, also a disk tier below the
/// host pool, adapters in a partition of their own and predictive
/// prefetch; LongRoPE's recompute past a pretrained context): it ends,
/// every request ends once with its tokens, and every page of a request
/// comes back.
bool run_sim(std::span<const std::uint8_t> in, bool tiers) {
  choices c(in);
  static const auto schedulers = policies::scheduling_policy_names();
  static const auto evictions = policies::eviction_policy_names();
  static const auto shape = *gpu::find_model_preset("llama-2-7b");
  static const auto gpu_spec = *gpu::find_gpu_spec("A100-80GB");
  const std::uint64_t page_bytes = 16 * shape.kv_bytes_per_token();
  const std::uint32_t ranks[] = {8, 16, 64};
  std::vector<adapter_spec> specs;
  for (std::uint32_t i = 0; i < 6; ++i)
    specs.push_back({"a" + std::to_string(i), ranks[i % 3], ""});
  adapter_catalog catalog{specs, {}, [](std::uint32_t r) { return shape.lora_adapter_bytes(r); }, page_bytes};

  sim_engine_config cfg;
  const auto& scheduling = schedulers[c.next(static_cast<std::uint32_t>(schedulers.size()))];
  cfg.scheduling = policies::make_scheduling_policy(scheduling);
  cfg.eviction = policies::make_eviction_policy(evictions[c.next(static_cast<std::uint32_t>(evictions.size()))]);
  const std::uint64_t pool = 96 + c.next(400);
  cfg.limits.total_pages = pool;
  cfg.limits.page_tokens = 16;
  cfg.limits.page_bytes = page_bytes;
  cfg.limits.max_running = 1 + c.next(32);
  cfg.limits.token_budget = 256 + c.next(4096);
  cfg.limits.on_demand = c.next(2) == 1;
  cfg.limits.host_pages = c.next(2) == 1 ? c.next(200) : 0;
  cfg.limits.session_pages = c.next(2) == 1 ? c.next(static_cast<std::uint32_t>(pool / 2)) : 0;
  const bool sessions = cfg.limits.session_pages > 0;
  cfg.limits.hidden_page_tokens = c.next(2) == 1 ? 32 : 0;
  cfg.layer_streaming = c.next(2) == 1;
  cfg.advise_lead_s = c.next(2) == 1 ? 0.5 * c.next(8) : -1;
  cfg.cache.prefetch = c.next(2) == 1;
  const std::uint32_t max_context = 512 + c.next(2048);
  cfg.max_context = max_context;
  std::uint64_t partition = 0;
  if (tiers) {
    if (cfg.limits.host_pages > 0 && c.next(2) == 1) {
      cfg.limits.disk_pages = c.next(400);
      cfg.limits.disk_write_back = 0.1 * c.next(10);
      cfg.disk_fetch_by_cost = c.next(2) == 1;
    }
    if (c.next(2) == 1) {
      // As troupe-sim: a full partition means waiting for room.
      partition = 20 + c.next(40);
      cfg.adapter_partition_pages = partition;
      cfg.limits.max_adapter_failures = std::numeric_limits<std::uint32_t>::max();
    }
    if (c.next(2) == 1) {
      cfg.prefetcher = policies::make_prefetch_policy("histogram");
      cfg.cache.predictor_interval_s = 0.5;
    }
  }
  if (c.next(2) == 1) {
    cfg.limits.prefix_caching = true;
    cfg.shared_prefix_tokens = c.next(300);
    cfg.prefix_groups = 1 + c.next(3);
    if (c.next(2) == 1)
      cfg.limits.prefix_idle_pages = c.next(static_cast<std::uint32_t>(pool / 2));
    cfg.limits.prefix_admit_offers = 1 + c.next(2); // every prompt's pages, or from the second prompt on
  }
  const bool prefix = cfg.limits.prefix_caching;
  // LongRoPE: a request growing past this is recomputed (0: none).
  cfg.limits.rope_long_after = c.next(3) == 2 ? 64 + c.next(512) : 0;
  const auto rope_long_after = cfg.limits.rope_long_after;
  const auto where = " (" + scheduling + ", pool " + std::to_string(pool) + ", max_running "
                     + std::to_string(cfg.limits.max_running) + (cfg.limits.on_demand ? ", on demand" : "")
                     + ", host " + std::to_string(cfg.limits.host_pages) + ", session pages "
                     + std::to_string(cfg.limits.session_pages) + ", max_context " + std::to_string(cfg.max_context)
                     + ", disk " + std::to_string(cfg.limits.disk_pages) + ", partition " + std::to_string(partition)
                     + (cfg.prefetcher ? ", prefetcher" : "")
                     + (prefix ? ", prefix caching over " + std::to_string(cfg.shared_prefix_tokens) + " tokens" : "")
                     + (rope_long_after > 0 ? ", recomputed past " + std::to_string(rope_long_after) + " tokens" : "")
                     + ")";
  sim_engine engine{std::move(cfg), std::make_shared<gpu::sim_backend>(shape, gpu_spec, 1), std::move(catalog), pool};

  std::vector<sim_request> reqs;
  double t = 0;
  while (c.more() && reqs.size() < 24) {
    sim_request r;
    t += 0.05 * c.next(40);
    r.arrival_s = t;
    r.prompt_tokens = 1 + c.next(600);
    r.output_tokens = 1 + c.next(96);
    r.adapter_id = c.next(8) % 7; // 0: the base model
    r.session = c.next(4);        // 0: a single turn
    r.think_s = 0.1 * c.next(30);
    reqs.push_back(r);
  }
  if (reqs.empty())
    return false;
  const auto out = engine.run(reqs);
  const auto& totals = engine.totals();
  require(out.size() == reqs.size(), "outcomes for " + std::to_string(out.size()) + " requests" + where);
  const auto& core = engine.core();
  require(core.in_system() == 0,
          std::to_string(core.in_system()) + " requests never ended (" + std::to_string(core.waiting()) + " waiting, "
            + std::to_string(core.admitting()) + " admitting, " + std::to_string(core.running()) + " running; "
            + std::to_string(core.reserved_pages()) + " pages reserved, " + std::to_string(core.session_pages_held())
            + " held by " + std::to_string(core.sessions_cached()) + " session caches, "
            + std::to_string(core.adapter_pages_in_use()) + " by adapters in use, "
            + std::to_string(totals.pool_request_pages_at_end) + " request pages and "
            + std::to_string(totals.pool_adapter_pages_at_end) + " adapter pages in the pool)" + where);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& o = out[i];
    const auto what = "request " + std::to_string(i) + " of " + std::to_string(out.size()) + " (prompt "
                      + std::to_string(reqs[i].prompt_tokens) + ", output " + std::to_string(reqs[i].output_tokens)
                      + ", adapter " + std::to_string(reqs[i].adapter_id) + ", session "
                      + std::to_string(reqs[i].session) + ")" + where;
    // A request can fail only when it can never fit: its context (a later
    // turn's history included, at most max_context) and its adapter
    // together past the pool.
    const auto& r = reqs[i];
    const std::uint64_t context = r.session != 0 ? std::max(max_context, r.prompt_tokens + r.output_tokens)
                                                 : r.prompt_tokens + r.output_tokens;
    const std::uint64_t adapter =
      r.adapter_id == 0 || partition > 0
        ? 0
        : (shape.lora_adapter_bytes(ranks[(r.adapter_id - 1) % 3]) + page_bytes - 1) / page_bytes;
    const bool fits = (context + 15) / 16 + adapter <= pool;
    require(o.reason != finish_reason::adapter_error && o.reason != finish_reason::cancelled
              && (o.reason != finish_reason::error || !fits),
            what + " ended with reason \"" + std::string(to_string(o.reason)) + "\"");
    if (o.reason == finish_reason::length) {
      require(o.completion_tokens == reqs[i].output_tokens, what + ": not all its tokens");
      require(o.ttft_s >= 0 && o.e2e_s >= o.ttft_s, what + ": times out of order");
    }
  }
  // What requests hold at the end is the session caches kept on the GPU
  // and the prefix cache's pages, which nobody reads any more.
  const auto kept = core.session_pages_held();
  const auto cached = core.prefix_cached_pages();
  require(totals.pool_request_pages_at_end == kept + cached,
          std::to_string(totals.pool_request_pages_at_end) + " request pages held at the end, "
            + std::to_string(kept) + " of them session caches, " + std::to_string(cached) + " cached prompt pages"
            + where);
  require(core.prefix_idle_pages() == cached, "cached prompt pages still read at the end" + where);
  require(totals.refused_page_moves == 0, "the pool refused a move of cached pages" + where);
  // The host pool holds session caches only, and as many pages as the core
  // counts.
  require(totals.host_pages_at_end == core.host_pages_held(),
          "the host pool and the scheduler disagree on the pages held" + where);
  if (!sessions)
    require(totals.host_pages_at_end == 0, "host pages held at the end without sessions" + where);
  require(totals.pool_adapter_pages_at_end == totals.cache_pages_at_end, "adapter pages and the cache disagree" + where);
  return true;
}

// -- JSON output ---------------------------------------------------------------

/// A schema, a NUL byte and a text: the schema compiles or is refused saying
/// so; the text is read byte by byte, a refused byte leaving the machine as
/// it was; what it takes whole parses as a JSON object, and short of that
/// some byte always goes on (no dead end).
bool json_output(std::span<const std::uint8_t> in) {
  const auto all = text_of(in);
  const auto nul = all.find('\0');
  const auto text = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  std::shared_ptr<const json_schema> schema;
  try {
    schema = json_schema::compile(all.substr(0, nul));
  } catch (const std::invalid_argument& e) {
    require(std::string_view(e.what()).starts_with("the schema"), std::string("a refusal that says not what: ") + e.what());
    return false;
  }
  schema_machine m(schema);
  std::string taken;
  for (const char c : text) {
    const auto before = m.key();
    if (m.feed(static_cast<unsigned char>(c)))
      taken += c;
    else
      require(m.key() == before, "a refused byte changed the machine after " + taken);
  }
  if (m.complete()) {
    require(nlohmann::json::parse(taken, nullptr, false).is_object(), "a text taken whole is no JSON object: " + taken);
    return true;
  }
  for (int c = 0; c < 256; ++c) {
    auto probe = m;
    if (probe.feed(static_cast<unsigned char>(c)))
      return true;
  }
  throw invariant_broken("a dead end after " + taken);
}

/// A GBNF grammar, a NUL byte and a text: the grammar compiles or is
/// refused saying why; the text goes byte by byte through its machine. A
/// refused byte leaves the machine as it was, one taken whole is taken
/// byte by byte too, and short of a whole sentence some byte goes on
/// (unless the limits refused one: an ambiguous grammar may pass them).
/// A Lark grammar read as GBNF: refused with a line, or GBNF the grammar
/// compiler takes or refuses by its own checks (never a crash, never
/// another error). True when it compiles.
bool lark(std::span<const std::uint8_t> in) {
  const auto text = text_of(in);
  auto g = openai::lark_to_gbnf(text);
  if (auto* e = std::get_if<1>(&g)) {
    require(e->starts_with("line "), "a Lark refusal that names no line: " + *e);
    return false;
  }
  require(std::get<0>(g).find("root ::= ") != std::string::npos, "GBNF from Lark without its root");
  try {
    const held_grammar compiled(std::get<0>(g));
    return true;
  } catch (const std::invalid_argument&) {
    return false; // left recursion, a bound past the limits, ...
  }
}

bool grammar_walk(std::span<const std::uint8_t> in) {
  const auto all = text_of(in);
  const auto nul = all.find('\0');
  const auto text = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  std::shared_ptr<const held_grammar> grammar;
  try {
    grammar = std::make_shared<const held_grammar>(all.substr(0, nul));
  } catch (const std::invalid_argument& e) {
    require(std::string_view(e.what()).size() > 10, std::string("a refusal that says not what: ") + e.what());
    return false;
  }
  grammar_machine m(grammar);
  std::string taken;
  for (const char c : text) {
    const auto before = m.key();
    if (m.step(static_cast<unsigned char>(c)))
      taken += c;
    else
      require(m.key() == before, "a refused byte changed the machine after " + taken);
  }
  grammar_machine whole(grammar);
  require(whole.feed(taken) && whole.key() == m.key(), "the bytes taken one by one are not taken together: " + taken);
  if (m.complete() && !m.extendable())
    return true;
  bool limited = false;
  for (int c = 0; c < 256; ++c) {
    auto probe = m;
    if (probe.step(static_cast<unsigned char>(c)))
      return true;
    limited = limited || probe.refused_by_limits();
  }
  require(m.complete() || limited, "a dead end the limits did not make after " + taken);
  return true;
}

/// A form byte, a schema, a NUL byte and a text: the text goes byte by byte
/// (each byte a token of its own) through a reasoning gate of the form
/// (the opening mark or none; one value, free text with triggers, or a
/// leading trigger; bit 32: the triggers headed, a name "a" or "ab" and
/// "=>" before each value; bit 64: the content the trigger or an answer,
/// a value of the schema). Each step, the split allows exactly the bytes
/// advance takes, a refused byte leaves the state as it was, and short of
/// a whole value some token goes on.
bool reasoning_gate_walk(std::span<const std::uint8_t> in) {
  if (in.empty())
    return false;
  const auto form = in[0];
  const auto all = text_of(in.subspan(1));
  const auto nul = all.find('\0');
  const auto text = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  std::shared_ptr<const json_schema> schema;
  try {
    schema = json_schema::compile(all.substr(0, nul));
  } catch (const std::invalid_argument&) {
    return false;
  }
  // Token 0 the end of the output; 1 to 256 the bytes.
  static const testing::list_tokenizer bytes = [] {
    std::vector<std::string> t{""};
    for (int c = 0; c < 256; ++c)
      t.emplace_back(1, static_cast<char>(c));
    return testing::list_tokenizer(std::move(t));
  }();
  json_vocab vocab(bytes);
  const std::string open = form & 1 ? "<think>" : "";
  const auto answer = form & 64 ? schema : nullptr;
  const auto trigger =
    form & 32 ? std::make_shared<const json_trigger>(vocab, "<c>", "=>", std::vector<trigger_head>{{"a", schema}, {"ab", schema}},
                                                     answer)
              : std::make_shared<const json_trigger>(vocab, "<c>", schema, answer);
  // Bits 3 and 4: the content held to choices or an expression instead.
  static const auto choices =
    std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"no", "not sure", "yes", "{\"n\":1}"});
  static const auto expression = std::make_shared<const held_regex>("[0-9]{1,3}(\\.[0-9]+)?");
  const auto gate = form & 8    ? reasoning_gate(vocab, open, "</think>", held_machine{choice_machine(choices)})
                    : form & 16 ? reasoning_gate(vocab, open, "</think>", held_machine{regex_machine(expression)})
                    : (form & 6) == 0 ? reasoning_gate(vocab, open, "</think>", schema)
                                      : reasoning_gate(vocab, open, "</think>", trigger, (form & 6) == 4);
  const auto machine_key = [](const reasoning_gate::state& a) {
    return std::visit(
      [](const auto& m) {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::monostate>)
          return std::string();
        else
          return m.key();
      },
      a.machine);
  };
  const auto same = [&](const reasoning_gate::state& a, const reasoning_gate::state& b) {
    return a.at == b.at && a.held == b.held && a.matched == b.matched && a.blanks == b.blanks
           && a.complete == b.complete && a.value.has_value() == b.value.has_value()
           && (!a.value || a.value->key() == b.value->key()) && a.trigger.matched == b.trigger.matched
           && a.trigger.leading == b.trigger.leading && a.trigger.head == b.trigger.head
           && a.trigger.value.has_value() == b.trigger.value.has_value()
           && (!a.trigger.value || a.trigger.value->key() == b.trigger.value->key())
           && a.trigger.answer.has_value() == b.trigger.answer.has_value()
           && (!a.trigger.answer || a.trigger.answer->key() == b.trigger.answer->key()) && a.trigger.done == b.trigger.done
           && a.machine.index() == b.machine.index() && machine_key(a) == machine_key(b);
  };
  auto s = gate.begin();
  std::string taken;
  for (const char ch : text) {
    if (s.complete)
      break;
    const auto split = gate.split(s);
    require(!split->allowed.empty(), "a dead end after " + taken);
    const auto token = static_cast<std::int32_t>(static_cast<unsigned char>(ch)) + 1;
    const bool allowed = std::binary_search(split->allowed.begin(), split->allowed.end(), token);
    const auto before = s;
    const bool took = gate.advance(s, std::string_view(&ch, 1));
    require(took == allowed, "the split and advance disagree on a byte after " + taken);
    if (took)
      taken += ch;
    else
      require(same(s, before), "a refused byte changed the state after " + taken);
  }
  return s.complete;
}

/// Files and batches: the first byte picks what the rest is.
///   even: a multipart/form-data upload (its Content-Type the first line):
///         each part's body lies in the body sent; an accepted file reads
///         back whole, and through its text form;
///   odd:  a batch's input file (for the endpoint the byte's next bits
///         pick): accepted lines have unique custom_ids and object bodies;
///         refused, at most 100 errors, each naming a line of the file; a
///         running batch of it reads back the same through its text form.
bool batches(std::span<const std::uint8_t> in) {
  if (in.empty())
    return false;
  const auto pick = in[0];
  const auto rest = text_of(in.subspan(1));
  if ((pick & 1) == 0) {
    const auto nl = rest.find('\n');
    const auto type = rest.substr(0, nl);
    const auto body = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    auto parts = openai::parse_multipart(type, body);
    if (std::holds_alternative<openai::api_error>(parts))
      return false;
    for (const auto& p : std::get<std::vector<openai::form_part>>(parts))
      require(p.body.empty() || body.find(p.body) != std::string_view::npos, "a part's body that is not in the body");
    openai::file_store files(1 << 20);
    int next = 0;
    const openai::file_store::id_maker fresh = [&](std::string_view prefix) {
      return std::string(prefix) + "_" + std::to_string(++next);
    };
    auto made = files.upload(type, body, 0, fresh);
    if (std::holds_alternative<openai::api_error>(made))
      return false;
    const auto id = nlohmann::json::parse(std::get<std::string>(made)).at("id").get<std::string>();
    const auto* kept = files.find(id);
    require(kept != nullptr, "an uploaded file not kept");
    auto content = files.serve("GET", "/" + id + "/content", "");
    require(std::holds_alternative<openai::file_store::served>(content)
              && std::get<openai::file_store::served>(content).body == kept->content,
            "a file's content read back otherwise");
    const auto again = openai::file_store::from_text(openai::file_store::to_text(*kept));
    require(again && again->content == kept->content && again->filename == kept->filename,
            "a file read back otherwise from its text");
    return true;
  }
  const auto endpoint = openai::batch_endpoints[(pick >> 1) % std::size(openai::batch_endpoints)];
  auto read = openai::read_batch_input(rest, endpoint);
  if (auto* errors = std::get_if<std::vector<openai::batch_line_error>>(&read)) {
    require(!errors->empty() && errors->size() <= openai::max_batch_errors, "no errors, or too many listed");
    const auto lines = static_cast<std::size_t>(std::count(rest.begin(), rest.end(), '\n')) + 1;
    for (const auto& e : *errors)
      require(e.line <= lines && !e.code.empty() && !e.message.empty(), "an error naming no line of the file");
    return false;
  }
  auto& lines = std::get<std::vector<openai::batch_line>>(read);
  std::set<std::string> ids;
  for (const auto& l : lines) {
    require(ids.insert(l.custom_id).second, "a custom_id twice");
    require(nlohmann::json::parse(l.body).is_object(), "a line's body that is not an object");
  }
  openai::batch b;
  b.endpoint = endpoint;
  b.status = "in_progress";
  b.total = lines.size();
  b.finished.assign(lines.size(), 0);
  b.finished[0] = 1;
  b.output = openai::batch_output_line("batch_req_1", lines[0].custom_id, 200, "r1", lines[0].body);
  b.error_output = std::string(rest.substr(0, 64));
  b.lines = std::move(lines);
  const auto back = openai::batch_store::from_text(openai::batch_store::to_text(b));
  require(back && back->lines.size() == b.lines.size() && back->finished == b.finished && back->output == b.output
            && back->error_output == b.error_output && back->lines.back().body == b.lines.back().body,
          "a running batch read back otherwise from its text");
  // Its log: an answer of any bytes for its last line, then whatever the
  // input holds. The answer replays byte for byte; no line is answered twice.
  auto replayed = *back;
  const auto last = b.lines.size() - 1;
  const std::string text(rest.substr(rest.size() / 2));
  const auto answered = openai::replay_batch_log(replayed, openai::batch_log_record(last, true, text) + std::string(rest));
  require(answered <= b.lines.size() && replayed.completed + replayed.failed == answered,
          "a log's replay counted otherwise than it answered");
  require(last == 0 || (replayed.finished[last] == 1 && replayed.error_output.starts_with(b.error_output + text)),
          "a logged answer replayed otherwise");
  return true;
}

bool sim(std::span<const std::uint8_t> in) { return run_sim(in, false); }
bool sim_tiers(std::span<const std::uint8_t> in) { return run_sim(in, true); }

constexpr std::array<target, 23> all{{
  {"wire_request", wire_request},
  {"wire_reply", wire_reply},
  {"openai", openai_bodies},
  {"openai_stream", openai_stream},
  {"openai_tools", openai_tools},
  {"openai_responses", openai_responses},
  {"conversations", conversations},
  {"batches", batches},
  {"config", config},
  {"llama_config", llama_config},
  {"safetensors", safetensors},
  {"peft_config", peft_config},
  {"trace", trace},
  {"sim", sim},
  {"sim_tiers", sim_tiers},
  {"json_schema", json_output},
  {"grammar", grammar_walk},
  {"lark", lark},
  {"reasoning_gate", reasoning_gate_walk},
  {"tokenizer_json", tokenizer_json},
  {"bpe_encode", bpe_encode},
  {"jinja", jinja_template},
  {"unicode_norm", unicode_norm},
}};

} // namespace

std::span<const target> targets() { return all; }

const target* find_target(std::string_view name) {
  for (const auto& t : all)
    if (t.name == name)
      return &t;
  return nullptr;
}

} // namespace troupe::fuzz
