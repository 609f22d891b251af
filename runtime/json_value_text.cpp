#include "runtime/json_value_text.hpp"

#include <algorithm>

namespace troupe::json_text {

void put_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string decoded(std::string_view raw, std::size_t& whole) {
  std::string out;
  const auto hex = [&](std::size_t at) {
    char32_t v = 0;
    for (std::size_t k = at; k < at + 4; ++k) {
      const auto c = static_cast<unsigned char>(raw[k]);
      v = v << 4 | static_cast<char32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  };
  std::size_t i = 0;
  whole = 0;
  while (i < raw.size()) {
    const auto c = static_cast<unsigned char>(raw[i]);
    std::size_t used = 0;
    if (c != '\\') {
      used = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (i + used > raw.size())
        break;
      out.append(raw.substr(i, used));
    } else if (i + 1 < raw.size() && raw[i + 1] != 'u') {
      out += static_cast<char>(escaped(static_cast<unsigned char>(raw[i + 1])));
      used = 2;
    } else if (i + 6 <= raw.size()) {
      char32_t cp = hex(i + 2);
      used = 6;
      if (cp >= 0xD800 && cp <= 0xDBFF) { // the low half's escape follows
        if (i + 12 > raw.size())
          break;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (hex(i + 8) - 0xDC00);
        used = 12;
      }
      put_utf8(out, cp);
    } else {
      break;
    }
    i += used;
    whole = i;
  }
  return out;
}


decimal decimal_of(std::string_view text) {
  decimal d;
  d.negative = text[0] == '-';
  std::size_t i = d.negative ? 1 : 0;
  bool point = false;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      point = true;
    } else {
      d.digits += text[i];
      d.exponent -= point ? 1 : 0;
    }
  }
  if (i + 1 < text.size())
    d.exponent += std::stol(std::string(text.substr(i + 1)));
  d.digits.erase(0, std::min(d.digits.find_first_not_of('0'), d.digits.size()));
  return d;
}

std::string number_value(std::string_view text) {
  auto [negative, digits, exponent] = decimal_of(text);
  if (digits.empty())
    return "#0";
  while (digits.back() == '0') {
    digits.pop_back();
    ++exponent;
  }
  return std::string("#") + (negative ? "-" : "") + digits + "e" + std::to_string(exponent);
}

std::string item_value(std::string_view raw) {
  if (raw[0] == '"') {
    std::size_t whole = 0;
    return "s" + decoded(raw.substr(1, raw.size() - 2), whole);
  }
  if (raw[0] == 't' || raw[0] == 'f' || raw[0] == 'n')
    return std::string(raw);
  return number_value(raw);
}

int escaped(unsigned char c) noexcept {
  static constexpr std::string_view from = "\"\\/bfnrt", to = "\"\\/\b\f\n\r\t";
  const auto at = from.find(static_cast<char>(c));
  return at == std::string_view::npos ? -1 : static_cast<unsigned char>(to[at]);
}

std::string pointer_token(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

constexpr std::string_view annotations[] = {"title",    "description", "default",   "examples",   "$schema",
                                            "$id",      "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "$defs",    "definitions", "discriminator"};

bool is_annotation(std::string_view keyword) {
  return std::find(std::begin(annotations), std::end(annotations), keyword) != std::end(annotations);
}

} // namespace troupe::json_text
