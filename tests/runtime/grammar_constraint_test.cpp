// The GBNF recognizer behind guided_grammar: grammars by hand, what the
// compiler refuses, the machine against oracles written here (std::regex
// for regular grammars, recursive descent for nested ones) over every short
// text of a small alphabet, and the tokens json_vocab allows by it.
#include "runtime/grammar_constraint.hpp"

#include "runtime/json_constraint.hpp"

#include "tests/support/allowed_oracle.hpp"
#include "tests/support/list_tokenizer.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>
#include <type_traits>

namespace troupe {
namespace {

using testing::expect_allowed_as_fed;

static_assert(std::is_nothrow_move_constructible_v<grammar_machine>);
static_assert(std::is_copy_constructible_v<grammar_machine>); // json_vocab walks copies

grammar_machine grammar(const std::string& text) {
  return grammar_machine(std::make_shared<const held_grammar>(text));
}

/// `text` fed whole is a sentence.
bool sentence(const grammar_machine& g, std::string_view text) {
  auto m = g;
  return m.feed(text) && m.complete();
}

/// What held_grammar says is wrong with `text` ("" when it takes it).
std::string refusal(const std::string& text) {
  try {
    held_grammar g(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// Some sentence goes on from `m` within `depth` bytes of `alphabet`
/// (searched over states by key).
bool completable(const grammar_machine& m, const std::string& alphabet, int depth) {
  std::vector<grammar_machine> frontier{m};
  std::set<std::string> seen{m.key()};
  for (int d = 0; d <= depth && !frontier.empty(); ++d) {
    std::vector<grammar_machine> next;
    for (const auto& x : frontier) {
      if (x.complete())
        return true;
      for (const char c : alphabet) {
        auto y = x;
        if (y.step(static_cast<unsigned char>(c)) && seen.insert(y.key()).second)
          next.push_back(std::move(y));
      }
    }
    frontier = std::move(next);
  }
  return false;
}

/// Every text over `alphabet` of at most `n` characters.
std::vector<std::string> texts_upto(const std::string& alphabet, std::size_t n) {
  std::vector<std::string> all{""};
  for (std::size_t from = 0; from < all.size(); ++from)
    if (all[from].size() < n)
      for (const char c : alphabet)
        all.push_back(all[from] + c);
  return all;
}

// -- by hand ------------------------------------------------------------------------

TEST(grammar_machine, yes_or_no) {
  const auto g = grammar(R"(root ::= "yes" | "no")");
  auto m = g;
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.extendable());
  EXPECT_FALSE(m.step('x'));
  ASSERT_TRUE(m.feed(std::string_view("ye")));
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.feed(std::string_view("sx"))) << "a refused feed takes nothing";
  ASSERT_TRUE(m.step('s'));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.extendable());
  EXPECT_FALSE(m.step('s'));
  EXPECT_TRUE(sentence(g, "no"));
  EXPECT_FALSE(sentence(g, "n"));
  EXPECT_FALSE(sentence(g, ""));
}

constexpr const char* arithmetic = R"g(root ::= expr
expr ::= term (("+"|"-") term)*
term ::= [0-9]+ | "(" expr ")")g";

TEST(grammar_machine, arithmetic_nests_parentheses) {
  const auto g = grammar(arithmetic);
  for (const std::string_view ok : {"1", "12+3", "(1)", "((1))", "1+(2-3)", "(1+(2))-((3))"})
    EXPECT_TRUE(sentence(g, ok)) << ok;
  for (const std::string_view bad : {"", "+", "1+", "(1", "1)", "()", "(1))", "1++2", "(+1)"})
    EXPECT_FALSE(sentence(g, bad)) << bad;
  auto m = g;
  ASSERT_TRUE(m.feed(std::string_view("(1+2")));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.extendable());
  EXPECT_FALSE(m.step('(')) << "after a number, no '('";
  ASSERT_TRUE(m.step(')'));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.extendable()) << "'+' may follow";
  EXPECT_FALSE(m.step(')')) << "unbalanced";
  ASSERT_TRUE(m.step('-'));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.step('7'));
  EXPECT_TRUE(m.complete());
}

