// The JSON recognizer behind response_format json_object, against a strict
// JSON parser (nlohmann) as the oracle, and the tokens it allows.
#include "runtime/json_constraint.hpp"

#include "runtime/choice_constraint.hpp"
#include "runtime/regex_constraint.hpp"

#include "gpu/backend.hpp"
#include "tests/support/allowed_oracle.hpp"
#include "tests/support/list_tokenizer.hpp"
#include "tests/support/wide.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <random>
#include <regex>

namespace troupe {
namespace {

using testing::expect_allowed_as_fed;

bool reads_whole(std::string_view text) {
  json_machine m;
  return m.feed(text) && m.complete();
}

TEST(json_machine, reads_json_objects) {
  for (const std::string text : {
         R"({})",
         R"( { } )",
         R"({"a":1})",
         "{\n  \"a\": [1, -2.5e+3, 0, 0.25, 1E9, -0],\n  \"b\": {\"c\": null}\n}",
         R"({"t":true,"f":false,"n":null,"s":"x\"y\\z\/\b\f\n\r\t\u00e9"})",
         R"({"":[],"e":[[],{}],"u":"caf\u00E9 \ud83d\ude00"})",
         "{\"k\":\"\xc3\xa9\xe2\x98\xba\xf0\x9f\x98\x80\"}",
       }) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(reads_whole(text));
    EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << "the oracle agrees";
  }
}

TEST(json_machine, refuses_what_is_no_json_object) {
  for (const std::string text : {
         R"([1])", R"("s")", R"(1)", R"(null)",         // not an object at the top
         R"({"a":01})", R"({"a":1.})", R"({"a":1e})", R"({"a":-})", R"({"a":.5})", R"({"a":+1})",
         R"({"a":1,})", R"({,})", R"({"a" 1})", R"({'a':1})", R"({a:1})", R"({"a":1]})", R"({"a":[1}})",
         R"({"a":tru})", R"({"a":nul1})", R"({"a":True})",
         R"({"a":"\x"})", R"({"a":"\u12G4"})", "{\"a\":\"\x01\"}",   // bad escapes, a raw control byte
         R"({"a":"\ud800"})", R"({"a":"\udc00"})", R"({"a":"\ud800x"})", R"({"a":"\ud800\u0041"})", // surrogate
         R"({"\uDBFF\n":1})", R"({"a":"\ude00\ud83d"})",                                  // halves alone
         "{\"a\":\"\x80\"}", "{\"a\":\"\xc0\x80\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf5\x80\x80\x80\"}",
         R"({} {})", R"({}x)",                           // anything after the object but blanks
       }) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(reads_whole(text));
  }
}

TEST(json_machine, a_refused_byte_leaves_it_as_it_was) {
  json_machine m;
  ASSERT_TRUE(m.feed(R"({"a":1)"));
  const auto before = m.key();
  EXPECT_FALSE(m.feed('x'));
  EXPECT_FALSE(m.feed(std::string_view(",}")));
  EXPECT_EQ(m.key(), before);
  EXPECT_TRUE(m.feed(std::string_view("2}")));
  EXPECT_TRUE(m.complete());
}

TEST(json_machine, depth_and_blank_runs_are_bounded) {
  std::string deep = "{\"a\":";
  for (std::size_t i = 1; i < json_machine::max_depth; ++i)
    deep += "[";
  json_machine m;
  ASSERT_TRUE(m.feed(deep));
  EXPECT_FALSE(m.feed('[')) << "one level past max_depth";
  EXPECT_TRUE(m.feed('1'));
  json_machine b;
  ASSERT_TRUE(b.feed(std::string(json_machine::max_blank, ' ')));
  EXPECT_FALSE(b.feed(' '));
  EXPECT_TRUE(b.feed('{'));
  EXPECT_TRUE(b.feed(std::string(json_machine::max_blank, '\n'))) << "the count starts again after each token";
  json_machine s;
  EXPECT_TRUE(s.feed("{\"a\":\"" + std::string(200, ' ') + "\"}")) << "blanks in a string are text";
}

