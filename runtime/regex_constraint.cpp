#include "runtime/regex_constraint.hpp"

#include "messages/json_machine.hpp"

#include <algorithm>
#include <atomic>

namespace troupe {

held_regex::held_regex(std::string_view text) : pattern(text, json_pattern::match::whole) {
  static std::atomic<std::uint64_t> next{1};
  id = next.fetch_add(1, std::memory_order_relaxed);
}

regex_machine::regex_machine(std::shared_ptr<const held_regex> regex)
  : regex_(std::move(regex)), at_(regex_->pattern.start()) {}

bool regex_machine::step(unsigned char c) {
  const auto& p = regex_->pattern;
  // Bits known and bits to come: may some character of the range follow?
  const auto may = [&](std::uint32_t bits, unsigned to_come, char32_t least) {
    return p.may_take(at_, std::max<char32_t>(bits << to_come, least), (bits << to_come) | ((1u << to_come) - 1));
  };
  if (left_ > 0) {
    if (c < lo_ || c > hi_)
      return false;
    const std::uint32_t bits = (bits_ << 6) | (c & 0x3Fu);
    if (left_ == 1) {
      auto next = p.step(at_, bits);
      if (next.empty())
        return false;
      at_ = std::move(next);
      left_ = 0;
      bits_ = 0;
    } else {
      if (!may(bits, 6u * (left_ - 1u), 0))
        return false;
      bits_ = bits;
      --left_;
    }
    lo_ = 0x80;
    hi_ = 0xBF;
    return true;
  }
  if (c < 0x80) {
    auto next = p.step(at_, c);
    if (next.empty())
      return false;
    at_ = std::move(next);
    return true;
  }
  // A lead byte: how many follow, and the first's range (RFC 3629).
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
  if (!may(bits, 6u * left, least))
    return false;
  bits_ = bits;
  left_ = left;
  lo_ = lo;
  hi_ = hi;
  return true;
}

bool regex_machine::feed(std::string_view bytes) {
  return feed_all(*this, bytes, [](regex_machine& m, unsigned char c) { return m.step(c); });
}

bool regex_machine::complete() const noexcept {
  return left_ == 0 && regex_->pattern.accepts(at_);
}

bool regex_machine::extendable() const noexcept {
  // The states read a character next, but for the accepting one.
  return left_ > 0 || at_.size() > (regex_->pattern.accepts(at_) ? 1u : 0u);
}

std::string regex_machine::key() const {
  std::string k = "\xfd";
  k.append(reinterpret_cast<const char*>(&regex_->id), sizeof regex_->id);
  k.append(reinterpret_cast<const char*>(at_.data()), at_.size() * sizeof(at_[0]));
  for (const auto b : {static_cast<unsigned char>(left_), lo_, hi_})
    k += static_cast<char>(b);
  k.append(reinterpret_cast<const char*>(&bits_), sizeof bits_);
  return k;
}

} // namespace troupe
