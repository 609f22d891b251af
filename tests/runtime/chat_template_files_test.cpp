// Where a Hugging Face chat template is read from: a model directory's
// chat_template.jinja or tokenizer_config.json, or a file named in the
// config; errors name the file.
#include "runtime/chat_template_files.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace troupe {
namespace {

namespace fs = std::filesystem;

class chat_template_files : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("troupe_chat_tpl_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string dir() const { return dir_.string(); }

  openai::jinja_source ok(const std::variant<openai::jinja_source, std::string>& r) {
    if (const auto* e = std::get_if<std::string>(&r)) {
      ADD_FAILURE() << *e;
      return {};
    }
    return std::get<openai::jinja_source>(r);
  }
  std::string failed(const std::variant<openai::jinja_source, std::string>& r) {
    if (!std::holds_alternative<std::string>(r)) {
      ADD_FAILURE() << "read: " << std::get<openai::jinja_source>(r).text;
      return {};
    }
    return std::get<std::string>(r);
  }

  fs::path dir_;
};

TEST_F(chat_template_files, a_model_directory_gives_its_tokenizer_configs_template_and_special_texts) {
  write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}x", "bos_token": "<s>",
                                     "eos_token": {"content": "</s>", "lstrip": false}})");
  auto s = ok(read_model_chat_template(dir()));
  EXPECT_EQ(s.text, "{{ bos_token }}x");
  EXPECT_EQ(s.bos_token, "<s>");
  EXPECT_EQ(s.eos_token, "</s>") << "an added token's content";

  // chat_template.jinja (transformers' newer layout) comes first; the
  // special texts still come from tokenizer_config.json.
  write("chat_template.jinja", "from the file\n");
  s = ok(read_model_chat_template(dir()));
  EXPECT_EQ(s.text, "from the file\n");
  EXPECT_EQ(s.bos_token, "<s>");

  // Named templates: "default" is the chat template.
  fs::remove(dir_ / "chat_template.jinja");
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                        {"name": "default", "template": "D"}]})");
  s = ok(read_model_chat_template(dir()));
  EXPECT_EQ(s.text, "D");
  EXPECT_EQ(s.tool_use_text, "T") << "the one for chats with tools";
  EXPECT_EQ(s.bos_token, "") << "none given";

  // Beside chat_template.jinja, transformers writes the named ones in
  // additional_chat_templates/.
  write("chat_template.jinja", "J");
  fs::create_directories(dir_ / "additional_chat_templates");
  write("additional_chat_templates/tool_use.jinja", "JT");
  s = ok(read_model_chat_template(dir()));
  EXPECT_EQ(s.text, "J");
  EXPECT_EQ(s.tool_use_text, "JT");
}

TEST_F(chat_template_files, a_model_without_a_template_or_with_a_bad_file_is_refused_naming_it) {
  EXPECT_NE(failed(read_model_chat_template(dir())).find("holds neither chat_template.jinja nor tokenizer_config.json"),
            std::string::npos);
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  const auto none = failed(read_model_chat_template(dir()));
  EXPECT_NE(none.find("tokenizer_config.json: has no \"chat_template\""), std::string::npos) << none;
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_NE(failed(read_model_chat_template(dir())).find("without a {\"name\": \"default\""), std::string::npos);
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})");
  EXPECT_NE(failed(read_model_chat_template(dir())).find("whose entries must be"), std::string::npos);
  write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_NE(failed(read_model_chat_template(dir())).find("must be a string or a list"), std::string::npos);
  write("tokenizer_config.json", R"({"chat_template": "x", "eos_token": 2})");
  EXPECT_NE(failed(read_model_chat_template(dir())).find("\"eos_token\" must be a string or {\"content\""),
            std::string::npos);
  write("tokenizer_config.json", "{not json");
  EXPECT_NE(failed(read_model_chat_template(dir())).find("tokenizer_config.json: not JSON"), std::string::npos);
}

