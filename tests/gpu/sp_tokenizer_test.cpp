// sp_tokenizer against a SentencePiece model that troupe-mkmodel trains
// (BPE, 512 pieces, byte fallback): BOS handling, special tokens, and the
// round trip of text through per-token decodes.

#include "gpu/model_tokenizer.hpp"
#include "gpu/sp_tokenizer.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>

#ifndef TROUPE_MKMODEL_PATH
#define TROUPE_MKMODEL_PATH ""
#endif

namespace {

using troupe::gpu::sp_tokenizer;
namespace fs = std::filesystem;

static_assert(!std::is_copy_constructible_v<sp_tokenizer>);
static_assert(std::has_virtual_destructor_v<troupe::gpu::tokenizer>);

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s)
    q += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return q + "'";
}

class sp_tokenizer_test : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    const char* mkmodel = std::getenv("TROUPE_MKMODEL");
    if (mkmodel == nullptr || *mkmodel == '\0')
      mkmodel = TROUPE_MKMODEL_PATH;
    if (*mkmodel == '\0') {
      setup_error_ = "TROUPE_MKMODEL is not set (path of the built troupe-mkmodel)";
      return;
    }
    std::string templ = (fs::temp_directory_path() / "troupe_sp_XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      setup_error_ = "mkdtemp failed";
      return;
    }
    dir_ = templ;
    const std::string cmd = shell_quote(mkmodel) + " --out " + shell_quote(dir_) +
                            " --hidden 32 --intermediate 32 --layers 1 --heads 2 --kv-heads 2 >/dev/null";
    if (std::system(cmd.c_str()) != 0)
      setup_error_ = "failed: " + cmd;
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty())
      fs::remove_all(dir_, ec);
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    auto r = sp_tokenizer::load(dir_ + "/tokenizer.model", 1, 2);
    ASSERT_TRUE(std::holds_alternative<std::unique_ptr<sp_tokenizer>>(r)) << std::get<std::string>(r);
    tok_ = std::move(std::get<std::unique_ptr<sp_tokenizer>>(r));
  }

  /// Concatenated per-token decodes of everything after the BOS.
  std::string stream_decode(const std::vector<std::int32_t>& ids) const {
    std::string text;
    for (std::size_t i = 1; i < ids.size(); ++i)
      text += tok_->decode(ids[i]);
    return text;
  }

  static inline std::string dir_;
  static inline std::string setup_error_;
  std::unique_ptr<sp_tokenizer> tok_;
};

TEST_F(sp_tokenizer_test, reports_vocabulary_and_specials) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->eos_token(), 2);
  EXPECT_EQ(tok_->bos_token(), 1);
  for (const std::int32_t id : {0, 1, 2, -1, 512, 100000})
    EXPECT_EQ(tok_->decode(id), "") << "id " << id;
  // Control and unknown pieces' own texts, shown where asked.
  EXPECT_EQ(tok_->special_text(0), "<unk>");
  EXPECT_EQ(tok_->special_text(1), "<s>");
  EXPECT_EQ(tok_->special_text(2), "</s>");
  for (const std::int32_t id : {3, 100, -1, 512})
    EXPECT_EQ(tok_->special_text(id), "") << "id " << id;
  EXPECT_EQ(tok_->shown(2, true), "</s>");
  EXPECT_EQ(tok_->shown(2, false), "");
  const auto ids = tok_->encode("Hi");
  EXPECT_EQ(tok_->shown(ids.back(), true), tok_->decode(ids.back()));
}

TEST_F(sp_tokenizer_test, prepends_bos) {
  const auto ids = tok_->encode("The bread is ready.");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 1);
  for (std::size_t i = 1; i < ids.size(); ++i) {
    EXPECT_GT(ids[i], 2);
    EXPECT_LT(ids[i], 512);
  }
  EXPECT_EQ(tok_->encode(""), std::vector<std::int32_t>{1});
}

TEST_F(sp_tokenizer_test, ascii_round_trips_through_per_token_decode) {
  // The model adds SentencePiece's dummy prefix: one space in front.
  for (const std::string text : {"Hello world", "The kettle began to whistle.",
                                 "  two  spaces,\ttab and\nnewline 12345 {json: [1, 2]}",
                                 "zzqx~`|^ unusual"}) {
    const auto ids = tok_->encode(text);
    EXPECT_EQ(stream_decode(ids), " " + text) << text;
  }
}