/// A random JSON value of at most `depth` levels.
nlohmann::json random_value(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth <= 0 ? 2 + pick(5) : pick(7);
  static const std::vector<std::string> words{"", "a", "key", "caf\xc3\xa9", "quote\"d", "back\\slash", "tab\t",
                                              "\x01 ctl", "\xf0\x9f\x98\x80", "/"};
  switch (kind) {
  case 0: {
    auto o = nlohmann::json::object();
    for (int i = pick(4); i > 0; --i)
      o[words[static_cast<std::size_t>(pick(static_cast<int>(words.size())))] + std::to_string(i)] =
        random_value(rng, depth - 1);
    return o;
  }
  case 1: {
    auto a = nlohmann::json::array();
    for (int i = pick(4); i > 0; --i)
      a.push_back(random_value(rng, depth - 1));
    return a;
  }
  case 2:
    return words[static_cast<std::size_t>(pick(static_cast<int>(words.size())))];
  case 3:
    return static_cast<std::int64_t>(rng()) - static_cast<std::int64_t>(rng());
  case 4:
    return std::ldexp(static_cast<double>(rng()) - 2147483648.0, pick(80) - 40);
  case 5:
    return pick(2) == 0;
  default:
    return nullptr;
  }
}

TEST(json_machine, reads_every_object_a_json_writer_writes_and_is_whole_only_at_its_end) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    auto doc = nlohmann::json::object();
    doc["v"] = random_value(rng, 4);
    const auto text = doc.dump(i % 3 == 0 ? 2 : -1, ' ', i % 2 == 0);
    SCOPED_TRACE(text);
    json_machine m;
    for (std::size_t k = 0; k < text.size(); ++k) {
      ASSERT_FALSE(m.complete()) << "whole before byte " << k;
      ASSERT_TRUE(m.feed(static_cast<unsigned char>(text[k]))) << "refused byte " << k;
    }
    EXPECT_TRUE(m.complete());
  }
}

TEST(json_machine, takes_a_text_whole_exactly_when_the_oracle_parses_it_as_an_object) {
  // Mutated JSON: the machine and a strict parser agree on every text
  // (within the machine's limits; left out, as the oracle refuses what
  // JSON's grammar allows: numbers past a double's range). The values'
  // strings hold \u escapes of surrogate pairs, which mutations split.
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\",:. -+eE0123456789tfnrul\\/\x01\x80\xc3\xa9\xed\xa0" "dDcCaA";
  int agreed_yes = 0;
  for (int i = 0; i < 20000; ++i) {
    auto doc = nlohmann::json::object();
    doc["v"] = random_value(rng, 3);
    auto text = doc.dump();
    if (i % 4 == 0) // a surrogate pair, in a key or a value
      text.insert(text.find('"') + 1, i % 8 == 0 ? "\\ud83d\\ude00" : "\\uDBFF\\uDFFF");
    for (int m = 1 + static_cast<int>(rng() % 3); m > 0; --m) {
      const auto at = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
      case 0:
        text.insert(at, 1, c);
        break;
      case 1:
        if (at < text.size())
          text.erase(at, 1);
        break;
      default:
        if (at < text.size())
          text[at] = c;
      }
    }
    bool oracle = false;
    try {
      oracle = nlohmann::json::parse(text).is_object();
    } catch (const nlohmann::json::out_of_range&) {
      continue; // a number past a double's range: JSON's grammar allows it
    } catch (const nlohmann::json::exception&) {
    }
    SCOPED_TRACE(text);
    ASSERT_EQ(reads_whole(text), oracle);
    agreed_yes += oracle;
  }
  EXPECT_GT(agreed_yes, 1000) << "the mutations left enough valid texts to compare";
}

using testing::list_tokenizer;

TEST(json_vocab, allows_the_tokens_whose_bytes_all_may_come_next) {
  //                     0    1    2      3     4        5     6    7       8     9      10
  list_tokenizer t({"", "{", " {", "{\"", "\"a\":", "}", "1", "1}", "}x", " ", "\"}"});
  json_vocab v(t);
  json_machine m;
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3, 9}));
  ASSERT_TRUE(m.feed(v.bytes(3)));
  // In a key: every token but those ending the text wrongly; never token 0.
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3, 5, 6, 7, 8, 9}));
  ASSERT_TRUE(m.feed(std::string_view("a\":")));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3, 6, 7, 9, 10}));
  ASSERT_TRUE(m.feed(v.bytes(7)));
  EXPECT_TRUE(m.complete());
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{9})) << "only blanks after the object";
  EXPECT_EQ(v.bytes(0), "");
  EXPECT_EQ(v.bytes(99), "");
}

