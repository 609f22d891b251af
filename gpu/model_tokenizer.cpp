#include "gpu/model_tokenizer.hpp"

#include "gpu/bpe_tokenizer.hpp"
#include "gpu/json_bounded.hpp"
#include "gpu/sp_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace troupe::gpu {

namespace {

/// A loaded tokenizer with the model's full set of end ids.
class ended_tokenizer final : public tokenizer {
public:
  ended_tokenizer(std::unique_ptr<tokenizer> inner, std::vector<std::int32_t> ends)
    : inner_(std::move(inner)), ends_(std::move(ends)) {}

  std::vector<std::int32_t> encode(const std::string& text) const override { return inner_->encode(text); }
  std::string decode(std::int32_t token) const override { return inner_->decode(token); }
  std::string special_text(std::int32_t token) const override { return inner_->special_text(token); }
  std::int32_t vocab_size() const override { return inner_->vocab_size(); }
  std::int32_t eos_token() const override { return inner_->eos_token(); }
  std::vector<std::int32_t> end_tokens() const override { return ends_; }

private:
  std::unique_ptr<tokenizer> inner_;
  std::vector<std::int32_t> ends_;
};

/// What Hugging Face's files say of a SentencePiece model: its added
/// tokens and where the dummy prefix goes.
struct sentencepiece_extras {
  std::vector<added_token> added;
  sp_tokenizer::prefix_scheme prefix = sp_tokenizer::prefix_scheme::always;
};

/// The step of `type` in a tokenizer.json normalizer or pre-tokenizer (the
/// step itself, or one of a Sequence's), or nullptr.
const nlohmann::json* step_of(const nlohmann::json& doc, const char* part, std::string_view type) {
  if (!doc.contains(part) || !doc.at(part).is_object())
    return nullptr;
  const auto& p = doc.at(part);
  if (p.value("type", "") == type)
    return &p;
  for (const char* list : {"normalizers", "pretokenizers"})
    if (p.contains(list) && p.at(list).is_array())
      for (const auto& s : p.at(list))
        if (s.is_object() && s.value("type", "") == type)
          return &s;
  return nullptr;
}

/// Reads `path` as JSON; the error names it.
std::variant<nlohmann::json, std::string> read_json(const std::string& path) {
  std::ifstream f{path, std::ios::binary};
  std::ostringstream text;
  text << f.rdbuf();
  if (!f && !f.eof())
    return path + ": cannot read";
  bool too_deep = false;
  nlohmann::json doc = detail::parse_bounded(text.str(), too_deep, false);
  if (doc.is_discarded() || too_deep || !doc.is_object())
    return path + ": not valid JSON (an object)";
  return doc;
}

/// tokenizer.json's added_tokens (or else tokenizer_config.json's
/// added_tokens_decoder), and its normalizer's Prepend (every piece
/// prefixed) or pre-tokenizer's Metaspace prepend_scheme; without
/// tokenizer.json, tokenizer_config.json's legacy false is "first" and
/// add_prefix_space false "never" (Hugging Face's LlamaTokenizer's).
std::variant<sentencepiece_extras, std::string> sentencepiece_extras_of(const std::string& model_dir) {
  namespace fs = std::filesystem;
  using scheme = sp_tokenizer::prefix_scheme;
  sentencepiece_extras out;
  bool have_added = false;
  // Keeps a list read (the first file's), or the error.
  const auto take = [&](std::variant<std::vector<added_token>, std::string> read) -> std::optional<std::string> {
    if (auto* err = std::get_if<std::string>(&read))
      return *err;
    out.added = std::move(std::get<std::vector<added_token>>(read));
    have_added = true;
    return std::nullopt;
  };
  const std::string fast = model_dir + "/tokenizer.json";
  if (fs::exists(fast)) {
    auto read = read_json(fast);
    if (auto* err = std::get_if<std::string>(&read))
      return *err;
    const auto& doc = std::get<nlohmann::json>(read);
    if (doc.contains("added_tokens") && !doc.at("added_tokens").is_null())
      if (auto err = take(read_added_tokens(doc.at("added_tokens"), fast)))
        return *err;
    if (const auto* meta = step_of(doc, "pre_tokenizer", "Metaspace"); meta && !step_of(doc, "normalizer", "Prepend")) {
      const std::string s = meta->contains("prepend_scheme") && meta->at("prepend_scheme").is_string()
                              ? meta->at("prepend_scheme").get<std::string>()
                              : meta->value("add_prefix_space", true) ? "always" : "never";
      if (s != "always" && s != "first" && s != "never")
        return fast + ": pre_tokenizer: Metaspace's prepend_scheme \"" + s + "\" is not always, first or never";
      out.prefix = s == "first" ? scheme::first : s == "never" ? scheme::never : scheme::always;
    }
  }
  const std::string config = model_dir + "/tokenizer_config.json";
  if (fs::exists(config)) {
    auto read = read_json(config);
    if (auto* err = std::get_if<std::string>(&read))
      return *err;
    const auto& doc = std::get<nlohmann::json>(read);
    if (!have_added && doc.contains("added_tokens_decoder") && !doc.at("added_tokens_decoder").is_null())
      if (auto err = take(read_added_tokens_decoder(doc.at("added_tokens_decoder"), config)))
        return *err;
    if (!fs::exists(fast)) {
      if (doc.contains("legacy") && doc.at("legacy") == false)
        out.prefix = scheme::first;
      if (doc.contains("add_prefix_space") && doc.at("add_prefix_space") == false)
        out.prefix = scheme::never;
    }
  }
  return out;
}

} // namespace

