// The OpenAI-compatible HTTP API's translations: a completion request into a
// wire generate (checked by the wire parser itself), wire replies into
// OpenAI's objects and events, and errors into HTTP statuses.
#include "messages/openai.hpp"

#include "messages/version.hpp"
#include "tests/messages/chat_templates.hpp"
#include "tests/messages/builtin_template.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <limits>

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
    ADD_FAILURE() << body << " taken: " << c->frames.at(0);
    return {};
  }
  return std::get<api_error>(std::move(r));
}

/// Choice `k`'s wire generate (the only one, by default).
wire::generate_request as_generate(const completion_request& c, std::size_t k = 0, std::size_t choices = 1) {
  EXPECT_EQ(c.frames.size(), choices);
  EXPECT_EQ(c.ids.size(), c.frames.size());
  if (k >= c.frames.size())
    return {};
  auto r = wire::parse_request(c.frames[k], wire::parse_limits{});
  if (auto* e = std::get_if<wire::parse_error>(&r)) {
    ADD_FAILURE() << c.frames[k] << ": " << e->message;
    return {};
  }
  auto g = std::get<wire::generate_request>(std::get<wire::request>(r));
  EXPECT_EQ(g.id, c.ids[k]);
  return g;
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
  EXPECT_TRUE(g.session.empty());
  EXPECT_EQ(as_generate(ok(R"({"model":"m","prompt":"p","session":"conv-7"})")).session, "conv-7")
    << "Troupe's own field: the turn reuses the session's KV";
  // OpenAI's include_obfuscation is taken (no chunk is padded), the usage asked apart.
  EXPECT_FALSE(ok(R"({"model":"m","prompt":"p","stream":true,"stream_options":{"include_obfuscation":true}})").include_usage);
  EXPECT_TRUE(ok(R"({"model":"m","prompt":"p","stream":true,"stream_options":{"include_obfuscation":false,)"
                 R"("include_usage":true}})")
                .include_usage);
  EXPECT_EQ(refused(R"({"model":"m","prompt":"p","stream":true,"stream_options":{"include_obfuscation":1}})").param,
            "stream_options");
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

TEST(openai, several_prompts_and_n_choices_become_one_wire_generate_each_in_openais_order) {
  const auto c = ok(R"({"model":"sql-lora","prompt":["a",[5,6]],"n":2,"seed":10,"max_tokens":3})");
  ASSERT_EQ(c.frames.size(), 4u);
  EXPECT_EQ(c.n, 2u);
  EXPECT_EQ(c.ids, (std::vector<std::string>{"h1.0", "h1.1", "h1.2", "h1.3"}));
  for (std::size_t k = 0; k < 4; ++k) {
    const auto g = as_generate(c, k, 4);
    EXPECT_EQ(g.adapter, "sql-lora");
    EXPECT_EQ(g.max_tokens, 3u);
    EXPECT_EQ(g.sampling.seed, 10u + k % 2) << "a prompt's choices differ by seed";
    if (k < 2)
      EXPECT_EQ(g.prompt, "a");
    else
      EXPECT_EQ(g.prompt_tokens, (std::vector<std::int32_t>{5, 6}));
  }
  // Without a seed each choice draws its own (the server's per-request seed).
  EXPECT_FALSE(as_generate(ok(R"({"model":"m","prompt":"a","n":3})"), 2, 3).sampling.seed.has_value());
  // A chat's n choices.
  const auto tpl = std::get<chat_template>(make_chat_template("chatml"));
  const auto chat = parse_chat_completion(R"({"model":"m","n":2,"messages":[{"role":"user","content":"q"}]})",
                                          "llama-2-7b", "h9", tpl);
  ASSERT_TRUE(std::holds_alternative<completion_request>(chat));
  EXPECT_EQ(std::get<completion_request>(chat).ids, (std::vector<std::string>{"h9.0", "h9.1"}));
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
         {R"({"model":"llama-2-7b","prompt":"x","max_tokens":1e999})", "", "number overflow"},
         {R"({"prompt":"x"})", "model", "base model (\"llama-2-7b\")"},
         {R"({"model":"","prompt":"x"})", "model", "GET /v1/models"},
         {R"({"model":"llama-2-7b"})", "prompt", "missing field \"prompt\""},
         {R"({"model":"llama-2-7b","prompt":["a",[1,2],3]})", "prompt", "an array of those"},
         {R"({"model":"llama-2-7b","prompt":["a",[]]})", "prompt", "an array of those"},
         {R"({"model":"llama-2-7b","prompt":[]})", "prompt", "non-empty string or array"},
         {R"({"model":"llama-2-7b","prompt":7})", "prompt", "got 7"},
         {R"({"model":"llama-2-7b","prompt":"x","n":0})", "n", "an integer in [1, 64]"},
         {R"({"model":"llama-2-7b","prompt":"x","n":1.5})", "n", "an integer in [1, 64]"},
         {R"({"model":"llama-2-7b","prompt":"x","n":65})", "n", "an integer in [1, 64]"},
         {R"({"model":"llama-2-7b","prompt":["a","b","c"],"n":22})", "prompt", "66 choices; at most 64"},
         {R"({"model":"llama-2-7b","prompt":"x","best_of":0})", "best_of", "an integer in [1, 64]"},
         {R"({"model":"llama-2-7b","prompt":"x","best_of":"2"})", "best_of", "an integer in [1, 64]"},
         {R"({"model":"llama-2-7b","prompt":"x","n":3,"best_of":2})", "best_of", "at least \"n\" (3)"},
         {R"({"model":"llama-2-7b","prompt":"x","best_of":2,"stream":true})", "best_of", "cannot be streamed"},
         {R"({"model":"llama-2-7b","prompt":"x","n":2,"best_of":65})", "best_of", "an integer in [1, 64]"},
         {R"({"model":"llama-2-7b","prompt":["a","b"],"best_of":33})", "prompt", "66 choices; at most 64"},
         {R"({"model":"llama-2-7b","prompt":"x","suffix":"y"})", "suffix", "not supported"},
         {R"({"model":"llama-2-7b","prompt":"x","echo":1})", "echo", "true or false"},
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
  auto r = wire::parse_request(c.frames.at(0), wire::parse_limits{});
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

/// What parse_completion or parse_chat_completion would give for these.
completion_request answered(std::string model, bool include_usage, bool chat = false,
                            std::vector<std::string> stop = {}) {
  completion_request c;
  c.model = std::move(model);
  c.include_usage = include_usage;
  c.chat = chat;
  c.stop = std::move(stop);
  return c;
}

TEST(openai, a_whole_completion_is_one_object_with_its_usage) {
  const completion_answer a{"cmpl-1", 1700000000, answered("sql-lora", false)};
  const auto j = json::parse(a.body({done("eos")}));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "sql-lora");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << "the end-of-sequence token";
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_FALSE(j["usage"].contains("prompt_tokens_details")) << "nothing read from a cache";
  EXPECT_EQ(json::parse(a.body({done("length")}))["choices"][0]["finish_reason"], "length");
  // Prompt tokens read from a cache: OpenAI's prompt_tokens_details.
  auto cached = done("length");
  cached.cached_tokens = 2;
  EXPECT_EQ(json::parse(a.body({cached}))["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

/// A one-choice stream's last events: the choice's end, then the stream's.
std::string end_of(completion_answer& a, const wire::done_reply& d) {
  auto out = a.choice_end(0, d);
  return out + a.stream_end();
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

TEST(openai, continuous_usage_puts_each_choices_usage_so_far_in_every_chunk) {
  // vLLM's stream_options.continuous_usage_stats, with include_usage.
  const auto asked = ok(R"({"model":"m","prompt":"p","stream":true,)"
                        R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  EXPECT_TRUE(asked.continuous_usage);
  EXPECT_FALSE(ok(R"({"model":"m","prompt":"p","stream":true,"stream_options":{"continuous_usage_stats":true}})")
                 .continuous_usage); // (vLLM's: only with the usage asked for)
  EXPECT_FALSE(ok(R"({"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}})").continuous_usage);
  EXPECT_EQ(refused(R"({"model":"m","prompt":"p","stream":true,"stream_options":{"continuous_usage_stats":1}})").param,
            "stream_options");
  for (const bool chat : {false, true}) {
    auto c = answered("m", true, chat);
    c.continuous_usage = true;
    completion_answer a{"cmpl-9", 1, c};
    a.accepted(0, 3);
    const auto start = events(a.stream_start());
    if (chat) {
      ASSERT_EQ(start.size(), 1u);
      EXPECT_EQ(start[0]["usage"], json::parse(R"({"prompt_tokens":3,"completion_tokens":0,"total_tokens":3})"));
    }
    wire::token_reply t;
    t.tokens = {7};
    t.text = "a";
    const auto first = events(a.chunk(0, t));
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0]["usage"], json::parse(R"({"prompt_tokens":3,"completion_tokens":1,"total_tokens":4})")) << chat;
    t.index = 1;
    t.text = "b";
    const auto second = events(a.chunk(0, t));
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(second[0]["usage"]["completion_tokens"], 2);
    auto d = done("length");
    const auto end = events(end_of(a, d));
    ASSERT_GE(end.size(), 3u); // the finish, the usage, [DONE]
    EXPECT_EQ(end[end.size() - 3]["usage"]["completion_tokens"], 2);
    EXPECT_EQ(end[end.size() - 2]["usage"]["total_tokens"], 5);
    EXPECT_EQ(end.back(), "[DONE]");
  }
  // Without it, chunks carry no usage.
  completion_answer plain{"cmpl-8", 1, answered("m", true)};
  plain.accepted(0, 3);
  wire::token_reply t;
  t.tokens = {7};
  t.text = "a";
  EXPECT_FALSE(events(plain.chunk(0, t))[0].contains("usage"));
}

TEST(openai, a_stream_is_chunks_then_the_finish_then_done) {
  completion_answer a{"cmpl-2", 1, answered("llama-2-7b", true)};
  EXPECT_EQ(a.stream_start(), "") << "a text completion's stream opens with its first chunk";
  wire::token_reply t;
  t.text = "He";
  const auto c = events(a.chunk(0, t));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0]["text"], "He");
  EXPECT_TRUE(c[0]["choices"][0]["finish_reason"].is_null());
  auto read = done("stop");
  read.cached_tokens = 1;
  const auto end = events(end_of(a, read));
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(end[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(end[0]["choices"][0]["text"], "");
  EXPECT_TRUE(end[1]["choices"].empty());
  EXPECT_EQ(end[1]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(end[1]["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  EXPECT_EQ(end[2], "[DONE]");
  completion_answer no_usage{"cmpl-2", 1, answered("llama-2-7b", false)};
  EXPECT_EQ(events(end_of(no_usage, done("length"))).size(), 2u);
  const auto err = events(no_usage.stream_error(from_wire(wire::error_code::internal, "boom")));
  ASSERT_EQ(err.size(), 2u);
  EXPECT_EQ(err[0]["error"]["message"], "boom");
  EXPECT_EQ(err[1], "[DONE]");
}

TEST(openai, an_answer_of_several_choices_indexes_them_and_counts_each_prompt_once) {
  auto c = answered("m", true, false, {";"});
  c.n = 2;
  c.frames.resize(4); // two prompts, two choices each
  completion_answer a{"cmpl-9", 1, c};
  std::vector<wire::done_reply> dones(4, done("length"));
  dones[0].prompt_tokens = dones[1].prompt_tokens = 3;
  dones[2].prompt_tokens = dones[3].prompt_tokens = 4;
  dones[3].text = "x;y";
  const auto j = json::parse(a.body(dones));
  ASSERT_EQ(j["choices"].size(), 4u);
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_EQ(j["choices"][k]["index"], k);
  EXPECT_EQ(j["choices"][3]["text"], "x");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7) << "each prompt once";
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  // A prompt's cached tokens are the fewest its choices read: the first
  // choice computed the prompt that the second read (n choices share it).
  auto read = dones;
  read[0].cached_tokens = 0;
  read[1].cached_tokens = 3;
  read[2].cached_tokens = 2;
  read[3].cached_tokens = 3;
  EXPECT_EQ(json::parse(a.body(read))["usage"]["prompt_tokens_details"]["cached_tokens"], 2);

  // Streamed: each chunk names its choice; each choice holds its own text
  // back; the usage and [DONE] come once, at the end.
  wire::token_reply t;
  t.text = "ab;";
  EXPECT_EQ(events(a.chunk(1, t))[0]["choices"][0]["index"], 1);
  t.text = "c";
  EXPECT_EQ(events(a.chunk(2, t))[0]["choices"][0]["text"], "c");
  EXPECT_EQ(a.chunk(1, t), "") << "choice 1 met its stop string";
  for (std::size_t k = 0; k < 4; ++k) {
    const auto end = events(a.choice_end(k, dones[k]));
    ASSERT_EQ(end.size(), 1u);
    EXPECT_EQ(end[0]["choices"][0]["index"], k);
    EXPECT_EQ(end[0]["choices"][0]["finish_reason"], "length");
  }
  const auto last = events(a.stream_end());
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0]["usage"]["prompt_tokens"], 7);
  EXPECT_FALSE(last[0]["usage"].contains("prompt_tokens_details"));
  EXPECT_EQ(last[0]["usage"]["total_tokens"], 15);
  EXPECT_EQ(last[1], "[DONE]");
  // A chat's stream opens with the role once for each choice.
  auto cc = answered("m", false, true);
  cc.n = 2;
  cc.frames.resize(2);
  const auto start = events(completion_answer{"chatcmpl-1", 1, cc}.stream_start());
  ASSERT_EQ(start.size(), 2u);
  EXPECT_EQ(start[1]["choices"][0]["index"], 1);
  EXPECT_EQ(start[1]["choices"][0]["delta"]["role"], "assistant");
}

TEST(openai, the_text_ends_before_the_first_stop_string_as_openai_returns_it) {
  EXPECT_EQ(ok(R"({"model":"m","prompt":"p","stop":"END"})").stop, std::vector<std::string>{"END"});
  EXPECT_EQ(ok(R"({"model":"m","prompt":"p","stop":[";","\n"]})").stop, (std::vector<std::string>{";", "\n"}));
  const completion_answer a{"cmpl-3", 1, answered("m", false, false, {";", "\n"})};
  auto d = done("stop");
  d.text = "SELECT 1\n;x"; // the token that completed ";" brought "x" too
  EXPECT_EQ(json::parse(a.body({d}))["choices"][0]["text"], "SELECT 1") << "the first of the stop strings";
  d.text = "no stop";
  EXPECT_EQ(json::parse(a.body({d}))["choices"][0]["text"], "no stop");
}

/// The text a stream's events carry, joined.
std::string streamed_text(const std::vector<std::string>& sse) {
  std::string out;
  for (const auto& s : sse)
    for (const auto& e : events(s))
      if (e.is_object() && e.contains("choices") && !e["choices"].empty())
        out += e["choices"][0].value("text", "");
  return out;
}

TEST(openai, a_stream_holds_back_what_may_begin_a_stop_string_until_the_next_chunk_tells) {
  auto tokens = [](const char* text) {
    wire::token_reply t;
    t.text = text;
    return t;
  };
  {
    completion_answer a{"c", 1, answered("m", false, false, {"</end>"})};
    EXPECT_EQ(streamed_text({a.chunk(0, tokens("ab</"))}), "ab");
    EXPECT_EQ(a.chunk(0, tokens("e")), "") << "\"</e\" may still become \"</end>\"";
    EXPECT_EQ(streamed_text({a.chunk(0, tokens("nd>tail"))}), "") << "it did: nothing from it on";
    EXPECT_EQ(a.chunk(0, tokens("more")), "");
    const auto end = events(end_of(a, done("stop")));
    ASSERT_EQ(end.size(), 2u);
    EXPECT_EQ(end[0]["choices"][0]["text"], "");
    EXPECT_EQ(end[0]["choices"][0]["finish_reason"], "stop");
  }
  {
    completion_answer a{"c", 1, answered("m", false, false, {"</end>"})};
    std::vector<std::string> sse{a.chunk(0, tokens("x</")), a.chunk(0, tokens("y"))};
    EXPECT_EQ(streamed_text(sse), "x</y") << "a false start is sent once it is one";
    sse = {a.chunk(0, tokens("z</en")), end_of(a, done("length"))};
    EXPECT_EQ(streamed_text(sse), "z</en") << "what is held at the end is the output's end";
  }
  {
    // "b" is found, but "abc" may begin before it: the earliest wins, as in
    // the whole answer ("dabce" ends before "abc").
    completion_answer a{"c", 1, answered("m", false, false, {"b", "abc"})};
    std::vector<std::string> sse{a.chunk(0, tokens("dab")), a.chunk(0, tokens("ce"))};
    EXPECT_EQ(streamed_text(sse), "d");
    completion_answer at_end{"c", 1, answered("m", false, false, {"b", "abc"})};
    sse = {at_end.chunk(0, tokens("dab")), end_of(at_end, done("stop"))};
    EXPECT_EQ(streamed_text(sse), "da") << "the output ended at \"b\"";
    completion_answer other{"c", 1, answered("m", false, false, {"b", "abc"})};
    sse = {other.chunk(0, tokens("dab")), other.chunk(0, tokens("x")), end_of(other, done("stop"))};
    EXPECT_EQ(streamed_text(sse), "da");
  }
}

// -- chat -------------------------------------------------------------------

using testing::builtin;

std::variant<completion_request, api_error> chat(std::string_view body, const chat_template& tpl) {
  return parse_chat_completion(body, "llama-2-7b", "h2", tpl);
}

completion_request chat_ok(std::string_view body, const chat_template& tpl) {
  auto r = chat(body, tpl);
  if (auto* e = std::get_if<api_error>(&r)) {
    ADD_FAILURE() << body << " refused: " << e->message;
    return {};
  }
  return std::get<completion_request>(std::move(r));
}

api_error chat_refused(std::string_view body, const chat_template& tpl) {
  auto r = chat(body, tpl);
  if (auto* c = std::get_if<completion_request>(&r)) {
    ADD_FAILURE() << body << " taken: " << c->frames.at(0);
    return {};
  }
  return std::get<api_error>(std::move(r));
}

TEST(openai, llama2_renders_metas_inst_format_with_the_system_inside_the_first_user_turn) {
  const auto tpl = builtin("llama2");
  const auto c = chat_ok(R"({"model":"sql-lora","messages":[
      {"role":"system","content":"Be brief."},{"role":"user","content":" Hi "},
      {"role":"assistant","content":"Hello"},{"role":"user","content":"Sum 2+2"}],"max_completion_tokens":5})",
                         tpl);
  EXPECT_TRUE(c.chat);
  const auto g = as_generate(c);
  // Hugging Face's Llama 2 template renders "<s>" + this; Troupe's tokenizer
  // puts the BOS token in front.
  EXPECT_EQ(g.prompt, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Sum 2+2 [/INST]");
  EXPECT_EQ(g.adapter, "sql-lora");
  EXPECT_EQ(g.max_tokens, 5u) << "max_completion_tokens is max_tokens";
  EXPECT_TRUE(g.stop.empty()) << "the reply ends with the end-of-sequence token";
  EXPECT_EQ(as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"Q"}]})", tpl)).prompt,
            "[INST] Q [/INST]");

  // Roles out of Llama 2's order are refused, saying which.
  EXPECT_NE(chat_refused(R"({"model":"m","messages":[{"role":"assistant","content":"A"}]})", tpl).message.find(
              "alternate user, assistant"),
            std::string::npos);
  EXPECT_NE(chat_refused(R"({"model":"m","messages":[{"role":"user","content":"A"},{"role":"user","content":"B"}]})",
                         tpl).message.find("messages[1] is \"user\""),
            std::string::npos);
  EXPECT_NE(chat_refused(R"({"model":"m","messages":[{"role":"user","content":"A"},
                             {"role":"assistant","content":"B"}]})", tpl).message.find("last message must be the user's"),
            std::string::npos);
  EXPECT_NE(chat_refused(R"({"model":"m","messages":[{"role":"system","content":"S"}]})", tpl).message.find(
              "no user message"),
            std::string::npos);
}

TEST(openai, llama3_renders_role_headers_with_each_text_trimmed_and_ends_on_the_models_end_tokens) {
  const auto tpl = builtin("llama3");
  const auto c = chat_ok(R"({"model":"m","messages":[
      {"role":"system","content":" Be brief.\n"},{"role":"user","content":"Hi "},
      {"role":"assistant","content":"Hello"},{"role":"user","content":"Sum 2+2"}]})",
                         tpl);
  const auto g = as_generate(c);
  // Hugging Face's Llama 3 template renders "<|begin_of_text|>" + this;
  // the tokenizer puts it in front.
  EXPECT_EQ(g.prompt, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nSum 2+2<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_TRUE(g.stop.empty()) << "<|eot_id|> is one of the model's end tokens";
  // Any order of roles, as Meta's template takes.
  EXPECT_EQ(as_generate(chat_ok(R"({"model":"m","messages":[{"role":"assistant","content":"A"}]})", tpl)).prompt,
            "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_NE(std::find(chat_template_names().begin(), chat_template_names().end(), "llama3"),
            chat_template_names().end());
}

TEST(openai, include_stop_str_in_output_keeps_the_requests_own_stop_string_in_the_text) {
  EXPECT_EQ(ok(R"({"model":"m","prompt":"p","stop":[";","\n"],"include_stop_str_in_output":true})").stops_kept, 2u);
  EXPECT_EQ(ok(R"({"model":"m","prompt":"p","stop":";","include_stop_str_in_output":false})").stops_kept, 0u);
  EXPECT_EQ(ok(R"({"model":"m","prompt":"p","stop":";","include_stop_str_in_output":null})").stops_kept, 0u);
  // A chat's: the request's own, not the template's (its turn's end).
  const auto c = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"stop":"END",)"
                         R"("include_stop_str_in_output":true})",
                         builtin("chatml"));
  ASSERT_GT(c.stop.size(), 1u);
  EXPECT_EQ(c.stop[0], "END");
  EXPECT_EQ(c.stops_kept, 1u);
  const auto e = refused(R"({"model":"m","prompt":"p","include_stop_str_in_output":"yes"})");
  EXPECT_EQ(e.param, "include_stop_str_in_output");
  // The whole answer: up to the end of the first stop string, if kept.
  auto req = answered("m", false, false, {";", "\n", "<|im_end|>"});
  req.stops_kept = 2;
  const completion_answer a{"c", 1, req};
  auto d = done("stop");
  d.text = "SELECT 1\n;x";
  EXPECT_EQ(json::parse(a.body({d}))["choices"][0]["text"], "SELECT 1\n");
  d.text = "ok<|im_end|>;";
  EXPECT_EQ(json::parse(a.body({d}))["choices"][0]["text"], "ok") << "not the template's";
  // Streamed: the same text.
  completion_answer s{"c", 1, req};
  wire::token_reply t;
  t.text = "SELECT 1";
  std::vector<std::string> sse{s.chunk(0, t)};
  t.text = "\n;x";
  sse.push_back(s.chunk(0, t));
  sse.push_back(end_of(s, done("stop")));
  EXPECT_EQ(streamed_text(sse), "SELECT 1\n");
}

