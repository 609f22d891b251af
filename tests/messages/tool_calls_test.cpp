// Tests for messages/tool_calls: which calls a chat's output holds, read in
// pieces of any size, and that what is read so far only ever grows.
#include "messages/tool_calls.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace troupe::openai {

void PrintTo(const read_call& c, std::ostream* os) {
  *os << c.name << " " << c.arguments << (c.whole ? " (whole)" : " (so far)");
}

namespace {

tool_format hermes() {
  tool_format f;
  f.names = {"get_weather", "get_time"};
  f.open = "<tool_call>";
  f.close = "</tool_call>";
  return f;
}

tool_format llama31() {
  tool_format f;
  f.names = {"get_weather", "get_time"};
  f.arguments_key = "parameters";
  return f;
}

tool_format mistral() {
  tool_format f;
  f.names = {"get_weather", "get_time"};
  f.open = "[TOOL_CALLS]";
  f.array = true;
  return f;
}

tool_format mistral_named() {
  tool_format f;
  f.names = {"get_weather", "get_time", "get"};
  f.open = "[TOOL_CALLS]";
  f.head = "[ARGS]";
  return f;
}

tool_format llama_function() {
  tool_format f;
  f.names = {"get_weather", "get_time"};
  f.open = "<function=";
  f.head = ">";
  f.close = "</function>";
  return f;
}

std::vector<read_call> read_whole(const tool_format& f, const std::string& text) {
  call_reader r(f);
  r.feed(text);
  return r.calls();
}

TEST(call_reader, reads_calls_in_the_templates_format_with_their_arguments_less_blanks) {
  const auto f = hermes();
  EXPECT_EQ(read_whole(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"New York\", "
                          "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\": "
                          "\\\"UTC\\\"}\"}"),
            (std::vector<read_call>{{"get_weather", R"({"city":"New York","days":[1,2]})", true},
                                    {"get_time", R"({"tz":"UTC"})", true}}));
  // The closing marker may be left out before the next call.
  EXPECT_EQ(read_whole(f, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}} <tool_call>{\"name\":\"get_time\","
                          "\"arguments\":{}}")
              .size(),
            2u);
  // Escapes stay as written; a name may be escaped.
  EXPECT_EQ(read_whole(f, "<tool_call>{\"name\":\"get\\u005ftime\",\"arguments\":{\"q\":\"a \\\"b\\\"\\n\"}}"),
            (std::vector<read_call>{{"get_time", R"({"q":"a \"b\"\n"})", true}}));
  // Llama 3.1's: no marker, "parameters", ";" between calls.
  EXPECT_EQ(read_whole(llama31(), "  {\"name\": \"get_time\", \"parameters\": {}} ; {\"name\": \"get_weather\", "
                                  "\"parameters\": {\"city\": \"Oslo\"}}"),
            (std::vector<read_call>{{"get_time", "{}", true}, {"get_weather", R"({"city":"Oslo"})", true}}));
}

TEST(call_reader, a_call_counts_from_its_name_and_its_arguments_start_and_keeps_them_when_cut_or_broken) {
  const auto f = hermes();
  struct row {
    std::string text;
    std::vector<read_call> calls;
  };
  const std::vector<row> rows{
    {"<tool_call>{\"name\":\"get_time\"", {}},                // the name's member has not ended
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":", {}}, // nor have the arguments begun
    {"<tool_call>{\"name\":\"get_time\",\"arguments\": {", {{"get_time", "{", false}}},
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":\"{}", {}}, // a string counts once it closes
    {"<tool_call>{\"arguments\":{\"a\":1}", {}},                  // no name yet
    {"<tool_call>{\"arguments\":{\"a\":1},\"name\":\"get_time\"", {}},
    {"<tool_call>{\"arguments\":{\"a\":1},\"name\":\"get_time\"}", {{"get_time", R"({"a":1})", true}}},
    // Broken: the arguments read before the break.
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":{\"a\":tru }}", {{"get_time", R"({"a":tru)", false}}},
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":{},\"name\":\"get_time\"}", {{"get_time", "{}", false}}},
    // Not calls.
    {"<tool_call>{\"name\":\"set_time\",\"arguments\":{}}", {}},
    {"<tool_call>{\"name\":7,\"arguments\":{}}", {}},
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":\"[1]\"}", {}},
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":null}", {}},
    {"<tool_call>{}", {}},
    {"<tool_call>[{\"name\":\"get_time\",\"arguments\":{}}]", {}},
    {"<tool_cal {\"name\":\"get_time\",\"arguments\":{}}", {}},
    {"text <tool_call>{\"name\":\"get_time\",\"arguments\":{}}", {}}, // fed from where the marker is
    // Text after a call is passed over: a marked call after it is read.
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call> and <tool_call>{\"name\":\"get_time\","
     "\"arguments\":{\"a\":1}}",
     {{"get_time", "{}", true}, {"get_time", R"({"a":1})", true}}},
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\nThen <tool_ <tool_call> x <tool_call>{"
     "\"name\":\"get_weather\",\"arguments\":{}} done.",
     {{"get_time", "{}", true}, {"get_weather", "{}", true}}},
    // But not past a broken call.
    {"<tool_call>{\"name\":\"get_time\",\"arguments\":{]}}</tool_call> <tool_call>{\"name\":\"get_time\","
     "\"arguments\":{}}",
     {{"get_time", "{", false}}},
  };
  for (const auto& r : rows)
    EXPECT_EQ(read_whole(f, r.text), r.calls) << r.text;
  // One call: bare (the marker in the prompt), or no parallel calls.
  auto bare = hermes();
  bare.bare = true;
  EXPECT_EQ(read_whole(bare, " {\"name\":\"get_time\",\"arguments\":{}} {\"name\":\"get_time\",\"arguments\":{}}"),
            (std::vector<read_call>{{"get_time", "{}", true}}));
  auto single = hermes();
  single.parallel = false;
  EXPECT_EQ(read_whole(single, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}<tool_call>{\"name\":\"get_time\","
                               "\"arguments\":{}}")
              .size(),
            1u);
  EXPECT_FALSE(call_reader(f).all_whole()) << "no call";
}