TEST(grammar_machine, repeats_keep_to_their_bounds) {
  const auto g = grammar(R"(root ::= "a"{2,3})");
  EXPECT_FALSE(sentence(g, "a"));
  auto m = g;
  ASSERT_TRUE(m.feed(std::string_view("aa")));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.extendable());
  ASSERT_TRUE(m.step('a'));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.extendable());
  EXPECT_FALSE(m.step('a'));
  const auto exact = grammar(R"(root ::= "ab"{2} [0-9]{1,} "!"? "x"{0,1} "y"*)");
  EXPECT_TRUE(sentence(exact, "abab1"));
  EXPECT_TRUE(sentence(exact, "abab123!xyyy"));
  EXPECT_FALSE(sentence(exact, "ab1"));
  EXPECT_FALSE(sentence(exact, "ababab1"));
  EXPECT_FALSE(sentence(exact, "abab"));
  EXPECT_FALSE(sentence(exact, "abab1xx"));
  const auto spaced = grammar("root ::= [a-c]{ 2 , 4 } | \"z\"{0}");
  EXPECT_TRUE(sentence(spaced, ""));
  EXPECT_TRUE(sentence(spaced, "abca"));
  EXPECT_FALSE(sentence(spaced, "abcab"));
  EXPECT_TRUE(sentence(grammar(R"(root ::= ("a"? "b"?)* "c")"), "abbac")) << "a repeat of what may be empty";
  // Operators stacked on one symbol are one of ?, * and +: as many ways to
  // read a text as one operator gives, however many are written.
  const auto stacked = grammar(R"(root ::= "a"+++++++++++++++++++++++++++++++++ "b"??????????????? "c"+? "d"?+)");
  EXPECT_TRUE(sentence(stacked, "aaaaaaaabcd"));
  EXPECT_TRUE(sentence(stacked, "a"));
  EXPECT_FALSE(sentence(stacked, "abb"));
  grammar_machine many(stacked);
  ASSERT_TRUE(many.feed(std::string_view(std::string(200, 'a'))));
  EXPECT_TRUE(many.complete());
  EXPECT_FALSE(sentence(grammar(R"(root ::= "x"{2}? "y")"), "xy")) << "a counted repeat is kept apart";
  EXPECT_TRUE(sentence(grammar(R"(root ::= "x"{2}? "y")"), "xxy"));
}

TEST(grammar_machine, classes_negated_classes_and_any_character) {
  const auto quoted = grammar(R"(root ::= "\"" ( [^"\\] | "\\" ["\\n] )* "\"")");
  EXPECT_TRUE(sentence(quoted, R"("a b\"c\\")"));
  EXPECT_TRUE(sentence(quoted, "\"\xc3\xa9\n\""));
  auto m = quoted;
  ASSERT_TRUE(m.feed(std::string_view("\"ab\"")));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.extendable());
  EXPECT_FALSE(m.step('x'));
  EXPECT_FALSE(sentence(quoted, R"("\x")"));
  const auto any = grammar(R"(root ::= . . "!")");
  EXPECT_TRUE(sentence(any, "ab!"));
  EXPECT_TRUE(sentence(any, "\n\xf0\x9f\x98\x80!"));
  EXPECT_FALSE(sentence(any, "a!"));
  const auto cls = grammar(R"(root ::= [a-cx-z_\-\]]+ [^a-z])");
  EXPECT_TRUE(sentence(cls, "ay_-]B"));
  EXPECT_FALSE(sentence(cls, "ayd"));
  EXPECT_FALSE(sentence(cls, "dA"));
  const auto escapes = grammar(R"(root ::= "\x41\u00e9\U0001F600\t\n\r\'\[")");
  EXPECT_TRUE(sentence(escapes, "A\xc3\xa9\xf0\x9f\x98\x80\t\n\r'["));
}

TEST(grammar_machine, reads_utf8_a_character_at_a_time_refusing_what_is_not_utf8) {
  const auto g = grammar("root ::= [\u00e0-\u00ff] \"\u00e9\" \"\U0001F600\"?");
  EXPECT_TRUE(sentence(g, "\xc3\xa0\xc3\xa9"));
  EXPECT_TRUE(sentence(g, "\xc3\xbf\xc3\xa9\xf0\x9f\x98\x80"));
  auto m = g;
  EXPECT_FALSE(m.step('a'));
  EXPECT_FALSE(m.step(0xc4)) << "no character of U+0100..U+013F may come";
  ASSERT_TRUE(m.step(0xc3));
  EXPECT_FALSE(m.complete()) << "a character begun";
  EXPECT_TRUE(m.extendable());
  EXPECT_FALSE(m.step(0x9f)) << "U+00DF is not in the class";
  ASSERT_TRUE(m.step(0xa0));
  ASSERT_TRUE(m.feed(std::string_view("\xc3\xa9")));
  EXPECT_TRUE(m.complete());
  ASSERT_TRUE(m.feed(std::string_view("\xf0\x9f\x98")));
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.step(0x81)) << "U+1F601 is not the emoji";
  ASSERT_TRUE(m.step(0x80));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.extendable());
  const auto any = grammar("root ::= .+");
  for (const std::string_view bad : {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\x80",
                                     "\xe0\x80\x80", "\xc3"})
    EXPECT_FALSE(sentence(any, bad)) << "not UTF-8";
  EXPECT_TRUE(sentence(any, "\xf0\x9f\x98\x80\xe4\xbd\xa0\xf4\x8f\xbf\xbf"));
  // A walk never sticks inside a character: every byte taken leads on.
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes += static_cast<char>(b);
  for (int b = 0; b < 256; ++b) {
    auto x = g;
    if (x.step(static_cast<unsigned char>(b))) {
      EXPECT_TRUE(completable(x, bytes, 8)) << b;
    }
  }
}

