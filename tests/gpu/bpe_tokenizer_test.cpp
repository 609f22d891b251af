// bpe_tokenizer: hand-checked merges, added tokens and split behaviours;
// refusals of what it does not support; byte round trips; and agreement with
// the independent Python encoder (tests/oracle/bpe_reference.py) on random
// texts under Llama 3's and GPT-2's pre-tokenizers.

#include "gpu/bpe_tokenizer.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#ifndef TROUPE_BPE_ORACLE_SCRIPT
#define TROUPE_BPE_ORACLE_SCRIPT "tests/oracle/bpe_reference.py"
#endif

namespace {

using troupe::gpu::bpe_tokenizer;
using troupe::gpu::bpe_training;
using troupe::gpu::train_bpe_json;
using json = nlohmann::json;
namespace fs = std::filesystem;

/// GPT-2's alphabet for the hand-built files: byte -> its symbol.
std::string sym(unsigned char b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  std::uint32_t cp = b;
  if (!printable) {
    std::uint32_t extra = 0;
    for (unsigned k = 0; k < b; ++k)
      if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE)))
        ++extra;
    cp = 256 + extra;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

/// A byte-level file by hand: the 256 byte symbols (ids = byte values),
/// then `merges` in rank order, each making a new token (or an existing one).
json hand_built(const std::vector<std::pair<std::string, std::string>>& merges, json pre_tokenizer) {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b)
    vocab[sym(static_cast<unsigned char>(b))] = b;
  json list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b))
      vocab[a + b] = vocab.size();
    list.push_back(a + " " + b);
  }
  return {{"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", list}}}};
}

json byte_level(bool use_regex = true) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}

std::unique_ptr<bpe_tokenizer> must_parse(const json& doc, std::int32_t eos = -1) {
  auto r = bpe_tokenizer::parse(doc.dump(), "tokenizer.json", eos);
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    return nullptr;
  }
  return std::move(std::get<std::unique_ptr<bpe_tokenizer>>(r));
}

std::string refusal(const json& doc) {
  auto r = bpe_tokenizer::parse(doc.dump(), "tokenizer.json", -1);
  if (auto* err = std::get_if<std::string>(&r))
    return *err;
  return "(parsed)";
}

std::vector<std::int32_t> ids(const bpe_tokenizer& t, std::initializer_list<std::string_view> tokens) {
  std::vector<std::int32_t> out;
  for (const auto tok : tokens) {
    out.push_back(t.find(tok));
    EXPECT_GE(out.back(), 0) << "no token \"" << tok << "\"";
  }
  return out;
}

std::string decode_all(const bpe_tokenizer& t, const std::vector<std::int32_t>& v) {
  std::string s;
  for (const auto id : v)
    s += t.decode(id);
  return s;
}

TEST(bpe_tokenizer, merges_apply_by_rank) {
  const auto t = must_parse(
    hand_built({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {sym(' '), "w"}}, byte_level()));
  ASSERT_TRUE(t);
  // GPT-2's pattern: "hello" and " world"; "Ġw" merges, "orld" stays bytes.
  EXPECT_EQ(t->encode("hello world"), ids(*t, {"hello", " w", "o", "r", "l", "d"}));
  EXPECT_EQ(t->vocab_size(), 256 + 5);
  EXPECT_EQ(t->decode(t->find("hello")), "hello");
  EXPECT_EQ(t->decode(t->find(" w")), " w");

  // The lower rank merges first: (a b) before (b c) gives "ab c" ...
  const auto ab_first = must_parse(hand_built({{"a", "b"}, {"b", "c"}}, byte_level()));
  ASSERT_TRUE(ab_first);
  EXPECT_EQ(ab_first->encode("abc"), ids(*ab_first, {"ab", "c"}));
  // ... and the other order gives "a bc".
  const auto bc_first = must_parse(hand_built({{"b", "c"}, {"a", "b"}}, byte_level()));
  ASSERT_TRUE(bc_first);
  EXPECT_EQ(bc_first->encode("abc"), ids(*bc_first, {"a", "bc"}));
  // Equal pairs merge left to right: "aaa" is "aa a".
  const auto aa = must_parse(hand_built({{"a", "a"}}, byte_level()));
  ASSERT_TRUE(aa);
  EXPECT_EQ(aa->encode("aaa"), ids(*aa, {"aa", "a"}));
  EXPECT_EQ(aa->encode("aaaa"), ids(*aa, {"aa", "aa"}));
}

