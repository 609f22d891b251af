// OpenAI's Responses API over the chat completion: requests become the
// chat they stand for (the same wire frames), errors name the request's own
// fields, and answers read the output into items, whole and as events.

#include "messages/responses.hpp"
#include "tests/messages/builtin_template.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

namespace troupe::openai {
namespace {

using json = nlohmann::json;

using testing::builtin;

/// A Hugging Face template that shows the messages and tools it is given.
chat_template showing_template() {
  const jinja_source src{"{{ messages|tojson }}|{{ tools|tojson }}|{{ reasoning_effort | default('-') }}", "<s>", "</s>"};
  chat_formats formats;
  formats.tool_call = "<tool_call>\n{call}\n</tool_call>";
  auto t = make_chat_template("model", formats, &src);
  if (auto* e = std::get_if<chat_template_error>(&t)) {
    ADD_FAILURE() << e->key << " " << e->what;
    return {};
  }
  return std::get<chat_template>(std::move(t));
}

response_request taken(const std::string& body, const chat_template& tpl) {
  auto r = parse_response_request(body, "base", "h7", tpl);
  if (auto* e = std::get_if<api_error>(&r)) {
    ADD_FAILURE() << body << " refused: " << e->message;
    return {};
  }
  return std::get<response_request>(std::move(r));
}

api_error refused(const std::string& body, const chat_template& tpl) {
  auto r = parse_response_request(body, "base", "h7", tpl);
  if (auto* c = std::get_if<response_request>(&r)) {
    ADD_FAILURE() << body << " taken: " << c->chat.frames.at(0);
    return {};
  }
  return std::get<api_error>(std::move(r));
}

/// The chat's frames for the same conversation.
std::vector<std::string> chat_frames(const std::string& body, const chat_template& tpl) {
  auto r = parse_chat_completion(body, "base", "h7", tpl);
  if (auto* e = std::get_if<api_error>(&r)) {
    ADD_FAILURE() << body << " refused: " << e->message;
    return {};
  }
  return std::get<completion_request>(r).frames;
}

const std::string weather_params = R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})";

