// Lark grammars read as GBNF: each compiled by the grammar the wire holds
// output to, and checked on sentences it must take and texts it must not.

#include "messages/lark_grammar.hpp"
#include "runtime/grammar_constraint.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace troupe::openai {
namespace {

std::shared_ptr<const held_grammar> compiled(std::string_view lark) {
  auto g = lark_to_gbnf(lark);
  if (auto* e = std::get_if<1>(&g)) {
    ADD_FAILURE() << lark << "\nrefused: " << *e;
    return nullptr;
  }
  try {
    return std::make_shared<const held_grammar>(std::get<0>(g));
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << lark << "\nas GBNF:\n" << std::get<0>(g) << "\ndoes not compile: " << e.what();
    return nullptr;
  }
}

bool takes(const std::shared_ptr<const held_grammar>& g, std::string_view text) {
  grammar_machine m(g);
  return m.feed(text) && m.complete();
}

void expect_sentences(std::string_view lark, std::initializer_list<std::string_view> yes,
                      std::initializer_list<std::string_view> no) {
  const auto g = compiled(lark);
  if (!g)
    return;
  for (const auto text : yes)
    EXPECT_TRUE(takes(g, text)) << "should take \"" << text << "\" under\n" << lark << "\nas\n"
                                << std::get<0>(lark_to_gbnf(lark));
  for (const auto text : no)
    EXPECT_FALSE(takes(g, text)) << "should not take \"" << text << "\" under\n" << lark;
}

TEST(lark_grammar, a_grammar_is_read_as_lark_where_it_defines_names_with_a_colon) {
  EXPECT_TRUE(is_lark("start: \"a\""));
  EXPECT_TRUE(is_lark("// a comment\n?start: sum\n  | x\nNUMBER.2 : /[0-9]+/"));
  EXPECT_FALSE(is_lark("root ::= \"a\" | \"b\""));
  EXPECT_FALSE(is_lark("root ::= x\nx ::= \"a:b\""));
  EXPECT_FALSE(is_lark("SELECT * FROM t"));
}

TEST(lark_grammar, rules_terminals_strings_ranges_and_repeats_hold_the_language) {
  // vLLM's own example, in Lark.
  expect_sentences(R"L(
start: select_statement
select_statement: "SELECT " column " from " table " where " condition
column: "col_1" | "col_2"
table: "table_1" | "table_2"
condition: column "=" number
number: "1" | "2"
)L",
                   {"SELECT col_1 from table_2 where col_1=2"}, {"SELECT col_3 from table_2 where col_1=2", "SELECT "});
  // Arithmetic with a common terminal; %ignore read past (no blanks).
  expect_sentences(R"L(
?start: expr
expr: term (("+" | "-") term)*   // sums
term: factor (("*" | "/") factor)*
factor: NUMBER
      | "(" expr ")"
      | "-" factor -> neg
%import common.NUMBER
%import common.WS
%ignore WS
)L",
                   {"1+2*(3-4)", "-1.5e3", "(((7)))", ".5/2"}, {"1+", "1 + 2", "(1", "1e", ""});
  // Case-free strings, ranges, optionals, counted repeats, priorities, ?/! rules.
  expect_sentences(R"L(
start: kw WORDS [BANG] ("a".."c")~2..3
!kw: "select"i
WORDS.2: WORD ~ 2
BANG: "!"
%import common (WORD)
)L",
                   {"SeLeCtabcdab", "selectxyzab!abc", "SELECTabab"}, {"selectab", "selectabab!abcd", "selectab!d"});
  // An empty alternative; a rule named root (a name GBNF's start takes).
  expect_sentences("start: \"a\" (\"b\" | ) root\nroot: \"c\"", {"ac", "abc"}, {"a", "abbc"});
  // Lark's escaped strings and a name imported under another.
  expect_sentences(R"L(
start: S ":" N
%import common.ESCAPED_STRING -> S
%import common.SIGNED_INT -> N
)L",
                   {R"("a\"b":-12)", R"("":7)"}, {R"("a":)", R"("a\":1)", "\"a\nb\":1"});
}

TEST(lark_grammar, expressions_become_the_classes_groups_and_repeats_they_stand_for) {
  expect_sentences(R"L(start: /\d{2,3}/ "-" /[A-F\d]+?/ "-" /(?:ab|c)*/ "-" /\w\s\./)L",
                   {"12-F0-abcab-x .", "123-9--x\t."}, {"1-F0--x .", "12-G--x .", "12-F-abx-x ."});
  // '.' is any character but a newline, unless the s flag says otherwise.
  expect_sentences(R"(start: /a.b/)", {"axb", "a\xc3\xa9" "b"}, {"a\nb", "ab"});
  expect_sentences(R"(start: /a.b/s)", {"a\nb"}, {"ab"});
  // A range of a class's own marks, and Python's {,n}.
  expect_sentences(R"L(start: ("^".."a")+ /b{,2}/)L", {"^_a", "`bb", "a"}, {"-", "z", "abbb"});
  // Empty alternatives and groups.
  expect_sentences(R"L(start: /x(a|)y|/ "!")L", {"xay!", "xy!", "!"}, {"xa!", "x!"});
  // A class's own escapes and a literal slash; named groups.
  expect_sentences(R"L(start: /[\]\-x]+/ /(?P<n>\/)/)L", {"]-x/", "x/"}, {"y/", "x"});
}

TEST(lark_grammar, what_cannot_be_read_is_refused_saying_what_and_where) {
  struct row {
    std::string lark;
    const char* says;
  };
  for (const auto& r : std::vector<row>{
         {"x: \"a\"", "no rule named start"},
         {"start: a", "a is used but not defined"},
         {"start: \"a\"\nstart: \"b\"", "line 2: start is defined twice"},
         {"start: /(?=a)a/", "lookarounds"},
         {"start: /^a/", "anchors"},
         {"start: /a\\b/", "\\b is not served"},
         {"start: /a/i", "flag 'i'"},
         {"start: _sep{x, \",\"}\nx: \"a\"", "templates"},
         {"%declare X\nstart: X", "line 1: %declare"},
         {"%import other.X\nstart: X", "only Lark's common terminals"},
         {"%import common.NOPE\nstart: NOPE", "common.NOPE is not one"},
         {"start: \"a\n", "runs past the end of its line"},
         {"start: (\"a\"", "')' expected"},
         {"start: \"a\" ~ x", "a count expected"},
         {"start: \"ab\"..\"z\"", "two strings of one character"},
         {"start: @", "unexpected character '@'"},
         {"start: /[\\1]/", "\\1 inside a class"},
         {"start: " + std::string(100, '(') + "\"a\"" + std::string(100, ')'), "nested more than 64 deep"},
       }) {
    SCOPED_TRACE(r.lark);
    const auto g = lark_to_gbnf(r.lark);
    ASSERT_EQ(g.index(), 1u) << std::get<0>(g);
    EXPECT_NE(std::get<1>(g).find(r.says), std::string::npos) << std::get<1>(g);
    EXPECT_TRUE(std::get<1>(g).starts_with("line ")) << std::get<1>(g);
  }
}

} // namespace
} // namespace troupe::openai