TEST(call_reader, mistrals_calls_are_one_array_after_the_marker) {
  const auto f = mistral();
  struct row {
    std::string text;
    std::vector<read_call> calls;
  };
  const std::vector<row> rows{
    {"[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
     "\"arguments\": {}}]",
     {{"get_weather", R"({"city":"Paris"})", true}, {"get_time", "{}", true}}},
    {"[TOOL_CALLS][ \n{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\"}} ,\n{\"name\":\"get_time\",\"arguments\":{",
     {{"get_time", R"({"tz":"UTC"})", true}, {"get_time", "{", false}}},
    // The array is needed; a call in it counts as any does.
    {"[TOOL_CALLS] {\"name\":\"get_time\",\"arguments\":{}}", {}},
    {"[TOOL_CALLS] [{\"name\":\"get_time\"", {}},
    {"[TOOL_CALLS] [{\"name\":\"set_time\",\"arguments\":{}}]", {}},
    // After the array: text passed over up to a marked array.
    {"[TOOL_CALLS] [{\"name\":\"get_time\",\"arguments\":{}}] and [TOOL_CALLS] [{\"name\":\"get_weather\","
     "\"arguments\":{}}]",
     {{"get_time", "{}", true}, {"get_weather", "{}", true}}},
    // But within it, only "," and the next call.
    {"[TOOL_CALLS] [{\"name\":\"get_time\",\"arguments\":{}}; {\"name\":\"get_time\",\"arguments\":{}}]",
     {{"get_time", "{}", true}}},
  };
  for (const auto& r : rows)
    EXPECT_EQ(read_whole(f, r.text), r.calls) << r.text;
  // One call: the marker in the prompt (bare), or no parallel calls.
  auto bare = f;
  bare.bare = true;
  EXPECT_EQ(read_whole(bare, " [{\"name\":\"get_time\",\"arguments\":{}}, {\"name\":\"get_time\",\"arguments\":{}}]"),
            (std::vector<read_call>{{"get_time", "{}", true}}));
  auto single = f;
  single.parallel = false;
  EXPECT_EQ(read_whole(single, "[TOOL_CALLS][{\"name\":\"get_time\",\"arguments\":{}},{\"name\":\"get_time\","
                               "\"arguments\":{}}]")
              .size(),
            1u);
  // With no marker, an array at the output's start.
  auto markerless = f;
  markerless.open.clear();
  EXPECT_EQ(read_whole(markerless, "  [{\"name\":\"get_time\",\"arguments\":{}}]").size(), 1u);
  EXPECT_TRUE(read_whole(markerless, "Sure: [{\"name\":\"get_time\",\"arguments\":{}}]").empty());
}

