#include "runtime/json_trigger.hpp"

#include <stdexcept>
#include <utility>

namespace troupe {

mark_matcher::mark_matcher(std::string_view mark) : mark_(mark), border_(mark.size(), 0) {
  for (std::size_t i = 1, k = 0; i < mark_.size(); ++i) {
    while (k > 0 && mark_[i] != mark_[k])
      k = border_[k - 1];
    if (mark_[i] == mark_[k])
      ++k;
    border_[i] = k;
  }
}

std::size_t mark_matcher::next(std::size_t matched, unsigned char c) const noexcept {
  while (matched > 0 && static_cast<unsigned char>(mark_[matched]) != c)
    matched = border_[matched - 1];
  return static_cast<unsigned char>(mark_[matched]) == c ? matched + 1 : 0;
}

json_trigger::json_trigger(json_vocab& vocab, std::string trigger, std::shared_ptr<const json_schema> schema)
  : vocab_(vocab), trigger_(std::move(trigger)), match_(trigger_), schema_(std::move(schema)) {
  if (trigger_.empty() || trigger_.size() > max_bytes)
    throw std::invalid_argument("a JSON trigger is 1 to " + std::to_string(max_bytes) + " bytes, got "
                                + std::to_string(trigger_.size()));
  special_ = vocab_.special(trigger_);
  // Each free state's ban list, once: a token is banned where reading it
  // ends the trigger and then breaks the value that begins. Only a token
  // holding the trigger's last byte can end it; the states that ban none
  // share one split.
  const auto n = vocab_.size();
  std::vector<std::int32_t> ending;
  for (std::int32_t t = 0; t < n; ++t)
    if (vocab_.bytes(t).find(trigger_.back()) != std::string_view::npos)
      ending.push_back(t);
  std::shared_ptr<const json_vocab::token_split> all;
  for (std::size_t matched = 0; matched < trigger_.size(); ++matched) {
    std::vector<std::int32_t> banned;
    for (const auto t : ending) {
      state probe;
      probe.matched = matched;
      if (!advance(probe, vocab_.bytes(t)))
        banned.push_back(t);
    }
    if (banned.empty() && all) {
      free_.push_back(all);
      continue;
    }
    auto s = std::make_shared<json_vocab::token_split>();
    s->allowed.reserve(static_cast<std::size_t>(n) - banned.size());
    auto b = banned.begin();
    for (std::int32_t t = 0; t < n; ++t) {
      if (b != banned.end() && *b == t)
        ++b;
      else
        s->allowed.push_back(t);
    }
    s->banned = std::move(banned);
    if (s->banned.empty())
      all = s;
    free_.push_back(std::move(s));
  }
}

bool json_trigger::advance(state& s, std::int32_t t) const {
  if (t < 0 || t != special_ || s.value)
    return advance(s, vocab_.bytes(t));
  if (s.leading && s.matched != 0)
    return false;
  s.leading = false;
  s.matched = 0;
  s.value.emplace(schema_);
  return true;
}

bool json_trigger::advance(state& s, std::string_view bytes) const {
  // Inside a value, a token without '}' or ']' cannot close it (its top is
  // an object or an array): the machine takes it whole or not at all, in
  // place, with no copy of the state (a step of every request in a call
  // goes here).
  if (s.value && !s.leading && bytes.find_first_of("}]") == std::string_view::npos)
    return s.value->feed(bytes);
  state at = s;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (at.leading) {
      if (c != static_cast<unsigned char>(trigger_[at.matched]))
        return false;
      if (++at.matched == trigger_.size()) {
        at.leading = false;
        at.matched = 0;
        at.value.emplace(schema_);
      }
      continue;
    }
    if (at.value) {
      if (!at.value->feed(c))
        return false;
      if (at.value->complete()) {
        at.value.reset();
        at.matched = 0;
      }
      continue;
    }
    at.matched = match_.next(at.matched, c);
    if (at.matched == trigger_.size()) {
      at.value.emplace(schema_);
      at.matched = 0;
    }
  }
  s = std::move(at);
  return true;
}

std::shared_ptr<const json_vocab::token_split> json_trigger::split(const state& s) const {
  if (s.value)
    return vocab_.split(*s.value);
  if (!s.leading)
    return free_.at(s.matched);
  if (leading_.empty())
    leading_.resize(trigger_.size());
  auto& cached = leading_.at(s.matched);
  if (!cached) {
    // Few tokens go on with the trigger: the rest (the end-of-sequence
    // token among them) are banned.
    auto split = std::make_shared<json_vocab::token_split>();
    for (std::int32_t t = 0; t < vocab_.size(); ++t) {
      auto probe = s;
      const auto bytes = vocab_.bytes(t);
      const bool writes = t == special_ ? s.matched == 0 : !bytes.empty() && advance(probe, bytes);
      (writes ? split->allowed : split->banned).push_back(t);
    }
    cached = std::move(split);
  }
  return cached;
}

} // namespace troupe