TEST(bpe_tokenizer, ignore_merges_takes_a_whole_word_from_the_vocabulary) {
  json doc = hand_built({{"a", "b"}}, byte_level());
  doc["model"]["vocab"]["abc"] = 257; // no merge makes it
  auto without = must_parse(doc);
  ASSERT_TRUE(without);
  EXPECT_EQ(without->encode("abc"), ids(*without, {"ab", "c"}));
  doc["model"]["ignore_merges"] = true;
  auto with = must_parse(doc);
  ASSERT_TRUE(with);
  EXPECT_EQ(with->encode("abc"), std::vector<std::int32_t>{257});
  EXPECT_EQ(with->encode("abcabc"), ids(*with, {"ab", "c", "ab", "c"})); // not in the vocabulary whole
}

TEST(bpe_tokenizer, merges_may_be_pairs) {
  json doc = hand_built({{"a", "b"}}, byte_level());
  doc["model"]["merges"] = json::array({json::array({"a", "b"})});
  auto t = must_parse(doc);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab"), ids(*t, {"ab"}));
}

TEST(bpe_tokenizer, added_tokens_are_cut_out_first) {
  json doc = hand_built({{"h", "i"}, {"<", "|"}}, byte_level());
  const auto n = doc["model"]["vocab"].size();
  doc["added_tokens"] = json::array({
    {{"id", n}, {"content", "<|s|>"}, {"special", true}},
    {{"id", n + 1}, {"content", "<|s|>x"}, {"special", true}},
    {{"id", n + 2}, {"content", "[L]"}, {"special", false}, {"lstrip", true}},
    {{"id", n + 3}, {"content", "[R]"}, {"special", false}, {"rstrip", true}},
    {{"id", n + 4}, {"content", "[W]"}, {"special", false}, {"single_word", true}},
  });
  auto t = must_parse(doc);
  ASSERT_TRUE(t);
  const auto s = static_cast<std::int32_t>(n);
  const std::int32_t hi = t->find("hi");
  EXPECT_EQ(t->encode("<|s|>hi"), (std::vector<std::int32_t>{s, hi}));
  // The longest content wins where two begin.
  EXPECT_EQ(t->encode("<|s|>xhi"), (std::vector<std::int32_t>{s + 1, hi}));
  // Text that only looks like a token half-way goes through BPE.
  EXPECT_EQ(t->encode("<|hi"), ids(*t, {"<|", "hi"}));
  // lstrip swallows the blanks before it, rstrip those after it.
  EXPECT_EQ(t->encode("hi  [L]hi"), (std::vector<std::int32_t>{hi, s + 2, hi}));
  EXPECT_EQ(t->encode("hi[R] \n hi"), (std::vector<std::int32_t>{hi, s + 3, hi}));
  // single_word: only between non-word characters.
  EXPECT_EQ(t->encode("hi [W] hi"), (std::vector<std::int32_t>{hi, t->find(" "), s + 4, t->find(" "), hi}));
  EXPECT_EQ(t->encode("hi[W]"), ids(*t, {"hi", "[", "W", "]"}));
  // Special tokens decode to nothing, the others to their content; a
  // special token's own text is shown only where asked.
  EXPECT_EQ(t->decode(s), "");
  EXPECT_EQ(t->decode(s + 2), "[L]");
  EXPECT_EQ(t->special_text(s), "<|s|>");
  EXPECT_EQ(t->special_text(s + 1), "<|s|>x");
  EXPECT_EQ(t->special_text(s + 2), "") << "not special";
  EXPECT_EQ(t->special_text(hi), "");
  EXPECT_EQ(t->shown(s, true), "<|s|>");
  EXPECT_EQ(t->shown(s, false), "");
  EXPECT_EQ(t->shown(s + 2, true), "[L]");
  EXPECT_EQ(t->shown(hi, true), "hi");
  EXPECT_EQ(t->find("<|s|>"), s);
  EXPECT_EQ(t->vocab_size(), s + 5);
}