TEST(grammar_machine, reads_comments_and_bodies_over_lines) {
  const auto g = grammar(R"(# a greeting, then a name
root ::= greeting   # the start
  " " name
greeting ::= "hi"
  | "hello" # or longer
name-1 ::=
  [a-z]+ ("_" [a-z]+)?
name ::= name-1 | "#")");
  EXPECT_TRUE(sentence(g, "hello bob"));
  EXPECT_TRUE(sentence(g, "hi bob_b"));
  EXPECT_TRUE(sentence(g, "hi #"));
  EXPECT_FALSE(sentence(g, "hi bob_"));
  EXPECT_TRUE(sentence(grammar("root ::= \"\""), ""));
  EXPECT_FALSE(grammar("root ::= \"\"").extendable());
}

TEST(grammar_machine, nesting_stops_at_the_depth_limit_and_can_still_end) {
  auto m = grammar(R"g(root ::= "(" root ")" | "x")g");
  std::size_t open = 0;
  while (open < 1000 && m.step('('))
    ++open;
  EXPECT_GT(open, 100u);
  EXPECT_LT(open, held_grammar::max_depth);
  EXPECT_TRUE(m.refused_by_limits()) << "one more '(' would nest past the limit";
  ASSERT_TRUE(m.step('x'));
  ASSERT_TRUE(m.feed(std::string(open, ')')));
  EXPECT_TRUE(m.complete());
}

/// r1 ::= r2 "a" | r2 "b", ... to r`levels`, then "c": 2^levels stacks.
std::string doubling(std::size_t levels) {
  std::string text;
  for (std::size_t k = 1; k <= levels; ++k) {
    const auto next = "r" + std::to_string(k + 1);
    text += "r" + std::to_string(k) + " ::= " + next + " \"a\" | " + next + " \"b\"\n";
  }
  return text + "r" + std::to_string(levels + 1) + " ::= \"c\"\n";
}

TEST(grammar_machine, refuses_a_character_after_which_there_would_be_too_many_stacks) {
  auto wide = grammar("root ::= \"s\" r1 \"z\" | \"t\"\n" + doubling(11)); // 2048
  EXPECT_FALSE(wide.step('s'));
  EXPECT_TRUE(wide.refused_by_limits()) << "the grammar has the way; the limits refused it";
  EXPECT_FALSE(wide.step('q'));
  EXPECT_FALSE(wide.refused_by_limits()) << "no way of the grammar takes q";
  EXPECT_FALSE(wide.step('s'));
  EXPECT_TRUE(wide.refused_by_limits()) << "the same, remembered";
  EXPECT_TRUE(wide.step('t'));
  const auto narrow = grammar("root ::= \"s\" r1 \"z\" | \"t\"\n" + doubling(9)); // 512
  EXPECT_TRUE(sentence(narrow, "scabaababbaz"));
  EXPECT_NE(refusal("root ::= r1\n" + doubling(11)).find("limits"), std::string::npos);
}

// -- refusals -----------------------------------------------------------------------