TEST(openai, chatml_renders_each_message_then_opens_the_assistants_turn_and_stops_at_its_end) {
  const auto tpl = builtin("chatml");
  const auto c = chat_ok(R"({"model":"llama-2-7b","stop":"END","stream":true,"messages":[
      {"role":"developer","content":"S"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":"c"},{"role":"user","content":"d"}]})",
                         tpl);
  const auto g = as_generate(c);
  EXPECT_EQ(g.prompt, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
                      "<|im_start|>assistant\nc<|im_end|>\n<|im_start|>user\nd<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(g.adapter.empty()) << "the base model";
  EXPECT_EQ(g.stop, (std::vector<std::string>{"END", "<|im_end|>"})) << "the request's, then the template's";
  EXPECT_EQ(c.stop, g.stop);
  EXPECT_TRUE(c.stream);
  EXPECT_EQ(as_generate(chat_ok(R"({"model":"m","session":"c1","messages":[{"role":"user","content":"d"}]})", tpl))
              .session,
            "c1");
  // A stop that is not a string reaches the wire parser as given, which
  // refuses it by name.
  const auto bad_stop = chat_ok(R"({"model":"m","stop":5,"messages":[{"role":"user","content":"d"}]})", tpl);
  const auto r = wire::parse_request(bad_stop.frames.at(0), wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(r));
  EXPECT_NE(std::get<wire::parse_error>(r).message.find("stop"), std::string::npos);
}

TEST(openai, a_custom_template_takes_its_formats_and_refuses_system_messages_without_one) {
  auto t = make_chat_template("custom", {.user = "U: {content}\n", .assistant = "A: {content}\n", .generation = "A:", .stop = {"\nU:"}});
  ASSERT_TRUE(std::holds_alternative<chat_template>(t));
  const auto& tpl = std::get<chat_template>(t);
  const auto g = as_generate(chat_ok(
    R"({"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},
                                {"role":"user","content":"ok?"}]})", tpl));
  EXPECT_EQ(g.prompt, "U: hi\nA: yo\nU: ok?\nA:");
  EXPECT_EQ(g.stop, std::vector<std::string>{"\nU:"});
  EXPECT_NE(chat_refused(R"({"model":"m","messages":[{"role":"system","content":"S"}]})", tpl).message.find(
              "has no system messages"),
            std::string::npos);
}

TEST(openai, chat_template_errors_name_the_key) {
  auto key_of = [](std::variant<chat_template, chat_template_error> t) {
    auto* e = std::get_if<chat_template_error>(&t);
    return e == nullptr ? std::string("(made)") : e->key;
  };
  EXPECT_EQ(key_of(make_chat_template("custom", {.user = "U", .assistant = "{content}"})), "chat_user");
  EXPECT_EQ(key_of(make_chat_template("custom", {.user = "{content}", .assistant = "A"})), "chat_assistant");
  EXPECT_EQ(key_of(make_chat_template("custom", {.system = "S", .user = "{content}", .assistant = "{content}"})),
            "chat_system");
  EXPECT_EQ(key_of(make_chat_template("custom", {.user = "{content}", .assistant = "{content}", .stop = {""}})),
            "chat_stop");
  EXPECT_EQ(key_of(make_chat_template("llama2", {.generation = "G"})), "chat_generation");
  EXPECT_EQ(key_of(make_chat_template("chatml", {.tool_call = "<c>{call}"})), "chat_tool_call");
  EXPECT_EQ(key_of(make_chat_template("vicuna")), "chat_template");
  // The tool formats go together, each with its slot, in a template with
  // system messages; a call opens with a marker.
  const chat_formats tooled{.system = "S: {content}\n", .user = "{content}", .assistant = "{content}",
                            .tools = "T: {tools}", .tool_call = "<c>{call}</c>", .tool_result = "R: {content}"};
  EXPECT_EQ(key_of(make_chat_template("custom", tooled)), "(made)");
  auto with = [&](auto change) {
    auto f = tooled;
    change(f);
    return key_of(make_chat_template("custom", f));
  };
  EXPECT_EQ(with([](chat_formats& f) { f.tools = "T"; }), "chat_tools");
  EXPECT_EQ(with([](chat_formats& f) { f.tools.clear(); }), "chat_tools");
  EXPECT_EQ(with([](chat_formats& f) { f.tool_call = "{call}"; }), "chat_tool_call") << "no marker to find";
  EXPECT_EQ(with([](chat_formats& f) { f.tool_call = "  {call}</c>"; }), "chat_tool_call");
  EXPECT_EQ(with([](chat_formats& f) { f.tool_call = "<c>{content}"; }), "chat_tool_call");
  EXPECT_EQ(with([](chat_formats& f) { f.tool_call = "[CALLS] {calls}"; }), "(made)") << "the calls as one array";
  EXPECT_EQ(with([](chat_formats& f) { f.tool_call = "{calls}"; }), "chat_tool_call") << "no marker to find";
  EXPECT_EQ(with([](chat_formats& f) { f.tool_call = "[CALLS] {calls}</c>"; }), "chat_tool_call")
    << "the array's close ends the calls";
  EXPECT_EQ(with([](chat_formats& f) { f.tool_result = "R"; }), "chat_tool_result");
  EXPECT_EQ(with([](chat_formats& f) { f.system.clear(); }), "chat_system");
  for (const auto& name : chat_template_names())
    EXPECT_EQ(key_of(make_chat_template(name)), "(made)") << name;
}

TEST(openai, chat_requests_it_cannot_serve_are_refused_naming_the_field) {
  const auto tpl = builtin("chatml");
  const std::string user = R"("messages":[{"role":"user","content":"q"}])";
  auto param_of = [&](const std::string& extra) { return chat_refused("{\"model\":\"m\"," + extra + "}", tpl).param; };
  EXPECT_EQ(param_of(user + R"(,"tool_choice":"auto")"), "tool_choice") << "no tools";
  EXPECT_EQ(param_of(user + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})"),
            "response_format");
  EXPECT_EQ(param_of(user + R"(,"response_format":{"type":"xml"})"), "response_format");
  EXPECT_EQ(param_of(user + R"(,"response_format":"json_object")"), "response_format");
  EXPECT_EQ(param_of(user + R"(,"response_format":{"type":"json_object","strict":true})"), "response_format");
  EXPECT_EQ(param_of(user + R"(,"logprobs":1)"), "logprobs") << "a boolean";
  EXPECT_EQ(param_of(user + R"(,"top_logprobs":2)"), "top_logprobs") << "needs logprobs";
  EXPECT_EQ(param_of(user + R"(,"logprobs":false,"top_logprobs":2)"), "top_logprobs");
  EXPECT_EQ(param_of(user + R"(,"n":0)"), "n");
  EXPECT_EQ(param_of(user + R"(,"prompt":"p")"), "prompt") << "a completion's field";
  EXPECT_EQ(param_of(user + R"(,"max_tokens":3,"max_completion_tokens":4)"), "max_completion_tokens");
  EXPECT_EQ(param_of(R"("messages":[{"role":"tool","content":"q"}])"), "messages");
  chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q","name":"bob"}]})", tpl);
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q","name":5}])"), "messages");
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q","reasoning_content":"r"}])"), "messages")
    << "an assistant's";
  // An answer's message sent back as OpenAI's SDK writes it: its nulls read past.
  const std::string q = R"({"role":"user","content":"q"})";
  chat_ok(R"({"model":"m","messages":[)" + q + R"(,{"role":"assistant","content":"a","refusal":null,"function_call":null,)"
            R"("audio":null,"reasoning_content":null,"name":"x"},)" + q + "]}",
          tpl);
  for (const char* field : {R"("refusal":"no")", R"("audio":{"id":"a"})",
                            R"("reasoning_content":3)", R"("reasoning":"x","reasoning_content":"y")"}) {
    const auto e = chat_refused(R"({"model":"m","messages":[)" + q + R"(,{"role":"assistant","content":"a",)" + field + "}," + q
                                  + "]}",
                                tpl);
    EXPECT_EQ(e.param, "messages") << field;
    EXPECT_NE(e.message.find("messages[1]."), std::string::npos) << e.message;
  }
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])"),
            "messages");
  EXPECT_EQ(param_of(R"("messages":[{"role":"user"}])"), "messages");
  EXPECT_EQ(param_of(R"("messages":[])"), "messages");
  EXPECT_EQ(chat_refused(R"({"messages":[{"role":"user","content":"q"}]})", tpl).param, "model");
  // Their "off" values are served.
  chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"tools":[],"tool_choice":"none",
              "response_format":{"type":"text"},"logprobs":false,"top_logprobs":0,"n":1,"parallel_tool_calls":true,
              "max_tokens":4,"max_completion_tokens":4})",
          tpl);
  // A completion does not take a chat's fields.
  EXPECT_EQ(refused(R"({"model":"m","prompt":"p","messages":[]})").param, "messages");
}

TEST(openai, a_chat_answer_is_a_message_and_its_stream_deltas_open_with_the_role) {
  const completion_answer whole{"chatcmpl-1", 7, answered("m", false, true, {"<|im_end|>"})};
  auto d = done("stop");
  d.text = "ab<|im_end|>";
  const auto j = json::parse(whole.body({d}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(j["choices"][0].contains("text"));
  EXPECT_EQ(j["usage"]["total_tokens"], 5);

  completion_answer a{"chatcmpl-2", 7, answered("m", true, true, {"<|im_end|>"})};
  const auto start = events(a.stream_start());
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(start[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  wire::token_reply t;
  t.text = "Hi<|im_";
  const auto c = events(a.chunk(0, t));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0]["delta"], (json{{"content", "Hi"}}));
  t.text = "end|>";
  EXPECT_EQ(a.chunk(0, t), "");
  const auto end = events(end_of(a, done("stop")));
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(end[0]["choices"][0]["delta"], json::object());
  EXPECT_EQ(end[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(end[1]["object"], "chat.completion.chunk");
  EXPECT_EQ(end[1]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(end[2], "[DONE]");
}

// -- log-probabilities ----------------------------------------------------------

TEST(openai, log_probabilities_are_asked_as_a_count_or_as_chats_flag_and_top_count) {
  auto frame = [](const completion_request& c) { return json::parse(c.frames.at(0)); };
  auto c = ok(R"({"model":"m","prompt":"p","logprobs":3})");
  EXPECT_EQ(c.logprobs, 3);
  EXPECT_EQ(frame(c)["logprobs"], 3);
  for (const char* none : {R"({"model":"m","prompt":"p"})", R"({"model":"m","prompt":"p","logprobs":null})",
                           R"({"model":"m","prompt":"p","logprobs":false})"}) {
    c = ok(none);
    EXPECT_EQ(c.logprobs, -1) << none;
    EXPECT_FALSE(frame(c).contains("logprobs")) << none;
  }
  // A value the wire refuses is passed on for it to name.
  c = ok(R"({"model":"m","prompt":"p","logprobs":21})");
  EXPECT_EQ(c.logprobs, -1);
  EXPECT_EQ(frame(c)["logprobs"], 21);

  const auto tpl = builtin("chatml");
  const std::string user = R"({"model":"m","messages":[{"role":"user","content":"q"}])";
  c = chat_ok(user + R"(,"logprobs":true})", tpl);
  EXPECT_EQ(c.logprobs, 0);
  EXPECT_EQ(frame(c)["logprobs"], 0);
  c = chat_ok(user + R"(,"logprobs":true,"top_logprobs":5})", tpl);
  EXPECT_EQ(c.logprobs, 5);
  EXPECT_EQ(frame(c)["logprobs"], 5);
  c = chat_ok(user + R"(,"logprobs":false,"top_logprobs":0})", tpl);
  EXPECT_EQ(c.logprobs, -1);
  EXPECT_FALSE(frame(c).contains("logprobs"));
}

/// Token `id` with text `text` and log-probability `lp`, and `top` listed.
wire::token_logprobs token_lp(std::int32_t id, std::string text, float lp, std::vector<wire::token_logprob> top = {}) {
  return {{id, std::move(text), lp}, std::move(top)};
}

/// The one choice of a whole answer that asked for `k` log-probabilities
/// (-1: none), whose output is `text` in the tokens `lps`, with `stop`.
json whole_choice(bool chat, std::string stop, std::int32_t k, std::string text, std::vector<wire::token_logprobs> lps) {
  auto req = answered("m", false, chat, {std::move(stop)});
  req.logprobs = k;
  const completion_answer a{"c", 1, req};
  auto d = done("stop");
  d.text = std::move(text);
  d.logprobs = std::move(lps);
  return json::parse(a.body({d}))["choices"][0];
}

TEST(openai, best_of_generates_its_candidates_with_log_probabilities_to_rank_them) {
  const auto c = ok(R"({"model":"m","prompt":["a","b"],"best_of":3,"seed":7})");
  EXPECT_EQ(c.n, 1u);
  EXPECT_EQ(c.best_of, 3u);
  EXPECT_EQ(c.logprobs, -1) << "the answer shows none";
  for (std::size_t k = 0; k < 6; ++k) {
    const auto g = as_generate(c, k, 6);
    EXPECT_EQ(g.logprobs, 0) << "the wire computes them to rank the candidates";
    EXPECT_EQ(g.sampling.seed, 7u + k % 3) << "each candidate draws its own";
    EXPECT_EQ(g.prompt, k < 3 ? "a" : "b");
  }
  EXPECT_EQ(as_generate(ok(R"({"model":"m","prompt":"a","best_of":2,"logprobs":3})"), 1, 2).logprobs, 3);
  // best_of equal to n (or 1) is plain n: nothing ranked, nothing extra asked.
  const auto same = ok(R"({"model":"m","prompt":"a","n":2,"best_of":2,"stream":true})");
  EXPECT_EQ(as_generate(same, 0, 2).logprobs, -1);
  EXPECT_EQ(as_generate(ok(R"({"model":"m","prompt":"a","best_of":1})")).logprobs, -1);
  EXPECT_EQ(ok(R"({"model":"m","prompt":"a","best_of":null})").best_of, 1u);
  // echo keeps a text prompt's own text: best_of asks for no prompt ranks.
  const auto echo = ok(R"({"model":"m","prompt":"a","best_of":2,"echo":true})");
  EXPECT_EQ(as_generate(echo, 1, 2).prompt_logprobs, -1);
  EXPECT_EQ(echo.echo_text, (std::vector<std::string>{"a", "a"}));
}

TEST(openai, best_of_answers_each_prompts_most_likely_candidates_per_token_and_bills_them_all) {
  auto c = answered("m", false);
  c.n = 2;
  c.best_of = 3;
  c.frames.resize(6); // two prompts, three candidates each
  const completion_answer a{"cmpl-b", 1, c};
  std::vector<wire::done_reply> dones(6, done("length"));
  const std::vector<std::vector<float>> lps{
    {-1.0f, -1.0f}, {-0.5f, -0.7f}, std::vector<float>(6, -0.5f), // means -1.0, -0.6, -0.5; sums -2, -1.2, -3
    {-2.0f}, {-0.2f, -0.2f, -0.2f, -0.2f}, {-0.2f, -0.2f}}; // -2.0, -0.2, -0.2 (a tie)
  for (std::size_t k = 0; k < 6; ++k) {
    dones[k].text = "t" + std::to_string(k);
    dones[k].prompt_tokens = k < 3 ? 3 : 4;
    dones[k].completion_tokens = lps[k].size();
    dones[k].logprobs.emplace();
    for (const float lp : lps[k])
      dones[k].logprobs->push_back(token_lp(1, "x", lp));
  }
  const auto j = json::parse(a.body(dones));
  ASSERT_EQ(j["choices"].size(), 4u);
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_TRUE(j["choices"][i]["logprobs"].is_null()) << "not asked for";
    texts.push_back(j["choices"][i]["text"]);
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"t1", "t2", "t4", "t5"})) << "by mean, not sum; in the order generated";
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7) << "each prompt once";
  EXPECT_EQ(j["usage"]["completion_tokens"], 17) << "every candidate's tokens";

  // With logprobs asked for, the winners carry theirs.
  c.n = 1;
  c.logprobs = 0;
  const auto one = json::parse(completion_answer{"cmpl-c", 1, c}.body(dones));
  ASSERT_EQ(one["choices"].size(), 2u);
  EXPECT_EQ(one["choices"][0]["text"], "t2");
  EXPECT_EQ(one["choices"][0]["logprobs"]["token_logprobs"], json(std::vector<double>(6, -0.5)));
  EXPECT_EQ(one["choices"][1]["text"], "t4") << "the earlier of a tie";
}

TEST(openai, a_completions_log_probabilities_list_tokens_offsets_and_the_most_likely_up_to_the_stop) {
  const std::vector<wire::token_logprobs> lps{
    token_lp(5, "h\xc3\xa9", -0.5f, {{5, "h\xc3\xa9", -0.5f}, {6, "ha", -1.25f}}),
    token_lp(7, " S", -std::numeric_limits<float>::infinity(), {{8, " T", -0.1f}, {9, " U", -0.2f}}),
    token_lp(10, "TOP", -0.25f), token_lp(11, " x", -3.0f)};
  const auto choice = whole_choice(false, "STOP", 2, "h\xc3\xa9 STOP x", lps);
  const auto& lp = choice["logprobs"];
  EXPECT_EQ(choice["text"], "h\xc3\xa9 ");
  // " S" begins before "STOP" (at byte 3); "TOP" and " x" after it.
  EXPECT_EQ(lp["tokens"], (json{"h\xc3\xa9", " S"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.5, -9999.0})) << "minus infinity as OpenAI gives it";
  EXPECT_EQ(lp["text_offset"], (json{0, 2})) << "in characters";
  EXPECT_EQ(lp["top_logprobs"][0], (json{{"h\xc3\xa9", -0.5}, {"ha", -1.25}}));
  EXPECT_EQ(lp["top_logprobs"][1], (json{{" T", -0.1}, {" U", -0.2}, {" S", -9999.0}})) << "the sampled one too";
  EXPECT_TRUE(whole_choice(false, "STOP", -1, "h\xc3\xa9 STOP x", lps)["logprobs"].is_null()) << "not asked for";
}

TEST(openai, a_chats_log_probabilities_are_content_entries_with_their_bytes) {
  const auto lp = whole_choice(true, "<|im_end|>", 1, "\xe2\x98\xba<|im_end|>",
                               {token_lp(1, "\xe2\x98", -0.5f, {{1, "\xe2\x98", -0.5f}}),
                                token_lp(2, "\xba", -0.75f, {{3, "!", -0.5f}}), token_lp(4, "<|im_end|>", -0.125f, {})})
                    ["logprobs"];
  EXPECT_TRUE(lp["refusal"].is_null());
  ASSERT_EQ(lp["content"].size(), 2u) << "nothing from the stop string on";
  EXPECT_EQ(lp["content"][0]["bytes"], (json{226, 152}));
  EXPECT_EQ(lp["content"][0]["logprob"], -0.5);
  EXPECT_EQ(lp["content"][1]["bytes"], (json{186}));
  EXPECT_EQ(lp["content"][1]["top_logprobs"], (json::array({{{"token", "!"}, {"logprob", -0.5}, {"bytes", {33}}}})));
}

TEST(openai, streamed_log_probabilities_go_with_the_text_their_tokens_begin_in) {
  auto req = answered("m", false, false, {"STOP"});
  req.logprobs = 0;
  completion_answer a{"c", 1, req};
  auto chunk = [](std::uint32_t index, std::vector<std::string> texts) {
    wire::token_reply t;
    t.index = index;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      t.tokens.push_back(static_cast<std::int32_t>(index + i));
      t.text += texts[i];
      t.logprobs.push_back(token_lp(static_cast<std::int32_t>(index + i), texts[i], -static_cast<float>(index + i)));
    }
    return t;
  };
  auto listed = [](const std::string& sse) {
    json out = json::array();
    for (const auto& e : events(sse))
      if (e.is_object() && !e["choices"].empty() && !e["choices"][0]["logprobs"].is_null())
        for (const auto& x : e["choices"][0]["logprobs"]["token_logprobs"])
          out.push_back(x);
    return out;
  };
  // "ab S": " S" may begin "STOP", held with its token.
  const auto first = a.chunk(0, chunk(0, {"ab", " S"}));
  EXPECT_EQ(streamed_text({first}), "ab ");
  EXPECT_EQ(listed(first), (json{-0.0, -1.0})) << "\" S\" begins in the text sent";
  const auto offsets = events(first)[0]["choices"][0]["logprobs"]["text_offset"];
  EXPECT_EQ(offsets, (json{0, 2}));
  // "TOP x" makes the stop string: its tokens begin after it, none go.
  const auto second = a.chunk(0, chunk(2, {"TOP", " x"}));
  EXPECT_EQ(second, "");
  EXPECT_EQ(listed(end_of(a, done("stop"))), json::array());

  // Without a stop: held text and tokens of no text go at the end.
  completion_answer b{"c", 1, req};
  const auto held = b.chunk(0, chunk(0, {"ok ", "S"}));
  EXPECT_EQ(streamed_text({held}), "ok ");
  EXPECT_EQ(listed(held), (json{-0.0})) << "\"S\" begins in the text held";
  const auto more = b.chunk(0, chunk(2, {"T", ""})); // "ST" may still begin "STOP"
  EXPECT_EQ(more, "");
  const auto end = end_of(b, done("eos"));
  EXPECT_EQ(streamed_text({end}), "ST");
  EXPECT_EQ(listed(end), (json{-1.0, -2.0, -3.0}));

  // A stop string found at the end, in text a longer one held ("abcd"
  // may begin "abcdb", "bc" begins inside it): the tokens after it go
  // unlisted, as in the whole answer.
  auto two = answered("m", false, false, {"bc", "abcdb"});
  two.logprobs = 0;
  completion_answer c{"c", 1, two};
  std::string sse = c.chunk(0, chunk(0, {"ce"}));
  sse += c.chunk(0, chunk(1, {"ab"}));
  sse += c.chunk(0, chunk(2, {"cd"}));
  sse += end_of(c, done("eos"));
  EXPECT_EQ(streamed_text({sse}), "cea");
  EXPECT_EQ(listed(sse), (json{-0.0, -1.0})) << "\"cd\" begins after the stop string";
}

TEST(openai, penalties_and_logit_bias_go_to_the_wire_which_checks_them) {
  // Penalties and logit_bias go to the wire as they are (it checks them).
  const auto p = as_generate(
    ok(R"({"model":"m","prompt":"p","presence_penalty":0.5,"frequency_penalty":-1,"logit_bias":{"7":-100,"3":2}})"));
  EXPECT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(p.sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(p.sampling.logit_bias, (std::vector<std::pair<std::int32_t, float>>{{3, 2.0f}, {7, -100.0f}}));
  const auto tpl = builtin("chatml");
  EXPECT_EQ(as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"logit_bias":{"1":5}})", tpl))
              .sampling.logit_bias,
            (std::vector<std::pair<std::int32_t, float>>{{1, 5.0f}}));
  const auto bad = ok(R"({"model":"m","prompt":"p","logit_bias":[1]})");
  const auto r = wire::parse_request(bad.frames.at(0), wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(r));
  EXPECT_NE(std::get<wire::parse_error>(r).message.find("\"logit_bias\""), std::string::npos);
}