TEST(bpe_tokenizer, normalizers_apply_between_added_tokens) {
  // "é" is two bytes (C3 A9): a merge makes it one token; "e" + U+0301 is
  // three bytes that NFC composes into it first.
  json doc = hand_built({{sym(0xC3), sym(0xA9)}, {"f", "i"}}, byte_level());
  const auto n = doc["model"]["vocab"].size();
  doc["added_tokens"] = json::array({
    // Found in the raw text only: "<e\u0301>" is not it.
    {{"id", n}, {"content", "<\u00e9>"}, {"special", true}, {"normalized", false}},
    // Found in the normalized text: U+212B (ANGSTROM SIGN) is U+00C5 there.
    {{"id", n + 1}, {"content", "[\u212b]"}, {"special", false}, {"normalized", true}},
  });
  const auto plain = must_parse(doc);
  ASSERT_TRUE(plain);
  const std::string composed = "\u00e9", decomposed = "e\u0301";
  const auto e_acute = plain->find(composed);
  ASSERT_GE(e_acute, 0);
  EXPECT_EQ(plain->encode(composed), (std::vector<std::int32_t>{e_acute}));
  EXPECT_NE(plain->encode(decomposed), (std::vector<std::int32_t>{e_acute})) << "no normalizer: bytes as they are";

  doc["normalizer"] = {{"type", "NFC"}};
  const auto nfc = must_parse(doc);
  ASSERT_TRUE(nfc);
  EXPECT_EQ(nfc->encode(decomposed), (std::vector<std::int32_t>{e_acute}));
  EXPECT_EQ(nfc->encode("ab" + decomposed), nfc->encode("ab" + composed));
  const auto raw = static_cast<std::int32_t>(n);
  const auto norm = raw + 1;
  // The raw token: its content as written, and not its composed spelling's
  // decomposition.
  EXPECT_EQ(nfc->encode("<" + composed + ">"), (std::vector<std::int32_t>{raw}));
  EXPECT_NE(nfc->encode("<" + decomposed + ">"), (std::vector<std::int32_t>{raw}));
  // The normalized token: any spelling that normalizes to its content's.
  EXPECT_EQ(nfc->encode("[\u212b]"), (std::vector<std::int32_t>{norm}));
  EXPECT_EQ(nfc->encode("[\u00c5]"), (std::vector<std::int32_t>{norm}));
  EXPECT_EQ(nfc->encode("[A\u030a]"), (std::vector<std::int32_t>{norm}));
  EXPECT_EQ(nfc->encode(decomposed + "[A\u030a]" + decomposed), (std::vector<std::int32_t>{e_acute, norm, e_acute}));
  // Text between two raw tokens is normalized on its own.
  EXPECT_EQ(nfc->encode("<" + composed + ">" + decomposed + "<" + composed + ">"),
            (std::vector<std::int32_t>{raw, e_acute, raw}));
  EXPECT_EQ(nfc->find("[\u212b]"), norm) << "find() takes the content as written";

  // NFKC: compatibility characters too ("ﬁ" is "fi"); NFC leaves them.
  const auto fi = nfc->find("fi");
  EXPECT_NE(nfc->encode("\ufb01"), (std::vector<std::int32_t>{fi}));
  doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFKC"}}})}};
  const auto nfkc = must_parse(doc);
  ASSERT_TRUE(nfkc);
  EXPECT_EQ(nfkc->encode("\ufb01"), (std::vector<std::int32_t>{fi}));
  // NFD decomposes: "é" is then the e and the accent's own bytes.
  doc["normalizer"] = {{"type", "NFD"}};
  const auto nfd = must_parse(doc);
  ASSERT_TRUE(nfd);
  EXPECT_EQ(nfd->encode(composed), plain->encode(decomposed));
}

TEST(bpe_tokenizer, template_processing_adds_the_leading_and_trailing_ids) {
  json doc = hand_built({}, byte_level());
  doc["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}},
                                     {{"id", 301}, {"content", "</s>"}, {"special", true}}});
  doc["post_processor"] = {
    {"type", "Sequence"},
    {"processors",
     json::array({{{"type", "ByteLevel"}},
                  {{"type", "TemplateProcessing"},
                   {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}},
                                           {{"Sequence", {{"id", "A"}}}},
                                           {{"SpecialToken", {{"id", "</s>"}}}}})},
                   {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}}},
                                       {"</s>", {{"id", "</s>"}, {"ids", {301}}}}}}}})}};
  auto t = must_parse(doc, 301);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a"), (std::vector<std::int32_t>{300, 'a', 301}));
  EXPECT_EQ(t->encode(""), (std::vector<std::int32_t>{300, 301}));
  EXPECT_EQ(t->prefix(), std::vector<std::int32_t>{300});
  EXPECT_EQ(t->eos_token(), 301);
  EXPECT_EQ(t->vocab_size(), 302); // ids 256..299 have no token
  EXPECT_EQ(t->decode(280), "");
}

