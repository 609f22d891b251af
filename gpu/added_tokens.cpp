// Added tokens: reading Hugging Face's lists of them and cutting them out of
// a text as its added vocabulary does.
#include "gpu/added_tokens.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace troupe::gpu {

namespace {

using json = nlohmann::json;

/// A character of a word, for single_word added tokens: ASCII letters,
/// digits and '_', and every non-ASCII character.
bool is_word_byte(unsigned char c) {
  return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c == '_';
}

/// One entry's fields; the error names source, `where` and the field.
std::variant<added_token, std::string> read_entry(const json& t, const json& id, const std::string& source,
                                                  const std::string& where) {
  const auto fail = [&](const std::string& field, const std::string& what) {
    return source + ": " + where + field + ": " + what;
  };
  added_token a;
  if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > max_added_token_id)
    return fail(".id", "must be a token id in 0.." + std::to_string(max_added_token_id) + ", got " + id.dump());
  a.id = static_cast<std::int32_t>(id.get<std::int64_t>());
  const json& content = t.at("content");
  if (!content.is_string())
    return fail(".content", "must be a string, got " + std::string{content.type_name()});
  a.content = content.get<std::string>();
  if (a.content.empty())
    return fail(".content", "must not be empty");
  const auto flag = [&](const char* key, bool fallback, bool& out) -> std::string {
    out = fallback;
    if (!t.contains(key) || t.at(key).is_null())
      return {};
    if (!t.at(key).is_boolean())
      return fail(std::string{"."} + key, "must be true or false, got " + std::string{t.at(key).type_name()});
    out = t.at(key).get<bool>();
    return {};
  };
  for (const auto& [key, fallback, out] :
       {std::tuple<const char*, bool, bool*>{"special", false, &a.special}, {"lstrip", false, &a.lstrip},
        {"rstrip", false, &a.rstrip}, {"single_word", false, &a.single_word}})
    if (auto e = flag(key, fallback, *out); !e.empty())
      return e;
  if (auto e = flag("normalized", !a.special, a.normalized); !e.empty())
    return e;
  return a;
}

/// Reads one entry into `out`: "" or the error (a content given twice
/// among `seen` too).
std::string take_entry(const json& t, const json& id, const std::string& source, const std::string& where,
                       std::set<std::string>& seen, std::vector<added_token>& out) {
  auto a = read_entry(t, id, source, where);
  if (auto* err = std::get_if<std::string>(&a))
    return *err;
  auto& token = std::get<added_token>(a);
  if (!seen.insert(token.content).second)
    return source + ": " + where + ": \"" + token.content + "\" is added twice";
  out.push_back(std::move(token));
  return {};
}

} // namespace

std::variant<std::vector<added_token>, std::string> read_added_tokens(const json& list, const std::string& source,
                                                                      const std::string& where) {
  if (!list.is_array())
    return source + ": " + where + ": must be a list";
  std::vector<added_token> out;
  std::set<std::string> seen;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const std::string at = where + "[" + std::to_string(k) + "]";
    const json& t = list[k];
    if (!t.is_object() || !t.contains("id") || !t.contains("content"))
      return source + ": " + at + ": must be an object with id and content";
    if (auto err = take_entry(t, t.at("id"), source, at, seen, out); !err.empty())
      return err;
  }
  return out;
}

std::variant<std::vector<added_token>, std::string> read_added_tokens_decoder(const json& object,
                                                                              const std::string& source) {
  if (!object.is_object())
    return source + ": added_tokens_decoder: must be an object";
  std::vector<added_token> out;
  std::set<std::string> seen;
  for (const auto& [key, t] : object.items()) {
    const std::string at = "added_tokens_decoder[\"" + key + "\"]";
    if (!t.is_object() || !t.contains("content"))
      return source + ": " + at + ": must be an object with content";
    // The key is the id, written as a decimal string.
    if (key.empty() || key.size() > 9 || !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return source + ": added_tokens_decoder: key \"" + key + "\" is not a token id";
    const json id = std::stoll(key);
    if (auto err = take_entry(t, id, source, at, seen, out); !err.empty())
      return err;
  }
  return out;
}

std::size_t utf8_char(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  std::uint32_t min = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size())
    return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

bool is_unicode_whitespace(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

added_vocabulary::added_vocabulary(std::vector<added_token> tokens) : tokens_(std::move(tokens)) {
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const added_token& x, const added_token& y) { return x.match.size() > y.match.size(); });
  for (std::size_t k = 0; k < tokens_.size(); ++k) {
    const auto& a = tokens_[k];
    if (a.match.empty())
      continue; // never matched
    any_normalized_ = any_normalized_ || a.normalized;
    by_byte_[a.normalized ? 1 : 0][static_cast<unsigned char>(a.match.front())].push_back(k);
  }
}

const added_token* added_vocabulary::at(std::string_view text, std::size_t i, std::size_t floor, int phase,
                                        std::size_t& b, std::size_t& e) const {
  for (const std::size_t k : by_byte_[static_cast<std::size_t>(phase)][static_cast<unsigned char>(text[i])]) {
    const auto& t = tokens_[k];
    if (text.substr(i, t.match.size()) != t.match)
      continue;
    const std::size_t end = i + t.match.size();
    if (t.single_word && ((i > 0 && is_word_byte(static_cast<unsigned char>(text[i - 1]))) ||
                          (end < text.size() && is_word_byte(static_cast<unsigned char>(text[end])))))
      continue;
    b = i;
    e = end;
    if (t.lstrip) {
      while (b > floor) {
        std::size_t s = b - 1;
        while (s > floor && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80)
          --s;
        std::uint32_t cp = 0;
        if (utf8_char(text, s, cp) != b - s || !is_unicode_whitespace(cp))
          break;
        b = s;
      }
    }
    if (t.rstrip) {
      std::uint32_t cp = 0;
      while (e < text.size()) {
        const std::size_t n = utf8_char(text, e, cp);
        if (n == 0 || !is_unicode_whitespace(cp))
          break;
        e += n;
      }
    }
    return &t;
  }
  return nullptr;
}

} // namespace troupe::gpu