TEST(call_reader, named_calls_are_the_marker_a_name_the_head_and_the_arguments_object) {
  const auto f = mistral_named();
  struct row {
    std::string text;
    std::vector<read_call> calls;
  };
  const std::vector<row> rows{
    {R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{})",
     {{"get_weather", R"({"city":"Paris"})", true}, {"get_time", "{}", true}}},
    // Fed from where the first call may open: text before it is none.
    {R"(Sure. [TOOL_CALLS]get[ARGS] {"a": [1, "x y"]})", {}},
    // A name that begins another's; blanks after the head.
    {R"([TOOL_CALLS]get[ARGS] {"a": [1, "x y"]})", {{"get", R"({"a":[1,"x y"]})", true}}},
    // Cut: counted from the brace; a name alone is no call.
    {R"([TOOL_CALLS]get_time[ARGS]{"tz": "U)", {{"get_time", R"({"tz":"U)", false}}},
    {R"([TOOL_CALLS]get_time[AR)", {}},
    {R"([TOOL_CALLS]get_time)", {}},
    // Unknown names, a missing head, arguments that are no object.
    {R"([TOOL_CALLS]set_time[ARGS]{})", {}},
    {R"([TOOL_CALLS]get_time{})", {}},
    {R"([TOOL_CALLS]get_time[ARGS]"{}")", {}},
    // After a call, text is passed over up to the next marked call.
    {R"([TOOL_CALLS]get[ARGS]{} then [TOOL [TOOL_CALLS]get_time[ARGS]{"x":1})",
     {{"get", "{}", true}, {"get_time", R"({"x":1})", true}}},
    // A broken object keeps what was read.
    {R"([TOOL_CALLS]get[ARGS]{"a":1,})", {{"get", R"({"a":1,)", false}}},
  };
  for (const auto& r : rows)
    EXPECT_EQ(read_whole(f, r.text), r.calls) << r.text;
  // The first call only without parallel calls.
  auto single = f;
  single.parallel = false;
  EXPECT_EQ(read_whole(single, "[TOOL_CALLS]get[ARGS]{}[TOOL_CALLS]get[ARGS]{}").size(), 1u);
  // Bare: one function named, its marker, name and head in the prompt; the
  // output is the arguments.
  auto bare = f;
  bare.bare = true;
  bare.names = {"get_time"};
  EXPECT_EQ(read_whole(bare, R"( {"tz": "UTC"} and more)"),
            (std::vector<read_call>{{"get_time", R"({"tz":"UTC"})", true}}));
  EXPECT_TRUE(read_whole(bare, R"(get_time[ARGS]{})").empty());
  // A closing marker, which may be left out.
  const auto g = llama_function();
  EXPECT_EQ(read_whole(g, R"(<function=get_time>{"a":1}</function><function=get_weather>{}</function>)"),
            (std::vector<read_call>{{"get_time", R"({"a":1})", true}, {"get_weather", "{}", true}}));
  EXPECT_EQ(read_whole(g, R"(<function=get_time>{}<function=get_weather>{})").size(), 2u);
}

TEST(call_reader, pieces_of_any_size_read_what_the_whole_reads_and_what_is_read_only_grows) {
  const std::vector<std::pair<tool_format, std::string>> cases{
    {hermes(), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"S\\u00e3o Paulo\", \"n\": [1, "
               "{\"x\": null}], \"ok\": true}}\n</tool_call>\n<tool_call>{\"arguments\": \"{\\\"tz\\\": 1}\", "
               "\"name\": \"get_time\"}</tool_call><tool_call>{\"name\":\"get_time\",\"arguments\":{\"a\": \"é 中\""},
    {hermes(), "  <tool_call> {\"name\":\"get_time\",\"arguments\":{\"a\":1,}}"},
    {hermes(), "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\nNow <tool <<tool_call>  x "
               "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}</tool_call> bye"},
    {llama31(), "{\"name\": \"get_time\", \"parameters\": {\"a\": -1.5e3}};{\"name\": \"get_weather\", "
                "\"parameters\": {}} trailing"},
    {mistral(), "[TOOL_CALLS] [ {\"name\": \"get_time\", \"arguments\": {\"a\": [1, {}]}} , {\"arguments\": "
                "\"{\\\"b\\\": 2}\", \"name\": \"get_weather\"}] then [TO [TOOL_CALLS][{\"name\":\"get_time\","
                "\"arguments\":{\"c\":\"]\"}}]"},
    {mistral_named(), R"([TOOL_CALLS]get_weather[ARGS]{"city": "S\u00e3o", "n": [1, {"x": "}"}]}[TOOL_CALLS]get)"
                      R"([ARGS] {} x [TOOL_CALLS]get_time[ARGS]{"a")"},
    {llama_function(), R"(<function=get_time>{"a": 1}</function> <function=get_weather>{"b": "</function>"})"},
  };
  std::uint64_t seed = 5;
  auto next = [&] { return (seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  for (const auto& [format, text] : cases) {
    const auto whole = read_whole(format, text);
    ASSERT_FALSE(whole.empty()) << text;
    for (int trial = 0; trial < 30; ++trial) {
      call_reader r(format);
      for (std::size_t at = 0; at < text.size();) {
        const auto len = trial == 0 ? 1 : std::min<std::size_t>(text.size() - at, 1 + next() % 7);
        r.feed(std::string_view(text).substr(at, len));
        at += len;
        // Every call read so far is the start of the same call read whole.
        ASSERT_LE(r.calls().size(), whole.size()) << text;
        for (std::size_t j = 0; j < r.calls().size(); ++j) {
          const auto& c = r.calls()[j];
          EXPECT_EQ(c.name, whole[j].name) << text;
          EXPECT_TRUE(whole[j].arguments.starts_with(c.arguments)) << c.arguments << " of " << whole[j].arguments;
          EXPECT_TRUE(!c.whole || whole[j].whole) << text;
        }
      }
      EXPECT_EQ(r.calls(), whole) << text << " trial " << trial;
    }
  }
}

} // namespace
} // namespace troupe::openai
