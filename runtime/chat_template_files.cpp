#include "runtime/chat_template_files.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

namespace troupe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    return std::nullopt;
  return text;
}

/// A special token's text (a string, or an added token's {"content"}) into
/// `out`; "" when absent; nullopt when it is neither.
std::optional<std::string> token_text(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null())
    return std::string();
  if (it->is_string())
    return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

/// tokenizer_config.json's template (when `want_template`) and special
/// texts.
std::variant<openai::jinja_source, std::string> read_tokenizer_config(const fs::path& file, bool want_template) {
  const auto name = file.string();
  const auto text = read_text(file);
  if (!text)
    return name + ": cannot be read";
  json cfg;
  try {
    cfg = json::parse(*text);
  } catch (const json::exception& e) {
    return name + ": not JSON: " + e.what();
  }
  if (!cfg.is_object())
    return name + ": must be a JSON object";
  openai::jinja_source out;
  for (auto [key, into] : {std::pair{"bos_token", &out.bos_token}, std::pair{"eos_token", &out.eos_token}}) {
    auto t = token_text(cfg, key);
    if (!t)
      return name + ": \"" + key + "\" must be a string or {\"content\": \"...\"}";
    *into = std::move(*t);
  }
  if (!want_template)
    return out;
  const auto tpl = cfg.find("chat_template");
  if (tpl == cfg.end() || tpl->is_null())
    return name + ": has no \"chat_template\" (the model ships no chat template; set http.chat_template to a built-in "
                  "one, or to \"jinja\" with http.chat_jinja)";
  if (tpl->is_string()) {
    out.text = tpl->get<std::string>();
    return out;
  }
  if (tpl->is_array()) {
    // Named templates: "default", and "tool_use" for chats with tools.
    for (const auto& one : *tpl) {
      if (!one.is_object() || !one.contains("template") || !one["template"].is_string())
        return name + ": \"chat_template\" is a list whose entries must be {\"name\", \"template\": \"...\"}";
      if (one.value("name", json()) == "default")
        out.text = one["template"].get<std::string>();
      else if (one.value("name", json()) == "tool_use")
        out.tool_use_text = one["template"].get<std::string>();
    }
    if (out.text.empty())
      return name + ": \"chat_template\" is a list without a {\"name\": \"default\", \"template\": \"...\"} entry";
    return out;
  }
  return name + ": \"chat_template\" must be a string or a list of {\"name\", \"template\"}";
}

/// `text` with the special texts of `dir`'s tokenizer_config.json (none
/// when it has none).
std::variant<openai::jinja_source, std::string> with_specials_of(const fs::path& dir, std::string text) {
  openai::jinja_source out;
  const auto config = dir / "tokenizer_config.json";
  std::error_code ec;
  if (!dir.empty() && fs::is_regular_file(config, ec)) {
    auto specials = read_tokenizer_config(config, false);
    if (auto* e = std::get_if<std::string>(&specials))
      return std::move(*e);
    out = std::get<openai::jinja_source>(std::move(specials));
  }
  out.text = std::move(text);
  return out;
}

} // namespace

std::variant<openai::jinja_source, std::string> read_model_chat_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  std::error_code ec;
  if (const auto file = dir / "chat_template.jinja"; fs::is_regular_file(file, ec)) {
    auto text = read_text(file);
    if (!text)
      return file.string() + ": cannot be read";
    auto out = with_specials_of(dir, std::move(*text));
    // transformers writes further named templates beside it.
    const auto tool_use = dir / "additional_chat_templates" / "tool_use.jinja";
    if (auto* src = std::get_if<openai::jinja_source>(&out); src && fs::is_regular_file(tool_use, ec)) {
      auto t = read_text(tool_use);
      if (!t)
        return tool_use.string() + ": cannot be read";
      src->tool_use_text = std::move(*t);
    }
    return out;
  }
  const auto config = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(config, ec))
    return model_dir + ": holds neither chat_template.jinja nor tokenizer_config.json, so it has no chat template";
  return read_tokenizer_config(config, true);
}

std::variant<openai::jinja_source, std::string> read_chat_template_file(const std::string& path,
                                                                        const std::string& model_dir) {
  const fs::path file(path);
  if (file.extension() == ".json")
    return read_tokenizer_config(file, true);
  std::error_code ec;
  auto text = fs::is_directory(file, ec) ? std::nullopt : read_text(file);
  if (!text)
    return path + ": cannot be read";
  return with_specials_of(fs::path(model_dir), std::move(*text));
}

std::variant<openai::sampling_defaults, std::string> read_generation_defaults(const std::string& model_dir) {
  const auto file = fs::path(model_dir) / "generation_config.json";
  std::error_code ec;
  if (model_dir.empty() || !fs::is_regular_file(file, ec))
    return openai::sampling_defaults{};
  const auto text = read_text(file);
  if (!text)
    return file.string() + ": cannot be read";
  const auto cfg = json::parse(*text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    return file.string() + ": is not a JSON object";
  openai::sampling_defaults out;
  const auto number = [&](const char* key, double lo, double hi, bool lo_open, const char* range,
                          std::optional<double>& into) -> std::optional<std::string> {
    const auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null())
      return std::nullopt;
    const double v = it->is_number() ? it->get<double>() : -1;
    if (!it->is_number() || v > hi || (lo_open ? v <= lo : v < lo))
      return file.string() + ": \"" + key + "\" must be " + range + ", got " + it->dump();
    into = v;
    return std::nullopt;
  };
  if (auto e = number("temperature", 0, 100, false, "a number between 0 and 100", out.temperature))
    return *e;
  if (auto e = number("top_p", 0, 1, true, "a number above 0 and at most 1", out.top_p))
    return *e;
  const auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi,
                           std::optional<std::int64_t>& into) -> std::optional<std::string> {
    const auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null())
      return std::nullopt;
    if (!it->is_number_integer() || it->get<std::int64_t>() < lo || it->get<std::int64_t>() > hi)
      return file.string() + ": \"" + key + "\" must be an integer between " + std::to_string(lo) + " and "
             + std::to_string(hi) + ", got " + it->dump();
    into = it->get<std::int64_t>();
    return std::nullopt;
  };
  if (auto e = integer("top_k", 0, 2147483647, out.top_k))
    return *e;
  if (auto e = number("min_p", 0, 1, false, "a number between 0 and 1", out.min_p))
    return *e;
  if (auto e = number("repetition_penalty", 0, 100, true, "a number above 0 and at most 100", out.repetition_penalty))
    return *e;
  if (auto e = integer("max_new_tokens", 1, 4294967295, out.max_tokens))
    return *e;
  return out;
}

} // namespace troupe
