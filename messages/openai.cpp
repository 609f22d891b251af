#include "messages/openai.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

namespace troupe::openai {

using json = nlohmann::json;

namespace {

api_error bad(std::string message, std::string param = {}) {
  api_error e;
  e.status = 400;
  e.code = "bad_request";
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

/// The OpenAI fields Troupe takes, and those it refuses unless they hold
/// the value that means "off".
constexpr std::array<std::string_view, 11> taken{"model", "prompt", "max_tokens", "temperature", "top_p", "top_k",
                                                 "seed", "stop", "stream", "stream_options", "user"};
constexpr std::array<std::string_view, 8> only_off{"n", "best_of", "echo", "logprobs", "suffix",
                                                   "presence_penalty", "frequency_penalty", "logit_bias"};

/// Whether `v` is the value that turns off one of OpenAI's fields Troupe
/// does not serve (n = 1, echo = false, penalties 0, ...), so that clients
/// sending the defaults explicitly are served.
bool is_off(std::string_view field, const json& v) {
  if (v.is_null())
    return true;
  if (field == "n" || field == "best_of")
    return v.is_number() && v.get<double>() == 1.0;
  if (field == "echo")
    return v.is_boolean() && !v.get<bool>();
  if (field == "presence_penalty" || field == "frequency_penalty")
    return v.is_number() && v.get<double>() == 0.0;
  if (field == "logit_bias")
    return v.is_object() && v.empty();
  return false; // logprobs, suffix: only null
}

} // namespace

std::string to_json(const api_error& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", e.code}};
  if (!e.param.empty())
    err["param"] = e.param;
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::variant<completion_request, api_error> parse_completion(std::string_view body, std::string_view base_model,
                                                             std::string_view wire_id) {
  json doc;
  try {
    doc = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    return bad(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!doc.is_object())
    return bad("the body must be a JSON object, got " + std::string(doc.type_name()));
  for (const auto& [key, value] : doc.items()) {
    if (std::find(taken.begin(), taken.end(), key) != taken.end())
      continue;
    if (std::find(only_off.begin(), only_off.end(), key) != only_off.end()) {
      if (!is_off(key, value))
        return bad("field \"" + key + "\" is not supported with the value " + value.dump()
                     + " (Troupe returns one choice, without log-probabilities, echo, suffix, penalties or "
                       "logit bias); leave it out",
                   key);
      continue;
    }
    return bad("unknown field \"" + key + "\" in a completion request", key);
  }

  completion_request out;
  const auto model = doc.find("model");
  if (model == doc.end() || !model->is_string() || model->get<std::string>().empty())
    return bad("field \"model\" must name the base model (\"" + std::string(base_model)
                 + "\") or an adapter (GET /v1/models lists them)",
               "model");
  out.model = model->get<std::string>();

  json gen = {{"type", "generate"}, {"id", wire_id}};
  if (out.model != base_model)
    gen["adapter"] = out.model;

  const auto prompt = doc.find("prompt");
  if (prompt == doc.end() || prompt->is_null())
    return bad("missing field \"prompt\": a string, or an array of token ids", "prompt");
  if (prompt->is_string()) {
    gen["prompt"] = *prompt;
  } else if (prompt->is_array()) {
    const json* one = &*prompt;
    // A batch of one is the same request.
    if (prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
      one = &(*prompt)[0];
    if (one->is_string()) {
      gen["prompt"] = *one;
    } else {
      if (one->empty())
        return bad("field \"prompt\" must not be empty", "prompt");
      for (const auto& t : *one)
        if (!t.is_number())
          return bad("field \"prompt\" holds one prompt per request: a string, or an array of token ids (got an "
                       "array holding " + std::string(t.type_name()) + "); send several prompts as several requests",
                     "prompt");
      gen["prompt_tokens"] = *one;
    }
  } else {
    return bad("field \"prompt\" must be a string or an array of token ids, got " + std::string(prompt->type_name()), "prompt");
  }

  // Passed on as given: the wire parser checks them and names the field.
  for (const char* key : {"max_tokens", "temperature", "top_p", "top_k", "seed", "stop"})
    if (auto v = doc.find(key); v != doc.end() && !v->is_null())
      gen[key] = *v;

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
    for (const auto& [key, value] : so->items()) {
      if (key != "include_usage")
        return bad("unknown field \"" + key + "\" in \"stream_options\"", "stream_options");
      if (!value.is_boolean())
        return bad("field \"stream_options.include_usage\" must be true or false, got " + value.dump(),
                   "stream_options");
      out.include_usage = value.get<bool>();
    }
  }
  if (auto u = doc.find("user"); u != doc.end() && !u->is_null() && !u->is_string())
    return bad("field \"user\" must be a string, got " + std::string(u->type_name()), "user");
  out.frame = gen.dump(-1, ' ', false, json::error_handler_t::replace);
  return out;
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

std::string_view finish_reason(std::string_view wire_reason) noexcept {
  if (wire_reason == "eos")
    return "stop";
  return wire_reason;
}

completion_answer::completion_answer(std::string id, std::string model, std::int64_t created, bool include_usage)
  : id_(std::move(id)), model_(std::move(model)), created_(created), include_usage_(include_usage) {
}

namespace {

json usage_of(const wire::done_reply& d) {
  return {{"prompt_tokens", d.prompt_tokens},
          {"completion_tokens", d.completion_tokens},
          {"total_tokens", d.prompt_tokens + d.completion_tokens}};
}

std::string event(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

} // namespace

std::string completion_answer::body(const wire::done_reply& done) const {
  json choice = {{"text", done.text.value_or("")},
                 {"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", finish_reason(done.finish_reason)}};
  json j = {{"id", id_},           {"object", "text_completion"}, {"created", created_},
            {"model", model_},     {"choices", json::array({choice})}, {"usage", usage_of(done)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string completion_answer::chunk_with(std::string_view text, const char* finish) const {
  json choice = {{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (finish != nullptr)
    choice["finish_reason"] = finish;
  json j = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_},
            {"choices", json::array({choice})}};
  return event(j);
}

std::string completion_answer::chunk(const wire::token_reply& t) const {
  return chunk_with(t.text, nullptr);
}

std::string completion_answer::stream_end(const wire::done_reply& done) const {
  const std::string reason(finish_reason(done.finish_reason));
  auto out = chunk_with("", reason.c_str());
  if (include_usage_) {
    json j = {{"id", id_},      {"object", "text_completion"}, {"created", created_},
              {"model", model_}, {"choices", json::array()},   {"usage", usage_of(done)}};
    out += event(j);
  }
  return out + "data: [DONE]\n\n";
}

std::string completion_answer::stream_error(const api_error& e) const {
  return "data: " + to_json(e) + "\n\ndata: [DONE]\n\n";
}

std::string models_json(std::string_view base_model, const wire::adapters_reply& adapters, std::int64_t created) {
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
  return json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string prometheus_text(const wire::stats_reply& stats) {
  std::string out;
  for (const auto& [name, value] : stats.values) {
    if (!std::isfinite(value))
      continue;
    std::string metric = "troupe_";
    for (const char c : name)
      metric += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
    json v = value; // shortest form that reads back the same
    out += "# TYPE " + metric + " gauge\n" + metric + " " + v.dump() + "\n";
  }
  return out;
}

} // namespace troupe::openai
