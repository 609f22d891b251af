#include "messages/responses.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <charconv>
#include <utility>

namespace troupe::openai {

namespace {

// In the request's key order (a template shows the tools as they are
// given), and the response's fields in OpenAI's order.
using json = nlohmann::ordered_json;

api_error bad(std::string message, std::string param) {
  return bad_request(std::move(message), std::move(param));
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

template <std::size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view key) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

/// The Responses fields that go to the chat as they are (OpenAI's that
/// both share, and vLLM's sampling fields), and those renamed.
constexpr std::array<std::string_view, 22> passed{
  "model",         "temperature", "top_p",          "stream",      "parallel_tool_calls", "user",
  "safety_identifier", "prompt_cache_key", "metadata", "service_tier", "top_logprobs",       "seed",
  "top_k",         "min_p",       "repetition_penalty", "presence_penalty", "frequency_penalty", "stop",
  "logit_bias",    "priority",    "session",        "stream_options"};
constexpr std::array<std::string_view, 14> own{
  "input", "instructions", "max_output_tokens", "tools", "tool_choice", "text", "reasoning", "include", "store",
  "previous_response_id", "conversation", "background", "truncation", "max_tool_calls"};

/// Chat and wire fields and the Responses fields they came from, for
/// errors (the longer first where one begins another).
constexpr std::array<std::pair<std::string_view, std::string_view>, 8> renamed{{
  {"messages", "input"},
  {"response_format.json_schema", "text.format"},
  {"response_format", "text.format"},
  {"json_schema", "text.format"},
  {"max_completion_tokens", "max_output_tokens"},
  {"max_tokens", "max_output_tokens"},
  {"reasoning_effort", "reasoning.effort"},
  {"logprobs", "include"},
}};

/// A content part's text: input_text (or output_text, refusal, sent
/// back from an answer).
std::variant<std::string, api_error> part_text(const json& part, const std::string& at) {
  const auto type = part.is_object() ? part.value("type", json()) : json();
  if (type == "input_text" || type == "output_text" || type == "text") {
    const auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      return bad("\"" + at + ".text\" must be a string", "input");
    return t->get<std::string>();
  }
  if (type == "refusal" && part.contains("refusal") && part["refusal"].is_string())
    return part["refusal"].get<std::string>();
  return bad("\"" + at + ".type\" is " + (type.is_null() ? std::string("missing") : type.dump())
               + ": Troupe serves text parts (\"input_text\", and an answer's \"output_text\")",
             "input");
}

/// A message's content: a string, or its text parts (as chat text parts,
/// which the chat joins by newlines).
std::variant<json, api_error> content_of(const json& content, const std::string& at) {
  if (content.is_string())
    return content;
  if (!content.is_array() || content.empty())
    return bad("\"" + at + ".content\" must be a string or a non-empty array of text parts", "input");
  json parts = json::array();
  for (std::size_t j = 0; j < content.size(); ++j) {
    auto t = part_text(content[j], at + ".content[" + std::to_string(j) + "]");
    if (auto* e = std::get_if<api_error>(&t))
      return std::move(*e);
    parts.push_back({{"type", "text"}, {"text", std::get<std::string>(std::move(t))}});
  }
  return parts;
}

/// A reasoning item's text: its content's reasoning_text parts, or its
/// summary's where it has no content.
std::variant<std::string, api_error> reasoning_text(const json& item, const std::string& at) {
  if (const auto enc = item.find("encrypted_content"); enc != item.end() && !enc->is_null())
    return bad("\"" + at + ".encrypted_content\" cannot be read by Troupe (it gives reasoning as text); send the "
               "item's content",
               "input");
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const auto list = item.find(key);
    if (list == item.end() || list->is_null())
      continue;
    if (!list->is_array())
      return bad("\"" + at + "." + key + "\" must be an array of text parts", "input");
    for (std::size_t j = 0; j < list->size(); ++j) {
      const auto& p = (*list)[j];
      if (!p.is_object() || !p.contains("text") || !p["text"].is_string())
        return bad("\"" + at + "." + key + "[" + std::to_string(j) + "]\" must be a text part", "input");
      text += (text.empty() ? "" : "\n") + p["text"].get<std::string>();
    }
    if (!text.empty())
      break;
  }
  return text;
}

/// `input` (and `instructions`) as chat messages, with where each came
/// from: messages as they are, a run of function calls as one assistant
/// message's tool_calls (the assistant message just before them, where
/// one is), each call's output as a tool message, and a reasoning item as
/// the next assistant message's reasoning_content.
/// An `item_reference` item (`{"type": "item_reference", "id"}`) in
/// place of the item it names: one before it, an earlier turn's or this
/// input's.
std::optional<api_error> resolve_reference(json& items, std::size_t i, const std::string& at,
                                           const std::string& field) {
  auto& item = items[i];
  if (!item.is_object() || item.value("type", json()) != "item_reference")
    return std::nullopt;
  const auto id = item.find("id");
  if (id == item.end() || !id->is_string())
    return bad("\"" + at + ".id\" must name an item (a string)", field);
  for (std::size_t k = 0; k < i; ++k)
    if (items[k].is_object() && items[k].value("id", json()) == *id) {
      item = json(items[k]); // (itself no reference: those before it are resolved)
      item.erase("id");      // a copy: an item of its own, listed under an id of its own
      return std::nullopt;
    }
  return bad("\"" + at + "\" refers to item " + id->get<std::string>().substr(0, 80)
               + ", which is not among the items before it (a conversation's items, the output items of the "
                 "responses previous_response_id names, or this input's)",
             field);
}

/// (`own`, where given, is set to the request's own items, references
/// resolved.)
std::optional<api_error> read_input(const json& doc, const json& prior, json& messages,
                                    std::vector<std::int64_t>& input_of, const std::string& field = "input",
                                    json* own_items = nullptr) {
  if (const auto ins = doc.find("instructions"); ins != doc.end() && !ins->is_null()) {
    if (!ins->is_string())
      return bad("field \"instructions\" must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", *ins}});
    input_of.push_back(-1);
  }
  const auto given = doc.find("input");
  if (given == doc.end() || given->is_null())
    return bad("missing field \"input\": a string, or an array of messages and items", field);
  if (!given->is_string() && (!given->is_array() || given->empty()))
    return bad("field \"input\" must be a string or a non-empty array of messages and items", field);
  // The earlier turns' items, then this one's.
  json items = prior;
  const auto own = static_cast<std::int64_t>(prior.size());
  if (given->is_string())
    items.push_back({{"role", "user"}, {"content", *given}});
  else
    items.insert(items.end(), given->begin(), given->end());
  const json* input = &items;
  std::string thought; // a reasoning item's, for the next assistant message
  bool calls_open = false; // the last message is an assistant's that calls may join
  for (std::size_t i = 0; i < input->size(); ++i) {
    const auto here = static_cast<std::int64_t>(i) - own; // the request's own index (negative: earlier)
    const auto at = here >= 0 ? field + "[" + std::to_string(here) + "]" : "an earlier response's item";
    if (auto e = resolve_reference(items, i, at, field))
      return e;
    const auto& item = (*input)[i];
    if (!item.is_object())
      return bad("\"" + at + "\" must be an object", field);
    if (const auto id = item.find("id"); id != item.end() && !id->is_null() && !id->is_string())
      return bad("\"" + at + ".id\" must be a string", field);
    const auto type = item.contains("type") && !item["type"].is_null() ? item["type"] : json("message");
    if (!type.is_string())
      return bad("\"" + at + ".type\" must be a string", field);
    const auto t = type.get<std::string>();
    const auto with_thought = [&](json m) {
      if (!thought.empty())
        m["reasoning_content"] = std::exchange(thought, {});
      return m;
    };
    // A reasoning item belongs to the assistant turn right after it: a
    // message of another role before one drops it (a thought of a turn
    // that gave no message, as an answer cut short in its thinking).
    if (t != "reasoning" && t != "function_call" && !(t == "message" && item.value("role", json()) == "assistant"))
      thought.clear();
    if (t == "message") {
      for (const auto& [key, value] : item.items())
        if (key != "type" && key != "role" && key != "content" && key != "id" && key != "status")
          return bad("field \"" + at + "." + key + "\" is not supported in a message (role, content)", field);
      const auto role = item.value("role", json());
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        return bad("\"" + at + ".role\" must be \"user\", \"system\", \"developer\" or \"assistant\"", field);
      auto content = content_of(item.value("content", json()), at);
      if (auto* e = std::get_if<api_error>(&content))
        return std::move(*e);
      json m = {{"role", role}, {"content", std::get<json>(std::move(content))}};
      if (role == "assistant")
        m = with_thought(std::move(m));
      messages.push_back(std::move(m));
      input_of.push_back(here >= 0 ? here : -2);
      calls_open = role == "assistant";
    } else if (t == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string())
          return bad("\"" + at + "." + key + "\" must be a string", field);
      json call = {{"id", item["call_id"]},
                   {"type", "function"},
                   {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      if (!calls_open || !thought.empty()) {
        messages.push_back(with_thought({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}));
        input_of.push_back(here >= 0 ? here : -2);
        calls_open = true;
      }
      auto& last = messages.back();
      if (!last.contains("tool_calls"))
        last["tool_calls"] = json::array();
      last["tool_calls"].push_back(std::move(call));
    } else if (t == "function_call_output") {
      const auto id = item.find("call_id");
      if (id == item.end() || !id->is_string())
        return bad("\"" + at + ".call_id\" must name the call it answers (a string)", field);
      const auto output = item.find("output");
      if (output == item.end() || (!output->is_string() && !output->is_array()))
        return bad("\"" + at + ".output\" must be a string or an array of text parts", field);
      auto content = content_of(*output, at);
      if (auto* e = std::get_if<api_error>(&content))
        return std::move(*e);
      messages.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", std::get<json>(std::move(content))}});
      input_of.push_back(here >= 0 ? here : -2);
      calls_open = false;
    } else if (t == "reasoning") {
      auto text = reasoning_text(item, at);
      if (auto* e = std::get_if<api_error>(&text))
        return std::move(*e);
      thought += (thought.empty() ? "" : "\n") + std::get<std::string>(text);
      calls_open = false;
    } else {
      return bad("\"" + at + ".type\" is \"" + t
                   + "\": Troupe serves \"message\", \"function_call\", \"function_call_output\" and \"reasoning\" "
                     "items",
                 field);
    }
  }
  if (own_items != nullptr)
    *own_items = json(items.begin() + own, items.end());
  return std::nullopt;
}