TEST(responses, a_requests_input_and_settings_become_the_chat_they_stand_for) {
  const auto chatml = builtin("chatml");
  // A string input, the instructions as the system message; the settings renamed.
  EXPECT_EQ(taken(R"({"model":"base","instructions":"Be brief.","input":"Hi","max_output_tokens":9,"temperature":0.5,)"
                  R"("text":{"format":{"type":"json_schema","name":"r","schema":{"type":"object"},"strict":true}}})",
                  chatml)
              .chat.frames,
            chat_frames(R"({"model":"base","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],)"
                        R"("max_completion_tokens":9,"temperature":0.5,"response_format":{"type":"json_schema",)"
                        R"("json_schema":{"name":"r","schema":{"type":"object"},"strict":true}}})",
                        chatml));
  // Items: text parts, a reasoning item and the calls after it (one
  // assistant message), their outputs, an answer sent back; function tools
  // as the chat nests them.
  const auto shown = showing_template();
  const std::string tools = R"([{"type":"function","name":"get_weather","description":"d","parameters":)" + weather_params
                            + R"(,"strict":true},{"type":"function","name":"get_time"}])";
  const auto r = taken(R"({"model":"base","tools":)" + tools + R"(,"tool_choice":{"type":"function","name":"get_time"},
      "reasoning":{"effort":"low","summary":"auto"},"input":[
      {"role":"user","content":[{"type":"input_text","text":"Weather"},{"type":"input_text","text":"in Paris?"}]},
      {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Call it."}]},
      {"type":"function_call","id":"fc_1","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
      {"type":"function_call","call_id":"c2","name":"get_time","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"18C"},
      {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"noon"}]},
      {"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"18C at noon.","annotations":[]}]},
      {"type":"function_call","call_id":"c3","name":"get_time","arguments":"{}"},
      {"type":"function_call_output","call_id":"c3","output":"1pm"},
      {"role":"developer","content":"Answer now."}]})",
                       shown);
  const std::string chat_body = R"({"model":"base","tools":[{"type":"function","function":{"name":"get_weather","description":"d",
      "parameters":)" + weather_params + R"(,"strict":true}},{"type":"function","function":{"name":"get_time"}}],
      "tool_choice":{"type":"function","function":{"name":"get_time"}},"reasoning_effort":"low","messages":[
      {"role":"user","content":[{"type":"text","text":"Weather"},{"type":"text","text":"in Paris?"}]},
      {"role":"assistant","content":null,"reasoning_content":"Call it.","tool_calls":[
        {"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
        {"id":"c2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"18C"},
      {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"noon"}]},
      {"role":"assistant","content":[{"type":"text","text":"18C at noon."}],"tool_calls":[
        {"id":"c3","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c3","content":"1pm"},
      {"role":"developer","content":"Answer now."}]})";
  EXPECT_EQ(r.chat.frames, chat_frames(chat_body, shown));
  EXPECT_EQ(r.input_of, (std::vector<std::int64_t>{0, 2, 4, 5, 6, 8, 9}));
  EXPECT_TRUE(r.chat.include_usage) << "the response's usage";
  // The response repeats the settings.
  const auto echo = json::parse(r.echo);
  EXPECT_EQ(echo["tool_choice"], json::parse(R"({"type":"function","name":"get_time"})"));
  EXPECT_EQ(echo["tools"].size(), 2u);
  EXPECT_EQ(echo["reasoning"]["effort"], "low");
  EXPECT_EQ(echo["text"]["format"]["type"], "text");
  EXPECT_EQ(echo["store"], false);
  // vLLM's sampling fields pass; OpenAI's neutral ones are taken.
  EXPECT_TRUE(taken(R"({"model":"base","input":"Hi","stream":true,"stream_options":{"include_obfuscation":false}})",
                    chatml)
                .chat.stream);
  EXPECT_EQ(taken(R"({"model":"base","input":"Hi","seed":3,"top_k":5,"store":false,"truncation":"disabled",)"
                  R"("background":false,"text":{"verbosity":"medium"},"include":["reasoning.encrypted_content"]})",
                  chatml)
              .chat.frames,
            chat_frames(R"({"model":"base","messages":[{"role":"user","content":"Hi"}],"seed":3,"top_k":5})", chatml));
}

TEST(responses, what_needs_a_stored_response_or_is_not_text_is_refused_naming_the_field) {
  const auto chatml = builtin("chatml");
  const std::string head = R"({"model":"base",)";
  for (const auto& [fields, param, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
         {R"("input":"q","previous_response_id":"resp_1")", "previous_response_id", "stores none"},
         {R"("input":"q","conversation":"conv_1")", "conversation", "conversation_store_mb = 0"},
         {R"("input":"q","store":true)", "store", "stores no responses"},
         {R"("input":"q","background":true)", "background", "stores none here"},
         {R"("input":"q","background":"yes")", "background", "true or false"},
         {R"("input":"q","truncation":"middle")", "truncation", "must be \"auto\""},
         {R"("input":"q","max_tool_calls":2)", "max_tool_calls", "not supported"},
         {R"("input":"q","n":2)", "n", "unknown field"},
         {R"("input":"q","messages":[])", "messages", "unknown field"},
         {R"("max_output_tokens":3)", "input", "missing field \"input\""},
         {R"("input":[])", "input", "non-empty"},
         {R"("input":[{"type":"item_reference","id":"msg_1"}])", "input", "not among the items before it"},
         {R"("input":[{"type":"web_search_call","id":"w"}])", "input", "input[0].type"},
         {R"("input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}])", "input",
          "input[0].content[0].type"},
         {R"("input":[{"role":"tool","content":"x"}])", "input", "input[0].role"},
         {R"("input":[{"role":"user","content":"x","name":"ann"}])", "input", "input[0].name"},
         {R"("input":[{"type":"function_call","call_id":"c","name":"f"}])", "input", "input[0].arguments"},
         {R"("input":[{"type":"reasoning","encrypted_content":"gAAA"}])", "input", "encrypted"},
         {R"("input":"q","tools":[{"type":"web_search"}])", "tools", "no built-in tools"},
         {R"("input":"q","tools":[{"type":"function","name":"f","x":1}])", "tools", "tools[0].x"},
         {R"("input":"q","tool_choice":{"type":"allowed_tools","tools":[]})", "tool_choice", "tool_choice"},
         {R"("input":"q","text":{"format":"json"})", "text.format", "text.format"},
         {R"("input":"q","text":{"verbosity":"low"})", "text.verbosity", "medium"},
         {R"("input":"q","reasoning":{"effort":"low","x":1})", "reasoning", "reasoning.x"},
         {R"("input":"q","include":["file_search_call.results"])", "include", "file_search_call.results"},
       }) {
    const auto e = refused(head + fields + "}", chatml);
    EXPECT_EQ(e.status, 400) << fields;
    EXPECT_EQ(e.param, param) << fields << ": " << e.message;
    EXPECT_NE(e.message.find(says), std::string::npos) << fields << ": " << e.message;
  }
}

TEST(responses, the_chats_errors_name_the_responses_own_fields_and_items) {
  const auto chatml = builtin("chatml");
  // A call output answering no call: the input item, not the chat message.
  auto e = refused(R"({"model":"base","instructions":"S","input":[{"role":"user","content":"q"},
      {"type":"function_call_output","call_id":"nope","output":"x"}]})",
                   chatml);
  EXPECT_EQ(e.param, "input");
  EXPECT_NE(e.message.find("\"input[1].tool_call_id\""), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("messages"), std::string::npos) << e.message;
  // The format's fields, and the renamed settings.
  e = refused(R"({"model":"base","input":"q","text":{"format":{"type":"json_schema","name":"x"}}})", chatml);
  EXPECT_EQ(e.param, "text.format");
  EXPECT_NE(e.message.find("\"text.format\""), std::string::npos) << e.message;
  e = refused(R"({"model":"base","input":"q","reasoning":{"effort":"high"}})", chatml);
  EXPECT_EQ(e.param, "reasoning.effort") << "the built-in template has no such setting";
  // And refusals after the wire read the frame, which name the wire's fields.
  const auto many = taken(R"({"model":"base","input":"q","max_output_tokens":"many"})", chatml);
  e = as_response_error(refusal(many.chat, wire::error_code::bad_request, "field \"max_tokens\" must be an integer"), many);
  EXPECT_EQ(e.param, "max_output_tokens") << e.message;
  EXPECT_EQ(e.message, "field \"max_output_tokens\" must be an integer");
  e = as_response_error(refusal(many.chat, wire::error_code::bad_request, "field \"temperature\" must be at least 0"), many);
  EXPECT_EQ(e.param, "temperature") << e.message;
  // What a message quotes of the request is left as it is, however it reads.
  const auto quoted = bad_request("\"messages[99999999999999999999999]\" and \"response_format\" are named in " +
                                    std::string("a value, \"json_schema\""),
                                  "tool_choice");
  EXPECT_EQ(as_response_error(quoted, many).message, quoted.message);
  e = refused(R"({"model":"base","input":"q","top_logprobs":3})", chatml);
  EXPECT_EQ(e.param, "top_logprobs") << "needs the logprobs include: " << e.message;
  EXPECT_NE(e.message.find("\"include\""), std::string::npos) << e.message;
  const auto r = taken(R"({"model":"base","input":"q","text":{"format":{"type":"json_schema","name":"x","schema":{}}}})",
                       chatml);
  e = as_response_error(
    refusal(r.chat, wire::error_code::bad_request, "field \"json_schema\": keyword \"not\" at \"#\" is not supported"), r);
  EXPECT_EQ(e.param, "text.format");
  EXPECT_TRUE(e.message.starts_with("field \"text.format\": keyword")) << e.message;
}

