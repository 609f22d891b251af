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
  return utf8_.step(
    c, [&](char32_t lo, char32_t hi) { return p.may_take(at_, lo, hi); },
    [&](char32_t cp) {
      auto next = p.step(at_, cp);
      if (next.empty())
        return false;
      at_ = std::move(next);
      return true;
    });
}

bool regex_machine::feed(std::string_view bytes) {
  return feed_all(*this, bytes, [](regex_machine& m, unsigned char c) { return m.step(c); });
}

bool regex_machine::complete() const noexcept {
  return utf8_.between() && regex_->pattern.accepts(at_);
}

bool regex_machine::extendable() const noexcept {
  // The states read a character next, but for the accepting one.
  return !utf8_.between() || at_.size() > (regex_->pattern.accepts(at_) ? 1u : 0u);
}

std::string regex_machine::key() const {
  std::string k = "\xfd";
  k.append(reinterpret_cast<const char*>(&regex_->id), sizeof regex_->id);
  k.append(reinterpret_cast<const char*>(at_.data()), at_.size() * sizeof(at_[0]));
  utf8_.append_key(k);
  return k;
}

} // namespace troupe