/// The function tools as the chat takes them; tool_choice too.
std::optional<api_error> read_tools(const json& doc, json& chat) {
  if (const auto tools = doc.find("tools"); tools != doc.end() && !tools->is_null()) {
    if (!tools->is_array())
      return bad("field \"tools\" must be an array of function tools", "tools");
    json list = json::array();
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const auto& t = (*tools)[i];
      const auto at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", json()) != "function")
        return bad("\"" + at + "\" must be a function tool ({\"type\": \"function\", \"name\", \"parameters\"}); Troupe "
                   "serves no built-in tools",
                   "tools");
      json fn = json::object();
      for (const auto& [key, value] : t.items()) {
        if (key == "type")
          continue;
        if (key != "name" && key != "description" && key != "parameters" && key != "strict")
          return bad("field \"" + at + "." + key + "\" is not supported (name, description, parameters, strict)",
                     "tools");
        if (!value.is_null())
          fn[key] = value;
      }
      list.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(list);
  }
  if (const auto choice = doc.find("tool_choice"); choice != doc.end() && !choice->is_null()) {
    if (choice->is_object()) {
      if (choice->value("type", json()) != "function" || !choice->contains("name") || choice->size() != 2)
        return bad("field \"tool_choice\" must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                   "\"name\"}",
                   "tool_choice");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
    } else {
      chat["tool_choice"] = *choice;
    }
  }
  return std::nullopt;
}

