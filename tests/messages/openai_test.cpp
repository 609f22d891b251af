// The OpenAI-compatible HTTP API's translations: a completion request into a
// wire generate (checked by the wire parser itself), wire replies into
// OpenAI's objects and events, and errors into HTTP statuses.
#include "messages/openai.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace troupe::openai {
namespace {

using json = nlohmann::json;

completion_request ok(std::string_view body) {
  auto r = parse_completion(body, "llama-2-7b", "h1");
  if (auto* e = std::get_if<api_error>(&r)) {
    ADD_FAILURE() << body << " refused: " << e->message;
    return {};
  }
  return std::get<completion_request>(std::move(r));
}

api_error refused(std::string_view body) {
  auto r = parse_completion(body, "llama-2-7b", "h1");
  if (auto* c = std::get_if<completion_request>(&r)) {
    ADD_FAILURE() << body << " taken: " << c->frame;
    return {};
  }
  return std::get<api_error>(std::move(r));
}

wire::generate_request as_generate(const completion_request& c) {
  auto r = wire::parse_request(c.frame, wire::parse_limits{});
  if (auto* e = std::get_if<wire::parse_error>(&r)) {
    ADD_FAILURE() << c.frame << ": " << e->message;
    return {};
  }
  return std::get<wire::generate_request>(std::get<wire::request>(r));
}

TEST(openai, a_completion_becomes_a_wire_generate_with_its_fields) {
  const auto c = ok(R"({"model":"sql-lora","prompt":"SELECT","max_tokens":7,"temperature":0,"top_p":0.5,
                       "top_k":4,"seed":9,"stop":[";"],"stream":true,"stream_options":{"include_usage":true},
                       "user":"u1","n":1,"echo":false,"logprobs":null,"presence_penalty":0})");
  EXPECT_EQ(c.model, "sql-lora");
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
  const auto g = as_generate(c);
  EXPECT_EQ(g.id, "h1");
  EXPECT_EQ(g.adapter, "sql-lora");
  EXPECT_EQ(g.prompt, "SELECT");
  EXPECT_EQ(g.max_tokens, 7u);
  EXPECT_EQ(g.sampling.temperature, 0.0f);
  EXPECT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_EQ(g.sampling.top_k, 4);
  EXPECT_EQ(g.sampling.seed, 9u);
  EXPECT_EQ(g.stop, std::vector<std::string>{";"});
  EXPECT_TRUE(g.stream);
}

TEST(openai, the_base_models_name_means_no_adapter_and_token_prompts_pass_as_ids) {
  const auto g = as_generate(ok(R"({"model":"llama-2-7b","prompt":[1,2,3]})"));
  EXPECT_EQ(g.adapter, "");
  EXPECT_EQ(g.prompt_tokens, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(g.max_tokens, 16u) << "OpenAI's default and the wire's";
  EXPECT_FALSE(g.stream);
  // A batch of one prompt is that prompt.
  EXPECT_EQ(as_generate(ok(R"({"model":"llama-2-7b","prompt":["Hi"]})")).prompt, "Hi");
  EXPECT_EQ(as_generate(ok(R"({"model":"llama-2-7b","prompt":[[5,6]]})")).prompt_tokens,
            (std::vector<std::int32_t>{5, 6}));
}

TEST(openai, requests_it_cannot_serve_are_refused_naming_the_field) {
  struct row {
    const char* body;
    const char* param;
    const char* says;
  };
  for (const auto& r : std::vector<row>{
         {R"([1])", "", "JSON object"},
         {R"({"model":)", "", "not valid JSON"},
         {R"({"prompt":"x"})", "model", "base model (\"llama-2-7b\")"},
         {R"({"model":"","prompt":"x"})", "model", "GET /v1/models"},
         {R"({"model":"llama-2-7b"})", "prompt", "missing field \"prompt\""},
         {R"({"model":"llama-2-7b","prompt":["a","b"]})", "prompt", "one prompt per request"},
         {R"({"model":"llama-2-7b","prompt":[]})", "prompt", "must not be empty"},
         {R"({"model":"llama-2-7b","prompt":7})", "prompt", "got number"},
         {R"({"model":"llama-2-7b","prompt":"x","n":2})", "n", "not supported"},
         {R"({"model":"llama-2-7b","prompt":"x","logprobs":1})", "logprobs", "not supported"},
         {R"({"model":"llama-2-7b","prompt":"x","echo":true})", "echo", "not supported"},
         {R"({"model":"llama-2-7b","prompt":"x","max_token":3})", "max_token", "unknown field"},
         {R"({"model":"llama-2-7b","prompt":"x","stream":"yes"})", "stream", "true or false"},
         {R"({"model":"llama-2-7b","prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
          "only allowed with"},
         {R"({"model":"llama-2-7b","prompt":"x","stream":true,"stream_options":{"x":1}})", "stream_options",
          "unknown field \"x\""},
         {R"({"model":"llama-2-7b","prompt":"x","user":3})", "user", "must be a string"},
       }) {
    SCOPED_TRACE(r.body);
    const auto e = refused(r.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, r.param);
    EXPECT_NE(e.message.find(r.says), std::string::npos) << e.message;
  }
}

TEST(openai, bad_values_reach_the_wire_parser_which_names_the_field) {
  const auto c = ok(R"({"model":"llama-2-7b","prompt":"x","max_tokens":-5})");
  auto r = wire::parse_request(c.frame, wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(r));
  const auto& e = std::get<wire::parse_error>(r);
  EXPECT_NE(e.message.find("max_tokens"), std::string::npos) << e.message;
  const auto h = from_wire(e.code, e.message);
  EXPECT_EQ(h.status, 400);
  EXPECT_EQ(h.message, e.message);
}

TEST(openai, wire_errors_map_to_http_statuses) {
  using wire::error_code;
  EXPECT_EQ(from_wire(error_code::unknown_adapter, "no adapter").status, 404);
  EXPECT_EQ(from_wire(error_code::unknown_adapter, "no adapter").code, "model_not_found");
  EXPECT_EQ(from_wire(error_code::prompt_too_long, "").code, "context_length_exceeded");
  EXPECT_EQ(from_wire(error_code::overloaded, "").status, 429);
  EXPECT_EQ(from_wire(error_code::shutting_down, "").status, 503);
  EXPECT_EQ(from_wire(error_code::frame_too_large, "").status, 413);
  EXPECT_EQ(from_wire(error_code::internal, "").status, 500);
  EXPECT_EQ(from_wire(error_code::bad_adapter, "").type, "server_error");
  const auto j = json::parse(to_json(from_wire(error_code::unknown_adapter, "no adapter \"x\"")));
  EXPECT_EQ(j["error"]["message"], "no adapter \"x\"");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_TRUE(json::parse(to_json(api_error{}))["error"]["param"].is_null());
}

wire::done_reply done(const char* reason) {
  wire::done_reply d;
  d.id = "h1";
  d.finish_reason = reason;
  d.prompt_tokens = 3;
  d.completion_tokens = 2;
  d.text = "ab";
  return d;
}

TEST(openai, a_whole_completion_is_one_object_with_its_usage) {
  const completion_answer a{"cmpl-1", "sql-lora", 1700000000, false};
  const auto j = json::parse(a.body(done("eos")));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "sql-lora");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << "the end-of-sequence token";
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(json::parse(a.body(done("length")))["choices"][0]["finish_reason"], "length");
}