wire::done_reply done_with(std::string text, const char* reason = "stop") {
  wire::done_reply d;
  d.id = "h7";
  d.finish_reason = reason;
  d.prompt_tokens = 11;
  d.completion_tokens = 4;
  d.cached_tokens = 2;
  d.text = std::move(text);
  return d;
}

json whole(const response_request& r, const wire::done_reply& d) {
  return json::parse(response_answer("resp_h7", 1700000000, r).body({d}));
}

TEST(responses, a_whole_response_reads_the_output_into_items) {
  const auto chatml = builtin("chatml");
  auto r = taken(R"({"model":"base","input":"q","instructions":"S","max_output_tokens":40,"metadata":{"run":"1"}})", chatml);
  auto j = whole(r, done_with("Hello there."));
  EXPECT_EQ(j["id"], "resp_h7");
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["created_at"], 1700000000);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["incomplete_details"].is_null());
  EXPECT_EQ(j["model"], "base");
  EXPECT_EQ(j["instructions"], "S");
  EXPECT_EQ(j["max_output_tokens"], 40);
  EXPECT_EQ(j["metadata"], json({{"run", "1"}}));
  ASSERT_EQ(j["output"].size(), 1u);
  const auto& msg = j["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "completed");
  EXPECT_EQ(msg["content"][0], json::parse(R"({"type":"output_text","text":"Hello there.","annotations":[],"logprobs":[]})"));
  EXPECT_EQ(j["usage"], json::parse(R"({"input_tokens":11,"input_tokens_details":{"cached_tokens":2},"output_tokens":4,)"
                                    R"("output_tokens_details":{"reasoning_tokens":0},"total_tokens":15})"));
  // Cut by max_output_tokens: incomplete, the item too.
  j = whole(r, done_with("Hel", "length"));
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"], json({{"reason", "max_output_tokens"}}));
  EXPECT_EQ(j["output"][0]["status"], "incomplete");
  // The stop string ends the text, as in the chat.
  EXPECT_EQ(whole(r, done_with("Done.<|im_end|>junk"))["output"][0]["content"][0]["text"], "Done.");

  // Reasoning, then text; calls after text.
  auto thinking = builtin("chatml");
  thinking.reasoning = reasoning_parser("qwen3");
  r = taken(R"({"model":"base","input":"q","tools":[{"type":"function","name":"get_time"}]})", thinking);
  j = whole(r, done_with("<think>Time?</think>Let me see.<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                         "</tool_call>"));
  ASSERT_EQ(j["output"].size(), 3u) << j.dump();
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][0]["content"][0], json({{"type", "reasoning_text"}, {"text", "Time?"}}));
  EXPECT_EQ(j["output"][0]["summary"], json::array());
  EXPECT_EQ(j["output"][1]["content"][0]["text"], "Let me see.");
  const auto& call = j["output"][2];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_time");
  EXPECT_EQ(call["arguments"], "{}");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_TRUE(call["call_id"].get<std::string>().starts_with("call_")) << call;
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("fc_")) << call;
  std::set<std::string> ids;
  for (const auto& item : j["output"])
    EXPECT_TRUE(ids.insert(item["id"].get<std::string>()).second) << "item ids differ";
  EXPECT_EQ(j["status"], "completed");

  // With the logprobs include, the text's tokens' log-probabilities.
  r = taken(R"({"model":"base","input":"q","include":["message.output_text.logprobs"],"top_logprobs":1})", chatml);
  auto d = done_with("Hi you");
  d.logprobs.emplace();
  for (const auto& [t, lp] : std::vector<std::pair<std::string, float>>{{"Hi", -0.5f}, {" you", -1.5f}, {"", -2.0f}})
    d.logprobs->push_back({{1, t, lp}, {{1, t, lp}}});
  const auto lps = whole(r, d)["output"][0]["content"][0]["logprobs"];
  ASSERT_EQ(lps.size(), 2u) << lps.dump() << " (the end's token has no text)";
  EXPECT_EQ(lps[0]["token"], "Hi");
  EXPECT_EQ(lps[1]["logprob"], -1.5);
  EXPECT_EQ(lps[1]["top_logprobs"].size(), 1u);
}