/// text.format as the chat's response_format; reasoning.effort as its
/// reasoning_effort; include's logprobs as its logprobs.
std::optional<api_error> read_shaping(const json& doc, json& chat) {
  if (const auto text = doc.find("text"); text != doc.end() && !text->is_null()) {
    if (!text->is_object())
      return bad("field \"text\" must be an object ({\"format\"})", "text");
    for (const auto& [key, value] : text->items()) {
      if (key == "verbosity") {
        if (!value.is_null() && value != "medium")
          return bad("field \"text.verbosity\" is served only as \"medium\" (the model writes as it does)",
                     "text.verbosity");
      } else if (key == "format") {
        if (value.is_null())
          continue;
        if (!value.is_object() || !value.contains("type"))
          return bad("field \"text.format\" must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                     "{\"type\": \"json_schema\", \"name\", \"schema\"}",
                     "text.format");
        if (value["type"] == "json_schema") {
          json schema = value;
          schema.erase("type");
          chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
        } else {
          chat["response_format"] = value;
        }
      } else {
        return bad("field \"text." + key + "\" is not supported (format, verbosity)", "text");
      }
    }
  }
  if (const auto r = doc.find("reasoning"); r != doc.end() && !r->is_null()) {
    if (!r->is_object())
      return bad("field \"reasoning\" must be an object ({\"effort\", \"summary\"})", "reasoning");
    for (const auto& [key, value] : r->items()) {
      if (key == "effort") {
        if (!value.is_null())
          chat["reasoning_effort"] = value;
      } else if (key == "summary" || key == "generate_summary") {
        // Troupe gives the reasoning itself (the reasoning item's
        // content), not a summary of it: any is taken.
        if (!value.is_null() && value != "auto" && value != "concise" && value != "detailed")
          return bad("field \"reasoning." + key + "\" must be \"auto\", \"concise\" or \"detailed\"", "reasoning");
      } else {
        return bad("field \"reasoning." + key + "\" is not supported (effort, summary)", "reasoning");
      }
    }
  }
  if (const auto top = doc.find("top_logprobs"); top != doc.end() && !top->is_null() && *top != json(0)) {
    const auto inc = doc.find("include");
    if (inc == doc.end() || !inc->is_array()
        || std::find(inc->begin(), inc->end(), json("message.output_text.logprobs")) == inc->end())
      return bad("field \"top_logprobs\" needs \"include\": [\"message.output_text.logprobs\"]", "top_logprobs");
  }
  if (const auto inc = doc.find("include"); inc != doc.end() && !inc->is_null()) {
    if (!inc->is_array())
      return bad("field \"include\" must be an array of strings", "include");
    for (const auto& v : *inc) {
      if (v == "message.output_text.logprobs")
        chat["logprobs"] = true;
      else if (v != "reasoning.encrypted_content") // none given: the reasoning is its text
        return bad("field \"include\" holds " + v.dump()
                     + ": Troupe serves \"message.output_text.logprobs\" and \"reasoning.encrypted_content\"",
                   "include");
    }
  }
  return std::nullopt;
}

/// What needs a stored conversation (or, without a store, a stored
/// response), or another mode.
std::optional<api_error> read_refused(const json& doc, bool stored, bool conversations) {
  const auto given = [&](const char* key) { return doc.contains(key) && !doc[key].is_null(); };
  if (given("conversation") && !conversations)
    return bad("field \"conversation\" needs a stored conversation: Troupe keeps none here ([http] "
               "conversation_store_mb = 0); send the whole conversation in \"input\"",
               "conversation");
  if (given("conversation") && given("previous_response_id"))
    return bad("fields \"conversation\" and \"previous_response_id\" cannot both be given: a response goes on from "
               "one or the other",
               "conversation");
  if (!stored && given("previous_response_id"))
    return bad("field \"previous_response_id\" needs a stored response: Troupe stores none here ([http] "
               "response_store_mb = 0); send the whole conversation in \"input\"",
               "previous_response_id");
  if (const auto v = doc.find("store"); v != doc.end() && !v->is_null() && !v->is_boolean())
    return bad("field \"store\" must be true or false", "store");
  const auto off = [&](const char* key, const json& neutral, const char* why) -> std::optional<api_error> {
    if (const auto v = doc.find(key); v != doc.end() && !v->is_null() && *v != neutral)
      return bad(std::string("field \"") + key + "\" is served only as " + neutral.dump() + " (" + why + "), got "
                   + v->dump().substr(0, 80),
                 key);
    return std::nullopt;
  };
  if (!stored)
    if (auto e = off("store", false, "Troupe stores no responses here ([http] response_store_mb = 0)"))
      return e;
  if (const auto v = doc.find("background"); v != doc.end() && !v->is_null()) {
    if (!v->is_boolean())
      return bad("field \"background\" must be true or false", "background");
    if (v->get<bool>()) {
      if (!stored)
        return bad("field \"background\" needs a stored response, read with GET /v1/responses/ID: Troupe stores "
                   "none here ([http] response_store_mb = 0)",
                   "background");
      if (doc.value("store", json(true)) == json(false))
        return bad("field \"background\" needs \"store\": true (the response is read with GET /v1/responses/ID)",
                   "background");
    }
  }
  if (const auto v = doc.find("truncation"); v != doc.end() && !v->is_null() && *v != "auto" && *v != "disabled")
    return bad("field \"truncation\" must be \"auto\" (the earliest items of the conversation it goes on from are "
               "dropped where the prompt would not fit the context) or \"disabled\" (such a prompt is refused), got "
                 + v->dump().substr(0, 80),
               "truncation");
  if (const auto v = doc.find("max_tool_calls"); v != doc.end() && !v->is_null())
    return bad("field \"max_tool_calls\" is not supported (parallel_tool_calls false keeps one call)",
               "max_tool_calls");
  return std::nullopt;
}

} // namespace