TEST_F(sp_tokenizer_test, utf8_round_trips_through_byte_fallback) {
  for (const std::string text : {"caf\xC3\xA9 na\xC3\xAFve", "\xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x99\x82"}) {
    const auto ids = tok_->encode(text);
    EXPECT_EQ(stream_decode(ids), " " + text) << text;
  }
  // SentencePiece cannot tell a literal U+2581 from its space marker.
  EXPECT_EQ(stream_decode(tok_->encode("a\xE2\x96\x81" "b")), " a b");
  // A character the corpus never saw becomes one byte piece per UTF-8 byte,
  // each decoding to a lone byte.
  const auto ids = tok_->encode("\xF0\x9F\x99\x82");
  std::size_t single_bytes = 0;
  for (std::size_t i = 1; i < ids.size(); ++i)
    single_bytes += tok_->decode(ids[i]).size() == 1 && (tok_->decode(ids[i])[0] & 0x80) ? 1 : 0;
  EXPECT_EQ(single_bytes, 4u);
}

TEST_F(sp_tokenizer_test, special_tokens_in_a_text_are_the_tokens_themselves) {
  // Llama 2's turns: "... </s><s>[INST] ..." holds EOS and BOS, and the text
  // between them is encoded chunk by chunk, each with the dummy prefix (as
  // Meta's reference encodes each turn).
  const auto body = [&](const std::string& text) {
    auto ids = tok_->encode(text);
    ids.erase(ids.begin()); // the BOS encode() puts first
    return ids;
  };
  std::vector<std::int32_t> want{1};
  for (const auto& part : {body("[INST] Hi [/INST] Hello "), std::vector<std::int32_t>{2, 1}, body("[INST] Bye [/INST]")})
    want.insert(want.end(), part.begin(), part.end());
  EXPECT_EQ(tok_->encode("[INST] Hi [/INST] Hello </s><s>[INST] Bye [/INST]"), want);
  EXPECT_EQ(tok_->encode("<unk></s>"), (std::vector<std::int32_t>{1, 0, 2}));
  EXPECT_EQ(tok_->encode("<s>"), (std::vector<std::int32_t>{1, 1})) << "one BOS written, one put first";
  // Not quite a special token's text: text.
  for (const std::string near : {"<s", "</ s>", "< s>", "<S>"}) {
    const auto ids = tok_->encode(near);
    EXPECT_EQ(stream_decode(ids), " " + near) << near;
  }
}

TEST_F(sp_tokenizer_test, added_tokens_are_cut_out_first_with_their_blanks) {
  using troupe::gpu::added_token;
  // ChatML's markers past the model's 512 pieces (a Mistral fine-tune's),
  // Phi-3's <|user|> that takes the blanks after it, one that takes the
  // blanks before it, one only as a word of its own, and a plain one.
  std::vector<added_token> added{
    {.content = "<|im_start|>", .match = {}, .id = 512, .special = true},
    {.content = "<|im_end|>", .match = {}, .id = 513, .special = true},
    {.content = "<|user|>", .match = {}, .id = 514, .special = true, .rstrip = true},
    {.content = "<|pad|>", .match = {}, .id = 515, .special = true, .lstrip = true},
    {.content = "word", .match = {}, .id = 516, .single_word = true},
    {.content = "<sep>", .match = {}, .id = 517},
  };
  auto r = sp_tokenizer::load(dir_ + "/tokenizer.model", 1, 513, added);
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<sp_tokenizer>>(r)) << std::get<std::string>(r);
  const auto& t = *std::get<std::unique_ptr<sp_tokenizer>>(r);
  EXPECT_EQ(t.vocab_size(), 518);
  EXPECT_EQ(t.eos_token(), 513) << "an end id among the added tokens";
  const auto body = [&](const std::string& text) {
    auto ids = tok_->encode(text);
    ids.erase(ids.begin());
    return ids;
  };
  const auto join = [](std::initializer_list<std::vector<std::int32_t>> parts) {
    std::vector<std::int32_t> out{1};
    for (const auto& p : parts)
      out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  EXPECT_EQ(t.encode("<|im_start|>user\nHi<|im_end|>\n"),
            join({{512}, body("user\nHi"), {513}, body("\n")}));
  EXPECT_EQ(t.encode("<|user|>\n Hello<|im_end|>"), join({{514}, body("Hello"), {513}})) << "rstrip";
  EXPECT_EQ(t.encode("Hi  \n<|pad|>"), join({body("Hi"), {515}})) << "lstrip";
  EXPECT_EQ(t.encode("a word"), join({body("a "), {516}}));
  EXPECT_EQ(t.encode("swordfish"), join({body("swordfish")})) << "single_word: inside a word, text";
  // The control pieces' texts still are their tokens between added ones.
  EXPECT_EQ(t.encode("</s><sep><s>"), join({{2, 517, 1}}));
  // Special added tokens decode to nothing and show their text; a plain one
  // decodes to its content.
  EXPECT_EQ(t.decode(512), "");
  EXPECT_EQ(t.special_text(512), "<|im_start|>");
  EXPECT_EQ(t.decode(517), "<sep>");
  EXPECT_EQ(t.special_text(517), "");
  EXPECT_EQ(t.decode(518), "");
  // An end id past every id is refused.
  auto bad = sp_tokenizer::load(dir_ + "/tokenizer.model", 1, 518, added);
  ASSERT_TRUE(std::holds_alternative<std::string>(bad));
  EXPECT_NE(std::get<std::string>(bad).find("eos id 518 outside the vocabulary of 518"), std::string::npos)
    << std::get<std::string>(bad);
}