/// A stream's events, checked as they are read: each typed, numbered in
/// order from 0, each item added before its deltas and done after them.
std::vector<json> read_events(const std::string& sse) {
  std::vector<json> out;
  for (std::size_t at = 0; at < sse.size();) {
    const auto end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos)
      break;
    const auto ev = sse.substr(at, end - at);
    at = end + 2;
    const auto nl = ev.find('\n');
    EXPECT_TRUE(ev.starts_with("event: ") && nl != std::string::npos && ev.compare(nl + 1, 6, "data: ") == 0) << ev;
    auto j = json::parse(ev.substr(nl + 7));
    EXPECT_EQ(j["type"], ev.substr(7, nl - 7));
    EXPECT_EQ(j["sequence_number"], out.size());
    out.push_back(std::move(j));
  }
  return out;
}

TEST(responses, a_streamed_response_says_what_the_whole_one_says_however_its_tokens_fall) {
  auto thinking = builtin("chatml");
  thinking.reasoning = reasoning_parser("qwen3");
  const std::vector<std::pair<chat_template, std::string>> requests{
    {builtin("chatml"), R"({"model":"base","input":"q","stream":true})"},
    {builtin("chatml"), R"({"model":"base","input":"q","stream":true,"tools":[{"type":"function","name":"get_time"},
        {"type":"function","name":"get_weather","parameters":)" + weather_params + "}]}"},
    {thinking, R"({"model":"base","input":"q","stream":true,"tools":[{"type":"function","name":"get_time"}]})"},
    {builtin("chatml"), R"({"model":"base","input":"q","stream":true,"include":["message.output_text.logprobs"]})"},
  };
  const std::vector<std::string> outputs{
    "Hello there, friend.",
    "<think>Hm. Time?</think>It is <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\n"
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Os",
    "<think>cut short",
    "",
  };
  std::uint64_t seed = 5;
  auto next = [&] { return (seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  for (const auto& [tpl, body] : requests)
    for (const auto& out : outputs)
      for (const char* reason : {"stop", "length"})
        for (int trial = 0; trial < 10; ++trial) {
          const auto r = taken(body, tpl);
          auto d = done_with(out, reason);
          std::vector<wire::token_reply> tokens;
          for (std::size_t at = 0; at < out.size();) {
            wire::token_reply t;
            t.index = static_cast<std::uint32_t>(tokens.size());
            t.text = out.substr(at, std::min<std::size_t>(out.size() - at, 1 + next() % 5));
            at += t.text.size();
            if (r.chat.logprobs >= 0)
              t.logprobs.push_back({{static_cast<std::int32_t>(t.index), t.text, -1.0f - static_cast<float>(t.index)}, {}});
            tokens.push_back(std::move(t));
          }
          if (r.chat.logprobs >= 0) {
            d.logprobs.emplace();
            for (const auto& t : tokens)
              d.logprobs->push_back(t.logprobs.at(0));
          }
          const auto want = whole(r, d);
          response_answer a("resp_h7", 1700000000, r);
          std::string sse = a.stream_start();
          for (const auto& t : tokens)
            sse += a.chunk(0, t);
          sse += a.choice_end(0, d);
          sse += a.stream_end();
          const auto ev = read_events(sse);
          ASSERT_GE(ev.size(), 3u);
          EXPECT_EQ(ev[0]["type"], "response.created");
          EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
          EXPECT_EQ(ev[1]["type"], "response.in_progress");
          EXPECT_EQ(ev.back()["type"], want["status"] == "completed" ? "response.completed" : "response.incomplete");
          EXPECT_EQ(ev.back()["response"], want) << out;
          // Each item: added, its deltas (which join to its text or
          // arguments), done as the whole response has it.
          std::map<std::size_t, std::string> joined;
          std::set<std::size_t> added, done;
          // The output as a client builds it from the events (as OpenAI's
          // SDK's stream helper does): items added, parts added to them,
          // deltas added to those.
          json built = json::array();
          for (const auto& e : ev) {
            const auto type = e["type"].get<std::string>();
            if (!e.contains("output_index"))
              continue;
            const auto k = e["output_index"].get<std::size_t>();
            if (type == "response.output_item.added")
              built.push_back(e["item"]);
            else if (type == "response.content_part.added")
              built[k]["content"].push_back(e["part"]);
            else if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
              auto& part = built[k]["content"][e["content_index"].get<std::size_t>()];
              part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
              for (const auto& lp : e.value("logprobs", json::array()))
                part["logprobs"].push_back(lp);
            } else if (type == "response.function_call_arguments.delta")
              built[k]["arguments"] = built[k]["arguments"].get<std::string>() + e["delta"].get<std::string>();
            else if (type == "response.output_item.done") {
              auto item = built[k];
              item["status"] = e["item"]["status"];
              EXPECT_EQ(item, e["item"]) << "the item built from the events is the one done";
            }
            if (type == "response.output_item.added") {
              EXPECT_TRUE(added.insert(k).second);
              EXPECT_EQ(k, added.size() - 1) << "items open in order";
              EXPECT_EQ(e["item"]["status"], "in_progress");
              if (e["item"]["type"] != "function_call") {
                EXPECT_EQ(e["item"]["content"], json::array()) << "its part comes in content_part.added";
              }
            } else if (type == "response.output_item.done") {
              EXPECT_TRUE(done.insert(k).second);
              EXPECT_EQ(e["item"], want["output"][k]);
            } else if (type.ends_with(".delta")) {
              EXPECT_TRUE(added.contains(k) && !done.contains(k)) << type;
              joined[k] += e["delta"].get<std::string>();
            }
          }
          EXPECT_EQ(added.size(), want["output"].size());
          EXPECT_EQ(done, added);
          for (std::size_t k = 0; k < want["output"].size(); ++k) {
            const auto& item = want["output"][k];
            EXPECT_EQ(joined[k], item["type"] == "function_call" ? item["arguments"] : item["content"][0]["text"]) << out;
          }
        }
}