std::variant<response_request, api_error>
parse_response_request(std::string_view body, std::string_view base_model, std::string_view wire_id,
                       const chat_template& tpl, const std::function<bool(const std::string&)>& enforceable,
                       const sampling_defaults& defaults, const earlier_turns& earlier,
                       std::string_view new_session, const earlier_turns& conversations, std::size_t drop_earlier) {
  json doc;
  try {
    doc = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return bad(std::string("the body is not valid JSON: ") + e.what(), "");
  }
  if (!doc.is_object())
    return bad("the body must be a JSON object, got " + std::string(doc.type_name()), "");
  json chat = json::object();
  response_request out;
  for (const auto& [key, value] : doc.items()) {
    if (in(passed, key))
      chat[key] = value;
    else if (!in(own, key))
      return bad("unknown field \"" + key + "\" in a response request", key);
  }
  if (const auto m = doc.find("max_output_tokens"); m != doc.end() && !m->is_null())
    chat["max_completion_tokens"] = *m;
  json messages = json::array();
  if (auto e = read_refused(doc, static_cast<bool>(earlier), static_cast<bool>(conversations))) // first: what cannot be served at all
    return std::move(*e);
  json prior = json::array();
  std::string session(new_session);
  // The items and session of what the response goes on from (a kept
  // response, or a kept conversation).
  const auto go_on_from = [&](const earlier_turns& kept, const std::string& id) -> std::optional<api_error> {
    auto turns = kept(id);
    if (auto* e = std::get_if<api_error>(&turns))
      return std::move(*e);
    auto& c = std::get<conversation>(turns);
    prior = json::parse(c.items);
    session = std::move(c.session);
    return std::nullopt;
  };
  if (const auto p = doc.find("previous_response_id"); p != doc.end() && !p->is_null()) {
    if (!p->is_string())
      return bad("field \"previous_response_id\" must be a string", "previous_response_id");
    out.previous_id = p->get<std::string>();
    if (auto e = go_on_from(earlier, out.previous_id))
      return std::move(*e);
  }
  bool in_conversation = false;
  const auto cut_earlier = [&]() -> std::optional<api_error> {
    // Truncation: the places the earlier items may be cut (each leaves them
    // beginning with a user's message, or none left), and the cut asked for.
    out.truncate = doc.value("truncation", json()) == "auto";
    if (!out.truncate)
      return std::nullopt;
    for (std::size_t k = 1; k <= prior.size(); ++k)
      if (k == prior.size()
          || (prior[k].is_object() && prior[k].value("type", json("message")) == "message"
              && prior[k].value("role", json()) == "user"))
        out.cuts.push_back(k);
    if (drop_earlier == 0)
      return std::nullopt;
    if (std::find(out.cuts.begin(), out.cuts.end(), drop_earlier) == out.cuts.end())
      return bad("the earlier items cannot be cut after " + std::to_string(drop_earlier), "truncation");
    prior.erase(prior.begin(), prior.begin() + static_cast<std::ptrdiff_t>(drop_earlier));
    out.dropped = drop_earlier;
    return std::nullopt;
  };
  if (const auto c = doc.find("conversation"); c != doc.end() && !c->is_null()) {
    const auto id = c->is_object() ? c->value("id", json()) : *c;
    if (!id.is_string() || (c->is_object() && c->size() != 1))
      return bad("field \"conversation\" must be a conversation's id, or an object {\"id\": its id}", "conversation");
    out.conversation = id.get<std::string>();
    if (auto e = go_on_from(conversations, out.conversation))
      return std::move(*e);
    in_conversation = true;
  }
  if (auto e = cut_earlier())
    return std::move(*e);
  out.store = static_cast<bool>(earlier) && doc.value("store", json(true)) != json(false);
  out.background = doc.value("background", json(false)) == json(true);
  // The session a kept conversation runs in (the request's own first).
  if (const auto own = doc.find("session"); own != doc.end() && own->is_string())
    out.session = own->get<std::string>();
  else if ((out.store || in_conversation) && !session.empty())
    out.session = session;
  if (!out.session.empty())
    chat["session"] = out.session;
  json own_items;
  if (auto e = read_input(doc, prior, messages, out.input_of, "input", &own_items))
    return std::move(*e);
  out.input_items = dump(own_items); // (an item_reference as the item it names)
  chat["messages"] = std::move(messages);
  if (auto e = read_tools(doc, chat))
    return std::move(*e);
  if (auto e = read_shaping(doc, chat))
    return std::move(*e);

  // The settings the response repeats, as OpenAI's response object has them.
  json echo = {{"instructions", doc.value("instructions", json())},
               {"max_output_tokens", doc.value("max_output_tokens", json())},
               {"parallel_tool_calls", doc.value("parallel_tool_calls", json(true))},
               {"temperature", doc.value("temperature", json())},
               {"top_p", doc.value("top_p", json())},
               {"tool_choice", doc.contains("tool_choice") && !doc["tool_choice"].is_null() ? doc["tool_choice"]
                                                                                              : json("auto")},
               {"tools", doc.contains("tools") && doc["tools"].is_array() ? doc["tools"] : json::array()},
               {"text", {{"format", doc.contains("text") && doc["text"].is_object() && doc["text"].contains("format")
                                      && !doc["text"]["format"].is_null()
                                      ? doc["text"]["format"]
                                      : json{{"type", "text"}}}}},
               {"reasoning", {{"effort", doc.contains("reasoning") && doc["reasoning"].is_object()
                                           ? doc["reasoning"].value("effort", json())
                                           : json()},
                              {"summary", nullptr}}},
               {"metadata", doc.contains("metadata") && doc["metadata"].is_object() ? doc["metadata"] : json::object()},
               {"user", doc.value("user", json())},
               {"store", out.store},
               {"background", out.background},
               {"truncation", out.truncate ? "auto" : "disabled"},
               {"previous_response_id", out.previous_id.empty() ? json() : json(out.previous_id)}};
  if (in_conversation)
    echo["conversation"] = {{"id", out.conversation}};
  out.echo = dump(echo);

  auto parsed = parse_chat_completion(dump(chat), base_model, wire_id, tpl, enforceable, defaults);
  if (auto* e = std::get_if<api_error>(&parsed))
    return as_response_error(std::move(*e), out);
  out.chat = std::get<completion_request>(std::move(parsed));
  out.chat.include_usage = true; // the response's usage comes at the stream's end
  if (const auto m = doc.find("max_output_tokens"); m != doc.end() && m->is_number_unsigned())
    out.output_room = std::max<std::uint64_t>(1, m->get<std::uint64_t>());
  return out;
}