TEST(json_vocab, after_a_high_surrogate_only_its_low_half_may_come) {
  //                     0   1    2     3      4          5          6            7
  list_tokenizer t({"", "a", "\"", "\\", "\\u", "\\ude00", "\\u0041", "\\ude00\"}"});
  json_vocab v(t);
  json_machine m;
  ASSERT_TRUE(m.feed(std::string_view(R"({"k":")")));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3, 4, 6})) << "plain text; no low half alone";
  ASSERT_TRUE(m.feed(std::string_view(R"(\ud83d)")));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{3, 4, 5, 7})) << "not plain text, nor another escape";
  ASSERT_TRUE(m.feed(v.bytes(7)));
  EXPECT_TRUE(m.complete());
}

TEST(json_vocab, allows_exactly_the_tokens_a_machine_takes_in_every_state_of_random_json) {
  // Brute force as the oracle: feed each token to a copy of the machine.
  std::vector<std::string> pieces{"", "{", "}", "[", "]", "\"", "\":", ",", " ", "\n", "1", "-", "0.", "e+", "true",
                                  "nul", "l", "\\", "\\u", "00e9", "n", "\"}", "ab", "\xc3", "\xa9", "\xc3\xa9",
                                  "\xe2\x98", "\xba", "\x01", "x\"", "a\\\"", "}}", "{\"", "\":\"", "]}", "],[", "\t"};
  list_tokenizer t(pieces);
  json_vocab v(t, 8);
  std::mt19937 rng(3);
  int states = 0;
  for (int i = 0; i < 300; ++i) {
    auto doc = nlohmann::json::object();
    doc["v"] = random_value(rng, 3);
    const auto text = doc.dump(i % 2 == 0 ? 1 : -1);
    json_machine m;
    for (std::size_t k = 0; k < text.size(); ++k) {
      if (rng() % 4 == 0) {
        std::vector<std::int32_t> want;
        for (std::int32_t tok = 0; tok < t.vocab_size(); ++tok) {
          json_machine copy = m;
          if (!v.bytes(tok).empty() && copy.feed(v.bytes(tok)))
            want.push_back(tok);
        }
        ASSERT_EQ(*v.allowed(m), want) << text.substr(0, k);
        ++states;
      }
      ASSERT_TRUE(m.feed(static_cast<unsigned char>(text[k])));
    }
  }
  EXPECT_GT(states, 1000);
}

TEST(json_vocab, answers_a_recurring_state_from_its_cache_and_the_same) {
  list_tokenizer t({"", "{", "\"", "a", "\":", "1", ",", "}"});
  json_vocab v(t, 2);
  json_machine a;
  ASSERT_TRUE(a.feed(std::string_view("{\"")));
  json_machine b;
  ASSERT_TRUE(b.feed(std::string_view("{\"aaa")));
  EXPECT_EQ(v.allowed(a), v.allowed(b)) << "one answer for one key";
  json_machine c;
  ASSERT_TRUE(c.feed(std::string_view("{\"a\":1")));
  json_machine d;
  ASSERT_TRUE(d.feed(std::string_view("{\"a\":[")));
  const auto first = *v.allowed(c);
  (void)v.allowed(d);
  (void)v.allowed(a); // c falls out of the two kept
  EXPECT_EQ(*v.allowed(c), first);
}

// -- choices ---------------------------------------------------------------------

choice_machine choices(std::vector<std::string> texts) {
  std::sort(texts.begin(), texts.end());
  return choice_machine(std::make_shared<const std::vector<std::string>>(std::move(texts)));
}

TEST(choice_machine, takes_the_bytes_that_begin_a_choice_and_says_where_one_is_whole) {
  auto m = choices({"no", "yes", "yes!", "maybe so"});
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.extendable());
  EXPECT_FALSE(m.feed(std::string_view("x")));
  EXPECT_FALSE(m.feed(std::string_view("nope"))) << "past every choice";
  EXPECT_FALSE(m.feed(std::string_view("ye!"))) << "a refused feed takes nothing";
  ASSERT_TRUE(m.feed(std::string_view("ye")));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.step('s'));
  EXPECT_TRUE(m.complete()) << "\"yes\"";
  EXPECT_TRUE(m.extendable()) << "\"yes!\" goes on from it";
  ASSERT_TRUE(m.step('!'));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.extendable());
  EXPECT_FALSE(m.step('!'));
  auto n = choices({"no", "yes"});
  ASSERT_TRUE(n.feed(std::string_view("no")));
  EXPECT_TRUE(n.complete());
  EXPECT_FALSE(n.extendable());
  // Multi-byte characters go byte by byte.
  auto u = choices({"\xc3\xa9t\xc3\xa9", "\xc3\xa0"});
  ASSERT_TRUE(u.step(0xc3));
  EXPECT_FALSE(u.complete());
  ASSERT_TRUE(u.step(0xa0));
  EXPECT_TRUE(u.complete());
}