TEST(openai, vllms_stop_token_ids_ignore_eos_min_tokens_and_priority_go_to_the_wire) {
  const auto g = as_generate(
    ok(R"({"model":"m","prompt":"p","max_tokens":9,"stop_token_ids":[5,3],"ignore_eos":true,"min_tokens":4,"priority":-3})"));
  EXPECT_EQ(g.stop_token_ids, (std::vector<std::int32_t>{3, 5}));
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.min_tokens, 4u);
  EXPECT_EQ(g.priority, -3);
  const auto c = as_generate(chat_ok(
    R"({"model":"m","messages":[{"role":"user","content":"q"}],"max_completion_tokens":3,"min_tokens":3})",
    builtin("chatml")));
  EXPECT_EQ(c.min_tokens, 3u);
  EXPECT_FALSE(c.ignore_eos);
  // The wire checks the values and names the field.
  const auto r = wire::parse_request(ok(R"({"model":"m","prompt":"p","max_tokens":2,"min_tokens":3})").frames.at(0),
                                     wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(r));
  EXPECT_NE(std::get<wire::parse_error>(r).message.find("\"min_tokens\""), std::string::npos);
}

TEST(openai, vllms_truncate_prompt_tokens_bad_words_and_allowed_token_ids_go_to_the_wire_in_both_endpoints) {
  const auto g = as_generate(ok(
    R"({"model":"m","prompt":"p","truncate_prompt_tokens":12,"bad_words":["no"],"allowed_token_ids":[7,4]})"));
  EXPECT_EQ(g.truncate_prompt_tokens, 12);
  EXPECT_EQ(g.bad_words, (std::vector<std::string>{"no"}));
  EXPECT_EQ(g.allowed_token_ids, (std::vector<std::int32_t>{4, 7}));
  const auto c = as_generate(chat_ok(
    R"({"model":"m","messages":[{"role":"user","content":"q"}],"truncate_prompt_tokens":-1,"bad_words":["a b"]})",
    builtin("chatml")));
  EXPECT_EQ(c.truncate_prompt_tokens, -1);
  EXPECT_EQ(c.bad_words, (std::vector<std::string>{"a b"}));
  // The wire checks the values and names the field.
  const auto r = wire::parse_request(ok(R"({"model":"m","prompt":"p","allowed_token_ids":[]})").frames.at(0),
                                     wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(r));
  EXPECT_NE(std::get<wire::parse_error>(r).message.find("\"allowed_token_ids\""), std::string::npos);
}

TEST(openai, response_format_json_object_goes_to_the_wire_in_both_endpoints) {
  const auto c = as_generate(chat_ok(
    R"({"model":"m","messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_object"}})",
    builtin("chatml")));
  EXPECT_TRUE(c.json_object);
  EXPECT_TRUE(as_generate(ok(R"({"model":"m","prompt":"p","response_format":{"type":"json_object"}})")).json_object);
  EXPECT_FALSE(as_generate(ok(R"({"model":"m","prompt":"p","response_format":{"type":"text"}})")).json_object);
  EXPECT_FALSE(as_generate(ok(R"({"model":"m","prompt":"p","response_format":null})")).json_object);
}

TEST(openai, response_format_json_schema_gives_the_wire_its_schema_in_both_endpoints) {
  const std::string format =
    R"("response_format":{"type":"json_schema","json_schema":{"name":"city","strict":true,"description":"d",)"
    R"("schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}})";
  const auto want = json::parse(R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})");
  const auto c = as_generate(
    chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],)" + format + "}", builtin("chatml")));
  EXPECT_FALSE(c.json_object);
  EXPECT_EQ(json::parse(c.json_schema), want);
  EXPECT_EQ(json::parse(as_generate(ok(R"({"model":"m","prompt":"p",)" + format + "}")).json_schema), want);
  // What is wrong is said, for the field OpenAI names.
  for (const auto& [rf, says] : std::vector<std::pair<std::string, std::string>>{
         {R"({"type":"json_schema"})", R"("response_format.json_schema" must be an object)"},
         {R"({"type":"json_schema","json_schema":{"schema":{}}})", R"(needs a "name")"},
         {R"({"type":"json_schema","json_schema":{"name":"x"}})", R"(needs a "schema")"},
         {R"({"type":"json_schema","json_schema":{"name":"","schema":{}}})", "a non-empty string"},
         {R"({"type":"json_schema","json_schema":{"name":"x","schema":[]}})", "a JSON Schema (an object)"},
         {R"({"type":"json_schema","json_schema":{"name":"x","schema":{},"strict":1}})", "true or false"},
         {R"({"type":"json_schema","json_schema":{"name":"x","schema":{},"format":1}})",
          R"(unknown field "format" in "response_format.json_schema")"},
         {R"({"type":"json_object","json_schema":{}})", R"(unknown field "json_schema")"},
         {R"({"type":"xml"})", R"("text", "json_object" or "json_schema")"},
       }) {
    const auto e = refused(R"({"model":"m","prompt":"p","response_format":)" + rf + "}");
    EXPECT_EQ(e.param, "response_format") << rf;
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  }
}

TEST(openai, echo_asks_the_wire_for_the_prompts_log_probabilities_only_where_its_text_is_not_at_hand) {
  auto frame = [](const completion_request& c, std::size_t k = 0) { return json::parse(c.frames.at(k)); };
  // A text prompt without log-probabilities: echoed as sent.
  auto c = ok(R"({"model":"m","prompt":["p","q"],"n":2,"echo":true})");
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.echo_text, (std::vector<std::string>{"p", "p", "q", "q"})) << "one per choice";
  EXPECT_FALSE(frame(c).contains("prompt_logprobs"));
  // With log-probabilities: the prompt's too, as many alternatives.
  c = ok(R"({"model":"m","prompt":"p","echo":true,"logprobs":2})");
  EXPECT_TRUE(c.echo_text.empty());
  EXPECT_EQ(frame(c)["prompt_logprobs"], 2);
  EXPECT_EQ(frame(c)["logprobs"], 2);
  // Token ids: their text comes from the wire.
  c = ok(R"({"model":"m","prompt":[1,2,3],"echo":true})");
  EXPECT_TRUE(c.echo_text.empty());
  EXPECT_EQ(frame(c)["prompt_logprobs"], 0);
  EXPECT_FALSE(frame(c).contains("logprobs"));
  for (const char* off : {R"({"model":"m","prompt":[1,2],"echo":false,"logprobs":1})",
                          R"({"model":"m","prompt":[1,2],"echo":null})"}) {
    c = ok(off);
    EXPECT_FALSE(c.echo) << off;
    EXPECT_FALSE(frame(c).contains("prompt_logprobs")) << off;
  }
  // max_tokens 0 scores the prompt alone: the wire's least is 1, left out.
  c = ok(R"({"model":"m","prompt":[1,2],"echo":true,"max_tokens":0,"logprobs":1})");
  EXPECT_TRUE(c.prompt_only);
  EXPECT_EQ(frame(c)["max_tokens"], 1);
  c = ok(R"({"model":"m","prompt":[1,2],"max_tokens":0})");
  EXPECT_FALSE(c.prompt_only);
  EXPECT_EQ(frame(c)["max_tokens"], 0) << "without echo, for the wire to refuse";
  // Chat has no echo.
  const auto tpl = builtin("chatml");
  EXPECT_EQ(chat_refused(R"({"model":"m","messages":[{"role":"user","content":"q"}],"echo":true})", tpl).param, "echo");
}

/// The wire's prompt log-probabilities of the prompt "Hi, y'all" in three tokens.
std::vector<wire::token_logprobs> prompt_lps() {
  return {token_lp(1, "Hi", std::numeric_limits<float>::quiet_NaN()),
          token_lp(2, ",", -1.5f, {{3, "!", -0.5f}}), token_lp(4, " y\xe2\x80\x99" "all", -2.0f, {{4, " y\xe2\x80\x99" "all", -2.0f}})};
}

TEST(openai, an_echoed_prompt_begins_the_text_with_its_log_probabilities_first_null) {
  auto req = answered("m", false, false, {"STOP"});
  req.echo = true;
  req.logprobs = 1;
  const completion_answer a{"c", 1, req};
  auto d = done("stop");
  d.text = " ok STOP";
  d.logprobs = {token_lp(5, " ok", -0.25f, {{5, " ok", -0.25f}}), token_lp(6, " STOP", -0.5f, {})};
  d.prompt_logprobs = prompt_lps();
  const auto choice = json::parse(a.body({d}))["choices"][0];
  EXPECT_EQ(choice["text"], "Hi, y\xe2\x80\x99" "all ok ");
  const auto& lp = choice["logprobs"];
  // " STOP" begins before the stop string (at the space), so it is listed.
  EXPECT_EQ(lp["tokens"], (json{"Hi", ",", " y\xe2\x80\x99" "all", " ok", " STOP"})) << "the prompt's, then the output's";
  EXPECT_EQ(lp["token_logprobs"], (json{nullptr, -1.5, -2.0, -0.25, -0.5})) << "nothing precedes the first";
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], (json{{"!", -0.5}, {",", -1.5}}));
  EXPECT_EQ(lp["text_offset"], (json{0, 2, 3, 9, 12})) << "in characters, the output's after the prompt";

  // A text prompt echoed as sent, without log-probabilities.
  auto plain = answered("m", false);
  plain.echo = true;
  plain.echo_text = {"Hello"};
  const completion_answer b{"c", 1, plain};
  const auto whole = json::parse(b.body({done("length")}))["choices"][0];
  EXPECT_EQ(whole["text"], "Helloab");
  EXPECT_TRUE(whole["logprobs"].is_null());

  // max_tokens 0: the prompt alone, whole and streamed.
  auto scoring = req;
  scoring.prompt_only = true;
  const completion_answer p{"c", 1, scoring};
  const auto alone = json::parse(p.body({d}));
  EXPECT_EQ(alone["choices"][0]["text"], "Hi, y\xe2\x80\x99" "all");
  EXPECT_EQ(alone["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(alone["choices"][0]["logprobs"]["token_logprobs"], (json{nullptr, -1.5, -2.0}));
  EXPECT_EQ(alone["usage"]["completion_tokens"], 0);
  completion_answer ps{"c", 1, scoring};
  wire::token_reply only;
  only.tokens = {5};
  only.text = " ok";
  only.logprobs = {token_lp(5, " ok", -0.25f, {})};
  only.prompt_logprobs = prompt_lps();
  const auto scored = ps.chunk(0, only) + end_of(ps, done("length"));
  EXPECT_EQ(streamed_text({scored}), "Hi, y\xe2\x80\x99" "all");
  EXPECT_EQ(events(scored).at(1)["choices"][0]["finish_reason"], "length");

  // Streamed: the prompt in a chunk of its own before the first token's.
  completion_answer s{"c", 1, req};
  wire::token_reply t;
  t.tokens = {5};
  t.text = " ok";
  t.logprobs = {token_lp(5, " ok", -0.25f, {{5, " ok", -0.25f}})};
  t.prompt_logprobs = prompt_lps();
  const auto first = s.chunk(0, t);
  const auto ev = events(first);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["choices"][0]["text"], "Hi, y\xe2\x80\x99" "all");
  EXPECT_EQ(ev[0]["choices"][0]["logprobs"]["token_logprobs"], (json{nullptr, -1.5, -2.0}));
  EXPECT_EQ(ev[1]["choices"][0]["text"], " ok");
  EXPECT_EQ(ev[1]["choices"][0]["logprobs"]["text_offset"], (json{9}));
  // Later chunks echo nothing.
  t.index = 1;
  t.text = " more";
  t.logprobs = {token_lp(6, " more", -1.0f, {})};
  t.prompt_logprobs.clear();
  const auto second = s.chunk(0, t);
  EXPECT_EQ(streamed_text({second}), " more");
  EXPECT_EQ(events(second)[0]["choices"][0]["logprobs"]["text_offset"], (json{12}));
  EXPECT_EQ(streamed_text({first, second, end_of(s, done("length"))}), "Hi, y\xe2\x80\x99" "all ok more");
}

TEST(openai, an_advisory_becomes_a_wire_advise_which_checks_its_values) {
  auto frame = parse_advise(R"({"session":"conv-1","in_s":2.5})", "h7");
  ASSERT_TRUE(std::holds_alternative<std::string>(frame));
  auto r = wire::parse_request(std::get<std::string>(frame), wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::request>(r));
  const auto a = std::get<wire::advise_request>(std::get<wire::request>(r));
  EXPECT_EQ(a.id, "h7");
  EXPECT_EQ(a.session, "conv-1");
  EXPECT_DOUBLE_EQ(a.in_s, 2.5);
  EXPECT_EQ(std::get<api_error>(parse_advise(R"({"session":"c","type":"generate"})", "h7")).param, "type")
    << "the frame's own fields are not the client's";
  EXPECT_EQ(std::get<api_error>(parse_advise("[]", "h7")).status, 400);
  // A missing session reaches the wire parser, which names it.
  r = wire::parse_request(std::get<std::string>(parse_advise(R"({"in_s":1})", "h7")), wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(r));
  EXPECT_NE(std::get<wire::parse_error>(r).message.find("session"), std::string::npos);
  wire::advise_reply reply{"h7", "conv-1", "on_gpu"};
  EXPECT_EQ(json::parse(advise_json(reply)), (json{{"session", "conv-1"}, {"status", "on_gpu"}}));
}

/// The wire request a translated `body` parses as (a failure when either
/// refuses it).
wire::request through_wire(std::string_view body, const std::variant<std::string, api_error>& frame) {
  if (auto* e = std::get_if<api_error>(&frame)) {
    ADD_FAILURE() << body << " refused: " << e->message;
    return wire::request{};
  }
  auto r = wire::parse_request(std::get<std::string>(frame), wire::parse_limits{});
  if (auto* e = std::get_if<wire::parse_error>(&r)) {
    ADD_FAILURE() << std::get<std::string>(frame) << ": " << e->message;
    return wire::request{};
  }
  return std::get<wire::request>(std::move(r));
}

TEST(openai, adapter_loads_and_unloads_take_vllms_names_and_become_wire_requests) {
  auto wire_request = [](std::string_view body, bool load) {
    return through_wire(body, parse_adapter_update(body, "h8", load));
  };
  const auto l = std::get<wire::load_adapter_request>(
    wire_request(R"({"lora_name":"sql","lora_path":"/srv/adapters/sql"})", true));
  EXPECT_EQ(l.id, "h8");
  EXPECT_EQ(l.name, "sql");
  EXPECT_EQ(l.path, "/srv/adapters/sql");
  EXPECT_EQ(std::get<wire::load_adapter_request>(wire_request(R"({"lora_name":"sim-a","rank":16})", true)).rank, 16u)
    << "Troupe's own rank, for the sim backend";
  const auto u = std::get<wire::unload_adapter_request>(wire_request(R"({"lora_name":"sql"})", false));
  EXPECT_EQ(u.name, "sql");

  struct row {
    const char* body;
    bool load;
    const char* param;
    const char* says;
  };
  for (const auto& r : std::vector<row>{
         {R"({"lora_path":"/a"})", true, "lora_name", "missing field \"lora_name\""},
         {R"({"lora_name":null,"lora_path":"/a"})", true, "lora_name", "missing field \"lora_name\""},
         {R"({"lora_name":"","lora_path":"/a"})", true, "lora_name", "non-empty string"},
         {R"({"lora_name":"a","lora_path":7})", true, "lora_path", "non-empty string, got 7"},
         {R"({"lora_name":"a","lora_path":"/a","load_inplace":true})", true, "load_inplace", "unknown field"},
         {R"({"lora_name":"a","lora_path":"/a"})", false, "lora_path", "it takes \"lora_name\")"},
         {R"({"lora_name":"a","rank":8})", false, "rank", "unknown field"},
         {R"({"lora_name":"a","name":"b"})", true, "name", "unknown field"},
         {R"([])", false, "", "JSON object"},
       }) {
    SCOPED_TRACE(r.body);
    const auto e = std::get<api_error>(parse_adapter_update(r.body, "h8", r.load));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, r.param);
    EXPECT_NE(e.message.find(r.says), std::string::npos) << e.message;
  }

  EXPECT_EQ(json::parse(adapter_update_json(wire::adapter_reply{"h8", "sql", 8, "loaded"})),
            (json{{"lora_name", "sql"}, {"rank", 8}, {"status", "loaded"}}));
  // Files that are no adapter are the client's error; the rest as from_wire.
  const auto files = adapter_update_error(wire::error_code::bad_adapter, "/a/adapter_config.json: cannot open");
  EXPECT_EQ(files.status, 400);
  EXPECT_EQ(files.type, "invalid_request_error");
  EXPECT_EQ(files.param, "lora_path");
  EXPECT_EQ(files.message, "/a/adapter_config.json: cannot open");
  EXPECT_EQ(adapter_update_error(wire::error_code::unknown_adapter, "").status, 404);
  EXPECT_EQ(adapter_update_error(wire::error_code::unknown_adapter, "").param, "lora_name");
  EXPECT_EQ(adapter_update_error(wire::error_code::adapter_in_use, "").status, 409);
  EXPECT_EQ(adapter_update_error(wire::error_code::adapter_exists, "").status, 409);
}

TEST(openai, tokenize_and_detokenize_take_vllms_bodies_and_give_its_answers) {
  auto wire_request = [](std::string_view body, bool tokenize) {
    return through_wire(body, parse_tokenizer_request(body, "h9", tokenize));
  };
  const auto t = std::get<wire::tokenize_request>(wire_request(R"({"model":"sql","prompt":"Hello there"})", true));
  EXPECT_EQ(t.id, "h9");
  EXPECT_EQ(t.prompt, "Hello there");
  EXPECT_EQ(std::get<wire::detokenize_request>(wire_request(R"({"tokens":[1,15043]})", false)).tokens,
            (std::vector<std::int32_t>{1, 15043}));
  struct row {
    const char* body;
    bool tokenize;
    const char* param;
    const char* says;
  };
  for (const auto& r : std::vector<row>{
         {R"({"prompt":"x","add_special_tokens":false})", true, "add_special_tokens", "served only as true"},
         {R"({"prompt":"x","return_token_strs":true})", true, "return_token_strs", "it takes \"model\" and \"prompt\""},
         {R"({"messages":[{"role":"user","content":"q"}]})", true, "messages", "does not serve"},
         {R"({"prompt":"x"})", false, "prompt", "it takes \"model\" and \"tokens\""},
         {R"({"model":3,"prompt":"x"})", true, "model", "must be a string"},
         {R"("x")", true, "", "JSON object"},
       }) {
    SCOPED_TRACE(r.body);
    const auto e = std::get<api_error>(parse_tokenizer_request(r.body, "h9", r.tokenize));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, r.param);
    EXPECT_NE(e.message.find(r.says), std::string::npos) << e.message;
  }
  EXPECT_EQ(std::get<wire::tokenize_request>(wire_request(R"({"prompt":"x","add_special_tokens":true})", true)).prompt, "x");
  // vLLM's chat form: the prompt a chat completion of it renders.
  const auto tpl = builtin("chatml");
  const std::string chat = R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}])";
  const auto completion = json::parse(chat_ok(R"({"model":"m",)" + chat.substr(1) + "}", tpl).frames.at(0));
  auto chat_request = [&](const std::string& body) {
    return std::get<wire::tokenize_request>(
      through_wire(body, parse_tokenizer_request(body, "h9", true, &tpl, "llama-2-7b")));
  };
  EXPECT_EQ(chat_request(chat + "}").prompt, completion["prompt"]);
  EXPECT_EQ(chat_request(chat + R"(,"add_generation_prompt":true,"add_special_tokens":false,"model":"m"})").prompt,
            completion["prompt"]);
  const jinja_source src{"{% for m in messages %}[{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}",
                         "<s>", "</s>"};
  const auto jinja = std::get<chat_template>(make_chat_template("model", {}, &src));
  const auto unopened = chat + R"(,"add_generation_prompt":false})";
  EXPECT_EQ(std::get<wire::tokenize_request>(
              through_wire(unopened, parse_tokenizer_request(unopened, "h9", true, &jinja, "m")))
              .prompt,
            "[S][Hi]");
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
         {R"(,"add_special_tokens":true})", "add_special_tokens"},
         {R"(,"tool_choice":"required"})", "tool_choice"},
         {R"(,"messages":[]})", "messages"}}) {
    const auto body = chat + extra;
    const auto r = parse_tokenizer_request(body, "h9", true, &tpl, "m");
    ASSERT_TRUE(std::holds_alternative<api_error>(r)) << body;
    EXPECT_EQ(std::get<api_error>(r).param, param) << body;
  }
  // A missing prompt reaches the wire parser, which names it.
  const auto missing = wire::parse_request(std::get<std::string>(parse_tokenizer_request("{}", "h9", true)), {});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(missing));
  EXPECT_NE(std::get<wire::parse_error>(missing).message.find("\"prompt\""), std::string::npos);

  EXPECT_EQ(json::parse(tokenize_json(wire::tokenize_reply{"h9", {1, 2, 3}, 4096})),
            (json{{"count", 3}, {"max_model_len", 4096}, {"tokens", {1, 2, 3}}}));
  EXPECT_EQ(json::parse(detokenize_json(wire::detokenize_reply{"h9", " river"})), (json{{"prompt", " river"}}));
}

TEST(openai, a_bearer_key_must_be_one_of_the_servers_when_it_has_any) {
  const std::vector<std::string> keys{"k-one", "k-two"};
  EXPECT_TRUE(authorized("", {})) << "no keys: no check";
  EXPECT_TRUE(authorized("Bearer k-one", keys));
  EXPECT_TRUE(authorized("bearer k-two", keys)) << "the scheme is case-insensitive";
  EXPECT_FALSE(authorized("", keys));
  EXPECT_FALSE(authorized("Bearer k-three", keys));
  EXPECT_FALSE(authorized("Bearer k-on", keys)) << "a prefix of a key";
  EXPECT_FALSE(authorized("Bearer k-one2", keys)) << "a key and more";
  EXPECT_FALSE(authorized("Bearer k-one ", keys));
  EXPECT_FALSE(authorized("k-one", keys));
  EXPECT_FALSE(authorized("Basic k-one", keys));
  EXPECT_FALSE(authorized("Bearer ", keys));
  const auto e = unauthorized(false);
  EXPECT_EQ(e.status, 401);
  EXPECT_EQ(e.code, "invalid_api_key");
  EXPECT_NE(e.message.find("Authorization: Bearer"), std::string::npos);
  EXPECT_NE(unauthorized(true).message.find("not one of"), std::string::npos);
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
  EXPECT_FALSE(j["data"][0].contains("max_model_len")) << "not said: left out";
  r.max_context = 4096;
  const auto with = json::parse(models_json("llama-2-7b", r, 5));
  for (const auto& m : with["data"])
    EXPECT_EQ(m["max_model_len"], 4096) << m;
  EXPECT_EQ(json::parse(std::get<std::string>(model_json("sql", "llama-2-7b", r, 5)))["max_model_len"], 4096);
}