std::string tokenize_frame(const response_request& r, std::string_view wire_id) {
  const auto frame = json::parse(r.chat.frames.at(0));
  return dump(json{{"type", "tokenize"}, {"id", wire_id}, {"prompt", frame.at("prompt")}});
}

std::string input_tokens_json(const wire::tokenize_reply& r) {
  return dump(json{{"object", "response.input_tokens"}, {"input_tokens", r.tokens.size()}});
}

api_error as_response_error(api_error e, const response_request& request) {
  // The wire names no param: the field its message begins with.
  if (constexpr std::string_view field = "field \""; e.param.empty() && e.message.starts_with(field)) {
    const auto name = e.message.substr(field.size(), e.message.find_first_of("\".[", field.size()) - field.size());
    if (in(passed, name) || std::any_of(renamed.begin(), renamed.end(), [&](const auto& r) { return r.first == name; }))
      e.param = name;
  }
  for (const auto& [from, to] : renamed)
    if (e.param == from) {
      e.param = std::string(to);
      break;
    }
  // The message's own path: "messages[K]..." quoted at its start (the chat
  // writes them so), K the input item it came from; and the field a
  // message begins with (`field "response_format..."`), renamed. Text the
  // message quotes from the request is left as it is.
  auto& m = e.message;
  for (const std::string_view lead : {std::string_view("\""), std::string_view("field \"")}) {
    if (!m.starts_with(lead))
      continue;
    const auto at = lead.size();
    if (constexpr std::string_view index = "messages["; m.compare(at, index.size(), index) == 0) {
      const auto digits = at + index.size();
      std::size_t k = 0;
      const auto [end, ec] = std::from_chars(m.data() + digits, m.data() + std::min(m.size(), digits + 9), k);
      if (ec == std::errc() && end < m.data() + m.size() && *end == ']' && k < request.input_of.size()) {
        const auto where = request.input_of[k] >= 0   ? "input[" + std::to_string(request.input_of[k]) + "]"
                           : request.input_of[k] == -1 ? std::string("instructions")
                                                       : std::string("an earlier response's item");
        m.replace(at, static_cast<std::size_t>(end + 1 - m.data()) - at, where);
      }
      continue;
    }
    for (const auto& [from, to] : renamed) {
      const auto after = at + from.size();
      if (m.compare(at, from.size(), from) == 0 && after < m.size() && (m[after] == '"' || m[after] == '.')) {
        m.replace(at, from.size(), to);
        break;
      }
    }
  }
  return e;
}

// -- the answer ---------------------------------------------------------------

struct response_answer::state {
  std::string id;
  std::int64_t created;
  completion_request request;
  json echo;
  completion_answer chat;
  std::uint64_t seq = 0;
  json output = json::array();
  std::optional<std::size_t> open; ///< the output item being written
  std::string finish;              ///< the chat's finish_reason, once it came
  json usage;
  std::string pending; ///< a chat event not yet whole
  std::optional<std::string> finished; ///< the response object, once the stream ended

  state(std::string id_, std::int64_t created_, const completion_request& r, std::string_view echo_text)
      : id(std::move(id_)), created(created_), request(r), echo(json::parse(echo_text)),
        chat("chatcmpl-" + id.substr(id.find('_') + 1), created_, r) {}

  std::string emit(const char* type, json fields) {
    fields["type"] = type;
    fields["sequence_number"] = seq++;
    return std::string("event: ") + type + "\ndata: " + dump(fields) + "\n\n";
  }

  std::string status() const {
    return finish == "length" ? "incomplete" : "completed";
  }

