#include "messages/json_machine.hpp"

namespace troupe {

namespace {

constexpr const char* literals[] = {"true", "false", "null"};

} // namespace

// -- json_machine -----------------------------------------------------------------

bool json_machine::feed(unsigned char c) {
  json_machine before = *this;
  if (step(c))
    return true;
  *this = std::move(before);
  return false;
}

bool json_machine::feed(std::string_view bytes) {
  return feed_all(*this, bytes, [](json_machine& m, unsigned char c) { return m.step(c); });
}

std::string json_machine::key() const {
  std::string k;
  k.reserve(8 + stack_.size());
  for (const auto b : {static_cast<std::uint8_t>(lex_), static_cast<std::uint8_t>(num_),
                       static_cast<std::uint8_t>(key_), hex_left_, static_cast<std::uint8_t>(surrogate_),
                       utf8_left_, utf8_lo_, utf8_hi_, lit_, lit_at_,
                       static_cast<std::uint8_t>(blank_), static_cast<std::uint8_t>(array_top_)})
    k += static_cast<char>(b);
  return k + stack_;
}

bool json_machine::blank(unsigned char c) {
  if (!json_blank(c) || blank_ >= max_blank)
    return false;
  ++blank_;
  return true;
}

void json_machine::value_ended() {
  lex_ = stack_.empty() ? lex::done : lex::after;
}

bool json_machine::close(unsigned char c) {
  if (stack_.empty() || stack_.back() != (c == '}' ? '{' : '['))
    return false;
  stack_.pop_back();
  value_ended();
  return true;
}

bool json_machine::begin_value(unsigned char c) {
  if (stack_.empty() && c != '{' && !(c == '[' && array_top_))
    return false; // the top-level value is an object (or an array)
  switch (c) {
  case '{':
  case '[':
    if (stack_.size() >= max_depth)
      return false;
    stack_ += static_cast<char>(c);
    lex_ = c == '{' ? lex::key_or_close : lex::value_or_close;
    return true;
  case '"':
    lex_ = lex::string;
    key_ = false;
    return true;
  case '-':
    lex_ = lex::number;
    num_ = num::minus;
    return true;
  case 't':
  case 'f':
  case 'n':
    lex_ = lex::literal;
    lit_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
    lit_at_ = 1;
    return true;
  default:
    if (!json_digit(c))
      return false;
    lex_ = lex::number;
    num_ = c == '0' ? num::zero : num::integer;
    return true;
  }
}

bool json_machine::step(unsigned char c) {
  const bool in_string = lex_ == lex::string || lex_ == lex::escape || lex_ == lex::unicode;
  if (!in_string && !json_blank(c))
    blank_ = 0;
  switch (lex_) {
  case lex::done:
    return blank(c);
  case lex::value:
    return blank(c) || begin_value(c);
  case lex::value_or_close:
    return blank(c) || (c == ']' ? close(c) : begin_value(c));
  case lex::key_or_close:
  case lex::key:
    if (blank(c))
      return true;
    if (c == '}' && lex_ == lex::key_or_close)
      return close(c);
    if (c != '"')
      return false;
    lex_ = lex::string;
    key_ = true;
    return true;
  case lex::colon:
    if (blank(c))
      return true;
    if (c != ':')
      return false;
    lex_ = lex::value;
    return true;
  case lex::after:
    if (blank(c))
      return true;
    if (c == ',') {
      lex_ = stack_.back() == '{' ? lex::key : lex::value;
      return true;
    }
    return (c == '}' || c == ']') && close(c);
  case lex::string:
    if (surrogate_ == surrogate::want_low) {
      if (c != '\\')
        return false; // the low half's escape must follow
      lex_ = lex::escape;
      return true;
    }
    if (utf8_left_ > 0) {
      if (c < utf8_lo_ || c > utf8_hi_)
        return false;
      --utf8_left_;
      utf8_lo_ = 0x80;
      utf8_hi_ = 0xBF;
      return true;
    }
    if (c == '"') {
      if (key_)
        lex_ = lex::colon;
      else
        value_ended();
      return true;
    }
    if (c == '\\') {
      lex_ = lex::escape;
      return true;
    }
    if (c < 0x20)
      return false; // a raw control character
    if (c < 0x80)
      return true;
    // RFC 3629's well-formed sequences: the byte after a lead byte is
    // narrowed where a wider range would be overlong or a surrogate.
    if (c >= 0xC2 && c <= 0xDF)
      utf8_left_ = 1;
    else if (c >= 0xE0 && c <= 0xEF)
      utf8_left_ = 2;
    else if (c >= 0xF0 && c <= 0xF4)
      utf8_left_ = 3;
    else
      return false; // a continuation byte first, or no UTF-8 lead byte
    utf8_lo_ = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    utf8_hi_ = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    return true;
  case lex::escape:
    if (c == 'u') {
      lex_ = lex::unicode;
      hex_left_ = 4;
      return true;
    }
    if (surrogate_ == surrogate::want_low
        || std::string_view("\"\\/bfnrt").find(static_cast<char>(c)) == std::string_view::npos)
      return false;
    lex_ = lex::string;
    return true;
  case lex::unicode: {
    if (!json_hex(c))
      return false;
    const bool d = c == 'd' || c == 'D';
    const bool low_half = (c >= 'c' && c <= 'f') || (c >= 'C' && c <= 'F'); // DC00-DFFF
    const bool high_half = c == '8' || c == '9' || c == 'a' || c == 'b' || c == 'A' || c == 'B'; // D800-DBFF
    if (hex_left_ == 4) {
      if (surrogate_ == surrogate::want_low) {
        if (!d)
          return false;
      } else {
        surrogate_ = d ? surrogate::first_d : surrogate::none;
      }
    } else if (hex_left_ == 3) {
      if (surrogate_ == surrogate::want_low && !low_half)
        return false;
      if (surrogate_ == surrogate::first_d) {
        if (low_half)
          return false; // a low half with no high one before it
        surrogate_ = high_half ? surrogate::high : surrogate::none;
      }
    }
    if (--hex_left_ == 0) {
      lex_ = lex::string;
      surrogate_ = surrogate_ == surrogate::high ? surrogate::want_low : surrogate::none;
    }
    return true;
  }
  case lex::literal:
    if (c != static_cast<unsigned char>(literals[lit_][lit_at_]))
      return false;
    if (literals[lit_][++lit_at_] == '\0')
      value_ended();
    return true;
  case lex::number: {
    const bool e = c == 'e' || c == 'E';
    switch (num_) {
    case num::minus:
      if (!json_digit(c))
        return false;
      num_ = c == '0' ? num::zero : num::integer;
      return true;
    case num::zero:
    case num::integer:
      if (json_digit(c) && num_ == num::integer)
        return true;
      if (c == '.' || e) {
        num_ = c == '.' ? num::dot : num::exp;
        return true;
      }
      break;
    case num::dot:
      if (!json_digit(c))
        return false;
      num_ = num::fraction;
      return true;
    case num::fraction:
      if (json_digit(c))
        return true;
      if (e) {
        num_ = num::exp;
        return true;
      }
      break;
    case num::exp:
      if (c == '+' || c == '-') {
        num_ = num::exp_sign;
        return true;
      }
      [[fallthrough]];
    case num::exp_sign:
      if (!json_digit(c))
        return false;
      num_ = num::exponent;
      return true;
    case num::exponent:
      if (json_digit(c))
        return true;
      break;
    }
    // The number has ended (a leading 0 takes no more digits): `c` is the
    // first byte after it.
    value_ended();
    return step(c);
  }
  }
  return false;
}

} // namespace troupe
