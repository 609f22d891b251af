// Tests for messages/wire: every accepted request field, every rejection with
// its code, echoed id and message, and request/reply round trips.
#include "messages/wire.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe::wire {
namespace {

using troupe::wire::valid_utf8;

static_assert(std::is_nothrow_move_constructible_v<request>);
static_assert(std::is_nothrow_move_constructible_v<reply>);
static_assert(std::is_nothrow_move_constructible_v<parse_error>);

/// Small bounds so the edges are cheap to reach.
parse_limits test_limits() {
  parse_limits l;
  l.max_frame_bytes = 4096;
  l.max_tokens = 4096;
  l.max_stop = 4;
  l.max_id_chars = 16;
  l.vocab_size = 1000;
  return l;
}

/// A generate frame with id "g1", prompt "hi" and `extra` fields appended.
std::string gen(const std::string& extra = "") {
  return R"({"type":"generate","id":"g1","prompt":"hi")" + (extra.empty() ? "" : "," + extra)
         + "}";
}

void expect_same(const generate_request& a, const generate_request& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.adapter, b.adapter);
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.fit_context, b.fit_context);
  EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);
  EXPECT_EQ(a.sampling.top_p, b.sampling.top_p);
  EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
  EXPECT_EQ(a.sampling.seed, b.sampling.seed);
  EXPECT_EQ(a.sampling.presence_penalty, b.sampling.presence_penalty);
  EXPECT_EQ(a.sampling.frequency_penalty, b.sampling.frequency_penalty);
  EXPECT_EQ(a.sampling.logit_bias, b.sampling.logit_bias);
  EXPECT_EQ(a.sampling.min_p, b.sampling.min_p);
  EXPECT_EQ(a.sampling.repetition_penalty, b.sampling.repetition_penalty);
  EXPECT_EQ(a.stop, b.stop);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.session, b.session);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_EQ(a.prompt_logprobs, b.prompt_logprobs);
  EXPECT_EQ(a.stop_token_ids, b.stop_token_ids);
  EXPECT_EQ(a.ignore_eos, b.ignore_eos);
  EXPECT_EQ(a.skip_special_tokens, b.skip_special_tokens);
  EXPECT_EQ(a.min_tokens, b.min_tokens);
  EXPECT_EQ(a.json_object, b.json_object);
  EXPECT_EQ(a.json_schema, b.json_schema);
  EXPECT_EQ(a.json_trigger, b.json_trigger);
  EXPECT_EQ(a.json_trigger_first, b.json_trigger_first);
  EXPECT_EQ(a.json_trigger_head, b.json_trigger_head);
  EXPECT_EQ(a.json_answer, b.json_answer);
  EXPECT_EQ(a.truncate_prompt_tokens, b.truncate_prompt_tokens);
  EXPECT_EQ(a.bad_words, b.bad_words);
  EXPECT_EQ(a.allowed_token_ids, b.allowed_token_ids);
  EXPECT_EQ(a.reasoning_close, b.reasoning_close);
  EXPECT_EQ(a.reasoning_open, b.reasoning_open);
  EXPECT_EQ(a.choice, b.choice);
  EXPECT_EQ(a.regex, b.regex);
  EXPECT_EQ(a.grammar, b.grammar);
}

void expect_same(const std::vector<token_logprobs>& a, const std::vector<token_logprobs>& b) {
  ASSERT_EQ(a.size(), b.size());
  auto same = [](const token_logprob& x, const token_logprob& y) {
    EXPECT_EQ(x.token, y.token);
    EXPECT_EQ(x.text, y.text);
    if (std::isnan(x.logprob)) { // a prompt's first token
      EXPECT_TRUE(std::isnan(y.logprob));
    } else {
      EXPECT_EQ(x.logprob, y.logprob);
    }
  };
  for (std::size_t i = 0; i < a.size(); ++i) {
    same(a[i].sampled, b[i].sampled);
    ASSERT_EQ(a[i].top.size(), b[i].top.size());
    for (std::size_t k = 0; k < a[i].top.size(); ++k)
      same(a[i].top[k], b[i].top[k]);
  }
}

void expect_same(const request& a, const request& b) {
  ASSERT_EQ(a.index(), b.index());
  EXPECT_EQ(id_of(a), id_of(b));
  if (auto* g = std::get_if<generate_request>(&a))
    expect_same(*g, std::get<generate_request>(b));
  if (auto* v = std::get_if<advise_request>(&a)) {
    const auto& w = std::get<advise_request>(b);
    EXPECT_EQ(v->session, w.session);
    EXPECT_DOUBLE_EQ(v->in_s, w.in_s);
    EXPECT_EQ(v->priority, w.priority);
  }
  if (auto* l = std::get_if<load_adapter_request>(&a)) {
    const auto& m = std::get<load_adapter_request>(b);
    EXPECT_EQ(l->name, m.name);
    EXPECT_EQ(l->path, m.path);
    EXPECT_EQ(l->rank, m.rank);
  }
  if (auto* u = std::get_if<unload_adapter_request>(&a)) {
    EXPECT_EQ(u->name, std::get<unload_adapter_request>(b).name);
  }
  if (auto* t = std::get_if<tokenize_request>(&a)) {
    EXPECT_EQ(t->prompt, std::get<tokenize_request>(b).prompt);
  }
  if (auto* d = std::get_if<detokenize_request>(&a)) {
    EXPECT_EQ(d->tokens, std::get<detokenize_request>(b).tokens);
  }
}

void expect_same_double(double a, double b) {
  if (std::isnan(a))
    EXPECT_TRUE(std::isnan(b));
  else
    EXPECT_EQ(a, b);
}

void expect_same(const reply& a, const reply& b) {
  ASSERT_EQ(a.index(), b.index());
  std::visit(
    [&b](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      const auto& y = std::get<T>(b);
      EXPECT_EQ(x.id, y.id);
      if constexpr (std::is_same_v<T, accepted_reply>) {
        EXPECT_EQ(x.prompt_tokens, y.prompt_tokens);
      } else if constexpr (std::is_same_v<T, token_reply>) {
        EXPECT_EQ(x.index, y.index);
        EXPECT_EQ(x.tokens, y.tokens);
        EXPECT_EQ(x.text, y.text);
        expect_same(x.logprobs, y.logprobs);
        expect_same(x.prompt_logprobs, y.prompt_logprobs);
      } else if constexpr (std::is_same_v<T, done_reply>) {
        EXPECT_EQ(x.finish_reason, y.finish_reason);
        EXPECT_EQ(x.prompt_tokens, y.prompt_tokens);
        EXPECT_EQ(x.completion_tokens, y.completion_tokens);
        EXPECT_EQ(x.cached_tokens, y.cached_tokens);
        EXPECT_EQ(x.reasoning_tokens, y.reasoning_tokens);
        EXPECT_EQ(x.time.queue_ms, y.time.queue_ms);
        EXPECT_EQ(x.time.ttft_ms, y.time.ttft_ms);
        EXPECT_EQ(x.time.e2e_ms, y.time.e2e_ms);
        EXPECT_EQ(x.tokens, y.tokens);
        EXPECT_EQ(x.text, y.text);
        ASSERT_EQ(x.logprobs.has_value(), y.logprobs.has_value());
        if (x.logprobs)
          expect_same(*x.logprobs, *y.logprobs);
        ASSERT_EQ(x.prompt_logprobs.has_value(), y.prompt_logprobs.has_value());
        if (x.prompt_logprobs)
          expect_same(*x.prompt_logprobs, *y.prompt_logprobs);
      } else if constexpr (std::is_same_v<T, error_reply>) {
        EXPECT_EQ(x.code, y.code);
        EXPECT_EQ(x.message, y.message);
      } else if constexpr (std::is_same_v<T, health_reply>) {
        EXPECT_EQ(x.status, y.status);
      } else if constexpr (std::is_same_v<T, stats_reply>) {
        ASSERT_EQ(x.values.size(), y.values.size());
        for (std::size_t i = 0; i < x.values.size(); ++i) {
          EXPECT_EQ(x.values[i].name, y.values[i].name);
          EXPECT_EQ(x.values[i].kind, y.values[i].kind) << x.values[i].name;
          expect_same_double(x.values[i].value, y.values[i].value);
        }
      } else if constexpr (std::is_same_v<T, adapter_reply>) {
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.rank, y.rank);
        EXPECT_EQ(x.status, y.status);
      } else if constexpr (std::is_same_v<T, advise_reply>) {
        EXPECT_EQ(x.session, y.session);
        EXPECT_EQ(x.status, y.status);
      } else if constexpr (std::is_same_v<T, tokenize_reply>) {
        EXPECT_EQ(x.tokens, y.tokens);
        EXPECT_EQ(x.max_context, y.max_context);
      } else if constexpr (std::is_same_v<T, detokenize_reply>) {
        EXPECT_EQ(x.text, y.text);
      } else {
        static_assert(std::is_same_v<T, adapters_reply>);
        EXPECT_EQ(x.max_context, y.max_context);
        ASSERT_EQ(x.adapters.size(), y.adapters.size());
        for (std::size_t i = 0; i < x.adapters.size(); ++i) {
          EXPECT_EQ(x.adapters[i].name, y.adapters[i].name);
          EXPECT_EQ(x.adapters[i].rank, y.adapters[i].rank);
          EXPECT_EQ(x.adapters[i].resident, y.adapters[i].resident);
        }
      }
    },
    a);
}