  json response(const std::string& st) const {
    json r = {{"id", id},       {"object", "response"}, {"created_at", created},
              {"status", st},   {"error", nullptr},     {"incomplete_details", nullptr},
              {"model", request.model}, {"output", output}};
    if (st == "incomplete")
      r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    for (const auto& [key, value] : echo.items())
      r[key] = value;
    r["usage"] = nullptr;
    if (usage.is_object()) {
      const auto in_tokens = usage.value("prompt_tokens", 0ULL);
      const auto out_tokens = usage.value("completion_tokens", 0ULL);
      std::uint64_t cached = 0, reasoning = 0;
      if (usage.contains("prompt_tokens_details"))
        cached = usage["prompt_tokens_details"].value("cached_tokens", 0ULL);
      if (usage.contains("completion_tokens_details"))
        reasoning = usage["completion_tokens_details"].value("reasoning_tokens", 0ULL);
      r["usage"] = {{"input_tokens", in_tokens},
                    {"input_tokens_details", {{"cached_tokens", cached}}},
                    {"output_tokens", out_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", reasoning}}},
                    {"total_tokens", in_tokens + out_tokens}};
    }
    return r;
  }

  std::string item_id(const char* prefix) const {
    return std::string(prefix) + "_" + id.substr(id.find('_') + 1) + "_" + std::to_string(output.size());
  }

  /// Opens an output item of `type` (closing the one open): added, and
  /// for text, its part.
  std::string open_item(json item) {
    std::string out = close_open();
    open = output.size();
    output.push_back(item);
    if (item["type"] == "function_call")
      return out + emit("response.output_item.added", {{"output_index", *open}, {"item", std::move(item)}});
    // Added with no content: the part comes in its own event (a client
    // that builds the response from the events appends it there).
    auto part = std::move(item["content"][0]);
    item["content"] = json::array();
    out += emit("response.output_item.added", {{"output_index", *open}, {"item", item}});
    return out + emit("response.content_part.added",
                      {{"item_id", item["id"]}, {"output_index", *open}, {"content_index", 0}, {"part", std::move(part)}});
  }

  std::string close_open() {
    if (!open)
      return {};
    const auto k = *std::exchange(open, std::nullopt);
    auto& item = output[k];
    item["status"] = status();
    std::string out;
    const json where = {{"item_id", item["id"]}, {"output_index", k}};
    if (item["type"] == "function_call") {
      json f = where;
      f["arguments"] = item["arguments"];
      f["name"] = item["name"];
      out += emit("response.function_call_arguments.done", std::move(f));
    } else {
      const auto& part = item["content"][0];
      json f = where;
      f["content_index"] = 0;
      f["text"] = part["text"];
      if (item["type"] == "message")
        f["logprobs"] = part["logprobs"];
      out += emit(item["type"] == "message" ? "response.output_text.done" : "response.reasoning_text.done", f);
      f.erase("text");
      f.erase("logprobs");
      f["part"] = part;
      out += emit("response.content_part.done", std::move(f));
    }
    out += emit("response.output_item.done", {{"output_index", k}, {"item", item}});
    return out;
  }

  bool open_is(const char* type) const {
    return open && output[*open]["type"] == type;
  }

  /// One chat chunk's delta as the response's events.
  std::string delta(const json& choice) {
    std::string out;
    const auto& d = choice.at("delta");
    if (const auto r = d.find("reasoning_content"); r != d.end() && r->is_string() && !r->get_ref<const std::string&>().empty()) {
      if (!open_is("reasoning"))
        out += open_item({{"id", item_id("rs")},
                          {"type", "reasoning"},
                          {"status", "in_progress"},
                          {"summary", json::array()},
                          {"content", json::array({{{"type", "reasoning_text"}, {"text", ""}}})}});
      auto& part = output[*open]["content"][0];
      part["text"].get_ref<std::string&>() += r->get_ref<const std::string&>(); // in place: no copy a token
      out += emit("response.reasoning_text.delta",
                  {{"item_id", output[*open]["id"]}, {"output_index", *open}, {"content_index", 0}, {"delta", *r}});
    }
    if (const auto c = d.find("content"); c != d.end() && c->is_string() && !c->get_ref<const std::string&>().empty()) {
      if (!open_is("message"))
        out += open_item({{"id", item_id("msg")},
                          {"type", "message"},
                          {"status", "in_progress"},
                          {"role", "assistant"},
                          {"content", json::array({{{"type", "output_text"},
                                                    {"text", ""},
                                                    {"annotations", json::array()},
                                                    {"logprobs", json::array()}}})}});
      auto& part = output[*open]["content"][0];
      part["text"].get_ref<std::string&>() += c->get_ref<const std::string&>();
      json lps = json::array();
      if (const auto lp = choice.find("logprobs"); lp != choice.end() && lp->is_object())
        for (const auto& t : lp->value("content", json::array())) {
          lps.push_back(t);
          part["logprobs"].push_back(t);
        }
      out += emit("response.output_text.delta", {{"item_id", output[*open]["id"]},
                                                 {"output_index", *open},
                                                 {"content_index", 0},
                                                 {"delta", *c},
                                                 {"logprobs", std::move(lps)}});
    }
    if (const auto calls = d.find("tool_calls"); calls != d.end())
      for (const auto& tc : *calls) {
        const auto& fn = tc.at("function");
        if (tc.contains("id"))
          out += open_item({{"id", item_id("fc")},
                            {"type", "function_call"},
                            {"status", "in_progress"},
                            {"call_id", tc["id"]},
                            {"name", fn.value("name", "")},
                            {"arguments", ""}});
        const auto args = fn.value("arguments", "");
        if (args.empty() || !open_is("function_call"))
          continue;
        auto& item = output[*open];
        item["arguments"].get_ref<std::string&>() += args;
        out += emit("response.function_call_arguments.delta",
                    {{"item_id", item["id"]}, {"output_index", *open}, {"delta", args}});
      }
    return out;
  }

  /// The chat's events ("data: {...}\n\n", "data: [DONE]") as the
  /// response's.
  std::string translate(const std::string& sse) {
    std::string out;
    pending += sse;
    for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const auto event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (!event.starts_with("data: "))
        continue;
      const auto data = std::string_view(event).substr(6);
      if (data == "[DONE]") {
        out += close_open();
        const auto st = status();
        auto r = response(st);
        finished = dump(r);
        out += emit(st == "completed" ? "response.completed" : "response.incomplete", {{"response", std::move(r)}});
        continue;
      }
      const auto j = json::parse(data);
      if (j.contains("error")) {
        const auto& e = j["error"];
        out += emit("error", {{"code", e.value("code", json())}, {"message", e.value("message", json())},
                              {"param", e.value("param", json())}});
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object())
        usage = j["usage"];
      if (!j.contains("choices") || j["choices"].empty())
        continue;
      const auto& choice = j["choices"][0];
      out += delta(choice);
      if (const auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
        finish = f->get<std::string>();
        out += close_open();
      }
    }
    return out;
  }
};