TEST(openai, one_model_is_the_base_or_an_adapter_by_its_name) {
  wire::adapters_reply r;
  r.adapters = {{"sql", 16, true}, {"team/geo", 8, false}};
  auto m = model_json("team/geo", "llama-2-7b", r, 5);
  ASSERT_TRUE(std::holds_alternative<std::string>(m));
  const auto j = json::parse(std::get<std::string>(m));
  EXPECT_EQ(j["id"], "team/geo");
  EXPECT_EQ(j["object"], "model");
  EXPECT_EQ(j["parent"], "llama-2-7b");
  EXPECT_EQ(j["rank"], 8);
  EXPECT_EQ(json::parse(std::get<std::string>(model_json("llama-2-7b", "llama-2-7b", r, 5)))["id"], "llama-2-7b");
  const auto e = std::get<api_error>(model_json("nope", "llama-2-7b", r, 5));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(percent_decoded("team%2Fgeo"), "team/geo");
  EXPECT_EQ(percent_decoded("a%2fb%20c"), "a/b c");
  EXPECT_EQ(percent_decoded("100%"), "100%") << "a lone % stays";
  EXPECT_EQ(percent_decoded("%zz%4"), "%zz%4");
}

TEST(openai, version_is_the_builds) {
  const auto j = json::parse(version_json());
  EXPECT_EQ(j, (json{{"version", std::string(version())}}));
  const std::string v(version());
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_TRUE(!v.empty() && std::isdigit(static_cast<unsigned char>(v.front()))) << v;
}

TEST(openai, stats_become_prometheus_gauges_and_counters) {
  wire::stats_reply s;
  s.values = {stat_gauge("requests_in_flight", 3), stat_gauge("kv.blocks-used", 0.5),
              stat_gauge("broken", std::nan("")), stat_counter("intake_accepted", 12),
              stat_level("ttft_ms_p50", 4.5)};
  EXPECT_EQ(prometheus_text(s), "# TYPE troupe_requests_in_flight gauge\ntroupe_requests_in_flight 3.0\n"
                                "# TYPE troupe_kv_blocks_used gauge\ntroupe_kv_blocks_used 0.5\n"
                                "# TYPE troupe_intake_accepted_total counter\ntroupe_intake_accepted_total 12.0\n"
                                "# TYPE troupe_ttft_ms_p50 gauge\ntroupe_ttft_ms_p50 4.5\n");
}

TEST(openai, a_deployments_per_node_figures_become_labels_of_their_family) {
  wire::stats_reply s;
  s.values = {stat_level("ttft_ms_p99", 450),       stat_counter("intake_accepted", 9),
              stat_level("node0_ttft_ms_p99", 120), stat_level("node2_ttft_ms_p99", 450),
              stat_gauge("node0_alive", 1),         stat_counter("node0_placed", 4),
              stat_gauge("node2_alive", 0),         stat_counter("node2_placed", 5),
              stat_counter("node_pulls", 2),        stat_gauge("nodes_x", 1)};
  EXPECT_EQ(prometheus_text(s), "# TYPE troupe_ttft_ms_p99 gauge\n"
                                "troupe_ttft_ms_p99 450.0\n"
                                "troupe_ttft_ms_p99{node=\"0\"} 120.0\n"
                                "troupe_ttft_ms_p99{node=\"2\"} 450.0\n"
                                "# TYPE troupe_intake_accepted_total counter\n"
                                "troupe_intake_accepted_total 9.0\n"
                                "# TYPE troupe_node_alive gauge\n"
                                "troupe_node_alive{node=\"0\"} 1.0\n"
                                "troupe_node_alive{node=\"2\"} 0.0\n"
                                "# TYPE troupe_node_placed_total counter\n"
                                "troupe_node_placed_total{node=\"0\"} 4.0\n"
                                "troupe_node_placed_total{node=\"2\"} 5.0\n"
                                "# TYPE troupe_node_pulls_total counter\n"
                                "troupe_node_pulls_total 2.0\n"
                                "# TYPE troupe_nodes_x gauge\n"
                                "troupe_nodes_x 1.0\n");
}

TEST(openai, histogram_stats_become_one_prometheus_histogram_each) {
  wire::stats_reply s;
  s.values = {stat_counter("steps", 4),
              stat_counter("ttft_seconds_bucket_le_0.1", 2),
              stat_counter("ttft_seconds_bucket_le_1", 3),
              stat_counter("ttft_seconds_bucket_le_+Inf", 4),
              stat_counter("ttft_seconds_sum", 2.5),
              stat_counter("ttft_seconds_count", 4),
              stat_counter("e2e_seconds_bucket_le_+Inf", 0),
              stat_counter("e2e_seconds_sum", 0),
              stat_counter("e2e_seconds_count", 0),
              stat_gauge("queue_count", 7)};
  EXPECT_EQ(prometheus_text(s), "# TYPE troupe_steps_total counter\ntroupe_steps_total 4.0\n"
                                "# TYPE troupe_ttft_seconds histogram\n"
                                "troupe_ttft_seconds_bucket{le=\"0.1\"} 2.0\n"
                                "troupe_ttft_seconds_bucket{le=\"1\"} 3.0\n"
                                "troupe_ttft_seconds_bucket{le=\"+Inf\"} 4.0\n"
                                "troupe_ttft_seconds_sum 2.5\n"
                                "troupe_ttft_seconds_count 4.0\n"
                                "# TYPE troupe_e2e_seconds histogram\n"
                                "troupe_e2e_seconds_bucket{le=\"+Inf\"} 0.0\n"
                                "troupe_e2e_seconds_sum 0.0\n"
                                "troupe_e2e_seconds_count 0.0\n"
                                "# TYPE troupe_queue_count gauge\ntroupe_queue_count 7.0\n")
    << "a _count of no histogram stays a gauge";
}

// -- tools ------------------------------------------------------------------

const std::string weather_tool =
  R"({"type":"function","function":{"name":"get_weather","description":"Current weather",)"
  R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}})";
const std::string time_tool = R"({"type":"function","function":{"name":"get_time"}})";

/// A chat body: `messages`, the two tools, and `extra` fields.
std::string tool_chat(const std::string& messages, const std::string& extra = "") {
  return R"({"model":"m","messages":)" + messages + R"(,"tools":[)" + weather_tool + "," + time_tool + "]" + extra + "}";
}

const std::string ask = R"([{"role":"user","content":"Weather in Paris?"}])";

TEST(openai, tools_go_into_the_system_message_and_calls_and_results_into_turns_by_the_templates_formats) {
  const auto tpl = builtin("chatml");
  const auto weather_line =
    R"({"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":)"
    R"({"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}}})";
  const auto time_line = R"({"type":"function","function":{"name":"get_time"}})";
  std::string tools_text = tpl.tools;
  tools_text.replace(tools_text.find("{tools}"), 7, std::string(weather_line) + "\n" + time_line);
  const auto c = chat_ok(tool_chat(R"([{"role":"system","content":"Be brief."},
    {"role":"user","content":"Weather in Paris and Rome?"},
    {"role":"assistant","content":null,"tool_calls":[
      {"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
      {"id":"c2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"18C"},
    {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"21C"}]},
    {"role":"assistant","content":"Paris 18C, Rome 21C."},
    {"role":"user","content":"And Oslo?"}])"),
                         tpl);
  EXPECT_EQ(*as_generate(c).prompt,
            "<|im_start|>system\nBe brief." + tools_text + "<|im_end|>\n"
            "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\n21C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\nParis 18C, Rome 21C.<|im_end|>\n"
            "<|im_start|>user\nAnd Oslo?<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_TRUE(c.tools.has_value()) << "auto: the answer may be calls";
  EXPECT_FALSE(c.tools->forced);
  EXPECT_EQ(c.tools->names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_EQ(c.tools->open, "<tool_call>");
  EXPECT_EQ(c.tools->close, "</tool_call>");
  // Free text; a call the model opens (after the marker) is held to the
  // same schema as a forced one.
  EXPECT_EQ(as_generate(c).json_trigger, "<tool_call>");
  EXPECT_EQ(json::parse(as_generate(c).json_schema),
            json::parse(as_generate(chat_ok(tool_chat(R"([{"role":"user","content":"q"}])", R"(,"tool_choice":"required")"),
                                            tpl))
                          .json_schema));

  // Without a system message the tools make one, first.
  const auto alone = *as_generate(chat_ok(tool_chat(ask), tpl)).prompt;
  EXPECT_EQ(alone.substr(0, alone.find("<|im_end|>")), "<|im_start|>system\n# Tools" + tools_text.substr(tools_text.find("# Tools") + 7));
  // llama2: inside the first user turn; tool results are a user turn.
  const auto l = as_generate(chat_ok(tool_chat(R"([{"role":"user","content":"Weather?"},
    {"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"x","content":"noon"}])"),
                                     builtin("llama2"))).prompt.value();
  EXPECT_EQ(l.substr(0, 20), "[INST] <<SYS>>\n# Too");
  EXPECT_NE(l.find("<</SYS>>\n\nWeather? [/INST] <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call> </s><s>"
                   "[INST] <tool_response>\nnoon\n</tool_response> [/INST]"),
            std::string::npos)
    << l;
  // "none": tools are not shown and the answer is text.
  const auto none = chat_ok(tool_chat(ask, R"(,"tool_choice":"none")"), tpl);
  EXPECT_FALSE(none.tools.has_value());
  EXPECT_EQ(*as_generate(none).prompt, "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(openai, a_forced_call_opens_the_turn_and_is_held_to_the_tools_names_and_parameters) {
  const auto tpl = builtin("chatml");
  // "required": the output begins with a call; more may follow.
  const auto required = chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), tpl);
  ASSERT_TRUE(required.tools.has_value());
  EXPECT_TRUE(required.tools->forced);
  EXPECT_FALSE(required.tools->bare);
  const auto r = as_generate(required);
  EXPECT_TRUE(r.prompt->ends_with("<|im_start|>assistant\n")) << *r.prompt;
  EXPECT_EQ(r.json_trigger, "<tool_call>");
  EXPECT_TRUE(r.json_trigger_first);
  // Without parallel calls: the turn opens with the marker and the output
  // is one call's JSON.
  const auto one_call = chat_ok(tool_chat(ask, R"(,"tool_choice":"required","parallel_tool_calls":false)"), tpl);
  ASSERT_TRUE(one_call.tools.has_value());
  EXPECT_TRUE(one_call.tools->forced && one_call.tools->bare);
  const auto g = as_generate(one_call);
  EXPECT_TRUE(g.prompt->ends_with("<|im_start|>assistant\n<tool_call>\n")) << *g.prompt;
  EXPECT_EQ(g.json_trigger, "");
  EXPECT_FALSE(g.json_trigger_first);
  EXPECT_EQ(g.json_schema, r.json_schema);
  const auto schema = json::parse(g.json_schema);
  ASSERT_EQ(schema["anyOf"].size(), 2u);
  EXPECT_EQ(schema["anyOf"][0]["properties"]["name"], json({{"const", "get_weather"}}));
  EXPECT_EQ(schema["anyOf"][0]["properties"]["arguments"], json({{"$ref", "#/$defs/get_weather"}}));
  EXPECT_EQ(schema["anyOf"][0]["required"], json({"name", "arguments"}));
  EXPECT_EQ(schema["anyOf"][0]["additionalProperties"], false);
  EXPECT_EQ(schema["$defs"]["get_weather"]["required"], json({"city"}));
  EXPECT_EQ(schema["$defs"]["get_time"], json::parse(R"({"type":"object","properties":{},"additionalProperties":false})"))
    << "no parameters: no arguments";

  const auto named = chat_ok(tool_chat(ask, R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})"), tpl);
  ASSERT_TRUE(named.tools.has_value());
  EXPECT_TRUE(named.tools->forced && named.tools->bare) << "one call of the function named";
  EXPECT_EQ(named.tools->names, (std::vector<std::string>{"get_time"}));
  EXPECT_TRUE(as_generate(named).prompt->ends_with("<tool_call>\n"));
  const auto one = json::parse(as_generate(named).json_schema);
  EXPECT_EQ(one["anyOf"].size(), 1u);
  EXPECT_FALSE(one["$defs"].contains("get_weather"));
  // The prompt shows only the function the call must be of.
  EXPECT_EQ(as_generate(named).prompt->find("get_weather"), std::string::npos);

  // A function's own references ("#/$defs/..." of its parameters) follow it
  // into the call's schema.
  const auto nested = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":"required",
    "tools":[{"type":"function","function":{"name":"add","parameters":{"type":"object","$defs":{"n":{"type":"integer"}},
      "properties":{"a":{"$ref":"#/$defs/n"},"b":{"$ref":"#"}}}}}]})",
                              tpl);
  const auto ns = json::parse(as_generate(nested).json_schema);
  EXPECT_EQ(ns["$defs"]["add"]["properties"]["a"]["$ref"], "#/$defs/add/$defs/n");
  EXPECT_EQ(ns["$defs"]["add"]["properties"]["b"]["$ref"], "#/$defs/add");
}

TEST(openai, tool_requests_a_template_cannot_serve_or_that_are_wrong_are_refused_naming_the_field) {
  const auto tpl = builtin("chatml");
  auto refused_at = [&](const std::string& body) { return chat_refused(body, tpl); };
  auto param_of = [&](const std::string& body) { return refused_at(body).param; };
  auto with_tools = [](const std::string& tools, const std::string& extra = "") {
    return R"({"model":"m","messages":[{"role":"user","content":"q"}],"tools":)" + tools + extra + "}";
  };
  EXPECT_EQ(param_of(with_tools(R"({"type":"function"})")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"retrieval","function":{"name":"f"}}])")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"name":"no spaces"}}])")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"name":""}}])")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"description":"d"}}])")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"name":"f","parameters":"x"}}])")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"name":"f","strict":1}}])")), "tools");
  EXPECT_NE(refused_at(with_tools(R"([{"type":"function","function":{"name":"f","parameters":{"type":"array"}}}])"))
              .message.find("must describe the arguments' object"),
            std::string::npos);
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"name":"f","extra":1}}])")), "tools");
  EXPECT_EQ(param_of(with_tools(R"([{"type":"function","function":{"name":"f"},"x":1}])")), "tools");
  EXPECT_NE(refused_at(with_tools(R"([{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])"))
              .message.find("names an earlier tool"),
            std::string::npos);
  std::string many = "[";
  for (int i = 0; i <= 64; ++i)
    many += std::string(i ? "," : "") + R"({"type":"function","function":{"name":"f)" + std::to_string(i) + "\"}}";
  EXPECT_NE(refused_at(with_tools(many + "]")).message.find("at most 64"), std::string::npos);
  // tool_choice: one of its values, a function "tools" holds, and tools to choose from.
  EXPECT_EQ(param_of(tool_chat(ask, R"(,"tool_choice":"any")")), "tool_choice");
  EXPECT_EQ(param_of(tool_chat(ask, R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})")), "tool_choice");
  EXPECT_EQ(param_of(tool_chat(ask, R"(,"tool_choice":{"type":"function","name":"get_time"})")), "tool_choice");
  EXPECT_EQ(param_of(R"({"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":"required"})"),
            "tool_choice");
  EXPECT_EQ(param_of(tool_chat(ask, R"(,"parallel_tool_calls":"yes")")), "parallel_tool_calls");
  // Log-probabilities go with tools; not beside what shapes the answer otherwise.
  const auto lp = chat_ok(tool_chat(ask, R"(,"logprobs":true,"top_logprobs":3)"), tpl);
  EXPECT_EQ(lp.logprobs, 3);
  EXPECT_EQ(as_generate(lp).logprobs, 3);
  EXPECT_FALSE(as_generate(lp).json_trigger.empty());
  EXPECT_EQ(param_of(tool_chat(ask, R"(,"guided_json":{"type":"object"})")), "guided_json");
  chat_ok(tool_chat(ask, R"(,"tool_choice":"none","logprobs":true,"response_format":{"type":"json_object"})"), tpl);
  // Messages: calls as OpenAI writes them, results answering them.
  const std::string call = R"({"id":"c1","type":"function","function":{"name":"get_time","arguments":"{}"}})";
  auto messages_error = [&](const std::string& messages) {
    const auto e = refused_at(tool_chat(messages));
    EXPECT_EQ(e.param, "messages") << messages;
    return e.message;
  };
  EXPECT_NE(messages_error(R"([{"role":"user","content":"q"},{"role":"tool","tool_call_id":"c1","content":"x"}])")
              .find("names no call"),
            std::string::npos);
  EXPECT_NE(messages_error(R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[)" + call
                           + R"(]},{"role":"tool","tool_call_id":"c2","content":"x"}])")
              .find("\"c2\""),
            std::string::npos);
  EXPECT_NE(messages_error(R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[)" + call
                           + R"(]},{"role":"tool","content":"x"}])")
              .find("messages[2].tool_call_id"),
            std::string::npos);
  EXPECT_NE(messages_error(R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function",
                             "function":{"name":"f","arguments":"[1]"}}]}])")
              .find("messages[1].tool_calls[0].function.arguments"),
            std::string::npos);
  messages_error(R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[]}])");
  messages_error(R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"type":"function"}]}])");
  messages_error(R"([{"role":"user","content":"q"},{"role":"assistant","content":"a","tool_call_id":"c1"}])");
  messages_error(R"([{"role":"user","content":"q","tool_calls":[)" + call + "]}]");
  messages_error(R"([{"role":"user","content":"q"},{"role":"assistant"}])");
  // A template without tool formats refuses tools, and calls in messages.
  const auto plain = std::get<chat_template>(make_chat_template("custom", {.user = "U{content}", .assistant = "A{content}"}));
  EXPECT_EQ(chat_refused(tool_chat(ask), plain).param, "tools");
  EXPECT_NE(chat_refused(tool_chat(ask), plain).message.find("chat_tool_call"), std::string::npos);
  EXPECT_EQ(chat_refused(R"({"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[)" + call
                           + "]}]}",
                         plain)
              .param,
            "messages");
  chat_ok(tool_chat(ask, R"(,"tool_choice":"none")"), plain);
}

TEST(openai, a_refused_call_schema_names_the_tool_whose_parameters_are_at_fault) {
  const auto c = chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), builtin("chatml"));
  auto e = refusal(c, wire::error_code::bad_request,
                   R"(field "json_schema": the schema at "#/$defs/get_weather/properties/city" has "pattern")");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "tools");
  EXPECT_EQ(e.message, R"(field "tool_choice" forces a call, held to the tools' parameters: the parameters of tool )"
                       R"("get_weather" at "#/properties/city" has "pattern")");
  e = refusal(c, wire::error_code::bad_request, R"(field "json_schema": the sim backend samples from no logits)");
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_EQ(refusal(c, wire::error_code::bad_request, R"(field "max_tokens": too many)").message,
            R"(field "max_tokens": too many)");
  EXPECT_EQ(refusal(c, wire::error_code::overloaded, "busy").status, 429);
  const auto offered = chat_ok(tool_chat(ask), builtin("chatml"));
  e = refusal(offered, wire::error_code::bad_request, R"(field "json_schema": the schema at "#/$defs/get_time" is deep)");
  EXPECT_EQ(e.param, "tools");
  EXPECT_EQ(e.message, R"(a call the model opens is held to the tools' parameters: the parameters of tool "get_time" at )"
                       R"("#" is deep)");
  const auto text = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}]})", builtin("chatml"));
  EXPECT_EQ(refusal(text, wire::error_code::bad_request, R"(field "json_schema": x)").param, "");
}

TEST(openai, an_offered_call_is_held_to_parameters_the_server_can_enforce_and_to_an_object_otherwise) {
  const auto tpl = builtin("chatml");
  // The server's word: no "minLength" (get_weather's parameters have none:
  // enforceable).
  std::vector<std::string> asked;
  const auto enforceable = [&](const std::string& schema) {
    asked.push_back(schema);
    return schema.find("maxLength") == std::string::npos;
  };
  const std::string odd = R"({"type":"function","function":{"name":"odd","parameters":{"type":"object",
    "properties":{"s":{"type":"string","maxLength":3}}}}})";
  auto c = parse_chat_completion(R"({"model":"m","messages":[{"role":"user","content":"q"}],"tools":[)" + weather_tool
                                   + "," + odd + "]}",
                                 "m", "h1", tpl, enforceable);
  ASSERT_TRUE(std::holds_alternative<completion_request>(c));
  const auto schema = json::parse(as_generate(std::get<completion_request>(c)).json_schema);
  EXPECT_EQ(schema["$defs"]["odd"], json({{"type", "object"}}));
  EXPECT_EQ(schema["$defs"]["get_weather"]["required"], json({"city"}));
  EXPECT_EQ(asked.size(), 2u);
  // Forced, the parameters are the intake's to refuse, naming the tool.
  asked.clear();
  c = parse_chat_completion(R"({"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":"required","tools":[)"
                              + odd + "]}",
                            "m", "h1", tpl, enforceable);
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(json::parse(as_generate(std::get<completion_request>(c)).json_schema)["$defs"]["odd"]["properties"]["s"]
                                                                                   ["maxLength"],
            3);
}

/// A chat answer's choice 0: its message and finish_reason, whole.
json whole_message(const completion_request& c, const std::string& output, const char* reason = "stop") {
  const completion_answer a{"chatcmpl-http-5", 42, c};
  auto d = done(reason);
  d.text = output;
  return json::parse(a.body({d}))["choices"][0];
}

