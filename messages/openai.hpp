// The OpenAI-compatible HTTP API Troupe serves (POST /v1/completions,
// GET /v1/models, GET /health, GET /metrics), as translations to and from the
// wire protocol: a completion request becomes one wire generate frame, and
// the wire replies become OpenAI's completion object or its server-sent
// events. No I/O here; runtime/http_front does the sockets. The wire parser
// stays the one place that validates values (max_tokens, temperature, ...):
// its bad_request messages, which name the field, come back as 400s.
// See docs/protocol.md, "OpenAI-compatible HTTP".
#pragma once

#include "messages/wire.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

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

/// A completion request, translated.
struct completion_request {
  std::string frame;         ///< the wire generate, one JSON object
  std::string model;         ///< as the client named it (the base model or an adapter)
  bool stream = false;
  bool include_usage = false; ///< stream_options.include_usage: a last chunk with the usage
};

/// Translates a POST /v1/completions body. `model` names `base_model` (the
/// base model) or an adapter; one prompt per request (text or token ids);
/// OpenAI's fields Troupe does not implement (n > 1, best_of > 1, echo,
/// logprobs, suffix, penalties, logit_bias) are refused with a message
/// rather than ignored, as are fields it does not know.
std::variant<completion_request, api_error> parse_completion(std::string_view body, std::string_view base_model,
                                                             std::string_view wire_id);

/// The HTTP form of a wire error (a refusal, or a failure after acceptance).
api_error from_wire(wire::error_code code, std::string message);

/// OpenAI's finish_reason for the wire's: "length"; "stop" for a stop
/// string or the end-of-sequence token; "cancelled" stays (the client went
/// away, so nobody reads it).
std::string_view finish_reason(std::string_view wire_reason) noexcept;

/// Builds one completion's answer from its wire replies.
class completion_answer {
public:
  completion_answer(std::string id, std::string model, std::int64_t created, bool include_usage);
  /// Non-streaming: the whole completion object.
  std::string body(const wire::done_reply& done) const;
  /// Streaming: the event for a chunk of tokens ("data: {...}\n\n").
  std::string chunk(const wire::token_reply& t) const;
  /// Streaming: the last events (the chunk with finish_reason, the usage
  /// chunk when asked for, then "data: [DONE]").
  std::string stream_end(const wire::done_reply& done) const;
  /// Streaming: a failure after the response began (headers already sent),
  /// as an error event, then "data: [DONE]".
  std::string stream_error(const api_error& e) const;

private:
  std::string chunk_with(std::string_view text, const char* finish) const;
  std::string id_;
  std::string model_;
  std::int64_t created_;
  bool include_usage_;
};

/// GET /v1/models: the base model, then every adapter (its parent the base).
std::string models_json(std::string_view base_model, const wire::adapters_reply& adapters, std::int64_t created);

/// GET /metrics: the stats reply in Prometheus' text format, each name
/// prefixed "troupe_" (characters Prometheus does not allow become '_');
/// values that are not finite are left out.
std::string prometheus_text(const wire::stats_reply& stats);

} // namespace troupe::openai
