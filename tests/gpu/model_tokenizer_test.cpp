// load_model_tokenizer: which file of a model directory is read, the end
// tokens from config.json and generation_config.json, and the refusals.

#include "gpu/bpe_tokenizer.hpp"
#include "gpu/model_tokenizer.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using namespace troupe::gpu;
namespace fs = std::filesystem;

std::vector<std::int32_t> eos_of(std::string_view text) {
  auto r = parse_generation_eos(text, "generation_config.json");
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    return {};
  }
  return std::get<std::vector<std::int32_t>>(r);
}

TEST(model_tokenizer, generation_config_gives_one_end_id_or_several) {
  EXPECT_EQ(eos_of(R"({"bos_token_id": 1})"), std::vector<std::int32_t>{});
  EXPECT_EQ(eos_of(R"({"eos_token_id": null})"), std::vector<std::int32_t>{});
  EXPECT_EQ(eos_of(R"({"eos_token_id": 7})"), std::vector<std::int32_t>{7});
  EXPECT_EQ(eos_of(R"({"eos_token_id": [128001, 128008, 128009]})"), (std::vector<std::int32_t>{128001, 128008, 128009}));
  for (const char* bad : {R"({"eos_token_id": -1})", R"({"eos_token_id": "x"})", R"({"eos_token_id": [1, 2.5]})",
                          R"({"eos_token_id": 4294967296})"}) {
    auto r = parse_generation_eos(bad, "g.json");
    ASSERT_TRUE(std::holds_alternative<std::string>(r)) << bad;
    EXPECT_EQ(std::get<std::string>(r).rfind("g.json: eos_token_id: must be a token id", 0), 0u) << bad;
  }
  auto r = parse_generation_eos("[", "g.json");
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_EQ(std::get<std::string>(r), "g.json: not valid JSON");
}

class model_dir : public ::testing::Test {
protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "troupe_tok_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    bpe_training o;
    o.vocab_size = 300;
    o.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"};
    o.bos_token = "<|begin_of_text|>";
    const auto t = train_bpe_json("the cat sat on the mat, the cat sat on the hat", o);
    ASSERT_EQ(t.error, "");
    write("tokenizer.json", t.json);
    config_.vocab_size = 303;
    config_.bos_token_id = 300;
    config_.eos_token_ids = {301};
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  std::unique_ptr<tokenizer> load() {
    auto r = load_model_tokenizer(dir_.string(), config_);
    if (auto* err = std::get_if<std::string>(&r)) {
      ADD_FAILURE() << *err;
      return nullptr;
    }
    return std::move(std::get<std::unique_ptr<tokenizer>>(r));
  }
  std::string refusal() {
    auto r = load_model_tokenizer(dir_.string(), config_);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "(loaded)";
  }

  fs::path dir_;
  llama_config config_;
};

TEST_F(model_dir, a_tokenizer_json_is_read_with_the_end_ids_of_both_configs) {
  auto t = load();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->eos_token(), 301);
  EXPECT_EQ(t->end_tokens(), std::vector<std::int32_t>{301});
  EXPECT_EQ(t->vocab_size(), 303);
  const auto ids = t->encode("the cat<|eot_id|>");
  EXPECT_EQ(ids.front(), 300) << "BOS from the post-processor";
  EXPECT_EQ(ids.back(), 302);
  EXPECT_EQ(t->special_text(302), "<|eot_id|>") << "through the model's tokenizer";
  write("generation_config.json", R"({"eos_token_id": [301, 302]})");
  t = load();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->end_tokens(), (std::vector<std::int32_t>{301, 302}));
  EXPECT_EQ(t->eos_token(), 301);
}

TEST_F(model_dir, what_cannot_be_served_is_refused_naming_the_file) {
  config_.vocab_size = 302; // the tokenizer has 303 ids
  EXPECT_NE(refusal().find("tokenizer.json: 303 ids, but config.json's vocab_size is 302"), std::string::npos)
    << refusal();
  config_.vocab_size = 303;
  write("generation_config.json", R"({"eos_token_id": [301, 400]})");
  EXPECT_NE(refusal().find("end-of-sequence id 400 is outside the vocabulary of 303"), std::string::npos) << refusal();
  write("generation_config.json", R"({"eos_token_id": "x"})");
  EXPECT_NE(refusal().find("generation_config.json: eos_token_id"), std::string::npos) << refusal();
  fs::remove(dir_ / "generation_config.json");
  // tokenizer.model comes first: a bad one is what is reported.
  write("tokenizer.model", "not a sentencepiece model");
  EXPECT_NE(refusal().find("tokenizer.model: cannot load SentencePiece model"), std::string::npos) << refusal();
  fs::remove(dir_ / "tokenizer.model");
  fs::remove(dir_ / "tokenizer.json");
  EXPECT_NE(refusal().find("has neither tokenizer.model (SentencePiece) nor tokenizer.json"), std::string::npos)
    << refusal();
}

} // namespace