TEST_F(sp_tokenizer_test, a_model_directory_adds_the_tokens_its_hugging_face_files_list) {
  std::string templ = (fs::temp_directory_path() / "troupe_sp_added_XXXXXX").string();
  ASSERT_NE(mkdtemp(templ.data()), nullptr);
  const fs::path d = templ;
  fs::copy_file(fs::path{dir_} / "tokenizer.model", d / "tokenizer.model");
  troupe::gpu::llama_config config;
  config.vocab_size = 516;
  config.bos_token_id = 1;
  config.eos_token_ids = {513}; // <|im_end|> ends a ChatML fine-tune's turns
  const auto load = [&]() { return troupe::gpu::load_model_tokenizer(d.string(), config); };
  const auto check = [&](const char* from) {
    auto r = load();
    ASSERT_TRUE(std::holds_alternative<std::unique_ptr<troupe::gpu::tokenizer>>(r))
      << from << ": " << std::get<std::string>(r);
    const auto& t = *std::get<std::unique_ptr<troupe::gpu::tokenizer>>(r);
    EXPECT_EQ(t.vocab_size(), 514) << from;
    const auto ids = t.encode("<|im_start|>user\nHi<|im_end|>");
    ASSERT_GE(ids.size(), 4u) << from;
    EXPECT_EQ(ids[1], 512) << from;
    EXPECT_EQ(ids.back(), 513) << from;
    EXPECT_EQ(t.special_text(513), "<|im_end|>") << from;
  };
  // Without either file, a ChatML end id past the pieces is refused.
  {
    auto r = load();
    ASSERT_TRUE(std::holds_alternative<std::string>(r));
    EXPECT_NE(std::get<std::string>(r).find("eos id 513 outside the vocabulary of 512"), std::string::npos)
      << std::get<std::string>(r);
  }
  std::ofstream(d / "tokenizer_config.json") << R"({"added_tokens_decoder": {
      "512": {"content": "<|im_start|>", "lstrip": false, "normalized": false, "rstrip": false,
              "single_word": false, "special": true},
      "513": {"content": "<|im_end|>", "special": true}}})";
  check("tokenizer_config.json");
  // tokenizer.json, where there is one, is the list read.
  std::ofstream(d / "tokenizer.json") << R"({"added_tokens": [
      {"id": 0, "content": "<unk>", "special": true}, {"id": 512, "content": "<|im_start|>", "special": true},
      {"id": 513, "content": "<|im_end|>", "special": true}]})";
  check("tokenizer.json");
  // What `text`'s tokens after the BOS show.
  const auto expect_shown = [&](const std::string& text, const std::string& want) {
    auto r = load();
    ASSERT_TRUE(std::holds_alternative<std::unique_ptr<troupe::gpu::tokenizer>>(r)) << std::get<std::string>(r);
    const auto& t = *std::get<std::unique_ptr<troupe::gpu::tokenizer>>(r);
    const auto ids = t.encode(text);
    std::string shown;
    for (std::size_t i = 1; i < ids.size(); ++i)
      shown += t.shown(ids[i], true);
    EXPECT_EQ(shown, want) << text;
  };
  // Metaspace's prepend_scheme "first" (legacy=false): no prefix after <|im_start|>.
  std::ofstream(d / "tokenizer.json") << R"({"added_tokens": [
      {"id": 512, "content": "<|im_start|>", "special": true}, {"id": 513, "content": "<|im_end|>", "special": true}],
      "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                            "split": false}})";
  expect_shown("Hi<|im_start|>Hi", " Hi<|im_start|>Hi");
  // Llama 2's legacy normalizer prepends to every piece, whatever Metaspace says.
  std::ofstream(d / "tokenizer.json") << R"({"added_tokens": [
      {"id": 512, "content": "<|im_start|>", "special": true}, {"id": 513, "content": "<|im_end|>", "special": true}],
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                         {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
      "pre_tokenizer": null})";
  expect_shown("Hi<|im_start|>Hi", " Hi<|im_start|> Hi");
  // An added id past config.json's vocabulary names where the ids come from.
  config.vocab_size = 513;
  {
    auto r = load();
    ASSERT_TRUE(std::holds_alternative<std::string>(r));
    EXPECT_NE(std::get<std::string>(r).find("tokenizer.model with the added tokens of tokenizer.json or "
                                            "tokenizer_config.json: 514 ids, but config.json's vocab_size is 513"),
              std::string::npos)
      << std::get<std::string>(r);
  }
  config.vocab_size = 516;
  std::ofstream(d / "tokenizer.json") << R"({"added_tokens": [{"id": "x", "content": "<|im_end|>"}]})";
  auto bad = load();
  ASSERT_TRUE(std::holds_alternative<std::string>(bad));
  EXPECT_NE(std::get<std::string>(bad).find("tokenizer.json: added_tokens[0].id: must be a token id"), std::string::npos)
    << std::get<std::string>(bad);
  std::ofstream(d / "tokenizer.json") << R"({"added_tokens": [{"id": 512, "content": "a"}, {"id": 513, "content": "a"}]})";
  bad = load();
  ASSERT_TRUE(std::holds_alternative<std::string>(bad));
  EXPECT_NE(std::get<std::string>(bad).find("added_tokens[1]: \"a\" is added twice"), std::string::npos)
    << std::get<std::string>(bad);
  fs::remove(d / "tokenizer.json");
  std::ofstream(d / "tokenizer_config.json") << R"({"added_tokens_decoder": {"5x": {"content": "<|im_end|>"}}})";
  bad = load();
  ASSERT_TRUE(std::holds_alternative<std::string>(bad));
  EXPECT_NE(std::get<std::string>(bad).find("tokenizer_config.json: added_tokens_decoder: key \"5x\" is not a token id"),
            std::string::npos)
    << std::get<std::string>(bad);
  std::error_code ec;
  fs::remove_all(d, ec);
}

