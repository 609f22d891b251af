// Output constrained to one JSON object (OpenAI's response_format
// {"type": "json_object"}): a byte-level recognizer of JSON text and, for a
// model's vocabulary, the tokens whose bytes may come next. The scheduler
// bans every other token at each step (gpu::step_entry::logit_adjust), so
// any backend that samples from logits keeps to it, and ends the output
// when the object closes. No CAF, no I/O.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::gpu {
class tokenizer;
}

namespace troupe {

class schema_machine;
class json_pattern;

/// JSON's byte classes (RFC 8259): whitespace between tokens, digits, hex
/// digits.
inline bool json_blank(unsigned char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
inline bool json_digit(unsigned char c) noexcept {
  return c >= '0' && c <= '9';
}
inline bool json_hex(unsigned char c) noexcept {
  return json_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/// Reads JSON text (RFC 8259) byte by byte whose top-level value is an
/// object, and says whether a byte may come next. Strings must be valid
/// UTF-8 (no overlong forms, no surrogates) without raw control
/// characters, and a \u escape of a surrogate must be half of a pair. Two limits keep a sampled output
/// from running away: nesting deeper than max_depth and runs of more than
/// max_blank whitespace bytes between tokens of the JSON are refused.
class json_machine {
public:
  static constexpr std::size_t max_depth = 32;
  static constexpr std::uint32_t max_blank = 32;

  friend class json_vocab;
  friend class schema_machine;

  /// Takes `c` if JSON text that has read this far may go on with it;
  /// otherwise returns false and stays as it was.
  bool feed(unsigned char c);
  /// Takes every byte of `bytes`, or returns false having taken none.
  bool feed(std::string_view bytes);
  /// The top-level object has closed: the text is whole.
  bool complete() const noexcept { return lex_ == lex::done; }
  /// What decides which bytes may follow, as a string (equal keys: the
  /// same bytes may follow from here on).
  std::string key() const;
  /// Inside a string where any plain text may come (no character or
  /// escape begun).
  bool in_text() const noexcept {
    return lex_ == lex::string && utf8_left_ == 0 && surrogate_ == surrogate::none;
  }

private:
  enum class lex : std::uint8_t {
    value,          ///< a value is expected
    value_or_close, ///< just after '[': a value or ']'
    key_or_close,   ///< just after '{': a key or '}'
    key,            ///< after ',' in an object: a key
    colon,          ///< after a key
    after,          ///< after a value in a container: ',' or its close
    string,         ///< in a string (key_ says whether a key)
    escape,         ///< after '\' in a string
    unicode,        ///< in a \u escape: hex_left of its 4 hex digits to go
    number,         ///< in a number (num_ says where)
    literal,        ///< in true, false or null (lit_, lit_at_)
    done,           ///< the top-level object has closed
  };
  enum class num : std::uint8_t { minus, zero, integer, dot, fraction, exp, exp_sign, exponent };

  bool step(unsigned char c);
  bool begin_value(unsigned char c);
  bool close(unsigned char c);
  void value_ended();
  bool blank(unsigned char c);

  lex lex_ = lex::value;
  num num_ = num::zero;
  bool key_ = false;
  std::uint8_t hex_left_ = 0;
  /// \u escapes of UTF-16 surrogates come in pairs, a high half (D800-DBFF)
  /// and then a low one (DC00-DFFF), as JSON parsers that decode them need.
  enum class surrogate : std::uint8_t {
    none,
    first_d,  ///< this escape's first digit is D: maybe a half
    high,     ///< this escape is a high half
    want_low, ///< a high half was written: a \u escape of a low one must follow
  };
  surrogate surrogate_ = surrogate::none;
  std::uint8_t utf8_left_ = 0;   ///< continuation bytes to come
  unsigned char utf8_lo_ = 0x80; ///< the next one's least and greatest
  unsigned char utf8_hi_ = 0xBF; ///< (no overlong form, no surrogate)
  std::uint8_t lit_ = 0;    ///< 0 true, 1 false, 2 null
  std::uint8_t lit_at_ = 0; ///< bytes of it read
  std::uint32_t blank_ = 0; ///< whitespace bytes in a row
  std::string stack_;       ///< '{' and '[' open, innermost last
};

/// A vocabulary's tokens by their bytes, for finding those a json_machine
/// takes whole. Tokens that stand for no text (special tokens, the
/// end-of-sequence token among them) are never allowed. Keeps the last
/// answers by machine key (most states recur: inside a string, after a
/// value at one depth).
class json_vocab {
public:
  explicit json_vocab(const gpu::tokenizer& vocab, std::size_t cached_states = 64);
  ~json_vocab();
  json_vocab(const json_vocab&) = delete;
  json_vocab& operator=(const json_vocab&) = delete;

  /// The tokens `m` takes whole and the rest, each ascending.
  struct token_split {
    std::vector<std::int32_t> allowed;
    std::vector<std::int32_t> banned;
  };
  std::shared_ptr<const token_split> split(const json_machine& m);
  /// The same for a machine that holds the text to a JSON Schema.
  std::shared_ptr<const token_split> split(const schema_machine& m);
  /// split(m)'s allowed tokens.
  template <class Machine>
  std::shared_ptr<const std::vector<std::int32_t>> allowed(const Machine& m) {
    auto s = split(m);
    return {s, &s->allowed};
  }
  /// Token `t`'s bytes ("" for one that stands for no text or is out of
  /// range).
  std::string_view bytes(std::int32_t t) const;
  std::int32_t size() const noexcept { return static_cast<std::int32_t>(bytes_.size()); }

private:
  struct node {
    std::vector<std::pair<unsigned char, std::uint32_t>> next; ///< by byte
    std::vector<std::int32_t> tokens;                          ///< ending here
  };
  using trie = std::vector<node>;
  static void insert(trie& t, std::string_view bytes, std::int32_t token);
  template <class Machine>
  static void walk(const trie& t, std::uint32_t at, const Machine& m, std::vector<std::int32_t>& out);
  /// walk() for a schema machine `m` in a string value held to pattern
  /// `p`: the string's bytes step the JSON recognizer and the pattern
  /// alone (`lex`, `states`, `cp`); a byte that closes the string goes to
  /// a copy of `m` fed `prefix` (the bytes walked so far), which walks on.
  static void walk_pattern(const trie& t, std::uint32_t at, const schema_machine& m, const json_pattern& p,
                           const json_machine& lex, const std::vector<std::uint16_t>& states, std::uint32_t cp,
                           std::string& prefix, std::vector<std::int32_t>& out);
  /// split() for a machine whose key is `k`; `in_text`: it is inside a
  /// string that plain text keeps as it is.
  template <class Machine>
  std::shared_ptr<const token_split> split(const Machine& m, std::string k, bool in_text);

  std::vector<std::string> bytes_;
  trie trie_;
  /// Inside a string (no character begun), most tokens are plain text that
  /// leaves the string as it was: those (ascending), and a trie of the
  /// rest, the only ones such a state needs to walk.
  std::vector<std::int32_t> plain_;
  trie unplain_;
  std::size_t cached_states_;
  std::list<std::pair<std::string, std::shared_ptr<const token_split>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> by_key_;
};

} // namespace troupe