TEST(bpe_tokenizer, split_behaviours_cut_where_the_file_says) {
  // Merges across "-" show where pieces were cut: "a-" and "-b" exist.
  const auto with = [](const char* behavior, bool invert) {
    json doc = hand_built({{"a", "-"}, {"-", "b"}, {"-", "-"}}, json::object());
    doc["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", json::array({{{"type", "Split"},
                                                            {"pattern", {{"String", "-"}}},
                                                            {"behavior", behavior},
                                                            {"invert", invert}},
                                                           byte_level(false)})}};
    return must_parse(doc);
  };
  auto isolated = with("Isolated", false);
  ASSERT_TRUE(isolated);
  EXPECT_EQ(isolated->encode("a-b"), ids(*isolated, {"a", "-", "b"}));
  auto removed = with("Removed", false);
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->encode("a-b--"), ids(*removed, {"a", "b"}));
  auto previous = with("MergedWithPrevious", false);
  ASSERT_TRUE(previous);
  EXPECT_EQ(previous->encode("a-b"), ids(*previous, {"a-", "b"}));
  auto next = with("MergedWithNext", false);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->encode("a-b"), ids(*next, {"a", "-b"}));
  auto contiguous = with("Contiguous", false);
  ASSERT_TRUE(contiguous);
  EXPECT_EQ(contiguous->encode("a--b"), ids(*contiguous, {"a", "--", "b"}));
  // Inverted, the gaps are the matches: Removed keeps only the "-"s, each
  // a piece of its own (a literal pattern matches one "-" at a time).
  auto inverted = with("Removed", true);
  ASSERT_TRUE(inverted);
  EXPECT_EQ(inverted->encode("a--b-"), ids(*inverted, {"-", "-", "-"}));
}

TEST(bpe_tokenizer, digits_and_prefix_space) {
  json doc = hand_built({{"1", "2"}, {sym(' '), "a"}}, json::object());
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                                         {{"type", "ByteLevel"}, {"add_prefix_space", true},
                                                          {"use_regex", false}}})}};
  auto t = must_parse(doc);
  ASSERT_TRUE(t);
  // Digits one by one; then each piece gets a leading space.
  EXPECT_EQ(t->encode("12"), ids(*t, {" ", "1", " ", "2"}));
  EXPECT_EQ(t->encode("a"), ids(*t, {" a"}));
}

TEST(bpe_tokenizer, every_byte_comes_back) {
  bpe_training o;
  o.vocab_size = 400;
  o.special_tokens = {"<|begin|>", "<|end|>"};
  o.bos_token = "<|begin|>";
  const auto trained = train_bpe_json("The quick brown fox jumps over the lazy dog. Ünïcödé 中文 テキスト 🙂🙂 "
                                      "It's 12345 o'clock; they'll say: \"don't\"\n\n\tindent    spaces\r\n",
                                      o);
  ASSERT_EQ(trained.error, "");
  auto r = bpe_tokenizer::parse(trained.json, "trained", -1);
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<bpe_tokenizer>>(r)) << std::get<std::string>(r);
  const auto& t = *std::get<std::unique_ptr<bpe_tokenizer>>(r);
  ASSERT_EQ(t.prefix().size(), 1u);
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k)
      text.push_back(static_cast<char>(rng() % 256)); // mostly not UTF-8
    const auto v = t.encode(text);
    ASSERT_FALSE(v.empty());
    EXPECT_EQ(v.front(), t.prefix().front());
    EXPECT_EQ(decode_all(t, v), text);
    for (const auto id : v)
      EXPECT_TRUE(id >= 0 && id < t.vocab_size());
  }
  // A long word merges without quadratic work and still round-trips.
  const std::string long_word(200000, 'o');
  EXPECT_EQ(decode_all(t, t.encode(long_word)), long_word);
}

