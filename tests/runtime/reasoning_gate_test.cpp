// A reasoning model's output held to a constraint after its thinking
// (runtime/reasoning_gate.hpp): walked by hand through each phase, and by
// random walks whose every split is checked against an oracle written
// here: the chat answer's own reading of reasoning and content (vLLM's
// parsers, as split_reasoning does), then the content read afresh by a
// machine of the schema or a trigger.
#include "runtime/reasoning_gate.hpp"

#include "tests/support/list_tokenizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <stdexcept>

namespace troupe {
namespace {

const std::string counted =
  R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false})";

std::shared_ptr<const json_schema> schema() {
  return json_schema::compile(counted);
}

TEST(reasoning_gate, an_output_that_opens_its_thinking_is_held_only_after_the_closing_mark) {
  testing::list_tokenizer vocab({"", "x"});
  json_vocab v(vocab);
  const reasoning_gate g(v, "<think>", "</think>", schema());
  auto s = g.begin();
  EXPECT_EQ(s.at, reasoning_gate::phase::start);
  ASSERT_TRUE(g.advance(s, "\n <thi"));
  EXPECT_EQ(s.at, reasoning_gate::phase::start) << "may still open";
  ASSERT_TRUE(g.advance(s, "nk>Hmm, {not JSON} </thi"));
  EXPECT_EQ(s.at, reasoning_gate::phase::thinking);
  EXPECT_EQ(s.matched, 5u);
  ASSERT_TRUE(g.advance(s, "x </think"));
  EXPECT_EQ(s.at, reasoning_gate::phase::thinking) << "the mark broken and begun again";
  EXPECT_FALSE(g.advance(s, ">\n\nSure: {")) << "the content must be the value";
  EXPECT_EQ(s.at, reasoning_gate::phase::thinking) << "as it was";
  ASSERT_TRUE(g.advance(s, ">\n\n{\"n\":"));
  EXPECT_EQ(s.at, reasoning_gate::phase::content);
  EXPECT_FALSE(s.complete);
  EXPECT_FALSE(g.advance(s, "\"x\"")) << "n is an integer";
  ASSERT_TRUE(g.advance(s, "12}"));
  EXPECT_TRUE(s.complete);
  EXPECT_FALSE(g.advance(s, "x")) << "nothing follows a whole value";
}

TEST(reasoning_gate, output_that_does_not_open_with_the_mark_is_all_content) {
  testing::list_tokenizer vocab({"", "x"});
  json_vocab v(vocab);
  const reasoning_gate g(v, "<think>", "</think>", schema());
  auto direct = g.begin();
  ASSERT_TRUE(g.advance(direct, " {\"n\":1}"));
  EXPECT_EQ(direct.at, reasoning_gate::phase::content);
  EXPECT_TRUE(direct.complete);
  auto broken = g.begin();
  ASSERT_TRUE(g.advance(broken, "<th"));
  EXPECT_FALSE(g.advance(broken, "x")) << "\"<thx\" is content, and no value";
  EXPECT_FALSE(g.advance(broken, "Sure"));
  // Past the limit, blanks are no longer the mark's: they are content's,
  // more than a value may begin with.
  auto blanks = g.begin();
  ASSERT_TRUE(g.advance(blanks, std::string(reasoning_gate::max_blank, ' ')));
  EXPECT_EQ(blanks.at, reasoning_gate::phase::start);
  EXPECT_FALSE(g.advance(blanks, " <think>"));
  // Free text after the thinking, its triggers held: "<think>" that does
  // not begin the output is content too.
  auto trig = std::make_shared<const json_trigger>(v, "<c>", schema());
  const reasoning_gate free(v, "<think>", "</think>", trig, false);
  auto f = free.begin();
  ASSERT_TRUE(free.advance(f, "So <think> is text; <c>"));
  EXPECT_EQ(f.at, reasoning_gate::phase::content);
  EXPECT_TRUE(f.trigger.value) << "a call opened in the content";
  EXPECT_FALSE(free.advance(f, "oops"));
}