TEST_F(sp_tokenizer_test, the_dummy_prefix_goes_where_the_prefix_scheme_says) {
  using scheme = sp_tokenizer::prefix_scheme;
  std::vector<troupe::gpu::added_token> added{{.content = "<|user|>", .match = {}, .id = 512, .special = true}};
  const auto load = [&](scheme s) {
    auto r = sp_tokenizer::load(dir_ + "/tokenizer.model", 1, 2, added, s);
    EXPECT_TRUE(std::holds_alternative<std::unique_ptr<sp_tokenizer>>(r));
    return std::move(std::get<std::unique_ptr<sp_tokenizer>>(r));
  };
  const auto always = load(scheme::always), first = load(scheme::first), never = load(scheme::never);
  const auto text = [](const sp_tokenizer& t, const std::vector<std::int32_t>& ids) {
    std::string s;
    for (std::size_t i = 1; i < ids.size(); ++i)
      s += t.shown(ids[i], true);
    return s;
  };
  // Every piece between special tokens, only the text's start, or none.
  const std::string turn = "Hello<|user|>Hello</s>Hi there";
  EXPECT_EQ(text(*always, always->encode(turn)), " Hello<|user|> Hello</s> Hi there");
  EXPECT_EQ(text(*first, first->encode(turn)), " Hello<|user|>Hello</s>Hi there");
  EXPECT_EQ(text(*never, never->encode(turn)), "Hello<|user|>Hello</s>Hi there");
  // A text that begins with a special token has no start to prefix.
  EXPECT_EQ(text(*first, first->encode("<|user|>Hi")), "<|user|>Hi");
  // A blank written after the token is the piece's own.
  EXPECT_EQ(text(*first, first->encode("<|user|> Hi")), "<|user|> Hi");
  // Without a prefix the pieces are the text's alone, not the prefixed
  // text's with its first piece cut.
  const auto plain = never->encode("Hello");
  const auto prefixed = always->encode("Hello");
  EXPECT_NE(plain, prefixed);
  EXPECT_EQ(first->encode("Hello"), prefixed);
}

TEST_F(sp_tokenizer_test, common_words_become_few_pieces) {
  const auto ids = tok_->encode("the water and the bread");
  EXPECT_LT(ids.size(), 12u); // far fewer than 23 bytes + BOS
}

TEST(sp_tokenizer_load, bad_path_names_the_file) {
  const std::string path = "/nonexistent/troupe/tokenizer.model";
  auto r = sp_tokenizer::load(path, 1, 2);
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find(path), std::string::npos) << std::get<std::string>(r);
}

TEST(sp_tokenizer_load, not_a_model_names_the_file) {
  const std::string path = (fs::temp_directory_path() / "troupe_sp_not_a_model.model").string();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("this is not a protobuf", f);
    std::fclose(f);
  }
  auto r = sp_tokenizer::load(path, 1, 2);
  std::filesystem::remove(path);
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find(path), std::string::npos) << std::get<std::string>(r);
}

} // namespace