TEST(choice_machine, its_key_is_the_rest_of_the_choices_it_may_still_become) {
  auto a = choices({"yes", "no"});
  auto b = choices({"oh yes", "oh no"});
  ASSERT_TRUE(b.feed(std::string_view("oh ")));
  EXPECT_EQ(a.key(), b.key()) << "the same texts may follow";
  auto c = choices({"a\0b"});
  auto d = choices({"a", "b"});
  EXPECT_NE(c.key(), d.key()) << "lengths keep texts apart";
  EXPECT_EQ(a.key()[0], '\xfe');
}

TEST(json_vocab, allows_exactly_the_tokens_whose_bytes_keep_to_a_choice) {
  //                     0   1    2     3      4       5    6      7
  list_tokenizer t({"", "y", "ye", "yes", "yes!", "n", "no", "s!"});
  json_vocab v(t);
  auto m = choices({"yes", "yes!", "no"});
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(m.feed(v.bytes(2)));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{7})) << "\"s\" alone is no token here";
  // Brute force: each token fed to a copy, in every state of every choice.
  const std::vector<std::string> texts{"yes", "yes!", "no", "nos!", "s!y"};
  for (const auto& text : texts)
    EXPECT_EQ(expect_allowed_as_fed(v, choices(texts), text), text.size()) << text;
}

// -- regular expressions -----------------------------------------------------------

regex_machine regex(const std::string& text) {
  return regex_machine(std::make_shared<const held_regex>(text));
}

TEST(regex_machine, the_whole_output_matches_and_it_says_where_it_may_end_or_go_on) {
  auto m = regex("[0-9]{2,3}(-[a-z]+)?");
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.step('a'));
  ASSERT_TRUE(m.feed(std::string_view("12")));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.extendable());
  EXPECT_FALSE(m.feed(std::string_view("3x"))) << "a refused feed takes nothing";
  ASSERT_TRUE(m.feed(std::string_view("3-")));
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.step('4'));
  ASSERT_TRUE(m.feed(std::string_view("ab")));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.extendable());
  auto exact = regex("yes|no");
  ASSERT_TRUE(exact.feed(std::string_view("no")));
  EXPECT_TRUE(exact.complete());
  EXPECT_FALSE(exact.extendable());
  // Not searched for: the output is matched whole, anchors or not.
  EXPECT_FALSE(regex("b").step('a'));
  EXPECT_TRUE(regex("^a$").step('a'));
  EXPECT_THROW(held_regex("(?=a)"), std::invalid_argument);
}

TEST(regex_machine, reads_utf8_a_character_at_a_time_refusing_what_is_not_utf8) {
  auto m = regex("caf[\u00e9e]!");
  ASSERT_TRUE(m.feed(std::string_view("caf")));
  auto copy = m;
  ASSERT_TRUE(m.step(0xc3));
  EXPECT_FALSE(m.complete()) << "a character begun";
  EXPECT_TRUE(m.extendable());
  EXPECT_FALSE(m.step(0xa8)) << "\u00e8 is not in the class";
  ASSERT_TRUE(m.step(0xa9));
  ASSERT_TRUE(m.step('!'));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(copy.step(0xc4)) << "no character of U+0100..U+013F may come";
  EXPECT_FALSE(copy.step(0xc0)) << "an overlong lead";
  auto any = regex(".+");
  for (const std::string_view bad : {"\xed\xa0\x80", "\xf5\x80\x80\x80", "\x80", "\xe0\x80\x80"})
    EXPECT_FALSE(regex(".+").feed(bad)) << "not UTF-8";
  EXPECT_TRUE(any.feed(std::string_view("\xf0\x9f\x98\x80\xe4\xbd\xa0")));
  EXPECT_TRUE(any.complete());
}