TEST(responses, the_store_keeps_the_most_recently_used_within_its_bytes) {
  response_store st(1000);
  const auto e = [](std::string previous, std::size_t body) {
    return response_store::entry{std::move(previous), "[]", std::string(body, 'x')};
  };
  EXPECT_TRUE(st.put("a", e("", 200)));
  EXPECT_TRUE(st.put("b", e("a", 200)));
  EXPECT_TRUE(st.put("c", e("b", 200)));
  EXPECT_EQ(st.size(), 3u);
  EXPECT_LE(st.bytes(), st.capacity());
  // The chain of c, oldest first; a read makes an entry the most recent.
  auto chain = std::get<std::vector<const response_store::entry*>>(st.chain("c"));
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0]->previous, "");
  EXPECT_EQ(chain[2]->previous, "b");
  // (Reading the chain used c, b, then a; now c again.)
  ASSERT_NE(st.find("c"), nullptr);
  // Past the bytes, the least recently used goes: b.
  EXPECT_TRUE(st.put("d", e("", 300)));
  EXPECT_EQ(st.find("b"), nullptr);
  EXPECT_NE(st.find("a"), nullptr);
  EXPECT_LE(st.bytes(), st.capacity());
  EXPECT_EQ(std::get<std::string>(st.chain("c")), "b") << "the first link no longer kept";
  EXPECT_EQ(std::get<std::string>(st.chain("zz")), "zz");
  // Put again: replaced, counted once; erased: gone, its bytes freed.
  const auto before = st.bytes();
  EXPECT_TRUE(st.put("d", e("", 300)));
  EXPECT_EQ(st.bytes(), before);
  EXPECT_TRUE(st.erase("d"));
  EXPECT_FALSE(st.erase("d"));
  EXPECT_EQ(st.find("d"), nullptr);
  // One larger than the whole store is not kept, and drops nothing.
  const auto size = st.size();
  EXPECT_FALSE(st.put("huge", e("", 2000)));
  EXPECT_EQ(st.size(), size);
  // None kept at all where the capacity is 0.
  response_store none(0);
  EXPECT_FALSE(none.put("a", e("", 1)));
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.bytes(), 0u);
}

TEST(responses, previous_response_id_goes_on_from_the_kept_conversation) {
  const auto chatml = builtin("chatml");
  // Turn 1, answered and kept; turn 2 names it.
  response_store st(1 << 20);
  const auto gone = [&](const std::string& id) -> std::variant<conversation, api_error> {
    auto turns = st.chain(id);
    if (auto* missing = std::get_if<std::string>(&turns)) {
      auto e = bad_request("no stored response " + *missing, "previous_response_id");
      e.status = 404;
      return e;
    }
    return conversation_of(std::get<std::vector<const response_store::entry*>>(turns));
  };
  auto parse = [&](const std::string& body, std::string_view session = "resp_new") {
    return parse_response_request(body, "base", "h7", chatml, {}, {}, gone, session);
  };
  auto r1 = std::get<response_request>(parse(R"({"model":"base","instructions":"S","input":"Hi"})", "resp_1"));
  EXPECT_EQ(r1.input_items, R"([{"role":"user","content":"Hi"}])");
  EXPECT_TRUE(r1.store) << "OpenAI's default";
  // A new conversation's turn runs in the session it was given, its
  // first response's, so that the next turn reuses its K and V.
  EXPECT_EQ(r1.session, "resp_1");
  EXPECT_EQ(json::parse(r1.chat.frames.at(0))["session"], "resp_1");
  st.put("resp_1", {r1.previous_id, r1.input_items, response_answer("resp_1", 1, r1).body({done_with("Hello.")}),
                    r1.session});
  auto r2 = std::get<response_request>(parse(R"({"model":"base","previous_response_id":"resp_1","input":"More?"})"));
  EXPECT_EQ(r2.previous_id, "resp_1");
  EXPECT_EQ(r2.input_items, R"([{"role":"user","content":"More?"}])") << "its own turn, as the store keeps it";
  EXPECT_EQ(r2.session, "resp_1") << "the conversation's, not the one given for a new one";
  // The instructions are not carried over, as OpenAI's are not.
  EXPECT_EQ(r2.chat.frames,
            chat_frames(R"({"model":"base","session":"resp_1","messages":[{"role":"user","content":"Hi"},)"
                        R"({"role":"assistant","content":[{"type":"text","text":"Hello."}]},)"
                        R"({"role":"user","content":"More?"}]})",
                        chatml));
  // A request's own session wins; a turn not kept runs in none.
  EXPECT_EQ(std::get<response_request>(parse(R"({"model":"base","input":"q","session":"mine"})")).session, "mine");
  const auto unkept = std::get<response_request>(parse(R"({"model":"base","input":"q","store":false})"));
  EXPECT_EQ(unkept.session, "");
  EXPECT_FALSE(json::parse(unkept.chat.frames.at(0)).contains("session"));
  EXPECT_EQ(json::parse(r2.echo)["previous_response_id"], "resp_1");
  // store false: answered, not to be kept.
  EXPECT_FALSE(unkept.store);
  // An id not kept: the store's error, naming the field.
  const auto e = std::get<api_error>(parse(R"({"model":"base","previous_response_id":"resp_9","input":"q"})"));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "previous_response_id");
  // An error in this turn's items names them by the request's own index.
  const auto bad = std::get<api_error>(parse(R"({"model":"base","previous_response_id":"resp_1",)"
                                             R"("input":[{"type":"function_call_output","call_id":"x","output":"y"}]})"));
  EXPECT_NE(bad.message.find("\"input[0].tool_call_id\""), std::string::npos) << bad.message;
  // Without a store, neither is served.
  EXPECT_NE(refused(R"({"model":"base","previous_response_id":"resp_1","input":"q"})", chatml).message.find("stores none"),
            std::string::npos);
  EXPECT_FALSE(taken(R"({"model":"base","input":"q"})", chatml).store);
}