response_answer::response_answer(std::string id, std::int64_t created, const response_request& request)
    : s_(std::make_unique<state>(std::move(id), created, request.chat, request.echo)) {}
response_answer::~response_answer() = default;
response_answer::response_answer(response_answer&&) noexcept = default;
response_answer& response_answer::operator=(response_answer&&) noexcept = default;

std::string response_answer::stream_start() {
  std::string out = s_->emit("response.created", {{"response", s_->response("in_progress")}});
  out += s_->emit("response.in_progress", {{"response", s_->response("in_progress")}});
  (void)s_->chat.stream_start(); // the role chunk: nothing of the response's
  return out;
}

std::string response_answer::chunk(std::size_t k, const wire::token_reply& t) {
  return s_->translate(s_->chat.chunk(k, t));
}

std::string response_answer::choice_end(std::size_t k, const wire::done_reply& done) {
  return s_->translate(s_->chat.choice_end(k, done));
}

std::string response_answer::stream_end() {
  return s_->translate(s_->chat.stream_end());
}

std::string response_answer::stream_error(const api_error& e) {
  // The error, then the response failed with it: a client waiting for a
  // terminal event (completed, incomplete, failed) gets one.
  std::string out =
    s_->emit("error", {{"code", e.code}, {"message", e.message}, {"param", e.param.empty() ? json() : json(e.param)}});
  auto failed = s_->response("failed");
  failed["error"] = {{"code", e.code}, {"message", e.message}};
  return out + s_->emit("response.failed", {{"response", std::move(failed)}});
}

std::string response_answer::error_event(const api_error& e) {
  return s_->emit("error",
                  {{"code", e.code}, {"message", e.message}, {"param", e.param.empty() ? json() : json(e.param)}});
}

std::optional<std::string> response_answer::finished() const {
  return s_->finished;
}

std::string response_answer::snapshot(std::string_view status, const api_error* error) const {
  auto r = s_->response(std::string(status));
  r["output"] = json::array();
  if (error != nullptr)
    r["error"] = {{"code", error->code}, {"message", error->message}};
  return dump(r);
}

std::vector<std::string> path_parts(std::string_view rest) {
  std::vector<std::string> out;
  if (rest.starts_with('/'))
    rest.remove_prefix(1);
  if (rest.empty())
    return out;
  for (;;) {
    const auto slash = rest.find('/');
    out.push_back(percent_decoded(rest.substr(0, slash)));
    if (slash == std::string_view::npos)
      return out;
    rest.remove_prefix(slash + 1); // (a last '/' leaves an empty part)
  }
}

std::optional<std::vector<std::string>> named_parts(std::string_view rest) {
  if (!rest.starts_with('/') || rest.size() == 1)
    return std::nullopt;
  auto parts = path_parts(rest);
  if (std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); }))
    return std::nullopt;
  return parts;
}

std::vector<std::pair<std::string, std::string>> query_pairs(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty())
      continue;
    const auto eq = pair.find('=');
    out.emplace_back(percent_decoded(pair.substr(0, eq)),
                     eq == std::string_view::npos ? std::string() : percent_decoded(pair.substr(eq + 1)));
  }
  return out;
}


event_log::event_log(std::string all) {
  add(all);
}

void event_log::add(std::string_view events) {
  // Each event ends with a blank line; its data is one line of JSON, which
  // holds no raw line break.
  const auto base = text_.size();
  text_ += events;
  for (std::size_t at = 0; at < events.size();) {
    starts_.push_back(base + at);
    const auto end = events.find("\n\n", at);
    at = end == std::string_view::npos ? events.size() : end + 2;
  }
}

std::string_view event_log::from(std::size_t first) const noexcept {
  if (first >= starts_.size())
    return {};
  return std::string_view(text_).substr(starts_[first]);
}

std::variant<retrieve_query, api_error> parse_retrieve_query(std::string_view query) {
  retrieve_query q;
  bool stream_given = false;
  for (const auto& [key, value] : query_pairs(query)) {
    if (key == "stream") {
      if (value != "true" && value != "false")
        return bad_request("query parameter \"stream\" must be true or false, got \"" + value.substr(0, 40) + "\"",
                           "stream");
      q.stream = value == "true";
      stream_given = true;
    } else if (key == "starting_after") {
      if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos)
        return bad_request("query parameter \"starting_after\" must be an event's sequence number (an integer from 0), "
                           "got \"" + value.substr(0, 40) + "\"",
                           "starting_after");
      q.starting_after = std::stoull(value);
    } else if (key != "include" && key != "include[]" && key != "include_obfuscation") {
      return bad_request("query parameter \"" + key.substr(0, 40)
                           + "\" is not served: GET /v1/responses/ID takes stream, starting_after, include and "
                             "include_obfuscation",
                         key.substr(0, 40));
    }
  }
  if (q.starting_after && !(stream_given && q.stream))
    return bad_request("query parameter \"starting_after\" needs stream=true (it names the event after which the "
                       "stream starts)",
                       "starting_after");
  return q;
}

std::variant<std::string, api_error> resolve_input_items(std::string_view prior, std::string_view items,
                                                         const std::string& field) {
  const auto given = json::parse(items, nullptr, false);
  if (!given.is_array())
    return bad("field \"" + field + "\" must be an array of items", field);
  if (given.empty())
    return std::string("[]");
  auto before = json::parse(prior, nullptr, false);
  if (!before.is_array())
    before = json::array();
  json messages = json::array();
  std::vector<std::int64_t> input_of;
  json own;
  if (auto e = read_input(json{{"input", given}}, before, messages, input_of, field, &own)) {
    e->param = field;
    return std::move(*e);
  }
  return dump(own);
}

