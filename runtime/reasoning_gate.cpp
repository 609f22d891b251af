#include "runtime/reasoning_gate.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

namespace troupe {
namespace {

/// Every token of `vocab` allowed or banned as `ok(token, bytes)` says.
template <class Verdict>
std::shared_ptr<const json_vocab::token_split> split_by(const json_vocab& vocab, Verdict&& ok) {
  auto out = std::make_shared<json_vocab::token_split>();
  for (std::int32_t t = 0; t < vocab.size(); ++t)
    (ok(t, vocab.bytes(t)) ? out->allowed : out->banned).push_back(t);
  return out;
}

bool allows(const json_vocab::token_split& s, std::int32_t t) {
  return std::binary_search(s.allowed.begin(), s.allowed.end(), t);
}

} // namespace

reasoning_gate::reasoning_gate(json_vocab& vocab, std::string open, std::string close)
  : vocab_(vocab), open_(std::move(open)), close_(std::move(close)), match_(close_) {
  if (close_.empty() || close_.size() > max_mark_bytes || open_.size() > max_mark_bytes)
    throw std::invalid_argument("a reasoning mark is at most " + std::to_string(max_mark_bytes)
                                + " bytes and the closing one not empty; got " + std::to_string(open_.size())
                                + " and " + std::to_string(close_.size()));
  thinking_.resize(close_.size());
  lead_.resize(max_blank + 1);
}

reasoning_gate::reasoning_gate(json_vocab& vocab, std::string open, std::string close,
                               std::shared_ptr<const json_schema> schema)
  : reasoning_gate(vocab, std::move(open), std::move(close)) {
  schema_ = std::move(schema);
}

reasoning_gate::reasoning_gate(json_vocab& vocab, std::string open, std::string close,
                               std::shared_ptr<const json_trigger> trigger, bool leading)
  : reasoning_gate(vocab, std::move(open), std::move(close)) {
  trigger_ = std::move(trigger);
  leading_ = leading;
}

reasoning_gate::reasoning_gate(json_vocab& vocab, std::string open, std::string close, held_machine held)
  : reasoning_gate(vocab, std::move(open), std::move(close)) {
  held_.emplace(std::move(held));
}

reasoning_gate::state reasoning_gate::begin() const {
  state s;
  s.at = open_.empty() ? phase::thinking : phase::start;
  return s;
}

bool reasoning_gate::enter_content(state& s, std::string_view bytes) const {
  s.at = phase::content;
  s.matched = 0;
  s.blanks = 0;
  if (held_) {
    std::visit([&](const auto& m) { s.machine = m; }, *held_);
  } else if (trigger_) {
    s.trigger = trigger_->begin(leading_);
  } else {
    s.value.emplace(schema_);
  }
  return content(s, bytes);
}

bool reasoning_gate::content(state& s, std::string_view bytes) const {
  if (held_) {
    if (s.complete)
      return bytes.empty();
    return std::visit(
      [&](auto& m) {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::monostate>) {
          return false; // (enter_content set the machine)
        } else {
          if (!m.feed(bytes)) // all or none
            return false;
          s.complete = m.complete() && !m.extendable();
          return true;
        }
      },
      s.machine);
  }
  if (!trigger_) {
    if (s.complete)
      return bytes.empty();
    if (!s.value->feed(bytes))
      return false;
    s.complete = s.value->complete();
    return true;
  }
  if (s.complete)
    return bytes.empty(); // (the answer closed)
  // Blanks before a leading trigger (or the answer) are the gate's to
  // count.
  auto blanks = s.blanks;
  if (s.trigger.leading && s.trigger.matched == 0)
    while (!bytes.empty() && json_blank(static_cast<unsigned char>(bytes.front()))) {
      if (blanks == max_blank)
        return false;
      ++blanks;
      bytes.remove_prefix(1);
    }
  if (!trigger_->advance(s.trigger, bytes))
    return false;
  s.blanks = blanks;
  s.complete = s.trigger.done;
  return true;
}