TEST(bpe_tokenizer, training_checks_its_options) {
  bpe_training o;
  o.vocab_size = 100;
  EXPECT_NE(train_bpe_json("abc", o).error.find("below the 256"), std::string::npos);
  o.vocab_size = 300;
  o.special_tokens = {"<a>", "<a>"};
  EXPECT_NE(train_bpe_json("abc", o).error.find("given twice"), std::string::npos);
  o.special_tokens = {"<a>"};
  o.bos_token = "<b>";
  EXPECT_NE(train_bpe_json("abc", o).error.find("not one of the special tokens"), std::string::npos);
  o.bos_token = "";
  o.pattern = "(";
  EXPECT_NE(train_bpe_json("abc", o).error.find("pattern"), std::string::npos);
}

TEST(bpe_tokenizer, refuses_what_it_does_not_support_by_name) {
  const json good = hand_built({{"a", "b"}}, byte_level());
  ASSERT_TRUE(must_parse(good));
  struct bad {
    std::string what;
    json doc;
    std::string says;
  };
  std::vector<bad> cases;
  const auto with = [&](std::string what, auto&& edit, std::string says) {
    json d = good;
    edit(d);
    cases.push_back({std::move(what), std::move(d), std::move(says)});
  };
  with("unigram", [](json& d) { d["model"]["type"] = "Unigram"; }, "model.type: \"Unigram\" is not supported");
  with("lowercase", [](json& d) { d["normalizer"] = {{"type", "Lowercase"}}; },
       "normalizer: normalizer \"Lowercase\" is not supported (NFC, NFD, NFKC, NFKD, Sequence are)");
  with("replace in a sequence",
       [](json& d) {
         d["normalizer"] = {{"type", "Sequence"},
                            {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "Replace"}}})}};
       },
       "normalizer.normalizers[1]: normalizer \"Replace\"");
  with("normalizer list", [](json& d) { d["normalizer"] = json::array({"NFC"}); }, "normalizer: must be an object");
  with("metaspace", [](json& d) { d["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre-tokenizer \"Metaspace\"");
  with("no byte level", [](json& d) { d["pre_tokenizer"] = nullptr; }, "has no ByteLevel step");
  with("split after byte level",
       [](json& d) {
         d["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", json::array({byte_level(), {{"type", "Digits"}}})}};
       },
       "ByteLevel must come last");
  with("bad regex",
       [](json& d) {
         d["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "(?<"}}}},
                                                              byte_level()})}};
       },
       "pre_tokenizer.pretokenizers[0].pattern: pattern does not compile");
  with("bad behavior",
       [](json& d) {
         d["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", json::array({{{"type", "Split"},
                                                               {"pattern", {{"String", " "}}},
                                                               {"behavior", "Sideways"}},
                                                              byte_level()})}};
       },
       "behavior: is \"Sideways\"");
  with("merge outside", [](json& d) { d["model"]["merges"].push_back("a zz"); }, "\"zz\" is not in the vocabulary");
  with("merge product", [](json& d) { d["model"]["merges"].push_back("b c"); }, "makes \"bc\", which is not in the vocabulary");
  with("merge form", [](json& d) { d["model"]["merges"].push_back("abc"); }, "not two tokens separated by one space");
  with("missing byte", [](json& d) { d["model"]["vocab"].erase("a"); }, "no symbol for byte 0x61");
  with("shared id", [](json& d) { d["model"]["vocab"]["zz"] = 5; }, "id 5 is given to");
  with("huge id", [](json& d) { d["model"]["vocab"]["zz"] = 1LL << 40; }, "must be a token id");
  with("suffix", [](json& d) { d["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix");
  with("dropout", [](json& d) { d["model"]["dropout"] = 0.1; }, "model.dropout");
  with("decoder", [](json& d) { d["decoder"] = {{"type", "Metaspace"}}; }, "decoder: only ByteLevel");
  with("no decoder", [](json& d) { d.erase("decoder"); }, "decoder: missing");
  with("post", [](json& d) { d["post_processor"] = {{"type", "RobertaProcessing"}}; },
       "post-processor \"RobertaProcessing\"");
  with("template id",
       [](json& d) {
         d["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}},
                                                        {{"Sequence", {{"id", "A"}}}}})},
                                {"special_tokens", json::object()}};
       },
       "special token \"<s>\" has no ids");
  with("added twice",
       [](json& d) {
         d["added_tokens"] = json::array({{{"id", 300}, {"content", "<x>"}}, {{"id", 301}, {"content", "<x>"}}});
       },
       "\"<x>\" is added twice");
  with("empty added", [](json& d) { d["added_tokens"] = json::array({{{"id", 300}, {"content", ""}}}); },
       "content: must not be empty");
  for (const auto& c : cases) {
    const std::string err = refusal(c.doc);
    EXPECT_NE(err.find(c.says), std::string::npos) << c.what << ": " << err;
    EXPECT_EQ(err.rfind("tokenizer.json: ", 0), 0u) << c.what << ": " << err;
  }
  EXPECT_NE(refusal(json::array()).find("expected a JSON object"), std::string::npos);
  auto r = bpe_tokenizer::parse("{", "x.json", -1);
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_EQ(std::get<std::string>(r), "x.json: not valid JSON");
  auto eos = bpe_tokenizer::parse(good.dump(), "x.json", 9999);
  ASSERT_TRUE(std::holds_alternative<std::string>(eos));
  EXPECT_NE(std::get<std::string>(eos).find("eos id 9999"), std::string::npos);
}