TEST(held_grammar, refuses_what_is_wrong_saying_what_and_where) {
  const auto says = [](const std::string& text, const std::string& what) {
    const auto e = refusal(text);
    EXPECT_NE(e.find(what), std::string::npos) << text << " -> " << e;
  };
  says("root ::= foo", "rule 'foo' is used but never defined");
  says("root ::= foo", "line 1");
  says("root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice");
  says("root ::= \"a\"\nroot ::= \"b\"", "line 2");
  says("root ::= root \"a\" | \"a\"", "left recursion: rule 'root'");
  says("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"", "left recursion");
  says("root ::= e root \"x\" | \"y\"\ne ::= \"a\"?", "left recursion: rule 'root'");
  says("root ::= x\nx ::= (e x \"z\")?\ne ::= \"\"", "left recursion: rule 'x'");
  says("", "empty");
  says("  # only a comment\n\n", "the grammar is empty");
  says("expr ::= \"a\"", "the grammar has no rule named root");
  says("expr ::= root", "the grammar has no rule named root");
  says("root ::= [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}", "more than 4096 elements");
  says("root ::= (\"ab\"{1000} \"cd\"{1000}){1000}", "more than 4096 elements");
  says("root ::= \"a\"{1001}", "over 1000");
  says("root ::= \"a\"{3,2}", "least is over its most");
  says("root ::= \"a\" )", "closes no '('");
  says("root ::= (\"a\"\nb ::= \"c\"", "expected ')'");
  says("\n\nroot = \"a\"", "line 3: expected '::='");
  says("root ::= \"abc\nx ::= \"d\"", "does not close");
  says("root ::= [abc", "never closed");
  says("root ::= \"\\q\"", "unknown escape");
  says("root ::= \"\\x4\"", "hex digits");
  says("root ::= \"\\uD800\"", "surrogate");
  says("root ::= \"a\"\n  @", "line 2: unexpected '@'");
  says("root ::= * \"a\"", "repeats nothing");
  says("root ::= [z-a]", "backwards");
  says("root ::= [^\\x00-\\U0010FFFF]", "no character can match");
  says("root ::= \"\xc0\x80\"", "not UTF-8");
  EXPECT_EQ(refusal("root ::= (\"a\"? \"b\"?)* x\nx ::= \"\" | \"c\""), "")
    << "repeating what may be empty is no recursion";
}

// -- against oracles ----------------------------------------------------------------

/// Membership by recursive descent of the arithmetic grammar.
bool arithmetic_oracle(const std::string& s) {
  std::size_t i = 0;
  std::function<bool()> expr, term;
  term = [&] {
    if (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      while (i < s.size() && s[i] >= '0' && s[i] <= '9')
        ++i;
      return true;
    }
    if (i < s.size() && s[i] == '(') {
      ++i;
      if (!expr() || i >= s.size() || s[i] != ')')
        return false;
      ++i;
      return true;
    }
    return false;
  };
  expr = [&] {
    if (!term())
      return false;
    while (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
      if (!term())
        return false;
    }
    return true;
  };
  return expr() && i == s.size();
}

/// Balanced parentheses around x's.
bool balanced_oracle(const std::string& s) {
  int depth = 0;
  for (const char c : s)
    if ((depth += c == '(' ? 1 : c == ')' ? -1 : 0) < 0)
      return false;
  return depth == 0;
}

TEST(grammar_machine, takes_a_text_whole_exactly_when_an_oracle_says_so_and_never_walks_into_a_dead_end) {
  struct oracle_case {
    std::string grammar;
    std::string alphabet;
    std::size_t length;
    std::function<bool(const std::string&)> member;
  };
  const auto by_regex = [](const char* re) {
    return [r = std::regex(re)](const std::string& s) { return std::regex_match(s, r); };
  };
  const std::vector<oracle_case> cases{
    {R"(root ::= ("ab" | "c")* "a"?)", "abc", 6, by_regex("(ab|c)*a?")},
    {R"(root ::= [ab]{2,3} ("c" | "ba"){0,2})", "abc", 6, by_regex("[ab]{2,3}(c|ba){0,2}")},
    {R"(root ::= ("a"? "b"?)* "c" | x+ x ::= "b" "a"*)", "abc", 6, by_regex("(a?b?)*c|(ba*)+")},
    {R"g(root ::= ( "(" root ")" | "x" )*)g", "()x", 7, balanced_oracle},
    {arithmetic, "1+()", 6, arithmetic_oracle},
    {"root ::= [^b] . \"c\"* | \"b\"+", "abc", 5, by_regex("[^b][\\s\\S]c*|b+")},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.grammar);
    const auto g = grammar(c.grammar);
    std::size_t members = 0;
    for (const auto& text : texts_upto(c.alphabet, c.length)) {
      auto m = g;
      const bool fed = m.feed(text);
      const bool whole = fed && m.complete();
      EXPECT_EQ(whole, c.member(text)) << text;
      members += whole;
      if (fed) {
        EXPECT_TRUE(completable(m, c.alphabet, 8)) << "a dead end after " << text;
      }
    }
    EXPECT_GT(members, 3u);
  }
}

// -- keys ---------------------------------------------------------------------------

