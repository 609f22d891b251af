// A character of UTF-8 text read byte by byte, for the machines that hold an
// output to code points (runtime/regex_constraint, runtime/grammar_constraint):
// a byte is taken only where some character it may begin or go on with can
// come next, so a walk of the vocabulary never stops inside a character. No
// overlong forms, no surrogates, nothing past U+10FFFF (RFC 3629). No CAF,
// no I/O.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace troupe {

class utf8_reader {
public:
  /// Reads byte `c`. `may(lo, hi)`: some character in [lo, hi] may come next
  /// (asked for a byte that begins or goes on with a character of several
  /// bytes); `take(cp)`: the machine takes character `cp`, whole (false: it
  /// cannot). False, with nothing changed, where `c` cannot come.
  template <class May, class Take>
  bool step(unsigned char c, May&& may, Take&& take) {
    // Bits known and bits to come: may some character of the range follow?
    const auto may_bits = [&](std::uint32_t bits, unsigned to_come, char32_t least) {
      return may(std::max<char32_t>(bits << to_come, least), (bits << to_come) | ((1u << to_come) - 1));
    };
    if (left_ > 0) {
      if (c < lo_ || c > hi_)
        return false;
      const std::uint32_t bits = (bits_ << 6) | (c & 0x3Fu);
      if (left_ == 1) {
        if (!take(static_cast<char32_t>(bits)))
          return false;
        left_ = 0;
        bits_ = 0;
      } else {
        if (!may_bits(bits, 6u * (left_ - 1u), 0))
          return false;
        bits_ = bits;
        --left_;
      }
      lo_ = 0x80;
      hi_ = 0xBF;
      return true;
    }
    if (c < 0x80)
      return take(static_cast<char32_t>(c));
    // A lead byte: how many follow, and the first's range.
    std::uint8_t left = 0;
    std::uint32_t bits = 0;
    char32_t least = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      left = 1, bits = c & 0x1Fu, least = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      left = 2, bits = c & 0x0Fu, least = 0x800;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      left = 3, bits = c & 0x07u, least = 0x10000;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
      return false;
    }
    if (!may_bits(bits, 6u * left, least))
      return false;
    bits_ = bits;
    left_ = left;
    lo_ = lo;
    hi_ = hi;
    return true;
  }

  /// Between characters: none begun.
  bool between() const noexcept { return left_ == 0; }
  /// What decides the bytes that may go on with the character begun.
  void append_key(std::string& k) const {
    for (const auto b : {static_cast<unsigned char>(left_), lo_, hi_})
      k += static_cast<char>(b);
    k.append(reinterpret_cast<const char*>(&bits_), sizeof bits_);
  }

private:
  std::uint32_t bits_ = 0;  ///< the character begun, its bits so far
  std::uint8_t left_ = 0;   ///< its continuation bytes to come
  unsigned char lo_ = 0x80; ///< the next continuation byte's least
  unsigned char hi_ = 0xBF; ///< and greatest (no overlong form, no surrogate)
};

} // namespace troupe
