// JSON text read byte by byte (RFC 8259): the recognizer behind output held
// to JSON (runtime/json_constraint, runtime/json_schema) and behind reading
// a model's tool calls as they stream (messages/tool_calls). Nothing but
// the standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace troupe {

/// Feeds every byte of `bytes` through `step` (a machine's own byte step,
/// which takes a byte or refuses it) to a copy of `m`, which replaces `m`
/// only when it took them all: the machines' feed(string_view).
template <class Machine, class Step>
bool feed_all(Machine& m, std::string_view bytes, Step step) {
  Machine next = m;
  for (const char c : bytes)
    if (!step(next, static_cast<unsigned char>(c)))
      return false;
  m = std::move(next);
  return true;
}

class schema_machine;
class json_vocab;

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
/// object (or, in a schema_machine whose schema allows it, an array), and says whether a byte may come next. Strings must be valid
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
  /// The top-level value has closed: the text is whole.
  bool complete() const noexcept { return lex_ == lex::done; }
  /// What decides which bytes may follow, as a string (equal keys: the
  /// same bytes may follow from here on).
  std::string key() const;
  /// Inside a string where any plain text may come (no character or
  /// escape begun).
  bool in_text() const noexcept {
    return lex_ == lex::string && utf8_left_ == 0 && surrogate_ == surrogate::none;
  }
  /// Inside a string, a key or a value: from its opening quote on, up to
  /// its closing one.
  bool in_string() const noexcept { return lex_ == lex::string || lex_ == lex::escape || lex_ == lex::unicode; }
  /// Objects and arrays open: 1 inside the top-level object, 0 before it
  /// opens and after it closes.
  std::size_t depth() const noexcept { return stack_.size(); }

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
  bool array_top_ = false;  ///< the top-level value may be an array too
  std::string stack_;       ///< '{' and '[' open, innermost last
};

} // namespace troupe