TEST(openai, calls_in_the_output_become_tool_calls_and_what_does_not_read_as_calls_stays_text) {
  const auto tpl = builtin("chatml");
  const auto c = chat_ok(tool_chat(ask), tpl);
  auto m = whole_message(c, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                            "</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":\"{}\"}\n</tool_call><|im_end|>");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_EQ(m["message"]["content"], "Let me look.\n");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(m["message"]["tool_calls"][0],
            json::parse(R"({"id":"call_42_5_0_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(m["message"]["tool_calls"][1]["function"]["arguments"], "{}") << "arguments given as a string";
  EXPECT_EQ(m["message"]["tool_calls"][1]["id"], "call_42_5_0_1");
  // Only calls: no content; the last call may end without its closing tag.
  m = whole_message(c, "  <tool_call>{\"name\":\"get_time\",\"arguments\":{}}");
  EXPECT_TRUE(m["message"]["content"].is_null());
  EXPECT_EQ(m["message"]["tool_calls"].size(), 1u);
  // parallel_tool_calls false: the first call.
  const auto single = chat_ok(tool_chat(ask, R"(,"parallel_tool_calls":false)"), tpl);
  m = whole_message(single, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call><tool_call>"
                            "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["name"], "get_time");
  // A call counts once its name and the start of its arguments are read
  // (a stream has sent it by then): cut short, it keeps the arguments read
  // and the output's finish_reason; what follows the calls is not the
  // answer's.
  struct counted {
    std::string out;
    std::string arguments;
    const char* finish;
  };
  for (const auto& [out, arguments, finish] : std::vector<counted>{
         {"<tool_call>{\"name\":\"get_time\",\"arguments\":{}", "{}", "length"}, // its object not closed
         {"<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\": \"Par", "{\"city\":\"Par", "length"},
         {"<tool_call>{\"name\":\"get_time\",\"arguments\":{},\"x\":1}</tool_call>", "{}", "length"},
         {"<tool_call>{\"arguments\":{\"a\" : [1, 2]}, \"name\":\"get_time\"}", "{\"a\":[1,2]}", "tool_calls"},
         {"<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call> and more", "{}", "tool_calls"},
         {"<tool_call>{\"name\":\"get_time\",\"arguments\":{\"a\":1,}}", "{\"a\":1,", "length"}, // broken JSON
       }) {
    m = whole_message(c, out, "length");
    EXPECT_EQ(m["finish_reason"], finish) << out;
    EXPECT_TRUE(m["message"]["content"].is_null()) << out;
    ASSERT_EQ(m["message"]["tool_calls"].size(), 1u) << out;
    EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["arguments"], arguments) << out;
  }
  // Not calls: text as the model wrote it, finish_reason its own.
  for (const std::string out : {"<tool_call>{\"name\":\"get_time\",\"arguments\"", // cut before the arguments
                                "<tool_call>{\"name\":\"get_date\",\"arguments\":{}}</tool_call>", // no such tool
                                "<tool_call>{\"name\":\"get_time\",\"arguments\":[]}</tool_call>",
                                "<tool_call>{\"name\":\"get_time\",\"arguments\":\"[]\"}</tool_call>",
                                "<tool_call>{\"name\":\"get_time\"}</tool_call>",
                                "<tool_call>{\"x\":1,\"name\":\"get_time\",\"arguments\":{}}</tool_call>",
                                "<tool_call>{\"arguments\":{}}</tool_call>", "<tool_call>x{}",
                                "I would call <tool_call but did not", "No calls."}) {
    m = whole_message(c, out, "length");
    EXPECT_EQ(m["finish_reason"], "length") << out;
    EXPECT_EQ(m["message"]["content"], out);
    EXPECT_FALSE(m["message"].contains("tool_calls")) << out;
  }
  // "required": the calls that read from the output's start; what follows
  // them is not the answer's.
  const auto required = chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), tpl);
  m = whole_message(required, "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>\n<tool_call>"
                              "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>zz<tool_call>{",
                    "length");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["message"]["content"].is_null());
  ASSERT_EQ(m["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(m["message"]["tool_calls"][1]["function"]["arguments"], "{\"city\":\"Oslo\"}");
  m = whole_message(required, "<tool_call>{\"name\":\"get_time\",\"argu", "length");
  EXPECT_EQ(m["finish_reason"], "length") << "no call read: the text";
  EXPECT_EQ(m["message"]["content"], "<tool_call>{\"name\":\"get_time\",\"argu");
  // One call (named, or no parallel calls): the output is the call's JSON.
  const auto forced = chat_ok(tool_chat(ask, R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"), tpl);
  m = whole_message(forced, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["message"]["content"].is_null());
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Rome\"}");
  m = whole_message(forced, "{\"name\": \"get_weather\", \"argu", "length");
  EXPECT_EQ(m["finish_reason"], "length");
  EXPECT_EQ(m["message"]["content"], "{\"name\": \"get_weather\", \"argu");
}

/// What a chat stream's events say of choice 0: its content joined, its
/// tool calls (each delta's, by index, arguments joined) and its
/// finish_reason.
struct streamed_chat {
  std::string content;
  std::string reasoning; ///< the reasoning_content deltas joined
  json calls = json::array();
  json finish;
  json logprobs = json::array(); ///< the log-probabilities that came, in order
};

streamed_chat read_stream(const std::string& sse) {
  streamed_chat out;
  for (const auto& e : events(sse)) {
    if (!e.is_object() || e["choices"].empty())
      continue;
    const auto& ch = e["choices"][0];
    if (!ch["finish_reason"].is_null())
      out.finish = ch["finish_reason"];
    const auto& d = ch["delta"];
    if (d.contains("content") && d["content"].is_string())
      out.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content"))
      out.reasoning += d["reasoning_content"].get<std::string>();
    if (!ch["logprobs"].is_null())
      for (const auto& t : ch["logprobs"]["content"])
        out.logprobs.push_back(t["logprob"]);
    if (d.contains("tool_calls"))
      for (const auto& tc : d["tool_calls"]) {
        const auto i = tc["index"].get<std::size_t>();
        if (out.calls.size() <= i)
          out.calls.push_back({{"id", tc["id"]}, {"type", tc["type"]}, {"function", {{"name", ""}, {"arguments", ""}}}});
        auto& f = out.calls[i]["function"];
        if (tc["function"].contains("name"))
          f["name"] = f["name"].get<std::string>() + tc["function"]["name"].get<std::string>();
        f["arguments"] = f["arguments"].get<std::string>() + tc["function"].value("arguments", "");
      }
  }
  return out;
}

/// Streams choice 0 of an answer to `c` whose output is `out`, in pieces
/// of 1 to 6 bytes drawn from `seed` (one token each, with a
/// log-probability of its own where `c` asks), and checks that the stream
/// says what the whole answer says: its finish_reason, reasoning, content
/// and calls, and every token's log-probability once, in order.
void expect_stream_says_what_the_whole_says(const completion_request& c, const std::string& out, std::uint64_t& seed) {
  auto next = [&] { return (seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  std::vector<wire::token_reply> tokens;
  for (std::size_t at = 0; at < out.size();) {
    const auto len = std::min<std::size_t>(out.size() - at, 1 + next() % 6);
    wire::token_reply t;
    t.index = static_cast<std::uint32_t>(tokens.size());
    t.text = out.substr(at, len);
    if (c.logprobs >= 0)
      t.logprobs.push_back(token_lp(static_cast<std::int32_t>(t.index), t.text, -1.0f - static_cast<float>(t.index)));
    tokens.push_back(std::move(t));
    at += len;
  }
  auto d = done("stop");
  d.text = out;
  if (c.logprobs >= 0) {
    d.logprobs.emplace();
    for (const auto& t : tokens)
      d.logprobs->push_back(t.logprobs.at(0));
  }
  const auto whole = json::parse(completion_answer{"chatcmpl-http-5", 42, c}.body({d}))["choices"][0];
  const auto& msg = whole["message"];
  const auto text_of = [&](const char* key) { return msg.value(key, json()).is_null() ? "" : msg[key].get<std::string>(); };
  json listed = json::array();
  if (!whole["logprobs"].is_null())
    for (const auto& t : whole["logprobs"]["content"])
      listed.push_back(t["logprob"]);
  // The whole answer lists the tokens in order, every one where no stop
  // string cuts the output.
  for (std::size_t i = 0; i < listed.size(); ++i)
    EXPECT_EQ(listed[i], -1.0 - static_cast<double>(i)) << out;
  if (std::ranges::none_of(c.stop, [&](const std::string& stop) { return out.find(stop) != std::string::npos; })) {
    EXPECT_EQ(listed.size(), c.logprobs >= 0 ? tokens.size() : 0) << out << ": the whole answer lists every token";
  }
  completion_answer a{"chatcmpl-http-5", 42, c};
  std::string sse = a.stream_start();
  for (const auto& t : tokens)
    sse += a.chunk(0, t);
  sse += a.choice_end(0, d) + a.stream_end();
  const auto s = read_stream(sse);
  EXPECT_EQ(s.finish, whole["finish_reason"]) << out;
  EXPECT_EQ(s.reasoning, text_of("reasoning_content")) << out;
  EXPECT_EQ(s.content, text_of("content")) << out;
  EXPECT_EQ(s.calls, msg.value("tool_calls", json::array())) << out;
  EXPECT_EQ(s.logprobs, listed) << out << ": every token's, once, in order";
}

/// Each answer streamed 40 ways, with log-probabilities and without.
void expect_streams_say_what_the_wholes_say(const std::vector<completion_request>& requests,
                                            const std::vector<std::string>& outputs, std::uint64_t seed) {
  for (const auto& given : requests)
    for (const std::int32_t logprobs : {-1, 2}) {
      auto c = given;
      c.logprobs = std::max(c.logprobs, logprobs);
      for (const auto& out : outputs)
        for (int trial = 0; trial < 20; ++trial)
          expect_stream_says_what_the_whole_says(c, out, seed);
    }
}

TEST(openai, a_streamed_answer_with_tools_says_what_the_whole_one_says_however_its_tokens_fall) {
  const auto tpl = builtin("chatml");
  const std::vector<completion_request> requests{
    chat_ok(tool_chat(ask), tpl), chat_ok(tool_chat(ask, R"(,"parallel_tool_calls":false)"), tpl),
    chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), tpl),
    chat_ok(tool_chat(ask, R"(,"tool_choice":"required","parallel_tool_calls":false)"), tpl)};
  const std::vector<std::string> outputs{
    "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call><|im_end|>ignored",
    "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}",
    "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>x<tool_call>{\"name\":\"get_time\"",
    "{\"name\":\"get_time\",\"arguments\":{}}",
    "a <tool_ca b <tool_call>{\"name\":\"get_date\",\"arguments\":{}}</tool_call>",
    "<tool_call>{\"arguments\": {\"a\": \"x y\"}, \"name\": \"get_time\"}</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
    "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"a\":1,}}",
    "<tool_call>{\"name\":\"get_time\",\"arguments\":\"{\\\"b\\\": 2}\"}</tool_call>\n<tool_call> "
    "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}",
    "text only, <tool and <",
    "<tool_call>",
    "",
  };
  expect_streams_say_what_the_wholes_say(requests, outputs, 7);
}

TEST(openai, with_tools_the_log_probabilities_list_every_token_the_calls_too) {
  const auto c = chat_ok(tool_chat(ask, R"(,"logprobs":true)"), builtin("chatml"));
  const std::vector<std::string> texts{"Sure.", "<tool_call>", "{\"name\": \"get_time\", ", "\"arguments\": {",
                                       "}}", "</tool_call>", ""};
  auto d = done("eos");
  d.text = "";
  d.logprobs.emplace();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    d.text = d.text.value_or("") + texts[i];
    d.logprobs->push_back(token_lp(static_cast<std::int32_t>(i), texts[i], -0.5f * static_cast<float>(i + 1)));
  }
  const auto whole = json::parse(completion_answer{"chatcmpl-http-5", 42, c}.body({d}))["choices"][0];
  EXPECT_EQ(whole["finish_reason"], "tool_calls");
  EXPECT_EQ(whole["message"]["content"], "Sure.");
  const auto& listed = whole["logprobs"]["content"];
  ASSERT_EQ(listed.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(listed[i]["token"], texts[i]);
    EXPECT_EQ(listed[i]["logprob"], -0.5 * static_cast<double>(i + 1));
  }
  // Streamed, a token's goes with the chunk that sends what it read: the
  // marker's and the name's with the call's first delta, the rest at the end.
  completion_answer a{"chatcmpl-http-5", 42, c};
  (void)a.stream_start();
  std::vector<json> carried;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    wire::token_reply t;
    t.index = static_cast<std::uint32_t>(i);
    t.text = texts[i];
    t.logprobs.push_back(d.logprobs->at(i));
    json tokens = json::array();
    for (const auto& e : events(a.chunk(0, t)))
      if (e.is_object() && !e["choices"][0]["logprobs"].is_null())
        for (const auto& x : e["choices"][0]["logprobs"]["content"])
          tokens.push_back(x["token"]);
    carried.push_back(std::move(tokens));
  }
  EXPECT_EQ(carried[0], json({"Sure."}));
  EXPECT_EQ(carried[1], json::array()) << "the marker is read with what follows it";
  EXPECT_EQ(carried[2], json::array()) << "the name is sent once the arguments begin";
  EXPECT_EQ(carried[3], json({"<tool_call>", "{\"name\": \"get_time\", ", "\"arguments\": {"}))
    << "with the call's id and name";
  EXPECT_EQ(carried[4], json({"}}"})) << "with its arguments";
  const auto end = events(a.choice_end(0, d));
  ASSERT_FALSE(end.empty());
  const auto& last = end.back()["choices"][0];
  EXPECT_EQ(last["finish_reason"], "tool_calls");
  ASSERT_FALSE(last["logprobs"].is_null());
  EXPECT_EQ(last["logprobs"]["content"].size(), 2u) << "the closing tag's and the end's, with the finish";
}

TEST(openai, legacy_functions_are_tools_and_their_call_comes_back_as_function_call) {
  const auto tpl = builtin("chatml");
  const std::string fn = R"({"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}})";
  const std::string tool = R"({"type":"function","function":)" + fn + "}";
  const std::string q = R"({"model":"m","messages":[{"role":"user","content":"Weather?"}],)";
  // functions are tools; function_call is tool_choice; one call.
  const auto named = chat_ok(q + R"("functions":[)" + fn + R"(],"function_call":{"name":"get_weather"}})", tpl);
  EXPECT_TRUE(named.legacy_functions);
  EXPECT_EQ(named.frames, chat_ok(q + R"("tools":[)" + tool + R"(],"tool_choice":{"type":"function","function":)"
                                      R"({"name":"get_weather"}},"parallel_tool_calls":false})",
                                  tpl)
                            .frames);
  const auto any = chat_ok(q + R"("functions":[)" + fn + "]}", tpl);
  EXPECT_EQ(any.frames, chat_ok(q + R"("tools":[)" + tool + R"(],"parallel_tool_calls":false})", tpl).frames);
  EXPECT_FALSE(chat_ok(q + R"("tools":[)" + tool + "]}", tpl).legacy_functions);
  EXPECT_FALSE(chat_ok(q + R"("tools":[)" + tool + R"(],"functions":null,"function_call":null})", tpl).legacy_functions)
    << "nulls ask for nothing";
  // A legacy answer's message sent back as the SDK writes it (tool_calls null).
  chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,)"
          R"("function_call":{"name":"get_weather","arguments":"{}"},"tool_calls":null},)"
          R"({"role":"function","name":"get_weather","content":"x"}],"functions":[)" + fn + "]}",
          tpl);
  // A history of legacy calls and results: the tool calls and results they stand for.
  const std::string past = R"({"model":"m","messages":[{"role":"user","content":"Weather?"},)"
                           R"({"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},)";
  EXPECT_EQ(chat_ok(past + R"({"role":"function","name":"get_weather","content":"12C"}],"functions":[)" + fn + "]}", tpl).frames,
            chat_ok(past.substr(0, past.find("\"function_call\"")) + R"("tool_calls":[{"id":"call_fn1","type":"function",)"
                      R"("function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},)"
                      R"({"role":"tool","tool_call_id":"call_fn1","name":"get_weather","content":"12C"}],)"
                      R"("tools":[)" + tool + R"(],"parallel_tool_calls":false})",
                    tpl)
              .frames);
  // The answer: message.function_call (no id), finish_reason "function_call".
  const std::string out = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const auto m = whole_message(any, out, "eos");
  EXPECT_EQ(m["finish_reason"], "function_call");
  EXPECT_FALSE(m["message"].contains("tool_calls"));
  EXPECT_TRUE(m["message"]["content"].is_null());
  EXPECT_EQ(m["message"]["function_call"], json::parse(R"({"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"})"));
  // Streamed: the name first, then the arguments, as deltas of function_call.
  for (std::size_t split = 1; split < out.size(); split += 7) {
    completion_answer a{"chatcmpl-http-5", 42, any};
    std::string sse = a.stream_start();
    wire::token_reply t;
    t.text = out.substr(0, split);
    sse += a.chunk(0, t);
    t.index = 1;
    t.text = out.substr(split);
    sse += a.chunk(0, t);
    auto d = done("eos");
    d.text = out;
    sse += a.choice_end(0, d);
    json call = {{"name", ""}, {"arguments", ""}};
    json finish;
    bool first = true;
    for (const auto& e : events(sse)) {
      if (!e.is_object() || e["choices"].empty())
        continue;
      const auto& ch = e["choices"][0];
      if (!ch["finish_reason"].is_null())
        finish = ch["finish_reason"];
      EXPECT_FALSE(ch["delta"].contains("tool_calls"));
      if (!ch["delta"].contains("function_call"))
        continue;
      const auto& f = ch["delta"]["function_call"];
      EXPECT_EQ(f.contains("name"), first) << "the name in the first delta alone";
      first = false;
      if (f.contains("name"))
        call["name"] = f["name"];
      call["arguments"] = call["arguments"].get<std::string>() + f.value("arguments", "");
    }
    EXPECT_EQ(call, m["message"]["function_call"]) << split;
    EXPECT_EQ(finish, "function_call") << split;
  }
  // Errors name the legacy fields.
  auto param_of = [&](const std::string& extra) { return chat_refused("{\"model\":\"m\"," + extra + "}", tpl).param; };
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q"}],"functions":[)" + fn + R"(],"tools":[)" + tool + "]"),
            "functions");
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q"}],"functions":[)" + fn + R"(],"function_call":"any")"),
            "function_call");
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q"}],"functions":[{"name":1}])"), "functions");
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q"}],"functions":[)" + fn +
                     R"(],"function_call":{"name":"nope"})"),
            "function_call");
  EXPECT_EQ(param_of(R"("messages":[{"role":"user","content":"q"},{"role":"function","name":"f","content":"x"}])"),
            "messages")
    << "a result answering no call";
}

TEST(openai, a_streamed_call_goes_out_as_it_is_read_its_id_and_name_first_then_its_arguments) {
  const auto c = chat_ok(tool_chat(ask), builtin("chatml"));
  completion_answer a{"chatcmpl-http-5", 42, c};
  (void)a.stream_start();
  // Each token, and the tool_calls delta its chunk carries (null: none).
  const std::vector<std::pair<std::string, json>> steps{
    {"Sure.", nullptr},
    {"<tool_call>", nullptr},
    {"\n{\"name\": \"get_", nullptr},
    {"weather\", ", nullptr}, // the name's member has ended, no arguments yet
    {"\"arguments\": {", json::parse(R"([{"index":0,"id":"call_42_5_0_0","type":"function",)"
                                     R"("function":{"name":"get_weather","arguments":"{"}}])")},
    {"\"city\": ", json::parse(R"([{"index":0,"function":{"arguments":"\"city\":"}}])")},
    {"\"Par", json::parse(R"([{"index":0,"function":{"arguments":"\"Par"}}])")},
    {"is \"} ", json::parse(R"([{"index":0,"function":{"arguments":"is \"}"}}])")},
    {"}\n</tool_call>\n<tool_call>{\"name\":\"get_time\",\"arguments\":{}}",
     json::parse(R"([{"index":1,"id":"call_42_5_0_1","type":"function","function":{"name":"get_time","arguments":"{}"}}])")},
  };
  std::string text;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    wire::token_reply t;
    t.index = static_cast<std::uint32_t>(i);
    t.text = steps[i].first;
    text += t.text;
    json calls;
    for (const auto& e : events(a.chunk(0, t))) {
      const auto& d = e["choices"][0]["delta"];
      if (d.contains("content")) {
        EXPECT_EQ(d["content"], "Sure.") << i;
      }
      if (d.contains("tool_calls"))
        calls = d["tool_calls"];
    }
    EXPECT_EQ(calls, steps[i].second) << i;
  }
  auto d = done("stop");
  d.text = text;
  const auto end = events(a.choice_end(0, d));
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_FALSE(end[0]["choices"][0]["delta"].contains("tool_calls"));
}

TEST(openai, a_lark_grammar_is_held_as_the_gbnf_it_stands_for) {
  // vLLM takes Lark in guided_grammar (turning it into EBNF): so does Troupe.
  const std::string lark = "start: \"yes\" | \"no\" NUM\nNUM: /[0-9]/";
  for (const auto& field : {std::string(R"("guided_grammar":)") + json(lark).dump(),
                            std::string(R"("structured_outputs":{"grammar":)") + json(lark).dump() + "}"}) {
    const auto g = as_generate(ok(R"({"model":"m","prompt":"p",)" + field + "}"));
    EXPECT_EQ(g.grammar, "root ::= \"yes\" | \"no\" NUM\nNUM ::= ([0-9])\n") << field;
  }
  // GBNF stays as it is; Lark that cannot be read is refused, naming the field and the line.
  EXPECT_EQ(as_generate(ok(R"({"model":"m","prompt":"p","guided_grammar":"root ::= \"a\""})")).grammar, "root ::= \"a\"");
  const auto e = refused(R"({"model":"m","prompt":"p","guided_grammar":"start: x\n%declare x"})");
  EXPECT_EQ(e.param, "guided_grammar");
  EXPECT_NE(e.message.find("Lark grammar Troupe cannot read: line 2: %declare"), std::string::npos) << e.message;
  EXPECT_EQ(refused(R"({"model":"m","prompt":"p","structured_outputs":{"grammar":"start: /^a/"}})").param,
            "structured_outputs");
}