// -- accepted generate fields ------------------------------------------------

struct accept_case {
  std::string name;
  std::string frame;
  /// Applied to the defaults (id "g1", prompt "hi") to get the expectation.
  std::function<void(generate_request&)> expect;
};

std::vector<accept_case> accept_cases() {
  using g = generate_request&;
  return {
    {"defaults", gen(), [](g) {}},
    {"prompt_tokens", R"({"type":"generate","id":"g1","prompt_tokens":[0,5,999]})",
     [](g r) {
       r.prompt.reset();
       r.prompt_tokens = std::vector<std::int32_t>{0, 5, 999};
     }},
    {"prompt_null_with_tokens", R"({"type":"generate","id":"g1","prompt":null,"prompt_tokens":[7]})",
     [](g r) {
       r.prompt.reset();
       r.prompt_tokens = std::vector<std::int32_t>{7};
     }},
    {"fields_in_any_order", R"({"prompt":"hi","id":"g1","type":"generate"})", [](g) {}},
    {"id_at_limit", R"({"type":"generate","id":"0123456789abcdef","prompt":"hi"})",
     [](g r) { r.id = "0123456789abcdef"; }},
    {"utf8_prompt", R"({"type":"generate","id":"g1","prompt":"h\u00e9 \u263a"})",
     [](g r) { r.prompt = "h\xc3\xa9 \xe2\x98\xba"; }},
    {"adapter", gen(R"("adapter":"sql-lora")"), [](g r) { r.adapter = "sql-lora"; }},
    {"adapter_empty", gen(R"("adapter":"")"), [](g) {}},
    {"adapter_null", gen(R"("adapter":null)"), [](g) {}},
    {"max_tokens_1", gen(R"("max_tokens":1)"), [](g r) { r.max_tokens = 1; }},
    {"max_tokens_limit", gen(R"("max_tokens":4096)"), [](g r) { r.max_tokens = 4096; }},
    {"max_tokens_integral_float", gen(R"("max_tokens":32.0)"), [](g r) { r.max_tokens = 32; }},
    {"max_tokens_exponent", gen(R"("max_tokens":1e3)"), [](g r) { r.max_tokens = 1000; }},
    {"max_tokens_null", gen(R"("max_tokens":null)"), [](g) {}},
    {"fit_context_alone_takes_the_limit", gen(R"("fit_context":true)"),
     [](g r) { r.fit_context = true; r.max_tokens = 4096; }},
    {"fit_context_cuts_a_max_tokens_past_the_limit", gen(R"("max_tokens":100000,"fit_context":true)"),
     [](g r) { r.fit_context = true; r.max_tokens = 4096; }},
    {"fit_context_keeps_a_max_tokens_within", gen(R"("fit_context":true,"max_tokens":9)"),
     [](g r) { r.fit_context = true; r.max_tokens = 9; }},
    {"fit_context_false_or_null", gen(R"("fit_context":false)"), [](g) {}},
    {"fit_context_lets_min_tokens_reach_the_limit", gen(R"("fit_context":true,"min_tokens":4000)"),
     [](g r) { r.fit_context = true; r.max_tokens = 4096; r.min_tokens = 4000; }},
    {"temperature_0", gen(R"("temperature":0)"), [](g r) { r.sampling.temperature = 0; }},
    {"temperature_0_7", gen(R"("temperature":0.7)"), [](g r) { r.sampling.temperature = 0.7f; }},
    {"temperature_100", gen(R"("temperature":100)"), [](g r) { r.sampling.temperature = 100; }},
    {"top_p_1", gen(R"("top_p":1)"), [](g r) { r.sampling.top_p = 1; }},
    {"top_p_small", gen(R"("top_p":0.01)"), [](g r) { r.sampling.top_p = 0.01f; }},
    {"top_k_0", gen(R"("top_k":0)"), [](g r) { r.sampling.top_k = 0; }},
    {"top_k_40", gen(R"("top_k":40)"), [](g r) { r.sampling.top_k = 40; }},
    {"seed_0", gen(R"("seed":0)"), [](g r) { r.sampling.seed = 0; }},
    {"seed_max", gen(R"("seed":18446744073709551615)"),
     [](g r) { r.sampling.seed = std::numeric_limits<std::uint64_t>::max(); }},
    {"stop_string", gen(R"("stop":"\n\n")"), [](g r) { r.stop = {"\n\n"}; }},
    {"stop_array", gen(R"("stop":["a","bc"])"), [](g r) { r.stop = {"a", "bc"}; }},
    {"stop_array_at_limit", gen(R"("stop":["a","b","c","d"])"),
     [](g r) { r.stop = {"a", "b", "c", "d"}; }},
    {"stop_empty_array", gen(R"("stop":[])"), [](g) {}},
    {"stream_true", gen(R"("stream":true)"), [](g r) { r.stream = true; }},
    {"stream_false", gen(R"("stream":false)"), [](g) {}},
    {"session", gen(R"("session":"chat-7")"), [](g r) { r.session = "chat-7"; }},
    {"priority_negative", gen(R"("priority":-3)"), [](g r) { r.priority = -3; }},
    {"priority_positive", gen(R"("priority":5)"), [](g r) { r.priority = 5; }},
    {"logprobs_none_asked", gen(R"("logprobs":0)"), [](g r) { r.logprobs = 0; }},
    {"logprobs_most", gen(R"("logprobs":20)"), [](g r) { r.logprobs = 20; }},
    {"logprobs_null", gen(R"("logprobs":null)"), [](g) {}},
    {"prompt_logprobs_none_asked", gen(R"("prompt_logprobs":0)"), [](g r) { r.prompt_logprobs = 0; }},
    {"prompt_logprobs_most", gen(R"("prompt_logprobs":20)"), [](g r) { r.prompt_logprobs = 20; }},
    {"prompt_logprobs_null", gen(R"("prompt_logprobs":null)"), [](g) {}},
    {"penalties", gen(R"("presence_penalty":-2,"frequency_penalty":0.5)"),
     [](g r) { r.sampling.presence_penalty = -2.0f; r.sampling.frequency_penalty = 0.5f; }},
    {"min_p_and_repetition_penalty", gen(R"("min_p":0.1,"repetition_penalty":1.2)"),
     [](g r) { r.sampling.min_p = 0.1f; r.sampling.repetition_penalty = 1.2f; }},
    {"min_p_bounds_and_a_penalty_that_favours", gen(R"("min_p":1,"repetition_penalty":0.5)"),
     [](g r) { r.sampling.min_p = 1.0f; r.sampling.repetition_penalty = 0.5f; }},
    {"min_p_and_repetition_penalty_null", gen(R"("min_p":null,"repetition_penalty":null)"), [](g) {}},
    {"logit_bias_in_token_order", gen(R"("logit_bias":{"99":100,"5":-100,"7":0.5})"),
     [](g r) { r.sampling.logit_bias = {{5, -100.0f}, {7, 0.5f}, {99, 100.0f}}; }},
    {"logit_bias_empty", gen(R"("logit_bias":{})"), [](g) {}},
    {"stop_token_ids_in_token_order_once", gen(R"("stop_token_ids":[9,2,9])"),
     [](g r) { r.stop_token_ids = {2, 9}; }},
    {"stop_token_ids_empty", gen(R"("stop_token_ids":[])"), [](g) {}},
    {"ignore_eos", gen(R"("ignore_eos":true)"), [](g r) { r.ignore_eos = true; }},
    {"skip_special_tokens", gen(R"("skip_special_tokens":false)"), [](g r) { r.skip_special_tokens = false; }},
    {"min_tokens_up_to_max_tokens", gen(R"("max_tokens":4,"min_tokens":4.0)"),
     [](g r) { r.max_tokens = 4; r.min_tokens = 4; }},
    {"response_format_json_object", gen(R"("response_format":"json_object")"), [](g r) { r.json_object = true; }},
    {"response_format_text", gen(R"("response_format":"text")"), [](g) {}},
    {"json_schema_as_compact_text", gen(R"("json_schema":{ "type": "object", "required": [] })"),
     [](g r) { r.json_schema = R"({"type":"object","required":[]})"; }},
    {"choice_in_the_order_given", gen(R"("choice":["no","yes","maybe so"])"),
     [](g r) { r.choice = {"no", "yes", "maybe so"}; }},
    {"regex", gen(R"("regex":"[0-9]{3}-[0-9]{4}")"), [](g r) { r.regex = "[0-9]{3}-[0-9]{4}"; }},
    {"grammar", gen(R"("grammar":"root ::= \"yes\" | \"no\"")"), [](g r) { r.grammar = R"(root ::= "yes" | "no")"; }},
    {"reasoning_before_a_grammar", gen(R"("grammar":"root ::= [ab]","reasoning_close":"</think>")"),
     [](g r) {
       r.grammar = "root ::= [ab]";
       r.reasoning_close = "</think>";
     }},
    {"json_trigger_with_a_schema", gen(R"("json_schema":{"type":"object"},"json_trigger":"<tool_call>")"),
     [](g r) {
       r.json_schema = R"({"type":"object"})";
       r.json_trigger = "<tool_call>";
     }},
    {"json_trigger_first", gen(R"("json_schema":{"type":"object"},"json_trigger":"<c>","json_trigger_first":true)"),
     [](g r) {
       r.json_schema = R"({"type":"object"})";
       r.json_trigger = "<c>";
       r.json_trigger_first = true;
     }},
    {"vllms_token_fields", gen(R"("truncate_prompt_tokens":-1,"bad_words":["no way"," x"],"allowed_token_ids":[9,2,9])"),
     [](g r) {
       r.truncate_prompt_tokens = -1;
       r.bad_words = {"no way", " x"};
       r.allowed_token_ids = {2, 9};
     }},
    {"json_trigger_head",
     gen(R"("json_schema":{"properties":{"f":{}}},"json_trigger":"[TOOL_CALLS]","json_trigger_head":"[ARGS]")"),
     [](g r) {
       r.json_schema = R"({"properties":{"f":{}}})";
       r.json_trigger = "[TOOL_CALLS]";
       r.json_trigger_head = "[ARGS]";
     }},
    {"json_answer", gen(R"("json_schema":{"type":"object"},"json_trigger":"<c>","json_answer":{"type":"array"})"),
     [](g r) {
       r.json_schema = R"({"type":"object"})";
       r.json_trigger = "<c>";
       r.json_answer = R"({"type":"array"})";
     }},
    {"reasoning_marks", gen(R"("response_format":"json_object","reasoning_close":"</think>","reasoning_open":"<think>")"),
     [](g r) {
       r.json_object = true;
       r.reasoning_close = "</think>";
       r.reasoning_open = "<think>";
     }},
    {"reasoning_opened_by_the_prompt", gen(R"("json_schema":{"type":"object"},"reasoning_close":"</think>")"),
     [](g r) {
       r.json_schema = R"({"type":"object"})";
       r.reasoning_close = "</think>";
     }},
    {"reasoning_before_a_choice", gen(R"("reasoning_close":"</think>","reasoning_open":"<think>","choice":["a","b"])"),
     [](g r) {
       r.reasoning_close = "</think>";
       r.reasoning_open = "<think>";
       r.choice = {"a", "b"};
     }},
    // Nothing held: the thinking's tokens are only counted.
    {"reasoning_counted_alone", gen(R"("reasoning_close":"</think>","reasoning_open":"<think>")"),
     [](g r) {
       r.reasoning_close = "</think>";
       r.reasoning_open = "<think>";
     }},
    {"reasoning_before_a_regex", gen(R"("regex":"[ab]","reasoning_close":"</think>")"),
     [](g r) {
       r.regex = "[ab]";
       r.reasoning_close = "</think>";
     }},
    {"json_trigger_with_json_object", gen(R"("response_format":"json_object","json_trigger":"{{")"),
     [](g r) {
       r.json_object = true;
       r.json_trigger = "{{";
     }},
    {"min_tokens_before_max_tokens_in_the_frame", gen(R"("min_tokens":3,"max_tokens":4)"),
     [](g r) { r.max_tokens = 4; r.min_tokens = 3; }},
    {"all_fields",
     gen(R"("adapter":"a","max_tokens":8,"temperature":0.5,"top_p":0.9,"top_k":3,)"
         R"("seed":42,"stop":["x"],"stream":true,"session":"s","priority":2)"),
     [](g r) {
       r.adapter = "a";
       r.max_tokens = 8;
       r.sampling = {0.5f, 0.9f, 3, 42, 0.0f, 0.0f, {}};
       r.stop = {"x"};
       r.stream = true;
       r.session = "s";
       r.priority = 2;
     }},
  };
}

class accept_test : public ::testing::TestWithParam<accept_case> {};

TEST_P(accept_test, parses_generate) {
  const auto& c = GetParam();
  auto result = parse_request(c.frame, test_limits());
  if (auto* err = std::get_if<parse_error>(&result))
    FAIL() << "rejected: " << err->message;
  auto* g = std::get_if<generate_request>(&std::get<request>(result));
  ASSERT_NE(g, nullptr);
  generate_request expected;
  expected.id = "g1";
  expected.prompt = "hi";
  c.expect(expected);
  expect_same(*g, expected);
}

INSTANTIATE_TEST_SUITE_P(wire, accept_test, ::testing::ValuesIn(accept_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(wire, parses_other_request_types) {
  struct row {
    std::string frame;
    std::size_t index;
  };
  std::vector<row> rows{
    {R"({"type":"cancel","id":"g1"})", 1},
    {R"({"type":"health","id":"h"})", 2},
    {R"({"id":"s","type":"stats"})", 3},
    {R"({"type":"list_adapters","id":"l"})", 4},
    {R"({"type":"load_adapter","id":"l","name":"sql","path":"/a/b"})", 5},
    {R"({"type":"load_adapter","id":"l","name":"sql","rank":16})", 5},
    {R"({"type":"unload_adapter","id":"u","name":"sql"})", 6},
    {R"({"type":"tokenize","id":"t","prompt":"The river"})", 8},
    {R"({"type":"tokenize","id":"t","prompt":""})", 8},
    {R"({"type":"detokenize","id":"d","tokens":[1,2,3]})", 9},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.frame);
    auto result = parse_request(r.frame, test_limits());
    ASSERT_TRUE(std::holds_alternative<request>(result));
    EXPECT_EQ(std::get<request>(result).index(), r.index);
  }
  auto c = parse_request(R"({"type":"cancel","id":"g1"})", test_limits());
  EXPECT_EQ(id_of(std::get<request>(c)), "g1");
}

// -- rejections ----------------------------------------------------------------

struct reject_case {
  std::string name;
  std::string frame;
  error_code code = error_code::bad_request;
  std::string id;                    ///< expected echoed id
  std::vector<std::string> mentions; ///< substrings the message must contain
};

std::vector<reject_case> reject_cases() {
  const auto bad = error_code::bad_request;
  const std::string big = gen(R"("session":")" + std::string(5000, 'x') + "\"");
  return {
    {"frame_too_large", big, error_code::frame_too_large, "",
     {std::to_string(big.size()), "4096"}},
    {"not_json", "{not json", bad, "", {"not valid JSON", "line 1"}},
    {"empty_frame", "", bad, "", {"not valid JSON"}},
    {"trailing_garbage", gen() + "x", bad, "", {"not valid JSON"}},
    {"invalid_utf8", "{\"type\":\"health\",\"id\":\"\xff\"}", bad, "", {"not valid JSON"}},
    // A number too large for a double is the client's mistake, not the server's.
    {"number_overflow", gen(R"("max_tokens":1e999)"), bad, "", {"not valid JSON", "number overflow"}},
    {"array", R"([{"type":"health","id":"a"}])", bad, "", {"JSON object", "array"}},
    {"string", R"("health")", bad, "", {"JSON object", "\"health\""}},
    {"missing_type", R"({"id":"a"})", bad, "a", {"\"type\"", "\"generate\"", "\"list_adapters\""}},
    {"type_not_string", R"({"type":1,"id":"a"})", bad, "a", {"\"type\"", "got 1"}},
    {"unknown_type", R"({"type":"generat","id":"a"})", bad, "a",
     {"\"type\"", "\"generat\"", "\"generate\", \"cancel\", \"health\", \"stats\", \"list_adapters\", \"load_adapter\", \"unload_adapter\""}},
    {"load_without_name", R"({"type":"load_adapter","id":"a","path":"/x"})", bad, "a", {"\"name\""}},
    {"load_name_not_string", R"({"type":"load_adapter","id":"a","name":3,"rank":8})", bad, "a", {"\"name\"", "got 3"}},
    {"load_without_path_or_rank", R"({"type":"load_adapter","id":"a","name":"x"})", bad, "a", {"\"path\"", "\"rank\""}},
    {"load_rank_zero", R"({"type":"load_adapter","id":"a","name":"x","rank":0})", bad, "a", {"\"rank\"", "got 0"}},
    {"load_rank_fractional", R"({"type":"load_adapter","id":"a","name":"x","rank":1.5})", bad, "a", {"\"rank\"", "1.5"}},
    {"load_empty_path", R"({"type":"load_adapter","id":"a","name":"x","path":""})", bad, "a", {"\"path\""}},
    {"load_unknown_field", R"({"type":"load_adapter","id":"a","name":"x","rank":8,"alpha":2})", bad, "a", {"\"alpha\"", "load_adapter"}},
    {"unload_without_name", R"({"type":"unload_adapter","id":"a"})", bad, "a", {"\"name\""}},
    {"unload_with_path", R"({"type":"unload_adapter","id":"a","name":"x","path":"/p"})", bad, "a", {"\"path\"", "unload_adapter"}},
    {"advise_without_session", R"({"type":"advise","id":"a"})", bad, "a", {"\"session\""}},
    {"advise_negative_time", R"({"type":"advise","id":"a","session":"s","in_s":-1})", bad, "a", {"\"in_s\"", "[0, 86400]"}},
    {"advise_unknown_field", R"({"type":"advise","id":"a","session":"s","adapter":"x"})", bad, "a", {"\"adapter\"", "advise"}},
    {"missing_id", R"({"type":"health"})", bad, "", {"\"id\"", "16"}},
    {"id_not_string", R"({"type":"health","id":7})", bad, "", {"\"id\"", "got 7"}},
    {"id_null", R"({"type":"health","id":null})", bad, "", {"\"id\"", "got null"}},
    {"empty_id", R"({"type":"health","id":""})", bad, "", {"\"id\"", "non-empty", "got \"\""}},
    {"id_too_long", R"({"type":"health","id":"0123456789abcdefg"})", bad, "",
     {"\"id\"", "16", "17"}},
    {"prompt_and_tokens", R"({"type":"generate","id":"a","prompt":"x","prompt_tokens":[1]})",
     bad, "a", {"\"prompt\"", "\"prompt_tokens\"", "not both"}},
    {"neither_prompt", R"({"type":"generate","id":"a"})", bad, "a",
     {"\"prompt\"", "\"prompt_tokens\""}},
    {"empty_prompt", R"({"type":"generate","id":"a","prompt":""})", bad, "a",
     {"\"prompt\"", "non-empty"}},
    {"prompt_not_string", R"({"type":"generate","id":"a","prompt":["x"]})", bad, "a",
     {"\"prompt\"", "an array of 1 element"}},
    {"empty_prompt_tokens", R"({"type":"generate","id":"a","prompt_tokens":[]})", bad, "a",
     {"\"prompt_tokens\"", "an empty array"}},
    {"prompt_tokens_not_array", R"({"type":"generate","id":"a","prompt_tokens":"1 2"})", bad,
     "a", {"\"prompt_tokens\"", "\"1 2\""}},
    {"token_out_of_range", R"({"type":"generate","id":"a","prompt_tokens":[1,1000]})", bad,
     "a", {"\"prompt_tokens\"", "[0, 1000)", "element 1 is 1000"}},
    {"token_negative", R"({"type":"generate","id":"a","prompt_tokens":[-1]})", bad, "a",
     {"\"prompt_tokens\"", "element 0 is -1"}},
    {"token_fractional", R"({"type":"generate","id":"a","prompt_tokens":[1.5]})", bad, "a",
     {"\"prompt_tokens\"", "1.5"}},
    {"max_tokens_negative", gen(R"("max_tokens":-1)"), bad, "g1",
     {"\"max_tokens\"", "between 1 and 4096", "got -1"}},
    {"max_tokens_zero", gen(R"("max_tokens":0)"), bad, "g1", {"\"max_tokens\"", "got 0"}},
    {"max_tokens_past_any_even_with_fit_context", gen(R"("fit_context":true,"max_tokens":5000000000)"), bad, "g1",
     {"\"max_tokens\"", "between 1 and 4294967295"}},
    {"max_tokens_zero_with_fit_context", gen(R"("fit_context":true,"max_tokens":0)"), bad, "g1",
     {"\"max_tokens\"", "got 0"}},
    {"fit_context_text", gen(R"("fit_context":"yes")"), bad, "g1", {"\"fit_context\"", "true or false"}},
    {"max_tokens_fractional", gen(R"("max_tokens":1.5)"), bad, "g1",
     {"\"max_tokens\"", "integer", "got 1.5"}},
    {"max_tokens_string", gen(R"("max_tokens":"16")"), bad, "g1",
     {"\"max_tokens\"", "got \"16\""}},
    {"max_tokens_bool", gen(R"("max_tokens":true)"), bad, "g1", {"\"max_tokens\"", "got true"}},
    {"max_tokens_above_limit", gen(R"("max_tokens":4097)"), bad, "g1",
     {"\"max_tokens\"", "4096", "got 4097"}},
    {"max_tokens_huge", gen(R"("max_tokens":18446744073709551616)"), bad, "g1",
     {"\"max_tokens\"", "4096", "got 1.8446744073709552e+19"}},
    {"max_tokens_nested", gen(R"("max_tokens":[[[16]]])"), bad, "g1",
     {"\"max_tokens\"", "an array"}},
    {"temperature_negative", gen(R"("temperature":-0.5)"), bad, "g1",
     {"\"temperature\"", "between 0 and 100", "got -0.5"}},
    {"temperature_too_high", gen(R"("temperature":100.5)"), bad, "g1",
     {"\"temperature\"", "got 100.5"}},
    {"temperature_string", gen(R"("temperature":"hot")"), bad, "g1",
     {"\"temperature\"", "\"hot\""}},
    {"top_p_zero", gen(R"("top_p":0)"), bad, "g1", {"\"top_p\"", "greater than 0", "got 0"}},
    {"top_p_above_one", gen(R"("top_p":1.5)"), bad, "g1", {"\"top_p\"", "at most 1", "got 1.5"}},
    {"top_k_negative", gen(R"("top_k":-1)"), bad, "g1", {"\"top_k\"", "got -1"}},
    {"top_k_fractional", gen(R"("top_k":2.5)"), bad, "g1", {"\"top_k\"", "got 2.5"}},
    {"seed_negative", gen(R"("seed":-1)"), bad, "g1", {"\"seed\"", "got -1"}},
    {"seed_fractional", gen(R"("seed":0.5)"), bad, "g1", {"\"seed\"", "got 0.5"}},
    {"stop_too_many", gen(R"("stop":["a","b","c","d","e"])"), bad, "g1",
     {"\"stop\"", "at most 4", "an array of 5 elements"}},
    {"stop_non_string", gen(R"("stop":["a",1])"), bad, "g1", {"\"stop\"", "element 1 is 1"}},
    {"stop_empty_entry", gen(R"("stop":[""])"), bad, "g1", {"\"stop\"", "element 0 is \"\""}},
    {"stop_empty_string", gen(R"("stop":"")"), bad, "g1", {"\"stop\"", "got \"\""}},
    {"stop_number", gen(R"("stop":5)"), bad, "g1", {"\"stop\"", "got 5"}},
    {"stream_string", gen(R"("stream":"yes")"), bad, "g1", {"\"stream\"", "got \"yes\""}},
    {"adapter_number", gen(R"("adapter":5)"), bad, "g1", {"\"adapter\"", "got 5"}},
    {"session_number", gen(R"("session":5)"), bad, "g1", {"\"session\"", "got 5"}},
    {"priority_fractional", gen(R"("priority":1.5)"), bad, "g1", {"\"priority\"", "got 1.5"}},
    {"priority_too_big", gen(R"("priority":2147483648)"), bad, "g1",
     {"\"priority\"", "got 2147483648"}},
    {"logprobs_negative", gen(R"("logprobs":-1)"), bad, "g1", {"\"logprobs\"", "between 0 and 20", "got -1"}},
    {"logprobs_too_many", gen(R"("logprobs":21)"), bad, "g1", {"\"logprobs\"", "got 21"}},
    {"logprobs_boolean", gen(R"("logprobs":true)"), bad, "g1", {"\"logprobs\"", "got true"}},
    {"prompt_logprobs_negative", gen(R"("prompt_logprobs":-1)"), bad, "g1",
     {"\"prompt_logprobs\"", "between 0 and 20", "prompt token", "got -1"}},
    {"prompt_logprobs_too_many", gen(R"("prompt_logprobs":21)"), bad, "g1", {"\"prompt_logprobs\"", "got 21"}},
    {"prompt_logprobs_text", gen(R"("prompt_logprobs":"5")"), bad, "g1", {"\"prompt_logprobs\"", "got \"5\""}},
    {"presence_penalty_too_large", gen(R"("presence_penalty":2.5)"), bad, "g1", {"\"presence_penalty\"", "between -2 and 2"}},
    {"frequency_penalty_text", gen(R"("frequency_penalty":"1")"), bad, "g1", {"\"frequency_penalty\"", "got \"1\""}},
    {"min_p_above_one", gen(R"("min_p":1.5)"), bad, "g1", {"\"min_p\"", "between 0 and 1", "got 1.5"}},
    {"min_p_negative", gen(R"("min_p":-0.1)"), bad, "g1", {"\"min_p\"", "got -0.1"}},
    {"repetition_penalty_zero", gen(R"("repetition_penalty":0)"), bad, "g1",
     {"\"repetition_penalty\"", "above 0 and at most 100", "got 0"}},
    {"repetition_penalty_under_a_float", gen(R"("repetition_penalty":1e-60)"), bad, "g1",
     {"\"repetition_penalty\"", "got 1e-60"}},
    {"repetition_penalty_too_large", gen(R"("repetition_penalty":101)"), bad, "g1", {"\"repetition_penalty\"", "got 101"}},
    {"repetition_penalty_text", gen(R"("repetition_penalty":"1.1")"), bad, "g1",
     {"\"repetition_penalty\"", "got \"1.1\""}},
    {"logit_bias_array", gen(R"("logit_bias":[1])"), bad, "g1", {"\"logit_bias\"", "token ids"}},
    {"logit_bias_bad_key", gen(R"("logit_bias":{"x1":1})"), bad, "g1", {"\"logit_bias\"", "the key \"x1\""}},
    {"logit_bias_negative_key", gen(R"("logit_bias":{"-1":1})"), bad, "g1", {"\"logit_bias\"", "the key \"-1\""}},
    {"logit_bias_past_vocab", gen(R"("logit_bias":{"1000":1})"), bad, "g1", {"\"logit_bias\"", "[0, 1000)"}},
    {"logit_bias_too_large", gen(R"("logit_bias":{"3":101})"), bad, "g1", {"\"logit_bias\"", "token 3 has 101"}},
    {"logit_bias_twice", gen(R"("logit_bias":{"3":1,"03":2})"), bad, "g1", {"\"logit_bias\"", "token 3 twice"}},
    {"stop_token_ids_not_an_array", gen(R"("stop_token_ids":2)"), bad, "g1", {"\"stop_token_ids\"", "at most 4 token ids"}},
    {"stop_token_ids_past_vocab", gen(R"("stop_token_ids":[1,1000])"), bad, "g1",
     {"\"stop_token_ids\"", "[0, 1000)", "holds 1000"}},
    {"stop_token_ids_text", gen(R"("stop_token_ids":["2"])"), bad, "g1", {"\"stop_token_ids\"", "holds \"2\""}},
    {"stop_token_ids_too_many", gen(R"("stop_token_ids":[0,1,2,3,4])"), bad, "g1", {"\"stop_token_ids\"", "at most 4"}},
    {"ignore_eos_number", gen(R"("ignore_eos":1)"), bad, "g1", {"\"ignore_eos\"", "true or false"}},
    {"skip_special_tokens_string", gen(R"("skip_special_tokens":"false")"), bad, "g1",
     {"\"skip_special_tokens\"", "true or false"}},
    {"min_tokens_past_max_tokens", gen(R"("max_tokens":4,"min_tokens":5)"), bad, "g1",
     {"\"min_tokens\"", "between 0 and max_tokens (4)", "got 5"}},
    {"min_tokens_negative", gen(R"("min_tokens":-1)"), bad, "g1", {"\"min_tokens\"", "got -1"}},
    {"response_format_unknown", gen(R"("response_format":"json")"), bad, "g1",
     {"\"response_format\"", "\"text\" or \"json_object\"", "got \"json\""}},
    {"response_format_object", gen(R"("response_format":{"type":"json_object"})"), bad, "g1",
     {"\"response_format\"", "\"json_object\""}},
    {"json_schema_not_an_object", gen(R"("json_schema":"{}")"), bad, "g1",
     {"\"json_schema\"", "a JSON Schema (an object)", "got \"{}\""}},
    {"json_schema_beside_json_object", gen(R"("response_format":"json_object","json_schema":{})"), bad, "g1",
     {"\"json_schema\"", "absent beside"}},
    {"choice_empty", gen(R"("choice":[])"), bad, "g1", {"\"choice\"", "an array of 1 to 64 distinct strings"}},
    {"choice_an_empty_text", gen(R"("choice":["a",""])"), bad, "g1", {"\"choice\"", "of 1 to 256 bytes"}},
    {"choice_too_long", gen(R"("choice":[")" + std::string(257, 'a') + "\"]"), bad, "g1", {"\"choice\"", "256 bytes"}},
    {"choice_twice", gen(R"("choice":["a","b","a"])"), bad, "g1", {"\"choice\"", "\"a\" is given twice"}},
    {"choice_not_strings", gen(R"("choice":"a")"), bad, "g1", {"\"choice\"", "an array"}},
    {"choice_beside_a_schema", gen(R"("json_schema":{},"choice":["a"])"), bad, "g1", {"\"choice\"", "absent beside"}},
    {"regex_empty", gen(R"("regex":"")"), bad, "g1", {"\"regex\"", "a string of 1 to 4096 bytes"}},
    {"regex_not_a_string", gen(R"("regex":["a"])"), bad, "g1", {"\"regex\"", "a string"}},
    {"regex_beside_choice", gen(R"("choice":["a"],"regex":"a")"), bad, "g1", {"\"regex\"", "absent beside"}},
    {"grammar_empty", gen(R"("grammar":"")"), bad, "g1", {"\"grammar\"", "a string of 1 to 16384 bytes"}},
    {"grammar_beside_a_regex", gen(R"("regex":"a","grammar":"root ::= \"a\"")"), bad, "g1",
     {"\"grammar\"", "absent beside", "\"regex\""}},
    {"grammar_beside_a_schema", gen(R"("json_schema":{},"grammar":"root ::= \"a\"")"), bad, "g1",
     {"\"grammar\"", "absent beside"}},
    {"json_trigger_alone", gen(R"("json_trigger":"<c>")"), bad, "g1",
     {"\"json_trigger\"", "given with \"response_format\": \"json_object\" or \"json_schema\""}},
    {"json_trigger_empty", gen(R"("json_schema":{},"json_trigger":"")"), bad, "g1",
     {"\"json_trigger\"", "a string of 1 to 64 bytes"}},
    {"json_trigger_too_long", gen(R"("json_schema":{},"json_trigger":")" + std::string(65, 'a') + "\""), bad, "g1",
     {"\"json_trigger\"", "a string of 1 to 64 bytes"}},
    {"json_trigger_not_a_string", gen(R"("json_schema":{},"json_trigger":1)"), bad, "g1",
     {"\"json_trigger\"", "got 1"}},
    {"truncate_prompt_tokens_zero", gen(R"("truncate_prompt_tokens":0)"), bad, "g1",
     {"\"truncate_prompt_tokens\"", "at least 1", "or -1"}},
    {"truncate_prompt_tokens_fraction", gen(R"("truncate_prompt_tokens":1.5)"), bad, "g1",
     {"\"truncate_prompt_tokens\"", "got 1.5"}},
    {"bad_words_empty_word", gen(R"("bad_words":["a",""])"), bad, "g1",
     {"\"bad_words\"", "element 1 is \"\""}},
    {"bad_words_not_an_array", gen(R"("bad_words":"a")"), bad, "g1", {"\"bad_words\"", "an array of at most 64"}},
    {"bad_words_too_many", gen(R"("bad_words":[)" + [] {
       std::string s;
       for (int i = 0; i < 65; ++i)
         s += std::string(i ? "," : "") + "\"w\"";
       return s;
     }() + "]"),
     bad, "g1", {"\"bad_words\"", "at most 64"}},
    {"allowed_token_ids_empty", gen(R"("allowed_token_ids":[])"), bad, "g1",
     {"\"allowed_token_ids\"", "a non-empty array of token ids"}},
    {"allowed_token_ids_past_vocab", gen(R"("allowed_token_ids":[1,1000000])"), bad, "g1",
     {"\"allowed_token_ids\"", "1000000"}},
    {"json_trigger_head_without_a_trigger", gen(R"("json_schema":{},"json_trigger_head":"[ARGS]")"), bad, "g1",
     {"\"json_trigger_head\"", "given with \"json_trigger\" and \"json_schema\""}},
    {"json_trigger_head_with_json_object", gen(R"("response_format":"json_object","json_trigger":"<c>","json_trigger_head":"=")"),
     bad, "g1", {"\"json_trigger_head\"", "given with \"json_trigger\" and \"json_schema\""}},
    {"json_trigger_head_empty", gen(R"("json_schema":{},"json_trigger":"<c>","json_trigger_head":"")"), bad, "g1",
     {"\"json_trigger_head\"", "a string of 1 to 64 bytes"}},
    {"json_answer_without_a_trigger", gen(R"("json_schema":{},"json_answer":{})"), bad, "g1",
     {"\"json_answer\"", "given with \"json_trigger\" and without \"json_trigger_first\""}},
    {"json_answer_with_json_trigger_first",
     gen(R"("json_schema":{},"json_trigger":"<c>","json_trigger_first":true,"json_answer":{})"), bad, "g1",
     {"\"json_answer\"", "without \"json_trigger_first\""}},
    {"json_answer_not_a_schema", gen(R"("json_schema":{},"json_trigger":"<c>","json_answer":"{}")"), bad, "g1",
     {"\"json_answer\"", "a JSON Schema (an object)"}},
    {"json_trigger_first_alone", gen(R"("json_schema":{},"json_trigger_first":true)"), bad, "g1",
     {"\"json_trigger_first\"", "given with \"json_trigger\""}},
    {"reasoning_close_empty", gen(R"("json_schema":{},"reasoning_close":"")"), bad, "g1",
     {"\"reasoning_close\"", "a string of 1 to 64 bytes"}},
    {"reasoning_close_too_long", gen(R"("json_schema":{},"reasoning_close":")" + std::string(65, 'a') + "\""), bad, "g1",
     {"\"reasoning_close\"", "a string of 1 to 64 bytes"}},
    {"reasoning_open_alone", gen(R"("json_schema":{},"reasoning_open":"<think>")"), bad, "g1",
     {"\"reasoning_open\"", "given with \"reasoning_close\""}},
    {"reasoning_open_not_a_string", gen(R"("json_schema":{},"reasoning_close":"</t>","reasoning_open":["<t>"])"), bad,
     "g1", {"\"reasoning_open\"", "a string of at most 64 bytes"}},
    {"json_trigger_first_not_a_boolean", gen(R"("json_schema":{},"json_trigger":"<c>","json_trigger_first":1)"), bad,
     "g1", {"\"json_trigger_first\"", "true or false"}},
    {"tokenize_without_prompt", R"({"type":"tokenize","id":"t"})", bad, "t", {"missing field \"prompt\""}},
    {"tokenize_prompt_tokens", R"({"type":"tokenize","id":"t","prompt":[1]})", bad, "t", {"\"prompt\"", "a string"}},
    {"tokenize_unknown_field", R"({"type":"tokenize","id":"t","prompt":"x","model":"m"})", bad, "t",
     {"unknown field \"model\""}},
    {"detokenize_without_tokens", R"({"type":"detokenize","id":"d"})", bad, "d", {"missing field \"tokens\""}},
    {"detokenize_past_vocab", R"({"type":"detokenize","id":"d","tokens":[1,1000]})", bad, "d",
     {"\"tokens\"", "[0, 1000)", "element 1 is 1000"}},
    {"detokenize_empty", R"({"type":"detokenize","id":"d","tokens":[]})", bad, "d", {"\"tokens\"", "non-empty"}},
    {"unknown_field", gen(R"("max_token":16)"), bad, "g1",
     {"unknown field \"max_token\"", "generate", "\"max_tokens\""}},
    {"unknown_field_before_prompt_check", R"({"type":"generate","id":"g1","promt":"hi"})", bad,
     "g1", {"unknown field \"promt\""}},
    {"unknown_field_on_cancel", R"({"type":"cancel","id":"c","prompt":"x"})", bad, "c",
     {"unknown field \"prompt\"", "cancel", "\"type\", \"id\""}},
    {"long_string_is_truncated", gen(R"("stream":")" + std::string(300, 'y') + "\""), bad,
     "g1", {"\"stream\"", "a string of 300 bytes"}},
  };
}