TEST(grammar_machine, keys_are_equal_exactly_for_equal_states) {
  const auto g = grammar(R"(root ::= ("a" | "b") "c" | [xy]*)");
  auto a = g, b = g, x = g, y = g;
  ASSERT_TRUE(a.step('a'));
  ASSERT_TRUE(b.step('b'));
  EXPECT_EQ(a.key(), b.key()) << "two ways to the same place";
  EXPECT_EQ(a.key()[0], '\xfc');
  EXPECT_NE(a.key(), g.key());
  ASSERT_TRUE(x.feed(std::string_view("xy")));
  ASSERT_TRUE(y.feed(std::string_view("yxx")));
  EXPECT_EQ(x.key(), y.key());
  EXPECT_NE(x.key(), a.key());
  auto c = a;
  ASSERT_TRUE(c.step('c'));
  EXPECT_NE(c.key(), a.key());
  const auto u = grammar("root ::= \"\u00e9\" | \"\u00e8\"");
  auto begun = u;
  ASSERT_TRUE(begun.step(0xc3));
  EXPECT_NE(begun.key(), u.key()) << "a character begun";
  const auto text = R"(root ::= "a")";
  const auto one = std::make_shared<const held_grammar>(text);
  const auto two = std::make_shared<const held_grammar>(text);
  EXPECT_NE(one->id, two->id);
  EXPECT_NE(grammar_machine(one).key(), grammar_machine(two).key());
  EXPECT_EQ(grammar_machine(one).key(), grammar_machine(one).key());
}

// -- tokens -------------------------------------------------------------------------

TEST(json_vocab, allows_exactly_the_tokens_whose_bytes_keep_to_a_grammar) {
  //                          0   1    2     3    4    5    6     7     8        9       10          11
  testing::list_tokenizer t({"", "1", "23", "+", "(", ")", "1+", "(1", "\xc3", "\xa9", "\xc3\xa9", "1)"});
  json_vocab v(t);
  for (const std::string text : {"(1+23)", "((1))+1", "1+\xc3\xa9", "1)"})
    (void)expect_allowed_as_fed(v, grammar(arithmetic), text);
  auto m = grammar(arithmetic);
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 4, 6, 7})) << "no ')' to close";
  ASSERT_TRUE(m.feed(v.bytes(4)));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 4, 6, 7, 11})) << "inside '(' a ')' may close";
  ASSERT_TRUE(m.feed(v.bytes(2)));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3, 5, 6, 11}));
  const auto accented = "root ::= \"caf\" [e\u00e9] \"!\"*";
  for (const std::string text : {"caf\xc3\xa9!!", "cafe!"})
    (void)expect_allowed_as_fed(v, grammar(accented), text);
  testing::list_tokenizer t2({"", "caf", "\xc3", "\xa9", "\xc3\xa9", "e!", "!", "\xc3\xa8"});
  json_vocab v2(t2);
  auto c = grammar(accented);
  ASSERT_TRUE(c.feed(std::string_view("caf")));
  EXPECT_EQ(*v2.allowed(c), (std::vector<std::int32_t>{2, 4, 5}));
  ASSERT_TRUE(c.feed(v2.bytes(2)));
  EXPECT_EQ(*v2.allowed(c), (std::vector<std::int32_t>{3})) << "the character begun, only its end";
  for (const std::string text : {"caf\xc3\xa9!", "cafe!!"})
    (void)expect_allowed_as_fed(v2, grammar(accented), text);
}

TEST(json_vocab, a_grammars_walk_meets_each_state_once_and_allows_what_feeding_each_token_allows) {
  // The walk keeps the states it meets by their keys and steps each by a
  // byte once: checked against brute force in every state of random texts.
  testing::list_tokenizer t({"", "a", "b", "ab", "ba", "aab", " ", "a b", "\xc3\xa9", "\xc3", "\xa9", "1", "12", "x1", "-",
                    "b-", "\xc3\xa9" "1", "bb", "\xc3\xa9\xc3", "(", ")", "a)", "(b"});
  json_vocab v(t, 4);
  for (const char* text : {R"G(root ::= ("a" | "b")* "a" ("a" | "b") ("a" | "b"))G",
                           R"G(root ::= "(" root ")" | [a-\u00e9]+ (" " root)?)G",
                           R"G(root ::= x ("-" x)*
x ::= "\u00e9"{1,3} "1"? | "ab" | "(" x ")")G"}) {
    SCOPED_TRACE(text);
    testing::expect_allowed_on_random_walks(v, [&] { return grammar(text); }, 30, 12, 43);
  }
}

} // namespace
} // namespace troupe