TEST(openai, vllms_guided_json_and_structured_outputs_give_the_wire_its_schema) {
  const std::string schema = R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})";
  const auto want = json::parse(schema);
  const std::string as_text = json(schema).dump(); // the schema as a JSON string
  for (const auto& field : {R"("guided_json":)" + schema, R"("guided_json":)" + as_text,
                            R"("structured_outputs":{"json":)" + schema + "}",
                            R"("structured_outputs":{"json":)" + as_text + R"(,"json_object":false,"regex":null})",
                            R"("guided_json":)" + schema + R"(,"guided_decoding_backend":"xgrammar")",
                            R"("guided_json":)" + schema + R"(,"response_format":{"type":"text"})"}) {
    const auto c = ok(R"({"model":"m","prompt":"p",)" + field + "}");
    EXPECT_EQ(json::parse(as_generate(c).json_schema), want) << field;
    EXPECT_FALSE(as_generate(c).json_object) << field;
    EXPECT_FALSE(c.schema_field.empty()) << field;
    const auto chat = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],)" + field + "}",
                              builtin("chatml"));
    EXPECT_EQ(json::parse(as_generate(chat).json_schema), want) << field;
  }
  EXPECT_TRUE(as_generate(ok(R"({"model":"m","prompt":"p","structured_outputs":{"json_object":true}})")).json_object);
  // guided_regex and structured_outputs' regex: the wire's regex.
  for (const auto& field : {std::string(R"("guided_regex":"[0-9]+")"),
                            std::string(R"("structured_outputs":{"regex":"[0-9]+"})")}) {
    const auto c = ok(R"({"model":"m","prompt":"p",)" + field + "}");
    EXPECT_EQ(as_generate(c).regex, "[0-9]+") << field;
    const auto r = refusal(c, wire::error_code::bad_request, R"(field "regex": lookaround is not supported at 1)");
    EXPECT_EQ(r.param, c.schema_field);
    EXPECT_EQ(r.message, "field \"" + c.schema_field + "\": lookaround is not supported at 1");
  }
  // guided_grammar and structured_outputs' grammar: the wire's grammar.
  for (const auto& field : {std::string(R"("guided_grammar":"root ::= [0-9]+")"),
                            std::string(R"("structured_outputs":{"grammar":"root ::= [0-9]+"})")}) {
    const auto c = ok(R"({"model":"m","prompt":"p",)" + field + "}");
    EXPECT_EQ(as_generate(c).grammar, "root ::= [0-9]+") << field;
    EXPECT_TRUE(as_generate(c).regex.empty()) << field;
    const auto r = refusal(c, wire::error_code::bad_request, R"(field "grammar": the rule x is used but not defined)");
    EXPECT_EQ(r.param, c.schema_field);
    EXPECT_EQ(r.message, "field \"" + c.schema_field + "\": the rule x is used but not defined");
  }
  // guided_choice and structured_outputs' choice: the wire's choice.
  for (const auto& field : {std::string(R"("guided_choice":["yes","no"])"),
                            std::string(R"("structured_outputs":{"choice":["yes","no"]})")}) {
    const auto c = ok(R"({"model":"m","prompt":"p",)" + field + "}");
    EXPECT_EQ(as_generate(c).choice, (std::vector<std::string>{"yes", "no"})) << field;
    EXPECT_TRUE(as_generate(c).json_schema.empty()) << field;
    EXPECT_EQ(as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],)" + field + "}",
                                  builtin("chatml")))
                .choice,
              (std::vector<std::string>{"yes", "no"}))
      << field;
    // The wire checks the choices; its refusal names the field given.
    const auto r = refusal(c, wire::error_code::bad_request, R"(field "choice" must be an array of 1 to 64 ...)");
    EXPECT_EQ(r.param, c.schema_field);
    EXPECT_TRUE(r.message.starts_with("field \"" + c.schema_field + "\" must be")) << r.message;
  }
  const auto bad_choices = ok(R"({"model":"m","prompt":"p","guided_choice":[]})");
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(wire::parse_request(bad_choices.frames.at(0), wire::parse_limits{})));
  EXPECT_TRUE(ok(R"({"model":"m","prompt":"p","guided_json":null,"structured_outputs":null})").schema_field.empty());
  // What cannot be served, or is wrong, is refused naming the field.
  for (const auto& [field, param, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
         {R"("guided_json":[1])", "guided_json", "must be a JSON Schema"},
         {R"("guided_json":"{not json")", "guided_json", "must be a JSON Schema"},
         {R"("guided_json":{},"response_format":{"type":"json_object"})", "guided_json", "give one"},
         {R"("guided_json":{},"structured_outputs":{"json":{}})", "structured_outputs", "give one"},
         {R"("structured_outputs":{"json":{},"json_object":true})", "structured_outputs", "more than one"},
         {R"("structured_outputs":{"choice":["a"],"json":{}})", "structured_outputs", "more than one"},
         {R"("guided_choice":["a"],"guided_json":{})", "guided_choice", "give one"},
         {R"("structured_outputs":{"xml":"root"})", "structured_outputs", "\"structured_outputs.xml\" is not served"},
         {R"("structured_outputs":{"grammar":"root ::= x","regex":"a"})", "structured_outputs", "more than one"},
         {R"("guided_grammar":"root ::= [a]","guided_regex":"a")", "guided_grammar", "give one"},
         {R"("guided_whitespace_pattern":" ")", "guided_whitespace_pattern", "is not served"},
         {R"("structured_outputs":[])", "structured_outputs", "must be an object"},
         {R"("guided_regex":"a+","guided_choice":["a"])", "guided_regex", "give one"},
         {R"("structured_outputs":{"regex":"a","choice":["a"]})", "structured_outputs", "more than one"},
         {R"("guided_decoding_backend":1)", "guided_decoding_backend", "must be a string"},
       }) {
    const auto e = refused(R"({"model":"m","prompt":"p",)" + field + "}");
    EXPECT_EQ(e.param, param) << field;
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  }
  // With tools offered, the calls are held: no other schema.
  const auto e = chat_refused(tool_chat(ask, R"(,"guided_json":{"type":"object"})"), builtin("chatml"));
  EXPECT_EQ(e.param, "guided_json");
  // The wire's refusal of the schema names the field that gave it.
  const auto c = ok(R"({"model":"m","prompt":"p","guided_json":{"type":"object","not":{}}})");
  const auto r = refusal(c, wire::error_code::bad_request, R"(field "json_schema": the keyword "not" is not enforced)");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.param, "guided_json");
  EXPECT_EQ(r.message, R"(field "guided_json": the keyword "not" is not enforced)");
}

// -- reasoning ---------------------------------------------------------------

chat_template reasoning_template(const char* parser) {
  auto tpl = builtin("chatml");
  tpl.reasoning = reasoning_parser(parser);
  EXPECT_TRUE(tpl.reasoning) << parser;
  return tpl;
}

TEST(openai, a_reasoning_parser_gives_the_thinking_as_reasoning_content_apart_from_the_content) {
  EXPECT_EQ(reasoning_parser_names(), (std::vector<std::string>{"deepseek_r1", "qwen3"}));
  EXPECT_FALSE(reasoning_parser("granite"));
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"2+2?"}]})";
  struct row {
    const char* parser;
    std::string output;
    json reasoning; ///< null: none
    json content;
  };
  const std::vector<row> rows{
    // Qwen3: the output opens its reasoning (blanks before the mark go).
    {"qwen3", "<think>\nAdd them.\n</think>\n\nFour.", "\nAdd them.\n", "\n\nFour."},
    {"qwen3", "\n <think>x</think>y", "x", "y"},
    {"qwen3", "Four.", nullptr, "Four."}, // no reasoning (enable_thinking false)
    {"qwen3", "Four. <think>x</think>", nullptr, "Four. <think>x</think>"}, // only at the start
    {"qwen3", "<think>cut short by max_tokens", "cut short by max_tokens", nullptr},
    {"qwen3", "<think>all</think>", "all", nullptr},
    {"qwen3", "", nullptr, nullptr},
    // DeepSeek R1: the prompt opened it; a leading mark is dropped.
    {"deepseek_r1", "Add them.\n</think>\n\nFour.", "Add them.\n", "\n\nFour."},
    {"deepseek_r1", "<think>Add.</think>Four.", "Add.", "Four."},
    {"deepseek_r1", "still thinking", "still thinking", nullptr},
  };
  for (const auto& r : rows) {
    const auto c = chat_ok(body, reasoning_template(r.parser));
    ASSERT_TRUE(c.reasoning);
    const auto m = whole_message(c, r.output)["message"];
    EXPECT_EQ(m["reasoning_content"], r.reasoning) << r.parser << " " << r.output;
    EXPECT_EQ(m["content"], r.content) << r.parser << " " << r.output;
  }
  // Without a parser the whole output is content, and no reasoning_content.
  const auto plain = whole_message(chat_ok(body, builtin("chatml")), "<think>x</think>y")["message"];
  EXPECT_EQ(plain["content"], "<think>x</think>y");
  EXPECT_FALSE(plain.contains("reasoning_content"));
  // Tool calls are read in the content only: a call written while thinking is not one.
  const auto tools = chat_ok(tool_chat(ask), reasoning_template("qwen3"));
  auto m = whole_message(tools, "<think>I will call <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"
                                "</think>\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}"
                                "</tool_call>");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_EQ(m["message"]["reasoning_content"], "I will call <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>");
  EXPECT_TRUE(m["message"]["content"].is_null());
  ASSERT_EQ(m["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  // Beside response_format, the content after the thinking is calls or the
  // answer, which comes back as the content.
  const auto formatted = chat_ok(tool_chat(ask, R"(,"response_format":{"type":"json_object"})"), reasoning_template("qwen3"));
  const auto fg = as_generate(formatted);
  EXPECT_EQ(fg.reasoning_close, "</think>");
  EXPECT_EQ(fg.json_trigger, "<tool_call>");
  EXPECT_EQ(json::parse(fg.json_answer), json({{"type", "object"}}));
  m = whole_message(formatted, "<think>Paris, surely.</think>\n{\"city\": \"Paris\"}");
  EXPECT_EQ(m["message"]["reasoning_content"], "Paris, surely.");
  EXPECT_EQ(m["message"]["content"], "\n{\"city\": \"Paris\"}");
  EXPECT_EQ(m["finish_reason"], "stop");
  // Reasoning sent back in the chat is taken, as vLLM and llama.cpp take
  // it (agents send the answer's message back whole); a built-in template
  // leaves past thinking out, as DeepSeek R1's does (a Hugging Face
  // template is given it).
  const auto history = [](const char* reasoning) {
    return std::string(R"({"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a")")
           + reasoning + R"(},{"role":"user","content":"p"}]})";
  };
  EXPECT_EQ(as_generate(chat_ok(history(R"(,"reasoning_content":"r")"), reasoning_template("qwen3"))).prompt,
            as_generate(chat_ok(history(""), reasoning_template("qwen3"))).prompt);
}

TEST(openai, a_streamed_answer_with_reasoning_says_what_the_whole_one_says_however_its_tokens_fall) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"q"}]})";
  std::vector<completion_request> requests;
  for (const char* parser : {"qwen3", "deepseek_r1"}) {
    requests.push_back(chat_ok(body, reasoning_template(parser)));
    requests.push_back(chat_ok(tool_chat(ask), reasoning_template(parser)));
    // Forced calls, which the model writes after its thinking.
    requests.push_back(chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), reasoning_template(parser)));
    requests.push_back(chat_ok(tool_chat(ask, R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})"),
                               reasoning_template(parser)));
    auto with_logprobs = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"logprobs":true})",
                                 reasoning_template(parser));
    requests.push_back(std::move(with_logprobs));
  }
  const std::vector<std::string> outputs{
    "<think>\nAdd them.\n</think>\n\nFour.",
    "  <think>a</th</think>b</think>",
    "<thin",
    "<think",
    "<think>no end, <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call></thin",
    "x</think><tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>",
    "<think>two</think>\n<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":"
    "\"get_time\",\"arguments\":{}}</tool_call>",
    "Four. <think>x</think>",
    "\r\r<tool_call>{\"naeAtop333333", // blanks, then no call after all
    "<think>y</think> \n<tool_call>{\"name\":\"get_ti",
    "<>< </ </think",
    " ",
    "",
  };
  expect_streams_say_what_the_wholes_say(requests, outputs, 11);
}

// -- Hugging Face (Jinja) templates ----------------------------------------

chat_template jinja_template(std::string_view text, chat_formats custom = {}, std::string bos = "<s>",
                             std::string eos = "</s>") {
  const jinja_source src{std::string(text), std::move(bos), std::move(eos)};
  auto t = make_chat_template("model", std::move(custom), &src);
  if (auto* e = std::get_if<chat_template_error>(&t)) {
    ADD_FAILURE() << e->key << " " << e->what;
    return {};
  }
  return std::get<chat_template>(std::move(t));
}

TEST(openai, a_jinja_template_of_llamas_inst_format_renders_as_the_builtin_llama2_does) {
  // The same format, made two ways: the built-in formats, and a template
  // in the shape of the one Llama 2 ships (BOS and EOS as text). After the
  // leading BOS (which the tokenizer adds) they are the same prompt.
  const auto jinja = jinja_template(test_templates::inst_style);
  const auto builtin_llama2 = builtin("llama2");
  for (const char* messages : {
         R"([{"role":"user","content":"Q"}])",
         R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi "},
             {"role":"assistant","content":" Hello"},{"role":"user","content":"Sum 2+2"}])",
         R"([{"role":"user","content":"é 中文\n"},{"role":"assistant","content":" x "},{"role":"user","content":"y"},
             {"role":"assistant","content":"z"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}])"}) {
    const auto body = std::string(R"({"model":"m","messages":)") + messages + "}";
    EXPECT_EQ(as_generate(chat_ok(body, jinja)).prompt, as_generate(chat_ok(body, builtin_llama2)).prompt) << messages;
  }
  // Its own refusal (raise_exception) is the client's error, in its words.
  const auto e = chat_refused(R"({"model":"m","messages":[{"role":"user","content":"A"},{"role":"user","content":"B"}]})",
                              jinja);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("the chat template cannot render this chat"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("roles must go user, assistant, user, ..."), std::string::npos) << e.message;
}

TEST(openai, a_jinja_template_is_given_messages_and_tools_as_transformers_gives_them) {
  chat_formats custom;
  custom.tool_call = "<call>{call}</call>";
  custom.stop = {"<|end|>"};
  const auto tpl = jinja_template("{{ bos_token }}{{ messages|tojson }}\n{{ tools|tojson }}\n{{ add_generation_prompt }}"
                                  "{{ eos_token }}",
                                  custom, "[BOS]", "[EOS]");
  const auto c = chat_ok(R"({"model":"m","stop":"S","messages":[
      {"role":"developer","content":"S"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"tool_calls":[
        {"id":"c1","type":"function","function":{"name":"f","arguments":"{\"z\": 1, \"a\": [true]}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"18C"}],
    "tools":[{"type":"function","function":{"name":"f","description":"d",
      "parameters":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"array"}}}}},
      {"function":{"name":"g"},"type":"function"}]})",
                         tpl);
  const auto g = as_generate(c);
  // Roles as transformers knows them, text parts joined, arguments as an
  // object, and every object in the request's own key order; the leading
  // bos_token is left to the tokenizer.
  EXPECT_EQ(*g.prompt,
            R"([{"role": "system", "content": "S"}, {"role": "user", "content": "a\nb"}, )"
            R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", )"
            R"("function": {"name": "f", "arguments": {"z": 1, "a": [true]}}}]}, )"
            R"({"role": "tool", "content": "18C", "tool_call_id": "c1"}])"
            "\n"
            R"([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", )"
            R"("properties": {"z": {"type": "integer"}, "a": {"type": "array"}}}}}, {"function": {"name": "g"}, "type": "function"}])"
            "\nTrue[EOS]");
  EXPECT_EQ(g.stop, (std::vector<std::string>{"S", "<|end|>"})) << "the request's stop strings, then chat_stop";
  // A participant's name, and an assistant's reasoning sent back (vLLM's
  // `reasoning` as `reasoning_content`, which Qwen 3's template reads); the
  // SDK's nulls left out.
  EXPECT_EQ(*as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q","name":"ann"},
      {"role":"assistant","content":"4","reasoning_content":"2+2","refusal":null},{"role":"user","content":"r"},
      {"role":"assistant","content":"5","reasoning":"2+3","name":"bot"},{"role":"user","content":"s"}]})",
                                 tpl))
               .prompt,
            R"([{"role": "user", "content": "q", "name": "ann"}, )"
            R"({"role": "assistant", "content": "4", "reasoning_content": "2+2"}, {"role": "user", "content": "r"}, )"
            R"({"role": "assistant", "content": "5", "name": "bot", "reasoning_content": "2+3"}, )"
            R"({"role": "user", "content": "s"}])"
            "\nnull\nTrue[EOS]");
  // An answer that was all thinking, sent back: its content the empty text.
  EXPECT_EQ(*as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":null,"reasoning_content":"hm"},{"role":"user","content":"r"}]})",
                                 tpl))
               .prompt,
            R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "reasoning_content": "hm"}, )"
            R"({"role": "user", "content": "r"}])"
            "\nnull\nTrue[EOS]");
  EXPECT_EQ(chat_refused(R"({"model":"m","messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":null,"reasoning_content":null},{"role":"user","content":"r"}]})",
                         tpl)
              .param,
            "messages")
    << "no content, calls or thinking";
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_EQ(c.tools->open, "<call>") << "chat_tool_call says how the model writes a call";
  EXPECT_EQ(c.tools->close, "</call>");
  // A forced call opens the assistant's turn with the marker.
  const auto forced = as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],
      "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
                                          tpl));
  EXPECT_TRUE(forced.prompt->ends_with("True[EOS]<call>")) << *forced.prompt;
  // tool_choice "none": the template is given no tools (None, as
  // transformers gives it).
  EXPECT_TRUE(as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],
      "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})",
                                  tpl))
                .prompt->ends_with("\nnull\nTrue[EOS]"));
}

TEST(openai, a_chat_that_sets_no_max_tokens_may_run_to_the_end_of_the_context) {
  const auto chat = [](const std::string& extra, const sampling_defaults& d = {}) {
    auto r = parse_chat_completion(R"({"model":"m","messages":[{"role":"user","content":"q"}])" + extra + "}", "m",
                                   "h1", builtin("chatml"), {}, d);
    EXPECT_TRUE(std::holds_alternative<completion_request>(r)) << extra;
    return as_generate(std::get<completion_request>(r));
  };
  auto g = chat("");
  EXPECT_TRUE(g.fit_context);
  EXPECT_EQ(g.max_tokens, wire::parse_limits{}.max_tokens) << "the wire's limit, which the intake cuts to the context";
  g = chat(R"(,"max_tokens":null,"max_completion_tokens":null)");
  EXPECT_TRUE(g.fit_context);
  g = chat(R"(,"max_tokens":7)");
  EXPECT_FALSE(g.fit_context) << "one given: as given (a prompt that leaves no room for it is refused)";
  EXPECT_EQ(g.max_tokens, 7u);
  EXPECT_FALSE(chat(R"(,"max_completion_tokens":7)").fit_context);
  // The model's max_new_tokens where the chat gives none.
  g = chat("", sampling_defaults{.max_tokens = 2048});
  EXPECT_TRUE(g.fit_context);
  EXPECT_EQ(g.max_tokens, 2048u);
  EXPECT_EQ(chat(R"(,"max_tokens":7)", sampling_defaults{.max_tokens = 2048}).max_tokens, 7u);
  // Completions keep OpenAI's 16, the model's max_new_tokens or not.
  const auto c = ok(R"({"model":"m","prompt":"p"})");
  EXPECT_FALSE(as_generate(c).fit_context);
  EXPECT_EQ(as_generate(c).max_tokens, 16u);
  EXPECT_EQ(as_generate(std::get<completion_request>(parse_completion(R"({"model":"m","prompt":"p"})", "m", "h1",
                                                                       sampling_defaults{.max_tokens = 2048})))
              .max_tokens,
            16u);
}

TEST(openai, vllms_min_p_and_repetition_penalty_pass_to_the_wire_as_they_are) {
  auto g = as_generate(ok(R"({"model":"m","prompt":"p","repetition_penalty":1.05,"min_p":0.1})"));
  EXPECT_EQ(g.sampling.repetition_penalty, 1.05f);
  EXPECT_EQ(g.sampling.min_p, 0.1f);
  g = as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"repetition_penalty":0.9,)"
                          R"("min_p":0})",
                          builtin("chatml")));
  EXPECT_EQ(g.sampling.repetition_penalty, 0.9f);
  EXPECT_EQ(g.sampling.min_p, 0.0f);
  g = as_generate(ok(R"({"model":"m","prompt":"p","repetition_penalty":null,"min_p":null})"));
  EXPECT_EQ(g.sampling.repetition_penalty, 1.0f) << "null: none";
  EXPECT_EQ(g.sampling.min_p, 0.0f);
  // Out of range: the wire refuses it, naming it.
  for (const auto* body : {R"({"model":"m","prompt":"p","min_p":2})", R"({"model":"m","prompt":"p","repetition_penalty":0})",
                           R"({"model":"m","prompt":"p","min_p":"0.1"})"}) {
    const auto parsed = wire::parse_request(ok(body).frames.at(0), wire::parse_limits{});
    ASSERT_TRUE(std::holds_alternative<wire::parse_error>(parsed)) << body;
    const auto& m = std::get<wire::parse_error>(parsed).message;
    EXPECT_TRUE(m.find("\"min_p\"") != std::string::npos || m.find("\"repetition_penalty\"") != std::string::npos) << m;
  }
}