TEST(reasoning_gate, without_an_opening_mark_the_output_begins_in_its_thinking) {
  testing::list_tokenizer vocab({"", "x"});
  json_vocab v(vocab);
  auto trig = std::make_shared<const json_trigger>(v, "<c>", schema());
  const reasoning_gate g(v, "", "</think>", trig, true);
  auto s = g.begin();
  EXPECT_EQ(s.at, reasoning_gate::phase::thinking);
  ASSERT_TRUE(g.advance(s, "I could call <c>{\"n\": \"x\"} here</think>"));
  EXPECT_EQ(s.at, reasoning_gate::phase::content) << "a trigger in the thinking opens nothing";
  ASSERT_TRUE(g.advance(s, "\n\n"));
  EXPECT_EQ(s.blanks, 2u);
  EXPECT_FALSE(g.advance(s, "Sure")) << "the content begins with the call";
  ASSERT_TRUE(g.advance(s, "<c>{\"n\":"));
  EXPECT_TRUE(s.trigger.value);
  EXPECT_FALSE(s.trigger.leading);
  auto many = g.begin();
  ASSERT_TRUE(g.advance(many, "</think>" + std::string(reasoning_gate::max_blank, '\n')));
  EXPECT_FALSE(g.advance(many, "\n")) << "no more blanks than a value may have";
  EXPECT_THROW(reasoning_gate(v, "<think>", "", schema()), std::invalid_argument);
  EXPECT_THROW(reasoning_gate(v, std::string(65, '<'), "</think>", schema()), std::invalid_argument);
}

TEST(reasoning_gate, a_special_token_that_is_the_contents_trigger_opens_a_value_only_in_the_content) {
  //                              0   1   2          3           4    5     6    7    8
  testing::list_tokenizer vocab({"", "", "<think>", "</think>", "[", "{}", "]", " ", "hi"}, {{1, "[TOOL_CALLS]"}});
  json_vocab v(vocab);
  const auto trigger = std::make_shared<const json_trigger>(
    v, "[TOOL_CALLS]", json_schema::compile(R"({"type":"array","items":{"type":"object"},"minItems":1})"));
  const auto allows = [](const reasoning_gate& g, const reasoning_gate::state& s, std::int32_t k) {
    const auto split = g.split(s);
    return std::binary_search(split->allowed.begin(), split->allowed.end(), k);
  };
  // Calls offered ("auto"): the token in the thinking opens nothing.
  const reasoning_gate free(v, "<think>", "</think>", trigger, false);
  auto s = free.begin();
  ASSERT_TRUE(free.advance(s, 2));
  ASSERT_TRUE(free.advance(s, 1));
  EXPECT_EQ(s.at, reasoning_gate::phase::thinking);
  ASSERT_TRUE(free.advance(s, 3));
  ASSERT_TRUE(free.advance(s, 8));
  EXPECT_TRUE(allows(free, s, 1));
  ASSERT_TRUE(free.advance(s, 1));
  ASSERT_TRUE(s.trigger.value) << "in the content it opens the calls";
  EXPECT_FALSE(allows(free, s, 1));
  ASSERT_TRUE(free.advance(s, 4));
  // Forced: the content begins with the trigger, which the token writes,
  // after the thinking or at the output's start.
  const reasoning_gate forced(v, "<think>", "</think>", trigger, true);
  auto direct = forced.begin();
  EXPECT_TRUE(allows(forced, direct, 1));
  EXPECT_FALSE(allows(forced, direct, 8));
  ASSERT_TRUE(forced.advance(direct, 1));
  EXPECT_EQ(direct.at, reasoning_gate::phase::content);
  EXPECT_TRUE(direct.trigger.value);
  auto thought = forced.begin();
  ASSERT_TRUE(forced.advance(thought, 2));
  EXPECT_FALSE(allows(forced, thought, 1)) << "the thinking must end first";
  ASSERT_TRUE(forced.advance(thought, 3));
  ASSERT_TRUE(forced.advance(thought, 7));
  EXPECT_TRUE(allows(forced, thought, 1));
  EXPECT_FALSE(allows(forced, thought, 8));
  ASSERT_TRUE(forced.advance(thought, 1));
  EXPECT_TRUE(thought.trigger.value);
  // Held bytes of a broken opening mark are content, which must be the
  // trigger.
  auto broken = forced.begin();
  ASSERT_TRUE(forced.advance(broken, std::string_view("<th")));
  EXPECT_FALSE(allows(forced, broken, 1));
  EXPECT_FALSE(forced.advance(broken, 1));
}