TEST_F(chat_template_files, a_template_file_is_its_text_or_a_tokenizer_config) {
  write("t.jinja", "{{ messages }}");
  auto s = ok(read_chat_template_file((dir_ / "t.jinja").string(), ""));
  EXPECT_EQ(s.text, "{{ messages }}");
  EXPECT_EQ(s.bos_token, "");
  // With a model directory, its special texts.
  write("tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})");
  s = ok(read_chat_template_file((dir_ / "t.jinja").string(), dir()));
  EXPECT_EQ(s.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(s.eos_token, "<|eot_id|>");
  // A .json file is a tokenizer_config.json.
  write("other.json", R"({"chat_template": "J", "bos_token": "B"})");
  s = ok(read_chat_template_file((dir_ / "other.json").string(), ""));
  EXPECT_EQ(s.text, "J");
  EXPECT_EQ(s.bos_token, "B");
  EXPECT_NE(failed(read_chat_template_file((dir_ / "missing.jinja").string(), "")).find("missing.jinja: cannot be read"),
            std::string::npos);
  EXPECT_NE(failed(read_chat_template_file(dir(), "")).find("cannot be read"), std::string::npos) << "a directory";
}

TEST_F(chat_template_files, generation_config_gives_the_sampling_defaults_it_holds_and_refuses_bad_ones) {
  auto defaults = [&](const std::string& text) {
    write("generation_config.json", text);
    return read_generation_defaults(dir());
  };
  // No file (or no directory): none.
  auto none = read_generation_defaults(dir());
  ASSERT_TRUE(std::holds_alternative<openai::sampling_defaults>(none));
  EXPECT_EQ(std::get<openai::sampling_defaults>(none), openai::sampling_defaults{});
  EXPECT_EQ(std::get<openai::sampling_defaults>(read_generation_defaults("")), openai::sampling_defaults{});
  // Qwen2.5 Instruct's: every key it has, none it lacks.
  auto qwen = defaults(R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
    "pad_token_id": 151643, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20})");
  ASSERT_TRUE(std::holds_alternative<openai::sampling_defaults>(qwen)) << std::get<std::string>(qwen);
  const auto q = std::get<openai::sampling_defaults>(qwen);
  EXPECT_EQ(q.temperature, 0.7);
  EXPECT_EQ(q.top_p, 0.8);
  EXPECT_EQ(q.top_k, 20);
  EXPECT_EQ(q.repetition_penalty, 1.05);
  EXPECT_FALSE(q.min_p);
  EXPECT_FALSE(q.max_tokens);
  auto llama = defaults(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": null})");
  const auto l = std::get<openai::sampling_defaults>(llama);
  EXPECT_EQ(l.temperature, 0.6);
  EXPECT_FALSE(l.top_k);
  EXPECT_FALSE(l.repetition_penalty);
  // A min_p, and the max_tokens of a chat that gives none.
  const auto capped = std::get<openai::sampling_defaults>(defaults(R"({"min_p": 0.05, "max_new_tokens": 2048})"));
  EXPECT_EQ(capped.min_p, 0.05);
  EXPECT_EQ(capped.max_tokens, 2048);
  // Out of range or of the wrong type: refused, naming the file and key.
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
         {R"({"temperature": -0.1})", "\"temperature\" must be a number between 0 and 100, got -0.1"},
         {R"({"temperature": "0.7"})", "\"temperature\" must be a number between 0 and 100"},
         {R"({"top_p": 0})", "\"top_p\" must be a number above 0 and at most 1, got 0"},
         {R"({"top_p": 1.5})", "\"top_p\""},
         {R"({"top_k": 2.5})", "\"top_k\" must be an integer between 0 and 2147483647, got 2.5"},
         {R"({"top_k": -1})", "\"top_k\""},
         {R"({"min_p": 1.5})", "\"min_p\" must be a number between 0 and 1, got 1.5"},
         {R"({"repetition_penalty": 0})", "\"repetition_penalty\" must be a number above 0 and at most 100, got 0"},
         {R"({"max_new_tokens": 0})", "\"max_new_tokens\" must be an integer between 1 and 4294967295, got 0"},
         {R"([1])", "is not a JSON object"},
         {"{", "is not a JSON object"}}) {
    const auto r = defaults(text);
    ASSERT_TRUE(std::holds_alternative<std::string>(r)) << text;
    const auto& e = std::get<std::string>(r);
    EXPECT_NE(e.find("generation_config.json: "), std::string::npos) << e;
    EXPECT_NE(e.find(says), std::string::npos) << e;
  }
}

} // namespace
} // namespace troupe