TEST(openai, vllms_fields_at_the_values_that_leave_them_out_are_taken_and_others_refused) {
  // At their neutral values (or null), in completions and chats.
  const auto c = ok(R"({"model":"m","prompt":"p","use_beam_search":false,)"
                    R"("skip_special_tokens":true,"include_stop_str_in_output":false,"top_k":-1})");
  EXPECT_EQ(as_generate(c).sampling.top_k, 0) << "vLLM's -1: no cut";
  (void)ok(R"({"model":"m","prompt":"p","use_beam_search":null,"skip_special_tokens":null})");
  (void)chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"use_beam_search":false,)"
                R"("include_stop_str_in_output":false})",
                builtin("chatml"));
  // skip_special_tokens is served: false goes to the wire, which checks it.
  EXPECT_TRUE(as_generate(c).skip_special_tokens);
  EXPECT_FALSE(as_generate(ok(R"({"model":"m","prompt":"p","skip_special_tokens":false})")).skip_special_tokens);
  EXPECT_FALSE(as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"skip_special_tokens":false})",
                                   builtin("chatml")))
                 .skip_special_tokens);
  const auto odd = ok(R"({"model":"m","prompt":"p","skip_special_tokens":"no"})");
  const auto odd_parsed = wire::parse_request(odd.frames.at(0), wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(odd_parsed));
  EXPECT_NE(std::get<wire::parse_error>(odd_parsed).message.find("\"skip_special_tokens\""), std::string::npos);
  // OpenAI's, at the values that say nothing Troupe does not do; and the
  // strings and tags it reads past.
  for (const char* fields : {R"("store":false,"service_tier":"auto","modalities":["text"])",
                             R"("store":null,"service_tier":"default","modalities":null,"metadata":{"run":"7"})",
                             R"("user":"u","safety_identifier":"s1","prompt_cache_key":"k","metadata":null)"}) {
    (void)ok(R"({"model":"m","prompt":"p",)" + std::string(fields) + "}");
    (void)chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],)" + std::string(fields) + "}",
                  builtin("chatml"));
  }
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
         {"safety_identifier", "1"}, {"prompt_cache_key", "{}"}, {"metadata", "[]"}, {"metadata", R"({"a":1})"},
         {"metadata", R"({")" + std::string(65, 'k') + R"(":"v"})"}})
    EXPECT_EQ(refused(R"({"model":"m","prompt":"p",")" + field + "\":" + value + "}").param, field) << value;
  // Another value: refused, naming the field and what Troupe serves.
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
         {"store", "true"},
         {"service_tier", "\"flex\""}, {"modalities", R"(["text","audio"])"}}) {
    const auto e = refused(R"({"model":"m","prompt":"p",")" + field + "\":" + value + "}");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, field);
    EXPECT_NE(e.message.find("is served only as"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("got " + value), std::string::npos) << e.message;
    EXPECT_EQ(chat_refused(R"({"model":"m","messages":[{"role":"user","content":"q"}],")" + field + "\":" + value + "}",
                           builtin("chatml"))
                .param,
              field);
  }
  // vLLM's beam search: a completion's (its settings taken); a chat's only off.
  EXPECT_FALSE(ok(R"({"model":"m","prompt":"p","use_beam_search":false,"length_penalty":1})").beam);
  const auto beams = ok(R"({"model":"m","prompt":"p","use_beam_search":true,"n":2,"best_of":4,"max_tokens":7,)"
                        R"("length_penalty":0.5,"ignore_eos":true,"logprobs":3,"temperature":0,"user":"u"})");
  ASSERT_TRUE(beams.beam);
  EXPECT_EQ(beams.beam->width, 4u);
  EXPECT_EQ(beams.beam->max_tokens, 7u);
  EXPECT_EQ(beams.beam->length_penalty, 0.5);
  EXPECT_TRUE(beams.beam->ignore_eos);
  EXPECT_EQ(beams.beam->logprobs, 3);
  EXPECT_EQ(beams.n, 2u);
  EXPECT_EQ(beams.best_of, 4u);
  EXPECT_EQ(ok(R"({"model":"m","prompt":"p","use_beam_search":true,"n":3})").beam->width, 3u);
  for (const auto& [fields, param, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
         {R"("use_beam_search":"false")", "use_beam_search", "true or false"},
         {R"("use_beam_search":true,"stream":true)", "stream", "not served with"},
         {R"("use_beam_search":true,"top_p":0.5)", "top_p", "not served with"},
         {R"("use_beam_search":true,"temperature":1)", "temperature", "not served with"},
         {R"("use_beam_search":true,"echo":true)", "echo", "not served with"},
         {R"("use_beam_search":true,"best_of":11)", "best_of", "at most 10 beams"},
         {R"("use_beam_search":true,"n":11)", "n", "at most 10 beams"},
         {R"("length_penalty":2)", "length_penalty", "needs \"use_beam_search\": true"},
         {R"("use_beam_search":true,"length_penalty":"long")", "length_penalty", "a number"},
       }) {
    const auto e = refused(R"({"model":"m","prompt":"p",)" + fields + "}");
    EXPECT_EQ(e.status, 400) << fields;
    EXPECT_EQ(e.param, param) << fields;
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  }
  // A chat's: n beams, as many steps as it gives tokens (it must give a
  // count), its template's stop strings no field of the client's.
  const auto chatml = builtin("chatml");
  const auto chat_beams = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}],"use_beam_search":true,)"
                                  R"("n":3,"max_completion_tokens":5,"logprobs":true,"top_logprobs":2,"temperature":0})",
                                  chatml);
  ASSERT_TRUE(chat_beams.beam);
  EXPECT_EQ(chat_beams.beam->width, 3u);
  EXPECT_EQ(chat_beams.beam->max_tokens, 5u);
  EXPECT_EQ(chat_beams.beam->logprobs, 2);
  EXPECT_FALSE(chat_beams.stop.empty()); // the template's, applied to the answer's text
  for (const auto& [fields, param] : std::vector<std::pair<std::string, std::string>>{
         {R"("use_beam_search":true)", "max_completion_tokens"},
         {R"("use_beam_search":true,"max_tokens":4,"stop":["x"])", "stop"},
         {R"("use_beam_search":true,"max_tokens":4,"tools":[{"type":"function","function":{"name":"f"}}])", "tools"},
         {R"("use_beam_search":true,"max_tokens":4,"n":11)", "n"},
         {R"("length_penalty":3)", "length_penalty"}}) {
    const auto e = chat_refused(R"({"model":"m","messages":[{"role":"user","content":"q"}],)" + fields + "}", chatml);
    EXPECT_EQ(e.param, param) << fields << " " << e.message;
  }
  // Below -1, the wire refuses it, naming it.
  const auto below = ok(R"({"model":"m","prompt":"p","top_k":-2})");
  const auto parsed = wire::parse_request(below.frames.at(0), wire::parse_limits{});
  ASSERT_TRUE(std::holds_alternative<wire::parse_error>(parsed));
  EXPECT_NE(std::get<wire::parse_error>(parsed).message.find("\"top_k\""), std::string::npos);
}

TEST(openai, sampling_left_out_takes_the_models_defaults_and_what_a_request_gives_wins) {
  const sampling_defaults qwen{.temperature = 0.7, .top_p = 0.8, .top_k = 20, .repetition_penalty = 1.05};
  const auto taken = [&](const std::string& body) {
    auto r = parse_completion(body, "m", "h1", qwen);
    EXPECT_TRUE(std::holds_alternative<completion_request>(r)) << body;
    return as_generate(std::get<completion_request>(r));
  };
  auto g = taken(R"({"model":"m","prompt":"p"})");
  EXPECT_EQ(g.sampling.temperature, 0.7f);
  EXPECT_EQ(g.sampling.top_p, 0.8f);
  EXPECT_EQ(g.sampling.top_k, 20);
  EXPECT_EQ(g.sampling.repetition_penalty, 1.05f);
  EXPECT_EQ(g.sampling.min_p, 0.0f) << "the model gives none";
  EXPECT_EQ(taken(R"({"model":"m","prompt":"p","repetition_penalty":1})").sampling.repetition_penalty, 1.0f)
    << "the request's";
  EXPECT_EQ(as_generate(std::get<completion_request>(
                          parse_completion(R"({"model":"m","prompt":"p"})", "m", "h1", sampling_defaults{.min_p = 0.05})))
              .sampling.min_p,
            0.05f);
  g = taken(R"({"model":"m","prompt":"p","temperature":0,"top_p":null,"top_k":0})");
  EXPECT_EQ(g.sampling.temperature, 0.0f) << "the request's";
  EXPECT_EQ(g.sampling.top_p, 0.8f) << "null: the default";
  EXPECT_EQ(g.sampling.top_k, 0) << "0: no cut, as the request says";
  // Only what the model gives: the rest keep the wire's defaults.
  auto only_t = parse_completion(R"({"model":"m","prompt":"p"})", "m", "h1", sampling_defaults{.temperature = 0.6});
  const auto w = as_generate(std::get<completion_request>(only_t));
  EXPECT_EQ(w.sampling.temperature, 0.6f);
  EXPECT_EQ(w.sampling.top_p, wire::generate_request{}.sampling.top_p);
  EXPECT_EQ(w.sampling.top_k, wire::generate_request{}.sampling.top_k);
  // Chats too, each choice of n.
  auto chat = parse_chat_completion(R"({"model":"m","n":2,"messages":[{"role":"user","content":"q"}]})", "m", "h1",
                                    builtin("chatml"), {}, qwen);
  ASSERT_TRUE(std::holds_alternative<completion_request>(chat));
  for (std::size_t k = 0; k < 2; ++k)
    EXPECT_EQ(as_generate(std::get<completion_request>(chat), k, 2).sampling.top_k, 20);
  // None: the wire's (OpenAI's).
  EXPECT_EQ(as_generate(ok(R"({"model":"m","prompt":"p"})")).sampling.temperature,
            wire::generate_request{}.sampling.temperature);
}

TEST(openai, a_chat_brings_its_own_template_only_where_the_server_takes_them) {
  const std::string own =
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}";
  const auto body = [&](const json& tpl_text, const std::string& extra = "") {
    return R"({"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"}],)"
           R"("chat_template":)" + tpl_text.dump() + extra + "}";
  };
  auto served = builtin("chatml");
  // Off (the default): refused, naming the key that turns them on.
  const auto off = chat_refused(body(own), served);
  EXPECT_EQ(off.status, 400);
  EXPECT_EQ(off.param, "chat_template");
  EXPECT_NE(off.message.find("request_chat_template"), std::string::npos) << off.message;
  // On: the chat's template renders it; the server's stop strings stay.
  served.request_templates = true;
  const auto g = as_generate(chat_ok(body(own), served));
  EXPECT_EQ(*g.prompt, "[system] Be brief.\n[user] 2+2?\n[assistant] ");
  EXPECT_NE(std::find(g.stop.begin(), g.stop.end(), "<|im_end|>"), g.stop.end());
  // The request's template variables go to it, as to a served one's.
  EXPECT_EQ(*as_generate(chat_ok(body(own, R"(,"add_generation_prompt":false)"), served)).prompt,
            "[system] Be brief.\n[user] 2+2?\n");
  EXPECT_EQ(*as_generate(chat_ok(body("{{ mood }}: {{ messages[1].content }}", R"(,"chat_template_kwargs":{"mood":"calm"})"),
                                 served))
               .prompt,
            "calm: 2+2?");
  // null: the server's own.
  EXPECT_TRUE(as_generate(chat_ok(body(nullptr), served)).prompt->starts_with("<|im_start|>system\nBe brief."));
  // A template that cannot be read, or is no string: 400, saying why.
  const auto broken = chat_refused(body("line one\n{% if %}"), served);
  EXPECT_EQ(broken.status, 400);
  EXPECT_NE(broken.message.find("line 2"), std::string::npos) << broken.message;
  EXPECT_NE(chat_refused(body(3), served).message.find("a non-empty string"), std::string::npos);
  EXPECT_NE(chat_refused(body(""), served).message.find("a non-empty string"), std::string::npos);
  // Under a served Hugging Face template: its special texts, and its call
  // format.
  auto hf = jinja_template(test_templates::chatml_tools, {}, "<s>", "<|im_end|>");
  hf.request_templates = true;
  EXPECT_EQ(*as_generate(chat_ok(body("{{ bos_token }}{{ messages[1].content }}{{ eos_token }}"), hf)).prompt,
            "2+2?<|im_end|>")
    << "the leading BOS dropped, as for the served template";
  const auto called = chat_ok(tool_chat(ask, R"(,"chat_template":"{{ tools | length }} tools: {{ messages[0].content }}")"), hf);
  ASSERT_TRUE(called.tools);
  EXPECT_EQ(called.tools->open, "<tool_call>");
  EXPECT_EQ(*as_generate(called).prompt, "2 tools: Weather in Paris?");
}

TEST(openai, a_jinja_templates_call_format_is_hermes_where_its_text_has_tool_call_tags_and_unknown_otherwise) {
  const auto qwen_like = jinja_template(test_templates::chatml_tools, {}, "", "<|im_end|>");
  const auto c = chat_ok(tool_chat(ask), qwen_like);
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_EQ(c.tools->open, "<tool_call>");
  EXPECT_EQ(c.tools->close, "</tool_call>");
  const auto prompt = *as_generate(c).prompt;
  EXPECT_TRUE(prompt.starts_with("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools")) << prompt;
  EXPECT_NE(prompt.find(R"({"type": "function", "function": {"name": "get_weather", "description": "Current weather", )"
                        R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})"),
            std::string::npos)
    << prompt;
  EXPECT_TRUE(prompt.ends_with("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")) << prompt;

  // A template that shows no call format: tools are refused, saying how to
  // name one; a chat without tools is served.
  const auto plain = jinja_template("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}");
  const auto e = chat_refused(tool_chat(ask), plain);
  EXPECT_EQ(e.param, "tools");
  EXPECT_NE(e.message.find("http.chat_tool_call"), std::string::npos) << e.message;
  EXPECT_EQ(*as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}]})", plain)).prompt, "user: q\n");
}

TEST(openai, mistrals_calls_are_one_array_after_its_marker_held_read_and_shown_again_in_the_history) {
  const auto tpl = jinja_template(test_templates::mistral_tools);
  ASSERT_EQ(tpl.tool_call, "[TOOL_CALLS] {calls}") << "read from the template's text";
  // "auto": free text; the marker opens the calls' array, held to the
  // tools. Special tokens show, as the marker is one in Mistral's
  // vocabulary.
  const auto c = chat_ok(tool_chat(ask), tpl);
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_TRUE(c.tools->array);
  EXPECT_EQ(c.tools->open, "[TOOL_CALLS]");
  EXPECT_EQ(c.tools->close, "");
  auto g = as_generate(c);
  EXPECT_NE(g.prompt->find("[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
            std::string::npos)
    << *g.prompt;
  EXPECT_TRUE(g.prompt->ends_with("[INST] Weather in Paris?[/INST]")) << *g.prompt;
  EXPECT_EQ(g.json_trigger, "[TOOL_CALLS]");
  EXPECT_FALSE(g.json_trigger_first);
  EXPECT_FALSE(g.skip_special_tokens);
  auto schema = json::parse(g.json_schema);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  EXPECT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["arguments"], json({{"$ref", "#/$defs/get_weather"}}));
  EXPECT_EQ(schema["$defs"]["get_weather"]["required"], json({"city"}));
  // A request that says skip_special_tokens keeps its word.
  EXPECT_TRUE(as_generate(chat_ok(tool_chat(ask, R"(,"skip_special_tokens":true)"), tpl)).skip_special_tokens);
  // One call: an array of one; named, the turn opens with the marker.
  schema = json::parse(as_generate(chat_ok(tool_chat(ask, R"(,"parallel_tool_calls":false)"), tpl)).json_schema);
  EXPECT_EQ(schema["maxItems"], 1);
  const auto named = chat_ok(tool_chat(ask, R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})"), tpl);
  ASSERT_TRUE(named.tools.has_value() && named.tools->bare);
  g = as_generate(named);
  EXPECT_TRUE(g.prompt->ends_with("[/INST][TOOL_CALLS]")) << *g.prompt;
  EXPECT_EQ(g.json_trigger, "");
  schema = json::parse(g.json_schema);
  EXPECT_EQ(schema["maxItems"], 1);
  EXPECT_EQ(schema["items"]["anyOf"].size(), 1u);
  // "required": the output begins with the marker and the array.
  g = as_generate(chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), tpl));
  EXPECT_EQ(g.json_trigger, "[TOOL_CALLS]");
  EXPECT_TRUE(g.json_trigger_first);

  // The calls read from the array, each with an id of nine letters and
  // digits, as Mistral's templates want them back.
  auto m = whole_message(c, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                            "{\"name\": \"get_time\", \"arguments\": {}}]");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["message"]["content"].is_null());
  ASSERT_EQ(m["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"],
            json::parse(R"({"name":"get_weather","arguments":"{\"city\":\"Paris\"}"})"));
  std::vector<std::string> ids;
  for (const auto& call : m["message"]["tool_calls"]) {
    const auto id = call["id"].get<std::string>();
    EXPECT_EQ(id.size(), 9u) << id;
    EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }))
      << id;
    ids.push_back(id);
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_EQ(whole_message(c, "No call needed.")["message"]["content"], "No call needed.");
  // Those calls and their results go back into the next turn's prompt,
  // which the template renders (it refuses ids of another length).
  const auto history = R"([{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,
    "tool_calls":[{"id":")" + ids[0] + R"(","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":")" + ids[0] + R"(","content":"sunny"}])";
  const auto next = *as_generate(chat_ok(tool_chat(history), tpl)).prompt;
  EXPECT_NE(next.find(R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": ")" + ids[0]
                      + R"("}]</s>[TOOL_RESULTS] {"content": sunny, "call_id": ")" + ids[0] + "\"}[/TOOL_RESULTS]"),
            std::string::npos)
    << next;
}

TEST(openai, mistrals_later_calls_are_named_before_their_arguments_held_read_and_shown_again_in_the_history) {
  const auto tpl = jinja_template(test_templates::mistral_named_tools);
  ASSERT_EQ(tpl.tool_call, "[TOOL_CALLS]{name}[ARGS]{arguments}") << "read from the template's text";
  // "auto": free text; the marker opens a name, "[ARGS]" and that tool's
  // arguments, held to its parameters. Special tokens show.
  const auto c = chat_ok(tool_chat(ask), tpl);
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_FALSE(c.tools->array);
  EXPECT_EQ(c.tools->open, "[TOOL_CALLS]");
  EXPECT_EQ(c.tools->head, "[ARGS]");
  EXPECT_EQ(c.tools->close, "");
  auto g = as_generate(c);
  EXPECT_NE(g.prompt->find("[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
            std::string::npos)
    << *g.prompt;
  EXPECT_TRUE(g.prompt->ends_with("[INST]Weather in Paris?[/INST]")) << *g.prompt;
  EXPECT_EQ(g.json_trigger, "[TOOL_CALLS]");
  EXPECT_EQ(g.json_trigger_head, "[ARGS]");
  EXPECT_FALSE(g.json_trigger_first);
  EXPECT_FALSE(g.skip_special_tokens);
  auto schema = json::parse(g.json_schema);
  EXPECT_EQ(schema["properties"].size(), 2u);
  EXPECT_EQ(schema["properties"]["get_weather"]["required"], json({"city"}));
  EXPECT_EQ(schema["properties"]["get_time"], json::parse(R"({"type":"object","properties":{},"additionalProperties":false})"));
  // Named: the turn opens with the marker, the name and the mark; the
  // output is the arguments, and ends with them.
  const auto named = chat_ok(tool_chat(ask, R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"), tpl);
  ASSERT_TRUE(named.tools.has_value() && named.tools->bare);
  g = as_generate(named);
  EXPECT_TRUE(g.prompt->ends_with("[/INST][TOOL_CALLS]get_weather[ARGS]")) << *g.prompt;
  EXPECT_EQ(g.json_trigger, "");
  EXPECT_EQ(g.json_trigger_head, "");
  EXPECT_EQ(json::parse(g.json_schema)["required"], json({"city"}));
  // "required": the output begins with the marker; one call only
  // (parallel_tool_calls false) is the first the output makes.
  for (const char* extra : {R"(,"tool_choice":"required")", R"(,"tool_choice":"required","parallel_tool_calls":false)"}) {
    const auto forced = chat_ok(tool_chat(ask, extra), tpl);
    ASSERT_TRUE(forced.tools.has_value());
    EXPECT_FALSE(forced.tools->bare) << "the name is the output's to write";
    g = as_generate(forced);
    EXPECT_EQ(g.json_trigger, "[TOOL_CALLS]");
    EXPECT_EQ(g.json_trigger_head, "[ARGS]");
    EXPECT_TRUE(g.json_trigger_first);
  }

  // The calls read one after another, each with an id of nine letters and
  // digits; text before them is the content.
  auto m = whole_message(c, R"(Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{})");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_EQ(m["message"]["content"], "Checking.");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"],
            json::parse(R"({"name":"get_weather","arguments":"{\"city\":\"Paris\"}"})"));
  EXPECT_EQ(m["message"]["tool_calls"][1]["function"], json::parse(R"({"name":"get_time","arguments":"{}"})"));
  for (const auto& call : m["message"]["tool_calls"])
    EXPECT_EQ(call["id"].get<std::string>().size(), 9u);
  m = whole_message(named, R"( {"city": "Rome"})");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"], json::parse(R"({"name":"get_weather","arguments":"{\"city\":\"Rome\"}"})"));
  EXPECT_TRUE(m["message"]["content"].is_null());
  // Streamed, the same.
  std::uint64_t seed = 11;
  expect_streams_say_what_the_wholes_say(
    {c, named},
    {R"(Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{})",
     R"([TOOL_CALLS]get_time[ARGS]{"tz": "UTC"})", "No call [TOOL", R"( {"city": "Rome"})"},
    seed);
  // The calls and their results go back into the next turn's prompt, as
  // the template renders them.
  const auto history = R"([{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,
    "tool_calls":[{"id":"abcDEF123","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"abcDEF123","content":"sunny"}])";
  const auto next = *as_generate(chat_ok(tool_chat(history), tpl)).prompt;
  EXPECT_TRUE(next.ends_with(R"([INST]Weather in Paris?[/INST][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}</s>)"
                             "[TOOL_RESULTS]sunny[/TOOL_RESULTS]"))
    << next;
}

TEST(openai, a_custom_template_may_name_each_call_before_its_arguments) {
  auto made = make_chat_template("custom", {.system = "S: {content}\n", .user = "U: {content}\n", .assistant = "A: {content}\n",
                                            .tools = "T: {tools}", .tool_call = "<function={name}>{arguments}</function>",
                                            .tool_result = "R: {content}"});
  ASSERT_TRUE(std::holds_alternative<chat_template>(made));
  const auto& tpl = std::get<chat_template>(made);
  const auto history = R"([{"role":"user","content":"q"},{"role":"assistant","content":"Sure.","tool_calls":[
    {"id":"c1","type":"function","function":{"name":"get_time","arguments":"{}"}},
    {"id":"c2","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Rome\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"noon"}])";
  const auto c = chat_ok(tool_chat(history), tpl);
  auto g = as_generate(c);
  EXPECT_NE(g.prompt->find("A: Sure.\n<function=get_time>{}</function>\n<function=get_weather>{\"city\":\"Rome\"}</function>\n"),
            std::string::npos)
    << *g.prompt;
  EXPECT_EQ(g.json_trigger, "<function=");
  EXPECT_EQ(g.json_trigger_head, ">");
  const auto m = whole_message(c, R"(<function=get_time>{}</function><function=get_weather>{"city":"Oslo"}</function>)");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(m["message"]["tool_calls"][1]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(m["message"]["tool_calls"][1]["id"], "call_42_5_0_1") << "not Mistral's marker: OpenAI's ids";
  // A format named before its arguments needs "{arguments}" after "{name}",
  // and a mark between them.
  for (const auto& [format, says] : std::vector<std::pair<std::string, std::string>>{
         {"<f>{name}", "no \"{arguments}\" after it"},
         {"<f>{name}{arguments}", "a mark of 1 to 64 bytes between"},
         {"{name}[ARGS]{arguments}", "after text that opens a call"}}) {
    const auto refused = make_chat_template("custom", {.system = "S: {content}\n", .user = "U: {content}\n",
                                                       .assistant = "A: {content}\n", .tools = "T: {tools}",
                                                       .tool_call = format, .tool_result = "R: {content}"});
    ASSERT_TRUE(std::holds_alternative<chat_template_error>(refused)) << format;
    EXPECT_NE(std::get<chat_template_error>(refused).what.find(says), std::string::npos)
      << std::get<chat_template_error>(refused).what;
  }
}

TEST(openai, a_custom_template_may_write_the_calls_as_one_array_after_its_marker) {
  auto made = make_chat_template("custom", {.system = "S: {content}\n", .user = "U: {content}\n", .assistant = "A: {content}\n",
                                            .tools = "T: {tools}", .tool_call = "[CALLS] {calls}",
                                            .tool_result = "R: {content}"});
  ASSERT_TRUE(std::holds_alternative<chat_template>(made));
  const auto& tpl = std::get<chat_template>(made);
  const auto history = R"([{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[
    {"id":"a","type":"function","function":{"name":"get_time","arguments":"{}"}},
    {"id":"b","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
    {"role":"tool","tool_call_id":"a","content":"noon"},{"role":"tool","tool_call_id":"b","content":"rain"}])";
  const auto c = chat_ok(tool_chat(history), tpl);
  EXPECT_NE(as_generate(c).prompt->find(R"(A: [CALLS] [{"name": "get_time", "arguments": {}}, {"name": "get_weather", )"
                                        R"("arguments": {"city":"Oslo"}}])"),
            std::string::npos)
    << *as_generate(c).prompt;
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_TRUE(c.tools->array);
  EXPECT_EQ(c.tools->open, "[CALLS]");
  // Not a special token here, but shown as special tokens are all the same.
  EXPECT_FALSE(as_generate(c).skip_special_tokens);
  const auto m = whole_message(c, "Checking. [CALLS] [{\"name\":\"get_time\",\"arguments\":{}}]");
  EXPECT_EQ(m["message"]["content"], "Checking. ");
  EXPECT_EQ(m["message"]["tool_calls"].size(), 1u);
}

TEST(openai, vllms_template_fields_reach_a_jinja_template_and_are_refused_by_the_others) {
  const auto tpl = jinja_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                                  "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}");
  const std::string q = R"({"model":"m","messages":[{"role":"user","content":"Q"}])";
  EXPECT_EQ(*as_generate(chat_ok(q + "}", tpl)).prompt, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  // chat_template_kwargs: further variables (Qwen 3's enable_thinking).
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"chat_template_kwargs":{"enable_thinking":false}})", tpl)).prompt,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think></think>");
  // Null is the default.
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"add_generation_prompt":null,"continue_final_message":null,)"
                                     R"("chat_template_kwargs":null})",
                                 tpl))
               .prompt,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  // add_generation_prompt false: the assistant's turn is not opened.
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"add_generation_prompt":false})", tpl)).prompt, "<|im_start|>user\nQ<|im_end|>\n");
  // continue_final_message: the prompt ends with the assistant's text.
  EXPECT_EQ(*as_generate(chat_ok(R"({"model":"m","continue_final_message":true,"add_generation_prompt":false,
      "messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"The answer is"}]})",
                                 tpl))
               .prompt,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nThe answer is");

  const auto refused_with = [&](const std::string& body, const chat_template& t, const char* param, const char* what) {
    const auto e = chat_refused(body, t);
    EXPECT_EQ(e.param, param) << body;
    EXPECT_NE(e.message.find(what), std::string::npos) << body << ": " << e.message;
  };
  refused_with(q + R"(,"chat_template_kwargs":{"messages":[]}})", tpl, "chat_template_kwargs",
               "\"chat_template_kwargs.messages\" is a variable the request itself gives");
  refused_with(q + R"(,"chat_template_kwargs":[1]})", tpl, "chat_template_kwargs", "must be an object");
  refused_with(q + R"(,"add_generation_prompt":"yes"})", tpl, "add_generation_prompt", "must be true or false");
  refused_with(q + R"(,"continue_final_message":true})", tpl, "continue_final_message", "must be the assistant's");
  refused_with(R"({"model":"m","continue_final_message":true,"add_generation_prompt":true,
      "messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]})",
               tpl, "continue_final_message", "cannot both be true");
  // The built-in formats take the defaults only.
  const auto chatml = builtin("chatml");
  refused_with(q + R"(,"chat_template_kwargs":{"enable_thinking":false}})", chatml, "chat_template_kwargs",
               "needs the server's chat template to be a Hugging Face one");
  refused_with(q + R"(,"add_generation_prompt":false})", chatml, "add_generation_prompt", "Hugging Face one");
  // OpenAI's reasoning_effort: a variable of the template, as GPT-OSS's reads it.
  const auto effort = jinja_template("{{ messages[0].content }}|{{ reasoning_effort | default('unset') }}");
  EXPECT_EQ(*as_generate(chat_ok(q + "}", effort)).prompt, "Q|unset");
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"reasoning_effort":"low"})", effort)).prompt, "Q|low");
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"reasoning_effort":null})", effort)).prompt, "Q|unset");
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"reasoning_effort":"high","chat_template_kwargs":{"reasoning_effort":"high"}})",
                                 effort))
               .prompt,
            "Q|high");
  refused_with(q + R"(,"reasoning_effort":"max"})", effort, "reasoning_effort", "must be \"none\"");
  refused_with(q + R"(,"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"high"}})", effort,
               "reasoning_effort", "differ");
  refused_with(q + R"(,"reasoning_effort":"low"})", chatml, "reasoning_effort", "Hugging Face one");
  EXPECT_EQ(*as_generate(chat_ok(q + R"(,"add_generation_prompt":true,"continue_final_message":false,)"
                                     R"("chat_template_kwargs":{}})",
                                 chatml))
               .prompt,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
}

