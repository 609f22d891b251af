// Hugging Face's added tokens (tokenizer.json's "added_tokens",
// tokenizer_config.json's "added_tokens_decoder"): read, indexed, and cut
// out of a text before the model's own tokenizer sees it. Shared by the
// byte-level BPE tokenizer and the SentencePiece one.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::gpu {

struct added_token {
  std::string content;
  /// What the text must hold: the content, normalized for a normalized
  /// token (one matched in the normalized text).
  std::string match;
  std::int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false; ///< blanks before it are taken with it
  bool rstrip = false; ///< blanks after it are taken with it
  bool single_word = false;
};

/// Ids a tokenizer file may give: 0 to 2^24 - 1.
inline constexpr std::int64_t max_added_token_id = (std::int64_t{1} << 24) - 1;

/// The entries of tokenizer.json's "added_tokens" list (`where` names it in
/// errors, "added_tokens"), each {"id", "content", "special", "normalized",
/// "lstrip", "rstrip", "single_word"} with Hugging Face's defaults
/// (normalized unless special), `match` left to the caller. An error names
/// `source`, the entry and the field; a content given twice is refused.
std::variant<std::vector<added_token>, std::string> read_added_tokens(const nlohmann::json& list,
                                                                      const std::string& source,
                                                                      const std::string& where = "added_tokens");

/// The same from tokenizer_config.json's "added_tokens_decoder", an object
/// from each id (as a string) to its fields.
std::variant<std::vector<added_token>, std::string> read_added_tokens_decoder(const nlohmann::json& object,
                                                                              const std::string& source);

/// The well-formed UTF-8 character at s[i]: its length, and cp; 0 when the
/// bytes there are not one (stray continuation, overlong, surrogate, cut).
std::size_t utf8_char(std::string_view s, std::size_t i, std::uint32_t& cp);

/// Unicode's White_Space characters (what Hugging Face's lstrip and rstrip
/// take).
bool is_unicode_whitespace(std::uint32_t cp);

/// Added tokens indexed by the first byte of their match, longest first.
class added_vocabulary {
public:
  added_vocabulary() = default;
  /// `tokens` with `match` set (not empty).
  explicit added_vocabulary(std::vector<added_token> tokens);

  /// Longest match first.
  const std::vector<added_token>& tokens() const noexcept { return tokens_; }
  bool empty() const noexcept { return tokens_.empty(); }
  bool any_normalized() const noexcept { return any_normalized_; }

  /// The token of `phase` (0: not normalized, found in the raw text; 1:
  /// normalized) matching at text[i], longest first, with its range after
  /// lstrip (not before `floor`) and rstrip in [b, e); nullptr when none.
  const added_token* at(std::string_view text, std::size_t i, std::size_t floor, int phase, std::size_t& b,
                        std::size_t& e) const;

  /// Cuts `text` at the tokens of `phase`, as Hugging Face's added
  /// vocabulary does (leftmost first, then longest): the text before,
  /// between and after them to on_text (empty pieces too), each token's id
  /// to `out`.
  template <class OnText>
  void split(std::string_view text, int phase, std::vector<std::int32_t>& out, OnText&& on_text) const {
    std::size_t from = 0; // start of the text not yet passed on
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t b = 0, e = 0;
      const added_token* t = at(text, i, from, phase, b, e);
      if (t == nullptr) {
        ++i;
        continue;
      }
      on_text(text.substr(from, b - from));
      out.push_back(t->id);
      from = i = e;
    }
    on_text(text.substr(from));
  }

private:
  std::vector<added_token> tokens_;
  std::array<std::array<std::vector<std::size_t>, 256>, 2> by_byte_;
  bool any_normalized_ = false;
};

} // namespace troupe::gpu