std::string listed_items(std::string_view items, std::string_view tail) {
  auto listed = json::parse(items);
  for (std::size_t k = 0; k < listed.size(); ++k) {
    auto& item = listed[k];
    if (!item.is_object())
      continue;
    const auto given = item.find("type");
    const std::string type = given != item.end() && given->is_string() ? given->get<std::string>() : "message";
    if (type == "message") {
      item["type"] = "message";
      const bool assistant = item.value("role", json()) == "assistant";
      if (const auto c = item.find("content"); c != item.end() && c->is_string())
        *c = json::array({{{"type", assistant ? "output_text" : "input_text"}, {"text", *c}}});
    }
    if (!item.contains("id") || !item["id"].is_string()) {
      const char* prefix = type == "message"                ? "msg"
                           : type == "function_call"        ? "fc"
                           : type == "function_call_output" ? "fco"
                           : type == "reasoning"            ? "rs"
                                                            : "item";
      item["id"] = std::string(prefix) + "_" + std::string(tail) + std::to_string(k);
    }
  }
  return dump(listed);
}

std::variant<std::string, api_error> items_page(std::string_view listed, std::string_view query,
                                                std::string_view what, std::string_view path) {
  std::size_t limit = 20;
  bool ascending = false;
  std::optional<std::string> after;
  for (const auto& [key, value] : query_pairs(query)) {
    if (key == "limit") {
      if (value.empty() || value.size() > 3 || value.find_first_not_of("0123456789") != std::string::npos
          || std::stoul(value) < 1 || std::stoul(value) > 100)
        return bad_request("query parameter \"limit\" must be an integer from 1 to 100, got \"" + value.substr(0, 40)
                             + "\"",
                           "limit");
      limit = std::stoul(value);
    } else if (key == "order") {
      if (value != "asc" && value != "desc")
        return bad_request("query parameter \"order\" must be \"asc\" or \"desc\", got \"" + value.substr(0, 40) + "\"",
                           "order");
      ascending = value == "asc";
    } else if (key == "after") {
      after = value;
    } else if (key != "include" && key != "include[]") {
      return bad_request("query parameter \"" + key.substr(0, 40) + "\" is not served: " + std::string(path)
                           + " takes limit, order, after and include",
                         key.substr(0, 40));
    }
  }
  auto items = json::parse(listed);
  if (!ascending)
    std::reverse(items.begin(), items.end());
  std::size_t first = 0;
  if (after) {
    const auto at = std::find_if(items.begin(), items.end(), [&](const json& i) {
      return i.is_object() && i.value("id", json()) == json(*after);
    });
    if (at == items.end())
      return bad_request("query parameter \"after\": no item \"" + after->substr(0, 80) + "\" in " + std::string(what),
                         "after");
    first = static_cast<std::size_t>(at - items.begin()) + 1;
  }
  json data = json::array();
  for (auto k = first; k < items.size() && data.size() < limit; ++k)
    data.push_back(items[k]);
  const bool more = first + data.size() < items.size();
  json page = {{"object", "list"},
               {"data", data},
               {"first_id", data.empty() ? json() : data.front().value("id", json())},
               {"last_id", data.empty() ? json() : data.back().value("id", json())},
               {"has_more", more}};
  return dump(page);
}

std::variant<std::string, api_error> input_items_page(std::string_view response_id, std::string_view input_items,
                                                      std::string_view query) {
  const auto tail = std::string(response_id.substr(response_id.find('_') + 1)) + "_in";
  return items_page(listed_items(input_items, tail), query, "response " + std::string(response_id),
                    "GET /v1/responses/ID/input_items");
}

response_state response_state_of(std::string_view body) {
  response_state out;
  const auto j = json::parse(body, nullptr, false);
  if (!j.is_object())
    return out;
  if (const auto st = j.find("status"); st != j.end() && st->is_string())
    out.status = st->get<std::string>();
  out.background = j.value("background", json(false)) == json(true);
  if (const auto c = j.find("conversation"); c != j.end() && c->is_object())
    if (const auto id = c->find("id"); id != c->end() && id->is_string())
      out.conversation = id->get<std::string>();
  return out;
}

std::string failed_snapshot(std::string_view body, const api_error& error) {
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object())
    return std::string(body);
  j["status"] = "failed";
  j["error"] = {{"code", error.code}, {"message", error.message}};
  return dump(j);
}

conversation conversation_of(const std::vector<const response_store::entry*>& turns) {
  json items = json::array();
  for (const auto* t : turns) {
    for (auto& item : json::parse(t->input_items))
      items.push_back(std::move(item));
    auto body = json::parse(t->body); // (held: a range over a temporary's member would dangle)
    for (auto& item : body.at("output"))
      items.push_back(std::move(item));
  }
  return {dump(items), turns.empty() ? std::string() : turns.front()->session};
}

std::string response_answer::body(const std::vector<wire::done_reply>& done) const {
  // The whole response is the stream's last: the same reading of the
  // output into items, its tokens one chunk each where their texts make
  // the output (so each token's log-probability goes with its text).
  state s(s_->id, s_->created, s_->request, dump(s_->echo));
  const auto& d = done.at(0);
  (void)s.chat.stream_start();
  const std::string text = d.text.value_or("");
  std::string joined;
  if (d.logprobs)
    for (const auto& lp : *d.logprobs)
      joined += lp.sampled.text;
  if (d.logprobs && joined == text) {
    for (std::size_t i = 0; i < d.logprobs->size(); ++i) {
      wire::token_reply t;
      t.index = static_cast<std::uint32_t>(i);
      t.text = (*d.logprobs)[i].sampled.text;
      t.logprobs.push_back((*d.logprobs)[i]);
      (void)s.translate(s.chat.chunk(0, t));
    }
  } else {
    wire::token_reply t;
    t.text = text;
    if (d.logprobs)
      t.logprobs = *d.logprobs;
    (void)s.translate(s.chat.chunk(0, t));
  }
  (void)s.translate(s.chat.choice_end(0, d));
  (void)s.translate(s.chat.stream_end());
  return dump(s.response(s.status()));
}

} // namespace troupe::openai