using testing::wide;

TEST(regex_machine, a_text_matches_whole_exactly_when_ecma_regex_match_says_so) {
  // The oracle: std::wregex's ECMAScript match of the whole text, over code
  // points (its \d and \w are ASCII's, as the texts here are but for é, è).
  const std::vector<std::string> patterns{"[0-9]{3}-[0-9]{4}", "(yes|no)\\.", "a*b+c?", "[a-c]{2,4}(x|yz)*",
                                          "\\d+(\\.\\d{1,2})?", "[^ab]+", "caf[\u00e9\u00e8]", ".{0,3}z",
                                          "(a|ab)(c|bcd)", "x?y?z?", "\\w+ \\w+"};
  const std::vector<std::string> alphabet{"a", "b", "c", "x", "y", "z", "0", "7", ".", "-", " ", "\u00e9", "\u00e8",
                                          "f", "d"};
  std::mt19937 rng(11);
  int matched = 0;
  for (const auto& pattern : patterns) {
    const auto held = std::make_shared<const held_regex>(pattern);
    const std::wregex oracle(wide(pattern), std::regex::ECMAScript);
    for (int i = 0; i < 1500; ++i) {
      std::string text;
      for (auto n = rng() % 9; n > 0; --n)
        text += alphabet[rng() % alphabet.size()];
      if (i % 3 == 0) // nearer the language: a word the pattern may take, and noise
        text = std::vector<std::string>{"555-1234", "yes.", "abbc", "abxyz", "3.14", "café", "xyz", "abcd", "xz",
                                        "ab cd"}[rng() % 10] + (rng() % 2 ? "" : alphabet[rng() % alphabet.size()]);
      regex_machine m(held);
      const bool ours = m.feed(std::string_view(text)) && m.complete();
      const bool theirs = std::regex_match(wide(text), oracle);
      ASSERT_EQ(ours, theirs) << pattern << " on \"" << text << "\"";
      matched += ours;
    }
  }
  EXPECT_GT(matched, 500) << "enough texts matched to compare";
}

TEST(json_vocab, allows_exactly_the_tokens_whose_bytes_keep_to_an_expression) {
  //                     0   1    2     3       4      5    6        7       8
  list_tokenizer t({"", "1", "23", "4", "12345", "-", "-ab", "\xc3", "\xa9", "\xc3\xa9"});
  json_vocab v(t);
  const std::vector<std::string> texts{"12", "123-ab", "1-\xc3\xa9", "44"};
  const auto fresh = [] { return regex("[0-9]{2,3}(-[a-z\u00e9]+)?"); };
  for (const auto& text : texts)
    (void)expect_allowed_as_fed(v, fresh(), text); // "1-é" leaves the expression at "-" after one digit
  auto m = fresh();
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 2, 3})) << "not five digits";
  ASSERT_TRUE(m.feed(v.bytes(2)));
  EXPECT_EQ(*v.allowed(m), (std::vector<std::int32_t>{1, 3, 5, 6})) << "a third digit, or the dash";
}

/// Tokens of one to three bytes over a small alphabet, "é" whole and
/// split across tokens among them.
list_tokenizer walk_tokens() {
  return list_tokenizer({"", "a", "b", "ab", "ba", "aab", " ", "a b", "\xc3\xa9", "\xc3", "\xa9", "1", "12", "x1", "-",
                         "b-", "\xc3\xa9" "1", "bb", "\xc3\xa9\xc3", "(", ")", "a)", "(b"});
}

TEST(json_vocab, an_expressions_walk_meets_each_state_once_and_allows_what_feeding_each_token_allows) {
  // The walk steps each NFA state set by each character once (a DFA made
  // for the walk): checked against brute force in every state of random
  // texts.
  const auto t = walk_tokens();
  json_vocab v(t, 4);
  for (const char* expression : {"(a|b)*a(a|b){2}", "[a-\u00e9]+( [ab]+)*", "(ab|ba)+-?[0-9]*", "\u00e9{1,3}1?",
                                 "(a|\u00e9)(b|\u00e9)*|1+"}) {
    SCOPED_TRACE(expression);
    testing::expect_allowed_on_random_walks(v, [&] { return regex(expression); }, 30, 12, 41);
  }
}

} // namespace
} // namespace troupe