TEST(responses, input_tokens_counts_the_prompt_the_response_would_run) {
  const auto chatml = builtin("chatml");
  const std::string body = R"({"model":"base","instructions":"S","input":"Hi"})";
  const auto f = json::parse(tokenize_frame(taken(body, chatml), "h9"));
  EXPECT_EQ(f["type"], "tokenize");
  EXPECT_EQ(f["id"], "h9");
  EXPECT_EQ(f["prompt"], json::parse(taken(body, chatml).chat.frames.at(0))["prompt"]);
  EXPECT_EQ(json::parse(input_tokens_json(wire::tokenize_reply{"h9", {1, 2, 3}, 4096})),
            json::parse(R"({"object":"response.input_tokens","input_tokens":3})"));
}

TEST(responses, a_failure_after_the_stream_began_is_an_error_event) {
  const auto r = taken(R"({"model":"base","input":"q","stream":true})", builtin("chatml"));
  response_answer a("resp_h7", 1, r); // (the error before any event: numbered from 0)
  api_error e;
  e.status = 503;
  e.code = "overloaded";
  e.message = "gone";
  const auto ev = read_events(a.stream_error(e));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["type"], "error");
  EXPECT_EQ(ev[0]["code"], "overloaded");
  EXPECT_EQ(ev[0]["message"], "gone");
  // Then the response, failed: the terminal event a client waits for.
  EXPECT_EQ(ev[1]["type"], "response.failed");
  EXPECT_EQ(ev[1]["response"]["status"], "failed");
  EXPECT_EQ(ev[1]["response"]["error"], json({{"code", "overloaded"}, {"message", "gone"}}));
}

TEST(responses, the_thinkings_tokens_are_the_usages_reasoning_tokens) {
  auto thinking = builtin("chatml");
  thinking.reasoning = reasoning_parser("qwen3");
  const auto r = taken(R"({"model":"base","input":"2+2?"})", thinking);
  auto d = done_with("<think>Four.</think>4");
  d.reasoning_tokens = 5;
  d.completion_tokens = 7;
  const auto j = json::parse(response_answer("resp_r", 1, r).body({d}));
  EXPECT_EQ(j["usage"]["output_tokens"], 7);
  EXPECT_EQ(j["usage"]["output_tokens_details"]["reasoning_tokens"], 5);
  // A model that does not think: 0.
  const auto plain = taken(R"({"model":"base","input":"2+2?"})", builtin("chatml"));
  EXPECT_EQ(json::parse(response_answer("resp_p", 1, plain).body({d}))["usage"]["output_tokens_details"]["reasoning_tokens"],
            0);
}