// -- against the Python encoder -------------------------------------------

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s)
    q += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return q + "'";
}

/// Random texts mixing what pre-tokenizers treat differently.
std::vector<std::string> random_texts(std::uint32_t seed, int count, const std::vector<std::string>& specials) {
  static const std::vector<std::string> parts = {
    "the", "The", " quick", "brown", "FOX", "'s", "'S", "'ll", "'re", "'d", " don't", "I'M", "12", "3456789",
    "007", " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n ", ".", ",", "!?", "...", "(x)", "{\"a\": 1}",
    "é", "ß", "Ünïcödé", "Жук", "中文", "テキスト", "🙂", "🙂🙂", "٣", "½", "Ⅻ", "a-b", "--", "_x_", "  \t",
    "über", "naïve", "x²", "\u00a0", "\u3000", "#", "$100", "e-mail", "URL://x.y/z?q=1",
    // What normalizers change: decomposed letters, jamo, compatibility forms,
    // marks out of canonical order, singletons.
    "e\u0301", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "\ud55c", "\ufb01", "a\u0323\u0302",
    "a\u0302\u0323", "\u0301", "\u2126", "\uff21\uff22", "\u00bd"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int n = 0; n < count; ++n) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) {
      if (!specials.empty() && rng() % 10 == 0)
        s += specials[rng() % specials.size()];
      else
        s += parts[rng() % parts.size()];
    }
    out.push_back(std::move(s));
  }
  return out;
}

class bpe_oracle : public ::testing::Test {
protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "troupe_bpe_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    // The oracle is a dependency (python3-regex, tools/install-deps.sh): fail, never skip.
    ASSERT_EQ(std::system("/usr/bin/python3 -c 'import regex' 2>/dev/null"), 0)
      << "/usr/bin/python3 cannot import regex; run tools/install-deps.sh (python3-regex)";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// The Python encoder's ids for each text under `doc`.
  std::vector<std::vector<std::int32_t>> oracle(const json& doc, const std::vector<std::string>& texts) {
    const auto tok = (dir_ / "tokenizer.json").string();
    const auto in = (dir_ / "texts.json").string();
    const auto out = (dir_ / "ids.json").string();
    std::ofstream(tok) << doc.dump();
    std::ofstream(in) << json(texts).dump();
    const std::string cmd = "/usr/bin/python3 " + shell_quote(TROUPE_BPE_ORACLE_SCRIPT) + " " + shell_quote(tok) +
                            " " + shell_quote(in) + " > " + shell_quote(out);
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "failed: " << cmd;
      return {};
    }
    std::ifstream f(out);
    return json::parse(f).get<std::vector<std::vector<std::int32_t>>>();
  }

  void agree(const json& doc, std::uint32_t seed, const std::vector<std::string>& specials) {
    auto t = must_parse(doc);
    ASSERT_TRUE(t);
    const auto texts = random_texts(seed, 400, specials);
    const auto want = oracle(doc, texts);
    ASSERT_EQ(want.size(), texts.size());
    int differ = 0;
    for (std::size_t k = 0; k < texts.size(); ++k) {
      const auto got = t->encode(texts[k]);
      if (got != want[k] && ++differ <= 5)
        ADD_FAILURE() << "text " << json(texts[k]).dump() << ": " << json(got).dump() << " but the oracle says "
                      << json(want[k]).dump();
    }
    EXPECT_EQ(differ, 0);
  }

  static json trained(const bpe_training& o) {
    std::string corpus;
    for (const auto& t : random_texts(99, 3000, {}))
      corpus += t + " ";
    const auto r = train_bpe_json(corpus, o);
    EXPECT_EQ(r.error, "");
    return json::parse(r.json);
  }

  fs::path dir_;
};