TEST(reasoning_gate, a_guided_choice_or_regex_is_the_content_after_the_thinking) {
  testing::list_tokenizer vocab({"", "x"});
  json_vocab v(vocab);
  auto choices = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"no", "not sure", "yes"});
  const reasoning_gate g(v, "<think>", "</think>", held_machine{choice_machine(choices)});
  auto s = g.begin();
  ASSERT_TRUE(g.advance(s, " <think>yes, or no?</think>"));
  EXPECT_EQ(s.at, reasoning_gate::phase::content);
  EXPECT_FALSE(g.ends_here(s));
  EXPECT_FALSE(g.advance(s, " no")) << "nothing before the choice";
  ASSERT_TRUE(g.advance(s, "no"));
  EXPECT_FALSE(s.complete);
  EXPECT_TRUE(g.ends_here(s)) << "a whole choice, but \"not sure\" goes on from it";
  ASSERT_TRUE(g.advance(s, "t sure"));
  EXPECT_TRUE(s.complete);
  EXPECT_FALSE(g.advance(s, "!"));
  auto direct = g.begin();
  ASSERT_TRUE(g.advance(direct, "yes"));
  EXPECT_EQ(direct.at, reasoning_gate::phase::content) << "no opening mark: all content";
  EXPECT_TRUE(direct.complete);
  auto off = g.begin();
  EXPECT_FALSE(g.advance(off, "Sure")) << "neither the mark nor a choice";
  // The prompt opened the thinking; the content matches the expression.
  const reasoning_gate r(v, "", "</think>", held_machine{regex_machine(std::make_shared<const held_regex>("[0-9]+"))});
  auto t = r.begin();
  EXPECT_EQ(t.at, reasoning_gate::phase::thinking);
  ASSERT_TRUE(r.advance(t, "12 or 13?</think>1"));
  EXPECT_TRUE(r.ends_here(t)) << "a match a digit may extend";
  EXPECT_FALSE(t.complete);
  EXPECT_FALSE(r.advance(t, "3x"));
  ASSERT_TRUE(r.advance(t, "3"));
  // A grammar likewise: the content is a sentence of it.
  const reasoning_gate gr(v, "<think>", "</think>",
                          held_machine{grammar_machine(std::make_shared<const held_grammar>(
                            R"G(root ::= "[" list? "]"  list ::= [0-9] ("," [0-9])*)G"))});
  auto u = gr.begin();
  ASSERT_TRUE(gr.advance(u, "<think>[1, 2]?</think>[1"));
  EXPECT_FALSE(gr.ends_here(u));
  EXPECT_FALSE(gr.advance(u, "]]"));
  ASSERT_TRUE(gr.advance(u, ",2]"));
  EXPECT_TRUE(u.complete) << "nothing may follow a whole list";
  const auto split = gr.split(gr.begin());
  EXPECT_FALSE(std::binary_search(split->allowed.begin(), split->allowed.end(), 1)) << "x begins neither";
}

// Random walks over a vocabulary, each token the gate allows checked against
// the reasoning parser's reading and the choices, each it bans too.
TEST(reasoning_gate, with_choices_every_token_it_allows_keeps_the_output_a_thought_then_a_choice) {
  const std::vector<std::string> tokens = {"",   "<think>", "<",   "think",   ">",  "</think>",   "</", "think>",
                                           "\n", " ",       "no",  "n",       "o",  "t sure",     "t",  " sure",
                                           "yes", "y", "es", "x", "k>", "</think>no", "no</think>", "sure"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab);
  const std::vector<std::string> texts = {"no", "not sure", "yes"};
  auto choices = std::make_shared<const std::vector<std::string>>(texts);
  // (whole: a choice; more: a longer one goes on from it)
  auto content_ok = [&](std::string_view c, bool& whole, bool& more) {
    whole = more = false;
    bool prefix = false;
    for (const auto& t : texts) {
      prefix = prefix || t.starts_with(c);
      whole = whole || t == c;
      more = more || (t.size() > c.size() && t.starts_with(c));
    }
    return prefix;
  };
  std::mt19937 rng(31);
  int thought = 0, direct = 0, wholes = 0;
  for (const std::string open : {"<think>", ""}) {
    const reasoning_gate g(v, open, "</think>", held_machine{choice_machine(choices)});
    // The oracle: the output as the chat answer reads it.
    auto output_ok = [&](const std::string& text, bool& whole, bool& more, bool& thinking) {
      std::string_view content = text;
      thinking = false;
      if (!open.empty()) {
        const auto lead = text.find_first_not_of(" \t\n\r");
        const auto blanks = lead == std::string::npos ? text.size() : lead;
        const std::string_view rest = std::string_view(text).substr(blanks);
        if (blanks <= reasoning_gate::max_blank && std::string_view(open).starts_with(rest)) {
          whole = more = false;
          return true; // may still open
        }
        thinking = blanks <= reasoning_gate::max_blank && rest.starts_with(open);
      } else {
        thinking = true;
      }
      if (thinking) {
        const auto close = text.find("</think>", open.empty() ? 0 : text.find(open) + open.size());
        if (close == std::string::npos) {
          whole = more = false;
          return true;
        }
        content = std::string_view(text).substr(close + 8);
      }
      return content_ok(content, whole, more);
    };
    for (int walk = 0; walk < 150; ++walk) {
      auto s = g.begin();
      std::string text;
      for (int step = 0; step < 12 && !s.complete; ++step) {
        const auto split = g.split(s);
        ASSERT_EQ(split->allowed.size() + split->banned.size(), tokens.size());
        EXPECT_FALSE(std::binary_search(split->allowed.begin(), split->allowed.end(), 0))
          << "the end token is the scheduler's to allow (ends_here)";
        for (std::int32_t k = 1; k < vocab.vocab_size(); ++k) {
          const auto& bytes = tokens[static_cast<std::size_t>(k)];
          bool whole = false, more = false, thinking = false;
          EXPECT_EQ(std::binary_search(split->allowed.begin(), split->allowed.end(), k),
                    output_ok(text + bytes, whole, more, thinking))
            << "open \"" << open << "\": \"" << text << "\" + \"" << bytes << "\"";
        }
        if (split->allowed.empty())
          break; // no token of this vocabulary goes on (the oracle agreed above)
        const auto k = split->allowed[rng() % split->allowed.size()];
        ASSERT_TRUE(g.advance(s, tokens[static_cast<std::size_t>(k)]));
        text += tokens[static_cast<std::size_t>(k)];
        bool whole = false, more = false, thinking = false;
        ASSERT_TRUE(output_ok(text, whole, more, thinking));
        const bool in_content = s.at == reasoning_gate::phase::content;
        EXPECT_EQ(s.complete, in_content && whole && !more) << text;
        EXPECT_EQ(g.ends_here(s), in_content && whole) << text;
        thought += s.at == reasoning_gate::phase::thinking;
        direct += in_content && text.find("</think>") == std::string::npos;
      }
      wholes += s.complete;
    }
  }
  EXPECT_GT(wholes, 30) << "walks reach whole choices";
  EXPECT_GT(thought, 100) << "walks think";
  EXPECT_GT(direct, 10) << "walks answer without thinking";
}