bool reasoning_gate::advance(state& s, std::string_view bytes) const {
  if (s.at == phase::content)
    return content(s, bytes); // in place: every step of such a request comes here
  state at = s;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (at.at == phase::start) {
      const auto lead = at.held.find_first_not_of(" \t\n\r");
      const auto m = lead == std::string::npos ? 0 : at.held.size() - lead;
      if (m == 0 && json_blank(c) && at.held.size() < max_blank) {
        at.held.push_back(static_cast<char>(c));
      } else if (static_cast<unsigned char>(open_[m]) == c) {
        at.held.push_back(static_cast<char>(c));
        if (m + 1 == open_.size()) {
          at.at = phase::thinking;
          at.held.clear();
        }
      } else {
        // Not the opening mark: all of the output is content, what was
        // held first.
        auto text = std::move(at.held);
        at.held.clear();
        text.append(bytes.substr(i));
        if (!enter_content(at, text))
          return false;
        s = std::move(at);
        return true;
      }
      continue;
    }
    at.matched = match_.next(at.matched, c);
    if (at.matched == close_.size()) {
      if (!enter_content(at, bytes.substr(i + 1)))
        return false;
      s = std::move(at);
      return true;
    }
  }
  s = std::move(at);
  return true;
}

bool reasoning_gate::advance(state& s, std::int32_t t) const {
  if (!trigger_ || !trigger_->reads_special(t) || s.at == phase::thinking)
    return advance(s, vocab_.bytes(t));
  state at = s;
  if (at.at == phase::start) {
    // Not the opening mark: all of the output is content, what was held
    // first.
    auto text = std::move(at.held);
    at.held.clear();
    if (!enter_content(at, text))
      return false;
  }
  if (at.complete || !trigger_->advance(at.trigger, t))
    return false;
  s = std::move(at);
  return true;
}

std::shared_ptr<const json_vocab::token_split> reasoning_gate::split(const state& s) const {
  // A token read from `s` by advance (on a copy); one that stands for no
  // text only where the output may end, or where it writes the content's
  // trigger.
  const auto special = [&](std::int32_t t) { return trigger_ && trigger_->reads_special(t); };
  auto read = [&](std::int32_t t, std::string_view bytes) {
    if (!special(t) && bytes.empty())
      return may_end();
    auto probe = s;
    return special(t) ? advance(probe, t) : advance(probe, bytes);
  };
  switch (s.at) {
  case phase::start: {
    auto& cached = start_[s.held];
    if (!cached) {
      if (s.held.empty()) {
        // A token that begins with neither a blank nor the opening mark's
        // first byte begins the content: the content's own split says.
        auto content_start = begin();
        enter_content(content_start, {});
        const auto content_split = split(content_start);
        cached = split_by(vocab_, [&](std::int32_t t, std::string_view bytes) {
          if (special(t)
              || (!bytes.empty() && !json_blank(static_cast<unsigned char>(bytes.front())) && bytes.front() != open_.front()))
            return allows(*content_split, t);
          return read(t, bytes);
        });
      } else {
        cached = split_by(vocab_, read);
      }
    }
    return cached;
  }
  case phase::thinking: {
    auto& cached = thinking_.at(s.matched);
    if (!cached) // only a token holding the mark's last byte can close it
      cached = split_by(vocab_, [&](std::int32_t t, std::string_view bytes) {
        return bytes.find(close_.back()) == std::string_view::npos ? !bytes.empty() || may_end() : read(t, bytes);
      });
    return cached;
  }
  case phase::content:
    if (!std::holds_alternative<std::monostate>(s.machine))
      return std::visit(
        [&](const auto& m) -> std::shared_ptr<const json_vocab::token_split> {
          if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::monostate>)
            return nullptr; // (not reached)
          else
            return vocab_.split(m);
        },
        s.machine);
    if (!trigger_)
      return vocab_.split(*s.value);
    if (s.trigger.leading && s.trigger.matched == 0) {
      auto& cached = lead_.at(s.blanks);
      if (!cached)
        cached = split_by(vocab_, read);
      return cached;
    }
    return trigger_->split(s.trigger);
  }
  return nullptr;
}

bool reasoning_gate::ends_here(const state& s) const {
  if (s.at != phase::content)
    return false;
  return std::visit(
    [](const auto& m) {
      if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::monostate>)
        return false;
      else
        return m.complete();
    },
    s.machine);
}

} // namespace troupe