TEST_F(bpe_oracle, llama3_pre_tokenizer) {
  bpe_training o;
  o.vocab_size = 700;
  o.special_tokens = {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>"};
  o.bos_token = "<|begin_of_text|>";
  const json doc = trained(o);
  agree(doc, 1, o.special_tokens);
  json merged = doc;
  merged["model"]["ignore_merges"] = false;
  agree(merged, 2, o.special_tokens);
}

TEST_F(bpe_oracle, qwen2_nfc_normalizer_and_normalized_added_tokens) {
  bpe_training o;
  o.vocab_size = 700;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  o.pattern = std::string{troupe::gpu::qwen2_split_pattern};
  o.normalizer = "NFC";
  o.ignore_merges = false;
  json doc = trained(o);
  ASSERT_EQ(doc["normalizer"], json({{"type", "NFC"}}));
  agree(doc, 5, o.special_tokens);
  // Normalized added tokens, found in the text normalized; one whose
  // content is not in NFC (U+212B ANGSTROM SIGN) is found by its NFC form.
  const std::vector<std::string> normalized = {"\u212b\u212b", "[e\u0301]", "<tool>"};
  for (std::size_t k = 0; k < normalized.size(); ++k)
    doc["added_tokens"].push_back({{"id", 700 + o.special_tokens.size() + k},
                                   {"content", normalized[k]},
                                   {"special", false},
                                   {"normalized", true}});
  std::vector<std::string> spellings = o.special_tokens;
  spellings.insert(spellings.end(), {"\u212b\u212b", "\u00c5\u00c5", "A\u030a\u212b", "[e\u0301]", "[\u00e9]",
                                     "<tool>"});
  agree(doc, 6, spellings);
  for (const char* form : {"NFKC", "NFD", "NFKD"}) {
    SCOPED_TRACE(form);
    doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", form}}})}};
    agree(doc, 7, spellings);
  }
}

TEST_F(bpe_oracle, gpt4o_pattern_inverted_as_phi4_mini_writes_it) {
  // Phi-4 mini's tokenizer.json (GPT-4o's o200k vocabulary): the pattern's
  // matches kept, what lies between them removed (invert), then ByteLevel
  // without its own regex.
  bpe_training o;
  o.vocab_size = 650;
  o.special_tokens = {"<|endoftext|>", "<|user|>", "<|end|>"};
  o.ignore_merges = false;
  json doc = trained(o);
  const std::string o200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", o200k}}},
                                                          {"behavior", "Removed"},
                                                          {"invert", true}},
                                                         {{"type", "ByteLevel"},
                                                          {"add_prefix_space", false},
                                                          {"trim_offsets", true},
                                                          {"use_regex", false}}})}};
  agree(doc, 8, o.special_tokens);
}

TEST_F(bpe_oracle, gpt2_pre_tokenizer_and_other_splits) {
  bpe_training o;
  o.vocab_size = 600;
  o.special_tokens = {"<|endoftext|>"};
  o.ignore_merges = false;
  json doc = trained(o);
  doc["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  agree(doc, 3, o.special_tokens);
  for (const char* behavior : {"Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
    SCOPED_TRACE(behavior);
    doc["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", json::array({{{"type", "Split"},
                                                            {"pattern", {{"Regex", R"(\s+|\p{P})"}}},
                                                            {"behavior", behavior},
                                                            {"invert", false}},
                                                           {{"type", "Digits"}, {"individual_digits", false}},
                                                           byte_level(true)})}};
    agree(doc, 4, o.special_tokens);
  }
}

} // namespace