// -- the oracle ---------------------------------------------------------------------

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/// How the gate holds the content.
struct form {
  std::string open;
  const char* trigger = nullptr; ///< none: one value
  bool leading = false;
  /// With a trigger: the content is calls (it begins with the trigger) or
  /// one value of `counted`, the answer.
  bool answer = false;
};

/// `content` past its leading blanks, or nothing where there are more
/// than the gate takes.
std::optional<std::string_view> past_blanks(std::string_view content) {
  std::size_t b = 0;
  while (b < content.size() && blank(content[b]))
    ++b;
  if (b > reasoning_gate::max_blank)
    return std::nullopt;
  return content.substr(b);
}

/// Whether `content` may begin an output's content of form `f` (a value
/// of `counted`, whole or not; or free text whose triggers open values, or
/// which begins with one after at most max_blank blanks). `whole`: the
/// value closed.
bool content_ok(const form& f, std::string_view content, bool& whole) {
  whole = false;
  if (f.trigger == nullptr) {
    schema_machine m(schema());
    for (const char c : content)
      if (!m.feed(static_cast<unsigned char>(c))) // (blanks may follow the value)
        return false;
    whole = m.complete();
    return true;
  }
  const std::string trigger = f.trigger;
  if (f.answer) {
    const auto rest = past_blanks(content);
    if (!rest)
      return false;
    if (rest->size() < trigger.size() ? !trigger.starts_with(*rest) : !rest->starts_with(trigger)) {
      // Not the trigger: the answer, whole or begun, blanks after it.
      schema_machine m(schema());
      for (const char c : *rest)
        if (!m.feed(static_cast<unsigned char>(c)))
          return false;
      whole = m.complete();
      return true;
    }
  }
  if (f.leading) {
    const auto rest = past_blanks(content);
    if (!rest || (rest->size() < trigger.size() ? !trigger.starts_with(*rest) : !rest->starts_with(trigger)))
      return false;
  }
  // Each trigger opens a value read afresh up to its close.
  for (std::size_t from = 0;;) {
    const auto at = content.find(trigger, from);
    if (at == std::string_view::npos)
      return true;
    schema_machine m(schema());
    std::size_t i = at + trigger.size();
    while (i < content.size() && !m.complete())
      if (!m.feed(static_cast<unsigned char>(content[i++])))
        return false;
    if (!m.complete())
      return true;
    from = i;
  }
}