std::variant<std::vector<std::int32_t>, std::string> parse_generation_eos(std::string_view json_text,
                                                                          const std::string& source) {
  bool too_deep = false;
  const nlohmann::json doc = detail::parse_bounded(json_text, too_deep, false);
  if (doc.is_discarded() || too_deep)
    return source + ": not valid JSON";
  if (!doc.is_object())
    return source + ": expected a JSON object at the top level";
  std::vector<std::int32_t> out;
  if (!doc.contains("eos_token_id") || doc.at("eos_token_id").is_null())
    return out;
  const auto& v = doc.at("eos_token_id");
  const auto one = [&](const nlohmann::json& id) -> bool {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > INT32_MAX)
      return false;
    out.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
    return true;
  };
  bool ok = true;
  if (v.is_array())
    for (const auto& id : v)
      ok = ok && one(id);
  else
    ok = one(v);
  if (!ok)
    return source + ": eos_token_id: must be a token id or a list of them, got " + v.dump();
  return out;
}

std::variant<std::unique_ptr<tokenizer>, std::string> load_model_tokenizer(const std::string& model_dir,
                                                                           const llama_config& config) {
  namespace fs = std::filesystem;
  const auto eos = config.eos_token_ids.empty() ? -1 : config.eos_token_ids.front();
  std::unique_ptr<tokenizer> tok;
  std::string path = model_dir + "/tokenizer.model";
  if (fs::exists(path)) {
    auto extras = sentencepiece_extras_of(model_dir);
    if (auto* err = std::get_if<std::string>(&extras))
      return *err;
    auto& e = std::get<sentencepiece_extras>(extras);
    const bool added = !e.added.empty();
    auto sp = sp_tokenizer::load(path, config.bos_token_id, eos, std::move(e.added), e.prefix);
    if (auto* err = std::get_if<std::string>(&sp))
      return *err;
    tok = std::move(std::get<std::unique_ptr<sp_tokenizer>>(sp));
    if (added) // the ids past the pieces come from them
      path += " with the added tokens of tokenizer.json or tokenizer_config.json";
  } else {
    path = model_dir + "/tokenizer.json";
    if (!fs::exists(path))
      return model_dir + ": has neither tokenizer.model (SentencePiece) nor tokenizer.json (byte-level BPE)";
    auto bpe = bpe_tokenizer::load(path, eos);
    if (auto* err = std::get_if<std::string>(&bpe))
      return *err;
    tok = std::move(std::get<std::unique_ptr<bpe_tokenizer>>(bpe));
  }
  if (tok->vocab_size() > static_cast<std::int32_t>(config.vocab_size))
    return path + ": " + std::to_string(tok->vocab_size()) + " ids, but config.json's vocab_size is " +
           std::to_string(config.vocab_size);

  std::vector<std::int32_t> ends = config.eos_token_ids;
  const std::string generation = model_dir + "/generation_config.json";
  if (fs::exists(generation)) {
    std::ifstream f{generation, std::ios::binary};
    std::ostringstream text;
    text << f.rdbuf();
    auto more = parse_generation_eos(text.str(), generation);
    if (auto* err = std::get_if<std::string>(&more))
      return *err;
    for (const auto id : std::get<std::vector<std::int32_t>>(more))
      if (std::find(ends.begin(), ends.end(), id) == ends.end())
        ends.push_back(id);
  }
  for (const auto id : ends)
    if (id >= static_cast<std::int32_t>(config.vocab_size))
      return model_dir + ": end-of-sequence id " + std::to_string(id) + " is outside the vocabulary of " +
             std::to_string(config.vocab_size);
  return std::unique_ptr<tokenizer>(std::make_unique<ended_tokenizer>(std::move(tok), std::move(ends)));
}

} // namespace troupe::gpu