class reject_test : public ::testing::TestWithParam<reject_case> {};

TEST_P(reject_test, reports_code_id_and_field) {
  const auto& c = GetParam();
  auto result = parse_request(c.frame, test_limits());
  auto* err = std::get_if<parse_error>(&result);
  ASSERT_NE(err, nullptr) << "accepted: " << c.frame;
  EXPECT_EQ(err->code, c.code) << err->message;
  EXPECT_EQ(err->id, c.id);
  for (const auto& m : c.mentions)
    EXPECT_NE(err->message.find(m), std::string::npos)
      << "message \"" << err->message << "\" lacks \"" << m << "\"";
  EXPECT_LT(err->message.size(), 700u);
  EXPECT_EQ(err->message.find("json.exception"), std::string::npos) << err->message;
}

INSTANTIATE_TEST_SUITE_P(wire, reject_test, ::testing::ValuesIn(reject_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(wire, deeply_nested_frames_do_not_crash) {
  const std::size_t depth = 200000;
  auto nested = std::string(depth, '[') + std::string(depth, ']');
  auto top = parse_request(nested, parse_limits{});
  ASSERT_TRUE(std::holds_alternative<parse_error>(top));
  EXPECT_EQ(std::get<parse_error>(top).code, error_code::bad_request);

  auto field = parse_request(gen("\"max_tokens\":" + nested), parse_limits{});
  ASSERT_TRUE(std::holds_alternative<parse_error>(field));
  EXPECT_NE(std::get<parse_error>(field).message.find("\"max_tokens\""), std::string::npos);
}

// -- request round trips -----------------------------------------------------------

TEST(wire, request_round_trips) {
  generate_request full;
  full.id = "full";
  full.prompt = "Once upon a time \xe2\x98\xba";
  full.adapter = "sql-lora";
  full.max_tokens = 4096;
  full.fit_context = true;
  full.sampling = {0.7f, 0.95f, 40, std::numeric_limits<std::uint64_t>::max(), -1.5f, 0.25f, {{0, -100.0f}, {7, 2.5f}},
                   0.05f, 1.15f};
  full.stop = {"\n", "END"};
  full.stream = true;
  full.session = "chat-1";
  full.priority = -2;
  full.logprobs = 5;
  full.prompt_logprobs = 0;
  full.stop_token_ids = {2, 31};
  full.ignore_eos = true;
  full.skip_special_tokens = false;
  full.min_tokens = 7;
  full.json_object = true;

  generate_request tokens;
  tokens.id = "tok";
  tokens.prompt_tokens = std::vector<std::int32_t>{0, 1, 999};
  tokens.sampling = {0.0f, 0.1f, 0, 0, 0.0f, 0.0f, {}};
  tokens.stop = {"x"};
  tokens.json_schema = R"({"type":"object","properties":{"b":{"enum":[1,"x"]},"a":true}})";
  tokens.json_trigger = "<tool_call>";
  tokens.json_trigger_first = true;
  tokens.json_trigger_head = "[ARGS]";
  tokens.truncate_prompt_tokens = 7;
  tokens.bad_words = {"a b", "c"};
  tokens.allowed_token_ids = {0, 5, 999};
  tokens.reasoning_close = "</think>";
  tokens.reasoning_open = "<think>";

  generate_request defaults;
  defaults.id = "d";
  defaults.prompt = "p";

  generate_request choosing;
  choosing.id = "c";
  choosing.prompt = "p";
  choosing.choice = {"yes", "no", "\xe2\x98\xba"};
  generate_request matching;
  matching.id = "m";
  matching.prompt = "p";
  matching.regex = "(yes|no)\\.";
  generate_request parsing;
  parsing.id = "g";
  parsing.prompt = "p";
  parsing.grammar = "root ::= \"(\" root \")\" | [a-z]+";

  generate_request answering;
  answering.id = "an";
  answering.prompt = "p";
  answering.json_object = true;
  answering.json_trigger = "<tool_call>";
  answering.json_answer = R"({"type":"array","items":{"const":"x"}})";

  std::vector<request> requests{full,
                                tokens,
                                answering,
                                choosing,
                                matching,
                                parsing,
                                defaults,
                                cancel_request{"full"},
                                health_request{"h"},
                                stats_request{"s"},
                                list_adapters_request{"l"},
                                load_adapter_request{"la", "sql", "/srv/adapters/sql", 0},
                                load_adapter_request{"lb", "sim-1", "", 64},
                                unload_adapter_request{"u", "sql"},
                                advise_request{"ad", "chat-1", 2.5, 3},
                                advise_request{"ad2", "chat-2", 0, 0},
                                tokenize_request{"tk", "Once \xe2\x98\xba"},
                                detokenize_request{"dt", {0, 5, 999}}};
  for (const auto& r : requests) {
    auto text = to_json(r);
    SCOPED_TRACE(text);
    auto back = parse_request(text, test_limits());
    if (auto* err = std::get_if<parse_error>(&back))
      FAIL() << "rejected: " << err->message;
    expect_same(r, std::get<request>(back));
  }
}

TEST(wire, request_floats_are_written_in_shortest_form) {
  generate_request g;
  g.id = "f";
  g.prompt = "p";
  g.sampling.temperature = 0.7f;
  auto text = to_json(request{g});
  EXPECT_NE(text.find("\"temperature\":0.7,"), std::string::npos) << text;
}

// -- replies ------------------------------------------------------------------------

TEST(wire, reply_json_shapes) {
  EXPECT_EQ(to_json(accepted_reply{"a", 3}), R"({"type":"accepted","id":"a","prompt_tokens":3})");
  EXPECT_EQ(to_json(token_reply{"a", 2, {5, 6}, "ab", {}, {}}),
            R"({"type":"token","id":"a","index":2,"tokens":[5,6],"text":"ab"})");
  done_reply d{"a", "length", 3, 2, {1.5, 2.0, 3.25}, std::vector<std::int32_t>{5, 6}, "ab", std::nullopt, std::nullopt};
  EXPECT_EQ(to_json(d), R"({"type":"done","id":"a","finish_reason":"length",)"
                        R"("usage":{"prompt_tokens":3,"completion_tokens":2},)"
                        R"("timings":{"queue_ms":1.5,"ttft_ms":2.0,"e2e_ms":3.25},)"
                        R"("tokens":[5,6],"text":"ab"})");
  d.reasoning_tokens = 2;
  EXPECT_NE(to_json(d).find(R"("usage":{"prompt_tokens":3,"completion_tokens":2,"reasoning_tokens":2})"), std::string::npos)
    << to_json(d);
  d.reasoning_tokens = 0;
  d.tokens.reset();
  d.text.reset();
  auto streamed = to_json(d);
  EXPECT_EQ(streamed.find("\"tokens\""), std::string::npos) << streamed;
  EXPECT_EQ(streamed.find("\"text\""), std::string::npos) << streamed;
  EXPECT_EQ(to_json(error_reply{"a", error_code::unknown_adapter, "no adapter \"x\""}),
            R"({"type":"error","id":"a","code":"unknown_adapter","message":"no adapter \"x\""})");
  EXPECT_EQ(to_json(health_reply{"h", "ok"}), R"({"type":"health","id":"h","status":"ok"})");
  EXPECT_EQ(to_json(stats_reply{"s", {stat_gauge("queued", 2), stat_gauge("kv_util", 0.5)}}),
            R"({"type":"stats","id":"s","stats":{"queued":2.0,"kv_util":0.5}})");
  EXPECT_EQ(to_json(stats_reply{"s", {stat_counter("done", 7), stat_gauge("queued", 2), stat_level("p50", 0.5),
                                      stat_counter("bytes", 1e9)}}),
            R"({"type":"stats","id":"s","stats":{"done":7.0,"queued":2.0,"p50":0.5,"bytes":1000000000.0},)"
            R"("counters":["done","bytes"],"levels":["p50"]})");
  EXPECT_EQ(to_json(adapters_reply{"l", {{"sql", 16, true}}}),
            R"({"type":"adapters","id":"l","adapters":[{"name":"sql","rank":16,"resident":true}]})");
}

TEST(wire, reply_round_trips) {
  std::vector<reply> replies{
    accepted_reply{"a", 12},
    token_reply{"a", 0, {1}, "x", {}, {}},
    token_reply{"a", 7, {1, 2, 3}, "multi \xe2\x98\xba", {}, {}},
    token_reply{"a", 8, {}, "", {}, {}},
    done_reply{"a", "length", 12, 16, {0.25, 10.5, 99.75}, std::vector<std::int32_t>{4, 5}, "45", std::nullopt, std::nullopt},
    done_reply{"a", "stop", 1, 0, {0, 0, 0}, std::vector<std::int32_t>{}, "", std::nullopt, std::nullopt},
    done_reply{"a", "eos", 3, 4, {1, 2, 3}, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
    done_reply{"a", "cancelled", 3, 1, {1, 2, 3}, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
    // Part of the prompt read from a cache.
    done_reply{"a", "length", 40, 2, {1, 2, 3}, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 32},
    // Of the output, the thinking's tokens.
    done_reply{"a", "stop", 4, 9, {1, 2, 3}, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 0, 7},
    token_reply{"a", 3, {9, 4}, "x", {{{9, "x", -0.25f}, {{9, "x", -0.25f}, {11, "\xe2\x98\xba", -2.5f}}},
                                           {{4, "\xe2", -std::numeric_limits<float>::infinity()}, {}}},
                {}},
    done_reply{"a", "length", 2, 1, {1, 2, 3}, std::vector<std::int32_t>{4}, "",
               std::vector<token_logprobs>{{{4, "\xff", -1e-7f}, {{4, "\xff", -1e-7f}}}}, std::nullopt},
    done_reply{"a", "length", 2, 0, {1, 2, 3}, std::vector<std::int32_t>{}, "", std::vector<token_logprobs>{}, std::nullopt},
    // A prompt's log-probabilities: its first token has none.
    token_reply{"a", 0, {7}, "x", {}, {{{3, "\xe2", std::numeric_limits<float>::quiet_NaN()}, {}},
                                       {{5, "yz", -0.5f}, {{6, "w", -0.25f}, {5, "yz", -0.5f}}}}},
    done_reply{"a", "length", 2, 1, {1, 2, 3}, std::vector<std::int32_t>{4}, "", std::nullopt,
               std::vector<token_logprobs>{{{3, "a", std::numeric_limits<float>::quiet_NaN()}, {}},
                                           {{4, "b", -std::numeric_limits<float>::infinity()}, {}}}},
    health_reply{"h", "ok"},
    health_reply{"h", "draining"},
    stats_reply{"s", {stat_gauge("zeta", 1), stat_counter("alpha", 0.125), stat_level("queue_depth", 1e9)}},
    stats_reply{"s", {}},
    adapters_reply{"l", {{"sql", 16, true}, {"chat", 8, false}}},
    adapters_reply{"l", {}},
    adapters_reply{"l2", {{"sql", 16, true}}, 4096},
    adapter_reply{"la", "sql", 16, "loaded"},
    adapter_reply{"u", "sql", 16, "unloaded"},
    advise_reply{"ad", "chat-1", "fetching"},
    tokenize_reply{"tk", {1, 450, 29889}, 4096},
    tokenize_reply{"tk0", {}, 16},
    detokenize_reply{"dt", " deep \xe2\x98\xba"},
  };
  for (auto c : {error_code::bad_request, error_code::frame_too_large,
                 error_code::unknown_adapter, error_code::unknown_request,
                 error_code::duplicate_id, error_code::prompt_too_long, error_code::overloaded,
                 error_code::shutting_down, error_code::adapter_in_use,
                 error_code::adapter_exists, error_code::bad_adapter, error_code::internal})
    replies.push_back(error_reply{"e", c, "because"});
  replies.push_back(error_reply{"", error_code::bad_request, "id unreadable"});

  for (const auto& r : replies) {
    auto text = std::visit([](const auto& x) { return to_json(x); }, r);
    SCOPED_TRACE(text);
    auto back = parse_reply(text);
    if (auto* err = std::get_if<parse_error>(&back))
      FAIL() << "rejected: " << err->message;
    expect_same(r, std::get<reply>(back));
  }
}

TEST(wire, non_finite_stats_travel_as_null) {
  stats_reply s{"s", {stat_gauge("nan", std::nan(""))}};
  auto text = to_json(s);
  EXPECT_EQ(text, R"({"type":"stats","id":"s","stats":{"nan":null}})");
  auto back = parse_reply(text);
  ASSERT_TRUE(std::holds_alternative<reply>(back));
  expect_same(reply{s}, std::get<reply>(back));
}

TEST(wire, invalid_utf8_in_text_still_yields_valid_json) {
  const std::string bad = "ok\xff\xc3(\xe2\x82";
  std::vector<std::string> frames{
    to_json(token_reply{"t", 0, {1}, bad, {}, {}}),
    to_json(done_reply{"t", "length", 1, 1, {}, std::vector<std::int32_t>{1}, bad, std::nullopt, std::nullopt}),
    to_json(error_reply{"t", error_code::internal, bad}),
    to_json(request{generate_request{"t", bad, {}, "", 16, false, {}, {bad}, false, "", 0}}),
  };
  for (const auto& f : frames) {
    SCOPED_TRACE(f);
    EXPECT_TRUE(valid_utf8(f));
    EXPECT_NE(f.find("ok\xef\xbf\xbd"), std::string::npos);
  }
  auto back = parse_reply(frames[0]);
  ASSERT_TRUE(std::holds_alternative<reply>(back));
  const auto& text = std::get<token_reply>(std::get<reply>(back)).text;
  EXPECT_TRUE(valid_utf8(text));
  EXPECT_EQ(text.substr(0, 2), "ok");
}

TEST(wire, log_probabilities_travel_with_their_tokens_bytes_and_all) {
  token_reply t{"a", 0, {5, 6}, "\xe2\x98\xba", {}, {}};
  t.logprobs = {{{5, "\xe2\x98", -0.5f}, {}}, {{6, "\xba", -std::numeric_limits<float>::infinity()}, {}}};
  const auto j = nlohmann::json::parse(to_json(t));
  ASSERT_EQ(j.at("logprobs").size(), 2u);
  EXPECT_EQ(j["logprobs"][0]["logprob"], -0.5);
  EXPECT_EQ(j["logprobs"][0]["bytes"], nlohmann::json::parse("[226, 152]"));
  EXPECT_TRUE(j["logprobs"][1]["logprob"].is_null()) << "-infinity is null";
  EXPECT_EQ(j["logprobs"][1]["bytes"], nlohmann::json::parse("[186]"));
  EXPECT_TRUE(j["logprobs"][0]["top"].empty());
  // Valid text carries no bytes; a reply without logprobs has no field.
  t.logprobs[0].sampled.text = "ok";
  EXPECT_FALSE(nlohmann::json::parse(to_json(t))["logprobs"][0].contains("bytes"));
  EXPECT_FALSE(nlohmann::json::parse(to_json(token_reply{"a", 0, {5}, "x", {}, {}})).contains("logprobs"));
  // Shortest form, as sampling parameters are.
  t.logprobs[0].sampled.logprob = -0.1f;
  EXPECT_NE(to_json(t).find(R"("logprob":-0.1,)"), std::string::npos) << to_json(t);
}

TEST(wire, parse_reply_ignores_unknown_fields) {
  auto back = parse_reply(R"({"type":"health","id":"h","status":"ok","uptime_s":5})");
  ASSERT_TRUE(std::holds_alternative<reply>(back));
  EXPECT_EQ(std::get<health_reply>(std::get<reply>(back)).status, "ok");
}

TEST(wire, parse_reply_rejections) {
  struct row {
    std::string frame;
    std::string id;
    std::string mention;
  };
  std::vector<row> rows{
    {"nope", "", "not valid JSON"},
    {"[1]", "", "JSON object"},
    {R"({"id":"a"})", "a", "\"type\""},
    {R"({"type":"health"})", "", "\"id\""},
    {R"({"type":"tokens","id":"a"})", "a", "\"tokens\""},
    {R"({"type":"token","id":"a","index":0,"text":""})", "a", "\"tokens\""},
    {R"({"type":"accepted","id":"a","prompt_tokens":"3"})", "a", "\"prompt_tokens\""},
    {R"({"type":"done","id":"a","finish_reason":"eos","usage":{"prompt_tokens":1},)"
     R"("timings":{"queue_ms":0,"ttft_ms":0,"e2e_ms":0}})",
     "a", "usage.completion_tokens"},
    {R"({"type":"error","id":"a","code":"teapot","message":"m"})", "a", "\"teapot\""},
    {R"({"type":"adapters","id":"a","adapters":[{"name":"x","rank":-1,"resident":true}]})",
     "a", "adapters[0].rank"},
    {R"({"type":"stats","id":"a","stats":{"q":"1"}})", "a", "stats.q"},
    {R"({"type":"stats","id":"a","stats":{"q":1},"counters":"q"})", "a", "\"counters\""},
    {R"({"type":"stats","id":"a","stats":{"q":1},"levels":[1]})", "a", "\"levels\""},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","logprobs":[{"token":1,"text":"","logprob":0}]})",
     "a", "logprobs[0].top"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","logprobs":[{"token":1,"bytes":[256],"logprob":0,"top":[]}]})",
     "a", "logprobs[0].bytes"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","logprobs":[{"token":1,"text":"","logprob":0,"top":[{"token":2,"text":"","logprob":"x"}]}]})",
     "a", "logprobs[0].top[0].logprob"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","logprobs":[{"token":1,"text":"","logprob":-1e300,"top":[]}]})",
     "a", "logprobs[0].logprob"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","logprobs":[{"token":1,"text":"","top":[]}]})",
     "a", "logprobs[0].logprob"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","prompt_logprobs":[{"token":1,"text":"","logprob":-1,"top":[]}]})",
     "a", "prompt_logprobs[0].logprob"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","prompt_logprobs":[{"token":1,"text":"","top":[{"token":1,"text":"","logprob":0}]}]})",
     "a", "prompt_logprobs[0].top"},
    {R"({"type":"token","id":"a","index":0,"tokens":[1],"text":"","prompt_logprobs":[{"token":1,"text":"","top":[]},{"token":2,"text":"","top":[]}]})",
     "a", "prompt_logprobs[1].logprob"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.frame);
    auto back = parse_reply(r.frame);
    auto* err = std::get_if<parse_error>(&back);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(err->code, error_code::bad_request);
    EXPECT_EQ(err->id, r.id);
    EXPECT_NE(err->message.find(r.mention), std::string::npos) << err->message;
  }
}

TEST(wire, error_code_names) {
  struct row {
    error_code code;
    std::string_view name;
  };
  for (auto [code, name] : {row{error_code::bad_request, "bad_request"},
                            row{error_code::frame_too_large, "frame_too_large"},
                            row{error_code::unknown_adapter, "unknown_adapter"},
                            row{error_code::unknown_request, "unknown_request"},
                            row{error_code::duplicate_id, "duplicate_id"},
                            row{error_code::prompt_too_long, "prompt_too_long"},
                            row{error_code::overloaded, "overloaded"},
                            row{error_code::shutting_down, "shutting_down"},
                            row{error_code::adapter_in_use, "adapter_in_use"},
                            row{error_code::adapter_exists, "adapter_exists"},
                            row{error_code::bad_adapter, "bad_adapter"},
                            row{error_code::internal, "internal"}})
    EXPECT_EQ(to_string(code), name);
}

// docs/protocol.md's table of error codes names every code, and only those.
TEST(wire, the_protocol_reference_lists_every_error_code) {
  std::ifstream in("docs/protocol.md");
  ASSERT_TRUE(in) << "docs/protocol.md (the tests run from the repository root)";
  std::set<std::string> documented;
  bool table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0)
      table = line == "## Error codes";
    else if (table && line.rfind("| `", 0) == 0)
      documented.insert(line.substr(3, line.find('`', 3) - 3));
  }
  std::set<std::string> codes;
  for (auto c = static_cast<int>(error_code::bad_request); c <= static_cast<int>(error_code::internal); ++c)
    codes.insert(std::string{to_string(static_cast<error_code>(c))});
  EXPECT_EQ(codes.size(), 12u);
  EXPECT_EQ(documented, codes);
}

} // namespace
TEST(wire, a_tokenize_reply_carries_the_models_end_tokens) {
  const auto frame = to_json(tokenize_reply{"t", {1, 450}, 4096, {2, 32000}});
  auto r = parse_reply(frame);
  ASSERT_TRUE(std::holds_alternative<reply>(r)) << frame;
  const auto* t = std::get_if<tokenize_reply>(&std::get<reply>(r));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->tokens, (std::vector<std::int32_t>{1, 450}));
  EXPECT_EQ(t->end_tokens, (std::vector<std::int32_t>{2, 32000}));
  // An older server's reply, without them: none.
  auto old = parse_reply(R"({"type":"tokenize","id":"t","tokens":[1],"count":1,"max_context":9})");
  ASSERT_TRUE(std::holds_alternative<reply>(old));
  EXPECT_TRUE(std::get<tokenize_reply>(std::get<reply>(old)).end_tokens.empty());
}

} // namespace troupe::wire