TEST(responses, a_background_response_is_kept_and_read_by_its_status) {
  const auto chatml = builtin("chatml");
  response_store st(1 << 20);
  const auto none = [](const std::string&) -> std::variant<conversation, api_error> { return conversation{}; };
  auto parse = [&](const std::string& body) {
    return parse_response_request(body, "base", "h7", chatml, {}, {}, none, "resp_b");
  };
  const auto r = std::get<response_request>(parse(R"({"model":"base","input":"Hi","background":true})"));
  EXPECT_TRUE(r.background);
  EXPECT_TRUE(r.store);
  EXPECT_EQ(json::parse(r.echo)["background"], true);
  // The same chat as the whole answer's: only when it is answered differs.
  EXPECT_EQ(r.chat.frames, std::get<response_request>(parse(R"({"model":"base","input":"Hi"})")).chat.frames);
  EXPECT_FALSE(std::get<response_request>(parse(R"({"model":"base","input":"Hi","background":false})")).background);
  // It is read back by GET: it needs the store. Streamed, it asks for the
  // token replies a foreground stream asks for.
  const auto streamed = std::get<response_request>(parse(R"({"model":"base","input":"Hi","background":true,"stream":true})"));
  EXPECT_TRUE(streamed.background);
  EXPECT_TRUE(streamed.chat.stream);
  EXPECT_EQ(streamed.chat.frames, std::get<response_request>(parse(R"({"model":"base","input":"Hi","stream":true})")).chat.frames);
  for (const auto& [fields, says] : std::vector<std::pair<std::string, std::string>>{
         {R"("store":false)", "needs \"store\": true"},
         {R"("background":1)", "true or false"},
       }) {
    auto e = parse(R"({"model":"base","input":"Hi","background":true,)" + fields + "}");
    ASSERT_TRUE(std::holds_alternative<api_error>(e)) << fields;
    EXPECT_EQ(std::get<api_error>(e).param, "background") << fields;
    EXPECT_NE(std::get<api_error>(e).message.find(says), std::string::npos) << std::get<api_error>(e).message;
  }

  // Its states: queued, in progress, cancelled or failed with no output;
  // then the whole response, as a foreground one's.
  const response_answer a("resp_b", 5, r);
  for (const char* status : {"queued", "in_progress", "cancelled"}) {
    const auto snap = json::parse(a.snapshot(status));
    EXPECT_EQ(snap["id"], "resp_b");
    EXPECT_EQ(snap["status"], status);
    EXPECT_EQ(snap["output"], json::array());
    EXPECT_EQ(snap["background"], true);
    EXPECT_EQ(snap["error"], nullptr);
    const auto state = response_state_of(a.snapshot(status));
    EXPECT_EQ(state.status, status);
    EXPECT_TRUE(state.background);
    EXPECT_EQ(state.running(), std::string(status) != "cancelled") << status;
    EXPECT_FALSE(state.answered()) << status;
  }
  api_error e;
  e.code = "overloaded";
  e.message = "full";
  const auto failed = json::parse(a.snapshot("failed", &e));
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_EQ(failed["error"], json({{"code", "overloaded"}, {"message", "full"}}));
  const auto whole = a.body({done_with("Hello.")});
  EXPECT_EQ(response_state_of(whole).status, "completed");
  EXPECT_TRUE(response_state_of(whole).background);
  EXPECT_FALSE(response_state_of(whole).running());
  EXPECT_TRUE(response_state_of(whole).answered());
  EXPECT_EQ(response_state_of(whole).conversation, "");
  EXPECT_EQ(response_state_of(R"({"status": "incomplete", "conversation": {"id": "conv_1"}})").conversation, "conv_1");
  EXPECT_TRUE(response_state_of(R"({"status": "incomplete"})").answered());
  EXPECT_EQ(json::parse(whole)["output"][0]["content"][0]["text"], "Hello.");
  // A foreground response is not a background one; a body that is not a
  // response has no status.
  const auto fg = std::get<response_request>(parse(R"({"model":"base","input":"Hi"})"));
  EXPECT_FALSE(response_state_of(response_answer("resp_f", 5, fg).body({done_with("x")})).background);
  EXPECT_EQ(response_state_of("not json").status, "");
  EXPECT_EQ(response_state_of("[1]").status, "");
}