/// Whether `text` may begin an output: its reasoning read as the chat
/// answer reads it, its content as content_ok.
bool output_ok(const form& f, std::string_view text, bool& whole) {
  whole = false;
  std::size_t b = 0;
  while (b < text.size() && blank(text[b]))
    ++b;
  const auto lead = text.substr(b);
  std::string_view rest;
  if (f.open.empty()) {
    rest = lead.starts_with("<think>") ? lead.substr(7) : text; // (the mark is not)
  } else if (b <= reasoning_gate::max_blank && lead.starts_with(f.open)) {
    rest = lead.substr(f.open.size());
  } else if (b <= reasoning_gate::max_blank && std::string_view(f.open).starts_with(lead)) {
    return true; // may still open
  } else {
    return content_ok(f, text, whole);
  }
  const auto end = rest.find("</think>");
  if (end == std::string_view::npos)
    return true; // thinking
  return content_ok(f, rest.substr(end + 8), whole);
}

TEST(reasoning_gate, every_token_it_allows_keeps_the_output_readable_and_it_bans_every_other) {
  const std::vector<std::string> tokens = {
    "",   "<think>", "<", "think", ">",  "</think>", "</", "think>", "\n",  " ",   "{",     "}",       "\"n\":",
    "\"", "n",       ":", "1",     "-",  "hi",       "<c>", "<c",     "c>",  "}\n",  "\n\n{", "</think>{", "x",
    "}<c>", "</think>\n<c>{", ">{", "k>", "/",  "think></", "c>{\"n\":2}"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab);
  auto trig = std::make_shared<const json_trigger>(v, "<c>", schema());
  auto answered = std::make_shared<const json_trigger>(v, "<c>", schema(), schema());
  const std::vector<form> forms = {{"<think>", nullptr, false}, {"", nullptr, false},  {"<think>", "<c>", false},
                                   {"<think>", "<c>", true},    {"", "<c>", true},     {"<think>", "<c>", false, true},
                                   {"", "<c>", false, true}};
  std::mt19937 rng(27);
  int wholes = 0, thought = 0, direct = 0;
  for (const auto& f : forms) {
    const auto g = f.trigger == nullptr ? reasoning_gate(v, f.open, "</think>", schema())
                                        : reasoning_gate(v, f.open, "</think>", f.answer ? answered : trig, f.leading);
    const bool may_end = f.trigger != nullptr && !f.leading && !f.answer;
    for (int walk = 0; walk < 120; ++walk) {
      auto s = g.begin();
      std::string text;
      for (int step = 0; step < 24 && !s.complete; ++step) {
        const auto split = g.split(s);
        ASSERT_EQ(split->allowed.size() + split->banned.size(), tokens.size());
        for (std::int32_t k = 1; k < vocab.vocab_size(); ++k) {
          const auto& bytes = tokens[static_cast<std::size_t>(k)];
          const bool allowed = std::binary_search(split->allowed.begin(), split->allowed.end(), k);
          bool whole = false;
          const bool readable = output_ok(f, text + bytes, whole);
          // (In a triggered value the trigger's split bans a token that
          // closes it and goes on: json_trigger's own test.)
          if (allowed || !(s.at == reasoning_gate::phase::content && s.trigger.value)) {
            EXPECT_EQ(allowed, readable)
              << "form " << (&f - forms.data()) << ": \"" << text << "\" + \"" << bytes << "\"";
          }
        }
        const bool eos = std::binary_search(split->allowed.begin(), split->allowed.end(), 0);
        if (s.at != reasoning_gate::phase::content || !f.trigger) {
          EXPECT_EQ(eos, may_end && s.at != reasoning_gate::phase::content) << "form " << (&f - forms.data());
        }
        std::vector<std::int32_t> go;
        for (const auto k : split->allowed)
          if (k != 0)
            go.push_back(k);
        ASSERT_FALSE(go.empty()) << text;
        const auto k = go[rng() % go.size()];
        ASSERT_TRUE(g.advance(s, tokens[static_cast<std::size_t>(k)]));
        text += tokens[static_cast<std::size_t>(k)];
        bool whole = false;
        ASSERT_TRUE(output_ok(f, text, whole));
        EXPECT_EQ(s.complete, whole) << text;
        thought += s.at == reasoning_gate::phase::thinking;
        direct += s.at == reasoning_gate::phase::content && text.find("</think>") == std::string::npos;
      }
      wholes += s.complete;
    }
  }
  EXPECT_GT(wholes, 20) << "walks reach whole values";
  EXPECT_GT(thought, 100) << "walks think";
  EXPECT_GT(direct, 20) << "walks answer without thinking";
}

} // namespace
} // namespace troupe
