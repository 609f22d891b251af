// troupe-chat-template-bench: what rendering a chat into a prompt costs the
// HTTP front, per request: parse_chat_completion with the built-in chatml
// formats against the same format as a Hugging Face (Jinja) template run by
// messages/jinja, for a chat of `turns` exchanges (each message 400 bytes),
// without and with two tools offered. The Jinja template is read once, at
// start, as the server reads it.
// Usage: troupe-chat-template-bench [google-benchmark flags]
#include "messages/openai.hpp"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <string>

namespace {

using namespace troupe::openai;

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

} // namespace

BENCHMARK_MAIN();
