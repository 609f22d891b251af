// troupe-chat-template-bench: what rendering a chat into a prompt costs the
// HTTP front, per request: parse_chat_completion with the built-in chatml
// formats against the same format as a Hugging Face (Jinja) template run by
// messages/jinja, for a chat of `turns` exchanges (each message 400 bytes),
// without and with two tools offered. The Jinja template is read once, at
// start, as the server reads it.
// bm_stream_answer: what answering costs it per streamed token, a chat's
// chunks against the Responses API's events (read from those chunks), for
// 256 tokens of text, or of text then a call.
// Usage: troupe-chat-template-bench [google-benchmark flags]
#include "messages/openai.hpp"
#include "messages/responses.hpp"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <string>

namespace {

using namespace troupe::openai;
namespace wire = troupe::wire;

// ChatML as Qwen-style models ship it: a system message, the tools in
// <tools> tags, calls in <tool_call> tags, the assistant's turn opened.
constexpr const char* chatml_jinja =
  "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
  "{%- endif %}{{- '\\n\\n# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
  "{{- '\\n</tools><|im_end|>\\n' }}{%- elif messages[0].role == 'system' %}"
  "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
  "{%- for message in messages %}{%- if message.role != 'system' or not loop.first %}"
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

std::string chat_body(int turns, bool tools) {
  nlohmann::json messages = nlohmann::json::array();
  const std::string text(400, 'x');
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant. " + text}});
  for (int t = 0; t < turns; ++t) {
    messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(t) + ": " + text}});
    messages.push_back({{"role", "assistant"}, {"content", "Answer " + std::to_string(t) + ": " + text}});
  }
  messages.push_back({{"role", "user"}, {"content", "And then? " + text}});
  nlohmann::json body = {{"model", "m"}, {"max_tokens", 16}, {"messages", messages}};
  if (tools)
    body["tools"] = nlohmann::json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city"]}}},
      {"type": "function", "function": {"name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}])");
  return body.dump();
}

chat_template make(bool jinja) {
  if (!jinja)
    return std::get<chat_template>(make_chat_template("chatml"));
  const jinja_source src{chatml_jinja, "", "<|im_end|>"};
  chat_formats calls;
  calls.tool_call = "<tool_call>\n{call}\n</tool_call>"; // as the built-in chatml's
  return std::get<chat_template>(make_chat_template("model", calls, &src));
}

void bm_chat_render(benchmark::State& state) {
  const bool jinja = state.range(0) != 0;
  const int turns = static_cast<int>(state.range(1));
  const bool tools = state.range(2) != 0;
  const auto tpl = make(jinja);
  const auto body = chat_body(turns, tools);
  for (auto _ : state) {
    auto r = parse_chat_completion(body, "m", "h1", tpl);
    if (!std::holds_alternative<completion_request>(r)) {
      state.SkipWithError(std::get<api_error>(r).message.c_str());
      return;
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["body_bytes"] = static_cast<double>(body.size());
}
BENCHMARK(bm_chat_render)
  ->ArgNames({"jinja", "turns", "tools"})
  ->ArgsProduct({{0, 1}, {1, 8, 32}, {0, 1}})
  ->Unit(benchmark::kMicrosecond);

void bm_stream_answer(benchmark::State& state) {
  const bool responses = state.range(0) != 0;
  const bool call = state.range(1) != 0;
  const auto tpl = make(false);
  const std::string tools =
    call ? R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])" : "";
  const std::string body = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"q"}])" + tools + "}";
  auto chat = parse_chat_completion(body, "m", "h1", tpl);
  const std::string rtools = call ? R"(,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}])" : "";
  auto resp = parse_response_request(R"({"model":"m","stream":true,"input":"q")" + rtools + "}", "m", "h1", tpl);
  if (!std::holds_alternative<completion_request>(chat) || !std::holds_alternative<response_request>(resp)) {
    state.SkipWithError("a request is refused");
    return;
  }
  // 256 tokens: text of 4 bytes each, the last 64 a call where asked.
  std::vector<std::string> texts(256, "word");
  if (call) {
    std::string c = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" + std::string(180, 'x')
                    + "\"}}</tool_call>";
    for (std::size_t k = 0; k < 64; ++k)
      texts[192 + k] = c.substr(k * c.size() / 64, (k + 1) * c.size() / 64 - k * c.size() / 64);
  }
  wire::done_reply done;
  done.id = "h1";
  done.finish_reason = "stop";
  std::size_t bytes = 0;
  for (auto _ : state) {
    auto run = [&](auto& answer) {
      std::string out = answer.stream_start();
      for (std::size_t k = 0; k < texts.size(); ++k) {
        wire::token_reply t;
        t.index = static_cast<std::uint32_t>(k);
        t.text = texts[k];
        out += answer.chunk(0, t);
      }
      out += answer.choice_end(0, done);
      out += answer.stream_end();
      bytes = out.size();
      benchmark::DoNotOptimize(out);
    };
    if (responses) {
      response_answer a("resp_h1", 0, std::get<response_request>(resp));
      run(a);
    } else {
      completion_answer a("chatcmpl-h1", 0, std::get<completion_request>(chat));
      run(a);
    }
  }
  state.counters["per_token_us"] =
    benchmark::Counter(static_cast<double>(state.iterations()) * 256, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["bytes_sent"] = static_cast<double>(bytes);
}
BENCHMARK(bm_stream_answer)->ArgNames({"responses", "call"})->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