TEST(responses, a_streamed_background_response_keeps_its_events_by_sequence_number) {
  const auto chatml = builtin("chatml");
  // (A foreground stream's events are a background one's: the same answer.)
  const auto r = taken(R"({"model":"base","input":"Hi","stream":true})", chatml);
  response_answer a("resp_s", 3, r);
  event_log log;
  log.add(a.stream_start()); // created, in_progress
  ASSERT_EQ(log.size(), 2u);
  wire::token_reply t;
  t.text = "Hel";
  log.add(a.chunk(0, t));
  t.index = 1;
  t.text = "lo";
  log.add(a.chunk(0, t));
  wire::done_reply d;
  d.finish_reason = "stop";
  d.prompt_tokens = 4;
  d.completion_tokens = 2;
  log.add(a.choice_end(0, d)); // (then the end, which counts the usage it gave)
  log.add(a.stream_end());
  // Each event is whole, under its own sequence number, in the order sent.
  std::vector<json> events;
  for (std::size_t k = 0; k < log.size(); ++k) {
    const auto rest = log.from(k);
    const auto one = rest.substr(0, rest.find("\n\n") + 2);
    ASSERT_TRUE(one.starts_with("event: ")) << one;
    const auto j = json::parse(one.substr(one.find("data: ") + 6));
    EXPECT_EQ(j["sequence_number"], k);
    events.push_back(j);
  }
  EXPECT_EQ(events.front()["type"], "response.created");
  EXPECT_EQ(events.back()["type"], "response.completed");
  EXPECT_EQ(events.back()["response"]["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(events.back()["response"]["usage"]["input_tokens"], 4);
  EXPECT_EQ(events.back()["response"]["usage"]["output_tokens"], 2);
  EXPECT_EQ(log.from(log.size()), "");
  EXPECT_EQ(log.from(log.size() + 5), "");
  EXPECT_EQ(log.from(0), log.text());
  // Kept as its text and read back, the same events.
  const event_log again(log.text());
  EXPECT_EQ(again.size(), log.size());
  for (std::size_t k = 0; k <= log.size(); ++k)
    EXPECT_EQ(again.from(k), log.from(k));
  // A cancelled one ends with an error event, numbered on.
  api_error e;
  e.code = "response_cancelled";
  e.message = "cancelled";
  log.add(a.error_event(e));
  const auto last = json::parse(log.from(log.size() - 1).substr(log.from(log.size() - 1).find("data: ") + 6));
  EXPECT_EQ(last["type"], "error");
  EXPECT_EQ(last["code"], "response_cancelled");
  EXPECT_EQ(last["sequence_number"], log.size() - 1);
}

TEST(responses, a_retrieve_query_asks_for_the_events_after_a_sequence_number) {
  auto q = [](std::string_view s) { return parse_retrieve_query(s); };
  const auto plain = std::get<retrieve_query>(q(""));
  EXPECT_FALSE(plain.stream);
  EXPECT_EQ(plain.first(), 0u);
  const auto all = std::get<retrieve_query>(q("stream=true"));
  EXPECT_TRUE(all.stream);
  EXPECT_EQ(all.first(), 0u);
  const auto after = std::get<retrieve_query>(q("stream=true&starting_after=7&include%5B%5D=x&include_obfuscation=false"));
  EXPECT_TRUE(after.stream);
  EXPECT_EQ(after.first(), 8u);
  EXPECT_EQ(std::get<retrieve_query>(q("starting_after=0&stream=true")).first(), 1u);
  EXPECT_FALSE(std::get<retrieve_query>(q("stream=false")).stream);
  for (const auto& [query, param, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
         {"stream=yes", "stream", "true or false"},
         {"stream=true&starting_after=-1", "starting_after", "sequence number"},
         {"stream=true&starting_after=", "starting_after", "sequence number"},
         {"stream=true&starting_after=1234567890123456789", "starting_after", "sequence number"},
         {"starting_after=3", "starting_after", "needs stream=true"},
         {"stream=false&starting_after=3", "starting_after", "needs stream=true"},
         {"limit=3", "limit", "not served"},
       }) {
    auto r = q(query);
    ASSERT_TRUE(std::holds_alternative<api_error>(r)) << query;
    const auto& e = std::get<api_error>(r);
    EXPECT_EQ(e.status, 400) << query;
    EXPECT_EQ(e.param, param) << query;
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  }
}

TEST(responses, input_items_are_listed_as_openai_lists_them_a_page_at_a_time) {
  const std::string kept =
    R"([{"role":"user","content":"Weather?"},)"
    R"({"type":"message","role":"assistant","content":"Let me look."},)"
    R"({"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"},)"
    R"({"type":"function_call_output","call_id":"c1","output":"sunny"},)"
    R"({"id":"msg_own","role":"user","content":[{"type":"input_text","text":"And tomorrow?"}]}])";
  auto page = [&](std::string_view query) { return json::parse(std::get<std::string>(input_items_page("resp_ab12", kept, query))); };
  const auto all = page("order=asc");
  EXPECT_EQ(all["object"], "list");
  ASSERT_EQ(all["data"].size(), 5u);
  EXPECT_EQ(all["has_more"], false);
  const auto& d = all["data"];
  EXPECT_EQ(d[0], json::parse(R"({"role":"user","content":[{"type":"input_text","text":"Weather?"}],"type":"message","id":"msg_ab12_in0"})"));
  EXPECT_EQ(d[1]["content"], json::parse(R"([{"type":"output_text","text":"Let me look."}])"));
  EXPECT_EQ(d[2]["id"], "fc_ab12_in2");
  EXPECT_EQ(d[2]["call_id"], "c1");
  EXPECT_EQ(d[3]["id"], "fco_ab12_in3");
  EXPECT_EQ(d[4]["id"], "msg_own"); // its own
  EXPECT_EQ(all["first_id"], "msg_ab12_in0");
  EXPECT_EQ(all["last_id"], "msg_own");
  // The default order is the last first; pages follow `after`.
  const auto first = page("limit=2");
  ASSERT_EQ(first["data"].size(), 2u);
  EXPECT_EQ(first["data"][0]["id"], "msg_own");
  EXPECT_EQ(first["data"][1]["id"], "fco_ab12_in3");
  EXPECT_EQ(first["has_more"], true);
  const auto second = page("limit=2&after=fco_ab12_in3&include%5B%5D=message.input_image.image_url");
  ASSERT_EQ(second["data"].size(), 2u);
  EXPECT_EQ(second["data"][0]["id"], "fc_ab12_in2");
  EXPECT_EQ(second["has_more"], true);
  const auto last = page("limit=2&after=msg_ab12_in1");
  ASSERT_EQ(last["data"].size(), 1u);
  EXPECT_EQ(last["data"][0]["id"], "msg_ab12_in0");
  EXPECT_EQ(last["has_more"], false);
  const auto none = page("after=msg_ab12_in0");
  EXPECT_TRUE(none["data"].empty());
  EXPECT_EQ(none["first_id"], nullptr);
  for (const auto& [query, param] : std::vector<std::pair<std::string, std::string>>{
         {"limit=0", "limit"}, {"limit=101", "limit"}, {"limit=x", "limit"}, {"order=up", "order"},
         {"after=msg_nope", "after"}, {"before=msg_own", "before"}}) {
    auto r = input_items_page("resp_ab12", kept, query);
    ASSERT_TRUE(std::holds_alternative<api_error>(r)) << query;
    EXPECT_EQ(std::get<api_error>(r).param, param) << query;
    EXPECT_EQ(std::get<api_error>(r).status, 400) << query;
  }
}

} // namespace
} // namespace troupe::openai