TEST(openai, with_tools_and_response_format_the_answer_is_calls_or_a_value_of_the_format) {
  const auto tpl = builtin("chatml");
  const std::string format =
    R"(,"response_format":{"type":"json_schema","json_schema":{"name":"reply","schema":{"type":"object",)"
    R"("properties":{"city":{"$ref":"#/$defs/c"}},"required":["city"],"$defs":{"c":{"type":"string"}}}}})";
  // "auto": the output begins with the marker (calls, as without a format)
  // or is the answer, held to the format's schema (the wire's json_answer).
  const auto c = chat_ok(tool_chat(ask, format), tpl);
  const auto g = as_generate(c);
  EXPECT_EQ(g.json_trigger, "<tool_call>");
  EXPECT_FALSE(g.json_trigger_first);
  EXPECT_EQ(json::parse(g.json_answer)["properties"]["city"], json({{"$ref", "#/$defs/c"}}))
    << "the format's schema as it is";
  EXPECT_EQ(json::parse(g.json_schema)["anyOf"].size(), 2u) << "the calls' schema, as without a format";
  EXPECT_FALSE(g.json_object);
  // response_format json_object: the answer is any object.
  const auto o = as_generate(chat_ok(tool_chat(ask, R"(,"response_format":{"type":"json_object"})"), tpl));
  EXPECT_EQ(json::parse(o.json_answer), json({{"type", "object"}}));
  EXPECT_FALSE(o.json_object) << "the calls' values are the schema's";
  EXPECT_EQ(as_generate(chat_ok(tool_chat(ask, R"(,"response_format":{"type":"text"})"), tpl)).json_answer, "");
  // Forced, the answer is a call: the format shapes nothing.
  for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"get_time"}})"}) {
    const auto forced = as_generate(chat_ok(tool_chat(ask, format + R"(,"tool_choice":)" + choice), tpl));
    EXPECT_EQ(forced.json_answer, "") << choice;
    EXPECT_EQ(json::parse(forced.json_schema)["anyOf"][0]["properties"]["name"].contains("const"), true) << choice;
  }
  // The answer reads as content; a call as a call.
  auto m = whole_message(c, R"({"city": "Paris"})");
  EXPECT_EQ(m["finish_reason"], "stop");
  EXPECT_EQ(m["message"]["content"], R"({"city": "Paris"})");
  EXPECT_FALSE(m["message"].contains("tool_calls"));
  m = whole_message(c, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "eos");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 1u);
  expect_streams_say_what_the_wholes_say(
    {c}, {R"({"city": "Paris"})", "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"}, 7);

  // Without a marker (Llama 3.1's JSON calls) the output is one value: a
  // call, or the answer (its references moved with it).
  chat_formats llama31;
  llama31.tool_call = "{call}";
  llama31.tool_arguments = "parameters";
  const auto bare_tpl = jinja_template(test_templates::header_style, llama31, "<|begin_of_text|>", "<|eot_id|>");
  const auto b = chat_ok(tool_chat(ask, format), bare_tpl);
  const auto bg = as_generate(b);
  EXPECT_EQ(bg.json_trigger, "");
  EXPECT_EQ(bg.json_answer, "");
  const auto both = json::parse(bg.json_schema);
  ASSERT_EQ(both["anyOf"].size(), 3u);
  EXPECT_EQ(both["anyOf"][2], json({{"$ref", "#/$defs/$answer"}}));
  EXPECT_EQ(both["$defs"]["$answer"]["properties"]["city"], json({{"$ref", "#/$defs/$answer/$defs/c"}}));
  EXPECT_EQ(both["anyOf"][0]["required"], json({"name", "parameters"}));
  m = whole_message(b, R"({"city": "Oslo"})");
  EXPECT_EQ(m["message"]["content"], R"({"city": "Oslo"})");
  m = whole_message(b, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  // Without tools, the format alone, as before.
  EXPECT_EQ(as_generate(chat_ok(tool_chat(ask, format + R"(,"tool_choice":"none")"), tpl)).json_answer, "");

  // A refusal of the format's schema names response_format, both ways.
  auto e = refusal(c, wire::error_code::bad_request, R"(field "json_answer": the schema at "#/properties/city" is odd)");
  EXPECT_EQ(e.param, "response_format");
  EXPECT_EQ(e.message, R"(field "response_format": the schema at "#/properties/city" is odd)");
  e = refusal(b, wire::error_code::bad_request,
              R"(field "json_schema": the schema at "#/$defs/$answer/properties/city" is odd)");
  EXPECT_EQ(e.param, "response_format");
  EXPECT_EQ(e.message, R"(field "response_format": the schema at "#/properties/city" is odd)");
  e = refusal(b, wire::error_code::bad_request,
              R"(field "json_schema": the schema at "#/$defs/get_time/properties/x" is odd)");
  EXPECT_EQ(e.param, "tools");
}

TEST(openai, llama_31_json_calls_have_no_marker_and_their_arguments_under_parameters) {
  // Llama 3.1 Instruct's way: the answer is the call's JSON alone,
  // {"name", "parameters"}, calls after one another with "; " between.
  chat_formats llama31;
  llama31.tool_call = "{call}";
  llama31.tool_arguments = "parameters";
  const auto tpl = jinja_template(test_templates::header_style, llama31, "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(tpl.program);
  const auto c = chat_ok(tool_chat(ask), tpl);
  ASSERT_TRUE(c.tools);
  EXPECT_TRUE(c.tools->open.empty());
  EXPECT_EQ(c.tools->arguments_key, "parameters");
  // "auto": nothing opens a call, so the output is not held to the tools.
  const auto gen = as_generate(c);
  EXPECT_TRUE(gen.json_schema.empty());
  EXPECT_TRUE(gen.json_trigger.empty());
  auto m = whole_message(c, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["message"]["content"].is_null());
  ASSERT_EQ(m["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  m = whole_message(c, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": "
                       "{\"city\": \"Oslo\"}}");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(m["message"]["tool_calls"][1]["function"]["name"], "get_weather");
  // A call, then text: the call (what follows it is not the answer's).
  m = whole_message(c, "{\"name\": \"get_time\", \"parameters\": {}} and then");
  EXPECT_EQ(m["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["message"]["content"].is_null());
  EXPECT_EQ(m["message"]["tool_calls"].size(), 1u);
  // Text, a call after text, "arguments" for "parameters", or a JSON that is
  // not a call: all text.
  for (const std::string out : {"It is sunny.", "Let me check: {\"name\": \"get_time\", \"parameters\": {}}",
                                "{\"name\": \"get_time\", \"arguments\": {}}", "{\"city\": \"Paris\"}",
                                "{\"name\": \"get_ti"}) {
    m = whole_message(c, out, "length");
    EXPECT_EQ(m["message"]["content"], out);
    EXPECT_FALSE(m["message"].contains("tool_calls")) << out;
  }
  // Forced: the output is one call, held to the tools with "parameters".
  for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"get_weather"}})"}) {
    const auto forced = chat_ok(tool_chat(ask, std::string(R"(,"tool_choice":)") + choice), tpl);
    ASSERT_TRUE(forced.tools->bare) << choice;
    const auto schema = json::parse(as_generate(forced).json_schema);
    EXPECT_EQ(schema["anyOf"][0]["required"], json({"name", "parameters"})) << choice;
    EXPECT_TRUE(as_generate(forced).json_trigger.empty());
    m = whole_message(forced, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
    EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Rome\"}") << choice;
  }
  // Streamed, the same answers however the tokens fall.
  expect_streams_say_what_the_wholes_say(
    {c, chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), tpl)},
    {"  {\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
     "It is {sunny}.", "Let me check: {\"name\": \"get_time\", \"parameters\": {}}", " ", "",
     "{\"name\": \"get_ti", "\n{\"city\": 1} x"},
    13);
  // The key is "arguments" or "parameters", and for Hugging Face templates;
  // "{call}" alone is for them too.
  chat_formats bad = llama31;
  bad.tool_arguments = "args";
  const jinja_source src{std::string(test_templates::header_style), "<s>", "</s>"};
  auto t = make_chat_template("model", bad, &src);
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(t));
  EXPECT_EQ(std::get<chat_template_error>(t).key, "chat_tool_arguments");
  chat_formats custom_llama = llama31;
  custom_llama.user = "{content}";
  custom_llama.assistant = "{content}";
  t = make_chat_template("custom", custom_llama);
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(t));
  EXPECT_EQ(std::get<chat_template_error>(t).key, "chat_tool_arguments");
  t = make_chat_template("chatml", chat_formats{.tool_arguments = "parameters"});
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(t));
  EXPECT_EQ(std::get<chat_template_error>(t).key, "chat_tool_arguments");
  chat_formats trailing;
  trailing.tool_call = "{call}</call>";
  t = make_chat_template("model", trailing, &src);
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(t));
  EXPECT_EQ(std::get<chat_template_error>(t).key, "chat_tool_call");
}

TEST(openai, a_thinking_models_usage_counts_its_reasoning_tokens) {
  const std::string body = R"({"model":"base","messages":[{"role":"user","content":"2+2?"}])";
  const auto c = chat_ok(body + "}", reasoning_template("qwen3"));
  const completion_answer a{"chatcmpl-1", 1, c};
  auto d = done("stop");
  d.text = "<think>Four.</think>4";
  d.completion_tokens = 9;
  d.reasoning_tokens = 6;
  const auto j = json::parse(a.body({d}));
  EXPECT_EQ(j["usage"]["completion_tokens"], 9);
  EXPECT_EQ(j["usage"]["completion_tokens_details"], json({{"reasoning_tokens", 6}}));
  // Streamed, with its usage: the same count; none thought: 0, given.
  const auto streamed = chat_ok(body + R"(,"stream":true,"stream_options":{"include_usage":true}})",
                                reasoning_template("qwen3"));
  completion_answer s{"chatcmpl-2", 1, streamed};
  (void)s.stream_start();
  const auto end = events(end_of(s, d));
  EXPECT_EQ(end[end.size() - 2]["usage"]["completion_tokens_details"]["reasoning_tokens"], 6);
  d.reasoning_tokens = 0;
  EXPECT_EQ(json::parse(a.body({d}))["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
  // A model that does not think has no such detail.
  const completion_answer plain{"chatcmpl-3", 1, chat_ok(body + "}", builtin("chatml"))};
  EXPECT_FALSE(json::parse(plain.body({d}))["usage"].contains("completion_tokens_details"));
}

TEST(openai, with_reasoning_the_format_guided_output_and_forced_calls_hold_the_content_after_the_thinking) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"2+2?"}])";
  const std::string as_json = R"(,"response_format":{"type":"json_object"}})";
  // Qwen3: the output may open its thinking; DeepSeek R1: the prompt did.
  const auto qwen = as_generate(chat_ok(body + as_json, reasoning_template("qwen3")));
  EXPECT_TRUE(qwen.json_object);
  EXPECT_EQ(qwen.reasoning_close, "</think>");
  EXPECT_EQ(qwen.reasoning_open, "<think>");
  const auto r1 = as_generate(chat_ok(body + R"(,"response_format":{"type":"json_schema","json_schema":)"
                                        R"({"name":"n","schema":{"type":"object"}}}})",
                                      reasoning_template("deepseek_r1")));
  EXPECT_FALSE(r1.json_schema.empty());
  EXPECT_EQ(r1.reasoning_close, "</think>");
  EXPECT_EQ(r1.reasoning_open, "") << "the output begins in the thinking";
  // vLLM's guided choice and regex: the content after the thinking too.
  const auto chosen = as_generate(chat_ok(body + R"(,"guided_choice":["4","5"]})", reasoning_template("qwen3")));
  EXPECT_EQ(chosen.choice, (std::vector<std::string>{"4", "5"}));
  EXPECT_EQ(chosen.reasoning_close, "</think>");
  EXPECT_EQ(chosen.reasoning_open, "<think>");
  const auto matched =
    as_generate(chat_ok(body + R"(,"structured_outputs":{"regex":"[0-9]+"}})", reasoning_template("deepseek_r1")));
  EXPECT_EQ(matched.regex, "[0-9]+");
  EXPECT_EQ(matched.reasoning_close, "</think>");
  EXPECT_EQ(matched.reasoning_open, "");
  auto picked = whole_message(chat_ok(body + R"(,"guided_choice":["4","5"]})", reasoning_template("qwen3")),
                              "<think>Two and two.</think>4")["message"];
  EXPECT_EQ(picked["reasoning_content"], "Two and two.");
  EXPECT_EQ(picked["content"], "4");
  // Nothing held: the marks still go, for the thinking's count; no parser:
  // no marks.
  EXPECT_EQ(as_generate(chat_ok(body + "}", reasoning_template("qwen3"))).reasoning_close, "</think>");
  EXPECT_EQ(as_generate(chat_ok(body + "}", reasoning_template("qwen3"))).reasoning_open, "<think>");
  EXPECT_EQ(as_generate(chat_ok(body + "}", builtin("chatml"))).reasoning_close, "");
  EXPECT_EQ(as_generate(chat_ok(body + R"(,"guided_choice":["4"]})", builtin("chatml"))).reasoning_close, "");
  EXPECT_EQ(as_generate(chat_ok(body + as_json, builtin("chatml"))).reasoning_close, "");
  // The answer: the thinking apart, the content the JSON.
  auto m = whole_message(chat_ok(body + as_json, reasoning_template("qwen3")), "<think>Four.</think>\n{\"n\": 4}")["message"];
  EXPECT_EQ(m["reasoning_content"], "Four.");
  EXPECT_EQ(m["content"], "\n{\"n\": 4}");
  // Forced calls: the model writes the marker after its thinking, so even
  // one call (a named function, or parallel_tool_calls false) is not opened
  // in the prompt; the first call the content holds is the answer.
  for (const char* extra : {R"(,"tool_choice":"required")", R"(,"tool_choice":"required","parallel_tool_calls":false)",
                            R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"}) {
    SCOPED_TRACE(extra);
    const auto forced = chat_ok(tool_chat(ask, extra), reasoning_template("qwen3"));
    ASSERT_TRUE(forced.tools);
    EXPECT_FALSE(forced.tools->bare);
    const auto g = as_generate(forced);
    EXPECT_TRUE(g.prompt->ends_with("<|im_start|>assistant\n")) << *g.prompt;
    EXPECT_EQ(g.json_trigger, "<tool_call>");
    EXPECT_TRUE(g.json_trigger_first);
    EXPECT_EQ(g.reasoning_close, "</think>");
    m = whole_message(forced, "<think>Paris, then Rome.</think>\n\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":"
                              "{\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":"
                              "{\"city\":\"Rome\"}}\n</tool_call>");
    EXPECT_EQ(m["finish_reason"], "tool_calls");
    EXPECT_EQ(m["message"]["reasoning_content"], "Paris, then Rome.");
    const bool one = std::string_view(extra) != R"(,"tool_choice":"required")";
    ASSERT_EQ(m["message"]["tool_calls"].size(), one ? 1u : 2u);
    EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  }
  // "auto": the trigger holds only the content's calls.
  const auto autos = as_generate(chat_ok(tool_chat(ask), reasoning_template("qwen3")));
  EXPECT_EQ(autos.json_trigger, "<tool_call>");
  EXPECT_FALSE(autos.json_trigger_first);
  EXPECT_EQ(autos.reasoning_close, "</think>");
  // A template whose calls have no marker: a forced answer is one call,
  // the content after the thinking.
  chat_formats llama31;
  llama31.tool_call = "{call}";
  llama31.tool_arguments = "parameters";
  auto tpl = jinja_template(test_templates::header_style, llama31, "<|begin_of_text|>", "<|eot_id|>");
  tpl.reasoning = reasoning_parser("deepseek_r1");
  const auto bare = chat_ok(tool_chat(ask, R"(,"tool_choice":"required")"), tpl);
  ASSERT_TRUE(bare.tools);
  EXPECT_TRUE(bare.tools->bare);
  const auto bg = as_generate(bare);
  EXPECT_TRUE(bg.json_trigger.empty());
  EXPECT_EQ(bg.reasoning_close, "</think>");
  m = whole_message(bare, "Rome it is.</think>\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
  EXPECT_EQ(m["message"]["reasoning_content"], "Rome it is.");
  ASSERT_EQ(m["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(m["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Rome\"}");
}

TEST(openai, a_chat_with_tools_uses_the_models_tool_use_template_where_it_has_one) {
  jinja_source src{"plain:{% for m in messages %}{{ m.content }}{% endfor %}", "", ""};
  src.tool_use_text = "tools:{{ tools|map(attribute='function')|map(attribute='name')|join(',') }}<tool_call>";
  auto made = make_chat_template("model", {}, &src);
  ASSERT_TRUE(std::holds_alternative<chat_template>(made));
  const auto& tpl = std::get<chat_template>(made);
  EXPECT_EQ(*as_generate(chat_ok(R"({"model":"m","messages":[{"role":"user","content":"q"}]})", tpl)).prompt, "plain:q");
  const auto c = chat_ok(tool_chat(ask), tpl);
  EXPECT_EQ(*as_generate(c).prompt, "tools:get_weather,get_time<tool_call>");
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_EQ(c.tools->open, "<tool_call>") << "the call format read from the tool_use template";
  // tool_choice "none": no tools, the default template.
  EXPECT_EQ(*as_generate(chat_ok(tool_chat(ask, R"(,"tool_choice":"none")"), tpl)).prompt, "plain:Weather in Paris?");
  src.tool_use_text = "{% if %}";
  made = make_chat_template("model", {}, &src);
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(made));
  EXPECT_NE(std::get<chat_template_error>(made).what.find("the template named \"tool_use\""), std::string::npos);
}

TEST(openai, jinja_templates_that_cannot_be_made_are_refused_naming_the_key) {
  const jinja_source bad_text{"{% for m in messages %}", "", ""};
  auto t = make_chat_template("model", {}, &bad_text);
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(t));
  EXPECT_EQ(std::get<chat_template_error>(t).key, "chat_template");
  EXPECT_NE(std::get<chat_template_error>(t).what.find("line 1: the template ends before {% else or endfor %}"),
            std::string::npos)
    << std::get<chat_template_error>(t).what;
  chat_formats custom;
  custom.user = "{content}";
  t = make_chat_template("jinja", custom);
  ASSERT_TRUE(std::holds_alternative<chat_template_error>(t));
  EXPECT_EQ(std::get<chat_template_error>(t).key, "chat_user");
  // Without the text (the config check), the rest is checked and no
  // program is made.
  t = make_chat_template("jinja", {});
  ASSERT_TRUE(std::holds_alternative<chat_template>(t));
  EXPECT_EQ(std::get<chat_template>(t).program, nullptr);
}

} // namespace
} // namespace troupe::openai