/// The JSON payloads of a stream's "data:" events ("[DONE]" as a string).
std::vector<json> events(const std::string& sse) {
  std::vector<json> out;
  std::size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const auto end = sse.find("\n\n", pos);
    const auto payload = sse.substr(pos + 6, end - pos - 6);
    out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
    pos = end + 2;
  }
  return out;
}

TEST(openai, a_stream_is_chunks_then_the_finish_then_done) {
  const completion_answer a{"cmpl-2", "llama-2-7b", 1, true};
  wire::token_reply t;
  t.text = "He";
  const auto c = events(a.chunk(t));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0]["text"], "He");
  EXPECT_TRUE(c[0]["choices"][0]["finish_reason"].is_null());
  const auto end = events(a.stream_end(done("stop")));
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(end[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(end[0]["choices"][0]["text"], "");
  EXPECT_TRUE(end[1]["choices"].empty());
  EXPECT_EQ(end[1]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(end[2], "[DONE]");
  const completion_answer no_usage{"cmpl-2", "llama-2-7b", 1, false};
  EXPECT_EQ(events(no_usage.stream_end(done("length"))).size(), 2u);
  const auto err = events(no_usage.stream_error(from_wire(wire::error_code::internal, "boom")));
  ASSERT_EQ(err.size(), 2u);
  EXPECT_EQ(err[0]["error"]["message"], "boom");
  EXPECT_EQ(err[1], "[DONE]");
}

TEST(openai, models_list_the_base_then_the_adapters) {
  wire::adapters_reply r;
  r.adapters = {{"sql", 16, true}, {"geo", 8, false}};
  const auto j = json::parse(models_json("llama-2-7b", r, 5));
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 3u);
  EXPECT_EQ(j["data"][0]["id"], "llama-2-7b");
  EXPECT_EQ(j["data"][1]["id"], "sql");
  EXPECT_EQ(j["data"][1]["parent"], "llama-2-7b");
  EXPECT_EQ(j["data"][2]["rank"], 8);
  EXPECT_EQ(j["data"][2]["resident"], false);
}

TEST(openai, stats_become_prometheus_gauges) {
  wire::stats_reply s;
  s.values = {{"requests_in_flight", 3}, {"kv.blocks-used", 0.5}, {"broken", std::nan("")}};
  EXPECT_EQ(prometheus_text(s), "# TYPE troupe_requests_in_flight gauge\ntroupe_requests_in_flight 3.0\n"
                                "# TYPE troupe_kv_blocks_used gauge\ntroupe_kv_blocks_used 0.5\n");
}

} // namespace
} // namespace troupe::openai
